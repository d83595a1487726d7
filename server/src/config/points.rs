//! The extension points of a scheduling profile, in one enum: named by
//! the configuration, run by the framework, labelled in the metrics and
//! mapped to the extender protocol (`extender::connection`), each from the
//! methods here. Adding a point starts here.

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
    /// PreFilter's AddPod extension (a phase of PreFilter, metered apart).
    PreFilterExtensionAddPod,
    /// PreFilter's RemovePod extension (a phase of PreFilter, metered
    /// apart).
    PreFilterExtensionRemovePod,
    /// Score's NormalizeScore extension (a phase of Score, metered apart).
    ScoreExtensionNormalize,
    /// Reserve's undo (a phase of Reserve, metered apart).
    Unreserve,
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

    /// Every point, phases included.
    pub const EVERY: [ExtensionPoint; 19] = [
        Self::PreEnqueue,
        Self::QueueSort,
        Self::PreFilter,
        Self::PreFilterExtensionAddPod,
        Self::PreFilterExtensionRemovePod,
        Self::Filter,
        Self::PostFilter,
        Self::PreScore,
        Self::Score,
        Self::ScoreExtensionNormalize,
        Self::Reserve,
        Self::Unreserve,
        Self::Permit,
        Self::PreBind,
        Self::Bind,
        Self::PostBind,
        Self::PodGroupPostFilter,
        Self::PlacementFeasible,
        Self::GroupPermit,
    ];

    /// The points upstream's `extension_point` metric label takes (and
    /// berth's, for its group points), in the metrics' slot order.
    pub const METERED: [ExtensionPoint; 16] = [
        Self::PreFilter,
        Self::Filter,
        Self::PreFilterExtensionAddPod,
        Self::PreFilterExtensionRemovePod,
        Self::PostFilter,
        Self::PreScore,
        Self::Score,
        Self::ScoreExtensionNormalize,
        Self::PreBind,
        Self::Bind,
        Self::PostBind,
        Self::Reserve,
        Self::Unreserve,
        Self::Permit,
        Self::PlacementFeasible,
        Self::PodGroupPostFilter,
    ];

    /// The point whose profile list places this one's plugins: itself, or
    /// for a phase of a point (AddPod, RemovePod, NormalizeScore,
    /// Unreserve) the point it is a phase of.
    pub fn list(self) -> ExtensionPoint {
        match self {
            Self::PreFilterExtensionAddPod | Self::PreFilterExtensionRemovePod => Self::PreFilter,
            Self::ScoreExtensionNormalize => Self::Score,
            Self::Unreserve => Self::Reserve,
            p => p,
        }
    }

    /// Its place in [`Self::METERED`] (the metrics' slot), or `None` for
    /// a point the metrics do not label.
    #[inline]
    pub fn metered_slot(self) -> Option<usize> {
        Some(match self {
            Self::PreFilter => 0,
            Self::Filter => 1,
            Self::PreFilterExtensionAddPod => 2,
            Self::PreFilterExtensionRemovePod => 3,
            Self::PostFilter => 4,
            Self::PreScore => 5,
            Self::Score => 6,
            Self::ScoreExtensionNormalize => 7,
            Self::PreBind => 8,
            Self::Bind => 9,
            Self::PostBind => 10,
            Self::Reserve => 11,
            Self::Unreserve => 12,
            Self::Permit => 13,
            Self::PlacementFeasible => 14,
            Self::PodGroupPostFilter => 15,
            Self::PreEnqueue | Self::QueueSort | Self::GroupPermit => return None,
        })
    }

    /// The `extension_point` label value, as upstream spells it.
    pub fn metric_label(self) -> &'static str {
        match self {
            Self::PreEnqueue => "PreEnqueue",
            Self::QueueSort => "QueueSort",
            Self::PreFilter => "PreFilter",
            Self::Filter => "Filter",
            Self::PreFilterExtensionAddPod => "PreFilterExtensionAddPod",
            Self::PreFilterExtensionRemovePod => "PreFilterExtensionRemovePod",
            Self::PostFilter => "PostFilter",
            Self::PreScore => "PreScore",
            Self::Score => "Score",
            Self::ScoreExtensionNormalize => "ScoreExtensionNormalize",
            Self::Reserve => "Reserve",
            Self::Unreserve => "Unreserve",
            Self::Permit => "Permit",
            Self::PreBind => "PreBind",
            Self::Bind => "Bind",
            Self::PostBind => "PostBind",
            Self::PodGroupPostFilter => "PodGroupPostFilter",
            Self::PlacementFeasible => "PlacementFeasible",
            Self::GroupPermit => "GroupPermit",
        }
    }

    /// The field name in a profile's `plugins` (a phase's is its point's).
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
            Self::PreFilterExtensionAddPod | Self::PreFilterExtensionRemovePod => "preFilter",
            Self::ScoreExtensionNormalize => "score",
            Self::Unreserve => "reserve",
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
            Self::PreFilterExtensionAddPod | Self::PreFilterExtensionRemovePod => {
                "PreFilterExtensions"
            }
            Self::ScoreExtensionNormalize => "ScoreExtensions",
            Self::Unreserve => "ReservePlugin",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::ExtensionPoint;

    /// The tables agree: every point once in EVERY, each metered point at
    /// its slot, a phase configured by its point's list.
    #[test]
    fn the_tables_agree() {
        for (i, p) in ExtensionPoint::EVERY.iter().enumerate() {
            assert!(!ExtensionPoint::EVERY[..i].contains(p), "{p:?} twice");
            assert_eq!(p.field(), p.list().field(), "{p:?}");
            assert_eq!(p.list().list(), p.list(), "{p:?}");
        }
        for (slot, p) in ExtensionPoint::METERED.iter().enumerate() {
            assert_eq!(p.metered_slot(), Some(slot), "{p:?}");
        }
        let metered = ExtensionPoint::EVERY
            .iter()
            .filter(|p| p.metered_slot().is_some())
            .count();
        assert_eq!(metered, ExtensionPoint::METERED.len());
        for p in ExtensionPoint::ALL {
            assert_eq!(p.list(), p, "a profile list is its own point");
        }
    }
}
