//! Pods held at Permit.
//!
//! When Permit plugins answer `Wait`, the pod is parked here with a
//! deadline per waiting plugin (each capped at 15 minutes). The binding
//! cycle blocks on the pod's outcome ([`WaitingPods::wait`]), and keeps the
//! deadlines itself while it waits (upstream starts a timer per plugin; a
//! timer task per pod of a gang was the cost of a spawn each):
//! * every waiting plugin calls [`WaitingPod::allow`] → Success, binding goes on;
//! * any plugin calls [`WaitingPod::reject`], or a deadline passes (a reject
//!   in the plugin's name: "rejected due to timeout after waiting 10s at
//!   plugin X"), or the pod is deleted → Unschedulable; the binding cycle
//!   runs Unreserve and requeues the pod.
//!
//! The first outcome wins; later calls are no-ops.
//!
//! A plugin that decides from outside its own Permit call (a remote
//! extender answering later on its stream) may decide before the pod is
//! parked here; [`WaitingPods::allow_or_remember`] and
//! [`WaitingPods::reject_or_remember`] keep such an early verdict and apply
//! it when the pod is parked.

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::status::{Code, Status};
use crate::config::go_duration;
use crate::model::PodRef;

/// The longest a Permit plugin may make a pod wait.
pub const MAX_PERMIT_TIMEOUT: Duration = Duration::from_secs(15 * 60);

/// A pod held at Permit.
pub struct WaitingPod {
    pod: PodRef,
    node: Arc<str>,
    /// When it was parked.
    since: Instant,
    inner: Mutex<Inner>,
}

struct Inner {
    /// Plugins that have not allowed the pod yet, with when their wait
    /// times out and how long it is.
    pending: Vec<(&'static str, Instant, Duration)>,
    /// Where the outcome goes; taken by the first outcome.
    outcome: Option<oneshot::Sender<Status>>,
    /// Where the binding cycle waits; taken by it.
    receiver: Option<oneshot::Receiver<Status>>,
}

impl std::fmt::Debug for WaitingPod {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WaitingPod")
            .field("pod", &self.pod.key())
            .field("node", &self.node)
            .field("pending", &self.pending_plugins())
            .finish()
    }
}

impl WaitingPod {
    /// The pod.
    pub fn pod(&self) -> &PodRef {
        &self.pod
    }

    /// The node it is reserved on.
    pub fn node(&self) -> &Arc<str> {
        &self.node
    }

    /// The plugins it still waits for.
    pub fn pending_plugins(&self) -> Vec<&'static str> {
        self.inner.lock().pending.iter().map(|(p, ..)| *p).collect()
    }

    /// When it was parked.
    pub fn since(&self) -> Instant {
        self.since
    }

    /// The plugins it still waits for, each with when its wait times out.
    pub fn pending_until(&self) -> Vec<(&'static str, Instant)> {
        self.inner
            .lock()
            .pending
            .iter()
            .map(|(p, until, _)| (*p, *until))
            .collect()
    }

    /// `plugin` allows the pod; when no plugin is left, the pod proceeds.
    pub fn allow(&self, plugin: &str) {
        let mut inner = self.inner.lock();
        if let Some(i) = inner.pending.iter().position(|(p, ..)| *p == plugin) {
            inner.pending.remove(i);
        }
        if inner.pending.is_empty()
            && let Some(tx) = inner.outcome.take()
        {
            let _ = tx.send(Status::success());
        }
    }

    /// The plugin whose wait ends first, with when and how long it is.
    fn next_deadline(&self) -> Option<(&'static str, Instant, Duration)> {
        self.inner
            .lock()
            .pending
            .iter()
            .min_by_key(|(_, until, _)| *until)
            .copied()
    }

    /// Rejects the pod; `plugin` is `None` when the scheduler itself rejects
    /// it (the pod was deleted).
    pub fn reject(&self, plugin: Option<&'static str>, message: &str) {
        let mut inner = self.inner.lock();
        inner.pending.clear();
        if let Some(tx) = inner.outcome.take() {
            let mut status = Status::new(Code::Unschedulable, message.to_string());
            if let Some(p) = plugin {
                status = status.with_plugin(p);
            }
            let _ = tx.send(status);
        }
    }
}

/// A verdict given before the pod was parked: the plugin, and the
/// rejection message (`None`: allowed).
type EarlyVerdict = (&'static str, Option<String>);

#[derive(Default)]
struct Pods {
    waiting: crate::model::UidMap<Arc<WaitingPod>>,
    early: crate::model::UidMap<Vec<EarlyVerdict>>,
}

/// The pods held at Permit, by UID. Shared by all profiles.
#[derive(Clone, Default)]
pub struct WaitingPods(Arc<Mutex<Pods>>);

impl std::fmt::Debug for WaitingPods {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.0.lock().waiting.values())
            .finish()
    }
}

impl WaitingPods {
    /// Parks `pod` with a deadline per waiting plugin, from now.
    pub(crate) fn add(&self, pod: PodRef, node: Arc<str>, waits: Vec<(&'static str, Duration)>) {
        let (tx, rx) = oneshot::channel();
        let since = Instant::now();
        let wp = Arc::new(WaitingPod {
            pod: pod.clone(),
            node,
            since,
            inner: Mutex::new(Inner {
                pending: waits.iter().map(|(p, t)| (*p, since + *t, *t)).collect(),
                outcome: Some(tx),
                receiver: Some(rx),
            }),
        });
        let early = {
            let mut pods = self.0.lock();
            pods.waiting.insert(pod.uid.clone(), wp.clone());
            pods.early.remove(&pod.uid).unwrap_or_default()
        };
        for (plugin, rejection) in early {
            match rejection {
                None => wp.allow(plugin),
                Some(message) => wp.reject(Some(plugin), &message),
            }
        }
    }

    /// The waiting pod with `uid`.
    pub fn get(&self, uid: &str) -> Option<Arc<WaitingPod>> {
        self.0.lock().waiting.get(uid).cloned()
    }

    /// Every waiting pod.
    pub fn list(&self) -> Vec<Arc<WaitingPod>> {
        self.0.lock().waiting.values().cloned().collect()
    }

    /// Allows the pod `uid` on behalf of `plugin`, now if it waits, else as
    /// soon as it is parked (until [`WaitingPods::forget_early`]).
    pub fn allow_or_remember(&self, uid: &Arc<str>, plugin: &'static str) {
        self.decide_or_remember(uid, plugin, None);
    }

    /// Rejects the pod `uid` on behalf of `plugin`, now if it waits, else as
    /// soon as it is parked (until [`WaitingPods::forget_early`]).
    pub fn reject_or_remember(&self, uid: &Arc<str>, plugin: &'static str, message: &str) {
        self.decide_or_remember(uid, plugin, Some(message.to_string()));
    }

    fn decide_or_remember(&self, uid: &Arc<str>, plugin: &'static str, rejection: Option<String>) {
        let wp = {
            let mut pods = self.0.lock();
            match pods.waiting.get(uid) {
                Some(wp) => wp.clone(),
                None => {
                    pods.early
                        .entry(uid.clone())
                        .or_default()
                        .push((plugin, rejection));
                    return;
                }
            }
        };
        match rejection {
            None => wp.allow(plugin),
            Some(message) => wp.reject(Some(plugin), &message),
        }
    }

    /// Drops early verdicts for `uid` that no parked pod used (its attempt
    /// ended before reaching the waiting pods).
    pub fn forget_early(&self, uid: &str) {
        self.0.lock().early.remove(uid);
    }

    /// Allows the pod `uid` on behalf of `plugin`. Returns whether it waits.
    pub fn allow(&self, uid: &str, plugin: &str) -> bool {
        self.get(uid).map(|wp| wp.allow(plugin)).is_some()
    }

    /// Rejects the pod `uid`. Returns whether it waited.
    pub fn reject(&self, uid: &str, plugin: Option<&'static str>, message: &str) -> bool {
        self.get(uid).map(|wp| wp.reject(plugin, message)).is_some()
    }

    /// Waits for the outcome of `uid`, then forgets it. Success when the pod
    /// does not wait. The first plugin whose wait ends before the outcome
    /// rejects the pod then.
    pub(crate) async fn wait(&self, uid: &str) -> Status {
        let Some(wp) = self.get(uid) else {
            return Status::success();
        };
        let Some(mut rx) = wp.inner.lock().receiver.take() else {
            return Status::success();
        };
        let outcome = loop {
            let Some((plugin, until, timeout)) = wp.next_deadline() else {
                break (&mut rx).await;
            };
            match tokio::time::timeout_at(until, &mut rx).await {
                Ok(outcome) => break outcome,
                Err(_) => wp.reject(
                    Some(plugin),
                    &format!(
                        "rejected due to timeout after waiting {} at plugin {plugin}",
                        go_duration(timeout)
                    ),
                ),
            }
        };
        let status =
            outcome.unwrap_or_else(|_| Status::error("waiting pod dropped without an outcome"));
        self.0.lock().waiting.remove(uid);
        status
    }

    /// The number of waiting pods.
    pub fn len(&self) -> usize {
        self.0.lock().waiting.len()
    }

    /// Whether no pod waits.
    pub fn is_empty(&self) -> bool {
        self.0.lock().waiting.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::make_pod;

    fn pod() -> PodRef {
        Arc::new(make_pod("p").build())
    }

    #[test]
    fn go_durations() {
        for (d, want) in [
            (Duration::from_secs(10), "10s"),
            (Duration::from_secs(90), "1m30s"),
            (Duration::from_secs(900), "15m0s"),
            (Duration::from_millis(1500), "1.5s"),
            (Duration::from_millis(250), "250ms"),
            (Duration::from_secs(3661), "1h1m1s"),
            (Duration::ZERO, "0s"),
        ] {
            assert_eq!(go_duration(d), want);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn proceeds_only_when_every_plugin_allowed() {
        let w = WaitingPods::default();
        let p = pod();
        w.add(
            p.clone(),
            "n1".into(),
            vec![
                ("A", Duration::from_secs(10)),
                ("B", Duration::from_secs(20)),
            ],
        );
        assert_eq!(w.get(&p.uid).unwrap().pending_plugins(), ["A", "B"]);
        assert!(w.allow(&p.uid, "A"));
        let waiting = w.clone();
        let uid = p.uid.clone();
        let outcome = tokio::spawn(async move { waiting.wait(&uid).await });
        tokio::task::yield_now().await;
        assert!(!outcome.is_finished(), "B has not allowed yet");
        assert!(w.allow(&p.uid, "B"));
        let status = outcome.await.unwrap();
        assert!(status.is_success(), "{status:?}");
        assert!(w.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn each_plugin_has_its_own_timer() {
        let w = WaitingPods::default();
        let p = pod();
        w.add(
            p.clone(),
            "n1".into(),
            vec![
                ("A", Duration::from_secs(10)),
                ("B", Duration::from_secs(20)),
            ],
        );
        // A allows before its timer; B's timer (20s) still runs and rejects.
        w.allow(&p.uid, "A");
        let start = tokio::time::Instant::now();
        let status = w.wait(&p.uid).await;
        assert_eq!(start.elapsed(), Duration::from_secs(20));
        assert_eq!(status.code(), Code::Unschedulable);
        assert_eq!(status.plugin(), Some("B"));
        assert_eq!(
            status.message(),
            "rejected due to timeout after waiting 20s at plugin B"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn first_outcome_wins() {
        let w = WaitingPods::default();
        let p = pod();
        w.add(p.clone(), "n1".into(), vec![("A", Duration::from_secs(10))]);
        assert!(w.reject(&p.uid, Some("A"), "no room for the gang"));
        w.allow(&p.uid, "A");
        let status = w.wait(&p.uid).await;
        assert_eq!(status.message(), "no room for the gang");
        assert!(
            !w.allow(&p.uid, "A"),
            "forgotten once the outcome was taken"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn not_waiting_is_success() {
        let w = WaitingPods::default();
        assert!(w.wait("nobody").await.is_success());
    }

    #[tokio::test(start_paused = true)]
    async fn a_verdict_given_before_the_pod_is_parked_applies_when_it_is() {
        let w = WaitingPods::default();
        let p = pod();
        w.allow_or_remember(&p.uid, "A");
        w.add(
            p.clone(),
            "n1".into(),
            vec![
                ("A", Duration::from_secs(10)),
                ("B", Duration::from_secs(10)),
            ],
        );
        assert_eq!(w.get(&p.uid).unwrap().pending_plugins(), ["B"]);
        w.allow_or_remember(&p.uid, "B");
        let start = tokio::time::Instant::now();
        assert!(w.wait(&p.uid).await.is_success());
        assert_eq!(start.elapsed(), Duration::ZERO, "no timer fired");

        let q = Arc::new(make_pod("q").build());
        w.reject_or_remember(&q.uid, "A", "gang rejected");
        w.add(q.clone(), "n1".into(), vec![("A", Duration::from_secs(10))]);
        assert_eq!(w.wait(&q.uid).await.message(), "gang rejected");

        // Forgotten verdicts do not apply to a later attempt.
        let r = Arc::new(make_pod("r").build());
        w.reject_or_remember(&r.uid, "A", "stale");
        w.forget_early(&r.uid);
        w.add(r.clone(), "n1".into(), vec![("A", Duration::from_secs(10))]);
        w.allow(&r.uid, "A");
        assert!(w.wait(&r.uid).await.is_success());
    }
}
