//! DeviceTaintRules (`resource.k8s.io/v1`, DRADeviceTaintRules, GA and on
//! in v1.37): each adds its taint to the devices its selector picks, as
//! upstream's ResourceSlice tracker merges them into the slices the
//! allocator reads.
//!
//! v1.37's selector: no `deviceSelector` selects nothing; an empty one
//! selects every device; `driver`, `pool` and `device` each, when set,
//! must equal the slice's driver, its pool's name and the device's name.
//! A rule's taint then counts like the device's own (an untolerated
//! `NoSchedule` or `NoExecute` keeps claims off it; `None` changes
//! nothing).

use std::sync::Arc;

use k8s_openapi::api::resource::v1 as api;

use super::{DraStore, Inner};
use crate::model::dra::parse_slice;

/// Whether `rule` selects device `device` of a slice of `driver` / `pool`.
pub fn rule_selects(rule: &api::DeviceTaintRule, driver: &str, pool: &str, device: &str) -> bool {
    let Some(sel) = rule.spec.device_selector.as_ref() else {
        return false;
    };
    sel.driver.as_deref().is_none_or(|d| d == driver)
        && sel.pool.as_deref().is_none_or(|p| p == pool)
        && sel.device.as_deref().is_none_or(|d| d == device)
}

/// The slice with the taints of the rules that select its devices added
/// (the slice itself when none does).
pub fn with_rule_taints<'a>(
    slice: &'a api::ResourceSlice,
    rules: impl Iterator<Item = &'a api::DeviceTaintRule> + Clone,
) -> std::borrow::Cow<'a, api::ResourceSlice> {
    let (driver, pool) = (slice.spec.driver.as_str(), slice.spec.pool.name.as_str());
    let selects = |d: &api::Device| {
        rules
            .clone()
            .any(|r| rule_selects(r, driver, pool, &d.name))
    };
    if !slice.spec.devices.iter().flatten().any(selects) {
        return std::borrow::Cow::Borrowed(slice);
    }
    let mut out = slice.clone();
    for d in out.spec.devices.iter_mut().flatten() {
        for r in rules.clone() {
            if rule_selects(r, driver, pool, &d.name) {
                d.taints
                    .get_or_insert_with(Vec::new)
                    .push(r.spec.taint.clone());
            }
        }
    }
    std::borrow::Cow::Owned(out)
}

impl Inner {
    /// Parses the raw slice `name` (with the rules' taints) into `slices`.
    pub(super) fn parse_slice_named(&mut self, name: &Arc<str>) {
        let Some(raw) = self.raw_slices.get(name).cloned() else {
            return;
        };
        let parsed = if self.ignore_taint_rules || self.taint_rules.is_empty() {
            parse_slice(&mut self.slots, &raw)
        } else {
            let tainted = with_rule_taints(&raw, self.taint_rules.values().map(|r| &**r));
            parse_slice(&mut self.slots, &tainted)
        };
        match parsed {
            Ok(p) => {
                self.slices.insert(name.clone(), Arc::new(p));
            }
            Err(e) => {
                tracing::warn!(slice = %name, error = %e, "ignoring a ResourceSlice that cannot be used");
                self.slices.remove(name);
            }
        }
    }

    /// Parses every slice again (the rules changed).
    fn reparse_slices(&mut self) {
        let names: Vec<Arc<str>> = self.raw_slices.keys().cloned().collect();
        for n in &names {
            self.parse_slice_named(n);
        }
        self.index = None;
    }
}

impl DraStore {
    /// A DeviceTaintRule was added or updated.
    pub fn upsert_taint_rule(&self, rule: Arc<api::DeviceTaintRule>) {
        let mut s = self.inner.write();
        let name: Arc<str> = Arc::from(rule.metadata.name.as_deref().unwrap_or(""));
        s.taint_rules.insert(name, rule);
        if !s.ignore_taint_rules {
            s.reparse_slices();
        }
    }

    /// A DeviceTaintRule went away.
    pub fn remove_taint_rule(&self, name: &str) {
        let mut s = self.inner.write();
        if s.taint_rules.remove(name).is_some() && !s.ignore_taint_rules {
            s.reparse_slices();
        }
    }

    /// Whether DeviceTaintRules apply (the DRADeviceTaintRules gate; on
    /// unless turned off, once, when the scheduler is built).
    pub fn set_taint_rules_enabled(&self, on: bool) {
        let mut s = self.inner.write();
        // Ignored now (`!on`) and was not, or the other way round.
        if s.ignore_taint_rules == on {
            s.ignore_taint_rules = !on;
            s.reparse_slices();
        }
    }
}
