//! The decisions a composite admission gives: the asked group's, joined to its per-group
//! admission, and one per other group that takes a share ([`combine`]).

use crate::model::NodeGroupId;

use super::{CompositeAdmission, CompositePlan, GroupSlot};
use crate::planner::decision::{
    AdmittedGang, CompositeShares, Decision, GroupShare, Policy, Rule, Verdict,
};

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

/// `base` under `Strict` when the only gangs CA can be asking for are covered composites'
/// (rule 4 of the module docs): only what ungrouped pods need, rejected when they need
/// nothing. [`Rule::NoGangs`] would otherwise apply CA's delta to pods whose nodes are on
/// their way on this or another group.
fn covered(base: Decision, plan: &CompositePlan) -> Decision {
    let in_flight: u32 = plan.covered.iter().map(|(_, n)| *n).sum();
    if plan.covered.is_empty()
        || base.policy != Policy::Strict
        || base.rule != Rule::NoGangs
        || base.target < in_flight
    {
        return base;
    }
    let names: Vec<String> = plan.covered.iter().map(|(c, _)| c.to_string()).collect();
    if base.ungrouped_nodes > 0 {
        // Only the ungrouped pods' nodes: none for the covered composites.
        let applied = base.ca_delta.min(base.ungrouped_nodes).min(base.headroom);
        return Decision {
            rule: Rule::UngroupedOnly,
            applied_delta: applied,
            reason: format!(
                "every pending composite this group can host has its children's nodes requested ({}; {in_flight} in flight here); applying {applied} for ungrouped pods needing {} nodes (CA asked {})",
                names.join(", "),
                base.ungrouped_nodes,
                base.ca_delta
            ),
            ..base
        };
    }
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
