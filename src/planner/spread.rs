//! Spread: a gang without a topology key whose need does not fit the headroom of the group CA
//! asked for, admitted over that group and the other groups that host it alike, inside one
//! `NodeGroupIncreaseSize` call.
//!
//! CA sizes a scale-up on one group and, when that group's `maxSize` cuts it, asks another
//! group for the rest in a later loop: the gang gets its nodes in parts, on several groups.
//! Strict whole-gang admission on one group alone would refuse such a gang for as long as no
//! single group has room for all of it, although its pool has. gangscaler is the provider of
//! every group, so the groups' shares are added together, all or nothing, as for a composite.
//!
//! # Rules
//!
//! 1. A gang may spread when it has no topology key (a key asks for one domain, and a group's
//!    nodes share one), is not a composite's child (composites place children whole, per
//!    group), and its need does not fit what is left of the asked group's headroom and idle
//!    nodes ([`admit`](super::admit()), step 1: whole, else `minCount`).
//! 2. The groups it may take nodes of host it *alike*: their template places it with the same
//!    node counts (`nodes_all`, `nodes_min`) as the asked group's ([`fit`](super::fit())), so
//!    that any mix of their nodes holds it; a group with other counts (another node size,
//!    another GPU type the gang does not select) is left out.
//! 3. The split: the asked group's idle nodes, then all of its headroom left; then, group by
//!    group, most headroom left first (ties by id), each group's idle nodes, then its
//!    headroom. At least one fresh node lands on the asked group (the call CA made carries
//!    the decision), and the split stands only when it holds the whole need (or the
//!    `minCount` need, when the whole need does not fit): otherwise the gang is deferred and
//!    takes nothing.
//! 4. Each other group's fresh nodes are one more decision of the same scale-up (rule
//!    [`Rule::SpreadShare`], CA's delta 0, see [`spread_shares`]); its nodes are claimed for
//!    the gang and counted in flight there, so a later call on any of the groups sees the
//!    gang covered by all of them.

use crate::model::{Gang, NodeGroupId};

use super::composite::GroupSlot;
use super::decision::{AdmittedGang, Decision, Rule, SpreadShare, Verdict};
use super::fit::fit_counts;

/// Another group a gang may spread over, as the asked group's admission sees it.
#[derive(Debug, Clone, Copy)]
pub struct Spill<'a> {
    /// The group, its shape, target and maximum.
    pub slot: GroupSlot<'a>,
    /// Its idle Ready nodes (credited before fresh ones, as on the asked group).
    pub idle: u32,
    /// Nodes already added on it in this decision (a composite's share): not headroom any
    /// more.
    pub taken: u32,
}

/// A spill group's headroom and idle nodes as one decision spends them.
#[derive(Debug, Clone, Copy)]
pub(super) struct SpillRoom {
    left: u32,
    idle: u32,
}

impl SpillRoom {
    /// What is left of `spill` before any gang of this decision took from it.
    pub(super) fn new(spill: &Spill<'_>) -> Self {
        Self {
            left: spill.slot.headroom().saturating_sub(spill.taken),
            idle: spill.idle,
        }
    }
}

/// The spill groups (indices into `spill`) that host `gang` alike (rule 2): none when it has
/// a topology key or is a composite's child.
pub(super) fn hosts_alike(gang: &Gang, counts: (u32, u32), spill: &[Spill<'_>]) -> Vec<usize> {
    if gang.topology_key.is_some() || gang.composite.is_some() {
        return Vec::new();
    }
    spill
        .iter()
        .enumerate()
        .filter(|(_, s)| {
            s.slot
                .shape
                .is_some_and(|shape| fit_counts(gang, shape).is_ok_and(|c| c == counts))
        })
        .map(|(i, _)| i)
        .collect()
}

/// One need split over the asked group and spill groups.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Split {
    /// Fresh nodes on the asked group.
    pub here: u32,
    /// Idle nodes of the asked group credited.
    pub credit: u32,
    /// Per spill group (index): fresh nodes and idle nodes credited.
    pub shares: Vec<(usize, u32, u32)>,
}

impl Split {
    /// Takes the spill groups' shares out of `rooms` and names them.
    pub(super) fn spend(&self, rooms: &mut [SpillRoom], spill: &[Spill<'_>]) -> Vec<SpreadShare> {
        self.shares
            .iter()
            .map(|&(i, nodes, idle)| {
                rooms[i].left -= nodes;
                rooms[i].idle -= idle;
                SpreadShare {
                    group: spill[i].slot.id.clone(),
                    nodes,
                    idle,
                }
            })
            .collect()
    }
}

/// Splits `need` nodes over the asked group (`left` headroom, `idle` nodes not yet credited)
/// and the spill groups `alike` (rule 3), or `None` when they do not hold it all or no fresh
/// node would land on the asked group.
pub(super) fn split(
    need: u32,
    left: u32,
    idle: u32,
    alike: &[usize],
    rooms: &[SpillRoom],
) -> Option<Split> {
    if alike.is_empty() {
        return None;
    }
    let credit = need.min(idle);
    let mut rest = need - credit;
    let here = rest.min(left);
    if here == 0 {
        return None;
    }
    rest -= here;
    let pool: Vec<(usize, u32, u32)> = alike
        .iter()
        .map(|&i| (i, rooms[i].left, rooms[i].idle))
        .collect();
    let (shares, rest) = take_pooled(rest, &pool);
    (rest == 0).then_some(Split {
        here,
        credit,
        shares,
    })
}

/// Takes `need` nodes over `groups`, each `(index, headroom left, idle nodes)`: the most
/// headroom left first (ties in the order given), each group's idle nodes before its headroom.
/// Gives `(index, fresh, idle)` per group that gives any, and the part of `need` they do not
/// hold (0 when they hold it all). Admission's [`split`] and deferral's pooled room both take a
/// need this way, so deferral holds back exactly the gangs admission would not spread.
pub(super) fn take_pooled(
    need: u32,
    groups: &[(usize, u32, u32)],
) -> (Vec<(usize, u32, u32)>, u32) {
    let mut order: Vec<&(usize, u32, u32)> = groups.iter().collect();
    // Stable: ties keep the order given.
    order.sort_by_key(|g| std::cmp::Reverse(g.1));
    let mut rest = need;
    let mut shares = Vec::new();
    for &&(i, left, idle) in &order {
        if rest == 0 {
            break;
        }
        let idle = rest.min(idle);
        let fresh = (rest - idle).min(left);
        if idle + fresh > 0 {
            shares.push((i, fresh, idle));
            rest -= idle + fresh;
        }
    }
    (shares, rest)
}

/// The other groups' decisions of `decision`'s spread gangs (rule 4): one per group that adds
/// fresh nodes, in the order of `spill`, each admitting its share of every spread gang. A
/// share of idle nodes only adds nothing and gives no decision. Pure.
pub fn spread_shares(decision: &Decision, spill: &[Spill<'_>]) -> Vec<Decision> {
    if !decision.is_accepted() {
        return Vec::new();
    }
    spill
        .iter()
        .filter_map(|s| {
            let admitted: Vec<AdmittedGang> = decision
                .admitted
                .iter()
                .filter_map(|a| {
                    let share = a
                        .spread
                        .iter()
                        .find(|sh| &sh.group == s.slot.id && sh.nodes > 0)?;
                    Some(AdmittedGang {
                        nodes: share.nodes,
                        idle: share.idle,
                        repair_of: None,
                        spread: Vec::new(),
                        ..a.clone()
                    })
                })
                .collect();
            (!admitted.is_empty()).then(|| share_decision(decision, s, admitted))
        })
        .collect()
}

/// The decision of spill group `s` adding `admitted`, spread from `decision`'s group.
fn share_decision(decision: &Decision, s: &Spill<'_>, admitted: Vec<AdmittedGang>) -> Decision {
    let nodes: u32 = admitted.iter().map(|a| a.nodes).sum();
    let target = s.slot.target.saturating_add(s.taken);
    let gangs: Vec<String> = admitted
        .iter()
        .map(|a| format!("{} {}", a.gang, a.nodes))
        .collect();
    Decision {
        group: s.slot.id.clone(),
        policy: decision.policy,
        verdict: Verdict::Accept,
        rule: Rule::SpreadShare,
        target,
        max_size: s.slot.max_size,
        headroom: s.slot.max_size.saturating_sub(target),
        ca_delta: 0,
        applied_delta: nodes,
        capped: false,
        gang_nodes: nodes,
        ungrouped_nodes: 0,
        reason: format!(
            "share of gang(s) spread over their pool, admitted on node group {}'s increase: adding {nodes} ({})",
            decision.group,
            gangs.join(", ")
        ),
        admitted,
        deferred: Vec::new(),
        covered: Vec::new(),
        unhostable: 0,
        reservation_off: None,
        composites: Vec::new(),
    }
}

/// The spill groups of an increase of `asked`: every other group in `slots` (configuration
/// order), with its idle nodes and the nodes a composite already takes of it.
pub fn spill_of<'a>(
    asked: &NodeGroupId,
    slots: &[GroupSlot<'a>],
    idle: impl Fn(&NodeGroupId) -> u32,
    taken: impl Fn(&NodeGroupId) -> u32,
) -> Vec<Spill<'a>> {
    slots
        .iter()
        .filter(|s| s.id != asked)
        .map(|s| Spill {
            slot: *s,
            idle: idle(s.id),
            taken: taken(s.id),
        })
        .collect()
}
