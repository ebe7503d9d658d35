//! `admit`: the policies, rounding, trimming, competition for headroom and in-flight coverage.

use std::collections::BTreeMap;

use crate::model::{NodeGroupId, labels};
use crate::planner::{
    AdmissionInput, Decision, Elsewhere, Extent, Order, Policy, Reason, Rule, Verdict, admit,
};

use super::*;

/// A gang of `n` members that each need a whole 8-GPU node.
fn whole_node_gang(name: &str, n: usize, min: u32) -> Gang {
    gang(name)
        .min(min)
        .members(n, |p| p.gpus(8).gpu_tolerant())
        .build()
}

#[derive(Clone)]
struct Case {
    id: NodeGroupId,
    shape: NodeShape,
    max: u32,
    target: u32,
    ca: u32,
    policy: Policy,
    order: Order,
    gangs: Vec<Gang>,
    in_flight: BTreeMap<GangRef, u32>,
    elsewhere: BTreeMap<GangRef, Elsewhere>,
    ungrouped: u32,
    idle: u32,
}

/// An 8-GPU group with max `max` at target `target`, CA asking for `ca`, policy Strict.
fn case(max: u32, target: u32, ca: u32, gangs: Vec<Gang>) -> Case {
    let g = gpu_group("h100", max, 8);
    Case {
        id: g.id.clone(),
        shape: shape(&g),
        max,
        target,
        ca,
        policy: Policy::Strict,
        order: Order::Age,
        gangs,
        in_flight: BTreeMap::new(),
        elsewhere: BTreeMap::new(),
        ungrouped: 0,
        idle: 0,
    }
}

impl Case {
    fn policy(mut self, p: Policy) -> Self {
        self.policy = p;
        self
    }
    fn order(mut self, o: Order) -> Self {
        self.order = o;
        self
    }
    fn ungrouped(mut self, n: u32) -> Self {
        self.ungrouped = n;
        self
    }
    fn idle(mut self, n: u32) -> Self {
        self.idle = n;
        self
    }
    fn decide(&self) -> Decision {
        admit(&AdmissionInput {
            group: &self.id,
            shape: Some(&self.shape),
            max_size: self.max,
            target: self.target,
            ca_delta: self.ca,
            policy: self.policy,
            order: self.order,
            gangs: &arcs(self.gangs.clone()),
            in_flight: &self.in_flight,
            elsewhere: &self.elsewhere,
            ungrouped_nodes: self.ungrouped,
            idle_nodes: self.idle,
            spill: &[],
            deferred_composites: &[],
            repair_where_asked: false,
        })
    }
}

fn admitted(d: &Decision) -> Vec<(&str, u32, Extent)> {
    d.admitted
        .iter()
        .map(|a| (a.gang.name.as_str(), a.nodes, a.extent))
        .collect()
}

fn deferred(d: &Decision) -> Vec<&str> {
    d.deferred.iter().map(|g| g.gang.name.as_str()).collect()
}

#[test]
fn strict_rejects_a_gang_that_needs_more_nodes_than_the_headroom_and_names_both_numbers() {
    // minCount 8, a whole 8-GPU node per member, headroom 10 - 5 = 5.
    let c = case(10, 5, 5, vec![whole_node_gang("train", 8, 8)]);
    let d = c.decide();
    assert_eq!(d.verdict, Verdict::Reject);
    assert_eq!(d.rule, Rule::NoGangFits);
    assert_eq!(d.applied_delta, 0);
    assert!(d.reason.contains("ml/train needs 8 nodes"), "{}", d.reason);
    assert!(d.reason.contains("headroom 5"), "{}", d.reason);
    assert_eq!(
        d.deferred[0].reason,
        Reason::InsufficientHeadroom {
            nodes_all: 8,
            nodes_min: 8,
            headroom: 5
        }
    );
}

#[test]
fn policy_off_accepts_cas_delta_for_a_gang_that_does_not_fit() {
    let d = case(10, 5, 5, vec![whole_node_gang("train", 8, 8)])
        .policy(Policy::Off)
        .decide();
    assert_eq!(
        (d.verdict, d.rule, d.applied_delta),
        (Verdict::Accept, Rule::Passthrough, 5)
    );
}

#[test]
fn policy_round_up_accepts_cas_delta_for_a_gang_that_does_not_fit() {
    let d = case(10, 5, 3, vec![whole_node_gang("train", 8, 8)])
        .policy(Policy::RoundUp)
        .decide();
    assert_eq!(
        (d.verdict, d.rule, d.applied_delta),
        (Verdict::Accept, Rule::NoGangFitsRoundUp, 3)
    );
}

#[test]
fn strict_and_round_up_round_cas_delta_up_to_the_whole_gang() {
    for policy in [Policy::Strict, Policy::RoundUp] {
        let d = case(10, 0, 1, vec![whole_node_gang("train", 4, 4)])
            .policy(policy)
            .decide();
        assert_eq!(d.applied_delta, 4, "{policy:?}");
        assert_eq!(admitted(&d), vec![("train", 4, Extent::Whole)]);
        assert!(d.reason.contains("rounded up"), "{}", d.reason);
    }
}

#[test]
fn strict_trims_cas_delta_to_admitted_gangs_plus_ungrouped_pods_and_round_up_does_not() {
    let c = case(20, 0, 10, vec![whole_node_gang("train", 4, 4)]).ungrouped(2);
    let d = c.decide();
    assert_eq!((d.rule, d.applied_delta), (Rule::GangsAdmitted, 6));
    assert!(d.reason.contains("trimmed"), "{}", d.reason);
    let d = c.policy(Policy::RoundUp).decide();
    assert_eq!(d.applied_delta, 10);
}

#[test]
fn the_higher_priority_gang_is_admitted_whole_and_the_other_deferred() {
    let low = gang("low")
        .priority(1)
        .min(4)
        .members(4, |p| p.gpus(8).gpu_tolerant());
    let high = gang("high").priority(10).created(100).min(4);
    let high = high.members(4, |p| p.gpus(8).gpu_tolerant());
    let d = case(6, 0, 4, vec![low.build(), high.build()]).decide();
    assert_eq!(admitted(&d), vec![("high", 4, Extent::Whole)]);
    assert_eq!(deferred(&d), vec!["low"]);
    assert_eq!(d.applied_delta, 4);
}

#[test]
fn at_equal_priority_the_older_gang_is_admitted_first() {
    let newer = gang("a-newer").created(200).min(4);
    let older = gang("b-older").created(100).min(4);
    let d = case(
        6,
        0,
        4,
        vec![
            newer.members(4, |p| p.gpus(8).gpu_tolerant()).build(),
            older.members(4, |p| p.gpus(8).gpu_tolerant()).build(),
        ],
    )
    .decide();
    assert_eq!(admitted(&d), vec![("b-older", 4, Extent::Whole)]);
    assert_eq!(deferred(&d), vec!["a-newer"]);
}

#[test]
fn fewest_missing_admits_the_gang_nearest_to_forming_before_an_older_one() {
    // Headroom 4: the older gang misses 4 nodes, the newer one 2 (4 of its 6 in flight).
    let older = whole_node_gang("older", 4, 4);
    let mut nearer = whole_node_gang("nearer", 6, 6);
    nearer.created_unix = 200;
    let mut c = case(12, 8, 2, vec![older.clone(), nearer.clone()]);
    c.in_flight = in_flight(&nearer, 4);
    let d = c.clone().decide();
    assert_eq!(admitted(&d), vec![("older", 4, Extent::Whole)]);
    assert_eq!(deferred(&d), vec!["nearer"]);
    let d = c.order(Order::FewestMissing).decide();
    assert_eq!(admitted(&d), vec![("nearer", 2, Extent::Whole)]);
    assert_eq!(deferred(&d), vec!["older"]);
    assert_eq!(d.applied_delta, 2);
}

#[test]
fn fewest_missing_still_takes_the_higher_priority_gang_first() {
    let mut big = whole_node_gang("big", 4, 4);
    big.priority = 10;
    let mut small = whole_node_gang("small", 2, 2);
    small.created_unix = -100;
    let d = case(4, 0, 2, vec![small, big])
        .order(Order::FewestMissing)
        .decide();
    assert_eq!(admitted(&d), vec![("big", 4, Extent::Whole)]);
    assert_eq!(deferred(&d), vec!["small"]);
}

#[test]
fn a_gang_too_large_for_the_headroom_does_not_block_a_smaller_one_behind_it() {
    let d = case(
        6,
        0,
        2,
        vec![
            whole_node_gang("big", 8, 8),
            gang("small")
                .priority(-1)
                .min(2)
                .members(2, |p| p.gpus(8).gpu_tolerant())
                .build(),
        ],
    )
    .decide();
    assert_eq!(admitted(&d), vec![("small", 2, Extent::Whole)]);
    assert_eq!(deferred(&d), vec!["big"]);
    assert_eq!(d.applied_delta, 2);
}

#[test]
fn a_gang_whose_min_count_fits_but_not_its_whole_is_admitted_at_min_count() {
    let d = case(5, 0, 2, vec![whole_node_gang("train", 8, 4)]).decide();
    assert_eq!(admitted(&d), vec![("train", 4, Extent::MinCount)]);
    assert_eq!(d.applied_delta, 4);
    assert!(d.reason.contains("4 for minCount"), "{}", d.reason);
}

#[test]
fn in_flight_nodes_are_subtracted_from_a_gangs_need() {
    let g = whole_node_gang("train", 8, 8);
    let mut c = case(10, 5, 1, vec![g.clone()]);
    c.in_flight = in_flight(&g, 5);
    let d = c.decide();
    assert_eq!(admitted(&d), vec![("train", 3, Extent::Whole)]);
    assert_eq!((d.applied_delta, d.admitted[0].in_flight), (3, 5));
}

#[test]
fn a_gang_covered_by_in_flight_nodes_the_target_does_not_hold_leaves_cas_delta_alone() {
    // Target 5 below the 8 in flight: some requests never reached the backend (a crash
    // between the record and the call); CA's delta still applies.
    let g = whole_node_gang("train", 8, 8);
    let mut c = case(10, 5, 2, vec![g.clone()]);
    c.in_flight = in_flight(&g, 8);
    let d = c.decide();
    assert_eq!((d.rule, d.applied_delta), (Rule::NoGangs, 2));
    assert_eq!(d.covered.len(), 1);
    assert!(d.admitted.is_empty());
}

#[test]
fn strict_rejects_a_call_for_gangs_whose_nodes_are_all_in_flight_and_held_by_the_target() {
    // The gang's 4 nodes are there (target 4) but it cannot use them yet (a late device
    // plugin): CA asks again; new nodes would only idle.
    let g = whole_node_gang("train", 4, 4);
    let mut c = case(8, 4, 4, vec![g.clone()]);
    c.in_flight = in_flight(&g, 4);
    let d = c.decide();
    assert_eq!(
        (d.rule, d.verdict, d.applied_delta),
        (Rule::AllCovered, Verdict::Reject, 0)
    );
    assert!(
        d.reason.contains("train") && d.reason.contains("4 in flight"),
        "{}",
        d.reason
    );
    // roundUp never rejects.
    let d = c.clone().policy(Policy::RoundUp).decide();
    assert_eq!((d.rule, d.applied_delta), (Rule::NoGangs, 4));
    // With an ungrouped pod pending, only its node: none for the covered gang.
    let d = c.clone().ungrouped(1).decide();
    assert_eq!(
        (d.rule, d.verdict, d.applied_delta),
        (Rule::UngroupedOnly, Verdict::Accept, 1)
    );
    assert!(
        d.reason.contains("ml/train 4 in flight") && d.reason.contains("ungrouped"),
        "{}",
        d.reason
    );
}

#[test]
fn strict_adds_no_node_for_a_gang_whose_nodes_are_in_flight_on_another_group() {
    // CA asks this group for the pods of a gang whose 4 nodes were requested on h100-b (CA
    // packed other pods onto those upcoming nodes in its simulation, or ignores them after
    // that group's failed scale-up): a second set of nodes would only idle.
    let g = whole_node_gang("train", 4, 4);
    let mut c = case(8, 0, 4, vec![g.clone()]);
    let there = Elsewhere {
        group: NodeGroupId::new("h100-b"),
        short: false,
        nodes: 4,
    };
    c.elsewhere = BTreeMap::from([(g.id.clone(), there.clone())]);
    let d = c.decide();
    assert_eq!(
        (d.rule, d.verdict, d.applied_delta),
        (Rule::AllCovered, Verdict::Reject, 0)
    );
    assert_eq!(d.covered[0].elsewhere, Some(NodeGroupId::new("h100-b")));
    assert!(
        d.reason.contains("ml/train on node group h100-b"),
        "{}",
        d.reason
    );
    // Ungrouped pods still get theirs, and only theirs.
    let d = c.clone().ungrouped(2).decide();
    assert_eq!((d.rule, d.applied_delta), (Rule::UngroupedOnly, 2));
    // A second gang that needs nodes here is admitted as usual, with nothing for the first.
    let mut two = c.clone();
    two.gangs.push(whole_node_gang("eval", 2, 2));
    let d = two.decide();
    assert_eq!(admitted(&d), vec![("eval", 2, Extent::Whole)]);
    assert_eq!(d.applied_delta, 2);
    // roundUp and off keep CA's delta.
    for policy in [Policy::RoundUp, Policy::Off] {
        let d = c.clone().policy(policy).decide();
        assert_eq!(d.applied_delta, 4, "{policy:?}");
    }
    // Some of its nodes there failed, and h100-b is not among the groups this decision may
    // spread over (so not known to host it alike): the repair waits for CA to ask h100-b
    // again, and CA's delta applies here (still not the whole gang). With h100-b hosting it
    // alike, the missing nodes are repaired here (tests/spread.rs).
    let mut short = c.clone();
    short.elsewhere = BTreeMap::from([(
        g.id.clone(),
        Elsewhere {
            short: true,
            ..there
        },
    )]);
    let d = short.decide();
    assert_eq!((d.rule, d.applied_delta), (Rule::NoGangs, 4));
    assert!(d.admitted.is_empty(), "{d:?}");
}

#[test]
fn strict_accepts_nodes_for_ungrouped_pods_when_no_gang_fits() {
    let d = case(10, 5, 3, vec![whole_node_gang("train", 8, 8)])
        .ungrouped(2)
        .decide();
    assert_eq!(
        (d.verdict, d.rule, d.applied_delta),
        (Verdict::Accept, Rule::UngroupedOnly, 2)
    );
    assert!(d.reason.contains("ungrouped"), "{}", d.reason);
}

#[test]
fn a_group_at_max_size_rejects_under_every_policy() {
    for policy in [Policy::Strict, Policy::RoundUp, Policy::Off] {
        let d = case(4, 4, 1, vec![]).policy(policy).decide();
        assert_eq!(
            (d.verdict, d.rule, d.applied_delta),
            (Verdict::Reject, Rule::AtMax, 0)
        );
    }
}

#[test]
fn gangs_the_group_cannot_host_or_that_are_not_pending_do_not_affect_the_decision() {
    let l4_only = gang("l4")
        .min(1)
        .member(
            pod("p")
                .gpus(1)
                .gpu_tolerant()
                .selector(labels::GPU_PRODUCT, "NVIDIA-L4")
                .build(),
        )
        .build();
    let mut done = whole_node_gang("done", 2, 2);
    done.scheduled = true;
    let d = case(10, 0, 3, vec![l4_only, done]).decide();
    assert_eq!(
        (d.rule, d.applied_delta, d.unhostable),
        (Rule::NoGangs, 3, 1)
    );
}

#[test]
fn cas_delta_beyond_the_headroom_is_capped() {
    let d = case(10, 5, 7, vec![]).policy(Policy::Off).decide();
    assert_eq!((d.applied_delta, d.capped), (5, true));
    assert!(d.reason.contains("capped at headroom 5"), "{}", d.reason);
}

#[test]
fn a_group_without_a_template_hosts_no_gang() {
    let id = NodeGroupId::new("bare");
    let gangs = vec![whole_node_gang("train", 2, 2)];
    let d = admit(&AdmissionInput {
        group: &id,
        shape: None,
        max_size: 10,
        target: 0,
        ca_delta: 2,
        policy: Policy::Strict,
        order: Order::Age,
        gangs: &arcs(gangs),
        in_flight: &BTreeMap::new(),
        elsewhere: &BTreeMap::new(),
        ungrouped_nodes: 0,
        idle_nodes: 0,
        spill: &[],
        deferred_composites: &[],
        repair_where_asked: false,
    });
    assert_eq!(
        (d.rule, d.applied_delta, d.unhostable),
        (Rule::NoGangs, 2, 1)
    );
    assert!(d.reason.contains("no template"), "{}", d.reason);
}

#[test]
fn a_decision_serializes_as_a_camel_case_record_with_bounded_labels() {
    let d = case(10, 5, 5, vec![whole_node_gang("train", 8, 8)]).decide();
    let json = serde_json::to_value(&d).unwrap();
    assert_eq!(json["verdict"], "reject");
    assert_eq!(json["rule"], d.kind());
    assert_eq!(json["policy"], "strict");
    assert_eq!(json["appliedDelta"], 0);
    assert_eq!(
        json["deferred"][0]["reason"]["kind"],
        "insufficient_headroom"
    );
    assert_eq!(json["deferred"][0]["reason"]["nodesAll"], 8);
    assert_eq!(json["deferred"][0]["gang"]["name"], "train");
}

#[test]
fn the_reason_names_only_the_first_few_gangs() {
    let gangs = (0..8)
        .map(|i| whole_node_gang(&format!("g{i}"), 8, 8))
        .collect();
    let d = case(10, 5, 5, gangs).decide();
    assert!(d.reason.contains("and 3 more"), "{}", d.reason);
    assert_eq!(d.deferred.len(), 8);
}

#[test]
fn a_gang_with_an_unresolved_claim_is_held_and_never_sized_from_a_partial_count() {
    // Each member needs 1 GPU: without its volumes all 8 would share one node.
    let unresolved = gang("ckpt")
        .min(8)
        .priority(100)
        .members(8, |p| p.gpus(1).gpu_tolerant().unresolved("ckpt-data"))
        .build();
    let d = case(16, 0, 1, vec![unresolved.clone()]).decide();
    assert_eq!(
        (d.verdict, d.rule, d.applied_delta),
        (Verdict::Reject, Rule::NoGangFits, 0)
    );
    assert_eq!(deferred(&d), ["ckpt"]);
    assert_eq!(d.deferred[0].reason.kind(), "unresolved_claim");
    assert!(
        d.reason
            .contains("ml/ckpt held: pod ckpt-0 uses persistentvolumeclaim ckpt-data"),
        "{}",
        d.reason
    );
    assert_eq!(d.unhostable, 0);

    // A held gang takes no headroom: a resolvable gang behind it is admitted whole.
    let d = case(
        16,
        0,
        1,
        vec![unresolved.clone(), whole_node_gang("train", 2, 2)],
    )
    .decide();
    assert_eq!(admitted(&d), [("train", 2, Extent::Whole)]);
    assert_eq!(deferred(&d), ["ckpt"]);
    assert_eq!(d.applied_delta, 2);

    // A gang this group could not host anyway stays merely unhostable.
    let elsewhere = gang("cpu-only")
        .min(2)
        .members(2, |p| p.cpus(1).selector("pool", "cpu").unresolved("x"))
        .build();
    let d = case(16, 0, 1, vec![elsewhere]).decide();
    assert_eq!(
        (d.rule, d.unhostable, d.applied_delta),
        (Rule::NoGangs, 1, 1)
    );
    assert!(d.deferred.is_empty());
}

#[test]
fn strict_credits_idle_nodes_before_fresh_ones_and_rounds_up_only_what_ca_cannot_see() {
    // A gang of 4 whole nodes and 2 idle Ready nodes in the group: CA packed 2 members onto
    // them and asks for 2. Strict adds the 2 fresh nodes, not the whole gang again.
    let c = case(8, 2, 2, vec![whole_node_gang("train", 4, 4)]).idle(2);
    let d = c.decide();
    assert_eq!(admitted(&d), vec![("train", 2, Extent::Whole)]);
    assert_eq!(d.admitted[0].idle, 2);
    assert_eq!((d.rule, d.applied_delta), (Rule::GangsAdmitted, 2));
    assert!(d.reason.contains("train 2 + 2 idle"), "{}", d.reason);
    // Without the idle nodes the round-up adds the whole gang.
    let mut none = c.clone();
    none.idle = 0;
    assert_eq!(none.decide().applied_delta, 4);
    // CA asking for all 4 says it found the idle nodes unusable (a taint, a pod gangscaler
    // does not model): its delta stands, never trimmed below it.
    let mut asked_all = c.clone();
    asked_all.ca = 4;
    assert_eq!(asked_all.decide().applied_delta, 4);
    // Idle nodes beyond the gang's need credit nothing more.
    let d = c.clone().idle(7).decide();
    assert_eq!((d.admitted[0].nodes, d.admitted[0].idle), (0, 4));
    assert_eq!(
        d.applied_delta, 2,
        "CA's ask, within what the gang could use"
    );
}

#[test]
fn idle_nodes_let_a_gang_fit_and_go_to_candidates_in_admission_order() {
    // Headroom 2: a gang of 4 fits only with 2 idle nodes.
    let d = case(8, 6, 1, vec![whole_node_gang("train", 4, 4)])
        .idle(2)
        .decide();
    assert_eq!(admitted(&d), vec![("train", 2, Extent::Whole)]);
    assert_eq!(d.applied_delta, 2);
    let d = case(8, 6, 1, vec![whole_node_gang("train", 4, 4)]).decide();
    assert_eq!((d.rule, d.verdict), (Rule::NoGangFits, Verdict::Reject));
    // The higher-priority gang is credited first; a gang deferred is credited nothing, and
    // the idle nodes go to the next one.
    let mut first = whole_node_gang("first", 3, 3);
    first.priority = 10;
    let mut huge = whole_node_gang("huge", 12, 12);
    huge.priority = 5;
    let second = whole_node_gang("second", 2, 2);
    let d = case(8, 4, 1, vec![second, huge, first]).idle(4).decide();
    assert_eq!(
        admitted(&d),
        vec![("first", 0, Extent::Whole), ("second", 1, Extent::Whole)]
    );
    let credits: Vec<u32> = d.admitted.iter().map(|a| a.idle).collect();
    assert_eq!(credits, vec![3, 1]);
    assert_eq!(deferred(&d), vec!["huge"]);
}
