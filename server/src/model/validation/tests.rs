//! A table per kind: each case an object the API server refuses on
//! create, and the API server's message for it (path and words; several
//! errors as it lists them, `[a, b]`).

use serde_json::{Value, json};

use super::*;
use crate::model::admission::pod_from_json;

/// Runs `check` on each case's object and compares the message.
fn table<T: serde::de::DeserializeOwned>(
    kind: &str,
    cases: &[(&str, Value, &str)],
    check: impl Fn(&T) -> Result<(), InvalidObject>,
) {
    for (name, v, want) in cases {
        let obj: T =
            serde_json::from_value(v.clone()).unwrap_or_else(|e| panic!("{kind} {name}: {e}"));
        let got = check(&obj).err().map(|e| e.to_string()).unwrap_or_default();
        assert_eq!(got, *want, "{kind}: {name}");
    }
}

#[test]
fn names_follow_dns_rules() {
    assert_eq!(dns1123_label("web-1"), None);
    assert!(dns1123_label("Web").is_some());
    assert!(dns1123_label("-a").is_some());
    assert!(
        dns1123_label(&"a".repeat(64))
            .unwrap()
            .contains("no more than 63")
    );
    assert_eq!(dns1123_subdomain("web.shop-1"), None);
    assert!(dns1123_subdomain("web..shop").is_some());
    assert!(dns1123_subdomain("web_1").is_some());
    assert_eq!(dns1035_label("web-1"), None);
    assert!(dns1035_label("1web").is_some());
    assert_eq!(qualified_name("app.kubernetes.io/name"), None);
    assert_eq!(qualified_name("MyName"), None);
    assert!(qualified_name("a/b/c").is_some());
    assert!(
        qualified_name("Example.com/x")
            .unwrap()
            .starts_with("prefix part")
    );
    assert_eq!(label_value(""), None);
    assert!(label_value("a b").is_some());
}

fn pod(spec: Value) -> Value {
    json!({"metadata": {"name": "web", "namespace": "shop"}, "spec": spec})
}

const LABEL_MSG_START: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";

#[test]
fn pods() {
    let c = json!([{"name": "c"}]);
    let cases = [
        ("valid", pod(json!({"containers": c})), String::new()),
        (
            "a name that is not a subdomain",
            json!({"metadata": {"name": "Web_1"}, "spec": {"containers": c}}),
            format!("metadata.name: Invalid value: \"Web_1\": {}", SUBDOMAIN_MSG),
        ),
        (
            "a label value with a space (at the map, as the API server says)",
            json!({"metadata": {"name": "w", "labels": {"app": "a b"}}, "spec": {"containers": c}}),
            format!("metadata.labels: Invalid value: \"a b\": {LABEL_VALUE_MSG}"),
        ),
        (
            "no containers",
            pod(json!({"containers": []})),
            "spec.containers: Required value".into(),
        ),
        (
            "duplicate container names",
            pod(json!({"containers": [{"name": "c"}, {"name": "c"}]})),
            "spec.containers[1].name: Duplicate value: \"c\"".into(),
        ),
        (
            "an init container named as a container",
            pod(json!({"containers": c, "initContainers": [{"name": "c"}]})),
            "spec.initContainers[0].name: Duplicate value: \"c\"".into(),
        ),
        (
            "a container name that is not a label",
            pod(json!({"containers": [{"name": "C_1"}]})),
            format!("spec.containers[0].name: Invalid value: \"C_1\": {LABEL_MSG_START}"),
        ),
        (
            "a negative limit (the request defaulted from it is negative too)",
            pod(json!({"containers": [{"name": "c", "resources": {"limits": {"memory": "-5Gi"}}}]})),
            "[spec.containers[0].resources.limits[memory]: Invalid value: \"-5Gi\": must be greater than or equal to 0, spec.containers[0].resources.requests[memory]: Invalid value: \"-5Gi\": must be greater than or equal to 0]".into(),
        ),
        (
            "a request over a negative limit",
            pod(json!({"containers": [{"name": "c", "resources": {"requests": {"memory": "1Gi"}, "limits": {"memory": "-5Gi"}}}]})),
            "[spec.containers[0].resources.limits[memory]: Invalid value: \"-5Gi\": must be greater than or equal to 0, spec.containers[0].resources.requests: Invalid value: \"1Gi\": must be less than or equal to memory limit of -5Gi]".into(),
        ),
        (
            "a request over its limit",
            pod(json!({"containers": [{"name": "c", "resources": {"requests": {"cpu": "2"}, "limits": {"cpu": "1"}}}]})),
            "spec.containers[0].resources.requests: Invalid value: \"2\": must be less than or equal to cpu limit of 1".into(),
        ),
        (
            "an unknown resource",
            pod(json!({"containers": [{"name": "c", "resources": {"requests": {"cpux": "1"}}}]})),
            "[spec.containers[0].resources.requests[cpux]: Invalid value: \"cpux\": must be a standard resource type or fully qualified, spec.containers[0].resources.requests[cpux]: Invalid value: \"cpux\": must be a standard resource for containers]".into(),
        ),
        (
            "a fractional extended resource",
            pod(json!({"containers": [{"name": "c", "resources": {"requests": {"example.com/gpu": "500m"}, "limits": {"example.com/gpu": "500m"}}}]})),
            "[spec.containers[0].resources.limits[example.com/gpu]: Invalid value: 500m: must be an integer, spec.containers[0].resources.requests[example.com/gpu]: Invalid value: 500m: must be an integer]".into(),
        ),
        (
            "an extended resource below its limit",
            pod(json!({"containers": [{"name": "c", "resources": {"requests": {"example.com/gpu": "1"}, "limits": {"example.com/gpu": "2"}}}]})),
            "spec.containers[0].resources.requests: Invalid value: \"1\": must be equal to example.com/gpu limit of 2".into(),
        ),
        (
            "an extended resource without a limit",
            pod(json!({"containers": [{"name": "c", "resources": {"requests": {"example.com/gpu": "1"}}}]})),
            "spec.containers[0].resources.limits: Required value: Limit must be set for non overcommitable resources".into(),
        ),
        (
            "a port out of range, a host port out of range, an unknown protocol",
            pod(json!({"containers": [{"name": "c", "ports": [{"containerPort": 70000, "hostPort": -1, "protocol": "ICMP"}]}]})),
            "[spec.containers[0].ports[0].containerPort: Invalid value: 70000: must be between 1 and 65535, inclusive, spec.containers[0].ports[0].hostPort: Invalid value: -1: must be between 1 and 65535, inclusive, spec.containers[0].ports[0].protocol: Unsupported value: \"ICMP\": supported values: \"SCTP\", \"TCP\", \"UDP\"]".into(),
        ),
        (
            "a duplicate port name",
            pod(json!({"containers": [{"name": "c", "ports": [{"name": "http", "containerPort": 80}, {"name": "http", "containerPort": 81}]}]})),
            "spec.containers[0].ports[1].name: Duplicate value: \"http\"".into(),
        ),
        (
            "a toleration with a value under Exists and an unknown effect",
            pod(json!({"containers": c, "tolerations": [{"key": "k", "operator": "Exists", "value": "v", "effect": "Sometimes"}]})),
            "[spec.tolerations[0].operator: Invalid value: \"v\": value must be empty when `operator` is 'Exists', spec.tolerations[0].effect: Unsupported value: \"Sometimes\": supported values: \"NoExecute\", \"NoSchedule\", \"PreferNoSchedule\"]".into(),
        ),
        (
            "a toleration without a key that is not Exists",
            pod(json!({"containers": c, "tolerations": [{"operator": "Equal", "value": "v"}]})),
            "spec.tolerations[0].operator: Invalid value: \"Equal\": operator must be Exists when `key` is empty, which means \"match all values and all keys\"".into(),
        ),
        (
            "tolerationSeconds without NoExecute",
            pod(json!({"containers": c, "tolerations": [{"key": "k", "operator": "Exists", "effect": "NoSchedule", "tolerationSeconds": 5}]})),
            "spec.tolerations[0].effect: Invalid value: \"NoSchedule\": effect must be 'NoExecute' when `tolerationSeconds` is set".into(),
        ),
        (
            "a node selector key that is not a qualified name",
            pod(json!({"containers": c, "nodeSelector": {"a b": "x"}})),
            "spec.nodeSelector: Invalid value: \"a b\": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')".into(),
        ),
        (
            "a spread constraint with no skew, no key and an unknown action",
            pod(json!({"containers": c, "topologySpreadConstraints": [{"maxSkew": 0, "topologyKey": "", "whenUnsatisfiable": "Maybe"}]})),
            "[spec.topologySpreadConstraints[0].maxSkew: Invalid value: 0: must be greater than zero, spec.topologySpreadConstraints[0].topologyKey: Required value: can not be empty, spec.topologySpreadConstraints[0].whenUnsatisfiable: Unsupported value: \"Maybe\": supported values: \"DoNotSchedule\", \"ScheduleAnyway\"]".into(),
        ),
        (
            "minDomains with ScheduleAnyway",
            pod(json!({"containers": c, "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "ScheduleAnyway", "minDomains": 2}]})),
            "spec.topologySpreadConstraints[0].minDomains: Invalid value: 2: can only use minDomains if whenUnsatisfiable=DoNotSchedule, not ScheduleAnyway".into(),
        ),
        (
            "a duplicate scheduling gate",
            pod(json!({"containers": c, "schedulingGates": [{"name": "example.com/a"}, {"name": "example.com/a"}]})),
            "spec.schedulingGates[1]: Duplicate value: \"example.com/a\"".into(),
        ),
        (
            "duplicate volume names",
            pod(json!({"containers": c, "volumes": [{"name": "v", "emptyDir": {}}, {"name": "v", "emptyDir": {}}]})),
            "spec.volumes[1].name: Duplicate value: \"v\"".into(),
        ),
        (
            "an unknown restart policy",
            pod(json!({"containers": c, "restartPolicy": "Sometimes"})),
            "spec.restartPolicy: Unsupported value: \"Sometimes\": supported values: \"Always\", \"OnFailure\", \"Never\"".into(),
        ),
        (
            "a negative overhead",
            pod(json!({"containers": c, "overhead": {"cpu": "-1"}})),
            "spec.overhead.limits[cpu]: Invalid value: \"-1\": must be greater than or equal to 0".into(),
        ),
    ];
    for (name, v, want) in cases {
        // Through admission, as the API server: defaults, then validation.
        let got = pod_from_json(v)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert_eq!(got, want, "pod: {name}");
    }
}

fn node(spec: Value, status: Value) -> Value {
    json!({"metadata": {"name": "n1"}, "spec": spec, "status": status})
}

#[test]
fn nodes() {
    table(
        "node",
        &[
            (
                "valid",
                node(
                    json!({}),
                    json!({"allocatable": {"cpu": "4", "pods": "110"}}),
                ),
                "",
            ),
            (
                "negative allocatable",
                node(json!({}), json!({"allocatable": {"cpu": "-4"}})),
                "status.allocatable.cpu: Invalid value: \"-4\": must be greater than or equal to 0",
            ),
            (
                "negative capacity and fractional pods",
                node(
                    json!({}),
                    json!({"capacity": {"memory": "-1Gi"}, "allocatable": {"pods": "1500m"}}),
                ),
                "[status.capacity.memory: Invalid value: \"-1Gi\": must be greater than or equal to 0, status.allocatable.pods: Invalid value: 1500m: must be an integer]",
            ),
            (
                "a taint without an effect, and a bad key",
                node(json!({"taints": [{"key": "a b", "effect": ""}]}), json!({})),
                "[spec.taints[0].key: Invalid value: \"a b\": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]'), spec.taints[0].effect: Required value]",
            ),
            (
                "an unknown taint effect",
                node(
                    json!({"taints": [{"key": "k", "effect": "Later"}]}),
                    json!({}),
                ),
                "spec.taints[0].effect: Unsupported value: \"Later\": supported values: \"NoExecute\", \"NoSchedule\", \"PreferNoSchedule\"",
            ),
            (
                "the same taint key and effect twice",
                node(
                    json!({"taints": [{"key": "k", "value": "a", "effect": "NoSchedule"}, {"key": "k", "value": "b", "effect": "NoSchedule"}]}),
                    json!({}),
                ),
                "spec.taints[1]: Duplicate value: core.Taint{Key:\"k\", Value:\"b\", Effect:\"NoSchedule\", TimeAdded:<nil>}: taints must be unique by key and effect pair",
            ),
            (
                "a pod CIDR that is not one",
                node(json!({"podCIDR": "10.0.0.0"}), json!({})),
                "spec.podCIDR: Invalid value: \"10.0.0.0\": must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)",
            ),
        ],
        validate_node,
    );
}

macro_rules! kind_table {
    ($name:ident, $ty:ty, $variant:ident, $cases:expr) => {
        #[test]
        fn $name() {
            table::<$ty>(stringify!($name), &$cases, |o| {
                validate_object(ObjectRef::$variant(o))
            });
        }
    };
}

kind_table!(
    namespaces,
    k8s_openapi::api::core::v1::Namespace,
    Namespace,
    [
        ("valid", json!({"metadata": {"name": "shop"}}), ""),
        (
            "a name that is not a label",
            json!({"metadata": {"name": "shop.eu"}}),
            "metadata.name: Invalid value: \"shop.eu\": a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
        ),
    ]
);

kind_table!(
    persistent_volumes,
    k8s_openapi::api::core::v1::PersistentVolume,
    PersistentVolume,
    [
        (
            "valid",
            json!({"metadata": {"name": "pv"}, "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"], "hostPath": {"path": "/d"}}}),
            ""
        ),
        (
            "no access mode, no capacity, no source",
            json!({"metadata": {"name": "pv"}, "spec": {}}),
            "[spec.accessModes: Required value, spec.capacity: Required value, spec: Required value: must specify a volume type]"
        ),
        (
            "an unknown access mode and a zero capacity",
            json!({"metadata": {"name": "pv"}, "spec": {"capacity": {"storage": "0"}, "accessModes": ["ReadWriteSometimes"], "local": {"path": "/d"}}}),
            "[spec.accessModes: Unsupported value: \"ReadWriteSometimes\": supported values: \"ReadOnlyMany\", \"ReadWriteMany\", \"ReadWriteOnce\", \"ReadWriteOncePod\", spec.capacity[storage]: Invalid value: \"0\": must be greater than zero]"
        ),
        (
            "two sources, an unknown reclaim policy",
            json!({"metadata": {"name": "pv"}, "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"], "persistentVolumeReclaimPolicy": "Keep", "local": {"path": "/d"}, "hostPath": {"path": "/d"}}}),
            "[spec.persistentVolumeReclaimPolicy: Unsupported value: \"Keep\": supported values: \"Delete\", \"Recycle\", \"Retain\", spec: Forbidden: may not specify more than 1 volume type]"
        ),
    ]
);

kind_table!(
    persistent_volume_claims,
    k8s_openapi::api::core::v1::PersistentVolumeClaim,
    PersistentVolumeClaim,
    [
        (
            "valid",
            json!({"metadata": {"name": "c", "namespace": "shop"}, "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}),
            ""
        ),
        (
            "no access mode, no storage request",
            json!({"metadata": {"name": "c", "namespace": "shop"}, "spec": {}}),
            "[spec.accessModes: Required value: at least 1 access mode is required, spec.resources[storage]: Required value]"
        ),
        (
            "a negative request and a bad class name",
            json!({"metadata": {"name": "c", "namespace": "shop"}, "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "Fast", "resources": {"requests": {"storage": "-1Gi"}}}}),
            "[spec.resources[storage]: Invalid value: \"-1Gi\": must be greater than zero, spec.storageClassName: Invalid value: \"Fast\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')]"
        ),
    ]
);

kind_table!(
    storage_classes,
    k8s_openapi::api::storage::v1::StorageClass,
    StorageClass,
    [
        (
            "valid",
            json!({"metadata": {"name": "fast"}, "provisioner": "csi.example.com", "volumeBindingMode": "WaitForFirstConsumer"}),
            ""
        ),
        (
            "no provisioner, an unknown binding mode and reclaim policy",
            json!({"metadata": {"name": "fast"}, "provisioner": "", "reclaimPolicy": "Recycle", "volumeBindingMode": "Later"}),
            "[provisioner: Required value, reclaimPolicy: Unsupported value: \"Recycle\": supported values: \"Delete\", \"Retain\", volumeBindingMode: Unsupported value: \"Later\": supported values: \"Immediate\", \"WaitForFirstConsumer\"]"
        ),
    ]
);

kind_table!(
    csi_nodes,
    k8s_openapi::api::storage::v1::CSINode,
    CsiNode,
    [
        (
            "valid",
            json!({"metadata": {"name": "n1"}, "spec": {"drivers": [{"name": "csi.example.com", "nodeID": "n1", "allocatable": {"count": 10}}]}}),
            ""
        ),
        (
            "a duplicate driver, no node id, a negative count",
            json!({"metadata": {"name": "n1"}, "spec": {"drivers": [{"name": "csi.example.com", "nodeID": "n1"}, {"name": "csi.example.com", "nodeID": "", "allocatable": {"count": -1}}]}}),
            "[spec.drivers[1].name: Duplicate value: \"csi.example.com\", spec.drivers[1].nodeID: Required value, spec.drivers[1].allocatable.count: Invalid value: -1: must be greater than or equal to 0]"
        ),
    ]
);

kind_table!(
    pod_disruption_budgets,
    k8s_openapi::api::policy::v1::PodDisruptionBudget,
    PodDisruptionBudget,
    [
        (
            "valid",
            json!({"metadata": {"name": "b", "namespace": "shop"}, "spec": {"minAvailable": "50%", "selector": {"matchLabels": {"app": "web"}}}}),
            ""
        ),
        (
            "both bounds, one over 100%, the other negative",
            json!({"metadata": {"name": "b", "namespace": "shop"}, "spec": {"minAvailable": "150%", "maxUnavailable": -1}}),
            "[spec: Invalid value: \"minAvailable and maxUnavailable\": minAvailable and maxUnavailable cannot be both set, spec.minAvailable: Invalid value: \"150%\": must not be greater than 100%, spec.maxUnavailable: Invalid value: -1: must be greater than or equal to 0]"
        ),
        (
            "an unknown selector operator",
            json!({"metadata": {"name": "b", "namespace": "shop"}, "spec": {"selector": {"matchExpressions": [{"key": "app", "operator": "Near"}]}}}),
            "spec.selector.matchExpressions[0].operator: Invalid value: \"Near\": not a valid selector operator"
        ),
    ]
);

kind_table!(
    services,
    k8s_openapi::api::core::v1::Service,
    Service,
    [
        (
            "valid",
            json!({"metadata": {"name": "web", "namespace": "shop"}, "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}]}}),
            ""
        ),
        (
            "a name that is not a DNS-1035 label",
            json!({"metadata": {"name": "1web", "namespace": "shop"}}),
            "metadata.name: Invalid value: \"1web\": a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')"
        ),
        (
            "two unnamed ports, one out of range",
            json!({"metadata": {"name": "web", "namespace": "shop"}, "spec": {"ports": [{"port": 80}, {"port": 0}]}}),
            "[spec.ports[0].name: Required value, spec.ports[1].name: Required value, spec.ports[1].port: Invalid value: 0: must be between 1 and 65535, inclusive]"
        ),
    ]
);

fn template(labels: Value, spec: Value) -> Value {
    json!({"metadata": {"labels": labels}, "spec": spec})
}

kind_table!(
    replica_sets,
    k8s_openapi::api::apps::v1::ReplicaSet,
    ReplicaSet,
    [
        (
            "valid",
            json!({"metadata": {"name": "r", "namespace": "shop"}, "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
                "template": template(json!({"app": "web"}), json!({"containers": [{"name": "c"}]}))}}),
            ""
        ),
        (
            "negative replicas, a selector that does not select the template",
            json!({"metadata": {"name": "r", "namespace": "shop"}, "spec": {"replicas": -1, "selector": {"matchLabels": {"app": "web"}},
                "template": template(json!({"app": "db"}), json!({"containers": [{"name": "c"}]}))}}),
            "[spec.replicas: Invalid value: -1: must be greater than or equal to 0, spec.template.metadata.labels: Invalid value: map[string]string{\"app\":\"db\"}: `selector` does not match template `labels`]"
        ),
        (
            "an empty selector, a template that restarts on failure, duplicate containers",
            json!({"metadata": {"name": "r", "namespace": "shop"}, "spec": {"selector": {},
                "template": template(json!({}), json!({"restartPolicy": "OnFailure", "containers": [{"name": "c"}, {"name": "c"}]}))}}),
            "[spec.selector: Required value, spec.template.spec.containers[1].name: Duplicate value: \"c\", spec.template.spec.restartPolicy: Unsupported value: \"OnFailure\": supported values: \"Always\"]"
        ),
    ]
);

kind_table!(
    stateful_sets,
    k8s_openapi::api::apps::v1::StatefulSet,
    StatefulSet,
    [
        (
            "valid",
            json!({"metadata": {"name": "s", "namespace": "shop"}, "spec": {"selector": {"matchLabels": {"app": "db"}},
                "template": template(json!({"app": "db"}), json!({"containers": [{"name": "c"}]}))}}),
            ""
        ),
        (
            "a negative request in the template",
            json!({"metadata": {"name": "s", "namespace": "shop"}, "spec": {"selector": {"matchLabels": {"app": "db"}},
                "template": template(json!({"app": "db"}), json!({"containers": [{"name": "c", "resources": {"requests": {"cpu": "-1"}}}]}))}}),
            "spec.template.spec.containers[0].resources.requests[cpu]: Invalid value: \"-1\": must be greater than or equal to 0"
        ),
    ]
);

kind_table!(
    replication_controllers,
    k8s_openapi::api::core::v1::ReplicationController,
    ReplicationController,
    [
        (
            "valid",
            json!({"metadata": {"name": "rc", "namespace": "shop"}, "spec": {"selector": {"app": "web"},
                "template": template(json!({"app": "web"}), json!({"containers": [{"name": "c"}]}))}}),
            ""
        ),
        (
            "no selector",
            json!({"metadata": {"name": "rc", "namespace": "shop"}, "spec": {
                "template": template(json!({"app": "web"}), json!({"containers": [{"name": "c"}]}))}}),
            "spec.selector: Required value"
        ),
    ]
);

kind_table!(
    device_classes,
    k8s_openapi::api::resource::v1::DeviceClass,
    DeviceClass,
    [
        (
            "valid",
            json!({"metadata": {"name": "gpu.example.com"}, "spec": {"selectors": [{"cel": {"expression": "true"}}]}}),
            ""
        ),
        (
            "an empty expression",
            json!({"metadata": {"name": "gpu.example.com"}, "spec": {"selectors": [{"cel": {"expression": " "}}]}}),
            "spec.selectors[0].cel.expression: Required value"
        ),
    ]
);

fn claim(requests: Value) -> Value {
    json!({"metadata": {"name": "c", "namespace": "shop"}, "spec": {"devices": {"requests": requests}}})
}

kind_table!(
    resource_claims,
    k8s_openapi::api::resource::v1::ResourceClaim,
    ResourceClaim,
    [
        (
            "valid",
            claim(
                json!([{"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com", "count": 2}}])
            ),
            ""
        ),
        (
            "a request with neither exactly nor firstAvailable, and a duplicate name",
            claim(
                json!([{"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com"}}, {"name": "gpu"}])
            ),
            "[spec.devices.requests[1].name: Duplicate value: \"gpu\", spec.devices.requests[1]: Required value: exactly one of `exactly` or `firstAvailable` is required]"
        ),
        (
            "no class, a zero count, an unknown mode",
            claim(
                json!([{"name": "a", "exactly": {"deviceClassName": "", "count": 0}}, {"name": "b", "exactly": {"deviceClassName": "x", "allocationMode": "Some"}}])
            ),
            "[spec.devices.requests[0].exactly.deviceClassName: Required value, spec.devices.requests[0].exactly.count: Invalid value: 0: must be greater than zero, spec.devices.requests[1].exactly.allocationMode: Unsupported value: \"Some\": supported values: \"All\", \"ExactCount\"]"
        ),
    ]
);

kind_table!(
    resource_claim_templates,
    k8s_openapi::api::resource::v1::ResourceClaimTemplate,
    ResourceClaimTemplate,
    [
        (
            "valid",
            json!({"metadata": {"name": "t", "namespace": "shop"}, "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com"}}]}}}}),
            ""
        ),
        (
            "All with a count",
            json!({"metadata": {"name": "t", "namespace": "shop"}, "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com", "allocationMode": "All", "count": 2}}]}}}}),
            "spec.spec.devices.requests[0].exactly.count: Invalid value: 2: must not be specified when allocationMode is 'All'"
        ),
    ]
);

kind_table!(
    resource_slices,
    k8s_openapi::api::resource::v1::ResourceSlice,
    ResourceSlice,
    [
        (
            "valid",
            json!({"metadata": {"name": "s"}, "spec": {"driver": "gpu.example.com", "pool": {"name": "n1", "generation": 1, "resourceSliceCount": 1}, "nodeName": "n1", "devices": [{"name": "gpu-0"}]}}),
            ""
        ),
        (
            "no node selection, no pool name, no slices, duplicate devices",
            json!({"metadata": {"name": "s"}, "spec": {"driver": "gpu.example.com", "pool": {"name": "", "generation": 0, "resourceSliceCount": 0}, "devices": [{"name": "gpu-0"}, {"name": "gpu-0"}]}}),
            "[spec.pool.name: Required value, spec.pool.resourceSliceCount: Invalid value: 0: must be greater than zero, spec: Required value: exactly one of `nodeName`, `nodeSelector`, `allNodes`, `perDeviceNodeSelection` is required, spec.devices[1].name: Duplicate value: \"gpu-0\"]"
        ),
        (
            "two node selections",
            json!({"metadata": {"name": "s"}, "spec": {"driver": "gpu.example.com", "pool": {"name": "p", "generation": 0, "resourceSliceCount": 1}, "nodeName": "n1", "allNodes": true}}),
            "spec: Invalid value: \"{`nodeName`, `allNodes`}\": exactly one of `nodeName`, `nodeSelector`, `allNodes`, `perDeviceNodeSelection` is required, but multiple fields are set"
        ),
    ]
);
