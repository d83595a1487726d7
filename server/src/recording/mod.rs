//! Traces: what a scheduler saw and decided, in order, with the time of
//! each, written by `berthd --record FILE` ([`Recorder`]) or generated
//! (berth-bench's `trace`), and played back by [`crate::replay`].
//!
//! # The format, version 1
//!
//! A trace is JSON lines, gzip-compressed (a file that is not gzip reads as
//! plain text). Its first line is a [`format::Header`]:
//!
//! ```text
//! {"berthTrace":1,"started":"2026-03-01T09:00:00Z","source":"kube","segment":0,"seed":1,"profiles":["default-scheduler"]}
//! ```
//!
//! Every other line is one record: `t`, microseconds since the recording
//! began, and one of:
//!
//! | key | value | meaning |
//! | --- | --- | --- |
//! | `add` | a Kubernetes object | the object appeared (or was there when the segment began) |
//! | `update` | a Kubernetes object | it changed in a way scheduling may read |
//! | `delete` | `{kind, namespace, name, uid, preempted}` | it went away (`preempted`: evicted by the recorded scheduler's preemption) |
//! | `bind` | `{namespace, name, uid, node}` | a pending pod was bound, by whichever scheduler |
//! | `synced` | `{}` | the segment's first state is complete |
//! | `scheduled` | `{namespace, name, uid, node}` | the recorded scheduler's decision: bound there |
//! | `unschedulable` | `{namespace, name, uid, message}` | its decision: fits nowhere, and why |
//! | `preempted` | `{namespace, name, uid, node, preemptor}` | its decision: this pod was evicted for `preemptor` |
//!
//! Objects are those the scheduler reads: nodes, pods (with what
//! scheduling reads of them), PodGroups, DRA objects, PersistentVolumes,
//! claims and StorageClasses, PriorityClasses, PodDisruptionBudgets and
//! the other kinds berth watches. The records up to `synced` are the
//! cluster as the scheduler first listed it; replay starts from there. The
//! last three kinds of record are the recorded scheduler's decisions:
//! replay compares with them and never applies them.

pub mod format;
mod observer;
mod recorder;

pub use format::{Body, FormatError, Header, Object, Reader, Record, Writer};
pub use observer::Observer;
pub use recorder::{
    RecordError, Recorder, RecorderOptions, scheduling_changed, scheduling_changed_as_values,
};
