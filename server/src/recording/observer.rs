//! [`Observer`]: how the scheduler shows what it sees to whoever records
//! it; the recorder is one.

use crate::cluster::ClusterChange;
use crate::framework::PodEvent;

/// Sees what the scheduler sees: each cluster change as its event handler
/// takes it (before applying it), and each event the scheduler records
/// (`Scheduled`, `FailedScheduling`, `Preempted`, ...). Called on the
/// scheduler's own tasks: it must not block.
pub trait Observer: Send + Sync {
    /// A cluster change, as the event handler is about to apply it.
    fn change(&self, change: &ClusterChange);
    /// An event the scheduler records about a pod.
    fn event(&self, event: &PodEvent);
}
