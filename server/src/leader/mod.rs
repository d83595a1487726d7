//! Leader election over a `coordination.k8s.io/v1` Lease, with client-go's
//! `leaderelection` semantics, so that of several berth replicas only one
//! schedules.
//!
//! * A candidate takes the Lease when it does not exist, when its holder is
//!   empty (released), when it holds it already, or when the Lease has not
//!   changed for `leaseDurationSeconds` *as observed locally*: expiry is
//!   measured from the moment this process last saw the Lease record
//!   change, on its own monotonic clock, never by comparing the remote
//!   `renewTime` with the local wall clock.
//! * Taking over from another holder increments `leaseTransitions`;
//!   `acquireTime` is kept while the same holder renews.
//! * Every write is an update with the resourceVersion last read: a
//!   conflicting write (409) just fails this attempt; the next one, a
//!   retry period later, reads again.
//! * Candidates retry every `retryPeriod` (jittered by up to 1.2 times, as
//!   client-go does); the leader renews every `retryPeriod` and gives up
//!   leadership when no renewal succeeded within `renewDeadline`. The
//!   leadership flag turns false at that moment, before anything else.
//! * On [`Election::release`] (shutdown), the leader writes the Lease with
//!   an empty holder and `leaseDurationSeconds: 1` (client-go's
//!   ReleaseOnCancel), so that a standby takes over at its next retry.
//!
//! The outcome is a `watch::Receiver<bool>`: true while this process leads.

#[cfg(test)]
mod tests;

use std::hash::{BuildHasher, Hasher};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::Api;
use kube::api::PostParams;
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep, sleep_until, timeout_at};

pub use crate::config::JITTER_FACTOR;
use crate::config::LeaderElection;
use crate::rng::FastRng;

/// What the elector needs to know.
#[derive(Debug, Clone, PartialEq)]
pub struct ElectionConfig {
    /// The Lease's namespace.
    pub namespace: String,
    /// The Lease's name.
    pub name: String,
    /// This candidate's `holderIdentity`.
    pub identity: String,
    /// How long a Lease stays valid after it was last seen to change.
    pub lease_duration: Duration,
    /// How long the leader keeps trying to renew before it gives up.
    pub renew_deadline: Duration,
    /// The time between attempts.
    pub retry_period: Duration,
    /// The most the acquire retry period is stretched by at random
    /// (`retry_period * (1 + jitter * r)`, `r` in `[0, 1)`).
    pub jitter: f64,
}

impl ElectionConfig {
    /// From the configuration's `leaderElection` section.
    pub fn from_config(le: &LeaderElection, identity: String) -> Self {
        Self {
            namespace: le.resource_namespace.clone(),
            name: le.resource_name.clone(),
            identity,
            lease_duration: le.lease_duration,
            renew_deadline: le.renew_deadline,
            retry_period: le.retry_period,
            jitter: JITTER_FACTOR,
        }
    }

    /// `namespace/name`, as the logs name the Lease.
    pub fn describe(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

/// A holder identity as kube-scheduler makes it: the host name, `_`, and
/// a random (version 4) UUID, unique per process.
pub fn default_identity() -> String {
    let host = hostname();
    let mut rng = FastRng::new(
        FastRng::from_entropy().next_u64()
            ^ std::collections::hash_map::RandomState::new()
                .build_hasher()
                .finish(),
    );
    let mut b = [0u8; 16];
    b[..8].copy_from_slice(&rng.next_u64().to_le_bytes());
    b[8..].copy_from_slice(&rng.next_u64().to_le_bytes());
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{host}_{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

fn hostname() -> String {
    std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.is_empty())
        .or_else(|| {
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .ok()
                .map(|h| h.trim().to_string())
                .filter(|h| !h.is_empty())
        })
        .unwrap_or_else(|| "berth".to_string())
}

/// The wall clock, to the microsecond (what a MicroTime keeps), so that a
/// record written and read back compares equal.
fn now_micro() -> MicroTime {
    let now = jiff::Timestamp::now();
    MicroTime(jiff::Timestamp::from_microsecond(now.as_microsecond()).unwrap_or(now))
}

/// The election record, as client-go's LeaderElectionRecord (the fields
/// of a LeaseSpec that matter).
#[derive(Debug, Clone, Default, PartialEq)]
struct Record {
    holder: String,
    lease_duration_seconds: i32,
    acquire_time: Option<MicroTime>,
    renew_time: Option<MicroTime>,
    transitions: i32,
}

impl Record {
    fn from_spec(spec: Option<&LeaseSpec>) -> Self {
        let Some(s) = spec else {
            return Self::default();
        };
        Self {
            holder: s.holder_identity.clone().unwrap_or_default(),
            lease_duration_seconds: s.lease_duration_seconds.unwrap_or(0),
            acquire_time: s.acquire_time.clone(),
            renew_time: s.renew_time.clone(),
            transitions: s.lease_transitions.unwrap_or(0),
        }
    }

    fn to_spec(&self) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(self.holder.clone()),
            lease_duration_seconds: Some(self.lease_duration_seconds),
            acquire_time: self.acquire_time.clone(),
            renew_time: self.renew_time.clone(),
            lease_transitions: Some(self.transitions),
            ..LeaseSpec::default()
        }
    }
}

/// Why a Lease write failed.
#[derive(Debug, thiserror::Error)]
enum LeaseError {
    #[error("lease not initialized, call get or create first")]
    NotRead,
    #[error(transparent)]
    Api(#[from] kube::Error),
}

/// How an election ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Stopped before it ever led.
    Stopped,
    /// Led, then released the Lease on request.
    Released,
    /// Led, was asked to stop, and the release failed (the Lease expires
    /// on its own).
    ReleaseFailed,
    /// Led, then could not renew within the renew deadline.
    Lost,
}

/// The election's state as one candidate sees it.
struct Elector {
    api: Api<Lease>,
    cfg: ElectionConfig,
    /// The Lease as last read or written (its resourceVersion is what the
    /// next update sends).
    lease: Option<Lease>,
    observed: Record,
    /// When `observed` last changed, on the local clock.
    observed_at: Option<Instant>,
    rng: FastRng,
}

impl Elector {
    fn new(api: Api<Lease>, cfg: ElectionConfig) -> Self {
        Self {
            api,
            cfg,
            lease: None,
            observed: Record::default(),
            observed_at: None,
            rng: FastRng::from_entropy(),
        }
    }

    fn is_leader(&self) -> bool {
        self.observed.holder == self.cfg.identity
    }

    fn is_lease_valid(&self, now: Instant) -> bool {
        let secs = u64::try_from(self.observed.lease_duration_seconds).unwrap_or(0);
        self.observed_at
            .is_some_and(|t| t + Duration::from_secs(secs) > now)
    }

    fn observe(&mut self, r: Record, now: Instant) {
        self.observed = r;
        self.observed_at = Some(now);
    }

    fn lease_duration_seconds(&self) -> i32 {
        i32::try_from(self.cfg.lease_duration.as_secs()).unwrap_or(i32::MAX)
    }

    /// Writes `r` over the Lease last seen (with its resourceVersion).
    async fn update(&mut self, r: &Record) -> Result<(), LeaseError> {
        let Some(mut lease) = self.lease.clone() else {
            return Err(LeaseError::NotRead);
        };
        lease.spec = Some(r.to_spec());
        let written = self
            .api
            .replace(&self.cfg.name, &PostParams::default(), &lease)
            .await?;
        self.lease = Some(written);
        Ok(())
    }

    /// One attempt, as client-go's tryAcquireOrRenew: true when this
    /// process holds the Lease afterwards.
    async fn try_acquire_or_renew(&mut self) -> bool {
        let now = Instant::now();
        let wall = now_micro();
        let mut desired = Record {
            holder: self.cfg.identity.clone(),
            lease_duration_seconds: self.lease_duration_seconds(),
            acquire_time: Some(wall.clone()),
            renew_time: Some(wall),
            transitions: 0,
        };

        // Fast path: the leader updates what it wrote last, optimistically.
        if self.is_leader() && self.is_lease_valid(now) && self.lease.is_some() {
            desired.acquire_time = self.observed.acquire_time.clone();
            desired.transitions = self.observed.transitions;
            match self.update(&desired).await {
                Ok(()) => {
                    self.observe(desired, Instant::now());
                    return true;
                }
                Err(e) => {
                    tracing::debug!(lease = %self.cfg.describe(), error = %e, "failed to update lease optimistically, falling back to slow path");
                }
            }
        }

        // Slow path: read, then create or update.
        let current = match self.api.get_opt(&self.cfg.name).await {
            Ok(c) => c,
            Err(e) => {
                tracing::error!(lease = %self.cfg.describe(), error = %e, "error retrieving resource lock {}: {e}", self.cfg.describe());
                return false;
            }
        };
        let Some(current) = current else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.cfg.name.clone()),
                    namespace: Some(self.cfg.namespace.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(desired.to_spec()),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(created) => {
                    self.lease = Some(created);
                    self.observe(desired, Instant::now());
                    true
                }
                Err(e) => {
                    tracing::error!(lease = %self.cfg.describe(), error = %e, "error initially creating leader election record: {e}");
                    false
                }
            };
        };
        let old = Record::from_spec(current.spec.as_ref());
        self.lease = Some(current);
        if old != self.observed || self.observed_at.is_none() {
            self.observe(old.clone(), now);
        }
        if !old.holder.is_empty() && self.is_lease_valid(now) && !self.is_leader() {
            tracing::debug!(lease = %self.cfg.describe(), holder = %old.holder, "lock is held by {} and has not yet expired", old.holder);
            return false;
        }
        if self.is_leader() {
            desired.acquire_time = old.acquire_time.clone();
            desired.transitions = old.transitions;
        } else {
            desired.transitions = old.transitions.saturating_add(1);
        }
        match self.update(&desired).await {
            Ok(()) => {
                self.observe(desired, Instant::now());
                true
            }
            Err(e) => {
                tracing::info!(lease = %self.cfg.describe(), error = %e, "failed to update lock: {e}");
                false
            }
        }
    }

    /// Gives the Lease up if this process holds it (ReleaseOnCancel): an
    /// empty holder and a one-second duration. True when released.
    async fn release(&mut self) -> bool {
        if !self.is_leader() || self.lease.is_none() {
            return true;
        }
        let wall = now_micro();
        let released = Record {
            holder: String::new(),
            lease_duration_seconds: 1,
            acquire_time: Some(wall.clone()),
            renew_time: Some(wall),
            transitions: self.observed.transitions,
        };
        match self.update(&released).await {
            Ok(()) => {
                self.observe(released, Instant::now());
                true
            }
            Err(e) => {
                tracing::error!(lease = %self.cfg.describe(), error = %e, "failed to release lock: {e}");
                false
            }
        }
    }

    fn jittered_retry(&mut self) -> Duration {
        let r = (self.rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        self.cfg
            .retry_period
            .mul_f64(1.0 + self.cfg.jitter.max(0.0) * r)
    }

    async fn run(
        self,
        leading: watch::Sender<bool>,
        ended: watch::Sender<Option<Outcome>>,
        stop: oneshot::Receiver<()>,
    ) -> Outcome {
        let outcome = self.campaign(&leading, stop).await;
        leading.send_replace(false);
        ended.send_replace(Some(outcome));
        outcome
    }

    async fn campaign(
        mut self,
        leading: &watch::Sender<bool>,
        mut stop: oneshot::Receiver<()>,
    ) -> Outcome {
        let lease = self.cfg.describe();
        tracing::info!(lease = %lease, identity = %self.cfg.identity, "attempting to acquire leader lease {lease}...");
        // Acquire: try until it works or we are told to stop.
        loop {
            tokio::select! {
                biased;
                _ = &mut stop => return Outcome::Stopped,
                ok = self.try_acquire_or_renew() => if ok { break },
            }
            let wait = self.jittered_retry();
            tokio::select! {
                biased;
                _ = &mut stop => return Outcome::Stopped,
                _ = sleep(wait) => {}
            }
        }
        tracing::info!(lease = %lease, identity = %self.cfg.identity, "successfully acquired lease {lease}");
        leading.send_replace(true);

        // Renew every retry period; each round has renewDeadline to succeed.
        loop {
            tokio::select! {
                biased;
                _ = &mut stop => return self.stop_leading(leading).await,
                _ = sleep(self.cfg.retry_period) => {}
            }
            let deadline = Instant::now() + self.cfg.renew_deadline;
            loop {
                let attempt = tokio::select! {
                    biased;
                    _ = &mut stop => return self.stop_leading(leading).await,
                    r = timeout_at(deadline, self.try_acquire_or_renew()) => r,
                };
                match attempt {
                    Ok(true) => break,
                    Ok(false) => {}
                    Err(_) => return self.lost(leading),
                }
                tokio::select! {
                    biased;
                    _ = &mut stop => return self.stop_leading(leading).await,
                    _ = sleep_until(deadline) => return self.lost(leading),
                    _ = sleep(self.cfg.retry_period) => {}
                }
            }
        }
    }

    fn lost(&self, leading: &watch::Sender<bool>) -> Outcome {
        leading.send_replace(false);
        let lease = self.cfg.describe();
        tracing::error!(lease = %lease, "failed to renew lease {lease}: timed out waiting for the condition");
        Outcome::Lost
    }

    async fn stop_leading(&mut self, leading: &watch::Sender<bool>) -> Outcome {
        leading.send_replace(false);
        if self.release().await {
            tracing::info!(lease = %self.cfg.describe(), "released lease {}", self.cfg.describe());
            Outcome::Released
        } else {
            Outcome::ReleaseFailed
        }
    }
}

/// A running election.
#[derive(Debug)]
pub struct Election {
    leading: watch::Receiver<bool>,
    ended: watch::Receiver<Option<Outcome>>,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<Outcome>,
}

impl Election {
    /// Starts campaigning for the Lease through `client`, on the current
    /// tokio runtime.
    pub fn start(client: kube::Client, cfg: ElectionConfig) -> Self {
        let api: Api<Lease> = Api::namespaced(client, &cfg.namespace);
        let (tx, leading) = watch::channel(false);
        let (ended_tx, ended) = watch::channel(None);
        let (stop, stop_rx) = oneshot::channel();
        let task = tokio::spawn(Elector::new(api, cfg).run(tx, ended_tx, stop_rx));
        Self {
            leading,
            ended,
            stop: Some(stop),
            task,
        }
    }

    /// True while this process leads; turns false the moment leadership is
    /// lost (and stays false: a lost election is over).
    pub fn leading(&self) -> watch::Receiver<bool> {
        self.leading.clone()
    }

    /// Waits until the election ends by itself (leadership lost), or
    /// forever if it does not.
    pub async fn lost(&self) {
        let mut rx = self.ended.clone();
        let lost = rx.wait_for(|o| o.is_some()).await.map(|o| *o);
        if lost.ok().flatten() != Some(Outcome::Lost) {
            std::future::pending::<()>().await;
        }
    }

    /// Stops campaigning or leading, releasing the Lease if held, and says
    /// how the election ended.
    pub async fn release(mut self) -> Outcome {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        match (&mut self.task).await {
            Ok(o) => o,
            Err(_) => Outcome::ReleaseFailed,
        }
    }
}
