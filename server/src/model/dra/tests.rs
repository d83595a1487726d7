use std::sync::Arc;

use k8s_openapi::api::resource::v1 as api;
use serde_json::json;

use super::*;

fn slice(v: serde_json::Value) -> Slice {
    let s: api::ResourceSlice = serde_json::from_value(v).unwrap();
    parse_slice(&mut DeviceSlots::default(), &s).unwrap()
}

fn gpu_slice() -> Slice {
    slice(json!({
        "metadata": {"name": "n1-gpu"},
        "spec": {
            "driver": "gpu.example.com",
            "pool": {"name": "n1", "generation": 1, "resourceSliceCount": 1},
            "nodeName": "n1",
            "devices": [
                {"name": "gpu-0",
                 "attributes": {
                    "model": {"string": "a100"},
                    "index": {"int": 0},
                    "healthy": {"bool": true},
                    "driverVersion": {"version": "1.2.3-rc.1"},
                    "numa.example.com/node": {"int": 1}},
                 "capacity": {"memory": {"value": "40Gi"}}},
                {"name": "gpu-1",
                 "attributes": {"model": {"string": "t4"}, "index": {"int": 1}},
                 "capacity": {"memory": {"value": "16Gi"}}}
            ]
        }
    }))
}

fn eval(expr: &str, device: &Device) -> Result<bool, SelectorError> {
    Selector::compile(expr).matches(device)
}

#[test]
fn the_device_variable_is_upstreams() {
    let s = gpu_slice();
    let (a100, t4) = (&s.devices[0], &s.devices[1]);
    let cases: &[(&str, &str, bool, bool)] = &[
        (
            "driver",
            r#"device.driver == "gpu.example.com""#,
            true,
            true,
        ),
        (
            "unqualified attributes live under the driver's domain",
            r#"device.attributes["gpu.example.com"].model == "a100""#,
            true,
            false,
        ),
        (
            "qualified attributes under their own domain",
            r#""node" in device.attributes["numa.example.com"] && device.attributes["numa.example.com"].node == 1"#,
            true,
            false,
        ),
        (
            "a domain the device lacks is an empty map",
            r#"!("node" in device.attributes["numa.example.com"])"#,
            false,
            true,
        ),
        (
            "capacity is a quantity",
            r#"device.capacity["gpu.example.com"].memory.compareTo(quantity("20Gi")) >= 0"#,
            true,
            false,
        ),
        (
            "isGreaterThan on quantities",
            r#"device.capacity["gpu.example.com"].memory.isGreaterThan(quantity("16Gi"))"#,
            true,
            false,
        ),
        (
            "quantities compare by value, not spelling",
            r#"device.capacity["gpu.example.com"].memory == quantity("16384Mi")"#,
            false,
            true,
        ),
        (
            "int and bool attributes",
            r#"device.attributes["gpu.example.com"].index < 1 && device.attributes["gpu.example.com"].healthy"#,
            true,
            false,
        ),
        (
            "has() on a missing attribute",
            r#"has(device.attributes["gpu.example.com"].healthy)"#,
            true,
            false,
        ),
        (
            "versions are semver",
            r#"has(device.attributes["gpu.example.com"].driverVersion) && device.attributes["gpu.example.com"].driverVersion.isLessThan(semver("1.2.3"))"#,
            true,
            false,
        ),
        (
            "cel.bind",
            r#"cel.bind(g, device.attributes["gpu.example.com"], g.model == "t4" && g.index == 1)"#,
            false,
            true,
        ),
        (
            "strings extension",
            r#"device.attributes["gpu.example.com"].model.upperAscii() == "T4""#,
            false,
            true,
        ),
        (
            "allowMultipleAllocations",
            "!device.allowMultipleAllocations",
            true,
            true,
        ),
    ];
    for (name, expr, want_a100, want_t4) in cases {
        assert_eq!(eval(expr, a100), Ok(*want_a100), "{name}: a100");
        assert_eq!(eval(expr, t4), Ok(*want_t4), "{name}: t4");
    }
}

#[test]
fn errors_are_worded_as_upstream() {
    let s = gpu_slice();
    let t4 = &s.devices[1];
    // A missing attribute inside a known domain is a runtime error.
    let err = eval(r#"device.attributes["gpu.example.com"].healthy"#, t4).unwrap_err();
    assert!(matches!(err, SelectorError::Runtime(_)), "{err}");
    assert!(err.to_string().starts_with("CEL runtime error: "), "{err}");
    let err = eval(r#"device.driver"#, t4).unwrap_err();
    assert_eq!(
        err.to_string(),
        "CEL runtime error: CEL result of type string could not be converted to bool"
    );
    let sel = Selector::compile("device.driver ==");
    assert!(sel.compile_error().is_some());
    assert!(
        sel.matches(t4)
            .unwrap_err()
            .to_string()
            .starts_with("CEL compile error: compilation failed")
    );
}

#[test]
fn verdicts_are_remembered_per_device_version() {
    let s = gpu_slice();
    let sel = Selector::compile(r#"device.attributes["gpu.example.com"].model == "a100""#);
    assert_eq!(sel.matches(&s.devices[0]), Ok(true));
    assert_eq!(sel.memo.read().len(), 1);
    assert_eq!(sel.matches(&s.devices[0]), Ok(true));
    assert_eq!(sel.memo.read().len(), 1, "answered from memory");
    // The same device published again is a new version: judged again.
    let again = gpu_slice();
    assert_ne!(again.devices[0].key, s.devices[0].key);
    assert_eq!(again.devices[0].slot, s.devices[0].slot);
    assert_eq!(sel.matches(&again.devices[0]), Ok(true));
    assert_eq!(sel.memo.read().len(), 2);
}

#[test]
fn one_compiled_selector_per_expression() {
    let mut cache = SelectorCache::default();
    let a = cache.get(r#"device.driver == "x""#);
    let b = cache.get(r#"device.driver == "x""#);
    assert!(Arc::ptr_eq(&a, &b));
    let c = cache.get(r#"device.driver == "y""#);
    assert!(!Arc::ptr_eq(&a, &c));
}

#[test]
fn semver_precedence() {
    let v = |s: &str| Semver::parse(s).unwrap();
    assert!(v("1.0.0-alpha").cmp_precedence(&v("1.0.0-alpha.1")).is_lt());
    assert!(
        v("1.0.0-alpha.1")
            .cmp_precedence(&v("1.0.0-alpha.beta"))
            .is_lt()
    );
    assert!(v("1.0.0-beta.11").cmp_precedence(&v("1.0.0-rc.1")).is_lt());
    assert!(v("1.0.0-rc.1").cmp_precedence(&v("1.0.0")).is_lt());
    assert!(v("1.0.0+build").cmp_precedence(&v("1.0.0")).is_eq());
    assert!(v("2.1.10").cmp_precedence(&v("2.1.9")).is_gt());
    for bad in ["1.0", "v1.0.0", "01.0.0", "1.0.0-", "1.0.0-01", "a.b.c"] {
        assert!(Semver::parse(bad).is_none(), "{bad}");
    }
}

#[test]
fn claims_parse_requests_constraints_and_status() {
    let claim: api::ResourceClaim = serde_json::from_value(json!({
        "metadata": {"name": "c", "namespace": "ns", "uid": "u1", "resourceVersion": "42",
            "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "pu", "controller": true}]},
        "spec": {"devices": {
            "requests": [
                {"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com", "count": 2,
                    "selectors": [{"cel": {"expression": "device.driver == 'gpu.example.com'"}}],
                    "tolerations": [{"key": "k", "operator": "Exists"}]}},
                {"name": "any", "firstAvailable": [
                    {"name": "big", "deviceClassName": "big"},
                    {"name": "small", "deviceClassName": "small", "allocationMode": "All"}]}
            ],
            "constraints": [{"requests": ["gpu"], "matchAttribute": "gpu.example.com/numa"}]
        }},
        "status": {
            "allocation": {"devices": {"results": [
                {"request": "gpu", "driver": "d", "pool": "p", "device": "x", "adminAccess": true}]},
                "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]}},
            "reservedFor": [{"resource": "pods", "name": "p", "uid": "pu"}]
        }
    }))
    .unwrap();
    let mut cache = SelectorCache::default();
    let mut slots = DeviceSlots::default();
    let c = parse_claim(&mut cache, &mut slots, Arc::new(claim));
    assert_eq!(c.key(), "ns/c");
    assert_eq!(c.resource_version, 42);
    assert!(c.invalid.is_none());
    match &c.requests[0] {
        Request::Exact(r) => {
            assert_eq!(r.mode, AllocationMode::ExactCount(2));
            assert_eq!(r.selectors.len(), 1);
            assert_eq!(&*r.tolerations[0].operator, "Exists");
        }
        other => panic!("{other:?}"),
    }
    match &c.requests[1] {
        Request::FirstAvailable { subrequests, .. } => {
            assert_eq!(subrequests[1].mode, AllocationMode::All);
        }
        other => panic!("{other:?}"),
    }
    assert!(
        matches!(&c.constraints[0], Constraint::MatchAttribute { attribute, .. } if &**attribute == "gpu.example.com/numa")
    );
    let alloc = c.allocation.as_ref().unwrap();
    assert!(alloc[0].admin_access);
    assert!(c.reserved_for_pod("pu"));
    let labels = crate::model::Labels::from_map(None);
    assert!(c.allocation_nodes.as_ref().unwrap().matches(&labels, "n1"));
    assert_eq!(c.controller.as_ref().map(|o| &*o.kind), Some("Pod"));
}

#[test]
fn attribute_lookup_is_upstreams() {
    let s = gpu_slice();
    let d = &s.devices[0];
    assert_eq!(
        d.lookup_attribute("gpu.example.com/model"),
        Some(&AttrValue::String(Arc::from("a100")))
    );
    assert_eq!(
        d.lookup_attribute("numa.example.com/node"),
        Some(&AttrValue::Int(1))
    );
    assert_eq!(d.lookup_attribute("other.example.com/model"), None);
}
