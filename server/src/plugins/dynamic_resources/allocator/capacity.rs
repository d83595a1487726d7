//! Consumable capacity (shared devices, `allowMultipleAllocations`) and
//! the request policies that round requests, as upstream computes them.

use std::sync::Arc;

use crate::model::dra::{Capacity, Nano, RequestPolicy};

/// What a request consumes of one capacity: the policy's default (else the
/// whole capacity) when it names no amount; else the amount rounded up to
/// the policy's range step or next valid value.
pub fn consumed(requested: Option<Nano>, cap: &Capacity) -> Nano {
    let Some(req) = requested else {
        return cap
            .policy
            .as_ref()
            .and_then(|p| p.default)
            .unwrap_or(cap.value.0);
    };
    let Some(p) = &cap.policy else { return req };
    if let Some((min, _, step)) = p.valid_range {
        if req < min {
            return min;
        }
        let Some(step) = step.filter(|s| *s > 0) else {
            return req;
        };
        // Upstream rounds on whole units (Quantity.Value()).
        let (r, m, st) = (whole(req), whole(min), whole(step));
        if st == 0 {
            return req;
        }
        let added = r - m;
        let mut n = added / st;
        if added % st != 0 {
            n += 1;
        }
        return (m + st * n) * NANO;
    }
    if !p.valid_values.is_empty() {
        return p
            .valid_values
            .iter()
            .copied()
            .find(|v| req <= *v)
            .unwrap_or(req);
    }
    req
}

const NANO: Nano = 1_000_000_000;

/// A quantity's whole value, rounded up, as `Quantity.Value()`.
fn whole(q: Nano) -> Nano {
    if q >= 0 {
        (q + NANO - 1) / NANO
    } else {
        q / NANO
    }
}

/// Whether `amount` breaks the policy.
fn violates(amount: Nano, p: &RequestPolicy) -> bool {
    if p.default == Some(amount) {
        return false;
    }
    if let Some((min, max, step)) = p.valid_range {
        if max.is_some_and(|m| amount > m) {
            return true;
        }
        if let Some(step) = step {
            let st = whole(step);
            return st != 0 && (whole(amount) - whole(min)) % st != 0;
        }
        return false;
    }
    if !p.valid_values.is_empty() {
        return !p.valid_values.contains(&amount);
    }
    false
}

/// Whether a request (capacity amounts by name) fits a device next to what
/// is consumed already (`used`) and what this allocation attempt consumes
/// (`allocating`): `Err` when it asks for a capacity the device does not
/// have, `Ok(false)` when it breaks a policy or does not fit.
pub fn fits(
    requested: &[(Arc<str>, Nano)],
    capacity: &[Capacity],
    used: &[(Arc<str>, Nano)],
    allocating: impl Fn(&str) -> Nano,
) -> Result<bool, ()> {
    if requested
        .iter()
        .any(|(n, _)| !capacity.iter().any(|c| c.name == *n))
    {
        return Err(());
    }
    for c in capacity {
        let req = requested
            .iter()
            .find(|(n, _)| *n == c.name)
            .map(|(_, q)| *q);
        let amount = consumed(req, c);
        if c.policy.as_ref().is_some_and(|p| violates(amount, p)) {
            return Ok(false);
        }
        let before = used
            .iter()
            .find(|(n, _)| *n == c.name)
            .map_or(0, |(_, q)| *q);
        if before + amount + allocating(&c.name) > c.value.0 {
            return Ok(false);
        }
    }
    Ok(true)
}

/// What a request consumes of each of a device's capacities.
pub fn consumption(requested: &[(Arc<str>, Nano)], capacity: &[Capacity]) -> Vec<(Arc<str>, Nano)> {
    capacity
        .iter()
        .map(|c| {
            let req = requested
                .iter()
                .find(|(n, _)| *n == c.name)
                .map(|(_, q)| *q);
            (c.name.clone(), consumed(req, c))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::dra::CelQuantity;

    fn cap(value: i64, policy: Option<RequestPolicy>) -> Capacity {
        Capacity {
            domain: Arc::from("d"),
            id: Arc::from("bw"),
            name: Arc::from("bw"),
            value: CelQuantity(Nano::from(value) * NANO),
            policy,
        }
    }

    fn q(v: i64) -> Nano {
        Nano::from(v) * NANO
    }

    #[test]
    fn requests_are_rounded_by_policy() {
        let range = RequestPolicy {
            default: Some(q(1)),
            valid_values: Vec::new(),
            valid_range: Some((q(2), Some(q(8)), Some(q(2)))),
        };
        let c = cap(10, Some(range.clone()));
        assert_eq!(consumed(None, &c), q(1), "the default");
        assert_eq!(consumed(Some(q(1)), &c), q(2), "raised to min");
        assert_eq!(consumed(Some(q(3)), &c), q(4), "rounded up to a step");
        assert_eq!(consumed(Some(q(4)), &c), q(4));
        let values = RequestPolicy {
            default: None,
            valid_values: vec![q(1), q(5)],
            valid_range: None,
        };
        let c = cap(10, Some(values));
        assert_eq!(consumed(Some(q(3)), &c), q(5));
        assert_eq!(
            consumed(Some(q(7)), &c),
            q(7),
            "past the last value: as asked"
        );
        assert_eq!(consumed(None, &cap(10, None)), q(10), "all of it");
    }

    #[test]
    fn fitting_counts_what_is_used_and_being_allocated() {
        let caps = [cap(10, None)];
        let ask = [(Arc::from("bw"), q(4))];
        assert_eq!(fits(&ask, &caps, &[], |_| 0), Ok(true));
        assert_eq!(
            fits(&ask, &caps, &[(Arc::from("bw"), q(4))], |_| q(2)),
            Ok(true)
        );
        assert_eq!(
            fits(&ask, &caps, &[(Arc::from("bw"), q(4))], |_| q(3)),
            Ok(false)
        );
        assert_eq!(
            fits(&[(Arc::from("other"), q(1))], &caps, &[], |_| 0),
            Err(())
        );
        let strict = [cap(
            10,
            Some(RequestPolicy {
                default: None,
                valid_values: Vec::new(),
                valid_range: Some((q(1), Some(q(3)), None)),
            }),
        )];
        assert_eq!(fits(&ask, &strict, &[], |_| 0), Ok(false), "above max");
    }
}
