use super::*;
use crate::framework::NodeToStatus;

#[test]
fn feasible_nodes_to_find() {
    for (pct, n, want) in [
        (0, 10, 10),
        (0, 99, 99),
        (0, 100, 100),
        (0, 150, 100),  // 49% of 150 = 73, at least 100
        (0, 1000, 420), // 50 - 8 = 42%
        (0, 5000, 500), // 10%
        (0, 6000, 300), // 50 - 48 = 2% -> 5%
        (0, 15000, 750),
        (30, 1000, 300),
        (100, 1000, 1000),
        (1, 1000, 100),
    ] {
        assert_eq!(
            num_feasible_nodes_to_find(pct, n),
            want,
            "pct {pct}, {n} nodes"
        );
    }
}

fn diagnosis(statuses: &[(&str, Status)]) -> Diagnosis {
    let mut d = Diagnosis::default();
    let mut map = NodeToStatus::default();
    for (n, s) in statuses {
        map.set(Arc::from(*n), s.clone());
    }
    d.node_to_status = map;
    d
}

#[test]
fn fit_error_is_worded_like_upstream() {
    let mut two = Status::unschedulable("Insufficient cpu");
    two.push_reason("Insufficient memory");
    let d = diagnosis(&[
        (
            "a",
            Status::unresolvable("node(s) had untolerated taint(s)"),
        ),
        ("b", Status::unresolvable("node(s) were unschedulable")),
        ("c", Status::unschedulable("Insufficient cpu")),
        ("d", Status::unschedulable("Insufficient cpu")),
        ("e", two),
    ]);
    let e = FitError {
        num_all_nodes: 5,
        diagnosis: d,
    };
    assert_eq!(
        e.to_string(),
        "0/5 nodes are available: 1 Insufficient memory, 1 node(s) had untolerated taint(s), 1 node(s) were unschedulable, 3 Insufficient cpu."
    );
}

#[test]
fn fit_error_counts_absent_nodes_and_appends_post_filter() {
    let mut d = diagnosis(&[("a", Status::unschedulable("Insufficient cpu"))]);
    d.node_to_status
        .set_absent_nodes_status(Status::unresolvable(
            "node(s) didn't satisfy plugin(s) [NodeName]",
        ));
    d.post_filter_msg = Some(
        "preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling.".into(),
    );
    let e = FitError {
        num_all_nodes: 3,
        diagnosis: d,
    };
    assert_eq!(
        e.to_string(),
        "0/3 nodes are available: 1 Insufficient cpu, 2 node(s) didn't satisfy plugin(s) [NodeName]. preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling."
    );
}

#[test]
fn fit_error_with_a_pre_filter_message_skips_the_histogram() {
    let d = Diagnosis {
        pre_filter_msg: Some("node(s) didn't satisfy plugin(s) [A B] simultaneously".into()),
        ..Default::default()
    };
    let e = FitError {
        num_all_nodes: 4,
        diagnosis: d,
    };
    assert_eq!(
        e.to_string(),
        "0/4 nodes are available: node(s) didn't satisfy plugin(s) [A B] simultaneously."
    );
    // Reasons sort as strings: "10 x" before "2 y", as upstream.
    let mut d = Diagnosis::default();
    for i in 0..10 {
        d.node_to_status
            .set(Arc::from(format!("x{i}")), Status::unschedulable("x"));
    }
    for i in 0..2 {
        d.node_to_status
            .set(Arc::from(format!("y{i}")), Status::unschedulable("y"));
    }
    let e = FitError {
        num_all_nodes: 12,
        diagnosis: d,
    };
    assert_eq!(e.to_string(), "0/12 nodes are available: 10 x, 2 y.");
}

#[test]
fn ties_are_broken_at_random_among_the_best() {
    let mut a = Algorithm::new(0, FastRng::new(7));
    let totals = [50, 90, 10, 90, 90, 89];
    let mut seen = [0usize; 6];
    for _ in 0..3000 {
        seen[a.select_host(&totals)] += 1;
    }
    assert_eq!(
        seen[0] + seen[2] + seen[5],
        0,
        "only top-scored nodes are chosen"
    );
    for i in [1, 3, 4] {
        assert!(
            (800..1200).contains(&seen[i]),
            "node {i} chosen {} times of 3000: {seen:?}",
            seen[i]
        );
    }
    assert_eq!(a.select_host(&[3]), 0);
}
