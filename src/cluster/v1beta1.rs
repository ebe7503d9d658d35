//! Kubernetes 1.37: `scheduling.k8s.io/v1beta1` (`Workload`, `PodGroup`) and
//! `scheduling.k8s.io/v1alpha3` (the same two kinds plus `CompositePodGroup`). Field names
//! follow `k8s.io/api@v0.37.2/scheduling/{v1beta1,v1alpha3}/types.go`.
//!
//! PodGroup differences from v1alpha2 that matter here: the scheduled condition is
//! `PodGroupInitiallyScheduled` and is terminal (never returns to False), and
//! `gang.minCount` is mutable (we read the current value). `spec.workloadRef`,
//! `disruptionMode`, `preemptionPolicy`, `resourceClaims` and
//! `parentCompositePodGroupName` are ignored.

use serde::Deserialize;

use super::adapters::{Adapter, Reading, decode_field, require_name};
use super::objects::GangObject;
use super::problem::Issue;
use super::v1alpha2::read_pod_group;

/// Reads `scheduling.k8s.io/v1beta1`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct V1Beta1;

/// Reads `scheduling.k8s.io/v1alpha3`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct V1Alpha3;

/// v1alpha3/v1beta1 `PodGroupInitiallyScheduled`: True once the scheduler admitted
/// `minCount` pods, and True for good after that.
pub(crate) const POD_GROUP_INITIALLY_SCHEDULED: &str = "PodGroupInitiallyScheduled";

impl Adapter for V1Beta1 {
    fn api_version(&self) -> &'static str {
        "scheduling.k8s.io/v1beta1"
    }

    fn read(&self, object: &GangObject) -> Vec<Reading> {
        match object.kind() {
            "PodGroup" => read_pod_group(object, POD_GROUP_INITIALLY_SCHEDULED),
            "Workload" => Vec::new(),
            _ => vec![Reading::Problem(Issue::UnsupportedKind)],
        }
    }
}

impl Adapter for V1Alpha3 {
    fn api_version(&self) -> &'static str {
        "scheduling.k8s.io/v1alpha3"
    }

    fn read(&self, object: &GangObject) -> Vec<Reading> {
        match object.kind() {
            "PodGroup" => read_pod_group(object, POD_GROUP_INITIALLY_SCHEDULED),
            "Workload" => Vec::new(),
            "CompositePodGroup" => read_composite(object),
            _ => vec![Reading::Problem(Issue::UnsupportedKind)],
        }
    }
}

/// `CompositePodGroup.spec` fields we read.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct CompositeSpec {
    scheduling_policy: Option<CompositePolicy>,
}

/// `spec.schedulingPolicy`: `basic: {}` or `gang: {minGroupCount: N}`.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct CompositePolicy {
    gang: Option<CompositeGang>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct CompositeGang {
    min_group_count: Option<i64>,
}

/// A CompositePodGroup is a group of groups: pods never name it (they name leaf PodGroups,
/// which name their parent), so it defines no group. A gang policy over child groups cannot
/// be expressed in the model and is reported.
fn read_composite(object: &GangObject) -> Vec<Reading> {
    if let Some(unnamed) = require_name(object) {
        return vec![unnamed];
    }
    match decode_field::<CompositeSpec>(object.value(), "spec") {
        Err(issue) => vec![Reading::Problem(issue)],
        Ok(spec) => spec
            .scheduling_policy
            .and_then(|p| p.gang)
            .map(|gang| {
                Reading::Problem(Issue::CompositeGangIgnored {
                    min_group_count: gang.min_group_count.unwrap_or(0),
                })
            })
            .into_iter()
            .collect(),
    }
}
