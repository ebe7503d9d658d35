//! Memory of the cluster view: 10,000 nodes in a kube-rs reflector store (slimmed as the node
//! watcher does) and 100,000 pods in the [`PodStore`], filled through the same [`PodWriter`] the
//! pod watcher feeds (watcher events of full pods, compacted on arrival); then the peak while one
//! snapshot for the adapters exists and the gang view built from it, the pure part of one
//! lifecycle-loop tick over that snapshot (gang progress and 1,000 open scale-ups observed),
//! and a re-list.
//! Reports resident set size (VmRSS) from /proc/self/status; not a timed benchmark.
//!
//! Run: `cargo bench --features test-util --bench memory`.

#![allow(clippy::expect_used, reason = "a benchmark aborts on a broken fixture")]

use std::time::Instant;

use gangscaler::audit::{GangId, Phase};
use gangscaler::cluster::watch::slim_node;
use gangscaler::cluster::{GangObject, PodStore, PodWriter, gangs};
use gangscaler::scaleup::{Facts, Open, node_progress, observe, progress};
use k8s_openapi::api::core::v1::{Node, Pod, PodSchedulingGroup};
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher::Event;

const NODES: usize = 10_000;
const PODS: usize = 100_000;
const GANG_SIZE: usize = 16;

fn rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("VmRSS");
    kib / 1024.0
}

fn node(i: usize) -> Node {
    serde_json::from_value(serde_json::json!({
        "metadata": {
            "name": format!("gpu-{i:05}"),
            "labels": {
                "kubernetes.io/hostname": format!("gpu-{i:05}"),
                "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
                "node.kubernetes.io/instance-type": "p5.48xlarge",
                "topology.kubernetes.io/zone": "us-east-1a", "topology.kubernetes.io/region": "us-east-1",
                "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.count": "8",
                "gangscaler.io/node-group": format!("group-{:03}", i % 100),
                "topology.gangscaler.io/rack": format!("rack-{:03}", i / 32)
            },
            "annotations": {"node.alpha.kubernetes.io/ttl": "0", "kwok.x-k8s.io/node": "fake"}
        },
        "spec": {"providerID": format!("kwok://group-{:03}/gpu-{i:05}", i % 100),
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

/// A pod built by cloning one parsed template (so JSON temporaries do not inflate the heap).
fn pod(i: usize) -> Pod {
    thread_local! {
        static TEMPLATE: Pod = pod_from_json(0);
    }
    let gang = i / GANG_SIZE;
    let mut p = TEMPLATE.with(Clone::clone);
    p.metadata.name = Some(format!("train-{gang:05}-{}", i % GANG_SIZE));
    p.metadata.namespace = Some(format!("team-{}", gang % 20));
    p.metadata.labels = Some(
        [
            ("app".to_owned(), "trainer".to_owned()),
            ("job-name".to_owned(), format!("train-{gang:05}")),
        ]
        .into(),
    );
    let spec = p.spec.as_mut().expect("spec");
    spec.scheduling_group = Some(PodSchedulingGroup {
        pod_group_name: Some(format!("train-{gang:05}")),
    });
    spec.node_selector = Some(
        [(
            "gangscaler.io/node-group".to_owned(),
            format!("group-{:03}", gang % 100),
        )]
        .into(),
    );
    let volumes = spec.volumes.as_mut().expect("volumes");
    let claims = [format!("data-{gang}"), format!("ckpt-{i}")];
    for (volume, claim) in volumes.iter_mut().zip(claims) {
        volume
            .persistent_volume_claim
            .as_mut()
            .expect("claim")
            .claim_name = claim;
    }
    p
}

fn pod_from_json(i: usize) -> Pod {
    let gang = i / GANG_SIZE;
    serde_json::from_value(serde_json::json!({
        "metadata": {
            "name": format!("train-{gang:05}-{}", i % GANG_SIZE), "namespace": format!("team-{}", gang % 20),
            "labels": {"app": "trainer", "job-name": format!("train-{gang:05}")},
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "x".repeat(400)},
            "creationTimestamp": "2026-11-29T10:00:00Z"
        },
        "spec": {
            "schedulingGroup": {"podGroupName": format!("train-{gang:05}")},
            "nodeSelector": {"gangscaler.io/node-group": format!("group-{:03}", gang % 100)},
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
            "priority": 1000,
            "containers": [{
                "name": "trainer", "image": "nvcr.io/nvidia/pytorch:25.04-py3",
                "command": ["torchrun", "--nnodes=16", "--nproc-per-node=8", "train.py"],
                "env": (0..12).map(|e| serde_json::json!({"name": format!("ENV_{e}"), "value": "some-configuration-value"})).collect::<Vec<_>>(),
                "resources": {"requests": {"cpu": "90", "memory": "900Gi", "nvidia.com/gpu": "8", "rdma/rdma_shared_device_a": "8"},
                              "limits": {"nvidia.com/gpu": "8", "rdma/rdma_shared_device_a": "8"}},
                "volumeMounts": [{"name": "data", "mountPath": "/data"}, {"name": "ckpt", "mountPath": "/ckpt"}]
            }],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": format!("data-{gang}")}},
                        {"name": "ckpt", "persistentVolumeClaim": {"claimName": format!("ckpt-{i}")}}]
        },
        "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
            "message": "0/10000 nodes are available: 10000 Insufficient nvidia.com/gpu."}], "qosClass": "Burstable"}
    }))
    .expect("pod fixture")
}

fn fill<K>(n: usize, make: fn(usize) -> K, slim: fn(&mut K)) -> Store<K>
where
    K: kube::Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone + Default,
{
    let (reader, mut writer) = reflector::store::<K>();
    writer.apply_watcher_event(&Event::Init);
    for i in 0..n {
        let mut o = make(i);
        slim(&mut o);
        writer.apply_watcher_event(&Event::InitApply(o));
    }
    writer.apply_watcher_event(&Event::InitDone);
    reader
}

/// The PodGroup of gang `gang`, as the gang watcher would hand it to a snapshot.
fn pod_group(gang: usize) -> GangObject {
    GangObject::new(
        "scheduling.k8s.io/v1alpha2",
        "PodGroup",
        serde_json::json!({
            "apiVersion": "scheduling.k8s.io/v1alpha2", "kind": "PodGroup",
            "metadata": {"name": format!("train-{gang:05}"), "namespace": format!("team-{}", gang % 20),
                         "creationTimestamp": "2026-11-29T10:00:00Z"},
            "spec": {"schedulingPolicy": {"gang": {"minCount": GANG_SIZE}}, "priority": 1000},
            "status": {"conditions": [{"type": "PodGroupScheduled", "status": "False",
                "reason": "Unschedulable", "lastTransitionTime": "2026-11-29T10:00:05Z"}]}
        }),
    )
}

/// One full list of `n` pods, as the watcher delivers it after (re)connecting.
fn list_pods(writer: &mut PodWriter, n: usize) {
    writer.apply_pod(Event::Init);
    for i in 0..n {
        writer.apply_pod(Event::InitApply(pod(i)));
    }
    writer.apply_pod(Event::InitDone);
}

fn main() {
    let base = rss_mib();
    let nodes = fill(NODES, node, slim_node);
    let after_nodes = rss_mib();
    let (pods, mut writer) = PodStore::new();
    list_pods(&mut writer, PODS);
    let steady = rss_mib();
    println!("baseline RSS {base:.0} MiB");
    println!("{NODES} nodes: +{:.0} MiB", after_nodes - base);
    println!(
        "{PODS} pods: +{:.0} MiB ({:.0} bytes/pod)",
        steady - after_nodes,
        (steady - after_nodes) * 1024.0 * 1024.0 / PODS as f64
    );
    println!("steady RSS with both stores: {steady:.0} MiB (target < 300 MB)");

    // One admission snapshot: pods are shared with the store, gang objects are copied in.
    let started = Instant::now();
    let mut set = pods.to_object_set();
    let took = started.elapsed();
    let with_snapshot = rss_mib();
    println!(
        "peak RSS while one snapshot exists: {with_snapshot:.0} MiB (+{:.0} MiB; pods shared in {took:.1?})",
        with_snapshot - steady
    );
    let gang_count = PODS.div_ceil(GANG_SIZE);
    for g in 0..gang_count {
        set.insert_gang_object(pod_group(g));
    }
    let with_groups = rss_mib();
    println!(
        "... with the snapshot's {gang_count} PodGroups (JSON): {with_groups:.0} MiB (+{:.0} MiB)",
        with_groups - with_snapshot
    );
    let started = Instant::now();
    let view = gangs(&set, 0);
    let took = started.elapsed();
    let with_view = rss_mib();
    println!(
        "... and the gang view built from it in {took:.1?}: {with_view:.0} MiB (+{:.0} MiB for {} gangs, {} members with their demand, {} problems; {} nodes)",
        with_view - with_groups,
        view.gangs.len(),
        view.gangs.iter().map(|g| g.members.len()).sum::<usize>(),
        view.problems.len(),
        nodes.state().len()
    );

    // The pure part of one lifecycle tick: every gang's progress, then 1,000 open scale-ups
    // (one gang each, 16 nodes) observed against their group's nodes.
    let started = Instant::now();
    let attachments: Vec<std::sync::Arc<k8s_openapi::api::storage::v1::VolumeAttachment>> =
        Vec::new();
    let gang_progress = progress(&set, &view, &attachments);
    let progress_took = started.elapsed();
    let node_list: Vec<_> = nodes.state();
    let mut facts = Facts {
        groups: Default::default(),
        gangs: gang_progress
            .into_iter()
            .map(|(g, p)| ((g.namespace, g.name), p))
            .collect(),
    };
    for (i, n) in node_list.iter().enumerate() {
        let group = facts
            .groups
            .entry(format!("group-{:03}", i % 100))
            .or_default();
        group.nodes.extend(node_progress(n));
    }
    let open: Vec<Open> = view
        .gangs
        .iter()
        .take(1_000)
        .enumerate()
        .map(|(i, g)| Open {
            scale_up_id: format!("su-{i}"),
            node_group: format!("group-{:03}", i % 100),
            gang: Some(GangId::from(&g.id)),
            nodes: 16,
            gang_nodes: 16,
            phase: Phase::Requested,
            requested_at_ms: 0,
            formed_at_ms: None,
            attached_at_ms: None,
        })
        .collect();
    let started = Instant::now();
    let observed = observe(&open, &facts);
    println!(
        "lifecycle tick, pure part: gang progress of {} gangs in {progress_took:.1?}, {} open scale-ups observed in {:.1?}",
        view.gangs.len(),
        observed.len(),
        started.elapsed()
    );
    drop(facts);
    drop(view);
    drop(set);
    println!("RSS after the snapshot is dropped: {:.0} MiB", rss_mib());

    // A re-list (the watch broke): the new list is buffered, then swapped in.
    let started = Instant::now();
    list_pods(&mut writer, PODS);
    println!(
        "RSS after a re-list of every pod: {:.0} MiB ({} pods, compacted in {:.1?})",
        rss_mib(),
        pods.len(),
        started.elapsed()
    );
}
