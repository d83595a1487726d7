//! The README and the manual (`docs/`, an mdBook) against what they
//! describe. Every page is found by walking `docs/`, so pages added later
//! are checked as they come:
//!
//! * every relative link names a file that exists, and an anchor a heading
//!   of its page (GitHub's slugs);
//! * `docs/SUMMARY.md` is mdBook's grammar, names existing pages, and lists
//!   every page of `docs/` (mdBook builds only what it lists; installing
//!   mdbook here would compile it from crates.io for minutes, so its
//!   structure is checked instead);
//! * every command shown (code blocks, `$ ` lines, inline code) that runs
//!   `cargo`, `berthd`, `berthctl`, `kubectl berth`, `berth-bench` or
//!   `grpcurl` names packages, binaries, subcommands, flags, workloads,
//!   services, methods and repository files that exist;
//! * every flag of berthd is in the configuration page, every berthctl
//!   and kubectl-berth command in the CLI page, and every method of berth's
//!   services has a grpcurl example in the API page;
//! * the grpcurl examples run, in page order, against a real berthd on the
//!   sample cluster (streams until their first message), and answer with
//!   the fields the page shows.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use berth_e2e::{
    Berthd, bench_path, berthctl_path, berthd_path, grpcurl_path, kubectl_berth_path,
    workspace_root,
};
use tokio::io::AsyncBufReadExt;
use tokio::process::Command;

/// How long one documented command may take before the test calls it hung.
const GUARD: Duration = Duration::from_secs(60);

// ---------------------------------------------------------------------------
// Pages

/// One Markdown page: its path from the repository's root and its text.
struct Page {
    path: PathBuf,
    text: String,
}

impl Page {
    fn name(&self) -> String {
        self.path.display().to_string()
    }
}

/// README.md and every `.md` under docs/.
fn pages() -> Result<Vec<Page>> {
    let root = workspace_root();
    let mut paths = vec![PathBuf::from("README.md")];
    let mut dirs = vec![PathBuf::from("docs")];
    while let Some(d) = dirs.pop() {
        let mut entries: Vec<_> = std::fs::read_dir(root.join(&d))
            .with_context(|| format!("reading {}", d.display()))?
            .collect::<Result<_, _>>()?;
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            let p = d.join(e.file_name());
            if e.file_type()?.is_dir() {
                dirs.push(p);
            } else if p.extension().is_some_and(|x| x == "md") {
                paths.push(p);
            }
        }
    }
    paths
        .into_iter()
        .map(|path| {
            let text = std::fs::read_to_string(root.join(&path))
                .with_context(|| format!("reading {}", path.display()))?;
            Ok(Page { path, text })
        })
        .collect()
}

/// A fenced code block: its info string, first line number and lines.
struct Block {
    lang: String,
    line: usize,
    lines: Vec<String>,
}

/// The page split into code blocks and prose (code blocks blanked out, so
/// that prose keeps its line numbers).
fn split(text: &str) -> (Vec<Block>, Vec<String>) {
    let mut blocks = Vec::new();
    let mut prose = Vec::new();
    let mut open: Option<(String, Block)> = None;
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        match &mut open {
            Some((fence, block)) => {
                if trimmed.starts_with(fence.as_str())
                    && trimmed.trim_start_matches(['`', '~']).trim().is_empty()
                {
                    let (_, b) = open.take().expect("open block");
                    blocks.push(b);
                } else {
                    block.lines.push(line.to_string());
                }
                prose.push(String::new());
            }
            None if trimmed.starts_with("```") || trimmed.starts_with("~~~") => {
                let fence: String = trimmed
                    .chars()
                    .take_while(|c| *c == '`' || *c == '~')
                    .collect();
                let lang = trimmed[fence.len()..].trim().to_string();
                open = Some((
                    fence,
                    Block {
                        lang,
                        line: i + 1,
                        lines: Vec::new(),
                    },
                ));
                prose.push(String::new());
            }
            None => prose.push(line.to_string()),
        }
    }
    (blocks, prose)
}

/// Inline code spans of prose lines, with where they start; a span may
/// continue on the next line, as Markdown allows.
fn inline_code(prose: &[String]) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    // Paragraphs: runs of non-empty lines.
    let mut para: Vec<(usize, &str)> = Vec::new();
    let flush = |para: &mut Vec<(usize, &str)>, out: &mut Vec<(usize, String)>| {
        let joined: String = para.iter().map(|(_, l)| *l).collect::<Vec<_>>().join(" ");
        let first = para.first().map_or(0, |(n, _)| *n);
        let mut rest = joined.as_str();
        while let Some(start) = rest.find('`') {
            let ticks = rest[start..].chars().take_while(|c| *c == '`').count();
            let after = &rest[start + ticks..];
            let close = "`".repeat(ticks);
            let Some(end) = after.find(&close) else { break };
            out.push((first, after[..end].trim().to_string()));
            rest = &after[end + ticks..];
        }
        para.clear();
    };
    for (i, l) in prose.iter().enumerate() {
        if l.trim().is_empty() {
            flush(&mut para, &mut out);
        } else {
            para.push((i + 1, l));
        }
    }
    flush(&mut para, &mut out);
    out
}

// ---------------------------------------------------------------------------
// Links and anchors

/// GitHub's anchor for a heading: lower case, punctuation dropped, spaces
/// as hyphens.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The anchors of a Markdown page's headings (duplicates numbered as
/// GitHub numbers them).
fn anchors(text: &str) -> BTreeSet<String> {
    let (_, prose) = split(text);
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = BTreeSet::new();
    for l in prose {
        let Some(h) = l.strip_prefix('#') else {
            continue;
        };
        let h = h.trim_start_matches('#');
        if !h.starts_with(' ') {
            continue;
        }
        let base = slug(h);
        let n = seen.entry(base.clone()).or_insert(0);
        out.insert(if *n == 0 {
            base.clone()
        } else {
            format!("{base}-{n}")
        });
        *n += 1;
    }
    out
}

/// `[text](target)` links of prose, inline code left out.
fn links(prose: &[String]) -> Vec<(usize, String)> {
    let re = regex::Regex::new(r"\]\(([^)\s]+)(?:\s+[^)]*)?\)").expect("a valid regex");
    let code = regex::Regex::new(r"`[^`]*`").expect("a valid regex");
    let mut out = Vec::new();
    for (i, l) in prose.iter().enumerate() {
        let l = code.replace_all(l, "");
        for c in re.captures_iter(&l) {
            out.push((i + 1, c[1].to_string()));
        }
    }
    out
}

#[test]
fn relative_links_name_files_and_headings_that_exist() -> Result<()> {
    let root = workspace_root();
    let pages = pages()?;
    let mut problems = Vec::new();
    for page in &pages {
        let (_, prose) = split(&page.text);
        let dir = page.path.parent().unwrap_or(Path::new(""));
        for (line, target) in links(&prose) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let (path, fragment) = match target.split_once('#') {
                Some((p, f)) => (p, Some(f)),
                None => (target.as_str(), None),
            };
            let file = if path.is_empty() {
                page.path.clone()
            } else {
                normalize(&dir.join(path))
            };
            if !root.join(&file).exists() {
                problems.push(format!(
                    "{}:{line}: {target}: no file {}",
                    page.name(),
                    file.display()
                ));
                continue;
            }
            if let Some(f) = fragment
                && file.extension().is_some_and(|x| x == "md")
            {
                let text = std::fs::read_to_string(root.join(&file))?;
                if !anchors(&text).contains(f) {
                    problems.push(format!(
                        "{}:{line}: {target}: no heading #{f} in {}",
                        page.name(),
                        file.display()
                    ));
                }
            }
        }
    }
    ensure!(
        problems.is_empty(),
        "broken links:\n{}",
        problems.join("\n")
    );
    Ok(())
}

/// `a/b/../c` as `a/c` (without touching the file system).
fn normalize(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

#[test]
fn the_summary_is_an_mdbook_summary_of_every_page() -> Result<()> {
    let root = workspace_root();
    let text = std::fs::read_to_string(root.join("docs/SUMMARY.md"))?;
    let entry = regex::Regex::new(r"^\[[^\]]+\]\(([^)]+)\)$").expect("a valid regex");
    let item = regex::Regex::new(r"^( *)- \[[^\]]+\]\(([^)]+)\)$").expect("a valid regex");
    let mut listed = BTreeSet::new();
    let mut problems = Vec::new();
    let mut depth = 0usize;
    let mut numbered = false;
    for (i, l) in text.lines().enumerate() {
        let n = i + 1;
        if l.trim().is_empty()
            || l == "---"
            || (l.starts_with("# ") && (n == 1 || numbered || depth == 0))
        {
            if l.starts_with("# ") && n > 1 {
                numbered = true;
                depth = 0;
            }
            continue;
        }
        if let Some(c) = entry.captures(l) {
            // Prefix and suffix chapters: not among numbered ones.
            if numbered {
                problems.push(format!(
                    "SUMMARY.md:{n}: an unnumbered chapter after numbered ones"
                ));
            }
            listed.insert(c[1].to_string());
            continue;
        }
        if let Some(c) = item.captures(l) {
            numbered = true;
            let indent = c[1].len();
            if indent % 4 != 0 || indent / 4 > depth {
                problems.push(format!(
                    "SUMMARY.md:{n}: nested {indent} spaces under a depth of {depth}"
                ));
            }
            depth = indent / 4 + 1;
            listed.insert(c[2].to_string());
            continue;
        }
        problems.push(format!(
            "SUMMARY.md:{n}: not a title, chapter or part: {l:?}"
        ));
    }
    for p in &listed {
        if !root.join("docs").join(p).is_file() {
            problems.push(format!("SUMMARY.md lists {p}, which does not exist"));
        }
    }
    for page in pages()? {
        let Ok(rel) = page.path.strip_prefix("docs") else {
            continue;
        };
        let rel = rel.display().to_string();
        if rel != "SUMMARY.md" && !listed.contains(&rel) {
            problems.push(format!(
                "docs/{rel} is not in docs/SUMMARY.md (mdBook would leave it out)"
            ));
        }
    }
    ensure!(problems.is_empty(), "{}", problems.join("\n"));
    Ok(())
}

// ---------------------------------------------------------------------------
// Commands

/// A command shown on a page, as its words.
#[derive(Debug, Clone)]
struct Shown {
    page: String,
    line: usize,
    words: Vec<String>,
    /// The shell text it came from (a whole pipeline's line).
    text: String,
}

/// Shell words of `s` (quotes removed, `\` escapes kept simple).
fn words(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut any = false;
    let mut chars = s.chars().peekable();
    let mut quote: Option<char> = None;
    while let Some(c) = chars.next() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => cur.push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                any = true;
            }
            (None, '\\') => {
                if let Some(n) = chars.next() {
                    cur.push(n);
                }
            }
            (None, c) if c.is_whitespace() => {
                if any || !cur.is_empty() {
                    out.push(std::mem::take(&mut cur));
                    any = false;
                }
            }
            (None, ';' | '|' | '&') => {
                if any || !cur.is_empty() {
                    out.push(std::mem::take(&mut cur));
                    any = false;
                }
                let mut op = c.to_string();
                if chars.peek() == Some(&c) {
                    op.push(c);
                    chars.next();
                }
                out.push(op);
            }
            (None, c) => cur.push(c),
        }
    }
    if any || !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// The commands of a shell text: split at `&&`, `||`, `|`, `;`, `&`,
/// redirections and leading `VAR=value` assignments dropped.
fn commands(text: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let mut cur: Vec<String> = Vec::new();
    let mut skip_next = false;
    for w in words(text) {
        if skip_next {
            skip_next = false;
            continue;
        }
        if matches!(w.as_str(), "&&" | "||" | "|" | ";" | "&" | ";;") {
            out.push(std::mem::take(&mut cur));
            continue;
        }
        if matches!(w.as_str(), ">" | "2>" | "<" | ">>" | "2>>") {
            skip_next = true;
            continue;
        }
        if w.starts_with("2>") || w.starts_with('>') || w.starts_with("<<") {
            continue;
        }
        if cur.is_empty()
            && w.contains('=')
            && !w.starts_with('-')
            && w.split('=')
                .next()
                .is_some_and(|k| k.chars().all(|c| c.is_ascii_uppercase() || c == '_'))
        {
            continue;
        }
        cur.push(w);
    }
    out.push(cur);
    out.into_iter().filter(|c| !c.is_empty()).collect()
}

/// The programs whose commands are checked.
const PROGRAMS: &[&str] = &[
    "cargo",
    "berthd",
    "berthctl",
    "kubectl",
    "kubectl-berth",
    "berth-bench",
    "grpcurl",
];

/// Every command the pages show.
fn shown_commands(pages: &[Page]) -> Vec<Shown> {
    let mut out = Vec::new();
    for page in pages {
        let (blocks, prose) = split(&page.text);
        for b in &blocks {
            let shell = matches!(b.lang.as_str(), "sh" | "bash" | "shell" | "console");
            let mut i = 0;
            while i < b.lines.len() {
                let line_no = b.line + 1 + i;
                let mut line = b.lines[i].clone();
                i += 1;
                if !shell || b.lang == "console" {
                    match line.trim_start().strip_prefix("$ ") {
                        Some(rest) => line = rest.to_string(),
                        None => continue,
                    }
                }
                if line.trim_start().starts_with('#') {
                    continue;
                }
                // Continuation lines, and quoted strings that span lines (a
                // grpcurl -d '{...}'), in any order.
                loop {
                    if words_open(&line) && i < b.lines.len() {
                        line = format!("{line}\n{}", b.lines[i]);
                    } else if line.trim_end().ends_with('\\') && i < b.lines.len() {
                        line = format!(
                            "{} {}",
                            line.trim_end().trim_end_matches('\\'),
                            b.lines[i].trim()
                        );
                    } else {
                        break;
                    }
                    i += 1;
                }
                // A heredoc's body is data, not commands.
                if let Some(pos) = line.find("<<") {
                    let marker: String = line[pos + 2..]
                        .trim_start_matches('-')
                        .trim()
                        .trim_matches(['\'', '"'])
                        .chars()
                        .take_while(|c| c.is_alphanumeric() || *c == '_')
                        .collect();
                    while i < b.lines.len() && b.lines[i].trim() != marker {
                        i += 1;
                    }
                    i += 1;
                }
                for words in commands(&line) {
                    if PROGRAMS.contains(&words[0].as_str()) {
                        out.push(Shown {
                            page: page.name(),
                            line: line_no,
                            words,
                            text: line.clone(),
                        });
                    }
                }
            }
        }
        for (line, span) in inline_code(&prose) {
            for words in commands(&span) {
                if PROGRAMS.contains(&words[0].as_str()) && reads_as_command(&words) {
                    out.push(Shown {
                        page: page.name(),
                        line,
                        words,
                        text: span.clone(),
                    });
                }
            }
        }
    }
    out
}

/// Whether inline code that starts with a program's name is a command
/// rather than a quoted message ("berthd at ADDR serves TLS ...") or a
/// pattern (`berthctl COMMAND --help`): the program alone, or followed by
/// a flag or a lower-case word (a subcommand or `kubectl berth`).
fn reads_as_command(words: &[String]) -> bool {
    match words.get(1) {
        None => true,
        Some(w) => {
            w.starts_with('-')
                || (w.chars().all(|c| c.is_ascii_lowercase() || c == '-')
                    && !matches!(
                        w.as_str(),
                        "at" | "is" | "and" | "or" | "with" | "on" | "the"
                    ))
        }
    }
}

/// Whether a quote is left open at the end of `s`.
fn words_open(s: &str) -> bool {
    let mut quote: Option<char> = None;
    let mut escaped = false;
    for c in s.chars() {
        match (quote, c) {
            (_, _) if escaped => escaped = false,
            (None, '\\') => escaped = true,
            (Some(q), c) if c == q => quote = None,
            (None, '\'' | '"') => quote = Some(c),
            _ => {}
        }
    }
    quote.is_some()
}

/// What a program's `--help` says: its subcommands and flags.
#[derive(Debug, Default)]
struct Help {
    subcommands: BTreeSet<String>,
    flags: BTreeSet<String>,
    /// Flags per subcommand (global ones included).
    sub_flags: BTreeMap<String, BTreeSet<String>>,
}

fn flags_of(help: &str) -> BTreeSet<String> {
    let re = regex::Regex::new(r"(?:^|[\s,\[])(--?[A-Za-z][A-Za-z0-9-]*)").expect("a valid regex");
    re.captures_iter(help).map(|c| c[1].to_string()).collect()
}

fn subcommands_of(help: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut inside = false;
    for l in help.lines() {
        if l.starts_with("Commands:") {
            inside = true;
            continue;
        }
        if inside {
            if !l.starts_with("  ") {
                break;
            }
            if let Some(w) = l.split_whitespace().next() {
                out.insert(w.to_string());
            }
        }
    }
    out.remove("help");
    out
}

async fn output_of(program: &Path, args: &[&str]) -> Result<String> {
    let out = tokio::time::timeout(
        GUARD,
        Command::new(program)
            .args(args)
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .with_context(|| format!("{} {args:?} hung", program.display()))??;
    // grpcurl prints its help on stderr.
    Ok(format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    ))
}

async fn help_of(program: &Path) -> Result<Help> {
    let top = output_of(program, &["--help"]).await?;
    let mut h = Help {
        subcommands: subcommands_of(&top),
        flags: flags_of(&top),
        ..Default::default()
    };
    for s in h.subcommands.clone() {
        let text = output_of(program, &[&s, "--help"]).await?;
        h.sub_flags.insert(s, flags_of(&text));
    }
    Ok(h)
}

/// The flags a command line uses (`--flag=value` as `--flag`).
fn used_flags(words: &[String]) -> Vec<String> {
    words
        .iter()
        .filter(|w| {
            w.starts_with('-')
                && w.len() > 1
                && w != &"-"
                && !w.chars().nth(1).is_some_and(|c| c.is_ascii_digit())
        })
        .map(|w| {
            let w = w.split('=').next().unwrap_or(w);
            w.split('[').next().unwrap_or(w).to_string()
        })
        .collect()
}

/// Checks a command's words against a program's help: the subcommand (the
/// first word that is one) and every flag.
fn check_against(help: &Help, words: &[String], problems: &mut Vec<String>, what: &str) {
    let words = &words[1..];
    let sub = words.iter().find(|w| help.subcommands.contains(*w));
    let known = match sub {
        Some(s) => &help.sub_flags[s],
        None => &help.flags,
    };
    if sub.is_none() && !help.subcommands.is_empty() {
        // A bare program name or a `--help` is fine; a word that looks
        // like a subcommand is not.
        if let Some(w) = words.iter().find(|w| {
            !w.starts_with('-')
                && w.chars().all(|c| c.is_ascii_lowercase() || c == '-')
                && w.len() > 2
        }) {
            problems.push(format!("{what}: no subcommand {w:?}"));
        }
    }
    for f in used_flags(words) {
        if !known.contains(&f) {
            problems.push(format!("{what}: no flag {f}"));
        }
    }
}

/// The services, methods and messages of berth's protos (package-qualified),
/// and which methods stream their answers.
#[derive(Debug, Default)]
struct Protos {
    services: BTreeSet<String>,
    methods: BTreeMap<String, bool>,
    messages: BTreeSet<String>,
}

fn protos() -> Result<Protos> {
    let root = workspace_root();
    let mut p = Protos::default();
    let rpc = regex::Regex::new(
        r"^\s*rpc\s+(\w+)\s*\(\s*(?:stream\s+)?[\w.]+\s*\)\s*returns\s*\(\s*(stream\s+)?",
    )
    .expect("a valid regex");
    for dir in ["proto/berth/v1", "proto/berth/extender/v1"] {
        for e in std::fs::read_dir(root.join(dir))? {
            let path = e?.path();
            if path.extension().is_none_or(|x| x != "proto") {
                continue;
            }
            let text = std::fs::read_to_string(&path)?;
            let package = text
                .lines()
                .find_map(|l| l.strip_prefix("package "))
                .map(|l| l.trim_end_matches(';').to_string())
                .context("package")?;
            let mut service = String::new();
            for l in text.lines() {
                if let Some(s) = l.strip_prefix("service ") {
                    service = format!("{package}.{}", s.trim_end_matches(['{', ' ']));
                    p.services.insert(service.clone());
                } else if let Some(m) = l.strip_prefix("message ") {
                    p.messages
                        .insert(format!("{package}.{}", m.trim_end_matches(['{', ' '])));
                } else if let Some(c) = rpc.captures(l) {
                    p.methods
                        .insert(format!("{service}/{}", &c[1]), c.get(2).is_some());
                }
            }
        }
    }
    // The standard services berthd serves beside its own.
    p.services.insert("grpc.health.v1.Health".into());
    p.methods
        .insert("grpc.health.v1.Health/Check".into(), false);
    p.methods.insert("grpc.health.v1.Health/Watch".into(), true);
    for r in [
        "grpc.reflection.v1.ServerReflection",
        "grpc.reflection.v1alpha.ServerReflection",
    ] {
        p.services.insert(r.into());
    }
    Ok(p)
}

/// The grpcurl call a command makes: the method (`Service/Method`), or the
/// symbol a `list`/`describe` names.
fn grpcurl_target(words: &[String]) -> Option<(&str, Option<&str>)> {
    // Flags that take a value.
    const VALUED: &[&str] = &[
        "-d",
        "-H",
        "-max-time",
        "-connect-timeout",
        "-cacert",
        "-cert",
        "-key",
        "-servername",
        "-authority",
        "-import-path",
        "-proto",
        "-protoset",
        "-format",
        "-max-msg-sz",
        "-rpc-header",
        "-reflect-header",
        "-user-agent",
        "-keepalive-time",
        "-unix",
    ];
    let mut positional = Vec::new();
    let mut i = 1;
    while i < words.len() {
        let w = words[i].as_str();
        if w.starts_with('-') {
            if VALUED.contains(&w) {
                i += 1;
            }
        } else {
            positional.push(w);
        }
        i += 1;
    }
    // [address] verb-or-method [symbol]
    let rest: Vec<&str> = positional
        .into_iter()
        .filter(|w| !w.contains(':') || w.contains('/'))
        .collect();
    match rest.as_slice() {
        [verb @ ("list" | "describe")] => Some((verb, None)),
        [verb @ ("list" | "describe"), symbol, ..] => Some((verb, Some(symbol))),
        [method, ..] => Some((method, None)),
        [] => None,
    }
}

#[tokio::test]
async fn commands_name_things_that_exist() -> Result<()> {
    let root = workspace_root();
    let pages = pages()?;
    let shown = shown_commands(&pages);
    ensure!(
        shown.len() > 50,
        "only {} commands found: is the parser broken?",
        shown.len()
    );

    let packages = workspace_packages().await?;
    let berthd = help_of(&berthd_path()?).await?;
    let berthctl = help_of(&berthctl_path()?).await?;
    let kubectl_berth = help_of(&kubectl_berth_path()?).await?;
    let bench = bench_path()?;
    let bench_help = help_of(&bench).await?;
    let workloads: Vec<String> = output_of(&bench, &["--list"])
        .await?
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .collect();
    let grpcurl_help = flags_of(&output_of(&grpcurl_path()?, &["-help"]).await?);
    let protos = protos()?;

    let mut problems = Vec::new();
    for s in &shown {
        let what = format!("{}:{}: `{}`", s.page, s.line, s.words.join(" "));
        let w = &s.words;
        // Files of the repository the command names.
        for arg in &w[1..] {
            let arg = arg.trim_end_matches([',', '.', ')']);
            let top = arg.split('/').next().unwrap_or_default();
            let repo_dir = [
                "proto",
                "server",
                "client",
                "extenders",
                "deploy",
                "bench",
                "tests",
                "docs",
            ]
            .contains(&top)
                && arg.contains('/')
                && !arg.starts_with("tests/.venv");
            if repo_dir && !root.join(arg).exists() {
                problems.push(format!("{what}: no file {arg}"));
            }
        }
        match w[0].as_str() {
            "cargo" => {
                let mut package = None;
                let mut bin = None;
                let mut i = 1;
                while i < w.len() && w[i] != "--" {
                    match w[i].as_str() {
                        "-p" | "--package" => {
                            package = w.get(i + 1).cloned();
                            if let Some(p) = &package
                                && !packages.contains_key(p)
                            {
                                problems.push(format!("{what}: no package {p}"));
                            }
                            i += 1;
                        }
                        "--bin" | "--bench" | "--example" => {
                            let target = w.get(i + 1).cloned().unwrap_or_default();
                            let all: BTreeSet<&String> = packages.values().flatten().collect();
                            if !all.contains(&target) {
                                problems.push(format!("{what}: no target {target}"));
                            }
                            if w[i] == "--bin" {
                                bin = Some(target);
                            }
                            i += 1;
                        }
                        _ => {}
                    }
                    i += 1;
                }
                if w.get(1).map(String::as_str) == Some("run") {
                    let args: Vec<String> = w
                        .iter()
                        .skip_while(|x| *x != "--")
                        .skip(1)
                        .cloned()
                        .collect();
                    let program = bin.or_else(|| match package.as_deref() {
                        Some("berth-server") => Some("berthd".into()),
                        Some("berth-bench") => Some("berth-bench".into()),
                        _ => None,
                    });
                    let mut full = vec![program.clone().unwrap_or_default()];
                    full.extend(args);
                    match program.as_deref() {
                        Some("berthd") => check_against(&berthd, &full, &mut problems, &what),
                        Some("berth-bench") => {
                            check_against(&bench_help, &full, &mut problems, &what);
                            check_workloads(&full, &workloads, &mut problems, &what);
                        }
                        _ => {}
                    }
                }
            }
            "berthd" => check_against(&berthd, w, &mut problems, &what),
            "berthctl" => check_against(&berthctl, w, &mut problems, &what),
            "kubectl-berth" => check_against(&kubectl_berth, w, &mut problems, &what),
            "kubectl" if w.get(1).map(String::as_str) == Some("berth") => {
                check_against(&kubectl_berth, &w[1..], &mut problems, &what)
            }
            "berth-bench" => {
                check_against(&bench_help, w, &mut problems, &what);
                check_workloads(w, &workloads, &mut problems, &what);
            }
            "grpcurl" => {
                for f in used_flags(w) {
                    if !grpcurl_help.contains(&f) {
                        problems.push(format!("{what}: grpcurl has no flag {f}"));
                    }
                }
                let problem = match grpcurl_target(w) {
                    Some(("list", Some(sym))) if !protos.services.contains(sym) => {
                        Some(format!("no service {sym}"))
                    }
                    Some(("describe", Some(sym)))
                        if !protos.services.contains(sym) && !protos.messages.contains(sym) =>
                    {
                        Some(format!("no service or message {sym}"))
                    }
                    Some(("list" | "describe", _)) | None => None,
                    Some((method, _)) if !protos.methods.contains_key(method) => {
                        Some(format!("no method {method}"))
                    }
                    Some(_) => None,
                };
                if let Some(p) = problem {
                    problems.push(format!("{what}: {p}"));
                }
            }
            _ => {}
        }
    }
    ensure!(
        problems.is_empty(),
        "{} problems:\n{}",
        problems.len(),
        problems.join("\n")
    );
    Ok(())
}

fn check_workloads(words: &[String], workloads: &[String], problems: &mut Vec<String>, what: &str) {
    for (i, w) in words.iter().enumerate() {
        if w == "--workload"
            && let Some(name) = words.get(i + 1)
        {
            let lower = name.to_lowercase();
            let family = |n: &String| {
                n.split('/')
                    .next()
                    .is_some_and(|f| f.eq_ignore_ascii_case(name))
            };
            // As berth-bench selects: a name ending in `$` is one workload's
            // whole name, anything else a prefix or a family.
            let selects = |n: &String| match lower.strip_suffix('$') {
                Some(exact) => n.to_lowercase() == exact,
                None => n.to_lowercase().starts_with(&lower) || family(n),
            };
            if !workloads.iter().any(selects) {
                problems.push(format!("{what}: no workload {name}"));
            }
        }
    }
}

/// Each workspace package and its targets' names, from `cargo metadata`.
async fn workspace_packages() -> Result<BTreeMap<String, Vec<String>>> {
    let out = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args([
            "metadata",
            "--no-deps",
            "--format-version",
            "1",
            "--offline",
        ])
        .current_dir(workspace_root())
        .stdin(Stdio::null())
        .output()
        .await
        .context("cargo metadata")?;
    ensure!(
        out.status.success(),
        "cargo metadata: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    let mut packages = BTreeMap::new();
    for p in v["packages"].as_array().into_iter().flatten() {
        let targets = p["targets"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|t| t["name"].as_str().map(str::to_string))
            .collect();
        packages.insert(p["name"].as_str().unwrap_or_default().to_string(), targets);
    }
    Ok(packages)
}

#[tokio::test]
async fn the_reference_pages_cover_every_flag_command_and_method() -> Result<()> {
    let root = workspace_root();
    let read = |p: &str| std::fs::read_to_string(root.join(p));
    let configuration = read("docs/configuration.md")?;
    let cli = read("docs/cli.md")?;
    let api = read("docs/api.md")?;
    let mut problems = Vec::new();

    let berthd = help_of(&berthd_path()?).await?;
    for f in &berthd.flags {
        if f.starts_with("--")
            && !matches!(f.as_str(), "--help" | "--version")
            && !configuration.contains(&format!("`{f}"))
        {
            problems.push(format!("berthd's {f} is not in docs/configuration.md"));
        }
    }
    for (program, help) in [
        ("berthctl", help_of(&berthctl_path()?).await?),
        ("kubectl berth", help_of(&kubectl_berth_path()?).await?),
    ] {
        for s in &help.subcommands {
            if !cli.contains(&format!("{program} {s}")) {
                problems.push(format!("`{program} {s}` is not in docs/cli.md"));
            }
        }
    }
    let pages = pages()?;
    let api_page: Vec<Shown> = shown_commands(&pages)
        .into_iter()
        .filter(|s| s.page == "docs/api.md" && s.words[0] == "grpcurl")
        .collect();
    for (method, _) in protos()?.methods {
        if method.starts_with("berth.extender") {
            continue;
        }
        let shown = api_page
            .iter()
            .any(|s| grpcurl_target(&s.words).is_some_and(|(m, _)| m == method));
        if !shown {
            problems.push(format!("{method} has no grpcurl example in docs/api.md"));
        }
    }
    ensure!(api.contains("grpcurl"), "docs/api.md shows no grpcurl");
    ensure!(problems.is_empty(), "{}", problems.join("\n"));
    Ok(())
}

// ---------------------------------------------------------------------------
// Running the grpcurl examples

/// The `"key":` names of a shown answer.
fn shown_keys(lines: &[String]) -> BTreeSet<String> {
    let re = regex::Regex::new(r#""([A-Za-z]+)"\s*:"#).expect("a valid regex");
    lines
        .iter()
        .flat_map(|l| {
            re.captures_iter(l)
                .map(|c| c[1].to_string())
                .collect::<Vec<_>>()
        })
        .collect()
}

/// A runnable example: a plaintext grpcurl call at the default address,
/// with the answer the page shows after it (if any).
struct Example {
    shown: Shown,
    answer: Option<Vec<String>>,
    /// Its answer is marked `<!-- doc-test: output -->`: doc_examples.rs
    /// runs it against the berthd its page starts and compares all it
    /// prints, so here it only counts as run.
    compared: bool,
}

fn examples(pages: &[Page]) -> Vec<Example> {
    let mut out = Vec::new();
    for page in pages {
        let (blocks, _) = split(&page.text);
        let shown: Vec<Shown> = shown_commands(std::slice::from_ref(page))
            .into_iter()
            .filter(|s| {
                s.words[0] == "grpcurl"
                    && s.words.iter().any(|w| w == "-plaintext")
                    && s.words.iter().any(|w| w == "127.0.0.1:50051")
            })
            .collect();
        for s in shown {
            // The answer: the next block, when it is text or JSON and
            // comes before any other command block.
            let next = blocks
                .iter()
                .filter(|b| b.line > s.line)
                .take(1)
                .find(|b| matches!(b.lang.as_str(), "text" | "json"));
            let after = next.map(|b| b.lines.clone());
            let compared = next.is_some_and(|b| {
                b.line >= 2
                    && page.text.lines().nth(b.line - 2).map(str::trim)
                        == Some("<!-- doc-test: output -->")
            });
            // Only code blocks run: inline mentions do not.
            if blocks
                .iter()
                .any(|b| b.line < s.line && s.line <= b.line + b.lines.len())
            {
                out.push(Example {
                    shown: s,
                    answer: after,
                    compared,
                });
            }
        }
    }
    out
}

#[tokio::test]
async fn the_grpcurl_examples_run_against_a_real_berthd() -> Result<()> {
    let pages = pages()?;
    let examples = examples(&pages);
    ensure!(
        examples.len() >= 12,
        "only {} grpcurl examples found",
        examples.len()
    );
    let protos = protos()?;

    // grpcurl as the pages call it: on the PATH.
    let dir = std::env::temp_dir().join(format!("berth-docs-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let link = dir.join("grpcurl");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(grpcurl_path()?, &link)?;
    let path = format!(
        "{}:{}",
        dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );

    let mut berthd = Berthd::start(&["--seed", "1"]).await?;
    berthd.wait_idle().await?;
    let mut client = berthd.client().await?;
    let mut problems = Vec::new();
    let mut ran = BTreeSet::new();
    for (n, e) in examples.iter().enumerate() {
        let what = format!("{}:{}", e.shown.page, e.shown.line);
        if e.compared {
            if let Some((m, _)) = grpcurl_target(&e.shown.words) {
                ran.insert(m.to_string());
            }
            continue;
        }
        let mut text = e.shown.text.replace("127.0.0.1:50051", &berthd.addr);
        let method = grpcurl_target(&e.shown.words)
            .map(|(m, _)| m.to_string())
            .unwrap_or_default();
        let streams = protos.methods.get(&method).copied().unwrap_or(false);
        if streams {
            // Verbose: grpcurl says when the call is open (the response
            // headers), which is when an event may be made for it.
            text = text.replacen("grpcurl ", "grpcurl -v ", 1);
        }
        let child = Command::new("sh")
            .args(["-c", &text])
            .env("PATH", &path)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()?;
        let output = if streams {
            stream_first_message(child, &mut client, n, &what).await?
        } else {
            let out = tokio::time::timeout(GUARD, child.wait_with_output())
                .await
                .with_context(|| format!("{what}: hung"))??;
            (
                out.status.success(),
                String::from_utf8_lossy(&out.stdout).to_string(),
                String::from_utf8_lossy(&out.stderr).to_string(),
            )
        };
        let (ok, stdout, stderr) = output;
        ran.insert(method.clone());
        let expects_error = e
            .answer
            .as_ref()
            .is_some_and(|a| a.first().is_some_and(|l| l.starts_with("ERROR:")));
        if ok == expects_error {
            problems.push(format!(
                "{what}: {} (stdout {stdout}, stderr {stderr})",
                if ok {
                    "succeeded, the page shows an error"
                } else {
                    "failed"
                }
            ));
            continue;
        }
        if let Some(answer) = &e.answer {
            if expects_error {
                for l in answer.iter().skip(1) {
                    if !stderr.contains(l.trim()) {
                        problems.push(format!(
                            "{what}: the error differs from the page's {l:?}: {stderr}"
                        ));
                    }
                }
            } else {
                for key in shown_keys(answer) {
                    if !stdout.contains(&format!("\"{key}\"")) {
                        problems.push(format!(
                            "{what}: the answer has no {key:?} as the page shows: {stdout}"
                        ));
                    }
                }
                // A list's lines (grpcurl list) are what it prints.
                if method == "list" {
                    for l in answer {
                        if !stdout.lines().any(|o| o == l) {
                            problems.push(format!("{what}: {l:?} not listed: {stdout}"));
                        }
                    }
                }
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    // Every method's example ran (an example the parser missed would
    // otherwise go unchecked).
    for m in protos.methods.keys() {
        if !m.starts_with("berth.extender") && !ran.contains(m) {
            problems.push(format!("no example of {m} ran"));
        }
    }
    ensure!(problems.is_empty(), "{}", problems.join("\n"));
    Ok(())
}

/// A stream's first message: once grpcurl reports the call open (its
/// response headers), a pod of this example's own is applied, so that an
/// event stream has an event; streams of objects or health answer by
/// themselves. Then grpcurl is stopped.
async fn stream_first_message(
    mut child: tokio::process::Child,
    client: &mut berth_client::Client,
    n: usize,
    what: &str,
) -> Result<(bool, String, String)> {
    let stdout = child.stdout.take().context("stdout")?;
    let stderr = child.stderr.take().context("stderr")?;
    let mut lines = tokio::io::BufReader::new(stdout)
        .lines()
        .chain_stderr(stderr);
    let mut message = String::new();
    let mut contents = false;
    let mut applied = false;
    let read = async {
        while let Some(l) = lines.next().await? {
            if l.starts_with("Response headers received:") && !applied {
                let yaml = format!(
                    "apiVersion: v1\nkind: Pod\nmetadata: {{name: docs-example-{n}, namespace: shop}}\nspec:\n  containers: [{{name: c, resources: {{requests: {{cpu: 10m}}}}}}]\n"
                );
                client.apply(&[], &yaml).await?;
                applied = true;
            } else if l.starts_with("Response contents:") {
                contents = true;
            } else if contents {
                message.push_str(&l);
                message.push('\n');
                if l == "}" {
                    return anyhow::Ok(());
                }
            }
        }
        bail!("the stream ended before a message: {message}")
    };
    tokio::time::timeout(GUARD, read)
        .await
        .with_context(|| format!("{what}: no message"))??;
    child.kill().await?;
    Ok((true, message, String::new()))
}

/// stdout's and stderr's lines, as they come (grpcurl's verbose lines go
/// to either).
trait ChainStderr {
    fn chain_stderr(self, stderr: tokio::process::ChildStderr) -> Lines;
}

struct Lines {
    rx: tokio::sync::mpsc::UnboundedReceiver<String>,
}

impl Lines {
    async fn next(&mut self) -> Result<Option<String>> {
        Ok(self.rx.recv().await)
    }
}

impl ChainStderr for tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>> {
    fn chain_stderr(mut self, stderr: tokio::process::ChildStderr) -> Lines {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let out = tx.clone();
        tokio::spawn(async move {
            while let Ok(Some(l)) = self.next_line().await {
                if out.send(l).is_err() {
                    return;
                }
            }
        });
        tokio::spawn(async move {
            let mut err = tokio::io::BufReader::new(stderr).lines();
            while let Ok(Some(l)) = err.next_line().await {
                if tx.send(l).is_err() {
                    return;
                }
            }
        });
        Lines { rx }
    }
}
