//! Capacity planning (`gangscaler plan --simulate`): for every gang *shape* and node group,
//! the fresh nodes a whole gang needs and the largest `minCount` the group's `maxSize` (and its
//! headroom) admits. The same fitting as [`fit()`](super::fit()) and admission: members are
//! checked against a fresh node with every predicate and limit, and identical members pack
//! `per_node` to a node.
//!
//! A [`GangShape`] is what one gang asks of a group, without its identity: the demand of each
//! member (all members identical), how many members, `minCount` and the topology key. Gangs
//! with the same shape collapse into one ([`collapse`]); gangs whose members differ are not a
//! single shape and are reported as [`Skipped`] ([`shapes_of`]).
//!
//! Pure: no I/O, no clock. Depends on `model` only.

use std::borrow::Borrow;

use serde::Serialize;

use crate::model::{Gang, NodeGroupId, NodeGroupSpec, PodDemand};

use super::explain::Reason;
use super::fit::{check_topology, per_node};
use super::shape::NodeShape;

/// What one gang asks of a node group: `members` identical members, of which `min_count` must
/// run together, all in one domain of `topology_key` when set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GangShape {
    /// The shape's name: the first gang (or trace entry) that has it.
    pub name: String,
    /// Every gang (or trace entry) with this shape, in input order.
    pub gangs: Vec<String>,
    /// The member that reasons name (`pod ... requests ...`).
    #[serde(skip)]
    pub member: String,
    /// What each member needs from a node.
    pub demand: PodDemand,
    /// Members of the gang (at least `min_count`).
    pub members: u32,
    /// Members that must run together.
    pub min_count: u32,
    /// All members must share one value of this node label, when set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub topology_key: Option<String>,
}

impl GangShape {
    /// A shape named `name`: `members` members each needing `demand`, `min_count` of them
    /// together. `member` is the pod name reasons use. `members` is raised to `min_count` if
    /// lower, since the gang cannot run with fewer.
    pub fn new(
        name: impl Into<String>,
        member: impl Into<String>,
        demand: PodDemand,
        members: u32,
        min_count: u32,
        topology_key: Option<String>,
    ) -> Self {
        let name = name.into();
        Self {
            gangs: vec![name.clone()],
            name,
            member: member.into(),
            demand,
            members: members.max(min_count),
            min_count,
            topology_key,
        }
    }

    /// Whether `other` asks the same of every group (names aside).
    fn same_as(&self, other: &Self) -> bool {
        self.demand == other.demand
            && self.members == other.members
            && self.min_count == other.min_count
            && self.topology_key == other.topology_key
    }
}

/// A gang that is not one shape.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Skipped {
    /// The gang, `namespace/name`.
    pub gang: String,
    /// Why it has no shape.
    pub reason: String,
}

/// Merges shapes that ask the same of every group, keeping the first one's name and position
/// and appending the others' gangs to it.
pub fn collapse(shapes: impl IntoIterator<Item = GangShape>) -> Vec<GangShape> {
    let mut out: Vec<GangShape> = Vec::new();
    for shape in shapes {
        match out.iter_mut().find(|s| s.same_as(&shape)) {
            Some(s) => s.gangs.extend(shape.gangs),
            None => out.push(shape),
        }
    }
    out
}

/// The shapes of the pending gangs ([`Gang::is_pending`]) among `gangs`, sorted by gang id,
/// collapsed ([`collapse`]). A gang's members are all its pods, bound or not (at least
/// `minCount`); a gang without pods, or whose pods need different things, is [`Skipped`].
pub fn shapes_of<'a, G: Borrow<Gang> + 'a>(
    gangs: impl IntoIterator<Item = &'a G>,
) -> (Vec<GangShape>, Vec<Skipped>) {
    let mut pending: Vec<&Gang> = gangs
        .into_iter()
        .map(Borrow::borrow)
        .filter(|g| g.is_pending())
        .collect();
    pending.sort_by(|a, b| a.id.cmp(&b.id));
    let mut shapes = Vec::new();
    let mut skipped = Vec::new();
    for gang in pending {
        match shape_of(gang) {
            Ok(shape) => shapes.push(shape),
            Err(reason) => skipped.push(Skipped {
                gang: gang.id.to_string(),
                reason: reason.to_owned(),
            }),
        }
    }
    (collapse(shapes), skipped)
}

fn shape_of(gang: &Gang) -> Result<GangShape, &'static str> {
    let mut members = gang.members.iter();
    let Some(first) = members.next() else {
        return Err("no member pods yet");
    };
    let demand: &PodDemand = &first.demand;
    if !members.all(|m| {
        let other: &PodDemand = &m.demand;
        other == demand
    }) {
        return Err(
            "members request different resources, so the gang is not one shape; \
                    `gangscaler plan` packs it member by member",
        );
    }
    let count = u32::try_from(gang.members.len()).unwrap_or(u32::MAX);
    Ok(GangShape::new(
        gang.id.to_string(),
        first.pod.clone(),
        demand.clone(),
        count,
        gang.min_count,
        gang.topology_key.clone(),
    ))
}

/// Every shape against every group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Capacity {
    /// One entry per shape, in the order given.
    pub shapes: Vec<ShapeCapacity>,
}

/// One shape against every group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ShapeCapacity {
    /// The shape.
    pub shape: GangShape,
    /// One entry per group, in the order given.
    pub groups: Vec<GroupCapacity>,
}

/// One shape against one group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GroupCapacity {
    /// The group.
    pub group: NodeGroupId,
    /// Its maximum size.
    pub max_size: u32,
    /// Its current target size.
    pub target: u32,
    /// Nodes that could still be added (`max_size - target`).
    pub headroom: u32,
    /// The thresholds, or why the group cannot host the shape at all.
    #[serde(flatten)]
    pub outcome: Threshold,
}

/// Whether a group's nodes can host a shape, and up to what `minCount`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(
    tag = "status",
    rename_all = "camelCase",
    rename_all_fields = "camelCase"
)]
pub enum Threshold {
    /// Members fit the group's nodes.
    Fits {
        /// Members one fresh node holds (the binding limit: resources, pod slots, attach
        /// limits).
        per_node: u64,
        /// Fresh nodes for every member.
        nodes_all: u32,
        /// Fresh nodes for `minCount` members.
        nodes_min: u32,
        /// The largest `minCount` of this member shape that `max_size` fresh nodes hold
        /// (`max_size * per_node`): admission of a gang from an empty group.
        largest_min_count_at_max: u64,
        /// The largest `minCount` the headroom holds (`headroom * per_node`): admission now.
        largest_min_count_at_headroom: u64,
        /// `nodes_all <= max_size`.
        fits_max_size: bool,
        /// `nodes_min <= max_size`.
        min_fits_max_size: bool,
        /// `nodes_all <= headroom`.
        fits_headroom: bool,
        /// `nodes_min <= headroom`.
        min_fits_headroom: bool,
    },
    /// No member fits a fresh node of the group (or the group lacks the topology label or a
    /// template), so no `minCount` is admissible.
    Unfittable {
        /// Why.
        reason: Reason,
        /// `reason` as a sentence.
        message: String,
    },
}

/// Every shape against every group: `groups` holds each group's spec, its shape (`None` when it
/// has no template) and its current target size, as for [`plan()`](super::plan()).
pub fn capacity(
    shapes: &[GangShape],
    groups: &[(&NodeGroupSpec, Option<NodeShape>, u32)],
) -> Capacity {
    let shapes = shapes
        .iter()
        .map(|shape| ShapeCapacity {
            shape: shape.clone(),
            groups: groups
                .iter()
                .map(|(spec, node, target)| {
                    threshold(shape, &spec.id, spec.max_size, node.as_ref(), *target)
                })
                .collect(),
        })
        .collect();
    Capacity { shapes }
}

/// `shape` against one group of at most `max_size` nodes, `target` of them already there.
pub fn threshold(
    shape: &GangShape,
    group: &NodeGroupId,
    max_size: u32,
    node: Option<&NodeShape>,
    target: u32,
) -> GroupCapacity {
    let headroom = max_size.saturating_sub(target);
    let per = node.ok_or(Reason::NoTemplate).and_then(|node| {
        check_topology(shape.topology_key.as_deref(), node)?;
        per_node(&shape.member, &shape.demand, node)
    });
    let outcome = match per {
        Ok(per) => {
            let nodes =
                |members: u32| u32::try_from(u64::from(members).div_ceil(per)).unwrap_or(u32::MAX);
            let (nodes_all, nodes_min) = (nodes(shape.members), nodes(shape.min_count));
            Threshold::Fits {
                per_node: per,
                nodes_all,
                nodes_min,
                largest_min_count_at_max: u64::from(max_size).saturating_mul(per),
                largest_min_count_at_headroom: u64::from(headroom).saturating_mul(per),
                fits_max_size: nodes_all <= max_size,
                min_fits_max_size: nodes_min <= max_size,
                fits_headroom: nodes_all <= headroom,
                min_fits_headroom: nodes_min <= headroom,
            }
        }
        Err(reason) => Threshold::Unfittable {
            message: reason.to_string(),
            reason,
        },
    };
    GroupCapacity {
        group: group.clone(),
        max_size,
        target,
        headroom,
        outcome,
    }
}
