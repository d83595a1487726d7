//! Table tests of the allocator: for each field of the API, the devices
//! upstream's allocator picks on the same cluster.

use std::sync::Arc;

use serde_json::{Value, json};

use super::*;
use crate::cache::dra::DraStore;
use crate::model::NodeSpec;
use crate::testing::make_node;

const DRIVER: &str = "gpu.example.com";

/// Devices picked per claim, `request:pool/device`; `None`: no fit.
type Picks = Option<Vec<Vec<String>>>;

/// A device: `name`, attributes as `(name, json value)`, capacity.
fn dev(name: &str, attrs: &[(&str, Value)]) -> Value {
    let mut a = serde_json::Map::new();
    for (k, v) in attrs {
        a.insert((*k).to_string(), v.clone());
    }
    json!({"name": name, "attributes": a})
}

fn slice(name: &str, node: &str, pool: &str, gen_: i64, count: i64, devices: Vec<Value>) -> Value {
    json!({
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {"driver": DRIVER, "nodeName": node,
            "pool": {"name": pool, "generation": gen_, "resourceSliceCount": count},
            "devices": devices}
    })
}

fn class(name: &str, selector: Option<&str>) -> Value {
    let mut spec = json!({});
    if let Some(s) = selector {
        spec["selectors"] = json!([{"cel": {"expression": s}}]);
    }
    json!({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": name}, "spec": spec})
}

fn claim(name: &str, requests: Value, constraints: Value) -> Value {
    json!({
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}"), "resourceVersion": "1"},
        "spec": {"devices": {"requests": requests, "constraints": constraints}}
    })
}

fn exact(name: &str, count: i64) -> Value {
    json!({"name": name, "exactly": {"deviceClassName": "gpu", "count": count}})
}

fn allocated(name: &str, devices: &[(&str, &str)]) -> Value {
    let mut c = claim(name, json!([exact("r", devices.len() as i64)]), json!([]));
    c["status"] = json!({"allocation": {"devices": {"results": devices.iter().map(|(pool, d)| json!({"request": "r", "driver": DRIVER, "pool": pool, "device": d})).collect::<Vec<_>>()}}});
    c
}

struct World {
    store: DraStore,
}

impl World {
    fn new(objects: Vec<Value>) -> Self {
        let store = DraStore::default();
        for o in objects {
            match o["kind"].as_str() {
                Some("ResourceSlice") => store.upsert_slice(&serde_json::from_value(o).unwrap()),
                Some("DeviceClass") => {
                    store.upsert_class(Arc::new(serde_json::from_value(o).unwrap()))
                }
                Some("ResourceClaim") => {
                    store.upsert_claim(Arc::new(serde_json::from_value(o).unwrap()))
                }
                Some("DeviceTaintRule") => {
                    store.upsert_taint_rule(Arc::new(serde_json::from_value(o).unwrap()))
                }
                k => panic!("{k:?}"),
            }
        }
        Self { store }
    }

    fn allocator(&self, claims: &[&str]) -> Result<Allocator, Fatal> {
        let claims: Vec<_> = claims
            .iter()
            .map(|n| self.store.claim("default", n).expect(n))
            .collect();
        Allocator::new(
            &claims,
            |c| self.store.class(c),
            self.store.slice_index(),
            Arc::new(self.store.allocated_state()),
            None,
        )
    }

    /// The devices picked on `node`, per claim, as `pool/device`
    /// (`request` prefixed when `with_requests`).
    fn pick(&self, claims: &[&str], node: &NodeSpec) -> Result<Picks, Fatal> {
        let a = self.allocator(claims)?;
        let checked = a.check(node)?;
        let out = a.allocate(node)?;
        assert_eq!(
            matches!(checked, Outcome::Fits { .. }),
            out.is_some(),
            "check and allocate agree"
        );
        Ok(out.map(|v| {
            v.iter()
                .map(|c| {
                    c.devices
                        .iter()
                        .map(|d| format!("{}:{}/{}", d.request, d.pool, d.device))
                        .collect()
                })
                .collect()
        }))
    }
}

fn n1() -> NodeSpec {
    make_node("n1").label("zone", "a").build()
}

fn gpus(n: usize) -> Vec<Value> {
    (0..n).map(|i| dev(&format!("gpu-{i}"), &[])).collect()
}

fn picks(v: &[&str]) -> Picks {
    Some(vec![v.iter().map(|s| s.to_string()).collect()])
}

#[test]
fn exact_counts_take_the_first_free_devices_in_pool_order() {
    let base = || {
        vec![
            class("gpu", None),
            // Pools are tried by name: "a-pool" before "b-pool", whatever
            // the slices are called; slices by name inside a pool.
            slice("z-slice", "n1", "a-pool", 1, 2, vec![dev("gpu-2", &[])]),
            slice("y-slice", "n1", "a-pool", 1, 2, gpus(2)),
            slice("x-slice", "n1", "b-pool", 1, 1, gpus(2)),
        ]
    };
    let cases: Vec<(&str, Vec<Value>, Picks)> = vec![
        (
            "one device",
            vec![claim("c", json!([exact("r", 1)]), json!([]))],
            picks(&["r:a-pool/gpu-0"]),
        ),
        (
            "three devices span slices in name order",
            vec![claim("c", json!([exact("r", 3)]), json!([]))],
            picks(&["r:a-pool/gpu-0", "r:a-pool/gpu-1", "r:a-pool/gpu-2"]),
        ),
        (
            "then the next pool",
            vec![claim("c", json!([exact("r", 4)]), json!([]))],
            picks(&[
                "r:a-pool/gpu-0",
                "r:a-pool/gpu-1",
                "r:a-pool/gpu-2",
                "r:b-pool/gpu-0",
            ]),
        ),
        (
            "more than exist",
            vec![claim("c", json!([exact("r", 6)]), json!([]))],
            None,
        ),
        (
            "allocated devices are skipped",
            vec![
                claim("c", json!([exact("r", 1)]), json!([])),
                allocated("other", &[("a-pool", "gpu-0"), ("a-pool", "gpu-1")]),
            ],
            picks(&["r:a-pool/gpu-2"]),
        ),
        (
            "requests of one claim take different devices",
            vec![claim(
                "c",
                json!([exact("r1", 1), exact("r2", 1)]),
                json!([]),
            )],
            picks(&["r1:a-pool/gpu-0", "r2:a-pool/gpu-1"]),
        ),
    ];
    for (name, extra, want) in cases {
        let mut objs = base();
        objs.extend(extra);
        let w = World::new(objs);
        assert_eq!(w.pick(&["c"], &n1()), Ok(want), "{name}");
    }
}

#[test]
fn claims_of_one_pod_never_share_a_device() {
    let w = World::new(vec![
        class("gpu", None),
        slice("s", "n1", "p", 1, 1, gpus(2)),
        claim("a", json!([exact("r", 1)]), json!([])),
        claim("b", json!([exact("r", 1)]), json!([])),
        claim("c", json!([exact("r", 1)]), json!([])),
    ]);
    assert_eq!(
        w.pick(&["a", "b"], &n1()),
        Ok(Some(vec![
            vec!["r:p/gpu-0".into()],
            vec!["r:p/gpu-1".into()]
        ]))
    );
    assert_eq!(w.pick(&["a", "b", "c"], &n1()), Ok(None));
}

#[test]
fn slices_of_other_nodes_and_old_generations_do_not_count() {
    let w = World::new(vec![
        class("gpu", None),
        slice("other", "n2", "p2", 1, 1, gpus(4)),
        // Generation 1 replaced by generation 2 (complete): only gpu-9 is left.
        slice("old", "n1", "p", 1, 1, gpus(4)),
        slice("new", "n1", "p", 2, 1, vec![dev("gpu-9", &[])]),
        claim("c", json!([exact("r", 1)]), json!([])),
        claim("two", json!([exact("r", 2)]), json!([])),
    ]);
    assert_eq!(w.pick(&["c"], &n1()), Ok(picks(&["r:p/gpu-9"])));
    assert_eq!(w.pick(&["two"], &n1()), Ok(None));

    // A pool whose new generation is half published cannot be used.
    let w = World::new(vec![
        class("gpu", None),
        slice("a", "n1", "p", 3, 2, gpus(1)),
        claim("c", json!([exact("r", 1)]), json!([])),
        claim(
            "all",
            json!([{"name": "r", "exactly": {"deviceClassName": "gpu", "allocationMode": "All"}}]),
            json!([]),
        ),
    ]);
    assert_eq!(w.pick(&["c"], &n1()), Ok(None));
    assert_eq!(
        w.pick(&["all"], &n1()),
        Err("claim default/all, request r: asks for all devices, but resource pool gpu.example.com/p is currently being updated".into())
    );

    // Duplicate device names make the pool invalid.
    let w = World::new(vec![
        class("gpu", None),
        slice("a", "n1", "p", 1, 2, gpus(1)),
        slice("b", "n1", "p", 1, 2, gpus(1)),
        claim("c", json!([exact("r", 1)]), json!([])),
    ]);
    let a = w.allocator(&["c"]).unwrap();
    assert_eq!(a.check(&n1()), Ok(Outcome::InvalidPools));
}

#[test]
fn class_and_request_selectors_are_cel() {
    let devs = vec![
        dev(
            "gpu-0",
            &[
                ("model", json!({"string": "t4"})),
                ("mem", json!({"int": 16})),
            ],
        ),
        dev(
            "gpu-1",
            &[
                ("model", json!({"string": "a100"})),
                ("mem", json!({"int": 40})),
            ],
        ),
        dev(
            "gpu-2",
            &[
                ("model", json!({"string": "a100"})),
                ("mem", json!({"int": 80})),
            ],
        ),
    ];
    let w = World::new(vec![
        class(
            "gpu",
            Some(r#"device.attributes["gpu.example.com"].model == "a100""#),
        ),
        slice("s", "n1", "p", 1, 1, devs),
        claim(
            "c",
            json!([{"name": "r", "exactly": {"deviceClassName": "gpu",
            "selectors": [{"cel": {"expression": r#"device.attributes["gpu.example.com"].mem >= 64"#}}]}}]),
            json!([]),
        ),
        claim("any", json!([exact("r", 2)]), json!([])),
        claim(
            "missing",
            json!([{"name": "r", "exactly": {"deviceClassName": "nope"}}]),
            json!([]),
        ),
        claim(
            "bad",
            json!([{"name": "r", "exactly": {"deviceClassName": "gpu",
            "selectors": [{"cel": {"expression": r#"device.attributes["gpu.example.com"].nope"#}}]}}]),
            json!([]),
        ),
    ]);
    assert_eq!(w.pick(&["c"], &n1()), Ok(picks(&["r:p/gpu-2"])));
    assert_eq!(
        w.pick(&["any"], &n1()),
        Ok(picks(&["r:p/gpu-1", "r:p/gpu-2"]))
    );
    assert_eq!(
        w.pick(&["missing"], &n1()).unwrap_err(),
        "claim default/missing, request r: could not retrieve device class nope: deviceclass.resource.k8s.io \"nope\" not found"
    );
    let err = w.pick(&["bad"], &n1()).unwrap_err();
    assert!(
        err.starts_with("claim default/bad: selector #0: CEL runtime error: "),
        "{err}"
    );
}

#[test]
fn all_mode_takes_every_matching_device_or_none() {
    let w = World::new(vec![
        class("gpu", Some(r#"device.attributes["gpu.example.com"].ok"#)),
        slice(
            "s",
            "n1",
            "p",
            1,
            1,
            vec![
                dev("gpu-0", &[("ok", json!({"bool": true}))]),
                dev("gpu-1", &[("ok", json!({"bool": false}))]),
                dev("gpu-2", &[("ok", json!({"bool": true}))]),
            ],
        ),
        claim(
            "all",
            json!([{"name": "r", "exactly": {"deviceClassName": "gpu", "allocationMode": "All"}}]),
            json!([]),
        ),
    ]);
    assert_eq!(
        w.pick(&["all"], &n1()),
        Ok(picks(&["r:p/gpu-0", "r:p/gpu-2"]))
    );
    let busy = World::new(vec![
        class("gpu", None),
        slice("s", "n1", "p", 1, 1, gpus(2)),
        claim(
            "all",
            json!([{"name": "r", "exactly": {"deviceClassName": "gpu", "allocationMode": "All"}}]),
            json!([]),
        ),
        allocated("other", &[("p", "gpu-1")]),
    ]);
    assert_eq!(busy.pick(&["all"], &n1()), Ok(None), "one of them is taken");
}

#[test]
fn match_attribute_backtracks_to_devices_that_agree() {
    let numa = |n: i64| ("numa", json!({"int": n}));
    let w = World::new(vec![
        class("gpu", None),
        slice(
            "s",
            "n1",
            "p",
            1,
            1,
            vec![
                dev("gpu-0", &[numa(0)]),
                dev("gpu-1", &[numa(1)]),
                dev("gpu-2", &[numa(1)]),
                dev("gpu-3", &[]),
            ],
        ),
        claim(
            "c",
            json!([exact("a", 1), exact("b", 1)]),
            json!([{"matchAttribute": "gpu.example.com/numa"}]),
        ),
        claim(
            "scoped",
            json!([exact("a", 1), exact("b", 1), exact("free", 1)]),
            json!([{"requests": ["a", "b"], "matchAttribute": "gpu.example.com/numa"}]),
        ),
        claim(
            "distinct",
            json!([exact("a", 1), exact("b", 1)]),
            json!([{"distinctAttribute": "gpu.example.com/numa"}]),
        ),
        claim(
            "three",
            json!([exact("a", 3)]),
            json!([{"matchAttribute": "gpu.example.com/numa"}]),
        ),
    ]);
    assert_eq!(
        w.pick(&["c"], &n1()),
        Ok(picks(&["a:p/gpu-1", "b:p/gpu-2"]))
    );
    assert_eq!(
        w.pick(&["scoped"], &n1()),
        Ok(picks(&["a:p/gpu-1", "b:p/gpu-2", "free:p/gpu-0"]))
    );
    assert_eq!(
        w.pick(&["distinct"], &n1()),
        Ok(picks(&["a:p/gpu-0", "b:p/gpu-1"]))
    );
    assert_eq!(
        w.pick(&["three"], &n1()),
        Ok(None),
        "only two devices share a value"
    );
}

#[test]
fn admin_access_may_use_allocated_devices() {
    let w = World::new(vec![
        class("gpu", None),
        slice("s", "n1", "p", 1, 1, gpus(1)),
        allocated("other", &[("p", "gpu-0")]),
        claim(
            "admin",
            json!([{"name": "r", "exactly": {"deviceClassName": "gpu", "adminAccess": true}}]),
            json!([]),
        ),
        claim("user", json!([exact("r", 1)]), json!([])),
    ]);
    assert_eq!(w.pick(&["user"], &n1()), Ok(None));
    assert_eq!(w.pick(&["admin"], &n1()), Ok(picks(&["r:p/gpu-0"])));
    let a = w.allocator(&["admin"]).unwrap();
    assert!(a.allocate(&n1()).unwrap().unwrap()[0].devices[0].admin_access);
}

#[test]
fn first_available_takes_the_first_alternative_that_fits_and_scores_it() {
    let fa = json!([{"name": "r", "firstAvailable": [
        {"name": "big", "deviceClassName": "big", "count": 1},
        {"name": "two-small", "deviceClassName": "small", "count": 2},
        {"name": "one-small", "deviceClassName": "small", "count": 1}]}]);
    let w = World::new(vec![
        class(
            "big",
            Some(r#"device.attributes["gpu.example.com"].size == "big""#),
        ),
        class(
            "small",
            Some(r#"device.attributes["gpu.example.com"].size == "small""#),
        ),
        slice(
            "s",
            "n1",
            "p",
            1,
            1,
            vec![dev("s-0", &[("size", json!({"string": "small"}))])],
        ),
        slice(
            "s2",
            "n2",
            "p2",
            1,
            1,
            vec![dev("b-0", &[("size", json!({"string": "big"}))])],
        ),
        claim("c", fa, json!([])),
    ]);
    assert_eq!(w.pick(&["c"], &n1()), Ok(picks(&["r/one-small:p/s-0"])));
    let n2 = make_node("n2").build();
    assert_eq!(w.pick(&["c"], &n2), Ok(picks(&["r/big:p2/b-0"])));
    let a = w.allocator(&["c"]).unwrap();
    assert_eq!(a.check(&n1()), Ok(Outcome::Fits { score: 8 - 2 }));
    assert_eq!(a.check(&n2), Ok(Outcome::Fits { score: 8 }));
}

#[test]
fn partitionable_devices_share_their_pools_counters() {
    let counters = json!({
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
        "metadata": {"name": "n1-counters"},
        "spec": {"driver": DRIVER, "nodeName": "n1",
            "pool": {"name": "p", "generation": 1, "resourceSliceCount": 2},
            "sharedCounters": [{"name": "gpu-0-mem", "counters": {"memory": {"value": "40Gi"}}}]}
    });
    let part = |name: &str, mem: &str| json!({"name": name, "consumesCounters": [{"counterSet": "gpu-0-mem", "counters": {"memory": {"value": mem}}}]});
    let w = World::new(vec![
        class("gpu", None),
        counters,
        slice(
            "n1-devices",
            "n1",
            "p",
            1,
            2,
            vec![
                part("whole", "40Gi"),
                part("half-a", "20Gi"),
                part("half-b", "20Gi"),
            ],
        ),
        claim("one", json!([exact("r", 1)]), json!([])),
        claim("two", json!([exact("r", 2)]), json!([])),
        claim("three", json!([exact("r", 3)]), json!([])),
    ]);
    assert_eq!(w.pick(&["one"], &n1()), Ok(picks(&["r:p/whole"])));
    // "whole" uses all the memory: the two halves are the only pair.
    assert_eq!(
        w.pick(&["two"], &n1()),
        Ok(picks(&["r:p/half-a", "r:p/half-b"]))
    );
    assert_eq!(w.pick(&["three"], &n1()), Ok(None));
    // A half allocated elsewhere leaves room for the other half only.
    let mut objs = vec![
        class("gpu", None),
        slice(
            "n1-devices",
            "n1",
            "p",
            1,
            2,
            vec![
                part("whole", "40Gi"),
                part("half-a", "20Gi"),
                part("half-b", "20Gi"),
            ],
        ),
        claim("one", json!([exact("r", 1)]), json!([])),
        allocated("other", &[("p", "half-a")]),
    ];
    objs.push(json!({
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
        "metadata": {"name": "n1-counters"},
        "spec": {"driver": DRIVER, "nodeName": "n1",
            "pool": {"name": "p", "generation": 1, "resourceSliceCount": 2},
            "sharedCounters": [{"name": "gpu-0-mem", "counters": {"memory": {"value": "40Gi"}}}]}
    }));
    let w = World::new(objs);
    assert_eq!(w.pick(&["one"], &n1()), Ok(picks(&["r:p/half-b"])));
}

#[test]
fn device_taints_keep_requests_off_unless_tolerated() {
    let tainted = |name: &str, effect: &str| json!({"name": name, "taints": [{"key": "health", "value": "bad", "effect": effect}]});
    let w = World::new(vec![
        class("gpu", None),
        slice(
            "s",
            "n1",
            "p",
            1,
            1,
            vec![
                tainted("gpu-0", "NoSchedule"),
                tainted("gpu-1", "None"),
                tainted("gpu-2", "NoExecute"),
            ],
        ),
        claim("c", json!([exact("r", 2)]), json!([])),
        claim(
            "tolerant",
            json!([{"name": "r", "exactly": {"deviceClassName": "gpu", "count": 3,
            "tolerations": [{"key": "health", "operator": "Equal", "value": "bad"}]}}]),
            json!([]),
        ),
        claim(
            "wrong-value",
            json!([{"name": "r", "exactly": {"deviceClassName": "gpu", "count": 2,
            "tolerations": [{"key": "health", "operator": "Equal", "value": "good"}]}}]),
            json!([]),
        ),
    ]);
    assert_eq!(
        w.pick(&["c"], &n1()),
        Ok(None),
        "only gpu-1 (effect None) is usable"
    );
    assert_eq!(
        w.pick(&["tolerant"], &n1()),
        Ok(picks(&["r:p/gpu-0", "r:p/gpu-1", "r:p/gpu-2"]))
    );
    assert_eq!(w.pick(&["wrong-value"], &n1()), Ok(None));
    let a = w.allocator(&["tolerant"]).unwrap();
    let out = a.allocate(&n1()).unwrap().unwrap();
    assert_eq!(
        out[0].devices[0].tolerations.len(),
        1,
        "the result carries the tolerations"
    );
}

fn taint_rule(name: &str, selector: Option<Value>, effect: &str) -> Value {
    let mut spec = json!({"taint": {"key": "maintenance", "value": "now", "effect": effect}});
    if let Some(sel) = selector {
        spec["deviceSelector"] = sel;
    }
    json!({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceTaintRule", "metadata": {"name": name}, "spec": spec})
}

#[test]
fn device_taint_rules_taint_the_devices_their_selector_picks() {
    let two = || {
        slice(
            "s",
            "n1",
            "p",
            1,
            1,
            vec![dev("gpu-0", &[]), dev("gpu-1", &[])],
        )
    };
    let tolerant = claim(
        "tolerant",
        json!([{"name": "r", "exactly": {"deviceClassName": "gpu", "count": 2,
        "tolerations": [{"key": "maintenance", "operator": "Exists"}]}}]),
        json!([]),
    );
    // (rule selector, effect, what a claim for two devices and one for one
    // device get) under v1.37's selector semantics.
    let cases: [(&str, Option<Value>, &str, Picks, Picks); 7] = [
        (
            "no selector selects nothing",
            None,
            "NoSchedule",
            picks(&["r:p/gpu-0", "r:p/gpu-1"]),
            picks(&["r:p/gpu-0"]),
        ),
        (
            "an empty selector selects every device",
            Some(json!({})),
            "NoSchedule",
            None,
            None,
        ),
        (
            "by device",
            Some(json!({"device": "gpu-0"})),
            "NoSchedule",
            None,
            picks(&["r:p/gpu-1"]),
        ),
        (
            "by driver, pool and device",
            Some(json!({"driver": DRIVER, "pool": "p", "device": "gpu-0"})),
            "NoExecute",
            None,
            picks(&["r:p/gpu-1"]),
        ),
        (
            "another pool",
            Some(json!({"pool": "q"})),
            "NoSchedule",
            picks(&["r:p/gpu-0", "r:p/gpu-1"]),
            picks(&["r:p/gpu-0"]),
        ),
        (
            "another driver",
            Some(json!({"driver": "nic.example.com", "device": "gpu-0"})),
            "NoSchedule",
            picks(&["r:p/gpu-0", "r:p/gpu-1"]),
            picks(&["r:p/gpu-0"]),
        ),
        (
            "effect None changes nothing",
            Some(json!({})),
            "None",
            picks(&["r:p/gpu-0", "r:p/gpu-1"]),
            picks(&["r:p/gpu-0"]),
        ),
    ];
    for (name, sel, effect, want_two, want_one) in cases {
        let w = World::new(vec![
            class("gpu", None),
            two(),
            claim("two", json!([exact("r", 2)]), json!([])),
            claim("one", json!([exact("r", 1)]), json!([])),
            tolerant.clone(),
            taint_rule("rule", sel, effect),
        ]);
        assert_eq!(w.pick(&["two"], &n1()), Ok(want_two), "{name}: two");
        assert_eq!(w.pick(&["one"], &n1()), Ok(want_one), "{name}: one");
        assert_eq!(
            w.pick(&["tolerant"], &n1()),
            Ok(picks(&["r:p/gpu-0", "r:p/gpu-1"])),
            "{name}: a toleration lets the claim use tainted devices"
        );
    }

    // The rule's arrival, its removal, and the gate turned off (v1.36's
    // default) all take effect on the slices already stored.
    let w = World::new(vec![
        class("gpu", None),
        two(),
        claim("two", json!([exact("r", 2)]), json!([])),
    ]);
    assert_eq!(
        w.pick(&["two"], &n1()),
        Ok(picks(&["r:p/gpu-0", "r:p/gpu-1"]))
    );
    w.store.upsert_taint_rule(Arc::new(
        serde_json::from_value(taint_rule(
            "rule",
            Some(json!({"device": "gpu-1"})),
            "NoSchedule",
        ))
        .unwrap(),
    ));
    assert_eq!(w.pick(&["two"], &n1()), Ok(None));
    w.store.set_taint_rules_enabled(false);
    assert_eq!(
        w.pick(&["two"], &n1()),
        Ok(picks(&["r:p/gpu-0", "r:p/gpu-1"]))
    );
    w.store.set_taint_rules_enabled(true);
    assert_eq!(w.pick(&["two"], &n1()), Ok(None));
    w.store.remove_taint_rule("rule");
    assert_eq!(
        w.pick(&["two"], &n1()),
        Ok(picks(&["r:p/gpu-0", "r:p/gpu-1"]))
    );
}

#[test]
fn shared_devices_are_allocated_by_capacity() {
    let nic = json!({"name": "nic-0", "allowMultipleAllocations": true,
        "capacity": {"bandwidth": {"value": "10G",
            "requestPolicy": {"default": "1G", "validRange": {"min": "1G", "step": "1G"}}}}});
    let ask = |name: &str, bw: &str| {
        claim(
            name,
            json!([{"name": "r", "exactly": {"deviceClassName": "gpu",
            "capacity": {"requests": {"bandwidth": bw}}}}]),
            json!([]),
        )
    };
    let w = World::new(vec![
        class("gpu", None),
        slice("s", "n1", "p", 1, 1, vec![nic]),
        ask("a", "4G"),
        ask("b", "5500M"),
        ask("c", "7G"),
    ]);
    // 4G + 5.5G rounded up to 6G = 10G: both fit on the one device.
    let a = w.allocator(&["a", "b"]).unwrap();
    let out = a.allocate(&n1()).unwrap().unwrap();
    assert_eq!(out[0].devices[0].device.as_ref(), "nic-0");
    assert_eq!(out[1].devices[0].device.as_ref(), "nic-0");
    assert_eq!(
        out[1].devices[0].consumed,
        vec![(Arc::from("bandwidth"), 6 * 1_000_000_000 * 1_000_000_000)]
    );
    assert!(out[0].devices[0].share_id.is_some());
    assert_ne!(out[0].devices[0].share_id, out[1].devices[0].share_id);
    assert_eq!(w.pick(&["a", "c"], &n1()), Ok(None), "4G + 7G > 10G");
}

#[test]
fn per_device_and_selector_slices_and_node_selectors_in_results() {
    let w = World::new(vec![
        class("gpu", None),
        json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": "zone-a"},
            "spec": {"driver": DRIVER, "pool": {"name": "net", "generation": 1, "resourceSliceCount": 1},
                "nodeSelector": {"nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]},
                "devices": [{"name": "vol-0"}]}}),
        json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": "per-device"},
            "spec": {"driver": DRIVER, "pool": {"name": "pd", "generation": 1, "resourceSliceCount": 1},
                "perDeviceNodeSelection": true,
                "devices": [{"name": "x", "nodeName": "n2"}, {"name": "y", "nodeName": "n1"}]}}),
        claim("c", json!([exact("r", 2)]), json!([])),
        claim("one", json!([exact("r", 1)]), json!([])),
    ]);
    assert_eq!(w.pick(&["c"], &n1()), Ok(picks(&["r:net/vol-0", "r:pd/y"])));
    let a = w.allocator(&["one"]).unwrap();
    let out = a.allocate(&n1()).unwrap().unwrap();
    let sel = out[0].node_selector.as_ref().unwrap();
    assert_eq!(
        serde_json::to_value(sel).unwrap(),
        json!({"nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]})
    );
    let b = make_node("b").label("zone", "b").build();
    assert_eq!(w.pick(&["one"], &b), Ok(None));
    let a = w.allocator(&["c"]).unwrap();
    let out = a.allocate(&n1()).unwrap().unwrap();
    assert_eq!(
        serde_json::to_value(out[0].node_selector.as_ref().unwrap()).unwrap(),
        json!({"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]}),
        "a device local to the node pins the allocation to it"
    );
}

#[test]
fn pools_with_binding_conditions_come_last() {
    let w = World::new(vec![
        class("gpu", None),
        slice(
            "a",
            "n1",
            "a-pool",
            1,
            1,
            vec![json!({"name": "fabric", "bindingConditions": ["attached"], "bindsToNode": true})],
        ),
        slice("b", "n1", "b-pool", 1, 1, gpus(1)),
        claim("c", json!([exact("r", 1)]), json!([])),
        claim("two", json!([exact("r", 2)]), json!([])),
    ]);
    assert_eq!(w.pick(&["c"], &n1()), Ok(picks(&["r:b-pool/gpu-0"])));
    let a = w.allocator(&["two"]).unwrap();
    let out = a.allocate(&n1()).unwrap().unwrap();
    assert_eq!(
        out[0].devices[1].binding_conditions,
        vec![Arc::<str>::from("attached")]
    );
}

#[test]
fn limits_and_bad_claims_are_errors() {
    let w = World::new(vec![
        class("gpu", None),
        slice("s", "n1", "p", 1, 1, gpus(1)),
        claim("huge", json!([exact("r", 33)]), json!([])),
        claim(
            "mode",
            json!([{"name": "r", "exactly": {"deviceClassName": "gpu", "allocationMode": "Some"}}]),
            json!([]),
        ),
    ]);
    assert_eq!(
        w.allocator(&["huge"]).unwrap_err(),
        "claim default/huge: number of requested devices 33 exceeds the claim limit of 32"
    );
    assert_eq!(
        w.allocator(&["mode"]).unwrap_err(),
        "claim default/mode, request r: unsupported count mode Some"
    );
}

#[test]
fn explanations_name_the_request_and_the_check_that_failed() {
    let w = World::new(vec![
        class(
            "gpu",
            Some(r#"device.attributes["gpu.example.com"].model == "a100""#),
        ),
        slice(
            "s",
            "n1",
            "p",
            1,
            1,
            vec![
                dev("gpu-0", &[("model", json!({"string": "a100"}))]),
                dev("gpu-1", &[("model", json!({"string": "t4"}))]),
            ],
        ),
        claim("c", json!([exact("r", 2)]), json!([])),
    ]);
    let a = w.allocator(&["c"]).unwrap();
    assert_eq!(
        explain_node(&a, &n1())
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>(),
        [
            "claim default/c, request r: needs 2 device(s); 2 in the node's resource pools, 1 of class gpu, 1 not allocated"
        ]
    );
    assert_eq!(
        explain_node(&a, &make_node("empty").build())
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>(),
        ["no ResourceSlice publishes devices for this node"]
    );
}
