//! Spread: a gang without a topology key admitted over the groups of its pool when the asked
//! group alone has no room for it.

use std::collections::BTreeMap;

use crate::model::NodeGroupId;
use crate::planner::{
    AdmissionInput, Decision, Elsewhere, Extent, GroupSlot, Order, Policy, Rule, Spill,
    SpreadShare, Verdict, admit, spread_shares,
};

use super::*;

/// A group, its shape, its target and its idle nodes.
struct Group {
    spec: NodeGroupSpec,
    shape: NodeShape,
    target: u32,
    idle: u32,
}

fn group(spec: NodeGroupSpec, target: u32) -> Group {
    let shape = shape(&spec);
    Group {
        spec,
        shape,
        target,
        idle: 0,
    }
}

/// An 8-GPU group `(id, max, target)`.
fn gpu8(id: &str, max: u32, target: u32) -> Group {
    group(gpu_group(id, max, 8), target)
}

struct Pool {
    asked: Group,
    others: Vec<Group>,
    in_flight: BTreeMap<GangRef, u32>,
    elsewhere: BTreeMap<GangRef, Elsewhere>,
    repair_where_asked: bool,
}

fn pool(asked: Group, others: Vec<Group>) -> Pool {
    Pool {
        asked,
        others,
        in_flight: BTreeMap::new(),
        elsewhere: BTreeMap::new(),
        repair_where_asked: false,
    }
}

impl Pool {
    /// The decision on the asked group for CA's `ca`, and the spread shares' decisions.
    fn decide(&self, ca: u32, gangs: Vec<Gang>) -> (Decision, Vec<Decision>) {
        let spill: Vec<Spill<'_>> = self
            .others
            .iter()
            .map(|g| Spill {
                slot: GroupSlot {
                    id: &g.spec.id,
                    shape: Some(&g.shape),
                    target: g.target,
                    max_size: g.spec.max_size,
                },
                idle: g.idle,
                taken: 0,
            })
            .collect();
        let d = admit(&AdmissionInput {
            group: &self.asked.spec.id,
            shape: Some(&self.asked.shape),
            max_size: self.asked.spec.max_size,
            target: self.asked.target,
            ca_delta: ca,
            policy: Policy::Strict,
            order: Order::Age,
            gangs: &arcs(gangs),
            in_flight: &self.in_flight,
            elsewhere: &self.elsewhere,
            ungrouped_nodes: 0,
            idle_nodes: self.asked.idle,
            spill: &spill,
            deferred_composites: &[],
            repair_where_asked: self.repair_where_asked,
        });
        let shares = spread_shares(&d, &spill);
        (d, shares)
    }
}

fn share(group: &str, nodes: u32, idle: u32) -> SpreadShare {
    SpreadShare {
        group: NodeGroupId::new(group),
        nodes,
        idle,
    }
}

#[test]
fn a_gang_no_group_holds_alone_is_admitted_whole_over_its_pool_with_a_decision_per_group() {
    // 54 nodes wanted; gpu-a has 37 left and gpu-b 23: neither alone, both together.
    let p = pool(gpu8("gpu-a", 72, 35), vec![gpu8("gpu-b", 72, 49)]);
    let (d, shares) = p.decide(37, vec![whole("big", 54, 54, 1)]);
    assert_eq!((d.verdict, d.rule), (Verdict::Accept, Rule::GangsAdmitted));
    assert_eq!(d.admitted[0].nodes, 37, "all of the asked group's headroom");
    assert_eq!(d.admitted[0].extent, Extent::Whole);
    assert_eq!(d.admitted[0].spread, vec![share("gpu-b", 17, 0)]);
    assert_eq!(d.applied_delta, 37);
    assert!(d.reason.contains("17 on gpu-b, spread"), "{}", d.reason);
    // gpu-b's share is a decision of its own: CA did not ask for it.
    assert_eq!(shares.len(), 1, "{shares:?}");
    let b = &shares[0];
    assert_eq!(
        (b.group.as_str(), b.rule, b.ca_delta, b.applied_delta),
        ("gpu-b", Rule::SpreadShare, 0, 17)
    );
    assert_eq!((b.target, b.headroom), (49, 23));
    assert_eq!(b.admitted[0].gang.name, "big");
    assert!(b.admitted[0].spread.is_empty());
    assert!(b.reason.contains("gpu-a"), "{}", b.reason);
}

#[test]
fn without_the_pools_room_or_with_a_topology_key_or_other_node_counts_nothing_is_spread() {
    // Together 37 + 16 = 53 < 54: deferred, and gpu-b gives nothing.
    let short = pool(gpu8("gpu-a", 72, 35), vec![gpu8("gpu-b", 72, 56)]);
    let (d, shares) = short.decide(37, vec![whole("big", 54, 54, 1)]);
    assert_eq!((d.verdict, d.rule), (Verdict::Reject, Rule::NoGangFits));
    assert!(shares.is_empty());
    // A topology key asks for one domain: never spread.
    let roomy = pool(gpu8("gpu-a", 72, 35), vec![gpu8("gpu-b", 72, 0)]);
    let keyed = gang("keyed")
        .min(54)
        .topology(labels::ZONE)
        .members(54, |p| p.gpus(8).gpu_tolerant())
        .build();
    let (d, shares) = roomy.decide(37, vec![keyed]);
    assert_eq!(d.rule, Rule::NoGangFits, "{}", d.reason);
    assert!(shares.is_empty());
    // A group of 16-GPU nodes places the gang with other node counts: not alike.
    let other_size = pool(
        gpu8("gpu-a", 72, 35),
        vec![group(gpu_group("gpu-c", 72, 16), 0)],
    );
    let (d, _) = other_size.decide(37, vec![whole("big", 54, 54, 1)]);
    assert_eq!(d.rule, Rule::NoGangFits, "{}", d.reason);
}

#[test]
fn min_count_is_spread_when_the_whole_gang_does_not_fit_the_pool() {
    let p = pool(gpu8("a", 10, 6), vec![gpu8("b", 10, 7)]);
    // Whole: 8 > 4 + 3; minCount 6 fits 4 + 2.
    let (d, shares) = p.decide(4, vec![whole("elastic", 8, 6, 1)]);
    assert_eq!(d.admitted[0].extent, Extent::MinCount);
    assert_eq!(d.admitted[0].nodes, 4);
    assert_eq!(d.admitted[0].spread, vec![share("b", 2, 0)]);
    assert_eq!(shares[0].applied_delta, 2);
}

#[test]
fn idle_nodes_are_credited_first_and_the_roomiest_group_takes_the_rest() {
    let mut b = gpu8("b", 10, 8);
    b.idle = 1;
    let c = gpu8("c", 10, 5);
    let p = pool(gpu8("a", 10, 7), vec![b, c]);
    // 9 wanted: 3 fresh on a, then c (5 left) before b (2 left): 5 on c, then b's idle
    // node and 0 fresh there.
    let (d, shares) = p.decide(3, vec![whole("big", 9, 9, 1)]);
    assert_eq!(d.admitted[0].nodes, 3);
    assert_eq!(
        d.admitted[0].spread,
        vec![share("c", 5, 0), share("b", 0, 1)]
    );
    // Only c adds nodes: b's share is its idle node.
    let groups: Vec<_> = shares
        .iter()
        .map(|s| (s.group.as_str(), s.applied_delta))
        .collect();
    assert_eq!(groups, [("c", 5)]);
}

#[test]
fn a_later_gang_sees_the_room_an_earlier_spread_took() {
    let p = pool(gpu8("a", 10, 6), vec![gpu8("b", 10, 6)]);
    // old takes a's 4 and 2 of b's 4; young (3) then finds a full and only 2 on b.
    let (d, shares) = p.decide(4, vec![whole("old", 6, 6, 1), whole("young", 3, 3, 2)]);
    assert_eq!(d.admitted.len(), 1, "{d:?}");
    assert_eq!(d.admitted[0].spread, vec![share("b", 2, 0)]);
    assert_eq!(d.deferred[0].gang.name, "young");
    assert_eq!(shares[0].applied_delta, 2);
}

#[test]
fn a_spread_gang_is_covered_by_its_nodes_on_every_group_and_repaired_where_asked() {
    let g = whole("big", 6, 6, 1);
    let mut p = pool(gpu8("a", 10, 8), vec![gpu8("b", 10, 6)]);
    p.in_flight = BTreeMap::from([(g.id.clone(), 4)]);
    let there = Elsewhere {
        group: NodeGroupId::new("b"),
        short: false,
        nodes: 2,
    };
    p.elsewhere = BTreeMap::from([(g.id.clone(), there.clone())]);
    // 4 here and 2 on b: covered; CA asking again gets nothing for it.
    let (d, shares) = p.decide(2, vec![g.clone()]);
    assert_eq!((d.verdict, d.rule), (Verdict::Reject, Rule::AllCovered));
    assert_eq!(d.covered[0].in_flight, 6);
    assert!(shares.is_empty());
    // One of b's failed: the call here adds exactly the missing node, and no more.
    p.elsewhere = BTreeMap::from([(
        g.id.clone(),
        Elsewhere {
            short: true,
            nodes: 1,
            ..there
        },
    )]);
    let (d, _) = p.decide(2, vec![g]);
    assert_eq!((d.rule, d.applied_delta), (Rule::GangsAdmitted, 1));
    assert_eq!(d.admitted[0].in_flight, 5);
}

#[test]
fn with_deferral_a_gang_short_on_a_failed_group_is_repaired_where_ca_asks_missing_nodes_only() {
    // 6 nodes requested on b, 2 of them failed (stock-out): CA backs b off and asks a for
    // all six members.
    let g = whole("big", 6, 6, 1);
    let short = Elsewhere {
        group: NodeGroupId::new("b"),
        short: true,
        nodes: 4,
    };
    let mut p = pool(gpu8("a", 10, 0), vec![gpu8("b", 10, 6)]);
    p.elsewhere = BTreeMap::from([(g.id.clone(), short.clone())]);
    // Without deferral to hold it once covered again, CA's delta applies as before.
    let (d, _) = p.decide(6, vec![g.clone()]);
    assert_eq!((d.rule, d.applied_delta), (Rule::NoGangs, 6), "{d:?}");
    p.repair_where_asked = true;
    let (d, shares) = p.decide(6, vec![g.clone()]);
    assert_eq!((d.rule, d.applied_delta), (Rule::GangsAdmitted, 2), "{d:?}");
    assert_eq!((d.admitted[0].nodes, d.admitted[0].in_flight), (2, 4));
    assert!(shares.is_empty(), "{shares:?}");
    // A group that places it with other node counts (16-GPU nodes: 3 for 6 members) cannot
    // count b's nodes: CA's delta applies, as when b is not among the groups at all.
    let mut other = pool(group(gpu_group("a", 10, 16), 0), vec![gpu8("b", 10, 6)]);
    other.repair_where_asked = true;
    other.elsewhere = BTreeMap::from([(g.id.clone(), short)]);
    let (d, _) = other.decide(3, vec![g.clone()]);
    assert_eq!((d.rule, d.applied_delta), (Rule::NoGangs, 3), "{d:?}");
}

#[test]
fn nodes_on_a_group_that_hosts_the_gang_alike_cover_it_only_when_they_hold_its_need() {
    // A 6-node gang spread over a and b whose nodes on a were released (their lifecycle
    // ended): the 2 still in flight on b do not cover it, and a call on a adds the other 4.
    let g = whole("big", 6, 6, 1);
    let mut p = pool(gpu8("a", 10, 0), vec![gpu8("b", 10, 2)]);
    p.elsewhere = BTreeMap::from([(
        g.id.clone(),
        Elsewhere {
            group: NodeGroupId::new("b"),
            short: false,
            nodes: 2,
        },
    )]);
    let (d, _) = p.decide(6, vec![g.clone()]);
    assert_eq!((d.rule, d.applied_delta), (Rule::GangsAdmitted, 4), "{d:?}");
    assert_eq!(d.admitted[0].in_flight, 2);
    // Six on b hold it: covered, nothing added.
    if let Some(e) = p.elsewhere.get_mut(&g.id) {
        e.nodes = 6;
    }
    let (d, _) = p.decide(6, vec![g]);
    assert_eq!(
        (d.verdict, d.rule),
        (Verdict::Reject, Rule::AllCovered),
        "{d:?}"
    );
}

#[test]
fn a_pooled_need_takes_the_roomiest_group_first_and_its_idle_nodes_before_fresh_ones() {
    use crate::planner::spread::take_pooled;
    // (index, headroom left, idle): group 2 has most headroom, 0 and 1 tie.
    let groups = [(0, 3, 1), (1, 3, 0), (2, 5, 2)];
    // Group 2 gives its 2 idle and 5 fresh; then group 0 (the tie goes to the order given)
    // its idle node and 1 fresh one.
    assert_eq!(take_pooled(9, &groups), (vec![(2, 5, 2), (0, 1, 1)], 0));
    // Idle nodes alone hold a small need: nothing fresh is added.
    assert_eq!(take_pooled(2, &groups), (vec![(2, 0, 2)], 0));
    // More than the pool holds: all of it, and what is still missing.
    assert_eq!(
        take_pooled(20, &groups),
        (vec![(2, 5, 2), (0, 3, 1), (1, 3, 0)], 6)
    );
    assert_eq!(take_pooled(0, &groups), (Vec::new(), 0));
}
