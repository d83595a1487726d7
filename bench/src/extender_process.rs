//! [`ExtenderProcess`]: a `berth-bench-extender` process on a loopback
//! port (built first if it is missing), killed when dropped.

use std::path::PathBuf;
use std::process::Stdio;

use anyhow::{Context as _, Result, anyhow, bail};
use tokio::io::{AsyncBufReadExt, BufReader};

/// An extender process, killed when dropped.
pub struct ExtenderProcess {
    child: tokio::process::Child,
    /// Where it listens.
    pub addr: String,
}

impl ExtenderProcess {
    /// The `berth-bench-extender` binary: `$BERTH_BENCH_EXTENDER`, or the
    /// one beside this executable. `cargo run -p berth-bench` builds only
    /// the harness, so when the extender is missing it is built here, with
    /// the harness's profile (`cargo build [--release] -p berth-bench --bin
    /// berth-bench-extender`); if that fails, the error gives the command.
    pub fn binary() -> Result<PathBuf> {
        if let Some(p) = std::env::var_os("BERTH_BENCH_EXTENDER") {
            return Ok(PathBuf::from(p));
        }
        let exe = std::env::current_exe().context("finding this executable")?;
        let p = exe.with_file_name(format!(
            "berth-bench-extender{}",
            std::env::consts::EXE_SUFFIX
        ));
        if p.exists() {
            return Ok(p);
        }
        let release = exe
            .parent()
            .and_then(|d| d.file_name())
            .is_some_and(|n| n == "release");
        let command = format!(
            "cargo build{} -p berth-bench --bin berth-bench-extender",
            if release { " --release" } else { "" }
        );
        eprintln!("{} is missing; building it: {command}", p.display());
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let mut cmd = std::process::Command::new(cargo);
        cmd.current_dir(env!("CARGO_MANIFEST_DIR"))
            .args([
                "build",
                "-p",
                "berth-bench",
                "--bin",
                "berth-bench-extender",
            ])
            .stdin(Stdio::null());
        if release {
            cmd.arg("--release");
        }
        let built = cmd.status();
        match built {
            Ok(s) if s.success() && p.exists() => Ok(p),
            Ok(s) => bail!(
                "{} is missing and `{command}` did not build it ({s}); run that command from the workspace, or set BERTH_BENCH_EXTENDER",
                p.display()
            ),
            Err(e) => bail!(
                "{} is missing and `{command}` could not run ({e}); run that command from the workspace, or set BERTH_BENCH_EXTENDER",
                p.display()
            ),
        }
    }

    /// The process's id (while it runs).
    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// Starts the extender with `protocol` (`grpc`, `http` or `echo`) on a loopback
    /// port and waits for its `listening on ADDR` line.
    pub async fn start(protocol: &str) -> Result<Self> {
        let bin = Self::binary()?;
        let mut child = tokio::process::Command::new(&bin)
            .args(["--protocol", protocol, "--listen", "127.0.0.1:0"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        let stderr = child
            .stderr
            .take()
            .ok_or_else(|| anyhow!("the extender's stderr was not captured"))?;
        let mut lines = BufReader::new(stderr).lines();
        let first = lines
            .next_line()
            .await
            .context("reading the extender's first line")?
            .ok_or_else(|| anyhow!("the extender exited before saying where it listens"))?;
        let addr = first
            .strip_prefix("listening on ")
            .ok_or_else(|| anyhow!("unexpected first line from the extender: {first:?}"))?
            .trim()
            .to_string();
        // Keep its stderr drained (and visible) for the rest of the run.
        tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                eprintln!("[berth-bench-extender] {line}");
            }
        });
        Ok(Self { child, addr })
    }
}

impl Drop for ExtenderProcess {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}
