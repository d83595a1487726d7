//! What berthd asks of the API server, as the RBAC rules it needs: one
//! list, so that the manifests, the messages and the tests cannot drift
//! apart.
//!
//! * Every kind berthd watches (nodes, pods and [`super::KUBE_WATCHED`])
//!   needs `get`, `list` and `watch` on its resource: a kind added to the
//!   watched list is added here by that alone.
//! * Every write is one entry of [`WRITES`] (resource, verbs, why), kept
//!   beside the code that sends it (`writes.rs`, `events.rs`), and so is
//!   every synthetic subresource the API server authorizes a write
//!   through (`resourceclaims/binding` for a claim's allocation and
//!   reservation).
//! * Leader election needs `create` on Leases in the Lease's namespace and
//!   `get`/`update` on the one Lease it is configured with (as
//!   `system:kube-scheduler` grants them).
//!
//! `tests/tests/deploy.rs` checks that deploy/rbac.yaml grants everything
//! [`needed`] lists, that the built-in `system:kube-scheduler` and
//! `system:volume-scheduler` roles do when the Lease is `kube-scheduler`,
//! and that deploy/ grants each resource berthd uses as the built-in roles
//! do, or says why not in a comment. A refusal from the API names the rule
//! to add with [`rule_for`] (see [`super::refusals`]).

use std::collections::BTreeSet;
use std::fmt;

use super::KUBE_WATCHED;

/// Some verbs on one resource of one API group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Access {
    /// The API group (`""` for the core group).
    pub group: &'static str,
    /// The resource, with its subresource (`pods/binding`).
    pub resource: &'static str,
    /// The verbs, as RBAC names them.
    pub verbs: &'static [&'static str],
    /// What berthd does with it.
    pub why: &'static str,
}

/// The writes berthd makes (and the reads beyond its watches).
pub const WRITES: &[Access] = &[
    Access {
        group: "",
        resource: "pods/binding",
        verbs: &["create"],
        why: "binding pods to nodes",
    },
    Access {
        group: "",
        resource: "pods/status",
        verbs: &["patch"],
        why: "the PodScheduled condition, nominatedNodeName, DisruptionTarget on victims, extendedResourceClaimStatus",
    },
    Access {
        group: "",
        resource: "pods",
        verbs: &["delete"],
        why: "deleting preemption victims",
    },
    Access {
        group: "events.k8s.io",
        resource: "events",
        verbs: &["create", "patch"],
        why: "Scheduled, FailedScheduling and Preempted events and their series",
    },
    Access {
        group: "",
        resource: "persistentvolumes",
        verbs: &["update"],
        why: "VolumeBinding binds volumes to claims at PreBind",
    },
    Access {
        group: "",
        resource: "persistentvolumeclaims",
        verbs: &["update"],
        why: "VolumeBinding binds claims to volumes at PreBind",
    },
    Access {
        group: "resource.k8s.io",
        resource: "resourceclaims",
        verbs: &["create", "delete", "update"],
        why: "DynamicResources: the claim finalizer, claims for extended resources",
    },
    Access {
        group: "resource.k8s.io",
        resource: "resourceclaims/status",
        verbs: &["patch", "update"],
        why: "DynamicResources: allocation and reservedFor",
    },
    // Authorized on their own since v1.36 (DRAResourceClaimGranularStatus
    // Authorization, on by default): writing a claim's status.allocation or
    // status.reservedFor also needs the verb on this synthetic subresource
    // (a PUT for PreBind's allocation, a PATCH for Unreserve's removal);
    // without it the API server answers 422 naming the permission.
    Access {
        group: "resource.k8s.io",
        resource: "resourceclaims/binding",
        verbs: &["patch", "update"],
        why: "DynamicResources: allocation and reservedFor, authorized on their own since v1.36",
    },
];

/// What berthd needs beyond [`WRITES`] with GenericWorkload on (the
/// v1.36 built-in `system:kube-scheduler` role does not grant it).
pub const POD_GROUP_ACCESS: &[Access] = &[
    Access {
        group: "scheduling.k8s.io",
        resource: "podgroups",
        verbs: WATCH_VERBS,
        why: "PodGroups, watched with GenericWorkload on",
    },
    Access {
        group: "scheduling.k8s.io",
        resource: "podgroups/status",
        verbs: &["patch"],
        why: "the PodGroupInitiallyScheduled condition, with GenericWorkload on",
    },
];

/// The verbs a watch needs (`get` for the re-reads after a failed write).
pub const WATCH_VERBS: &[&str] = &["get", "list", "watch"];

/// The Lease berthd elects its leader with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseRef {
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
}

/// One rule berthd needs.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Need {
    /// The API group.
    pub group: &'static str,
    /// The resource (with its subresource).
    pub resource: &'static str,
    /// The verbs.
    pub verbs: BTreeSet<&'static str>,
    /// The namespace the rule must hold in (a Role's), or `None` for
    /// every namespace (a ClusterRole's).
    pub namespace: Option<String>,
    /// The one object name the rule may be limited to (`resourceNames`).
    pub name: Option<String>,
}

impl fmt::Display for Need {
    /// The rule as it is written in a Role or ClusterRole.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let quoted = |v: &mut dyn Iterator<Item = &str>| {
            v.map(|s| format!("{s:?}")).collect::<Vec<_>>().join(", ")
        };
        write!(
            f,
            "{{apiGroups: [{:?}], resources: [{:?}], ",
            self.group, self.resource
        )?;
        if let Some(n) = &self.name {
            write!(f, "resourceNames: [{n:?}], ")?;
        }
        write!(f, "verbs: [{}]}}", quoted(&mut self.verbs.iter().copied()))
    }
}

/// The resources berthd watches: (group, resource).
pub fn watched() -> Vec<(&'static str, &'static str)> {
    let mut out = vec![("", "nodes"), ("", "pods")];
    out.extend(KUBE_WATCHED.iter().map(|k| (k.group(), k.plural())));
    out
}

/// Everything berthd asks of the API server: its watches, its writes, and
/// with leader election on, the Lease.
pub fn needed(lease: Option<&LeaseRef>) -> Vec<Need> {
    needed_for(lease, false)
}

/// [`needed`], with GenericWorkload's PodGroups when `pod_groups`.
pub fn needed_for(lease: Option<&LeaseRef>, pod_groups: bool) -> Vec<Need> {
    let mut out: Vec<Need> = Vec::new();
    let mut add = |group: &'static str, resource: &'static str, verbs: &[&'static str]| match out
        .iter_mut()
        .find(|n| n.group == group && n.resource == resource && n.namespace.is_none())
    {
        Some(n) => n.verbs.extend(verbs.iter().copied()),
        None => out.push(Need {
            group,
            resource,
            verbs: verbs.iter().copied().collect(),
            namespace: None,
            name: None,
        }),
    };
    for (group, resource) in watched() {
        add(group, resource, WATCH_VERBS);
    }
    let groups: &[Access] = if pod_groups { POD_GROUP_ACCESS } else { &[] };
    for w in WRITES.iter().chain(groups) {
        add(w.group, w.resource, w.verbs);
    }
    if let Some(l) = lease {
        out.push(Need {
            group: "coordination.k8s.io",
            resource: "leases",
            verbs: ["create"].into_iter().collect(),
            namespace: Some(l.namespace.clone()),
            name: None,
        });
        out.push(Need {
            group: "coordination.k8s.io",
            resource: "leases",
            verbs: ["get", "update"].into_iter().collect(),
            namespace: Some(l.namespace.clone()),
            name: Some(l.name.clone()),
        });
    }
    out.sort();
    out
}

/// The rule berthd needs on `group`/`resource` (all the verbs it uses
/// there), for a 403's message; `None` for a resource berthd does not use.
pub fn rule_for(group: &str, resource: &str, lease: Option<&LeaseRef>) -> Option<Need> {
    let mut found: Option<Need> = None;
    for n in needed_for(lease, true) {
        if n.group != group || n.resource != resource {
            continue;
        }
        match &mut found {
            // The Lease's two rules: the named one says more.
            Some(f) if n.name.is_some() => *f = n,
            Some(_) => {}
            None => found = Some(n),
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_watch_and_write_is_a_rule_and_the_lease_is_named() {
        let lease = LeaseRef {
            namespace: "kube-system".into(),
            name: "berth".into(),
        };
        let needs = needed(Some(&lease));
        let find = |group: &str, resource: &str| {
            needs
                .iter()
                .filter(|n| n.group == group && n.resource == resource)
                .cloned()
                .collect::<Vec<_>>()
        };
        // A watched kind: get, list, watch; pods also delete.
        let slices = find("resource.k8s.io", "resourceslices");
        assert_eq!(slices.len(), 1);
        assert_eq!(
            slices[0].verbs.iter().copied().collect::<Vec<_>>(),
            ["get", "list", "watch"]
        );
        let pods = &find("", "pods")[0];
        assert!(pods.verbs.contains("delete") && pods.verbs.contains("watch"));
        assert_eq!(
            find("", "pods/binding")[0].verbs.iter().collect::<Vec<_>>(),
            [&"create"]
        );
        // Claims: watched and written.
        let claims = &find("resource.k8s.io", "resourceclaims")[0];
        assert_eq!(
            claims.verbs.iter().copied().collect::<Vec<_>>(),
            ["create", "delete", "get", "list", "update", "watch"]
        );
        // The Lease: create anywhere in its namespace, get/update by name.
        let leases = find("coordination.k8s.io", "leases");
        assert_eq!(leases.len(), 2);
        assert!(
            leases
                .iter()
                .all(|l| l.namespace.as_deref() == Some("kube-system"))
        );
        let named = leases.iter().find(|l| l.name.is_some()).unwrap();
        assert_eq!(named.name.as_deref(), Some("berth"));
        assert!(needed(None).iter().all(|n| n.resource != "leases"));
    }

    #[test]
    fn a_rule_reads_as_it_is_written_in_a_role() {
        let lease = LeaseRef {
            namespace: "kube-system".into(),
            name: "kube-scheduler".into(),
        };
        assert_eq!(
            rule_for("resource.k8s.io", "resourceslices", None)
                .unwrap()
                .to_string(),
            r#"{apiGroups: ["resource.k8s.io"], resources: ["resourceslices"], verbs: ["get", "list", "watch"]}"#
        );
        assert_eq!(
            rule_for("coordination.k8s.io", "leases", Some(&lease))
                .unwrap()
                .to_string(),
            r#"{apiGroups: ["coordination.k8s.io"], resources: ["leases"], resourceNames: ["kube-scheduler"], verbs: ["get", "update"]}"#
        );
        assert!(rule_for("", "secrets", None).is_none());
    }
}
