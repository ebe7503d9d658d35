//! `deferrals`: which pending gangs are kept out of CA's scale-up, and why.

use std::collections::BTreeMap;

use crate::model::{NodeGroupId, NodeGroupSpec};
use crate::planner::{Deferral, DeferralInput, GroupSlot, Hold, Order, Policy, Reason, deferrals};

use super::*;

struct Fleet {
    groups: Vec<(NodeGroupSpec, NodeShape, u32)>,
    in_flight: BTreeMap<GangRef, (NodeGroupId, u32)>,
    idle: BTreeMap<NodeGroupId, u32>,
    policy: Policy,
    order: Order,
}

/// 8-GPU groups, each `(id, max, target)`.
fn fleet(groups: &[(&str, u32, u32)]) -> Fleet {
    Fleet {
        groups: groups
            .iter()
            .map(|(id, max, target)| {
                let g = gpu_group(id, *max, 8);
                let s = shape(&g);
                (g, s, *target)
            })
            .collect(),
        in_flight: BTreeMap::new(),
        idle: BTreeMap::new(),
        policy: Policy::Strict,
        order: Order::Age,
    }
}

impl Fleet {
    fn flying(mut self, gang: &Gang, group: &str, nodes: u32) -> Self {
        self.in_flight
            .insert(gang.id.clone(), (NodeGroupId::new(group), nodes));
        self
    }
    fn policy(mut self, p: Policy) -> Self {
        self.policy = p;
        self
    }
    fn order(mut self, o: Order) -> Self {
        self.order = o;
        self
    }
    fn idle(mut self, group: &str, nodes: u32) -> Self {
        self.idle.insert(NodeGroupId::new(group), nodes);
        self
    }
    fn defer(&self, gangs: Vec<Gang>) -> Vec<Deferral> {
        let slots: Vec<GroupSlot<'_>> = self
            .groups
            .iter()
            .map(|(g, s, target)| GroupSlot {
                id: &g.id,
                shape: Some(s),
                target: *target,
                max_size: g.max_size,
            })
            .collect();
        let gangs = arcs(gangs);
        deferrals(&DeferralInput {
            groups: &slots,
            gangs: &gangs,
            in_flight: &self.in_flight,
            policy: self.policy,
            order: self.order,
            idle: &self.idle,
        })
    }
}

fn holds(d: &[Deferral]) -> Vec<(&str, &'static str)> {
    d.iter()
        .map(|d| (d.gang.name.as_str(), d.hold.as_str()))
        .collect()
}

#[test]
fn the_older_gang_takes_the_room_and_the_younger_waits_behind_it() {
    let d = fleet(&[("a", 4, 0)]).defer(vec![whole("old", 3, 3, 1), whole("new", 3, 3, 2)]);
    assert_eq!(holds(&d), [("new", "behind")]);
    let Hold::Behind { need, ahead } = &d[0].hold else {
        panic!("{d:?}")
    };
    assert_eq!((*need, ahead.name.as_str()), (3, "old"));
}

#[test]
fn fewest_missing_lets_the_gang_nearest_to_forming_go_first() {
    let gangs = || vec![whole("old", 4, 4, 1), whole("near", 6, 6, 2)];
    // `near` has 4 of its 6 nodes in flight on a: it misses 2, `old` misses 4; room 4.
    let near = whole("near", 6, 6, 2);
    let f = fleet(&[("a", 8, 4)]).flying(&near, "a", 4);
    assert_eq!(holds(&f.defer(gangs())), [("near", "behind")]);
    let d = f.order(Order::FewestMissing).defer(gangs());
    assert_eq!(holds(&d), [("old", "behind")]);
    let Hold::Behind { need, ahead } = &d[0].hold else {
        panic!("{d:?}")
    };
    assert_eq!((*need, ahead.name.as_str()), (4, "near"));
}

#[test]
fn fewest_missing_counts_the_group_that_needs_fewest() {
    // `pair` (3 members of 8 GPUs) needs 3 nodes of the 8-GPU group a or 2 of the 16-GPU
    // group b: it misses 2. `big` (older, 3 members of 16 GPUs) fits only b: it misses 3.
    // Room: a 2, b 3. By age `big` takes b and `pair` fits nowhere; by fewest missing `pair`
    // takes b first and `big` waits behind it.
    let mut f = fleet(&[("a", 2, 0)]);
    let b = gpu_group("b", 3, 16);
    let sb = shape(&b);
    f.groups.push((b, sb, 0));
    let big = || {
        gang("big")
            .min(3)
            .created(1)
            .members(3, |p| p.gpus(16).gpu_tolerant())
            .build()
    };
    let gangs = || vec![big(), whole("pair", 3, 3, 2)];
    assert_eq!(holds(&f.defer(gangs())), [("pair", "behind")]);
    let d = f.order(Order::FewestMissing).defer(gangs());
    assert_eq!(holds(&d), [("big", "behind")]);
}

#[test]
fn a_higher_priority_gang_goes_first_whatever_its_age() {
    let mut urgent = whole("urgent", 3, 3, 9);
    urgent.priority = 10;
    let d = fleet(&[("a", 4, 0)]).defer(vec![whole("old", 3, 3, 1), urgent]);
    assert_eq!(holds(&d), [("old", "behind")]);
}

#[test]
fn a_gang_larger_than_its_pools_room_has_no_room_and_smaller_ones_still_go() {
    // 4 + 1 left: not 6 even spread over both.
    let d = fleet(&[("a", 8, 4), ("b", 8, 7)])
        .defer(vec![whole("big", 6, 6, 1), whole("small", 2, 2, 2)]);
    assert_eq!(holds(&d), [("big", "no_room")]);
    assert_eq!(
        d[0].hold,
        Hold::NoRoom {
            need: 6,
            headroom: 4
        }
    );
}

#[test]
fn min_count_is_enough_to_go_ahead_when_the_whole_gang_does_not_fit() {
    let d = fleet(&[("a", 4, 1)]).defer(vec![whole("elastic", 5, 3, 1)]);
    assert!(d.is_empty(), "{d:?}");
}

#[test]
fn a_gang_whose_nodes_are_in_flight_is_covered_and_a_partial_repair_stays_on_its_group() {
    let covered = whole("covered", 3, 3, 1);
    let repair = whole("repair", 3, 3, 2);
    let d = fleet(&[("a", 10, 6), ("b", 10, 0)])
        .flying(&covered, "a", 3)
        .flying(&repair, "a", 2)
        .defer(vec![covered, repair]);
    assert_eq!(holds(&d), [("covered", "covered")]);
    // The repair needs 1 node of group a, which has 4 left: it goes ahead there. With a full,
    // it waits, although group b has room: its nodes were requested on a.
    let covered = whole("covered", 3, 3, 1);
    let repair = whole("repair", 3, 3, 2);
    let d = fleet(&[("a", 6, 6), ("b", 10, 0)])
        .flying(&repair, "a", 2)
        .defer(vec![covered, repair]);
    assert_eq!(holds(&d), [("repair", "no_room")]);
}

#[test]
fn a_gang_no_group_can_host_is_unhostable_with_the_first_groups_reason() {
    let too_big = gang("too-big")
        .min(2)
        .members(2, |p| p.gpus(16).gpu_tolerant())
        .build();
    let d = fleet(&[("a", 10, 0)]).defer(vec![too_big]);
    assert_eq!(holds(&d), [("too-big", "unhostable")]);
    let Hold::Unhostable { reason } = &d[0].hold else {
        panic!("{d:?}")
    };
    assert!(matches!(reason, Reason::PodTooLarge { .. }), "{reason:?}");
}

#[test]
fn only_strict_defers_and_formed_gangs_and_composite_children_are_left_alone() {
    let gangs = || vec![whole("old", 3, 3, 1), whole("new", 3, 3, 2)];
    for p in [Policy::RoundUp, Policy::Off] {
        assert!(fleet(&[("a", 4, 0)]).policy(p).defer(gangs()).is_empty());
    }
    let formed = gang("formed")
        .min(2)
        .members(2, |p| p.gpus(8).gpu_tolerant().bound("n1"))
        .build();
    let mut child = whole("child", 3, 3, 2);
    child.composite = Some("parent".to_owned());
    let d = fleet(&[("a", 3, 0)]).defer(vec![whole("first", 3, 3, 1), formed, child]);
    assert!(d.is_empty(), "{d:?}");
}

#[test]
fn idle_nodes_are_spent_before_headroom_in_admission_order() {
    // Headroom 2 and 2 idle nodes: the older gang of 3 takes both idle nodes and 1 fresh; the
    // younger gang of 2 has 1 node of room left and waits behind it.
    let f = fleet(&[("a", 4, 2)]).idle("a", 2);
    let d = f.defer(vec![whole("old", 3, 3, 1), whole("new", 2, 2, 2)]);
    assert_eq!(holds(&d), [("new", "behind")]);
    // Without the idle nodes the older gang has no room at all, and the younger takes it.
    let d = fleet(&[("a", 4, 2)]).defer(vec![whole("old", 3, 3, 1), whole("new", 2, 2, 2)]);
    assert_eq!(holds(&d), [("old", "no_room")]);
    // A gang the idle nodes alone hold is not deferred, even with no headroom.
    let d = fleet(&[("a", 4, 4)])
        .idle("a", 3)
        .defer(vec![whole("old", 3, 3, 1)]);
    assert!(d.is_empty(), "{d:?}");
}

#[test]
fn a_gang_no_group_holds_alone_goes_spread_over_its_pool_unless_it_has_a_topology_key() {
    // 4 + 2 left: the 6-node gang spreads (as admission would admit it), and then leaves
    // no room for the next one.
    let f = fleet(&[("a", 8, 4), ("b", 8, 6)]);
    let d = f.defer(vec![whole("big", 6, 6, 1), whole("small", 1, 1, 2)]);
    assert_eq!(holds(&d), [("small", "behind")]);
    // A topology key keeps it to one group: no room.
    let keyed = gang("keyed")
        .min(6)
        .created(1)
        .topology(labels::ZONE)
        .members(6, |p| p.gpus(8).gpu_tolerant())
        .build();
    let d = fleet(&[("a", 8, 4), ("b", 8, 6)]).defer(vec![keyed]);
    assert_eq!(holds(&d), [("keyed", "no_room")]);
}
