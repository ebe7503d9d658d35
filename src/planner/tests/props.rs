//! Properties over generated gangs and shapes, each checked independently of the packing code:
//! (a) every plan `fit` returns hosts every unbound member under every limit, and every refusal
//! is justified; (b) for homogeneous gangs the node count is the exact minimum; (c) `admit`
//! never applies more than the headroom, and in Strict never admits part of a gang.

use std::collections::BTreeMap;

use proptest::prelude::*;

use crate::model::{Capacity, TaintEffect, quantity::Quantity};
use crate::planner::fit::fit_counts;
use crate::planner::{
    AdmissionInput, Elsewhere, GroupSlot, Order, Policy, Reason, Spill, Verdict, admit, fit,
    spread_shares,
};

use super::*;

const DRIVERS: [&str; 3] = ["a.csi", "b.csi", "c.csi"];

/// A group with random capacity, optional GPUs and RDMA, CSI limits on up to two drivers and
/// maybe the GPU taint.
fn arb_group() -> impl Strategy<Value = NodeGroupSpec> {
    (
        (1u64..=64, 1u64..=512, 1u64..=200, 1u64..=32),
        proptest::option::of(1u32..=8),
        proptest::option::of((1u32..=8, 100u32..=3200)),
        (
            proptest::option::of(1u32..=30),
            proptest::option::of(1u32..=30),
        ),
        any::<bool>(),
    )
        .prop_map(|((cpu, mem, eph, pods), gpus, rdma, (a, b), tainted)| {
            let mut g = gpu_group("g", 100, gpus.unwrap_or(1));
            g.capacity = Some(Capacity {
                cpu: Quantity::from_units(cpu),
                memory: Quantity::from_units(mem * GI),
                ephemeral_storage: Quantity::from_units(eph * GI),
                pods,
            });
            if gpus.is_none() {
                g.gpu = None;
            }
            match rdma {
                Some((devices, gbps)) => {
                    if let Some(r) = g.rdma.as_mut() {
                        r.devices = devices;
                        r.bandwidth_gbps = gbps;
                    }
                }
                None => g.rdma = None,
            }
            if let Some(limit) = a {
                g.csi.insert(DRIVERS[0].into(), limit);
            }
            if let Some(limit) = b {
                g.csi.insert(DRIVERS[1].into(), limit);
            }
            if !tainted {
                g.taints.clear();
            }
            g
        })
}

/// An amount of a limit: often none, otherwise about `limit / k` for a small `k`, so that a
/// node holds a few of them.
fn amount(limit: u64) -> impl Strategy<Value = u64> {
    prop_oneof![
        2 => Just(0),
        5 => (1u64..=12, 0u64..=300).prop_map(move |(k, jitter)| {
            let base = limit / k;
            base - base * jitter / 1000
        }),
    ]
}

/// A demand that fits one node of `s` alone, except for taints (tolerated 97% of the time).
fn arb_demand(s: &NodeShape) -> BoxedStrategy<PodDemand> {
    let a = s.allocatable();
    let extended: Vec<_> = a.extended.iter().map(|(k, v)| (k.clone(), *v)).collect();
    let ext_amounts: Vec<_> = extended.iter().map(|(_, v)| amount(*v)).collect();
    // Drivers without a limit get up to 8 volumes.
    let volume_amounts: Vec<_> = DRIVERS
        .iter()
        .map(|d| amount(s.csi().get(*d).map_or(8, |&l| u64::from(l))))
        .collect();
    (
        (
            amount(a.cpu_milli),
            amount(a.memory_bytes),
            amount(a.ephemeral_storage_bytes),
        ),
        ext_amounts,
        volume_amounts,
        prop::bool::weighted(0.97),
    )
        .prop_map(move |((cpu, memory, storage), ext, volumes, tolerant)| {
            let mut d = PodDemand {
                cpu_milli: cpu,
                memory_bytes: memory,
                ephemeral_storage_bytes: storage,
                ..PodDemand::default()
            };
            for ((name, _), n) in extended.iter().zip(ext) {
                if n > 0 {
                    d.extended.insert(name.clone(), n);
                }
            }
            for (driver, n) in DRIVERS.iter().zip(volumes) {
                if n > 0 {
                    d.volumes
                        .insert((*driver).into(), u32::try_from(n).unwrap());
                }
            }
            if tolerant {
                d.tolerations.push(tolerate_exists("nvidia.com/gpu", None));
            }
            d
        })
        .boxed()
}

/// Makes `d` unfittable on `s` in one of four ways: CPU, an unknown extended resource, CSI
/// volumes (memory when no driver is limited), GPUs.
fn sabotage(d: &mut PodDemand, s: &NodeShape, how: usize) {
    match how {
        0 => d.cpu_milli = s.allocatable().cpu_milli + 1,
        1 => {
            d.extended.insert("example.com/fpga".into(), 1);
        }
        2 => {
            if let Some((driver, limit)) = s.csi().iter().next() {
                d.volumes.insert(driver.clone(), limit + 1);
            } else {
                d.memory_bytes = s.allocatable().memory_bytes + 1;
            }
        }
        _ => {
            // More GPUs than a node has (any, on a GPU-less node).
            let gpus = s.allocatable().extended.get(GPU).copied().unwrap_or(0);
            d.extended.insert(GPU.into(), gpus + 1);
        }
    }
}

/// A shape and a gang of 1..24 members of it: some bound, random minCount, and one member
/// sabotaged 15% of the time.
fn arb_gang_on(s: NodeShape) -> impl Strategy<Value = Gang> {
    (
        proptest::collection::vec((arb_demand(&s), prop::bool::weighted(0.15)), 1..24),
        0u32..30,
        proptest::option::weighted(0.15, (0usize..24, 0usize..4)),
    )
        .prop_map(move |(members, min, broken)| {
            let n = members.len();
            let mut b = gang("g").min(min);
            for (i, (demand, bound)) in members.into_iter().enumerate() {
                let mut m = pod(&format!("p{i:02}")).build();
                m.demand = demand.into();
                if let Some((at, how)) = broken
                    && at % n == i
                {
                    sabotage(std::sync::Arc::make_mut(&mut m.demand), &s, how);
                }
                if bound {
                    m.node = Some(format!("node-{i}"));
                }
                b = b.member(m);
            }
            b.build()
        })
}

fn arb_shape() -> impl Strategy<Value = NodeShape> {
    arb_group().prop_map(|g| shape(&g))
}

fn arb_case() -> impl Strategy<Value = (NodeShape, Gang)> {
    arb_shape().prop_flat_map(|s| (Just(s.clone()), arb_gang_on(s)))
}

/// Whether one node can hold `pods` together, checked against the shape's public fields.
fn node_holds(shape: &NodeShape, pods: &[&PodDemand]) -> Result<(), String> {
    let a = shape.allocatable();
    let sum = |f: fn(&PodDemand) -> u64| pods.iter().map(|d| f(d)).sum::<u64>();
    let checks = [
        ("cpu", sum(|d| d.cpu_milli), a.cpu_milli),
        ("memory", sum(|d| d.memory_bytes), a.memory_bytes),
        (
            "ephemeral-storage",
            sum(|d| d.ephemeral_storage_bytes),
            a.ephemeral_storage_bytes,
        ),
        ("pods", pods.len() as u64, a.pods),
    ];
    for (name, used, limit) in checks {
        if used > limit {
            return Err(format!("{name}: {used} > {limit}"));
        }
    }
    let mut extended: BTreeMap<&str, u64> = BTreeMap::new();
    let mut volumes: BTreeMap<&str, u64> = BTreeMap::new();
    for d in pods {
        for (k, v) in &d.extended {
            *extended.entry(k).or_default() += v;
        }
        for (k, v) in &d.volumes {
            *volumes.entry(k).or_default() += u64::from(*v);
        }
    }
    for (k, used) in extended {
        let limit = a.extended.get(k).copied().unwrap_or(0);
        if used > limit {
            return Err(format!("{k}: {used} > {limit}"));
        }
    }
    for (k, used) in volumes {
        if let Some(&limit) = shape.csi().get(k)
            && used > u64::from(limit)
        {
            return Err(format!("csi {k}: {used} > {limit}"));
        }
    }
    for d in pods {
        for t in shape.taints() {
            let hard = t.effect != TaintEffect::PreferNoSchedule;
            if hard
                && !d
                    .tolerations
                    .iter()
                    .any(|x| x.tolerates(&t.key, &t.value, t.effect))
            {
                return Err(format!("untolerated {}", t.key));
            }
        }
    }
    Ok(())
}

/// How many identical `d` one node holds, computed limit by limit.
fn per_node(shape: &NodeShape, d: &PodDemand) -> u64 {
    let a = shape.allocatable();
    let mut n = a.pods;
    let mut limit = |alloc: u64, want: u64| {
        if let Some(k) = alloc.checked_div(want) {
            n = n.min(k);
        }
    };
    limit(a.cpu_milli, d.cpu_milli);
    limit(a.memory_bytes, d.memory_bytes);
    limit(a.ephemeral_storage_bytes, d.ephemeral_storage_bytes);
    for (k, v) in &d.extended {
        limit(a.extended.get(k).copied().unwrap_or(0), *v);
    }
    for (k, v) in &d.volumes {
        if let Some(&l) = shape.csi().get(k) {
            limit(u64::from(l), u64::from(*v));
        }
    }
    n
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn every_plan_fit_returns_hosts_every_unbound_member_under_every_limit(
        (s, gang) in arb_case(),
    ) {
        let by_name: BTreeMap<&str, &Member> =
            gang.members.iter().map(|m| (m.pod.as_str(), m)).collect();
        match fit(&gang, &s) {
            Ok(f) => {
                prop_assert_eq!(f.nodes_all as usize, f.placement.len());
                prop_assert!(f.nodes_min <= f.nodes_all);
                let mut placed: Vec<&str> =
                    f.placement.iter().flatten().map(String::as_str).collect();
                placed.sort_unstable();
                let mut unbound: Vec<&str> = gang.unbound().map(|m| m.pod.as_str()).collect();
                unbound.sort_unstable();
                prop_assert_eq!(placed, unbound, "each unbound member exactly once");
                for node in &f.placement {
                    prop_assert!(!node.is_empty());
                    let pods: Vec<&PodDemand> =
                        node.iter().map(|p| &by_name[p.as_str()].demand).map(AsRef::as_ref).collect();
                    prop_assert!(node_holds(&s, &pods).is_ok(), "{:?}", node_holds(&s, &pods));
                }
                let to_min = gang.min_count.saturating_sub(gang.bound_count());
                prop_assert_eq!(f.nodes_min == 0, to_min == 0);
            }
            Err(Reason::NothingToPlace) => prop_assert_eq!(gang.unbound().count(), 0),
            Err(Reason::PodTooLarge { pod, .. } | Reason::CsiLimit { pod, .. }
                | Reason::Untolerated { pod, .. }) => {
                // The named pod really cannot run on a fresh node alone.
                let m = by_name[pod.as_str()];
                prop_assert!(m.node.is_none());
                prop_assert!(node_holds(&s, &[&m.demand]).is_err());
            }
            Err(other) => prop_assert!(false, "unexpected reason {other:?}"),
        }
    }

    #[test]
    fn a_homogeneous_gang_gets_exactly_the_minimum_number_of_nodes(
        (s, d, broken) in arb_shape().prop_flat_map(|s| {
            (Just(s.clone()), arb_demand(&s), proptest::option::weighted(0.1, 0usize..4))
        }),
        n in 1usize..60,
        min in 0u32..70,
    ) {
        let mut d = d;
        if let Some(how) = broken {
            sabotage(&mut d, &s, how);
        }
        let mut b = gang("h").min(min);
        for i in 0..n {
            let mut m = pod(&format!("h{i:02}")).build();
            m.demand = d.clone().into();
            b = b.member(m);
        }
        let gang = b.build();
        let per = per_node(&s, &d);
        let tolerated = node_holds(&s, &[&PodDemand { tolerations: d.tolerations.clone(), ..PodDemand::default() }]).is_ok();
        match fit(&gang, &s) {
            Ok(f) => {
                prop_assert!(per > 0 && tolerated);
                let ceil = |k: u64| u32::try_from(k.div_ceil(per)).unwrap();
                prop_assert_eq!(f.nodes_all, ceil(n as u64));
                let k = u64::from(min).min(n as u64);
                prop_assert_eq!(f.nodes_min, ceil(k));
                prop_assert_eq!(f.placement.iter().map(Vec::len).sum::<usize>(), n);
                for node in &f.placement {
                    let pods = vec![&d; node.len()];
                    prop_assert!(node_holds(&s, &pods).is_ok(), "{:?}", node_holds(&s, &pods));
                }
            }
            Err(_) => prop_assert!(per == 0 || !tolerated),
        }
    }

    #[test]
    fn admit_never_exceeds_the_headroom_and_strict_never_admits_part_of_a_gang(
        (s, gangs) in arb_shape().prop_flat_map(|s| {
            let gangs = proptest::collection::vec(
                (arb_gang_on(s.clone()), -2i32..3, 0i64..5, 0u32..4, (0u32..4, any::<bool>())),
                0..6,
            );
            (Just(s), gangs)
        }),
        (max, target, ca, ungrouped) in (0u32..20, 0u32..24, 1u32..20, 0u32..5),
        policy in prop_oneof![Just(Policy::Strict), Just(Policy::RoundUp), Just(Policy::Off)],
        order in prop_oneof![Just(Order::Age), Just(Order::FewestMissing)],
        (spill_max, spill_target, spill_idle) in (0u32..12, 0u32..12, 0u32..3),
        repair_where_asked in any::<bool>(),
    ) {
        // Another group of the same shape the gangs may spread over, and where some gangs'
        // nodes are in flight (some of them failed when `short`).
        let other = crate::model::NodeGroupId::new("spill");
        let mut in_flight = BTreeMap::new();
        let mut elsewhere = BTreeMap::new();
        let gangs: Vec<Gang> = gangs
            .into_iter()
            .enumerate()
            .map(|(i, (mut gang, priority, created, covered, (there, short)))| {
                gang.id.name = format!("g{i}");
                gang.priority = priority;
                gang.created_unix = created;
                if covered > 0 {
                    in_flight.insert(gang.id.clone(), covered);
                }
                if there > 0 {
                    elsewhere.insert(
                        gang.id.clone(),
                        Elsewhere { group: other.clone(), short, nodes: there },
                    );
                }
                gang
            })
            .collect();
        let spill = [Spill {
            slot: GroupSlot {
                id: &other,
                shape: Some(&s),
                target: spill_target,
                max_size: spill_max,
            },
            idle: spill_idle,
            taken: 0,
        }];
        let input = AdmissionInput {
            group: s.group(),
            shape: Some(&s),
            max_size: max,
            target,
            ca_delta: ca,
            policy,
            order,
            gangs: &super::arcs(gangs.clone()),
            in_flight: &in_flight,
            elsewhere: &elsewhere,
            ungrouped_nodes: ungrouped,
            idle_nodes: 0,
            spill: &spill,
            deferred_composites: &[],
            repair_where_asked,
        };
        let d = admit(&input);
        let headroom = max.saturating_sub(target);
        prop_assert!(d.applied_delta <= headroom);
        prop_assert_eq!(&d, &admit(&input), "deterministic");
        if d.verdict == Verdict::Reject {
            prop_assert_eq!(d.applied_delta, 0);
        }
        if policy == Policy::Off && headroom > 0 {
            prop_assert_eq!(d.applied_delta, ca.min(headroom));
        }
        let admitted: u32 = d.admitted.iter().map(|a| a.nodes).sum();
        prop_assert!(admitted <= headroom);
        if policy != Policy::Off && d.verdict == Verdict::Accept {
            prop_assert!(d.applied_delta >= admitted);
        }
        // A gang whose nodes are in flight only on the other group (of the same shape) gets
        // nodes here only when they do not hold it: as the repair of a failure there, with
        // repairs where CA asks on, or for the part they do not cover; its nodes there count.
        for a in &d.admitted {
            if let Some(e) = elsewhere.get(&a.gang).filter(|_| !in_flight.contains_key(&a.gang)) {
                let gang = gangs.iter().find(|x| x.id == a.gang).unwrap();
                let (all, _) = fit_counts(gang, &s).unwrap();
                let open = if e.short { repair_where_asked } else { e.nodes < all };
                prop_assert!(open, "{:?} admitted while covered there", a.gang);
                prop_assert_eq!(a.in_flight, e.nodes);
            }
        }
        // The spill group gives at most its headroom, and exactly what its decision adds.
        let spread: u32 = d.admitted.iter().flat_map(|a| &a.spread).map(|p| p.nodes).sum();
        prop_assert!(spread <= spill_max.saturating_sub(spill_target));
        let shares = spread_shares(&d, &spill);
        prop_assert_eq!(shares.iter().map(|x| x.applied_delta).sum::<u32>(), spread);
        if policy == Policy::Strict {
            for a in &d.admitted {
                let gang = gangs.iter().find(|x| x.id == a.gang).unwrap();
                let (all, min) = fit_counts(gang, &s).unwrap();
                // Whole or minCount over every group, never part of it.
                let everywhere = a.nodes_everywhere()
                    + a.spread.iter().map(|p| p.idle).sum::<u32>();
                prop_assert!(everywhere >= min.saturating_sub(a.in_flight));
                prop_assert!(everywhere <= all.saturating_sub(a.in_flight));
                prop_assert!(a.nodes > 0);
                if !a.spread.is_empty() {
                    prop_assert!(gang.topology_key.is_none());
                    prop_assert!(
                        everywhere == all.saturating_sub(a.in_flight)
                            || everywhere == min.saturating_sub(a.in_flight)
                    );
                }
            }
            if !d.admitted.is_empty() {
                prop_assert!(d.applied_delta <= admitted + ungrouped);
            }
        }
    }
}
