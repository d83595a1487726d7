//! Preemption asks every Filter (issue 35): the remote extender takes part
//! in the what-if, once per attempt with every candidate, as its Hello
//! allows; its failures follow its rules.
//!
//! The scene: `n1` is full of a pod of low priority and, as far as the
//! extender can tell, has no free widget; `n2` runs only pods of higher
//! priority than the preemptor. Only `n1` is a candidate by berthd's own
//! plugins.

use super::*;
use crate::cluster::ClusterSource;
use crate::scheduler::PluginNote;

/// The extender at Filter only, with `extra` configuration.
fn filter_only(endpoint: &str, extra: &str) -> String {
    format!(
        "apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: default-scheduler
  plugins:
    filter: {{enabled: [{{name: widgets}}]}}
berthExtenders:
- name: widgets
  endpoint: {endpoint}
  points: [filter]
  timeout: 1s
{extra}"
    )
}

fn nodes() -> Vec<NodeBuilder> {
    vec![
        make_node("n1").cpu("2").memory("8Gi"),
        make_node("n2").cpu("2").memory("8Gi"),
    ]
}

/// `low` (priority 1) fills n1; `high` (priority 100) fills n2.
fn bound() -> Vec<PodBuilder> {
    vec![
        make_pod("low").node("n1").req_cpu("2").priority(1),
        make_pod("high").node("n2").req_cpu("2").priority(100),
    ]
}

fn preemptor() -> crate::model::PodInfo {
    make_pod("p").req_cpu("2").priority(10).build()
}

/// The extender rejects n1 at Filter (its cycle verdict), and answers the
/// what-if with `what_if`.
fn scripted(what_if: &[(&'static str, WhatIf)], preemption_filter: bool) -> Fake {
    let fake = Fake::default();
    *fake.script.lock() = Script {
        points: vec![pb::ExtensionPoint::Filter],
        reject: vec!["n1"],
        preemption_filter,
        what_if: what_if.iter().cloned().collect(),
        ..Default::default()
    };
    fake
}

/// Starts the scheduler with the extender and the bound pods, once its
/// cache holds them.
async fn started(yaml: &str, pods: Vec<PodBuilder>) -> Env {
    let n = pods.len();
    let env = start(yaml, nodes(), pods).await;
    while env.scheduler.cache_sizes().1 < n {
        tokio::task::yield_now().await;
    }
    env
}

fn requests(fake: &Fake, kind: &str) -> Vec<String> {
    fake.log
        .lock()
        .iter()
        .filter(|l| l.starts_with(kind))
        .cloned()
        .collect()
}

fn victims(r: &crate::scheduler::DryRunReport) -> Vec<String> {
    r.preemption
        .as_ref()
        .map(|p| p.victims.iter().map(|v| v.name.to_string()).collect())
        .unwrap_or_default()
}

fn nominated(r: &crate::scheduler::DryRunReport) -> Option<String> {
    r.preemption
        .as_ref()
        .and_then(|p| p.nominated_node.as_deref().map(str::to_string))
}

#[tokio::test]
async fn a_node_the_extender_still_rejects_without_its_victims_is_no_candidate() {
    let fake = scripted(&[("n1", WhatIf::Reject)], true);
    let (endpoint, _stop) = serve(fake.clone()).await;
    let mut env = started(&filter_only(&endpoint, ""), bound()).await;
    let r = env
        .scheduler
        .dry_run(preemptor(), None, false)
        .await
        .unwrap();
    assert_eq!(victims(&r), Vec::<String>::new());
    assert_eq!(nominated(&r), None);
    assert!(r.is_complete(), "{:?}", r.incomplete);
    let message = &r.preemption.as_ref().unwrap().message;
    assert_eq!(
        message,
        "no new claims to deallocate, preemption: 0/2 nodes are available: 1 No preemption victims found for incoming pod, 1 node(s) had no free widget."
    );
    // One what-if, with the one candidate and its victim, asked as a dry
    // run.
    assert_eq!(
        requests(&fake, "PreemptionFilter"),
        ["PreemptionFilter dry-run n1[low*]"]
    );

    // The scheduler's own attempt: nobody is evicted or nominated.
    env.cluster
        .apply_pod(make_pod("p").req_cpu("2").priority(10).object())
        .unwrap();
    let d = env.next().await;
    let m = failed_message(d);
    assert!(m.ends_with("1 node(s) had no free widget."), "{m}");
    assert_eq!(requests(&fake, "PreemptionFilter").len(), 2);
    assert_eq!(
        requests(&fake, "PreemptionFilter")[1],
        "PreemptionFilter n1[low*]"
    );
    let pods: Vec<String> = env
        .cluster
        .pods()
        .iter()
        .map(|p| p.metadata.name.clone().unwrap_or_default())
        .collect();
    assert!(pods.contains(&"low".to_string()), "{pods:?}");
    let p = env.cluster.get_pod("default", "p").unwrap();
    assert_eq!(
        p.status
            .as_ref()
            .and_then(|s| s.nominated_node_name.clone()),
        None
    );
}

#[tokio::test]
async fn a_node_the_extender_allows_once_the_victim_is_gone_is_chosen_with_it() {
    let fake = scripted(&[], true);
    let (endpoint, _stop) = serve(fake.clone()).await;
    let env = started(&filter_only(&endpoint, ""), bound()).await;
    let r = env
        .scheduler
        .dry_run(preemptor(), None, false)
        .await
        .unwrap();
    assert_eq!(victims(&r), ["low"]);
    assert_eq!(nominated(&r).as_deref(), Some("n1"));
    assert_eq!(
        r.preemption.as_ref().unwrap().message,
        "preemption: found a potential placement for pod on node n1, preempting 1 victims"
    );
}

/// Two pods of low priority on n1, each taking half of it: berthd's own
/// plugins would evict the less important one, the extender needs the
/// other gone (it holds the widget): that one is evicted instead, and the
/// first is spared.
#[tokio::test]
async fn pods_the_extender_needs_gone_are_evicted_and_the_others_reprieved() {
    let fake = scripted(&[("n1", WhatIf::Needs(vec!["widget-holder"]))], true);
    let (endpoint, _stop) = serve(fake.clone()).await;
    let bound = vec![
        make_pod("widget-holder")
            .node("n1")
            .req_cpu("1")
            .priority(2),
        make_pod("other").node("n1").req_cpu("1").priority(1),
        make_pod("high").node("n2").req_cpu("2").priority(100),
    ];
    let env = started(&filter_only(&endpoint, ""), bound).await;
    let pod = make_pod("p").req_cpu("1").priority(10).build();
    let r = env.scheduler.dry_run(pod, None, false).await.unwrap();
    assert_eq!(victims(&r), ["widget-holder"]);
    assert_eq!(nominated(&r).as_deref(), Some("n1"));
    // The most important first; berthd's own victim marked.
    assert_eq!(
        requests(&fake, "PreemptionFilter"),
        ["PreemptionFilter dry-run n1[widget-holder,other*]"]
    );
}

/// An extender that does not declare the what-if (written before it) is
/// asked a plain Filter about the candidates as they are: it rejects n1
/// with its victim still there, so no pod is evicted for it.
#[tokio::test]
async fn an_extender_without_the_what_if_is_asked_about_the_nodes_as_they_are() {
    let fake = scripted(&[], false);
    let (endpoint, _stop) = serve(fake.clone()).await;
    let env = started(&filter_only(&endpoint, ""), bound()).await;
    let r = env
        .scheduler
        .dry_run(preemptor(), None, false)
        .await
        .unwrap();
    assert_eq!(victims(&r), Vec::<String>::new());
    assert_eq!(nominated(&r), None);
    assert_eq!(requests(&fake, "PreemptionFilter"), Vec::<String>::new());
    // The cycle's Filter, then the what-if's, about n1 alone.
    let filters = requests(&fake, "Filter");
    assert_eq!(
        filters.last().map(String::as_str),
        Some("Filter n1"),
        "{filters:?}"
    );
}

/// An extender whose Filter ignores the pods: the cycle's verdicts are
/// reused, nothing more is asked.
#[tokio::test]
async fn an_extender_whose_filter_ignores_pods_is_not_asked_again() {
    let fake = scripted(&[], false);
    fake.script.lock().filter_ignores_pods = true;
    let (endpoint, _stop) = serve(fake.clone()).await;
    let mut env = started(&filter_only(&endpoint, ""), bound()).await;
    env.cluster
        .apply_pod(make_pod("p").req_cpu("2").priority(10).object())
        .unwrap();
    let m = failed_message(env.next().await);
    assert!(m.ends_with("1 node(s) didn't have a free widget."), "{m}");
    // The cycle's one Filter call (n1 and n2 sent ahead) and nothing for
    // preemption.
    assert_eq!(fake.received("Filter"), 1, "{:?}", fake.log.lock());
    assert_eq!(fake.received("PreemptionFilter"), 0);
}

/// A non-ignorable extender that cannot answer the what-if leaves every
/// candidate out, and a dry run says its answer is incomplete; an
/// ignorable one is skipped (its candidates need nothing more).
#[tokio::test(start_paused = true)]
async fn an_extender_failing_the_what_if_leaves_its_candidates_out_unless_ignorable() {
    for ignorable in [false, true] {
        let fake = scripted(&[], true);
        fake.script.lock().hang = vec!["PreemptionFilter"];
        let endpoint = in_memory::serve(fake.clone());
        let extra = if ignorable { "  ignorable: true\n" } else { "" };
        let env = started(&filter_only(&endpoint, extra), bound()).await;
        let r = env
            .scheduler
            .dry_run(preemptor(), None, false)
            .await
            .unwrap();
        if ignorable {
            assert_eq!(victims(&r), ["low"]);
            assert!(r.is_complete());
            assert_eq!(r.skipped.len(), 1, "{:?}", r.skipped);
            assert_eq!(r.skipped[0].point, "PreemptionFilter");
            continue;
        }
        assert_eq!(victims(&r), Vec::<String>::new());
        assert_eq!(nominated(&r), None);
        assert_eq!(
            r.incomplete,
            [PluginNote {
                plugin: "widgets",
                point: "PostFilter",
                reason: "preemption's PreemptionFilter: no answer within 1s".into(),
                nodes: 0,
                pods: 0,
            }]
        );
        let message = &r.preemption.as_ref().unwrap().message;
        assert!(
            message.contains(
                "1 running \"widgets\" filter plugin: extender \"widgets\" failed at PreemptionFilter: no answer within 1s"
            ),
            "{message}"
        );
    }
}

/// The cycle's verdicts come from the Filter answer about the whole window
/// sent: here n2 fits berthd's own plugins and the extender rejects it, n1
/// is full; preemption on n1 reads the extender's verdict on n1 from that
/// same answer, and asks nothing more.
#[tokio::test]
async fn the_cycles_answer_about_the_window_is_reused_for_a_pod_independent_extender() {
    let fake = Fake::default();
    *fake.script.lock() = Script {
        points: vec![pb::ExtensionPoint::Filter],
        reject: vec!["n2"],
        filter_ignores_pods: true,
        preemption_filter: true,
        ..Default::default()
    };
    let (endpoint, _stop) = serve(fake.clone()).await;
    let bound = vec![make_pod("low").node("n1").req_cpu("2").priority(1)];
    let mut env = started(&filter_only(&endpoint, ""), bound).await;
    env.cluster
        .apply_pod(make_pod("p").req_cpu("2").priority(10).object())
        .unwrap();
    let m = failed_message(env.next().await);
    assert!(
        m.ends_with("preempting 1 victims"),
        "the victim on n1 is chosen: {m}"
    );
    assert_eq!(fake.received("Filter"), 1, "{:?}", fake.log.lock());
    assert_eq!(fake.received("PreemptionFilter"), 0);
}

/// The cycle's Filter call that no node left needs is cancelled at once
/// for an extender whose verdicts depend on the pods: preemption asks its
/// what-if instead and never waits for that call (here the extender never
/// answers it; waiting would take the 1s timeout and report a failure).
#[tokio::test(start_paused = true)]
async fn an_unneeded_cycle_call_of_a_pod_dependent_extender_is_cancelled_not_awaited() {
    let fake = scripted(&[], true);
    fake.script.lock().hang = vec!["Filter"];
    let endpoint = in_memory::serve(fake.clone());
    let mut env = started(&filter_only(&endpoint, ""), bound()).await;
    let t = tokio::time::Instant::now();
    env.cluster
        .apply_pod(make_pod("p").req_cpu("2").priority(10).object())
        .unwrap();
    let m = failed_message(env.next().await);
    assert!(
        m.ends_with("preempting 1 victims"),
        "the victim on n1 is chosen: {m}"
    );
    assert!(
        t.elapsed() < Duration::from_secs(1),
        "preemption waited for the cycle's call: {:?}",
        t.elapsed()
    );
    let log = fake.log.lock().clone();
    let cancel = log.iter().position(|l| l == "cancel");
    let what_if = log.iter().position(|l| l.starts_with("PreemptionFilter"));
    assert!(
        cancel.is_some() && cancel < what_if,
        "the Filter call is cancelled before the what-if: {log:?}"
    );
    assert_eq!(fake.received("Filter"), 1, "{log:?}");
    assert_eq!(fake.received("PreemptionFilter"), 1, "{log:?}");
}
