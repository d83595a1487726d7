//! Building a profile's [`Framework`]: each plugin instantiated once with
//! its args, then placed at every extension point it is enabled for.

use super::*;

impl Framework {
    /// Instantiates a profile's plugins and arranges them by extension
    /// point. Every error names the configuration path at fault.
    pub fn new(
        profile: &Profile,
        registry: &Registry,
        handle: &Handle,
    ) -> Result<Self, ConfigError> {
        // Instantiate every plugin the profile enables, once, with its args.
        let mut instances: Vec<(String, Arc<dyn Plugin>)> = Vec::new();
        let multi = &profile.plugins.multi_point;
        let all_refs = ExtensionPoint::ALL
            .iter()
            .flat_map(|p| {
                profile
                    .plugins
                    .get(*p)
                    .enabled
                    .iter()
                    .map(move |r| (Some(*p), r))
            })
            .chain(multi.enabled.iter().map(|r| (None, r)))
            .chain(
                profile
                    .plugins
                    .pinned
                    .iter()
                    .map(|p| (Some(p.point), &p.plugin)),
            );
        for (point, r) in all_refs {
            if instances.iter().any(|(n, _)| *n == r.name) {
                continue;
            }
            let Some(factory) = registry.get(&r.name) else {
                let iface = point.map_or("Plugin", |p| p.interface());
                return Err(ConfigError::new(
                    &r.path,
                    format!("{iface} {:?} does not exist", r.name),
                ));
            };
            let (args, args_path) = match profile.args_for(&r.name) {
                Some(c) => (c.args.as_ref(), c.path.clone()),
                None => (
                    None,
                    format!("{}.pluginConfig[{}].args", profile.path, r.name),
                ),
            };
            let plugin = factory(args, &args_path, handle)?;
            instances.push((r.name.clone(), plugin));
        }
        // Args given for plugins the profile does not enable are still
        // validated, so that typos in them do not go unnoticed.
        for c in &profile.plugin_config {
            if !instances.iter().any(|(n, _)| *n == c.name)
                && let Some(factory) = registry.get(&c.name)
            {
                factory(c.args.as_ref(), &c.path, handle)?;
            }
        }
        let get = |name: &str| {
            instances
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, p)| p.clone())
        };

        // Per point: explicit plugins, then multiPoint expansion.
        let mut lists: Vec<(ExtensionPoint, PointList<'_>)> = Vec::new();
        for point in ExtensionPoint::ALL {
            let set = profile.plugins.get(point);
            let mut explicit: PointList<'_> = Vec::new();
            for r in &set.enabled {
                let p = get(&r.name).expect("instantiated above");
                if !implements(&p, point) {
                    return Err(ConfigError::new(
                        &r.path,
                        format!(
                            "plugin {:?} does not extend {} plugin",
                            r.name,
                            point.interface()
                        ),
                    ));
                }
                if explicit.iter().any(|(_, e)| e.name == r.name) {
                    return Err(ConfigError::new(
                        &r.path,
                        format!(
                            "plugin {:?} already registered as {:?}",
                            r.name,
                            point.interface()
                        ),
                    ));
                }
                explicit.push((p, r));
            }
            let mut list = Vec::new();
            if set.all_disabled() {
                list = explicit;
            } else {
                let mut overrides = Vec::new();
                let mut from_multi: PointList<'_> = Vec::new();
                for r in &multi.enabled {
                    let p = get(&r.name).expect("instantiated above");
                    if !implements(&p, point) || set.is_disabled(&r.name) {
                        continue;
                    }
                    if explicit.iter().any(|(_, e)| e.name == r.name) {
                        overrides.push(r.name.clone());
                        continue;
                    }
                    if from_multi.iter().any(|(_, e)| e.name == r.name) {
                        return Err(ConfigError::new(
                            &r.path,
                            format!(
                                "plugin {:?} already registered as {:?}",
                                r.name,
                                point.interface()
                            ),
                        ));
                    }
                    from_multi.push((p, r));
                }
                let (first, rest): (Vec<_>, Vec<_>) = explicit
                    .into_iter()
                    .partition(|(_, e)| overrides.contains(&e.name));
                list.extend(first);
                list.extend(from_multi);
                list.extend(rest);
            }
            // Plugins the scheduler pins around the profile's own.
            let mut first = 0;
            for pin in profile.plugins.pinned.iter().filter(|p| p.point == point) {
                let r = &pin.plugin;
                if list.iter().any(|(_, e)| e.name == r.name) {
                    continue;
                }
                let p = get(&r.name).expect("instantiated above");
                if !implements(&p, point) {
                    return Err(ConfigError::new(
                        &r.path,
                        format!(
                            "plugin {:?} does not extend {} plugin",
                            r.name,
                            point.interface()
                        ),
                    ));
                }
                match pin.placement {
                    Placement::First => {
                        list.insert(first, (p, r));
                        first += 1;
                    }
                    Placement::Last => list.push((p, r)),
                }
            }
            lists.push((point, list));
        }
        let list = |point: ExtensionPoint| -> &PointList<'_> {
            &lists
                .iter()
                .find(|(p, _)| *p == point)
                .expect("every point")
                .1
        };
        for (point, l) in &lists {
            if l.len() > PluginMask::CAPACITY {
                return Err(ConfigError::new(
                    format!("{}.plugins.{}", profile.path, point.field()),
                    format!(
                        "at most {} plugins per extension point",
                        PluginMask::CAPACITY
                    ),
                ));
            }
        }

        // Score weights: the Score point's own entry wins over multiPoint's;
        // 0 means 1; the sum of weight × 100 must fit in an i64.
        let mut score = Vec::new();
        let mut total: i64 = 0;
        for (p, r) in list(ExtensionPoint::Score) {
            if let Some(pin) = profile
                .plugins
                .pinned
                .iter()
                .find(|pin| pin.point == ExtensionPoint::Score && pin.plugin.name == r.name)
            {
                let weight = pin.weight.max(1);
                total = check_weight(total, weight).map_err(|m| ConfigError::new(&r.path, m))?;
                score.push(ScoreEntry {
                    plugin: p.clone().as_score().expect("checked"),
                    weight,
                    checked: false,
                });
                continue;
            }
            let configured = profile
                .plugins
                .get(ExtensionPoint::Score)
                .enabled
                .iter()
                .chain(multi.enabled.iter())
                .find(|e| e.name == r.name)
                .map(|e| (e.weight, e.path.clone()))
                .unwrap_or((None, r.path.clone()));
            let weight = match configured.0 {
                Some(w) if w < 0 => {
                    return Err(ConfigError::invalid(
                        format!("{}.weight", configured.1),
                        w,
                        "must be greater than or equal to 0",
                    ));
                }
                Some(0) | None => 1,
                Some(w) => i64::from(w),
            };
            total = check_weight(total, weight).map_err(|m| ConfigError::new(&configured.1, m))?;
            score.push(ScoreEntry {
                plugin: p.clone().as_score().expect("checked"),
                weight,
                checked: true,
            });
        }

        let queue_sort = list(ExtensionPoint::QueueSort);
        if queue_sort.len() != 1 {
            return Err(ConfigError::new(
                format!("{}.plugins.queueSort", profile.path),
                format!(
                    "only one queue sort plugin required for profile with scheduler name {:?}, but got {}",
                    profile.scheduler_name,
                    queue_sort.len()
                ),
            ));
        }
        if list(ExtensionPoint::Bind).is_empty() {
            return Err(ConfigError::new(
                format!("{}.plugins.bind", profile.path),
                format!(
                    "at least one bind plugin is needed for profile with scheduler name {:?}",
                    profile.scheduler_name
                ),
            ));
        }

        let typed = |point: ExtensionPoint| list(point).iter().map(|(p, _)| p.clone());
        let filter: Vec<Arc<dyn FilterPlugin>> = typed(ExtensionPoint::Filter)
            .map(|p| p.as_filter().expect("checked"))
            .collect();
        let filter_names: Vec<&'static str> = filter.iter().map(|p| p.name()).collect();
        let mut batch_filter = PluginMask::default();
        for (i, p) in filter.iter().enumerate() {
            if p.as_batch().is_some() {
                batch_filter.insert(i);
            }
        }
        let score_names: Vec<&'static str> = score.iter().map(|s| s.plugin.name()).collect();
        let pre_score_names: Vec<&'static str> = list(ExtensionPoint::PreScore)
            .iter()
            .map(|(p, _)| p.name())
            .collect();
        let fused_score = filter
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let j = score_names.iter().position(|n| *n == p.name())?;
                let batch_scores = score[j].plugin.as_batch().is_some();
                (batch_filter.contains(i) && batch_scores && !pre_score_names.contains(&p.name()))
                    .then_some(j)
            })
            .collect();

        // Event registrations of the plugins that can reject pods.
        let mut events: Vec<PluginEvents> = Vec::new();
        for point in REJECTING_POINTS {
            for (p, _) in list(point) {
                if events.iter().any(|e| e.plugin == p.name()) {
                    continue;
                }
                let mut registered = p
                    .events_to_register()
                    .unwrap_or_else(wildcard_registrations);
                // A plugin waiting for nodes to appear also wants nodes whose
                // taints change (upstream does the same).
                let node_add = registered.iter().any(|e| {
                    e.event.resource == EventResource::Node
                        && e.event.action.contains(ActionType::ADD)
                });
                let node_taint = registered.iter().any(|e| {
                    e.event.resource == EventResource::Node
                        && e.event.action.contains(ActionType::UPDATE_NODE_TAINT)
                });
                if node_add && !node_taint {
                    registered.push(ClusterEventWithHint::always(ClusterEvent::new(
                        EventResource::Node,
                        ActionType::UPDATE_NODE_TAINT,
                    )));
                }
                events.push(PluginEvents {
                    plugin: p.name(),
                    events: registered,
                });
            }
        }

        let names = lists
            .iter()
            .map(|(point, l)| (*point, l.iter().map(|(p, _)| p.name()).collect()))
            .collect();

        Ok(Self {
            profile_name: Arc::from(profile.scheduler_name.as_str()),
            handle: handle.clone(),
            percentage_of_nodes_to_score: profile.percentage_of_nodes_to_score,
            queue_sort: queue_sort[0].0.clone().as_queue_sort().expect("checked"),
            pre_enqueue: typed(ExtensionPoint::PreEnqueue)
                .map(|p| p.as_pre_enqueue().expect("checked"))
                .collect(),
            pre_filter: typed(ExtensionPoint::PreFilter)
                .map(|p| {
                    let filter_index = filter_names.iter().position(|n| *n == p.name());
                    PreFilterEntry {
                        plugin: p.as_pre_filter().expect("checked"),
                        filter_index,
                    }
                })
                .collect(),
            filter,
            batch_filter,
            fused_score,
            post_filter: typed(ExtensionPoint::PostFilter)
                .map(|p| p.as_post_filter().expect("checked"))
                .collect(),
            pre_score: typed(ExtensionPoint::PreScore)
                .map(|p| {
                    let score_index = score_names.iter().position(|n| *n == p.name());
                    PreScoreEntry {
                        plugin: p.as_pre_score().expect("checked"),
                        score_index,
                    }
                })
                .collect(),
            score,
            reserve: typed(ExtensionPoint::Reserve)
                .map(|p| p.as_reserve().expect("checked"))
                .collect(),
            permit: typed(ExtensionPoint::Permit)
                .map(|p| p.as_permit().expect("checked"))
                .collect(),
            pre_bind: typed(ExtensionPoint::PreBind)
                .map(|p| p.as_pre_bind().expect("checked"))
                .collect(),
            bind: typed(ExtensionPoint::Bind)
                .map(|p| p.as_bind().expect("checked"))
                .collect(),
            post_bind: typed(ExtensionPoint::PostBind)
                .map(|p| p.as_post_bind().expect("checked"))
                .collect(),
            placement_feasible: instances
                .iter()
                .filter_map(|(_, p)| p.clone().as_placement_feasible())
                .collect(),
            pod_group_post_filter: typed(ExtensionPoint::PodGroupPostFilter)
                .map(|p| p.as_pod_group_post_filter().expect("checked"))
                .collect(),
            group_permit: instances
                .iter()
                .filter_map(|(_, p)| p.clone().as_group_permit())
                .collect(),
            events,
            names,
            filter_cost: WorkCost::default(),
            score_cost: WorkCost::default(),
            metrics: OnceLock::new(),
        })
    }
}

/// The plugins placed at one point, with the configuration entry that
/// placed each.
type PointList<'a> = Vec<(Arc<dyn Plugin>, &'a PluginRef)>;

fn implements(p: &Arc<dyn Plugin>, point: ExtensionPoint) -> bool {
    let p = p.clone();
    match point {
        ExtensionPoint::PreEnqueue => p.as_pre_enqueue().is_some(),
        ExtensionPoint::QueueSort => p.as_queue_sort().is_some(),
        ExtensionPoint::PreFilter => p.as_pre_filter().is_some(),
        ExtensionPoint::Filter => p.as_filter().is_some(),
        ExtensionPoint::PostFilter => p.as_post_filter().is_some(),
        ExtensionPoint::PreScore => p.as_pre_score().is_some(),
        ExtensionPoint::Score => p.as_score().is_some(),
        ExtensionPoint::Reserve => p.as_reserve().is_some(),
        ExtensionPoint::Permit => p.as_permit().is_some(),
        ExtensionPoint::PreBind => p.as_pre_bind().is_some(),
        ExtensionPoint::Bind => p.as_bind().is_some(),
        ExtensionPoint::PostBind => p.as_post_bind().is_some(),
        ExtensionPoint::PodGroupPostFilter => p.as_pod_group_post_filter().is_some(),
        ExtensionPoint::PlacementFeasible => p.as_placement_feasible().is_some(),
        ExtensionPoint::GroupPermit => p.as_group_permit().is_some(),
        ExtensionPoint::PreFilterExtensionAddPod
        | ExtensionPoint::PreFilterExtensionRemovePod
        | ExtensionPoint::ScoreExtensionNormalize
        | ExtensionPoint::Unreserve => implements(&p, point.list()),
    }
}

/// Points whose plugins can reject pods, and so must say which events may
/// make a rejected pod schedulable.
const REJECTING_POINTS: [ExtensionPoint; 5] = [
    ExtensionPoint::PreEnqueue,
    ExtensionPoint::PreFilter,
    ExtensionPoint::Filter,
    ExtensionPoint::Reserve,
    ExtensionPoint::Permit,
];

/// Adds a Score weight to the running total of weight × 100, failing when
/// the total could overflow an i64.
pub(super) fn check_weight(total: i64, weight: i64) -> Result<i64, String> {
    match weight.checked_mul(MAX_NODE_SCORE) {
        Some(w) if w <= MAX_TOTAL_SCORE - total => Ok(total + w),
        _ => Err("total score of Score plugins could overflow".into()),
    }
}

/// Builds every profile's framework (all must share one QueueSort, with
/// the same args); errors name the configuration path.
pub fn build_profiles(
    config: &crate::config::SchedulerConfig,
    registry: &Registry,
    handle: &Handle,
) -> Result<std::collections::HashMap<Arc<str>, Arc<Framework>>, ConfigError> {
    let mut profiles = std::collections::HashMap::new();
    let mut first: Option<(String, &'static str)> = None;
    for p in &config.profiles {
        let fw = Framework::new(p, registry, handle)?;
        let sort = fw.queue_sort().name();
        match &first {
            None => first = Some((p.scheduler_name.clone(), sort)),
            Some((name, s)) if *s != sort => {
                return Err(ConfigError::new(
                    format!("{}.plugins.queueSort", p.path),
                    format!(
                        "different queue sort plugins for profile {:?}: {sort:?}, first: {s:?} (profile {name:?}); queueSort must be the same for all profiles",
                        p.scheduler_name
                    ),
                ));
            }
            Some(_) => {}
        }
        // Queue-sort args must match too: compare the args given.
        if let Some(f) = config.profiles.first()
            && f.args_for(sort).map(|c| &c.args) != p.args_for(sort).map(|c| &c.args)
        {
            return Err(ConfigError::new(
                format!("{}.pluginConfig", p.path),
                "queueSort must be the same for all profiles: different queue sort plugin args",
            ));
        }
        profiles.insert(Arc::from(p.scheduler_name.as_str()), Arc::new(fw));
    }
    Ok(profiles)
}
