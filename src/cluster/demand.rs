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
//! The work is split in two: [`raw_demand`] reads everything that depends on the pod alone
//! when it is compacted ([`CompactPod`]), and [`resolve`] looks its volume references up in
//! a snapshot when gangs are built.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{
    Container, NodeSelectorRequirement, PersistentVolume, Pod, PodSpec, ResourceRequirements,
    Volume,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as K8sQuantity;

use super::objects::ObjectSet;
use super::pod::CompactPod;
use super::problem::{ClaimCause, Issue};
use crate::model::quantity::Quantity;
use crate::model::reservation::DaemonSetDemand;
use crate::model::{PodDemand, SelectorOperator, SelectorRequirement, Toleration};

/// Prefix of the pseudo-label a `matchFields` requirement is written on.
pub(crate) const FIELD_KEY_PREFIX: &str = "field:";

/// In-tree volume plugins and the CSI drivers CSI migration translates them to.
const MIGRATED: [(&str, &str); 5] = [
    ("kubernetes.io/aws-ebs", "ebs.csi.aws.com"),
    ("kubernetes.io/gce-pd", "pd.csi.storage.gke.io"),
    ("kubernetes.io/azure-disk", "disk.csi.azure.com"),
    ("kubernetes.io/cinder", "cinder.csi.openstack.org"),
    ("kubernetes.io/vsphere-volume", "csi.vsphere.vmware.com"),
];

/// Resources that pod-level `spec.resources` may set.
fn pod_level(resource: &str) -> bool {
    resource == "cpu" || resource == "memory" || resource.starts_with("hugepages-")
}

/// What `pod` needs from a node, looking volumes up in `objects`. Unparsable quantities count
/// as zero and claims without a resolvable driver are listed in
/// [`PodDemand::unresolved_claims`]; [`gangs`](super::gangs) reports both.
pub fn demand(pod: &Pod, objects: &ObjectSet) -> PodDemand {
    CompactPod::from_pod(pod).demand(objects)
}

/// The part of a pod's demand that depends on the pod alone, in compact form.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct RawDemand {
    pub cpu_milli: u64,
    pub memory_bytes: u64,
    pub ephemeral_storage_bytes: u64,
    /// Extended resources with a positive request, by name, in whole units.
    pub extended: Box<[(Box<str>, u64)]>,
    /// `spec.nodeSelector`, by key.
    pub node_selector: Box<[(Box<str>, Box<str>)]>,
    pub affinity_terms: Box<[Box<[SelectorRequirement]>]>,
    pub tolerations: Box<[Toleration]>,
    /// Volumes that may count toward an attach limit, in pod order.
    pub volumes: Box<[VolumeRef]>,
}

/// A pod volume whose CSI driver is known only with the storage objects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum VolumeRef {
    /// `persistentVolumeClaim.claimName`.
    Claim(Box<str>),
    /// A generic ephemeral volume: its claim `<pod>-<volume>` and, when it has a claim
    /// template, the template's `storageClassName` (`Some(None)`: no class, the default).
    Ephemeral {
        claim: Box<str>,
        template_class: Option<Option<Box<str>>>,
    },
    /// An inline in-tree disk CSI migration attaches through `driver`.
    InTree {
        driver: &'static str,
        identity: Box<str>,
    },
}

/// Reads everything [`demand`] needs from `spec` alone; `pod_name` names generated claims.
pub(crate) fn raw_demand(spec: &PodSpec, pod_name: &str) -> (RawDemand, Vec<Issue>) {
    let mut issues = Vec::new();
    let mut demand = RawDemand::default();
    resources(spec, &mut demand, &mut issues);
    demand.node_selector = spec
        .node_selector
        .iter()
        .flatten()
        .map(|(k, v)| (k.as_str().into(), v.as_str().into()))
        .collect();
    demand.affinity_terms = affinity_terms(spec, &mut issues);
    demand.tolerations = spec
        .tolerations
        .iter()
        .flatten()
        .filter_map(toleration)
        .collect();
    demand.volumes = spec
        .volumes
        .iter()
        .flatten()
        .filter_map(|v| volume_ref(pod_name, v))
        .collect();
    (demand, issues)
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

/// Resource totals in thousandths of a unit, by resource name.
type Totals = BTreeMap<String, u64>;

fn resources(spec: &PodSpec, demand: &mut RawDemand, issues: &mut Vec<Issue>) {
    let mut total = Totals::new();
    for (i, c) in spec.containers.iter().enumerate() {
        add(
            &mut total,
            &container_requests(c, &format!("spec.containers[{i}]"), issues),
        );
    }
    let mut sidecars = Totals::new();
    let mut init_peak = Totals::new();
    for (i, c) in spec.init_containers.iter().flatten().enumerate() {
        let requests = container_requests(c, &format!("spec.initContainers[{i}]"), issues);
        // While an init container runs, the sidecars started before it run too.
        let running = if c.restart_policy.as_deref() == Some("Always") {
            add(&mut total, &requests);
            add(&mut sidecars, &requests);
            sidecars.clone()
        } else {
            let mut running = sidecars.clone();
            add(&mut running, &requests);
            running
        };
        for (name, value) in running {
            let peak = init_peak.entry(name).or_default();
            *peak = (*peak).max(value);
        }
    }
    for (name, value) in init_peak {
        let slot = total.entry(name).or_default();
        *slot = (*slot).max(value);
    }
    if let Some(pod_resources) = spec.resources.as_ref() {
        for (name, value) in requests(pod_resources, "spec.resources", issues) {
            if pod_level(&name) {
                total.insert(name, value);
            }
        }
    }
    if let Some(overhead) = spec.overhead.as_ref() {
        for (name, q) in overhead {
            let value = milli(q, &format!("spec.overhead.{name}"), issues);
            let slot = total.entry(name.clone()).or_default();
            *slot = slot.saturating_add(value);
        }
    }
    let mut extended = Vec::new();
    for (name, value) in total {
        let units = value.div_ceil(1000);
        match name.as_str() {
            "cpu" => demand.cpu_milli = value,
            "memory" => demand.memory_bytes = units,
            "ephemeral-storage" => demand.ephemeral_storage_bytes = units,
            _ if value > 0 => extended.push((name.into_boxed_str(), units)),
            _ => {}
        }
    }
    demand.extended = extended.into_boxed_slice();
}

fn container_requests(c: &Container, path: &str, issues: &mut Vec<Issue>) -> Totals {
    match c.resources.as_ref() {
        Some(r) => requests(r, &format!("{path}.resources"), issues),
        None => Totals::new(),
    }
}

/// Requests, each missing one defaulted to its limit (API-server defaulting).
fn requests(r: &ResourceRequirements, path: &str, issues: &mut Vec<Issue>) -> Totals {
    let mut out = Totals::new();
    for (name, q) in r.requests.iter().flatten() {
        out.insert(
            name.clone(),
            milli(q, &format!("{path}.requests.{name}"), issues),
        );
    }
    for (name, q) in r.limits.iter().flatten() {
        if !out.contains_key(name) {
            out.insert(
                name.clone(),
                milli(q, &format!("{path}.limits.{name}"), issues),
            );
        }
    }
    out
}

fn milli(q: &K8sQuantity, path: &str, issues: &mut Vec<Issue>) -> u64 {
    Quantity::parse(&q.0).map_or_else(
        |_| {
            issues.push(Issue::InvalidQuantity {
                path: path.to_owned(),
                value: q.0.clone(),
            });
            0
        },
        Quantity::milli,
    )
}

fn add(total: &mut Totals, more: &Totals) {
    for (name, value) in more {
        let slot = total.entry(name.clone()).or_default();
        *slot = slot.saturating_add(*value);
    }
}

fn affinity_terms(spec: &PodSpec, issues: &mut Vec<Issue>) -> Box<[Box<[SelectorRequirement]>]> {
    let Some(required) = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|n| {
            n.required_during_scheduling_ignored_during_execution
                .as_ref()
        })
    else {
        return Box::default();
    };
    let base = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution";
    let mut terms: Vec<Box<[SelectorRequirement]>> = Vec::new();
    for (t, term) in required.node_selector_terms.iter().enumerate() {
        let path = format!("{base}.nodeSelectorTerms[{t}]");
        let mut term_reqs = Vec::new();
        for (e, expr) in term.match_expressions.iter().flatten().enumerate() {
            let path = format!("{path}.matchExpressions[{e}].operator");
            term_reqs.push(requirement(expr, expr.key.clone(), &path, issues));
        }
        for (f, field) in term.match_fields.iter().flatten().enumerate() {
            let path = format!("{path}.matchFields[{f}].operator");
            let key = format!("{FIELD_KEY_PREFIX}{}", field.key);
            term_reqs.push(requirement(field, key, &path, issues));
        }
        // An empty term matches no node; leaving it out of the OR says exactly that.
        if !term_reqs.is_empty() {
            terms.push(term_reqs.into_boxed_slice());
        }
    }
    if terms.is_empty() {
        // Required affinity whose every term is empty: no node matches.
        terms.push(Box::new([matches_nothing()]));
    }
    terms.into_boxed_slice()
}

fn requirement(
    expr: &NodeSelectorRequirement,
    key: String,
    path: &str,
    issues: &mut Vec<Issue>,
) -> SelectorRequirement {
    let operator = match expr.operator.as_str() {
        "In" => SelectorOperator::In,
        "NotIn" => SelectorOperator::NotIn,
        "Exists" => SelectorOperator::Exists,
        "DoesNotExist" => SelectorOperator::DoesNotExist,
        "Gt" => SelectorOperator::Gt,
        "Lt" => SelectorOperator::Lt,
        other => {
            issues.push(Issue::InvalidOperator {
                path: path.to_owned(),
                operator: other.to_owned(),
            });
            return matches_nothing();
        }
    };
    SelectorRequirement {
        key,
        operator,
        values: expr.values.clone().unwrap_or_default(),
    }
}

/// A requirement no node satisfies.
fn matches_nothing() -> SelectorRequirement {
    SelectorRequirement {
        key: format!("{FIELD_KEY_PREFIX}metadata.name"),
        operator: SelectorOperator::In,
        values: Vec::new(),
    }
}

/// The model toleration; `None` for an effect we do not know (it tolerates nothing).
fn toleration(t: &k8s_openapi::api::core::v1::Toleration) -> Option<Toleration> {
    Toleration::from_parts(
        t.key.as_deref(),
        t.operator.as_deref(),
        t.value.as_deref(),
        t.effect.as_deref(),
    )
}

/// The reference of a volume that may count toward an attach limit; `None` for the others.
fn volume_ref(pod_name: &str, volume: &Volume) -> Option<VolumeRef> {
    if let Some(source) = volume.persistent_volume_claim.as_ref() {
        Some(VolumeRef::Claim(source.claim_name.as_str().into()))
    } else if let Some(ephemeral) = volume.ephemeral.as_ref() {
        // The ephemeral-volume controller names the claim `<pod>-<volume>`.
        Some(VolumeRef::Ephemeral {
            claim: format!("{pod_name}-{}", volume.name).into_boxed_str(),
            template_class: ephemeral
                .volume_claim_template
                .as_ref()
                .map(|t| t.spec.storage_class_name.as_deref().map(Into::into)),
        })
    } else {
        inline_in_tree(volume)
    }
}

/// Attachable volumes per CSI driver, and the claims whose driver cannot be resolved (each
/// also reported in `issues`).
fn volumes(
    pod: &CompactPod,
    objects: &ObjectSet,
    issues: &mut Vec<Issue>,
) -> (BTreeMap<String, u32>, Vec<String>) {
    let namespace = pod.namespace();
    // (driver, identity): a claim or disk used by two volumes of the pod counts once.
    let mut attached: BTreeSet<(String, String)> = BTreeSet::new();
    let mut unresolved: Vec<String> = Vec::new();
    for volume in &pod.demand.volumes {
        let (claim, template_class) = match volume {
            VolumeRef::Claim(claim) => (claim, None),
            VolumeRef::Ephemeral {
                claim,
                template_class,
            } => (claim, template_class.as_ref().map(|c| c.as_deref())),
            VolumeRef::InTree { driver, identity } => {
                if attach_required(objects, driver) {
                    attached.insert(((*driver).to_owned(), format!("inline:{identity}")));
                }
                continue;
            }
        };
        match claim_driver(objects, namespace, claim, template_class) {
            Ok(Some(driver)) => {
                if attach_required(objects, &driver) {
                    attached.insert((driver, format!("pvc:{claim}")));
                }
            }
            // Bound to a volume that no CSI driver attaches (NFS, hostPath, local...).
            Ok(None) => {}
            Err(cause) => {
                if !unresolved.iter().any(|c| c.as_str() == &**claim) {
                    unresolved.push(claim.to_string());
                    issues.push(Issue::UnresolvedClaim {
                        claim: claim.to_string(),
                        cause,
                    });
                }
            }
        }
    }
    let mut counts = BTreeMap::new();
    for (driver, _) in attached {
        *counts.entry(driver).or_insert(0u32) += 1;
    }
    (counts, unresolved)
}

/// The claims of `pod` whose CSI driver needs attaching (`attachRequired` not false), each
/// with the PersistentVolume it is bound to, if it is bound yet; a claim used twice is listed
/// once. Inline in-tree disks are left out: their VolumeAttachments name a PV that migration
/// generates, which no object here carries.
pub(crate) fn attachable_claims(
    pod: &CompactPod,
    objects: &ObjectSet,
) -> Vec<(String, Option<String>)> {
    let namespace = pod.namespace();
    let mut out: Vec<(String, Option<String>)> = Vec::new();
    for volume in &pod.demand.volumes {
        let (claim, template_class) = match volume {
            VolumeRef::Claim(claim) => (claim, None),
            VolumeRef::Ephemeral {
                claim,
                template_class,
            } => (claim, template_class.as_ref().map(|c| c.as_deref())),
            VolumeRef::InTree { .. } => continue,
        };
        if out.iter().any(|(c, _)| c.as_str() == &**claim) {
            continue;
        }
        let Ok(Some(driver)) = claim_driver(objects, namespace, claim, template_class) else {
            continue;
        };
        if !attach_required(objects, &driver) {
            continue;
        }
        let pv = objects
            .pvc(namespace, claim)
            .and_then(|pvc| pvc.spec.as_ref())
            .and_then(|s| s.volume_name.clone())
            .filter(|n| !n.is_empty());
        out.push((claim.to_string(), pv));
    }
    out
}

/// The CSI driver behind claim `namespace/claim`: the bound PV's driver (`None` for a volume
/// no CSI driver attaches), else the provisioner of its StorageClass. `template_class` stands
/// in for a claim that does not exist yet (`Some(None)`: a template without a class, which
/// gets the default class).
///
/// # Errors
///
/// Why the driver cannot be known: the claim, its bound PV or its StorageClass is missing,
/// it names no class and none is the default, or it asks for no class and is not bound.
fn claim_driver(
    objects: &ObjectSet,
    namespace: &str,
    claim: &str,
    template_class: Option<Option<&str>>,
) -> Result<Option<String>, ClaimCause> {
    let class = match objects.pvc(namespace, claim) {
        Some(pvc) => {
            let spec = pvc.spec.as_ref();
            // Once bound, the volume's own driver is what attaches, whatever the class says.
            if let Some(volume) = spec
                .and_then(|s| s.volume_name.as_deref())
                .filter(|n| !n.is_empty())
            {
                return match objects.pv(volume) {
                    Some(pv) => Ok(pv_driver(pv)),
                    None => Err(ClaimCause::VolumeNotFound {
                        volume: volume.to_owned(),
                    }),
                };
            }
            // The beta annotation predates the field and still wins when both are set.
            let annotated = pvc
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get("volume.beta.kubernetes.io/storage-class"))
                .map(String::as_str);
            annotated.or_else(|| spec.and_then(|s| s.storage_class_name.as_deref()))
        }
        None => template_class.ok_or(ClaimCause::ClaimNotFound)?,
    };
    let class = match class {
        // "" asks for no class: only a pre-provisioned PV can bind; its driver is unknown.
        Some("") => return Err(ClaimCause::NoClassUnbound),
        Some(name) => objects
            .storage_class(name)
            .ok_or_else(|| ClaimCause::ClassNotFound {
                class: name.to_owned(),
            })?,
        None => objects
            .default_storage_class()
            .ok_or(ClaimCause::NoDefaultClass)?,
    };
    Ok(Some(migrated(&class.provisioner).to_owned()))
}

/// The CSI driver of a PV (a migrated in-tree source counts for its CSI driver).
fn pv_driver(pv: &PersistentVolume) -> Option<String> {
    let spec = pv.spec.as_ref()?;
    if let Some(csi) = spec.csi.as_ref() {
        return Some(csi.driver.clone());
    }
    let plugin = if spec.aws_elastic_block_store.is_some() {
        "kubernetes.io/aws-ebs"
    } else if spec.gce_persistent_disk.is_some() {
        "kubernetes.io/gce-pd"
    } else if spec.azure_disk.is_some() {
        "kubernetes.io/azure-disk"
    } else if spec.cinder.is_some() {
        "kubernetes.io/cinder"
    } else if spec.vsphere_volume.is_some() {
        "kubernetes.io/vsphere-volume"
    } else {
        return None;
    };
    Some(migrated(plugin).to_owned())
}

/// An inline in-tree disk that CSI migration attaches through a CSI driver, with its identity.
fn inline_in_tree(volume: &Volume) -> Option<VolumeRef> {
    let (plugin, identity) = if let Some(v) = volume.aws_elastic_block_store.as_ref() {
        ("kubernetes.io/aws-ebs", v.volume_id.as_str())
    } else if let Some(v) = volume.gce_persistent_disk.as_ref() {
        ("kubernetes.io/gce-pd", v.pd_name.as_str())
    } else if let Some(v) = volume.azure_disk.as_ref() {
        ("kubernetes.io/azure-disk", v.disk_uri.as_str())
    } else if let Some(v) = volume.cinder.as_ref() {
        ("kubernetes.io/cinder", v.volume_id.as_str())
    } else if let Some(v) = volume.vsphere_volume.as_ref() {
        ("kubernetes.io/vsphere-volume", v.volume_path.as_str())
    } else {
        return None;
    };
    Some(VolumeRef::InTree {
        driver: migrated(plugin),
        identity: identity.into(),
    })
}

/// The CSI driver an in-tree plugin migrates to; other names are returned unchanged.
fn migrated(provisioner: &str) -> &str {
    MIGRATED
        .iter()
        .find(|(in_tree, _)| *in_tree == provisioner)
        .map_or(provisioner, |(_, csi)| csi)
}

/// `attachRequired` of the driver's CSIDriver; true without one.
fn attach_required(objects: &ObjectSet, driver: &str) -> bool {
    objects
        .csi_driver(driver)
        .and_then(|d| d.spec.attach_required)
        != Some(false)
}

#[cfg(test)]
mod tests;
