//! The docs' examples, run: what README.md and docs/ show is what berth
//! prints (issue 36). A page marks its examples with HTML comments, which
//! neither GitHub nor mdBook shows:
//!
//! - `<!-- doc-test: berthd [ADDR] ARGS -->` starts the berthd the
//!   examples after it ask (built like every test's, JSON logs, a port of
//!   its own), and waits until it is idle; a later one replaces it. ADDR
//!   (`127.0.0.1:50051` unless given) is the address the page's commands
//!   name it by.
//! - `<!-- doc-test: python SCRIPT --listen ADDR ARGS -->` starts the
//!   Python extender `extenders/python/SCRIPT` (the test venv's Python)
//!   on ADDR and waits until it serves; it runs to the page's end.
//! - `<!-- doc-test: extender NAME --listen ADDR ARGS -->` does the same
//!   for the Rust SDK's example NAME. A berthd started after extenders
//!   is waited for until it has connected to as many as run.
//! - `<!-- doc-test: output -->` before a fenced block: the block is the
//!   output of commands. They are the block's own `$ ` lines (each run on
//!   its own, its output after it), or else the last `sh` block above.
//! - `<!-- doc-test: file NAME -->` before a fenced block: the block is
//!   written to NAME in the scratch directory (a cluster file the page
//!   shows, say), for the commands and berthds after it.
//! - `<!-- doc-test: log -->` before a fenced block: the block is the log
//!   of a berthd started with the current `ARGS` (text format, as on a
//!   terminal without colours), from its start to the end of its first
//!   idle summary.
//!
//! Commands run under `bash` in a scratch directory holding links to the
//! repository's top-level directories (so `server/sample/...` resolves and
//! nothing is written into the source tree), with the test build's
//! berthd, berthctl, kubectl-berth and berth-bench and the test venv's
//! grpcurl first on `PATH`, `BERTH_SERVER` set to the page's berthd and no
//! kubeconfig. The berthd's ADDR in a command is its real address, and
//! its real address in an output reads ADDR again.
//!
//! Outputs are compared with snapbox's patterns: `...` on a line of its
//! own stands for any lines, `[..]` for any text within a line. What must
//! vary is masked on both sides before comparing (times, durations that
//! are measured, UIDs), so the pages show real values.
//! `SNAPSHOTS=overwrite` writes what berth printed into the blocks that
//! differ, keeping their `...` and `[..]` where they still match: one
//! command (`SNAPSHOTS=overwrite cargo test -p berth-e2e --test
//! doc_examples`) brings the docs up to date with a change.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::LazyLock;
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use regex::Regex;
use snapbox::Data;
use snapbox::filter::NormalizeToExpected;
use tokio::io::{AsyncBufReadExt, BufReader};

use berth_e2e::{Berthd, TempDir, workspace_root};

/// The address the pages' commands and outputs name for their berthd.
const DOC_ADDR: &str = "127.0.0.1:50051";

/// How long one example may run before it is called hung (a guard, not a
/// wait: examples end by themselves).
const GUARD: Duration = Duration::from_secs(120);

/// A fenced block of a page: its info string and its lines, 0-based line
/// numbers of the opening and closing fences.
#[derive(Debug, Clone)]
struct Block {
    info: String,
    open: usize,
    close: usize,
    body: Vec<String>,
}

/// What a page asks for, in page order.
#[derive(Debug)]
enum Step {
    Berthd(Vec<String>),
    Python(Vec<String>),
    Extender(Vec<String>),
    Output { commands: Commands, block: Block },
    Log { block: Block },
    File { name: String, block: Block },
}

#[derive(Debug)]
enum Commands {
    /// The block's own `$ ` lines, each followed by its output.
    Prompted(Vec<String>),
    /// A script (the `sh` block above), its output the whole block.
    Script(String),
}

fn directive(line: &str) -> Option<&str> {
    line.trim()
        .strip_prefix("<!-- doc-test:")?
        .strip_suffix("-->")
        .map(str::trim)
}

fn parse(text: &str) -> Result<Vec<Step>> {
    let lines: Vec<&str> = text.lines().collect();
    let mut blocks = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        if let Some(info) = lines[i].strip_prefix("```") {
            let open = i;
            let mut j = i + 1;
            while j < lines.len() && !lines[j].starts_with("```") {
                j += 1;
            }
            ensure!(
                j < lines.len(),
                "line {}: a fence that is not closed",
                open + 1
            );
            blocks.push(Block {
                info: info.trim().to_string(),
                open,
                close: j,
                body: lines[open + 1..j].iter().map(|l| l.to_string()).collect(),
            });
            i = j + 1;
        } else {
            i += 1;
        }
    }
    let mut steps = Vec::new();
    for (n, line) in lines.iter().enumerate() {
        let Some(d) = directive(line) else { continue };
        let next = || {
            blocks
                .iter()
                .find(|b| b.open > n)
                .cloned()
                .with_context(|| format!("line {}: no fenced block after it", n + 1))
        };
        if let Some(args) = d.strip_prefix("berthd") {
            steps.push(Step::Berthd(
                args.split_whitespace().map(str::to_string).collect(),
            ));
        } else if d == "output" {
            let block = next()?;
            let prompted: Vec<String> = block
                .body
                .iter()
                .filter_map(|l| l.strip_prefix("$ "))
                .map(str::to_string)
                .collect();
            let commands = if prompted.is_empty() {
                let script = blocks
                    .iter()
                    .rev()
                    .find(|b| b.close < n && b.info == "sh")
                    .with_context(|| format!("line {}: no sh block above it", n + 1))?;
                Commands::Script(script.body.join("\n"))
            } else {
                Commands::Prompted(prompted)
            };
            steps.push(Step::Output { commands, block });
        } else if let Some(args) = d.strip_prefix("extender ") {
            steps.push(Step::Extender(
                args.split_whitespace().map(str::to_string).collect(),
            ));
        } else if let Some(args) = d.strip_prefix("python ") {
            steps.push(Step::Python(
                args.split_whitespace().map(str::to_string).collect(),
            ));
        } else if let Some(name) = d.strip_prefix("file ") {
            steps.push(Step::File {
                name: name.trim().to_string(),
                block: next()?,
            });
        } else if d == "log" {
            steps.push(Step::Log { block: next()? });
        } else {
            bail!("line {}: unknown doc-test directive {d:?}", n + 1);
        }
    }
    Ok(steps)
}

/// What must vary from run to run, masked on both sides before comparing.
static VOLATILE: LazyLock<Vec<(Regex, &'static str)>> = LazyLock::new(|| {
    [
        (r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z", "<time>"),
        (r"latency_ms=[0-9.]+", "latency_ms=<ms>"),
        // Counts the writes before it, some of them made as time passes
        // (status patches after a retry), so not the same run to run.
        (
            r#""resourceVersion": "[0-9]+""#,
            r#""resourceVersion": "<rv>""#,
        ),
        (
            r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}",
            "<uid>",
        ),
    ]
    .into_iter()
    .map(|(re, with)| (Regex::new(re).expect("a valid pattern"), with))
    .collect()
});

fn mask(text: &str) -> String {
    VOLATILE.iter().fold(text.to_string(), |t, (re, with)| {
        re.replace_all(&t, *with).into_owned()
    })
}

fn normalized(actual: &str, expected: &str) -> String {
    NormalizeToExpected::new()
        .redact()
        .normalize(Data::text(actual), &Data::text(expected))
        .render()
        .unwrap_or_default()
}

/// Whether `actual` is what `expected` shows, its patterns and what must
/// vary aside.
fn agrees(actual: &str, expected: &str) -> bool {
    let (a, e) = (mask(actual), mask(expected));
    normalized(&a, &e) == e
}

/// Where the page's examples run.
struct Scratch {
    dir: TempDir,
    path: String,
}

impl Scratch {
    fn new(tag: &str) -> Result<Self> {
        let dir = TempDir::new(tag)?;
        let root = workspace_root();
        for entry in std::fs::read_dir(&root)? {
            let entry = entry?;
            let name = entry.file_name();
            let s = name.to_string_lossy();
            if s.starts_with('.') || s == "target" {
                continue;
            }
            std::os::unix::fs::symlink(entry.path(), dir.0.join(&name))?;
        }
        let bin = dir.0.join(".bin");
        std::fs::create_dir_all(&bin)?;
        let link = |from: PathBuf, name: &str| -> Result<()> {
            std::os::unix::fs::symlink(&from, bin.join(name))
                .with_context(|| format!("linking {}", from.display()))
        };
        link(berth_e2e::berthd_path()?, "berthd")?;
        link(berth_e2e::berthctl_path()?, "berthctl")?;
        link(berth_e2e::kubectl_berth_path()?, "kubectl-berth")?;
        link(berth_e2e::bench_path()?, "berth-bench")?;
        link(berth_e2e::grpcurl_path()?, "grpcurl")?;
        let path = format!(
            "{}:{}",
            bin.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        std::fs::create_dir_all(dir.0.join(".home"))?;
        Ok(Self { dir, path })
    }

    /// `arg` (`FILE` or `--flag=FILE`) with a file of the scratch
    /// directory named by its absolute path.
    fn resolve(&self, arg: &str) -> String {
        let (flag, value) = match arg.split_once('=') {
            Some((f, v)) => (format!("{f}="), v),
            None => (String::new(), arg),
        };
        let path = self.dir.0.join(value);
        if !value.is_empty() && !value.starts_with('-') && path.is_file() {
            format!("{flag}{}", path.display())
        } else {
            arg.to_string()
        }
    }

    /// Runs `script` under bash, stdout and stderr together as a terminal
    /// shows them; the page's address in and out.
    async fn run(&self, script: &str, doc_addr: &str, addr: &str) -> Result<String> {
        let script = script.replace(doc_addr, addr);
        let mut cmd = tokio::process::Command::new("bash");
        cmd.arg("-c")
            .arg(format!("exec 2>&1\n{script}"))
            .current_dir(&self.dir.0)
            .env("PATH", &self.path)
            .env("HOME", self.dir.0.join(".home"))
            .env("BERTH_SERVER", addr)
            .env("KUBECONFIG", self.dir.0.join(".home/no-kubeconfig"))
            .env("NO_COLOR", "1")
            .env_remove("SNAPSHOTS")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .kill_on_drop(true);
        let out = tokio::time::timeout(GUARD, cmd.output())
            .await
            .with_context(|| format!("{script:?} did not end"))??;
        let text = String::from_utf8_lossy(&out.stdout).replace(addr, doc_addr);
        Ok(text.trim_end().to_string())
    }
}

/// A directive's `NAME --listen ADDR ARGS`: the name, the address, the
/// other arguments.
fn listening(args: &[String]) -> Result<(String, String, Vec<String>)> {
    let (name, rest) = args.split_first().context("no name")?;
    let at = rest
        .iter()
        .position(|x| x == "--listen")
        .context("no --listen ADDR")?;
    let listen = rest.get(at + 1).context("--listen without ADDR")?;
    let others = rest
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != at && *i != at + 1)
        .map(|(_, x)| x.clone())
        .collect();
    Ok((name.clone(), listen.clone(), others))
}

/// berthd's log in text format from its start to the end of its first
/// idle summary.
async fn text_log(args: &[String]) -> Result<String> {
    let mut child = tokio::process::Command::new(berth_e2e::berthd_path()?)
        .args(["--listen", "127.0.0.1:0"])
        .args(args)
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    let stderr = child.stderr.take().context("berthd's stderr")?;
    let mut lines = BufReader::new(stderr).lines();
    let number = |line: &str, field: &str| -> u64 {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(field)?.strip_prefix('=')?.parse().ok())
            .unwrap_or(0)
    };
    let read = async {
        let mut log = Vec::new();
        let mut addr = None;
        let mut left: Option<u64> = None;
        while left != Some(0) {
            let Some(line) = lines.next_line().await? else {
                bail!("berthd exited before its idle summary: {log:#?}");
            };
            if addr.is_none() && line.contains("serving gRPC on ") {
                addr = line
                    .split_whitespace()
                    .find_map(|w| w.strip_prefix("addr="))
                    .map(str::to_string);
            }
            if line.contains("scheduler idle: ") {
                left = Some(number(&line, "pending") - number(&line, "unchanged"));
            } else if line.contains(" pending: ") {
                left = left.map(|n| n.saturating_sub(1));
            }
            log.push(line);
        }
        let text = log.join("\n");
        Ok(match addr {
            Some(a) => text.replace(&a, DOC_ADDR),
            None => text,
        })
    };
    let log = tokio::time::timeout(GUARD, read)
        .await
        .context("berthd was not idle in time")??;
    let _ = child.kill().await;
    Ok(log)
}

/// An example whose output differs from its page.
#[derive(Debug)]
struct Mismatch {
    line: usize,
    expected: String,
    actual: String,
}

/// Runs every example of `page` (relative to the workspace root) and
/// returns the ones whose output differs; with `SNAPSHOTS=overwrite` it
/// writes what berth printed into those blocks instead, and returns none.
async fn run_page(page: &str) -> Result<Vec<Mismatch>> {
    let path: PathBuf = workspace_root().join(page);
    let text = std::fs::read_to_string(&path).with_context(|| format!("reading {page}"))?;
    let steps = parse(&text).with_context(|| page.to_string())?;
    ensure!(!steps.is_empty(), "{page} has no doc-test examples");
    // An extender listens where its page says (the configuration
    // the page shows dials that port): pages that start one take turns.
    static FIXED_PORTS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    let _turn = if steps
        .iter()
        .any(|s| matches!(s, Step::Python(_) | Step::Extender(_)))
    {
        Some(FIXED_PORTS.lock().await)
    } else {
        None
    };
    let scratch = Scratch::new("docs")?;
    let mut berthd: Option<Berthd> = None;
    let mut doc_addr = DOC_ADDR.to_string();
    let mut python = Vec::new();
    let mut rust = Vec::new();
    let mut args: Vec<String> = Vec::new();
    let mut results: Vec<(Block, String)> = Vec::new();
    for step in steps {
        match step {
            Step::File { name, block } => {
                let mut text = block.body.join("\n");
                text.push('\n');
                std::fs::write(scratch.dir.0.join(&name), text)?;
            }
            Step::Python(a) => {
                let (script, listen, others) = listening(&a)?;
                let others: Vec<&str> = others.iter().map(String::as_str).collect();
                python.push(
                    berth_e2e::python::PyExtender::start_script(&script, &listen, &others).await?,
                );
            }
            Step::Extender(a) => {
                let (name, listen, others) = listening(&a)?;
                let others: Vec<&str> = others.iter().map(String::as_str).collect();
                rust.push(berth_e2e::Extender::start_at(&name, &listen, &others).await?);
            }
            Step::Berthd(mut a) => {
                if let Some(old) = berthd.take() {
                    old.stop().await?;
                }
                doc_addr = match a.first() {
                    Some(first) if !first.starts_with('-') && first.contains(':') => a.remove(0),
                    _ => DOC_ADDR.to_string(),
                };
                // Files the page wrote are named from the scratch
                // directory, where the page's commands run.
                let a: Vec<String> = a.into_iter().map(|arg| scratch.resolve(&arg)).collect();
                let refs: Vec<&str> = a.iter().map(String::as_str).collect();
                let mut b = Berthd::start(&refs).await?;
                // Idle once the pods it started with have been tried (a
                // cluster without pending pods has nothing to be idle
                // after).
                let synced = b
                    .wait_for(|l| berth_e2e::message(l).starts_with("cache synced"))
                    .await?;
                let running = python.len() + rust.len();
                let mut connected = b
                    .seen
                    .iter()
                    .filter(|l| berth_e2e::message(l) == "extender connected")
                    .count();
                while connected < running {
                    b.wait_for(|l| berth_e2e::message(l) == "extender connected")
                        .await?;
                    connected += 1;
                }
                if synced["fields"]["pending"].as_u64().unwrap_or(0) > 0 {
                    b.wait_idle().await?;
                    b.finish_idle_summary().await?;
                }
                berthd = Some(b);
                args = a;
            }
            Step::Output { commands, block } => {
                let addr = berthd
                    .as_ref()
                    .map(|b| b.addr.clone())
                    .with_context(|| format!("{page}:{}: no berthd above it", block.open + 1))?;
                let actual = match commands {
                    Commands::Script(s) => scratch.run(&s, &doc_addr, &addr).await?,
                    Commands::Prompted(cmds) => {
                        let mut out = Vec::new();
                        for c in cmds {
                            out.push(format!("$ {c}"));
                            let o = scratch.run(&c, &doc_addr, &addr).await?;
                            if !o.is_empty() {
                                out.push(o);
                            }
                        }
                        out.join("\n")
                    }
                };
                results.push((block, actual));
            }
            Step::Log { block } => {
                let actual = text_log(&args).await?;
                results.push((block, actual));
            }
        }
    }
    if let Some(b) = berthd {
        b.stop().await?;
    }
    let mut mismatches = Vec::new();
    for (block, actual) in &results {
        let expected = block.body.join("\n");
        if !agrees(actual, &expected) {
            mismatches.push(Mismatch {
                line: block.open + 1,
                expected,
                actual: actual.clone(),
            });
        }
    }
    if std::env::var("SNAPSHOTS").as_deref() == Ok("overwrite") && !mismatches.is_empty() {
        overwrite(&path, &text, &results)?;
        return Ok(Vec::new());
    }
    Ok(mismatches)
}

/// Writes what berth printed into the blocks that differ, keeping their
/// patterns where they still match.
fn overwrite(path: &Path, text: &str, results: &[(Block, String)]) -> Result<()> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out: Vec<String> = Vec::new();
    let mut at = 0;
    for (block, actual) in results {
        let expected = block.body.join("\n");
        if agrees(actual, &expected) {
            continue;
        }
        out.extend(lines[at..=block.open].iter().map(|l| l.to_string()));
        out.extend(normalized(actual, &expected).lines().map(str::to_string));
        at = block.close;
    }
    out.extend(lines[at..].iter().map(|l| l.to_string()));
    let mut new = out.join("\n");
    new.push('\n');
    std::fs::write(path, new).with_context(|| format!("writing {}", path.display()))
}

/// A mismatch as a reader wants it: where, and a diff.
fn report(page: &str, m: &Mismatch) -> String {
    let diff = similar_lines(&m.expected, &m.actual);
    format!(
        "{page}:{}: the example's output is not what berth prints (SNAPSHOTS=overwrite cargo test -p berth-e2e --test doc_examples rewrites it):\n{diff}",
        m.line
    )
}

/// Both sides, as compared, from the first line where they part.
fn similar_lines(expected: &str, actual: &str) -> String {
    let e = mask(expected);
    let a = normalized(&mask(actual), &e);
    let (el, al): (Vec<&str>, Vec<&str>) = (e.lines().collect(), a.lines().collect());
    let first = el.iter().zip(&al).take_while(|(x, y)| x == y).count();
    let from = first.saturating_sub(2);
    let side = |lines: &[&str]| -> String {
        lines
            .iter()
            .enumerate()
            .skip(from)
            .map(|(i, l)| format!("{}{l}\n", if i == first { "> " } else { "  " }))
            .collect()
    };
    format!(
        "the page shows, from line {} of the block:\n{}berth printed:\n{}",
        from + 1,
        side(&el),
        side(&al)
    )
}

#[test]
fn directives_blocks_and_prompts_are_read_in_page_order() {
    let page = "<!-- doc-test: berthd --seed 1 -->\n\n```sh\nberthctl queue\n```\n\nprose\n\n<!-- doc-test: output -->\n```text\nNAME\n...\n```\n\n<!-- doc-test: output -->\n```text\n$ berthctl why x\nPod x\n```\n";
    let steps = parse(page).expect("parses");
    assert!(matches!(&steps[0], Step::Berthd(a) if a == &["--seed", "1"]));
    assert!(
        matches!(&steps[1], Step::Output { commands: Commands::Script(s), block } if s == "berthctl queue" && block.body == ["NAME", "..."])
    );
    assert!(
        matches!(&steps[2], Step::Output { commands: Commands::Prompted(c), .. } if c == &["berthctl why x"])
    );
}

#[test]
fn patterns_and_what_varies_are_not_differences() {
    let expected = "INFO scheduled pod=a latency_ms=0.75\n...\nlast [..] line";
    let actual = "INFO scheduled pod=a latency_ms=1.5\nx\ny\nlast of all line";
    assert!(agrees(actual, expected));
    assert!(!agrees("INFO scheduled pod=b latency_ms=1.5", expected));
}

/// Runs `page`'s examples; fails naming each that differs, with a diff.
async fn page(page: &str) -> Result<()> {
    let mismatches = run_page(page).await?;
    let reports: Vec<String> = mismatches.iter().map(|m| report(page, m)).collect();
    ensure!(reports.is_empty(), "{}", reports.join("\n"));
    Ok(())
}

#[tokio::test]
async fn readme() -> Result<()> {
    page("README.md").await
}

#[tokio::test]
async fn getting_started() -> Result<()> {
    page("docs/getting-started.md").await
}

#[tokio::test]
async fn cli() -> Result<()> {
    page("docs/cli.md").await
}

#[tokio::test]
async fn api() -> Result<()> {
    page("docs/api.md").await
}

#[tokio::test]
async fn extenders() -> Result<()> {
    page("docs/extenders.md").await
}

#[tokio::test]
async fn python_extender() -> Result<()> {
    page("docs/extenders/python.md").await
}

#[tokio::test]
async fn gang_scheduling() -> Result<()> {
    page("docs/gang-scheduling.md").await
}
