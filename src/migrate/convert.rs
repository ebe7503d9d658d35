//! Manifest conversion between gang API versions. Pure: documents in, documents and a
//! per-object report out.
//!
//! What moves between versions:
//! - `Workload`: `spec.podGroups[]` (1.35) ↔ `spec.podGroupTemplates[]` (1.36+), each entry's
//!   `policy` ↔ `schedulingPolicy`; `disruptionMode` `Pod`/`PodGroup` (1.36) ↔
//!   `{single: {}}`/`{all: {}}` (1.37).
//! - `PodGroup` (1.36+ only): `podGroupTemplateRef.workload.{workloadName,
//!   podGroupTemplateName}` (1.36) ↔ `workloadRef.{workloadName, templateName}` (1.37). From a
//!   1.35 Workload, one PodGroup is created per gang its pods name (`<workload>-<group>` and
//!   `-<replica key>`), and one per group no pod names. To 1.35, PodGroups fold into their
//!   Workload's entries.
//! - Pods and pod templates (`Pod`, `PodTemplate`, `CronJob`, `JobSet` replicated jobs and any
//!   object with `spec.template.spec`): `spec.workloadRef` (1.35) ↔ `spec.schedulingGroup`
//!   (1.36+), in place.
//! - `CompositePodGroup` (1.37+ only): `scheduling.k8s.io/v1alpha3` (1.37) ↔ `v1beta1` (1.38),
//!   the same fields; a PodGroup's `parentCompositePodGroupName` and a Workload's
//!   `compositePodGroupTemplates` are kept for 1.37 and 1.38 and cannot go below.
//!
//! The target is a Kubernetes minor ([`Target`]): 1.37 and 1.38 share the `v1beta1` shape of
//! Workload and PodGroup and differ in where CompositePodGroup lives.
//!
//! Every other field and the order of every mapping are kept. What a target cannot express
//! is dropped and reported as [`Severity::Lossy`]; what cannot be converted at all is a
//! [`Severity::Error`] and the caller writes nothing.

use std::collections::BTreeMap;
use std::fmt;

use serde::Serialize;

use super::api::{GROUP, GangApi, GroupLink, Target};
use super::doc::Node;

/// One input document and its 1-based number in the stream.
#[derive(Debug, Clone, PartialEq)]
pub struct Input {
    /// 1-based document number.
    pub number: u32,
    /// The document.
    pub node: Node,
}

/// How much a finding matters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Something the reader should know; nothing was lost.
    Note,
    /// The target version cannot express something the input said; it was dropped.
    Lossy,
    /// The object cannot be converted.
    Error,
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Note => "note",
            Self::Lossy => "lossy",
            Self::Error => "error",
        })
    }
}

/// One line of the report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    /// The input document it is about.
    pub document: u32,
    /// `Kind namespace/name` of the object.
    pub object: String,
    /// How much it matters.
    pub severity: Severity,
    /// What happened, naming the field and value.
    pub message: String,
}

/// The converted documents and the report.
#[derive(Debug, Clone, PartialEq)]
pub struct Conversion {
    /// The output documents, in input order, with created PodGroups after their Workload.
    pub documents: Vec<Node>,
    /// Every finding, in document order.
    pub findings: Vec<Finding>,
}

impl Conversion {
    /// Whether some object could not be converted.
    #[must_use]
    pub fn has_errors(&self) -> bool {
        self.findings.iter().any(|f| f.severity == Severity::Error)
    }

    /// Whether something was dropped.
    #[must_use]
    pub fn is_lossy(&self) -> bool {
        self.findings.iter().any(|f| f.severity == Severity::Lossy)
    }
}

/// `(namespace, name)`; an absent namespace is `""`.
type Key = (String, String);

/// A Workload of the input, in its own version.
struct WorkloadInfo {
    api: GangApi,
    /// Group entries by name, in the Workload's shape.
    entries: Vec<Node>,
}

/// A PodGroup of the input.
struct PodGroupInfo {
    /// `(workload, template)` it was made from, if any.
    template: Option<(String, String)>,
}

/// How a pod names its gang.
#[derive(Debug, Clone, PartialEq)]
enum ManifestLink {
    /// 1.35 `workloadRef`.
    Group(GroupLink),
    /// 1.36+ `schedulingGroup.podGroupName`.
    Named(String),
}

/// What the whole input holds, read before anything is converted.
#[derive(Default)]
struct Index {
    workloads: BTreeMap<Key, WorkloadInfo>,
    pod_groups: BTreeMap<Key, PodGroupInfo>,
    /// Per Workload, the gangs its pods name, in the order first named.
    links: BTreeMap<Key, Vec<GroupLink>>,
}

/// Converts `documents` for `to`: a [`Target`] minor, or a [`GangApi`] (the first minor
/// that serves it, so `v1beta1` is 1.37).
#[must_use]
pub fn convert(documents: &[Input], to: impl Into<Target>) -> Conversion {
    let target = to.into();
    let mut inputs = Vec::with_capacity(documents.len());
    let mut findings = Vec::new();
    for input in documents {
        flatten(input, &mut inputs, &mut findings);
    }
    let index = Index::read(&inputs);
    let mut out = Vec::with_capacity(inputs.len());
    for input in &inputs {
        let mut cx = Cx {
            document: input.number,
            object: label(&input.node),
            target,
            to: target.api(),
            findings: &mut findings,
        };
        cx.convert(&index, &input.node, &mut out);
    }
    Conversion {
        documents: out,
        findings,
    }
}

/// A `kind: List` becomes its items, each its own document.
fn flatten(input: &Input, out: &mut Vec<Input>, findings: &mut Vec<Finding>) {
    let is_list = input.node.get_str("kind") == Some("List")
        && input.node.get_str("apiVersion") == Some("v1");
    match (is_list, input.node.get("items").and_then(Node::items)) {
        (true, Some(items)) => {
            findings.push(Finding {
                document: input.number,
                object: "List".into(),
                severity: Severity::Note,
                message: format!("written as its {} items, one document each", items.len()),
            });
            for item in items {
                out.push(Input {
                    number: input.number,
                    node: item.clone(),
                });
            }
        }
        _ => out.push(input.clone()),
    }
}

/// `Kind namespace/name`, as far as the object says.
fn label(node: &Node) -> String {
    let kind = node.get_str("kind").unwrap_or("object");
    let name = node.at(&["metadata", "name"]).and_then(Node::as_str);
    match (namespace(node), name) {
        (ns, Some(name)) if !ns.is_empty() => format!("{kind} {ns}/{name}"),
        (_, Some(name)) => format!("{kind} {name}"),
        (_, None) => kind.to_owned(),
    }
}

fn namespace(node: &Node) -> &str {
    node.at(&["metadata", "namespace"])
        .and_then(Node::as_str)
        .unwrap_or("")
}

fn key(node: &Node) -> Option<Key> {
    let name = node.at(&["metadata", "name"]).and_then(Node::as_str)?;
    Some((namespace(node).to_owned(), name.to_owned()))
}

/// The gang version of a `scheduling.k8s.io` object, and its kind.
fn gang_object(node: &Node) -> Option<(GangApi, &str)> {
    let api = GangApi::of_api_version(node.get_str("apiVersion")?)?;
    Some((api, node.get_str("kind")?))
}

/// The PodGroup's `(workload, template)` in its version's shape.
fn pod_group_template(api: GangApi, pod_group: &Node) -> Option<(String, String)> {
    let (path, workload, template): (&[&str], _, _) = match api {
        GangApi::V1Alpha1 => return None,
        GangApi::V1Alpha2 => (
            &["spec", "podGroupTemplateRef", "workload"],
            "workloadName",
            "podGroupTemplateName",
        ),
        GangApi::V1Beta1 => (&["spec", "workloadRef"], "workloadName", "templateName"),
    };
    let r = pod_group.at(path)?;
    Some((
        r.get_str(workload)?.to_owned(),
        r.get_str(template)?.to_owned(),
    ))
}

impl Index {
    fn read(inputs: &[Input]) -> Self {
        let mut index = Self::default();
        for input in inputs {
            let node = &input.node;
            if let (Some((api, kind)), Some(key)) = (gang_object(node), key(node)) {
                match kind {
                    "Workload" => {
                        let entries = node
                            .at(&["spec", api.groups_field()])
                            .and_then(Node::items)
                            .unwrap_or_default()
                            .to_vec();
                        index.workloads.insert(key, WorkloadInfo { api, entries });
                    }
                    "PodGroup" => {
                        let template = pod_group_template(api, node);
                        index.pod_groups.insert(key, PodGroupInfo { template });
                    }
                    _ => {}
                }
            }
            let ns = namespace(node).to_owned();
            let mut copy = node.clone();
            visit_pod_specs(&mut copy, &mut |_, spec| {
                if let Ok(Some(ManifestLink::Group(link))) = pod_link(spec) {
                    let list = index
                        .links
                        .entry((ns.clone(), link.workload.clone()))
                        .or_default();
                    if !list.contains(&link) {
                        list.push(link);
                    }
                }
            });
        }
        index
    }
}

/// `map`'s entry for `(ns, name)`. Manifests often leave the namespace to `kubectl -n`, so
/// an object without a namespace matches the one object of that name in any namespace, and
/// one with a namespace matches one of that name without.
fn lookup<'m, T>(map: &'m BTreeMap<Key, T>, ns: &str, name: &str) -> Option<&'m T> {
    if let Some(v) = map.get(&(ns.to_owned(), name.to_owned())) {
        return Some(v);
    }
    let mut same = map
        .iter()
        .filter(|((n, m), _)| m == name && (ns.is_empty() || n.is_empty()));
    let first = same.next()?;
    same.next().is_none().then_some(first.1)
}

/// The conversion of one document.
struct Cx<'a> {
    document: u32,
    object: String,
    /// The minor written for.
    target: Target,
    /// Its Workload and PodGroup shape (`target.api()`).
    to: GangApi,
    findings: &'a mut Vec<Finding>,
}

impl Cx<'_> {
    fn find(&mut self, severity: Severity, message: String) {
        self.findings.push(Finding {
            document: self.document,
            object: self.object.clone(),
            severity,
            message,
        });
    }

    fn convert(&mut self, index: &Index, node: &Node, out: &mut Vec<Node>) {
        let mut node = node.clone();
        match gang_object(&node) {
            Some((from, "Workload")) => {
                self.workload(&mut node, from);
                out.push(node.clone());
                if !from.has_pod_groups() && self.to.has_pod_groups() {
                    self.create_pod_groups(index, &node, out);
                }
            }
            Some((from, "PodGroup")) => {
                if self.to.has_pod_groups() {
                    self.pod_group(&mut node, from);
                    out.push(node);
                } else if let Some(workload) = self.fold_pod_group(index, &node, from) {
                    out.push(workload);
                }
            }
            Some((_, "CompositePodGroup")) => {
                if self.composite_pod_group(&mut node) {
                    out.push(node);
                }
            }
            Some((_, kind)) => {
                let kind = kind.to_owned();
                self.find(
                    Severity::Note,
                    format!("kind {kind} is not a gang kind gangscaler converts; copied as is"),
                );
                out.push(node);
            }
            None => {
                self.pods(index, &mut node);
                out.push(node);
            }
        }
    }
}

impl Cx<'_> {
    /// A CompositePodGroup moves to the version its target serves it at (its fields are the
    /// same in 1.37's `v1alpha3` and 1.38's `v1beta1`); a target without composites cannot
    /// express it. Returns whether to write it.
    fn composite_pod_group(&mut self, node: &mut Node) -> bool {
        let Some(version) = self.target.composite_version() else {
            self.find(
                Severity::Error,
                format!(
                    "CompositePodGroup exists from 1.37 on (v1alpha3; v1beta1 from 1.38); {} cannot express a group of groups: convert for 1.37 or later, or remove it and its children's spec.parentCompositePodGroupName",
                    self.target
                ),
            );
            return false;
        };
        if let Some(spec) = node.get("spec") {
            self.preemption_note(spec, "spec", true);
        }
        let from = node.get_str("apiVersion").unwrap_or_default().to_owned();
        let api_version = format!("{GROUP}/{version}");
        let needs = format!(
            "kube-apiserver 1.{} serves it only with {} and --runtime-config={api_version}=true",
            self.target.minor(),
            composite_gate(self.target)
        );
        if from == api_version {
            self.find(Severity::Note, format!("kept as {api_version}; {needs}"));
        } else {
            node.set("apiVersion", Node::str(&api_version));
            self.find(
                Severity::Note,
                format!(
                    "apiVersion {from} becomes {api_version}: 1.{} serves CompositePodGroup there, with the same fields; {needs}",
                    self.target.minor()
                ),
            );
        }
        true
    }
}

/// The gate kube-apiserver of `target` needs before it serves CompositePodGroups and keeps
/// `parentCompositePodGroupName` and `compositePodGroupTemplates` (it drops both otherwise).
pub(super) fn composite_gate(target: Target) -> &'static str {
    if target.minor() == 37 {
        "the CompositePodGroup gate (alpha, off by default; it needs TopologyAwareWorkloadScheduling and GenericWorkload)"
    } else {
        "the CompositePodGroup gate (beta, off by default; it needs TopologyAwareWorkloadScheduling and GenericWorkload)"
    }
}

/// A `disruptionMode` in `to`'s shape: 1.36 strings `Pod`/`PodGroup`, 1.37 unions
/// `{single: {}}`/`{all: {}}`. `None` when it has no counterpart.
fn disruption(mode: &Node, to: GangApi) -> Option<Node> {
    let all = match mode {
        Node::Str(s) if s == "Pod" => false,
        Node::Str(s) if s == "PodGroup" => true,
        Node::Map(_) if mode.get("single").is_some() => false,
        Node::Map(_) if mode.get("all").is_some() => true,
        _ => return None,
    };
    match to {
        GangApi::V1Alpha1 => None,
        GangApi::V1Alpha2 => Some(Node::str(if all { "PodGroup" } else { "Pod" })),
        GangApi::V1Beta1 => Some(Node::map().with(if all { "all" } else { "single" }, Node::map())),
    }
}

/// A value for a message, as compact JSON.
fn show(node: &Node) -> String {
    node.to_json().to_string()
}

mod gang;
mod pods;

use pods::{pod_link, visit_pod_specs};

#[cfg(test)]
mod tests;
