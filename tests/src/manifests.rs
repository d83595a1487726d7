//! deploy/ as `kubectl apply -k deploy/` would create it: rendered by the
//! real kustomize (`kubectl kustomize`), each object parsed into its
//! k8s-openapi type with nothing lost on the way (a misspelled or
//! misplaced field fails).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, anyhow, bail, ensure};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Service, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::fake_apiserver::PolicyRule;
use crate::workspace_root;

/// kubectl: `KUBECTL`, else the one on PATH. tests/run.sh installs Debian's
/// kubernetes-client when there is none.
pub fn kubectl() -> Result<PathBuf> {
    if let Some(p) = std::env::var_os("KUBECTL") {
        return Ok(PathBuf::from(p));
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|d| d.join("kubectl"))
        .find(|p| p.is_file())
        .ok_or_else(|| {
            anyhow!(
                "kubectl not found on PATH; run tests/run.sh, which installs Debian's kubernetes-client"
            )
        })
}

/// The objects `kubectl kustomize deploy/` renders.
pub fn render() -> Result<Vec<Value>> {
    render_dir(&workspace_root().join("deploy"))
}

/// The objects `kubectl kustomize DIR` renders.
pub fn render_dir(dir: &Path) -> Result<Vec<Value>> {
    let out = Command::new(kubectl()?)
        .arg("kustomize")
        .arg(dir)
        .output()
        .context("running kubectl kustomize")?;
    ensure!(
        out.status.success(),
        "kubectl kustomize {} failed: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout)?;
    let mut objects = Vec::new();
    for doc in serde_yaml::Deserializer::from_str(&text) {
        let v: Value = serde::Deserialize::deserialize(doc)?;
        if !v.is_null() {
            objects.push(v);
        }
    }
    Ok(objects)
}

/// The first place where `a` and `b` differ, as a JSON path.
fn first_difference(a: &Value, b: &Value, path: &str) -> Option<String> {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            for (k, va) in x {
                let p = format!("{path}.{k}");
                match y.get(k) {
                    None => return Some(format!("{p}: not a field of the type (dropped)")),
                    Some(vb) => {
                        if let Some(d) = first_difference(va, vb, &p) {
                            return Some(d);
                        }
                    }
                }
            }
            y.keys()
                .find(|k| !x.contains_key(*k))
                .map(|k| format!("{path}.{k}: added by the type"))
        }
        (Value::Array(x), Value::Array(y)) => {
            if x.len() != y.len() {
                return Some(format!("{path}: {} items became {}", x.len(), y.len()));
            }
            x.iter()
                .zip(y)
                .enumerate()
                .find_map(|(i, (va, vb))| first_difference(va, vb, &format!("{path}[{i}]")))
        }
        _ if a == b => None,
        _ => Some(format!("{path}: {a} became {b}")),
    }
}

/// Parses `v` as `T` and checks that nothing was lost or changed.
pub fn typed<T: DeserializeOwned + Serialize>(v: &Value) -> Result<T> {
    let name = format!(
        "{} {}",
        v["kind"].as_str().unwrap_or("?"),
        v["metadata"]["name"].as_str().unwrap_or("?")
    );
    let t: T = serde_json::from_value(v.clone()).with_context(|| format!("{name}: schema"))?;
    let back = serde_json::to_value(&t)?;
    if let Some(d) = first_difference(v, &back, "") {
        bail!("{name}: does not match its schema at {d}");
    }
    Ok(t)
}

/// The objects deploy/ renders, one of each kind.
pub struct Manifests {
    /// berth's ServiceAccount.
    pub service_account: ServiceAccount,
    /// What berthd reads and writes.
    pub cluster_role: ClusterRole,
    /// The ClusterRole for the ServiceAccount.
    pub cluster_role_binding: ClusterRoleBinding,
    /// The Lease leader election takes.
    pub role: Role,
    /// The Role for the ServiceAccount.
    pub role_binding: RoleBinding,
    /// The KubeSchedulerConfiguration.
    pub config_map: ConfigMap,
    /// berthd.
    pub deployment: Deployment,
    /// Its gRPC and HTTP ports.
    pub service: Service,
}

/// deploy/'s objects.
pub fn manifests() -> Result<Manifests> {
    manifests_of(&render()?)
}

/// The objects of a rendering, by kind.
pub fn manifests_of(objects: &[Value]) -> Result<Manifests> {
    let mut sa = None;
    let mut cr = None;
    let mut crb = None;
    let mut role = None;
    let mut rb = None;
    let mut cm = None;
    let mut dep = None;
    let mut svc = None;
    for v in objects {
        let v = v.clone();
        let kind = v["kind"].as_str().unwrap_or_default().to_string();
        match kind.as_str() {
            "ServiceAccount" => sa = Some(typed(&v)?),
            "ClusterRole" => cr = Some(typed(&v)?),
            "ClusterRoleBinding" => crb = Some(typed(&v)?),
            "Role" => role = Some(typed(&v)?),
            "RoleBinding" => rb = Some(typed(&v)?),
            "ConfigMap" => cm = Some(typed(&v)?),
            "Deployment" => dep = Some(typed(&v)?),
            "Service" => svc = Some(typed(&v)?),
            other => bail!("deploy/ renders an unexpected kind {other:?}"),
        }
    }
    let missing = |what: &str| anyhow!("deploy/ renders no {what}");
    Ok(Manifests {
        service_account: sa.ok_or_else(|| missing("ServiceAccount"))?,
        cluster_role: cr.ok_or_else(|| missing("ClusterRole"))?,
        cluster_role_binding: crb.ok_or_else(|| missing("ClusterRoleBinding"))?,
        role: role.ok_or_else(|| missing("Role"))?,
        role_binding: rb.ok_or_else(|| missing("RoleBinding"))?,
        config_map: cm.ok_or_else(|| missing("ConfigMap"))?,
        deployment: dep.ok_or_else(|| missing("Deployment"))?,
        service: svc.ok_or_else(|| missing("Service"))?,
    })
}

/// `--name=value` arguments as (name, value).
pub fn flag_values(args: &[String]) -> Vec<(&str, &str)> {
    args.iter()
        .filter_map(|a| a.strip_prefix("--"))
        .map(|a| a.split_once('=').unwrap_or((a, "")))
        .collect()
}

/// Role rules by namespace.
pub type Roles = Vec<(String, Vec<PolicyRule>)>;

/// deploy/'s rules: the ClusterRole's everywhere, the Role's in its
/// namespace.
pub fn deploy_rules(m: &Manifests) -> Result<(Vec<PolicyRule>, Roles)> {
    let cluster = PolicyRule::from_role(&serde_json::to_value(&m.cluster_role)?)?;
    let role = PolicyRule::from_role(&serde_json::to_value(&m.role)?)?;
    let ns = m.role.metadata.namespace.clone().unwrap_or_default();
    Ok((cluster, vec![(ns, role)]))
}

/// The Deployment's container args with only what the environment
/// decides replaced: `--in-cluster` (the service account's token) by a
/// kubeconfig with the same token, the ConfigMap's mount path by `mount`
/// (where the test wrote its data), and the listen addresses by loopback
/// port 0 (tests run side by side).
pub fn deployment_args(m: &Manifests, kubeconfig: &Path, mount: &Path) -> Result<Vec<String>> {
    let pod = m
        .deployment
        .spec
        .template
        .spec
        .as_ref()
        .context("pod spec")?;
    let c = &pod.containers[0];
    let mount_path = c
        .volume_mounts
        .as_ref()
        .and_then(|v| v.first())
        .map(|v| v.mount_path.clone())
        .context("the config mount")?;
    let mut out = Vec::new();
    for a in c.args.clone().unwrap_or_default() {
        out.push(if a == "--in-cluster" {
            format!("--kubeconfig={}", kubeconfig.display())
        } else if let Some(path) = a.strip_prefix("--config=") {
            format!(
                "--config={}",
                path.replacen(&mount_path, &mount.display().to_string(), 1)
            )
        } else if a.starts_with("--listen=") {
            "--listen=127.0.0.1:0".into()
        } else if a.starts_with("--http-listen=") {
            "--http-listen=127.0.0.1:0".into()
        } else {
            a
        });
    }
    Ok(out)
}

/// Writes the ConfigMap's data under `dir` as the kubelet mounts it.
pub fn mount_config_map(m: &Manifests, dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir)?;
    for (k, v) in m.config_map.data.clone().unwrap_or_default() {
        std::fs::write(dir.join(k), v)?;
    }
    Ok(())
}
