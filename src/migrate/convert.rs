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
//!
//! Every other field and the order of every mapping are kept. What a target cannot express
//! is dropped and reported as [`Severity::Lossy`]; what cannot be converted at all is a
//! [`Severity::Error`] and the caller writes nothing.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::Serialize;

use super::api::{self, GangApi, GroupLink};
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
enum PodLink {
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

/// Converts `documents` to `to`.
#[must_use]
pub fn convert(documents: &[Input], to: GangApi) -> Conversion {
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
            to,
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

/// Calls `f` with every pod spec in `node` and where it is.
fn visit_pod_specs(node: &mut Node, f: &mut dyn FnMut(&str, &mut Node)) {
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
fn pod_link(spec: &Node) -> Result<Option<PodLink>, String> {
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
            Ok(Some(PodLink::Group(GroupLink {
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
            .map(|s| Some(PodLink::Named(s.to_owned())))
            .ok_or_else(|| "schedulingGroup.podGroupName is missing".into()),
        (None, None) => Ok(None),
    }
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
                if let Ok(Some(PodLink::Group(link))) = pod_link(spec) {
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

    /// The gang a 1.36+ pod naming PodGroup `name` belongs to, in 1.35 terms.
    fn link_of(&self, ns: &str, name: &str) -> Result<GroupLink, String> {
        match self.pod_groups.get(&(ns.to_owned(), name.to_owned())) {
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

/// The conversion of one document.
struct Cx<'a> {
    document: u32,
    object: String,
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
                if self.to == GangApi::V1Beta1 {
                    self.find(
                        Severity::Note,
                        "kept as scheduling.k8s.io/v1alpha3: v1beta1 has no CompositePodGroup"
                            .into(),
                    );
                    out.push(node);
                } else {
                    self.find(
                        Severity::Error,
                        format!(
                            "CompositePodGroup exists only in 1.37 (v1alpha3); {} cannot express a group of groups",
                            self.to
                        ),
                    );
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

    fn workload(&mut self, node: &mut Node, from: GangApi) {
        let to = self.to;
        node.set("apiVersion", Node::str(to.api_version()));
        let Some(spec) = node.get_mut("spec") else {
            return;
        };
        if to != GangApi::V1Beta1
            && let Some(composite) = spec.remove("compositePodGroupTemplates")
            && composite != Node::Null
        {
            self.find(
                Severity::Lossy,
                format!("spec.compositePodGroupTemplates dropped: {to} has no composite groups"),
            );
        }
        if let Some(entries) = spec.get_mut(from.groups_field()).and_then(Node::items_mut) {
            for (i, entry) in entries.iter_mut().enumerate() {
                let path = format!("spec.{}[{i}]", to.groups_field());
                self.entry(entry, from, &path);
            }
        }
        if from.groups_field() != to.groups_field()
            && let Some(entries) = spec.get(from.groups_field()).cloned()
        {
            spec.rename(from.groups_field(), to.groups_field(), entries);
        }
        if to == GangApi::V1Beta1 {
            self.one_priority(spec);
        }
    }

    /// v1beta1 refuses a Workload whose templates differ in `priorityClassName` or
    /// `priority` ("detected multiple priority configurations", kube-apiserver 1.37): the
    /// input must pick one.
    fn one_priority(&mut self, spec: &Node) {
        let entries = spec
            .get(GangApi::V1Beta1.groups_field())
            .and_then(Node::items)
            .unwrap_or_default();
        let priority = |e: &Node| {
            let class = e.get_str("priorityClassName").unwrap_or_default().to_owned();
            let value = e.get("priority").and_then(Node::as_i64);
            (class, value)
        };
        let mut seen: Vec<String> = Vec::new();
        let first = entries.first().map(priority);
        let mut differ = false;
        for e in entries {
            let (class, value) = priority(e);
            differ |= Some((class.clone(), value)) != first;
            seen.push(format!(
                "{}: priorityClassName {class:?}, priority {}",
                e.get_str("name").unwrap_or("?"),
                value.map_or_else(|| "unset".to_owned(), |v| v.to_string())
            ));
        }
        if differ {
            self.find(
                Severity::Error,
                format!(
                    "spec.podGroupTemplates differ in priority ({}): v1beta1 requires one priority configuration per Workload; give every template the same",
                    seen.join("; ")
                ),
            );
        }
    }

    /// One Workload group entry, `from` → `self.to`, in place.
    fn entry(&mut self, entry: &mut Node, from: GangApi, path: &str) {
        let to = self.to;
        if from.policy_field() != to.policy_field()
            && let Some(policy) = entry.get(from.policy_field()).cloned()
        {
            entry.rename(from.policy_field(), to.policy_field(), policy);
        }
        if to == GangApi::V1Alpha1 {
            let dropped: Vec<String> = entry
                .entries()
                .unwrap_or_default()
                .iter()
                .filter(|(k, v)| k != "name" && k != "policy" && *v != Node::Null)
                .map(|(k, _)| k.clone())
                .collect();
            for field in dropped {
                entry.remove(&field);
                self.find(
                    Severity::Lossy,
                    format!(
                        "{path}.{field} dropped: v1alpha1 group entries have only name and policy"
                    ),
                );
            }
            return;
        }
        self.shared_fields(entry, from, path);
    }

    /// The fields a 1.36+ group entry and PodGroup spec share: `disruptionMode`,
    /// `preemptionPolicy`.
    fn shared_fields(&mut self, spec: &mut Node, from: GangApi, path: &str) {
        let to = self.to;
        if from != to
            && let Some(mode) = spec.get("disruptionMode").cloned()
            && mode != Node::Null
        {
            match disruption(&mode, to) {
                Some(converted) => spec.set("disruptionMode", converted),
                None => {
                    spec.remove("disruptionMode");
                    self.find(
                        Severity::Lossy,
                        format!(
                            "{path}.disruptionMode {} dropped: {to} has no such mode",
                            show(&mode)
                        ),
                    );
                }
            }
        }
        if to != GangApi::V1Beta1 {
            for field in ["preemptionPolicy", "parentCompositePodGroupName"] {
                if let Some(value) = spec.remove(field)
                    && value != Node::Null
                {
                    self.find(
                        Severity::Lossy,
                        format!(
                            "{path}.{field} {} dropped: {to} has no such field",
                            show(&value)
                        ),
                    );
                }
            }
        }
    }

    fn create_pod_groups(&mut self, index: &Index, workload: &Node, out: &mut Vec<Node>) {
        let Some((ns, name)) = key(workload) else {
            return;
        };
        let entries: Vec<Node> = workload
            .at(&["spec", self.to.groups_field()])
            .and_then(Node::items)
            .unwrap_or_default()
            .to_vec();
        let mut links: Vec<GroupLink> = index
            .links
            .get(&(ns.clone(), name.clone()))
            .cloned()
            .unwrap_or_default();
        let named: BTreeSet<&str> = links.iter().map(|l| l.template.as_str()).collect();
        let unnamed: Vec<GroupLink> = entries
            .iter()
            .filter_map(|e| e.get_str("name"))
            .filter(|t| !named.contains(t))
            .map(|t| GroupLink {
                workload: name.clone(),
                template: t.to_owned(),
                replica_key: None,
            })
            .collect();
        links.extend(unnamed);
        let namespace = (!ns.is_empty()).then_some(ns.as_str());
        let mut created: BTreeMap<String, GroupLink> = BTreeMap::new();
        for link in links {
            let Some(entry) = entries
                .iter()
                .find(|e| e.get_str("name") == Some(link.template.as_str()))
            else {
                // The pod naming it reports the error.
                continue;
            };
            match api::pod_group(self.to, namespace, &link, entry) {
                Ok(Some(pod_group)) => {
                    let pg_name = link.pod_group_name().unwrap_or_default();
                    if let Some(other) = created.get(&pg_name) {
                        self.find(
                            Severity::Error,
                            format!(
                                "group {:?} replica key {:?} and group {:?} replica key {:?} would both be PodGroup {pg_name}: rename a group or a replica key",
                                other.template,
                                other.replica_key.clone().unwrap_or_default(),
                                link.template,
                                link.replica_key.clone().unwrap_or_default()
                            ),
                        );
                        continue;
                    }
                    created.insert(pg_name.clone(), link.clone());
                    if index
                        .pod_groups
                        .contains_key(&(ns.clone(), pg_name.clone()))
                    {
                        continue;
                    }
                    self.find(
                        Severity::Note,
                        format!(
                            "created PodGroup {pg_name} for group {:?}{}",
                            link.template,
                            link.replica_key
                                .as_ref()
                                .map(|k| format!(", replica key {k:?}"))
                                .unwrap_or_default()
                        ),
                    );
                    out.push(pod_group);
                }
                Ok(None) => {}
                Err(e) => self.find(Severity::Error, e.to_string()),
            }
        }
    }

    fn pod_group(&mut self, node: &mut Node, from: GangApi) {
        let to = self.to;
        node.set("apiVersion", Node::str(to.api_version()));
        if from != to
            && let Some(status) = node.remove("status")
            && status != Node::Null
        {
            self.find(
                Severity::Note,
                "status dropped: the scheduler writes it, and its condition is named differently in each version".into(),
            );
        }
        let Some(spec) = node.get_mut("spec") else {
            return;
        };
        if from != to
            && let Some((workload, template)) =
                pod_group_template(from, &Node::map().with("spec", spec.clone()))
        {
            let (old, new, value) = match to {
                GangApi::V1Alpha2 => (
                    "workloadRef",
                    "podGroupTemplateRef",
                    Node::map().with(
                        "workload",
                        Node::map()
                            .with("workloadName", Node::str(workload))
                            .with("podGroupTemplateName", Node::str(template)),
                    ),
                ),
                _ => (
                    "podGroupTemplateRef",
                    "workloadRef",
                    Node::map()
                        .with("workloadName", Node::str(workload))
                        .with("templateName", Node::str(template)),
                ),
            };
            spec.rename(old, new, value);
        }
        if from == GangApi::V1Beta1
            && to != GangApi::V1Beta1
            && spec.at(&["schedulingPolicy", "gang"]).is_some()
        {
            self.find(
                Severity::Lossy,
                format!("spec.schedulingPolicy.gang.minCount becomes immutable: {to} does not allow changing it after creation"),
            );
        }
        self.shared_fields(spec, from, "spec");
    }

    /// 1.35 has no PodGroup: one made from a Workload in the input folds into it; one
    /// without a Workload becomes a Workload.
    fn fold_pod_group(&mut self, index: &Index, node: &Node, from: GangApi) -> Option<Node> {
        let (ns, name) = key(node)?;
        let spec = node.get("spec").cloned().unwrap_or_else(Node::map);
        match pod_group_template(from, node) {
            Some((workload, template)) => {
                let Some(info) = index.workloads.get(&(ns, workload.clone())) else {
                    self.find(
                        Severity::Error,
                        format!(
                            "names Workload {workload:?}, which is not in the input: 1.35 has no PodGroup, so the Workload is needed to express it"
                        ),
                    );
                    return None;
                };
                let entry = info
                    .entries
                    .iter()
                    .find(|e| e.get_str("name") == Some(template.as_str()));
                let template_policy = entry.and_then(|e| e.get(info.api.policy_field()));
                if template_policy != spec.get("schedulingPolicy") {
                    self.find(
                        Severity::Lossy,
                        format!(
                            "spec.schedulingPolicy {} differs from its template's {}: 1.35 keeps only the Workload's",
                            show(spec.get("schedulingPolicy").unwrap_or(&Node::Null)),
                            show(template_policy.unwrap_or(&Node::Null))
                        ),
                    );
                }
                // Fields the template says the same are reported with the Workload.
                for (field, value) in spec.entries().unwrap_or_default() {
                    let ref_field = matches!(field.as_str(), "podGroupTemplateRef" | "workloadRef");
                    if ref_field || field == "schedulingPolicy" || *value == Node::Null {
                        continue;
                    }
                    if entry.and_then(|e| e.get(field)) != Some(value) {
                        self.find(
                            Severity::Lossy,
                            format!(
                                "spec.{field} {} dropped: 1.35 has no PodGroup and its template does not say it",
                                show(value)
                            ),
                        );
                    }
                }
                self.metadata_lost(node);
                self.find(
                    Severity::Note,
                    format!("folded into Workload {workload} group {template:?}"),
                );
                None
            }
            None => {
                let mut entry = Node::map().with("name", Node::str(&name)).with(
                    "schedulingPolicy",
                    spec.get("schedulingPolicy").cloned().unwrap_or(Node::Null),
                );
                for (k, v) in spec.entries().unwrap_or_default() {
                    if k != "schedulingPolicy" && k != "podGroupTemplateRef" && k != "workloadRef" {
                        entry.set(k, v.clone());
                    }
                }
                self.entry(&mut entry, from, "spec");
                let mut metadata = node.get("metadata").cloned().unwrap_or_else(Node::map);
                for field in [
                    "uid",
                    "resourceVersion",
                    "creationTimestamp",
                    "generation",
                    "managedFields",
                ] {
                    metadata.remove(field);
                }
                self.find(
                    Severity::Note,
                    format!("has no Workload: written as Workload {name} with one group {name:?}"),
                );
                Some(
                    Node::map()
                        .with("apiVersion", Node::str(GangApi::V1Alpha1.api_version()))
                        .with("kind", Node::str("Workload"))
                        .with("metadata", metadata)
                        .with(
                            "spec",
                            Node::map().with("podGroups", Node::Seq(vec![entry])),
                        ),
                )
            }
        }
    }

    fn metadata_lost(&mut self, node: &Node) {
        for field in ["labels", "annotations"] {
            if let Some(Node::Map(entries)) = node.at(&["metadata", field])
                && !entries.is_empty()
            {
                self.find(
                    Severity::Lossy,
                    format!("metadata.{field} dropped with the PodGroup"),
                );
            }
        }
    }

    fn pods(&mut self, index: &Index, node: &mut Node) {
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
                (PodLink::Named(_), GangApi::V1Alpha2 | GangApi::V1Beta1) => return,
                (PodLink::Group(g), _) => g.clone(),
                (PodLink::Named(name), GangApi::V1Alpha1) => match index.link_of(&ns, name) {
                    Ok(g) => g,
                    Err(e) => {
                        found.push((Severity::Error, format!("{path}.{e}")));
                        return;
                    }
                },
            };
            if let Some(info) = index.workloads.get(&(ns.clone(), group.workload.clone()))
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
            if let (PodLink::Group(g), true) = (&link, to.has_pod_groups())
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
            if matches!(link, PodLink::Group(_)) && to == GangApi::V1Alpha1 {
                return;
            }
            match group.pod_link(to) {
                Ok((field, value)) => {
                    let old = match link {
                        PodLink::Group(_) => "workloadRef",
                        PodLink::Named(_) => "schedulingGroup",
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

#[cfg(test)]
#[path = "convert_tests.rs"]
mod tests;
