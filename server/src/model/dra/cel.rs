//! CEL device selectors: the environment Kubernetes gives DeviceClass and
//! request selectors, compiled once per distinct expression, with each
//! device's verdict remembered.
//!
//! The environment is the one `resource.k8s.io/v1` documents for
//! `selectors[].cel.expression`:
//!
//! * one variable, `device`, with `driver` (string),
//!   `allowMultipleAllocations` (bool), `attributes` and `capacity` (maps by
//!   domain, then by identifier; an attribute or capacity published without
//!   a domain lives under the driver's name);
//! * looking up a domain the device does not have gives an empty map, so
//!   `device.attributes["other.example.com"].size() == 0` holds; looking up
//!   a missing identifier inside a domain is an error, as upstream;
//! * attribute values are `int`, `bool`, `string` or `semver`, capacities
//!   are `quantity`;
//! * the standard library with its macros, the strings, lists and math
//!   extensions, `cel.bind(name, init, expr)`, and Kubernetes' quantity
//!   library (`quantity()`, `isQuantity()`, `sign()`, `isInteger()`,
//!   `asInteger()`, `asApproximateFloat()`, `add()`, `sub()`,
//!   `isLessThan()`, `isGreaterThan()`, `compareTo()`) and semver library
//!   (`semver()`, `isSemver()`, `major()`, `minor()`, `patch()`,
//!   `isLessThan()`, `isGreaterThan()`, `compareTo()`).
//!
//! An expression is compiled when the object carrying it is stored, never
//! while scheduling. A selector's verdict on a device depends on nothing
//! but the device's published data, so [`Selector::matches`] remembers it
//! per device version: each distinct expression is evaluated at most once
//! per device for the life of that device's ResourceSlice.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, OnceLock};

use cel::common::ast::{ComprehensionExpr, Expr, IdedExpr, ListExpr, LiteralValue};
use cel::extractors::This;
use cel::objects::{Key, Map, Opaque};
use cel::parser::{Macro, MacroExprHelper, ParseError};
use cel::{Context, Env, ExecutionError, FunctionContext, Program, Value};
use parking_lot::RwLock;

use super::device::{AttrValue, Device};
use super::nano::CelQuantity;
use super::semver::Semver;

/// How many verdicts a selector remembers before it starts over (a bound
/// for clusters whose slices churn; a steady cluster stays far below it).
const MEMO_LIMIT: usize = 1 << 20;

/// A compiled selector expression, shared by every class and request that
/// spells it the same way.
pub struct Selector {
    expression: Arc<str>,
    program: Result<Program, String>,
    /// Domains the expression names literally (`attributes["x"]`,
    /// `capacity["x"]`): a device without them gets empty maps there.
    domains: Vec<Arc<str>>,
    pub(super) memo: RwLock<HashMap<u64, bool, DeviceKeys>>,
}

/// Device keys are distinct counters already: they index the memo as they
/// are, without hashing.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct DeviceKeys;

impl std::hash::BuildHasher for DeviceKeys {
    type Hasher = DeviceKeyHasher;
    fn build_hasher(&self) -> DeviceKeyHasher {
        DeviceKeyHasher(0)
    }
}

/// See [`DeviceKeys`].
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct DeviceKeyHasher(u64);

impl std::hash::Hasher for DeviceKeyHasher {
    fn finish(&self) -> u64 {
        // Spread the counter over the high bits hashbrown uses for tags.
        self.0.wrapping_mul(0x9e37_79b9_7f4a_7c15)
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0 << 8) | u64::from(*b);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

impl fmt::Debug for Selector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Selector")
            .field("expression", &self.expression)
            .field("compiled", &self.program.is_ok())
            .finish()
    }
}

impl Selector {
    /// Compiles `expression`. A compile error is kept, not returned: it is
    /// reported when the selector is used, as upstream reports it.
    pub fn compile(expression: &str) -> Self {
        let program = env()
            .compile(expression)
            .map_err(|e| format!("compilation failed: {e}"));
        Self {
            expression: Arc::from(expression),
            program,
            domains: literal_domains(expression),
            memo: RwLock::new(HashMap::with_hasher(DeviceKeys)),
        }
    }

    /// The expression as written.
    pub fn expression(&self) -> &str {
        &self.expression
    }

    /// The compile error, if the expression does not compile.
    pub fn compile_error(&self) -> Option<&str> {
        self.program.as_ref().err().map(String::as_str)
    }

    /// Whether `device` (published by `driver`) satisfies the expression.
    /// `Err` carries a compile or runtime error, worded as upstream words
    /// them after "CEL compile error: " / "CEL runtime error: ".
    pub fn matches(&self, device: &Device) -> Result<bool, SelectorError> {
        if let Some(&v) = self.memo.read().get(&device.key) {
            return Ok(v);
        }
        let program = self
            .program
            .as_ref()
            .map_err(|e| SelectorError::Compile(e.clone()))?;
        let verdict = evaluate(program, device, &self.domains)?;
        let mut memo = self.memo.write();
        if memo.len() >= MEMO_LIMIT {
            memo.clear();
        }
        memo.insert(device.key, verdict);
        Ok(verdict)
    }
}

/// Why a selector could not judge a device.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectorError {
    /// The expression does not compile.
    #[error("CEL compile error: {0}")]
    Compile(String),
    /// Evaluating it failed for this device (a missing attribute, a type
    /// mismatch, a result that is not a bool).
    #[error("CEL runtime error: {0}")]
    Runtime(String),
}

fn evaluate(
    program: &Program,
    device: &Device,
    domains: &[Arc<str>],
) -> Result<bool, SelectorError> {
    let value = device_value(device, domains);
    let base = base_context();
    let mut ctx = base.new_inner_scope();
    ctx.add_variable_from_value("device", value);
    match program.execute(&ctx) {
        Ok(Value::Bool(b)) => Ok(b),
        Ok(other) => Err(SelectorError::Runtime(format!(
            "CEL result of type {} could not be converted to bool",
            other.type_of()
        ))),
        Err(e) => Err(SelectorError::Runtime(go_words(&e))),
    }
}

/// A runtime error in cel-go's words where the two libraries word it
/// differently (cel-go: "no such key: model"; this one: "No such key:
/// model"), so that a message names the error as kube-scheduler does.
fn go_words(e: &cel::ExecutionError) -> String {
    match e {
        cel::ExecutionError::NoSuchKey(k) => format!("no such key: {k}"),
        other => other.to_string(),
    }
}

/// The `device` variable: built once per device version, extended with
/// empty maps for domains an expression names but the device lacks.
fn device_value(device: &Device, domains: &[Arc<str>]) -> Value {
    let base = device.cel_value.get_or_init(|| build_device_value(device));
    let Value::Map(m) = base else {
        return base.clone();
    };
    let missing = |field: &str| -> Vec<&Arc<str>> {
        match m.get(&Key::from(field)) {
            Some(Value::Map(inner)) => domains
                .iter()
                .filter(|d| inner.get(&Key::from(&***d)).is_none())
                .collect(),
            _ => Vec::new(),
        }
    };
    let missing_attrs = missing("attributes");
    let missing_caps = missing("capacity");
    if missing_attrs.is_empty() && missing_caps.is_empty() {
        return base.clone();
    }
    let mut outer: HashMap<Key, Value> = (*m.map).clone();
    for (field, missing) in [("attributes", missing_attrs), ("capacity", missing_caps)] {
        if missing.is_empty() {
            continue;
        }
        let key = Key::from(field);
        let mut inner: HashMap<Key, Value> = match outer.get(&key) {
            Some(Value::Map(i)) => (*i.map).clone(),
            _ => HashMap::new(),
        };
        for d in missing {
            inner.insert(Key::from(&**d), empty_map());
        }
        outer.insert(key, Value::Map(Map::from(inner)));
    }
    Value::Map(Map::from(outer))
}

fn empty_map() -> Value {
    Value::Map(Map::from(HashMap::<Key, Value>::new()))
}

fn build_device_value(device: &Device) -> Value {
    let mut attributes: HashMap<String, HashMap<Key, Value>> = HashMap::new();
    for a in &device.attributes {
        let v = match &a.value {
            AttrValue::Int(i) => Value::Int(*i),
            AttrValue::Bool(b) => Value::Bool(*b),
            AttrValue::String(s) => Value::String(Arc::new(s.to_string())),
            AttrValue::Version(v) => Value::Opaque(Arc::new(CelSemver(v.clone()))),
            // List values need DRAListTypeAttributes (alpha, off in v1.36):
            // a selector reading one fails as upstream's does.
            AttrValue::Unsupported => continue,
        };
        attributes
            .entry(a.domain.to_string())
            .or_default()
            .insert(Key::from(&*a.id), v);
    }
    let mut capacity: HashMap<String, HashMap<Key, Value>> = HashMap::new();
    for c in &device.capacity {
        capacity
            .entry(c.domain.to_string())
            .or_default()
            .insert(Key::from(&*c.id), Value::Opaque(Arc::new(c.value)));
    }
    let nest = |m: HashMap<String, HashMap<Key, Value>>| -> Value {
        Value::Map(Map::from(
            m.into_iter()
                .map(|(k, v)| (Key::from(k.as_str()), Value::Map(Map::from(v))))
                .collect::<HashMap<Key, Value>>(),
        ))
    };
    let mut d: HashMap<Key, Value> = HashMap::new();
    d.insert(
        Key::from("driver"),
        Value::String(Arc::new(device.driver.to_string())),
    );
    d.insert(
        Key::from("allowMultipleAllocations"),
        Value::Bool(device.allow_multiple_allocations),
    );
    d.insert(Key::from("attributes"), nest(attributes));
    d.insert(Key::from("capacity"), nest(capacity));
    Value::Map(Map::from(d))
}

/// The domains an expression names literally after `attributes[` or
/// `capacity[`.
fn literal_domains(expression: &str) -> Vec<Arc<str>> {
    let mut out: Vec<Arc<str>> = Vec::new();
    for field in ["attributes", "capacity"] {
        let mut rest = expression;
        while let Some(i) = rest.find(field) {
            rest = &rest[i + field.len()..];
            let t = rest.trim_start();
            let Some(t) = t.strip_prefix('[') else {
                continue;
            };
            let t = t.trim_start();
            let Some(quote) = t.chars().next().filter(|c| *c == '"' || *c == '\'') else {
                continue;
            };
            let body = &t[1..];
            if let Some(end) = body.find(quote) {
                let d = &body[..end];
                if !out.iter().any(|x| &**x == d) {
                    out.push(Arc::from(d));
                }
            }
        }
    }
    out
}

/// The environment: built once.
fn env() -> &'static Arc<Env> {
    static ENV: OnceLock<Arc<Env>> = OnceLock::new();
    ENV.get_or_init(|| {
        let mut env = Env::stdlib();
        for ext in [
            cel::extensions::strings as fn(&mut Env) -> Result<(), cel::DeclarationError>,
            cel::extensions::lists,
            cel::extensions::math,
        ] {
            // The extensions are the crate's own and declare distinct names.
            let _ = env.add_extension(ext);
        }
        let _ = env.add_macro(Macro::receiver("bind", 3, bind_macro));
        Arc::new(env)
    })
}

/// `cel.bind(name, init, expr)`: `expr` with `name` bound to `init`, as
/// cel-go's bindings extension expands it (a comprehension over nothing
/// whose accumulator is the binding).
fn bind_macro(
    helper: &mut MacroExprHelper<'_>,
    target: &mut Option<IdedExpr>,
    args: &mut Vec<IdedExpr>,
) -> Result<Option<IdedExpr>, ParseError> {
    let is_cel = matches!(target.as_ref().map(|t| &t.expr), Some(Expr::Ident(n)) if n == "cel");
    if !is_cel {
        return Ok(None);
    }
    let name = match args.first().map(|a| &a.expr) {
        Some(Expr::Ident(n)) => n.clone(),
        Some(_) => {
            let id = args[0].id;
            return Err(
                helper.new_error(id, "cel.bind() variable name must be a simple identifier")
            );
        }
        None => return Ok(None),
    };
    let result = args.pop().expect("three arguments");
    let init = args.pop().expect("three arguments");
    target.take();
    let bind = ComprehensionExpr {
        iter_range: helper.next_expr(Expr::List(ListExpr::new(Vec::new()))),
        iter_var: "#unused".to_owned(),
        iter_var2: None,
        accu_var: name.clone(),
        accu_init: init,
        loop_cond: helper.next_expr(Expr::Literal(LiteralValue::Boolean(false.into()))),
        loop_step: helper.next_expr(Expr::Ident(name)),
        result,
    };
    Ok(Some(helper.next_expr(Expr::Comprehension(Box::new(bind)))))
}

/// The root context with Kubernetes' functions; each evaluation runs in a
/// child scope that adds `device`.
fn base_context() -> &'static Context<'static, 'static> {
    static CTX: OnceLock<Context<'static, 'static>> = OnceLock::new();
    CTX.get_or_init(|| {
        let mut ctx = Context::with_env(env().clone());
        // The names are not in the standard library, so adding cannot fail.
        let _ = ctx.add_function("quantity", quantity_fn);
        let _ = ctx.add_function("isQuantity", is_quantity_fn);
        let _ = ctx.add_function("semver", semver_fn);
        let _ = ctx.add_function("isSemver", is_semver_fn);
        let _ = ctx.add_function("sign", sign_fn);
        let _ = ctx.add_function("isInteger", is_integer_fn);
        let _ = ctx.add_function("asInteger", as_integer_fn);
        let _ = ctx.add_function("asApproximateFloat", as_float_fn);
        let _ = ctx.add_function("add", add_fn);
        let _ = ctx.add_function("sub", sub_fn);
        let _ = ctx.add_function("compareTo", compare_to_fn);
        let _ = ctx.add_function("isLessThan", is_less_than_fn);
        let _ = ctx.add_function("isGreaterThan", is_greater_than_fn);
        let _ = ctx.add_function("major", major_fn);
        let _ = ctx.add_function("minor", minor_fn);
        let _ = ctx.add_function("patch", patch_fn);
        ctx
    })
}

/// A version inside CEL: equal when their precedence is (build metadata
/// does not count), as upstream's semver library compares them.
#[derive(Debug, Clone)]
pub struct CelSemver(pub Semver);

impl PartialEq for CelSemver {
    fn eq(&self, other: &Self) -> bool {
        self.0.cmp_precedence(&other.0).is_eq()
    }
}

impl Eq for CelSemver {}

impl Opaque for CelSemver {
    fn runtime_type_name(&self) -> &str {
        "kubernetes.Semver"
    }
}

const NANO: i128 = 1_000_000_000;

fn quantity_of(ftx: &FunctionContext, v: &Value) -> Result<CelQuantity, ExecutionError> {
    match v {
        Value::Opaque(o) => o
            .downcast_ref::<CelQuantity>()
            .copied()
            .ok_or_else(|| ftx.error("expected a quantity")),
        Value::Int(i) => Ok(CelQuantity(i128::from(*i) * NANO)),
        _ => Err(ftx.error("expected a quantity")),
    }
}

fn semver_of(ftx: &FunctionContext, v: &Value) -> Result<Semver, ExecutionError> {
    match v {
        Value::Opaque(o) => o
            .downcast_ref::<CelSemver>()
            .map(|s| s.0.clone())
            .ok_or_else(|| ftx.error("expected a semver")),
        _ => Err(ftx.error("expected a semver")),
    }
}

fn parse_quantity(s: &str) -> Option<CelQuantity> {
    crate::model::quantity::Quantity::parse(s)
        .ok()
        .and_then(|q| q.nano_value().ok())
        .map(CelQuantity)
}

fn quantity_fn(ftx: &FunctionContext, s: Arc<String>) -> Result<Value, ExecutionError> {
    parse_quantity(&s)
        .map(|q| Value::Opaque(Arc::new(q)))
        .ok_or_else(|| ftx.error("quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"))
}

fn is_quantity_fn(s: Arc<String>) -> bool {
    parse_quantity(&s).is_some()
}

fn semver_fn(ftx: &FunctionContext, s: Arc<String>) -> Result<Value, ExecutionError> {
    Semver::parse(&s)
        .map(|v| Value::Opaque(Arc::new(CelSemver(v))))
        .ok_or_else(|| ftx.error(format!("could not parse {s:?} as semver")))
}

fn is_semver_fn(s: Arc<String>) -> bool {
    Semver::parse(&s).is_some()
}

fn sign_fn(ftx: &FunctionContext, This(q): This<Value>) -> Result<i64, ExecutionError> {
    Ok(i64::from(quantity_of(ftx, &q)?.0.signum() as i8))
}

fn is_integer_fn(ftx: &FunctionContext, This(q): This<Value>) -> Result<bool, ExecutionError> {
    let q = quantity_of(ftx, &q)?;
    Ok(q.0 % NANO == 0 && i64::try_from(q.0 / NANO).is_ok())
}

fn as_integer_fn(ftx: &FunctionContext, This(q): This<Value>) -> Result<i64, ExecutionError> {
    let q = quantity_of(ftx, &q)?;
    if q.0 % NANO != 0 {
        return Err(ftx.error("cannot convert value to integer"));
    }
    i64::try_from(q.0 / NANO).map_err(|_| ftx.error("cannot convert value to integer"))
}

fn as_float_fn(ftx: &FunctionContext, This(q): This<Value>) -> Result<f64, ExecutionError> {
    Ok(quantity_of(ftx, &q)?.0 as f64 / NANO as f64)
}

fn add_fn(
    ftx: &FunctionContext,
    This(q): This<Value>,
    other: Value,
) -> Result<Value, ExecutionError> {
    let (a, b) = (quantity_of(ftx, &q)?, quantity_of(ftx, &other)?);
    let sum = a.0.checked_add(b.0).ok_or_else(|| ftx.error("overflow"))?;
    Ok(Value::Opaque(Arc::new(CelQuantity(sum))))
}

fn sub_fn(
    ftx: &FunctionContext,
    This(q): This<Value>,
    other: Value,
) -> Result<Value, ExecutionError> {
    let (a, b) = (quantity_of(ftx, &q)?, quantity_of(ftx, &other)?);
    let diff = a.0.checked_sub(b.0).ok_or_else(|| ftx.error("overflow"))?;
    Ok(Value::Opaque(Arc::new(CelQuantity(diff))))
}

fn ordering(
    ftx: &FunctionContext,
    a: &Value,
    b: &Value,
) -> Result<std::cmp::Ordering, ExecutionError> {
    match a {
        Value::Opaque(o) if o.downcast_ref::<CelSemver>().is_some() => {
            Ok(semver_of(ftx, a)?.cmp_precedence(&semver_of(ftx, b)?))
        }
        _ => Ok(quantity_of(ftx, a)?.cmp(&quantity_of(ftx, b)?)),
    }
}

fn compare_to_fn(
    ftx: &FunctionContext,
    This(a): This<Value>,
    b: Value,
) -> Result<i64, ExecutionError> {
    Ok(ordering(ftx, &a, &b)? as i64)
}

fn is_less_than_fn(
    ftx: &FunctionContext,
    This(a): This<Value>,
    b: Value,
) -> Result<bool, ExecutionError> {
    Ok(ordering(ftx, &a, &b)?.is_lt())
}

fn is_greater_than_fn(
    ftx: &FunctionContext,
    This(a): This<Value>,
    b: Value,
) -> Result<bool, ExecutionError> {
    Ok(ordering(ftx, &a, &b)?.is_gt())
}

fn major_fn(ftx: &FunctionContext, This(v): This<Value>) -> Result<i64, ExecutionError> {
    Ok(semver_of(ftx, &v)?.major as i64)
}

fn minor_fn(ftx: &FunctionContext, This(v): This<Value>) -> Result<i64, ExecutionError> {
    Ok(semver_of(ftx, &v)?.minor as i64)
}

fn patch_fn(ftx: &FunctionContext, This(v): This<Value>) -> Result<i64, ExecutionError> {
    Ok(semver_of(ftx, &v)?.patch as i64)
}
