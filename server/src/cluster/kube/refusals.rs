//! Refusals reported for people, as outages are ([`crate::outage`]): an
//! answer that says a permission is missing (403 Forbidden, or a 422 whose
//! message names the permission a field needs, as DRA's claim status
//! does) is retried quietly, named as a missing RBAC rule in one line once
//! it has lasted [`grace`], then summarized every
//! [`crate::outage::summary_every`] while requests keep being refused, and
//! one line says when it is allowed again.
//!
//! Why a grace: a kube-apiserver that is starting answers permitted
//! requests 403 for a moment, before its RBAC authorizer's caches are
//! filled (about 0.2 s in the recorded restart,
//! `tests/k8s-api/apiserver-restart-sequence.json`; none at all in one
//! restart of three). Such a 403 has the words of a real refusal; only its
//! lasting tells them apart. A refusal that ends within the grace costs
//! DEBUG lines only, so a restart is the outage's two lines, not one
//! "missing rule" per informer.
//!
//! ```text
//!   refused ──(within grace: DEBUG)──▶ still refused after grace:
//!      │                                 ERROR "forbidden to <verb> <resource>: ... grant <rule> ..."
//!      │                                 WARN every summary period while refusals go on
//!      ▼                                       │
//!   allowed again: DEBUG (never said) ◀────────┴──▶ allowed again: INFO "<...> is allowed now ..."
//! ```
//!
//! A refusal is keyed by verb, API group, resource (with subresource) and,
//! for a rule limited by `resourceNames`, the object's name; a success of
//! the same key ends it. A refusal that comes more than a summary period
//! after the last one of a streak not yet reported starts a new streak
//! (the requests in between may never have been made). Whoever made the
//! request writes the lines that name the rule (it knows what the refusal
//! stops: the cache syncing, a binding, the Lease); this module decides
//! when, and writes the summaries and the line when it ends.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

use crate::outage::human;

/// How long a refusal must last before it is reported as a missing rule,
/// unless [`set_grace`] says otherwise: long enough for an API server's
/// authorizer to fill its caches after a restart (0.2 s recorded; a big
/// cluster's take longer), short enough that a missing rule is named
/// within seconds.
pub const GRACE: Duration = Duration::from_secs(10);

static GRACE_MS: AtomicU64 = AtomicU64::new(GRACE.as_millis() as u64);

/// Sets the grace of the reporter (berthd's `--forbidden-grace`); call it
/// before the first request.
pub fn set_grace(grace: Duration) {
    let ms = u64::try_from(grace.as_millis()).unwrap_or(u64::MAX);
    GRACE_MS.store(ms, Ordering::Relaxed);
}

/// The grace in force.
pub fn grace() -> Duration {
    Duration::from_millis(GRACE_MS.load(Ordering::Relaxed))
}

/// What was refused: a verb on a resource of a group, for one named
/// object when the rule is limited by name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Key {
    /// The RBAC verb (`list`, `update`).
    pub verb: String,
    /// The API group (`""` the core group).
    pub group: String,
    /// The resource with its subresource (`resourceclaims/binding`), or a
    /// non-resource path (`/version`).
    pub resource: String,
    /// The object's name, for a rule limited by `resourceNames`.
    pub name: Option<String>,
}

impl Key {
    /// `verb` on `resource` of `group`.
    pub fn new(verb: &str, group: &str, resource: &str) -> Self {
        Self {
            verb: verb.into(),
            group: group.into(),
            resource: resource.into(),
            name: None,
        }
    }

    /// The same, for the object `name`.
    pub fn named(mut self, name: &str) -> Self {
        self.name = Some(name.into());
        self
    }

    /// `update resourceclaims/binding.resource.k8s.io`, `get leases.coordination.k8s.io "berth"`.
    pub fn describe(&self) -> String {
        let mut s = format!("{} {}", self.verb, self.resource);
        if !self.group.is_empty() {
            s.push('.');
            s.push_str(&self.group);
        }
        if let Some(n) = &self.name {
            s.push_str(&format!(" {n:?}"));
        }
        s
    }
}

/// What the caller of [`Refusals::refused`] does about a refusal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Within the grace: retry quietly (DEBUG).
    Wait,
    /// It has lasted the grace: name the rule now, in one line (it has
    /// lasted this long).
    Report(Duration),
    /// Named already: retry quietly; the summaries speak for it.
    Reported,
}

#[derive(Debug)]
struct Streak {
    since: Instant,
    last: Instant,
    reported: bool,
    rule: String,
    message: String,
    /// Refusals since the last summary.
    recent: u64,
    /// Refusals since the streak began.
    total: u64,
    last_summary: Instant,
}

/// The refusals of one API server (one per process: berthd talks to one).
pub struct Refusals {
    grace: Duration,
    summary_every: Duration,
    streaks: Mutex<BTreeMap<Key, Streak>>,
    /// How many streaks are open: a success checks the map only when some
    /// are.
    open: AtomicUsize,
    ticking: AtomicBool,
}

impl std::fmt::Debug for Refusals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Refusals")
            .field("grace", &self.grace)
            .field("open", &self.open.load(Ordering::Relaxed))
            .finish()
    }
}

static GLOBAL: LazyLock<Arc<Refusals>> =
    LazyLock::new(|| Refusals::new(grace(), crate::outage::summary_every()));

/// The process's reporter (made with the grace and summary period set by
/// then).
pub fn global() -> &'static Arc<Refusals> {
    &GLOBAL
}

impl Refusals {
    /// A reporter naming refusals after `grace`, summarizing every
    /// `summary_every`.
    pub fn new(grace: Duration, summary_every: Duration) -> Arc<Self> {
        Arc::new(Self {
            grace,
            summary_every,
            streaks: Mutex::new(BTreeMap::new()),
            open: AtomicUsize::new(0),
            ticking: AtomicBool::new(false),
        })
    }

    /// The grace of this reporter.
    pub fn grace(&self) -> Duration {
        self.grace
    }

    /// `key` was refused with `message`; `rule` (asked only when a streak
    /// begins) is the rule that would allow it, as a Role writes it.
    pub fn refused(&self, key: &Key, rule: impl FnOnce() -> String, message: &str) -> Verdict {
        let now = Instant::now();
        let mut streaks = self.streaks.lock();
        let s = match streaks.get_mut(key) {
            Some(s) => {
                if !s.reported && now.saturating_duration_since(s.last) > self.summary_every {
                    // Nothing was heard for a long while: a new streak.
                    s.since = now;
                }
                s
            }
            None => {
                self.open.fetch_add(1, Ordering::Relaxed);
                streaks.entry(key.clone()).or_insert(Streak {
                    since: now,
                    last: now,
                    reported: false,
                    rule: rule(),
                    message: String::new(),
                    recent: 0,
                    total: 0,
                    last_summary: now,
                })
            }
        };
        s.last = now;
        s.recent += 1;
        s.total += 1;
        if s.message != message {
            s.message = message.to_string();
        }
        if s.reported {
            return Verdict::Reported;
        }
        let lasted = now.saturating_duration_since(s.since);
        if lasted >= self.grace {
            s.reported = true;
            s.last_summary = now;
            s.recent = 0;
            return Verdict::Report(lasted);
        }
        Verdict::Wait
    }

    /// `key` was allowed: the end of its streak, if one is open (one INFO
    /// line if it had been reported).
    pub fn allowed(&self, key: &Key) {
        if self.open.load(Ordering::Relaxed) == 0 {
            return;
        }
        let Some(s) = self.streaks.lock().remove(key) else {
            return;
        };
        self.open.fetch_sub(1, Ordering::Relaxed);
        let lasted = human(s.since.elapsed());
        let what = key.describe();
        if s.reported {
            tracing::info!(
                verb = %key.verb, resource = %key.resource, lasted = %lasted, refused = s.total,
                "{what} is allowed now, after {lasted}: {} requests were refused meanwhile",
                s.total
            );
        } else {
            tracing::debug!(verb = %key.verb, resource = %key.resource, lasted = %lasted, refused = s.total, "{what} is allowed now (refused for {lasted}: the API server was starting)");
        }
    }

    /// Whether any refusal is open (reported or not).
    pub fn any(&self) -> bool {
        self.open.load(Ordering::Relaxed) > 0
    }

    /// Whether `key` is refused now.
    pub fn is_refused(&self, key: &Key) -> bool {
        self.any() && self.streaks.lock().contains_key(key)
    }

    /// Summarizes each reported refusal that requests met again since its
    /// last summary, once a summary period has passed. Call it every so
    /// often (see [`Self::spawn`]).
    pub fn tick(&self) {
        if !self.any() {
            return;
        }
        let now = Instant::now();
        let mut lines = Vec::new();
        for (key, s) in self.streaks.lock().iter_mut() {
            if !s.reported
                || s.recent == 0
                || now.saturating_duration_since(s.last_summary) < self.summary_every
            {
                continue;
            }
            lines.push((
                key.clone(),
                human(now.saturating_duration_since(s.since)),
                human(now.saturating_duration_since(s.last_summary)),
                s.recent,
                s.rule.clone(),
                s.message.clone(),
            ));
            s.recent = 0;
            s.last_summary = now;
        }
        for (key, lasted, since, n, rule, message) in lines {
            tracing::warn!(
                verb = %key.verb, resource = %key.resource, lasted = %lasted, refused = n, %rule,
                "still forbidden to {} after {lasted}: {n} requests refused in the last {since}; berthd's role must grant {rule}; the API server says: {message}",
                key.describe()
            );
        }
    }

    /// Summarizes while the process runs: a tick every tenth of the summary
    /// period (started once, however often called).
    pub fn spawn(self: &Arc<Self>) {
        if self.ticking.swap(true, Ordering::Relaxed) {
            return;
        }
        let weak = Arc::downgrade(self);
        let every = (self.summary_every / 10).max(Duration::from_millis(10));
        tokio::spawn(async move {
            let mut interval = tokio::time::interval(every);
            interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                interval.tick().await;
                let Some(r) = weak.upgrade() else { return };
                r.tick();
            }
        });
    }
}

/// The permission a 422 names, as DRA's claim status answers when its
/// allocation or reservation is written without the right
/// (`... requires resource="resourceclaims/binding", verb="update"
/// permission: ...`): (resource, verb).
pub fn permission_named(message: &str) -> Option<(String, String)> {
    let rest = message.split_once("requires resource=\"")?.1;
    let (resource, rest) = rest.split_once('"')?;
    let rest = rest.split_once("verb=\"")?.1;
    let (verb, rest) = rest.split_once('"')?;
    rest.trim_start()
        .starts_with("permission")
        .then(|| (resource.to_string(), verb.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::testing::Lines;

    fn said(lines: &Lines) -> Vec<(tracing::Level, String)> {
        lines
            .0
            .lock()
            .iter()
            .filter(|(l, _)| *l <= tracing::Level::INFO)
            .cloned()
            .collect()
    }

    const RULE: &str =
        r#"{apiGroups: [""], resources: ["nodes"], verbs: ["get", "list", "watch"]}"#;

    /// The recorded restart: 403s for 0.2 s, then 200s: nothing said.
    #[tokio::test(start_paused = true)]
    async fn a_refusal_that_ends_within_the_grace_is_never_said() {
        use tracing_subscriber::layer::SubscriberExt;
        let lines = Lines::default();
        let _g =
            tracing::subscriber::set_default(tracing_subscriber::registry().with(lines.clone()));
        let r = Refusals::new(GRACE, Duration::from_secs(60));
        let nodes = Key::new("list", "", "nodes");
        for _ in 0..14 {
            assert_eq!(
                r.refused(&nodes, || RULE.into(), "nodes is forbidden"),
                Verdict::Wait
            );
            tokio::time::advance(Duration::from_millis(15)).await;
        }
        assert!(r.is_refused(&nodes));
        r.allowed(&nodes);
        assert!(!r.any());
        assert!(said(&lines).is_empty(), "{:?}", said(&lines));
    }

    /// A missing rule: named once after the grace, summarized each minute
    /// requests meet it, and its end said.
    #[tokio::test(start_paused = true)]
    async fn a_lasting_refusal_is_named_once_summarized_and_its_end_said() {
        use tracing_subscriber::layer::SubscriberExt;
        let lines = Lines::default();
        let _g =
            tracing::subscriber::set_default(tracing_subscriber::registry().with(lines.clone()));
        let r = Refusals::new(GRACE, Duration::from_secs(60));
        let binding = Key::new("update", "resource.k8s.io", "resourceclaims/binding");
        let mut verdicts = Vec::new();
        // A retry every 10 s (a pod's longest backoff) for five minutes.
        for _ in 0..30 {
            verdicts.push(r.refused(&binding, || "RULE".into(), "claim is invalid"));
            tokio::time::advance(Duration::from_secs(10)).await;
            r.tick();
        }
        assert_eq!(verdicts[0], Verdict::Wait);
        assert_eq!(verdicts[1], Verdict::Report(Duration::from_secs(10)));
        assert!(verdicts[2..].iter().all(|v| *v == Verdict::Reported));
        r.allowed(&binding);
        let said = said(&lines);
        let warn: Vec<&String> = said
            .iter()
            .filter(|(l, _)| *l == tracing::Level::WARN)
            .map(|(_, m)| m)
            .collect();
        assert_eq!(warn.len(), 4, "{said:#?}");
        assert_eq!(
            warn[0],
            "still forbidden to update resourceclaims/binding.resource.k8s.io after 1m10s: 5 requests refused in the last 1m0s; berthd's role must grant RULE; the API server says: claim is invalid"
        );
        assert_eq!(
            said.last().unwrap().1,
            "update resourceclaims/binding.resource.k8s.io is allowed now, after 5m0s: 30 requests were refused meanwhile"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn keys_are_separate_and_a_stale_unreported_streak_starts_again() {
        let r = Refusals::new(GRACE, Duration::from_secs(60));
        let get = Key::new("get", "coordination.k8s.io", "leases").named("berth");
        let create = Key::new("create", "coordination.k8s.io", "leases");
        assert_eq!(r.refused(&get, String::new, "x"), Verdict::Wait);
        tokio::time::advance(Duration::from_secs(5)).await;
        assert_eq!(r.refused(&create, String::new, "x"), Verdict::Wait);
        r.allowed(&create);
        assert!(r.is_refused(&get) && !r.is_refused(&create));
        // Two minutes of silence, then a refusal: a new streak, not one
        // lasting two minutes.
        tokio::time::advance(Duration::from_secs(120)).await;
        assert_eq!(r.refused(&get, String::new, "x"), Verdict::Wait);
        tokio::time::advance(GRACE).await;
        assert_eq!(r.refused(&get, String::new, "x"), Verdict::Report(GRACE));
        assert_eq!(get.describe(), "get leases.coordination.k8s.io \"berth\"");
    }

    #[test]
    fn a_422_names_the_permission_it_needs() {
        let m = "ResourceClaim.resource.k8s.io \"gpu-claim\" is invalid: status.allocation: Forbidden: changing status.allocation or status.reservedFor requires resource=\"resourceclaims/binding\", verb=\"update\" permission: resourceclaims.resource.k8s.io is forbidden: User \"system:serviceaccount:kube-system:berth\" cannot update resource \"resourceclaims/binding\" in API group \"resource.k8s.io\" at the cluster scope";
        assert_eq!(
            permission_named(m),
            Some(("resourceclaims/binding".into(), "update".into()))
        );
        assert_eq!(permission_named("spec.x: Invalid value"), None);
    }
}
