//! Dry runs and simulations with extenders (issue 28): a node an extender
//! could not judge is never called feasible; the answer says it is
//! incomplete and why; an ignorable extender that was skipped is named.

use super::*;
use crate::framework::FilterVerdict;
use crate::scheduler::{PluginNote, Verdict};

/// The extender at Filter and Score only, so that a dry run reaches Filter.
fn filter_and_score(endpoint: &str, extra: &str) -> String {
    format!(
        "apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: default-scheduler
  plugins:
    filter: {{enabled: [{{name: widgets}}]}}
    score: {{enabled: [{{name: widgets, weight: 1}}]}}
berthExtenders:
- name: widgets
  endpoint: {endpoint}
  points: [filter, score]
  timeout: 10s
{extra}"
    )
}

/// n1 is too small for the pod (NodeResourcesFit rejects it), n2 and n3
/// are left to the extender.
fn nodes() -> Vec<NodeBuilder> {
    vec![
        make_node("n1").cpu("1").memory("8Gi"),
        make_node("n2").cpu("4").memory("8Gi"),
        make_node("n3").cpu("4").memory("8Gi"),
    ]
}

fn verdicts(r: &crate::scheduler::DryRunReport) -> Vec<(&str, Verdict)> {
    r.nodes.iter().map(|n| (&*n.name, n.verdict)).collect()
}

fn widgets_verdict<'a>(r: &'a crate::scheduler::DryRunReport, node: &str) -> &'a FilterVerdict {
    let n = r.nodes.iter().find(|n| &*n.name == node).unwrap();
    &n.filters.iter().find(|(p, _)| *p == "widgets").unwrap().1
}

/// What a cycle says when the extender is down (the connection may add
/// whether it is still dialing for the first time).
const DOWN: &str =
    "running \"widgets\" filter plugin: extender \"widgets\" failed at Filter: not connected";

/// `notes` without their reasons (checked apart: they vary in their tail).
fn bare(notes: &[PluginNote]) -> Vec<PluginNote> {
    notes
        .iter()
        .map(|n| PluginNote {
            reason: String::new(),
            ..n.clone()
        })
        .collect()
}

#[tokio::test]
async fn a_dry_run_never_calls_feasible_a_node_a_down_extender_did_not_judge() {
    let env = start(
        &filter_and_score("http://127.0.0.1:1", "  startupTimeout: 0s\n"),
        nodes(),
        vec![],
    )
    .await;
    let pod = make_pod("web").req_cpu("2").build();
    for all_nodes in [false, true] {
        let r = env
            .scheduler
            .dry_run(pod.clone(), None, all_nodes)
            .await
            .unwrap();
        assert_eq!(
            verdicts(&r),
            [
                ("n1", Verdict::Unresolvable),
                ("n2", Verdict::Unknown),
                ("n3", Verdict::Unknown)
            ],
            "all_nodes {all_nodes}"
        );
        assert_eq!(r.selected, None);
        assert_eq!(r.feasible, 0);
        assert!(!r.is_complete());
        assert_eq!(
            bare(&r.incomplete),
            [PluginNote {
                plugin: "widgets",
                point: "Filter",
                reason: String::new(),
                nodes: 2,
                pods: 0,
            }]
        );
        assert!(r.incomplete[0].reason.starts_with(DOWN), "{r:?}");
        assert!(r.message.starts_with(DOWN), "{}", r.message);
        let n2 = r.nodes.iter().find(|n| &*n.name == "n2").unwrap();
        assert!(n2.reason.starts_with(DOWN), "{}", n2.reason);
        assert!(
            matches!(widgets_verdict(&r, "n2"), FilterVerdict::Unknown(s) if s.message() == n2.reason)
        );
        assert_eq!(r.preemption.as_ref().map(|p| p.victims.len()), None);
        assert!(r.skipped.is_empty());
    }

    // A simulation: no pod is placed, none is said not to fit.
    let report = env
        .scheduler
        .simulate(vec![pod.clone(), make_pod("web-2").build()], None)
        .await
        .unwrap();
    assert!(report.pods.iter().all(|p| p.unknown && p.node.is_none()));
    assert_eq!(
        bare(&report.incomplete),
        [PluginNote {
            plugin: "widgets",
            point: "Filter",
            reason: String::new(),
            nodes: 0,
            pods: 2,
        }]
    );
    assert!(report.incomplete[0].reason.starts_with("not connected"));
}

#[tokio::test]
async fn an_ignorable_extender_skipped_in_a_dry_run_is_named() {
    let env = start(
        &filter_and_score(
            "http://127.0.0.1:1",
            "  startupTimeout: 0s\n  ignorable: true\n",
        ),
        nodes(),
        vec![],
    )
    .await;
    let r = env
        .scheduler
        .dry_run(make_pod("web").req_cpu("2").build(), None, false)
        .await
        .unwrap();
    assert!(r.is_complete(), "{:?}", r.incomplete);
    assert_eq!(
        verdicts(&r),
        [
            ("n1", Verdict::Unresolvable),
            ("n2", Verdict::Feasible),
            ("n3", Verdict::Feasible)
        ]
    );
    assert!(r.selected.is_some());
    assert!(
        matches!(widgets_verdict(&r, "n2"), FilterVerdict::Ignored(why) if why.starts_with("not connected"))
    );
    assert_eq!(
        bare(&r.skipped),
        [
            PluginNote {
                plugin: "widgets",
                point: "Filter",
                reason: String::new(),
                nodes: 2,
                pods: 0,
            },
            PluginNote {
                plugin: "widgets",
                point: "Score",
                reason: String::new(),
                nodes: 0,
                pods: 0,
            }
        ]
    );
    assert!(
        r.skipped
            .iter()
            .all(|n| n.reason.starts_with("not connected"))
    );
    let report = env
        .scheduler
        .simulate(vec![make_pod("a").build(), make_pod("b").build()], None)
        .await
        .unwrap();
    assert!(report.incomplete.is_empty());
    assert!(report.pods.iter().all(|p| p.node.is_some()));
    assert_eq!(report.skipped.len(), 2);
    assert!(report.skipped.iter().all(|n| n.pods == 2));
}

#[tokio::test]
async fn a_dry_run_with_the_extender_up_is_complete_and_keeps_its_rejections() {
    let fake = Fake::default();
    *fake.script.lock() = Script {
        points: vec![pb::ExtensionPoint::Filter, pb::ExtensionPoint::Score],
        reject: vec!["n2"],
        ..Default::default()
    };
    let (endpoint, _stop) = serve(fake.clone()).await;
    let env = start(&filter_and_score(&endpoint, ""), nodes(), vec![]).await;
    let r = env
        .scheduler
        .dry_run(make_pod("web").req_cpu("2").build(), None, false)
        .await
        .unwrap();
    assert!(r.is_complete());
    assert!(r.skipped.is_empty());
    assert_eq!(
        verdicts(&r),
        [
            ("n1", Verdict::Unresolvable),
            ("n2", Verdict::Unschedulable),
            ("n3", Verdict::Feasible)
        ]
    );
    assert_eq!(r.selected.as_deref(), Some("n3"));
}

#[tokio::test]
async fn a_dry_run_tells_the_extender_its_post_filter_is_a_what_if() {
    let fake = Fake::default();
    *fake.script.lock() = Script {
        points: vec![pb::ExtensionPoint::Filter, pb::ExtensionPoint::PostFilter],
        reject: vec!["n2", "n3"],
        ..Default::default()
    };
    let (endpoint, _stop) = serve(fake.clone()).await;
    let yaml = format!(
        "apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: default-scheduler
  plugins:
    filter: {{enabled: [{{name: widgets}}]}}
    postFilter: {{enabled: [{{name: widgets}}]}}
berthExtenders:
- name: widgets
  endpoint: {endpoint}
  points: [filter, postFilter]
  timeout: 10s
"
    );
    let env = start(&yaml, nodes(), vec![]).await;
    let r = env
        .scheduler
        .dry_run(make_pod("web").req_cpu("2").build(), None, false)
        .await
        .unwrap();
    assert_eq!(r.selected, None);
    // The extender was asked what it would do, told it is a dry run (an
    // extender that evicts must not).
    assert!(
        fake.log.lock().iter().any(|l| l == "PostFilter dry-run"),
        "{:?}",
        fake.log.lock()
    );
}
