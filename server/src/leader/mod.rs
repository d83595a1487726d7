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
//! * A leader only while it can serve: a replica that took the Lease but
//!   whose cache has not synced within `sync_timeout` (its informers
//!   refused, or the API too slow) gives the Lease up as on shutdown, says
//!   why, and campaigns again only once it can serve, so that a healthy
//!   standby takes over meanwhile (kube-scheduler waits for its caches
//!   before it campaigns at all; berth's replicas campaign at once and
//!   hand over when they cannot serve).
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

use crate::cluster::kube::access::{self, LeaseRef};
use crate::cluster::kube::refusals;
pub use crate::config::JITTER_FACTOR;
use crate::config::LeaderElection;
use crate::rng::FastRng;

/// The Lease kube-scheduler elects with, and the only one its built-in
/// role `system:kube-scheduler` may read and update.
pub const KUBE_SCHEDULER_LEASE: &str = "kube-scheduler";

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
    /// How long a leader that cannot serve keeps the Lease before it gives
    /// it up (zero: it never does).
    pub sync_timeout: Duration,
}

/// How long a leader whose cache has not synced keeps the Lease, unless
/// told otherwise: four lease durations, long enough for a big cluster's
/// first listing, short enough that a standby takes over within a minute
/// or so.
pub const DEFAULT_SYNC_TIMEOUT: Duration = Duration::from_secs(60);

/// Whether this replica can serve (its cache synced), and if not, why.
pub type Serving = std::sync::Arc<dyn Fn() -> Result<(), String> + Send + Sync>;

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
            sync_timeout: DEFAULT_SYNC_TIMEOUT,
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
    let host = crate::cluster::hostname();
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

/// Logs a failed Lease request: an answer refusing it as an ERROR, no
/// answer (or a 5xx) at DEBUG, as the API server's outage reporter speaks
/// for those.
fn lease_error(cfg: &ElectionConfig, e: &kube::Error, what: &str) {
    let lease = cfg.describe();
    match e {
        kube::Error::Api(s) if s.code < 500 => {
            tracing::error!(lease = %lease, code = s.code, "{what} {lease}: {}", s.message)
        }
        other => tracing::debug!(lease = %lease, error = %other, "{what} {lease}: {other}"),
    }
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
    serving: Serving,
}

impl Elector {
    fn new(api: Api<Lease>, cfg: ElectionConfig, serving: Serving) -> Self {
        Self {
            api,
            cfg,
            lease: None,
            observed: Record::default(),
            observed_at: None,
            rng: FastRng::from_entropy(),
            serving,
        }
    }

    /// The key the refusals of `verb` on the Lease are counted under
    /// (create is not limited by name).
    fn refusal_key(&self, verb: &str) -> refusals::Key {
        let key = refusals::Key::new(verb, "coordination.k8s.io", "leases");
        if verb == "create" {
            key
        } else {
            key.named(&self.cfg.name)
        }
    }

    /// `verb` on the Lease went through: the end of any refusal of it.
    fn allowed(&self, verb: &str) {
        refusals::global().allowed(&self.refusal_key(verb));
    }

    /// Whether `e` is the API refusing `verb` on the Lease. A refusal that
    /// lasts the grace of [`refusals`] (an API server that is starting
    /// refuses for a moment) is one ERROR line saying what fixes it: under
    /// kube-scheduler's built-in role only the Lease named
    /// `kube-scheduler` may be read and updated, so either the flag that
    /// names it or the rule that grants this one. The others are DEBUG.
    fn refused(&mut self, verb: &str, e: &kube::Error) -> bool {
        let kube::Error::Api(status) = e else {
            return false;
        };
        if status.code != 403 {
            return false;
        }
        let lease = self.cfg.describe();
        let lref = LeaseRef {
            namespace: self.cfg.namespace.clone(),
            name: self.cfg.name.clone(),
        };
        let rule = || {
            if verb == "create" {
                r#"{apiGroups: ["coordination.k8s.io"], resources: ["leases"], verbs: ["create"]}"#
                    .to_string()
            } else {
                access::rule_for("coordination.k8s.io", "leases", Some(&lref))
                    .map_or_else(String::new, |r| r.to_string())
            }
        };
        let verdict = refusals::global().refused(&self.refusal_key(verb), rule, &status.message);
        let refusals::Verdict::Report(lasted) = verdict else {
            tracing::debug!(lease = %lease, verb, code = 403, "forbidden to {verb} lease {lease}: {}", status.message);
            return true;
        };
        let rule = rule();
        let flag = if self.cfg.name == KUBE_SCHEDULER_LEASE {
            String::new()
        } else {
            format!(
                "in place of kube-scheduler, under its built-in ClusterRole system:kube-scheduler (which allows only the Lease named {KUBE_SCHEDULER_LEASE}), run berthd with --leader-elect-resource-name={KUBE_SCHEDULER_LEASE}; otherwise "
            )
        };
        tracing::error!(
            lease = %lease, verb, code = 403, %rule,
            "forbidden to {verb} lease {lease}: this replica cannot lead and schedules nothing until it may; {flag}grant {rule} in a Role in namespace {} (deploy/rbac.yaml's berth-leader-election). Refused for {}, retried every retry period (a summary follows every {} while it lasts). The API server says: {}",
            self.cfg.namespace,
            crate::outage::human(lasted),
            crate::outage::human(crate::outage::summary_every()),
            status.message
        );
        true
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
                    self.allowed("update");
                    self.observe(desired, Instant::now());
                    return true;
                }
                Err(e) => {
                    crate::metrics::process::leader_slowpath(&self.cfg.name);
                    tracing::debug!(lease = %self.cfg.describe(), error = %e, "failed to update lease optimistically, falling back to slow path");
                }
            }
        }

        // Slow path: read, then create or update.
        let current = match self.api.get_opt(&self.cfg.name).await {
            Ok(c) => {
                self.allowed("get");
                c
            }
            Err(e) => {
                if !self.refused("get", &e) {
                    lease_error(&self.cfg, &e, "error retrieving resource lock");
                }
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
                    self.allowed("create");
                    self.lease = Some(created);
                    self.observe(desired, Instant::now());
                    true
                }
                Err(e) => {
                    if !self.refused("create", &e) {
                        lease_error(
                            &self.cfg,
                            &e,
                            "error initially creating leader election record",
                        );
                    }
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
                self.allowed("update");
                self.observe(desired, Instant::now());
                true
            }
            Err(e) => {
                let refused = matches!(&e, LeaseError::Api(api) if self.refused("update", api));
                if !refused {
                    tracing::info!(lease = %self.cfg.describe(), error = %e, "failed to update lock: {e}");
                }
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
        // leader_election_master_status follows the flag, 0 from the start.
        let name = self.cfg.name.clone();
        let lease = name.clone();
        crate::metrics::process::leader_status(&name, false);
        let mut flag = leading.subscribe();
        let status = tokio::spawn(async move {
            while flag.changed().await.is_ok() {
                let now = *flag.borrow_and_update();
                crate::metrics::process::leader_status(&name, now);
            }
        });
        let outcome = self.campaign(&leading, stop).await;
        leading.send_replace(false);
        crate::metrics::process::leader_status(&lease, false);
        status.abort();
        ended.send_replace(Some(outcome));
        outcome
    }

    async fn campaign(
        mut self,
        leading: &watch::Sender<bool>,
        mut stop: oneshot::Receiver<()>,
    ) -> Outcome {
        let lease = self.cfg.describe();
        let mut gave_up = false;
        loop {
            if gave_up {
                // Not again until this replica can serve: a standby that
                // can takes the Lease meanwhile.
                loop {
                    if (self.serving)().is_ok() {
                        break;
                    }
                    tokio::select! {
                        biased;
                        _ = &mut stop => return Outcome::Stopped,
                        _ = sleep(self.cfg.retry_period) => {}
                    }
                }
                tracing::info!(lease = %lease, "the cache synced: campaigning for lease {lease} again");
            }
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
            let acquired = Instant::now();
            match self.lead(leading, &mut stop, acquired).await {
                Some(outcome) => return outcome,
                None => gave_up = true,
            }
        }
    }

    /// Renews every retry period; each round has renewDeadline to succeed.
    /// `None`: the Lease was given up because this replica cannot serve.
    async fn lead(
        &mut self,
        leading: &watch::Sender<bool>,
        stop: &mut oneshot::Receiver<()>,
        acquired: Instant,
    ) -> Option<Outcome> {
        loop {
            tokio::select! {
                biased;
                _ = &mut *stop => return Some(self.stop_leading(leading).await),
                _ = sleep(self.cfg.retry_period) => {}
            }
            if let Err(why) = (self.serving)()
                && !self.cfg.sync_timeout.is_zero()
                && acquired.elapsed() >= self.cfg.sync_timeout
            {
                leading.send_replace(false);
                let lease = self.cfg.describe();
                let released = self.release().await;
                tracing::error!(
                    lease = %lease, released, sync_timeout = ?self.cfg.sync_timeout, reason = %why,
                    "gave up lease {lease}: this replica has led for {:?} without its cache synced ({why}); a standby that can serve takes over, and this one campaigns again once its cache syncs",
                    self.cfg.sync_timeout
                );
                return None;
            }
            let deadline = Instant::now() + self.cfg.renew_deadline;
            loop {
                let attempt = tokio::select! {
                    biased;
                    _ = &mut *stop => return Some(self.stop_leading(leading).await),
                    r = timeout_at(deadline, self.try_acquire_or_renew()) => r,
                };
                match attempt {
                    Ok(true) => break,
                    Ok(false) => {}
                    Err(_) => return Some(self.lost(leading)),
                }
                tokio::select! {
                    biased;
                    _ = &mut *stop => return Some(self.stop_leading(leading).await),
                    _ = sleep_until(deadline) => return Some(self.lost(leading)),
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
    /// tokio runtime, for a replica that can always serve.
    pub fn start(client: kube::Client, cfg: ElectionConfig) -> Self {
        Self::start_serving(client, cfg, std::sync::Arc::new(|| Ok(())))
    }

    /// Starts campaigning for the Lease through `client`, leading only
    /// while `serving` says this replica can serve (see the module's
    /// rules), on the current tokio runtime.
    pub fn start_serving(client: kube::Client, cfg: ElectionConfig, serving: Serving) -> Self {
        let api: Api<Lease> = Api::namespaced(client, &cfg.namespace);
        let (tx, leading) = watch::channel(false);
        let (ended_tx, ended) = watch::channel(None);
        let (stop, stop_rx) = oneshot::channel();
        let task = tokio::spawn(Elector::new(api, cfg, serving).run(tx, ended_tx, stop_rx));
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
