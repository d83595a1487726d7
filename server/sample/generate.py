#!/usr/bin/env python3
"""Writes cluster.yaml: berthd's built-in sample cluster.

Deterministic (fixed seed). Nodes of mixed sizes across three zones, a
cordoned node, a tainted control-plane node, tainted GPU nodes (two of them
publishing their GPUs in DRA ResourceSlices); pods
already running on nodes, a few hundred pending pods of several
workloads (spread over zones, with node and pod affinities), gated pods,
a pod for another scheduler, a training job as two PodGroup gangs (one
complete, one waiting for its last pod), and pods that cannot fit
anywhere on purpose. Each pod that must stay pending carries the
annotation berth.dev/expect-pending with a phrase its reason contains;
the end-to-end tests read it. The pods of the gang that waits carry
berth.dev/expect-pending-generic-workload instead: they are pending only
with the GenericWorkload gate on.

Run: python3 server/sample/generate.py > server/sample/cluster.yaml
"""
import random

rng = random.Random(20261121)
docs = []
ZONES = ["eu-west-1a", "eu-west-1b", "eu-west-1c"]


def node(name, cpu, mem_gi, zone, pods=110, extra_labels=None, taints=None,
         unschedulable=False, extended=None):
    labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "topology.kubernetes.io/region": "eu-west-1",
        "topology.kubernetes.io/zone": zone,
    }
    labels.update(extra_labels or {})
    alloc = {"cpu": str(cpu), "memory": f"{mem_gi}Gi", "pods": str(pods),
             "ephemeral-storage": "100Gi"}
    alloc.update(extended or {})
    spec = {}
    if taints:
        spec["taints"] = taints
    if unschedulable:
        spec["unschedulable"] = True
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "spec": spec,
        "status": {
            "capacity": alloc, "allocatable": alloc,
            "conditions": [{"type": "Ready", "status": "True"}],
            "images": [{"names": ["registry.k8s.io/pause:3.10"], "sizeBytes": 514000}],
        },
    }


def pod(name, ns="default", cpu=None, mem=None, extra=None, labels=None,
        priority=None, node_name=None, tolerations=None, gates=None,
        scheduler=None, annotations=None, spec_extra=None):
    req = {}
    if cpu:
        req["cpu"] = cpu
    if mem:
        req["memory"] = mem
    req.update(extra or {})
    container = {"name": "app", "image": "registry.k8s.io/pause:3.10"}
    if req:
        container["resources"] = {"requests": req}
    if extra:
        # Extended resources cannot be overcommitted: the API server wants
        # their limits, equal to the requests.
        container["resources"]["limits"] = dict(extra)
    spec = {"containers": [container]}
    if priority is not None:
        spec["priority"] = priority
    if node_name:
        spec["nodeName"] = node_name
    if tolerations:
        spec["tolerations"] = tolerations
    if gates:
        spec["schedulingGates"] = [{"name": g} for g in gates]
    if scheduler:
        spec["schedulerName"] = scheduler
    spec.update(spec_extra or {})
    meta = {"name": name, "namespace": ns, "labels": labels or {}}
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


# The tier label the Python example extender (extenders/python/label_tier.py)
# scores nodes by: gold 100, silver 50, anything else 0. Three nodes in a
# row share a tier, so each zone has every tier.
TIERS = ["gold", "silver", "bronze"]


def general(instance_type, i):
    return {"node.kubernetes.io/instance-type": instance_type,
            "example.com/tier": TIERS[(i // 3) % 3]}


# Nodes: 15 small, 15 medium, 6 large, 2 GPU, 1 cordoned, 1 control plane.
nodes = []
for i in range(15):
    nodes.append(node(f"small-{i:02d}", 4, 16, ZONES[i % 3], extra_labels=general("m5.xlarge", i)))
for i in range(15):
    nodes.append(node(f"medium-{i:02d}", 8, 32, ZONES[i % 3], extra_labels=general("m5.2xlarge", i)))
for i in range(6):
    nodes.append(node(f"large-{i:02d}", 16, 64, ZONES[i % 3], extra_labels=general("m5.4xlarge", i)))
for i in range(2):
    nodes.append(node(f"gpu-{i:02d}", 16, 64, ZONES[i % 3],
                      extra_labels={"node.kubernetes.io/instance-type": "p3.8xlarge", "accelerator": "nvidia-v100"},
                      taints=[{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}],
                      extended={"nvidia.com/gpu": "4"}))
nodes.append(node("medium-cordoned", 8, 32, ZONES[0], unschedulable=True,
                  taints=[{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}]))
nodes.append(node("control-plane", 4, 16, ZONES[1],
                  extra_labels={"node-role.kubernetes.io/control-plane": ""},
                  taints=[{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}]))
# GPUs through Dynamic Resource Allocation: a driver publishes each node's
# devices in a ResourceSlice (4 × A100 80Gi on dra-gpu-00, two per NUMA
# node; 4 × T4 16Gi on dra-gpu-01); pods ask for them with claims.
DRA_TAINT = {"key": "gpu.example.com/dra", "value": "present", "effect": "NoSchedule"}
DRA_TOLERATION = [{"key": "gpu.example.com/dra", "operator": "Exists", "effect": "NoSchedule"}]
for i, (model, mem) in enumerate([("a100", "80Gi"), ("t4", "16Gi")]):
    nodes.append(node(f"dra-gpu-{i:02d}", 16, 64, ZONES[i % 3],
                      extra_labels={"node.kubernetes.io/instance-type": "g5.4xlarge"},
                      taints=[DRA_TAINT]))
docs += nodes
docs.append({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
             "metadata": {"name": "gpu.example.com"},
             "spec": {"selectors": [{"cel": {"expression": 'device.driver == "gpu.example.com"'}}]}})
for i, (model, mem) in enumerate([("a100", "80Gi"), ("t4", "16Gi")]):
    docs.append({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
                 "metadata": {"name": f"dra-gpu-{i:02d}-gpu.example.com"},
                 "spec": {"driver": "gpu.example.com", "nodeName": f"dra-gpu-{i:02d}",
                          "pool": {"name": f"dra-gpu-{i:02d}", "generation": 1, "resourceSliceCount": 1},
                          "devices": [{"name": f"gpu-{d}",
                                       "attributes": {"model": {"string": model}, "numa": {"int": d // 2}},
                                       "capacity": {"memory": {"value": mem}}} for d in range(4)]}})

workers = [n["metadata"]["name"] for n in nodes if n["metadata"]["name"].startswith(("small", "medium-0", "medium-1", "large"))]

# Pods already running: system daemons and earlier workloads.
for n in nodes:
    name = n["metadata"]["name"]
    docs.append(pod(f"node-exporter-{name}", ns="monitoring", cpu="100m", mem="128Mi",
                    labels={"app": "node-exporter"}, node_name=name,
                    tolerations=[{"operator": "Exists"}]))
for i in range(40):
    docs.append(pod(f"legacy-{i:02d}", ns="shop", cpu=rng.choice(["250m", "500m", "1"]),
                    mem=rng.choice(["256Mi", "512Mi", "1Gi"]), labels={"app": "legacy"},
                    node_name=workers[i % len(workers)]))

# Pending workloads.
def workload(app, ns, n, cpu, mem, priority=None, labels=None, **kw):
    for i in range(n):
        docs.append(pod(f"{app}-{i:03d}", ns=ns, cpu=cpu, mem=mem, priority=priority,
                        labels=dict({"app": app}, **(labels or {})), **kw))

def zone_spread(app):
    return {"topologySpreadConstraints": [{
        "maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
        "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": {"app": app}}}]}


def required_node(key, values):
    return {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": key, "operator": "In", "values": values}]}]}}}}


# web spreads evenly over the zones; api spreads by the system default
# constraints (its Service selects it) and prefers hosts without another api
# pod; cache only runs on the bigger instance types; analytics prefers the
# zones cache runs in.
workload("web", "shop", 40, "250m", "512Mi", priority=1000, spec_extra=zone_spread("web"))
workload("api", "shop", 30, "500m", "1Gi", priority=1000, spec_extra={"affinity": {"podAntiAffinity": {
    "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "podAffinityTerm": {
        "labelSelector": {"matchLabels": {"app": "api"}},
        "topologyKey": "kubernetes.io/hostname"}}]}}})
docs.append({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "api", "namespace": "shop"},
             "spec": {"selector": {"app": "api"}, "ports": [{"port": 80}]}})
workload("checkout", "shop", 12, "1", "2Gi", priority=100000)
workload("worker", "batch", 40, "1", "2Gi")
workload("report", "batch", 30, "100m", "128Mi", priority=-10)
workload("scratch", "batch", 20, None, None)  # BestEffort: no requests
workload("cache", "shop", 10, "2", "8Gi", priority=1000,
         spec_extra=required_node("node.kubernetes.io/instance-type", ["m5.2xlarge", "m5.4xlarge"]))
workload("analytics", "data", 8, "4", "16Gi", spec_extra={"affinity": {"podAffinity": {
    "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 50, "podAffinityTerm": {
        "labelSelector": {"matchLabels": {"app": "cache"}}, "namespaces": ["shop"],
        "topologyKey": "topology.kubernetes.io/zone"}}]}}})
workload("trainer", "ml", 4, "4", "16Gi", priority=200000, extra={"nvidia.com/gpu": "2"},
         tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}])

# DRA: claims made from templates by the resourceclaim controller. finetune
# needs two A100s on one NUMA node; infer takes any GPU; greedy wants more
# GPUs than a node has.
def claim_template(name, requests, constraints=None):
    devices = {"requests": requests}
    if constraints:
        devices["constraints"] = constraints
    docs.append({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
                 "metadata": {"name": name, "namespace": "ml"},
                 "spec": {"spec": {"devices": devices}}})

def with_claim(template):
    return {"resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": template}]}

claim_template("one-gpu", [{"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com"}}])
claim_template("a100-pair", [{"name": "gpus", "exactly": {
    "deviceClassName": "gpu.example.com", "count": 2,
    "selectors": [{"cel": {"expression": 'device.attributes["gpu.example.com"].model == "a100"'}}]}}],
    [{"matchAttribute": "gpu.example.com/numa"}])
claim_template("eight-gpus", [{"name": "gpus", "exactly": {"deviceClassName": "gpu.example.com", "count": 8}}])
docs.append(pod("finetune", ns="ml", cpu="4", mem="16Gi", priority=200000,
                tolerations=DRA_TOLERATION, spec_extra=with_claim("a100-pair")))
for i in range(4):
    docs.append(pod(f"infer-{i:03d}", ns="ml", cpu="2", mem="8Gi", priority=1000,
                    labels={"app": "infer"}, tolerations=DRA_TOLERATION, spec_extra=with_claim("one-gpu")))
docs.append(pod("gpu-greedy", ns="ml", cpu="1", mem="1Gi", tolerations=DRA_TOLERATION,
                spec_extra=with_claim("eight-gpus"),
                annotations={"berth.dev/expect-pending": "cannot allocate all claims"}))

# A training job as PodGroup gangs (scheduling.k8s.io/v1beta1; scheduled
# as gangs only with --feature-gates=GenericWorkload=true, as plain pods
# otherwise): resnet's four workers are all there and start together; bert
# needs four and has three so far, so with the gate on all three wait for
# the last one (the annotation names the phrase of that wait).
def pod_group(name, ns, min_count):
    docs.append({"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
                 "metadata": {"name": name, "namespace": ns},
                 "spec": {"schedulingPolicy": {"gang": {"minCount": min_count}}}})

for job, present in [("resnet", 4), ("bert", 3)]:
    pod_group(f"train-{job}", "ml", 4)
    for i in range(present):
        annotations = None
        if present < 4:
            annotations = {"berth.dev/expect-pending-generic-workload":
                           "waiting for minCount pods from a gang to appear in scheduling queue"}
        docs.append(pod(f"train-{job}-{i}", ns="ml", cpu="1", mem="2Gi",
                        labels={"app": f"train-{job}"}, annotations=annotations,
                        spec_extra={"schedulingGroup": {"podGroupName": f"train-{job}"}}))

# Held back by scheduling gates until someone removes them.
for i in range(3):
    docs.append(pod(f"gated-{i}", ns="batch", cpu="100m", mem="128Mi", gates=["example.com/quota-check"],
                    annotations={"berth.dev/expect-pending": "waiting for scheduling gates"}))

# Another scheduler's pod: berth must leave it alone.
docs.append(pod("other-scheduler-job", ns="batch", cpu="100m", mem="64Mi", scheduler="volcano",
                annotations={"berth.dev/expect-untouched": "true"}))

# Pods that fit nowhere, on purpose.
docs.append(pod("huge-db", ns="data", cpu="32", mem="64Gi",
                annotations={"berth.dev/expect-pending": "Insufficient cpu"}))
docs.append(pod("memory-monster", ns="data", cpu="2", mem="512Gi",
                annotations={"berth.dev/expect-pending": "Insufficient memory"}))
docs.append(pod("gpu-hog", ns="ml", cpu="4", mem="8Gi", extra={"nvidia.com/gpu": "8"},
                tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                annotations={"berth.dev/expect-pending": "Insufficient nvidia.com/gpu"}))
docs.append(pod("gpu-no-toleration", ns="ml", cpu="1", mem="1Gi",
                spec_extra={"nodeSelector": {"accelerator": "nvidia-v100"}},
                annotations={"berth.dev/expect-pending": "36 node(s) didn't match Pod's node affinity/selector, 5 node(s) had untolerated taint(s)"}))
docs.append(pod("arm-only", ns="batch", cpu="100m", mem="64Mi",
                spec_extra=required_node("kubernetes.io/arch", ["arm64"]),
                annotations={"berth.dev/expect-pending": "node(s) didn't match Pod's node affinity/selector"}))
docs.append(pod("needs-a-db", ns="shop", cpu="100m", mem="64Mi",
                spec_extra={"affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
                    "labelSelector": {"matchLabels": {"app": "postgres"}},
                    "topologyKey": "topology.kubernetes.io/zone"}]}}},
                annotations={"berth.dev/expect-pending": "didn't match pod affinity rules"}))
docs.append(pod("fpga-job", ns="ml", cpu="1", mem="1Gi", extra={"example.com/fpga": "1"},
                annotations={"berth.dev/expect-pending": "Insufficient example.com/fpga"}))


def emit(value, indent=0):
    """A small YAML emitter for this data (flow style for leaf maps)."""
    import json
    pad = "  " * indent
    out = []
    if isinstance(value, dict):
        for k, v in value.items():
            key = json.dumps(k) if any(c in k for c in ":/ ") else k
            if isinstance(v, (dict, list)) and v:
                out.append(f"{pad}{key}:")
                out.append(emit(v, indent + 1))
            else:
                out.append(f"{pad}{key}: {json.dumps(v)}")
    else:
        for item in value:
            if isinstance(item, dict) and item:
                body = emit(item, indent + 1).lstrip()
                out.append(f"{pad}- {body}")
            else:
                out.append(f"{pad}- {json.dumps(item)}")
    return "\n".join(out)


print("# berthd's built-in sample cluster. Generated by generate.py; edit that, not this.")
print("# " + f"{sum(1 for d in docs if d['kind'] == 'Node')} nodes, {sum(1 for d in docs if d['kind'] == 'Pod')} pods.")
for d in docs:
    print("---")
    print(emit(d))
