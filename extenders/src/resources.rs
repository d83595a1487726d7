//! Kubernetes resource quantities and what pods request and nodes offer, for
//! handlers that count resources.
//!
//! Quantities follow Kubernetes' grammar: a decimal number (optionally signed,
//! with a fraction) followed by a binary suffix (`Ki` `Mi` `Gi` `Ti` `Pi`
//! `Ei`), a decimal suffix (`n` `u` `m` `k` `M` `G` `T` `P` `E`) or a
//! decimal exponent (`e3`, `E-2`). Values are rounded up, as Kubernetes'
//! `Value()` and `MilliValue()` do.

use k8s_openapi::api::core::v1::{Container, Node, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

/// A quantity that does not parse or does not fit in an `i64`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid quantity {quantity:?}: {reason}")]
pub struct QuantityError {
    /// The quantity as written.
    pub quantity: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

/// `q` in thousandths of its unit, rounded up ("500m" -> 500, "2" -> 2000).
pub fn parse_milli(q: &str) -> Result<i64, QuantityError> {
    scaled(q, 3)
}

/// `q` in its unit, rounded up ("1Ki" -> 1024, "1500m" -> 2).
pub fn parse_value(q: &str) -> Result<i64, QuantityError> {
    scaled(q, 0)
}

/// Parses `q` and returns ceil(value * 10^scale).
fn scaled(q: &str, scale: i32) -> Result<i64, QuantityError> {
    let err = |reason| QuantityError {
        quantity: q.to_string(),
        reason,
    };
    let s = q.trim();
    let (negative, s) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let num_end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, suffix) = s.split_at(num_end);
    if num.is_empty() || num == "." || num.matches('.').count() > 1 {
        return Err(err("no number"));
    }
    let (int_part, frac_part) = num.split_once('.').unwrap_or((num, ""));
    // mantissa = digits as an integer, times 10^-frac_len.
    let digits = format!("{int_part}{frac_part}");
    let digits = digits.trim_start_matches('0');
    if digits.len() > 36 {
        return Err(err("too many digits"));
    }
    let mantissa: i128 = if digits.is_empty() {
        0
    } else {
        digits.parse().map_err(|_| err("bad digits"))?
    };
    let mut exp10: i32 = -(frac_part.len() as i32);
    let mut factor: i128 = 1;
    match suffix {
        "" => {}
        "Ki" => factor = 1 << 10,
        "Mi" => factor = 1 << 20,
        "Gi" => factor = 1 << 30,
        "Ti" => factor = 1 << 40,
        "Pi" => factor = 1 << 50,
        "Ei" => factor = 1 << 60,
        "n" => exp10 -= 9,
        "u" => exp10 -= 6,
        "m" => exp10 -= 3,
        "k" => exp10 += 3,
        "M" => exp10 += 6,
        "G" => exp10 += 9,
        "T" => exp10 += 12,
        "P" => exp10 += 15,
        "E" => exp10 += 18,
        s if s.starts_with(['e', 'E']) => {
            let e: i32 = s[1..].parse().map_err(|_| err("bad exponent"))?;
            if !(-40..=40).contains(&e) {
                return Err(err("exponent out of range"));
            }
            exp10 += e;
        }
        _ => return Err(err("unknown suffix")),
    }
    exp10 += scale;
    let mut v = mantissa
        .checked_mul(factor)
        .ok_or_else(|| err("too large"))?;
    if exp10 >= 0 {
        for _ in 0..exp10 {
            v = v.checked_mul(10).ok_or_else(|| err("too large"))?;
        }
    } else {
        let mut div: i128 = 1;
        for _ in 0..(-exp10) {
            div = match div.checked_mul(10) {
                Some(d) => d,
                // Dividing by more than i128 can hold leaves 0 or 1.
                None => {
                    v = i128::from(v > 0);
                    div = 1;
                    break;
                }
            };
        }
        // Round up, away from zero for positives (Kubernetes rounds up).
        v = (v + div - 1) / div;
    }
    let v = if negative { -v } else { v };
    i64::try_from(v).map_err(|_| err("too large"))
}

/// How much of `resource` the pod requests, as Kubernetes computes a pod's
/// effective request: the sum over its containers, or the largest init
/// container if larger (restartable "sidecar" init containers add to both),
/// plus the pod overhead; pod-level `spec.resources` replaces the container
/// sum when it sets `resource`. A container that sets only a limit requests
/// that limit. `parse` turns a quantity into the unit wanted
/// ([`parse_milli`] or [`parse_value`]).
pub fn pod_request(
    pod: &Pod,
    resource: &str,
    parse: fn(&str) -> Result<i64, QuantityError>,
) -> Result<i64, QuantityError> {
    let Some(spec) = &pod.spec else {
        return Ok(0);
    };
    let overhead = match spec.overhead.as_ref().and_then(|o| o.get(resource)) {
        Some(q) => parse(&q.0)?,
        None => 0,
    };
    if let Some(q) = spec
        .resources
        .as_ref()
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get(resource))
    {
        return Ok(parse(&q.0)?.saturating_add(overhead));
    }
    let mut sum: i64 = 0;
    for c in &spec.containers {
        sum = sum.saturating_add(container_request(c, resource, parse)?);
    }
    let mut sidecars: i64 = 0;
    let mut init_max: i64 = 0;
    for c in spec.init_containers.iter().flatten() {
        let r = container_request(c, resource, parse)?;
        let peak = if c.restart_policy.as_deref() == Some("Always") {
            sidecars = sidecars.saturating_add(r);
            sidecars
        } else {
            sidecars.saturating_add(r)
        };
        init_max = init_max.max(peak);
    }
    Ok(sum
        .saturating_add(sidecars)
        .max(init_max)
        .saturating_add(overhead))
}

fn container_request(
    c: &Container,
    resource: &str,
    parse: fn(&str) -> Result<i64, QuantityError>,
) -> Result<i64, QuantityError> {
    let Some(r) = &c.resources else {
        return Ok(0);
    };
    let q: Option<&Quantity> = r
        .requests
        .as_ref()
        .and_then(|m| m.get(resource))
        .or_else(|| r.limits.as_ref().and_then(|m| m.get(resource)));
    q.map_or(Ok(0), |q| parse(&q.0))
}

/// The node's allocatable `resource` (0 when absent), parsed with `parse`.
pub fn node_allocatable(
    node: &Node,
    resource: &str,
    parse: fn(&str) -> Result<i64, QuantityError>,
) -> Result<i64, QuantityError> {
    match node
        .status
        .as_ref()
        .and_then(|s| s.allocatable.as_ref())
        .and_then(|a| a.get(resource))
    {
        Some(q) => parse(&q.0),
        None => Ok(0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities() {
        assert_eq!(parse_milli("500m"), Ok(500));
        assert_eq!(parse_milli("2"), Ok(2000));
        assert_eq!(parse_milli("1.5"), Ok(1500));
        assert_eq!(parse_milli("0.0001"), Ok(1));
        assert_eq!(parse_value("1Ki"), Ok(1024));
        assert_eq!(parse_value("16Gi"), Ok(16 << 30));
        assert_eq!(parse_value("1500m"), Ok(2));
        assert_eq!(parse_value("1k"), Ok(1000));
        assert_eq!(parse_value("1e3"), Ok(1000));
        assert_eq!(parse_value("16384"), Ok(16384));
        assert_eq!(parse_value("-2"), Ok(-2));
        assert_eq!(parse_value("0"), Ok(0));
        assert!(parse_value("").is_err());
        assert!(parse_value("abc").is_err());
        assert!(parse_value("1Qi").is_err());
        assert!(parse_value("1.2.3").is_err());
        assert!(parse_value("99999999999E").is_err());
    }

    fn pod(json: serde_json::Value) -> Pod {
        match serde_json::from_value(json) {
            Ok(p) => p,
            Err(e) => panic!("bad test pod: {e}"),
        }
    }

    #[test]
    fn pod_requests_follow_kubernetes() {
        let p = pod(serde_json::json!({
            "spec": {
                "containers": [
                    {"name": "a", "resources": {"requests": {"cpu": "250m"}}},
                    {"name": "b", "resources": {"limits": {"cpu": "1"}}},
                ],
                "initContainers": [
                    {"name": "side", "restartPolicy": "Always", "resources": {"requests": {"cpu": "100m"}}},
                    {"name": "init", "resources": {"requests": {"cpu": "2"}}},
                ],
                "overhead": {"cpu": "10m"},
            }
        }));
        // containers 1250 + sidecar 100 = 1350; init peak 100 + 2000 = 2100.
        assert_eq!(pod_request(&p, "cpu", parse_milli), Ok(2110));
        assert_eq!(pod_request(&p, "memory", parse_value), Ok(0));

        let p = pod(serde_json::json!({
            "spec": {
                "containers": [{"name": "a", "resources": {"requests": {"cpu": "250m"}}}],
                "resources": {"requests": {"cpu": "3"}},
            }
        }));
        assert_eq!(pod_request(&p, "cpu", parse_milli), Ok(3000));
    }
}
