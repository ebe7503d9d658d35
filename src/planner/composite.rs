//! Admission of composites (CompositePodGroups with a gang policy) across node groups, inside
//! one `NodeGroupIncreaseSize` call.
//!
//! gangscaler is the provider of every node group, so when CA asks for one group (the *asked*
//! group) for the pods of one child, the composite's other children can get their nodes on
//! other groups in the same decision: a cross-group atomic scale-up, which CA's own atomic
//! scale-up (one node group) cannot express.
//!
//! # Rules
//!
//! A composite is considered when it has not formed ([`Composite::is_formed`]) and one of its
//! pending children fits the asked group's nodes. Composites are taken by priority (higher
//! first), then age (older first), then id; each consumes the headroom (`max_size - target`)
//! of every group it takes, so two composites never count the same room.
//!
//! 1. Children that formed count toward `minGroupCount`, and so do children with nodes already
//!    requested (in flight on any group): they need nothing now.
//! 2. Every other pending child is placed *whole* (nodes for every unbound member) on one
//!    group: the asked group when its nodes fit the child and its headroom left holds it,
//!    else the group that needs the fewest nodes, ties by configuration order. A group without
//!    a template, or whose nodes cannot host a member, is not a candidate.
//! 3. With a composite topology key, every child is placed in the asked group's domain: only
//!    groups whose nodes carry the same value of that label are candidates (a group's nodes
//!    share one domain, as for a gang's own topology key), and a child's own topology key must
//!    hold on its group too.
//! 4. A composite whose every pending child already has nodes requested is *covered*: if CA
//!    asks again for its pods (CA 1.36 counts no upcoming nodes for a group it did not scale
//!    up itself, so it does not see the other groups' shares coming), `Strict` adds nothing
//!    for it when the group's target holds its in-flight nodes: only what ungrouped pods need,
//!    and it rejects the increase when nothing else needs it ([`combine`]).
//! 5. All or nothing: the placements stand only when formed + in flight + placed reaches
//!    `minGroupCount` and at least one child lands on the asked group (the increase CA asked
//!    for carries the decision; a composite none of whose children fits the asked group's
//!    headroom waits for CA to ask for a group that does). Otherwise the composite gets no node
//!    on any group and is deferred with [`Reason::CompositeShort`].
//!
//! The children of every composite in the view, admitted or not, are left out of the
//! per-group admission ([`admit`](super::admit())): a child is never scaled up on its own.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde::Serialize;

use crate::model::{Composite, Gang, GangRef, NodeGroupId};

use super::decision::{AdmittedGang, DeferredGang, Extent};
use super::explain::Reason;
use super::fit::fit_counts;
use super::shape::NodeShape;

mod decisions;

pub use decisions::combine;

/// One node group as composite admission sees it.
#[derive(Debug, Clone, Copy)]
pub struct GroupSlot<'a> {
    /// The group.
    pub id: &'a NodeGroupId,
    /// Its node shape; `None` without a template.
    pub shape: Option<&'a NodeShape>,
    /// Its current target size.
    pub target: u32,
    /// Its maximum size.
    pub max_size: u32,
}

impl GroupSlot<'_> {
    /// Nodes that can still be added.
    pub fn headroom(&self) -> u32 {
        self.max_size.saturating_sub(self.target)
    }
}

/// Everything composite admission depends on.
#[derive(Debug, Clone, Copy)]
pub struct CompositeInput<'a> {
    /// The group CA asked to grow.
    pub asked: &'a NodeGroupId,
    /// Every node group, in configuration order (the asked one among them).
    pub groups: &'a [GroupSlot<'a>],
    /// The composites of the view.
    pub composites: &'a [Composite],
    /// The gangs of the view, sorted by id.
    pub gangs: &'a [Arc<Gang>],
    /// Gangs with nodes requested and not yet used, with the group they were requested on.
    pub in_flight: &'a BTreeMap<GangRef, (NodeGroupId, u32)>,
}

/// A composite admitted in this decision, with the nodes each group adds for it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CompositeAdmission {
    /// The composite.
    pub composite: GangRef,
    /// Its priority.
    pub priority: i32,
    /// Its `minGroupCount`.
    pub min_group_count: u32,
    /// Children already formed.
    pub formed: u32,
    /// Children whose nodes were requested earlier.
    pub in_flight: u32,
    /// The topology domain (label key and value) all children were placed in, when the
    /// composite has a topology key.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub domain: Option<(String, String)>,
    /// The children placed now, per group, in configuration order.
    pub shares: Vec<(NodeGroupId, Vec<AdmittedGang>)>,
}

impl CompositeAdmission {
    /// Nodes this composite adds on `group`.
    pub fn nodes_on(&self, group: &NodeGroupId) -> u32 {
        self.shares
            .iter()
            .filter(|(g, _)| g == group)
            .flat_map(|(_, children)| children)
            .map(|c| c.nodes)
            .sum()
    }
}

/// A composite that gets no node in this decision.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CompositeDeferral {
    /// The composite.
    pub composite: GangRef,
    /// Its priority.
    pub priority: i32,
    /// Why ([`Reason::CompositeShort`]).
    pub reason: Reason,
}

/// What composite admission decided.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CompositePlan {
    /// Admitted composites, in admission order.
    pub admitted: Vec<CompositeAdmission>,
    /// Composites considered and deferred, in admission order.
    pub deferred: Vec<CompositeDeferral>,
    /// Composites considered whose every pending child already has its nodes requested, with
    /// the nodes in flight for them on the asked group.
    pub covered: Vec<(GangRef, u32)>,
    /// Every child of every composite in the view: the per-group admission skips them.
    #[serde(skip)]
    pub children: BTreeSet<GangRef>,
}

impl CompositePlan {
    /// Nodes the admitted composites add on `group`.
    pub fn nodes_on(&self, group: &NodeGroupId) -> u32 {
        self.admitted.iter().map(|a| a.nodes_on(group)).sum()
    }
}

/// Decides the composites of one increase (rules in the module docs). Pure.
pub fn place_composites(input: &CompositeInput<'_>) -> CompositePlan {
    let mut plan = CompositePlan {
        children: input
            .composites
            .iter()
            .flat_map(|c| c.children.iter().cloned())
            .collect(),
        ..CompositePlan::default()
    };
    let Some(asked) = input.groups.iter().find(|g| g.id == input.asked) else {
        return plan;
    };
    let Some(asked_shape) = asked.shape else {
        return plan;
    };
    let mut left: Vec<u32> = input.groups.iter().map(GroupSlot::headroom).collect();
    let mut order: Vec<&Composite> = input
        .composites
        .iter()
        .filter(|c| !c.is_formed(input.gangs))
        .collect();
    order.sort_by(|a, b| {
        b.priority
            .cmp(&a.priority)
            .then_with(|| a.created_unix.cmp(&b.created_unix))
            .then_with(|| a.id.cmp(&b.id))
    });
    for composite in order {
        let children = children_of(composite, input.gangs);
        if !hosts_a_pending_child(&children, asked_shape) {
            continue;
        }
        match place_one(input, composite, &children, asked_shape, &left) {
            Ok((admission, used)) => {
                left = used;
                plan.admitted.push(admission);
            }
            Err(Some(reason)) => plan.deferred.push(CompositeDeferral {
                composite: composite.id.clone(),
                priority: composite.priority,
                reason,
            }),
            // Every pending child already has its nodes on the way.
            Err(None) => {
                let here: u32 = composite
                    .children
                    .iter()
                    .filter_map(|c| input.in_flight.get(c))
                    .filter(|(g, _)| g == input.asked)
                    .map(|(_, n)| *n)
                    .sum();
                plan.covered.push((composite.id.clone(), here));
            }
        }
    }
    plan
}

/// The child gangs of `composite` found in `gangs` (sorted by id).
fn children_of<'g>(composite: &Composite, gangs: &'g [Arc<Gang>]) -> Vec<&'g Gang> {
    composite
        .children
        .iter()
        .filter_map(|id| {
            let i = gangs.binary_search_by(|g| g.id.cmp(id)).ok()?;
            Some(gangs[i].as_ref())
        })
        .collect()
}

/// Whether a pending child among `children` fits a node of `shape`: only then does an
/// increase of that group consider the composite.
fn hosts_a_pending_child(children: &[&Gang], shape: &NodeShape) -> bool {
    children
        .iter()
        .any(|g| g.is_pending() && fit_counts(g, shape).is_ok())
}

/// Whether an increase of the group of `shape` considers any composite: one that has not
/// formed has a pending child (in `gangs`, sorted by id) that fits the group's nodes. Only
/// then may the decision take shares of other groups (and need their target sizes).
pub fn considers_composites(
    composites: &[Composite],
    gangs: &[Arc<Gang>],
    shape: &NodeShape,
) -> bool {
    composites
        .iter()
        .filter(|c| !c.is_formed(gangs))
        .any(|c| hosts_a_pending_child(&children_of(c, gangs), shape))
}

/// A topology domain: the label key and the value every child's group must carry.
type Domain = (String, String);

/// Places one composite's pending children on `left`; returns the admission and the headroom
/// left after it, or the reason it gets nothing (`None` when it needs nothing).
fn place_one(
    input: &CompositeInput<'_>,
    composite: &Composite,
    children: &[&Gang],
    asked_shape: &NodeShape,
    left: &[u32],
) -> Result<(CompositeAdmission, Vec<u32>), Option<Reason>> {
    let formed = count(children.iter().filter(|g| g.is_formed()));
    let has_nodes = |g: &Gang| input.in_flight.get(&g.id).is_some_and(|(_, n)| *n > 0);
    let pending = children.iter().copied().filter(|g| g.is_pending());
    let in_flight = count(pending.clone().filter(|g| has_nodes(g)));
    let to_place: Vec<&Gang> = pending.filter(|g| !has_nodes(g)).collect();
    if to_place.is_empty() {
        return Err(None);
    }
    let short = |placeable: u32, detail: String| {
        Some(Reason::CompositeShort {
            min_group_count: composite.min_group_count,
            formed,
            in_flight,
            placeable,
            detail,
        })
    };
    let domain = domain_of(composite, asked_shape, input.asked).map_err(|why| short(0, why))?;
    let mut left = left.to_vec();
    let mut shares: BTreeMap<usize, Vec<AdmittedGang>> = BTreeMap::new();
    let mut first_miss: Option<String> = None;
    for child in &to_place {
        match best_group(input, child, domain.as_ref(), &left) {
            Ok((i, all, min)) => {
                left[i] -= all;
                shares.entry(i).or_default().push(AdmittedGang {
                    gang: child.id.clone(),
                    priority: child.priority,
                    extent: Extent::Whole,
                    nodes: all,
                    idle: 0,
                    nodes_all: all,
                    nodes_min: min,
                    in_flight: 0,
                    repair_of: None,
                    spread: Vec::new(),
                });
            }
            Err(why) => {
                first_miss.get_or_insert_with(|| format!("child {}: {why}", child.id));
            }
        }
    }
    let placed = count(shares.values().flatten());
    if formed + in_flight + placed < composite.min_group_count {
        let detail =
            first_miss.unwrap_or_else(|| format!("{} children in all", composite.children.len()));
        return Err(short(placed, detail));
    }
    let asked_index = input.groups.iter().position(|g| g.id == input.asked);
    if !asked_index.is_some_and(|i| shares.contains_key(&i)) {
        let why = format!(
            "no child fits node group {}'s headroom; waiting for an increase of a group that hosts one",
            input.asked
        );
        return Err(short(placed, why));
    }
    let shares = shares
        .into_iter()
        .map(|(i, children)| (input.groups[i].id.clone(), children))
        .collect();
    Ok((
        CompositeAdmission {
            composite: composite.id.clone(),
            priority: composite.priority,
            min_group_count: composite.min_group_count,
            formed,
            in_flight,
            domain,
            shares,
        },
        left,
    ))
}

/// The domain every child must be placed in: the asked group's value of the composite's
/// topology key (`None` without a key), or why the asked group has none.
fn domain_of(
    composite: &Composite,
    asked_shape: &NodeShape,
    asked: &NodeGroupId,
) -> Result<Option<Domain>, String> {
    let Some(key) = &composite.topology_key else {
        return Ok(None);
    };
    match asked_shape.labels().get(key) {
        Some(value) => Ok(Some((key.clone(), value.clone()))),
        None => Err(format!(
            "node group {asked} carries no topology label {key}"
        )),
    }
}

/// The group `child` goes to whole (rule 2 of the module docs): its index and the child's
/// node counts there, or why no group in `domain` can take it. A group whose nodes fit but
/// whose headroom is short says more than a group whose nodes cannot host the child at all.
fn best_group(
    input: &CompositeInput<'_>,
    child: &Gang,
    domain: Option<&Domain>,
    left: &[u32],
) -> Result<(usize, u32, u32), String> {
    let mut best: Option<(usize, u32, u32)> = None;
    let mut short_of_room: Option<String> = None;
    let mut why: Option<String> = None;
    for (i, slot) in input.groups.iter().enumerate() {
        let Some(shape) = slot.shape else { continue };
        if let Some((key, value)) = domain
            && shape.labels().get(key) != Some(value)
        {
            continue;
        }
        let (all, min) = match fit_counts(child, shape) {
            Ok(counts) => counts,
            Err(reason) => {
                why.get_or_insert_with(|| format!("node group {}: {reason}", slot.id));
                continue;
            }
        };
        if all > left[i] {
            short_of_room.get_or_insert_with(|| {
                format!(
                    "node group {} has headroom {} for {all} nodes",
                    slot.id, left[i]
                )
            });
            continue;
        }
        let better = best.is_none_or(|(b, b_all, _)| {
            let asked_best = input.groups[b].id == input.asked;
            !asked_best && (slot.id == input.asked || all < b_all)
        });
        if better {
            best = Some((i, all, min));
        }
    }
    best.ok_or_else(|| {
        short_of_room.or(why).unwrap_or_else(|| match domain {
            Some((k, v)) => format!("no node group in domain {k}={v}"),
            None => "no node group has a template".to_owned(),
        })
    })
}

impl CompositePlan {
    /// The deferred composites as the per-group admission lists them
    /// ([`AdmissionInput::deferred_composites`](super::AdmissionInput::deferred_composites)).
    pub fn deferred_gangs(&self) -> Vec<DeferredGang> {
        self.deferred
            .iter()
            .map(|d| DeferredGang {
                gang: d.composite.clone(),
                priority: d.priority,
                in_flight: 0,
                reason: d.reason.clone(),
            })
            .collect()
    }
}

/// What the `plan` command shows of one composite that has not formed: how it would be placed
/// if CA asked for the first group (in configuration order) that can carry it, or why no
/// group can.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CompositePreview {
    /// The composite.
    pub composite: GangRef,
    /// Its `minGroupCount`.
    pub min_group_count: u32,
    /// Its priority.
    pub priority: i32,
    /// Its children.
    pub children: Vec<GangRef>,
    /// The placement, when one exists.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub admission: Option<CompositeAdmission>,
    /// Why no group can carry it, when none can.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<Reason>,
}

/// Every composite of `composites` that has not formed, each against the whole headroom of
/// `groups` (composites do not compete here, as gangs do not in [`plan`](super::plan())). Pure.
pub fn preview(
    composites: &[Composite],
    gangs: &[Arc<Gang>],
    groups: &[GroupSlot<'_>],
    in_flight: &BTreeMap<GangRef, (NodeGroupId, u32)>,
) -> Vec<CompositePreview> {
    let mut out = Vec::new();
    for c in composites.iter().filter(|c| !c.is_formed(gangs)) {
        let mut admission = None;
        let mut reason = None;
        for slot in groups {
            let plan = place_composites(&CompositeInput {
                asked: slot.id,
                groups,
                composites: std::slice::from_ref(c),
                gangs,
                in_flight,
            });
            if let Some(a) = plan.admitted.into_iter().next() {
                admission = Some(a);
                break;
            }
            if let Some(d) = plan.deferred.into_iter().next() {
                reason.get_or_insert(d.reason);
            }
        }
        let reason = if admission.is_some() {
            None
        } else {
            Some(reason.unwrap_or(Reason::CompositeShort {
                min_group_count: c.min_group_count,
                formed: c.formed_children(gangs),
                in_flight: 0,
                placeable: 0,
                detail: "no node group can host any of its pending children".to_owned(),
            }))
        };
        out.push(CompositePreview {
            composite: c.id.clone(),
            min_group_count: c.min_group_count,
            priority: c.priority,
            children: c.children.clone(),
            admission,
            reason,
        });
    }
    out
}

fn count<T>(items: impl Iterator<Item = T>) -> u32 {
    u32::try_from(items.count()).unwrap_or(u32::MAX)
}
