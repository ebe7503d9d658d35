//! A Machine as CA sees it: the instance it is (id, state, error class), whether it is the
//! node a delete request names, and where its capacity annotations disagree with the
//! group's template.

use std::collections::BTreeMap;

use super::ledger::Seen;
use super::{INSUFFICIENT_RESOURCES, placeholder_id};
use crate::model::{ErrorCode, Instance, InstanceError, InstanceState, NodeGroupSpec};
use crate::provision::NodeRef;
use crate::provision::capi_types::Machine;

/// What a Machine is, as an instance of `group`.
pub fn instance_of(machine: &Machine) -> Instance {
    let name = machine.metadata.name.clone().unwrap_or_default();
    let namespace = machine.metadata.namespace.clone().unwrap_or_default();
    let id = match machine.spec.provider_id.as_deref() {
        Some(p) if !p.is_empty() => p.to_owned(),
        _ => placeholder_id(&namespace, &name),
    };
    let status = &machine.status;
    let node_name = status
        .node_ref
        .as_ref()
        .map(|r| r.name.clone())
        .filter(|n| !n.is_empty())
        .unwrap_or(name);
    let phase = status.phase.as_deref().unwrap_or("");
    let deleting =
        machine.metadata.deletion_timestamp.is_some() || matches!(phase, "Deleting" | "Deleted");
    let failure = status
        .deprecated
        .as_ref()
        .and_then(|d| d.v1beta1.as_ref())
        .filter(|f| {
            f.failure_reason.as_deref().is_some_and(|r| !r.is_empty())
                || f.failure_message.as_deref().is_some_and(|m| !m.is_empty())
        });
    let error = if deleting {
        None
    } else if let Some(f) = failure {
        let reason = f.failure_reason.clone().unwrap_or_default();
        let code = if reason == INSUFFICIENT_RESOURCES {
            ErrorCode::Stockout
        } else {
            ErrorCode::ProvisioningFailed
        };
        Some(InstanceError {
            code,
            message: format!(
                "Machine {namespace}/{}: {reason}: {}",
                machine.metadata.name.as_deref().unwrap_or(""),
                f.failure_message.as_deref().unwrap_or("")
            ),
        })
    } else if phase == "Failed" {
        Some(InstanceError {
            code: ErrorCode::ProvisioningFailed,
            message: format!(
                "Machine {namespace}/{} is in phase Failed",
                machine.metadata.name.as_deref().unwrap_or("")
            ),
        })
    } else {
        None
    };
    let state = if deleting {
        InstanceState::Deleting
    } else if error.is_none() && status.node_ref.is_some() {
        InstanceState::Running
    } else {
        InstanceState::Creating
    };
    Instance {
        id,
        node_name,
        state,
        error,
        claim: None,
    }
}

/// `machine` as the claim ledger orders it.
pub(super) fn seen(machine: &Machine) -> Seen {
    Seen {
        name: machine.metadata.name.clone().unwrap_or_default(),
        created: machine
            .metadata
            .creation_timestamp
            .as_ref()
            .map_or(0, |t| t.0.as_second()),
        deleting: machine.metadata.deletion_timestamp.is_some(),
    }
}

/// Whether `machine` is not a machine yet: not failed, not going away, and neither a Node
/// nor a providerID (the infrastructure sets it once the machine exists, before or as its
/// Node registers, and Cluster API sets the nodeRef only after that: a Machine with a
/// providerID may already carry running pods).
pub(super) fn unborn(machine: &Machine) -> bool {
    let i = instance_of(machine);
    i.state == InstanceState::Creating
        && i.error.is_none()
        && machine
            .spec
            .provider_id
            .as_deref()
            .is_none_or(str::is_empty)
}

/// How many of `machines` exist and are not going away: the replicas past them are not
/// created yet.
pub(super) fn existing(machines: &[Machine]) -> u32 {
    let n = machines
        .iter()
        .filter(|m| m.metadata.deletion_timestamp.is_none())
        .count();
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// Whether `machine` is the instance CA named in `node`.
pub(super) fn names(machine: &Machine, instance: &Instance, node: &NodeRef) -> bool {
    if !node.provider_id.is_empty() {
        let placeholder = placeholder_id(
            machine.metadata.namespace.as_deref().unwrap_or(""),
            machine.metadata.name.as_deref().unwrap_or(""),
        );
        return instance.id == node.provider_id || placeholder == node.provider_id;
    }
    !node.name.is_empty()
        && (instance.node_name == node.name || machine.metadata.name.as_deref() == Some(&node.name))
}

/// Prefix of the scale-from-zero capacity annotations CA's own clusterapi provider reads from
/// a MachineDeployment.
pub const CAPACITY_ANNOTATION_PREFIX: &str = "capacity.cluster-autoscaler.kubernetes.io/";

/// Where the capacity annotations of a MachineDeployment disagree with the group's template
/// node, one line per field (`cpu: annotation 96, template 192`). Annotations gangscaler does
/// not model (labels, taints, DRA) and unparsable values are skipped; an unparsable value is
/// listed as such.
pub fn capacity_drift(
    annotations: &BTreeMap<String, String>,
    group: &NodeGroupSpec,
) -> Vec<String> {
    use crate::model::quantity::Quantity;
    let mut out = Vec::new();
    let get = |k: &str| annotations.get(&format!("{CAPACITY_ANNOTATION_PREFIX}{k}"));
    let mut quantity = |field: &str, template: Option<Quantity>| {
        let (Some(v), Some(t)) = (get(field), template) else {
            return;
        };
        match Quantity::parse(v) {
            Ok(q) if q == t => {}
            Ok(_) => out.push(format!(
                "{field}: annotation {v}, template {}",
                t.to_binary_string()
            )),
            Err(e) => out.push(format!("{field}: annotation {v:?} is not a quantity ({e})")),
        }
    };
    let capacity = group.capacity.as_ref();
    quantity("cpu", capacity.map(|c| c.cpu));
    quantity("memory", capacity.map(|c| c.memory));
    quantity("ephemeral-disk", capacity.map(|c| c.ephemeral_storage));
    let mut count = |field: &str, template: u64| {
        if let Some(v) = get(field) {
            match v.trim().parse::<u64>() {
                Ok(n) if n == template => {}
                Ok(n) => out.push(format!("{field}: annotation {n}, template {template}")),
                Err(_) => out.push(format!("{field}: annotation {v:?} is not a whole number")),
            }
        }
    };
    if let Some(c) = capacity {
        count("maxPods", c.pods);
    }
    count(
        "gpu-count",
        group.gpu.as_ref().map_or(0, |g| u64::from(g.count)),
    );
    if let (Some(v), Some(g)) = (get("gpu-type"), group.gpu.as_ref())
        && v != &g.resource_name
        && v != &g.product
    {
        out.push(format!(
            "gpu-type: annotation {v}, template {} ({})",
            g.resource_name, g.product
        ));
    }
    out
}
