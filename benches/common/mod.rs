//! The cluster the scale benchmarks share: 10,000 GPU nodes in 100 node groups, 100,000 pods
//! in 6,000 gangs (PodGroups, 16 or 17 members each; every 20th gang pending, the rest bound
//! and running), one PVC per gang, fed through the same [`PodWriter`] and [`GangIndex`] calls
//! the watchers make.

#![expect(dead_code, reason = "each benchmark uses part of the fixture")]

use std::sync::{Arc, Mutex};

use gangscaler::cluster::{GangIndex, GangObject, NodeTable, PodStore, PodWriter, SharedIndex};
use gangscaler::model::quantity::Quantity;
use gangscaler::model::{GpuSpec, NodeGroupSpec, RdmaSpec, Taint, TaintEffect, labels};
use gangscaler::testing;
use k8s_openapi::api::core::v1::{Node, PersistentVolumeClaim, Pod, PodSchedulingGroup};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::runtime::watcher::Event;

pub const NODES: usize = 10_000;
pub const PODS: usize = 100_000;
pub const GANGS: usize = 6_000;
pub const GROUPS: usize = 100;
/// Every this many gangs one is pending (300 of 6,000).
pub const PENDING_EVERY: usize = 20;
pub const GI: u64 = 1 << 30;
pub const EBS: &str = "ebs.csi.aws.com";
pub const RACK: &str = "topology.gangscaler.io/rack";
/// 2026-11-29T10:00:00Z, when the fixture's objects were created.
pub const T0: i64 = 1_795_946_400;

/// `name` in /proc/self/status, in MiB (`VmRSS` now, `VmHWM` the peak since start).
pub fn status_mib(name: &str) -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix(name))
        .and_then(|v| v.trim_start_matches(':').split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("a /proc/self/status field");
    kib / 1024.0
}

/// Node group `i`: kinds in turn 8x H100, 8x A100, 4x L4 (GPU-tainted, RDMA on H100/A100),
/// CPU only.
pub fn group(i: usize) -> NodeGroupSpec {
    let kind = i % 4;
    let mut g = testing::group(&format!("group-{i:03}"), 0, 128);
    g.csi.insert(EBS.into(), 24);
    g.topology.insert(RACK.into(), format!("rack-{i:03}"));
    if kind == 3 {
        return g;
    }
    let (gpus, product) = match kind {
        0 => (8, "NVIDIA-H100-80GB-HBM3"),
        1 => (8, "NVIDIA-A100-SXM4-80GB"),
        _ => (4, "NVIDIA-L4"),
    };
    if let Some(c) = g.capacity.as_mut() {
        c.cpu = Quantity::from_units(192);
        c.memory = Quantity::from_units(2048 * GI);
    }
    g.gpu = Some(GpuSpec {
        count: gpus,
        product: product.into(),
        memory: Quantity::from_units(80 * GI),
        resource_name: labels::DEFAULT_GPU_RESOURCE.into(),
    });
    if kind < 2 {
        g.rdma = Some(RdmaSpec {
            resource_name: "rdma/rdma_shared_device_a".into(),
            devices: 8,
            bandwidth_gbps: 3200,
            bandwidth_resource_name: labels::DEFAULT_RDMA_BANDWIDTH_RESOURCE.into(),
        });
    }
    g.taints.push(Taint {
        key: "nvidia.com/gpu".into(),
        value: "present".into(),
        effect: TaintEffect::NoSchedule,
    });
    g
}

pub fn node(i: usize) -> Node {
    serde_json::from_value(serde_json::json!({
        "metadata": {
            "name": format!("gpu-{i:05}"),
            "creationTimestamp": "2026-11-29T09:00:00Z",
            "labels": {
                "kubernetes.io/hostname": format!("gpu-{i:05}"),
                "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
                "node.kubernetes.io/instance-type": "p5.48xlarge",
                "topology.kubernetes.io/zone": "us-east-1a", "topology.kubernetes.io/region": "us-east-1",
                "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.count": "8",
                "gangscaler.io/node-group": format!("group-{:03}", i % GROUPS),
                "topology.gangscaler.io/rack": format!("rack-{:03}", i / 32)
            },
            "annotations": {"node.alpha.kubernetes.io/ttl": "0", "kwok.x-k8s.io/node": "fake"}
        },
        "spec": {"providerID": format!("kwok://group-{:03}/gpu-{i:05}", i % GROUPS),
                 "taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]},
        "status": {
            "capacity": {"cpu": "192", "memory": "2Ti", "pods": "110", "nvidia.com/gpu": "8", "rdma/rdma_shared_device_a": "8"},
            "allocatable": {"cpu": "190", "memory": "2024Gi", "pods": "110", "nvidia.com/gpu": "8", "rdma/rdma_shared_device_a": "8"},
            "conditions": [
                {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "kubelet is posting ready status"},
                {"type": "MemoryPressure", "status": "False", "reason": "KubeletHasSufficientMemory"}
            ],
            "addresses": [{"type": "InternalIP", "address": format!("10.0.{}.{}", i / 250, i % 250)}],
            "images": [{"names": ["nvcr.io/nvidia/pytorch:25.04-py3"], "sizeBytes": 21_000_000_000_u64}],
            "nodeInfo": {"architecture": "amd64", "bootID": "", "containerRuntimeVersion": "containerd://2.0",
                "kernelVersion": "6.8", "kubeProxyVersion": "", "kubeletVersion": "v1.36.2", "machineID": "",
                "operatingSystem": "linux", "osImage": "Ubuntu 24.04", "systemUUID": ""}
        }
    }))
    .expect("node fixture")
}

/// The gang of pod `i`.
pub fn gang_of(i: usize) -> usize {
    i % GANGS
}

/// Whether gang `g` is pending (its pods unbound).
pub fn pending(g: usize) -> bool {
    g.is_multiple_of(PENDING_EVERY)
}

/// Pod `i`, bound to a node unless its gang is pending or `unbound`; built by cloning one
/// parsed template so JSON temporaries do not inflate the heap.
pub fn pod(i: usize, unbound: bool) -> Pod {
    thread_local! {
        static TEMPLATE: Pod = template();
    }
    let g = gang_of(i);
    let mut p = TEMPLATE.with(Clone::clone);
    p.metadata.name = Some(format!("train-{g:05}-{:02}", i / GANGS));
    p.metadata.namespace = Some(format!("team-{}", g % 20));
    p.metadata.labels = Some(
        [
            ("app".to_owned(), "trainer".to_owned()),
            ("job-name".to_owned(), format!("train-{g:05}")),
        ]
        .into(),
    );
    let spec = p.spec.as_mut().expect("spec");
    spec.scheduling_group = Some(PodSchedulingGroup {
        pod_group_name: Some(format!("train-{g:05}")),
    });
    spec.node_selector = Some(
        [(
            "gangscaler.io/node-group".to_owned(),
            format!("group-{:03}", g % GROUPS),
        )]
        .into(),
    );
    if let Some(claim) = spec
        .volumes
        .as_mut()
        .and_then(|v| v.first_mut())
        .and_then(|v| v.persistent_volume_claim.as_mut())
    {
        claim.claim_name = format!("data-{g:05}");
    }
    if !(pending(g) || unbound) {
        spec.node_name = Some(format!("gpu-{:05}", i % NODES));
        let status = p.status.as_mut().expect("status");
        status.phase = Some("Running".into());
        if let Some(c) = status.conditions.as_mut().and_then(|c| c.first_mut()) {
            c.status = "True".into();
            c.reason = None;
            c.message = None;
        }
    }
    p
}

fn template() -> Pod {
    serde_json::from_value(serde_json::json!({
        "metadata": {
            "name": "train", "namespace": "team",
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "x".repeat(400)},
            "creationTimestamp": "2026-11-29T10:00:00Z"
        },
        "spec": {
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
            "priority": 1000,
            "containers": [{
                "name": "trainer", "image": "nvcr.io/nvidia/pytorch:25.04-py3",
                "command": ["torchrun", "--nnodes=16", "--nproc-per-node=8", "train.py"],
                "env": (0..12).map(|e| serde_json::json!({"name": format!("ENV_{e}"), "value": "some-configuration-value"})).collect::<Vec<_>>(),
                "resources": {"requests": {"cpu": "90", "memory": "900Gi", "nvidia.com/gpu": "8", "rdma/rdma_shared_device_a": "8"},
                              "limits": {"nvidia.com/gpu": "8", "rdma/rdma_shared_device_a": "8"}},
                "volumeMounts": [{"name": "data", "mountPath": "/data"}]
            }],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]
        },
        "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
            "message": "0/10000 nodes are available: 10000 Insufficient nvidia.com/gpu."}], "qosClass": "Burstable"}
    }))
    .expect("pod fixture")
}

/// The PodGroup of gang `g`, as the gang watcher hands it to the index.
pub fn pod_group(g: usize) -> GangObject {
    let members = PODS / GANGS + usize::from(g < PODS % GANGS);
    GangObject::new(
        "scheduling.k8s.io/v1alpha2",
        "PodGroup",
        serde_json::json!({
            "apiVersion": "scheduling.k8s.io/v1alpha2", "kind": "PodGroup",
            "metadata": {"name": format!("train-{g:05}"), "namespace": format!("team-{}", g % 20),
                         "creationTimestamp": "2026-11-29T10:00:00Z"},
            "spec": {"schedulingPolicy": {"gang": {"minCount": members}}, "priority": 1000},
            "status": {"conditions": [{"type": "PodGroupScheduled", "status": if pending(g) { "False" } else { "True" },
                "reason": "Unschedulable", "lastTransitionTime": "2026-11-29T10:00:05Z"}]}
        }),
    )
}

/// The claim every member of gang `g` mounts (unbound, class `ebs`: counts for the EBS driver).
pub fn pvc(g: usize) -> PersistentVolumeClaim {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": format!("data-{g:05}"), "namespace": format!("team-{}", g % 20)},
        "spec": {"storageClassName": "ebs", "accessModes": ["ReadWriteOnce"],
                 "resources": {"requests": {"storage": "100Gi"}}}
    }))
    .expect("pvc fixture")
}

pub fn storage_class() -> StorageClass {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": "ebs"}, "provisioner": EBS, "volumeBindingMode": "WaitForFirstConsumer"
    }))
    .expect("class fixture")
}

/// The watched cluster: the node table, the pod store and the gang index, filled through the
/// watchers' own entry points.
pub struct Cluster {
    /// What gangscaler keeps of each node, fed the node watcher's list events.
    pub node_table: NodeTable,
    pub pods: PodStore,
    pub writer: PodWriter,
    pub index: SharedIndex,
}

impl Cluster {
    /// Lists every object as the watchers do after connecting.
    pub fn build() -> Self {
        let mut node_table = NodeTable::new();
        node_table.apply(&Event::Init);
        for i in 0..NODES {
            node_table.apply(&Event::InitApply(node(i)));
        }
        node_table.apply(&Event::InitDone);
        let index: SharedIndex = Arc::new(Mutex::new(GangIndex::new()));
        {
            let mut index = index.lock().expect("index");
            index.apply_storage_class(storage_class());
            for g in 0..GANGS {
                index.apply_pvc(pvc(g));
                index.apply_gang_object(pod_group(g));
            }
        }
        let (pods, writer) = PodStore::new();
        let mut writer = writer.with_index(Arc::clone(&index));
        list_pods(&mut writer);
        Self {
            node_table,
            pods,
            writer,
            index,
        }
    }

    /// Watch event `k` of a steady churn: a member of a pending gang is bound, or unbound
    /// again (each changes one gang).
    pub fn churn(&mut self, k: usize) {
        let pending_gang = (k / 2 % (GANGS / PENDING_EVERY)) * PENDING_EVERY;
        let i = pending_gang + GANGS * (k % 16);
        let mut p = pod(i, false);
        if k.is_multiple_of(2) {
            p.spec.as_mut().expect("spec").node_name = Some(format!("gpu-{:05}", i % NODES));
        }
        self.writer.apply_pod(Event::Apply(p));
    }
}

/// One full list of every pod, as the watcher delivers it after (re)connecting.
pub fn list_pods(writer: &mut PodWriter) {
    writer.apply_pod(Event::Init);
    for i in 0..PODS {
        writer.apply_pod(Event::InitApply(pod(i, false)));
    }
    writer.apply_pod(Event::InitDone);
}
