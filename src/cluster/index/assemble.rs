//! The index's pure steps: what a gang object's adapter reads, building a group's gang from
//! its pods, the clock-dependent adjustments, and demand resolution with its interning table.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use super::super::adapter::{GroupDef, GroupKey, Reading, SchedulingPolicy};
use super::super::adapters;
use super::super::demand::resolve;
use super::super::gangs::{Known, Members, build_gang};
use super::super::objects::{GangObject, ObjectSet};
use super::super::pod::{CompactPod, PodKey};
use super::super::problem::{Issue, ObjectRef, Problem};
use super::super::view::trust_scheduled;
use super::{Built, BuiltGang, CandidateKey, Readings, Replicas, Resolved};
use crate::model::PodDemand;

/// Demand resolution with its cache and the interning table.
pub(super) struct Demands<'a> {
    pub(super) objects: &'a ObjectSet,
    pub(super) resolved: &'a mut HashMap<PodKey, Resolved>,
    pub(super) interner: &'a mut HashSet<Arc<PodDemand>>,
    pub(super) generation: u64,
}

impl Demands<'_> {
    /// The demand of `pod` and the issues found resolving it.
    pub(super) fn of(&mut self, pod: &CompactPod) -> (Arc<PodDemand>, Box<[Issue]>) {
        if let Some(r) = self.resolved.get(pod.key())
            && r.generation.is_none_or(|g| g == self.generation)
        {
            return (Arc::clone(&r.demand), r.issues.clone());
        }
        let (demand, issues) = resolve(pod, self.objects);
        let demand = match self.interner.get(&demand) {
            Some(shared) => Arc::clone(shared),
            None => {
                let shared = Arc::new(demand);
                self.interner.insert(Arc::clone(&shared));
                shared
            }
        };
        let issues = issues.into_boxed_slice();
        let generation = (!pod.demand.volumes.is_empty()).then_some(self.generation);
        self.resolved.insert(
            pod.key().clone(),
            Resolved {
                generation,
                demand: Arc::clone(&demand),
                issues: issues.clone(),
            },
        );
        (demand, issues)
    }
}

/// What `object`'s adapter reads: its problems and the groups it defines (or breaks).
pub(super) fn read(object: &GangObject) -> (Readings, Vec<(GroupKey, Known)>) {
    let source = ObjectRef::new(
        Some(object.api_version()),
        object.kind(),
        object.namespace(),
        object.name(),
    );
    let known = |rank, state| Known {
        rank,
        api_version: object.api_version().to_owned(),
        kind: object.kind().to_owned(),
        state,
    };
    let mut problems = Vec::new();
    let mut candidates = Vec::new();
    let Some((rank, adapter)) = adapters::for_api_version(object.api_version()) else {
        problems.push(Problem::new(source, Issue::UnsupportedApiVersion));
        if object.kind() == "PodGroup" {
            let key = GroupKey::PodGroup {
                namespace: object.namespace().to_owned(),
                name: object.name().to_owned(),
            };
            candidates.push((key, known(usize::MAX, Err(0))));
        }
        return (readings(usize::MAX, problems, &candidates), candidates);
    };
    for reading in adapter.read(object) {
        match reading {
            Reading::Group(def) => candidates.push((def.key.clone(), known(rank, Ok(def)))),
            Reading::Broken { key, issue } => {
                candidates.push((key, known(rank, Err(problems.len()))));
                problems.push(Problem::new(source.clone(), issue));
            }
            Reading::Problem(issue) => problems.push(Problem::new(source.clone(), issue)),
            // Read by the composite pass.
            Reading::Composite(_) => {}
        }
    }
    (readings(rank, problems, &candidates), candidates)
}

fn readings(rank: usize, problems: Vec<Problem>, candidates: &[(GroupKey, Known)]) -> Readings {
    Readings {
        rank,
        problems,
        keys: candidates.iter().map(|(k, _)| k.clone()).collect(),
    }
}

/// The gangs of one group: one per replica key pods name, or one empty gang.
pub(super) fn build(
    demands: &mut Demands<'_>,
    known: &Known,
    def: &GroupDef,
    min_count: u32,
    replicas: Option<&Replicas>,
    now_unix: i64,
) -> Built {
    let mut problems = Vec::new();
    let mut instances = Vec::new();
    let namespace = group_namespace(&def.key);
    let empty = BTreeSet::new();
    let each: Vec<(Option<&str>, &BTreeSet<Box<str>>)> = match replicas {
        Some(r) => r.iter().map(|(k, names)| (k.as_deref(), names)).collect(),
        None => vec![(None, &empty)],
    };
    for (replica, names) in each {
        let mut members: Members<'_> = Vec::with_capacity(names.len());
        for name in names {
            let key = PodKey {
                namespace: namespace.into(),
                name: name.clone(),
            };
            let Some(pod) = demands.objects.pod_arc(&key) else {
                continue;
            };
            let (demand, issues) = demands.of(pod);
            problems.extend(pod_problems(pod, &issues));
            members.push((pod.as_ref(), demand));
        }
        let first_pod = members.iter().filter_map(|(p, _)| p.created_unix()).min();
        let created_from_clock = def.created_unix.is_none() && first_pod.is_none();
        let gang = build_gang(known, def, min_count, replica, members, now_unix);
        instances.push(BuiltGang {
            gang: Arc::new(gang),
            created_from_clock,
        });
    }
    Built {
        instances,
        problems,
    }
}

/// Brings what depends on the clock up to `now_unix`: whether the scheduled condition is
/// still trusted, and the creation time of a gang that has none. Whether the gang changed.
pub(super) fn adjust(
    instance: &mut BuiltGang,
    def: &GroupDef,
    min_count: u32,
    now_unix: i64,
) -> bool {
    let bound = usize::try_from(instance.gang.bound_count()).unwrap_or(usize::MAX);
    let scheduled = def
        .scheduled
        .is_some_and(|c| trust_scheduled(c, bound, min_count, now_unix));
    let clock = instance.created_from_clock && instance.gang.created_unix != now_unix;
    if instance.gang.scheduled == scheduled && !clock {
        return false;
    }
    // `sorted` holds a clone, so this copies: a gang handed out in a view never changes.
    let gang = Arc::make_mut(&mut instance.gang);
    gang.scheduled = scheduled;
    if instance.created_from_clock {
        gang.created_unix = now_unix;
    }
    true
}

/// The winning definition of `group` when it is a gang: its reading, definition and
/// `minCount`.
pub(super) fn gang_def<'a>(
    candidates: &'a HashMap<GroupKey, BTreeMap<CandidateKey, Known>>,
    group: &GroupKey,
) -> Option<(&'a Known, &'a GroupDef, u32)> {
    let (_, known) = candidates.get(group)?.first_key_value()?;
    match &known.state {
        Ok(def) => match def.policy {
            SchedulingPolicy::Gang { min_count } => Some((known, def, min_count)),
            SchedulingPolicy::Basic => None,
        },
        Err(_) => None,
    }
}

fn group_namespace(key: &GroupKey) -> &str {
    match key {
        GroupKey::PodGroup { namespace, .. } | GroupKey::WorkloadPodGroup { namespace, .. } => {
            namespace
        }
    }
}

/// The live pods naming `group`, in every replica.
pub(super) fn replica_pods<'a>(
    objects: &'a ObjectSet,
    group: &'a GroupKey,
    replicas: Option<&'a Replicas>,
) -> impl Iterator<Item = &'a CompactPod> + 'a {
    let namespace = group_namespace(group);
    replicas
        .into_iter()
        .flat_map(|r| r.values())
        .flatten()
        .filter_map(move |name| {
            let key = PodKey {
                namespace: namespace.into(),
                name: name.clone(),
            };
            objects.pod_arc(&key).map(AsRef::as_ref)
        })
}

pub(super) fn full_name(pod: &CompactPod) -> String {
    format!("{}/{}", pod.namespace(), pod.name())
}

pub(super) fn pod_problems<'a>(
    pod: &'a CompactPod,
    issues: &'a [Issue],
) -> impl Iterator<Item = Problem> + 'a {
    issues.iter().map(move |issue| {
        let object = ObjectRef::new(Some("v1"), "Pod", pod.namespace(), pod.name());
        Problem::new(object, issue.clone())
    })
}
