//! [`gangs`]: the version-free join of pods to the groups the adapters read, giving the
//! internal [`Gang`]s, the ungrouped pending pods and every [`Problem`] found on the way.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::adapter::{GroupDef, GroupKey, Reading, SchedulingPolicy};
use super::adapters;
use super::demand::resolve;
use super::objects::ObjectSet;
use super::pod::{CompactPod, PodLink};
use super::problem::{Issue, ObjectRef, Problem};
use super::view::{GangView, trust_scheduled};
use crate::model::{Gang, GangRef, Member, PodDemand};

/// Builds the gang view of `objects` at `now_unix` (used to age scheduled conditions, see
/// [`SCHEDULED_GRACE_SECS`](super::SCHEDULED_GRACE_SECS), and as the creation time of
/// objects that lack one).
///
/// Only live pods count: not `Succeeded`/`Failed` and not being deleted. A pod naming a
/// group that does not exist (yet), or whose object is unreadable or of an unsupported
/// version, is held out of both lists and named in a [`Problem`]: it belongs to a gang we
/// cannot see, and the scheduler will not place it alone either.
pub fn gangs(objects: &ObjectSet, now_unix: i64) -> GangView {
    let mut join = Join::default();
    join.read_groups(objects);
    join.join_pods(objects);
    let mut view = join.finish(now_unix);
    super::composites::attach(&mut view, objects, now_unix);
    view
}

/// Member pods of one gang instance, with their demand.
pub(super) type Members<'a> = Vec<(&'a CompactPod, Arc<PodDemand>)>;

/// A group as known after reading every object: the most preferred version wins.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Known {
    pub rank: usize,
    pub api_version: String,
    pub kind: String,
    /// The group, or the index of the problem that makes it unreadable.
    pub state: Result<GroupDef, usize>,
}

#[derive(Default)]
struct Join<'a> {
    groups: BTreeMap<GroupKey, Known>,
    /// Workloads seen, by (namespace, name), with their apiVersion.
    workloads: BTreeMap<(String, String), String>,
    problems: Vec<Problem>,
    /// Members per gang instance (group key, replica key).
    buckets: BTreeMap<(GroupKey, Option<String>), Members<'a>>,
    /// Pods naming a group that does not exist.
    missing: BTreeMap<(ObjectRef, Issue), Vec<String>>,
    ungrouped: Vec<(String, PodDemand)>,
}

impl<'a> Join<'a> {
    fn read_groups(&mut self, objects: &ObjectSet) {
        for object in objects.gang_objects() {
            let source = ObjectRef::new(
                Some(object.api_version()),
                object.kind(),
                object.namespace(),
                object.name(),
            );
            if object.kind() == "Workload" {
                self.workloads.insert(
                    (object.namespace().to_owned(), object.name().to_owned()),
                    object.api_version().to_owned(),
                );
            }
            let Some((rank, adapter)) = adapters::for_api_version(object.api_version()) else {
                let index = self.problem(source, Issue::UnsupportedApiVersion);
                if object.kind() == "PodGroup" {
                    // Pods naming it are held out as "unsupported", not "missing".
                    let key = GroupKey::PodGroup {
                        namespace: object.namespace().to_owned(),
                        name: object.name().to_owned(),
                    };
                    self.know(
                        key,
                        usize::MAX,
                        object.api_version(),
                        "PodGroup",
                        Err(index),
                    );
                }
                continue;
            };
            for reading in adapter.read(object) {
                match reading {
                    Reading::Group(def) => {
                        let key = def.key.clone();
                        self.know(key, rank, object.api_version(), object.kind(), Ok(def));
                    }
                    Reading::Broken { key, issue } => {
                        let index = self.problem(source.clone(), issue);
                        self.know(key, rank, object.api_version(), object.kind(), Err(index));
                    }
                    Reading::Problem(issue) => {
                        self.problem(source.clone(), issue);
                    }
                    // Read by the composite pass.
                    Reading::Composite(_) => {}
                }
            }
        }
    }

    fn problem(&mut self, object: ObjectRef, issue: Issue) -> usize {
        self.problems.push(Problem::new(object, issue));
        self.problems.len() - 1
    }

    fn know(
        &mut self,
        key: GroupKey,
        rank: usize,
        api_version: &str,
        kind: &str,
        state: Result<GroupDef, usize>,
    ) {
        if self.groups.get(&key).is_some_and(|k| k.rank <= rank) {
            return;
        }
        let known = Known {
            rank,
            api_version: api_version.to_owned(),
            kind: kind.to_owned(),
            state,
        };
        self.groups.insert(key, known);
    }

    fn join_pods(&mut self, objects: &'a ObjectSet) {
        for pod in objects.pods() {
            if !pod.is_live() {
                continue;
            }
            let full_name = format!("{}/{}", pod.namespace(), pod.name());
            let Some((key, replica)) = link(pod) else {
                self.ungrouped(objects, pod, full_name);
                continue;
            };
            let found = self.groups.get(&key).map(|k| match &k.state {
                Ok(def) => Ok(def.policy),
                Err(index) => Err(*index),
            });
            match found {
                Some(Ok(SchedulingPolicy::Basic)) => self.ungrouped(objects, pod, full_name),
                Some(Ok(SchedulingPolicy::Gang { .. })) => {
                    let demand = Arc::new(self.demand(objects, pod));
                    self.buckets
                        .entry((key, replica))
                        .or_default()
                        .push((pod, demand));
                }
                Some(Err(index)) => self.problems[index].held_out.push(full_name),
                None => {
                    let missing = self.missing_ref(&key);
                    self.missing.entry(missing).or_default().push(full_name);
                }
            }
        }
    }

    fn ungrouped(&mut self, objects: &ObjectSet, pod: &CompactPod, full_name: String) {
        // A gated pod is not tried by the scheduler (nor by Cluster Autoscaler) until its
        // gates are removed.
        if pod.node_name().is_none() && !pod.is_gated() {
            let demand = self.demand(objects, pod);
            self.ungrouped.push((full_name, demand));
        }
    }

    fn demand(&mut self, objects: &ObjectSet, pod: &CompactPod) -> PodDemand {
        let (demand, issues) = resolve(pod, objects);
        for issue in issues {
            let object = ObjectRef::new(Some("v1"), "Pod", pod.namespace(), pod.name());
            self.problem(object, issue);
        }
        demand
    }

    /// The problem for pods naming a group nobody defines.
    fn missing_ref(&self, key: &GroupKey) -> (ObjectRef, Issue) {
        missing_ref(key, |namespace, workload| {
            self.workloads
                .get(&(namespace.to_owned(), workload.to_owned()))
                .map(String::as_str)
        })
    }

    fn finish(mut self, now_unix: i64) -> GangView {
        let mut gangs = Vec::new();
        let mut buckets = std::mem::take(&mut self.buckets);
        for (key, known) in &self.groups {
            let Ok(def) = &known.state else { continue };
            let SchedulingPolicy::Gang { min_count } = def.policy else {
                continue;
            };
            // Every instance pods formed; a group no pod names yet is one empty gang.
            let mut instances: Vec<(Option<String>, Members<'_>)> = Vec::new();
            let replicas: BTreeSet<Option<String>> = buckets
                .keys()
                .filter(|(k, _)| k == key)
                .map(|(_, r)| r.clone())
                .collect();
            for replica in replicas {
                let members = buckets
                    .remove(&(key.clone(), replica.clone()))
                    .unwrap_or_default();
                instances.push((replica, members));
            }
            if instances.is_empty() {
                instances.push((None, Vec::new()));
            }
            for (replica, members) in instances {
                gangs.push(Arc::new(build_gang(
                    known,
                    def,
                    min_count,
                    replica.as_deref(),
                    members,
                    now_unix,
                )));
            }
        }
        for ((object, issue), mut pods) in self.missing {
            pods.sort();
            let mut problem = Problem::new(object, issue);
            problem.held_out = pods;
            self.problems.push(problem);
        }
        for problem in &mut self.problems {
            problem.held_out.sort();
        }
        gangs.sort_by(|a, b| a.id.cmp(&b.id));
        self.problems.sort();
        self.ungrouped.sort_by(|a, b| a.0.cmp(&b.0));
        GangView {
            gangs,
            ungrouped_pending: self.ungrouped,
            problems: self.problems,
            composites: Vec::new(),
            idle: std::collections::BTreeMap::new(),
        }
    }
}

/// The problem for pods naming a group nobody defines; `workload_api` gives the apiVersion of
/// the Workload `namespace/name` when one exists.
pub(super) fn missing_ref<'w>(
    key: &GroupKey,
    workload_api: impl Fn(&str, &str) -> Option<&'w str>,
) -> (ObjectRef, Issue) {
    match key {
        GroupKey::PodGroup { namespace, name } => (
            ObjectRef::new(None, "PodGroup", namespace, name),
            Issue::GroupNotFound,
        ),
        GroupKey::WorkloadPodGroup {
            namespace,
            workload,
            pod_group,
        } => match workload_api(namespace, workload) {
            Some(api_version) => (
                ObjectRef::new(Some(api_version), "Workload", namespace, workload),
                Issue::PodGroupNotInWorkload {
                    pod_group: pod_group.clone(),
                },
            ),
            None => (
                ObjectRef::new(None, "Workload", namespace, workload),
                Issue::GroupNotFound,
            ),
        },
    }
}

pub(super) fn build_gang(
    known: &Known,
    def: &GroupDef,
    min_count: u32,
    replica: Option<&str>,
    mut members: Members<'_>,
    now_unix: i64,
) -> Gang {
    members.sort_by(|a, b| a.0.name().cmp(b.0.name()));
    let (namespace, name) = gang_name(&def.key, replica);
    // Without a group priority (the field is feature-gated), the pods' resolved priority is
    // what the scheduler orders by.
    let priority = def
        .priority
        .or_else(|| members.iter().filter_map(|(p, _)| p.priority()).max())
        .unwrap_or(0);
    let first_pod = members.iter().filter_map(|(p, _)| p.created_unix()).min();
    // A replica gang comes into being with its first pod, not with its (older) Workload.
    let created_unix = if replica.is_some() {
        def.created_unix.max(first_pod)
    } else {
        def.created_unix.or(first_pod)
    }
    .unwrap_or(now_unix);
    let members: Vec<Member> = members
        .into_iter()
        .map(|(pod, demand)| Member {
            pod: pod.name().to_owned(),
            node: pod.node_name().map(str::to_owned),
            demand,
            verdict: pod.has_verdict(),
            scheduler_name: pod.scheduler_name().map(str::to_owned),
        })
        .collect();
    let bound = members.iter().filter(|m| m.node.is_some()).count();
    let scheduled = def
        .scheduled
        .is_some_and(|c| trust_scheduled(c, bound, min_count, now_unix));
    Gang {
        id: GangRef {
            namespace,
            name,
            api_version: known.api_version.clone(),
            kind: known.kind.clone(),
        },
        min_count,
        members,
        priority,
        created_unix,
        topology_key: def.topology_key.clone(),
        scheduled,
        composite: def.parent.clone(),
    }
}

/// Namespace and [`GangRef::name`] of the gang instance `replica` of group `key`.
pub(crate) fn gang_name(key: &GroupKey, replica: Option<&str>) -> (String, String) {
    match key {
        GroupKey::PodGroup { namespace, name } => (namespace.clone(), name.clone()),
        GroupKey::WorkloadPodGroup {
            namespace,
            workload,
            pod_group,
        } => (
            namespace.clone(),
            GangRef::workload_gang_name(workload, pod_group, replica),
        ),
    }
}

/// The group a pod names and its replica key: `spec.schedulingGroup.podGroupName` (1.36+),
/// else `spec.workloadRef` (1.35).
pub(crate) fn link(pod: &CompactPod) -> Option<(GroupKey, Option<String>)> {
    let namespace = pod.namespace().to_owned();
    match pod.link()? {
        PodLink::PodGroup(name) => Some((
            GroupKey::PodGroup {
                namespace,
                name: name.to_string(),
            },
            None,
        )),
        PodLink::Workload {
            name,
            pod_group,
            replica_key,
        } => Some((
            GroupKey::WorkloadPodGroup {
                namespace,
                workload: name.to_string(),
                pod_group: pod_group.to_string(),
            },
            replica_key.as_deref().map(str::to_owned),
        )),
    }
}
