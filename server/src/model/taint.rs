//! Taints and tolerations, pre-parsed.

use std::sync::Arc;

/// What a taint does to pods that do not tolerate it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TaintEffect {
    /// New pods are not scheduled onto the node.
    NoSchedule,
    /// The scheduler tries not to place pods on the node.
    PreferNoSchedule,
    /// Pods are not scheduled and running ones are evicted.
    NoExecute,
}

impl TaintEffect {
    /// Parses the API's spelling.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "NoSchedule" => Some(Self::NoSchedule),
            "PreferNoSchedule" => Some(Self::PreferNoSchedule),
            "NoExecute" => Some(Self::NoExecute),
            _ => None,
        }
    }

    /// The API's spelling.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::NoSchedule => "NoSchedule",
            Self::PreferNoSchedule => "PreferNoSchedule",
            Self::NoExecute => "NoExecute",
        }
    }
}

/// A node taint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Taint {
    /// The taint key.
    pub key: Arc<str>,
    /// The taint value (may be empty).
    pub value: Arc<str>,
    /// The effect.
    pub effect: TaintEffect,
}

/// How a toleration compares its value with a taint's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TolerationOperator {
    /// The values must be equal (the default).
    Equal,
    /// Any value matches.
    Exists,
}

/// A pod toleration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Toleration {
    /// The key it tolerates; `None` (empty) with `Exists` tolerates every key.
    pub key: Option<Arc<str>>,
    /// The operator.
    pub operator: TolerationOperator,
    /// The value compared under `Equal`.
    pub value: Arc<str>,
    /// The effect it tolerates; `None` tolerates every effect.
    pub effect: Option<TaintEffect>,
}

impl Toleration {
    /// Whether this toleration tolerates `taint`, with the API's rules: the
    /// effect must match unless empty, the key unless empty, and the value
    /// under `Equal`.
    pub fn tolerates(&self, taint: &Taint) -> bool {
        if self.effect.is_some_and(|e| e != taint.effect) {
            return false;
        }
        if self.key.as_ref().is_some_and(|k| **k != *taint.key) {
            return false;
        }
        match self.operator {
            TolerationOperator::Exists => true,
            TolerationOperator::Equal => *self.value == *taint.value,
        }
    }
}

/// Whether any toleration in `tolerations` tolerates `taint`.
pub fn tolerates(tolerations: &[Toleration], taint: &Taint) -> bool {
    tolerations.iter().any(|t| t.tolerates(taint))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn taint(key: &str, value: &str, effect: TaintEffect) -> Taint {
        Taint {
            key: key.into(),
            value: value.into(),
            effect,
        }
    }
    fn tol(
        key: Option<&str>,
        op: TolerationOperator,
        value: &str,
        effect: Option<TaintEffect>,
    ) -> Toleration {
        Toleration {
            key: key.map(Into::into),
            operator: op,
            value: value.into(),
            effect,
        }
    }

    #[test]
    fn toleration_rules() {
        use TaintEffect::*;
        use TolerationOperator::*;
        let t = taint("dedicated", "gpu", NoSchedule);
        let cases = [
            (
                "equal, same value",
                tol(Some("dedicated"), Equal, "gpu", Some(NoSchedule)),
                true,
            ),
            (
                "equal, other value",
                tol(Some("dedicated"), Equal, "cpu", Some(NoSchedule)),
                false,
            ),
            (
                "exists on key",
                tol(Some("dedicated"), Exists, "", None),
                true,
            ),
            (
                "exists, empty key tolerates all",
                tol(None, Exists, "", None),
                true,
            ),
            (
                "other effect",
                tol(Some("dedicated"), Exists, "", Some(NoExecute)),
                false,
            ),
            ("other key", tol(Some("other"), Exists, "", None), false),
            (
                "equal with empty key matches empty-key taints only by value",
                tol(None, Equal, "gpu", None),
                true,
            ),
        ];
        for (name, toleration, want) in cases {
            assert_eq!(toleration.tolerates(&t), want, "{name}");
        }
    }
}
