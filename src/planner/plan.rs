//! The `plan` view: for every pending gang, what every node group could do for it.

use std::sync::Arc;

use serde::Serialize;

use crate::model::{Gang, GangRef, NodeGroupId, NodeGroupSpec};

use super::explain::Reason;
use super::fit::fit_counts;
use super::shape::NodeShape;

/// For every pending gang, what each node group could do for it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Plan {
    /// Pending gangs, by priority (higher first), then age (older first), then id.
    pub gangs: Vec<GangPlan>,
}

/// One pending gang across all groups.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GangPlan {
    /// The gang.
    pub gang: GangRef,
    /// Its priority.
    pub priority: i32,
    /// Its `minCount`.
    pub min_count: u32,
    /// Members already bound.
    pub bound: u32,
    /// Members not yet bound.
    pub unbound: u32,
    /// The group that hosts the gang whole within its headroom with the fewest nodes (ties by
    /// group order), if any.
    pub best: Option<NodeGroupId>,
    /// One entry per group, in the order given.
    pub groups: Vec<GroupOption>,
}

/// What one group could do for one gang.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GroupOption {
    /// The group.
    pub group: NodeGroupId,
    /// Nodes that could still be added (`max_size - target`).
    pub headroom: u32,
    /// Fits or why not.
    #[serde(flatten)]
    pub outcome: FitOutcome,
}

/// Whether a group can host a gang.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(
    tag = "status",
    rename_all = "camelCase",
    rename_all_fields = "camelCase"
)]
pub enum FitOutcome {
    /// The group's nodes can host the gang.
    Fits {
        /// Fresh nodes for every unbound member.
        nodes_all: u32,
        /// Fresh nodes to reach `minCount`.
        nodes_min: u32,
        /// `nodes_all` fits the headroom.
        fits_headroom: bool,
        /// `nodes_min` fits the headroom.
        min_fits_headroom: bool,
    },
    /// The group's nodes cannot host the gang.
    Unfittable {
        /// Why.
        reason: Reason,
        /// `reason` as a sentence.
        message: String,
    },
}

/// Plans every pending gang ([`Gang::is_pending`]) against every group: `groups` holds each
/// group's spec, its shape (`None` when it has no template) and its current target size.
pub fn plan(gangs: &[Arc<Gang>], groups: &[(&NodeGroupSpec, Option<NodeShape>, u32)]) -> Plan {
    let mut pending: Vec<&Gang> = gangs
        .iter()
        .map(AsRef::as_ref)
        .filter(|g: &&Gang| g.is_pending())
        .collect();
    pending.sort_by(|a, b| a.admission_order(b));
    let gangs = pending
        .into_iter()
        .map(|gang| {
            let options: Vec<GroupOption> = groups
                .iter()
                .map(|(spec, shape, target)| option(gang, spec, shape.as_ref(), *target))
                .collect();
            let best = options
                .iter()
                .filter_map(|o| match o.outcome {
                    FitOutcome::Fits {
                        nodes_all,
                        fits_headroom: true,
                        ..
                    } => Some((nodes_all, &o.group)),
                    _ => None,
                })
                .min_by_key(|(nodes, _)| *nodes)
                .map(|(_, g)| g.clone());
            let unbound = gang.unbound().count();
            GangPlan {
                gang: gang.id.clone(),
                priority: gang.priority,
                min_count: gang.min_count,
                bound: gang.bound_count(),
                unbound: u32::try_from(unbound).unwrap_or(u32::MAX),
                best,
                groups: options,
            }
        })
        .collect();
    Plan { gangs }
}

fn option(
    gang: &Gang,
    spec: &NodeGroupSpec,
    shape: Option<&NodeShape>,
    target: u32,
) -> GroupOption {
    let headroom = spec.max_size.saturating_sub(target);
    let result = shape.map_or(Err(Reason::NoTemplate), |s| fit_counts(gang, s));
    let outcome = match result {
        Ok((nodes_all, nodes_min)) => FitOutcome::Fits {
            nodes_all,
            nodes_min,
            fits_headroom: nodes_all <= headroom,
            min_fits_headroom: nodes_min <= headroom,
        },
        Err(reason) => FitOutcome::Unfittable {
            message: reason.to_string(),
            reason,
        },
    };
    GroupOption {
        group: spec.id.clone(),
        headroom,
        outcome,
    }
}
