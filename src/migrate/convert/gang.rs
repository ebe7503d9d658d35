//! Workloads and PodGroups: group entries, the fields 1.36+ entries and PodGroups share,
//! PodGroups created from a 1.35 Workload and folded back into one.

use std::collections::{BTreeMap, BTreeSet};

use super::{
    Cx, Index, Severity, composite_gate, disruption, key, lookup, pod_group_template, show,
};
use crate::migrate::api::{self, GangApi, GroupLink};
use crate::migrate::doc::Node;

impl Cx<'_> {
    pub(super) fn workload(&mut self, node: &mut Node, from: GangApi) {
        let to = self.to;
        node.set("apiVersion", Node::str(to.api_version()));
        let Some(spec) = node.get_mut("spec") else {
            return;
        };
        self.composite_templates(spec, from);
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

    /// `spec.compositePodGroupTemplates` (1.37+): kept where the target has composites (a note
    /// names the gate kube-apiserver needs to keep it); dropped below 1.37, which is an error
    /// when the Workload has no `podGroupTemplates` of its own (1.37+ allows exactly one of
    /// the two lists, so a Workload of composites has none), lossy otherwise.
    fn composite_templates(&mut self, spec: &mut Node, from: GangApi) {
        let Some(composite) = spec
            .get("compositePodGroupTemplates")
            .filter(|c| **c != Node::Null)
            .cloned()
        else {
            return;
        };
        let names: Vec<String> = composite
            .items()
            .unwrap_or_default()
            .iter()
            .map(|t| format!("{:?}", t.get_str("name").unwrap_or("?")))
            .collect();
        let names = names.join(", ");
        let target = self.target;
        if target.has_composites() {
            self.find(
                Severity::Note,
                format!(
                    "spec.compositePodGroupTemplates ({names}) kept: kube-apiserver 1.{} keeps it only with {}, and drops it otherwise",
                    target.minor(),
                    composite_gate(target)
                ),
            );
            return;
        }
        spec.remove("compositePodGroupTemplates");
        let own = spec
            .get(from.groups_field())
            .and_then(Node::items)
            .is_some_and(|t| !t.is_empty());
        if own {
            self.find(
                Severity::Lossy,
                format!(
                    "spec.compositePodGroupTemplates ({names}) dropped: {target} has no CompositePodGroup"
                ),
            );
        } else {
            self.find(
                Severity::Error,
                format!(
                    "spec.compositePodGroupTemplates ({names}) cannot be expressed: {target} has no CompositePodGroup, and the Workload has no spec.{} of its own to keep; give each composite's pod groups a Workload of their own",
                    from.groups_field()
                ),
            );
        }
    }

    /// v1beta1 refuses a Workload whose templates differ in `priorityClassName` or
    /// `priority` ("detected multiple priority configurations", kube-apiserver 1.37): the
    /// input must pick one.
    pub(super) fn one_priority(&mut self, spec: &Node) {
        let entries = spec
            .get(GangApi::V1Beta1.groups_field())
            .and_then(Node::items)
            .unwrap_or_default();
        let priority = |e: &Node| {
            let class = e
                .get_str("priorityClassName")
                .unwrap_or_default()
                .to_owned();
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
    pub(super) fn entry(&mut self, entry: &mut Node, from: GangApi, path: &str) {
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
        if to == GangApi::V1Beta1 {
            self.preemption_note(entry, path, false);
        }
    }

    /// The fields a 1.36+ group entry and PodGroup spec share: `disruptionMode`,
    /// `preemptionPolicy`, and the PodGroup's `parentCompositePodGroupName`.
    pub(super) fn shared_fields(&mut self, spec: &mut Node, from: GangApi, path: &str) {
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
        if to != GangApi::V1Beta1
            && let Some(value) = spec.remove("preemptionPolicy")
            && value != Node::Null
        {
            self.find(
                Severity::Lossy,
                format!(
                    "{path}.preemptionPolicy {} dropped: {to} has no such field",
                    show(&value)
                ),
            );
        }
        self.parent_composite(spec, path);
    }

    /// A note on a kept `preemptionPolicy` (1.37+). kube-apiserver 1.37 keeps it only with the
    /// alpha gate `PodGroupPreemptionPolicy`; 1.38 needs no gate. On a PodGroup or
    /// CompositePodGroup (`object`), the Priority admission of 1.38 (and of 1.37 with the
    /// gate) also refuses a value other than the one of the object's PriorityClass.
    pub(super) fn preemption_note(&mut self, spec: &Node, path: &str, object: bool) {
        let Some(value) = spec.get("preemptionPolicy").filter(|v| **v != Node::Null) else {
            return;
        };
        let admission = "kube-apiserver's Priority admission refuses a value other than the preemptionPolicy of the PriorityClass the object names (of the default class without one; PreemptLowerPriority without either)";
        let message = match (self.target.minor(), object) {
            (37, false) => "kube-apiserver 1.37 keeps it only with the PodGroupPreemptionPolicy gate (alpha, off by default), and drops it otherwise; 1.38 needs no gate".to_owned(),
            (37, true) => format!(
                "kube-apiserver 1.37 keeps it only with the PodGroupPreemptionPolicy gate (alpha, off by default), and drops it otherwise; with the gate on, and always on 1.38, {admission}"
            ),
            (m, true) if m >= 38 => format!("on 1.{m}, {admission}"),
            _ => return,
        };
        self.find(
            Severity::Note,
            format!("{path}.preemptionPolicy {} kept: {message}", show(value)),
        );
    }

    /// `parentCompositePodGroupName` (1.37+): kept where the target has CompositePodGroups (a
    /// note names the gate kube-apiserver needs to keep it), dropped, lossy, below 1.37.
    fn parent_composite(&mut self, spec: &mut Node, path: &str) {
        const FIELD: &str = "parentCompositePodGroupName";
        let Some(value) = spec.get(FIELD).filter(|v| **v != Node::Null).cloned() else {
            return;
        };
        let target = self.target;
        if target.has_composites() {
            self.find(
                Severity::Note,
                format!(
                    "{path}.{FIELD} {} kept: kube-apiserver 1.{} keeps it only with {}, and drops it otherwise (the PodGroup is then a gang of its own)",
                    show(&value),
                    target.minor(),
                    composite_gate(target)
                ),
            );
        } else {
            spec.remove(FIELD);
            self.find(
                Severity::Lossy,
                format!(
                    "{path}.{FIELD} {} dropped: {target} has no CompositePodGroup, so the PodGroup becomes a gang of its own",
                    show(&value)
                ),
            );
        }
    }

    pub(super) fn create_pod_groups(
        &mut self,
        index: &Index,
        workload: &Node,
        out: &mut Vec<Node>,
    ) {
        let Some((ns, name)) = key(workload) else {
            return;
        };
        let entries: Vec<Node> = workload
            .at(&["spec", self.to.groups_field()])
            .and_then(Node::items)
            .unwrap_or_default()
            .to_vec();
        let mut links: Vec<GroupLink> = Vec::new();
        for ((n, w), found) in &index.links {
            if *w == name && (*n == ns || n.is_empty() || ns.is_empty()) {
                for link in found {
                    if !links.contains(link) {
                        links.push(link.clone());
                    }
                }
            }
        }
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

    pub(super) fn pod_group(&mut self, node: &mut Node, from: GangApi) {
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
        if to == GangApi::V1Beta1 {
            self.preemption_note(spec, "spec", true);
        }
    }

    /// 1.35 has no PodGroup: one made from a Workload in the input folds into it; one
    /// without a Workload becomes a Workload.
    pub(super) fn fold_pod_group(
        &mut self,
        index: &Index,
        node: &Node,
        from: GangApi,
    ) -> Option<Node> {
        let (ns, name) = key(node)?;
        let spec = node.get("spec").cloned().unwrap_or_else(Node::map);
        match pod_group_template(from, node) {
            Some((workload, template)) => {
                let Some(info) = lookup(&index.workloads, &ns, &workload) else {
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

    pub(super) fn metadata_lost(&mut self, node: &Node) {
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
}
