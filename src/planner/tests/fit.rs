//! `fit`: every limit, every predicate, bound members, minCount, and the packing order.

use crate::model::{SelectorOperator as Op, TaintEffect, labels};
use crate::planner::{Reason, check_pod, fit, nodes_for_pods};

use super::*;

fn nodes(g: &Gang, s: &NodeShape) -> (u32, u32) {
    let f = fit(g, s).unwrap();
    (f.nodes_all, f.nodes_min)
}

fn too_large(pod: &str, resource: &str, requested: u64, allocatable: u64) -> Reason {
    Reason::PodTooLarge {
        pod: pod.into(),
        resource: resource.into(),
        requested,
        allocatable,
    }
}

#[test]
fn cpu_limit_sets_members_per_node_and_rejects_a_pod_larger_than_a_node() {
    let s = shape(&cpu_group("cpu", 10));
    let g = gang("a").min(5).members(5, |p| p.cpus(3)).build();
    assert_eq!(nodes(&g, &s), (3, 3));
    let big = gang("b")
        .members(2, |p| p.cpus(2))
        .member(pod("huge").cpu_milli(8001).build());
    assert_eq!(
        fit(&big.build(), &s),
        Err(too_large("huge", "cpu", 8001, 8000))
    );
}

#[test]
fn memory_limit_sets_members_per_node_and_rejects_a_pod_larger_than_a_node() {
    let s = shape(&cpu_group("cpu", 10));
    let g = gang("a").min(5).members(5, |p| p.memory_gi(12)).build();
    assert_eq!(nodes(&g, &s), (3, 3));
    let big = gang("b").member(pod("huge").memory_gi(33).build()).build();
    assert_eq!(
        fit(&big, &s),
        Err(too_large("huge", "memory", 33 * GI, 32 * GI))
    );
}

#[test]
fn ephemeral_storage_limit_sets_members_per_node_and_rejects_a_pod_larger_than_a_node() {
    let s = shape(&cpu_group("cpu", 10));
    let g = gang("a").min(3).members(3, |p| p.storage_gi(40)).build();
    assert_eq!(nodes(&g, &s), (2, 2));
    let big = gang("b")
        .member(pod("huge").storage_gi(101).build())
        .build();
    assert_eq!(
        fit(&big, &s),
        Err(too_large("huge", "ephemeral-storage", 101 * GI, 100 * GI))
    );
}

#[test]
fn pod_slots_limit_counts_one_per_pod() {
    let mut g = cpu_group("cpu", 10);
    g.capacity.as_mut().unwrap().pods = 3;
    let s = shape(&g);
    let gang7 = gang("a").min(7).members(7, |p| p).build();
    assert_eq!(nodes(&gang7, &s), (3, 3));
    g.reserved.pods = 3;
    let none = shape(&g);
    assert_eq!(fit(&gang7, &none), Err(too_large("a-0", "pods", 1, 0)));
}

#[test]
fn gpu_limit_sets_members_per_node_and_rejects_a_pod_wanting_more_gpus_than_a_node() {
    let s = shape(&gpu_group("h100", 10, 8));
    let g = gang("a")
        .min(4)
        .members(4, |p| p.gpus(3).gpu_tolerant())
        .build();
    assert_eq!(nodes(&g, &s), (2, 2));
    let big = gang("b")
        .member(pod("huge").gpus(9).gpu_tolerant().build())
        .build();
    assert_eq!(fit(&big, &s), Err(too_large("huge", GPU, 9, 8)));
}

#[test]
fn rdma_device_limit_can_raise_the_node_count_above_what_gpus_need() {
    let s = shape(&gpu_group("h100", 10, 8));
    // GPUs alone would allow 8 per node; 3 RDMA devices of 8 allow 2.
    let g = gang("a")
        .min(4)
        .members(4, |p| p.gpus(1).extended(RDMA, 3).gpu_tolerant())
        .build();
    assert_eq!(nodes(&g, &s), (2, 2));
}

#[test]
fn rdma_bandwidth_limit_can_raise_the_node_count_and_make_a_pod_unfittable() {
    let s = shape(&gpu_group("h100", 10, 8));
    let g = gang("a")
        .min(4)
        .members(4, |p| p.gpus(1).extended(RDMA_GBPS, 1000).gpu_tolerant())
        .build();
    assert_eq!(nodes(&g, &s), (2, 2));
    let big = gang("b")
        .member(pod("huge").extended(RDMA_GBPS, 3201).gpu_tolerant().build())
        .build();
    assert_eq!(fit(&big, &s), Err(too_large("huge", RDMA_GBPS, 3201, 3200)));
}

#[test]
fn an_extended_resource_the_node_lacks_makes_the_gang_unfittable_unless_requested_as_zero() {
    let s = shape(&cpu_group("cpu", 10));
    let g = gang("a").member(pod("p").gpus(1).build()).build();
    assert_eq!(fit(&g, &s), Err(too_large("p", GPU, 1, 0)));
    let zero = gang("b").member(pod("p").gpus(0).build()).build();
    assert_eq!(nodes(&zero, &s), (1, 1));
}

#[test]
fn csi_attach_limit_keeps_one_gpu_members_with_three_volumes_one_per_node() {
    // The under-count from the issue: 8 GPUs per node would take all 8 members, but each member
    // attaches 3 volumes of a driver limited to 4 per node.
    let s = shape(&with_csi(gpu_group("h100", 16, 8), EBS, 4));
    let g = gang("train")
        .min(8)
        .members(8, |p| p.gpus(1).volumes(EBS, 3).gpu_tolerant())
        .build();
    let f = fit(&g, &s).unwrap();
    assert_eq!((f.nodes_all, f.nodes_min), (8, 8));
    assert!(f.placement.iter().all(|node| node.len() == 1));
}

#[test]
fn csi_attach_limit_rejects_a_pod_with_more_volumes_than_the_limit() {
    let s = shape(&with_csi(cpu_group("cpu", 10), EBS, 4));
    let g = gang("a").member(pod("p").volumes(EBS, 5).build()).build();
    assert_eq!(
        fit(&g, &s),
        Err(Reason::CsiLimit {
            pod: "p".into(),
            driver: EBS.into(),
            volumes: 5,
            limit: 4
        })
    );
}

#[test]
fn volumes_of_a_driver_without_a_limit_do_not_constrain_packing() {
    let s = shape(&with_csi(cpu_group("cpu", 10), EBS, 4));
    let g = gang("a")
        .min(10)
        .members(10, |p| p.volumes("nfs.csi.k8s.io", 50))
        .build();
    assert_eq!(nodes(&g, &s), (1, 1));
}

#[test]
fn untolerated_no_schedule_taint_makes_the_gang_unfittable() {
    let s = shape(&gpu_group("h100", 10, 8));
    let g = gang("a").member(pod("p").gpus(1).build()).build();
    assert_eq!(
        fit(&g, &s),
        Err(Reason::Untolerated {
            pod: "p".into(),
            taint: "nvidia.com/gpu=present:NoSchedule".into()
        })
    );
}

#[test]
fn tolerations_by_value_by_key_and_by_wildcard_tolerate_the_taint() {
    let s = shape(&gpu_group("h100", 10, 8));
    for t in [
        tolerate_equal("nvidia.com/gpu", "present", Some(TaintEffect::NoSchedule)),
        tolerate_exists("nvidia.com/gpu", None),
        tolerate_exists("", None),
    ] {
        let g = gang("a").member(pod("p").gpus(1).toleration(t.clone()).build());
        assert!(fit(&g.build(), &s).is_ok(), "{t:?}");
    }
    for t in [
        tolerate_equal("nvidia.com/gpu", "absent", None),
        tolerate_exists("nvidia.com/gpu", Some(TaintEffect::NoExecute)),
    ] {
        let g = gang("a").member(pod("p").gpus(1).toleration(t.clone()).build());
        assert!(fit(&g.build(), &s).is_err(), "{t:?}");
    }
}

#[test]
fn no_execute_taints_must_be_tolerated_but_prefer_no_schedule_taints_are_ignored() {
    let mut g = cpu_group("cpu", 10);
    g.taints
        .push(taint("soft", "", TaintEffect::PreferNoSchedule));
    let s = shape(&g);
    let gang_a = gang("a").member(pod("p").build()).build();
    assert!(fit(&gang_a, &s).is_ok());
    g.taints.push(taint("evict", "", TaintEffect::NoExecute));
    assert_eq!(
        fit(&gang_a, &shape(&g)),
        Err(Reason::Untolerated {
            pod: "p".into(),
            taint: "evict:NoExecute".into()
        })
    );
}

#[test]
fn node_selector_must_match_template_labels() {
    let s = shape(&gpu_group("h100", 10, 8));
    let ok = gang("a").member(
        pod("p")
            .gpu_tolerant()
            .selector(labels::GPU_PRODUCT, "NVIDIA-H100-80GB-HBM3")
            .selector(labels::NODE_GROUP, "h100")
            .build(),
    );
    assert!(fit(&ok.build(), &s).is_ok());
    let bad = gang("b").member(
        pod("p")
            .gpu_tolerant()
            .selector(labels::GPU_PRODUCT, "NVIDIA-L4")
            .build(),
    );
    assert_eq!(
        fit(&bad.build(), &s),
        Err(Reason::SelectorMismatch {
            pod: "p".into(),
            key: labels::GPU_PRODUCT.into()
        })
    );
}

#[test]
fn node_affinity_operators_in_not_in_exists_does_not_exist_gt_and_lt_are_honoured() {
    let s = shape(&with_topology(
        gpu_group("h100", 10, 8),
        "topology.gangscaler.io/rack",
        "r1",
    ));
    let fits = |term: Vec<SelectorRequirement>| {
        let g = gang("a").member(pod("p").gpu_tolerant().affinity(term).build());
        fit(&g.build(), &s).is_ok()
    };
    let rack = "topology.gangscaler.io/rack";
    assert!(fits(vec![req(rack, Op::In, &["r0", "r1"])]));
    assert!(!fits(vec![req(rack, Op::In, &["r2"])]));
    assert!(fits(vec![req(rack, Op::NotIn, &["r2"])]));
    assert!(!fits(vec![req(rack, Op::NotIn, &["r1"])]));
    assert!(fits(vec![req(rack, Op::Exists, &[])]));
    assert!(!fits(vec![req("missing", Op::Exists, &[])]));
    assert!(fits(vec![req("missing", Op::DoesNotExist, &[])]));
    assert!(fits(vec![req(labels::GPU_COUNT, Op::Gt, &["4"])]));
    assert!(!fits(vec![req(labels::GPU_COUNT, Op::Gt, &["8"])]));
    assert!(fits(vec![req(labels::GPU_COUNT, Op::Lt, &["9"])]));
    // All requirements of a term must hold.
    assert!(!fits(vec![
        req(rack, Op::Exists, &[]),
        req(labels::GPU_COUNT, Op::Gt, &["8"])
    ]));
    // An empty term matches nothing, as in Kubernetes.
    assert!(!fits(vec![]));
}

#[test]
fn node_affinity_needs_only_one_matching_term_and_names_the_failing_key() {
    let s = shape(&gpu_group("h100", 10, 8));
    let g = gang("a").member(
        pod("p")
            .gpu_tolerant()
            .affinity(vec![req("zone", Op::In, &["z9"])])
            .affinity(vec![req(labels::GPU_COUNT, Op::In, &["8"])])
            .build(),
    );
    assert!(fit(&g.build(), &s).is_ok());
    let bad = gang("a").member(
        pod("p")
            .gpu_tolerant()
            .affinity(vec![req("zone", Op::In, &["z9"])])
            .build(),
    );
    assert_eq!(
        fit(&bad.build(), &s),
        Err(Reason::AffinityMismatch {
            pod: "p".into(),
            key: "zone".into()
        })
    );
}

#[test]
fn a_topology_key_must_be_a_label_of_the_group() {
    let rack = "topology.gangscaler.io/rack";
    let g = gang("a").topology(rack).member(pod("p").build()).build();
    assert_eq!(
        fit(&g, &shape(&cpu_group("cpu", 10))),
        Err(Reason::TopologyMissing { key: rack.into() })
    );
    let racked = shape(&with_topology(cpu_group("cpu", 10), rack, "r1"));
    assert_eq!(nodes(&g, &racked), (1, 1));
}

#[test]
fn bound_members_are_not_placed_again() {
    let s = shape(&gpu_group("h100", 10, 8));
    let g = gang("a")
        .min(8)
        .member(pod("old-0").gpus(8).bound("n1").build())
        .member(pod("old-1").gpus(8).bound("n2").build())
        .members(6, |p| p.gpus(8).gpu_tolerant())
        .build();
    let f = fit(&g, &s).unwrap();
    assert_eq!((f.nodes_all, f.nodes_min), (6, 6));
    let placed: Vec<&String> = f.placement.iter().flatten().collect();
    assert!(placed.iter().all(|p| !p.starts_with("old")));
    assert_eq!(placed.len(), 6);
}

#[test]
fn nodes_min_counts_only_members_missing_for_min_count() {
    let s = shape(&gpu_group("h100", 10, 8));
    let whole_node = |p: PodBuilder| p.gpus(8).gpu_tolerant();
    let g = gang("a").min(4).members(8, whole_node).build();
    assert_eq!(nodes(&g, &s), (8, 4));
    let two_bound = gang("a")
        .min(4)
        .member(pod("x").bound("n1").build())
        .member(pod("y").bound("n2").build())
        .members(6, whole_node)
        .build();
    assert_eq!(nodes(&two_bound, &s), (6, 2));
    let reached = gang("a")
        .min(2)
        .member(pod("x").bound("n1").build())
        .member(pod("y").bound("n2").build())
        .members(3, whole_node)
        .build();
    assert_eq!(nodes(&reached, &s), (3, 0));
    // Fewer pods than minCount: placing all of them is the best that can be done.
    let short = gang("a").min(10).members(3, whole_node).build();
    assert_eq!(nodes(&short, &s), (3, 3));
}

#[test]
fn nodes_min_places_the_smallest_members() {
    let s = shape(&cpu_group("cpu", 10));
    // Two 8-CPU members need a node each; four 2-CPU members share one.
    let g = gang("a")
        .min(4)
        .members(2, |p| p.cpus(8))
        .member(pod("s0").cpus(2).build())
        .member(pod("s1").cpus(2).build())
        .member(pod("s2").cpus(2).build())
        .member(pod("s3").cpus(2).build())
        .build();
    assert_eq!(nodes(&g, &s), (3, 1));
}

#[test]
fn a_gang_with_every_member_bound_has_nothing_to_place() {
    let s = shape(&cpu_group("cpu", 10));
    let g = gang("a").member(pod("p").bound("n1").build()).build();
    assert_eq!(fit(&g, &s), Err(Reason::NothingToPlace));
    assert_eq!(fit(&gang("empty").build(), &s), Err(Reason::NothingToPlace));
}

#[test]
fn members_are_packed_largest_first_so_mixed_sizes_share_nodes() {
    // In the given order first fit would need 3 nodes (2+5, 3, 6); decreasing needs 2.
    let s = shape(&cpu_group("cpu", 10));
    let g = gang("a")
        .member(pod("two").cpus(2).build())
        .member(pod("five").cpus(5).build())
        .member(pod("three").cpus(3).build())
        .member(pod("six").cpus(6).build())
        .build();
    let f = fit(&g, &s).unwrap();
    assert_eq!(f.placement, vec![vec!["six", "two"], vec!["five", "three"]]);
}

#[test]
fn the_dominant_resource_orders_members_and_ties_go_by_pod_name() {
    let s = shape(&cpu_group("cpu", 10));
    // "m" uses 75% of memory, more than "c"'s 50% of CPU, so it goes first.
    let g = gang("a")
        .member(pod("c").cpus(4).build())
        .member(pod("m").memory_gi(24).build())
        .member(pod("b").cpus(1).build())
        .member(pod("a").cpus(1).build())
        .build();
    let f = fit(&g, &s).unwrap();
    assert_eq!(f.placement, vec![vec!["m", "c", "a", "b"]]);
    assert_eq!(fit(&g, &s), Ok(f), "same input, same plan");
}

#[test]
fn nodes_for_pods_packs_ungrouped_pods_and_names_an_unfittable_one() {
    let s = shape(&cpu_group("cpu", 10));
    assert_eq!(nodes_for_pods(&[], &s), Ok(0));
    let three = PodDemand::clone(&pod("x").cpus(3).build().demand);
    assert_eq!(nodes_for_pods(&vec![three.clone(); 10], &s), Ok(5));
    let huge = PodDemand::clone(&pod("x").cpus(9).build().demand);
    assert_eq!(
        nodes_for_pods(&[three, huge.clone()], &s),
        Err(too_large("pod[1]", "cpu", 9000, 8000))
    );
    assert_eq!(
        check_pod("h", &huge, &s),
        Err(too_large("h", "cpu", 9000, 8000))
    );
}
