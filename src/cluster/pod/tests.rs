//! [`CompactPod`] and [`PodStore`] tests: what compaction keeps, problems it finds, and the
//! store the pod watcher fills from watcher events.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kube::core::DynamicObject;
use kube::runtime::watcher::Event;
use serde_json::json;

use super::*;
use crate::cluster::{GangObject, ObjectSet, PodStore, gangs};

const NOW: i64 = 1_788_264_000;

fn pod(value: serde_json::Value) -> Pod {
    serde_json::from_value(value).unwrap()
}

fn worker(name: &str) -> Pod {
    pod(json!({
        "metadata": {"name": name, "namespace": "ml", "creationTimestamp": "2026-01-10T09:00:00Z"},
        "spec": {
            "schedulingGroup": {"podGroupName": "g"},
            "priority": 7,
            "containers": [{"name": "c", "resources": {"requests": {"cpu": "2", "nvidia.com/gpu": "8"}}}]
        },
        "status": {"phase": "Pending"}
    }))
}

fn names(store: &PodStore) -> Vec<String> {
    store
        .pods()
        .iter()
        .map(|p| format!("{}/{}", p.namespace(), p.name()))
        .collect()
}

#[test]
fn compaction_keeps_identity_flags_link_and_raw_demand() {
    let p = CompactPod::from_pod(&pod(json!({
        "metadata": {"name": "w-0", "creationTimestamp": "2026-01-10T09:00:00Z",
                     "deletionTimestamp": "2026-01-10T10:00:00Z"},
        "spec": {
            "nodeName": "gpu-0",
            "schedulingGroup": {"podGroupName": "g"},
            "schedulingGates": [{"name": "wait"}],
            "priority": 100,
            "nodeSelector": {"pool": "h100"},
            "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "8"}}}],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data-0"}},
                        {"name": "scratch", "emptyDir": {}}]
        },
        "status": {"phase": "Running"}
    })));
    assert_eq!((p.namespace(), p.name()), ("default", "w-0"));
    assert_eq!(p.node_name(), Some("gpu-0"));
    assert!(p.is_deleting() && !p.is_terminal() && !p.is_live());
    assert!(p.is_gated());
    assert_eq!(p.priority(), Some(100));
    assert_eq!(p.created_unix(), Some(1_768_035_600));
    assert_eq!(p.link(), Some(&PodLink::PodGroup("g".into())));
    let d = p.demand(&ObjectSet::new());
    assert_eq!(d.extended["nvidia.com/gpu"], 8);
    assert_eq!(d.node_selector["pool"], "h100");
    // Only the claim is kept as a volume reference.
    assert_eq!(p.demand.volumes.len(), 1);
}

#[test]
fn an_empty_node_name_is_unbound_and_a_succeeded_pod_is_terminal() {
    let p = CompactPod::from_pod(&pod(json!({
        "metadata": {"name": "done"},
        "spec": {"nodeName": "", "containers": []},
        "status": {"phase": "Succeeded"}
    })));
    assert_eq!(p.node_name(), None);
    assert!(p.is_terminal() && !p.is_live());
}

#[test]
fn an_unknown_operator_matches_no_node_and_is_reported_by_gangs() {
    let mut objects = ObjectSet::new();
    objects.insert_pod(pod(json!({
        "metadata": {"name": "odd", "namespace": "ml"},
        "spec": {
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "Near", "values": ["a"]}]}]
            }}},
            "containers": [{"name": "c"}]
        }
    })));
    let view = gangs(&objects, NOW);
    assert_eq!(view.ungrouped_pending.len(), 1);
    let terms = &view.ungrouped_pending[0].1.affinity_terms;
    assert_eq!(terms.len(), 1);
    assert_eq!(terms[0][0].key, "field:metadata.name");
    assert_eq!(
        view.problems
            .iter()
            .map(|p| (&p.object.name, &p.issue))
            .collect::<Vec<_>>(),
        [(
            &"odd".to_owned(),
            &Issue::InvalidOperator {
                path: "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution\
                       .nodeSelectorTerms[0].matchExpressions[0].operator"
                    .into(),
                operator: "Near".into()
            }
        )]
    );
}

#[test]
fn a_dynamic_pod_keeps_its_workload_ref_with_replica_key() {
    let object: DynamicObject = serde_json::from_value(json!({
        "metadata": {"name": "w-0", "namespace": "ml"},
        "spec": {
            "workloadRef": {"name": "train", "podGroup": "workers", "podGroupReplicaKey": "r1"},
            "containers": [{"name": "c", "resources": {"requests": {"cpu": "500m"}}}]
        },
        "status": {"phase": "Failed"}
    }))
    .unwrap();
    let p = CompactPod::from_dynamic(&object).unwrap();
    assert_eq!(
        p.link(),
        Some(&PodLink::Workload {
            name: "train".into(),
            pod_group: "workers".into(),
            replica_key: Some("r1".into()),
        })
    );
    assert!(p.is_terminal());
    assert_eq!(p.demand(&ObjectSet::new()).cpu_milli, 500);
}

#[test]
fn a_dynamic_pod_that_does_not_decode_names_the_field() {
    let object: DynamicObject = serde_json::from_value(json!({
        "metadata": {"name": "w-0", "namespace": "ml"},
        "spec": {"workloadRef": {"name": "train", "podGroup": "workers"}, "containers": 7}
    }))
    .unwrap();
    let err = CompactPod::from_dynamic(&object).unwrap_err();
    assert!(
        matches!(&err, Error::Decode { path, name, .. } if path == "spec.containers" && name == "ml/w-0"),
        "{err:?}"
    );
}

#[test]
fn the_store_is_ready_after_the_first_list_and_follows_applies_and_deletes() {
    let (store, mut writer) = PodStore::new();
    assert!(!store.is_ready());
    writer.apply_pod(Event::Init);
    writer.apply_pod(Event::InitApply(worker("w-1")));
    writer.apply_pod(Event::InitApply(worker("w-0")));
    // Listed pods are not visible until the list is complete.
    assert!(store.is_empty());
    writer.apply_pod(Event::InitDone);
    assert!(store.is_ready());
    assert_eq!(names(&store), ["ml/w-0", "ml/w-1"]);

    let mut bound = worker("w-0");
    bound.spec.as_mut().unwrap().node_name = Some("gpu-0".into());
    writer.apply_pod(Event::Apply(bound));
    writer.apply_pod(Event::Apply(worker("w-2")));
    writer.apply_pod(Event::Delete(worker("w-1")));
    assert_eq!(names(&store), ["ml/w-0", "ml/w-2"]);
    assert_eq!(
        store.get("ml", "w-0").unwrap().node_name(),
        Some("gpu-0"),
        "an apply replaces the pod"
    );
}

#[test]
fn a_relist_swaps_the_store_so_pods_deleted_meanwhile_vanish() {
    let (store, mut writer) = PodStore::new();
    writer.apply_pod(Event::Init);
    for name in ["a", "b", "c"] {
        writer.apply_pod(Event::InitApply(worker(name)));
    }
    writer.apply_pod(Event::InitDone);
    // The watch broke; "b" was deleted and "d" created while it was down.
    writer.apply_pod(Event::Init);
    for name in ["a", "c", "d"] {
        writer.apply_pod(Event::InitApply(worker(name)));
    }
    // The old contents stay readable during the re-list.
    assert_eq!(names(&store), ["ml/a", "ml/b", "ml/c"]);
    let a = store.get("ml", "a").unwrap();
    writer.apply_pod(Event::InitDone);
    assert_eq!(names(&store), ["ml/a", "ml/c", "ml/d"]);
    // An unchanged pod is kept, not held twice while the list arrives.
    assert!(Arc::ptr_eq(&a, &store.get("ml", "a").unwrap()));
    let mut bound = worker("a");
    bound.spec.as_mut().unwrap().node_name = Some("gpu-0".into());
    writer.apply_pod(Event::Init);
    writer.apply_pod(Event::InitApply(bound));
    writer.apply_pod(Event::InitDone);
    assert_eq!(names(&store), ["ml/a"]);
    assert_eq!(store.get("ml", "a").unwrap().node_name(), Some("gpu-0"));
}

#[test]
fn an_apply_that_does_not_decode_drops_the_stale_pod() {
    let (store, mut writer) = PodStore::new();
    let good: DynamicObject = serde_json::from_value(json!({
        "metadata": {"name": "w-0", "namespace": "ml"},
        "spec": {"containers": []}
    }))
    .unwrap();
    let mut bad = good.clone();
    bad.data["spec"]["containers"] = json!("oops");
    writer.apply_dynamic(Event::Init);
    writer.apply_dynamic(Event::InitApply(good));
    writer.apply_dynamic(Event::InitDone);
    assert_eq!(store.len(), 1);
    writer.apply_dynamic(Event::Apply(bad));
    assert!(store.is_empty());
}

#[test]
fn a_snapshot_shares_the_stored_pods_and_builds_the_same_gangs() {
    let (store, mut writer) = PodStore::new();
    writer.apply_pod(Event::Init);
    writer.apply_pod(Event::InitApply(worker("w-0")));
    writer.apply_pod(Event::InitApply(worker("w-1")));
    writer.apply_pod(Event::InitDone);
    let mut set = store.to_object_set();
    set.insert_gang_object(GangObject::new(
        "scheduling.k8s.io/v1alpha2",
        "PodGroup",
        json!({"metadata": {"name": "g", "namespace": "ml"},
               "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}}}),
    ));
    let stored = store.get("ml", "w-0").unwrap();
    assert!(std::ptr::eq(
        Arc::as_ptr(&stored),
        set.pod("ml", "w-0").unwrap()
    ));
    // A later change to the store does not reach the snapshot.
    writer.apply_pod(Event::Delete(worker("w-1")));
    let view = gangs(&set, NOW);
    let g = &view.gangs[0];
    let members: Vec<&str> = g.members.iter().map(|m| m.pod.as_str()).collect();
    assert_eq!(members, ["w-0", "w-1"]);
    assert_eq!((g.priority, g.created_unix), (7, 1_768_035_600));
    assert_eq!(g.members[0].demand.cpu_milli, 2000);
}

#[test]
fn a_compact_pod_is_a_few_hundred_bytes() {
    // The struct itself; its strings and slices are separate, small allocations. It was 256
    // bytes until the scheduler verdict and name were kept (a bool in padding and 16 bytes),
    // 272 until the deferral marks were kept (one pointer, null for a pod without them).
    assert!(
        std::mem::size_of::<CompactPod>() <= 280,
        "{}",
        std::mem::size_of::<CompactPod>()
    );
}

// ---- CompactPod ----

/// A pod in `phase` with a DisruptionTarget condition of `disruption` status, if any.
fn pod_json(phase: &str, disruption: Option<&str>) -> serde_json::Value {
    let mut conditions = vec![json!({"type": "Ready", "status": "True"})];
    if let Some(status) = disruption {
        conditions.push(json!({"type": "DisruptionTarget", "status": status}));
    }
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "w-0", "namespace": "ml"},
        "spec": {
            "schedulingGroup": {"podGroupName": "g"},
            "containers": [{"name": "c"}]
        },
        "status": {"phase": phase, "conditions": conditions}
    })
}

/// `(is_running, is_disrupted)` of the pod, compacted from a typed pod, from a
/// `DynamicObject` and from an [`ObjectSet`] insert, which must agree.
fn flags(phase: &str, disruption: Option<&str>) -> (bool, bool) {
    let value = pod_json(phase, disruption);
    let typed: Pod = serde_json::from_value(value.clone()).unwrap();
    let dynamic: DynamicObject = serde_json::from_value(value.clone()).unwrap();
    let from_pod = CompactPod::from_pod(&typed);
    let from_dynamic = CompactPod::from_dynamic(&dynamic).unwrap();
    let mut set = ObjectSet::new();
    set.insert_value(value).unwrap();
    let inserted = set.pod("ml", "w-0").unwrap();
    let got = (from_pod.is_running(), from_pod.is_disrupted());
    assert_eq!(
        got,
        (from_dynamic.is_running(), from_dynamic.is_disrupted()),
        "typed and dynamic pod in {phase} with DisruptionTarget {disruption:?}"
    );
    assert_eq!(got, (inserted.is_running(), inserted.is_disrupted()));
    got
}

#[test]
fn compaction_reads_phase_running_and_a_true_disruption_target() {
    assert_eq!(flags("Running", None), (true, false));
    assert_eq!(flags("Running", Some("True")), (true, true));
    assert_eq!(flags("Running", Some("False")), (true, false));
    assert_eq!(flags("Pending", Some("True")), (false, true));
    assert_eq!(flags("Pending", None), (false, false));
    // Terminal phases are not running.
    assert_eq!(flags("Succeeded", None), (false, false));
    assert_eq!(flags("Failed", Some("True")), (false, true));
}

#[test]
fn a_pod_without_status_is_neither_running_nor_disrupted() {
    let value = json!({
        "metadata": {"name": "w-0"},
        "spec": {"containers": [{"name": "c"}]}
    });
    let typed: Pod = serde_json::from_value(value.clone()).unwrap();
    let dynamic: DynamicObject = serde_json::from_value(value).unwrap();
    let p = CompactPod::from_pod(&typed);
    let d = CompactPod::from_dynamic(&dynamic).unwrap();
    assert!(!p.is_running() && !p.is_disrupted());
    assert!(!d.is_running() && !d.is_disrupted());
}

// ---- Scheduler verdict and scheduler name ----

/// A pod with `conditions` and `spec.schedulerName` `scheduler`, if any.
fn verdict_json(conditions: serde_json::Value, scheduler: Option<&str>) -> serde_json::Value {
    let mut spec = json!({
        "schedulingGroup": {"podGroupName": "g"},
        "containers": [{"name": "c"}]
    });
    if let Some(name) = scheduler {
        spec["schedulerName"] = json!(name);
    }
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "w-0", "namespace": "ml"},
        "spec": spec,
        "status": {"phase": "Pending", "conditions": conditions}
    })
}

/// `(has_verdict, scheduler_name)` of the pod, compacted from a typed pod, from a
/// `DynamicObject` and from an [`ObjectSet`] insert, which must agree.
fn verdict(conditions: serde_json::Value, scheduler: Option<&str>) -> (bool, Option<String>) {
    let value = verdict_json(conditions, scheduler);
    let typed: Pod = serde_json::from_value(value.clone()).unwrap();
    let dynamic: DynamicObject = serde_json::from_value(value.clone()).unwrap();
    let read = |p: &CompactPod| (p.has_verdict(), p.scheduler_name().map(str::to_owned));
    let from_pod = read(&CompactPod::from_pod(&typed));
    let from_dynamic = read(&CompactPod::from_dynamic(&dynamic).unwrap());
    assert_eq!(from_pod, from_dynamic, "typed and dynamic pod: {value}");
    let mut set = ObjectSet::new();
    set.insert_value(value).unwrap();
    assert_eq!(from_pod, read(set.pod("ml", "w-0").unwrap()));
    from_pod
}

#[test]
fn a_pod_scheduled_condition_unschedulable_gated_or_true_is_a_verdict() {
    for (status, reason) in [
        ("False", "Unschedulable"),
        ("False", "SchedulingGated"),
        ("True", ""),
    ] {
        let conditions = json!([
            {"type": "Ready", "status": "False"},
            {"type": "PodScheduled", "status": status, "reason": reason}
        ]);
        assert_eq!(verdict(conditions, None), (true, None), "{status} {reason}");
    }
}

#[test]
fn a_pod_without_a_pod_scheduled_condition_has_no_verdict() {
    assert_eq!(verdict(json!([]), None), (false, None));
    assert_eq!(
        verdict(json!([{"type": "Ready", "status": "False"}]), None),
        (false, None)
    );
    assert_eq!(
        verdict(json!([{"type": "PodScheduled", "status": "Unknown"}]), None),
        (false, None)
    );
    // A plugin error (kube-scheduler 1.37.2's DynamicResources PodGroupPostFilter): CA ignores
    // the pod, so it is no verdict.
    assert_eq!(
        verdict(
            json!([{"type": "PodScheduled", "status": "False", "reason": "SchedulerError"}]),
            None
        ),
        (false, None)
    );
    // No status at all.
    let value = json!({"metadata": {"name": "w-0"}, "spec": {"containers": [{"name": "c"}]}});
    let typed: Pod = serde_json::from_value(value.clone()).unwrap();
    let dynamic: DynamicObject = serde_json::from_value(value).unwrap();
    assert!(!CompactPod::from_pod(&typed).has_verdict());
    assert!(!CompactPod::from_dynamic(&dynamic).unwrap().has_verdict());
}

#[test]
fn only_a_non_default_scheduler_name_is_kept() {
    assert_eq!(
        verdict(json!([]), Some("volcano")),
        (false, Some("volcano".to_owned()))
    );
    assert_eq!(verdict(json!([]), Some("default-scheduler")), (false, None));
    assert_eq!(verdict(json!([]), Some("")), (false, None));
}

#[test]
fn gang_members_carry_their_verdict_and_scheduler_name() {
    let mut set = ObjectSet::new();
    let mut tried = verdict_json(
        json!([{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]),
        None,
    );
    tried["metadata"]["name"] = json!("w-0");
    let mut untried = verdict_json(json!([]), Some("volcano"));
    untried["metadata"]["name"] = json!("w-1");
    let mut bound = verdict_json(json!([]), Some("other"));
    bound["metadata"]["name"] = json!("w-2");
    bound["spec"]["nodeName"] = json!("gpu-0");
    let mut done = verdict_json(json!([]), Some("finished"));
    done["metadata"]["name"] = json!("w-3");
    done["status"]["phase"] = json!("Succeeded");
    for pod in [tried, untried, bound, done] {
        set.insert_value(pod).unwrap();
    }
    set.insert_gang_object(GangObject::new(
        "scheduling.k8s.io/v1alpha2",
        "PodGroup",
        json!({"metadata": {"name": "g", "namespace": "ml"},
               "spec": {"schedulingPolicy": {"gang": {"minCount": 3}}}}),
    ));
    let view = gangs(&set, NOW);
    let g = &view.gangs[0];
    let read: Vec<(&str, bool, Option<&str>)> = g
        .members
        .iter()
        .map(|m| (m.pod.as_str(), m.verdict, m.scheduler_name.as_deref()))
        .collect();
    assert_eq!(
        read,
        [
            ("w-0", true, None),
            ("w-1", false, Some("volcano")),
            ("w-2", false, Some("other")),
        ]
    );
    // Only unbound members count; the terminal pod is not a member.
    assert_eq!(g.no_verdict_count(), 1);
    assert_eq!(
        g.no_verdict_schedulers().into_iter().collect::<Vec<_>>(),
        ["volcano"]
    );
}

#[test]
fn deferral_marks_are_read_only_when_one_is_set() {
    let plain = CompactPod::from_pod(&worker("w-0"));
    assert!(plain.deferral().is_none());
    let marked = CompactPod::from_pod(&pod(serde_json::json!({
        "metadata": {"name": "w-1", "namespace": "ml", "annotations": {
            "cluster-autoscaler.kubernetes.io/pod-scale-up-delay": "520s",
            "gangscaler.io/deferred": "no_room",
            "other": "x",
        }},
        "spec": {"containers": []},
    })));
    let marks = marked.deferral().expect("marks read");
    assert_eq!(marks.delay.as_deref(), Some("520s"));
    assert_eq!(marks.hold.as_deref(), Some("no_room"));
    assert_eq!(marks.was, None);
}
