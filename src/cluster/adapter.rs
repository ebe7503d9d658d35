//! The [`Adapter`] trait, the version-free [`Reading`]s an adapter reads a gang object into,
//! and the decoding helpers the adapters share. The adapters, one per API version, and their
//! order of preference are in [`adapters`](super::adapters).

use serde::Deserialize;
use serde::de::{DeserializeOwned, IgnoredAny};
use serde_json::Value;

use super::meta::join_path;
use super::objects::GangObject;
use super::problem::Issue;

/// Reads the gang objects of one API version.
pub trait Adapter: Sync {
    /// The `apiVersion` read, e.g. `scheduling.k8s.io/v1alpha2`.
    fn api_version(&self) -> &'static str;

    /// Reads one object of this version (any kind of the group). An object may define
    /// several groups (a v1alpha1 Workload), none (a v1alpha2 Workload, which is only a
    /// template), or carry problems alongside its groups.
    fn read(&self, object: &GangObject) -> Vec<Reading>;
}

/// What pods name to join a group.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum GroupKey {
    /// A standalone PodGroup (1.36+): `pod.spec.schedulingGroup.podGroupName`.
    PodGroup {
        /// Namespace.
        namespace: String,
        /// PodGroup name.
        name: String,
    },
    /// A pod group inside a Workload (1.35): `pod.spec.workloadRef.{name, podGroup}`. Pods
    /// with different `podGroupReplicaKey`s form separate gangs under one key.
    WorkloadPodGroup {
        /// Namespace.
        namespace: String,
        /// Workload name.
        workload: String,
        /// Entry name in `spec.podGroups`.
        pod_group: String,
    },
}

/// A group's scheduling policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SchedulingPolicy {
    /// All-or-nothing: at least `min_count` pods must be placed together.
    Gang {
        /// Minimum number of pods, positive.
        min_count: u32,
    },
    /// Pod-by-pod scheduling: the pods are not a gang.
    Basic,
}

/// The scheduler's "group scheduled" condition as read from the object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScheduledCondition {
    /// `status == "True"`.
    pub status: bool,
    /// `lastTransitionTime`, unix seconds.
    pub last_transition_unix: Option<i64>,
}

/// A group pods can name, read from one object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupDef {
    /// What pods name.
    pub key: GroupKey,
    /// Scheduling policy.
    pub policy: SchedulingPolicy,
    /// Node label all members must share a value of.
    pub topology_key: Option<String>,
    /// The object's own priority, when it has one.
    pub priority: Option<i32>,
    /// The scheduled condition, when the version has one and it is present.
    pub scheduled: Option<ScheduledCondition>,
    /// `metadata.creationTimestamp`, unix seconds.
    pub created_unix: Option<i64>,
    /// `spec.parentCompositePodGroupName` (1.37+), when set.
    pub parent: Option<String>,
}

/// A `CompositePodGroup` with a gang policy (1.37 `v1alpha3`, 1.38 `v1beta1`): PodGroups
/// naming it as their parent are admitted together.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompositeDef {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// `spec.schedulingPolicy.gang.minGroupCount`, positive.
    pub min_group_count: u32,
    /// `spec.schedulingConstraints.topology[0].key`.
    pub topology_key: Option<String>,
    /// `spec.priority`.
    pub priority: Option<i32>,
    /// `CompositePodGroupInitiallyScheduled`.
    pub scheduled: Option<ScheduledCondition>,
    /// `metadata.creationTimestamp`, unix seconds.
    pub created_unix: Option<i64>,
    /// `spec.parentCompositePodGroupName`: nested in another composite.
    pub parent: Option<String>,
}

/// What an adapter read from one object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reading {
    /// A usable group.
    Group(GroupDef),
    /// A group pods can name whose policy cannot be read: its pods are held out.
    Broken {
        /// What pods name.
        key: GroupKey,
        /// Why it cannot be read.
        issue: Issue,
    },
    /// A problem with the object that names no group.
    Problem(Issue),
    /// A composite of groups with a gang policy; the join of pods to groups ignores it, the
    /// composite pass (`src/cluster/composites.rs`) reads it.
    Composite(CompositeDef),
}

/// `metadata` fields adapters use.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Meta {
    pub creation_timestamp: Option<String>,
}

/// A `metav1.Condition`, as far as we read it.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Condition {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: String,
    pub last_transition_time: Option<String>,
}

/// `schedulingPolicy` / `policy`: `basic: {}` or `gang: {minCount: N}`.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct PolicySpec {
    pub basic: Option<IgnoredAny>,
    pub gang: Option<GangSpec>,
}

/// `gang: {minCount: N}`.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct GangSpec {
    pub min_count: Option<i64>,
}

impl PolicySpec {
    /// The policy, or why it is invalid; `path` is where the policy sits.
    pub fn policy(&self, path: &str) -> Result<SchedulingPolicy, Issue> {
        match (&self.basic, &self.gang) {
            (Some(_), None) => Ok(SchedulingPolicy::Basic),
            (None, Some(gang)) => {
                let path = format!("{path}.gang.minCount");
                match gang.min_count {
                    Some(n) if n > 0 => u32::try_from(n)
                        .map(|min_count| SchedulingPolicy::Gang { min_count })
                        .map_err(|_| Issue::InvalidMinCount {
                            path,
                            value: Some(n),
                        }),
                    value => Err(Issue::InvalidMinCount { path, value }),
                }
            }
            _ => Err(Issue::InvalidPolicy {
                path: path.to_owned(),
            }),
        }
    }
}

/// Decodes `value` (found at dotted `prefix`; empty for the object root), reporting a wrong
/// type as [`Issue::Malformed`] with the full field path.
pub(crate) fn decode<T: DeserializeOwned>(value: &Value, prefix: &str) -> Result<T, Issue> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = join_path(prefix, &e.path().to_string());
        Issue::Malformed {
            path,
            detail: e.into_inner().to_string(),
        }
    })
}

/// Decodes the optional field `key` of `object` (absent or null gives the default).
pub(crate) fn decode_field<T: DeserializeOwned + Default>(
    object: &Value,
    key: &str,
) -> Result<T, Issue> {
    match object.get(key) {
        None | Some(Value::Null) => Ok(T::default()),
        Some(v) => decode(v, key),
    }
}

/// An RFC 3339 timestamp in unix seconds.
pub(crate) fn unix_seconds(timestamp: &str) -> Option<i64> {
    timestamp
        .parse::<k8s_openapi::jiff::Timestamp>()
        .ok()
        .map(k8s_openapi::jiff::Timestamp::as_second)
}

/// `metadata.creationTimestamp` in unix seconds, plus a problem when it is unreadable.
pub(crate) fn created(object: &GangObject, readings: &mut Vec<Reading>) -> Option<i64> {
    let meta: Meta = match decode_field(object.value(), "metadata") {
        Ok(m) => m,
        Err(issue) => {
            readings.push(Reading::Problem(issue));
            return None;
        }
    };
    let raw = meta.creation_timestamp?;
    let parsed = unix_seconds(&raw);
    if parsed.is_none() {
        readings.push(Reading::Problem(Issue::Malformed {
            path: "metadata.creationTimestamp".into(),
            detail: format!("not an RFC 3339 timestamp: {raw:?}"),
        }));
    }
    parsed
}

/// The condition of type `type_` among `conditions`.
pub(crate) fn condition(conditions: &[Condition], type_: &str) -> Option<ScheduledCondition> {
    conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| ScheduledCondition {
            status: c.status == "True",
            last_transition_unix: c.last_transition_time.as_deref().and_then(unix_seconds),
        })
}

/// `value` unless it is empty.
pub(crate) fn non_empty(value: Option<String>) -> Option<String> {
    value.filter(|v| !v.is_empty())
}

/// The "object has no name" problem, when it has none.
pub(crate) fn require_name(object: &GangObject) -> Option<Reading> {
    object.name().is_empty().then(|| {
        Reading::Problem(Issue::Malformed {
            path: "metadata.name".into(),
            detail: "missing".into(),
        })
    })
}
