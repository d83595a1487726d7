//! What the queue holds, counted and listed: for metrics, GetQueue and
//! `berthctl queue`.

use std::sync::Arc;

use super::SchedulingQueue;
use super::inner::{INCOMING_QUEUES, Recorded};
use super::types::{EntityCounts, QueueCounts, QueueEntry, QueueName};
use crate::framework::{QueuedEntity, QueuedPodGroupInfo, QueuedPodInfo};
use crate::model::GroupKey;

impl SchedulingQueue {
    /// How many pods each queue holds.
    pub fn counts(&self) -> QueueCounts {
        let inner = self.inner.lock();
        let gated = inner.unschedulable.values().filter(|q| q.gated()).count();
        let g = &inner.groups;
        let members = |h: &mut dyn Iterator<Item = &QueuedPodGroupInfo>| -> usize {
            h.map(|g| g.pods.len()).sum()
        };
        let group_gated = members(&mut g.unschedulable.values().filter(|g| g.gated()));
        QueueCounts {
            active: inner.active.len() + members(&mut g.active.iter()),
            backoff: inner.backoff.len()
                + inner.error_backoff.len()
                + members(&mut g.backoff.iter().chain(g.error_backoff.iter())),
            unschedulable: inner.unschedulable.len() - gated
                + members(&mut g.unschedulable.values().filter(|g| !g.gated())),
            gated: gated + group_gated,
            in_flight: inner.in_flight.len(),
            incomplete: g.incomplete.values().map(Vec::len).sum(),
            pending: g.pending.len(),
        }
    }

    /// How many entities each queue holds, pods and groups apart
    /// (`scheduler_queued_entities`).
    pub fn entity_counts(&self) -> EntityCounts {
        let inner = self.inner.lock();
        let g = &inner.groups;
        let gated = inner.unschedulable.values().filter(|q| q.gated()).count();
        let group_gated = g.unschedulable.values().filter(|g| g.gated()).count();
        EntityCounts {
            active: (inner.active.len(), g.active.len()),
            backoff: (
                inner.backoff.len() + inner.error_backoff.len(),
                g.backoff.len() + g.error_backoff.len(),
            ),
            unschedulable: (
                inner.unschedulable.len() - gated,
                g.unschedulable.len() - group_gated,
            ),
            gated: (gated, group_gated),
        }
    }

    /// How many PodGroup entities entered each queue, by queue and event
    /// label, sorted (`scheduler_queue_incoming_entities_total` with
    /// `type="podgroup"`).
    pub fn incoming_group_counts(&self) -> Vec<(&'static str, String, u64)> {
        let mut out: Vec<_> = self
            .inner
            .lock()
            .groups
            .incoming
            .iter()
            .map(|((q, e), n)| (INCOMING_QUEUES[usize::from(*q)], e.label(), *n))
            .collect();
        out.sort();
        out
    }

    /// The cluster events the queue holds for pods in flight (upstream's
    /// `scheduler_inflight_events`), by label, with `PodPopped` for the
    /// pods themselves.
    pub fn inflight_event_counts(&self) -> Vec<(String, u64)> {
        let inner = self.inner.lock();
        let mut by: std::collections::BTreeMap<String, u64> = std::collections::BTreeMap::new();
        for (_, r) in &inner.recorded {
            if let Recorded::Event(e, _, _) = r {
                *by.entry(e.label()).or_default() += 1;
            }
        }
        by.insert("PodPopped".into(), inner.in_flight.len() as u64);
        by.into_iter().collect()
    }

    /// How many pods entered each queue, by queue (`active`, `backoff`,
    /// `unschedulable`) and event label, sorted.
    pub fn incoming_counts(&self) -> Vec<(&'static str, String, u64)> {
        let mut out: Vec<_> = self
            .inner
            .lock()
            .incoming
            .iter()
            .map(|((q, e), n)| (INCOMING_QUEUES[usize::from(*q)], e.label(), *n))
            .collect();
        out.sort();
        out
    }

    /// Every pending pod, activeQ first (in pop order), then backoffQ, the
    /// unschedulable pods and those in flight.
    pub fn list(&self) -> Vec<QueueEntry> {
        let inner = self.inner.lock();
        let sort = inner.sort.clone();
        let mut active: Vec<QueuedEntity<'_>> = inner
            .active
            .iter()
            .map(QueuedEntity::Pod)
            .chain(inner.groups.active.iter().map(QueuedEntity::Group))
            .collect();
        active.sort_by(|a, b| {
            if sort.less(*a, *b) {
                std::cmp::Ordering::Less
            } else if sort.less(*b, *a) {
                std::cmp::Ordering::Greater
            } else {
                std::cmp::Ordering::Equal
            }
        });
        let entry = |queue, q: &QueuedPodInfo| QueueEntry {
            queue,
            info: q.clone(),
        };
        let members = |e: QueuedEntity<'_>| -> Vec<QueuedPodInfo> {
            match e {
                QueuedEntity::Pod(q) => vec![q.clone()],
                QueuedEntity::Group(g) => g.pods.clone(),
            }
        };
        let mut out: Vec<QueueEntry> = active
            .into_iter()
            .flat_map(members)
            .map(|q| entry(QueueName::Active, &q))
            .collect();
        out.extend(
            inner
                .backoff
                .iter()
                .chain(inner.error_backoff.iter())
                .chain(
                    inner
                        .groups
                        .backoff
                        .iter()
                        .chain(inner.groups.error_backoff.iter())
                        .flat_map(|g| g.pods.iter()),
                )
                .map(|q| entry(QueueName::Backoff, q)),
        );
        // The pools below are maps: listed in the order their entries
        // entered (then by UID), the same from one call to the next.
        let by_time = |a: &&QueuedPodInfo, b: &&QueuedPodInfo| {
            (a.timestamp, &a.pod.uid).cmp(&(b.timestamp, &b.pod.uid))
        };
        let mut groups: Vec<(&Arc<str>, &QueuedPodGroupInfo)> =
            inner.groups.unschedulable.iter().collect();
        groups.sort_by_key(|(key, _)| *key);
        out.extend(groups.into_iter().flat_map(|(_, g)| {
            let queue = if g.gated() {
                QueueName::Gated
            } else {
                QueueName::Unschedulable
            };
            g.pods.iter().map(move |q| entry(queue, q))
        }));
        let mut incomplete: Vec<(&GroupKey, &Vec<QueuedPodInfo>)> =
            inner.groups.incomplete.iter().collect();
        incomplete.sort_by(|a, b| a.0.cmp(b.0));
        out.extend(
            incomplete
                .into_iter()
                .flat_map(|(_, pods)| pods)
                .map(|q| entry(QueueName::Incomplete, q)),
        );
        out.extend(
            inner
                .groups
                .pending
                .iter()
                .map(|q| entry(QueueName::Pending, q)),
        );
        let mut unschedulable: Vec<&QueuedPodInfo> = inner.unschedulable.values().collect();
        unschedulable.sort_by(by_time);
        out.extend(unschedulable.into_iter().map(|q| {
            entry(
                if q.gated() {
                    QueueName::Gated
                } else {
                    QueueName::Unschedulable
                },
                q,
            )
        }));
        let mut in_flight: Vec<&QueuedPodInfo> = inner
            .in_flight
            .values()
            .map(|(q, _)| q)
            .chain(inner.binding.values())
            .collect();
        in_flight.sort_by(by_time);
        out.extend(in_flight.into_iter().map(|q| entry(QueueName::InFlight, q)));
        out
    }
}
