//! DynamicResources at its extension points, against the embedded cluster
//! (which keeps claim status as the API server does).

use std::sync::Arc;

use serde_json::{Value, json};

use super::*;
use crate::cache::{KubeObject, ObjectKind, Snapshot};
use crate::cluster::embedded::EmbeddedCluster;
use crate::framework::{Code, EventObject, Parallelizer, QueueingHint};
use crate::testing::{default_framework, make_node, make_pod};

fn class(name: &str) -> Value {
    json!({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": "device.driver == 'gpu.example.com'"}}]}})
}

fn slice(node: &str, devices: usize) -> Value {
    let devs: Vec<Value> = (0..devices)
        .map(|i| json!({"name": format!("gpu-{i}")}))
        .collect();
    json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
        "metadata": {"name": format!("{node}-gpu")},
        "spec": {"driver": "gpu.example.com", "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1}, "devices": devs}})
}

fn claim(name: &str, count: i64) -> Value {
    json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com", "count": count}}]}}})
}

fn pod_with(name: &str, claims: &[(&str, &str)]) -> PodInfo {
    let rc: Vec<Value> = claims
        .iter()
        .map(|(n, c)| json!({"name": n, "resourceClaimName": c}))
        .collect();
    make_pod(name).spec("resourceClaims", json!(rc)).build()
}

impl Env {
    /// A pending pod with claims, stored in the cluster (the resourceclaim
    /// controller drops reservations of pods that do not exist).
    fn pod(&self, name: &str, claims: &[(&str, &str)]) -> PodInfo {
        let p = pod_with(name, claims);
        self.cluster
            .apply(serde_json::to_value(&p.pod).unwrap())
            .unwrap();
        p
    }
}

struct Env {
    cluster: Arc<EmbeddedCluster>,
    handle: Handle,
    pl: Arc<DynamicResources>,
    snapshot: Arc<Snapshot>,
}

impl Env {
    fn new(nodes: &[&str], objects: Vec<Value>) -> Self {
        let specs: Vec<crate::model::NodeSpec> = nodes
            .iter()
            .map(|n| make_node(n).cpu("4").build())
            .collect();
        Self::with_nodes(specs, objects)
    }

    fn with_nodes(nodes: Vec<crate::model::NodeSpec>, objects: Vec<Value>) -> Self {
        let cluster = EmbeddedCluster::new();
        for o in objects {
            cluster.apply(o).unwrap();
        }
        let handle = Handle::new(cluster.clone(), cluster.clone(), Parallelizer::inline());
        let pl = Arc::new(DynamicResources::new(
            DynamicResourcesArgs::default(),
            &handle,
        ));
        let infos: Vec<NodeInfo> = nodes
            .into_iter()
            .map(|n| NodeInfo::new(Arc::new(n)))
            .collect();
        let env = Self {
            cluster,
            handle,
            pl,
            snapshot: Arc::new(Snapshot::from_nodes(infos)),
        };
        env.sync();
        env
    }

    /// Copies the cluster's DRA objects into the scheduler's store, as its
    /// watch would.
    fn sync(&self) {
        let store = self.handle.objects();
        for kind in [
            ObjectKind::DeviceClass,
            ObjectKind::ResourceSlice,
            ObjectKind::ResourceClaim,
        ] {
            for o in store.list(kind, "") {
                store.remove(&o);
            }
            for o in self.cluster.objects(kind) {
                store.upsert(o);
            }
        }
    }

    fn apply(&self, v: Value) {
        self.cluster.apply(v).unwrap();
        self.sync();
    }

    fn claim(&self, name: &str) -> Arc<k8s_openapi::api::resource::v1::ResourceClaim> {
        match self
            .cluster
            .object(ObjectKind::ResourceClaim, "default", name)
        {
            Some(KubeObject::ResourceClaim(c)) => c,
            other => panic!("{other:?}"),
        }
    }

    async fn pre_filter(&self, pod: &PodInfo) -> (CycleState, Status) {
        let mut state = CycleState::with_snapshot(self.snapshot.clone());
        let (_, s) = self
            .pl
            .pre_filter(&mut state, pod, self.snapshot.list())
            .await;
        (state, s)
    }

    fn filter(&self, state: &CycleState, pod: &PodInfo) -> Vec<(String, Status)> {
        self.snapshot
            .list()
            .iter()
            .map(|n| (n.name().to_string(), self.pl.filter(state, pod, n)))
            .collect()
    }
}

#[tokio::test]
async fn missing_claims_keep_the_pod_out_of_the_active_queue() {
    let env = Env::new(&["n1"], vec![class("gpu.example.com"), slice("n1", 1)]);
    let pod = env.pod("p", &[("gpu", "gpu-claim")]);
    let s = env.pl.pre_enqueue(&pod);
    assert_eq!(s.code(), Code::UnschedulableAndUnresolvable);
    assert_eq!(
        s.message(),
        "could not find ResourceClaim \"default/gpu-claim\""
    );
    let templated = make_pod("t")
        .spec(
            "resourceClaims",
            json!([{"name": "gpu", "resourceClaimTemplateName": "tmpl"}]),
        )
        .build();
    assert_eq!(
        env.pl.pre_enqueue(&templated).message(),
        "pod \"default/t\": ResourceClaim not created yet"
    );
    env.apply(claim("gpu-claim", 1));
    assert!(env.pl.pre_enqueue(&pod).is_success());
    assert!(env.pl.pre_enqueue(&make_pod("plain").build()).is_success());
}

#[tokio::test]
async fn unknown_classes_and_pods_without_claims() {
    let env = Env::new(
        &["n1"],
        vec![
            slice("n1", 1),
            json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                "metadata": {"name": "c", "namespace": "default"},
                "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "nope"}}]}}}),
        ],
    );
    let (_, s) = env.pre_filter(&pod_with("p", &[("gpu", "c")])).await;
    assert_eq!(s.code(), Code::UnschedulableAndUnresolvable);
    assert_eq!(s.message(), "request gpu: device class nope does not exist");
    let (state, s) = env.pre_filter(&make_pod("plain").build()).await;
    assert!(s.is_skip());
    assert!(
        env.pl
            .filter(&state, &make_pod("plain").build(), &env.snapshot.list()[0])
            .is_success()
    );
    let (_, s) = env
        .pl
        .post_filter(
            &state,
            &make_pod("plain").build(),
            &NodeToStatus::default(),
            &*default_framework(&env.handle),
        )
        .await;
    assert_eq!(s.message(), "no new claims to deallocate");
}

#[tokio::test]
async fn filter_finds_nodes_with_free_devices_and_reserve_marks_them_in_flight() {
    let env = Env::new(
        &["n1", "n2", "n3"],
        vec![
            class("gpu.example.com"),
            slice("n1", 1),
            slice("n2", 2),
            claim("a", 2),
            claim("b", 1),
        ],
    );
    let a = env.pod("pa", &[("gpu", "a")]);
    let (mut state, s) = env.pre_filter(&a).await;
    assert!(s.is_success(), "{s:?}");
    let verdicts = env.filter(&state, &a);
    assert!(verdicts[1].1.is_success());
    for i in [0, 2] {
        assert_eq!(
            verdicts[i].1.code(),
            Code::UnschedulableAndUnresolvable,
            "{}",
            verdicts[i].0
        );
        assert_eq!(verdicts[i].1.message(), "cannot allocate all claims");
    }
    assert!(env.pl.reserve(&mut state, &a, "n2").await.is_success());
    assert!(
        env.handle
            .objects()
            .dra()
            .claim_has_pending_allocation(env.claim("a").metadata.uid.as_deref().unwrap())
    );
    // The next pod's cycle sees n2's devices taken.
    let b = env.pod("pb", &[("gpu", "b")]);
    let (state_b, _) = env.pre_filter(&b).await;
    let verdicts = env.filter(&state_b, &b);
    assert!(verdicts[0].1.is_success(), "n1 has a free device");
    assert!(
        !verdicts[1].1.is_success(),
        "n2's devices are in flight for pa"
    );

    // PreBind writes the finalizer, then allocation and reservation.
    assert!(env.pl.pre_bind(&state, &a, "n2").await.is_success());
    let stored = env.claim("a");
    assert_eq!(
        stored.metadata.finalizers.as_deref(),
        Some(&["resource.kubernetes.io/delete-protection".to_string()][..])
    );
    let st = stored.status.as_ref().unwrap();
    let alloc = st.allocation.as_ref().unwrap();
    let devices: Vec<&str> = alloc
        .devices
        .as_ref()
        .unwrap()
        .results
        .as_ref()
        .unwrap()
        .iter()
        .map(|r| r.device.as_str())
        .collect();
    assert_eq!(devices, ["gpu-0", "gpu-1"]);
    assert!(alloc.allocation_timestamp.is_some());
    assert_eq!(
        serde_json::to_value(alloc.node_selector.as_ref().unwrap()).unwrap(),
        json!({"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n2"]}]}]})
    );
    let reserved = st.reserved_for.as_ref().unwrap();
    assert_eq!(
        (reserved[0].resource.as_str(), reserved[0].name.as_str()),
        ("pods", "pa")
    );
    let uid = stored.metadata.uid.as_deref().unwrap();
    assert!(
        !env.handle.objects().dra().claim_has_pending_allocation(uid),
        "no longer in flight"
    );
    assert!(
        env.handle
            .objects()
            .dra()
            .claim("default", "a")
            .unwrap()
            .allocated(),
        "assumed"
    );
}

#[tokio::test]
async fn unreserve_releases_the_allocation_and_the_reservation() {
    let env = Env::new(
        &["n1"],
        vec![class("gpu.example.com"), slice("n1", 1), claim("a", 1)],
    );
    let a = env.pod("pa", &[("gpu", "a")]);
    let (mut state, _) = env.pre_filter(&a).await;
    assert!(env.pl.reserve(&mut state, &a, "n1").await.is_success());
    env.pl.unreserve(&state, &a, "n1").await;
    let uid = env.claim("a").metadata.uid.clone().unwrap();
    assert!(
        !env.handle
            .objects()
            .dra()
            .claim_has_pending_allocation(&uid)
    );
    let (state, _) = env.pre_filter(&env.pod("pb", &[("gpu", "a")])).await;
    assert!(
        env.filter(&state, &a)[0].1.is_success(),
        "the device is free again"
    );

    // Written, then a later PreBind plugin failed: the pod leaves reservedFor.
    let (mut state, _) = env.pre_filter(&a).await;
    assert!(env.pl.reserve(&mut state, &a, "n1").await.is_success());
    assert!(env.pl.pre_bind(&state, &a, "n1").await.is_success());
    assert_eq!(
        env.claim("a")
            .status
            .as_ref()
            .unwrap()
            .reserved_for
            .as_ref()
            .unwrap()
            .len(),
        1
    );
    env.pl.unreserve(&state, &a, "n1").await;
    let st = env.claim("a").status.clone().unwrap();
    assert!(st.reserved_for.is_none(), "{st:?}");
    assert!(
        st.allocation.is_some(),
        "the allocation stays (the controller deallocates)"
    );
}

#[tokio::test]
async fn shared_claims_are_reserved_for_every_pod() {
    let env = Env::new(
        &["n1", "n2"],
        vec![class("gpu.example.com"), slice("n1", 1), claim("shared", 1)],
    );
    let a = env.pod("pa", &[("gpu", "shared")]);
    let (mut state, _) = env.pre_filter(&a).await;
    assert!(env.pl.reserve(&mut state, &a, "n1").await.is_success());
    assert!(
        env.pl.pre_bind_pre_flight(&state, &a, "n1").is_success(),
        "PreBind has a claim to write"
    );
    // While pa's allocation is in flight, pb must wait.
    let b = env.pod("pb", &[("gpu", "shared")]);
    let (_, s) = env.pre_filter(&b).await;
    assert_eq!(s.code(), Code::UnschedulableAndUnresolvable);
    assert_eq!(
        s.message(),
        "resource claim default/shared is in the process of being allocated"
    );
    assert!(env.pl.pre_bind(&state, &a, "n1").await.is_success());
    env.sync();
    // Allocated and reserved for pa: a new cycle of pa has nothing to
    // write, and neither has a pod without claims.
    let (state_again, _) = env.pre_filter(&a).await;
    assert!(env.pl.pre_bind_pre_flight(&state_again, &a, "n1").is_skip());
    let plain = make_pod("plain").build();
    let (state_plain, _) = env.pre_filter(&plain).await;
    assert!(
        env.pl
            .pre_bind_pre_flight(&state_plain, &plain, "n1")
            .is_skip()
    );
    // Allocated: pb may only go where the devices are.
    let (mut state_b, s) = env.pre_filter(&b).await;
    assert!(s.is_success(), "{s:?}");
    let v = env.filter(&state_b, &b);
    assert!(v[0].1.is_success());
    assert_eq!(v[1].1.message(), "resourceclaim not available on the node");
    assert!(env.pl.reserve(&mut state_b, &b, "n1").await.is_success());
    assert!(env.pl.pre_bind(&state_b, &b, "n1").await.is_success());
    let names: Vec<String> = env
        .claim("shared")
        .status
        .clone()
        .unwrap()
        .reserved_for
        .unwrap()
        .into_iter()
        .map(|r| r.name)
        .collect();
    assert_eq!(names, ["pa", "pb"]);
}

#[tokio::test]
async fn post_filter_deallocates_a_claim_that_blocks_the_pod() {
    let mut allocated = claim("stuck", 1);
    allocated["status"] = json!({"allocation": {
        "devices": {"results": [{"request": "gpu", "driver": "gpu.example.com", "pool": "n9", "device": "gpu-0"}]},
        "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n9"]}]}]}}});
    let env = Env::new(
        &["n1"],
        vec![class("gpu.example.com"), slice("n1", 1), allocated],
    );
    let pod = env.pod("p", &[("gpu", "stuck")]);
    let (state, s) = env.pre_filter(&pod).await;
    assert!(s.is_success());
    let v = env.filter(&state, &pod);
    assert_eq!(v[0].1.message(), "resourceclaim not available on the node");
    let fw = default_framework(&env.handle);
    let (_, s) = env
        .pl
        .post_filter(&state, &pod, &NodeToStatus::default(), &*fw)
        .await;
    assert_eq!(s.code(), Code::Unschedulable);
    assert_eq!(s.message(), "deallocation of ResourceClaim completed");
    assert!(
        env.claim("stuck")
            .status
            .clone()
            .unwrap()
            .allocation
            .is_none()
    );
}

#[tokio::test]
async fn first_available_scores_the_preferred_alternative() {
    let env = Env::new(
        &["n1", "n2"],
        vec![
            class("gpu.example.com"),
            slice("n1", 2),
            slice("n2", 1),
            json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                "metadata": {"name": "fa", "namespace": "default"},
                "spec": {"devices": {"requests": [{"name": "gpu", "firstAvailable": [
                    {"name": "two", "deviceClassName": "gpu.example.com", "count": 2},
                    {"name": "one", "deviceClassName": "gpu.example.com", "count": 1}]}]}}}),
        ],
    );
    let pod = env.pod("p", &[("gpu", "fa")]);
    let (state, _) = env.pre_filter(&pod).await;
    let scores: Vec<i64> = env
        .snapshot
        .list()
        .iter()
        .map(|n| env.pl.score(&state, &pod, n).unwrap())
        .collect();
    assert_eq!(scores, [8, 7]);
    let mut ns = vec![
        NodeScore {
            name: "n1",
            score: 8,
        },
        NodeScore {
            name: "n2",
            score: 7,
        },
    ];
    env.pl.normalize_score(&state, &pod, &mut ns);
    assert_eq!((ns[0].score, ns[1].score), (100, 87));
}

#[tokio::test]
async fn queueing_hints_are_upstreams() {
    let env = Env::new(
        &["n1"],
        vec![
            class("gpu.example.com"),
            slice("n1", 1),
            claim("mine", 1),
            claim("other", 1),
        ],
    );
    let regs = env.pl.events_to_register().unwrap();
    let claim_hint = regs[1].hint.clone().unwrap();
    let pod = env.pod("p", &[("gpu", "mine")]);
    let obj = |name: &str| EventObject::Object(KubeObject::ResourceClaim(env.claim(name)));
    let mut changed = (*env.claim("mine")).clone();
    changed.status = Some(
        serde_json::from_value(
            json!({"reservedFor": [{"resource": "pods", "name": "x", "uid": "u"}]}),
        )
        .unwrap(),
    );
    let changed = EventObject::Object(KubeObject::ResourceClaim(Arc::new(changed)));
    assert_eq!(
        claim_hint(&pod, None, Some(&obj("mine"))),
        Ok(QueueingHint::Queue),
        "created"
    );
    assert_eq!(
        claim_hint(&pod, Some(&obj("other")), Some(&obj("other"))),
        Ok(QueueingHint::Skip),
        "unrelated"
    );
    assert_eq!(
        claim_hint(&pod, Some(&obj("mine")), Some(&obj("mine"))),
        Ok(QueueingHint::Skip),
        "same status"
    );
    assert_eq!(
        claim_hint(&pod, Some(&obj("mine")), Some(&changed)),
        Ok(QueueingHint::Queue),
        "status changed"
    );
    let missing = env.pod("q", &[("gpu", "absent")]);
    assert_eq!(
        claim_hint(&missing, None, Some(&obj("mine"))),
        Ok(QueueingHint::Skip),
        "still missing a claim"
    );
}

#[tokio::test]
async fn extended_resources_backed_by_dra_get_a_claim_of_their_own() {
    // n1 publishes two devices of the class; n2 offers example.com/gpu
    // through a device plugin; n3 has neither.
    let mut gpu_class = class("gpu.example.com");
    gpu_class["spec"]["extendedResourceName"] = json!("example.com/gpu");
    let env = Env::with_nodes(
        vec![
            make_node("n1").cpu("4").build(),
            make_node("n2")
                .cpu("4")
                .alloc("example.com/gpu", "4")
                .build(),
            make_node("n3").cpu("4").build(),
        ],
        vec![gpu_class, slice("n1", 2)],
    );
    let p = make_pod("p").req("example.com/gpu", "2").build();
    env.cluster
        .apply(serde_json::to_value(&p.pod).unwrap())
        .unwrap();

    // NodeResourcesFit leaves the resource to DynamicResources where no
    // device plugin offers it.
    let fw = default_framework(&env.handle);
    let mut fit_state = CycleState::with_snapshot(env.snapshot.clone());
    let _ = fw
        .run_pre_filter_recorded(&mut fit_state, &p, env.snapshot.list(), &mut |_, _, _| {})
        .await;
    for n in env.snapshot.list() {
        let verdicts = fw.run_filter_each(&fit_state, &p, n, true);
        let fit = verdicts
            .iter()
            .find(|(name, _)| *name == "NodeResourcesFit")
            .unwrap();
        assert_eq!(
            fit.1,
            crate::framework::FilterVerdict::Ran(Status::success()),
            "{}",
            n.name()
        );
    }

    let (mut state, s) = env.pre_filter(&p).await;
    assert!(s.is_success(), "{s:?}");
    let verdicts = env.filter(&state, &p);
    assert!(verdicts[0].1.is_success(), "n1: DRA: {:?}", verdicts[0].1);
    assert!(verdicts[1].1.is_success(), "n2: device plugin");
    assert_eq!(verdicts[2].1.message(), "cannot allocate all claims");

    // A node whose device plugin serves it needs no claim.
    let (mut on_n2, _) = env.pre_filter(&p).await;
    assert!(env.pl.reserve(&mut on_n2, &p, "n2").await.is_success());
    assert!(env.pl.pre_bind_pre_flight(&on_n2, &p, "n2").is_skip());
    assert!(env.pl.pre_bind(&on_n2, &p, "n2").await.is_success());
    assert!(env.cluster.objects(ObjectKind::ResourceClaim).is_empty());

    // On n1: a claim is made, allocated, reserved and named in the pod's
    // status.
    assert!(env.pl.reserve(&mut state, &p, "n1").await.is_success());
    assert!(env.pl.pre_bind_pre_flight(&state, &p, "n1").is_success());
    assert!(env.pl.pre_bind(&state, &p, "n1").await.is_success());
    let claims = env.cluster.objects(ObjectKind::ResourceClaim);
    assert_eq!(claims.len(), 1);
    let KubeObject::ResourceClaim(c) = &claims[0] else {
        unreachable!()
    };
    let name = c.metadata.name.clone().unwrap();
    assert!(name.starts_with("p-extended-resources-"), "{name}");
    assert_eq!(
        c.metadata.annotations.as_ref().unwrap()["resource.kubernetes.io/extended-resource-claim"],
        "true"
    );
    let owner = &c.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!((owner.kind.as_str(), owner.controller), ("Pod", Some(true)));
    let requests =
        serde_json::to_value(&c.spec.as_ref().unwrap().devices.as_ref().unwrap().requests).unwrap();
    assert_eq!(
        requests,
        json!([{"name": "container-0-request-0", "exactly": {"deviceClassName": "gpu.example.com", "allocationMode": "ExactCount", "count": 2}}])
    );
    let st = c.status.as_ref().unwrap();
    let devices: Vec<&str> = st
        .allocation
        .as_ref()
        .unwrap()
        .devices
        .as_ref()
        .unwrap()
        .results
        .as_ref()
        .unwrap()
        .iter()
        .map(|r| r.device.as_str())
        .collect();
    assert_eq!(devices, ["gpu-0", "gpu-1"]);
    assert_eq!(st.reserved_for.as_ref().unwrap()[0].name, "p");
    let pod = env
        .cluster
        .pods()
        .into_iter()
        .find(|x| x.metadata.name.as_deref() == Some("p"))
        .unwrap();
    assert_eq!(
        serde_json::to_value(&pod.status.as_ref().unwrap().extended_resource_claim_status).unwrap(),
        json!({"requestMappings": [{"containerName": "c", "resourceName": "example.com/gpu", "requestName": "container-0-request-0"}],
            "resourceClaimName": name})
    );
    assert!(
        env.handle
            .objects()
            .dra()
            .claim("default", &name)
            .is_some_and(|c| c.allocated()),
        "counted before the watch brings it"
    );

    // Unreserve deletes the claim it made.
    env.pl.unreserve(&state, &p, "n1").await;
    assert!(env.cluster.objects(ObjectKind::ResourceClaim).is_empty());

    // A claim left from an earlier attempt: every node fails, PostFilter
    // deletes it.
    env.apply(json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": "p-extended-resources-old", "namespace": "default",
            "annotations": {"resource.kubernetes.io/extended-resource-claim": "true"},
            "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": &*p.uid, "controller": true}]},
        "spec": {"devices": {"requests": [{"name": "container-0-request-0", "exactly": {"deviceClassName": "gpu.example.com", "count": 2}}]}}}));
    let (state, s) = env.pre_filter(&p).await;
    assert!(s.is_success());
    for (node, v) in env.filter(&state, &p) {
        assert_eq!(
            v.message(),
            "cannot schedule extended resource claim",
            "{node}"
        );
    }
    let (_, s) = env
        .pl
        .post_filter(&state, &p, &NodeToStatus::default(), &*fw)
        .await;
    assert_eq!(s.message(), "deletion of ResourceClaim completed");
    assert!(env.cluster.objects(ObjectKind::ResourceClaim).is_empty());
}
