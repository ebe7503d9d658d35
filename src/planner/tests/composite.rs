//! `place_composites` and `combine`: composites admitted whole across node groups, or not at
//! all.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::model::{Composite, NodeGroupId, NodeGroupSpec};
use crate::planner::{
    AdmissionInput, CompositeInput, CompositePlan, Decision, GroupSlot, Policy, Reason, Rule,
    Verdict, admit, combine, place_composites,
};

use super::*;

/// A launcher of one 4-CPU pod (fits a CPU node).
fn launcher(name: &str, parent: &str) -> Gang {
    let mut g = gang(name).members(1, |p| p.cpus(4)).build();
    g.composite = Some(parent.to_owned());
    g
}

/// `n` workers that each need a whole 8-GPU node.
fn workers(name: &str, parent: &str, n: usize) -> Gang {
    let mut g = gang(name)
        .min(u32::try_from(n).unwrap())
        .members(n, |p| p.gpus(8).gpu_tolerant())
        .build();
    g.composite = Some(parent.to_owned());
    g
}

fn composite(name: &str, min: u32, children: &[&Gang]) -> Composite {
    Composite {
        id: GangRef {
            namespace: "ml".into(),
            name: name.to_owned(),
            api_version: "scheduling.k8s.io/v1beta1".into(),
            kind: "CompositePodGroup".into(),
        },
        min_group_count: min,
        children: children.iter().map(|g| g.id.clone()).collect(),
        priority: 0,
        created_unix: 0,
        topology_key: None,
        scheduled: false,
    }
}

/// Groups with their shapes and targets, in configuration order.
struct World {
    specs: Vec<(NodeGroupSpec, u32)>,
    shapes: Vec<NodeShape>,
}

impl World {
    fn new(specs: Vec<(NodeGroupSpec, u32)>) -> Self {
        let shapes = specs.iter().map(|(g, _)| shape(g)).collect();
        Self { specs, shapes }
    }

    fn slots(&self) -> Vec<GroupSlot<'_>> {
        self.specs
            .iter()
            .zip(&self.shapes)
            .map(|((g, target), shape)| GroupSlot {
                id: &g.id,
                shape: Some(shape),
                target: *target,
                max_size: g.max_size,
            })
            .collect()
    }

    fn place(
        &self,
        asked: &str,
        composites: &[Composite],
        gangs: &[Arc<Gang>],
        in_flight: &BTreeMap<GangRef, (NodeGroupId, u32)>,
    ) -> CompositePlan {
        let slots = self.slots();
        place_composites(&CompositeInput {
            asked: &NodeGroupId::new(asked),
            groups: &slots,
            composites,
            gangs,
            in_flight,
        })
    }

    /// The whole decision for `asked` as the engine makes it (Strict): composites first, then
    /// the per-group admission of the gangs outside composites, then `combine`.
    fn decide(
        &self,
        asked: &str,
        ca: u32,
        composites: &[Composite],
        gangs: &[Arc<Gang>],
        in_flight: &BTreeMap<GangRef, (NodeGroupId, u32)>,
    ) -> (Decision, Vec<Decision>) {
        let plan = self.place(asked, composites, gangs, in_flight);
        let i = self
            .specs
            .iter()
            .position(|(g, _)| g.id.as_str() == asked)
            .unwrap();
        let (spec, target) = &self.specs[i];
        let here = plan.nodes_on(&spec.id);
        let singles: Vec<Arc<Gang>> = gangs
            .iter()
            .filter(|g| !plan.children.contains(&g.id))
            .cloned()
            .collect();
        let here_in_flight: BTreeMap<GangRef, u32> = in_flight
            .iter()
            .filter(|(_, (g, _))| g == &spec.id)
            .map(|(k, (_, n))| (k.clone(), *n))
            .collect();
        let deferred = plan.deferred_gangs();
        let base = admit(&AdmissionInput {
            group: &spec.id,
            shape: Some(&self.shapes[i]),
            max_size: spec.max_size,
            target: target + here,
            ca_delta: ca.saturating_sub(here),
            policy: Policy::Strict,
            order: crate::planner::Order::Age,
            gangs: &singles,
            in_flight: &here_in_flight,
            elsewhere: &BTreeMap::new(),
            ungrouped_nodes: 0,
            idle_nodes: 0,
            spill: &[],
            deferred_composites: &deferred,
            repair_where_asked: false,
        });
        combine(base, &plan, &self.slots(), ca)
    }
}

fn names(d: &Decision) -> Vec<&str> {
    d.admitted.iter().map(|a| a.gang.name.as_str()).collect()
}

#[test]
fn a_composite_on_two_groups_is_scaled_up_in_one_decision_with_both_targets_recorded() {
    let l = launcher("job-launcher", "job");
    let w = workers("job-workers", "job", 2);
    let c = composite("job", 2, &[&l, &w]);
    let world = World::new(vec![(cpu_group("cpu", 4), 1), (gpu_group("h100", 4, 8), 0)]);
    let gangs = arcs(vec![l, w]);
    // CA asks for the GPU group, for the workers' pods.
    let (primary, companions) = world.decide("h100", 1, &[c], &gangs, &BTreeMap::new());
    assert_eq!(primary.verdict, Verdict::Accept, "{primary:?}");
    assert_eq!(primary.rule, Rule::CompositeAdmitted);
    assert_eq!(
        primary.applied_delta, 2,
        "both workers, one whole node each"
    );
    assert_eq!(names(&primary), ["job-workers"]);
    assert_eq!(companions.len(), 1, "{companions:?}");
    let cpu = &companions[0];
    assert_eq!(cpu.group.as_str(), "cpu");
    assert_eq!(cpu.rule, Rule::CompositeShare);
    assert_eq!((cpu.target, cpu.applied_delta, cpu.ca_delta), (1, 1, 0));
    assert_eq!(names(cpu), ["job-launcher"]);
    // The record of the asked group holds both groups' targets and nodes.
    let shares: Vec<(&str, u32, u32)> = primary.composites[0]
        .shares
        .iter()
        .map(|s| (s.group.as_str(), s.target, s.nodes))
        .collect();
    assert_eq!(shares, [("cpu", 1, 1), ("h100", 0, 2)]);
    assert_eq!(primary.composites, cpu.composites);
    assert!(
        primary.reason.contains("composite ml/job"),
        "{}",
        primary.reason
    );
}

#[test]
fn a_composite_whose_second_child_cannot_fit_gets_no_node_on_any_group() {
    let l = launcher("job-launcher", "job");
    let w = workers("job-workers", "job", 3);
    let c = composite("job", 2, &[&l, &w]);
    // The GPU group can add 2 nodes; the workers need 3 whole nodes.
    let world = World::new(vec![(cpu_group("cpu", 4), 0), (gpu_group("h100", 2, 8), 0)]);
    let gangs = arcs(vec![l, w]);
    for asked in ["cpu", "h100"] {
        let plan = world.place(asked, std::slice::from_ref(&c), &gangs, &BTreeMap::new());
        assert!(plan.admitted.is_empty(), "{asked}: {plan:?}");
        let (primary, companions) =
            world.decide(asked, 1, std::slice::from_ref(&c), &gangs, &BTreeMap::new());
        assert_eq!(primary.verdict, Verdict::Reject, "{asked}: {primary:?}");
        assert_eq!(primary.applied_delta, 0);
        assert!(companions.is_empty(), "{asked}: {companions:?}");
        match &primary.deferred[0].reason {
            Reason::CompositeShort {
                min_group_count,
                placeable,
                detail,
                ..
            } => {
                assert_eq!((*min_group_count, *placeable), (2, 1), "{asked}");
                assert!(detail.contains("job-workers"), "{detail}");
            }
            other => panic!("{asked}: {other:?}"),
        }
    }
}

#[test]
fn min_group_count_lets_a_composite_go_ahead_without_a_child_that_cannot_fit() {
    let l = launcher("job-launcher", "job");
    let w = workers("job-workers", "job", 3);
    let c = composite("job", 1, &[&l, &w]);
    let world = World::new(vec![(cpu_group("cpu", 4), 0), (gpu_group("h100", 2, 8), 0)]);
    let gangs = arcs(vec![l, w]);
    let (primary, companions) = world.decide("cpu", 1, &[c], &gangs, &BTreeMap::new());
    assert_eq!(primary.verdict, Verdict::Accept, "{primary:?}");
    assert_eq!(names(&primary), ["job-launcher"]);
    assert!(companions.is_empty());
}

#[test]
fn a_composite_topology_keeps_every_child_in_the_asked_groups_domain() {
    let l = launcher("job-launcher", "job");
    let w = workers("job-workers", "job", 2);
    let mut c = composite("job", 2, &[&l, &w]);
    c.topology_key = Some("zone".into());
    let zone = |g, z| with_topology(g, "zone", z);
    // `cpu-a` comes first in configuration order but is in the other zone.
    let world = World::new(vec![
        (zone(cpu_group("cpu-a", 4), "a"), 0),
        (zone(cpu_group("cpu-b", 4), "b"), 0),
        (zone(gpu_group("h100-b", 4, 8), "b"), 0),
    ]);
    let gangs = arcs(vec![l, w]);
    let plan = world.place("h100-b", std::slice::from_ref(&c), &gangs, &BTreeMap::new());
    let a = &plan.admitted[0];
    assert_eq!(a.domain, Some(("zone".into(), "b".into())));
    let groups: Vec<&str> = a.shares.iter().map(|(g, _)| g.as_str()).collect();
    assert_eq!(groups, ["cpu-b", "h100-b"]);
    // Without a CPU group in zone b, nothing is placed at all.
    let world = World::new(vec![
        (zone(cpu_group("cpu-a", 4), "a"), 0),
        (zone(gpu_group("h100-b", 4, 8), "b"), 0),
    ]);
    let plan = world.place("h100-b", std::slice::from_ref(&c), &gangs, &BTreeMap::new());
    assert!(plan.admitted.is_empty(), "{plan:?}");
    assert!(
        matches!(&plan.deferred[0].reason, Reason::CompositeShort { detail, .. } if detail.contains("job-launcher")),
        "{plan:?}"
    );
}

#[test]
fn a_composite_with_its_nodes_requested_is_covered_and_ca_asking_again_is_rejected() {
    let l = launcher("job-launcher", "job");
    let w = workers("job-workers", "job", 2);
    let c = composite("job", 2, &[&l, &w]);
    let world = World::new(vec![(cpu_group("cpu", 4), 1), (gpu_group("h100", 4, 8), 2)]);
    let in_flight = BTreeMap::from([
        (l.id.clone(), (NodeGroupId::new("cpu"), 1)),
        (w.id.clone(), (NodeGroupId::new("h100"), 2)),
    ]);
    let gangs = arcs(vec![l, w]);
    // CA does not count the GPU group's upcoming nodes (it did not scale it up itself) and
    // asks for it again.
    let (primary, companions) = world.decide("h100", 2, &[c], &gangs, &in_flight);
    assert_eq!(primary.verdict, Verdict::Reject, "{primary:?}");
    assert_eq!(primary.rule, Rule::AllCovered);
    assert!(companions.is_empty());
}

#[test]
fn a_composite_none_of_whose_children_fits_the_asked_group_waits_and_no_child_goes_alone() {
    let l = launcher("job-launcher", "job");
    let w = workers("job-workers", "job", 2);
    let c = composite("job", 2, &[&l, &w]);
    // A second GPU group none of the composite's pods tolerates.
    let mut other = gpu_group("other", 4, 8);
    other.taints.push(taint(
        "dedicated",
        "solo",
        crate::model::TaintEffect::NoSchedule,
    ));
    let world = World::new(vec![
        (cpu_group("cpu", 4), 0),
        (gpu_group("h100", 4, 8), 0),
        (other, 0),
    ]);
    let solo = gang("solo")
        .members(1, |p| {
            p.gpus(8)
                .gpu_tolerant()
                .toleration(tolerate_exists("dedicated", None))
        })
        .build();
    let mut gangs = arcs(vec![l, w, solo]);
    gangs.sort_by(|a, b| a.id.cmp(&b.id));
    let plan = world.place("other", std::slice::from_ref(&c), &gangs, &BTreeMap::new());
    assert!(
        plan.admitted.is_empty() && plan.deferred.is_empty(),
        "{plan:?}"
    );
    assert_eq!(plan.children.len(), 2);
    let (primary, companions) = world.decide(
        "other",
        1,
        std::slice::from_ref(&c),
        &gangs,
        &BTreeMap::new(),
    );
    assert_eq!(names(&primary), ["solo"], "{primary:?}");
    assert!(companions.is_empty());
    // The GPU group the workers fit brings the whole composite in.
    let (primary, companions) = world.decide("h100", 1, &[c], &gangs, &BTreeMap::new());
    assert_eq!(names(&primary), ["job-workers", "solo"], "{primary:?}");
    assert_eq!(names(&companions[0]), ["job-launcher"]);
}

#[test]
fn composites_compete_for_headroom_by_priority() {
    let l1 = launcher("low-launcher", "low");
    let w1 = workers("low-workers", "low", 2);
    let l2 = launcher("high-launcher", "high");
    let w2 = workers("high-workers", "high", 2);
    let low = composite("low", 2, &[&l1, &w1]);
    let mut high = composite("high", 2, &[&l2, &w2]);
    high.priority = 10;
    let world = World::new(vec![(cpu_group("cpu", 4), 0), (gpu_group("h100", 3, 8), 0)]);
    let mut gangs = arcs(vec![l1, w1, l2, w2]);
    gangs.sort_by(|a, b| a.id.cmp(&b.id));
    let plan = world.place("h100", &[low, high], &gangs, &BTreeMap::new());
    assert_eq!(plan.admitted.len(), 1, "{plan:?}");
    assert_eq!(plan.admitted[0].composite.name, "high");
    assert_eq!(plan.deferred[0].composite.name, "low");
}
