//! ValidateNode (v1.37) on create: metadata, taints, and the quantities of
//! capacity and allocatable.

use std::collections::HashSet;

use k8s_openapi::api::core::v1::Node;

use super::{Errors, NameRule, label_value, meta_into, qualified_name, quantity_value_into};
use crate::model::InvalidObject;

const TAINT_EFFECTS: [&str; 3] = ["NoExecute", "NoSchedule", "PreferNoSchedule"];

/// Validates a node as the API server does on create.
pub fn validate_node(node: &Node) -> Result<(), InvalidObject> {
    let mut errs = Errors::default();
    meta_into(
        &mut errs,
        &node.metadata,
        false,
        NameRule::Subdomain,
        "metadata",
    );
    if let Some(spec) = node.spec.as_ref() {
        let mut unique = HashSet::new();
        for (i, t) in spec.taints.iter().flatten().enumerate() {
            let p = format!("spec.taints[{i}]");
            if let Some(m) = qualified_name(&t.key) {
                errs.invalid(format!("{p}.key"), &t.key, m);
            }
            let value = t.value.as_deref().unwrap_or("");
            if let Some(m) = label_value(value) {
                errs.invalid(format!("{p}.value"), value, m);
            }
            if t.effect.is_empty() {
                errs.required(format!("{p}.effect"), "");
            } else if !TAINT_EFFECTS.contains(&t.effect.as_str()) {
                errs.not_supported(format!("{p}.effect"), &t.effect, &TAINT_EFFECTS);
            }
            if !unique.insert((t.key.as_str(), t.effect.as_str())) {
                errs.other(
                    p,
                    format!(
                        "Duplicate value: core.Taint{{Key:{:?}, Value:{:?}, Effect:{:?}, TimeAdded:<nil>}}: taints must be unique by key and effect pair",
                        t.key, value, t.effect
                    ),
                );
            }
        }
        if let Some(cidr) = spec.pod_cidr.as_deref().filter(|c| !c.is_empty())
            && !is_cidr(cidr)
        {
            errs.invalid(
                "spec.podCIDR",
                cidr,
                "must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)",
            );
        }
    }
    if let Some(status) = node.status.as_ref() {
        for (field, list) in [
            ("capacity", status.capacity.as_ref()),
            ("allocatable", status.allocatable.as_ref()),
        ] {
            for (name, q) in list.into_iter().flatten() {
                quantity_value_into(&mut errs, name, &q.0, &format!("status.{field}.{name}"));
            }
        }
    }
    errs.into_result()
}

fn is_cidr(s: &str) -> bool {
    let Some((ip, bits)) = s.split_once('/') else {
        return false;
    };
    let Ok(bits) = bits.parse::<u8>() else {
        return false;
    };
    match ip.parse::<std::net::IpAddr>() {
        Ok(std::net::IpAddr::V4(_)) => bits <= 32,
        Ok(std::net::IpAddr::V6(_)) => bits <= 128,
        Err(_) => false,
    }
}
