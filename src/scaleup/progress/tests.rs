//! [`progress`] and [`node_progress`] tests over real-looking objects: gangs built from
//! YAML as in `tests/fixtures/gangs/`, VolumeAttachments and Nodes built as JSON.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::storage::v1::VolumeAttachment;
use serde_json::json;

use super::{GangProgress, NodeProgress, node_progress, progress};
use crate::cluster::{ObjectSet, gangs};
use crate::model::GangRef;

/// 2026-09-01T12:00:00Z.
const NOW: i64 = 1_788_264_000;

/// 2026-09-01T11:50:00Z, when the test gangs were created.
const CREATED: i64 = NOW - 600;

const DRIVER: &str = "ebs.csi.aws.com";

/// A v1alpha2 PodGroup `train` in `ml` (minCount 2) with two members bound to `gpu-0` and
/// `gpu-1`, both Running, each with claim `data-<i>` bound to PV `pv-data-<i>` of the EBS
/// CSI driver (no CSIDriver object: attach required by default).
const BOUND_GANG: &str = r#"
apiVersion: scheduling.k8s.io/v1alpha2
kind: PodGroup
metadata:
  name: train
  namespace: ml
  creationTimestamp: "2026-09-01T11:50:00Z"
spec:
  schedulingPolicy:
    gang:
      minCount: 2
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: ebs
provisioner: ebs.csi.aws.com
volumeBindingMode: WaitForFirstConsumer
---
apiVersion: v1
kind: Pod
metadata:
  name: train-0
  namespace: ml
  creationTimestamp: "2026-09-01T11:50:01Z"
spec:
  schedulingGroup: {podGroupName: train}
  nodeName: gpu-0
  containers:
  - name: trainer
    image: nvcr.io/nvidia/pytorch:25.04-py3
    resources:
      limits: {nvidia.com/gpu: "8"}
  volumes:
  - name: data
    persistentVolumeClaim: {claimName: data-0}
  - name: scratch
    emptyDir: {}
status:
  phase: Running
---
apiVersion: v1
kind: Pod
metadata:
  name: train-1
  namespace: ml
  creationTimestamp: "2026-09-01T11:50:01Z"
spec:
  schedulingGroup: {podGroupName: train}
  nodeName: gpu-1
  containers:
  - name: trainer
    image: nvcr.io/nvidia/pytorch:25.04-py3
    resources:
      limits: {nvidia.com/gpu: "8"}
  volumes:
  - name: data
    persistentVolumeClaim: {claimName: data-1}
status:
  phase: Running
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: data-0
  namespace: ml
spec:
  accessModes: [ReadWriteOnce]
  storageClassName: ebs
  volumeName: pv-data-0
  resources:
    requests: {storage: 100Gi}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: data-1
  namespace: ml
spec:
  accessModes: [ReadWriteOnce]
  storageClassName: ebs
  volumeName: pv-data-1
  resources:
    requests: {storage: 100Gi}
---
apiVersion: v1
kind: PersistentVolume
metadata:
  name: pv-data-0
spec:
  capacity: {storage: 100Gi}
  accessModes: [ReadWriteOnce]
  storageClassName: ebs
  claimRef: {namespace: ml, name: data-0}
  csi:
    driver: ebs.csi.aws.com
    volumeHandle: vol-0000000000000000a
---
apiVersion: v1
kind: PersistentVolume
metadata:
  name: pv-data-1
spec:
  capacity: {storage: 100Gi}
  accessModes: [ReadWriteOnce]
  storageClassName: ebs
  claimRef: {namespace: ml, name: data-1}
  csi:
    driver: ebs.csi.aws.com
    volumeHandle: vol-0000000000000000b
"#;

/// The progress of every gang in `yaml` at [`NOW`].
fn progress_of(
    yaml: &str,
    attachments: &[Arc<VolumeAttachment>],
) -> BTreeMap<GangRef, GangProgress> {
    let objects = ObjectSet::from_yaml_documents(yaml).unwrap();
    let view = gangs(&objects, NOW);
    let out = progress(&objects, &view, attachments);
    let keys: Vec<&GangRef> = out.keys().collect();
    let ids: Vec<&GangRef> = view.gangs.iter().map(|g| &g.id).collect();
    assert_eq!(keys, ids, "one progress per gang of the view");
    out
}

/// The progress of gang `namespace/name`.
fn gang<'a>(
    progress: &'a BTreeMap<GangRef, GangProgress>,
    namespace: &str,
    name: &str,
) -> &'a GangProgress {
    progress
        .iter()
        .find(|(id, _)| id.namespace == namespace && id.name == name)
        .map(|(_, p)| p)
        .unwrap_or_else(|| {
            let ids: Vec<String> = progress.keys().map(ToString::to_string).collect();
            panic!("no gang {namespace}/{name} in {ids:?}")
        })
}

/// The progress of `ml/train` in `yaml`.
fn train(yaml: &str, attachments: &[Arc<VolumeAttachment>]) -> GangProgress {
    gang(&progress_of(yaml, attachments), "ml", "train").clone()
}

/// A VolumeAttachment of PV `pv` on `node` by the EBS driver.
fn va(pv: &str, node: &str, attached: bool) -> Arc<VolumeAttachment> {
    Arc::new(
        serde_json::from_value(json!({
            "apiVersion": "storage.k8s.io/v1",
            "kind": "VolumeAttachment",
            "metadata": {"name": format!("csi-{pv}-{node}")},
            "spec": {
                "attacher": DRIVER,
                "nodeName": node,
                "source": {"persistentVolumeName": pv}
            },
            "status": {"attached": attached}
        }))
        .unwrap(),
    )
}

/// A VolumeAttachment of `pv` on `node` that failed with `message`.
fn failed_va(pv: &str, node: &str, message: &str) -> Arc<VolumeAttachment> {
    Arc::new(
        serde_json::from_value(json!({
            "apiVersion": "storage.k8s.io/v1",
            "kind": "VolumeAttachment",
            "metadata": {"name": format!("csi-{pv}-{node}")},
            "spec": {
                "attacher": DRIVER,
                "nodeName": node,
                "source": {"persistentVolumeName": pv}
            },
            "status": {
                "attached": false,
                "attachError": {"time": "2026-09-01T11:55:00Z", "message": message}
            }
        }))
        .unwrap(),
    )
}

/// `(volumes_needed, volumes_attached, volumes_ready())`.
fn volumes(p: &GangProgress) -> (u32, u32, bool) {
    (p.volumes_needed, p.volumes_attached, p.volumes_ready())
}

// ---- volumes ----

#[test]
fn a_bound_running_gang_without_attachments_is_formed_but_its_volumes_are_not_ready() {
    let p = train(BOUND_GANG, &[]);
    assert_eq!(p.min_count, 2);
    assert_eq!(p.created_unix, CREATED);
    assert_eq!((p.bound, p.running), (2, 2));
    assert!(p.formed, "minCount members bound");
    assert!(p.started());
    // One claim per member; the emptyDir is no attachable volume.
    assert_eq!(volumes(&p), (2, 0, false));
    assert!(p.attach_errors.is_empty());
    assert!(p.disrupted.is_empty());
}

#[test]
fn only_attachments_with_attached_true_count() {
    let vas = [
        va("pv-data-0", "gpu-0", true),
        va("pv-data-1", "gpu-1", false),
    ];
    let p = train(BOUND_GANG, &vas);
    assert_eq!(volumes(&p), (2, 1, false));
    assert!(
        p.attach_errors.is_empty(),
        "no error, just not attached yet"
    );
}

#[test]
fn every_volume_attached_makes_the_gang_volume_ready_and_started() {
    let vas = [
        va("pv-data-0", "gpu-0", true),
        va("pv-data-1", "gpu-1", true),
    ];
    let p = train(BOUND_GANG, &vas);
    assert_eq!(volumes(&p), (2, 2, true));
    assert!(p.started());
    assert!(p.formed);
}

#[test]
fn an_attachment_on_another_node_or_of_another_volume_does_not_count() {
    let vas = [
        // pv-data-0 attached, but to the node of the other member.
        va("pv-data-0", "gpu-1", true),
        // A volume no member uses, on a member's node.
        va("pv-other", "gpu-1", true),
        va("pv-data-1", "gpu-1", true),
    ];
    let p = train(BOUND_GANG, &vas);
    assert_eq!(volumes(&p), (2, 1, false));
}

#[test]
fn an_attach_error_is_reported_as_pod_slash_claim() {
    let vas = [
        failed_va("pv-data-1", "gpu-1", "boom"),
        va("pv-data-0", "gpu-0", true),
    ];
    let p = train(BOUND_GANG, &vas);
    assert_eq!(p.attach_errors, ["train-1/data-1: boom"]);
    assert_eq!(volumes(&p), (2, 1, false));
}

#[test]
fn attach_errors_are_sorted_and_ignored_on_another_node() {
    let vas = [
        failed_va("pv-data-1", "gpu-1", "b: quota"),
        failed_va("pv-data-0", "gpu-0", "a: throttled"),
        failed_va("pv-data-0", "gpu-9", "not this node"),
    ];
    let p = train(BOUND_GANG, &vas);
    assert_eq!(
        p.attach_errors,
        ["train-0/data-0: a: throttled", "train-1/data-1: b: quota"]
    );
    assert_eq!(volumes(&p), (2, 0, false));
}

#[test]
fn a_csi_driver_without_attach_required_needs_no_volumes() {
    let yaml = format!(
        "{BOUND_GANG}---
apiVersion: storage.k8s.io/v1
kind: CSIDriver
metadata:
  name: {DRIVER}
spec:
  attachRequired: false
"
    );
    let p = train(&yaml, &[]);
    assert_eq!(volumes(&p), (0, 0, true));
    // attachRequired: true is the same as no CSIDriver object.
    let required = yaml.replace("attachRequired: false", "attachRequired: true");
    assert_eq!(volumes(&train(&required, &[])), (2, 0, false));
}

#[test]
fn a_claim_not_bound_yet_is_needed_and_not_attached() {
    // data-1 waits for its PV (WaitForFirstConsumer); its class names the EBS driver.
    let yaml = BOUND_GANG.replace("  volumeName: pv-data-1\n", "");
    assert_ne!(yaml, BOUND_GANG);
    // Even an attachment of the PV it will get does not count before the claim binds.
    let vas = [
        va("pv-data-0", "gpu-0", true),
        va("pv-data-1", "gpu-1", true),
    ];
    let p = train(&yaml, &vas);
    assert_eq!(volumes(&p), (2, 1, false));
}

#[test]
fn a_claim_that_does_not_exist_has_no_known_driver_and_is_not_counted() {
    // Without the claim there is no class, and no default class: the driver is unknown.
    let without_claim = BOUND_GANG.replace(
        "name: data-1\n  namespace: ml",
        "name: elsewhere\n  namespace: ml",
    );
    assert_ne!(without_claim, BOUND_GANG);
    let p = train(&without_claim, &[]);
    assert_eq!(volumes(&p), (1, 0, false));
}

// ---- formation, binding, running ----

/// A PodGroup `train` (minCount 3) with one member bound and Running, one bound and still
/// Pending, one unbound with a claim, and one Running pod being deleted.
const PARTIAL_GANG: &str = r#"
apiVersion: scheduling.k8s.io/v1alpha2
kind: PodGroup
metadata:
  name: train
  namespace: ml
  creationTimestamp: "2026-09-01T11:50:00Z"
spec:
  schedulingPolicy:
    gang: {minCount: 3}
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: ebs
provisioner: ebs.csi.aws.com
---
apiVersion: v1
kind: Pod
metadata: {name: train-0, namespace: ml}
spec:
  schedulingGroup: {podGroupName: train}
  nodeName: gpu-0
  containers:
  - {name: c, image: registry.example.com/ml/job:1.0}
  volumes:
  - name: data
    persistentVolumeClaim: {claimName: data-0}
status:
  phase: Running
---
apiVersion: v1
kind: Pod
metadata: {name: train-1, namespace: ml}
spec:
  schedulingGroup: {podGroupName: train}
  nodeName: gpu-1
  containers:
  - {name: c, image: registry.example.com/ml/job:1.0}
status:
  phase: Pending
---
apiVersion: v1
kind: Pod
metadata: {name: train-2, namespace: ml}
spec:
  schedulingGroup: {podGroupName: train}
  containers:
  - {name: c, image: registry.example.com/ml/job:1.0}
  volumes:
  - name: data
    persistentVolumeClaim: {claimName: data-2}
status:
  phase: Pending
---
apiVersion: v1
kind: Pod
metadata:
  name: train-old
  namespace: ml
  deletionTimestamp: "2026-09-01T11:59:00Z"
spec:
  schedulingGroup: {podGroupName: train}
  nodeName: gpu-9
  containers:
  - {name: c, image: registry.example.com/ml/job:1.0}
status:
  phase: Running
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: data-0, namespace: ml}
spec:
  storageClassName: ebs
  resources:
    requests: {storage: 10Gi}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: data-2, namespace: ml}
spec:
  storageClassName: ebs
  resources:
    requests: {storage: 10Gi}
"#;

#[test]
fn a_gang_short_of_min_count_without_a_scheduled_condition_is_not_formed() {
    let p = train(PARTIAL_GANG, &[]);
    assert_eq!(p.min_count, 3);
    assert_eq!(p.bound, 2, "the deleting pod is no member");
    assert!(!p.formed);
    // Only phase Running, and only live members: not Pending train-1, not train-old.
    assert_eq!(p.running, 1);
    assert!(!p.started());
    // train-0's claim counts; unbound train-2's claim does not.
    assert_eq!(volumes(&p), (1, 0, false));
}

#[test]
fn a_fresh_scheduled_condition_forms_a_gang_short_of_min_count() {
    let yaml = PARTIAL_GANG.replace(
        "    gang: {minCount: 3}\n",
        "    gang: {minCount: 3}
status:
  conditions:
  - type: PodGroupScheduled
    status: \"True\"
    reason: Scheduled
    lastTransitionTime: \"2026-09-01T11:59:00Z\"
",
    );
    assert_ne!(yaml, PARTIAL_GANG);
    let p = train(&yaml, &[]);
    assert!(p.formed);
    assert_eq!(p.bound, 2);
    // A stale one (older than the grace period) does not.
    let stale = yaml.replace("2026-09-01T11:59:00Z\"\n", "2026-09-01T11:00:00Z\"\n");
    assert_ne!(stale, yaml);
    assert!(!train(&stale, &[]).formed);
}

#[test]
fn a_pod_group_no_pod_names_has_empty_progress() {
    let yaml = r#"
apiVersion: scheduling.k8s.io/v1alpha2
kind: PodGroup
metadata: {name: train, namespace: ml, creationTimestamp: "2026-09-01T11:50:00Z"}
spec:
  schedulingPolicy:
    gang: {minCount: 2}
"#;
    let p = train(yaml, &[]);
    assert_eq!(
        p,
        GangProgress {
            min_count: 2,
            created_unix: CREATED,
            ..GangProgress::default()
        }
    );
    assert!(p.volumes_ready() && !p.started());
}

// ---- disruption ----

const DISRUPTED: &str = r#"
apiVersion: scheduling.k8s.io/v1alpha2
kind: PodGroup
metadata: {name: train, namespace: ml}
spec:
  schedulingPolicy:
    gang: {minCount: 3}
---
apiVersion: scheduling.k8s.io/v1alpha2
kind: PodGroup
metadata: {name: other, namespace: ml}
spec:
  schedulingPolicy:
    gang: {minCount: 1}
---
# Preempted: DisruptionTarget set, then deleted right away.
apiVersion: v1
kind: Pod
metadata:
  name: train-0
  namespace: ml
  deletionTimestamp: "2026-09-01T11:59:30Z"
spec:
  schedulingGroup: {podGroupName: train}
  nodeName: gpu-0
  containers:
  - {name: c, image: registry.example.com/ml/job:1.0}
status:
  phase: Running
  conditions:
  - type: DisruptionTarget
    status: "True"
    reason: PreemptionByScheduler
    message: "default-scheduler: preempting to accommodate a higher priority pod"
---
# Disrupted, not deleted yet.
apiVersion: v1
kind: Pod
metadata: {name: train-1, namespace: ml}
spec:
  schedulingGroup: {podGroupName: train}
  nodeName: gpu-1
  containers:
  - {name: c, image: registry.example.com/ml/job:1.0}
status:
  phase: Running
  conditions:
  - {type: Ready, status: "True"}
  - {type: DisruptionTarget, status: "True", reason: EvictionByEvictionAPI}
---
# A DisruptionTarget that is not True.
apiVersion: v1
kind: Pod
metadata: {name: train-2, namespace: ml}
spec:
  schedulingGroup: {podGroupName: train}
  nodeName: gpu-2
  containers:
  - {name: c, image: registry.example.com/ml/job:1.0}
status:
  phase: Running
  conditions:
  - {type: DisruptionTarget, status: "False"}
---
apiVersion: v1
kind: Pod
metadata: {name: other-0, namespace: ml}
spec:
  schedulingGroup: {podGroupName: other}
  nodeName: gpu-3
  containers:
  - {name: c, image: registry.example.com/ml/job:1.0}
status:
  phase: Running
  conditions:
  - {type: DisruptionTarget, status: "True"}
---
# Same group name in another namespace: another (missing) group.
apiVersion: v1
kind: Pod
metadata: {name: train-dev, namespace: dev}
spec:
  schedulingGroup: {podGroupName: train}
  nodeName: gpu-4
  containers:
  - {name: c, image: registry.example.com/ml/job:1.0}
status:
  phase: Running
  conditions:
  - {type: DisruptionTarget, status: "True"}
"#;

#[test]
fn a_finished_disrupted_pod_is_not_a_disrupted_member() {
    // Evicted by the kubelet earlier: phase Failed, left in place; not news for a new scale-up.
    let evicted = DISRUPTED.replacen("phase: Running", "phase: Failed", 1);
    let all = progress_of(&evicted, &[]);
    assert_eq!(all.len(), 2);
    let listed: Vec<&String> = all.values().flat_map(|p| &p.disrupted).collect();
    let full = progress_of(DISRUPTED, &[]);
    let before: Vec<&String> = full.values().flat_map(|p| &p.disrupted).collect();
    assert_eq!(listed.len() + 1, before.len(), "{listed:?} vs {before:?}");
}

#[test]
fn disrupted_members_include_pods_being_deleted_and_only_the_gangs_own() {
    let all = progress_of(DISRUPTED, &[]);
    let train = gang(&all, "ml", "train");
    assert_eq!(train.disrupted, ["train-0", "train-1"]);
    // train-0 is being deleted: no member, so neither bound nor running.
    assert_eq!((train.bound, train.running), (2, 2));
    assert_eq!(gang(&all, "ml", "other").disrupted, ["other-0"]);
    assert_eq!(all.len(), 2, "no gang for the pod naming a missing group");
}

// ---- v1alpha1 ----

const WORKLOAD: &str = r#"
apiVersion: scheduling.k8s.io/v1alpha1
kind: Workload
metadata:
  name: train
  namespace: ml
  creationTimestamp: "2026-09-01T11:50:00Z"
spec:
  controllerRef: {apiGroup: batch, kind: Job, name: train}
  podGroups:
  - name: workers
    policy:
      gang: {minCount: 2}
  - name: sweep
    policy:
      gang: {minCount: 1}
---
apiVersion: v1
kind: Pod
metadata: {name: train-workers-0, namespace: ml}
spec:
  workloadRef: {name: train, podGroup: workers}
  nodeName: gpu-0
  containers:
  - {name: c, image: registry.example.com/ml/job:1.0}
status:
  phase: Running
---
apiVersion: v1
kind: Pod
metadata:
  name: train-workers-1
  namespace: ml
  deletionTimestamp: "2026-09-01T11:59:30Z"
spec:
  workloadRef: {name: train, podGroup: workers}
  nodeName: gpu-1
  containers:
  - {name: c, image: registry.example.com/ml/job:1.0}
status:
  phase: Running
  conditions:
  - {type: DisruptionTarget, status: "True", reason: PreemptionByScheduler}
---
apiVersion: v1
kind: Pod
metadata: {name: sweep-a-0, namespace: ml}
spec:
  workloadRef: {name: train, podGroup: sweep, podGroupReplicaKey: a}
  nodeName: gpu-2
  containers:
  - {name: c, image: registry.example.com/ml/job:1.0}
status:
  phase: Running
  conditions:
  - {type: DisruptionTarget, status: "True"}
---
apiVersion: v1
kind: Pod
metadata: {name: sweep-b-0, namespace: ml}
spec:
  workloadRef: {name: train, podGroup: sweep, podGroupReplicaKey: b}
  nodeName: gpu-3
  containers:
  - {name: c, image: registry.example.com/ml/job:1.0}
status:
  phase: Running
"#;

#[test]
fn a_workload_pod_group_is_keyed_by_workload_slash_pod_group() {
    let all = progress_of(WORKLOAD, &[]);
    let key = GangRef {
        namespace: "ml".into(),
        name: "train/workers".into(),
        api_version: "scheduling.k8s.io/v1alpha1".into(),
        kind: "Workload".into(),
    };
    let workers = &all[&key];
    assert_eq!(workers.disrupted, ["train-workers-1"]);
    assert_eq!(workers.min_count, 2);
    assert_eq!(workers.created_unix, CREATED);
    assert_eq!((workers.bound, workers.running), (1, 1));
    assert!(!workers.formed);
}

#[test]
fn a_replica_gang_lists_only_its_own_disrupted_members() {
    let all = progress_of(WORKLOAD, &[]);
    assert_eq!(gang(&all, "ml", "train/sweep/a").disrupted, ["sweep-a-0"]);
    assert!(gang(&all, "ml", "train/sweep/b").disrupted.is_empty());
    assert!(
        !all.keys().any(|k| k.name == "train/sweep"),
        "no gang without a replica key"
    );
}

// ---- nodes ----

fn node(value: serde_json::Value) -> Node {
    serde_json::from_value(value).unwrap()
}

#[test]
fn a_node_is_ready_when_its_ready_condition_is_true() {
    let ready = node(json!({
        "metadata": {"name": "gpu-0", "creationTimestamp": "2026-09-01T11:55:00Z"},
        "status": {"conditions": [
            {"type": "MemoryPressure", "status": "False"},
            {"type": "Ready", "status": "True", "reason": "KubeletReady"}
        ]}
    }));
    let p = node_progress(&ready).unwrap();
    assert_eq!(p.name, "gpu-0");
    assert_eq!(p.created_unix, NOW - 300);
    assert!(p.ready);
}

#[test]
fn a_node_without_a_true_ready_condition_is_not_ready() {
    for conditions in [
        json!([{"type": "Ready", "status": "False", "reason": "KubeletNotReady"}]),
        json!([{"type": "Ready", "status": "Unknown"}]),
        json!([{"type": "NetworkUnavailable", "status": "True"}]),
        json!([]),
    ] {
        let n = node(json!({
            "metadata": {"name": "gpu-1", "creationTimestamp": "2026-09-01T11:55:00Z"},
            "status": {"conditions": conditions}
        }));
        let p = node_progress(&n).unwrap();
        assert!(!p.ready, "{conditions}");
        assert_eq!((p.name.as_str(), p.created_unix), ("gpu-1", NOW - 300));
    }
    let no_status = node(json!({
        "metadata": {"name": "gpu-2", "creationTimestamp": "2026-09-01T11:55:00Z"}
    }));
    assert!(!node_progress(&no_status).unwrap().ready);
}

#[test]
fn a_node_without_a_name_or_creation_time_is_left_out() {
    let nameless = node(json!({
        "metadata": {"creationTimestamp": "2026-09-01T11:55:00Z"},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]}
    }));
    assert_eq!(node_progress(&nameless), None);
    let timeless = node(json!({
        "metadata": {"name": "gpu-0"},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]}
    }));
    assert_eq!(node_progress(&timeless), None);
}

// ---- group facts ----

#[test]
fn group_facts_read_failed_registered_and_pending_instances_through_the_node_table() {
    use kube::runtime::watcher::Event;

    use crate::cluster::NodeTable;
    use crate::model::{ErrorCode, Instance, InstanceError, InstanceState};
    use crate::scaleup::progress::group_facts;

    let instance = |name: &str, state, error: Option<&str>| Instance {
        id: format!("gangscaler-memory://gpu/{name}"),
        node_name: name.into(),
        state,
        error: error.map(|m| InstanceError {
            code: ErrorCode::Stockout,
            message: m.into(),
        }),
        claim: None,
    };
    let mut table = NodeTable::new();
    table.apply(&Event::Init);
    for (name, ready, created) in [
        ("gpu-0", true, Some("2026-09-01T11:55:00Z")),
        ("gpu-1", false, Some("2026-09-01T11:56:00Z")),
        ("gpu-2", true, None),
    ] {
        let mut value = json!({
            "apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
            "status": {"conditions": [{"type": "Ready", "status": if ready {"True"} else {"False"}}]}
        });
        if let Some(t) = created {
            value["metadata"]["creationTimestamp"] = json!(t);
        }
        table.apply(&Event::InitApply(node(value)));
    }
    table.apply(&Event::InitDone);
    let g = group_facts(
        vec![
            instance("gpu-0", InstanceState::Running, None),
            instance("gpu-1", InstanceState::Running, None),
            instance("gpu-2", InstanceState::Running, None),
            instance("gpu-3", InstanceState::Creating, None),
            instance("gpu-4", InstanceState::Deleting, None),
            instance("gpu-5", InstanceState::Creating, Some("no capacity")),
        ],
        &table,
        false,
    );
    assert_eq!(
        g.nodes,
        [
            NodeProgress {
                name: "gpu-0".into(),
                created_unix: NOW - 300,
                ready: true
            },
            NodeProgress {
                name: "gpu-1".into(),
                created_unix: NOW - 240,
                ready: false
            },
        ],
        "gpu-2 has no creation time and is left out"
    );
    assert_eq!(g.pending, 1, "gpu-3; gpu-4 is being deleted");
    assert_eq!(g.failed.len(), 1);
    assert!(g.failed[0].starts_with("gpu-5: "), "{:?}", g.failed);
    assert!(g.failed[0].ends_with(": no capacity"), "{:?}", g.failed);
}

// ---- the progress cache ----

mod cache {
    //! [`open_gang_progress`] with a [`ProgressCache`] kept across ticks equals the progress
    //! computed from scratch, after any sequence of pod, gang object and storage changes,
    //! VolumeAttachment changes and clock moves.

    use proptest::prelude::*;
    use serde_json::Value;

    use super::*;
    use crate::audit::{GangId, Phase};
    use crate::cluster::{GangIndex, PodKey};
    use crate::scaleup::progress::{ProgressCache, open_gang_progress};
    use crate::scaleup::track::Open;

    /// Every document of the fixtures above that share names (so that one replaces another).
    fn corpus() -> &'static [Value] {
        static CORPUS: std::sync::LazyLock<Vec<Value>> = std::sync::LazyLock::new(|| {
            [BOUND_GANG, PARTIAL_GANG, DISRUPTED, WORKLOAD]
                .iter()
                .flat_map(|text| crate::yaml::documents(text, &crate::yaml::OBJECTS).unwrap())
                .map(|d| d.value)
                .collect()
        });
        &CORPUS
    }

    fn kind(v: &Value) -> &str {
        v["kind"].as_str().unwrap_or_default()
    }

    /// Corpus object `i` changed by `how`: a pod unbound, moved, Pending, disrupted or being
    /// deleted; a PodGroup with a scheduled condition (fresh until `NOW + 200`) or a smaller
    /// `minCount`; a claim bound to the other volume; a volume of another CSI driver.
    fn changed(i: usize, how: Option<u8>) -> Value {
        let mut v = corpus()[i].clone();
        let Some(how) = how else {
            return v;
        };
        match (kind(&v), how % 5) {
            ("Pod", 0) => {
                v["spec"].as_object_mut().unwrap().remove("nodeName");
            }
            ("Pod", 1) => v["spec"]["nodeName"] = json!(format!("gpu-{}", how % 3)),
            ("Pod", 2) => v["status"] = json!({"phase": "Pending"}),
            ("Pod", 3) => {
                v["status"]["conditions"] =
                    json!([{"type": "DisruptionTarget", "status": "True", "reason": "x"}]);
            }
            ("Pod", _) => v["metadata"]["deletionTimestamp"] = json!("2026-09-01T11:59:30Z"),
            ("PodGroup", n) if n % 2 == 0 => {
                v["status"] = json!({"conditions": [{
                    "type": "PodGroupScheduled", "status": "True", "reason": "Scheduled",
                    "lastTransitionTime": "2026-09-01T11:58:20Z"
                }]});
            }
            ("PodGroup", _) => v["spec"]["schedulingPolicy"] = json!({"gang": {"minCount": 1}}),
            ("PersistentVolumeClaim", _) => v["spec"]["volumeName"] = json!("pv-data-1"),
            ("PersistentVolume", _) => v["spec"]["csi"]["driver"] = json!("other.csi.example.com"),
            _ => {}
        }
        v
    }

    fn apply(index: &mut GangIndex, v: &Value) {
        let mut set = ObjectSet::new();
        set.insert_value(v.clone()).unwrap();
        match kind(v) {
            "Pod" => index.apply_pod(Arc::new(set.pods().next().unwrap().clone())),
            "PodGroup" | "Workload" => {
                index.apply_gang_object(set.gang_objects().next().unwrap().clone());
            }
            "PersistentVolumeClaim" => index.apply_pvc(serde_json::from_value(v.clone()).unwrap()),
            "PersistentVolume" => index.apply_pv(serde_json::from_value(v.clone()).unwrap()),
            "StorageClass" => index.apply_storage_class(serde_json::from_value(v.clone()).unwrap()),
            other => panic!("no such kind in the corpus: {other}"),
        }
    }

    fn delete(index: &mut GangIndex, v: &Value) {
        let namespace = v["metadata"]["namespace"].as_str().unwrap_or("default");
        let name = v["metadata"]["name"].as_str().unwrap_or_default();
        match kind(v) {
            "Pod" => index.delete_pod(&PodKey {
                namespace: namespace.into(),
                name: name.into(),
            }),
            "PodGroup" | "Workload" => {
                let mut set = ObjectSet::new();
                set.insert_value(v.clone()).unwrap();
                index.delete_gang_object(&set.gang_objects().next().unwrap().key());
            }
            "PersistentVolumeClaim" => index.delete_pvc(namespace, name),
            "PersistentVolume" => index.delete_pv(name),
            _ => index.delete_storage_class(name),
        }
    }

    /// The VolumeAttachments picked by the bits of `mask`.
    fn attachments(mask: u8) -> Vec<Arc<VolumeAttachment>> {
        let all = [
            va("pv-data-0", "gpu-0", true),
            va("pv-data-1", "gpu-1", true),
            va("pv-data-1", "gpu-1", false),
            failed_va("pv-data-0", "gpu-0", "quota"),
            va("pv-data-1", "gpu-2", true),
        ];
        all.into_iter()
            .enumerate()
            .filter(|(i, _)| mask & (1 << i) != 0)
            .map(|(_, va)| va)
            .collect()
    }

    /// One open scale-up per gang name any corpus object can give.
    fn open() -> Vec<Open> {
        let names = [
            "train",
            "other",
            "train/workers",
            "train/sweep/a",
            "missing",
        ];
        names
            .iter()
            .enumerate()
            .map(|(i, name)| Open {
                scale_up_id: format!("su-{i}"),
                node_group: "gpu".into(),
                gang: Some(GangId {
                    namespace: "ml".into(),
                    name: (*name).into(),
                    api_version: String::new(),
                    kind: String::new(),
                }),
                nodes: 2,
                gang_nodes: 2,
                phase: Phase::Requested,
                requested_at_ms: CREATED * 1000,
                formed_at_ms: None,
                attached_at_ms: None,
                repair: crate::scaleup::Repair::default(),
            })
            .collect()
    }

    #[derive(Debug, Clone)]
    enum Step {
        Apply(usize, Option<u8>),
        Delete(usize),
        Attachments(u8),
        /// Seconds after [`NOW`].
        Clock(i64),
    }

    fn step() -> impl Strategy<Value = Step> {
        let n = corpus().len();
        prop_oneof![
            6 => (0..n, proptest::option::of(any::<u8>())).prop_map(|(i, h)| Step::Apply(i, h)),
            2 => (0..n).prop_map(Step::Delete),
            2 => any::<u8>().prop_map(Step::Attachments),
            1 => prop_oneof![Just(0i64), Just(199), Just(201)].prop_map(Step::Clock),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

        #[test]
        fn cached_progress_equals_progress_from_scratch(
            steps in proptest::collection::vec(step(), 1..40),
        ) {
            let open = open();
            let mut index = GangIndex::new();
            let mut cache = ProgressCache::new();
            let mut vas = Vec::new();
            let mut now = NOW;
            for (n, step) in steps.iter().enumerate() {
                match step {
                    Step::Apply(i, how) => apply(&mut index, &changed(*i, *how)),
                    Step::Delete(i) => delete(&mut index, &corpus()[*i]),
                    Step::Attachments(mask) => vas = attachments(*mask),
                    Step::Clock(dt) => now = NOW + dt,
                }
                let (view, cached) = open_gang_progress(&mut index, &mut cache, &open, &vas, now);
                let objects = index.objects().clone();
                let mut expected = progress(&objects, &gangs(&objects, now), &vas);
                expected.retain(|g, _| open.iter().any(|o| {
                    o.gang.as_ref().is_some_and(|w| w.namespace == g.namespace && w.name == g.name)
                }));
                prop_assert_eq!(&view, &gangs(&objects, now));
                prop_assert_eq!(&cached, &expected, "after step {} ({:?})", n, step);
                prop_assert!(cache.len() <= expected.len());
            }
        }
    }

    #[test]
    fn an_unchanged_gang_is_not_computed_again_and_a_changed_one_is() {
        let open = open();
        let tick = |index: &mut GangIndex, cache: &mut ProgressCache| {
            open_gang_progress(index, cache, &open, &[] as &[Arc<VolumeAttachment>], NOW)
        };
        let mut index = GangIndex::new();
        for i in 0..corpus().len() {
            apply(&mut index, &changed(i, None));
        }
        let mut cache = ProgressCache::new();
        let (_, first) = tick(&mut index, &mut cache);
        assert!(!first.is_empty());
        // Poison what the cache holds: a reuse shows.
        for entry in cache.entries.values_mut() {
            entry.progress.running += 100;
        }
        let (_, second) = tick(&mut index, &mut cache);
        let reused: Vec<&GangRef> = second
            .iter()
            .filter(|(_, p)| p.running >= 100)
            .map(|(g, _)| g)
            .collect();
        assert_eq!(reused.len(), first.len(), "{reused:?}");
        // A member of ml/other changes phase: that gang alone is computed again.
        let pod = corpus()
            .iter()
            .position(|v| kind(v) == "Pod" && v["metadata"]["name"] == "other-0")
            .unwrap();
        apply(&mut index, &changed(pod, Some(2)));
        let (_, third) = tick(&mut index, &mut cache);
        let other = gang(&third, "ml", "other");
        assert!(other.running < 100, "{other:?}");
        let still: usize = third.values().filter(|p| p.running >= 100).count();
        assert_eq!(still, first.len() - 1);
    }
}
