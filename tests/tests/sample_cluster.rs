//! berthd on its built-in sample cluster: every schedulable pod is bound,
//! no node is overcommitted, and each pod that cannot fit stays pending with
//! the reason the sample annotates it with.

use std::collections::{BTreeMap, BTreeSet};

use anyhow::Result;
use berth_e2e::{Berthd, workspace_root};
use serde_json::Value;

/// Milli-units of a quantity as the sample writes them (`250m`, `4`,
/// `512Mi`, `2Gi`), computed independently of berth's own parser.
fn milli(q: &str) -> i128 {
    let units = [
        ("Ki", 1i128 << 10),
        ("Mi", 1 << 20),
        ("Gi", 1 << 30),
        ("Ti", 1 << 40),
    ];
    for (suffix, mult) in units {
        if let Some(n) = q.strip_suffix(suffix) {
            return n.parse::<i128>().unwrap() * mult * 1000;
        }
    }
    if let Some(n) = q.strip_suffix('m') {
        return n.parse().unwrap();
    }
    q.parse::<i128>().unwrap() * 1000
}

fn sample() -> Vec<Value> {
    let text =
        std::fs::read_to_string(workspace_root().join("server/sample/cluster.yaml")).unwrap();
    serde_yaml::Deserializer::from_str(&text)
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .filter(|v: &Value| !v.is_null())
        .collect()
}

fn key(p: &Value) -> String {
    format!(
        "{}/{}",
        p["metadata"]["namespace"].as_str().unwrap_or("default"),
        p["metadata"]["name"].as_str().unwrap()
    )
}

#[tokio::test]
async fn schedules_the_sample_cluster() -> Result<()> {
    let mut berthd = Berthd::start(&["--seed", "7"]).await?;
    let idle = berthd.wait_idle().await?;
    let mut client = berthd.client().await?;
    assert!(client.health("berth.v1.Scheduler").await?);

    let expected = sample();
    let expect_pending: BTreeMap<String, String> = expected
        .iter()
        .filter_map(|o| {
            Some((
                key(o),
                o["metadata"]["annotations"]["berth.dev/expect-pending"]
                    .as_str()?
                    .to_string(),
            ))
        })
        .collect();
    let untouched: BTreeSet<String> = expected
        .iter()
        .filter(|o| o["metadata"]["annotations"]["berth.dev/expect-untouched"].is_string())
        .map(key)
        .collect();
    assert!(
        expect_pending.len() >= 5 && untouched.len() == 1,
        "the sample annotates its pending pods"
    );

    let pods = client.list("Pod", "").await?;
    let nodes = client.list("Node", "").await?;
    assert_eq!(
        pods.len(),
        expected.iter().filter(|o| o["kind"] == "Pod").count()
    );
    assert_eq!(idle["fields"]["pending"], expect_pending.len() as u64);

    // Every pod berth is responsible for and that can fit is bound.
    let mut bound = 0;
    for p in &pods {
        let k = key(p);
        let node = p["spec"]["nodeName"].as_str();
        if expect_pending.contains_key(&k) || untouched.contains(&k) {
            assert!(node.is_none(), "{k} should not be bound, is on {node:?}");
        } else {
            assert!(node.is_some(), "{k} should be bound");
            bound += 1;
        }
    }
    assert!(bound > 250, "{bound} pods bound");

    // No node's allocatable is exceeded, for any resource a pod requests.
    let mut used: BTreeMap<(String, String), i128> = BTreeMap::new();
    for p in pods.iter().filter(|p| p["spec"]["nodeName"].is_string()) {
        let node = p["spec"]["nodeName"].as_str().unwrap().to_string();
        *used.entry((node.clone(), "pods".into())).or_default() += 1000;
        for c in p["spec"]["containers"].as_array().unwrap() {
            for (res, q) in c["resources"]["requests"].as_object().into_iter().flatten() {
                *used.entry((node.clone(), res.clone())).or_default() += milli(q.as_str().unwrap());
            }
        }
    }
    for n in &nodes {
        let name = n["metadata"]["name"].as_str().unwrap();
        for ((node, res), amount) in used.iter().filter(|((node, _), _)| node == name) {
            let alloc = n["status"]["allocatable"][res]
                .as_str()
                .map(milli)
                .unwrap_or(0);
            assert!(
                *amount <= alloc,
                "{node}: {res} requested {amount} of {alloc} (milli)"
            );
        }
    }

    // Every bound pod with claims has them made (templates), allocated on
    // its node and reserved for it; finetune's two A100s share a NUMA node.
    let claims = client.list("ResourceClaim", "").await?;
    let mut with_claims = 0;
    for p in pods.iter().filter(|p| p["spec"]["nodeName"].is_string()) {
        let Some(statuses) = p["status"]["resourceClaimStatuses"].as_array() else {
            continue;
        };
        with_claims += 1;
        let k = key(p);
        for st in statuses {
            let name = st["resourceClaimName"].as_str().unwrap();
            let c = claims
                .iter()
                .find(|c| c["metadata"]["name"] == name)
                .unwrap_or_else(|| panic!("{k}: claim {name} missing"));
            let alloc = &c["status"]["allocation"];
            assert_eq!(
                alloc["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0]["values"][0],
                p["spec"]["nodeName"],
                "{k}: {name}"
            );
            assert_eq!(
                c["status"]["reservedFor"][0]["uid"], p["metadata"]["uid"],
                "{k}"
            );
            if k == "ml/finetune" {
                let devices: Vec<&str> = alloc["devices"]["results"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|r| r["device"].as_str().unwrap())
                    .collect();
                assert!(
                    devices == ["gpu-0", "gpu-1"] || devices == ["gpu-2", "gpu-3"],
                    "{devices:?}"
                );
            }
        }
    }
    assert_eq!(with_claims, 5, "finetune and four infer pods");

    // Each pending pod waits with its expected reason, in the queue and in
    // its PodScheduled condition.
    let queue = client.get_queue("").await?;
    let queued: BTreeMap<String, &berth_client::QueuedPod> = queue
        .iter()
        .map(|q| (format!("{}/{}", q.namespace, q.name), q))
        .collect();
    assert_eq!(
        queued.keys().cloned().collect::<BTreeSet<_>>(),
        expect_pending.keys().cloned().collect()
    );
    for (k, phrase) in &expect_pending {
        let q = queued[k];
        assert!(
            q.last_failure.contains(phrase.as_str()),
            "{k}: {:?} lacks {phrase:?}",
            q.last_failure
        );
        let pod = pods.iter().find(|p| &key(p) == k).unwrap();
        let cond = pod["status"]["conditions"]
            .as_array()
            .and_then(|c| c.iter().find(|c| c["type"] == "PodScheduled"))
            .unwrap_or_else(|| panic!("{k} has no PodScheduled condition"));
        assert_eq!(cond["status"], "False", "{k}");
        if q.queue == berth_client::QueueName::Gated as i32 {
            assert_eq!(cond["reason"], "SchedulingGated", "{k}");
        } else {
            assert_eq!(cond["reason"], "Unschedulable", "{k}");
            let msg = cond["message"].as_str().unwrap();
            assert!(
                msg.starts_with("0/42 nodes are available: ") && msg.contains(phrase.as_str()),
                "{k}: {msg}"
            );
        }
    }

    // Another scheduler's pod is left alone: unbound, no condition written.
    for k in &untouched {
        let pod = pods.iter().find(|p| &key(p) == k).unwrap();
        assert!(
            pod["status"]["conditions"].is_null(),
            "{k} was touched: {}",
            pod["status"]
        );
    }

    // The placement rules the sample's workloads carry hold.
    let node_of = |n: &str| {
        nodes
            .iter()
            .find(|x| x["metadata"]["name"] == n)
            .unwrap_or_else(|| panic!("node {n}"))
    };
    let mut web_zones: BTreeMap<String, usize> = BTreeMap::new();
    for n in &nodes {
        let zone = n["metadata"]["labels"]["topology.kubernetes.io/zone"]
            .as_str()
            .unwrap();
        web_zones.entry(zone.to_string()).or_default();
    }
    for p in pods.iter().filter(|p| p["spec"]["nodeName"].is_string()) {
        let k = key(p);
        let node = node_of(p["spec"]["nodeName"].as_str().unwrap());
        let labels = &node["metadata"]["labels"];
        // No pod sits on a NoSchedule taint it does not tolerate (pods
        // created with spec.nodeName bypass the scheduler and are skipped).
        let was_bound = expected
            .iter()
            .any(|o| key(o) == k && o["spec"]["nodeName"].is_string());
        if !was_bound {
            for t in node["spec"]["taints"].as_array().into_iter().flatten() {
                let tolerated = p["spec"]["tolerations"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|tol| {
                        tol["operator"] == "Exists"
                            && (tol["key"].is_null() || tol["key"] == t["key"])
                    });
                assert!(tolerated, "{k} on a node tainted {t}");
            }
        }
        match p["metadata"]["labels"]["app"].as_str() {
            Some("web") => {
                let zone = labels["topology.kubernetes.io/zone"].as_str().unwrap();
                *web_zones.get_mut(zone).unwrap() += 1;
            }
            Some("cache") => {
                let t = labels["node.kubernetes.io/instance-type"].as_str();
                assert!(
                    matches!(t, Some("m5.2xlarge" | "m5.4xlarge")),
                    "{k} on {t:?}"
                );
            }
            _ => {}
        }
    }
    let (min, max) = (
        web_zones.values().min().unwrap(),
        web_zones.values().max().unwrap(),
    );
    assert!(
        max - min <= 1 && web_zones.values().sum::<usize>() == 40,
        "web spread: {web_zones:?}"
    );

    // One log line per decision: each bound pod's "scheduled" line.
    let scheduled_lines = berthd
        .seen
        .iter()
        .filter(|l| berth_e2e::message(l) == "scheduled")
        .count();
    assert_eq!(
        scheduled_lines,
        bound - 82,
        "82 pods were running before berthd started"
    );

    let status = berthd.stop().await?;
    assert!(status.success(), "berthd exit: {status}");
    Ok(())
}

/// The sample's training job (issue 26 item 7): two PodGroup gangs in
/// `ml`, `train-resnet` (minCount 4, four pods) and `train-bert` (minCount
/// 4, three pods so far). `key`s of their pods, by group.
fn sample_gangs() -> BTreeMap<String, Vec<String>> {
    let mut gangs: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for o in sample().iter().filter(|o| o["kind"] == "Pod") {
        if let Some(g) = o["spec"]["schedulingGroup"]["podGroupName"].as_str() {
            gangs.entry(g.to_string()).or_default().push(key(o));
        }
    }
    gangs
}

/// With the GenericWorkload gate off (berthd's default), the sample's
/// PodGroups are kept but not acted on: their pods are scheduled as plain
/// pods, every one bound, and no PodGroup status is written (upstream with
/// the gate off).
#[tokio::test]
async fn the_sample_gangs_are_plain_pods_with_the_gate_off() -> Result<()> {
    let gangs = sample_gangs();
    assert_eq!(
        gangs
            .iter()
            .map(|(g, p)| (g.as_str(), p.len()))
            .collect::<Vec<_>>(),
        [("train-bert", 3), ("train-resnet", 4)]
    );
    let mut berthd = Berthd::start(&["--seed", "7"]).await?;
    berthd.wait_idle().await?;
    let mut client = berthd.client().await?;
    for k in gangs.values().flatten() {
        let name = k.strip_prefix("ml/").unwrap();
        let pod = client.get("pods", "ml", name).await?;
        assert!(pod["spec"]["nodeName"].is_string(), "{k} not bound: {pod}");
    }
    for g in gangs.keys() {
        let pg = client.get("podgroups", "ml", g).await?;
        assert!(pg["status"]["conditions"].is_null(), "{g}: {pg}");
    }
    let status = berthd.stop().await?;
    assert!(status.success(), "berthd exit: {status}");
    Ok(())
}

/// With `--feature-gates=GenericWorkload=true` the sample's complete gang
/// binds, all four pods; the gang short of its last pod leaves its three
/// waiting with upstream's message (nothing written on it) until the
/// fourth arrives, then all four bind.
#[tokio::test]
async fn the_sample_gangs_with_generic_workload() -> Result<()> {
    let gangs = sample_gangs();
    let mut berthd =
        Berthd::start(&["--seed", "7", "--feature-gates", "GenericWorkload=true"]).await?;
    let idle = berthd.wait_idle().await?;
    let mut client = berthd.client().await?;

    let waiting: BTreeMap<String, String> = sample()
        .iter()
        .filter_map(|o| {
            Some((
                key(o),
                o["metadata"]["annotations"]["berth.dev/expect-pending-generic-workload"]
                    .as_str()?
                    .to_string(),
            ))
        })
        .collect();
    assert_eq!(
        waiting.keys().collect::<Vec<_>>(),
        gangs["train-bert"].iter().collect::<Vec<_>>()
    );
    let expect_pending = sample()
        .iter()
        .filter(|o| o["metadata"]["annotations"]["berth.dev/expect-pending"].is_string())
        .count();
    assert_eq!(
        idle["fields"]["pending"],
        (expect_pending + waiting.len()) as u64
    );

    for k in &gangs["train-resnet"] {
        let pod = client
            .get("pods", "ml", k.strip_prefix("ml/").unwrap())
            .await?;
        assert!(pod["spec"]["nodeName"].is_string(), "{k} not bound: {pod}");
    }
    let pg = client.get("podgroups", "ml", "train-resnet").await?;
    let cond = &pg["status"]["conditions"][0];
    assert!(
        cond["type"] == "PodGroupInitiallyScheduled"
            && cond["status"] == "True"
            && cond["reason"] == "Scheduled",
        "{pg}"
    );

    let queue = client.get_queue("ml").await?;
    for (k, phrase) in &waiting {
        let q = queue
            .iter()
            .find(|q| &format!("{}/{}", q.namespace, q.name) == k)
            .unwrap_or_else(|| panic!("{k} not queued: {queue:?}"));
        assert_eq!(q.queue, berth_client::QueueName::Gated as i32, "{k}");
        assert_eq!(&q.last_failure, phrase, "{k}");
        let pod = client.get("pods", "ml", &q.name).await?;
        assert!(pod["spec"]["nodeName"].is_null(), "{k} bound: {pod}");
    }
    let pg = client.get("podgroups", "ml", "train-bert").await?;
    assert!(pg["status"]["conditions"].is_null(), "{pg}");

    // The last worker arrives: the gang starts, all four.
    let mut last = client.get("pods", "ml", "train-bert-0").await?;
    for field in ["uid", "resourceVersion", "creationTimestamp", "generation"] {
        last["metadata"].as_object_mut().unwrap().remove(field);
    }
    last["metadata"]["name"] = "train-bert-3".into();
    last.as_object_mut().unwrap().remove("status");
    client.apply(&[last], "").await?;
    berthd.wait_idle().await?;
    for i in 0..4 {
        let pod = client.get("pods", "ml", &format!("train-bert-{i}")).await?;
        assert!(
            pod["spec"]["nodeName"].is_string(),
            "train-bert-{i} not bound: {pod}"
        );
    }
    let pg = client.get("podgroups", "ml", "train-bert").await?;
    assert_eq!(pg["status"]["conditions"][0]["status"], "True", "{pg}");
    let status = berthd.stop().await?;
    assert!(status.success(), "berthd exit: {status}");
    Ok(())
}
