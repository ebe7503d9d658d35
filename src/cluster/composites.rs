//! [`attach`]: the composite pass over a gang view. CompositePodGroups (1.37 `v1alpha3`, 1.38
//! `v1beta1`) with a gang policy become [`Composite`]s holding the child gangs that name them
//! in `spec.parentCompositePodGroupName`. The same pass serves the from-scratch join
//! ([`gangs`](super::gangs())) and the incremental [`GangIndex`](super::GangIndex), so both
//! give the same view.
//!
//! - A composite is read from its most preferred version (the adapters' order), as groups are.
//! - A child naming a parent that is no CompositePodGroup at all is reported
//!   ([`Issue::ParentCompositeMissing`]) and stays a gang on its own; a child of a composite
//!   with the basic policy is a gang on its own without a problem.
//! - A composite nested in another is reported ([`Issue::CompositeNested`]); it is still
//!   admitted as one unit of its PodGroup children.
//! - Priority: the composite's `spec.priority`, else its children's highest, else 0. Creation:
//!   its own, else its oldest child's, else `now`. Its scheduled condition is trusted as a
//!   PodGroup's is ([`SCHEDULED_GRACE_SECS`](super::SCHEDULED_GRACE_SECS)), counting formed
//!   children against `minGroupCount`.

use std::collections::{BTreeMap, BTreeSet};

use super::adapter::{CompositeDef, Reading};
use super::adapters;
use super::objects::ObjectSet;
use super::problem::{Issue, ObjectRef, Problem};
use super::view::{GangView, trust_scheduled};
use crate::model::{Composite, GangRef};

const KIND: &str = "CompositePodGroup";

/// Fills `view.composites` from the CompositePodGroups in `objects` and the gangs of `view`,
/// and adds the problems found on the way (the problems stay sorted).
pub(super) fn attach(view: &mut GangView, objects: &ObjectSet, now_unix: i64) {
    // (namespace, name) -> (rank, apiVersion, definition); every composite object's name.
    let mut defs: BTreeMap<(String, String), (usize, String, CompositeDef)> = BTreeMap::new();
    let mut named: BTreeSet<(&str, &str)> = BTreeSet::new();
    for object in objects.gang_objects_of_kind(KIND) {
        named.insert((object.namespace(), object.name()));
        let Some((rank, adapter)) = adapters::for_api_version(object.api_version()) else {
            continue;
        };
        for reading in adapter.read(object) {
            let Reading::Composite(def) = reading else {
                continue;
            };
            let key = (def.namespace.clone(), def.name.clone());
            if defs.get(&key).is_some_and(|(r, _, _)| *r <= rank) {
                continue;
            }
            defs.insert(key, (rank, object.api_version().to_owned(), def));
        }
    }
    let mut children: BTreeMap<(String, String), Vec<usize>> = BTreeMap::new();
    let mut problems = Vec::new();
    for (i, gang) in view.gangs.iter().enumerate() {
        let Some(parent) = gang.composite.as_deref() else {
            continue;
        };
        let key = (gang.id.namespace.clone(), parent.to_owned());
        if defs.contains_key(&key) {
            children.entry(key).or_default().push(i);
        } else if !named.contains(&(gang.id.namespace.as_str(), parent)) {
            let object = ObjectRef::new(
                Some(&gang.id.api_version),
                &gang.id.kind,
                &gang.id.namespace,
                &gang.id.name,
            );
            let issue = Issue::ParentCompositeMissing {
                composite: parent.to_owned(),
            };
            let problem = Problem::new(object, issue);
            if !problems.contains(&problem) {
                problems.push(problem);
            }
        }
    }
    let mut composites = Vec::with_capacity(defs.len());
    for (key, (_, api_version, def)) in defs {
        let members: Vec<_> = children
            .remove(&key)
            .unwrap_or_default()
            .into_iter()
            .map(|i| &view.gangs[i])
            .collect();
        if let Some(parent) = &def.parent {
            let object = ObjectRef::new(Some(&api_version), KIND, &def.namespace, &def.name);
            problems.push(Problem::new(
                object,
                Issue::CompositeNested {
                    parent: parent.clone(),
                },
            ));
        }
        let priority = def
            .priority
            .or_else(|| members.iter().map(|g| g.priority).max())
            .unwrap_or(0);
        let created_unix = def
            .created_unix
            .or_else(|| members.iter().map(|g| g.created_unix).min())
            .unwrap_or(now_unix);
        let formed = members.iter().filter(|g| g.is_formed()).count();
        let scheduled = def
            .scheduled
            .is_some_and(|c| trust_scheduled(c, formed, def.min_group_count, now_unix));
        composites.push(Composite {
            id: GangRef {
                namespace: def.namespace,
                name: def.name,
                api_version,
                kind: KIND.to_owned(),
            },
            min_group_count: def.min_group_count,
            children: members.iter().map(|g| g.id.clone()).collect(),
            priority,
            created_unix,
            topology_key: def.topology_key,
            scheduled,
        });
    }
    view.composites = composites;
    if !problems.is_empty() {
        view.problems.extend(problems);
        view.problems.sort();
    }
}
