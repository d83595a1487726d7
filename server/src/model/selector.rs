//! Label selectors and node selectors, pre-parsed.
//!
//! * [`LabelSelector`]: `matchLabels` and `matchExpressions` (`In`, `NotIn`,
//!   `Exists`, `DoesNotExist`), all ANDed. An absent selector matches
//!   nothing, an empty one everything, as `metav1.LabelSelectorAsSelector`.
//! * [`NodeSelectorTerm`]: `matchExpressions` over node labels (also `Gt`,
//!   `Lt` on integer values) and `matchFields` over `metadata.name`, ANDed;
//!   a term with no requirement matches nothing.
//! * [`NodeSelector`]: terms ORed.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;

use super::{InvalidObject, Labels};

/// A selector operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Operator {
    /// The value is one of the values.
    In,
    /// The key is absent or its value is none of the values.
    NotIn,
    /// The key is present.
    Exists,
    /// The key is absent.
    DoesNotExist,
    /// The value, as an integer, is greater than the one value.
    Gt,
    /// The value, as an integer, is less than the one value.
    Lt,
}

/// One requirement on a key.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Requirement {
    /// The label key (or field name).
    pub key: Arc<str>,
    /// The operator.
    pub op: Operator,
    /// The values, sorted (one integer for `Gt`/`Lt`).
    pub values: Vec<Arc<str>>,
    /// The integer of `Gt`/`Lt`.
    pub bound: i64,
}

impl Requirement {
    /// Whether a value (or the key's absence, `None`) satisfies this.
    pub fn matches_value(&self, value: Option<&str>) -> bool {
        match (self.op, value) {
            (Operator::In, Some(v)) => self.values.iter().any(|x| **x == *v),
            (Operator::In, None) => false,
            (Operator::NotIn, Some(v)) => !self.values.iter().any(|x| **x == *v),
            (Operator::NotIn, None) => true,
            (Operator::Exists, v) => v.is_some(),
            (Operator::DoesNotExist, v) => v.is_none(),
            (Operator::Gt, Some(v)) => v.parse::<i64>().is_ok_and(|n| n > self.bound),
            (Operator::Lt, Some(v)) => v.parse::<i64>().is_ok_and(|n| n < self.bound),
            (Operator::Gt | Operator::Lt, None) => false,
        }
    }

    /// Whether `labels` satisfy this.
    pub fn matches(&self, labels: &Labels) -> bool {
        self.matches_value(labels.get(&self.key))
    }

    fn parse(
        key: &str,
        operator: &str,
        values: Option<&Vec<String>>,
        path: &str,
        allow_numeric: bool,
    ) -> Result<Self, InvalidObject> {
        let op = match operator {
            "In" => Operator::In,
            "NotIn" => Operator::NotIn,
            "Exists" => Operator::Exists,
            "DoesNotExist" => Operator::DoesNotExist,
            "Gt" if allow_numeric => Operator::Gt,
            "Lt" if allow_numeric => Operator::Lt,
            other => {
                let supported = if allow_numeric {
                    "\"DoesNotExist\", \"Exists\", \"Gt\", \"In\", \"Lt\", \"NotIn\""
                } else {
                    "\"DoesNotExist\", \"Exists\", \"In\", \"NotIn\""
                };
                return Err(InvalidObject::new(
                    format!("{path}.operator"),
                    format!("Unsupported value: {other:?}: supported values: {supported}"),
                ));
            }
        };
        let mut vals: Vec<Arc<str>> = values
            .into_iter()
            .flatten()
            .map(|v| Arc::from(v.as_str()))
            .collect();
        vals.sort();
        vals.dedup();
        let mut bound = 0;
        match op {
            Operator::In | Operator::NotIn if vals.is_empty() => {
                return Err(InvalidObject::new(
                    format!("{path}.values"),
                    "Required value: must be specified when `operator` is 'In' or 'NotIn'",
                ));
            }
            Operator::Exists | Operator::DoesNotExist if !vals.is_empty() => {
                return Err(InvalidObject::new(
                    format!("{path}.values"),
                    "Forbidden: may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
                ));
            }
            Operator::Gt | Operator::Lt => {
                if vals.len() != 1 {
                    return Err(InvalidObject::new(
                        format!("{path}.values"),
                        "Required value: must be specified single value when `operator` is 'Lt' or 'Gt'",
                    ));
                }
                bound = vals[0].parse().map_err(|_| {
                    InvalidObject::new(
                        format!("{path}.values[0]"),
                        format!("Invalid value: {:?}: must be an integer", &*vals[0]),
                    )
                })?;
            }
            _ => {}
        }
        Ok(Self {
            key: Arc::from(key),
            op,
            values: vals,
            bound,
        })
    }
}

/// A label selector.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LabelSelector {
    requirements: Vec<Requirement>,
    nothing: bool,
}

impl LabelSelector {
    /// Matches every object.
    pub fn everything() -> Self {
        Self {
            requirements: Vec::new(),
            nothing: false,
        }
    }

    /// Matches no object.
    pub fn nothing() -> Self {
        Self {
            requirements: Vec::new(),
            nothing: true,
        }
    }

    /// Parses a `metav1.LabelSelector`; `None` matches nothing.
    pub fn parse(sel: Option<&meta::LabelSelector>, path: &str) -> Result<Self, InvalidObject> {
        let Some(sel) = sel else {
            return Ok(Self::nothing());
        };
        let mut requirements = Vec::new();
        for (k, v) in sel.match_labels.iter().flatten() {
            requirements.push(Requirement {
                key: Arc::from(k.as_str()),
                op: Operator::In,
                values: vec![Arc::from(v.as_str())],
                bound: 0,
            });
        }
        for (i, e) in sel.match_expressions.iter().flatten().enumerate() {
            requirements.push(Requirement::parse(
                &e.key,
                &e.operator,
                e.values.as_ref(),
                &format!("{path}.matchExpressions[{i}]"),
                false,
            )?);
        }
        Ok(Self {
            requirements,
            nothing: false,
        })
    }

    /// A selector matching labels equal to every pair of `map`.
    pub fn from_map(map: &BTreeMap<String, String>) -> Self {
        Self {
            requirements: map
                .iter()
                .map(|(k, v)| Requirement {
                    key: Arc::from(k.as_str()),
                    op: Operator::In,
                    values: vec![Arc::from(v.as_str())],
                    bound: 0,
                })
                .collect(),
            nothing: false,
        }
    }

    /// Adds a requirement (e.g. from `matchLabelKeys`).
    pub fn add(&mut self, r: Requirement) {
        self.requirements.push(r);
    }

    /// Whether `labels` match.
    pub fn matches(&self, labels: &Labels) -> bool {
        !self.nothing && self.requirements.iter().all(|r| r.matches(labels))
    }

    /// Whether this matches nothing.
    pub fn is_nothing(&self) -> bool {
        self.nothing
    }

    /// Whether this matches everything.
    pub fn is_everything(&self) -> bool {
        !self.nothing && self.requirements.is_empty()
    }

    /// The requirements.
    pub fn requirements(&self) -> &[Requirement] {
        &self.requirements
    }
}

/// A node selector term.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeSelectorTerm {
    /// Requirements on node labels.
    pub expressions: Vec<Requirement>,
    /// Requirements on `metadata.name`.
    pub fields: Vec<Requirement>,
}

impl NodeSelectorTerm {
    /// Parses a term.
    pub fn parse(t: &core::NodeSelectorTerm, path: &str) -> Result<Self, InvalidObject> {
        let mut expressions = Vec::new();
        for (i, e) in t.match_expressions.iter().flatten().enumerate() {
            expressions.push(Requirement::parse(
                &e.key,
                &e.operator,
                e.values.as_ref(),
                &format!("{path}.matchExpressions[{i}]"),
                true,
            )?);
        }
        let mut fields = Vec::new();
        for (i, f) in t.match_fields.iter().flatten().enumerate() {
            let p = format!("{path}.matchFields[{i}]");
            if f.key != "metadata.name" {
                return Err(InvalidObject::new(
                    format!("{p}.key"),
                    format!(
                        "Unsupported value: {:?}: supported values: \"metadata.name\"",
                        f.key
                    ),
                ));
            }
            let r = Requirement::parse(&f.key, &f.operator, f.values.as_ref(), &p, false)?;
            if !matches!(r.op, Operator::In | Operator::NotIn) || r.values.len() != 1 {
                return Err(InvalidObject::new(
                    format!("{p}.values"),
                    "Required value: must be only one value when `operator` is 'In' or 'NotIn' for node field selector",
                ));
            }
            fields.push(r);
        }
        Ok(Self {
            expressions,
            fields,
        })
    }

    /// Whether the node (its labels and name) matches; a term with no
    /// requirement matches nothing.
    pub fn matches(&self, labels: &Labels, name: &str) -> bool {
        if self.expressions.is_empty() && self.fields.is_empty() {
            return false;
        }
        self.expressions.iter().all(|r| r.matches(labels))
            && self.fields.iter().all(|r| r.matches_value(Some(name)))
    }
}

/// Terms ORed: a node matches if any term does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeSelector {
    /// The terms.
    pub terms: Vec<NodeSelectorTerm>,
}

impl NodeSelector {
    /// Parses a `v1.NodeSelector`.
    pub fn parse(s: &core::NodeSelector, path: &str) -> Result<Self, InvalidObject> {
        let terms = s
            .node_selector_terms
            .iter()
            .enumerate()
            .map(|(i, t)| NodeSelectorTerm::parse(t, &format!("{path}.nodeSelectorTerms[{i}]")))
            .collect::<Result<_, _>>()?;
        Ok(Self { terms })
    }

    /// Whether any term matches the node.
    pub fn matches(&self, labels: &Labels, name: &str) -> bool {
        self.terms.iter().any(|t| t.matches(labels, name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn labels(pairs: &[(&str, &str)]) -> Labels {
        let m: BTreeMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Labels::from_map(Some(&m))
    }

    fn sel(v: serde_json::Value) -> LabelSelector {
        LabelSelector::parse(Some(&serde_json::from_value(v).unwrap()), "s").unwrap()
    }

    #[test]
    fn label_selectors() {
        let l = labels(&[("app", "web"), ("tier", "fe")]);
        let cases = [
            (json!({}), true),
            (json!({"matchLabels": {"app": "web"}}), true),
            (json!({"matchLabels": {"app": "db"}}), false),
            (
                json!({"matchExpressions": [{"key": "app", "operator": "In", "values": ["db", "web"]}]}),
                true,
            ),
            (
                json!({"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["web"]}]}),
                false,
            ),
            (
                json!({"matchExpressions": [{"key": "zone", "operator": "NotIn", "values": ["a"]}]}),
                true,
            ),
            (
                json!({"matchExpressions": [{"key": "tier", "operator": "Exists"}]}),
                true,
            ),
            (
                json!({"matchExpressions": [{"key": "tier", "operator": "DoesNotExist"}]}),
                false,
            ),
            (
                json!({"matchLabels": {"app": "web"}, "matchExpressions": [{"key": "tier", "operator": "In", "values": ["be"]}]}),
                false,
            ),
        ];
        for (s, want) in cases {
            assert_eq!(sel(s.clone()).matches(&l), want, "{s}");
        }
        assert!(
            !LabelSelector::parse(None, "s").unwrap().matches(&l),
            "absent selects nothing"
        );
    }

    #[test]
    fn invalid_selectors_name_the_field() {
        let bad: meta::LabelSelector = serde_json::from_value(
            json!({"matchExpressions": [{"key": "a", "operator": "Gt", "values": ["1"]}]}),
        )
        .unwrap();
        let e = LabelSelector::parse(Some(&bad), "spec.x.labelSelector").unwrap_err();
        assert_eq!(e.path, "spec.x.labelSelector.matchExpressions[0].operator");
        let bad: meta::LabelSelector =
            serde_json::from_value(json!({"matchExpressions": [{"key": "a", "operator": "In"}]}))
                .unwrap();
        assert_eq!(
            LabelSelector::parse(Some(&bad), "s").unwrap_err().path,
            "s.matchExpressions[0].values"
        );
    }

    #[test]
    fn node_selector_terms() {
        let l = labels(&[("zone", "a"), ("cores", "16")]);
        let term = |v: serde_json::Value| {
            NodeSelectorTerm::parse(&serde_json::from_value(v).unwrap(), "t").unwrap()
        };
        assert!(
            term(
                json!({"matchExpressions": [{"key": "cores", "operator": "Gt", "values": ["8"]}]})
            )
            .matches(&l, "n1")
        );
        assert!(
            !term(
                json!({"matchExpressions": [{"key": "cores", "operator": "Lt", "values": ["8"]}]})
            )
            .matches(&l, "n1")
        );
        assert!(
            !term(
                json!({"matchExpressions": [{"key": "zone", "operator": "Gt", "values": ["1"]}]})
            )
            .matches(&l, "n1"),
            "non-integer value"
        );
        assert!(term(json!({"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]})).matches(&l, "n1"));
        assert!(!term(json!({"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]})).matches(&l, "n2"));
        assert!(
            !term(json!({})).matches(&l, "n1"),
            "empty term matches nothing"
        );
        let e = NodeSelectorTerm::parse(
            &serde_json::from_value(json!({"matchFields": [{"key": "metadata.uid", "operator": "In", "values": ["x"]}]})).unwrap(),
            "t",
        )
        .unwrap_err();
        assert_eq!(e.path, "t.matchFields[0].key");
    }
}
