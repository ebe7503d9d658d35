//! Adapter and snapshot tests over real-looking objects, one fixture directory per API
//! version under `tests/fixtures/gangs/`.

use super::*;
use crate::model::Gang;

mod props;

/// 2026-09-01T12:00:00Z.
const NOW: i64 = 1_788_264_000;

const V1ALPHA1: &str = include_str!("../../tests/fixtures/gangs/v1alpha1/gangs.yaml");
const V1ALPHA1_PARTIAL: &str = include_str!("../../tests/fixtures/gangs/v1alpha1/partial.yaml");
const V1ALPHA2: &str = include_str!("../../tests/fixtures/gangs/v1alpha2/gangs.yaml");
const V1ALPHA2_PARTIAL: &str = include_str!("../../tests/fixtures/gangs/v1alpha2/partial.yaml");
const V1ALPHA3: &str = include_str!("../../tests/fixtures/gangs/v1alpha3/gangs.yaml");
const V1BETA1: &str = include_str!("../../tests/fixtures/gangs/v1beta1/gangs.yaml");

fn view(yaml: &str) -> GangView {
    let objects = ObjectSet::from_yaml_documents(yaml).unwrap();
    gangs(&objects, NOW)
}

fn gang<'a>(view: &'a GangView, namespace: &str, name: &str) -> &'a Gang {
    view.gangs
        .iter()
        .find(|g| g.id.namespace == namespace && g.id.name == name)
        .unwrap_or_else(|| {
            let ids: Vec<String> = view.gangs.iter().map(|g| g.id.to_string()).collect();
            panic!("no gang {namespace}/{name} in {ids:?}")
        })
}

fn gang_names(view: &GangView) -> Vec<String> {
    view.gangs.iter().map(|g| g.id.to_string()).collect()
}

fn problems_about<'a>(view: &'a GangView, kind: &str, name: &str) -> Vec<&'a Problem> {
    view.problems
        .iter()
        .filter(|p| p.object.kind == kind && p.object.name == name)
        .collect()
}

fn only_problem<'a>(view: &'a GangView, kind: &str, name: &str) -> &'a Problem {
    match problems_about(view, kind, name).as_slice() {
        [one] => one,
        other => panic!("expected one problem about {kind} {name}, got {other:?}"),
    }
}

fn ungrouped_names(view: &GangView) -> Vec<&str> {
    view.ungrouped_pending
        .iter()
        .map(|(n, _)| n.as_str())
        .collect()
}

fn member_names(gang: &Gang) -> Vec<&str> {
    gang.members.iter().map(|m| m.pod.as_str()).collect()
}

// ---- v1alpha1 (1.35) ----

#[test]
fn workload_pod_group_becomes_a_gang_with_bound_and_unbound_members() {
    let view = view(V1ALPHA1);
    let g = gang(&view, "ml", "train/workers");
    assert_eq!(g.id.kind, "Workload");
    assert_eq!(g.id.api_version, "scheduling.k8s.io/v1alpha1");
    assert_eq!(g.min_count, 4);
    // The failed earlier attempt is not a member.
    assert_eq!(
        member_names(g),
        [
            "train-workers-0",
            "train-workers-1",
            "train-workers-2",
            "train-workers-3"
        ]
    );
    assert_eq!(g.bound_count(), 2);
    assert_eq!(g.members[0].node.as_deref(), Some("gpu-a-0"));
    let unbound: Vec<&str> = g.unbound().map(|m| m.pod.as_str()).collect();
    assert_eq!(unbound, ["train-workers-2", "train-workers-3"]);
    assert_eq!(g.members[2].demand.extended["nvidia.com/gpu"], 8);
    assert_eq!(g.members[2].demand.cpu_milli, 32_000);
    // v1alpha1 has no priority field: the pods' resolved priority stands in.
    assert_eq!(g.priority, 1000);
    assert_eq!(g.created_unix, 1_768_035_600);
    assert_eq!(g.topology_key, None);
    assert!(!g.scheduled);
    assert!(g.is_pending());
}

#[test]
fn replica_keys_split_a_workload_pod_group_into_one_gang_each() {
    let view = view(V1ALPHA1);
    let a = gang(&view, "ml", "sweep/trial/a");
    let b = gang(&view, "ml", "sweep/trial/b");
    assert_eq!(member_names(a), ["sweep-a-0", "sweep-a-1"]);
    assert_eq!(member_names(b), ["sweep-b-0"]);
    assert_eq!((a.min_count, b.min_count), (2, 2));
    // A replica gang is as old as its first pod, not as its Workload.
    assert_eq!(a.created_unix, 1_768_041_000);
    assert!(
        !view.gangs.iter().any(|g| g.id.name == "sweep/trial"),
        "no gang without a replica key: {:?}",
        gang_names(&view)
    );
}

#[test]
fn basic_pod_groups_and_unlinked_pods_are_ungrouped_when_unbound_and_ungated() {
    let view = view(V1ALPHA1);
    // Not the running dashboard, not the gated pod, not gang members.
    assert_eq!(
        ungrouped_names(&view),
        ["ml/notebook", "ml/train-coordinator"]
    );
    assert_eq!(view.ungrouped_pending[0].1.cpu_milli, 2000);
    assert!(!view.gangs.iter().any(|g| g.id.name == "train/coordinator"));
    assert_eq!(view.problems, []);
}

#[test]
fn pods_naming_a_workload_that_does_not_exist_yet_are_held_out_with_one_problem() {
    let view = view(V1ALPHA1_PARTIAL);
    let p = only_problem(&view, "Workload", "later");
    assert_eq!(p.issue, Issue::GroupNotFound);
    assert_eq!(p.object.api_version, None);
    assert_eq!(p.held_out, ["ml/later-0", "ml/later-1"]);
    assert!(!ungrouped_names(&view).contains(&"ml/later-0"));
    assert!(!view.gangs.iter().any(|g| g.id.name.starts_with("later")));
}

#[test]
fn workload_pod_group_without_pods_is_a_gang_with_no_members() {
    let view = view(V1ALPHA1_PARTIAL);
    let g = gang(&view, "ml", "prepared/workers");
    assert_eq!(g.min_count, 8);
    assert!(g.members.is_empty());
    assert!(g.is_pending());
    assert_eq!(g.created_unix, 1_768_035_600);
}

#[test]
fn malformed_workload_entries_are_reported_skipped_and_hold_their_pods_out() {
    let view = view(V1ALPHA1_PARTIAL);
    assert_eq!(gang_names(&view), ["ml/prepared/workers"]);
    let issues: Vec<(&Issue, &[String])> = problems_about(&view, "Workload", "prepared")
        .into_iter()
        .map(|p| (&p.issue, p.held_out.as_slice()))
        .collect();
    let min = |i: usize| format!("spec.podGroups[{i}].policy.gang.minCount");
    let no_min = Issue::InvalidMinCount {
        path: min(1),
        value: None,
    };
    let zero = Issue::InvalidMinCount {
        path: min(2),
        value: Some(0),
    };
    assert!(
        issues.contains(&(&no_min, &["ml/no-min-0".to_owned()][..])),
        "{issues:?}"
    );
    assert!(issues.contains(&(&zero, &[][..])), "{issues:?}");
    let typo = issues
        .iter()
        .find(|(i, _)| matches!(i, Issue::Malformed { path, .. } if *path == min(3)))
        .unwrap_or_else(|| panic!("no wrong-type problem in {issues:?}"));
    assert_eq!(typo.1, ["ml/typo-0"]);
    let stray = issues
        .iter()
        .find(|(i, _)| matches!(i, Issue::PodGroupNotInWorkload { pod_group } if pod_group == "evaluators"))
        .unwrap_or_else(|| panic!("no missing-entry problem in {issues:?}"));
    assert_eq!(stray.1, ["ml/stray-0"]);
    assert_eq!(issues.len(), 4, "{issues:?}");
    assert!(
        view.ungrouped_pending.is_empty(),
        "{:?}",
        view.ungrouped_pending
    );
}

// ---- v1alpha2 (1.36) ----

#[test]
fn pod_group_gang_reads_min_count_priority_topology_and_condition() {
    let view = view(V1ALPHA2);
    let g = gang(&view, "ml", "train-workers-0");
    assert_eq!(g.id.kind, "PodGroup");
    assert_eq!(g.id.api_version, "scheduling.k8s.io/v1alpha2");
    assert_eq!(g.min_count, 4);
    // The member being deleted does not count.
    assert_eq!(
        member_names(g),
        [
            "train-workers-0-0",
            "train-workers-0-1",
            "train-workers-0-2",
            "train-workers-0-3"
        ]
    );
    assert_eq!(g.bound_count(), 2);
    assert_eq!(g.priority, 1000);
    assert_eq!(
        g.topology_key.as_deref(),
        Some("topology.kubernetes.io/rack")
    );
    assert_eq!(g.created_unix, 1_777_536_000);
    assert!(!g.scheduled, "PodGroupScheduled is False");
    assert!(g.is_pending());
    assert_eq!(g.members[3].demand.extended["rdma/rdma_shared_device_a"], 1);
}

#[test]
fn basic_pod_group_pods_are_ungrouped_and_only_unbound_ones_pending() {
    let view = view(V1ALPHA2);
    assert!(!view.gangs.iter().any(|g| g.id.name == "etl"));
    assert_eq!(ungrouped_names(&view), ["data/etl-0"]);
    assert_eq!(view.problems, []);
}

#[test]
fn pod_group_without_pods_is_a_gang_with_no_members_and_default_priority() {
    let view = view(V1ALPHA2);
    let g = gang(&view, "ml", "eval");
    assert_eq!(g.min_count, 2);
    assert!(g.members.is_empty());
    assert_eq!(g.priority, 0);
    assert_eq!(g.topology_key, None);
    assert!(g.is_pending());
}

#[test]
fn a_fresh_scheduled_condition_marks_the_gang_scheduled_while_members_bind() {
    let view = view(V1ALPHA2);
    let g = gang(&view, "ml", "infer");
    assert_eq!(g.bound_count(), 0);
    assert!(g.scheduled);
    assert!(!g.is_pending());
    // The same object read ten minutes later: the condition is stale.
    let objects = ObjectSet::from_yaml_documents(V1ALPHA2).unwrap();
    let later = gangs(&objects, NOW + 600);
    assert!(gang(&later, "ml", "infer").is_pending());
}

#[test]
fn pods_naming_a_pod_group_that_does_not_exist_yet_are_held_out_not_ungrouped() {
    let view = view(V1ALPHA2_PARTIAL);
    let p = only_problem(&view, "PodGroup", "train-workers-1");
    assert_eq!(p.issue, Issue::GroupNotFound);
    assert_eq!(p.held_out, ["ml/train-workers-1-0", "ml/train-workers-1-1"]);
    assert_eq!(
        p.to_string(),
        "PodGroup ml/train-workers-1: referenced by pods but not found \
         (holding out 2 pods: ml/train-workers-1-0, ml/train-workers-1-1)"
    );
    assert!(
        view.ungrouped_pending.is_empty(),
        "{:?}",
        view.ungrouped_pending
    );
}

#[test]
fn malformed_pod_groups_are_reported_and_skipped() {
    let view = view(V1ALPHA2_PARTIAL);
    let path = "spec.schedulingPolicy.gang.minCount".to_owned();
    let no_min = only_problem(&view, "PodGroup", "no-min");
    assert_eq!(
        no_min.issue,
        Issue::InvalidMinCount {
            path: path.clone(),
            value: None
        }
    );
    assert_eq!(no_min.held_out, ["ml/no-min-0"]);
    assert_eq!(
        only_problem(&view, "PodGroup", "negative").issue,
        Issue::InvalidMinCount {
            path: path.clone(),
            value: Some(-3)
        }
    );
    let typo = &only_problem(&view, "PodGroup", "typo").issue;
    assert!(
        matches!(typo, Issue::Malformed { path: p, detail } if *p == path && detail.contains("invalid type")),
        "{typo:?}"
    );
    assert_eq!(
        only_problem(&view, "PodGroup", "no-policy").issue,
        Issue::InvalidPolicy {
            path: "spec.schedulingPolicy".into()
        }
    );
    let future = only_problem(&view, "PodGroup", "future");
    assert_eq!(future.issue, Issue::UnsupportedApiVersion);
    assert_eq!(
        future.object.api_version.as_deref(),
        Some("scheduling.k8s.io/v9")
    );
    assert_eq!(future.held_out, ["ml/future-0"]);
    // A broken status loses only the condition: the gang (with unknown fields) stays.
    let odd = only_problem(&view, "PodGroup", "odd-status");
    assert!(
        matches!(&odd.issue, Issue::Malformed { path, .. } if path == "status.conditions"),
        "{odd:?}"
    );
    assert_eq!(gang_names(&view), ["ml/odd-status"]);
    assert_eq!(gang(&view, "ml", "odd-status").min_count, 3);
}

// ---- v1alpha3 and v1beta1 (1.37) ----

#[test]
fn a_stale_initially_scheduled_condition_does_not_hide_a_gang_short_of_min_count() {
    let view = view(V1ALPHA3);
    let g = gang(&view, "ml", "train-workers-0");
    assert_eq!(g.id.api_version, "scheduling.k8s.io/v1alpha3");
    assert_eq!((g.min_count, g.bound_count()), (3, 2));
    assert_eq!(
        g.topology_key.as_deref(),
        Some("network.example.com/nvlink-domain")
    );
    assert_eq!(g.priority, 2000);
    assert!(
        !g.scheduled,
        "True for two hours with a member missing is stale"
    );
    assert!(g.is_pending());
}

#[test]
fn a_fresh_initially_scheduled_condition_marks_the_gang_scheduled() {
    let view = view(V1ALPHA3);
    let g = gang(&view, "ml", "fresh");
    assert!(g.scheduled);
    assert!(!g.is_pending());
}

#[test]
fn the_v1alpha2_condition_name_means_nothing_in_v1alpha3() {
    let view = view(V1ALPHA3);
    assert!(!gang(&view, "ml", "old-condition").scheduled);
}

#[test]
fn a_gang_composite_holds_its_child_pod_groups_and_a_broken_one_is_reported() {
    let view = view(V1ALPHA3);
    assert_eq!(
        member_names(gang(&view, "ml", "serve-0-leader")),
        ["serve-0-leader-0"]
    );
    assert_eq!(gang(&view, "ml", "serve-0-workers").min_count, 2);
    assert_eq!(
        gang(&view, "ml", "serve-0-workers").composite.as_deref(),
        Some("serve-0")
    );
    // The basic composite is no unit; the gang one is, with both children.
    assert_eq!(view.composites.len(), 1, "{:?}", view.composites);
    let c = &view.composites[0];
    assert_eq!(c.id.name, "serve-0");
    assert_eq!(c.id.kind, "CompositePodGroup");
    assert_eq!(c.id.api_version, "scheduling.k8s.io/v1alpha3");
    assert_eq!(c.min_group_count, 2);
    assert_eq!(
        c.topology_key.as_deref(),
        Some("topology.kubernetes.io/zone")
    );
    assert!(!c.scheduled);
    let children: Vec<&str> = c.children.iter().map(|g| g.name.as_str()).collect();
    assert_eq!(children, ["serve-0-leader", "serve-0-workers"]);
    assert!(
        view.composite_of(gang(&view, "ml", "serve-0-leader"))
            .is_some()
    );
    assert!(problems_about(&view, "CompositePodGroup", "serve-0").is_empty());
    assert!(problems_about(&view, "CompositePodGroup", "serve-basic").is_empty());
    let broken = &only_problem(&view, "CompositePodGroup", "serve-broken").issue;
    assert!(
        matches!(broken, Issue::Malformed { path, .. } if path == "spec.schedulingPolicy.gang.minGroupCount"),
        "{broken:?}"
    );
    assert_eq!(view.problems.len(), 1, "{:?}", view.problems);
}

const V1BETA1_COMPOSITE: &str = r#"
apiVersion: scheduling.k8s.io/v1beta1
kind: CompositePodGroup
metadata: {name: job, namespace: ml, creationTimestamp: "2026-08-01T00:00:00Z"}
spec:
  parentCompositePodGroupName: outer
  schedulingPolicy: {gang: {minGroupCount: 2}}
  priority: 700
status:
  conditions:
  - {type: CompositePodGroupInitiallyScheduled, status: "True", lastTransitionTime: "2026-08-01T00:00:05Z"}
---
apiVersion: scheduling.k8s.io/v1beta1
kind: CompositePodGroup
metadata: {name: outer, namespace: ml}
spec:
  schedulingPolicy: {gang: {minGroupCount: 1}}
---
apiVersion: scheduling.k8s.io/v1beta1
kind: PodGroup
metadata: {name: job-a, namespace: ml, creationTimestamp: "2026-08-01T00:00:00Z"}
spec:
  parentCompositePodGroupName: job
  schedulingPolicy: {gang: {minCount: 1}}
---
apiVersion: scheduling.k8s.io/v1beta1
kind: PodGroup
metadata: {name: lost, namespace: ml, creationTimestamp: "2026-08-01T00:00:00Z"}
spec:
  parentCompositePodGroupName: nowhere
  schedulingPolicy: {gang: {minCount: 1}}
"#;

#[test]
fn v1beta1_composites_of_1_38_take_priority_nesting_and_a_missing_parent_is_reported() {
    let view = view(V1BETA1_COMPOSITE);
    let job = view
        .composites
        .iter()
        .find(|c| c.id.name == "job")
        .expect("composite job");
    assert_eq!(job.priority, 700);
    assert_eq!(job.id.api_version, "scheduling.k8s.io/v1beta1");
    // Scheduled True, but only one of two children exists and none formed: trusted only while
    // fresh, and the view is read long after.
    assert!(!job.scheduled);
    assert_eq!(job.children.len(), 1);
    let outer = view.composites.iter().find(|c| c.id.name == "outer");
    assert!(outer.is_some_and(|c| c.children.is_empty()));
    assert!(matches!(
        &only_problem(&view, "CompositePodGroup", "job").issue,
        Issue::CompositeNested { parent } if parent == "outer"
    ));
    assert!(matches!(
        &only_problem(&view, "PodGroup", "lost").issue,
        Issue::ParentCompositeMissing { composite } if composite == "nowhere"
    ));
    // A child whose parent is missing stays a gang on its own.
    assert!(view.composite_of(gang(&view, "ml", "lost")).is_none());
}

#[test]
fn a_pod_group_served_in_two_versions_is_one_gang_read_from_v1beta1() {
    let view = view(V1BETA1);
    assert_eq!(gang_names(&view), ["ml/train-workers-0"]);
    let g = &view.gangs[0];
    assert_eq!(g.id.api_version, "scheduling.k8s.io/v1beta1");
    assert_eq!(member_names(g), ["train-workers-0-0", "train-workers-0-1"]);
    // The group's own priority wins over its pods'.
    assert_eq!(g.priority, 500);
    assert!(!g.scheduled);
    assert_eq!(view.problems, []);
}
