//! Fuzzing of every decoder a client reaches, in bounded time (cargo-fuzz
//! needs a nightly compiler; this runs on stable, in `cargo test`, so CI
//! runs it at every change):
//!
//! * pods and nodes from JSON (admission: bounds, strict decoding,
//!   defaults, validation, then the scheduler's pre-parsing);
//! * the same through the wire: DryRun and Apply requests as protobuf
//!   bytes (the API codec's check, prost, Struct to JSON);
//! * YAML for Apply (documents, Lists, anchors), into the embedded cluster;
//! * the KubeSchedulerConfiguration parser.
//!
//! Inputs are the corpus in `tests/fuzz/corpus/` mutated by proptest
//! strategies (edits of the JSON tree, of the bytes, of the text), from a
//! fixed seed. Each target runs for `BERTH_FUZZ_SECONDS` seconds (default
//! 3) or `BERTH_FUZZ_CASES` cases (default 100,000), whichever ends first.
//! A case passes when it neither panics nor allocates more than
//! [`ALLOCATION_BOUND`] beyond its input's size, and every refusal is a
//! short, non-empty message. A failure prints the input; an allocation
//! past the bound aborts the process, and the last input is then in
//! `$TMPDIR/berth-fuzz-<target>.last`.

use std::alloc::System;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use berth_proto::v1::{ApplyRequest, DryRunRequest};
use berth_server::cluster::embedded::{EmbeddedCluster, parse_objects};
use berth_server::model::admission::{node_from_json, pod_from_json};
use berth_server::model::{NodeSpec, PodInfo};
use cap::Cap;
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, TestRng, TestRunner};
use prost::Message;
use serde_json::{Value, json};

#[global_allocator]
static ALLOCATOR: Cap<System> = Cap::new(System, usize::MAX);

/// The most a case may allocate at once beyond 64 times its input: far
/// above what any valid object needs, far below what an unbounded
/// expansion reaches.
const ALLOCATION_BOUND: usize = 256 << 20;

/// The longest refusal message accepted.
const MAX_MESSAGE: usize = 2048;

fn corpus(dir: &str) -> Vec<(String, String)> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fuzz/corpus")
        .join(dir);
    let mut out: Vec<(String, String)> = std::fs::read_dir(&path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .map(|e| {
            let p = e.expect("corpus entry").path();
            let text = std::fs::read_to_string(&p).expect("corpus file");
            (p.display().to_string(), text)
        })
        .collect();
    out.sort();
    assert!(!out.is_empty(), "empty corpus {}", path.display());
    out
}

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Runs `check` on inputs from `strategy` for the time budget. `show`
/// renders an input for the failure message and the last-input file.
fn fuzz<S: Strategy>(
    target: &str,
    strategy: S,
    show: impl Fn(&S::Value) -> Vec<u8>,
    check: impl Fn(&S::Value) -> Result<(), String>,
) {
    // The allocation limit is the process's: one target at a time.
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let budget = Duration::from_secs(env_number("BERTH_FUZZ_SECONDS", 3));
    let max_cases = env_number("BERTH_FUZZ_CASES", 100_000);
    let last: PathBuf = std::env::temp_dir().join(format!("berth-fuzz-{target}.last"));
    let mut runner = TestRunner::new_with_rng(
        Config::default(),
        TestRng::deterministic_rng(proptest::test_runner::RngAlgorithm::ChaCha),
    );
    let start = Instant::now();
    let mut cases = 0u64;
    while start.elapsed() < budget && cases < max_cases {
        let tree = strategy
            .new_tree(&mut runner)
            .unwrap_or_else(|e| panic!("{target}: no input: {e}"));
        let input = tree.current();
        let shown = show(&input);
        let _ = std::fs::write(&last, &shown);
        let base = ALLOCATOR.allocated();
        let limit = base
            .saturating_add(ALLOCATION_BOUND)
            .saturating_add(shown.len().saturating_mul(64));
        ALLOCATOR
            .set_limit(limit)
            .unwrap_or_else(|()| panic!("{target}: cannot set the allocation limit"));
        let outcome = catch_unwind(AssertUnwindSafe(|| check(&input)));
        let _ = ALLOCATOR.set_limit(usize::MAX);
        let failure = match outcome {
            Ok(Ok(())) => None,
            Ok(Err(e)) => Some(e),
            Err(panic) => Some(format!(
                "panicked: {}",
                panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default()
            )),
        };
        if let Some(why) = failure {
            let text = String::from_utf8_lossy(&shown);
            let text: String = text.chars().take(4000).collect();
            panic!("{target}: case {cases}: {why}\ninput: {text}");
        }
        cases += 1;
    }
    let _ = std::fs::remove_file(&last);
    eprintln!(
        "fuzz {target}: {cases} cases in {:.1}s",
        start.elapsed().as_secs_f64()
    );
    assert!(cases > 0, "{target}: no case ran");
}

/// A refusal must say something, briefly.
fn clear(what: &str, message: &str) -> Result<(), String> {
    if message.trim().is_empty() {
        return Err(format!("{what}: an empty error message"));
    }
    if message.len() > MAX_MESSAGE {
        return Err(format!(
            "{what}: a {}-byte error message: {}...",
            message.len(),
            message.chars().take(200).collect::<String>()
        ));
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Mutations

/// One edit of a JSON tree: where (a path of child choices) and what.
#[derive(Debug, Clone)]
enum Edit {
    Delete(Vec<u16>),
    Replace(Vec<u16>, Value),
    Insert(Vec<u16>, String, Value),
    /// Wrap the value in `n` objects or lists.
    Nest(Vec<u16>, u8, bool),
    /// Repeat a value `n` times into a list.
    Repeat(Vec<u16>, u8),
}

fn scalar() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<f64>()
            .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        "[a-zA-Z0-9./_-]{0,20}".prop_map(Value::String),
        (1usize..40_000).prop_map(|n| Value::String("x".repeat(n))),
        prop_oneof![
            Just("1Gi"),
            Just("-1"),
            Just("1e308"),
            Just("9999999999999999999999999Ei"),
            Just("0.0000000001"),
            Just("Always"),
            Just("Exists"),
            Just("NoSchedule"),
            Just("In"),
            Just("DoNotSchedule"),
            Just("Web_1"),
            Just(""),
            Just("kube-system"),
            Just("a/b/c"),
        ]
        .prop_map(|s| Value::String(s.to_string())),
    ]
}

fn json_value() -> impl Strategy<Value = Value> {
    scalar().prop_recursive(4, 32, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map("[a-zA-Z]{1,12}", inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Field names of the Kubernetes API, so that edits reach real fields.
const FIELDS: &[&str] = &[
    "metadata",
    "spec",
    "status",
    "name",
    "namespace",
    "labels",
    "annotations",
    "uid",
    "containers",
    "initContainers",
    "resources",
    "requests",
    "limits",
    "cpu",
    "memory",
    "nodeSelector",
    "nodeSelektor",
    "affinity",
    "tolerations",
    "priority",
    "schedulerName",
    "nodeName",
    "hostNetwork",
    "ports",
    "hostPort",
    "containerPort",
    "overhead",
    "volumes",
    "topologySpreadConstraints",
    "allocatable",
    "taints",
    "effect",
    "unschedulable",
    "kind",
    "apiVersion",
    "items",
    "restartPolicy",
    "schedulingGates",
    "matchExpressions",
];

fn edit() -> impl Strategy<Value = Edit> {
    let path = prop::collection::vec(any::<u16>(), 0..8);
    let key = prop_oneof![
        prop::sample::select(FIELDS).prop_map(str::to_string),
        "[a-z]{1,10}",
    ];
    prop_oneof![
        path.clone().prop_map(Edit::Delete),
        (path.clone(), json_value()).prop_map(|(p, v)| Edit::Replace(p, v)),
        (path.clone(), key, json_value()).prop_map(|(p, k, v)| Edit::Insert(p, k, v)),
        (path.clone(), 1u8..40, any::<bool>()).prop_map(|(p, n, o)| Edit::Nest(p, n, o)),
        (path, 2u8..64).prop_map(|(p, n)| Edit::Repeat(p, n)),
    ]
}

/// The node `path` leads to (each step picks a child, modulo their
/// number), stopping at a leaf.
fn walk<'a>(v: &'a mut Value, path: &[u16]) -> &'a mut Value {
    let Some((step, rest)) = path.split_first() else {
        return v;
    };
    let n = match v {
        Value::Object(m) => m.len(),
        Value::Array(a) => a.len(),
        _ => 0,
    };
    if n == 0 {
        return v;
    }
    let i = usize::from(*step) % n;
    match v {
        Value::Object(m) => {
            let k = m.keys().nth(i).cloned().unwrap_or_default();
            match m.get_mut(&k) {
                Some(child) => walk(child, rest),
                None => unreachable!("a key just listed"),
            }
        }
        Value::Array(a) => walk(&mut a[i], rest),
        _ => unreachable!("only containers have children"),
    }
}

fn apply_edits(mut v: Value, edits: &[Edit]) -> Value {
    for e in edits {
        match e {
            Edit::Delete(p) => {
                let (parent, last) = p.split_at(p.len().saturating_sub(1));
                let target = walk(&mut v, parent);
                let i = last.first().copied().unwrap_or(0) as usize;
                match target {
                    Value::Object(m) if !m.is_empty() => {
                        let k = m.keys().nth(i % m.len()).cloned().unwrap_or_default();
                        m.remove(&k);
                    }
                    Value::Array(a) if !a.is_empty() => {
                        let n = a.len();
                        a.remove(i % n);
                    }
                    _ => {}
                }
            }
            Edit::Replace(p, new) => *walk(&mut v, p) = new.clone(),
            Edit::Insert(p, k, new) => {
                if let Value::Object(m) = walk(&mut v, p) {
                    m.insert(k.clone(), new.clone());
                }
            }
            Edit::Nest(p, n, object) => {
                let t = walk(&mut v, p);
                let mut inner = t.take();
                for _ in 0..*n {
                    inner = if *object {
                        json!({ "a": inner })
                    } else {
                        json!([inner])
                    };
                }
                *t = inner;
            }
            Edit::Repeat(p, n) => {
                let t = walk(&mut v, p);
                let inner = t.take();
                *t = Value::Array(vec![inner; usize::from(*n)]);
            }
        }
    }
    v
}

/// Corpus objects of `dir`, each with a few edits.
fn mutated_json(dir: &str) -> impl Strategy<Value = Value> + use<> {
    let seeds: Vec<Value> = corpus(dir)
        .into_iter()
        .map(|(name, text)| serde_json::from_str(&text).unwrap_or_else(|e| panic!("{name}: {e}")))
        .collect();
    (
        prop::sample::select(seeds),
        prop::collection::vec(edit(), 0..6),
    )
        .prop_map(|(seed, edits)| apply_edits(seed, &edits))
}

/// Byte edits: flips, insertions, deletions, truncation, repetition.
fn mutate_bytes(mut b: Vec<u8>, edits: &[(u8, u32, u8)]) -> Vec<u8> {
    for &(kind, at, byte) in edits {
        if b.is_empty() {
            b.push(byte);
            continue;
        }
        let i = at as usize % b.len();
        match kind % 5 {
            0 => b[i] ^= byte | 1,
            1 => b.insert(i, byte),
            2 => {
                b.remove(i);
            }
            3 => b.truncate(i),
            _ => {
                let end = (i + usize::from(byte) + 1).min(b.len());
                let chunk = b[i..end].to_vec();
                for _ in 0..4 {
                    b.splice(i..i, chunk.iter().copied());
                }
            }
        }
    }
    b
}

fn byte_edits() -> impl Strategy<Value = Vec<(u8, u32, u8)>> {
    prop::collection::vec((any::<u8>(), any::<u32>(), any::<u8>()), 0..8)
}

/// Text edits for YAML: insert a YAML-ish token, delete, duplicate lines.
fn mutate_text(text: &str, edits: &[(u8, u32, u8)]) -> String {
    const TOKENS: &[&str] = &[
        "\n---\n",
        ": ",
        "- ",
        "[",
        "]",
        "{",
        "}",
        "&a ",
        "*a",
        "!!binary ",
        "\t",
        "'",
        "\"",
        "kind: List\nitems:\n",
        "\n  ",
        "<<: *a\n",
        "? ",
        "|\n",
        "~",
        "1e999",
        "\u{0}",
    ];
    let mut s: Vec<char> = text.chars().collect();
    for &(kind, at, pick) in edits {
        let i = if s.is_empty() {
            0
        } else {
            at as usize % s.len()
        };
        match kind % 4 {
            0 => {
                let t = TOKENS[usize::from(pick) % TOKENS.len()];
                for (k, c) in t.chars().enumerate() {
                    s.insert(i + k, c);
                }
            }
            1 if !s.is_empty() => {
                let end = (i + usize::from(pick % 16) + 1).min(s.len());
                s.drain(i..end);
            }
            2 if !s.is_empty() => {
                let end = (i + usize::from(pick) + 1).min(s.len());
                let chunk: Vec<char> = s[i..end].to_vec();
                for _ in 0..(pick % 4 + 1) {
                    s.splice(i..i, chunk.iter().copied());
                }
            }
            _ => s.truncate(i),
        }
    }
    s.into_iter().collect()
}

fn text_corpus(dir: &str) -> impl Strategy<Value = String> + use<> {
    let seeds: Vec<String> = corpus(dir).into_iter().map(|(_, t)| t).collect();
    (prop::sample::select(seeds), byte_edits()).prop_map(|(t, e)| mutate_text(&t, &e))
}

// ---------------------------------------------------------------------------
// The checks

fn check_pod(value: Value) -> Result<(), String> {
    match pod_from_json(value) {
        Ok(mut pod) => {
            pod.metadata.uid = Some("fuzz".into());
            if let Err(e) = PodInfo::new(Arc::new(pod)) {
                clear("PodInfo", &e.to_string())?;
            }
            Ok(())
        }
        Err(e) => clear("pod", &e.to_string()),
    }
}

fn check_node(value: Value) -> Result<(), String> {
    match node_from_json(value) {
        Ok(node) => {
            if let Err(e) = NodeSpec::new(Arc::new(node)) {
                clear("NodeSpec", &e.to_string())?;
            }
            Ok(())
        }
        Err(e) => clear("node", &e.to_string()),
    }
}

/// A DryRun request's bytes, as berthd's codec takes them.
fn check_dry_run_bytes(bytes: &[u8]) -> Result<(), String> {
    if let Err(e) = berth_proto::codec::check("berth.v1.DryRunRequest", bytes) {
        return clear("codec", &e);
    }
    let req = match DryRunRequest::decode(bytes) {
        Ok(r) => r,
        Err(e) => return clear("prost", &e.to_string()),
    };
    match req.pod {
        Some(s) => check_pod(berth_proto::json::from_struct(&s)),
        None => Ok(()),
    }
}

/// An Apply request's bytes: every object into a fresh embedded cluster.
fn check_apply_bytes(bytes: &[u8]) -> Result<(), String> {
    if let Err(e) = berth_proto::codec::check("berth.v1.ApplyRequest", bytes) {
        return clear("codec", &e);
    }
    let req = match ApplyRequest::decode(bytes) {
        Ok(r) => r,
        Err(e) => return clear("prost", &e.to_string()),
    };
    let values: Vec<Value> = req
        .objects
        .iter()
        .map(berth_proto::json::from_struct)
        .collect();
    if let Err((_, e)) = EmbeddedCluster::new().apply_all(values) {
        clear("apply", &e.to_string())?;
    }
    check_yaml(&req.yaml)
}

fn check_yaml(text: &str) -> Result<(), String> {
    match parse_objects(text, "yaml") {
        Ok(objects) => {
            let values = objects.into_iter().map(|o| o.value).collect();
            match EmbeddedCluster::new().apply_all(values) {
                Ok(_) => Ok(()),
                Err((_, e)) => clear("apply", &e.to_string()),
            }
        }
        Err(e) => clear("yaml", &e.to_string()),
    }
}

fn check_config(text: &str) -> Result<(), String> {
    let registry = berth_server::plugins::in_tree_registry();
    match berth_server::config::parse(text, &|n| registry.contains(n)) {
        Ok(_) => Ok(()),
        Err(e) => clear("config", &e.to_string()),
    }
}

fn show_json(v: &Value) -> Vec<u8> {
    serde_json::to_vec(v).unwrap_or_default()
}

// ---------------------------------------------------------------------------
// The targets

#[test]
fn fuzz_pod_from_json() {
    fuzz("pod-json", mutated_json("pod"), show_json, |v| {
        check_pod(v.clone())
    });
}

#[test]
fn fuzz_node_from_json() {
    fuzz("node-json", mutated_json("node"), show_json, |v| {
        check_node(v.clone())
    });
}

#[test]
fn fuzz_pod_from_struct_bytes() {
    let requests = (mutated_json("pod"), byte_edits()).prop_map(|(pod, edits)| {
        let bytes = DryRunRequest {
            pod: berth_proto::json::to_struct(&pod),
            profile: String::new(),
            all_nodes: false,
            ..Default::default()
        }
        .encode_to_vec();
        mutate_bytes(bytes, &edits)
    });
    fuzz(
        "pod-struct",
        requests,
        |b| b.clone(),
        |b| check_dry_run_bytes(b),
    );
}

#[test]
fn fuzz_apply_from_struct_bytes() {
    let requests = (
        prop::collection::vec(prop_oneof![mutated_json("pod"), mutated_json("node")], 1..4),
        byte_edits(),
    )
        .prop_map(|(objects, edits)| {
            let bytes = ApplyRequest {
                objects: objects
                    .iter()
                    .filter_map(berth_proto::json::to_struct)
                    .collect(),
                yaml: String::new(),
            }
            .encode_to_vec();
            mutate_bytes(bytes, &edits)
        });
    fuzz(
        "apply-struct",
        requests,
        |b| b.clone(),
        |b| check_apply_bytes(b),
    );
}

#[test]
fn fuzz_yaml_apply() {
    fuzz(
        "yaml",
        text_corpus("yaml"),
        |t| t.as_bytes().to_vec(),
        |t| check_yaml(t),
    );
}

#[test]
fn fuzz_config_parser() {
    fuzz(
        "config",
        text_corpus("config"),
        |t| t.as_bytes().to_vec(),
        |t| check_config(t),
    );
}

#[test]
fn the_corpus_itself_is_accepted() {
    for (name, text) in corpus("pod") {
        let v: Value = serde_json::from_str(&text).expect("JSON");
        pod_from_json(v).unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    for (name, text) in corpus("node") {
        let v: Value = serde_json::from_str(&text).expect("JSON");
        node_from_json(v).unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    for (name, text) in corpus("config") {
        check_config(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
        let registry = berth_server::plugins::in_tree_registry();
        berth_server::config::parse(&text, &|n| registry.contains(n))
            .unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    let (name, objects) = corpus("yaml")
        .into_iter()
        .find(|(n, _)| n.ends_with("objects.yaml"))
        .expect("objects.yaml");
    let values = parse_objects(&objects, &name)
        .expect("YAML")
        .into_iter()
        .map(|o| o.value)
        .collect();
    EmbeddedCluster::new()
        .apply_all(values)
        .unwrap_or_else(|(i, e)| panic!("{name}: object {i}: {e}"));
}
