//! `scheduling.k8s.io/v1alpha1` (Kubernetes 1.35): a `Workload` lists up to 8
//! `spec.podGroups[]`, each `{name, policy: {basic: {}} | {gang: {minCount}}}`; pods join one
//! by `spec.workloadRef.{name, podGroup, podGroupReplicaKey}`. There is no status, priority or
//! topology. Field names follow `k8s.io/api@v0.35.4/scheduling/v1alpha1/types.go`.

use serde::Deserialize;
use serde_json::Value;

use super::adapter::{
    Adapter, GroupDef, GroupKey, PolicySpec, Reading, created, decode, require_name,
};
use super::objects::GangObject;
use super::problem::Issue;

/// Reads `scheduling.k8s.io/v1alpha1`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct V1Alpha1;

impl Adapter for V1Alpha1 {
    fn api_version(&self) -> &'static str {
        "scheduling.k8s.io/v1alpha1"
    }

    fn read(&self, object: &GangObject) -> Vec<Reading> {
        match object.kind() {
            "Workload" => read_workload(object),
            _ => vec![Reading::Problem(Issue::UnsupportedKind)],
        }
    }
}

/// `Workload.spec`.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Spec {
    /// Decoded entry by entry, so one bad entry does not hide the others.
    #[serde(default)]
    pod_groups: Vec<Value>,
}

/// `spec.podGroups[]`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Entry {
    name: Option<String>,
    policy: Option<PolicySpec>,
}

fn read_workload(object: &GangObject) -> Vec<Reading> {
    if let Some(unnamed) = require_name(object) {
        return vec![unnamed];
    }
    let mut readings = Vec::new();
    let created_unix = created(object, &mut readings);
    let spec: Spec = match object.value().get("spec") {
        None | Some(Value::Null) => {
            readings.push(Reading::Problem(Issue::Malformed {
                path: "spec".into(),
                detail: "missing".into(),
            }));
            return readings;
        }
        Some(spec) => match decode(spec, "spec") {
            Ok(s) => s,
            Err(issue) => {
                readings.push(Reading::Problem(issue));
                return readings;
            }
        },
    };
    for (index, raw) in spec.pod_groups.iter().enumerate() {
        let path = format!("spec.podGroups[{index}]");
        // The name is what pods reference: with it, a broken entry still holds its pods out.
        let key = raw
            .get("name")
            .and_then(Value::as_str)
            .map(|name| GroupKey::WorkloadPodGroup {
                namespace: object.namespace().to_owned(),
                workload: object.name().to_owned(),
                pod_group: name.to_owned(),
            });
        let entry = decode::<Entry>(raw, &path).and_then(|entry| {
            let policy = entry
                .policy
                .ok_or_else(|| Issue::InvalidPolicy {
                    path: format!("{path}.policy"),
                })?
                .policy(&format!("{path}.policy"))?;
            Ok((entry.name, policy))
        });
        readings.push(match (key, entry) {
            (Some(key), Ok((_, policy))) => Reading::Group(GroupDef {
                key,
                policy,
                topology_key: None,
                priority: None,
                scheduled: None,
                created_unix,
                parent: None,
            }),
            (Some(key), Err(issue)) => Reading::Broken { key, issue },
            (None, Err(issue)) => Reading::Problem(issue),
            (None, Ok(_)) => Reading::Problem(Issue::Malformed {
                path: format!("{path}.name"),
                detail: "missing".into(),
            }),
        });
    }
    readings
}
