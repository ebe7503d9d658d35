//! Pods and pod templates: where a manifest carries pod specs, the gang link a pod spec
//! has, and rewriting it for the target version.

use super::{Cx, Index, ManifestLink, PodGroupInfo, Severity, lookup, namespace};
use crate::migrate::api::{GangApi, GroupLink};
use crate::migrate::doc::Node;

/// Calls `f` with every pod spec in `node` and where it is.
pub(super) fn visit_pod_specs(node: &mut Node, f: &mut dyn FnMut(&str, &mut Node)) {
    let kind = node.get_str("kind").unwrap_or_default().to_owned();
    let api_version = node.get_str("apiVersion").unwrap_or_default().to_owned();
    match kind.as_str() {
        "Pod" if api_version == "v1" => {
            if let Some(spec) = node.get_mut("spec") {
                f("spec", spec);
            }
        }
        "PodTemplate" if api_version == "v1" => {
            if let Some(spec) = node.at_mut(&["template", "spec"]) {
                f("template.spec", spec);
            }
        }
        "CronJob" if api_version.starts_with("batch/") => {
            let path = ["spec", "jobTemplate", "spec", "template", "spec"];
            if let Some(spec) = node.at_mut(&path) {
                f("spec.jobTemplate.spec.template.spec", spec);
            }
        }
        "JobSet" if api_version.starts_with("jobset.x-k8s.io/") => {
            if let Some(jobs) = node
                .at_mut(&["spec", "replicatedJobs"])
                .and_then(Node::items_mut)
            {
                for (i, job) in jobs.iter_mut().enumerate() {
                    if let Some(spec) = job.at_mut(&["template", "spec", "template", "spec"]) {
                        f(
                            &format!("spec.replicatedJobs[{i}].template.spec.template.spec"),
                            spec,
                        );
                    }
                }
            }
        }
        _ => {
            if let Some(spec @ Node::Map(_)) = node.at_mut(&["spec", "template", "spec"]) {
                f("spec.template.spec", spec);
            }
        }
    }
}

/// The gang link a pod spec carries.
pub(super) fn pod_link(spec: &Node) -> Result<Option<ManifestLink>, String> {
    let workload_ref = spec.get("workloadRef").filter(|n| **n != Node::Null);
    let group = spec.get("schedulingGroup").filter(|n| **n != Node::Null);
    match (workload_ref, group) {
        (Some(_), Some(_)) => {
            Err("has both workloadRef (1.35) and schedulingGroup (1.36+): keep one".into())
        }
        (Some(r), None) => {
            let field = |f: &str| {
                r.get_str(f)
                    .filter(|s| !s.is_empty())
                    .map(str::to_owned)
                    .ok_or_else(|| format!("workloadRef.{f} is missing"))
            };
            Ok(Some(ManifestLink::Group(GroupLink {
                workload: field("name")?,
                template: field("podGroup")?,
                replica_key: r
                    .get_str("podGroupReplicaKey")
                    .filter(|s| !s.is_empty())
                    .map(str::to_owned),
            })))
        }
        (None, Some(g)) => g
            .get_str("podGroupName")
            .filter(|s| !s.is_empty())
            .map(|s| Some(ManifestLink::Named(s.to_owned())))
            .ok_or_else(|| "schedulingGroup.podGroupName is missing".into()),
        (None, None) => Ok(None),
    }
}

impl Index {
    /// The gang a 1.36+ pod naming PodGroup `name` belongs to, in 1.35 terms.
    pub(super) fn link_of(&self, ns: &str, name: &str) -> Result<GroupLink, String> {
        match lookup(&self.pod_groups, ns, name) {
            Some(PodGroupInfo {
                template: Some((workload, template)),
            }) => Ok(GroupLink::of_pod_group(workload, template, name)),
            Some(PodGroupInfo { template: None }) => Ok(standalone_link(name)),
            None => Err(format!(
                "schedulingGroup.podGroupName {name:?}: that PodGroup is not in the input, so its Workload and group are unknown; include it"
            )),
        }
    }
}

/// A PodGroup without a Workload becomes, in 1.35, a Workload of its own name with one group
/// of its own name.
fn standalone_link(name: &str) -> GroupLink {
    GroupLink {
        workload: name.to_owned(),
        template: name.to_owned(),
        replica_key: None,
    }
}

impl Cx<'_> {
    pub(super) fn pods(&mut self, index: &Index, node: &mut Node) {
        let ns = namespace(node).to_owned();
        let to = self.to;
        let mut found: Vec<(Severity, String)> = Vec::new();
        visit_pod_specs(node, &mut |path, spec| {
            let link = match pod_link(spec) {
                Ok(Some(link)) => link,
                Ok(None) => return,
                Err(e) => {
                    found.push((Severity::Error, format!("{path}: {e}")));
                    return;
                }
            };
            let group = match (&link, to) {
                // Already in the target's shape.
                (ManifestLink::Named(_), GangApi::V1Alpha2 | GangApi::V1Beta1) => return,
                (ManifestLink::Group(g), _) => g.clone(),
                (ManifestLink::Named(name), GangApi::V1Alpha1) => match index.link_of(&ns, name) {
                    Ok(g) => g,
                    Err(e) => {
                        found.push((Severity::Error, format!("{path}.{e}")));
                        return;
                    }
                },
            };
            if let Some(info) = lookup(&index.workloads, &ns, &group.workload)
                && !info
                    .entries
                    .iter()
                    .any(|e| e.get_str("name") == Some(group.template.as_str()))
            {
                found.push((
                    Severity::Error,
                    format!(
                        "{path}: names group {:?} of Workload {}, which has no such group",
                        group.template, group.workload
                    ),
                ));
                return;
            }
            if let (ManifestLink::Group(g), true) = (&link, to.has_pod_groups())
                && let Some(key) = &g.replica_key
            {
                found.push((
                    Severity::Lossy,
                    format!(
                        "{path}.workloadRef.podGroupReplicaKey {key:?} has no field in {to}: the gang is PodGroup {}",
                        g.pod_group_name().unwrap_or_default()
                    ),
                ));
            }
            if matches!(link, ManifestLink::Group(_)) && to == GangApi::V1Alpha1 {
                return;
            }
            match group.pod_link(to) {
                Ok((field, value)) => {
                    let old = match link {
                        ManifestLink::Group(_) => "workloadRef",
                        ManifestLink::Named(_) => "schedulingGroup",
                    };
                    spec.rename(old, field, value);
                }
                Err(e) => found.push((Severity::Error, format!("{path}: {e}"))),
            }
        });
        for (severity, message) in found {
            self.find(severity, message);
        }
    }
}
