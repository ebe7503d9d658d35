//! Scheduling predicates of one pod against a node shape: taints and tolerations, node
//! selector, required node affinity, and resource and attach limits.

use crate::model::{PodDemand, TaintEffect};

use super::explain::Reason;
use super::shape::{CPU, Dim, EPHEMERAL_STORAGE, FIXED_DIMS, MEMORY, NodeShape, PODS};

/// Checks every predicate of `demand` against `shape` and writes the pod's use of each limit
/// into `row` (which must be `shape.limits().len()` zeros), in the shape's dimension order.
/// Each pod uses one pod slot.
pub(crate) fn check_into(
    pod: &str,
    demand: &PodDemand,
    shape: &NodeShape,
    row: &mut [u64],
) -> Result<(), Reason> {
    // Checked first: whatever the group, the pod's attach count is unknown and the scheduler
    // will not place it until the claim resolves.
    if let Some(claim) = demand.unresolved_claims.first() {
        return Err(Reason::UnresolvedClaim {
            pod: pod.to_owned(),
            claim: claim.clone(),
        });
    }
    tolerated(pod, demand, shape)?;
    selected(pod, demand, shape)?;
    row[CPU] = demand.cpu_milli;
    row[MEMORY] = demand.memory_bytes;
    row[EPHEMERAL_STORAGE] = demand.ephemeral_storage_bytes;
    row[PODS] = 1;
    for (name, &requested) in &demand.extended {
        if requested == 0 {
            continue;
        }
        match shape.extended_dim(name) {
            Some(i) => row[i] = requested,
            None => {
                return Err(Reason::PodTooLarge {
                    pod: pod.to_owned(),
                    resource: name.clone(),
                    requested,
                    allocatable: 0,
                });
            }
        }
    }
    for (driver, &volumes) in &demand.volumes {
        // A driver without a limit on this group accepts any number of volumes.
        if let Some(i) = shape.csi_dim(driver) {
            row[i] = u64::from(volumes);
        }
    }
    let limits = shape.limits();
    for (i, (&used, &limit)) in row.iter().zip(limits).enumerate() {
        if used > limit {
            return Err(match shape.dim(i) {
                Dim::Resource(resource) => Reason::PodTooLarge {
                    pod: pod.to_owned(),
                    resource: resource.to_owned(),
                    requested: used,
                    allocatable: limit,
                },
                Dim::Csi(driver) => Reason::CsiLimit {
                    pod: pod.to_owned(),
                    driver: driver.to_owned(),
                    volumes: used,
                    limit,
                },
            });
        }
    }
    debug_assert!(row.len() >= FIXED_DIMS);
    Ok(())
}

/// Every `NoSchedule` and `NoExecute` taint must be tolerated; `PreferNoSchedule` is a
/// preference and never blocks.
pub(super) fn tolerated(pod: &str, demand: &PodDemand, shape: &NodeShape) -> Result<(), Reason> {
    for taint in shape.taints() {
        if taint.effect == TaintEffect::PreferNoSchedule {
            continue;
        }
        let ok = demand
            .tolerations
            .iter()
            .any(|t| t.tolerates(&taint.key, &taint.value, taint.effect));
        if !ok {
            let value = if taint.value.is_empty() {
                String::new()
            } else {
                format!("={}", taint.value)
            };
            return Err(Reason::Untolerated {
                pod: pod.to_owned(),
                taint: format!("{}{value}:{}", taint.key, taint.effect.as_str()),
            });
        }
    }
    Ok(())
}

/// `nodeSelector` must match exactly; at least one required node-affinity term must match.
/// As in Kubernetes, an empty term matches no node.
pub(super) fn selected(pod: &str, demand: &PodDemand, shape: &NodeShape) -> Result<(), Reason> {
    let labels = shape.labels();
    for (key, value) in &demand.node_selector {
        if labels.get(key) != Some(value) {
            return Err(Reason::SelectorMismatch {
                pod: pod.to_owned(),
                key: key.clone(),
            });
        }
    }
    if demand.affinity_terms.is_empty() {
        return Ok(());
    }
    let matched = demand
        .affinity_terms
        .iter()
        .any(|term| !term.is_empty() && term.iter().all(|r| r.matches(labels)));
    if matched {
        return Ok(());
    }
    let key = demand
        .affinity_terms
        .first()
        .and_then(|term| term.iter().find(|r| !r.matches(labels)))
        .map(|r| r.key.clone())
        .unwrap_or_default();
    Err(Reason::AffinityMismatch {
        pod: pod.to_owned(),
        key,
    })
}
