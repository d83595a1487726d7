//! The events the embedded cluster keeps: each in a compact form,
//! rebuilt as an `events.k8s.io/v1` object when asked for.

use std::sync::Arc;
use std::time::SystemTime;

use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::cluster::writes;
use crate::framework::PodEvent;

/// How many events the store keeps (oldest dropped first).
pub(super) const MAX_EVENTS: usize = 10_000;

/// An event as the store keeps it: what its `events.k8s.io/v1` object is
/// built from when asked for, a tenth of that object's size (the store
/// keeps [`MAX_EVENTS`] of them, and a decoded `Event` is over a
/// kilobyte before its strings).
pub(super) struct StoredEvent {
    at: k8s_openapi::jiff::Timestamp,
    namespace: Arc<str>,
    name: Arc<str>,
    uid: Arc<str>,
    resource_version: Option<Box<str>>,
    controller: Arc<str>,
    /// `Normal` or `Warning`.
    event_type: &'static str,
    reason: &'static str,
    action: &'static str,
    note: Box<str>,
}

impl StoredEvent {
    pub(super) fn new(e: PodEvent) -> Self {
        let at = k8s_openapi::jiff::Timestamp::try_from(SystemTime::now()).unwrap_or_default();
        let pod = &e.pod;
        Self {
            at,
            namespace: pod.namespace.clone(),
            name: pod.name.clone(),
            uid: pod.uid.clone(),
            resource_version: pod.pod.resource_version().map(Box::from),
            controller: e.controller,
            event_type: e.event_type.as_str(),
            reason: e.reason,
            action: e.action,
            note: e.note.into_boxed_str(),
        }
    }

    /// The object, as upstream's scheduler writes it
    /// ([`writes::event_json`], as kube mode creates it), with the
    /// creation time the API server would add.
    pub(super) fn to_event(&self) -> Event {
        let name = writes::event_name(&self.name, self.at);
        let instance = writes::reporting_instance(&self.controller);
        let body = writes::event_json(&writes::EventFields {
            name: &name,
            at: self.at,
            controller: &self.controller,
            instance: &instance,
            action: self.action,
            reason: self.reason,
            event_type: self.event_type,
            note: &self.note,
            regarding: writes::Regarding {
                namespace: &self.namespace,
                name: &self.name,
                uid: &self.uid,
                resource_version: self.resource_version.as_deref(),
            },
        });
        let mut event: Event = serde_json::from_value(body).unwrap_or_default();
        event.metadata.creation_timestamp = Some(Time(self.at));
        event
    }
}
