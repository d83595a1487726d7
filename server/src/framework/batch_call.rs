//! Batch Filter calls (remote extenders) as the framework carries them:
//! a call under way, what it answers, and the calls a cycle sent ahead of
//! its per-node plugins, which the cycle's state keeps for preemption when
//! the cycle did not need their answers.

use super::status::Status;

/// A batch Filter call under way (see [`BatchFilter::start_filter_nodes`]):
/// owns what it needs, and is dropped unawaited when its verdicts are no
/// longer needed.
pub type BatchFilterCall = std::pin::Pin<
    Box<dyn std::future::Future<Output = Result<BatchFilterAnswer, Status>> + Send + 'static>,
>;

/// What a batch Filter call answers: the nodes that did not pass (most
/// pass, so only those are listed).
#[derive(Debug, Clone, Default)]
pub struct BatchFilterAnswer {
    /// How many nodes were sent.
    pub nodes: usize,
    /// The nodes that did not pass, by position among those sent, in
    /// ascending order, each with its status (a rejection or an error).
    pub rejected: Vec<(usize, Status)>,
    /// When scores were asked for and came: one raw score per node sent
    /// (meaningless for nodes it rejected).
    pub scores: Option<Vec<i64>>,
}

impl BatchFilterAnswer {
    /// The answer giving `statuses`, one per node sent.
    pub fn from_statuses(statuses: Vec<Status>) -> Self {
        Self {
            nodes: statuses.len(),
            rejected: statuses
                .into_iter()
                .enumerate()
                .filter(|(_, s)| !s.is_success())
                .collect(),
            scores: None,
        }
    }

    /// One status per node sent.
    pub fn into_statuses(self) -> Vec<Status> {
        let mut out = vec![Status::success(); self.nodes];
        for (i, s) in self.rejected {
            if let Some(slot) = out.get_mut(i) {
                *slot = s;
            }
        }
        out
    }
}

/// Batch Filter calls sent ahead of the per-node plugins, with a cycle's
/// candidates (`Framework::start_batch_filters`).
pub struct BatchFiltersAhead {
    pub(super) calls: Vec<AheadCall>,
    /// How many nodes were sent.
    pub(super) sent: usize,
    /// Where the window sent starts in the snapshot's node list, and that
    /// list's length, when it is a window of that list (not of nodes a
    /// PreFilter restricted the search to): the answers are then kept for
    /// preemption (`KnownVerdicts`).
    pub(super) origin: Option<(usize, usize)>,
}

impl BatchFiltersAhead {
    /// Says the calls went with the `sent` nodes of the snapshot's list of
    /// `nodes` nodes from `start` on (wrapping).
    pub fn set_origin(&mut self, start: usize, nodes: usize) {
        self.origin = Some((start, nodes));
    }
}

pub(super) struct AheadCall {
    pub(super) filter_index: usize,
    /// The plugin's Score position, when its scores were asked for.
    pub(super) score_index: Option<usize>,
    pub(super) call: BatchFilterCall,
}

impl std::fmt::Debug for BatchFiltersAhead {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BatchFiltersAhead")
            .field("calls", &self.calls.len())
            .field("sent", &self.sent)
            .finish()
    }
}
