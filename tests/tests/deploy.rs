//! deploy/: what `kubectl apply -k deploy/` would create.
//!
//! The manifests are rendered by the real kustomize (`kubectl kustomize`),
//! every rendered object must come back unchanged from a round trip through
//! its k8s-openapi type (so a misspelled or misplaced field, or a wrong type,
//! fails here rather than in a cluster), and the pieces must agree with each
//! other and with berthd: the flags exist, the config parses, the probes and
//! the Service point at ports the container has, the RBAC subjects are the
//! pod's ServiceAccount and the Lease it may update is the one configured.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;

use anyhow::{Context, Result, anyhow, ensure};
use berth_e2e::fake_apiserver::{PolicyRule, kube_scheduler_rules};
use berth_e2e::manifests::{flag_values, manifests};
use berth_e2e::{berthd_path, workspace_root};
use berth_server::cluster::kube::access::{self, LeaseRef, Need};

fn port_of(addr: &str) -> Result<i32> {
    let (_, port) = addr
        .rsplit_once(':')
        .ok_or_else(|| anyhow!("{addr:?} has no port"))?;
    Ok(port.parse()?)
}

#[test]
fn every_object_matches_its_schema_and_the_namespace_and_image_are_set() -> Result<()> {
    let m = manifests()?;
    for ns in [
        m.service_account.metadata.namespace.as_deref(),
        m.role.metadata.namespace.as_deref(),
        m.role_binding.metadata.namespace.as_deref(),
        m.config_map.metadata.namespace.as_deref(),
        m.deployment.metadata.namespace.as_deref(),
        m.service.metadata.namespace.as_deref(),
    ] {
        assert_eq!(ns, Some("kube-system"));
    }
    let pod = m
        .deployment
        .spec
        .template
        .spec
        .as_ref()
        .ok_or_else(|| anyhow!("the Deployment has no pod spec"))?;
    // The version, never latest, pulled only when the node lacks it: an
    // image loaded into kind or minikube is used as it is.
    let version = env!("CARGO_PKG_VERSION");
    assert_eq!(
        pod.containers[0].image.as_deref(),
        Some(format!("ghcr.io/berth-scheduler/berthd:{version}").as_str())
    );
    assert_eq!(
        pod.containers[0].image_pull_policy.as_deref(),
        Some("IfNotPresent")
    );
    Ok(())
}

/// deploy/deploy.sh, run for real where nothing needs a daemon or a
/// cluster: its arguments, the commands it would run (--dry-run) for kind,
/// minikube and a registry, and the manifests it renders with a registry's
/// image (through the real kustomize).
#[test]
fn the_deploy_script_builds_loads_or_pushes_the_versioned_image_and_sets_it() -> Result<()> {
    let script = workspace_root().join("deploy/deploy.sh");
    let root = workspace_root().display().to_string();
    let version = env!("CARGO_PKG_VERSION");
    let run = |args: &[&str]| -> Result<(i32, String, String)> {
        let out = Command::new(&script).args(args).output()?;
        Ok((
            out.status.code().unwrap_or(-1),
            String::from_utf8(out.stdout)?,
            String::from_utf8(out.stderr)?,
        ))
    };

    let (code, out, _) = run(&["--help"])?;
    assert_eq!(code, 0);
    assert!(
        out.contains("registry REGISTRY") && out.contains("kind [CLUSTER]"),
        "{out}"
    );
    for (args, says) in [
        (&[][..], "no command given"),
        (&["bogus"][..], "unknown command bogus"),
        (&["registry"][..], "registry needs REGISTRY"),
        (&["--tag", "latest", "image"][..], "--tag latest"),
        (&["--tag"][..], "--tag needs a value"),
        (
            &["--frobnicate", "image"][..],
            "unknown option --frobnicate",
        ),
        (&["kind", "a", "b"][..], "at most one argument"),
    ] {
        let (code, out, err) = run(args)?;
        assert_eq!(code, 2, "{args:?}: {out}{err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }

    let image = format!("ghcr.io/berth-scheduler/berthd:{version}");
    let build = format!("+ docker build -f {root}/deploy/Dockerfile -t {image} {root}");
    let (code, out, err) = run(&["--dry-run", "kind", "dev"])?;
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines,
        [
            build.as_str(),
            &format!("+ kind load docker-image {image} --name dev"),
            &format!("+ kubectl apply -k {root}/deploy"),
        ]
    );
    let (_, out, _) = run(&["--dry-run", "minikube"])?;
    assert!(
        out.contains(&format!(
            "+ minikube image load {image} --profile minikube\n"
        )),
        "{out}"
    );
    let (_, out, _) = run(&[
        "--dry-run",
        "--tag",
        "dev-3",
        "registry",
        "registry.example.com/team",
    ])?;
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 3, "{out}");
    assert!(
        lines[0].contains("-t registry.example.com/team/berthd:dev-3 "),
        "{out}"
    );
    assert_eq!(
        lines[1],
        "+ docker push registry.example.com/team/berthd:dev-3"
    );
    assert!(lines[2].starts_with("+ kubectl apply -k "), "{out}");

    // What would be applied with a registry: deploy/ with the image set.
    let (code, out, err) = run(&["render", "localhost:5000"])?;
    assert_eq!(code, 0, "{err}");
    let mut objects = Vec::new();
    for doc in serde_yaml::Deserializer::from_str(&out) {
        let v: serde_json::Value = serde::Deserialize::deserialize(doc)?;
        objects.push(v);
    }
    let rendered = berth_e2e::manifests::manifests_of(&objects)?;
    let c = &rendered
        .deployment
        .spec
        .template
        .spec
        .as_ref()
        .context("pod spec")?
        .containers[0];
    assert_eq!(
        c.image.as_deref(),
        Some(format!("localhost:5000/berthd:{version}").as_str())
    );
    assert_eq!(c.image_pull_policy.as_deref(), Some("IfNotPresent"));
    Ok(())
}

#[test]
fn the_deployment_runs_two_non_root_replicas_with_flags_berthd_has() -> Result<()> {
    let m = manifests()?;
    let spec = &m.deployment.spec;
    assert_eq!(spec.replicas, Some(2));
    let pod = spec.template.spec.as_ref().context("pod spec")?;
    let psc = pod
        .security_context
        .as_ref()
        .context("pod securityContext")?;
    assert_eq!(psc.run_as_non_root, Some(true));
    assert!(psc.run_as_user.is_some_and(|u| u != 0));
    assert_eq!(pod.containers.len(), 1);
    let c = &pod.containers[0];
    let csc = c
        .security_context
        .as_ref()
        .context("container securityContext")?;
    assert_eq!(csc.allow_privilege_escalation, Some(false));
    assert_eq!(csc.read_only_root_filesystem, Some(true));
    let requests = c
        .resources
        .as_ref()
        .and_then(|r| r.requests.as_ref())
        .context("resources.requests")?;
    assert!(requests.contains_key("cpu") && requests.contains_key("memory"));

    // Every flag is one berthd knows.
    let help = Command::new(berthd_path()?).arg("--help").output()?;
    let help = String::from_utf8(help.stdout)?;
    let args = c.args.clone().unwrap_or_default();
    for (name, _) in flag_values(&args) {
        assert!(
            help.contains(&format!("--{name}")),
            "berthd has no flag --{name}; its --help:\n{help}"
        );
    }
    Ok(())
}

#[test]
fn probes_service_and_listen_flags_agree_on_ports() -> Result<()> {
    let m = manifests()?;
    let spec = &m.deployment.spec;
    let pod = spec.template.spec.as_ref().context("pod spec")?;
    let c = &pod.containers[0];
    let ports = c.ports.clone().unwrap_or_default();
    let port = |name: &str| -> Result<i32> {
        ports
            .iter()
            .find(|p| p.name.as_deref() == Some(name))
            .map(|p| p.container_port)
            .ok_or_else(|| anyhow!("the container has no port named {name}"))
    };
    let args = c.args.clone().unwrap_or_default();
    let flags = flag_values(&args);
    let flag = |name: &str| -> Result<&str> {
        flags
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| *v)
            .ok_or_else(|| anyhow!("berthd is not given --{name}"))
    };
    assert_eq!(port_of(flag("listen")?)?, port("grpc")?);
    assert_eq!(port_of(flag("http-listen")?)?, port("http")?);

    let live = c.liveness_probe.as_ref().context("livenessProbe")?;
    let grpc = live.grpc.as_ref().context("livenessProbe.grpc")?;
    assert_eq!(grpc.port, port("grpc")?);
    let ready = c.readiness_probe.as_ref().context("readinessProbe")?;
    let get = ready.http_get.as_ref().context("readinessProbe.httpGet")?;
    assert_eq!(get.path.as_deref(), Some("/readyz"));
    let named = |p: &k8s_openapi::apimachinery::pkg::util::intstr::IntOrString| match p {
        k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String(s) => port(s),
        k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(i) => Ok(*i),
    };
    assert_eq!(named(&get.port)?, port("http")?);

    // The Service selects the pods and targets their ports.
    let svc = m.service.spec.as_ref().context("Service.spec")?;
    let labels = spec
        .template
        .metadata
        .as_ref()
        .and_then(|m| m.labels.clone());
    let labels = labels.unwrap_or_default();
    let selector = svc.selector.clone().unwrap_or_default();
    assert!(!selector.is_empty());
    for (k, v) in &selector {
        assert_eq!(labels.get(k), Some(v), "Service selector {k}={v}");
    }
    let mut targeted = Vec::new();
    for p in svc.ports.clone().unwrap_or_default() {
        let target = p.target_port.as_ref().context("Service targetPort")?;
        targeted.push(named(target)?);
    }
    targeted.sort();
    let mut expected = vec![port("grpc")?, port("http")?];
    expected.sort();
    assert_eq!(targeted, expected);
    Ok(())
}

#[test]
fn the_config_map_holds_a_config_berthd_accepts_and_is_mounted_where_berthd_reads() -> Result<()> {
    let m = manifests()?;
    let spec = &m.deployment.spec;
    let pod = spec.template.spec.as_ref().context("pod spec")?;
    let c = &pod.containers[0];
    let args = c.args.clone().unwrap_or_default();
    let config_path = flag_values(&args)
        .into_iter()
        .find(|(n, _)| *n == "config")
        .map(|(_, v)| PathBuf::from(v))
        .context("berthd is not given --config")?;

    // The path is a key of the ConfigMap, through a mounted volume.
    let cm_name = m.config_map.metadata.name.clone().unwrap_or_default();
    let volume = pod
        .volumes
        .clone()
        .unwrap_or_default()
        .into_iter()
        .find(|v| v.config_map.as_ref().is_some_and(|c| c.name == cm_name))
        .with_context(|| format!("no volume of ConfigMap {cm_name}"))?;
    let mount = c
        .volume_mounts
        .clone()
        .unwrap_or_default()
        .into_iter()
        .find(|vm| vm.name == volume.name)
        .with_context(|| format!("volume {} is not mounted", volume.name))?;
    let key = config_path
        .strip_prefix(&mount.mount_path)
        .with_context(|| {
            format!(
                "{} is not under {}",
                config_path.display(),
                mount.mount_path
            )
        })?;
    let key = key.to_str().context("key")?;
    let data = m.config_map.data.clone().unwrap_or_default();
    let text = data
        .get(key)
        .with_context(|| format!("ConfigMap {cm_name} has no key {key}"))?;

    // berthd's own parser accepts it.
    let registry = berth_server::plugins::in_tree_registry();
    let cfg = berth_server::config::parse(text, &|n| registry.contains(n))
        .map_err(|e| anyhow!("the ConfigMap's {key}: {e}"))?;
    assert!(cfg.leader_election.leader_elect);
    assert_eq!(cfg.profiles[0].scheduler_name, "berth");

    // The Lease it elects with is the one the Role lets it update, in the
    // Role's namespace.
    assert_eq!(
        m.role.metadata.namespace.as_deref(),
        Some(cfg.leader_election.resource_namespace.as_str())
    );
    let rules = m.role.rules.clone().unwrap_or_default();
    let update = rules
        .iter()
        .find(|r| r.verbs.iter().any(|v| v == "update"))
        .context("the Role has no update rule")?;
    assert_eq!(
        update.resource_names.clone().unwrap_or_default(),
        vec![cfg.leader_election.resource_name.clone()]
    );
    assert!(rules.iter().any(|r| {
        r.verbs.iter().any(|v| v == "create")
            && r.resources
                .as_ref()
                .is_some_and(|x| x.iter().any(|x| x == "leases"))
    }));
    Ok(())
}

#[test]
fn role_bindings_grant_the_pods_service_account() -> Result<()> {
    let m = manifests()?;
    let sa = m.service_account.metadata.name.clone().unwrap_or_default();
    let ns = m.service_account.metadata.namespace.clone();
    let pod = m
        .deployment
        .spec
        .template
        .spec
        .as_ref()
        .context("pod spec")?;
    assert_eq!(pod.service_account_name.as_deref(), Some(sa.as_str()));

    let cr = m.cluster_role.metadata.name.clone().unwrap_or_default();
    assert_eq!(m.cluster_role_binding.role_ref.kind, "ClusterRole");
    assert_eq!(m.cluster_role_binding.role_ref.name, cr);
    let role = m.role.metadata.name.clone().unwrap_or_default();
    assert_eq!(m.role_binding.role_ref.kind, "Role");
    assert_eq!(m.role_binding.role_ref.name, role);
    for subjects in [
        m.cluster_role_binding.subjects.clone(),
        m.role_binding.subjects.clone(),
    ] {
        let subjects = subjects.unwrap_or_default();
        assert_eq!(subjects.len(), 1);
        assert_eq!(subjects[0].kind, "ServiceAccount");
        assert_eq!(subjects[0].name, sa);
        assert_eq!(subjects[0].namespace, ns);
    }
    Ok(())
}

#[test]
fn the_dockerfile_builds_berthd_locked_and_runs_it_as_the_deployments_user() -> Result<()> {
    let text = std::fs::read_to_string(workspace_root().join("deploy/Dockerfile"))?;
    assert!(text.contains("cargo build --release --locked -p berth-server --bin berthd"));
    let stages = text.lines().filter(|l| l.starts_with("FROM ")).count();
    assert!(stages >= 2, "a multi-stage build");
    let user = text
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("USER "))
        .context("no USER")?;
    let uid: i64 = user.split(':').next().unwrap_or_default().trim().parse()?;
    let m = manifests()?;
    let psc = m
        .deployment
        .spec
        .template
        .spec
        .as_ref()
        .and_then(|p| p.security_context.as_ref())
        .context("pod securityContext")?;
    assert_eq!(psc.run_as_user, Some(uid));
    Ok(())
}

/// What of `needs` neither the ClusterRole rules `cluster` nor the Role
/// rules `namespaced` (by namespace) grant, one line per verb.
fn ungranted(
    needs: &[Need],
    cluster: &[PolicyRule],
    namespaced: &[(String, Vec<PolicyRule>)],
) -> Vec<String> {
    let mut out = Vec::new();
    for n in needs {
        let in_roles = n.namespace.as_ref().map_or(Vec::new(), |ns| {
            namespaced
                .iter()
                .filter(|(x, _)| x == ns)
                .flat_map(|(_, r)| r.iter())
                .collect::<Vec<_>>()
        });
        for verb in &n.verbs {
            let granted = cluster
                .iter()
                .chain(in_roles.iter().copied())
                .any(|r| r.grants(verb, n.group, n.resource, n.name.as_deref()));
            if !granted {
                out.push(format!("{verb} on {n}"));
            }
        }
    }
    out
}

fn lease_of(m: &berth_e2e::manifests::Manifests) -> Result<LeaseRef> {
    let text = m
        .config_map
        .data
        .as_ref()
        .and_then(|d| d.get("config.yaml"))
        .context("the ConfigMap's config.yaml")?;
    let registry = berth_server::plugins::in_tree_registry();
    let cfg = berth_server::config::parse(text, &|n| registry.contains(n))
        .map_err(|e| anyhow!("config.yaml: {e}"))?;
    Ok(LeaseRef {
        namespace: cfg.leader_election.resource_namespace,
        name: cfg.leader_election.resource_name,
    })
}

/// Adding a watch or a write to berthd without its rule here fails this
/// test: the rules come from berthd's own list (access::needed), and
/// deploy/'s ClusterRole and Role must grant every one of them.
#[test]
fn deploys_rbac_grants_everything_berthd_watches_and_writes() -> Result<()> {
    let m = manifests()?;
    let lease = lease_of(&m)?;
    // With GenericWorkload's PodGroups: deploy/'s role grants them too.
    let needs = access::needed_for(Some(&lease), true);
    let cluster = PolicyRule::from_role(&serde_json::to_value(&m.cluster_role)?)?;
    let role = PolicyRule::from_role(&serde_json::to_value(&m.role)?)?;
    let ns = m.role.metadata.namespace.clone().unwrap_or_default();
    let missing = ungranted(&needs, &cluster, &[(ns, role)]);
    assert!(
        missing.is_empty(),
        "deploy/rbac.yaml does not grant what berthd needs:\n  {}",
        missing.join("\n  ")
    );
    // The DRA kinds are among them (deploy/'s role had none of them).
    assert!(needs.iter().any(|n| n.resource == "resourceslices"));
    Ok(())
}

/// As a replacement for kube-scheduler, under its built-in roles (bound
/// to the user system:kube-scheduler in every cluster): everything but
/// the Lease is granted, and the Lease only under the name kube-scheduler.
#[test]
fn kube_schedulers_built_in_roles_grant_it_with_the_kube_scheduler_lease() -> Result<()> {
    let cluster = kube_scheduler_rules()?;
    let lease = |name: &str| LeaseRef {
        namespace: "kube-system".into(),
        name: name.into(),
    };
    let missing = ungranted(
        &access::needed(Some(&lease("kube-scheduler"))),
        &cluster,
        &[],
    );
    assert!(missing.is_empty(), "{missing:#?}");
    let missing = ungranted(&access::needed(Some(&lease("berth"))), &cluster, &[]);
    assert_eq!(
        missing,
        [
            r#"get on {apiGroups: ["coordination.k8s.io"], resources: ["leases"], resourceNames: ["berth"], verbs: ["get", "update"]}"#,
            r#"update on {apiGroups: ["coordination.k8s.io"], resources: ["leases"], resourceNames: ["berth"], verbs: ["get", "update"]}"#,
        ]
    );
    Ok(())
}

/// What `rules` grant on `resource` of `group`: each verb with the names
/// it is limited to (empty: every object).
fn granted(rules: &[PolicyRule], group: &str, resource: &str) -> BTreeSet<(String, Vec<String>)> {
    let mut out = BTreeSet::new();
    for r in rules {
        let any = |list: &[String], v: &str| list.iter().any(|x| x == "*" || x == v);
        if !any(&r.api_groups, group) || !any(&r.resources, resource) {
            continue;
        }
        let mut names = r.resource_names.clone();
        names.sort();
        for v in &r.verbs {
            out.insert((v.clone(), names.clone()));
        }
    }
    out
}

/// deploy/rbac.yaml's rules as written, each with the comment lines just
/// above it: (apiGroups, resources, comment). The file writes each rule's
/// lists in flow style (`resources: ["a", "b"]`).
fn commented_rules(text: &str) -> Vec<(Vec<String>, Vec<String>, String)> {
    let list = |line: &str| -> Vec<String> {
        line.split_once('[')
            .and_then(|(_, r)| r.rsplit_once(']'))
            .map(|(items, _)| {
                items
                    .split(',')
                    .map(|s| s.trim().trim_matches('"').to_string())
                    .filter(|s| !s.is_empty())
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut out = Vec::new();
    let mut comment: Vec<&str> = Vec::new();
    let mut current: Option<(Vec<String>, Vec<String>, String)> = None;
    for line in text.lines() {
        let t = line.trim();
        if let Some(c) = t.strip_prefix('#') {
            comment.push(c.trim());
            continue;
        }
        if let Some(rest) = t.strip_prefix("- apiGroups:") {
            if let Some(r) = current.take() {
                out.push(r);
            }
            current = Some((list(rest), Vec::new(), comment.join(" ")));
        } else if let Some(rest) = t.strip_prefix("resources:") {
            if let Some(r) = current.as_mut() {
                r.1 = list(rest);
            }
        } else if !line.starts_with("    ")
            && let Some(r) = current.take()
        {
            out.push(r);
        }
        comment.clear();
    }
    out.extend(current);
    out
}

/// Both ways: every resource berthd uses is granted by deploy/ with the
/// verbs (and names) the built-in `system:kube-scheduler` and
/// `system:volume-scheduler` roles grant it, as recorded from a v1.36.2
/// API server, unless the rule deploy/ grants it with says why
/// ("Unlike the built-in roles ..."). A new write berth makes, a rule
/// upstream adds (as v1.36 added `resourceclaims/binding`), or a narrowing
/// of deploy/ fails here until it is matched or explained.
#[test]
fn deploy_grants_each_resource_as_the_built_in_roles_do_or_says_why() -> Result<()> {
    let m = manifests()?;
    let lease = lease_of(&m)?;
    let deploy: Vec<PolicyRule> = PolicyRule::from_role(&serde_json::to_value(&m.cluster_role)?)?
        .into_iter()
        .chain(PolicyRule::from_role(&serde_json::to_value(&m.role)?)?)
        .collect();
    let mut built_in = Vec::new();
    for name in [
        "clusterrole-system-kube-scheduler",
        "clusterrole-system-volume-scheduler",
    ] {
        built_in.extend(PolicyRule::from_role(
            &berth_e2e::fake_apiserver::recording(name)?["body"],
        )?);
    }
    let text = std::fs::read_to_string(workspace_root().join("deploy/rbac.yaml"))?;
    let written = commented_rules(&text);
    let mut seen = BTreeSet::new();
    let mut problems = Vec::new();
    let mut explained = Vec::new();
    for n in access::needed_for(Some(&lease), true) {
        if !seen.insert((n.group, n.resource)) {
            continue;
        }
        let ours = granted(&deploy, n.group, n.resource);
        let theirs = granted(&built_in, n.group, n.resource);
        if ours == theirs {
            continue;
        }
        let why = written.iter().any(|(groups, resources, comment)| {
            groups.iter().any(|g| g == n.group)
                && resources.iter().any(|r| r == n.resource)
                && comment.contains("Unlike the built-in roles")
        });
        let what = format!(
            "{}/{}: deploy/ grants {ours:?}, the built-in roles {theirs:?}",
            if n.group.is_empty() { "core" } else { n.group },
            n.resource
        );
        if why {
            explained.push(what);
        } else {
            problems.push(format!(
                "{what}; grant it as they do, or say why in a comment starting \"Unlike the built-in roles\" above its rule in deploy/rbac.yaml"
            ));
        }
    }
    ensure!(problems.is_empty(), "{}", problems.join("\n"));
    // What differs, and is explained: the Lease, and the kinds v1.36's
    // roles do not have yet.
    let differing: Vec<&str> = explained
        .iter()
        .map(|e| e.split(':').next().unwrap_or_default())
        .collect();
    assert_eq!(
        differing,
        [
            "coordination.k8s.io/leases",
            "resource.k8s.io/devicetaintrules",
            "scheduling.k8s.io/podgroups",
            "scheduling.k8s.io/podgroups/status",
        ],
        "{explained:#?}"
    );
    // The synthetic subresource DRA's claim status needs since v1.36 is
    // granted as the built-in role grants it.
    let binding = granted(&deploy, "resource.k8s.io", "resourceclaims/binding");
    assert_eq!(
        binding,
        granted(&built_in, "resource.k8s.io", "resourceclaims/binding")
    );
    assert!(!binding.is_empty());
    Ok(())
}
