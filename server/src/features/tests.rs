use super::*;

#[test]
fn the_table_is_in_feature_order_and_alphabetical() {
    for (i, g) in GATES.iter().enumerate() {
        assert_eq!(g.feature as usize, i, "{}", g.name);
        assert_eq!(format!("{:?}", g.feature), g.name);
        assert_eq!(Feature::from_name(g.name), Some(g.feature));
    }
    let names: Vec<&str> = GATES.iter().map(|g| g.name).collect();
    let mut sorted = names.clone();
    sorted.sort_unstable();
    assert_eq!(names, sorted);
}

#[test]
fn specs_are_well_formed_as_component_base_requires() {
    for g in GATES {
        let mut was_locked = false;
        for w in g.specs.windows(2) {
            let (a, b) = (w[0], w[1]);
            assert!(
                a.since < b.since || (a.since == b.since && b.min_compat.is_some()),
                "{}: versions must increase",
                g.name
            );
            assert!(b.stage >= a.stage, "{}: stability must not regress", g.name);
            was_locked |= a.locked;
            assert!(!was_locked || b.locked, "{}: must not unlock", g.name);
        }
        // A default-on gate cannot depend on a default-off one, nor a locked
        // gate on an unlocked one.
        let spec = g.spec();
        for d in g.depends_on {
            let ds = d.def().spec();
            assert!(!spec.default || ds.default, "{} on {}", g.name, d.name());
            assert!(!spec.locked || ds.locked, "{} on {}", g.name, d.name());
        }
        // A locked gate is served at its only value.
        if spec.locked {
            assert_eq!(g.serves, Serves::DefaultOnly, "{}", g.name);
        }
    }
}

#[test]
fn v1_37_defaults_stages_and_locks() {
    let cases = [
        (Feature::StorageCapacityScoring, true, Stage::Beta, false),
        (Feature::VolumeLimitScaling, true, Stage::Beta, false),
        (Feature::DRADeviceTaintRules, true, Stage::Ga, false),
        (Feature::DRADeviceTaints, true, Stage::Ga, false),
        (Feature::DRAExtendedResource, true, Stage::Ga, true),
        (Feature::DRAPrioritizedList, true, Stage::Ga, true),
        (Feature::DRAResourceClaimDeviceStatus, true, Stage::Ga, true),
        (Feature::NodeDeclaredFeatures, true, Stage::Ga, true),
        (Feature::GenericWorkload, false, Stage::Beta, false),
        (
            Feature::DRAWorkloadResourceClaims,
            false,
            Stage::Beta,
            false,
        ),
        (
            Feature::TopologyAwareWorkloadScheduling,
            false,
            Stage::Alpha,
            false,
        ),
        (Feature::CompositePodGroup, false, Stage::Alpha, false),
        (Feature::OpportunisticBatching, true, Stage::Beta, false),
        (Feature::DynamicResourceAllocation, true, Stage::Ga, true),
        // Two specs at 1.37: on only where the compatibility version is
        // 1.37, so off with the default (1.36).
        (
            Feature::DRAFractionalCapacityRange,
            false,
            Stage::Beta,
            false,
        ),
    ];
    let gates = FeatureGates::default();
    for (f, default, stage, locked) in cases {
        let spec = f.def().spec();
        assert_eq!(
            (spec.default, spec.stage, spec.locked),
            (default, stage, locked),
            "{f}"
        );
        assert_eq!(gates.enabled(f), default, "{f}");
    }
}

#[test]
fn the_previous_release_flag_names_what_v1_37_turned_on() {
    assert_eq!(
        previous_release_flag(),
        "DRADeviceTaintRules=false,StorageCapacityScoring=false,VolumeLimitScaling=false"
    );
    let g = FeatureGates::from_flags(&[previous_release_flag()]).unwrap();
    let v136 = FeatureGates::at_release(36);
    for gate in GATES {
        if gate.spec_at(36).stage != Stage::PreAlpha {
            assert_eq!(
                g.enabled(gate.feature),
                v136.enabled(gate.feature),
                "{}",
                gate.name
            );
        }
    }
}

fn err(flags: &[&str]) -> String {
    FeatureGates::from_flags(flags).unwrap_err().to_string()
}

#[test]
fn the_flag_is_parsed_as_component_base_parses_it() {
    let g = FeatureGates::from_flags(&[
        "StorageCapacityScoring=false, VolumeLimitScaling = F ,",
        "OpportunisticBatching=0",
    ])
    .unwrap();
    assert!(!g.enabled(Feature::StorageCapacityScoring));
    assert!(!g.enabled(Feature::VolumeLimitScaling));
    assert!(!g.enabled(Feature::OpportunisticBatching));
    assert!(g.enabled(Feature::DRADeviceTaintRules));
    // A later occurrence wins.
    let g = FeatureGates::from_flags(&[
        "StorageCapacityScoring=false",
        "StorageCapacityScoring=TRUE",
    ])
    .unwrap();
    assert!(g.enabled(Feature::StorageCapacityScoring));
    assert_eq!(
        g.explicitly_set().collect::<Vec<_>>(),
        [("StorageCapacityScoring", true)]
    );
    // Setting a gate to its default is fine, locked or not.
    FeatureGates::from_flags(&["DRAPrioritizedList=true,GenericWorkload=false"]).unwrap();
}

#[test]
fn errors_name_the_gate_with_component_base_words() {
    let cases: [(&[&str], &str); 7] = [
        (
            &["NoSuchGate=true"],
            "invalid argument \"NoSuchGate=true\" for \"--feature-gates\" flag: unrecognized feature gate: NoSuchGate",
        ),
        (
            &["StorageCapacityScoring"],
            "invalid argument \"StorageCapacityScoring\" for \"--feature-gates\" flag: missing bool value for StorageCapacityScoring",
        ),
        (
            &["StorageCapacityScoring=maybe"],
            "invalid argument \"StorageCapacityScoring=maybe\" for \"--feature-gates\" flag: invalid value of StorageCapacityScoring=maybe, err: strconv.ParseBool: parsing \"maybe\": invalid syntax",
        ),
        (
            &["DRAPrioritizedList=false"],
            "invalid argument \"DRAPrioritizedList=false\" for \"--feature-gates\" flag: cannot set feature gate DRAPrioritizedList to false, feature is locked to true",
        ),
        (
            &["DRAPrioritizedList=false,NodeDeclaredFeatures=false"],
            "invalid argument \"DRAPrioritizedList=false,NodeDeclaredFeatures=false\" for \"--feature-gates\" flag: [cannot set feature gate DRAPrioritizedList to false, feature is locked to true, cannot set feature gate NodeDeclaredFeatures to false, feature is locked to true]",
        ),
        (
            &["DRADeviceTaints=false"],
            "invalid argument \"DRADeviceTaints=false\" for \"--feature-gates\" flag: DRADeviceTaintRules is enabled, but depends on features that are disabled: [DRADeviceTaints]",
        ),
        (
            &["TaintTolerationComparisonOperators=true"],
            "feature gate TaintTolerationComparisonOperators=true is not implemented by berth (it follows kube-scheduler v1.37 with TaintTolerationComparisonOperators=false): Gt/Lt toleration operators; not implemented in berth",
        ),
    ];
    for (flags, want) in cases {
        assert_eq!(err(flags), want, "{flags:?}");
    }
}

#[test]
fn a_refused_flag_changes_nothing() {
    let mut g = FeatureGates::default();
    g.set("StorageCapacityScoring=false").unwrap();
    assert!(g.set("VolumeLimitScaling=false,Nope=true").is_err());
    assert!(g.enabled(Feature::VolumeLimitScaling));
    assert!(!g.enabled(Feature::StorageCapacityScoring));
}

#[test]
fn all_beta_sets_the_beta_gates_not_named() {
    let g = FeatureGates::from_flags(&["AllBeta=false,VolumeLimitScaling=true"]).unwrap_err();
    // AllBeta=false turns off beta gates berth implements only on.
    assert!(g.to_string().contains("is not implemented by berth"), "{g}");
    let mut g = FeatureGates::default();
    g.set("AllBeta=false,VolumeLimitScaling=true").unwrap();
    assert!(!g.enabled(Feature::StorageCapacityScoring));
    assert!(!g.enabled(Feature::OpportunisticBatching));
    assert!(g.enabled(Feature::VolumeLimitScaling));
    // GA gates are not beta.
    assert!(g.enabled(Feature::DRADeviceTaintRules));
    let all = g.all();
    assert!(all.contains(&("AllBeta", Stage::Beta, false)));
    assert!(all.contains(&("AllAlpha", Stage::Alpha, false)));
}

#[test]
fn all_lists_every_available_gate_with_its_stage() {
    let all = FeatureGates::default().all();
    assert_eq!(all.len(), GATES.len() + 2);
    assert!(all.contains(&("StorageCapacityScoring", Stage::Beta, true)));
    assert!(all.contains(&("DRADeviceTaintRules", Stage::Ga, true)));
    assert!(all.contains(&("CompositePodGroup", Stage::Alpha, false)));
    assert!(all.windows(2).all(|w| w[0].0 < w[1].0));
    assert_eq!(Stage::Ga.label(), "");
    // At v1.36, gates born in v1.37 are not available.
    let v136 = FeatureGates::at_release(36).all();
    assert!(!v136.iter().any(|(n, _, _)| *n == "CompositePodGroup"));
    assert!(v136.contains(&("StorageCapacityScoring", Stage::Alpha, false)));
}

#[test]
fn features_copy_the_gates() {
    let f = FeatureGates::from_flags(&[previous_release_flag()])
        .unwrap()
        .features();
    assert!(!f.enable_storage_capacity_scoring);
    assert!(!f.enable_volume_limit_scaling);
    assert!(!f.enable_dra_device_taint_rules);
    assert!(f.enable_dra_device_taints);
    let d = Features::default();
    assert!(d.enable_storage_capacity_scoring && d.enable_volume_limit_scaling);
    assert!(!d.enable_generic_workload);
}

#[test]
fn the_docs_list_every_gate_and_the_v1_36_flag() {
    let page = include_str!("../../../docs/feature-gates.md");
    assert!(
        page.contains(&format!("--feature-gates={}", previous_release_flag())),
        "docs/feature-gates.md must show the flag for v1.36's behaviour"
    );
    let mut missing = Vec::new();
    for g in GATES {
        let s = g.spec();
        let old = g.spec_at(RELEASE - 1);
        // The whole row, what the gate changes included: the table's
        // `effect` is the one source of the page's last column.
        let row = format!(
            "| `{}` | `{}` | {} | {} | {} | {} | {} |",
            g.name,
            s.default,
            s.stage.human(),
            if s.locked { "yes" } else { "no" },
            if old.stage == Stage::PreAlpha {
                "—".to_string()
            } else {
                old.default.to_string()
            },
            match g.serves {
                Serves::Both => "both values".to_string(),
                Serves::DefaultOnly => format!("`{}` only", s.default),
            },
            g.effect
        );
        if !page.lines().any(|l| l == row) {
            missing.push(row);
        }
    }
    assert!(
        missing.is_empty(),
        "docs/feature-gates.md lacks the rows\n{}",
        missing.join("\n")
    );
}

#[test]
fn berth_follows_the_servers_release_berths_newest_for_a_newer_one() {
    let f = follow(36, "v1.36.2");
    assert_eq!(f.release, 36);
    assert_eq!(f.reason, "the API server's own release (v1.36.2)");
    assert_eq!(follow(37, "v1.37.0").release, 37);
    let newer = follow(38, "v1.38.1");
    assert_eq!(newer.release, RELEASE);
    assert_eq!(
        newer.reason,
        "the API server (v1.38.1) is newer than the releases berth knows (v1.36 and v1.37): following berth's newest, v1.37"
    );
    let older = follow(35, "v1.35.4");
    assert_eq!(older.release, OLDEST);
    assert!(
        older.reason.contains("outside the supported skew"),
        "{}",
        older.reason
    );
}

/// As component-base with an emulation version of 1.36: v1.36's
/// defaults, locks and stages, and a gate v1.36 did not have cannot be set.
#[test]
fn the_flag_is_read_at_the_release_followed() {
    let g = FeatureGates::from_flags_at(36, &[] as &[&str]).unwrap();
    assert_eq!(g.release(), 36);
    assert!(!g.enabled(Feature::DRADeviceTaintRules));
    assert!(!g.enabled(Feature::StorageCapacityScoring));
    assert_eq!(g.stage(Feature::GenericWorkload), Stage::Alpha);
    assert_eq!(g, FeatureGates::at_release(36));
    // Overridden gate by gate.
    let g = FeatureGates::from_flags_at(36, &["DRADeviceTaintRules=true"]).unwrap();
    assert!(g.enabled(Feature::DRADeviceTaintRules));
    assert!(g.is_explicit(Feature::DRADeviceTaintRules));
    assert!(!g.is_explicit(Feature::GenericWorkload));
    // DRAExtendedResource is locked only from v1.37.
    FeatureGates::from_flags_at(36, &["DRAExtendedResource=true"]).unwrap();
    assert_eq!(
        FeatureGates::from_flags_at(36, &["CompositePodGroup=false"])
            .unwrap_err()
            .to_string(),
        "invalid argument \"CompositePodGroup=false\" for \"--feature-gates\" flag: cannot set feature gate CompositePodGroup to false, feature is PreAlpha at emulated version 1.36, min compatibility version 1.35"
    );
    assert_eq!(
        FeatureGates::from_flags_at(36, &["TaintTolerationComparisonOperators=true"])
            .unwrap_err()
            .to_string(),
        "feature gate TaintTolerationComparisonOperators=true is not implemented by berth (it follows kube-scheduler v1.36 with TaintTolerationComparisonOperators=false): Gt/Lt toleration operators; not implemented in berth"
    );
    // Every gate berth implements only at its default has the same default
    // at both releases: following v1.36 never asks for what berth lacks.
    for gate in GATES.iter().filter(|g| g.serves == Serves::DefaultOnly) {
        assert_eq!(
            gate.spec_at(OLDEST).default,
            gate.spec_at(RELEASE).default,
            "{}",
            gate.name
        );
    }
}
