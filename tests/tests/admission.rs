//! Issue 28, item 2: objects are admitted as the API server admits them,
//! and every error names the field and the file, through the real berthd,
//! the real berthctl and grpcurl. Before, each of these was accepted, or
//! refused without saying where:
//!
//! * a Node with `allocatable: {cpu: "-4"}` was `created` (and fitted pods);
//! * duplicate container names were accepted;
//! * `limits.memory: -5Gi` was reported as a `requests.memory` error only;
//! * `apiVersion: v2` said `invalid value: string "v2", expected v1`;
//! * `get pods -n 'NOT VALID'`, GetQueue and WatchEvents with an invalid
//!   namespace answered nothing;
//! * `dry-run`'s and `simulate`'s errors did not name the file;
//! * a configuration that is not YAML said `?: invalid type: map, ...`;
//! * an extender enabled at a point its `points` lack was refused only
//!   after dialing it, without naming `berthExtenders[i].points`.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Result, anyhow};
use berth_e2e::{Berthd, berthctl_path, grpcurl_path};
use tokio::process::Command;

const GUARD: Duration = Duration::from_secs(120);

const NODE: &str = "\
apiVersion: v1
kind: Node
metadata: {name: n1}
status: {allocatable: {cpu: '4', memory: 8Gi, pods: '10'}}
";

struct Dir(PathBuf);

impl Dir {
    fn new(tag: &str) -> Result<Self> {
        let d = std::env::temp_dir().join(format!("berth-admission-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&d)?;
        Ok(Self(d))
    }

    fn write(&self, name: &str, text: &str) -> Result<String> {
        let p = self.0.join(name);
        std::fs::write(&p, text)?;
        Ok(p.display().to_string())
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Exit code, stdout, stderr.
async fn run(program: PathBuf, args: &[&str]) -> Result<(Option<i32>, String, String)> {
    let out = tokio::time::timeout(
        GUARD,
        Command::new(&program)
            .args(args)
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .map_err(|_| anyhow!("{} {args:?} hung", program.display()))??;
    Ok((
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    ))
}

#[tokio::test]
async fn berthctl_and_grpcurl_meet_the_api_servers_validation() -> Result<()> {
    let dir = Dir::new("objects")?;
    let cluster = dir.write("cluster.yaml", NODE)?;
    let berthd = Berthd::start(&["--cluster", &cluster]).await?;
    let addr = berthd.addr.clone();
    let ctl = berthctl_path()?;

    // Files berthctl refuses, with the file, the document and the API
    // server's message.
    let cases = [
        (
            "negative.yaml",
            "apiVersion: v1\nkind: Node\nmetadata: {name: n2}\nstatus: {allocatable: {cpu: '-4'}}\n",
            "negative.yaml: document 1: status.allocatable.cpu: Invalid value: \"-4\": must be greater than or equal to 0",
        ),
        (
            "duplicate.yaml",
            "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: c}, {name: c}]}\n",
            "duplicate.yaml: document 1: spec.containers[1].name: Duplicate value: \"c\"",
        ),
        (
            "limit.yaml",
            "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: c, resources: {limits: {memory: -5Gi}}}]}\n",
            "limit.yaml: document 1: [spec.containers[0].resources.limits[memory]: Invalid value: \"-5Gi\": must be greater than or equal to 0, spec.containers[0].resources.requests[memory]: Invalid value: \"-5Gi\": must be greater than or equal to 0]",
        ),
        (
            "over.yaml",
            "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: c, resources: {requests: {memory: 1Gi}, limits: {memory: -5Gi}}}]}\n",
            "over.yaml: document 1: [spec.containers[0].resources.limits[memory]: Invalid value: \"-5Gi\": must be greater than or equal to 0, spec.containers[0].resources.requests: Invalid value: \"1Gi\": must be less than or equal to memory limit of -5Gi]",
        ),
        (
            "v2.yaml",
            "apiVersion: v2\nkind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: c}]}\n",
            "v2.yaml: document 1: apiVersion: Unsupported value: \"v2\": supported values: \"v1\"",
        ),
    ];
    for (name, text, want) in cases {
        let file = dir.write(name, text)?;
        let (code, _, stderr) = run(ctl.clone(), &["-s", &addr, "apply", "-f", &file]).await?;
        assert_eq!(code, Some(1), "{name}: {stderr}");
        let want = want.replacen(name, &file, 1);
        assert!(stderr.contains(&want), "{name}:\n{stderr}\nwanted {want}");
    }
    // Nothing of them was stored: the node that fits no pod is not there.
    let (code, nodes, _) = run(ctl.clone(), &["-s", &addr, "get", "nodes"]).await?;
    assert_eq!(code, Some(0));
    assert!(!nodes.contains("n2"), "{nodes}");

    // dry-run and simulate name the file.
    let bad = dir.write(
        "bad-pod.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: c}, {name: c}]}\n",
    )?;
    for args in [
        vec!["dry-run", "-f", &bad],
        vec!["simulate", "-f", &bad, "--replicas", "2"],
    ] {
        let (code, _, stderr) =
            run(ctl.clone(), &[&["-s", addr.as_str()][..], &args].concat()).await?;
        assert_eq!(code, Some(1), "{args:?}: {stderr}");
        assert!(
            stderr.contains(&format!(
                "{bad}: document 1: spec.containers[1].name: Duplicate value: \"c\""
            )),
            "{args:?}: {stderr}"
        );
    }

    // A namespace that cannot exist is an error, not an empty answer.
    let (code, _, stderr) = run(
        ctl.clone(),
        &["-s", &addr, "get", "pods", "-n", "NOT VALID"],
    )
    .await?;
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("namespace: Invalid value: \"NOT VALID\": a lowercase RFC 1123 label"),
        "{stderr}"
    );
    let (code, _, stderr) = run(ctl, &["-s", &addr, "queue", "-n", "NOT VALID"]).await?;
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("namespace: Invalid value"), "{stderr}");
    for method in ["GetQueue", "WatchEvents"] {
        let (code, _, stderr) = run(
            grpcurl_path()?,
            &[
                "-plaintext",
                "-d",
                r#"{"namespace": "NOT VALID"}"#,
                &addr,
                &format!("berth.v1.Scheduler/{method}"),
            ],
        )
        .await?;
        assert_ne!(code, Some(0), "{method}");
        assert!(
            stderr.contains("Code: InvalidArgument")
                && stderr.contains("namespace: Invalid value: \"NOT VALID\""),
            "{method}: {stderr}"
        );
    }
    assert!(berthd.stop().await?.success());
    Ok(())
}

/// A configuration berthd refuses at startup: the exit status, and its
/// last words (stderr).
async fn refused_config(dir: &Dir, name: &str, text: &str) -> Result<(String, String)> {
    let file = dir.write(name, text)?;
    let (code, _, stderr) = run(
        berth_e2e::berthd_path()?,
        &[
            "--listen",
            "127.0.0.1:0",
            "--empty-cluster",
            "--config",
            &file,
        ],
    )
    .await?;
    assert_ne!(code, Some(0), "{name} was accepted");
    Ok((file, stderr))
}

#[tokio::test]
async fn a_bad_configuration_stops_berthd_naming_the_file_and_the_field() -> Result<()> {
    let dir = Dir::new("config")?;
    let (file, stderr) = refused_config(&dir, "braces.yaml", "{{a}}\n").await?;
    assert!(
        stderr.contains(&format!(
            "{file}: not a KubeSchedulerConfiguration: a mapping key is itself a map, not a field name"
        )),
        "{stderr}"
    );
    let (file, stderr) = refused_config(
        &dir,
        "points.yaml",
        "apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: default-scheduler
  plugins:
    filter: {enabled: [{name: ex}]}
    score: {enabled: [{name: ex, weight: 1}]}
berthExtenders:
- name: ex
  endpoint: http://127.0.0.1:1
  points: [filter]
",
    )
    .await?;
    assert!(
        stderr.contains(&format!(
            "{file}: profiles[0].plugins.score.enabled[0]: plugin \"ex\" does not extend ScorePlugin plugin: berthExtenders[0].points is [filter]"
        )),
        "{stderr}"
    );
    assert!(
        !stderr.contains("dialing") && !stderr.contains("extender unavailable"),
        "refused before dialing:\n{stderr}"
    );
    Ok(())
}
