//! The extension points of a scheduling profile: named by the
//! configuration, run by the framework.

/// The extension points a profile configures, in the order they run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ExtensionPoint {
    /// Before a pod enters activeQ.
    PreEnqueue,
    /// Orders activeQ.
    QueueSort,
    /// Once per cycle, before filtering.
    PreFilter,
    /// Per node.
    Filter,
    /// When no node fits.
    PostFilter,
    /// Once per cycle, before scoring.
    PreScore,
    /// Per feasible node.
    Score,
    /// After a node is chosen.
    Reserve,
    /// Last in the scheduling cycle.
    Permit,
    /// Before binding.
    PreBind,
    /// Binding.
    Bind,
    /// After binding.
    PostBind,
    /// When a PodGroup's cycle does not fit (workload-aware preemption).
    PodGroupPostFilter,
    /// A PodGroup's placement as its cycle goes. Not a profile list (v1.37
    /// has none): GangScheduling serves it wherever it is enabled, and a
    /// remote extender lists it in `berthExtenders[].points`.
    PlacementFeasible,
    /// berth's group-level Permit. Not a profile list either: a plugin
    /// serving it runs wherever it is enabled.
    GroupPermit,
}

impl ExtensionPoint {
    /// Every point a profile's `plugins` lists, in order.
    pub const ALL: [ExtensionPoint; 13] = [
        Self::PreEnqueue,
        Self::QueueSort,
        Self::PreFilter,
        Self::Filter,
        Self::PostFilter,
        Self::PreScore,
        Self::Score,
        Self::Reserve,
        Self::Permit,
        Self::PreBind,
        Self::Bind,
        Self::PostBind,
        Self::PodGroupPostFilter,
    ];

    /// The field name in a profile's `plugins`.
    pub fn field(&self) -> &'static str {
        match self {
            Self::PreEnqueue => "preEnqueue",
            Self::QueueSort => "queueSort",
            Self::PreFilter => "preFilter",
            Self::Filter => "filter",
            Self::PostFilter => "postFilter",
            Self::PreScore => "preScore",
            Self::Score => "score",
            Self::Reserve => "reserve",
            Self::Permit => "permit",
            Self::PreBind => "preBind",
            Self::Bind => "bind",
            Self::PostBind => "postBind",
            Self::PodGroupPostFilter => "podGroupPostFilter",
            Self::PlacementFeasible => "placementFeasible",
            Self::GroupPermit => "groupPermit",
        }
    }

    /// The interface name, as upstream's messages name it.
    pub fn interface(&self) -> &'static str {
        match self {
            Self::PreEnqueue => "PreEnqueuePlugin",
            Self::QueueSort => "QueueSortPlugin",
            Self::PreFilter => "PreFilterPlugin",
            Self::Filter => "FilterPlugin",
            Self::PostFilter => "PostFilterPlugin",
            Self::PreScore => "PreScorePlugin",
            Self::Score => "ScorePlugin",
            Self::Reserve => "ReservePlugin",
            Self::Permit => "PermitPlugin",
            Self::PreBind => "PreBindPlugin",
            Self::Bind => "BindPlugin",
            Self::PostBind => "PostBindPlugin",
            Self::PodGroupPostFilter => "PodGroupPostFilterPlugin",
            Self::PlacementFeasible => "PlacementFeasiblePlugin",
            Self::GroupPermit => "GroupPermitPlugin",
        }
    }
}
