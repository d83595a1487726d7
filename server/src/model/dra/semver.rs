//! [`Semver`]: the semantic versions device attributes carry, parsed and
//! ordered as upstream's semver library does.

use std::cmp::Ordering;
use std::sync::Arc;

/// A semantic version (semver 2.0), as device attributes carry them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Semver {
    /// Major.
    pub major: u64,
    /// Minor.
    pub minor: u64,
    /// Patch.
    pub patch: u64,
    /// Pre-release identifiers (`1.0.0-rc.1` → `["rc", "1"]`).
    pub pre: Vec<Arc<str>>,
    /// The text as published.
    pub text: Arc<str>,
}

impl Semver {
    /// Parses `MAJOR.MINOR.PATCH[-PRE][+BUILD]` strictly (no leading zeros,
    /// no `v` prefix), as upstream's semver library does.
    pub fn parse(s: &str) -> Option<Self> {
        let (core, _build) = match s.split_once('+') {
            Some((c, b)) => {
                if b.is_empty() || !b.split('.').all(ident_ok) {
                    return None;
                }
                (c, Some(b))
            }
            None => (s, None),
        };
        let (core, pre) = match core.split_once('-') {
            Some((c, p)) => {
                if p.is_empty() || !p.split('.').all(ident_ok) {
                    return None;
                }
                let pre: Vec<Arc<str>> = p.split('.').map(Arc::from).collect();
                if pre
                    .iter()
                    .any(|x| numeric(x) && x.len() > 1 && x.starts_with('0'))
                {
                    return None;
                }
                (c, pre)
            }
            None => (core, Vec::new()),
        };
        let mut parts = core.split('.');
        let mut num = || -> Option<u64> {
            let p = parts.next()?;
            if !numeric(p) || (p.len() > 1 && p.starts_with('0')) {
                return None;
            }
            p.parse().ok()
        };
        let (major, minor, patch) = (num()?, num()?, num()?);
        if parts.next().is_some() {
            return None;
        }
        Some(Self {
            major,
            minor,
            patch,
            pre,
            text: Arc::from(s),
        })
    }

    /// Precedence as semver 2.0 orders versions (build metadata ignored).
    pub fn cmp_precedence(&self, other: &Self) -> Ordering {
        (self.major, self.minor, self.patch)
            .cmp(&(other.major, other.minor, other.patch))
            .then_with(|| match (self.pre.is_empty(), other.pre.is_empty()) {
                (true, true) => Ordering::Equal,
                (true, false) => Ordering::Greater,
                (false, true) => Ordering::Less,
                (false, false) => {
                    for (a, b) in self.pre.iter().zip(&other.pre) {
                        let o = match (numeric(a), numeric(b)) {
                            (true, true) => a
                                .parse::<u64>()
                                .unwrap_or(0)
                                .cmp(&b.parse::<u64>().unwrap_or(0)),
                            (true, false) => Ordering::Less,
                            (false, true) => Ordering::Greater,
                            (false, false) => a.cmp(b),
                        };
                        if o != Ordering::Equal {
                            return o;
                        }
                    }
                    self.pre.len().cmp(&other.pre.len())
                }
            })
    }
}

fn numeric(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

fn ident_ok(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
}
