//! NodeShape from node groups.

use crate::model::{PodDemand, labels, quantity::Quantity};
use crate::planner::NodeShape;

use super::*;

#[test]
fn shape_is_none_for_a_group_without_a_template() {
    let mut g = cpu_group("cpu", 4);
    g.capacity = None;
    assert!(NodeShape::from_group(&g, labels::DEFAULT_GPU_LABEL).is_none());
}

#[test]
fn shape_offers_the_template_allocatable_minus_reserved() {
    let mut g = gpu_group("h100", 4, 8);
    g.reserved.cpu = Quantity::from_milli(1500);
    g.reserved.memory = Quantity::from_units(24 * GI);
    g.reserved.pods = 10;
    let s = shape(&g);
    let a = s.allocatable();
    assert_eq!(a.cpu_milli, 94_500);
    assert_eq!(a.memory_bytes, 1000 * GI);
    assert_eq!(a.ephemeral_storage_bytes, 100 * GI);
    assert_eq!(a.pods, 100);
    assert_eq!(a.extended.get(GPU), Some(&8));
    assert_eq!(a.extended.get(RDMA), Some(&8));
    assert_eq!(a.extended.get(RDMA_GBPS), Some(&3200));
    assert_eq!(s.group().as_str(), "h100");
}

#[test]
fn shape_carries_template_labels_taints_and_csi_limits() {
    let g = with_csi(
        with_topology(gpu_group("h100", 4, 8), "topology.gangscaler.io/rack", "r1"),
        EBS,
        24,
    );
    let s = shape(&g);
    assert_eq!(
        s.labels()
            .get("topology.gangscaler.io/rack")
            .map(String::as_str),
        Some("r1")
    );
    assert_eq!(
        s.labels().get(labels::GPU_PRODUCT).map(String::as_str),
        Some("NVIDIA-H100-80GB-HBM3")
    );
    assert_eq!(
        s.labels().get(labels::NODE_GROUP).map(String::as_str),
        Some("h100")
    );
    assert_eq!(s.taints().len(), 1);
    assert_eq!(s.csi().get(EBS), Some(&24));
}

#[test]
fn overhead_is_subtracted_from_every_limit() {
    let s = shape(&with_csi(gpu_group("h100", 4, 8), EBS, 24));
    let mut overhead = PodDemand {
        cpu_milli: 2000,
        memory_bytes: 4 * GI,
        ..PodDemand::default()
    };
    overhead.extended.insert(RDMA.into(), 1);
    overhead.volumes.insert(EBS.into(), 2);
    let o = s.with_overhead(&overhead, 3);
    assert_eq!(o.allocatable().cpu_milli, 94_000);
    assert_eq!(o.allocatable().memory_bytes, 1020 * GI);
    assert_eq!(o.allocatable().pods, 107);
    assert_eq!(o.allocatable().extended.get(RDMA), Some(&7));
    assert_eq!(o.allocatable().extended.get(GPU), Some(&8));
    assert_eq!(o.csi().get(EBS), Some(&22));
}

#[test]
fn shape_serializes_without_its_internal_vector() {
    let json = serde_json::to_value(shape(&cpu_group("cpu", 1))).unwrap();
    assert_eq!(json["allocatable"]["cpuMilli"], 8000);
    assert!(json.get("limits").is_none());
}
