use super::*;

fn known(name: &str) -> bool {
    [
        "PrioritySort",
        "SchedulingGates",
        "NodeUnschedulable",
        "NodeName",
        "NodeResourcesFit",
        "DefaultBinder",
        "Custom",
    ]
    .contains(&name)
}

fn parse_ok(yaml: &str) -> SchedulerConfig {
    parse(yaml, &known).unwrap_or_else(|e| panic!("{e}"))
}

fn parse_err(yaml: &str) -> String {
    parse(yaml, &known).unwrap_err().to_string()
}

const HEADER: &str =
    "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n";

fn names(set: &PluginSet) -> Vec<&str> {
    set.enabled.iter().map(|p| p.name.as_str()).collect()
}

#[test]
fn defaults_follow_upstream() {
    let c = default_config(&known);
    assert_eq!(c.parallelism, 16);
    assert_eq!(c.percentage_of_nodes_to_score, 0);
    assert_eq!(c.pod_initial_backoff, Duration::from_secs(1));
    assert_eq!(c.pod_max_backoff, Duration::from_secs(10));
    assert_eq!(c.profiles.len(), 1);
    let p = &c.profiles[0];
    assert_eq!(p.scheduler_name, "default-scheduler");
    // The default multiPoint list, in upstream's order, minus what does not exist.
    assert_eq!(
        names(&p.plugins.multi_point),
        [
            "SchedulingGates",
            "PrioritySort",
            "NodeUnschedulable",
            "NodeName",
            "NodeResourcesFit",
            "DefaultBinder"
        ]
    );
    let fit = p
        .plugins
        .multi_point
        .enabled
        .iter()
        .find(|e| e.name == "NodeResourcesFit")
        .unwrap();
    assert_eq!(fit.weight, Some(1));
    assert_eq!(c.leader_election.lease_duration, Duration::from_secs(15));
}

#[test]
fn full_document() {
    let c = parse_ok(&format!(
        "{HEADER}parallelism: 8
percentageOfNodesToScore: 30
podInitialBackoffSeconds: 2
podMaxBackoffSeconds: 20
leaderElection:
  leaderElect: true
  leaseDuration: 30s
  renewDeadline: 20s
  retryPeriod: 5s
  resourceLock: leases
  resourceName: my-berth
  resourceNamespace: scheduling
clientConnection:
  kubeconfig: /etc/kubernetes/scheduler.conf
  qps: 100
  burst: 200
profiles:
- schedulerName: default-scheduler
  percentageOfNodesToScore: 50
  plugins:
    score:
      enabled:
      - name: NodeResourcesFit
        weight: 5
  pluginConfig:
  - name: NodeResourcesFit
    args:
      scoringStrategy:
        type: MostAllocated
- schedulerName: bin-packer
"
    ));
    assert_eq!(c.parallelism, 8);
    assert_eq!(c.percentage_of_nodes_to_score, 30);
    assert_eq!(c.pod_max_backoff, Duration::from_secs(20));
    assert_eq!(c.leader_election.resource_name, "my-berth");
    assert_eq!(c.leader_election.renew_deadline, Duration::from_secs(20));
    assert_eq!(
        c.client_connection.kubeconfig.as_deref(),
        Some("/etc/kubernetes/scheduler.conf")
    );
    assert_eq!(c.client_connection.qps, 100.0);
    assert_eq!(c.client_connection.burst, 200);
    assert_eq!(c.profiles.len(), 2);
    let p = &c.profiles[0];
    assert_eq!(p.percentage_of_nodes_to_score, Some(50));
    assert_eq!(
        p.plugins.get(ExtensionPoint::Score).enabled[0].weight,
        Some(5)
    );
    assert_eq!(
        p.args_for("NodeResourcesFit").unwrap().path,
        "profiles[0].pluginConfig[0].args"
    );
    assert_eq!(c.profiles[1].scheduler_name, "bin-packer");
}

#[test]
fn merging_with_defaults() {
    // Disabling a default drops it; re-enabling one replaces it in place;
    // new ones come after.
    let c = parse_ok(&format!(
        "{HEADER}profiles:
- schedulerName: s
  plugins:
    multiPoint:
      enabled:
      - name: Custom
      - name: NodeResourcesFit
        weight: 7
      disabled:
      - name: NodeName
"
    ));
    let mp = &c.profiles[0].plugins.multi_point;
    assert_eq!(
        names(mp),
        [
            "SchedulingGates",
            "PrioritySort",
            "NodeUnschedulable",
            "NodeResourcesFit",
            "DefaultBinder",
            "Custom"
        ]
    );
    assert_eq!(mp.enabled[3].weight, Some(7));
    assert_eq!(
        mp.enabled[3].path,
        "profiles[0].plugins.multiPoint.enabled[1]"
    );

    let c = parse_ok(&format!(
        "{HEADER}profiles:
- schedulerName: s
  plugins:
    multiPoint:
      enabled: [{{name: PrioritySort}}, {{name: DefaultBinder}}]
      disabled: [{{name: \"*\"}}]
"
    ));
    assert_eq!(
        names(&c.profiles[0].plugins.multi_point),
        ["PrioritySort", "DefaultBinder"]
    );
}

#[test]
fn errors_name_the_field_path() {
    let cases = [
        (
            "apiVersion: kubescheduler.config.k8s.io/v1beta3\nkind: KubeSchedulerConfiguration\n",
            "apiVersion: Unsupported value: \"kubescheduler.config.k8s.io/v1beta3\": supported values: \"kubescheduler.config.k8s.io/v1\"",
        ),
        (
            "kind: KubeSchedulerConfiguration\n",
            "apiVersion: Required value",
        ),
        (
            &format!("{HEADER}parallelism: 0\n"),
            "parallelism: Invalid value: 0: should be an integer value greater than zero",
        ),
        (
            &format!("{HEADER}percentageOfNodesToScore: 101\n"),
            "percentageOfNodesToScore: Invalid value: 101: not in valid range [0-100]",
        ),
        (
            &format!("{HEADER}podInitialBackoffSeconds: 0\n"),
            "podInitialBackoffSeconds: Invalid value: 0: must be greater than 0",
        ),
        (
            &format!("{HEADER}podInitialBackoffSeconds: 5\npodMaxBackoffSeconds: 4\n"),
            "podMaxBackoffSeconds: Invalid value: 4: must be greater than or equal to PodInitialBackoffSeconds",
        ),
        (
            &format!("{HEADER}profiles:\n- schedulerName: a\n- schedulerName: a\n"),
            "profiles[1].schedulerName: Duplicate value: \"a\"",
        ),
        (
            &format!("{HEADER}profiles:\n- schedulerName: a\n- plugins: {{}}\n"),
            "profiles[1].schedulerName: Required value",
        ),
        (
            &format!("{HEADER}profiles:\n- schedulerName: a\n  percentageOfNodesToScore: -1\n"),
            "profiles[0].percentageOfNodesToScore: Invalid value: -1: not in valid range [0-100]",
        ),
        (
            &format!(
                "{HEADER}profiles:\n- schedulerName: a\n  pluginConfig:\n  - name: NodeResourcesFit\n  - name: NodeResourcesFit\n"
            ),
            "profiles[0].pluginConfig[1]: Duplicate value: \"NodeResourcesFit\"",
        ),
        (
            &format!("{HEADER}profiles:\n- schedulerName: a\n  pluginConfig:\n  - name: Nope\n"),
            "profiles[0].pluginConfig[0].name: plugin \"Nope\" does not exist",
        ),
        (
            &format!(
                "{HEADER}profiles:\n- schedulerName: a\n  plugins:\n    filter:\n      enabled:\n      - name: X\n        wieght: 2\n"
            ),
            "profiles[0].plugins.filter.enabled[0].wieght: unknown field `wieght`, expected `name` or `weight` (line 9, column 9)",
        ),
        (
            &format!("{HEADER}percentageOfNodesToScore: lots\n"),
            "percentageOfNodesToScore: invalid type: string \"lots\", expected i32 (line 3, column 27)",
        ),
        (
            &format!("{HEADER}leaderElection:\n  leaseDuration: forever\n"),
            "leaderElection.leaseDuration: invalid duration \"forever\"",
        ),
        (
            &format!("{HEADER}leaderElection:\n  renewDeadline: 15s\n"),
            "leaderElection.leaseDuration: Invalid value: 15s: LeaseDuration must be greater than RenewDeadline",
        ),
        (
            &format!("{HEADER}leaderElection:\n  retryPeriod: 0s\n"),
            "leaderElection.retryPeriod: Invalid value: 0s: must be greater than zero",
        ),
        (
            &format!("{HEADER}leaderElection:\n  renewDeadline: 0s\n"),
            "leaderElection.renewDeadline: Invalid value: 0s: must be greater than zero",
        ),
        (
            &format!("{HEADER}leaderElection:\n  retryPeriod: 9s\n"),
            "leaderElection.renewDeadline: Invalid value: 10s: renewDeadline must be greater than retryPeriod*JitterFactor (1.2)",
        ),
        (
            &format!("{HEADER}leaderElection:\n  resourceLock: endpoints\n"),
            "leaderElection.resourceLock: Invalid value: endpoints: resourceLock value must be \"leases\"",
        ),
        (
            &format!("{HEADER}extenders:\n- urlPrefix: http://x\n  prioritizeVerb: p\n"),
            "extenders[0].weight: Invalid value: 0: must have a positive weight applied to it",
        ),
        (
            &format!(
                "{HEADER}berthExtenders:\n- name: gpu\n  endpoint: http://x:1\n  points: [filter]\n  timout: 1s\n"
            ),
            "berthExtenders[0].timout: unknown field `timout`, expected one of `name`, `endpoint`, `points`, `timeout`, `ignorable`, `maxConcurrentCalls`, `startupTimeout`, `circuitBreaker`, `managedResources`, `tls` (line 7, column 3)",
        ),
        (
            &format!(
                "{HEADER}berthExtenders:\n- name: gpu\n  endpoint: http://x:1\n  points: [filter]\n  circuitBreaker: {{failures: 3}}\n"
            ),
            "berthExtenders[0].circuitBreaker.failures: unknown field `failures`, expected `consecutiveFailures` or `coolDown` (line 7, column 20)",
        ),
        (
            &format!("{HEADER}clientConnection:\n  burst: -1\n"),
            "clientConnection.burst: Invalid value: -1: must be non-negative",
        ),
        (
            &format!("{HEADER}clientConnection:\n  contentType: application/yaml\n"),
            "clientConnection.contentType: Unsupported value: \"application/yaml\": supported values: \"application/json\", \"application/vnd.kubernetes.protobuf\"",
        ),
        (
            &format!("{HEADER}unknownTopLevel: 1\n"),
            "unknownTopLevel: unknown field `unknownTopLevel`, expected one of `apiVersion`, `kind`, `parallelism`, `leaderElection`, `clientConnection`, `enableProfiling`, `enableContentionProfiling`, `percentageOfNodesToScore`, `podInitialBackoffSeconds`, `podMaxBackoffSeconds`, `profiles`, `extenders`, `delayCacheUntilActive`, `berthExtenders` (line 3, column 1)",
        ),
    ];
    for (yaml, want) in cases {
        assert_eq!(parse_err(yaml), want, "for:\n{yaml}");
    }
}

#[test]
fn extenders_are_plugins_and_their_ignored_resources_reach_node_resources_fit() {
    let yaml = format!(
        "{HEADER}profiles:\n- schedulerName: a\n  plugins:\n    filter:\n      enabled: [{{name: gpu}}]\n  pluginConfig:\n  - name: NodeResourcesFit\n    args: {{ignoredResources: [example.com/fpga]}}\n- schedulerName: b\nberthExtenders:\n- name: gpu\n  endpoint: http://127.0.0.1:1\n  points: [filter]\n  managedResources:\n  - {{name: example.com/gpu-mem, ignoredByScheduler: true}}\n  - {{name: example.com/gpu-count}}\nextenders:\n- urlPrefix: http://127.0.0.1:2\n  filterVerb: filter\n  managedResources: [{{name: example.com/legacy, ignoredByScheduler: true}}]\n"
    );
    let cfg = parse(&yaml, &known).unwrap();
    assert_eq!(cfg.extenders[0].name, "gpu");
    assert_eq!(
        cfg.profiles[0].plugins.get(ExtensionPoint::Filter).enabled[0].name,
        "gpu"
    );
    let ignored = |p: &Profile| {
        p.args_for("NodeResourcesFit")
            .unwrap()
            .args
            .as_ref()
            .unwrap()["ignoredResources"]
            .clone()
    };
    assert_eq!(
        ignored(&cfg.profiles[0]),
        serde_json::json!([
            "example.com/fpga",
            "example.com/legacy",
            "example.com/gpu-mem"
        ])
    );
    assert_eq!(
        ignored(&cfg.profiles[1]),
        serde_json::json!(["example.com/legacy", "example.com/gpu-mem"])
    );
}

#[test]
fn http_extenders_are_pinned_in_every_profile_at_their_verbs() {
    let yaml = format!(
        "{HEADER}profiles:\n- schedulerName: a\n- schedulerName: b\nextenders:\n- urlPrefix: http://127.0.0.1:2/x\n  filterVerb: filter\n  prioritizeVerb: prioritize\n  weight: 7\n  bindVerb: bind\n- urlPrefix: http://127.0.0.1:3\n  prioritizeVerb: p\n  weight: 2\n"
    );
    let cfg = parse(&yaml, &known).unwrap();
    let x = "HTTPExtender(http://127.0.0.1:2/x)";
    let y = "HTTPExtender(http://127.0.0.1:3)";
    for p in &cfg.profiles {
        let pinned: Vec<(ExtensionPoint, &str, Placement, i64, &str)> = p
            .plugins
            .pinned
            .iter()
            .map(|pin| {
                (
                    pin.point,
                    pin.plugin.name.as_str(),
                    pin.placement,
                    pin.weight,
                    pin.plugin.path.as_str(),
                )
            })
            .collect();
        assert_eq!(
            pinned,
            [
                (
                    ExtensionPoint::Filter,
                    x,
                    Placement::Last,
                    7,
                    "extenders[0]"
                ),
                (ExtensionPoint::Score, x, Placement::Last, 7, "extenders[0]"),
                (ExtensionPoint::Bind, x, Placement::First, 7, "extenders[0]"),
                (ExtensionPoint::Score, y, Placement::Last, 2, "extenders[1]"),
            ]
        );
        // The profile's own sets are untouched.
        assert!(p.plugins.get(ExtensionPoint::Filter).enabled.is_empty());
    }
}

#[test]
fn client_connection_defaults_are_kube_schedulers_rate_limits() {
    let c = parse_ok(HEADER).client_connection;
    assert_eq!((c.qps, c.burst), (50.0, 100));
    assert_eq!(c.content_type, "application/json");
    assert!(!c.wants_protobuf());
    // Zero means the default, as upstream defaults zero values; a negative
    // qps turns the limiter off, as in client-go.
    let c = parse_ok(&format!(
        "{HEADER}clientConnection:\n  qps: 0\n  burst: 0\n"
    ))
    .client_connection;
    assert_eq!((c.qps, c.burst), (50.0, 100));
    let c = parse_ok(&format!(
        "{HEADER}clientConnection:\n  qps: -1\n  contentType: application/vnd.kubernetes.protobuf\n"
    ))
    .client_connection;
    assert_eq!(c.qps, -1.0);
    assert!(c.wants_protobuf());
}

#[test]
fn leader_election_defaults_are_upstreams_with_berths_lease_name() {
    let c = parse_ok(HEADER);
    let le = &c.leader_election;
    assert!(le.leader_elect);
    assert_eq!(
        (le.lease_duration, le.renew_deadline, le.retry_period),
        (
            Duration::from_secs(15),
            Duration::from_secs(10),
            Duration::from_secs(2)
        )
    );
    assert_eq!(le.resource_lock, "leases");
    assert_eq!(le.resource_name, "berth");
    assert_eq!(le.resource_namespace, "kube-system");
}

#[test]
fn leader_election_is_not_validated_when_off() {
    let c = parse_ok(&format!(
        "{HEADER}leaderElection:\n  leaderElect: false\n  renewDeadline: 20s\n"
    ));
    assert!(!c.leader_election.leader_elect);
}

#[test]
fn a_document_that_is_not_a_configuration_says_what_it_is() {
    let cases = [
        (
            "{{a}}",
            "not a KubeSchedulerConfiguration: a mapping key is itself a map, not a field name (line 1, column 2)",
        ),
        (
            "? [a]\n: b\n",
            "not a KubeSchedulerConfiguration: a mapping key is itself a sequence, not a field name (line 1, column 3)",
        ),
        (
            "hello",
            "not a KubeSchedulerConfiguration: expected a mapping of its fields (apiVersion, kind, profiles, ...), found string \"hello\"",
        ),
        (
            "[1, 2]",
            "not a KubeSchedulerConfiguration: expected a mapping of its fields (apiVersion, kind, profiles, ...), found sequence",
        ),
        (
            "\tfoo: 1",
            "not valid YAML: found character that cannot start any token, while scanning for the next token",
        ),
    ];
    for (text, want) in cases {
        let e = crate::config::parse(text, &|_| true).unwrap_err();
        assert!(e.to_string().starts_with(want), "{text:?}: {e}");
    }
}

#[test]
fn an_extender_enabled_at_a_point_it_does_not_list_is_refused_before_it_is_dialed() {
    let yaml = "apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: default-scheduler
  plugins:
    filter: {enabled: [{name: ex}]}
    score: {enabled: [{name: ex, weight: 1}]}
berthExtenders:
- name: ex
  endpoint: http://127.0.0.1:1
  points: [filter]
";
    let e = crate::config::parse(yaml, &|n| n == "NodeResourcesFit").unwrap_err();
    assert_eq!(
        e.to_string(),
        "profiles[0].plugins.score.enabled[0]: plugin \"ex\" does not extend ScorePlugin plugin: berthExtenders[0].points is [filter]; add score to it (and to the points the extender's Hello declares) or remove the plugin from this list"
    );
}
