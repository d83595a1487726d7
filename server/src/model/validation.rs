//! The API server's validation of what the scheduler relies on, for
//! objects that reach berth without passing an API server (the gRPC API,
//! `--cluster` files, the sample cluster): names, namespaces, labels,
//! annotation sizes, container counts, and requests against limits. Each
//! refusal names the field and is worded as the API server words it.

use k8s_openapi::api::core::v1::{Container, Pod, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::InvalidObject;
use super::quantity::Quantity;

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

const LABEL_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";
const SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
const NAME_PART_MSG: &str = "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
const LABEL_VALUE_MSG: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";

fn invalid(path: impl Into<String>, value: &str, message: impl std::fmt::Display) -> InvalidObject {
    InvalidObject::new(path, format!("Invalid value: {value:?}: {message}"))
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
    /// A DNS-1123 label (namespaces, services).
    Label,
}

/// Validates `metadata`: the name by `rule`, the namespace (a DNS-1123
/// label) when `namespaced`, labels, and the annotations' keys and total
/// size.
pub fn validate_meta(
    meta: &ObjectMeta,
    namespaced: bool,
    rule: NameRule,
) -> Result<(), InvalidObject> {
    let name = meta.name.as_deref().unwrap_or("");
    if name.is_empty() {
        return Err(InvalidObject::new(
            "metadata.name",
            "Required value: name or generateName is required",
        ));
    }
    let bad_name = match rule {
        NameRule::Subdomain => dns1123_subdomain(name),
        NameRule::Label => dns1123_label(name),
    };
    if let Some(m) = bad_name {
        return Err(invalid("metadata.name", name, m));
    }
    if namespaced
        && let Some(ns) = meta.namespace.as_deref().filter(|n| !n.is_empty())
        && let Some(m) = dns1123_label(ns)
    {
        return Err(invalid("metadata.namespace", ns, m));
    }
    for (k, v) in meta.labels.iter().flatten() {
        if let Some(m) = qualified_name(k) {
            return Err(invalid("metadata.labels", k, m));
        }
        if let Some(m) = label_value(v) {
            let mut path = "metadata.labels".to_string();
            super::decode::push_key(&mut path, k);
            return Err(invalid(path, v, m));
        }
    }
    let mut total = 0usize;
    for (k, v) in meta.annotations.iter().flatten() {
        if let Some(m) = qualified_name(&k.to_ascii_lowercase()) {
            return Err(invalid("metadata.annotations", k, m));
        }
        total += k.len() + v.len();
    }
    if total > MAX_ANNOTATIONS_BYTES {
        return Err(InvalidObject::new(
            "metadata.annotations",
            format!("Too long: may not be more than {MAX_ANNOTATIONS_BYTES} bytes"),
        ));
    }
    Ok(())
}

/// Requests must not exceed limits, resource by resource.
fn validate_resources(r: &ResourceRequirements, path: &str) -> Result<(), InvalidObject> {
    let (Some(requests), Some(limits)) = (r.requests.as_ref(), r.limits.as_ref()) else {
        return Ok(());
    };
    for (name, req) in requests {
        let Some(limit) = limits.get(name) else {
            continue;
        };
        // Unparsable quantities are refused, with their path, when the pod
        // is pre-parsed. Compared at milli scale, as the API server rounds
        // them; past that scale's range, as whole values.
        let (Ok(rq), Ok(lq)) = (Quantity::parse(&req.0), Quantity::parse(&limit.0)) else {
            continue;
        };
        let over = match (rq.milli_value(), lq.milli_value()) {
            (Ok(r), Ok(l)) => r > l,
            _ => matches!((rq.value(), lq.value()), (Ok(r), Ok(l)) if r > l),
        };
        if over {
            return Err(invalid(
                format!("{path}.requests.{name}"),
                &req.0,
                format!("must be less than or equal to {name} limit of {}", limit.0),
            ));
        }
    }
    Ok(())
}

fn containers<'a>(
    list: Option<&'a Vec<Container>>,
    field: &'a str,
) -> impl Iterator<Item = (String, &'a Container)> + 'a {
    list.into_iter()
        .flatten()
        .enumerate()
        .map(move |(i, c)| (format!("spec.{field}[{i}]"), c))
}

/// Validates a pod as the API server would on create, for what the
/// scheduler relies on: metadata, the container count, and each
/// container's and the pod's requests against their limits.
pub fn validate_pod(pod: &Pod) -> Result<(), InvalidObject> {
    validate_meta(&pod.metadata, true, NameRule::Subdomain)?;
    let Some(spec) = pod.spec.as_ref() else {
        return Err(InvalidObject::new("spec", "Required value"));
    };
    let count = spec.containers.len()
        + spec.init_containers.as_ref().map_or(0, Vec::len)
        + spec.ephemeral_containers.as_ref().map_or(0, Vec::len);
    if count > MAX_CONTAINERS_PER_POD {
        return Err(InvalidObject::new(
            "spec.containers",
            format!(
                "Too many: {count}: must have at most {MAX_CONTAINERS_PER_POD} items (containers, initContainers and ephemeralContainers together)"
            ),
        ));
    }
    let all = containers(Some(&spec.containers), "containers")
        .chain(containers(spec.init_containers.as_ref(), "initContainers"));
    for (path, c) in all {
        if let Some(r) = c.resources.as_ref() {
            validate_resources(r, &format!("{path}.resources"))?;
        }
    }
    if let Some(r) = spec.resources.as_ref() {
        validate_resources(r, "spec.resources")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(v: serde_json::Value) -> Pod {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn names_follow_dns_rules() {
        assert_eq!(dns1123_label("web-1"), None);
        assert!(dns1123_label("Web").is_some());
        assert!(dns1123_label("-a").is_some());
        assert!(
            dns1123_label(&"a".repeat(64))
                .unwrap()
                .contains("no more than 63")
        );
        assert_eq!(dns1123_subdomain("web.shop-1"), None);
        assert!(dns1123_subdomain("web..shop").is_some());
        assert!(dns1123_subdomain("web_1").is_some());
        assert_eq!(qualified_name("app.kubernetes.io/name"), None);
        assert_eq!(qualified_name("MyName"), None);
        assert!(qualified_name("a/b/c").is_some());
        assert!(
            qualified_name("Example.com/x")
                .unwrap()
                .starts_with("prefix part")
        );
        assert_eq!(label_value(""), None);
        assert!(label_value("a b").is_some());
    }

    #[test]
    fn pods_are_refused_naming_the_field() {
        let base = |meta: serde_json::Value, spec: serde_json::Value| {
            pod(json!({"metadata": meta, "spec": spec}))
        };
        let c = json!({"containers": [{"name": "c"}]});
        let cases = [
            (
                base(json!({"name": "Web_1"}), c.clone()),
                "metadata.name: Invalid value: \"Web_1\": a lowercase RFC 1123 subdomain",
            ),
            (
                base(json!({"name": "w", "namespace": "Shop"}), c.clone()),
                "metadata.namespace: Invalid value: \"Shop\": a lowercase RFC 1123 label",
            ),
            (
                base(json!({"name": "w", "labels": {"app": "a b"}}), c.clone()),
                "metadata.labels.app: Invalid value: \"a b\": a valid label",
            ),
            (
                base(
                    json!({"name": "w", "annotations": {"big": "x".repeat(MAX_ANNOTATIONS_BYTES)}}),
                    c.clone(),
                ),
                "metadata.annotations: Too long: may not be more than 262144 bytes",
            ),
            (
                base(
                    json!({"name": "w"}),
                    json!({"containers": [{"name": "c",
                    "resources": {"requests": {"cpu": "2"}, "limits": {"cpu": "1"}}}]}),
                ),
                "spec.containers[0].resources.requests.cpu: Invalid value: \"2\": must be less than or equal to cpu limit of 1",
            ),
            (
                base(
                    json!({"name": "w"}),
                    json!({"containers": [{"name": "c"}], "initContainers": [{"name": "i",
                    "resources": {"requests": {"memory": "2Gi"}, "limits": {"memory": "1Gi"}}}]}),
                ),
                "spec.initContainers[0].resources.requests.memory: Invalid value: \"2Gi\": must be less than or equal to memory limit of 1Gi",
            ),
            (
                base(
                    json!({"name": "w"}),
                    json!({"containers": (0..1001).map(|i| json!({"name": format!("c{i}")})).collect::<Vec<_>>()}),
                ),
                "spec.containers: Too many: 1001: must have at most 1000 items",
            ),
        ];
        for (p, want) in cases {
            let e = validate_pod(&p).unwrap_err().to_string();
            assert!(e.starts_with(want), "{e}\nwanted {want}");
        }
        // Exactly the limits are fine; so is 256 KiB of annotations.
        let ok = base(
            json!({"name": "w", "annotations": {"k": "x".repeat(MAX_ANNOTATIONS_BYTES - 1)}}),
            json!({"containers": [{"name": "c", "resources": {"requests": {"cpu": "1000m"}, "limits": {"cpu": "1"}}}]}),
        );
        assert_eq!(validate_pod(&ok), Ok(()));
    }
}
