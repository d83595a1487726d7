//! A claim's constraints (`matchAttribute`, `distinctAttribute`) as a
//! search keeps them: the values its picked devices hold, taken back as
//! the search backtracks.

use std::sync::Arc;

use crate::model::dra::{AttrValue, Constraint, Device};

#[derive(Debug, Clone)]
pub(super) enum ConstraintState {
    Match {
        requests: Vec<Arc<str>>,
        attribute: Arc<str>,
        value: Option<AttrValue>,
        n: usize,
    },
    Distinct {
        requests: Vec<Arc<str>>,
        attribute: Arc<str>,
        values: Vec<(Arc<str>, AttrValue)>,
        n: usize,
    },
}

fn applies(requests: &[Arc<str>], request: &str, sub: Option<&str>) -> bool {
    if requests.is_empty() {
        return true;
    }
    match sub {
        None => requests.iter().any(|r| &**r == request),
        Some(sub) => requests.iter().any(|r| {
            &**r == request
                || (r.len() == request.len() + 1 + sub.len()
                    && r.starts_with(request)
                    && r[request.len()..].starts_with('/')
                    && r.ends_with(sub))
        }),
    }
}

fn same(a: &AttrValue, b: &AttrValue) -> bool {
    match (a, b) {
        (AttrValue::String(x), AttrValue::String(y)) => x == y,
        (AttrValue::Int(x), AttrValue::Int(y)) => x == y,
        (AttrValue::Bool(x), AttrValue::Bool(y)) => x == y,
        // Semver 2.0 versions are minimal, so equal versions are equal text.
        (AttrValue::Version(x), AttrValue::Version(y)) => x.text == y.text,
        _ => false,
    }
}

impl ConstraintState {
    pub(super) fn new(c: &Constraint) -> Self {
        match c {
            Constraint::MatchAttribute {
                requests,
                attribute,
            } => Self::Match {
                requests: requests.clone(),
                attribute: attribute.clone(),
                value: None,
                n: 0,
            },
            Constraint::DistinctAttribute {
                requests,
                attribute,
            } => Self::Distinct {
                requests: requests.clone(),
                attribute: attribute.clone(),
                values: Vec::new(),
                n: 0,
            },
            // Refused by Allocator::new.
            Constraint::Unknown => Self::Match {
                requests: Vec::new(),
                attribute: Arc::from(""),
                value: None,
                n: 0,
            },
        }
    }

    pub(super) fn add(&mut self, request: &str, sub: Option<&str>, device: &Device) -> bool {
        match self {
            Self::Match {
                requests,
                attribute,
                value,
                n,
            } => {
                if !applies(requests, request, sub) {
                    return true;
                }
                let Some(v) = device.lookup_attribute(attribute) else {
                    return false;
                };
                if *n == 0 {
                    *value = Some(v.clone());
                    *n = 1;
                    return true;
                }
                let ok = value.as_ref().is_some_and(|have| same(v, have));
                if ok {
                    *n += 1;
                }
                ok
            }
            Self::Distinct {
                requests,
                attribute,
                values,
                n,
            } => {
                if !applies(requests, request, sub) {
                    return true;
                }
                let Some(v) = device.lookup_attribute(attribute) else {
                    return false;
                };
                if *n > 0
                    && values
                        .iter()
                        .any(|(_, have)| same(v, have) || matches!(v, AttrValue::Unsupported))
                {
                    return false;
                }
                // Keyed by request name, as upstream keys it.
                values.retain(|(r, _)| &**r != request);
                values.push((Arc::from(request), v.clone()));
                *n += 1;
                true
            }
        }
    }

    pub(super) fn remove(&mut self, request: &str, sub: Option<&str>) {
        match self {
            Self::Match { requests, n, .. } => {
                if applies(requests, request, sub) {
                    *n = n.saturating_sub(1);
                }
            }
            Self::Distinct {
                requests,
                values,
                n,
                ..
            } => {
                if applies(requests, request, sub) {
                    values.retain(|(r, _)| &**r != request);
                    *n = n.saturating_sub(1);
                }
            }
        }
    }
}
