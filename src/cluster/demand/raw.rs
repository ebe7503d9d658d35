//! The part of a pod's demand that depends on the pod alone, read when it is compacted:
//! resources, node selector, required affinity, tolerations, and the references of the
//! volumes that may count toward an attach limit (see the parent module's docs).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Container, NodeSelectorRequirement, PodSpec, ResourceRequirements, Volume,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as K8sQuantity;

use crate::cluster::problem::Issue;
use crate::model::quantity::Quantity;
use crate::model::{SelectorOperator, SelectorRequirement, Toleration};

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

/// Reads everything [`demand`](super::demand()) needs from `spec` alone; `pod_name` names generated claims.
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

pub(super) fn affinity_terms(
    spec: &PodSpec,
    issues: &mut Vec<Issue>,
) -> Box<[Box<[SelectorRequirement]>]> {
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
pub(super) fn toleration(t: &k8s_openapi::api::core::v1::Toleration) -> Option<Toleration> {
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
pub(super) fn migrated(provisioner: &str) -> &str {
    MIGRATED
        .iter()
        .find(|(in_tree, _)| *in_tree == provisioner)
        .map_or(provisioner, |(_, csi)| csi)
}
