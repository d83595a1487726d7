//! Reserve/Unreserve, Permit (and waiting on it), PreBind, Bind, PostBind.

use super::*;

impl Framework {
    /// Runs Reserve plugins until one fails.
    pub async fn run_reserve(&self, state: &mut CycleState, pod: &PodInfo, node: &str) -> Status {
        let t = self.point_timer(state);
        let s = self
            .reserve_plugins(state, pod, node)
            .instrument(point_span(ExtensionPoint::Reserve))
            .await;
        self.point_done(ExtensionPoint::Reserve, s.code(), t);
        s
    }

    async fn reserve_plugins(&self, state: &mut CycleState, pod: &PodInfo, node: &str) -> Status {
        for (i, p) in self.reserve.iter().enumerate() {
            let t = self.plugin_timer(state);
            let s = p.reserve(state, pod, node).await;
            self.plugin_done(ExtensionPoint::Reserve, i, s.code(), t);
            if !s.is_success() {
                if s.is_rejected() {
                    return s.with_plugin(p.name());
                }
                return Status::error(format!(
                    "running Reserve plugin {:?}: {}",
                    p.name(),
                    s.message()
                ))
                .with_plugin(p.name());
            }
        }
        Status::success()
    }

    /// Runs Unreserve on every Reserve plugin, in reverse order.
    pub async fn run_unreserve(&self, state: &CycleState, pod: &PodInfo, node: &str) {
        let t = self.point_timer(state);
        async {
            for (i, p) in self.reserve.iter().enumerate().rev() {
                let t = self.plugin_timer(state);
                p.unreserve(state, pod, node).await;
                self.plugin_done(ExtensionPoint::Unreserve, i, Code::Success, t);
            }
        }
        .instrument(point_span(ExtensionPoint::Unreserve))
        .await;
        self.point_done(ExtensionPoint::Unreserve, Code::Success, t);
    }

    /// Runs Permit plugins. A rejection returns at once; if some plugins
    /// asked to wait, the pod is parked among the waiting pods and `Wait` is
    /// returned.
    pub async fn run_permit(&self, state: &CycleState, pod: &PodRef, node: &Arc<str>) -> Status {
        let t = self.point_timer(state);
        let s = self
            .permit_plugins(state, pod, node)
            .instrument(point_span(ExtensionPoint::Permit))
            .await;
        self.point_done(ExtensionPoint::Permit, s.code(), t);
        s
    }

    async fn permit_plugins(&self, state: &CycleState, pod: &PodRef, node: &Arc<str>) -> Status {
        let mut waits: Vec<(&'static str, Duration)> = Vec::new();
        for (i, p) in self.permit.iter().enumerate() {
            let t = self.plugin_timer(state);
            let (s, timeout) = p.permit(state, pod, node).await;
            self.plugin_done(ExtensionPoint::Permit, i, s.code(), t);
            if s.is_success() {
                continue;
            }
            if s.is_rejected() {
                return s.with_plugin(p.name());
            }
            if s.is_wait() {
                waits.push((p.name(), timeout.min(MAX_PERMIT_TIMEOUT)));
                continue;
            }
            return Status::error(format!(
                "running Permit plugin {:?}: {}",
                p.name(),
                s.message()
            ))
            .with_plugin(p.name());
        }
        if waits.is_empty() {
            return Status::success();
        }
        self.handle
            .waiting_pods()
            .add(pod.clone(), node.clone(), waits);
        Status::new(
            Code::Wait,
            format!(
                "one or more plugins asked to wait and no plugin rejected pod {:?}",
                &*pod.name
            ),
        )
    }

    /// Waits until a pod parked at Permit is allowed or rejected (success at
    /// once if it is not waiting).
    pub async fn wait_on_permit(&self, pod: &PodInfo) -> Status {
        let s = self.handle.waiting_pods().wait(&pod.uid).await;
        if s.is_success() || s.is_rejected() {
            return s;
        }
        let plugin = s.plugin();
        let mut e = Status::error(format!("waiting on permit for pod: {}", s.message()));
        if let Some(p) = plugin {
            e = e.with_plugin(p);
        }
        e
    }

    /// Asks every PreBind plugin whether it has work for `pod` on `node`:
    /// `Success` if any has, `Skip` if none has (or there are none), the
    /// first error otherwise. A rejection is an error here, as upstream's
    /// RunPreBindPreFlights treats it.
    pub fn run_pre_bind_pre_flights(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        node: &str,
    ) -> Status {
        let mut out = Status::skip();
        for p in &self.pre_bind {
            let s = p.pre_bind_pre_flight(state, pod, node);
            if s.is_skip() {
                continue;
            }
            if !s.is_success() {
                return Status::error(format!(
                    "running PreBindPreFlight {:?}: {}",
                    p.name(),
                    s.message()
                ))
                .with_plugin(p.name());
            }
            out = Status::success();
        }
        out
    }

    /// Whether `pod` waits at Permit (upstream's WillWaitOnPermit).
    pub fn will_wait_on_permit(&self, pod: &PodInfo) -> bool {
        self.handle.waiting_pods().get(&pod.uid).is_some()
    }

    /// Runs PreBind plugins until one fails.
    pub async fn run_pre_bind(&self, state: &CycleState, pod: &PodInfo, node: &str) -> Status {
        let t = self.point_timer(state);
        let s = self
            .pre_bind_plugins(state, pod, node)
            .instrument(point_span(ExtensionPoint::PreBind))
            .await;
        self.point_done(ExtensionPoint::PreBind, s.code(), t);
        s
    }

    async fn pre_bind_plugins(&self, state: &CycleState, pod: &PodInfo, node: &str) -> Status {
        for (i, p) in self.pre_bind.iter().enumerate() {
            let t = self.plugin_timer(state);
            let s = p.pre_bind(state, pod, node).await;
            self.plugin_done(ExtensionPoint::PreBind, i, s.code(), t);
            if !s.is_success() {
                if s.is_rejected() {
                    return s.with_plugin(p.name());
                }
                return Status::error(format!(
                    "running PreBind plugin {:?}: {}",
                    p.name(),
                    s.message()
                ))
                .with_plugin(p.name());
            }
        }
        Status::success()
    }

    /// Runs Bind plugins in order until one does not `Skip`. If all skip, the
    /// last `Skip` is returned (the pod is not bound).
    pub async fn run_bind(&self, state: &CycleState, pod: &PodInfo, node: &str) -> Status {
        let t = self.point_timer(state);
        let s = self
            .bind_plugins(state, pod, node)
            .instrument(point_span(ExtensionPoint::Bind))
            .await;
        self.point_done(ExtensionPoint::Bind, s.code(), t);
        s
    }

    async fn bind_plugins(&self, state: &CycleState, pod: &PodInfo, node: &str) -> Status {
        let mut last = Status::skip();
        for (i, p) in self.bind.iter().enumerate() {
            let t = self.plugin_timer(state);
            let s = p.bind(state, pod, node).await;
            self.plugin_done(ExtensionPoint::Bind, i, s.code(), t);
            if s.is_skip() {
                last = s.with_plugin(p.name());
                continue;
            }
            if s.is_success() {
                return s;
            }
            if s.is_rejected() {
                return s.with_plugin(p.name());
            }
            if !p.wraps_errors() {
                return Status::error(s.message()).with_plugin(p.name());
            }
            return Status::error(format!(
                "running Bind plugin {:?}: {}",
                p.name(),
                s.message()
            ))
            .with_plugin(p.name());
        }
        last
    }

    /// Runs PostBind plugins (informational).
    pub async fn run_post_bind(&self, state: &CycleState, pod: &PodInfo, node: &str) {
        let t = self.point_timer(state);
        async {
            for (i, p) in self.post_bind.iter().enumerate() {
                let t = self.plugin_timer(state);
                p.post_bind(state, pod, node).await;
                self.plugin_done(ExtensionPoint::PostBind, i, Code::Success, t);
            }
        }
        .instrument(point_span(ExtensionPoint::PostBind))
        .await;
        self.point_done(ExtensionPoint::PostBind, Code::Success, t);
    }
}
