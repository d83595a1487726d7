//! Dynamic Resource Allocation in kube mode, against the stand-in API server
//! speaking `resource.k8s.io/v1` as the kube-apiserver v1.36 recorded in
//! `tests/k8s-api/dra-*.json`: berthd watches DeviceClasses, ResourceSlices
//! and ResourceClaims, and writes a claim as upstream kube-scheduler does:
//! the pod's nomination, then the finalizer (`PUT` of the claim), then one
//! status `PUT` with the allocation and the pod in `reservedFor`, then the
//! binding; and, when the attempt fails after that, the reservation removed
//! again with a strategic merge patch.

use std::collections::BTreeSet;
use std::path::PathBuf;

use anyhow::{Context, Result, ensure};
use berth_e2e::fake_apiserver::{BeforeBinding, FakeApiServer, Recorded, recording};
use berth_e2e::{Berthd, message};
use serde_json::{Value, json};

const PODS: &str = "/api/v1/namespaces/default/pods";
const CLAIMS: &str = "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims";

struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn node(name: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "spec": {},
        "status": {
            "capacity": {"cpu": "8", "memory": "32Gi", "pods": "110"},
            "allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    })
}

/// A recorded object, less what the API server adds.
fn clean(mut o: Value) -> Value {
    if let Some(m) = o["metadata"].as_object_mut() {
        for k in [
            "uid",
            "resourceVersion",
            "creationTimestamp",
            "managedFields",
            "generation",
        ] {
            m.remove(k);
        }
    }
    o
}

/// The recorded cluster: the DeviceClass and the three ResourceSlices of
/// the recording (nodes gpu-a, gpu-b, gpu-c), a claim as the recording's
/// user created it, and a pod using it.
async fn start(tag: &str) -> Result<(FakeApiServer, Berthd, TempDir)> {
    let fake = FakeApiServer::start().await?;
    for n in ["gpu-a", "gpu-b", "gpu-c", "cpu-1"] {
        fake.create("/api/v1/nodes", node(n))?;
    }
    fake.create(
        "/api/v1/namespaces",
        json!({"metadata": {"name": "default"}}),
    )?;
    for c in recording("dra-deviceclasses-list")?["response"]["body"]["items"]
        .as_array()
        .context("classes")?
    {
        fake.create("/apis/resource.k8s.io/v1/deviceclasses", clean(c.clone()))?;
    }
    for s in recording("dra-resourceslices-list")?["response"]["body"]["items"]
        .as_array()
        .context("slices")?
    {
        fake.create("/apis/resource.k8s.io/v1/resourceslices", clean(s.clone()))?;
    }
    // The claim as its user created it (before the scheduler's writes).
    let mut claim = clean(recording("dra-claim-finalizer")?["request"]["body"].clone());
    claim["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("finalizers");
    fake.create(CLAIMS, claim)?;
    fake.create(
        PODS,
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "one-gpu", "namespace": "default"},
            "spec": {
                "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                    "resources": {"claims": [{"name": "gpu"}]}}],
                "resourceClaims": [{"name": "gpu", "resourceClaimName": "probe-one-gpu"}],
            },
        }),
    )?;
    let dir =
        TempDir(std::env::temp_dir().join(format!("berth-kube-dra-{tag}-{}", std::process::id())));
    std::fs::create_dir_all(&dir.0)?;
    let kubeconfig = dir.0.join("kubeconfig");
    fake.write_kubeconfig(&kubeconfig)?;
    let path = kubeconfig.display().to_string();
    let mut berthd = Berthd::start(&["--kubeconfig", &path, "--seed", "1"]).await?;
    berthd
        .wait_for(|l| message(l).starts_with("cache synced with the kube cluster"))
        .await?;
    Ok((fake, berthd, dir))
}

/// The keys of a JSON object, nested ones as `a.b` (list items as `a[]`).
fn keys(v: &Value) -> BTreeSet<String> {
    fn walk(v: &Value, prefix: &str, out: &mut BTreeSet<String>) {
        match v {
            Value::Object(o) => {
                for (k, v) in o {
                    let p = if prefix.is_empty() {
                        k.clone()
                    } else {
                        format!("{prefix}.{k}")
                    };
                    out.insert(p.clone());
                    walk(v, &p, out);
                }
            }
            Value::Array(a) => {
                for v in a {
                    walk(v, &format!("{prefix}[]"), out);
                }
            }
            _ => {}
        }
    }
    let mut out = BTreeSet::new();
    walk(v, "", &mut out);
    out
}

fn claim_writes(fake: &FakeApiServer) -> Vec<Recorded> {
    fake.requests()
        .into_iter()
        .filter(|r| r.path.starts_with(CLAIMS) && r.method != "GET")
        .collect()
}

#[tokio::test]
async fn claims_are_written_once_as_upstream_writes_them() -> Result<()> {
    let (fake, berthd, _dir) = start("write").await?;
    let binding = fake
        .wait_for_request(|r| r.method == "POST" && r.path == format!("{PODS}/one-gpu/binding"))
        .await?;
    let node = binding.body["target"]["name"]
        .as_str()
        .unwrap_or("")
        .to_string();
    let all = fake.requests();
    let pos = |f: &dyn Fn(&Recorded) -> bool| all.iter().position(f);

    // 1. The nomination, before anything is written to the claim.
    let nominated = pos(&|r| {
        r.method == "PATCH"
            && r.path == format!("{PODS}/one-gpu/status")
            && r.body["status"]["nominatedNodeName"] == node.as_str()
    })
    .context("no nominatedNodeName patch before PreBind")?;
    let rec = recording("dra-pod-nominated-before-bind")?;
    ensure!(
        keys(&all[nominated].body) == keys(&rec["request"]["body"]),
        "{:?}",
        all[nominated].body
    );

    // 2. The finalizer: a PUT of the whole claim, status untouched.
    let writes = claim_writes(&fake);
    ensure!(writes.len() == 2, "two writes to the claim, got {writes:?}");
    let (fin, status) = (&writes[0], &writes[1]);
    let rec_fin = recording("dra-claim-finalizer")?;
    ensure!(fin.method == "PUT" && fin.path == rec_fin["request"]["path"].as_str().unwrap());
    ensure!(
        fin.body["metadata"]["finalizers"] == json!(["resource.kubernetes.io/delete-protection"])
    );
    ensure!(
        fin.body["status"].get("allocation").is_none(),
        "{:?}",
        fin.body
    );

    // 3. One status PUT: allocation and reservation together, with the
    //    resourceVersion the finalizer write returned.
    let rec_alloc = recording("dra-claim-allocate")?;
    ensure!(
        status.method == "PUT" && status.path == rec_alloc["request"]["path"].as_str().unwrap()
    );
    ensure!(
        keys(&status.body["status"]) == keys(&rec_alloc["request"]["body"]["status"]),
        "status fields {:?} differ from upstream's {:?}",
        keys(&status.body["status"]),
        keys(&rec_alloc["request"]["body"]["status"])
    );
    let results = &status.body["status"]["allocation"]["devices"]["results"];
    ensure!(results.as_array().map(Vec::len) == Some(1), "{results}");
    ensure!(results[0]["request"] == "gpu" && results[0]["driver"] == "gpu.example.com");
    ensure!(
        results[0]["pool"] == node.as_str(),
        "the device is on the bound node: {results}"
    );
    ensure!(
        status.body["status"]["allocation"]["nodeSelector"]
            == json!({"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]})
    );
    let pod = fake.get(&format!("{PODS}/one-gpu")).context("pod")?;
    ensure!(
        status.body["status"]["reservedFor"]
            == json!([{"resource": "pods", "name": "one-gpu", "uid": pod["metadata"]["uid"]}])
    );
    ensure!(
        status.body["metadata"]["finalizers"]
            == json!(["resource.kubernetes.io/delete-protection"])
    );

    // 4. Then the binding; the claim in the API is allocated and reserved.
    let bind_at =
        pos(&|r| r.method == "POST" && r.path == format!("{PODS}/one-gpu/binding")).unwrap();
    let status_at = pos(&|r| r.method == "PUT" && r.path == status.path).unwrap();
    ensure!(
        nominated < status_at && status_at < bind_at,
        "order: nominate, claim, bind"
    );
    let stored = fake
        .get(&format!("{CLAIMS}/probe-one-gpu"))
        .context("claim")?;
    ensure!(stored["status"]["allocation"]["devices"]["results"] == *results);
    ensure!(pod["spec"]["nodeName"] == node.as_str());
    ensure!(
        pod["status"].get("nominatedNodeName").is_none(),
        "cleared by the binding"
    );

    berthd.stop().await?;
    Ok(())
}

#[tokio::test]
async fn a_failed_binding_removes_the_reservation_with_upstreams_patch() -> Result<()> {
    let (fake, berthd, _dir) = start("unreserve").await?;
    // A second pod whose claim does not exist yet, so it waits in the
    // queue while its binding failure is staged: the binding answers 404
    // (the pod deleted meanwhile), so the attempt fails after PreBind wrote
    // the claim and Unreserve must take the reservation back.
    fake.create(
        PODS,
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "late", "namespace": "default"},
            "spec": {
                "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}],
                "resourceClaims": [{"name": "gpu", "resourceClaimName": "late-claim"}],
            },
        }),
    )?;
    fake.before_binding("default", "late", BeforeBinding::Delete);
    let mut claim = clean(recording("dra-claim-finalizer")?["request"]["body"].clone());
    claim["metadata"]["name"] = json!("late-claim");
    claim["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("finalizers");
    fake.create(CLAIMS, claim)?;
    let patch = fake
        .wait_for_request(|r| {
            r.method == "PATCH" && r.path == format!("{CLAIMS}/late-claim/status")
        })
        .await?;
    ensure!(
        patch.content_type.as_deref() == Some("application/strategic-merge-patch+json"),
        "{:?}",
        patch.content_type
    );
    let claim_uid =
        fake.get(&format!("{CLAIMS}/late-claim")).context("claim")?["metadata"]["uid"].clone();
    let pod_uid = patch.body["status"]["reservedFor"][0]["uid"].clone();
    ensure!(
        patch.body
            == json!({"metadata": {"uid": claim_uid}, "status": {"reservedFor": [{"$patch": "delete", "uid": pod_uid}]}}),
        "{}",
        patch.body
    );
    ensure!(patch.status == 200, "answered {}", patch.status);
    let stored = fake.get(&format!("{CLAIMS}/late-claim")).context("claim")?;
    ensure!(stored["status"].get("reservedFor").is_none(), "{stored}");
    berthd.stop().await?;
    Ok(())
}

#[tokio::test]
async fn extended_resources_backed_by_dra_create_their_claim_then_name_it_in_the_pod() -> Result<()>
{
    let (fake, berthd, _dir) = start("extended").await?;
    // The recorded class, also backing example.com/gpu.
    let class_path = "/apis/resource.k8s.io/v1/deviceclasses";
    let mut class =
        clean(recording("dra-deviceclasses-list")?["response"]["body"]["items"][0].clone());
    class["metadata"]["name"] = json!("gpu-by-name");
    class["spec"]["extendedResourceName"] = json!("example.com/gpu");
    fake.create(class_path, class)?;
    fake.create(
        PODS,
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "by-name", "namespace": "default"},
            "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                "resources": {"requests": {"example.com/gpu": "1"}, "limits": {"example.com/gpu": "1"}}}]},
        }),
    )?;
    let binding = fake
        .wait_for_request(|r| r.method == "POST" && r.path == format!("{PODS}/by-name/binding"))
        .await?;
    let node = binding.body["target"]["name"]
        .as_str()
        .unwrap_or("")
        .to_string();
    let all = fake.requests();
    let pos = |f: &dyn Fn(&Recorded) -> bool| all.iter().position(f);
    // POST of the claim, then its finalizer and status, then the pod's
    // status names it, then the binding.
    let create = pos(&|r| r.method == "POST" && r.path == CLAIMS).context("no claim created")?;
    let body = &all[create].body;
    ensure!(
        body["metadata"]["generateName"] == "by-name-extended-resources-",
        "{body}"
    );
    ensure!(body["metadata"].get("name").is_none(), "{body}");
    ensure!(
        body["metadata"]["annotations"]["resource.kubernetes.io/extended-resource-claim"] == "true"
    );
    ensure!(body["metadata"]["ownerReferences"][0]["controller"] == true);
    ensure!(
        body["spec"]["devices"]["requests"]
            == json!([{"name": "container-0-request-0", "exactly": {"deviceClassName": "gpu-by-name", "allocationMode": "ExactCount", "count": 1}}]),
        "{body}"
    );
    let name = fake
        .requests()
        .into_iter()
        .find(|r| {
            r.method == "PUT"
                && r.path
                    .starts_with(&format!("{CLAIMS}/by-name-extended-resources-"))
                && r.path.ends_with("/status")
        })
        .context("no status write")?
        .body["metadata"]["name"]
        .as_str()
        .unwrap_or("")
        .to_string();
    let status_put =
        pos(&|r| r.method == "PUT" && r.path == format!("{CLAIMS}/{name}/status")).unwrap();
    let finalizer_put =
        pos(&|r| r.method == "PUT" && r.path == format!("{CLAIMS}/{name}")).unwrap();
    let pod_patch = pos(&|r| {
        r.method == "PATCH"
            && r.path == format!("{PODS}/by-name/status")
            && r.body["status"]
                .get("extendedResourceClaimStatus")
                .is_some()
    })
    .context("no pod status patch")?;
    let bind_at =
        pos(&|r| r.method == "POST" && r.path == format!("{PODS}/by-name/binding")).unwrap();
    ensure!(
        create < finalizer_put
            && finalizer_put < status_put
            && status_put < pod_patch
            && pod_patch < bind_at
    );
    ensure!(
        all[pod_patch].body["status"]["extendedResourceClaimStatus"]
            == json!({"requestMappings": [{"containerName": "c", "resourceName": "example.com/gpu", "requestName": "container-0-request-0"}],
                "resourceClaimName": name})
    );
    let stored = fake.get(&format!("{CLAIMS}/{name}")).context("claim")?;
    ensure!(
        stored["status"]["allocation"]["devices"]["results"][0]["pool"] == node.as_str(),
        "{stored}"
    );
    berthd.stop().await?;
    Ok(())
}
