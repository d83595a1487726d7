//! The API server's validation (kubernetes v1.37's
//! `pkg/apis/core/validation`, `pkg/apis/storage/validation`,
//! `pkg/apis/resource/validation`, `pkg/apis/apps/validation`,
//! `pkg/apis/policy/validation`) of the objects berth stores, for objects
//! that reach berth without passing an API server (the gRPC API,
//! `--cluster` files, the sample cluster).
//!
//! As there, every field at fault is reported, not only the first, each
//! with the API server's field path (`spec.containers[0].resources.limits[memory]`)
//! and words (`Invalid value: "-5Gi": must be greater than or equal to
//! 0`); several are listed as the API server lists them, `[a, b]`.
//!
//! One rule is relaxed on purpose: a container's `image` is not required
//! (the API server requires it): the scheduler reads it only for
//! ImageLocality, and scenario files and dry runs describe pods by what
//! they ask for.

mod node;
mod objects;
mod pod;
#[cfg(test)]
mod tests;

use std::fmt::Display;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::InvalidObject;
use super::quantity::Quantity;

pub use node::validate_node;
pub use objects::{ObjectRef, validate_object};
pub use pod::{validate_pod, validate_pod_spec};

/// The most bytes the keys and values of an object's annotations may hold
/// together (apimachinery's TotalAnnotationSizeLimitB).
pub const MAX_ANNOTATIONS_BYTES: usize = 256 * 1024;

/// The most containers a pod may have, of every kind together. Kubernetes
/// sets no number (only the object's size bounds it); berth bounds the
/// per-pod work of each scheduling cycle with this.
pub const MAX_CONTAINERS_PER_POD: usize = 1000;

const DNS1123_LABEL_MAX: usize = 63;
const DNS1123_SUBDOMAIN_MAX: usize = 253;
const QUALIFIED_NAME_MAX: usize = 63;
const LABEL_VALUE_MAX: usize = 63;
const DNS1035_LABEL_MAX: usize = 63;

/// apimachinery's IsNegativeErrorMsg.
pub const IS_NEGATIVE: &str = "must be greater than or equal to 0";
/// validation.go's isNotPositiveErrorMsg.
pub const IS_NOT_POSITIVE: &str = "must be greater than zero";
/// validation.go's isNotIntegerErrorMsg.
pub const IS_NOT_INTEGER: &str = "must be an integer";
/// validation.InclusiveRangeError(1, 65535).
pub const PORT_RANGE: &str = "must be between 1 and 65535, inclusive";

const LABEL_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";
const SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
const NAME_PART_MSG: &str = "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
const DNS1035_MSG: &str = "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')";
const LABEL_VALUE_MSG: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";

/// The errors found so far, in order, each as (path, message).
#[derive(Debug, Default)]
pub struct Errors(Vec<(String, String)>);

impl Errors {
    /// `Invalid value: "value": message` (a string value, quoted).
    pub fn invalid(&mut self, path: impl Into<String>, value: &str, message: impl Display) {
        self.0
            .push((path.into(), format!("Invalid value: {value:?}: {message}")));
    }

    /// `Invalid value: 7: message` (a number, or a value the API server
    /// prints unquoted, as a quantity).
    pub fn invalid_raw(
        &mut self,
        path: impl Into<String>,
        value: impl Display,
        message: impl Display,
    ) {
        self.0
            .push((path.into(), format!("Invalid value: {value}: {message}")));
    }

    /// `Required value`, with the detail when there is one.
    pub fn required(&mut self, path: impl Into<String>, detail: &str) {
        let message = if detail.is_empty() {
            "Required value".to_string()
        } else {
            format!("Required value: {detail}")
        };
        self.0.push((path.into(), message));
    }

    /// `Duplicate value: "value"`.
    pub fn duplicate(&mut self, path: impl Into<String>, value: &str) {
        self.0
            .push((path.into(), format!("Duplicate value: {value:?}")));
    }

    /// `Unsupported value: "value": supported values: "a", "b"`.
    pub fn not_supported(&mut self, path: impl Into<String>, value: &str, supported: &[&str]) {
        let list: Vec<String> = supported.iter().map(|v| format!("{v:?}")).collect();
        self.0.push((
            path.into(),
            format!(
                "Unsupported value: {value:?}: supported values: {}",
                list.join(", ")
            ),
        ));
    }

    /// `Forbidden: message`.
    pub fn forbidden(&mut self, path: impl Into<String>, message: impl Display) {
        self.0.push((path.into(), format!("Forbidden: {message}")));
    }

    /// `Too long: may not be more than N bytes`.
    pub fn too_long(&mut self, path: impl Into<String>, max: usize) {
        self.0.push((
            path.into(),
            format!("Too long: may not be more than {max} bytes"),
        ));
    }

    /// A message as it is (`Too many: ...`).
    pub fn other(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.0.push((path.into(), message.into()));
    }

    /// Whether none was found.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// `Ok` when none was found, else every error.
    pub fn into_result(self) -> Result<(), InvalidObject> {
        let mut all = self.0.into_iter();
        let Some((path, message)) = all.next() else {
            return Ok(());
        };
        let mut e = InvalidObject::new(path, message);
        e.also = all
            .map(|(p, m)| {
                let one = InvalidObject::new(p, m);
                (one.path, one.message)
            })
            .collect();
        Err(e)
    }
}

/// `base[key]`: a map entry's path, as the API server writes it.
pub fn key(base: &str, key: &str) -> String {
    format!("{base}[{key}]")
}

fn is_dns_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

/// Why `s` is not a DNS-1123 label, if it is not.
pub fn dns1123_label(s: &str) -> Option<String> {
    if s.len() > DNS1123_LABEL_MAX {
        return Some(format!(
            "must be no more than {DNS1123_LABEL_MAX} characters"
        ));
    }
    (!is_dns_label(s)).then(|| LABEL_MSG.to_string())
}

/// Why `s` is not a DNS-1035 label (services' names), if it is not.
pub fn dns1035_label(s: &str) -> Option<String> {
    if s.len() > DNS1035_LABEL_MAX {
        return Some(format!(
            "must be no more than {DNS1035_LABEL_MAX} characters"
        ));
    }
    let ok = is_dns_label(s) && s.as_bytes()[0].is_ascii_lowercase();
    (!ok).then(|| DNS1035_MSG.to_string())
}

/// Why `s` is not a DNS-1123 subdomain, if it is not.
pub fn dns1123_subdomain(s: &str) -> Option<String> {
    if s.len() > DNS1123_SUBDOMAIN_MAX {
        return Some(format!(
            "must be no more than {DNS1123_SUBDOMAIN_MAX} characters"
        ));
    }
    let ok = !s.is_empty()
        && s.split('.').all(|part| {
            let b = part.as_bytes();
            !b.is_empty()
                && b.iter()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
                && b[0] != b'-'
                && b[b.len() - 1] != b'-'
        });
    (!ok).then(|| SUBDOMAIN_MSG.to_string())
}

/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`, empty allowed when `empty_ok`.
fn is_name_part(s: &str, empty_ok: bool) -> bool {
    let b = s.as_bytes();
    if b.is_empty() {
        return empty_ok;
    }
    b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

/// Why `key` is not a qualified name (a label or annotation key), if not.
pub fn qualified_name(key: &str) -> Option<String> {
    let (prefix, name) = match key.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if name.contains('/') {
        return Some("a qualified name must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')".into());
    }
    if let Some(p) = prefix {
        if p.is_empty() {
            return Some("prefix part must be non-empty".into());
        }
        if let Some(m) = dns1123_subdomain(p) {
            return Some(format!("prefix part {m}"));
        }
    }
    if name.is_empty() {
        return Some("name part must be non-empty".into());
    }
    if name.len() > QUALIFIED_NAME_MAX {
        return Some(format!(
            "name part must be no more than {QUALIFIED_NAME_MAX} characters"
        ));
    }
    (!is_name_part(name, false)).then(|| NAME_PART_MSG.to_string())
}

/// Why `v` is not a label value, if it is not.
pub fn label_value(v: &str) -> Option<String> {
    if v.len() > LABEL_VALUE_MAX {
        return Some(format!("must be no more than {LABEL_VALUE_MAX} characters"));
    }
    (!is_name_part(v, true)).then(|| LABEL_VALUE_MSG.to_string())
}

/// How an object's name must look.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameRule {
    /// A DNS-1123 subdomain (pods, nodes, most kinds).
    Subdomain,
    /// A DNS-1123 label (namespaces).
    Label,
    /// A DNS-1035 label (services).
    Dns1035,
}

/// Validates `metadata` as ValidateObjectMeta does on create: the name by
/// `rule`, the namespace (a DNS-1123 label) when `namespaced`, labels,
/// and the annotations' keys and total size.
pub fn validate_meta(
    meta: &ObjectMeta,
    namespaced: bool,
    rule: NameRule,
) -> Result<(), InvalidObject> {
    let mut errs = Errors::default();
    meta_into(&mut errs, meta, namespaced, rule, "metadata");
    errs.into_result()
}

/// [`validate_meta`] into `errs`, under `path`.
pub fn meta_into(
    errs: &mut Errors,
    meta: &ObjectMeta,
    namespaced: bool,
    rule: NameRule,
    path: &str,
) {
    let name = meta.name.as_deref().unwrap_or("");
    if name.is_empty() {
        errs.required(format!("{path}.name"), "name or generateName is required");
    } else {
        let bad_name = match rule {
            NameRule::Subdomain => dns1123_subdomain(name),
            NameRule::Label => dns1123_label(name),
            NameRule::Dns1035 => dns1035_label(name),
        };
        if let Some(m) = bad_name {
            errs.invalid(format!("{path}.name"), name, m);
        }
    }
    if namespaced
        && let Some(ns) = meta.namespace.as_deref().filter(|n| !n.is_empty())
        && let Some(m) = dns1123_label(ns)
    {
        errs.invalid(format!("{path}.namespace"), ns, m);
    }
    labels_into(errs, meta.labels.as_ref(), &format!("{path}.labels"));
    annotations_into(
        errs,
        meta.annotations.as_ref(),
        &format!("{path}.annotations"),
    );
}

/// ValidateLabels: each key a qualified name, each value a label value;
/// both reported at the map's path, as the API server reports them.
pub fn labels_into(
    errs: &mut Errors,
    labels: Option<&std::collections::BTreeMap<String, String>>,
    path: &str,
) {
    for (k, v) in labels.into_iter().flatten() {
        if let Some(m) = qualified_name(k) {
            errs.invalid(path, k, m);
        }
        if let Some(m) = label_value(v) {
            errs.invalid(path, v, m);
        }
    }
}

/// ValidateAnnotations: keys are qualified names (lower-cased), and keys
/// and values together at most 256 KiB.
fn annotations_into(
    errs: &mut Errors,
    annotations: Option<&std::collections::BTreeMap<String, String>>,
    path: &str,
) {
    let mut total = 0usize;
    for (k, v) in annotations.into_iter().flatten() {
        if let Some(m) = qualified_name(&k.to_ascii_lowercase()) {
            errs.invalid(path, k, m);
        }
        total += k.len() + v.len();
    }
    if total > MAX_ANNOTATIONS_BYTES {
        errs.too_long(path, MAX_ANNOTATIONS_BYTES);
    }
}

/// A quantity as the API server compares it; `None` when it does not
/// parse (the pre-parsing refuses those, naming the field).
fn quantity(text: &str) -> Option<Quantity> {
    Quantity::parse(text).ok()
}

/// a < b, a == b, a > b, for two quantities.
fn compare(a: &Quantity, b: &Quantity) -> Option<std::cmp::Ordering> {
    match (a.nano_value(), b.nano_value()) {
        (Ok(x), Ok(y)) => Some(x.cmp(&y)),
        _ => match (a.value(), b.value()) {
            (Ok(x), Ok(y)) => Some(x.cmp(&y)),
            _ => None,
        },
    }
}

/// Whether `name` counts whole units (IsIntegerResourceName: pods and the
/// object counts of quota, and every extended resource).
fn is_integer_resource(name: &str) -> bool {
    matches!(
        name,
        "pods"
            | "services"
            | "replicationcontrollers"
            | "resourcequotas"
            | "secrets"
            | "configmaps"
            | "persistentvolumeclaims"
            | "services.nodeports"
            | "services.loadbalancers"
    ) || super::resource::is_extended_resource(name)
}

/// ValidateResourceQuantityValue: not negative, and whole for integer
/// resources.
pub fn quantity_value_into(errs: &mut Errors, name: &str, text: &str, path: &str) {
    let Some(q) = quantity(text) else {
        return;
    };
    if q.is_negative() {
        errs.invalid(path, text, IS_NEGATIVE);
    }
    if is_integer_resource(name) && q.milli_value().is_ok_and(|m| m % 1000 != 0) {
        errs.invalid_raw(path, text, IS_NOT_INTEGER);
    }
}

/// ValidatePositiveQuantityValue.
pub fn positive_quantity_into(errs: &mut Errors, text: &str, path: &str) {
    let Some(q) = quantity(text) else {
        return;
    };
    if q.is_negative() || q.nano_value().is_ok_and(|n| n == 0) {
        errs.invalid(path, text, IS_NOT_POSITIVE);
    }
}

/// An int32 field that may not be negative (ValidateNonnegativeField).
pub fn nonnegative_into(errs: &mut Errors, value: i64, path: &str) {
    if value < 0 {
        errs.invalid_raw(path, value, IS_NEGATIVE);
    }
}

/// A port number (IsValidPortNum).
pub fn port_into(errs: &mut Errors, port: i32, path: &str) {
    if !(1..=65535).contains(&port) {
        errs.invalid_raw(path, port, PORT_RANGE);
    }
}

/// A label selector (ValidateLabelSelector): operators and values.
pub fn selector_into(
    errs: &mut Errors,
    sel: &k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector,
    path: &str,
) {
    labels_into(
        errs,
        sel.match_labels.as_ref(),
        &format!("{path}.matchLabels"),
    );
    for (i, e) in sel.match_expressions.iter().flatten().enumerate() {
        let p = format!("{path}.matchExpressions[{i}]");
        match e.operator.as_str() {
            "In" | "NotIn" => {
                if e.values.as_ref().is_none_or(Vec::is_empty) {
                    errs.required(
                        format!("{p}.values"),
                        "must be specified when `operator` is 'In' or 'NotIn'",
                    );
                }
            }
            "Exists" | "DoesNotExist" => {
                if e.values.as_ref().is_some_and(|v| !v.is_empty()) {
                    errs.forbidden(
                        format!("{p}.values"),
                        "may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
                    );
                }
            }
            other => errs.invalid(
                format!("{p}.operator"),
                other,
                "not a valid selector operator",
            ),
        }
        if let Some(m) = qualified_name(&e.key) {
            errs.invalid(format!("{p}.key"), &e.key, m);
        }
    }
}
