//! [`demand`]: what one pod needs from a node, computed as the scheduler does.
//!
//! - **Resources**: `max(sum of app containers and sidecars, max over init containers)`
//!   plus `spec.overhead`, where a sidecar (an init container with `restartPolicy: Always`)
//!   also adds to every later init container, and pod-level `spec.resources.requests`
//!   replace the container sum for `cpu`, `memory` and hugepages (the scheduler's
//!   `PodRequests`). A container's (or the pod's) missing request defaults to its limit, as
//!   the API server defaults it, so extended resources given only as limits count. In-place
//!   resize status (`status.containerStatuses[].allocatedResources`) is not consulted.
//! - **Placement**: `spec.nodeSelector`; required node affinity
//!   (`requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms`); tolerations.
//!   `matchFields` (only `metadata.name` exists) cannot be a node label, so each becomes a
//!   requirement on the pseudo-label `field:<path>`, which no node carries: `In` matches no
//!   node we could create (right for DaemonSet pods pinned to an existing node) and `NotIn`
//!   matches every one. An empty term matches no node, as in Kubernetes.
//! - **Attachable volumes** per CSI driver, counting each claim once: a PVC bound to a PV
//!   counts for the PV's `spec.csi.driver` (whatever its class says); an unbound PVC (e.g.
//!   `WaitForFirstConsumer`) for its StorageClass's provisioner, the default class when it
//!   names none; a generic ephemeral volume for its PVC `<pod>-<volume>` if it exists, else
//!   for its template's StorageClass. A claim whose driver cannot be resolved (the claim, its
//!   bound PV or its StorageClass does not exist, no default class, or `storageClassName: ""`
//!   while unbound) is listed in [`PodDemand::unresolved_claims`] and reported as
//!   [`Issue::UnresolvedClaim`]; the scheduler cannot place such a pod either. In-tree sources and
//!   provisioners that CSI migration maps (EBS, GCE PD, Azure Disk, Cinder, vSphere) count
//!   for the CSI driver they migrate to. A driver whose CSIDriver says `attachRequired: false`
//!   is skipped; a driver with no CSIDriver object counts, since attach is the default.
//!   Inline CSI volumes (`volumes[].csi`) do not count: they are never attached (no
//!   VolumeAttachment; the kubelet publishes them directly) and the scheduler's CSI limits
//!   plugin counts only PVC-backed, generic ephemeral and migrated in-tree volumes.

//!
//! The work is split in two: [`raw_demand`](raw::raw_demand) reads everything that depends on the pod alone
//! when it is compacted ([`CompactPod`]; `raw`), and [`resolve`] looks its volume references
//! up in a snapshot when gangs are built (`volumes`).

pub(super) mod raw;
mod volumes;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::Pod;

use super::objects::ObjectSet;
use super::pod::CompactPod;
use super::problem::Issue;
use crate::model::PodDemand;
use crate::model::reservation::DaemonSetDemand;
use raw::{affinity_terms, toleration};
pub(crate) use volumes::attachable_claims;
use volumes::volumes;

/// What `pod` needs from a node, looking volumes up in `objects`. Unparsable quantities count
/// as zero and claims without a resolvable driver are listed in
/// [`PodDemand::unresolved_claims`]; [`gangs`](super::gangs) reports both.
pub fn demand(pod: &Pod, objects: &ObjectSet) -> PodDemand {
    CompactPod::from_pod(pod).demand(objects)
}

impl CompactPod {
    /// What the pod needs from a node, looking its volumes up in `objects` (see
    /// [`demand()`]).
    pub fn demand(&self, objects: &ObjectSet) -> PodDemand {
        resolve(self, objects).0
    }
}

/// The full demand of `pod`, its volumes looked up in `objects`, with every issue found
/// (those found while compacting first).
pub(crate) fn resolve(pod: &CompactPod, objects: &ObjectSet) -> (PodDemand, Vec<Issue>) {
    let mut issues = pod.issues.to_vec();
    let raw = &pod.demand;
    let (volumes, unresolved_claims) = volumes(pod, objects, &mut issues);
    let demand = PodDemand {
        cpu_milli: raw.cpu_milli,
        memory_bytes: raw.memory_bytes,
        ephemeral_storage_bytes: raw.ephemeral_storage_bytes,
        extended: raw
            .extended
            .iter()
            .map(|(k, v)| (k.to_string(), *v))
            .collect(),
        volumes,
        node_selector: raw
            .node_selector
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        affinity_terms: raw.affinity_terms.iter().map(|t| t.to_vec()).collect(),
        tolerations: raw.tolerations.to_vec(),
        unresolved_claims,
    };
    (demand, issues)
}

/// What node reservation reads of a DaemonSet: its `namespace/name` and its pod template's
/// node selector, required node affinity and tolerations, read as a pod's are (resources and
/// volumes are left out). A DaemonSet without a pod spec places nothing: `None`.
pub fn daemon_set_demand(ds: &DaemonSet) -> Option<DaemonSetDemand> {
    let spec = ds.spec.as_ref()?.template.spec.as_ref()?;
    let name = format!(
        "{}/{}",
        ds.metadata.namespace.as_deref().unwrap_or_default(),
        ds.metadata.name.as_deref().unwrap_or_default()
    );
    let mut issues = Vec::new();
    let pod = PodDemand {
        node_selector: spec.node_selector.clone().unwrap_or_default(),
        affinity_terms: affinity_terms(spec, &mut issues)
            .iter()
            .map(|t| t.to_vec())
            .collect(),
        tolerations: spec
            .tolerations
            .iter()
            .flatten()
            .filter_map(toleration)
            .collect(),
        ..PodDemand::default()
    };
    Some(DaemonSetDemand { name, pod })
}

#[cfg(test)]
mod tests;
