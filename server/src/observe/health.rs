//! Named health checks behind `/healthz`, `/livez` and `/readyz`, answered
//! as Kubernetes components answer them: `ok`, or with `?verbose` one line
//! per check (`[+]ping ok`, `[-]name failed: <reason>`) and a verdict
//! line; a failing check makes the answer a 500 listing them all. Unlike
//! upstream's, which withholds the reasons of its checks, every check here
//! is berth's own and says why it fails (which informer has not synced,
//! which extender holds scheduling back): an operator reading the probe's
//! answer needs no log.
//! `?exclude=NAME` leaves a check out; `/readyz/NAME` runs one.

use std::fmt::Write as _;
use std::sync::Arc;

use parking_lot::RwLock;

/// A check: `Err(reason)` when unhealthy.
pub type CheckFn = Arc<dyn Fn() -> Result<(), String> + Send + Sync>;

/// Which endpoints a check belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// `/healthz`, `/livez` and `/readyz` (as upstream's `checks`).
    All,
    /// Only `/readyz` (as upstream's readyz-only checks).
    Ready,
}

/// The endpoints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    /// `/healthz`.
    Healthz,
    /// `/livez`.
    Livez,
    /// `/readyz`.
    Readyz,
}

impl Endpoint {
    /// The path's name, as the verdict line says it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Healthz => "healthz",
            Self::Livez => "livez",
            Self::Readyz => "readyz",
        }
    }

    fn includes(self, scope: Scope) -> bool {
        scope == Scope::All || self == Self::Readyz
    }
}

struct Check {
    name: String,
    scope: Scope,
    run: CheckFn,
}

/// The registry of checks.
#[derive(Default)]
pub struct HealthChecks {
    checks: RwLock<Vec<Check>>,
}

impl std::fmt::Debug for HealthChecks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<String> = self.checks.read().iter().map(|c| c.name.clone()).collect();
        f.debug_struct("HealthChecks")
            .field("checks", &names)
            .finish()
    }
}

/// An answer: HTTP status and body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// 200, 404 or 500.
    pub status: u16,
    /// The plain-text body.
    pub body: String,
}

impl HealthChecks {
    /// The registry with upstream's default checks, `ping` and `log`
    /// (berth's logging never blocks the caller, so `log` always passes).
    pub fn new() -> Self {
        let h = Self::default();
        h.register("ping", Scope::All, Arc::new(|| Ok(())));
        h.register("log", Scope::All, Arc::new(|| Ok(())));
        h
    }

    /// Adds a check (replacing one of the same name).
    pub fn register(&self, name: &str, scope: Scope, run: CheckFn) {
        let mut checks = self.checks.write();
        checks.retain(|c| c.name != name);
        checks.push(Check {
            name: name.to_string(),
            scope,
            run,
        });
    }

    /// Answers `endpoint` (`check` set for `/readyz/NAME`) with the query
    /// string's `verbose` and `exclude` parameters.
    pub fn answer(&self, endpoint: Endpoint, check: Option<&str>, query: &str) -> Answer {
        let checks = self.checks.read();
        let in_scope = checks.iter().filter(|c| endpoint.includes(c.scope));
        if let Some(name) = check {
            return match in_scope.clone().find(|c| c.name == name) {
                None => Answer {
                    status: 404,
                    body: "404 page not found\n".into(),
                },
                Some(c) => match (c.run)() {
                    Ok(()) => Answer {
                        status: 200,
                        body: "ok".into(),
                    },
                    Err(e) => Answer {
                        status: 500,
                        body: format!("internal server error: {e}\n"),
                    },
                },
            };
        }
        let mut verbose = false;
        let mut excluded: Vec<&str> = Vec::new();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            match k {
                "verbose" => verbose = v != "false" && v != "0",
                "exclude" => excluded.push(v),
                _ => {}
            }
        }
        let mut lines = String::new();
        let mut failed = false;
        for c in in_scope {
            if excluded.contains(&c.name.as_str()) {
                let _ = writeln!(lines, "[+]{} excluded: ok", c.name);
                continue;
            }
            match (c.run)() {
                Ok(()) => {
                    let _ = writeln!(lines, "[+]{} ok", c.name);
                }
                Err(why) => {
                    failed = true;
                    let _ = writeln!(lines, "[-]{} failed: {why}", c.name);
                }
            }
        }
        let name = endpoint.name();
        if failed {
            return Answer {
                status: 500,
                body: format!("{lines}{name} check failed\n"),
            };
        }
        Answer {
            status: 200,
            body: if verbose {
                format!("{lines}{name} check passed\n")
            } else {
                "ok".into()
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};

    #[test]
    fn answers_like_kubernetes_components() {
        let h = HealthChecks::new();
        let synced = Arc::new(AtomicBool::new(false));
        let s = synced.clone();
        h.register(
            "sched-handler-sync",
            Scope::Ready,
            Arc::new(move || {
                if s.load(Ordering::SeqCst) {
                    Ok(())
                } else {
                    Err("handlers are not fully synchronized".into())
                }
            }),
        );
        // Liveness ignores readiness-only checks.
        assert_eq!(h.answer(Endpoint::Livez, None, "").body, "ok");
        assert_eq!(
            h.answer(Endpoint::Healthz, None, "verbose").body,
            "[+]ping ok\n[+]log ok\nhealthz check passed\n"
        );
        let a = h.answer(Endpoint::Readyz, None, "");
        assert_eq!(a.status, 500);
        assert_eq!(
            a.body,
            "[+]ping ok\n[+]log ok\n[-]sched-handler-sync failed: handlers are not fully synchronized\nreadyz check failed\n"
        );
        let a = h.answer(Endpoint::Readyz, Some("sched-handler-sync"), "");
        assert_eq!(
            (a.status, a.body.as_str()),
            (
                500,
                "internal server error: handlers are not fully synchronized\n"
            )
        );
        let a = h.answer(Endpoint::Readyz, None, "verbose&exclude=sched-handler-sync");
        assert_eq!(a.status, 200);
        assert!(
            a.body.contains("[+]sched-handler-sync excluded: ok\n"),
            "{}",
            a.body
        );
        assert_eq!(
            h.answer(Endpoint::Livez, Some("sched-handler-sync"), "")
                .status,
            404
        );
        synced.store(true, Ordering::SeqCst);
        assert_eq!(
            h.answer(Endpoint::Readyz, None, ""),
            Answer {
                status: 200,
                body: "ok".into()
            }
        );
        assert_eq!(h.answer(Endpoint::Readyz, Some("ping"), "").body, "ok");
    }
}
