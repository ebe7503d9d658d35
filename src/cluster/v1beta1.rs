//! Kubernetes 1.37 and 1.38: `scheduling.k8s.io/v1beta1` (`Workload`, `PodGroup`, and from
//! 1.38 `CompositePodGroup`) and `scheduling.k8s.io/v1alpha3` (the three kinds in 1.37).
//! Field names follow `k8s.io/api@v0.37.2/scheduling/{v1beta1,v1alpha3}/types.go` and
//! `k8s.io/api@v0.38.0-beta.0/scheduling/v1beta1/types.go`.
//!
//! PodGroup differences from v1alpha2 that matter here: the scheduled condition is
//! `PodGroupInitiallyScheduled` and is terminal (never returns to False), `gang.minCount` is
//! mutable (we read the current value), and `spec.parentCompositePodGroupName` makes the
//! PodGroup a child of a CompositePodGroup. `spec.workloadRef`, `disruptionMode`,
//! `preemptionPolicy` and `resourceClaims` are ignored.
//!
//! A CompositePodGroup with `spec.schedulingPolicy.gang.minGroupCount` is read as a
//! [`CompositeDef`]: its `schedulingConstraints.topology`, `priority`,
//! `parentCompositePodGroupName` and condition `CompositePodGroupInitiallyScheduled`.

use serde::Deserialize;

use super::adapter::{
    Adapter, CompositeDef, Reading, condition, created, decode_field, non_empty, require_name,
};
use super::objects::GangObject;
use super::problem::Issue;
use super::v1alpha2::{Constraints, Status, read_pod_group};

/// Reads `scheduling.k8s.io/v1beta1`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct V1Beta1;

/// Reads `scheduling.k8s.io/v1alpha3`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct V1Alpha3;

/// v1alpha3/v1beta1 `PodGroupInitiallyScheduled`: True once the scheduler admitted
/// `minCount` pods, and True for good after that.
pub(crate) const POD_GROUP_INITIALLY_SCHEDULED: &str = "PodGroupInitiallyScheduled";

/// `CompositePodGroupInitiallyScheduled`: True once the scheduler admitted the composite.
pub(crate) const COMPOSITE_INITIALLY_SCHEDULED: &str = "CompositePodGroupInitiallyScheduled";

impl Adapter for V1Beta1 {
    fn api_version(&self) -> &'static str {
        "scheduling.k8s.io/v1beta1"
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
    scheduling_constraints: Option<Constraints>,
    priority: Option<i32>,
    parent_composite_pod_group_name: Option<String>,
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
/// which name their parent), so it defines no group pods join. With a gang policy it is a
/// [`CompositeDef`]; a basic one (its children scheduled independently) reads as nothing.
fn read_composite(object: &GangObject) -> Vec<Reading> {
    if let Some(unnamed) = require_name(object) {
        return vec![unnamed];
    }
    let mut readings = Vec::new();
    let created_unix = created(object, &mut readings);
    let spec = match decode_field::<CompositeSpec>(object.value(), "spec") {
        Ok(spec) => spec,
        Err(issue) => {
            readings.push(Reading::Problem(issue));
            return readings;
        }
    };
    let Some(gang) = spec.scheduling_policy.and_then(|p| p.gang) else {
        return readings;
    };
    let path = "spec.schedulingPolicy.gang.minGroupCount";
    let min_group_count = match gang.min_group_count {
        Some(n) if n > 0 => u32::try_from(n).ok(),
        _ => None,
    };
    let Some(min_group_count) = min_group_count else {
        readings.push(Reading::Problem(Issue::InvalidMinCount {
            path: path.into(),
            value: gang.min_group_count,
        }));
        return readings;
    };
    let status: Status = decode_field(object.value(), "status").unwrap_or_else(|issue| {
        readings.push(Reading::Problem(issue));
        Status::default()
    });
    readings.push(Reading::Composite(CompositeDef {
        namespace: object.namespace().to_owned(),
        name: object.name().to_owned(),
        min_group_count,
        topology_key: spec
            .scheduling_constraints
            .unwrap_or_default()
            .topology_key(),
        priority: spec.priority,
        scheduled: condition(&status.conditions, COMPOSITE_INITIALLY_SCHEDULED),
        created_unix,
        parent: non_empty(spec.parent_composite_pod_group_name),
    }));
    readings
}
