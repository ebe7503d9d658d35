//! Planner tests: builders for gangs, pods and GPU node groups, then one module per concern.

use std::collections::BTreeMap;

use crate::model::labels;
use crate::model::{
    Gang, GangRef, GpuSpec, Member, NodeGroupSpec, PodDemand, RdmaSpec, SelectorOperator,
    SelectorRequirement, Taint, TaintEffect, Toleration, TolerationOperator, quantity::Quantity,
};
use crate::testing;

use super::NodeShape;

mod admit;
mod capacity;
mod composite;
mod defer;
mod fit;
mod plan;
mod props;
mod shape;
mod spread;

/// `gangs`, shared as views hand them out.
pub(super) fn arcs(gangs: Vec<Gang>) -> Vec<std::sync::Arc<Gang>> {
    gangs.into_iter().map(std::sync::Arc::new).collect()
}

pub(super) const GPU: &str = labels::DEFAULT_GPU_RESOURCE;
pub(super) const RDMA: &str = "rdma/rdma_shared_device_a";
pub(super) const RDMA_GBPS: &str = labels::DEFAULT_RDMA_BANDWIDTH_RESOURCE;
pub(super) const EBS: &str = "ebs.csi.aws.com";
pub(super) const GI: u64 = 1 << 30;

/// A member pod under construction; starts with no requests.
pub(super) struct PodBuilder(Member);

/// A pod named `name` requesting nothing.
pub(super) fn pod(name: &str) -> PodBuilder {
    PodBuilder(Member {
        pod: name.to_owned(),
        node: None,
        demand: PodDemand::default().into(),
        verdict: true,
        scheduler_name: None,
    })
}

impl PodBuilder {
    pub(super) fn cpu_milli(mut self, milli: u64) -> Self {
        std::sync::Arc::make_mut(&mut self.0.demand).cpu_milli = milli;
        self
    }
    pub(super) fn cpus(self, n: u64) -> Self {
        self.cpu_milli(n * 1000)
    }
    pub(super) fn memory_gi(mut self, gi: u64) -> Self {
        std::sync::Arc::make_mut(&mut self.0.demand).memory_bytes = gi * GI;
        self
    }
    pub(super) fn storage_gi(mut self, gi: u64) -> Self {
        std::sync::Arc::make_mut(&mut self.0.demand).ephemeral_storage_bytes = gi * GI;
        self
    }
    pub(super) fn extended(mut self, name: &str, n: u64) -> Self {
        std::sync::Arc::make_mut(&mut self.0.demand)
            .extended
            .insert(name.to_owned(), n);
        self
    }
    pub(super) fn gpus(self, n: u64) -> Self {
        self.extended(GPU, n)
    }
    pub(super) fn volumes(mut self, driver: &str, n: u32) -> Self {
        std::sync::Arc::make_mut(&mut self.0.demand)
            .volumes
            .insert(driver.to_owned(), n);
        self
    }
    /// A volume claim whose CSI driver could not be resolved.
    pub(super) fn unresolved(mut self, claim: &str) -> Self {
        std::sync::Arc::make_mut(&mut self.0.demand)
            .unresolved_claims
            .push(claim.to_owned());
        self
    }
    pub(super) fn selector(mut self, key: &str, value: &str) -> Self {
        std::sync::Arc::make_mut(&mut self.0.demand)
            .node_selector
            .insert(key.to_owned(), value.to_owned());
        self
    }
    pub(super) fn affinity(mut self, term: Vec<SelectorRequirement>) -> Self {
        std::sync::Arc::make_mut(&mut self.0.demand)
            .affinity_terms
            .push(term);
        self
    }
    pub(super) fn toleration(mut self, t: Toleration) -> Self {
        std::sync::Arc::make_mut(&mut self.0.demand)
            .tolerations
            .push(t);
        self
    }
    /// Tolerates the GPU taint of [`gpu_group`].
    pub(super) fn gpu_tolerant(self) -> Self {
        self.toleration(tolerate_equal("nvidia.com/gpu", "present", None))
    }
    pub(super) fn bound(mut self, node: &str) -> Self {
        self.0.node = Some(node.to_owned());
        self
    }
    pub(super) fn build(self) -> Member {
        self.0
    }
}

pub(super) fn tolerate_equal(key: &str, value: &str, effect: Option<TaintEffect>) -> Toleration {
    Toleration {
        key: key.to_owned(),
        operator: TolerationOperator::Equal,
        value: value.to_owned(),
        effect,
    }
}

pub(super) fn tolerate_exists(key: &str, effect: Option<TaintEffect>) -> Toleration {
    Toleration {
        key: key.to_owned(),
        operator: TolerationOperator::Exists,
        value: String::new(),
        effect,
    }
}

pub(super) fn req(key: &str, operator: SelectorOperator, values: &[&str]) -> SelectorRequirement {
    SelectorRequirement {
        key: key.to_owned(),
        operator,
        values: values.iter().map(|v| (*v).to_owned()).collect(),
    }
}

/// A gang under construction: namespace `ml`, minCount 1, priority 0, created at 0, no members.
pub(super) struct GangBuilder(Gang);

pub(super) fn gang(name: &str) -> GangBuilder {
    GangBuilder(Gang {
        id: GangRef {
            namespace: "ml".into(),
            name: name.to_owned(),
            api_version: "scheduling.k8s.io/v1alpha2".into(),
            kind: "PodGroup".into(),
        },
        min_count: 1,
        members: Vec::new(),
        priority: 0,
        created_unix: 0,
        topology_key: None,
        composite: None,
        scheduled: false,
    })
}

impl GangBuilder {
    pub(super) fn min(mut self, n: u32) -> Self {
        self.0.min_count = n;
        self
    }
    pub(super) fn priority(mut self, p: i32) -> Self {
        self.0.priority = p;
        self
    }
    pub(super) fn created(mut self, unix: i64) -> Self {
        self.0.created_unix = unix;
        self
    }
    pub(super) fn topology(mut self, key: &str) -> Self {
        self.0.topology_key = Some(key.to_owned());
        self
    }
    pub(super) fn member(mut self, m: Member) -> Self {
        self.0.members.push(m);
        self
    }
    /// `n` members named `<gang>-<i>`, each built by `f` from a fresh [`pod`].
    pub(super) fn members(mut self, n: usize, f: impl Fn(PodBuilder) -> PodBuilder) -> Self {
        for i in 0..n {
            let name = format!("{}-{i}", self.0.id.name);
            self.0.members.push(f(pod(&name)).build());
        }
        self
    }
    pub(super) fn build(self) -> Gang {
        self.0
    }
}

/// A gang of `n` members created at `created` that each need a whole 8-GPU node, `min` of
/// them required.
pub(super) fn whole(name: &str, n: usize, min: u32, created: i64) -> Gang {
    gang(name)
        .min(min)
        .created(created)
        .members(n, |p| p.gpus(8).gpu_tolerant())
        .build()
}

/// A group of 8-CPU/32Gi/100Gi/110-pod nodes (see [`testing::group`]).
pub(super) fn cpu_group(id: &str, max: u32) -> NodeGroupSpec {
    testing::group(id, 0, max)
}

/// A GPU group: 96 CPUs, 1Ti memory, `gpus` GPUs, 8 RDMA devices, 3200 Gbit/s, GPU taint
/// `nvidia.com/gpu=present:NoSchedule`.
pub(super) fn gpu_group(id: &str, max: u32, gpus: u32) -> NodeGroupSpec {
    let mut g = testing::group(id, 0, max);
    if let Some(c) = g.capacity.as_mut() {
        c.cpu = Quantity::from_units(96);
        c.memory = Quantity::from_units(1024 * GI);
    }
    g.gpu = Some(GpuSpec {
        count: gpus,
        product: "NVIDIA-H100-80GB-HBM3".into(),
        memory: Quantity::from_units(80 * GI),
        resource_name: GPU.into(),
    });
    g.rdma = Some(RdmaSpec {
        resource_name: RDMA.into(),
        devices: 8,
        bandwidth_gbps: 3200,
        bandwidth_resource_name: RDMA_GBPS.into(),
    });
    g.taints
        .push(taint("nvidia.com/gpu", "present", TaintEffect::NoSchedule));
    g
}

pub(super) fn taint(key: &str, value: &str, effect: TaintEffect) -> Taint {
    Taint {
        key: key.to_owned(),
        value: value.to_owned(),
        effect,
    }
}

pub(super) fn with_csi(mut g: NodeGroupSpec, driver: &str, limit: u32) -> NodeGroupSpec {
    g.csi.insert(driver.to_owned(), limit);
    g
}

pub(super) fn with_topology(mut g: NodeGroupSpec, key: &str, value: &str) -> NodeGroupSpec {
    g.topology.insert(key.to_owned(), value.to_owned());
    g
}

pub(super) fn shape(g: &NodeGroupSpec) -> NodeShape {
    NodeShape::from_group(g, labels::DEFAULT_GPU_LABEL).expect("group has a template")
}

/// In-flight map with one entry.
pub(super) fn in_flight(gang: &Gang, nodes: u32) -> BTreeMap<GangRef, u32> {
    BTreeMap::from([(gang.id.clone(), nodes)])
}
