//! The template node of a node group: what a fresh node of the group looks like to the
//! scheduler. Shaped like a Kubernetes `v1.Node` so it prints as one (`gangscaler template`)
//! and converts field by field to the protobuf Node that CA receives.

use std::collections::BTreeMap;

use serde::Serialize;

use super::labels;
use super::node_group::{Capacity, NodeGroupSpec};
use super::quantity::Quantity;

/// A Kubernetes-shaped template Node.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TemplateNode {
    /// Always `v1`.
    pub api_version: &'static str,
    /// Always `Node`.
    pub kind: &'static str,
    /// Name, labels and annotations.
    pub metadata: TemplateMeta,
    /// Taints.
    pub spec: TemplateSpec,
    /// Capacity, allocatable and conditions.
    pub status: TemplateStatus,
}

/// Template node metadata.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TemplateMeta {
    /// Node name.
    pub name: String,
    /// Labels.
    pub labels: BTreeMap<String, String>,
    /// Annotations.
    pub annotations: BTreeMap<String, String>,
}

/// Template node spec.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TemplateSpec {
    /// Taints as `{key, value, effect}`.
    pub taints: Vec<TemplateTaint>,
}

/// One taint in Kubernetes shape.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TemplateTaint {
    /// Key.
    pub key: String,
    /// Value.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub value: String,
    /// Effect.
    pub effect: &'static str,
}

/// Template node status.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TemplateStatus {
    /// Resource name → quantity string.
    pub capacity: BTreeMap<String, String>,
    /// Resource name → quantity string.
    pub allocatable: BTreeMap<String, String>,
    /// Node conditions.
    pub conditions: Vec<TemplateCondition>,
}

/// A node condition.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TemplateCondition {
    /// Condition type, e.g. `Ready`.
    #[serde(rename = "type")]
    pub type_: &'static str,
    /// `True` or `False`.
    pub status: &'static str,
    /// Machine-readable reason.
    pub reason: &'static str,
}

impl TemplateNode {
    /// Builds the template node of `group`; `None` when the group has no capacity and so no
    /// template.
    pub fn for_group(group: &NodeGroupSpec, gpu_label: &str) -> Option<Self> {
        let capacity = group.capacity?;
        let allocatable = Capacity {
            cpu: capacity
                .cpu
                .checked_sub(group.reserved.cpu)
                .unwrap_or_default(),
            memory: capacity
                .memory
                .checked_sub(group.reserved.memory)
                .unwrap_or_default(),
            ephemeral_storage: capacity
                .ephemeral_storage
                .checked_sub(group.reserved.ephemeral_storage)
                .unwrap_or_default(),
            pods: capacity.pods.saturating_sub(group.reserved.pods),
        };
        let mut extended = BTreeMap::new();
        let mut node_labels = BTreeMap::new();
        let mut annotations = BTreeMap::new();
        node_labels.insert(labels::OS.to_owned(), group.os.clone());
        node_labels.insert(labels::ARCH.to_owned(), group.arch.clone());
        node_labels.insert(
            labels::INSTANCE_TYPE.to_owned(),
            group.instance_type.clone(),
        );
        node_labels.insert(labels::ZONE.to_owned(), group.zone.clone());
        node_labels.insert(labels::REGION.to_owned(), group.region.clone());
        node_labels.insert(labels::NODE_GROUP.to_owned(), group.id.to_string());
        if let Some(gpu) = &group.gpu {
            extended.insert(gpu.resource_name.clone(), u64::from(gpu.count));
            node_labels.insert(labels::GPU_PRODUCT.to_owned(), gpu.product.clone());
            node_labels.insert(labels::GPU_COUNT.to_owned(), gpu.count.to_string());
            let mib = gpu.memory.units_ceil() >> 20;
            node_labels.insert(labels::GPU_MEMORY.to_owned(), mib.to_string());
            // CA identifies GPU nodes by this label; its value is the GPU type.
            node_labels.insert(gpu_label.to_owned(), gpu.product.clone());
        }
        if let Some(rdma) = &group.rdma {
            extended.insert(rdma.resource_name.clone(), u64::from(rdma.devices));
            extended.insert(
                rdma.bandwidth_resource_name.clone(),
                u64::from(rdma.bandwidth_gbps),
            );
            annotations.insert(
                labels::RDMA_BANDWIDTH.to_owned(),
                rdma.bandwidth_gbps.to_string(),
            );
        }
        for (k, v) in group.topology.iter().chain(&group.labels) {
            node_labels.insert(k.clone(), v.clone());
        }
        if !group.csi.is_empty() {
            let limits: Vec<String> = group.csi.iter().map(|(d, n)| format!("{d}={n}")).collect();
            annotations.insert(labels::CSI_ATTACH_LIMITS.to_owned(), limits.join(","));
        }
        let name = format!("template-node-for-{}", group.id);
        node_labels.insert(labels::HOSTNAME.to_owned(), name.clone());
        Some(Self {
            api_version: "v1",
            kind: "Node",
            metadata: TemplateMeta {
                name,
                labels: node_labels,
                annotations,
            },
            spec: TemplateSpec {
                taints: group
                    .taints
                    .iter()
                    .map(|t| TemplateTaint {
                        key: t.key.clone(),
                        value: t.value.clone(),
                        effect: t.effect.as_str(),
                    })
                    .collect(),
            },
            status: TemplateStatus {
                capacity: resource_list(&capacity, &extended),
                allocatable: resource_list(&allocatable, &extended),
                conditions: conditions(),
            },
        })
    }
}

fn resource_list(c: &Capacity, extended: &BTreeMap<String, u64>) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    out.insert("cpu".to_owned(), c.cpu.to_decimal_string());
    out.insert("memory".to_owned(), c.memory.to_binary_string());
    out.insert(
        "ephemeral-storage".to_owned(),
        c.ephemeral_storage.to_binary_string(),
    );
    out.insert(
        "pods".to_owned(),
        Quantity::from_units(c.pods).to_decimal_string(),
    );
    for (name, count) in extended {
        out.insert(name.clone(), count.to_string());
    }
    out
}

fn conditions() -> Vec<TemplateCondition> {
    let healthy = |type_, reason| TemplateCondition {
        type_,
        status: "False",
        reason,
    };
    vec![
        TemplateCondition {
            type_: "Ready",
            status: "True",
            reason: "KubeletReady",
        },
        healthy("MemoryPressure", "KubeletHasSufficientMemory"),
        healthy("DiskPressure", "KubeletHasNoDiskPressure"),
        healthy("PIDPressure", "KubeletHasSufficientPID"),
        healthy("NetworkUnavailable", "RouteCreated"),
    ]
}
