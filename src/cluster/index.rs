//! [`GangIndex`]: the gang view kept up to date as watch events arrive, instead of rebuilt
//! from every pod per decision.
//!
//! The index owns an [`ObjectSet`] that the watchers change object by object (pods, storage
//! objects, gang objects; a re-list replaces one kind whole) and keeps beside it what the
//! from-scratch join ([`gangs`](super::gangs)) would compute, split so that each event touches
//! only its own part:
//!
//! - per gang object, what its adapter read (its groups and problems), and per group the
//!   candidate definitions from every object naming it: the most preferred version wins, ties
//!   go to the first object in set order, exactly as in the join;
//! - per group, the names of the live pods that link to it, by replica key; the live unlinked
//!   pods waiting for a node; the disrupted pods per gang name;
//! - per pod, its resolved demand, shared between pods with equal demand (an interning table),
//!   kept until the pod changes or, for pods with volumes, until a storage object changes;
//! - per group, the gangs built at the last view, shared with the views handed out
//!   ([`GangView::gangs`] holds `Arc`s), and all of them in view order. An event marks only
//!   its groups dirty; a view rebuilds the dirty groups, moves only their gangs in the order,
//!   and adjusts only the gangs whose view depends on the clock (a True scheduled condition
//!   trusted while fresh, a gang with no creation time);
//! - the problems and ungrouped pending pods of the last view, computed again only when
//!   something they depend on changed (a gang object, a storage object, an unlinked pending
//!   pod, or a group that is not a clean gang).
//!
//! A view therefore costs a copy of the ordered gang list (a pointer each) plus the work of
//! what changed. [`GangIndex::view`] equals [`gangs`](super::gangs) over
//! [`GangIndex::objects`] after any sequence of events; a property test holds it to that.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::{CSIDriver, StorageClass};

use super::adapter::{GroupDef, GroupKey};
use super::gangs::{Known, gang_name, link};
use super::objects::{GangObject, GangObjectKey, ObjectSet, PodSet, StorageKind};
use super::pod::{CompactPod, PodKey};
use super::problem::{Issue, Problem};
use crate::model::{Gang, GangRef, PodDemand};

mod assemble;
mod rebuild;

use assemble::read;

/// What one gang object contributes: its adapter's problems, in reading order, and the
/// groups it is a candidate definition of.
#[derive(Debug)]
struct Readings {
    rank: usize,
    problems: Vec<Problem>,
    keys: Vec<GroupKey>,
}

/// Orders the candidate definitions of one group: the first one wins.
type CandidateKey = (usize, GangObjectKey);

/// A pod's resolved demand.
#[derive(Debug)]
struct Resolved {
    /// The storage generation it was resolved at; `None` for a pod without volumes, whose
    /// demand no storage object changes.
    generation: Option<u64>,
    demand: Arc<PodDemand>,
    issues: Box<[Issue]>,
}

/// A gang as built at the last view, and whether its creation time came from the clock.
#[derive(Debug)]
struct BuiltGang {
    gang: Arc<Gang>,
    created_from_clock: bool,
}

impl BuiltGang {
    /// Whether the view of this gang can change with the clock alone: its creation time is
    /// the clock's, or it trusts a True scheduled condition only while it is fresh.
    fn timed(&self, def: &GroupDef, min_count: u32) -> bool {
        let whole = self.gang.bound_count() >= min_count;
        self.created_from_clock
            || def
                .scheduled
                .is_some_and(|c| c.status && !whole && c.last_transition_unix.is_some())
    }
}

/// The gangs of one group as built at the last view, and the demand problems of their
/// members.
#[derive(Debug)]
struct Built {
    instances: Vec<BuiltGang>,
    problems: Vec<Problem>,
}

/// Where a gang sits in the view: by its reference, then (for two groups giving the same
/// reference) by group and replica, as the join orders them.
type SortKey = (GangRef, GroupKey, usize);

/// The parts of a view besides the gangs: problems and ungrouped pending pods.
#[derive(Debug, Clone, Default)]
struct Extras {
    problems: Vec<Problem>,
    ungrouped: Vec<(String, PodDemand)>,
}

/// Live pods naming one group, by replica key, by name.
type Replicas = BTreeMap<Option<String>, BTreeSet<Box<str>>>;

/// The incrementally maintained gang view; see the module docs. Not synchronised: the
/// cluster view keeps it behind a mutex.
#[derive(Debug, Default)]
pub struct GangIndex {
    objects: ObjectSet,
    readings: BTreeMap<GangObjectKey, Readings>,
    candidates: HashMap<GroupKey, BTreeMap<CandidateKey, Known>>,
    /// Workloads by (namespace, name), with every apiVersion they are served in.
    workloads: BTreeMap<(String, String), BTreeSet<String>>,
    members: HashMap<GroupKey, Replicas>,
    /// Live pods with volumes per group: the groups a storage change dirties.
    volume_members: HashMap<GroupKey, usize>,
    unlinked_pending: BTreeSet<PodKey>,
    disrupted: BTreeMap<(String, String), BTreeSet<String>>,
    resolved: HashMap<PodKey, Resolved>,
    built: HashMap<GroupKey, Built>,
    /// The gangs of every built group, in view order.
    sorted: BTreeMap<SortKey, Arc<Gang>>,
    /// Built groups with a gang whose view depends on the clock ([`BuiltGang::timed`]).
    timed: HashSet<GroupKey>,
    /// The problems and ungrouped pods of the last view, or `None` once something they
    /// depend on changed: a gang object, a storage object, an unlinked pending pod, or a
    /// group that is not a gang (basic policy, unreadable, missing) or whose members have
    /// demand problems.
    extras: Option<Extras>,
    dirty: HashSet<GroupKey>,
    /// Bumped by every storage change.
    generation: u64,
    /// The generation the last view saw.
    generation_seen: u64,
    interner: HashSet<Arc<PodDemand>>,
    interner_floor: usize,
}

impl GangIndex {
    /// An empty index.
    pub fn new() -> Self {
        Self::default()
    }

    /// The objects the index holds, as the watchers last reported them.
    pub fn objects(&self) -> &ObjectSet {
        &self.objects
    }

    /// Distinct member demands held (shared by every pod with that demand).
    pub fn distinct_demands(&self) -> usize {
        self.interner.len()
    }

    /// Pods with `DisruptionTarget` True that have not finished, naming the gang `name` in
    /// `namespace` (including pods being deleted).
    pub fn disrupted(&self, namespace: &str, name: &str) -> Option<&BTreeSet<String>> {
        self.disrupted.get(&(namespace.to_owned(), name.to_owned()))
    }

    // ---- pods ----

    /// A pod was added or changed.
    pub fn apply_pod(&mut self, pod: Arc<CompactPod>) {
        if let Some(old) = self.objects.pod_arc(pod.key()) {
            if Arc::ptr_eq(old, &pod) || **old == *pod {
                return;
            }
            let old = Arc::clone(old);
            self.track_pod(&old, false);
        }
        self.resolved.remove(pod.key());
        self.track_pod(&pod, true);
        self.objects.insert_compact_pod(pod);
    }

    /// A pod was deleted.
    pub fn delete_pod(&mut self, key: &PodKey) {
        if let Some(old) = self.objects.remove_pod(key) {
            self.track_pod(&old, false);
            self.resolved.remove(key);
        }
    }

    /// The pods were listed again: `listed` is every pod now.
    pub(crate) fn replace_pods(&mut self, listed: &PodSet) {
        let gone: Vec<PodKey> = self
            .objects
            .pods()
            .map(|p| p.key())
            .filter(|k| !listed.contains(*k))
            .cloned()
            .collect();
        for key in &gone {
            self.delete_pod(key);
        }
        for entry in listed {
            self.apply_pod(Arc::clone(&entry.0));
        }
    }

    /// Adds `pod` to (or removes it from) the per-group, unlinked and disrupted indexes.
    fn track_pod(&mut self, pod: &CompactPod, add: bool) {
        let linked = link(pod);
        if pod.is_live() {
            match &linked {
                Some((key, replica)) => {
                    let volumes = !pod.demand.volumes.is_empty();
                    self.track_member(key, replica, pod.name(), volumes, add);
                }
                None if pod.node_name().is_none() && !pod.is_gated() => {
                    self.extras = None;
                    if add {
                        self.unlinked_pending.insert(pod.key().clone());
                    } else {
                        self.unlinked_pending.remove(pod.key());
                    }
                }
                None => {}
            }
        }
        if pod.is_disrupted()
            && !pod.is_terminal()
            && let Some((key, replica)) = &linked
        {
            let (_, gang) = gang_name(key, replica.as_deref());
            let slot = (pod.namespace().to_owned(), gang);
            if add {
                self.disrupted
                    .entry(slot)
                    .or_default()
                    .insert(pod.name().to_owned());
            } else if let Some(pods) = self.disrupted.get_mut(&slot) {
                pods.remove(pod.name());
                if pods.is_empty() {
                    self.disrupted.remove(&slot);
                }
            }
        }
    }

    fn track_member(
        &mut self,
        key: &GroupKey,
        replica: &Option<String>,
        name: &str,
        volumes: bool,
        add: bool,
    ) {
        self.dirty.insert(key.clone());
        if add {
            self.members
                .entry(key.clone())
                .or_default()
                .entry(replica.clone())
                .or_default()
                .insert(name.into());
            if volumes {
                *self.volume_members.entry(key.clone()).or_default() += 1;
            }
            return;
        }
        if let Some(replicas) = self.members.get_mut(key) {
            if let Some(names) = replicas.get_mut(replica) {
                names.remove(name);
                if names.is_empty() {
                    replicas.remove(replica);
                }
            }
            if replicas.is_empty() {
                self.members.remove(key);
            }
        }
        if volumes && let Some(count) = self.volume_members.get_mut(key) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                self.volume_members.remove(key);
            }
        }
    }

    // ---- gang objects ----

    /// A gang object was added or changed.
    pub fn apply_gang_object(&mut self, object: GangObject) {
        let key = object.key();
        if self.objects.gang_object(&key) == Some(&object) {
            return;
        }
        self.forget_readings(&key);
        self.extras = None;
        let (readings, candidates) = read(&object);
        for (group, known) in candidates {
            self.dirty.insert(group.clone());
            // Within one object the first reading of a group wins, as in the join.
            self.candidates
                .entry(group)
                .or_default()
                .entry((known.rank, key.clone()))
                .or_insert(known);
        }
        if object.kind() == "Workload" {
            self.workloads
                .entry((object.namespace().to_owned(), object.name().to_owned()))
                .or_default()
                .insert(object.api_version().to_owned());
        }
        self.readings.insert(key, readings);
        self.objects.insert_gang_object(object);
    }

    /// The gang object with identity `key` was deleted.
    pub fn delete_gang_object(&mut self, key: &GangObjectKey) {
        self.forget_readings(key);
        self.extras = None;
        if let Some(object) = self.objects.remove_gang_object(key)
            && object.kind() == "Workload"
        {
            let slot = (object.namespace().to_owned(), object.name().to_owned());
            if let Some(versions) = self.workloads.get_mut(&slot) {
                versions.remove(object.api_version());
                if versions.is_empty() {
                    self.workloads.remove(&slot);
                }
            }
        }
    }

    /// The gang objects of `kind` in `api_version` were listed again: `listed` is every one
    /// of them now.
    pub fn replace_gang_objects(&mut self, api_version: &str, kind: &str, listed: Vec<GangObject>) {
        let keep: HashSet<GangObjectKey> = listed.iter().map(GangObject::key).collect();
        let gone: Vec<GangObjectKey> = self
            .readings
            .keys()
            .filter(|k| k.0 == kind && k.3 == api_version && !keep.contains(*k))
            .cloned()
            .collect();
        for key in &gone {
            self.delete_gang_object(key);
        }
        for object in listed {
            self.apply_gang_object(object);
        }
    }

    fn forget_readings(&mut self, key: &GangObjectKey) {
        let Some(readings) = self.readings.remove(key) else {
            return;
        };
        for group in readings.keys {
            if let Some(candidates) = self.candidates.get_mut(&group) {
                candidates.remove(&(readings.rank, key.clone()));
                if candidates.is_empty() {
                    self.candidates.remove(&group);
                }
            }
            self.dirty.insert(group);
        }
    }

    // ---- storage ----

    /// A PersistentVolumeClaim was added or changed.
    pub fn apply_pvc(&mut self, pvc: PersistentVolumeClaim) {
        let (ns, name) = (pvc.metadata.namespace.clone(), pvc.metadata.name.clone());
        let (ns, name) = (ns.as_deref().unwrap_or("default"), name.unwrap_or_default());
        if self.objects.pvc(ns, &name) != Some(&pvc) {
            self.objects.insert_pvc(pvc);
            self.generation += 1;
        }
    }

    /// A PersistentVolumeClaim was deleted.
    pub fn delete_pvc(&mut self, namespace: &str, name: &str) {
        self.objects.remove_pvc(namespace, name);
        self.generation += 1;
    }

    /// A PersistentVolume was added or changed.
    pub fn apply_pv(&mut self, pv: PersistentVolume) {
        let name = pv.metadata.name.clone().unwrap_or_default();
        if self.objects.pv(&name) != Some(&pv) {
            self.objects.insert_pv(pv);
            self.generation += 1;
        }
    }

    /// A PersistentVolume was deleted.
    pub fn delete_pv(&mut self, name: &str) {
        self.objects.remove_pv(name);
        self.generation += 1;
    }

    /// A StorageClass was added or changed.
    pub fn apply_storage_class(&mut self, class: StorageClass) {
        let name = class.metadata.name.clone().unwrap_or_default();
        if self.objects.storage_class(&name) != Some(&class) {
            self.objects.insert_storage_class(class);
            self.generation += 1;
        }
    }

    /// A StorageClass was deleted.
    pub fn delete_storage_class(&mut self, name: &str) {
        self.objects.remove_storage_class(name);
        self.generation += 1;
    }

    /// A CSIDriver was added or changed.
    pub fn apply_csi_driver(&mut self, driver: CSIDriver) {
        let name = driver.metadata.name.clone().unwrap_or_default();
        if self.objects.csi_driver(&name) != Some(&driver) {
            self.objects.insert_csi_driver(driver);
            self.generation += 1;
        }
    }

    /// A CSIDriver was deleted.
    pub fn delete_csi_driver(&mut self, name: &str) {
        self.objects.remove_csi_driver(name);
        self.generation += 1;
    }

    /// The objects of one storage `kind` were listed again: `listed` holds every one of them
    /// now (its other kinds are ignored).
    pub fn replace_storage(&mut self, kind: StorageKind, mut listed: ObjectSet) {
        self.objects.replace_storage_kind(kind, &mut listed);
        self.generation += 1;
    }
}

#[cfg(test)]
mod tests;
