//! Admission of one `NodeGroupIncreaseSize` call: which pending gangs the new nodes are for,
//! and how many nodes to add so that no gang is scaled up only in part.
//!
//! # Rules
//!
//! `headroom = max_size - target`. Candidates are the pending gangs ([`Gang::is_pending`]) that
//! [`fit`](super::fit()) places on the group's shape. A candidate's need is its `nodes_all` and
//! `nodes_min` minus the nodes already requested for it and not yet used (`in_flight`); a
//! candidate whose `nodes_all` is covered that way is *covered* and needs nothing. A pending gang
//! the group cannot host is *unhostable*. A gang the group could host but for a member's volume
//! claim whose CSI driver cannot be resolved ([`Reason::UnresolvedClaim`]) is *held*: it is
//! listed first among the deferred gangs with that reason and gets no nodes, since its attach
//! count, and so its node count, is unknown (sizing it with those volumes counted toward no
//! driver would under-count it, and the scheduler will not place it until they resolve).
//!
//! 1. **Admission.** Candidates are taken by priority (higher first), then in the configured
//!    [`Order`] (`age`: older first; `fewestMissing`: fewest nodes still missing first, then
//!    older first), then id. The group's idle Ready nodes (`idle_nodes`: no GPU pod on them, nothing of ours
//!    holding them) are credited first: a candidate's *fresh* need is its need less the idle
//!    nodes not yet credited to a candidate before it. Each is admitted whole if its fresh full
//!    need fits the headroom still left; otherwise with its fresh `minCount` need if that fits
//!    (the record says `minCount`); otherwise it is deferred, credited nothing, and the next
//!    one is considered (backfill: headroom does not come back by waiting, so one oversized
//!    gang does not block smaller ones). A candidate whose `minCount` need is already covered
//!    and whose full need does not fit is covered. CA's own simulation packs pending pods onto
//!    idle nodes and asks only for the rest, so without the credit a whole-gang round-up would
//!    add the idle nodes' share again.
//! 2. **Applied delta** (`gang_need` = the admitted gangs' nodes, `ungrouped` = nodes the
//!    pending pods outside any gang would need on this group, computed by the caller with
//!    [`nodes_for_pods`](super::nodes_for_pods)):
//!
//!    | Situation | `Strict` | `RoundUp` | `Off` |
//!    |---|---|---|---|
//!    | headroom is 0 | reject | reject | reject |
//!    | no candidate needs nodes, every one covered¹, `ungrouped == 0` | reject | CA's delta | CA's delta |
//!    | no candidate needs nodes, every one covered¹, `ungrouped > 0` | `min(ca_delta, ungrouped)` | CA's delta | CA's delta |
//!    | no candidate needs nodes (otherwise) | CA's delta | CA's delta | CA's delta |
//!    | gangs admitted | `max(gang_need, min(ca_delta, gang_need + idle + ungrouped))` | `max(ca_delta, gang_need)` | CA's delta |
//!    | none admitted, `ungrouped > 0` | `min(ca_delta, ungrouped)` | CA's delta | CA's delta |
//!    | none admitted, `ungrouped == 0` | reject | CA's delta | CA's delta |
//!
//!    ¹ At least one gang is covered by nodes in flight, on this group or on another
//!    (`elsewhere`), and this group's target holds the ones in flight here (`target ≥` their
//!    sum): CA asking again for such gangs (they wait on something new nodes do not bring,
//!    such as a device plugin advertising late, or CA's simulation gave their upcoming nodes
//!    to other pods) would only add idle nodes, so no node is added for them, here or on a
//!    second group. A target below the sum means some of those requests never reached the
//!    backend, and CA's delta applies. When some of a gang's nodes on another group failed
//!    (`short`), CA (which backs that group off after the failure) asks here for its pods.
//!    With `repair_where_asked` (deferral on) and this group hosting the gang alike (that
//!    group is among the `spill` groups with the same node counts, no topology key), the gang
//!    is a candidate with the nodes still live there counted in flight, so only its missing
//!    nodes are added here (it is spread from then on). Otherwise CA's delta applies (the
//!    repair waits for CA to ask that group again). A gang whose nodes on a group that hosts
//!    it alike are fewer than its need (a spread gang whose nodes here were released, as when
//!    their lifecycle ended) is not covered by them either: it is a candidate with those
//!    nodes counted.
//!
//!    `gang_need` is the admitted gangs' fresh nodes and `idle` the idle nodes credited to them.
//!    Every result is then capped at the headroom (`capped` in the record). `Strict` rounds
//!    CA's delta up to whole admitted gangs (their fresh nodes: only what CA cannot see) and
//!    trims it to what admitted gangs and ungrouped pods can use, idle nodes included (CA
//!    asking for their share says it found them unusable: a taint or a pod gangscaler does not
//!    model), since any further node could only host part of a deferred gang. Gang
//!    needs are summed per gang (no sharing of nodes between gangs is assumed), which may
//!    over-count but never under-counts.
//!
//! The planner does not decide *which* pods land on the new nodes (the scheduler does); it
//! decides how many nodes make the admitted gangs whole.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::model::{Gang, GangRef, NodeGroupId};

use super::decision::{
    AdmittedGang, CoveredGang, Decision, DeferredGang, Extent, Order, Policy, Rule, Verdict,
    explain,
};
use super::explain::Reason;
use super::fit::fit_counts;
use super::shape::NodeShape;
use super::spread::{Spill, SpillRoom, hosts_alike, split};

/// Everything one admission decision depends on.
#[derive(Debug, Clone, Copy)]
pub struct AdmissionInput<'a> {
    /// The group CA wants to grow.
    pub group: &'a NodeGroupId,
    /// Its node shape; `None` when it has no template (then no gang can be placed on it).
    pub shape: Option<&'a NodeShape>,
    /// Its maximum size.
    pub max_size: u32,
    /// Its current target size.
    pub target: u32,
    /// The delta CA asked for.
    pub ca_delta: u32,
    /// The admission policy.
    pub policy: Policy,
    /// The order of candidates of one priority.
    pub order: Order,
    /// Gangs to consider; those not pending, or that this group cannot host, are skipped.
    pub gangs: &'a [Arc<Gang>],
    /// Nodes of this group already requested for a gang and not yet used by it.
    pub in_flight: &'a BTreeMap<GangRef, u32>,
    /// Gangs with nodes requested on *another* group and not yet used, with that group: their
    /// need is being met there, so this group adds nothing for them (two groups would
    /// otherwise each provision the whole gang), unless that group hosts them alike (it is in
    /// `spill` with the same node counts) and its nodes do not cover them (step 2, note ¹).
    pub elsewhere: &'a BTreeMap<GangRef, Elsewhere>,
    /// Nodes of this group the pending pods outside any gang would need.
    pub ungrouped_nodes: u32,
    /// Ready nodes of this group that nothing uses or holds (no GPU pod, no scale-up of ours
    /// protecting or reserving them; `cluster::idle_nodes`): credited to the candidates in
    /// admission order before fresh nodes.
    pub idle_nodes: u32,
    /// The other groups a gang without a topology key may spread over when this group's
    /// headroom alone does not hold it (see [`spread`](mod@super::spread)); empty to keep
    /// every gang on this group.
    pub spill: &'a [Spill<'a>],
    /// Composites deferred by [`place_composites`](super::place_composites) in this decision:
    /// listed first among the deferred gangs, so that under `Strict` their children's pods
    /// never get CA's delta through the "no gang needs nodes" row.
    pub deferred_composites: &'a [DeferredGang],
    /// Whether a gang some of whose nodes on another group failed is repaired here, where CA
    /// asks, with only its missing nodes (step 2, note ¹). The engine turns it on with
    /// deferral, which then keeps the gang, covered again, out of CA's later asks; without
    /// deferral CA would keep asking for the rest while the failed group is backed off, and
    /// each refusal would back this group off too.
    pub repair_where_asked: bool,
}

/// Where a gang's nodes are in flight on another group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Elsewhere {
    /// That group.
    pub group: NodeGroupId,
    /// Whether some of those nodes failed (their repair is due on that group): the gang is
    /// not whole on its way, so a call here for its pods still gets CA's delta.
    pub short: bool,
    /// Its nodes in flight on every other group (more than `group`'s when it was spread).
    pub nodes: u32,
}

/// A pending gang the group can host and whose need is not yet covered.
struct Candidate<'a> {
    gang: &'a Gang,
    nodes_all: u32,
    nodes_min: u32,
    /// In flight for it here, and on other groups when it was spread.
    in_flight: u32,
    /// The spill groups (indices into [`AdmissionInput::spill`]) that host it alike.
    spill: Vec<usize>,
    /// Another group where nodes are in flight for it (counted in `in_flight`).
    elsewhere: Option<NodeGroupId>,
}

impl Candidate<'_> {
    /// The nodes it still misses: its whole need less those in flight for it.
    fn missing(&self) -> u32 {
        self.nodes_all.saturating_sub(self.in_flight)
    }

    fn covered(&self) -> CoveredGang {
        CoveredGang {
            gang: self.gang.id.clone(),
            nodes_all: self.nodes_all,
            nodes_min: self.nodes_min,
            in_flight: self.in_flight,
            elsewhere: self.elsewhere.clone(),
        }
    }
}

/// A candidate's need as [`take`] spends it: this group's headroom and idle nodes left, and
/// the spill groups'.
struct Room {
    left: u32,
    idle: u32,
    spill: Vec<SpillRoom>,
}

/// The pending gangs, sorted out before any headroom is spent.
#[derive(Default)]
struct Sorted<'a> {
    /// In admission order: priority (higher first), the configured [`Order`], id.
    candidates: Vec<Candidate<'a>>,
    covered: Vec<CoveredGang>,
    held: Vec<DeferredGang>,
    unhostable: u32,
}

/// The candidates after the headroom was spent on them.
struct Taken {
    admitted: Vec<AdmittedGang>,
    deferred: Vec<DeferredGang>,
    covered: Vec<CoveredGang>,
}

/// Decides one `NodeGroupIncreaseSize` call (rules in the module docs). Pure: the same input
/// always gives the same decision.
pub fn admit(input: &AdmissionInput<'_>) -> Decision {
    let headroom = input.max_size.saturating_sub(input.target);
    let sorted = sort_out(input);
    let unhostable = sorted.unhostable;
    let taken = take(input, sorted, headroom);
    let gang_nodes: u32 = taken.admitted.iter().map(|a| a.nodes).sum();
    let (rule, wanted) = rule(input, headroom, &taken, gang_nodes);
    let (verdict, applied, capped) = match wanted {
        Some(w) => (Verdict::Accept, w.min(headroom), w > headroom),
        None => (Verdict::Reject, 0, false),
    };
    let mut decision = Decision {
        group: input.group.clone(),
        policy: input.policy,
        verdict,
        rule,
        target: input.target,
        max_size: input.max_size,
        headroom,
        ca_delta: input.ca_delta,
        applied_delta: applied,
        capped,
        gang_nodes,
        ungrouped_nodes: input.ungrouped_nodes,
        admitted: taken.admitted,
        deferred: taken.deferred,
        covered: taken.covered,
        unhostable,
        reason: String::new(),
        reservation_off: None,
        composites: Vec::new(),
    };
    decision.reason = explain(&decision, input.shape.is_none());
    decision
}

/// Step 1: each pending gang is unhostable, held, covered (here or on another group) or a
/// candidate; candidates come out in admission order.
fn sort_out<'a>(input: &AdmissionInput<'a>) -> Sorted<'a> {
    let mut sorted = Sorted::default();
    for gang in input.gangs.iter().filter(|g| g.is_pending()) {
        let here = input.in_flight.get(&gang.id).copied();
        let other = input.elsewhere.get(&gang.id);
        // A gang spread here and elsewhere (nodes requested on both, even if those here all
        // failed) counts its nodes on every group.
        let in_flight = match (here, other) {
            (Some(here), Some(o)) => here.saturating_add(o.nodes),
            (here, _) => here.unwrap_or(0),
        };
        let fitted = input.shape.map(|s| (s, fit_counts(gang, s)));
        let (nodes_all, nodes_min) = match fitted {
            Some((_, Ok(counts))) => counts,
            Some((shape, Err(reason @ Reason::UnresolvedClaim { .. })))
                if fit_counts(&without_unresolved(gang), shape).is_ok() =>
            {
                // The group could host the gang but for volumes whose driver is unknown:
                // held, so that it is neither sized from a partial count nor forgotten.
                sorted.held.push(DeferredGang {
                    gang: gang.id.clone(),
                    priority: gang.priority,
                    in_flight,
                    reason,
                });
                continue;
            }
            _ => {
                sorted.unhostable += 1;
                continue;
            }
        };
        let spill = hosts_alike(gang, (nodes_all, nodes_min), input.spill);
        let in_flight = match other.filter(|_| here.is_none()) {
            // Its nodes in flight on a group that hosts it alike are counted, and the rest
            // may be added here, when they do not cover it: a spread gang whose nodes here
            // were released, or (with repairs where CA asks) a gang some of whose nodes there
            // failed, for which CA, backing that group off, asks here. It is spread from now
            // on.
            Some(o)
                if spill.iter().any(|&i| input.spill[i].slot.id == &o.group)
                    && if o.short {
                        input.repair_where_asked
                    } else {
                        o.nodes < nodes_all
                    } =>
            {
                o.nodes
            }
            Some(o) => {
                sorted.covered.push(CoveredGang {
                    gang: gang.id.clone(),
                    nodes_all,
                    nodes_min,
                    in_flight: 0,
                    elsewhere: Some(o.group.clone()),
                });
                continue;
            }
            None => in_flight,
        };
        let candidate = Candidate {
            gang,
            nodes_all,
            nodes_min,
            in_flight,
            spill,
            elsewhere: other.map(|o| o.group.clone()),
        };
        if nodes_all <= in_flight {
            sorted.covered.push(candidate.covered());
        } else {
            sorted.candidates.push(candidate);
        }
    }
    sorted.candidates.sort_by(|a, b| {
        input
            .order
            .compare(a.gang, a.missing(), b.gang, b.missing())
    });
    sorted
}

/// Step 2: the headroom is spent on the candidates in order, whole, else at `minCount`, else
/// deferred (backfill); deferred composites and held gangs are listed first.
fn take(input: &AdmissionInput<'_>, sorted: Sorted<'_>, headroom: u32) -> Taken {
    let mut room = Room {
        left: headroom,
        idle: input.idle_nodes,
        spill: input.spill.iter().map(SpillRoom::new).collect(),
    };
    let mut taken = Taken {
        admitted: Vec::new(),
        deferred: input.deferred_composites.to_vec(),
        covered: sorted.covered,
    };
    taken.deferred.extend(sorted.held);
    for c in &sorted.candidates {
        let need_all = c.nodes_all - c.in_flight;
        let need_min = c.nodes_min.saturating_sub(c.in_flight);
        let (left, idle) = (room.left, room.idle);
        // Idle nodes first, then fresh ones.
        let (fresh_all, fresh_min) = (need_all.saturating_sub(idle), need_min.saturating_sub(idle));
        let whole_spread = || split(need_all, left, idle, &c.spill, &room.spill);
        let (extent, part) = if fresh_all <= left {
            (Extent::Whole, whole_here(need_all, fresh_all))
        } else if need_min == 0 {
            taken.covered.push(c.covered());
            continue;
        } else if let Some(s) = whole_spread() {
            (Extent::Whole, s)
        } else if fresh_min <= left {
            (Extent::MinCount, whole_here(need_min, fresh_min))
        } else if let Some(s) = split(need_min, left, idle, &c.spill, &room.spill) {
            (Extent::MinCount, s)
        } else {
            taken.deferred.push(DeferredGang {
                gang: c.gang.id.clone(),
                priority: c.gang.priority,
                in_flight: c.in_flight,
                reason: Reason::InsufficientHeadroom {
                    nodes_all: need_all,
                    nodes_min: need_min,
                    headroom: left,
                },
            });
            continue;
        };
        room.left -= part.here;
        room.idle -= part.credit;
        let spread = part.spend(&mut room.spill, input.spill);
        taken.admitted.push(AdmittedGang {
            gang: c.gang.id.clone(),
            priority: c.gang.priority,
            extent,
            nodes: part.here,
            idle: part.credit,
            nodes_all: c.nodes_all,
            nodes_min: c.nodes_min,
            in_flight: c.in_flight,
            repair_of: None,
            spread,
        });
    }
    taken
}

/// A need met on this group alone: `fresh` nodes, the rest idle.
fn whole_here(need: u32, fresh: u32) -> super::spread::Split {
    super::spread::Split {
        here: fresh,
        credit: need - fresh,
        shares: Vec::new(),
    }
}

/// Step 3: the row of the table in the module docs, and the nodes it wants before the
/// headroom cap (`None`: reject).
fn rule(
    input: &AdmissionInput<'_>,
    headroom: u32,
    taken: &Taken,
    gang_nodes: u32,
) -> (Rule, Option<u32>) {
    let ca = input.ca_delta;
    let ungrouped = input.ungrouped_nodes;
    let needing = !taken.admitted.is_empty() || !taken.deferred.is_empty();
    if headroom == 0 {
        (Rule::AtMax, None)
    } else if input.policy == Policy::Off {
        (Rule::Passthrough, Some(ca))
    } else if !needing && input.policy == Policy::Strict && covered_only(input, taken) {
        // Every gang CA can be asking for has its nodes on the way, here or on another
        // group: nothing is added for them, only what ungrouped pods need.
        if ungrouped > 0 {
            (Rule::UngroupedOnly, Some(ca.min(ungrouped)))
        } else {
            (Rule::AllCovered, None)
        }
    } else if !needing {
        (Rule::NoGangs, Some(ca))
    } else if !taken.admitted.is_empty() {
        // CA's delta is trimmed to what the admitted gangs could use were their idle nodes
        // unusable (CA may have found them so), and rounded up only to their fresh nodes.
        let idle: u32 = taken.admitted.iter().map(|a| a.idle).sum();
        let usable = gang_nodes.saturating_add(idle).saturating_add(ungrouped);
        let wanted = match input.policy {
            Policy::Strict => gang_nodes.max(ca.min(usable)),
            Policy::RoundUp | Policy::Off => ca.max(gang_nodes),
        };
        (Rule::GangsAdmitted, Some(wanted))
    } else if input.policy == Policy::RoundUp {
        (Rule::NoGangFitsRoundUp, Some(ca))
    } else if ungrouped > 0 {
        (Rule::UngroupedOnly, Some(ca.min(ungrouped)))
    } else {
        (Rule::NoGangFits, None)
    }
}

/// Whether the pending gangs this group can host are all covered by nodes requested for them
/// and still coming: on this group (held by its target) or on another group. CA asking again
/// for such gangs (their members wait on something new nodes do not bring, such as a device
/// plugin advertising late, or CA's simulation packed other pods onto their upcoming nodes)
/// would only add nodes nobody uses. A target below what the covered gangs count in flight
/// here means some requests never reached the backend (a crash between the record and the
/// backend call): CA's delta still applies then.
fn covered_only(input: &AdmissionInput<'_>, taken: &Taken) -> bool {
    let covered_here: u32 = taken
        .covered
        .iter()
        .filter(|c| c.elsewhere.is_none())
        .map(|c| c.in_flight)
        .sum();
    let elsewhere = taken.covered.iter().any(|c| c.elsewhere.is_some());
    // A gang covered only by another group's nodes, some of which failed, and not repaired
    // here (this group does not host it alike): its repair waits for that group.
    let short = taken.covered.iter().any(|c| {
        c.elsewhere.is_some()
            && c.in_flight == 0
            && input.elsewhere.get(&c.gang).is_some_and(|e| e.short)
    });
    (covered_here > 0 || elsewhere) && !short && input.target >= covered_here
}

/// `gang` with every member's unresolved claims dropped: what the group could do for it once
/// its volumes resolve (their attach counts aside).
fn without_unresolved(gang: &Gang) -> Gang {
    let mut gang = gang.clone();
    for m in &mut gang.members {
        std::sync::Arc::make_mut(&mut m.demand)
            .unresolved_claims
            .clear();
    }
    gang
}
