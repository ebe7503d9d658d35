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
//!    up itself, so it does not see the other groups' shares coming), `Strict` rejects the
//!    increase when nothing else needs it and the group's target holds its in-flight nodes
//!    ([`combine`]).
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

use super::admit::{
    AdmittedGang, CompositeShares, Decision, DeferredGang, Extent, GroupShare, Rule, Verdict,
};
use super::explain::Reason;
use super::fit::fit_counts;
use super::shape::NodeShape;

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
    let pending: Vec<&Gang> = children
        .iter()
        .copied()
        .filter(|g| g.is_pending())
        .collect();
    let in_flight = count(
        pending
            .iter()
            .filter(|g| input.in_flight.get(&g.id).is_some_and(|(_, n)| *n > 0)),
    );
    let to_place: Vec<&Gang> = pending
        .iter()
        .copied()
        .filter(|g| input.in_flight.get(&g.id).is_none_or(|(_, n)| *n == 0))
        .collect();
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
    let domain = match &composite.topology_key {
        None => None,
        Some(key) => match asked_shape.labels().get(key) {
            Some(value) => Some((key.clone(), value.clone())),
            None => {
                let why = format!("node group {} carries no topology label {key}", input.asked);
                return Err(short(0, why));
            }
        },
    };
    let mut left = left.to_vec();
    let mut shares: BTreeMap<usize, Vec<AdmittedGang>> = BTreeMap::new();
    let mut first_miss: Option<String> = None;
    for child in &to_place {
        let mut best: Option<(usize, u32, u32)> = None;
        // Why not: a group whose nodes fit but whose headroom is short says more than a
        // group whose nodes cannot host the child at all.
        let mut short_of_room: Option<String> = None;
        let mut why: Option<String> = None;
        for (i, slot) in input.groups.iter().enumerate() {
            let Some(shape) = slot.shape else { continue };
            if let Some((key, value)) = &domain
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
            let better = match best {
                None => true,
                Some((b, b_all, _)) => {
                    let asked_here = slot.id == input.asked;
                    let asked_best = input.groups[b].id == input.asked;
                    !asked_best && (asked_here || all < b_all)
                }
            };
            if better {
                best = Some((i, all, min));
            }
        }
        match best {
            Some((i, all, min)) => {
                left[i] -= all;
                shares.entry(i).or_default().push(AdmittedGang {
                    gang: child.id.clone(),
                    priority: child.priority,
                    extent: Extent::Whole,
                    nodes: all,
                    nodes_all: all,
                    nodes_min: min,
                    in_flight: 0,
                });
            }
            None => {
                first_miss.get_or_insert_with(|| {
                    let why = short_of_room.or(why).unwrap_or_else(|| match &domain {
                        Some((k, v)) => format!("no node group in domain {k}={v}"),
                        None => "no node group has a template".to_owned(),
                    });
                    format!("child {}: {why}", child.id)
                });
            }
        }
    }
    let placed = count(shares.values().flatten());
    let asked_index = input.groups.iter().position(|g| g.id == input.asked);
    let on_asked = asked_index.is_some_and(|i| shares.contains_key(&i));
    if formed + in_flight + placed < composite.min_group_count {
        let detail =
            first_miss.unwrap_or_else(|| format!("{} children in all", composite.children.len()));
        return Err(short(placed, detail));
    }
    if !on_asked {
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

/// Joins the composites admitted in `plan` to `base`, the per-group decision for the asked
/// group (computed without the composites' children, on the target raised by the composites'
/// nodes there and with CA's delta lowered by them), and gives the asked group's decision and
/// one decision per other group that takes a share (rule
/// [`Rule::CompositeShare`], CA's delta 0), in configuration order; `ca_delta` is what CA
/// asked of the asked group. Pure.
///
/// With no composite admitted, `base` is returned as is (with the target it was computed
/// on). Otherwise the asked group adds the composites' nodes plus what `base` admitted for
/// gangs or ungrouped pods (`gangs_admitted`, `ungrouped_only`); CA's delta beyond that is
/// taken to be for the composites' pods, which the composites' nodes already host.
pub fn combine(
    base: Decision,
    plan: &CompositePlan,
    groups: &[GroupSlot<'_>],
    ca_delta: u32,
) -> (Decision, Vec<Decision>) {
    let asked = base.group.clone();
    let here = plan.nodes_on(&asked);
    if plan.admitted.is_empty() || here == 0 {
        return (covered(base, plan), Vec::new());
    }
    let slot = |id: &NodeGroupId| groups.iter().find(|g| g.id == id);
    let shares: Vec<CompositeShares> = plan
        .admitted
        .iter()
        .map(|a| CompositeShares {
            composite: a.composite.clone(),
            min_group_count: a.min_group_count,
            formed: a.formed,
            in_flight: a.in_flight,
            domain: a.domain.as_ref().map(|(k, v)| format!("{k}={v}")),
            shares: a
                .shares
                .iter()
                .map(|(group, children)| GroupShare {
                    group: group.clone(),
                    target: slot(group).map_or(0, |g| g.target),
                    nodes: children.iter().map(|c| c.nodes).sum(),
                    children: children.iter().map(|c| c.gang.clone()).collect(),
                })
                .collect(),
        })
        .collect();
    let children_on = |group: &NodeGroupId| -> Vec<AdmittedGang> {
        plan.admitted
            .iter()
            .flat_map(|a| a.shares.iter())
            .filter(|(g, _)| g == group)
            .flat_map(|(_, c)| c.iter().cloned())
            .collect()
    };
    let extra = match (base.verdict, base.rule) {
        (Verdict::Accept, Rule::GangsAdmitted | Rule::UngroupedOnly) => base.applied_delta,
        _ => 0,
    };
    let target = base.target.saturating_sub(here);
    let mut admitted = children_on(&asked);
    admitted.extend(base.admitted);
    let primary = Decision {
        group: asked.clone(),
        policy: base.policy,
        verdict: Verdict::Accept,
        rule: Rule::CompositeAdmitted,
        target,
        max_size: base.max_size,
        headroom: base.max_size.saturating_sub(target),
        ca_delta,
        applied_delta: here + extra,
        capped: base.capped && extra > 0,
        gang_nodes: here + if extra > 0 { base.gang_nodes } else { 0 },
        ungrouped_nodes: base.ungrouped_nodes,
        admitted,
        deferred: base.deferred,
        covered: base.covered,
        unhostable: base.unhostable,
        reason: String::new(),
        reservation_off: None,
        composites: shares.clone(),
    };
    let primary = Decision {
        reason: composite_reason(&primary, &plan.admitted, None),
        ..primary
    };
    let companions = groups
        .iter()
        .filter(|g| g.id != &asked)
        .filter_map(|g| {
            let nodes = plan.nodes_on(g.id);
            (nodes > 0).then(|| {
                let mine: Vec<CompositeShares> = shares
                    .iter()
                    .filter(|c| c.shares.iter().any(|s| &s.group == g.id))
                    .cloned()
                    .collect();
                let d = Decision {
                    group: g.id.clone(),
                    policy: primary.policy,
                    verdict: Verdict::Accept,
                    rule: Rule::CompositeShare,
                    target: g.target,
                    max_size: g.max_size,
                    headroom: g.headroom(),
                    ca_delta: 0,
                    applied_delta: nodes,
                    capped: false,
                    gang_nodes: nodes,
                    ungrouped_nodes: 0,
                    admitted: children_on(g.id),
                    deferred: Vec::new(),
                    covered: Vec::new(),
                    unhostable: 0,
                    reason: String::new(),
                    reservation_off: None,
                    composites: mine,
                };
                Decision {
                    reason: composite_reason(&d, &plan.admitted, Some(&asked)),
                    ..d
                }
            })
        })
        .collect();
    (primary, companions)
}

/// `base` rejected under `Strict` when the only pods CA can be asking for are covered
/// composites' (rule 4 of the module docs): [`Rule::NoGangs`] would otherwise apply CA's delta
/// to pods whose nodes are on their way on this or another group.
fn covered(base: Decision, plan: &CompositePlan) -> Decision {
    let in_flight: u32 = plan.covered.iter().map(|(_, n)| *n).sum();
    if plan.covered.is_empty()
        || base.policy != super::Policy::Strict
        || base.rule != Rule::NoGangs
        || base.ungrouped_nodes > 0
        || base.target < in_flight
    {
        return base;
    }
    let names: Vec<String> = plan.covered.iter().map(|(c, _)| c.to_string()).collect();
    Decision {
        verdict: Verdict::Reject,
        rule: Rule::AllCovered,
        applied_delta: 0,
        reason: format!(
            "rejected: every pending composite this group can host has its children's nodes requested ({}; {in_flight} in flight here, target {}) and no ungrouped pod needs one; CA asked {}",
            names.join(", "),
            base.target,
            base.ca_delta
        ),
        ..base
    }
}

/// One sentence for a decision that carries composites.
fn composite_reason(
    d: &Decision,
    admitted: &[CompositeAdmission],
    asked: Option<&NodeGroupId>,
) -> String {
    let parts: Vec<String> = admitted
        .iter()
        .filter(|a| a.nodes_on(&d.group) > 0)
        .map(|a| {
            let shares: Vec<String> = a
                .shares
                .iter()
                .map(|(g, c)| {
                    let nodes: u32 = c.iter().map(|x| x.nodes).sum();
                    format!("{nodes} on {g}")
                })
                .collect();
            format!(
                "composite {} ({} child groups whole: {})",
                a.composite,
                a.shares.iter().map(|(_, c)| c.len()).sum::<usize>(),
                shares.join(", ")
            )
        })
        .collect();
    match asked {
        Some(asked) => format!(
            "share of a cross-group scale-up admitted on node group {asked}'s increase: {}; adds {} nodes",
            parts.join("; "),
            d.applied_delta
        ),
        None => format!(
            "admitted {}; adds {} nodes (CA asked {})",
            parts.join("; "),
            d.applied_delta,
            d.ca_delta
        ),
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
