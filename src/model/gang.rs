//! The one internal model of a gang (a group of pods useless until `min_count` of them run
//! together), whatever scheduling API version it came from, and of what each member pod needs
//! from a node. Built by `cluster` adapters; consumed by the pure `planner`.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::Arc;

use serde::Serialize;

use super::taint::TaintEffect;

/// Where a gang comes from.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GangRef {
    /// Namespace.
    pub namespace: String,
    /// Name: the PodGroup's name, or `<workload>/<podGroup>[/<replicaKey>]` for a Workload's
    /// pod group (v1alpha1).
    pub name: String,
    /// API version of the object, e.g. `scheduling.k8s.io/v1alpha2`.
    pub api_version: String,
    /// Kind of the object that carries the policy: `PodGroup` or `Workload`.
    pub kind: String,
}

impl GangRef {
    /// [`GangRef::name`] of the pod group `pod_group` of Workload `workload` (v1alpha1), for
    /// the replica `replica` when its pods carry a replica key: `<workload>/<podGroup>` and
    /// `/<replicaKey>`. The cluster view and the webhook name a gang by this one rule.
    pub fn workload_gang_name(workload: &str, pod_group: &str, replica: Option<&str>) -> String {
        match replica {
            Some(replica) => format!("{workload}/{pod_group}/{replica}"),
            None => format!("{workload}/{pod_group}"),
        }
    }
}

impl fmt::Display for GangRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// Operator of a node-selector requirement.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum SelectorOperator {
    /// Label value is one of the values.
    In,
    /// Label value is none of the values (or the label is absent).
    NotIn,
    /// Label is present.
    Exists,
    /// Label is absent.
    DoesNotExist,
    /// Label value, as an integer, is greater than the single value.
    Gt,
    /// Label value, as an integer, is less than the single value.
    Lt,
}

/// One requirement of a required node-affinity term.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct SelectorRequirement {
    /// Label key.
    pub key: String,
    /// Operator.
    pub operator: SelectorOperator,
    /// Values (meaning depends on the operator).
    pub values: Vec<String>,
}

impl SelectorRequirement {
    /// Whether a node with `labels` satisfies this requirement.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        let value = labels.get(&self.key);
        let int = |s: &str| s.parse::<i64>().ok();
        match self.operator {
            SelectorOperator::In => value.is_some_and(|v| self.values.contains(v)),
            SelectorOperator::NotIn => value.is_none_or(|v| !self.values.contains(v)),
            SelectorOperator::Exists => value.is_some(),
            SelectorOperator::DoesNotExist => value.is_none(),
            SelectorOperator::Gt | SelectorOperator::Lt => {
                let (Some(v), Some(bound)) = (
                    value.and_then(|v| int(v)),
                    self.values.first().and_then(|b| int(b)),
                ) else {
                    return false;
                };
                if self.operator == SelectorOperator::Gt {
                    v > bound
                } else {
                    v < bound
                }
            }
        }
    }
}

/// Toleration operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum TolerationOperator {
    /// Key and value must match.
    Equal,
    /// Key must match (an empty key matches every taint).
    Exists,
}

/// A pod toleration.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct Toleration {
    /// Taint key; empty with `Exists` tolerates everything.
    pub key: String,
    /// Operator.
    pub operator: TolerationOperator,
    /// Value for `Equal`.
    pub value: String,
    /// Effect; `None` tolerates every effect.
    pub effect: Option<TaintEffect>,
}

impl Toleration {
    /// The toleration a pod spec's fields describe (`operator` absent or empty is `Equal`,
    /// `effect` absent or empty is every effect); `None` for an effect we do not know (such
    /// a toleration tolerates none of the effects we handle).
    pub fn from_parts(
        key: Option<&str>,
        operator: Option<&str>,
        value: Option<&str>,
        effect: Option<&str>,
    ) -> Option<Self> {
        let effect = match effect {
            None | Some("") => None,
            Some(e) => Some(TaintEffect::parse(e)?),
        };
        let operator = match operator {
            Some("Exists") => TolerationOperator::Exists,
            _ => TolerationOperator::Equal,
        };
        Some(Self {
            key: key.unwrap_or_default().to_owned(),
            operator,
            value: value.unwrap_or_default().to_owned(),
            effect,
        })
    }

    /// Whether this toleration tolerates a taint.
    pub fn tolerates(&self, key: &str, value: &str, effect: TaintEffect) -> bool {
        if self.effect.is_some_and(|e| e != effect) {
            return false;
        }
        match self.operator {
            TolerationOperator::Exists => self.key.is_empty() || self.key == key,
            TolerationOperator::Equal => self.key == key && self.value == value,
        }
    }
}

/// What one pod needs from a node. Members with identical demand share one value (see
/// [`Member::demand`]), so it is hashable.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodDemand {
    /// CPU request in millicores.
    pub cpu_milli: u64,
    /// Memory request in bytes.
    pub memory_bytes: u64,
    /// Ephemeral-storage request in bytes.
    pub ephemeral_storage_bytes: u64,
    /// Extended resources (GPUs, RDMA devices, RDMA bandwidth, ...) by name, in whole units.
    pub extended: BTreeMap<String, u64>,
    /// Attachable volumes per CSI driver (PVCs, generic ephemeral volumes).
    pub volumes: BTreeMap<String, u32>,
    /// `spec.nodeSelector`.
    pub node_selector: BTreeMap<String, String>,
    /// Required node-affinity terms: the node must match at least one term (all of whose
    /// requirements hold). Empty means no requirement.
    pub affinity_terms: Vec<Vec<SelectorRequirement>>,
    /// Tolerations.
    pub tolerations: Vec<Toleration>,
    /// Claims (PVC names) whose CSI driver could not be resolved: a missing claim, bound
    /// volume or StorageClass, or no class at all. The scheduler cannot place the pod until
    /// they resolve, so the planner places it on no node group rather than count its volumes
    /// toward no driver.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unresolved_claims: Vec<String>,
}

/// A member pod of a gang.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Member {
    /// Pod name.
    pub pod: String,
    /// Node the pod is bound to, if any.
    pub node: Option<String>,
    /// What it needs; shared between members whose demand is identical (the members of a
    /// gang usually are), which keeps 100,000 members to a few distinct values.
    #[serde(serialize_with = "shared")]
    pub demand: Arc<PodDemand>,
    /// The scheduler has recorded a verdict on the pod: a `PodScheduled` condition, False
    /// (any reason) or True. Cluster Autoscaler only scales up for pods marked
    /// `PodScheduled=False` with reason `Unschedulable`, so it never sees a pod without one.
    pub verdict: bool,
    /// `spec.schedulerName`, when set and not `default-scheduler`.
    pub scheduler_name: Option<String>,
}

/// Serializes a shared value as the value itself.
fn shared<T: Serialize, S: serde::Serializer>(value: &Arc<T>, s: S) -> Result<S::Ok, S::Error> {
    T::serialize(value, s)
}

/// A gang in the internal model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Gang {
    /// Identity.
    pub id: GangRef,
    /// Members that must run together.
    pub min_count: u32,
    /// Pods that belong to the gang (bound or not).
    pub members: Vec<Member>,
    /// Scheduling priority (higher first).
    pub priority: i32,
    /// Creation time, unix seconds.
    pub created_unix: i64,
    /// All members must share one value of this node label, when set.
    pub topology_key: Option<String>,
    /// The scheduler reports the gang scheduled.
    pub scheduled: bool,
    /// The CompositePodGroup this gang is a child of (`spec.parentCompositePodGroupName`, in
    /// the gang's namespace), when it names one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub composite: Option<String>,
}

impl Gang {
    /// Whether the gang has formed: the scheduler reports it scheduled, or at least
    /// `min_count` members are bound.
    pub fn is_formed(&self) -> bool {
        self.scheduled || self.bound_count() >= self.min_count
    }

    /// Members not bound to a node yet.
    pub fn unbound(&self) -> impl Iterator<Item = &Member> {
        self.members.iter().filter(|m| m.node.is_none())
    }

    /// Members bound to a node.
    pub fn bound_count(&self) -> u32 {
        u32::try_from(self.members.iter().filter(|m| m.node.is_some()).count()).unwrap_or(u32::MAX)
    }

    /// Unbound members the scheduler has recorded no verdict on ([`Member::verdict`]). The
    /// members of a gang built by `cluster` are live pods (not terminal, not being deleted).
    pub fn no_verdict_count(&self) -> u32 {
        u32::try_from(self.unbound().filter(|m| !m.verdict).count()).unwrap_or(u32::MAX)
    }

    /// The distinct non-default scheduler names of the unbound members without a verdict,
    /// sorted.
    pub fn no_verdict_schedulers(&self) -> BTreeSet<&str> {
        self.unbound()
            .filter(|m| !m.verdict)
            .filter_map(|m| m.scheduler_name.as_deref())
            .collect()
    }

    /// Whether more members must be placed for the gang to reach `min_count`.
    pub fn is_pending(&self) -> bool {
        !self.is_formed()
    }

    /// The order in which gangs are admitted: priority (higher first), then age (older
    /// first), then id.
    pub fn admission_order(&self, other: &Self) -> std::cmp::Ordering {
        other
            .priority
            .cmp(&self.priority)
            .then_with(|| self.created_unix.cmp(&other.created_unix))
            .then_with(|| self.id.cmp(&other.id))
    }
}

/// A CompositePodGroup with a gang policy: a group of child gangs (PodGroups naming it as
/// their parent) that is useless until at least `min_group_count` children have each formed.
/// Admission places it all or nothing, across node groups.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Composite {
    /// Identity (kind `CompositePodGroup`).
    pub id: GangRef,
    /// `spec.schedulingPolicy.gang.minGroupCount`: children that must each form.
    pub min_group_count: u32,
    /// The child gangs, sorted.
    pub children: Vec<GangRef>,
    /// Scheduling priority (`spec.priority`, else the highest of its children's).
    pub priority: i32,
    /// Creation time, unix seconds.
    pub created_unix: i64,
    /// Every child must be placed in one domain of this node label, when set
    /// (`spec.schedulingConstraints.topology[0].key`).
    pub topology_key: Option<String>,
    /// The scheduler reports the composite scheduled (`CompositePodGroupInitiallyScheduled`).
    pub scheduled: bool,
}

impl Composite {
    /// How many of its children have formed, looked up in `gangs` (sorted by id).
    pub fn formed_children(&self, gangs: &[Arc<Gang>]) -> u32 {
        let formed = self
            .children
            .iter()
            .filter(|c| {
                gangs
                    .binary_search_by(|g| g.id.cmp(c))
                    .is_ok_and(|i| gangs[i].is_formed())
            })
            .count();
        u32::try_from(formed).unwrap_or(u32::MAX)
    }

    /// Whether the composite has formed: reported scheduled, or `min_group_count` children
    /// formed.
    pub fn is_formed(&self, gangs: &[Arc<Gang>]) -> bool {
        self.scheduled || self.formed_children(gangs) >= self.min_group_count
    }
}
