//! Remote extenders that misbehave, through the real berthd: the `faulty`
//! test extender (a real process on loopback) hangs past its timeout,
//! answers errors, garbage and wrong node names at chosen points for chosen
//! pods, is SIGKILLed in the middle of a cycle, or is restarted while an
//! Unreserve waits for its acknowledgement; each as an ignorable and a
//! non-ignorable extender.
//!
//! Every test ends with the same accounting: no pod lost (each is bound
//! with exactly one Scheduled event, or unbound and in berthd's queue), none
//! bound twice, and every reservation the extender saw (its own log of the
//! requests it received) was undone by an Unreserve it received, except the
//! attempt that bound the pod.

use std::collections::BTreeMap;

use anyhow::Result;
use berth_client::pb::EventType;
use berth_e2e::{Extender, message};
use serde_json::Value;

mod support;
use support::*;

/// The profile's plugin lists: faulty at every point a pod crosses up to
/// binding (Filter and Score batched, Reserve/Unreserve, Permit, PreBind).
const PLUGINS: &str = "    filter: {enabled: [{name: faulty}]}\n    \
     score: {enabled: [{name: faulty}]}\n    \
     reserve: {enabled: [{name: faulty}]}\n    \
     permit: {enabled: [{name: faulty}]}\n    \
     preBind: {enabled: [{name: faulty}]}";

/// berthd's configuration for faulty at `endpoint`.
fn faulty_config(endpoint: &str, timeout: &str, ignorable: bool) -> String {
    config(
        PLUGINS,
        &format!(
            "- name: faulty\n  endpoint: {endpoint}\n  \
             points: [filter, score, reserve, permit, preBind]\n  \
             timeout: {timeout}\n  ignorable: {ignorable}\n  \
             circuitBreaker: {{consecutiveFailures: 0}}"
        ),
    )
}

/// The point faults of one faulty process: each pod named after its fault
/// (the fault's regular expression is `^NAME$`).
const POINT_FAULTS: [(&str, &str, &str); 6] = [
    // (pod, flag, point at which it misbehaves)
    ("hang-reserve", "--hang", "reserve"),
    ("hang-permit", "--hang", "permit"),
    ("error-prebind", "--error", "preBind"),
    ("garbage-filter", "--garbage", "filter"),
    ("garbage-score", "--garbage", "score"),
    ("garbage-reserve", "--garbage", "reserve"),
];

/// The point berthd names and the error it reports for each faulty pod, on
/// three nodes with a 300ms timeout.
fn expected_error(pod: &str) -> (&'static str, &'static str) {
    match pod {
        "hang-reserve" => ("Reserve", "no answer within 300ms"),
        "hang-permit" => ("Permit", "no answer within 300ms"),
        "error-prebind" => (
            "PreBind",
            "extender error: faulty: an error injected at PreBind",
        ),
        "garbage-filter" => (
            "Filter",
            "malformed answer: a verdict for node id 4000000000, which was not asked about",
        ),
        // Filter brings the scores (the profile runs no PreScore of it);
        // scores it cannot use are asked for again with Score.
        "garbage-score" => ("Score", "malformed answer: 4 scores for 3 nodes"),
        "garbage-reserve" => (
            "Reserve",
            "malformed answer: a PostBind answer to a Reserve request",
        ),
        other => panic!("no fault for {other}"),
    }
}

/// Starts faulty with the point faults of [`POINT_FAULTS`].
async fn start_point_faulty() -> Result<Extender> {
    let mut args: Vec<String> = Vec::new();
    for flag in ["--hang", "--error", "--garbage"] {
        let specs: Vec<String> = POINT_FAULTS
            .iter()
            .filter(|(_, f, _)| *f == flag)
            .map(|(pod, _, point)| format!("{point}=^{pod}$"))
            .collect();
        args.push(flag.to_string());
        args.push(specs.join(","));
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    Extender::start("faulty", &args).await
}

/// The pod spec used throughout: 100m of cpu in namespace default.
fn plain(name: &str) -> Value {
    pod("default", name)
}

/// Non-ignorable: every faulty pod fails at its point, with berthd naming
/// the extender, the point and what went wrong (timeout, error answer,
/// rejection of a node that was not asked about, one score too many, an
/// answer of the wrong kind), is retried (a second failure) and stays
/// queued; a pod that failed after Reserve got an Unreserve for each
/// attempt, one that failed at Filter or Score was never reserved; the
/// well-behaved pod binds.
#[tokio::test]
async fn a_non_ignorable_extender_misbehaving_fails_the_attempt_and_unreserves_it() -> Result<()> {
    let faulty = start_point_faulty().await?;
    let cfg = faulty_config(&faulty.endpoint(), "300ms", false);
    let mut s = start("points-strict", &plain_nodes(3), &cfg, &["faulty"]).await?;
    let mut pods: Vec<Value> = POINT_FAULTS.iter().map(|(p, _, _)| plain(p)).collect();
    pods.push(plain("fine"));
    s.apply(&pods).await?;

    s.bound("default", "fine").await?;
    for (name, _, _) in POINT_FAULTS {
        let (point, error) = expected_error(name);
        // Retried: a second attempt failed the same way.
        let failure = s.failed("default", name, 2).await?;
        let want = format!(r#"extender "faulty" failed at {point}: {error}"#);
        assert!(
            failure.contains(&want),
            "{name}: {failure:?} lacks {want:?}"
        );
        let line = extender_line(
            &mut s.berthd,
            "extender failed",
            "faulty",
            point,
            &format!("default/{name}"),
        )
        .await?;
        assert_eq!(field(&line, "error"), error, "{name}");
        let (reason, condition) = s.condition("default", name).await?;
        assert_eq!(reason, "SchedulerError", "{name}");
        assert!(condition.contains(&want), "{name}: {condition}");
    }
    // Failed after Reserve: each of two attempts unreserved (the
    // extender received the Unreserve of every reservation it saw).
    for name in [
        "hang-reserve",
        "hang-permit",
        "error-prebind",
        "garbage-reserve",
    ] {
        faulty
            .wait_until(&format!("two attempts of {name} unreserved"), |l| {
                all_undone_at_some_point(l, &format!("default/{name}"), 2)
            })
            .await?;
    }
    let lines = faulty.lines();
    // Failed before Reserve: never reserved, never reached Permit.
    for name in ["garbage-filter", "garbage-score"] {
        let pod = format!("default/{name}");
        assert!(requests(&lines, "Reserve", &pod).is_empty(), "{name}");
        assert!(requests(&lines, "Unreserve", &pod).is_empty(), "{name}");
    }
    assert!(requests(&lines, "Filter", "default/garbage-score").len() >= 2);
    // Rejected at Reserve: never reached Permit or PreBind.
    for name in ["hang-reserve", "garbage-reserve"] {
        let pod = format!("default/{name}");
        assert!(requests(&lines, "Permit", &pod).is_empty(), "{name}");
        assert!(requests(&lines, "PreBind", &pod).is_empty(), "{name}");
    }
    assert_eq!(requests(&lines, "PreBind", "default/fine").len(), 1);

    let mut names: Vec<(&str, &str)> = POINT_FAULTS
        .iter()
        .map(|(p, _, _)| ("default", *p))
        .collect();
    names.push(("default", "fine"));
    let placed = s.accounting(&names).await?;
    for (name, _, _) in POINT_FAULTS {
        assert_eq!(placed[&format!("default/{name}")], None, "{name}");
    }
    every_rejected_reservation_undone(&faulty, &placed).await?;
    s.stop().await
}

/// Ignorable: the same faults are skipped (logged by berthd with the point
/// and the error) and every pod binds once, with no failure event; the
/// attempt that bound each pod is the one reservation never undone.
#[tokio::test]
async fn an_ignorable_extender_misbehaving_is_skipped_and_every_pod_binds() -> Result<()> {
    let faulty = start_point_faulty().await?;
    let cfg = faulty_config(&faulty.endpoint(), "300ms", true);
    let mut s = start("points-lenient", &plain_nodes(3), &cfg, &["faulty"]).await?;
    let mut pods: Vec<Value> = POINT_FAULTS.iter().map(|(p, _, _)| plain(p)).collect();
    pods.push(plain("fine"));
    s.apply(&pods).await?;

    s.bound("default", "fine").await?;
    for (name, _, _) in POINT_FAULTS {
        s.bound("default", name).await?;
        let (point, error) = expected_error(name);
        let line = extender_line(
            &mut s.berthd,
            "ignorable extender skipped",
            "faulty",
            point,
            &format!("default/{name}"),
        )
        .await?;
        assert_eq!(field(&line, "error"), error, "{name}");
    }
    for (name, _, _) in POINT_FAULTS.iter().chain([&("fine", "", "")]) {
        assert!(
            s.events.of(EventType::Failed, "default", name).is_empty(),
            "{name}"
        );
    }
    let mut names: Vec<(&str, &str)> = POINT_FAULTS
        .iter()
        .map(|(p, _, _)| ("default", *p))
        .collect();
    names.push(("default", "fine"));
    let placed = s.accounting(&names).await?;
    assert!(placed.values().all(Option::is_some), "{placed:?}");
    every_rejected_reservation_undone(&faulty, &placed).await?;
    let lines = faulty.lines();
    for (name, _, _) in POINT_FAULTS {
        // One attempt each: bound the first time, through every point.
        assert_eq!(
            requests(&lines, "Reserve", &format!("default/{name}")).len(),
            1
        );
        assert!(requests(&lines, "Unreserve", &format!("default/{name}")).is_empty());
    }
    s.stop().await
}

/// The reservation id of the pod's Reserve request seen by the extender
/// (its only one so far).
fn only_reservation(ext: &Extender, pod: &str) -> String {
    let r = reservations(&ext.lines(), "Reserve", pod);
    assert_eq!(r.len(), 1, "{pod}: {r:?}");
    r.into_iter().next().unwrap_or_default()
}

/// SIGKILL while berthd waits for the extender's PreBind answer, non
/// ignorable: the attempt fails with "the stream broke", its Unreserve is
/// queued while the extender is down, a pod arriving meanwhile fails with
/// "not connected" and is not lost; the restarted extender (same address)
/// gets the queued Unreserves when berthd reconnects, and both pods then
/// bind, once.
#[tokio::test]
async fn a_non_ignorable_extender_killed_mid_cycle_gets_its_unreserves_after_a_restart()
-> Result<()> {
    // The 30s timeout never expires: the kill ends the call.
    let mut faulty = Extender::start("faulty", &["--hang", "preBind=^slow-"]).await?;
    let cfg = faulty_config(&faulty.endpoint(), "30s", false);
    let mut s = start("kill-strict", &plain_nodes(3), &cfg, &["faulty"]).await?;
    s.apply(&[plain("slow-0")]).await?;
    faulty
        .wait_for(|l| {
            message(l).starts_with("request PreBind ") && field(l, "pod") == "default/slow-0"
        })
        .await?;
    let first = only_reservation(&faulty, "default/slow-0");
    faulty.kill().await?;

    let failure = s.failed("default", "slow-0", 1).await?;
    assert!(
        failure.contains(r#"extender "faulty" failed at PreBind: the stream broke"#),
        "{failure}"
    );
    let queued = berthd_line(&mut s.berthd, |l| {
        message(l) == "extender not connected; Unreserve queued" && field(l, "reservation") == first
    })
    .await?;
    assert_eq!(field(&queued, "extender"), "faulty");

    // While it is down: failed at Filter, kept in the queue.
    s.apply(&[plain("during-0")]).await?;
    let failure = s.failed("default", "during-0", 1).await?;
    assert!(
        failure.contains(r#"extender "faulty" failed at Filter: not connected"#),
        "{failure}"
    );
    let pods = [("default", "slow-0"), ("default", "during-0")];
    let placed = s.accounting(&pods).await?;
    assert!(placed.values().all(Option::is_none), "{placed:?}");

    // Restarted without faults on the same address: reconnected, the
    // queued Unreserve delivered to the new process, both pods bound.
    faulty.restart_with::<&str>(&[]).await?;
    wait_reconnected(&mut s.berthd, "faulty").await?;
    faulty
        .wait_for(|l| {
            l["run"] == 2
                && message(l).starts_with("answered Unreserve ")
                && field(l, "reservation") == first
        })
        .await?;
    s.bound("default", "slow-0").await?;
    s.bound("default", "during-0").await?;
    let placed = s.accounting(&pods).await?;
    assert!(placed.values().all(Option::is_some), "{placed:?}");
    every_rejected_reservation_undone(&faulty, &placed).await?;
    // Bound by the second run: one PreBind answered there per pod.
    let lines = faulty.lines();
    for pod in ["default/slow-0", "default/during-0"] {
        let prebinds: Vec<&Value> = requests(&lines, "PreBind", pod)
            .into_iter()
            .filter(|l| l["run"] == 2)
            .collect();
        assert_eq!(prebinds.len(), 1, "{pod}");
    }
    s.stop().await
}

/// SIGKILL mid-PreBind, ignorable: the call is skipped ("the stream
/// broke") and the pod binds; a pod arriving while it is down binds without
/// reaching it; after a restart berthd reconnects and the next pod goes
/// through the new process. Nothing is unreserved: every attempt bound.
#[tokio::test]
async fn an_ignorable_extender_killed_mid_cycle_is_skipped_and_reconnected() -> Result<()> {
    let mut faulty = Extender::start("faulty", &["--hang", "preBind=^slow-"]).await?;
    let cfg = faulty_config(&faulty.endpoint(), "30s", true);
    let mut s = start("kill-lenient", &plain_nodes(3), &cfg, &["faulty"]).await?;
    s.apply(&[plain("slow-0")]).await?;
    faulty
        .wait_for(|l| {
            message(l).starts_with("request PreBind ") && field(l, "pod") == "default/slow-0"
        })
        .await?;
    faulty.kill().await?;
    s.bound("default", "slow-0").await?;
    // The outage is one line (the calls skipped meanwhile are DEBUG and
    // counted in its summaries), saying pods go on without it.
    let down = berthd_line(&mut s.berthd, |l| {
        message(l).starts_with(r#"extender "faulty" is down: "#)
    })
    .await?;
    assert!(
        message(&down).contains("pods are scheduled without it (ignorable)"),
        "{down}"
    );

    s.apply(&[plain("during-0")]).await?;
    s.bound("default", "during-0").await?;

    faulty.restart_with::<&str>(&[]).await?;
    wait_reconnected(&mut s.berthd, "faulty").await?;
    berthd_line(&mut s.berthd, |l| {
        message(l).starts_with(r#"extender "faulty" is back after "#)
    })
    .await?;
    s.apply(&[plain("after-0")]).await?;
    s.bound("default", "after-0").await?;
    faulty
        .wait_for(|l| {
            l["run"] == 2
                && message(l).starts_with("answered PreBind ")
                && field(l, "pod") == "default/after-0"
        })
        .await?;

    let pods = [
        ("default", "slow-0"),
        ("default", "during-0"),
        ("default", "after-0"),
    ];
    let placed = s.accounting(&pods).await?;
    assert!(placed.values().all(Option::is_some), "{placed:?}");
    for (_, name) in pods {
        assert!(s.events.of(EventType::Failed, "default", name).is_empty());
    }
    let lines = faulty.lines();
    // during-0 never reached it; the others were reserved once, bound,
    // never unreserved.
    assert!(requests(&lines, "Reserve", "default/during-0").is_empty());
    for pod in ["default/slow-0", "default/after-0"] {
        assert_eq!(outstanding(&lines, pod).len(), 1, "{pod}");
        assert!(requests(&lines, "Unreserve", pod).is_empty(), "{pod}");
    }
    s.stop().await
}

/// An Unreserve the extender never acknowledges (it hangs) stays in
/// berthd's outbox: berthd warns, re-sends it on its own while the stream
/// lives, and after a restart sends it on the new stream, where it is
/// acknowledged; the pod, failed at PreBind meanwhile, binds once the
/// extender stops failing it.
#[tokio::test]
async fn an_unacknowledged_unreserve_is_re_sent_until_a_restarted_extender_answers_it() -> Result<()>
{
    let mut faulty = Extender::start(
        "faulty",
        &["--error", "preBind=^doomed-", "--hang", "unreserve"],
    )
    .await?;
    let cfg = faulty_config(&faulty.endpoint(), "300ms", false);
    let mut s = start("unreserve-restart", &plain_nodes(3), &cfg, &["faulty"]).await?;
    s.apply(&[plain("doomed-0")]).await?;
    s.failed("default", "doomed-0", 1).await?;
    faulty
        .wait_for(|l| message(l).starts_with("request Reserve "))
        .await?;
    let first = requests(&faulty.lines(), "Reserve", "default/doomed-0")
        .first()
        .map(|l| field(l, "reservation").to_string())
        .unwrap_or_default();
    let warned = berthd_line(&mut s.berthd, |l| {
        message(l) == "Unreserve not acknowledged; will re-send" && field(l, "reservation") == first
    })
    .await?;
    assert_eq!(field(&warned, "extender"), "faulty");
    // Re-sent on the same stream (the periodic re-send), still unanswered.
    faulty
        .wait_count(2, "Unreserves of the first attempt", |l| {
            message(l).starts_with("request Unreserve ") && field(l, "reservation") == first
        })
        .await?;
    assert_eq!(count(&faulty.lines(), "answered Unreserve "), 0);

    faulty.restart_with::<&str>(&[]).await?;
    wait_reconnected(&mut s.berthd, "faulty").await?;
    faulty
        .wait_for(|l| {
            l["run"] == 2
                && message(l).starts_with("answered Unreserve ")
                && field(l, "reservation") == first
        })
        .await?;
    let node = s.bound("default", "doomed-0").await?;
    let placed = s.accounting(&[("default", "doomed-0")]).await?;
    assert_eq!(placed["default/doomed-0"], Some(node));
    // Every attempt of the first run failed at PreBind; the second run
    // answered the Unreserve of each (at least once: re-sends are allowed).
    let lines = faulty.lines();
    let failed_attempts: BTreeMap<String, usize> = requests(&lines, "Reserve", "default/doomed-0")
        .into_iter()
        .filter(|l| l["run"] == 1)
        .map(|l| {
            let r = field(l, "reservation");
            let answered = lines
                .iter()
                .filter(|l| {
                    l["run"] == 2
                        && message(l).starts_with("answered Unreserve ")
                        && field(l, "reservation") == r
                })
                .count();
            (r.to_string(), answered)
        })
        .collect();
    assert!(failed_attempts.contains_key(&first), "{failed_attempts:?}");
    assert!(
        failed_attempts.values().all(|n| *n >= 1),
        "{failed_attempts:?}"
    );
    every_rejected_reservation_undone(&faulty, &placed).await?;
    s.stop().await
}

/// Issue 13, item 4, through the real berthd: a non-ignorable extender that
/// hangs at Filter costs its timeout for the pods whose calls left before
/// five had failed; then its circuit breaker opens (berthd's one line for
/// the outage says it, with the last error), and the other pods fail at
/// once, saying why, without
/// reaching the extender.
#[tokio::test]
async fn a_hung_extender_opens_its_circuit_breaker_and_later_pods_fail_at_once() -> Result<()> {
    let faulty = Extender::start("faulty", &["--hang", "filter"]).await?;
    let cfg = config(
        "    filter: {enabled: [{name: faulty}]}",
        &format!(
            "- name: faulty\n  endpoint: {}\n  points: [filter]\n  timeout: 300ms\n  \
             circuitBreaker: {{consecutiveFailures: 5, coolDown: 1m}}",
            faulty.endpoint()
        ),
    );
    let mut s = start("breaker", &plain_nodes(3), &cfg, &["faulty"]).await?;
    let names: Vec<String> = (0..20).map(|i| format!("p{i:02}")).collect();
    let pods: Vec<Value> = names.iter().map(|n| plain(n)).collect();
    s.apply(&pods).await?;
    let mut timed_out = 0;
    let mut refused = 0;
    for name in &names {
        let failure = s.failed("default", name, 1).await?;
        if failure.contains(r#"extender "faulty" failed at Filter: no answer within 300ms"#) {
            timed_out += 1;
        } else if failure
            .contains(r#"extender "faulty" failed at Filter: circuit breaker open after "#)
            && failure.contains(
                " failed calls in a row (the last: no answer within 300ms); calls fail at once for",
            )
        {
            refused += 1;
        } else {
            anyhow::bail!("{name}: {failure}");
        }
    }
    // Five calls opened it; twelve more had left before and were waited
    // out: the Filters of the next sixteen pods, sent at once while the
    // first waited (the look-ahead, after an idle queue), before the fifth
    // failure was known.
    assert_eq!((timed_out, refused), (17, 3));
    // The outage's one line says so, with what the breaker does.
    let opened = berthd_line(&mut s.berthd, |l| {
        message(l).starts_with(r#"extender "faulty" is down: 5 calls in a row failed, the last: no answer within 300ms; its circuit breaker is open: calls fail at once for 1m0s, then one call probes it"#)
    })
    .await?;
    assert_eq!(field(&opened, "subject"), r#"extender "faulty""#);
    let lines = faulty.lines();
    let filters = lines
        .iter()
        .filter(|l| message(l).starts_with("request Filter "))
        .count();
    assert_eq!(filters, 17, "only the calls before it opened reached it");
    s.stop().await
}
