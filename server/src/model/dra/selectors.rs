//! Compiled CEL selectors shared by expression ([`SelectorCache`]), and
//! the selectors of a class or a request compiled through it.

use std::collections::HashMap;
use std::sync::{Arc, Weak};

use k8s_openapi::api::resource::v1 as api;

use super::cel::Selector;
use crate::model::InvalidObject;

/// Compiled selectors by expression, shared by every object spelling them
/// the same way, so that a thousand claims from one template compile their
/// selector once (and share its remembered verdicts).
#[derive(Debug, Default)]
pub struct SelectorCache {
    by_expression: HashMap<Arc<str>, Weak<Selector>>,
}

impl SelectorCache {
    /// The compiled form of `expression`.
    pub fn get(&mut self, expression: &str) -> Arc<Selector> {
        if let Some(s) = self.by_expression.get(expression).and_then(Weak::upgrade) {
            return s;
        }
        if self.by_expression.len() > 64 && self.by_expression.len().is_power_of_two() {
            self.by_expression.retain(|_, w| w.strong_count() > 0);
        }
        let s = Arc::new(Selector::compile(expression));
        self.by_expression
            .insert(Arc::from(expression), Arc::downgrade(&s));
        s
    }
}

pub(super) fn selectors(
    cache: &mut SelectorCache,
    sels: Option<&Vec<api::DeviceSelector>>,
    path: &str,
) -> Result<Vec<Arc<Selector>>, InvalidObject> {
    sels.into_iter()
        .flatten()
        .enumerate()
        .map(|(i, s)| match &s.cel {
            Some(c) => Ok(cache.get(&c.expression)),
            None => Err(InvalidObject::new(
                format!("{path}[{i}].cel"),
                "CEL expression empty (unsupported selector type?)",
            )),
        })
        .collect()
}
