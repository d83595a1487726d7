//! [`Status`]: what a plugin tells the framework.
//!
//! The code decides what happens to the pod:
//!
//! | code | meaning | the pod goes |
//! | --- | --- | --- |
//! | `Success` | go on | on to the next plugin / extension point |
//! | `Error` | something broke (not the pod's fault) | to backoffQ, retried after its backoff |
//! | `Unschedulable` | does not fit now; preemption may help | to the unschedulable pods, until an event the rejecting plugin registered for |
//! | `UnschedulableAndUnresolvable` | does not fit, and preempting pods on this node would not help | as `Unschedulable`; preemption skips the node |
//! | `Wait` | Permit only: park the pod until allowed | to the waiting pods |
//! | `Skip` | PreFilter/PreScore: nothing to do for this pod, skip my Filter/Score; Bind: not my pod | on |
//! | `Pending` | waiting for something outside the scheduler (another controller) | as `Unschedulable`, moved only by the rejecting plugin's events |
//!
//! Reasons are `Cow<'static, str>`: native plugins reject with static text,
//! so rejecting a node allocates nothing.

use std::borrow::Cow;
use std::fmt;

use smallvec::SmallVec;

/// A reason in a status.
pub type Reason = Cow<'static, str>;

/// The outcome class of a plugin call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Code {
    /// The plugin ran and is satisfied.
    Success,
    /// An internal error; the pod is retried with backoff.
    Error,
    /// The pod does not fit now; preemption may help.
    Unschedulable,
    /// The pod does not fit and preemption on this node would not help.
    UnschedulableAndUnresolvable,
    /// Permit: hold the pod until every waiting plugin allows it.
    Wait,
    /// PreFilter/PreScore: skip this plugin's Filter/Score; Bind: not handled.
    Skip,
    /// The pod waits for something outside the scheduler.
    Pending,
}

impl Code {
    /// The code's name as upstream spells it.
    pub fn as_str(&self) -> &'static str {
        match self {
            Code::Success => "Success",
            Code::Error => "Error",
            Code::Unschedulable => "Unschedulable",
            Code::UnschedulableAndUnresolvable => "UnschedulableAndUnresolvable",
            Code::Wait => "Wait",
            Code::Skip => "Skip",
            Code::Pending => "Pending",
        }
    }
}

/// The result of a plugin call: a code, the reasons and the plugin that gave
/// it (attached by the framework runtime when the status is not a success).
#[derive(Clone, PartialEq, Eq)]
pub struct Status {
    code: Code,
    reasons: SmallVec<[Reason; 1]>,
    plugin: Option<&'static str>,
}

impl Default for Status {
    fn default() -> Self {
        Self::success()
    }
}

impl Status {
    /// Success, with no reasons.
    pub const fn success() -> Self {
        Self {
            code: Code::Success,
            reasons: SmallVec::new_const(),
            plugin: None,
        }
    }

    /// A status with `code` and no reason.
    pub const fn code_only(code: Code) -> Self {
        Self {
            code,
            reasons: SmallVec::new_const(),
            plugin: None,
        }
    }

    /// A status with `code` and one reason.
    pub fn new(code: Code, reason: impl Into<Reason>) -> Self {
        let mut reasons = SmallVec::new();
        reasons.push(reason.into());
        Self {
            code,
            reasons,
            plugin: None,
        }
    }

    /// A status with `code` and several reasons.
    pub fn with_reasons(code: Code, reasons: impl IntoIterator<Item = Reason>) -> Self {
        Self {
            code,
            reasons: reasons.into_iter().collect(),
            plugin: None,
        }
    }

    /// `Unschedulable` with one reason.
    pub fn unschedulable(reason: impl Into<Reason>) -> Self {
        Self::new(Code::Unschedulable, reason)
    }

    /// `UnschedulableAndUnresolvable` with one reason.
    pub fn unresolvable(reason: impl Into<Reason>) -> Self {
        Self::new(Code::UnschedulableAndUnresolvable, reason)
    }

    /// `Error` with the error's message as its reason.
    pub fn error(message: impl Into<Reason>) -> Self {
        Self::new(Code::Error, message)
    }

    /// `Skip`.
    pub const fn skip() -> Self {
        Self::code_only(Code::Skip)
    }

    /// Names the plugin that produced this status.
    pub fn with_plugin(mut self, plugin: &'static str) -> Self {
        self.plugin = Some(plugin);
        self
    }

    /// Names the plugin unless one is already named.
    pub(crate) fn or_plugin(mut self, plugin: &'static str) -> Self {
        if self.plugin.is_none() {
            self.plugin = Some(plugin);
        }
        self
    }

    /// The code.
    pub fn code(&self) -> Code {
        self.code
    }

    /// The reasons, in order.
    pub fn reasons(&self) -> &[Reason] {
        &self.reasons
    }

    /// The plugin that produced this status, if named.
    pub fn plugin(&self) -> Option<&'static str> {
        self.plugin
    }

    /// The reasons joined by ", ", as upstream's `Status.Message()`.
    pub fn message(&self) -> String {
        self.reasons.join(", ")
    }

    /// Code `Success`.
    pub fn is_success(&self) -> bool {
        self.code == Code::Success
    }

    /// Code `Skip`.
    pub fn is_skip(&self) -> bool {
        self.code == Code::Skip
    }

    /// Code `Wait`.
    pub fn is_wait(&self) -> bool {
        self.code == Code::Wait
    }

    /// Code `Error`.
    pub fn is_error(&self) -> bool {
        self.code == Code::Error
    }

    /// The pod was rejected: `Unschedulable`, `UnschedulableAndUnresolvable`
    /// or `Pending`.
    pub fn is_rejected(&self) -> bool {
        matches!(
            self.code,
            Code::Unschedulable | Code::UnschedulableAndUnresolvable | Code::Pending
        )
    }

    /// Adds a reason.
    pub fn push_reason(&mut self, reason: impl Into<Reason>) {
        self.reasons.push(reason.into());
    }
}

impl fmt::Debug for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.code.as_str())?;
        if let Some(p) = self.plugin {
            write!(f, "[{p}]")?;
        }
        if !self.reasons.is_empty() {
            write!(f, ": {}", self.message())?;
        }
        Ok(())
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.reasons.is_empty() {
            f.write_str(self.code.as_str())
        } else {
            f.write_str(&self.message())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_codes_metrics_slot_is_its_discriminant_and_labels_it_by_name() {
        let all = [
            Code::Success,
            Code::Error,
            Code::Unschedulable,
            Code::UnschedulableAndUnresolvable,
            Code::Wait,
            Code::Skip,
            Code::Pending,
        ];
        assert_eq!(all.len(), crate::metrics::STATUS_LABELS.len());
        for c in all {
            assert_eq!(crate::metrics::STATUS_LABELS[c as usize], c.as_str());
        }
    }

    #[test]
    fn message_joins_reasons() {
        let mut s = Status::unschedulable("Insufficient cpu");
        s.push_reason("Insufficient memory");
        assert_eq!(s.message(), "Insufficient cpu, Insufficient memory");
        assert!(s.is_rejected());
        assert!(!s.is_success());
    }

    #[test]
    fn rejected_codes() {
        for (code, rejected) in [
            (Code::Success, false),
            (Code::Error, false),
            (Code::Unschedulable, true),
            (Code::UnschedulableAndUnresolvable, true),
            (Code::Wait, false),
            (Code::Skip, false),
            (Code::Pending, true),
        ] {
            assert_eq!(Status::code_only(code).is_rejected(), rejected, "{code:?}");
        }
    }

    #[test]
    fn plugin_is_kept_once_named() {
        let s = Status::error("boom").with_plugin("A").or_plugin("B");
        assert_eq!(s.plugin(), Some("A"));
        assert_eq!(format!("{s:?}"), "Error[A]: boom");
    }

    #[test]
    fn success_is_the_default_and_allocates_nothing() {
        let s = Status::default();
        assert!(s.is_success());
        assert!(!s.reasons.spilled());
    }
}
