//! Why a gang cannot be placed on a node group: one [`Reason`] enum shared by the CLI, the
//! audit log and the metrics.

use std::fmt;

use serde::Serialize;

use crate::model::quantity::Quantity;

/// Why a gang (or pod) cannot be placed on a node group, or not now.
///
/// Infeasible is not an error: the planner returns these alongside its plans. [`Reason::kind`]
/// is a bounded metric label; `Display` names the numbers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(
    tag = "kind",
    rename_all = "snake_case",
    rename_all_fields = "camelCase"
)]
pub enum Reason {
    /// The group has no template node (no capacity), so its nodes' shape is unknown.
    NoTemplate,
    /// The gang has no unbound member to place.
    NothingToPlace,
    /// One pod requests more of a resource than a whole fresh node offers. CPU is in millicores,
    /// memory and ephemeral storage in bytes, everything else in whole units.
    PodTooLarge {
        /// Pod name.
        pod: String,
        /// Resource name (`cpu`, `memory`, `ephemeral-storage`, `pods`, or an extended
        /// resource).
        resource: String,
        /// What the pod requests.
        requested: u64,
        /// What one fresh node offers.
        allocatable: u64,
    },
    /// A `NoSchedule` or `NoExecute` taint of the group's nodes that the pod does not tolerate.
    Untolerated {
        /// Pod name.
        pod: String,
        /// The taint, as `key=value:Effect`.
        taint: String,
    },
    /// The pod's `nodeSelector` does not match the group's node labels.
    SelectorMismatch {
        /// Pod name.
        pod: String,
        /// First label key that does not match.
        key: String,
    },
    /// None of the pod's required node-affinity terms matches the group's node labels.
    AffinityMismatch {
        /// Pod name.
        pod: String,
        /// Key of the first failing requirement of the first term (empty for an empty term,
        /// which matches no node).
        key: String,
    },
    /// The gang requires one domain of a topology label the group's nodes do not carry.
    TopologyMissing {
        /// The topology label key.
        key: String,
    },
    /// One pod attaches more volumes of a CSI driver than a node's attach limit allows.
    CsiLimit {
        /// Pod name.
        pod: String,
        /// CSI driver.
        driver: String,
        /// Volumes the pod attaches.
        volumes: u64,
        /// Attach limit per node.
        limit: u64,
    },
    /// A pod's volume claim has no resolvable CSI driver (the claim, its bound volume or its
    /// StorageClass does not exist): no node can host the pod until it resolves, and counting
    /// its volumes toward no driver would under-count the nodes the gang needs.
    UnresolvedClaim {
        /// Pod name.
        pod: String,
        /// The claim's name.
        claim: String,
    },
    /// The gang fits the group's nodes, but not in the nodes still addable under max size.
    InsufficientHeadroom {
        /// Nodes needed to place every unbound member (after in-flight nodes).
        nodes_all: u32,
        /// Nodes needed to reach `minCount` (after in-flight nodes).
        nodes_min: u32,
        /// Nodes that could still be added.
        headroom: u32,
    },
    /// A composite (CompositePodGroup) cannot have `min_group_count` of its children each
    /// placed whole on the node groups' headroom, so none of them gets a node.
    CompositeShort {
        /// Children that must form.
        min_group_count: u32,
        /// Children already formed.
        formed: u32,
        /// Children whose nodes are already requested.
        in_flight: u32,
        /// Pending children that could be placed whole now.
        placeable: u32,
        /// Why the first child that could not be placed could not, e.g. `ml/workers: no node
        /// group can host it whole within its headroom`.
        detail: String,
    },
}

impl Reason {
    /// A bounded label for metrics and filtering, e.g. `pod_too_large`.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::NoTemplate => "no_template",
            Self::NothingToPlace => "nothing_to_place",
            Self::PodTooLarge { .. } => "pod_too_large",
            Self::Untolerated { .. } => "untolerated",
            Self::SelectorMismatch { .. } => "selector_mismatch",
            Self::AffinityMismatch { .. } => "affinity_mismatch",
            Self::TopologyMissing { .. } => "topology_missing",
            Self::CsiLimit { .. } => "csi_limit",
            Self::UnresolvedClaim { .. } => "unresolved_claim",
            Self::InsufficientHeadroom { .. } => "insufficient_headroom",
            Self::CompositeShort { .. } => "composite_short",
        }
    }
}

/// Formats an amount of `resource` in its usual unit.
fn amount(resource: &str, value: u64) -> String {
    match resource {
        "cpu" => Quantity::from_milli(value).to_decimal_string(),
        "memory" | "ephemeral-storage" => Quantity::from_units(value).to_binary_string(),
        _ => value.to_string(),
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoTemplate => f.write_str("node group has no template node"),
            Self::NothingToPlace => f.write_str("gang has no unbound member to place"),
            Self::PodTooLarge {
                pod,
                resource,
                requested,
                allocatable,
            } => write!(
                f,
                "pod {pod} requests {} {resource} but a node offers {}",
                amount(resource, *requested),
                amount(resource, *allocatable)
            ),
            Self::Untolerated { pod, taint } => {
                write!(f, "pod {pod} does not tolerate taint {taint}")
            }
            Self::SelectorMismatch { pod, key } => {
                write!(
                    f,
                    "pod {pod} node selector {key} does not match the node labels"
                )
            }
            Self::AffinityMismatch { pod, key } => {
                if key.is_empty() {
                    write!(f, "pod {pod} node affinity has an empty term")
                } else {
                    write!(
                        f,
                        "pod {pod} node affinity on {key} does not match the node labels"
                    )
                }
            }
            Self::TopologyMissing { key } => {
                write!(
                    f,
                    "gang requires topology label {key} which the nodes do not carry"
                )
            }
            Self::CsiLimit {
                pod,
                driver,
                volumes,
                limit,
            } => write!(
                f,
                "pod {pod} attaches {volumes} volumes of {driver} but a node allows {limit}"
            ),
            Self::UnresolvedClaim { pod, claim } => write!(
                f,
                "pod {pod} uses persistentvolumeclaim {claim} whose CSI driver cannot be resolved"
            ),
            Self::InsufficientHeadroom {
                nodes_all,
                nodes_min,
                headroom,
            } => write!(
                f,
                "gang needs {nodes_all} nodes ({nodes_min} for minCount) but {headroom} can be added"
            ),
            Self::CompositeShort {
                min_group_count,
                formed,
                in_flight,
                placeable,
                detail,
            } => write!(
                f,
                "composite needs {min_group_count} child groups whole but has {formed} formed, \
                 {in_flight} with nodes requested and {placeable} placeable now ({detail})"
            ),
        }
    }
}
