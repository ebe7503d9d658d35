//! How far a scale-up has come, as the cluster shows it: [`GangProgress`] for each gang (bound,
//! formed, volumes attached, running, disrupted), computed by [`progress`] from a cluster
//! snapshot plus the VolumeAttachments, and [`NodeProgress`] for each node, from
//! [`node_progress`]. Pure: the objects come in, progress comes out; the observer
//! ([`observe`](super::observe())) reads it. Depends on `cluster` (its object snapshot and gang
//! view), `model` and `k8s-openapi`.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::storage::v1::VolumeAttachment;
use serde::Serialize;

use super::track::Open;
use crate::cluster::{
    GangIndex, GangView, NodeSummary, NodeTable, ObjectSet, attachable_claims, gang_name, link,
};
use crate::model::{Claim, Gang, GangRef, Instance, InstanceState};

/// One node of a node group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeProgress {
    /// Node name.
    pub name: String,
    /// `metadata.creationTimestamp`, unix seconds (when the node registered).
    pub created_unix: i64,
    /// The `Ready` condition is True.
    pub ready: bool,
}

/// How far one gang has come.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GangProgress {
    /// Members that must run together.
    pub min_count: u32,
    /// When the gang came into being, unix seconds.
    pub created_unix: i64,
    /// The scheduler reports the gang scheduled (`PodGroupScheduled` /
    /// `PodGroupInitiallyScheduled` True), or at least `min_count` members are bound; for a
    /// child of a composite, and its composite has formed too.
    pub formed: bool,
    /// Members bound to a node.
    pub bound: u32,
    /// Members in phase `Running`.
    pub running: u32,
    /// Member pods with `DisruptionTarget` True (being preempted or evicted), sorted.
    pub disrupted: Vec<String>,
    /// Volumes (claims and generic ephemeral volumes) of bound members whose CSI driver needs
    /// attaching. Inline in-tree disks are not counted: their migrated VolumeAttachments carry
    /// an inline spec, not a PersistentVolume name.
    pub volumes_needed: u32,
    /// Of those, volumes with a VolumeAttachment on the member's node with `attached: true`.
    pub volumes_attached: u32,
    /// Attach errors on those VolumeAttachments, as `<pod>/<claim>: <message>`, sorted.
    pub attach_errors: Vec<String>,
}

impl GangProgress {
    /// Every volume that needs attaching is attached (vacuously true without volumes).
    pub fn volumes_ready(&self) -> bool {
        self.volumes_attached >= self.volumes_needed
    }

    /// At least `min_count` members run.
    pub fn started(&self) -> bool {
        self.running >= self.min_count
    }
}

/// The progress of every gang in `view`, keyed by its [`GangRef`]. `objects` must be the
/// snapshot `view` was built from; `attachments` are the cluster's VolumeAttachments.
///
/// A volume counts as attached when a VolumeAttachment for its PersistentVolume on the
/// member's node has `status.attached: true`; one with `status.attachError` is reported in
/// [`GangProgress::attach_errors`]. Disrupted members are found among all pods naming the
/// gang, including pods already being deleted (a preempted pod is deleted right after its
/// `DisruptionTarget` condition is set).
pub fn progress(
    objects: &ObjectSet,
    view: &GangView,
    attachments: &[impl AsRef<VolumeAttachment>],
) -> BTreeMap<GangRef, GangProgress> {
    let disrupted = disrupted_members(objects);
    let mut out = progress_of(
        objects,
        view.gangs.iter().map(AsRef::as_ref),
        |namespace, name| disrupted.get(&(namespace, name.to_owned())).cloned(),
        attachments,
    );
    hold_to_composites(view, &mut out);
    out
}

/// A child of a composite has formed only when its composite has: until `minGroupCount`
/// children have each formed, the scheduler holds them all, and a scale-up for one child
/// succeeds (and stops protecting its nodes) only with the whole composite.
fn hold_to_composites(view: &GangView, progress: &mut BTreeMap<GangRef, GangProgress>) {
    if view.composites.is_empty() {
        return;
    }
    for (id, p) in progress.iter_mut() {
        let Some(gang) = view.gang(id) else { continue };
        if let Some(composite) = view.composite_of(gang) {
            p.formed = p.formed && composite.is_formed(&view.gangs);
        }
    }
}

/// As [`progress`], for the given `gangs` only, with their disrupted members from
/// `disrupted(namespace, gang name)` (the [`GangIndex`] keeps
/// them). The lifecycle loop asks this for the gangs of open scale-ups: its cost follows them,
/// not the cluster.
pub fn progress_of<'g>(
    objects: &ObjectSet,
    gangs: impl Iterator<Item = &'g Gang>,
    disrupted: impl Fn(&str, &str) -> Option<BTreeSet<String>>,
    attachments: &[impl AsRef<VolumeAttachment>],
) -> BTreeMap<GangRef, GangProgress> {
    let by_volume = by_volume(attachments);
    let mut out = BTreeMap::new();
    for gang in gangs {
        let (mut p, needs) = members_progress(objects, gang);
        attach(&mut p, &needs, &by_volume);
        p.disrupted = disrupted_of(&disrupted, gang);
        out.insert(gang.id.clone(), p);
    }
    out
}

/// An attachable volume of a bound member: what its progress reads from VolumeAttachments.
#[derive(Debug, Clone)]
pub(super) struct VolumeNeed {
    pod: String,
    claim: String,
    /// The PersistentVolume its claim is bound to, once bound.
    pv: Option<String>,
    node: String,
}

/// VolumeAttachments by (PersistentVolume, node).
type ByVolume<'a> = HashMap<(&'a str, &'a str), &'a VolumeAttachment>;

fn by_volume(attachments: &[impl AsRef<VolumeAttachment>]) -> ByVolume<'_> {
    attachments
        .iter()
        .map(AsRef::as_ref)
        .filter_map(|va| {
            let pv = va.spec.source.persistent_volume_name.as_deref()?;
            Some(((pv, va.spec.node_name.as_str()), va))
        })
        .collect()
}

/// What `gang` and its pods say of its progress (all but the attachments' state and the
/// disrupted members), and the volumes whose attachments the rest depends on.
fn members_progress(objects: &ObjectSet, gang: &Gang) -> (GangProgress, Vec<VolumeNeed>) {
    let mut p = GangProgress {
        min_count: gang.min_count,
        created_unix: gang.created_unix,
        bound: gang.bound_count(),
        ..GangProgress::default()
    };
    p.formed = gang.scheduled || p.bound >= gang.min_count;
    let mut needs = Vec::new();
    for member in &gang.members {
        let Some(pod) = objects.pod(&gang.id.namespace, &member.pod) else {
            continue;
        };
        if pod.is_running() {
            p.running += 1;
        }
        let Some(node) = member.node.as_deref() else {
            continue;
        };
        for (claim, pv) in attachable_claims(pod, objects) {
            needs.push(VolumeNeed {
                pod: member.pod.clone(),
                claim,
                pv,
                node: node.to_owned(),
            });
        }
    }
    p.volumes_needed = u32::try_from(needs.len()).unwrap_or(u32::MAX);
    (p, needs)
}

/// Counts the `needs` attached, and lists their attach errors, from `by_volume`.
fn attach(p: &mut GangProgress, needs: &[VolumeNeed], by_volume: &ByVolume<'_>) {
    p.volumes_attached = 0;
    p.attach_errors.clear();
    for need in needs {
        let Some(pv) = need.pv.as_deref() else {
            continue;
        };
        let Some(va) = by_volume.get(&(pv, need.node.as_str())) else {
            continue;
        };
        let status = va.status.as_ref();
        if status.is_some_and(|s| s.attached) {
            p.volumes_attached += 1;
        } else if let Some(error) = status.and_then(|s| s.attach_error.as_ref()) {
            let message = error.message.as_deref().unwrap_or("attach error");
            p.attach_errors
                .push(format!("{}/{}: {message}", need.pod, need.claim));
        }
    }
    p.attach_errors.sort();
}

fn disrupted_of(
    disrupted: &impl Fn(&str, &str) -> Option<BTreeSet<String>>,
    gang: &Gang,
) -> Vec<String> {
    disrupted(&gang.id.namespace, &gang.id.name)
        .map(|pods| pods.into_iter().collect())
        .unwrap_or_default()
}

/// Progress computed at earlier ticks, reused while its gang is unchanged: the same built
/// gang (the [`GangIndex`] builds a new one when one of its pods, a storage object one of its
/// members' volumes names, or what the clock decides changes; it never changes a gang in
/// place that someone else holds, as this cache does). What changes without the gang
/// changing is read afresh every tick: the VolumeAttachments of the volumes it needs, and the
/// disrupted members. Held by the lifecycle loop between ticks.
#[derive(Debug, Default)]
pub struct ProgressCache {
    pub(super) entries: HashMap<GangRef, Cached>,
}

/// One gang's progress as its members gave it, with the gang it was computed from and the
/// volumes whose attachments complete it.
#[derive(Debug)]
pub(super) struct Cached {
    gang: Arc<Gang>,
    pub(super) progress: GangProgress,
    needs: Vec<VolumeNeed>,
}

impl ProgressCache {
    /// An empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    /// Gangs whose progress is held.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// No progress is held.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// The gang view at `now_unix` and the progress of the gangs of the `open` scale-ups: what one
/// lifecycle tick reads from the [`GangIndex`], under its lock. Its cost is the view's (what
/// changed since the last one) plus, for each open scale-up's gang, a lookup, its attachments
/// and its disrupted members; what its members say is computed again only for the gangs that
/// changed since `cache` saw them.
pub fn open_gang_progress(
    index: &mut GangIndex,
    cache: &mut ProgressCache,
    open: &[Open],
    attachments: &[impl AsRef<VolumeAttachment>],
    now_unix: i64,
) -> (GangView, BTreeMap<GangRef, GangProgress>) {
    let wanted: BTreeSet<(&str, &str)> = open
        .iter()
        .filter_map(|o| o.gang.as_ref())
        .map(|g| (g.namespace.as_str(), g.name.as_str()))
        .collect();
    let view = index.view(now_unix);
    let disrupted = |namespace: &str, name: &str| index.disrupted(namespace, name).cloned();
    let by_volume = by_volume(attachments);
    let mut out = BTreeMap::new();
    let mut kept = HashMap::with_capacity(cache.entries.len());
    for (namespace, name) in wanted {
        // The view is sorted by reference: the gangs of this name are one run of it.
        let start = view.gangs.partition_point(|g| key(g) < (namespace, name));
        for gang in view.gangs[start..]
            .iter()
            .take_while(|g| key(g) == (namespace, name))
        {
            let entry = match cache.entries.remove(&gang.id) {
                Some(c) if Arc::ptr_eq(&c.gang, gang) => c,
                _ => {
                    let (progress, needs) = members_progress(index.objects(), gang);
                    Cached {
                        gang: Arc::clone(gang),
                        progress,
                        needs,
                    }
                }
            };
            let mut p = entry.progress.clone();
            attach(&mut p, &entry.needs, &by_volume);
            p.disrupted = disrupted_of(&disrupted, gang);
            out.insert(gang.id.clone(), p);
            kept.insert(gang.id.clone(), entry);
        }
    }
    cache.entries = kept;
    hold_to_composites(&view, &mut out);
    (view, out)
}

/// A gang's namespace and name: what an open scale-up names it by.
fn key(g: &Arc<Gang>) -> (&str, &str) {
    (g.id.namespace.as_str(), g.id.name.as_str())
}

/// Pods with `DisruptionTarget` True that have not finished, by the (namespace, gang name)
/// they name.
fn disrupted_members(objects: &ObjectSet) -> BTreeMap<(&str, String), BTreeSet<String>> {
    let mut out: BTreeMap<(&str, String), BTreeSet<String>> = BTreeMap::new();
    // A finished pod (e.g. evicted by the kubelet, phase Failed) stays until something deletes
    // it; it says nothing about a later scale-up of its gang.
    for pod in objects
        .pods()
        .filter(|p| p.is_disrupted() && !p.is_terminal())
    {
        if let Some((key, replica)) = link(pod) {
            let (_, name) = gang_name(&key, replica.as_deref());
            out.entry((pod.namespace(), name))
                .or_default()
                .insert(pod.name().to_owned());
        }
    }
    out
}

/// One node group's instances, as the backend and the API server show them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GroupFacts {
    /// The group's registered nodes (without a claim, when [`Self::by_claim`]).
    pub nodes: Vec<NodeProgress>,
    /// Instances the backend lists that are neither failed nor registered as nodes yet
    /// (without a claim, when [`Self::by_claim`]).
    pub pending: u32,
    /// Failed instances, one description each (`<instance>: <code>: <message>`; without a
    /// claim, when [`Self::by_claim`]).
    pub failed: Vec<String>,
    /// The group's backend keeps claims ([`crate::provision::Provisioner::keeps_claims`]):
    /// its instances are attributed by [`Self::claimed`] alone, and the ones without a claim
    /// (requested before claims were kept, or without an audit log) to no scale-up.
    pub by_claim: bool,
    /// With [`Self::by_claim`], the instances of each claim.
    pub claimed: BTreeMap<Claim, Claimed>,
}

/// The instances of one claim, split as [`GroupFacts`] splits a group's.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Claimed {
    /// Registered nodes.
    pub nodes: Vec<NodeProgress>,
    /// Instances neither failed nor registered yet.
    pub pending: u32,
    /// Failed instances, each as `(instance id, "<node name>: <code>: <message>")`.
    pub failed: Vec<(String, String)>,
}

impl Claimed {
    /// Files instance `i` under its nodes, pending or failed instances; an instance being
    /// deleted that has no node is none of them.
    fn add(&mut self, i: Instance, nodes: &NodeTable) {
        if let Some(e) = &i.error {
            self.failed
                .push((i.id, format!("{}: {}: {}", i.node_name, e.code, e.message)));
        } else if let Some(node) = nodes.get(&i.node_name) {
            self.nodes.extend(NodeProgress::of(i.node_name, node));
        } else if i.state != InstanceState::Deleting {
            self.pending += 1;
        }
    }
}

/// A node group's facts from its `instances`, as its backend lists them, and the
/// [`NodeTable`]: failed instances, registered nodes, and instances neither failed nor
/// registered yet (pending). An instance being deleted that has no node is neither. With
/// `by_claim` (the backend keeps claims) each claimed instance is filed under its claim.
pub fn group_facts(instances: Vec<Instance>, nodes: &NodeTable, by_claim: bool) -> GroupFacts {
    let mut unclaimed = Claimed::default();
    let mut claimed: BTreeMap<Claim, Claimed> = BTreeMap::new();
    for mut i in instances {
        match i.claim.take().filter(|_| by_claim) {
            Some(claim) => claimed.entry(claim).or_default().add(i, nodes),
            None => unclaimed.add(i, nodes),
        }
    }
    GroupFacts {
        nodes: unclaimed.nodes,
        pending: unclaimed.pending,
        failed: unclaimed.failed.into_iter().map(|(_, why)| why).collect(),
        by_claim,
        claimed,
    }
}

/// A Node as the lifecycle tracker sees it: name, registration time and readiness. A node
/// without a name or creation time (never so on a real API server) is left out.
pub fn node_progress(node: &Node) -> Option<NodeProgress> {
    NodeProgress::of(node.metadata.name.clone()?, &NodeSummary::of(node))
}

impl NodeProgress {
    /// The node `name` as `summary` has it; `None` without a creation time.
    fn of(name: String, summary: &NodeSummary) -> Option<Self> {
        Some(Self {
            name,
            created_unix: summary.created_unix?,
            ready: summary.ready,
        })
    }
}

#[cfg(test)]
mod tests;
