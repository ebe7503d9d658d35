//! `capacity`: thresholds per gang shape and group, at exact boundaries, and agreement with
//! `fit`.

use crate::model::{Gang, NodeGroupId};
use crate::planner::capacity::{GangShape, shapes_of, threshold};
use crate::planner::{Reason, Threshold, capacity, fit};

use super::*;

/// The one shape of a pending gang whose members are identical.
fn gang_shape(g: &Gang) -> GangShape {
    let (shapes, skipped) = shapes_of([g]);
    assert!(skipped.is_empty(), "{skipped:?}");
    assert_eq!(shapes.len(), 1);
    shapes.into_iter().next().unwrap()
}

/// `shape` against `group` with `target` nodes already there.
fn against(shape: &GangShape, group: &NodeGroupSpec, target: u32) -> Threshold {
    let node = NodeShape::from_group(group, labels::DEFAULT_GPU_LABEL);
    threshold(shape, &group.id, group.max_size, node.as_ref(), target).outcome
}

/// `(per_node, nodes_all, nodes_min, largest at max, largest at headroom)`.
fn numbers(t: &Threshold) -> (u64, u32, u32, u64, u64) {
    match t {
        Threshold::Fits {
            per_node,
            nodes_all,
            nodes_min,
            largest_min_count_at_max,
            largest_min_count_at_headroom,
            ..
        } => (
            *per_node,
            *nodes_all,
            *nodes_min,
            *largest_min_count_at_max,
            *largest_min_count_at_headroom,
        ),
        Threshold::Unfittable { message, .. } => panic!("unfittable: {message}"),
    }
}

fn reason(t: &Threshold) -> &Reason {
    match t {
        Threshold::Unfittable { reason, .. } => reason,
        Threshold::Fits { .. } => panic!("fits: {t:?}"),
    }
}

#[test]
fn four_gpu_members_on_eight_gpu_nodes_admit_a_min_count_of_twice_max_size() {
    let h100 = gpu_group("h100", 10, 8);
    let g = gang("train")
        .min(12)
        .members(16, |p| p.gpus(4).gpu_tolerant())
        .build();
    let shape = gang_shape(&g);
    assert_eq!((shape.members, shape.min_count), (16, 12));
    // 2 per node: 16 members on 8 nodes, minCount 12 on 6; 10 nodes hold minCount 20.
    assert_eq!(numbers(&against(&shape, &h100, 0)), (2, 8, 6, 20, 20));
    // 3 nodes already there: 7 can be added, which hold 14.
    let now = against(&shape, &h100, 3);
    assert_eq!(numbers(&now), (2, 8, 6, 20, 14));
    assert!(matches!(
        now,
        Threshold::Fits {
            fits_max_size: true,
            min_fits_max_size: true,
            fits_headroom: false,
            min_fits_headroom: true,
            ..
        }
    ));
}

#[test]
fn a_min_count_at_the_threshold_is_admitted_and_one_more_is_not() {
    let h100 = gpu_group("h100", 10, 8);
    for (min, fits) in [(20, true), (21, false)] {
        let g = gang("edge")
            .min(min)
            .members(usize::try_from(min).unwrap(), |p| p.gpus(4).gpu_tolerant())
            .build();
        let t = against(&gang_shape(&g), &h100, 0);
        let Threshold::Fits {
            nodes_min,
            min_fits_max_size,
            fits_max_size,
            ..
        } = t
        else {
            panic!("{t:?}");
        };
        assert_eq!(nodes_min, min.div_ceil(2), "minCount {min}");
        assert_eq!((min_fits_max_size, fits_max_size), (fits, fits), "{min}");
    }
}

#[test]
fn volume_attach_limits_lower_members_per_node_and_the_threshold() {
    let g = gang("ckpt")
        .min(16)
        .members(16, |p| p.gpus(1).volumes(EBS, 6).gpu_tolerant())
        .build();
    let shape = gang_shape(&g);
    // 8 GPUs would hold 8; 24 attachments hold 4 members of 6 volumes.
    let limited = with_csi(gpu_group("h100", 10, 8), EBS, 24);
    assert_eq!(numbers(&against(&shape, &limited, 0)), (4, 4, 4, 40, 40));
    // Without a limit for the driver, GPUs bind: 8 per node.
    let unlimited = gpu_group("h100", 10, 8);
    assert_eq!(numbers(&against(&shape, &unlimited, 0)), (8, 2, 2, 80, 80));
    // 4 attachments per node: one member (3 volumes) per node.
    let g = gang("ckpt3")
        .min(8)
        .members(8, |p| p.gpus(1).volumes(EBS, 3).gpu_tolerant())
        .build();
    let tight = with_csi(gpu_group("h100", 10, 8), EBS, 4);
    assert_eq!(
        numbers(&against(&gang_shape(&g), &tight, 0)),
        (1, 8, 8, 10, 10)
    );
}

#[test]
fn pod_slots_bind_when_members_are_tiny() {
    let cpu = cpu_group("cpu", 3);
    let g = gang("tiny")
        .min(200)
        .members(200, |p| p.cpu_milli(1))
        .build();
    // 110 pod slots per node: 200 members on 2 nodes; 3 nodes hold 330.
    assert_eq!(
        numbers(&against(&gang_shape(&g), &cpu, 0)),
        (110, 2, 2, 330, 330)
    );
}

#[test]
fn a_topology_key_needs_the_label_on_the_group() {
    let key = "topology.gangscaler.io/block";
    let g = gang("ring")
        .topology(key)
        .min(4)
        .members(4, |p| p.gpus(8).gpu_tolerant())
        .build();
    let shape = gang_shape(&g);
    assert_eq!(shape.topology_key.as_deref(), Some(key));
    let without = gpu_group("flat", 10, 8);
    assert_eq!(
        reason(&against(&shape, &without, 0)),
        &Reason::TopologyMissing { key: key.into() }
    );
    let with = with_topology(gpu_group("block", 10, 8), key, "block-a");
    assert_eq!(numbers(&against(&shape, &with, 0)), (1, 4, 4, 10, 10));
}

#[test]
fn a_shape_that_never_fits_gets_the_planners_reason() {
    let g = gang("huge")
        .min(2)
        .members(2, |p| p.gpus(16).gpu_tolerant())
        .build();
    let shape = gang_shape(&g);
    let h100 = gpu_group("h100", 10, 8);
    assert_eq!(
        reason(&against(&shape, &h100, 0)),
        &Reason::PodTooLarge {
            pod: "huge-0".into(),
            resource: GPU.into(),
            requested: 16,
            allocatable: 8,
        }
    );
    let intolerant = gang("plain").members(1, |p| p.gpus(1)).build();
    assert_eq!(
        reason(&against(&gang_shape(&intolerant), &h100, 0)).kind(),
        "untolerated"
    );
    let mut bare = cpu_group("bare", 5);
    bare.capacity = None;
    assert_eq!(reason(&against(&shape, &bare, 0)), &Reason::NoTemplate);
    let held = gang("held")
        .members(2, |p| p.cpus(1).unresolved("data"))
        .build();
    assert_eq!(
        reason(&against(&gang_shape(&held), &cpu_group("cpu", 5), 0)).kind(),
        "unresolved_claim"
    );
}

#[test]
fn a_full_group_admits_no_min_count_now_but_keeps_its_max_size_threshold() {
    let h100 = gpu_group("h100", 10, 8);
    let g = gang("late")
        .min(2)
        .members(2, |p| p.gpus(8).gpu_tolerant())
        .build();
    let t = against(&gang_shape(&g), &h100, 10);
    assert_eq!(numbers(&t), (1, 2, 2, 10, 0));
    assert!(matches!(
        t,
        Threshold::Fits {
            min_fits_headroom: false,
            min_fits_max_size: true,
            ..
        }
    ));
}

#[test]
fn node_counts_agree_with_fit_for_homogeneous_gangs() {
    let groups = [
        gpu_group("h100", 16, 8),
        with_csi(gpu_group("h100-ebs", 16, 8), EBS, 24),
        with_csi(gpu_group("l4", 8, 4), EBS, 5),
        cpu_group("cpu", 20),
    ];
    for members in [1usize, 2, 3, 7, 8, 9, 16, 33] {
        for gpus in [0u64, 1, 2, 3, 4, 8] {
            for volumes in [0u32, 1, 3, 6] {
                let min = u32::try_from(members.div_ceil(2)).unwrap();
                let g = gang("g")
                    .min(min)
                    .members(members, |p| {
                        p.cpus(2)
                            .memory_gi(16)
                            .gpus(gpus)
                            .volumes(EBS, volumes)
                            .gpu_tolerant()
                    })
                    .build();
                let s = gang_shape(&g);
                for group in &groups {
                    let node = shape(group);
                    let t = against(&s, group, 0);
                    match (fit(&g, &node), &t) {
                        (Ok(f), Threshold::Fits { .. }) => {
                            let (_, all, min_nodes, _, _) = numbers(&t);
                            assert_eq!(
                                (all, min_nodes),
                                (f.nodes_all, f.nodes_min),
                                "{members} x {gpus} GPU x {volumes} vol on {}",
                                group.id
                            );
                        }
                        (Err(r), Threshold::Unfittable { reason, .. }) => {
                            assert_eq!(&r, reason);
                        }
                        (f, t) => panic!("fit {f:?} but capacity {t:?}"),
                    }
                }
            }
        }
    }
}

#[test]
fn identical_pending_gangs_collapse_into_one_shape_and_mixed_ones_are_skipped() {
    let mut done = gang("done").members(2, |p| p.gpus(8)).build();
    done.scheduled = true;
    let gangs = vec![
        gang("b")
            .min(4)
            .members(4, |p| p.gpus(8).gpu_tolerant())
            .build(),
        gang("a")
            .min(4)
            .members(4, |p| p.gpus(8).gpu_tolerant())
            .build(),
        gang("c")
            .min(2)
            .members(4, |p| p.gpus(8).gpu_tolerant())
            .build(),
        gang("mixed")
            .min(2)
            .member(pod("m-0").gpus(8).build())
            .member(pod("m-1").gpus(1).build())
            .build(),
        gang("empty").min(3).build(),
        // Fewer pods than minCount so far: the shape has minCount members.
        gang("short")
            .min(6)
            .members(2, |p| p.gpus(2).gpu_tolerant())
            .build(),
        done,
    ];
    let (shapes, skipped) = shapes_of(&gangs);
    let summary: Vec<(&str, Vec<&str>, u32, u32)> = shapes
        .iter()
        .map(|s| {
            (
                s.name.as_str(),
                s.gangs.iter().map(String::as_str).collect(),
                s.members,
                s.min_count,
            )
        })
        .collect();
    assert_eq!(
        summary,
        vec![
            ("ml/a", vec!["ml/a", "ml/b"], 4, 4),
            ("ml/c", vec!["ml/c"], 4, 2),
            ("ml/short", vec!["ml/short"], 6, 6),
        ]
    );
    let skipped: Vec<&str> = skipped.iter().map(|s| s.gang.as_str()).collect();
    assert_eq!(skipped, vec!["ml/empty", "ml/mixed"]);

    let h100 = gpu_group("h100", 3, 8);
    let cpu = cpu_group("cpu", 20);
    let groups = [(&h100, Some(shape(&h100)), 1), (&cpu, Some(shape(&cpu)), 0)];
    let c = capacity(&shapes, &groups);
    assert_eq!(c.shapes.len(), 3);
    let first = &c.shapes[0].groups;
    let ids: Vec<&NodeGroupId> = first.iter().map(|g| &g.group).collect();
    assert_eq!(ids, vec![&h100.id, &cpu.id]);
    assert_eq!((first[0].headroom, first[0].target), (2, 1));
    assert_eq!(numbers(&first[0].outcome), (1, 4, 4, 3, 2));
    assert_eq!(reason(&first[1].outcome).kind(), "pod_too_large");
}
