//! A Python remote extender (`extenders/python/`) as a process: started
//! with the interpreter tests/run.sh prepared, found through its first
//! stderr line (`listening on ADDR`), its stderr read line by line.

use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::mpsc;

use crate::{python_path, workspace_root};

/// A guard against a hung process; never what a test waits for.
const GUARD: Duration = Duration::from_secs(120);

/// A running Python extender.
pub struct PyExtender {
    pub child: Child,
    /// The address it serves on, from its first stderr line.
    pub addr: String,
    /// Its stderr, line by line.
    pub lines: mpsc::UnboundedReceiver<String>,
    /// Lines read so far.
    pub seen: Vec<String>,
}

impl PyExtender {
    /// Starts `label_tier.py --listen listen` and reads the address from its
    /// first stderr line.
    pub async fn start(listen: &str) -> Result<Self> {
        Self::start_with(listen, &[]).await
    }

    /// As [`PyExtender::start`], with more command-line arguments.
    pub async fn start_with(listen: &str, args: &[&str]) -> Result<Self> {
        Self::start_script("label_tier.py", listen, args).await
    }

    /// Starts `extenders/python/<script> --listen listen args...`.
    pub async fn start_script(script: &str, listen: &str, args: &[&str]) -> Result<Self> {
        let python = python_path()?;
        let script = workspace_root().join("extenders/python").join(script);
        let mut child = Command::new(&python)
            .arg(&script)
            .args(["--listen", listen])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {} {}", python.display(), script.display()))?;
        let stderr = child.stderr.take().context("the extender's stderr")?;
        let (tx, lines) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            let mut reader = BufReader::new(stderr).lines();
            while let Ok(Some(line)) = reader.next_line().await {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut ext = Self {
            child,
            addr: String::new(),
            lines,
            seen: Vec::new(),
        };
        let first = match tokio::time::timeout(GUARD, ext.lines.recv()).await {
            Ok(Some(line)) => line,
            Ok(None) => {
                let status = ext.child.wait().await?;
                bail!("the Python extender exited ({status}) without printing its address");
            }
            Err(_) => bail!("the Python extender printed nothing within {GUARD:?}"),
        };
        let Some(addr) = first.strip_prefix("listening on ") else {
            // Most likely a missing package: show what it said.
            let mut said = vec![first];
            while let Ok(Some(l)) = tokio::time::timeout(GUARD, ext.lines.recv()).await {
                said.push(l);
            }
            bail!(
                "the Python extender's first stderr line is not \"listening on ADDR\":\n{}",
                said.join("\n")
            );
        };
        ext.addr = addr.to_string();
        Ok(ext)
    }

    /// Reads stderr lines until one satisfies `pred`.
    pub async fn wait_for(&mut self, pred: impl Fn(&str) -> bool) -> Result<String> {
        if let Some(l) = self.seen.iter().find(|l| pred(l)) {
            return Ok(l.clone());
        }
        let read = async {
            while let Some(line) = self.lines.recv().await {
                self.seen.push(line.clone());
                if pred(&line) {
                    return Ok(line);
                }
            }
            bail!(
                "the Python extender's stderr ended before the expected line; it said:\n{}",
                self.seen.join("\n")
            )
        };
        let waited = tokio::time::timeout(GUARD, read).await;
        waited.map_err(|_| {
            anyhow!(
                "the Python extender did not log the expected line within {GUARD:?}; it said:\n{}",
                self.seen.join("\n")
            )
        })?
    }

    /// SIGKILL, and the exit status.
    pub async fn kill(mut self) -> Result<ExitStatus> {
        self.child.start_kill()?;
        Ok(tokio::time::timeout(GUARD, self.child.wait()).await??)
    }
}
