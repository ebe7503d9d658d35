//! [`CompactPod`]: the part of a pod the adapters read, a few hundred bytes instead of the
//! many kilobytes of a `k8s-openapi` [`Pod`] (whose `Volume` alone carries some thirty inline
//! volume-source fields). The watchers keep only these; [`ObjectSet`](super::ObjectSet)
//! stores them behind [`Arc`](std::sync::Arc)s, so a snapshot shares them instead of copying.
//!
//! A compact pod carries its identity, the flags [`gangs`](super::gangs) filters on, whether
//! the scheduler has recorded a verdict on it and which non-default scheduler it names, its
//! gang link and its *raw* demand: everything [`demand`](super::demand) computes from the pod
//! alone (resource totals, node selector, required affinity, tolerations) plus references to
//! the volumes whose driver depends on other objects (claims, generic ephemeral volumes,
//! migrated in-tree disks). Those references are resolved against PVCs, PVs, StorageClasses
//! and CSIDrivers when a snapshot is read, so a claim created after its pod still counts.
//! Problems found while compacting (an unparsable quantity, an unknown operator) are kept and
//! reported by [`gangs`](super::gangs) as before.

use k8s_openapi::api::core::v1::{Pod, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::demand::raw::{RawDemand, raw_demand};
use super::meta::{DEFAULT_NAMESPACE, object_name};
use super::problem::Issue;
use super::{Error, Location};
use crate::model::labels;

/// Identity of a pod: namespace (`default` when unset) and name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct PodKey {
    /// Namespace.
    pub namespace: Box<str>,
    /// Name (empty when unset).
    pub name: Box<str>,
}

impl PodKey {
    /// The key of the object with `meta`.
    pub fn of(meta: &ObjectMeta) -> Self {
        Self {
            namespace: meta
                .namespace
                .as_deref()
                .unwrap_or(DEFAULT_NAMESPACE)
                .into(),
            name: meta.name.as_deref().unwrap_or_default().into(),
        }
    }
}

impl std::fmt::Display for PodKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// The gang-scheduling group a pod names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PodLink {
    /// `spec.schedulingGroup.podGroupName` (1.36+): a PodGroup in the pod's namespace.
    PodGroup(Box<str>),
    /// `spec.workloadRef` (1.35): a pod group inside a Workload in the pod's namespace.
    Workload {
        /// Workload name.
        name: Box<str>,
        /// Entry name in the Workload's `spec.podGroups`.
        pod_group: Box<str>,
        /// `podGroupReplicaKey`, when set and not empty.
        replica_key: Option<Box<str>>,
    },
}

/// `pod.spec.workloadRef` (Kubernetes 1.35, `GenericWorkload` gate): the pod's Workload, the
/// pod group inside it and an optional replica key. Removed in 1.36, so the typed v1.36
/// [`Pod`] drops it; [`CompactPod`] keeps it as the pod's link.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct WorkloadRef {
    /// Workload name (same namespace as the pod).
    pub name: String,
    /// Name of the entry in the Workload's `spec.podGroups`.
    pub pod_group: String,
    /// Replica key; empty when unset.
    #[serde(default)]
    pub pod_group_replica_key: String,
}

/// The annotations of a pod that deferral reads and writes
/// ([`planner::deferrals`](crate::planner::deferrals)): CA's per-pod scale-up delay and
/// gangscaler's marks beside it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeferralMarks {
    /// `cluster-autoscaler.kubernetes.io/pod-scale-up-delay`, as written.
    pub delay: Option<Box<str>>,
    /// `gangscaler.io/deferred`: why gangscaler keeps the pod out of CA's scale-up; set only
    /// by gangscaler.
    pub hold: Option<Box<str>>,
    /// `gangscaler.io/scale-up-delay-was`: the pod's own delay before gangscaler raised it,
    /// restored on release.
    pub was: Option<Box<str>>,
}

impl DeferralMarks {
    fn of(meta: &ObjectMeta) -> Option<Box<Self>> {
        let annotations = meta.annotations.as_ref()?;
        let get = |key: &str| annotations.get(key).map(|v| v.as_str().into());
        let marks = Self {
            delay: get(labels::CA_POD_SCALE_UP_DELAY),
            hold: get(labels::DEFERRED),
            was: get(labels::SCALE_UP_DELAY_WAS),
        };
        (marks != Self::default()).then(|| Box::new(marks))
    }
}

/// What the adapters read of one pod (the module docs say what is kept and why).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompactPod {
    key: PodKey,
    node_name: Option<Box<str>>,
    terminal: bool,
    running: bool,
    disrupted: bool,
    deleting: bool,
    gated: bool,
    verdict: bool,
    scheduler_name: Option<Box<str>>,
    created_unix: Option<i64>,
    priority: Option<i32>,
    link: Option<PodLink>,
    /// CA's scale-up delay on the pod and gangscaler's deferral marks, when any is set.
    deferral: Option<Box<DeferralMarks>>,
    pub(crate) demand: RawDemand,
    /// Problems found while compacting the spec, reported with the pod's demand.
    pub(crate) issues: Box<[Issue]>,
}

impl CompactPod {
    /// Compacts a typed pod (the v1.36 type has no 1.35 `spec.workloadRef`).
    pub fn from_pod(pod: &Pod) -> Self {
        Self::build(&pod.metadata, pod.spec.as_ref(), Status::of(pod), None)
    }

    /// Compacts a pod watched as a `DynamicObject`, keeping its 1.35 `spec.workloadRef`.
    /// Only `metadata`, `spec`, `status.phase` and the `DisruptionTarget` and `PodScheduled`
    /// conditions are read.
    ///
    /// # Errors
    /// [`Error::Decode`] when `spec` or `spec.workloadRef` does not match its schema.
    pub fn from_dynamic(object: &kube::core::DynamicObject) -> Result<Self, Error> {
        let name = object_name(
            object.metadata.namespace.as_deref(),
            object.metadata.name.as_deref(),
        );
        let spec_value = present(object.data.get("spec"));
        let workload_ref = present(spec_value.and_then(|s| s.get("workloadRef")))
            .map(|v| decode_ref::<WorkloadRef>(v, &name, "spec.workloadRef"))
            .transpose()?;
        let spec = spec_value
            .map(|v| decode_ref::<PodSpec>(v, &name, "spec"))
            .transpose()?;
        let mut status = Status {
            phase: object.data.pointer("/status/phase").and_then(Value::as_str),
            ..Status::default()
        };
        let conditions = object
            .data
            .pointer("/status/conditions")
            .and_then(Value::as_array);
        for c in conditions.into_iter().flatten() {
            let field = |key| c.get(key).and_then(Value::as_str).unwrap_or_default();
            status.condition(field("type"), field("status"), field("reason"));
        }
        Ok(Self::build(
            &object.metadata,
            spec.as_ref(),
            status,
            workload_ref.as_ref(),
        ))
    }

    /// A typed pod with the 1.35 link read beside it.
    pub(crate) fn from_pod_and_ref(pod: &Pod, workload_ref: Option<&WorkloadRef>) -> Self {
        Self::build(
            &pod.metadata,
            pod.spec.as_ref(),
            Status::of(pod),
            workload_ref,
        )
    }

    fn build(
        meta: &ObjectMeta,
        spec: Option<&PodSpec>,
        status: Status<'_>,
        workload_ref: Option<&WorkloadRef>,
    ) -> Self {
        let phase = status.phase;
        let key = PodKey::of(meta);
        let (demand, issues) = match spec {
            Some(spec) => raw_demand(spec, &key.name),
            None => (RawDemand::default(), Vec::new()),
        };
        let scheduling_group = spec
            .and_then(|s| s.scheduling_group.as_ref())
            .and_then(|g| g.pod_group_name.as_deref())
            .filter(|n| !n.is_empty());
        let link = match (scheduling_group, workload_ref) {
            (Some(name), _) => Some(PodLink::PodGroup(name.into())),
            (None, Some(r)) => Some(PodLink::Workload {
                name: r.name.as_str().into(),
                pod_group: r.pod_group.as_str().into(),
                replica_key: Some(r.pod_group_replica_key.as_str())
                    .filter(|k| !k.is_empty())
                    .map(Into::into),
            }),
            (None, None) => None,
        };
        Self {
            node_name: spec
                .and_then(|s| s.node_name.as_deref())
                .filter(|n| !n.is_empty())
                .map(Into::into),
            terminal: matches!(phase, Some("Succeeded" | "Failed")),
            running: phase == Some("Running"),
            disrupted: status.disrupted,
            deleting: meta.deletion_timestamp.is_some(),
            gated: spec
                .and_then(|s| s.scheduling_gates.as_ref())
                .is_some_and(|g| !g.is_empty()),
            verdict: status.verdict,
            scheduler_name: spec
                .and_then(|s| s.scheduler_name.as_deref())
                .filter(|n| !n.is_empty() && *n != DEFAULT_SCHEDULER)
                .map(Into::into),
            created_unix: meta.creation_timestamp.as_ref().map(|t| t.0.as_second()),
            priority: spec.and_then(|s| s.priority),
            link,
            deferral: DeferralMarks::of(meta),
            demand,
            issues: issues.into_boxed_slice(),
            key,
        }
    }

    /// Its deferral annotations, when any is set.
    pub fn deferral(&self) -> Option<&DeferralMarks> {
        self.deferral.as_deref()
    }

    /// Namespace and name.
    pub fn key(&self) -> &PodKey {
        &self.key
    }

    /// `metadata.namespace` (`default` when unset).
    pub fn namespace(&self) -> &str {
        &self.key.namespace
    }

    /// `metadata.name` (empty when unset).
    pub fn name(&self) -> &str {
        &self.key.name
    }

    /// `spec.nodeName`, when set and not empty.
    pub fn node_name(&self) -> Option<&str> {
        self.node_name.as_deref()
    }

    /// Phase `Succeeded` or `Failed`.
    pub fn is_terminal(&self) -> bool {
        self.terminal
    }

    /// Phase `Running`.
    pub fn is_running(&self) -> bool {
        self.running
    }

    /// The `DisruptionTarget` condition is True: the pod is being evicted or preempted.
    pub fn is_disrupted(&self) -> bool {
        self.disrupted
    }

    /// `metadata.deletionTimestamp` is set.
    pub fn is_deleting(&self) -> bool {
        self.deleting
    }

    /// Neither terminal nor being deleted.
    pub fn is_live(&self) -> bool {
        !self.terminal && !self.deleting
    }

    /// `spec.schedulingGates` is not empty: the scheduler does not try the pod yet.
    pub fn is_gated(&self) -> bool {
        self.gated
    }

    /// The scheduler has recorded a verdict on the pod: a `PodScheduled` condition `True`, or
    /// `False` with reason `Unschedulable` (what Cluster Autoscaler scales up for) or
    /// `SchedulingGated` (held on purpose). `False` with another reason, such as
    /// `SchedulerError` when a plugin failed, is no verdict: CA ignores such a pod.
    pub fn has_verdict(&self) -> bool {
        self.verdict
    }

    /// `spec.schedulerName`, when set and not `default-scheduler`.
    pub fn scheduler_name(&self) -> Option<&str> {
        self.scheduler_name.as_deref()
    }

    /// `metadata.creationTimestamp`, unix seconds.
    pub fn created_unix(&self) -> Option<i64> {
        self.created_unix
    }

    /// `spec.priority` (resolved by admission from the priority class).
    pub fn priority(&self) -> Option<i32> {
        self.priority
    }

    /// The group the pod names: `spec.schedulingGroup.podGroupName` when set, else the 1.35
    /// `spec.workloadRef`.
    pub fn link(&self) -> Option<&PodLink> {
        self.link.as_ref()
    }
}

/// The pod condition the scheduler and the eviction API set on a pod they are about to remove.
const DISRUPTION_TARGET: &str = "DisruptionTarget";
/// The pod condition the scheduler sets when it has tried the pod (False) or bound it (True).
const POD_SCHEDULED: &str = "PodScheduled";
/// The `spec.schedulerName` the API server defaults to.
const DEFAULT_SCHEDULER: &str = "default-scheduler";

/// The parts of `status` a compact pod keeps.
#[derive(Debug, Clone, Copy, Default)]
struct Status<'a> {
    phase: Option<&'a str>,
    disrupted: bool,
    verdict: bool,
}

impl<'a> Status<'a> {
    fn of(pod: &'a Pod) -> Self {
        let status = pod.status.as_ref();
        let mut out = Self {
            phase: status.and_then(|s| s.phase.as_deref()),
            ..Self::default()
        };
        for c in status
            .and_then(|s| s.conditions.as_deref())
            .unwrap_or_default()
        {
            out.condition(&c.type_, &c.status, c.reason.as_deref().unwrap_or_default());
        }
        out
    }

    /// Takes in one condition of `type_` with status `value` and `reason`.
    fn condition(&mut self, type_: &str, value: &str, reason: &str) {
        match type_ {
            DISRUPTION_TARGET => self.disrupted |= value == "True",
            POD_SCHEDULED => {
                self.verdict |= value == "True"
                    || (value == "False" && matches!(reason, "Unschedulable" | "SchedulingGated"));
            }
            _ => {}
        }
    }
}

/// `value` unless it is absent or null.
fn present(value: Option<&Value>) -> Option<&Value> {
    value.filter(|v| !v.is_null())
}

/// Decodes `value`, found at dotted `prefix` in pod `name`, reporting the full field path.
fn decode_ref<T: DeserializeOwned>(value: &Value, name: &str, prefix: &str) -> Result<T, Error> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let inner = e.path().to_string();
        let path = if inner == "." {
            prefix.to_owned()
        } else {
            format!("{prefix}.{inner}")
        };
        Error::Decode {
            at: Location::default(),
            kind: "Pod".to_owned(),
            name: name.to_owned(),
            path,
            message: e.into_inner().to_string(),
        }
    })
}

#[cfg(test)]
mod tests;
