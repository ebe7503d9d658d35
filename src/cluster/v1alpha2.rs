//! `scheduling.k8s.io/v1alpha2` (Kubernetes 1.36): standalone `PodGroup`s that pods join by
//! `spec.schedulingGroup.podGroupName`; `Workload` is only a template (no gang of its own).
//! Field names follow `k8s.io/api@v0.36.2/scheduling/v1alpha2/types.go`.
//!
//! The PodGroup reader here is shared with v1alpha3 and v1beta1, whose PodGroups differ only
//! in fields we do not read (`workloadRef` for `podGroupTemplateRef`), in
//! `parentCompositePodGroupName` (absent in v1alpha2) and in the name of the scheduled
//! condition.

use serde::Deserialize;
use serde_json::Value;

use super::adapter::{
    Adapter, Condition, GroupDef, GroupKey, PolicySpec, Reading, condition, created, decode,
    decode_field, non_empty, require_name,
};
use super::objects::GangObject;
use super::problem::Issue;

/// Reads `scheduling.k8s.io/v1alpha2`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct V1Alpha2;

/// v1alpha2 `PodGroupScheduled`: True once the scheduler admitted `minCount` pods; it
/// reflects only the initial decision.
pub(crate) const POD_GROUP_SCHEDULED: &str = "PodGroupScheduled";

impl Adapter for V1Alpha2 {
    fn api_version(&self) -> &'static str {
        "scheduling.k8s.io/v1alpha2"
    }

    fn read(&self, object: &GangObject) -> Vec<Reading> {
        match object.kind() {
            "PodGroup" => read_pod_group(object, POD_GROUP_SCHEDULED),
            // A policy template: pods never name it, PodGroups carry copies of its fields.
            "Workload" => Vec::new(),
            _ => vec![Reading::Problem(Issue::UnsupportedKind)],
        }
    }
}

/// `PodGroup.spec` fields we read (v1alpha2, v1alpha3, v1beta1).
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Spec {
    scheduling_policy: Option<PolicySpec>,
    scheduling_constraints: Option<Constraints>,
    priority: Option<i32>,
    parent_composite_pod_group_name: Option<String>,
}

/// `schedulingConstraints`.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Constraints {
    #[serde(default)]
    topology: Vec<TopologyConstraint>,
}

/// `schedulingConstraints.topology[]`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct TopologyConstraint {
    key: Option<String>,
}

impl Constraints {
    /// The first topology constraint's key, when set and not empty.
    pub(crate) fn topology_key(self) -> Option<String> {
        self.topology
            .into_iter()
            .next()
            .and_then(|t| t.key)
            .filter(|k| !k.is_empty())
    }
}

/// `PodGroup.status` fields we read (also `CompositePodGroup.status`).
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Status {
    #[serde(default)]
    pub(crate) conditions: Vec<Condition>,
}

/// Reads a PodGroup whose scheduled condition is `condition_type`.
pub(crate) fn read_pod_group(object: &GangObject, condition_type: &str) -> Vec<Reading> {
    if let Some(unnamed) = require_name(object) {
        return vec![unnamed];
    }
    let mut readings = Vec::new();
    let key = GroupKey::PodGroup {
        namespace: object.namespace().to_owned(),
        name: object.name().to_owned(),
    };
    let created_unix = created(object, &mut readings);
    let spec: Spec = match object.value().get("spec") {
        None | Some(Value::Null) => {
            readings.push(Reading::Broken {
                key,
                issue: Issue::Malformed {
                    path: "spec".into(),
                    detail: "missing".into(),
                },
            });
            return readings;
        }
        Some(spec) => match decode(spec, "spec") {
            Ok(s) => s,
            Err(issue) => {
                readings.push(Reading::Broken { key, issue });
                return readings;
            }
        },
    };
    let policy = spec
        .scheduling_policy
        .unwrap_or_default()
        .policy("spec.schedulingPolicy");
    let policy = match policy {
        Ok(p) => p,
        Err(issue) => {
            readings.push(Reading::Broken { key, issue });
            return readings;
        }
    };
    // A broken status only loses the condition: the policy is still good.
    let status: Status = decode_field(object.value(), "status").unwrap_or_else(|issue| {
        readings.push(Reading::Problem(issue));
        Status::default()
    });
    let topology_key = spec
        .scheduling_constraints
        .unwrap_or_default()
        .topology_key();
    readings.push(Reading::Group(GroupDef {
        key,
        policy,
        topology_key,
        priority: spec.priority,
        scheduled: condition(&status.conditions, condition_type),
        created_unix,
        parent: non_empty(spec.parent_composite_pod_group_name),
    }));
    readings
}
