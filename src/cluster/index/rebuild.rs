//! Building the view: the dirty groups rebuilt, the clock-dependent gangs adjusted, and the
//! problems and ungrouped pods computed again when something they depend on changed.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use super::super::adapter::{GroupKey, SchedulingPolicy};
use super::super::composites;
use super::super::gangs::missing_ref;
use super::super::objects::GangObjectKey;
use super::super::problem::{Issue, ObjectRef, Problem};
use super::super::view::GangView;
use super::assemble::{Demands, adjust, build, full_name, gang_def, pod_problems, replica_pods};
use super::{Extras, GangIndex};
use crate::model::{Gang, PodDemand};

impl GangIndex {
    /// The gang view now: equal to [`gangs`](super::super::gangs) over [`GangIndex::objects`] at
    /// `now_unix`, built from what changed since the last call.
    pub fn view(&mut self, now_unix: i64) -> GangView {
        if self.generation_seen != self.generation {
            self.dirty.extend(self.volume_members.keys().cloned());
            self.generation_seen = self.generation;
            self.extras = None;
        }
        let dirty = std::mem::take(&mut self.dirty);
        for key in &dirty {
            self.unbuild(key);
        }
        let Self {
            objects,
            candidates,
            members,
            resolved,
            built,
            sorted,
            timed,
            extras,
            generation,
            interner,
            ..
        } = self;
        let mut demands = Demands {
            objects,
            resolved,
            interner,
            generation: *generation,
        };
        for key in &dirty {
            let Some((known, def, min_count)) = gang_def(candidates, key) else {
                // Not a gang: what it gives is in the extras.
                *extras = None;
                continue;
            };
            let b = build(
                &mut demands,
                known,
                def,
                min_count,
                members.get(key),
                now_unix,
            );
            if !b.problems.is_empty() {
                *extras = None;
            }
            for (i, instance) in b.instances.iter().enumerate() {
                let at = (instance.gang.id.clone(), key.clone(), i);
                sorted.insert(at, Arc::clone(&instance.gang));
            }
            if b.instances.iter().any(|i| i.timed(def, min_count)) {
                timed.insert(key.clone());
            }
            built.insert(key.clone(), b);
        }
        for key in timed.iter() {
            let (Some(b), Some((_, def, min_count))) =
                (built.get_mut(key), gang_def(candidates, key))
            else {
                continue;
            };
            for (i, instance) in b.instances.iter_mut().enumerate() {
                if adjust(instance, def, min_count, now_unix) {
                    let at = (instance.gang.id.clone(), key.clone(), i);
                    sorted.insert(at, Arc::clone(&instance.gang));
                }
            }
        }
        let gangs: Vec<Arc<Gang>> = sorted.values().cloned().collect();
        let extras = match &self.extras {
            Some(e) => e.clone(),
            None => {
                let e = self.extras_now();
                self.extras = Some(e.clone());
                e
            }
        };
        self.trim_interner();
        let mut view = GangView {
            gangs,
            ungrouped_pending: extras.ungrouped,
            problems: extras.problems,
            composites: Vec::new(),
            idle: std::collections::BTreeMap::new(),
        };
        composites::attach(&mut view, &self.objects, now_unix);
        view
    }

    /// Forgets what the last view built for the group `key`.
    fn unbuild(&mut self, key: &GroupKey) {
        self.timed.remove(key);
        let Some(old) = self.built.remove(key) else {
            return;
        };
        if !old.problems.is_empty() {
            self.extras = None;
        }
        for (i, instance) in old.instances.into_iter().enumerate() {
            self.sorted
                .remove(&(instance.gang.id.clone(), key.clone(), i));
        }
    }

    /// The problems and ungrouped pending pods, from every group (the gangs' demand problems
    /// as their last build found them), gang object and unlinked pod.
    fn extras_now(&mut self) -> Extras {
        let Self {
            objects,
            readings,
            candidates,
            workloads,
            members,
            unlinked_pending,
            resolved,
            built,
            generation,
            interner,
            ..
        } = self;
        let mut demands = Demands {
            objects,
            resolved,
            interner,
            generation: *generation,
        };
        // The problems of gang objects, and where each landed (held-out pods are added).
        let mut problems = Vec::new();
        let mut position: HashMap<(&GangObjectKey, usize), usize> = HashMap::new();
        for (key, r) in readings.iter() {
            for (i, p) in r.problems.iter().enumerate() {
                position.insert((key, i), problems.len());
                problems.push(p.clone());
            }
        }
        let mut ungrouped = Vec::new();
        for (group, defs) in candidates.iter() {
            let Some(((_, object), known)) = defs.first_key_value() else {
                continue;
            };
            let replicas = members.get(group);
            match &known.state {
                Ok(def) => match def.policy {
                    SchedulingPolicy::Gang { .. } => {
                        if let Some(b) = built.get(group) {
                            problems.extend(b.problems.iter().cloned());
                        }
                    }
                    SchedulingPolicy::Basic => {
                        for pod in replica_pods(demands.objects, group, replicas) {
                            if pod.node_name().is_none() && !pod.is_gated() {
                                let (demand, issues) = demands.of(pod);
                                problems.extend(pod_problems(pod, &issues));
                                ungrouped.push((full_name(pod), PodDemand::clone(&demand)));
                            }
                        }
                    }
                },
                Err(index) => {
                    if let Some(&at) = position.get(&(object, *index)) {
                        let held = &mut problems[at].held_out;
                        held.extend(replica_pods(demands.objects, group, replicas).map(full_name));
                    }
                }
            }
        }
        let mut missing: BTreeMap<(ObjectRef, Issue), Vec<String>> = BTreeMap::new();
        for (group, replicas) in members.iter() {
            if candidates.contains_key(group) {
                continue;
            }
            let slot = missing_ref(group, |namespace, workload| {
                workloads
                    .get(&(namespace.to_owned(), workload.to_owned()))
                    .and_then(|v| v.last())
                    .map(String::as_str)
            });
            missing
                .entry(slot)
                .or_default()
                .extend(replica_pods(demands.objects, group, Some(replicas)).map(full_name));
        }
        for key in unlinked_pending.iter() {
            if let Some(pod) = demands.objects.pod_arc(key) {
                let (demand, issues) = demands.of(pod);
                problems.extend(pod_problems(pod, &issues));
                ungrouped.push((full_name(pod), PodDemand::clone(&demand)));
            }
        }
        for ((object, issue), pods) in missing {
            let mut problem = Problem::new(object, issue);
            problem.held_out = pods;
            problems.push(problem);
        }
        for problem in &mut problems {
            problem.held_out.sort();
        }
        problems.sort();
        ungrouped.sort_by(|a, b| a.0.cmp(&b.0));
        Extras {
            problems,
            ungrouped,
        }
    }

    /// Drops interned demands no pod holds any more, once the table has doubled.
    fn trim_interner(&mut self) {
        if self.interner.len() > 2 * self.interner_floor.max(64) {
            self.interner.retain(|d| Arc::strong_count(d) > 1);
            self.interner_floor = self.interner.len();
        }
    }
}
