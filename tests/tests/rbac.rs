//! berthd under RBAC, against the stand-in API server enforcing it as the
//! real one does (`FakeApiServer::add_user`): with deploy/'s rules, run as
//! the Deployment runs it, it syncs and binds; with a rule missing it says
//! which rule in one line and `/readyz` says which informer waits and why;
//! under kube-scheduler's built-in roles it needs the Lease named
//! `kube-scheduler`, and says so.

use anyhow::{Context, Result, ensure};
use berth_e2e::fake_apiserver::{
    FakeApiServer, PolicyRule, Recorded, kube_scheduler_rules, ready_node,
};
use berth_e2e::manifests::{deploy_rules, deployment_args, manifests, mount_config_map};
use berth_e2e::{Berthd, TempDir, http_get, message};
use serde_json::{Value, json};

const PODS: &str = "/api/v1/namespaces/default/pods";
const SA_USER: &str = "system:serviceaccount:kube-system:berth";
const TOKEN: &str = "berth-token";

fn pod(name: &str, scheduler: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "schedulerName": scheduler,
            "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}],
        },
    })
}

/// The stand-in with a node and the default namespace.
async fn cluster() -> Result<FakeApiServer> {
    let fake = FakeApiServer::start().await?;
    fake.create("/api/v1/nodes", ready_node("n1", "4", "16Gi"))?;
    fake.create(
        "/api/v1/namespaces",
        json!({"metadata": {"name": "default"}}),
    )?;
    Ok(fake)
}

fn is_binding(r: &Recorded, pod: &str) -> bool {
    r.method == "POST" && r.path == format!("{PODS}/{pod}/binding")
}

/// berthd run exactly as deploy/'s Deployment runs it (its args, the
/// ConfigMap's configuration, leader election on the Lease the Role
/// grants), as the ServiceAccount deploy/'s bindings name, under deploy/'s
/// rules: it syncs, leads, binds a pod that asks for `berth`, and leaves
/// kube-scheduler's pods alone; nothing it sends is refused.
#[tokio::test]
async fn berthd_as_the_deployment_runs_it_schedules_under_deploys_own_rbac() -> Result<()> {
    let m = manifests()?;
    let fake = cluster().await?;
    let (cluster_rules, roles) = deploy_rules(&m)?;
    fake.add_user(TOKEN, SA_USER, cluster_rules, roles);
    fake.create(PODS, pod("mine", "berth"))?;
    fake.create(PODS, pod("theirs", "default-scheduler"))?;
    let dir = TempDir::new("deployment")?;
    let kubeconfig = dir.0.join("kubeconfig");
    fake.write_kubeconfig_with_token(&kubeconfig, TOKEN)?;
    let mount = dir.0.join("etc-berth");
    mount_config_map(&m, &mount)?;
    let args = deployment_args(&m, &kubeconfig, &mount)?;
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut berthd = Berthd::start_exact(&args).await?;

    // The first refusal, if any, or the binding.
    let first = fake
        .wait_for_request(|r| r.status == 403 || is_binding(r, "mine"))
        .await?;
    ensure!(
        first.status == 201,
        "berthd was refused under deploy/rbac.yaml: {} {} -> {}",
        first.method,
        first.path,
        first.status
    );
    berthd
        .wait_for(|l| message(l) == "scheduled" && l["fields"]["pod"] == "default/mine")
        .await?;
    let http = berthd.http_addr()?;
    let (status, body) = http_get(&http, "/readyz?verbose").await?;
    ensure!(status == 200, "{body}");
    ensure!(fake.requests_to("POST", "/theirs/binding").is_empty());
    let forbidden = fake.forbidden_requests();
    ensure!(forbidden.is_empty(), "{forbidden:#?}");
    berthd.stop().await?;
    Ok(())
}

/// What deploy/rbac.yaml held before DRA's rules: with resource.k8s.io
/// refused, berthd says once which rule is missing, for each resource,
/// once the refusal has lasted its grace and however often its watch
/// retries, and /readyz says which informers wait and why (not "reason
/// withheld").
#[tokio::test]
async fn a_forbidden_watch_is_one_line_naming_the_rule_and_readyz_names_the_informer() -> Result<()>
{
    let m = manifests()?;
    let fake = cluster().await?;
    let (cluster_rules, roles) = deploy_rules(&m)?;
    let without_dra: Vec<PolicyRule> = cluster_rules
        .into_iter()
        .filter(|r| !r.api_groups.iter().any(|g| g == "resource.k8s.io"))
        .collect();
    fake.add_user(TOKEN, SA_USER, without_dra, roles);
    let dir = TempDir::new("forbidden-watch")?;
    let kubeconfig = dir.0.join("kubeconfig");
    fake.write_kubeconfig_with_token(&kubeconfig, TOKEN)?;
    let path = kubeconfig.display().to_string();
    // A refusal is named once it has lasted the grace (10 s unless set: an
    // API server that is starting refuses for a moment).
    let mut berthd = Berthd::start(&[
        "--kubeconfig",
        &path,
        "--http-listen",
        "127.0.0.1:0",
        "--leader-elect=false",
        "--forbidden-grace=1s",
    ])
    .await?;
    let slices = "/apis/resource.k8s.io/v1/resourceslices";
    berthd
        .wait_for(|l| message(l).starts_with("forbidden to list resourceslices.resource.k8s.io: "))
        .await?;
    // Its watcher retries (with backoff): a refusal more after the line.
    let before = fake
        .forbidden_requests()
        .iter()
        .filter(|r| r.path == slices)
        .count();
    fake.wait_for_requests(before + 1, |r| r.status == 403 && r.path == slices)
        .await?;
    let http = berthd.http_addr()?;
    let (status, body) = http_get(&http, "/readyz?verbose").await?;
    ensure!(status == 500, "{body}");
    let line = body
        .lines()
        .find(|l| l.starts_with("[-]sched-handler-sync failed: "))
        .with_context(|| body.clone())?;
    ensure!(
        line.contains("waiting for informers to sync: ")
            && line.contains(&format!(
                "resourceslices.resource.k8s.io (forbidden: resourceslices.resource.k8s.io is forbidden: User \"{SA_USER}\" cannot list resource \"resourceslices\" in API group \"resource.k8s.io\" at the cluster scope)"
            ))
            && line.contains("deviceclasses.resource.k8s.io (forbidden: ")
            && !line.contains("nodes"),
        "{line}"
    );
    // One line per resource, naming the rule, however many refusals.
    let refused = fake
        .forbidden_requests()
        .iter()
        .filter(|r| r.path == slices)
        .count();
    berthd.signal("TERM")?;
    let (_, lines) = berthd.exit_with_all_lines().await?;
    let said: Vec<&Value> = lines
        .iter()
        .filter(|l| l["fields"]["resource"] == "resourceslices.resource.k8s.io")
        .filter(|l| l["level"] == "ERROR" || l["level"] == "WARN")
        .collect();
    ensure!(said.len() == 1, "{refused} refusals, lines: {said:#?}");
    let text = message(said[0]);
    ensure!(
        text.starts_with("forbidden to list resourceslices.resource.k8s.io: ")
            && text.contains(r#"grants {apiGroups: ["resource.k8s.io"], resources: ["resourceslices"], verbs: ["get", "list", "watch"]}"#)
            && text.contains(&format!("User \"{SA_USER}\" cannot list")),
        "{text}"
    );
    // Nothing else of kube-runtime's: no debug dumps of the Status.
    let dumps: Vec<&Value> = lines
        .iter()
        .filter(|l| l.to_string().contains("ErrorResponse") || l.to_string().contains("Status {"))
        .collect();
    ensure!(dumps.is_empty(), "{dumps:#?}");
    Ok(())
}

/// In place of kube-scheduler, under its built-in roles: the default
/// Lease `berth` is refused, and berthd says once, however often it
/// retries, that `--leader-elect-resource-name=kube-scheduler` fixes it;
/// with that flag it leads and binds, and nothing it sends is refused.
#[tokio::test]
async fn under_kube_schedulers_roles_the_lease_is_kube_schedulers_and_berthd_says_so() -> Result<()>
{
    let fake = cluster().await?;
    fake.add_user(
        TOKEN,
        "system:kube-scheduler",
        kube_scheduler_rules()?,
        Vec::new(),
    );
    let dir = TempDir::new("kube-scheduler-role")?;
    let kubeconfig = dir.0.join("kubeconfig");
    fake.write_kubeconfig_with_token(&kubeconfig, TOKEN)?;
    let path = kubeconfig.display().to_string();
    let lease =
        |name: &str| format!("/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/{name}");

    // The default Lease: refused, said once (once the refusal has lasted
    // the grace), however often it is retried.
    let mut berthd = Berthd::start(&[
        "--kubeconfig",
        &path,
        "--leader-elect-retry-period=100ms",
        "--forbidden-grace=1s",
    ])
    .await?;
    berthd
        .wait_for(|l| message(l).starts_with("forbidden to get lease kube-system/berth: "))
        .await?;
    let before = fake.forbidden_requests().len();
    fake.wait_for_requests(before + 4, |r| r.status == 403 && r.path == lease("berth"))
        .await?;
    berthd.signal("TERM")?;
    let (_, lines) = berthd.exit_with_all_lines().await?;
    let said: Vec<&Value> = lines
        .iter()
        .filter(|l| l["fields"]["lease"] == "kube-system/berth")
        .filter(|l| l["level"] == "ERROR" || l["level"] == "WARN")
        .collect();
    ensure!(said.len() == 1, "{said:#?}");
    let text = message(said[0]);
    ensure!(
        text.starts_with("forbidden to get lease kube-system/berth: ")
            && text.contains("run berthd with --leader-elect-resource-name=kube-scheduler")
            && text.contains(r#"grant {apiGroups: ["coordination.k8s.io"], resources: ["leases"], resourceNames: ["berth"], verbs: ["get", "update"]}"#),
        "{text}"
    );
    let refused_before = fake.forbidden_requests().len();
    ensure!(
        fake.forbidden_requests()
            .iter()
            .all(|r| r.path == lease("berth")),
        "only the Lease is refused: {:#?}",
        fake.forbidden_requests()
    );

    // The flag: it leads on kube-scheduler's Lease and binds.
    fake.create(PODS, pod("p", "default-scheduler"))?;
    let mut berthd = Berthd::start(&[
        "--kubeconfig",
        &path,
        "--leader-elect-resource-name=kube-scheduler",
    ])
    .await?;
    berthd
        .wait_for(|l| message(l) == "scheduled" && l["fields"]["pod"] == "default/p")
        .await?;
    let held = fake.get(&lease("kube-scheduler")).context("the Lease")?;
    ensure!(
        held["spec"]["holderIdentity"]
            .as_str()
            .is_some_and(|h| !h.is_empty())
    );
    ensure!(fake.forbidden_requests().len() == refused_before);
    berthd.stop().await?;
    Ok(())
}

/// Two replicas: the first takes the Lease but is refused DRA's kinds, so
/// its cache never syncs; after --cache-sync-timeout it gives the Lease up
/// and says why, and the second, which can serve, takes over and binds.
#[tokio::test]
async fn a_leader_that_cannot_sync_hands_the_lease_to_a_standby_that_can() -> Result<()> {
    let m = manifests()?;
    let fake = cluster().await?;
    let (cluster_rules, roles) = deploy_rules(&m)?;
    let without_dra: Vec<PolicyRule> = cluster_rules
        .iter()
        .filter(|r| !r.api_groups.iter().any(|g| g == "resource.k8s.io"))
        .cloned()
        .collect();
    fake.add_user("crippled", SA_USER, without_dra, roles.clone());
    fake.add_user(TOKEN, SA_USER, cluster_rules, roles);
    let dir = TempDir::new("give-up")?;
    let (ka, kb) = (dir.0.join("a"), dir.0.join("b"));
    fake.write_kubeconfig_with_token(&ka, "crippled")?;
    fake.write_kubeconfig_with_token(&kb, TOKEN)?;
    let flags = [
        "--leader-elect-lease-duration=3s",
        "--leader-elect-renew-deadline=2s",
        "--leader-elect-retry-period=200ms",
        "--cache-sync-timeout=1s",
        "--http-listen=127.0.0.1:0",
    ];
    let (pa, pb) = (ka.display().to_string(), kb.display().to_string());
    let mut args_a = vec!["--kubeconfig", pa.as_str()];
    args_a.extend(flags);
    let mut a = Berthd::start(&args_a).await?;
    a.wait_for(|l| message(l) == "successfully acquired lease kube-system/berth")
        .await?;
    let mut args_b = vec!["--kubeconfig", pb.as_str()];
    args_b.extend(flags);
    let mut b = Berthd::start(&args_b).await?;
    b.wait_for(|l| message(l).starts_with("cache synced with the kube cluster"))
        .await?;
    fake.create(PODS, pod("p", "default-scheduler"))?;

    let gave_up = a
        .wait_for(|l| message(l).starts_with("gave up lease kube-system/berth: "))
        .await?;
    let text = message(&gave_up);
    ensure!(
        text.contains("without its cache synced (waiting for informers to sync: ")
            && text.contains("resourceslices.resource.k8s.io (forbidden: "),
        "{text}"
    );
    b.wait_for(|l| message(l) == "successfully acquired lease kube-system/berth")
        .await?;
    b.wait_for(|l| message(l) == "scheduled" && l["fields"]["pod"] == "default/p")
        .await?;
    // Meanwhile a is not ready, and says why.
    let (status, body) = http_get(&a.http_addr()?, "/readyz?verbose").await?;
    ensure!(
        status == 500 && body.contains("resourceslices.resource.k8s.io (forbidden: "),
        "{body}"
    );
    let bindings = fake.requests_to("POST", "/p/binding");
    ensure!(
        bindings.len() == 1 && bindings[0].status == 201,
        "{bindings:#?}"
    );
    a.stop().await?;
    b.stop().await?;
    Ok(())
}
