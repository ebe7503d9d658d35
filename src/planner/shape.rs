//! What one fresh node of a node group offers the scheduler: allocatable resources, labels,
//! taints and per-driver CSI attach limits, read from the group's template node.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Serialize;

use crate::model::quantity::Quantity;
use crate::model::{NodeGroupId, NodeGroupSpec, PodDemand, Taint, TemplateNode};

/// Allocatable resources of one node, in the units [`PodDemand`] uses.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Allocatable {
    /// CPU in millicores.
    pub cpu_milli: u64,
    /// Memory in bytes.
    pub memory_bytes: u64,
    /// Ephemeral storage in bytes.
    pub ephemeral_storage_bytes: u64,
    /// Maximum pods.
    pub pods: u64,
    /// Extended resources (GPUs, RDMA devices, RDMA bandwidth, ...) by name, in whole units.
    pub extended: BTreeMap<String, u64>,
}

/// What one fresh node of a group offers. Cheap to clone (one reference count).
///
/// The planner checks every limit in here and nothing else: DaemonSet pods that will also run
/// on the node are not included unless the caller subtracts them with
/// [`NodeShape::with_overhead`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeShape {
    inner: Arc<Inner>,
}

#[derive(Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
struct Inner {
    group: NodeGroupId,
    allocatable: Allocatable,
    labels: BTreeMap<String, String>,
    taints: Vec<Taint>,
    csi: BTreeMap<String, u32>,
    /// The limits as one vector, in [`Dim`] order: cpu, memory, ephemeral storage, pods, the
    /// extended resources in name order, then the CSI drivers in name order.
    #[serde(skip)]
    limits: Vec<u64>,
}

/// Fixed dimensions at the start of a limit vector.
pub(crate) const CPU: usize = 0;
pub(crate) const MEMORY: usize = 1;
pub(crate) const EPHEMERAL_STORAGE: usize = 2;
pub(crate) const PODS: usize = 3;
pub(crate) const FIXED_DIMS: usize = 4;

/// What a dimension of the limit vector measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dim<'a> {
    /// A resource (cpu, memory, ephemeral-storage, pods or an extended resource).
    Resource(&'a str),
    /// Attachable volumes of a CSI driver.
    Csi(&'a str),
}

impl NodeShape {
    /// The shape of a fresh node of `group`, exactly as its template node
    /// ([`TemplateNode::for_group`]) describes it: allocatable resources (GPU, RDMA device and
    /// RDMA bandwidth resources included), labels (topology and GPU labels included) and
    /// taints, plus the group's CSI attach limits. `None` when the group has no template.
    ///
    /// CSI drivers the group does not list have no attach limit.
    pub fn from_group(group: &NodeGroupSpec, gpu_label: &str) -> Option<Self> {
        let template = TemplateNode::for_group(group, gpu_label)?;
        let mut allocatable = Allocatable::default();
        for (name, value) in &template.status.allocatable {
            // The template formats these itself, so parsing cannot fail; if it ever did, a zero
            // limit makes the planner refuse rather than over-promise.
            let q = Quantity::parse(value).unwrap_or_default();
            // Round down: a fraction of a byte or unit is not there to use.
            let whole = q.milli() / 1000;
            match name.as_str() {
                "cpu" => allocatable.cpu_milli = q.milli(),
                "memory" => allocatable.memory_bytes = whole,
                "ephemeral-storage" => allocatable.ephemeral_storage_bytes = whole,
                "pods" => allocatable.pods = whole,
                _ => {
                    allocatable.extended.insert(name.clone(), whole);
                }
            }
        }
        Some(Self::new(
            group.id.clone(),
            allocatable,
            template.metadata.labels,
            group.taints.clone(),
            group.csi.clone(),
        ))
    }

    /// A shape from its parts, for callers that know a node's shape some other way.
    pub fn new(
        group: NodeGroupId,
        allocatable: Allocatable,
        labels: BTreeMap<String, String>,
        taints: Vec<Taint>,
        csi: BTreeMap<String, u32>,
    ) -> Self {
        let mut limits = Vec::with_capacity(FIXED_DIMS + allocatable.extended.len() + csi.len());
        limits.extend([
            allocatable.cpu_milli,
            allocatable.memory_bytes,
            allocatable.ephemeral_storage_bytes,
            allocatable.pods,
        ]);
        limits.extend(allocatable.extended.values().copied());
        limits.extend(csi.values().map(|&n| u64::from(n)));
        Self {
            inner: Arc::new(Inner {
                group,
                allocatable,
                labels,
                taints,
                csi,
                limits,
            }),
        }
    }

    /// This shape with `overhead` (e.g. the DaemonSet pods every new node runs) already in use:
    /// requests, extended resources, attachable volumes and `pods` pod slots are subtracted,
    /// saturating at zero. Selectors and tolerations in `overhead` are ignored.
    pub fn with_overhead(&self, overhead: &PodDemand, pods: u64) -> Self {
        let mut a = self.inner.allocatable.clone();
        a.cpu_milli = a.cpu_milli.saturating_sub(overhead.cpu_milli);
        a.memory_bytes = a.memory_bytes.saturating_sub(overhead.memory_bytes);
        a.ephemeral_storage_bytes = a
            .ephemeral_storage_bytes
            .saturating_sub(overhead.ephemeral_storage_bytes);
        a.pods = a.pods.saturating_sub(pods);
        for (name, used) in &overhead.extended {
            if let Some(v) = a.extended.get_mut(name) {
                *v = v.saturating_sub(*used);
            }
        }
        let mut csi = self.inner.csi.clone();
        for (driver, used) in &overhead.volumes {
            if let Some(v) = csi.get_mut(driver) {
                *v = v.saturating_sub(*used);
            }
        }
        Self::new(
            self.inner.group.clone(),
            a,
            self.inner.labels.clone(),
            self.inner.taints.clone(),
            csi,
        )
    }

    /// The node group this shape belongs to.
    pub fn group(&self) -> &NodeGroupId {
        &self.inner.group
    }

    /// Allocatable resources.
    pub fn allocatable(&self) -> &Allocatable {
        &self.inner.allocatable
    }

    /// Node labels.
    pub fn labels(&self) -> &BTreeMap<String, String> {
        &self.inner.labels
    }

    /// Node taints.
    pub fn taints(&self) -> &[Taint] {
        &self.inner.taints
    }

    /// CSI driver → maximum attachable volumes per node. Drivers not listed have no limit.
    pub fn csi(&self) -> &BTreeMap<String, u32> {
        &self.inner.csi
    }

    /// The limits as one vector (see [`Dim`]).
    pub(crate) fn limits(&self) -> &[u64] {
        &self.inner.limits
    }

    /// Index of extended resource `name` in the limit vector.
    pub(crate) fn extended_dim(&self, name: &str) -> Option<usize> {
        // BTreeMap keys are sorted and `limits` holds them in that order.
        position(self.inner.allocatable.extended.keys(), name).map(|i| FIXED_DIMS + i)
    }

    /// Index of CSI driver `driver` in the limit vector.
    pub(crate) fn csi_dim(&self, driver: &str) -> Option<usize> {
        position(self.inner.csi.keys(), driver)
            .map(|i| FIXED_DIMS + self.inner.allocatable.extended.len() + i)
    }

    /// What dimension `i` of the limit vector measures.
    pub(crate) fn dim(&self, i: usize) -> Dim<'_> {
        match i {
            CPU => Dim::Resource("cpu"),
            MEMORY => Dim::Resource("memory"),
            EPHEMERAL_STORAGE => Dim::Resource("ephemeral-storage"),
            PODS => Dim::Resource("pods"),
            _ => {
                let ext = &self.inner.allocatable.extended;
                let j = i - FIXED_DIMS;
                match ext.keys().nth(j) {
                    Some(name) => Dim::Resource(name),
                    None => Dim::Csi(
                        self.inner
                            .csi
                            .keys()
                            .nth(j - ext.len())
                            .map_or("", String::as_str),
                    ),
                }
            }
        }
    }
}

fn position<'a>(mut keys: impl Iterator<Item = &'a String>, name: &str) -> Option<usize> {
    keys.position(|k| k == name)
}

impl Serialize for NodeShape {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.inner.serialize(s)
    }
}
