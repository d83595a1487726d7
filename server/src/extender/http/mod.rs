//! kube-scheduler's HTTP extenders (the `extenders:` configuration), so that
//! an extender written for kube-scheduler works with berth unchanged.
//!
//! Each entry is one [`HttpExtender`]: a plugin the configuration pins into
//! every profile (see `config::PinnedPlugin`) and an extender DefaultPreemption
//! consults. As in kube-scheduler:
//!
//! * **filter**: after every Filter plugin, on the nodes that passed them
//!   (a batch Filter, after the profile's own batch Filters). `FailedNodes`
//!   are Unschedulable, `FailedAndUnresolvableNodes` (which win)
//!   UnschedulableAndUnresolvable, each with the extender's message as the
//!   reason; a node neither kept nor failed is dropped with no reason. An
//!   `Error`, a transport failure or a non-200 answer fails the attempt with
//!   that text, unless the extender is `ignorable` (then every node passes).
//! * **prioritize**: a batch Score with the extender's `weight`; each score
//!   is multiplied by `MaxNodeScore / MaxExtenderPriority` (10) and is not
//!   range-checked. A failed prioritize gives no score (whether ignorable or
//!   not), as upstream.
//! * **bind**: the first Bind plugin. It binds pods the extender is
//!   interested in; an `ignorable` extender's failure leaves the pod to the
//!   next binder. When the extender answers without `Error`, berth records
//!   the binding in its cluster (the `pods/binding` the extender would have
//!   made against the API server the embedded cluster stands in for).
//! * **preempt**: DefaultPreemption sends its candidates (victims in full,
//!   or by UID when `nodeCacheCapable`) and keeps what the extender returns;
//!   as v1.38 (kubernetes#135486), a candidate may come without victims (a
//!   node the per-node Filter plugins need none on) for the extender to name
//!   some. The filter verb is not asked at preemption's what-if (upstream
//!   asks its extenders only through this verb there).
//! * `managedResources`: pods requesting none of them never reach the
//!   extender.

mod client;
#[cfg(test)]
mod tests;
pub mod wire;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use async_trait::async_trait;
use serde::Serialize;

pub use client::{PostError, Transport};

use super::stats::Stats;
use crate::cache::{NodeInfo, Snapshot};
use crate::config::ConfigError;
use crate::config::extenders::HttpExtenderConfig;
use crate::framework::{
    BatchFilter, BatchScore, BindPlugin, Code, CycleState, ExtenderError, FilterPlugin, Handle,
    MAX_NODE_SCORE, NodeVictims, Plugin, PluginFailure, PreemptionExtender, ScorePlugin, Status,
    Victims,
};
use crate::model::PodInfo;

/// Why a call to an HTTP extender failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HttpExtenderError {
    /// The POST failed.
    #[error(transparent)]
    Post(#[from] PostError),
    /// The extender's own `Error`, as it wrote it.
    #[error("{0}")]
    Extender(String),
    /// An answer berth cannot use.
    #[error("extender {extender:?} answered {verb:?} with an unusable result: {message}")]
    Malformed {
        /// The extender (its `urlPrefix`).
        extender: String,
        /// The verb.
        verb: String,
        /// What is wrong.
        message: String,
    },
}

/// One `extenders` entry.
pub struct HttpExtender {
    cfg: HttpExtenderConfig,
    name: &'static str,
    transport: Transport,
    handle: Handle,
    stats: Stats,
}

impl std::fmt::Debug for HttpExtender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpExtender")
            .field("name", &self.name)
            .field("url_prefix", &self.cfg.url_prefix)
            .finish()
    }
}

impl HttpExtender {
    /// The extender for `cfg`. TLS files are read now.
    pub fn new(cfg: HttpExtenderConfig, handle: &Handle) -> Result<Self, ConfigError> {
        let transport = Transport::new(&cfg)?;
        // Plugin names are 'static; one per configured extender.
        let name: &'static str = Box::leak(cfg.name.clone().into_boxed_str());
        Ok(Self {
            cfg,
            name,
            transport,
            handle: handle.clone(),
            stats: Stats::default(),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &HttpExtenderConfig {
        &self.cfg
    }

    /// The counters (calls, failures, skipped failures).
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Whether the pod requests (or limits) a managed resource; with none
    /// configured, every pod interests the extender.
    pub fn interested(&self, pod: &PodInfo) -> bool {
        super::interest::requests_managed(pod, &self.cfg.managed_resources)
    }

    fn malformed(&self, verb: &str, message: impl Into<String>) -> HttpExtenderError {
        HttpExtenderError::Malformed {
            extender: self.cfg.url_prefix.clone(),
            verb: verb.to_string(),
            message: message.into(),
        }
    }

    /// POSTs `args` to `verb` and returns the answer's body.
    async fn send(
        &self,
        verb: &str,
        args: &impl Serialize,
    ) -> Result<bytes::Bytes, HttpExtenderError> {
        self.stats.calls.fetch_add(1, Ordering::Relaxed);
        let body = serde_json::to_vec(args)
            .map_err(|e| self.malformed(verb, format!("cannot encode the request: {e}")))?;
        Ok(self.transport.post(verb, body).await?)
    }

    fn args<'a>(&self, pod: &'a PodInfo, nodes: &'a [Arc<NodeInfo>]) -> wire::ExtenderArgs<'a> {
        if self.cfg.node_cache_capable {
            wire::ExtenderArgs {
                pod: &pod.pod,
                nodes: None,
                node_names: Some(nodes.iter().map(|n| n.name()).collect()),
            }
        } else {
            wire::ExtenderArgs {
                pod: &pod.pod,
                nodes: Some(wire::NodeList {
                    metadata: serde_json::Map::new(),
                    items: nodes
                        .iter()
                        .filter_map(|n| n.node())
                        .map(|n| &*n.node)
                        .collect(),
                }),
                node_names: None,
            }
        }
    }

    /// A failed call: `Ok(fallback)` when the extender is ignorable (logged
    /// and counted), else the error as the pod's status. Logged as remote
    /// extenders log.
    fn failed<T>(
        &self,
        state: &CycleState,
        point: &'static str,
        pod: &PodInfo,
        e: &HttpExtenderError,
        fallback: T,
    ) -> Result<T, Status> {
        let name = self.name;
        self.stats.failures.fetch_add(1, Ordering::Relaxed);
        state.token().note_failure(PluginFailure {
            plugin: name,
            point,
            reason: e.to_string(),
            ignored: self.cfg.ignorable,
            node_id: None,
        });
        if self.cfg.ignorable {
            self.stats.skipped.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(extender = name, point, pod = %pod.key(), error = %e, "ignorable extender skipped");
            Ok(fallback)
        } else {
            tracing::warn!(extender = name, point, pod = %pod.key(), error = %e, "extender failed");
            Err(Status::error(e.to_string()))
        }
    }

    /// The extender's verdict per node of `nodes`.
    pub async fn filter_remote(
        &self,
        pod: &PodInfo,
        nodes: &[Arc<NodeInfo>],
    ) -> Result<Vec<Status>, HttpExtenderError> {
        let verb = &self.cfg.filter_verb;
        let body = self.send(verb, &self.args(pod, nodes)).await?;
        let r = wire::parse_filter_result(&body).map_err(|e| self.malformed(verb, e.0))?;
        if !r.error.is_empty() {
            return Err(HttpExtenderError::Extender(r.error));
        }
        let index: HashMap<&str, usize> = nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (n.name(), i))
            .collect();
        // As upstream: names when the extender caches nodes and sent them,
        // else the node objects; neither means no node passed.
        let kept = match (self.cfg.node_cache_capable, r.node_names, r.nodes) {
            (true, Some(names), _) => names,
            (_, _, Some(nodes)) => nodes,
            _ => Vec::new(),
        };
        let mut passed = vec![false; nodes.len()];
        for name in kept {
            let Some(&i) = index.get(name.as_str()) else {
                return Err(self.malformed(
                    verb,
                    format!("it claims a filtered node {name:?} which is not found in the input node list"),
                ));
            };
            passed[i] = true;
        }
        let mut out: Vec<Status> = passed
            .iter()
            .map(|p| {
                if *p {
                    Status::success()
                } else {
                    // Dropped without a reason: not counted in the pod's
                    // message, and preemption will not help there.
                    Status::code_only(Code::UnschedulableAndUnresolvable)
                }
            })
            .collect();
        let failed = r
            .failed_nodes
            .into_iter()
            .map(|(n, m)| (n, Status::unschedulable(m)));
        let unresolvable = r
            .failed_and_unresolvable_nodes
            .into_iter()
            .map(|(n, m)| (n, Status::unresolvable(m)));
        // Unresolvable last, so that it wins for a node in both maps.
        for (node, status) in failed.chain(unresolvable) {
            // Upstream keeps statuses of nodes it did not ask about; they
            // change nothing here. A kept node stays feasible.
            if let Some(&i) = index.get(node.as_str())
                && !passed[i]
            {
                out[i] = status;
            }
        }
        Ok(out)
    }

    /// The extender's scores per node of `nodes`, scaled to berth's range
    /// (not yet weighted).
    pub async fn prioritize_remote(
        &self,
        pod: &PodInfo,
        nodes: &[Arc<NodeInfo>],
    ) -> Result<Vec<i64>, HttpExtenderError> {
        let verb = &self.cfg.prioritize_verb;
        let body = self.send(verb, &self.args(pod, nodes)).await?;
        let list = wire::parse_host_priority_list(&body).map_err(|e| self.malformed(verb, e.0))?;
        let index: HashMap<&str, usize> = nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (n.name(), i))
            .collect();
        let mut scores = vec![0i64; nodes.len()];
        let scale = MAX_NODE_SCORE / wire::MAX_EXTENDER_PRIORITY;
        for hp in list {
            // Hosts not asked about are ignored, as upstream.
            if let Some(&i) = index.get(hp.host.as_str()) {
                scores[i] = scores[i].saturating_add(hp.score.saturating_mul(scale));
            }
        }
        Ok(scores)
    }

    async fn bind_remote(&self, pod: &PodInfo, node: &str) -> Result<(), HttpExtenderError> {
        let verb = &self.cfg.bind_verb;
        let args = wire::ExtenderBindingArgs {
            pod_name: &pod.name,
            pod_namespace: &pod.namespace,
            pod_uid: &pod.uid,
            node,
        };
        let body = self.send(verb, &args).await?;
        let error = wire::parse_binding_result(&body).map_err(|e| self.malformed(verb, e.0))?;
        if !error.is_empty() {
            return Err(HttpExtenderError::Extender(error));
        }
        Ok(())
    }

    async fn preempt_remote(
        &self,
        pod: &PodInfo,
        candidates: &NodeVictims,
        snapshot: &Snapshot,
    ) -> Result<NodeVictims, HttpExtenderError> {
        let verb = &self.cfg.preempt_verb;
        let mut args = wire::ExtenderPreemptionArgs {
            pod: &pod.pod,
            node_name_to_victims: None,
            node_name_to_meta_victims: None,
        };
        if self.cfg.node_cache_capable {
            args.node_name_to_meta_victims = Some(
                candidates
                    .iter()
                    .map(|(node, v)| {
                        let meta = wire::MetaVictims {
                            pods: v
                                .pods
                                .iter()
                                .map(|p| wire::MetaPod { uid: &p.uid })
                                .collect(),
                            num_pdb_violations: v.num_pdb_violations,
                        };
                        (&**node, meta)
                    })
                    .collect(),
            );
        } else {
            args.node_name_to_victims = Some(
                candidates
                    .iter()
                    .map(|(node, v)| {
                        let full = wire::Victims {
                            pods: v.pods.iter().map(|p| &p.pod).collect(),
                            num_pdb_violations: v.num_pdb_violations,
                        };
                        (&**node, full)
                    })
                    .collect(),
            );
        }
        let body = self.send(verb, &args).await?;
        let result = wire::parse_preemption_result(&body).map_err(|e| self.malformed(verb, e.0))?;
        let mut out = BTreeMap::new();
        for (node, meta) in result {
            let Some(info) = snapshot.get(&node) else {
                return Err(self.malformed(verb, format!("node {node:?} is not in the cluster")));
            };
            let mut pods = Vec::with_capacity(meta.pods.len());
            for uid in &meta.pods {
                let Some(p) = info.pods().iter().find(|p| *p.uid == **uid) else {
                    return Err(self.malformed(
                        verb,
                        format!("it claims to preempt pod (UID: {uid}) on node {node}, but the pod is not found on that node"),
                    ));
                };
                pods.push(p.clone());
            }
            out.insert(
                Arc::from(node),
                Victims {
                    pods,
                    num_pdb_violations: meta.num_pdb_violations,
                },
            );
        }
        Ok(out)
    }
}

impl Plugin for HttpExtender {
    fn name(&self) -> &'static str {
        self.name
    }

    fn wraps_errors(&self) -> bool {
        false
    }

    fn as_filter(self: Arc<Self>) -> Option<Arc<dyn FilterPlugin>> {
        (!self.cfg.filter_verb.is_empty()).then_some(self)
    }

    fn as_score(self: Arc<Self>) -> Option<Arc<dyn ScorePlugin>> {
        (!self.cfg.prioritize_verb.is_empty()).then_some(self)
    }

    fn as_bind(self: Arc<Self>) -> Option<Arc<dyn BindPlugin>> {
        (!self.cfg.bind_verb.is_empty()).then_some(self)
    }
}

impl FilterPlugin for HttpExtender {
    fn filter(&self, _: &CycleState, _: &PodInfo, _: &NodeInfo) -> Status {
        // Never called: the runtime uses the batch below.
        Status::success()
    }

    fn as_batch(&self) -> Option<&dyn BatchFilter> {
        Some(self)
    }
}

#[async_trait]
impl BatchFilter for HttpExtender {
    async fn filter_nodes(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        nodes: &[Arc<NodeInfo>],
    ) -> Result<Vec<Status>, Status> {
        let pass = || vec![Status::success(); nodes.len()];
        if !self.interested(pod) {
            return Ok(pass());
        }
        match self.filter_remote(pod, nodes).await {
            Ok(v) => Ok(v),
            Err(e) => self.failed(state, "Filter", pod, &e, pass()),
        }
    }

    /// Not asked at preemption's what-if, as upstream: its `preemptVerb`
    /// is its say in preemption (and one without it has none).
    fn judges_preemption(&self) -> bool {
        false
    }
}

impl ScorePlugin for HttpExtender {
    fn score(&self, _: &CycleState, _: &PodInfo, _: &NodeInfo) -> Result<i64, Status> {
        // Never called: the runtime uses the batch below.
        Ok(0)
    }

    fn as_batch(&self) -> Option<&dyn BatchScore> {
        Some(self)
    }
}

#[async_trait]
impl BatchScore for HttpExtender {
    async fn score_nodes(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        nodes: &[Arc<NodeInfo>],
    ) -> Result<Vec<i64>, Status> {
        if !self.interested(pod) {
            return Ok(vec![0; nodes.len()]);
        }
        match self.prioritize_remote(pod, nodes).await {
            Ok(v) => Ok(v),
            Err(e) => {
                // Upstream lets the other scores decide, ignorable or not.
                state.token().note_failure(PluginFailure {
                    plugin: self.name,
                    point: "Score",
                    reason: e.to_string(),
                    ignored: true,
                    node_id: None,
                });
                self.stats.failures.fetch_add(1, Ordering::Relaxed);
                self.stats.skipped.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(extender = self.name, point = "Score", pod = %pod.key(), error = %e, "extender prioritize failed; no score given by it");
                Ok(vec![0; nodes.len()])
            }
        }
    }
}

#[async_trait]
impl BindPlugin for HttpExtender {
    async fn bind(&self, state: &CycleState, pod: &PodInfo, node: &str) -> Status {
        if !self.interested(pod) {
            return Status::skip();
        }
        if let Err(e) = self.bind_remote(pod, node).await {
            return self
                .failed(state, "Bind", pod, &e, Status::skip())
                .unwrap_or_else(|s| s);
        }
        match self.handle.cluster().bind(pod, node).await {
            Ok(()) => Status::success(),
            Err(e) => Status::error(e.to_string()),
        }
    }
}

#[async_trait]
impl PreemptionExtender for HttpExtender {
    fn name(&self) -> &str {
        self.name
    }

    fn supports_preemption(&self) -> bool {
        !self.cfg.preempt_verb.is_empty()
    }

    fn is_interested(&self, pod: &PodInfo) -> bool {
        self.interested(pod)
    }

    fn is_ignorable(&self) -> bool {
        self.cfg.ignorable
    }

    async fn process_preemption(
        &self,
        pod: &PodInfo,
        candidates: &NodeVictims,
        snapshot: &Snapshot,
    ) -> Result<NodeVictims, ExtenderError> {
        self.preempt_remote(pod, candidates, snapshot)
            .await
            .map_err(|e| {
                self.stats.failures.fetch_add(1, Ordering::Relaxed);
                ExtenderError(e.to_string())
            })
    }
}

/// The HTTP extenders of one scheduler, in configuration order.
#[derive(Debug, Default)]
pub struct HttpExtenders {
    extenders: Vec<Arc<HttpExtender>>,
}

impl HttpExtenders {
    /// One extender per `extenders` entry; errors name the field (a TLS file
    /// that cannot be read).
    pub fn new(configs: &[HttpExtenderConfig], handle: &Handle) -> Result<Self, ConfigError> {
        let extenders = configs
            .iter()
            .map(|c| HttpExtender::new(c.clone(), handle).map(Arc::new))
            .collect::<Result<_, _>>()?;
        Ok(Self { extenders })
    }

    /// Registers each extender's plugin under its name, and hands them to
    /// preemption.
    pub fn register(
        &self,
        registry: &mut crate::framework::Registry,
        handle: &Handle,
    ) -> Result<(), ConfigError> {
        for e in &self.extenders {
            let plugin = e.clone();
            registry
                .register_factory(
                    e.name,
                    Arc::new(move |_, _, _| Ok(plugin.clone() as Arc<dyn Plugin>)),
                )
                .map_err(|err| {
                    ConfigError::new(format!("{}.urlPrefix", e.cfg.path), err.to_string())
                })?;
        }
        handle.set_extenders(
            self.extenders
                .iter()
                .map(|e| e.clone() as Arc<dyn PreemptionExtender>)
                .collect(),
        );
        Ok(())
    }

    /// The extenders.
    pub fn list(&self) -> &[Arc<HttpExtender>] {
        &self.extenders
    }
}
