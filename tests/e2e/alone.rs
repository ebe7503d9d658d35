//! gangscaler alone, without the cluster-autoscaler: the kwok backend, the cluster view and
//! gangscaler's own gRPC contract against the control plane (see `harness.rs`). Where a test
//! here calls gRPC itself it checks gangscaler's side of the contract (durable target size,
//! no duplicate after kill -9), not gang behaviour: every gang scenario is driven by the real
//! CA (`ca_*.rs`).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use gangscaler::config::KubernetesSettings;
use gangscaler::model::{
    AttachSimulation, BackendSpec, Claim, ErrorCode, GpuSpec, InstanceState, KwokBackendSpec,
    NodeGroupSpec, SimulatedFailure, Taint, TaintEffect, quantity::Quantity,
};
use gangscaler::proto::cloud_provider_client::CloudProviderClient;
use gangscaler::proto::{
    NodeGroupIncreaseSizeRequest, NodeGroupNodesRequest, NodeGroupTargetSizeRequest,
};
use gangscaler::provision::kwok::{KwokProvisioner, parse_provider_id};
use gangscaler::provision::{NodeRef, Provisioner};
use gangscaler::testing;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::storage::v1::{CSINode, VolumeAttachment};
use kube::api::{Api, ListParams, PostParams};

use super::harness::{self, Cluster, eventually, free_port};
use super::{create_dynamic, start_gangscaler};

const GPU_RESOURCE: &str = "nvidia.com/gpu";

fn kwok_group(id: &str, min: u32, max: u32, backend: KwokBackendSpec) -> NodeGroupSpec {
    let mut g = testing::group(id, min, max);
    g.gpu = Some(GpuSpec {
        count: 8,
        product: "NVIDIA-H100-80GB-HBM3".into(),
        memory: Quantity::from_units(80 << 30),
        resource_name: GPU_RESOURCE.into(),
    });
    g.csi = BTreeMap::from([("ebs.csi.aws.com".to_owned(), 4)]);
    g.taints = vec![Taint {
        key: GPU_RESOURCE.into(),
        value: "present".into(),
        effect: TaintEffect::NoSchedule,
    }];
    g.backend = BackendSpec::Kwok(backend);
    g
}

fn instant() -> KwokBackendSpec {
    KwokBackendSpec {
        provision_delay: Duration::ZERO,
        provision_stagger: Duration::ZERO,
        provision_jitter: Duration::ZERO,
        device_delay: Duration::ZERO,
        failure: None,
        attach: None,
    }
}

fn settings() -> KubernetesSettings {
    KubernetesSettings::default()
}

async fn provisioner(cluster: &Cluster) -> KwokProvisioner {
    KwokProvisioner::new(cluster.client().await, settings(), "nvidia.com/gpu.product")
}

/// A control plane, an admin client and a kwok provisioner that knows `group`.
async fn kwok_fixture(
    test: &str,
    group: &NodeGroupSpec,
) -> (Cluster, kube::Client, KwokProvisioner) {
    let cluster = Cluster::start(test).await;
    let client = cluster.client().await;
    let p = provisioner(&cluster).await;
    p.sync_groups(std::slice::from_ref(group)).await.unwrap();
    (cluster, client, p)
}

async fn group_nodes(client: &kube::Client, group: &str) -> Vec<Node> {
    let api: Api<Node> = Api::all(client.clone());
    api.list(&ListParams::default().labels(&format!("gangscaler.io/node-group={group}")))
        .await
        .unwrap()
        .items
}

#[tokio::test]
#[ignore = "needs control-plane binaries: tests/e2e/build.sh"]
async fn kwok_nodes_carry_the_template_and_a_csinode_and_become_ready() {
    let g = kwok_group("h100", 0, 4, instant());
    let (_cluster, client, p) = kwok_fixture("template", &g).await;
    assert_eq!(p.increase(&g, 2).await.unwrap(), 2);

    let nodes = group_nodes(&client, "h100").await;
    assert_eq!(nodes.len(), 2);
    for n in &nodes {
        let name = n.metadata.name.clone().unwrap();
        let spec = n.spec.as_ref().unwrap();
        assert_eq!(
            spec.provider_id.as_deref(),
            Some(format!("kwok://h100/{name}").as_str())
        );
        assert_eq!(spec.taints.as_ref().unwrap()[0].key, GPU_RESOURCE);
        let labels = n.metadata.labels.as_ref().unwrap();
        assert_eq!(labels["nvidia.com/gpu.product"], "NVIDIA-H100-80GB-HBM3");
        assert_eq!(labels["kubernetes.io/hostname"], name);
        let ann = n.metadata.annotations.as_ref().unwrap();
        assert_eq!(ann["kwok.x-k8s.io/node"], "fake");
        assert_eq!(
            ann["volumes.kubernetes.io/controller-managed-attach-detach"],
            "true"
        );
        let csi: Api<CSINode> = Api::all(client.clone());
        let csi = csi.get(&name).await.unwrap();
        assert_eq!(csi.spec.drivers.len(), 1);
        assert_eq!(csi.spec.drivers[0].name, "ebs.csi.aws.com");
        assert_eq!(
            csi.spec.drivers[0].allocatable.as_ref().unwrap().count,
            Some(4)
        );
    }
    // kwok marks them Ready, keeping the template's capacity; the backend reports them running.
    let api: Api<Node> = Api::all(client.clone());
    for n in &nodes {
        let name = n.metadata.name.clone().unwrap();
        let what = format!("{name} Ready with GPU allocatable");
        eventually(&what, Duration::from_secs(30), || {
            let api = api.clone();
            let name = name.clone();
            async move {
                let n = api.get(&name).await.ok()?;
                let status = n.status?;
                let ready = status
                    .conditions?
                    .iter()
                    .any(|c| c.type_ == "Ready" && c.status == "True");
                let gpus = status.allocatable?.get(GPU_RESOURCE)?.0.clone();
                (ready && gpus == "8").then_some(())
            }
        })
        .await;
    }
    let instances = p.instances(&g).await.unwrap();
    assert_eq!(instances.len(), 2);
    assert!(
        instances.iter().all(|i| i.state == InstanceState::Running),
        "{instances:?}"
    );
}

/// A client acting as `user`, who may do what the kwok backend does except create Nodes.
async fn without_node_create(cluster: &Cluster, admin: &kube::Client, user: &str) -> kube::Client {
    create_dynamic(admin, serde_json::json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": "kwok-without-node-create"},
        "rules": [
            {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "create", "update", "patch"]},
            {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "delete"]},
            {"apiGroups": [""], "resources": ["nodes/status"], "verbs": ["patch"]},
            {"apiGroups": ["storage.k8s.io"], "resources": ["csinodes"], "verbs": ["create"]}
        ]
    }))
    .await;
    create_dynamic(admin, serde_json::json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": "kwok-without-node-create"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "kwok-without-node-create"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]
    }))
    .await;
    let kc = kube::config::Kubeconfig::read_from(&cluster.kubeconfig).unwrap();
    let mut config =
        kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
            .await
            .unwrap();
    config.auth_info.impersonate = Some(user.to_owned());
    kube::Client::try_from(config).unwrap()
}

#[tokio::test]
#[ignore = "needs control-plane binaries: tests/e2e/build.sh"]
async fn an_increase_succeeds_once_its_target_is_committed_and_nodes_follow_from_the_loop() {
    let g = kwok_group("h100", 0, 4, instant());
    let (cluster, client, admin) = kwok_fixture("committed", &g).await;
    let restricted = KwokProvisioner::new(
        without_node_create(&cluster, &client, "kwok-restricted").await,
        settings(),
        "nvidia.com/gpu.product",
    );
    // The nodes are due at once, and this client may not create them: the target is
    // committed all the same, so the call succeeds.
    assert_eq!(restricted.increase(&g, 2).await.unwrap(), 2);
    assert_eq!(restricted.target_size(&g).await.unwrap(), 2);
    assert!(group_nodes(&client, "h100").await.is_empty());
    // The loop's next pass (here one with the permission) creates them.
    admin.materialize(&g).await.unwrap();
    assert_eq!(group_nodes(&client, "h100").await.len(), 2);
    assert_eq!(admin.target_size(&g).await.unwrap(), 2);
}

#[tokio::test]
#[ignore = "needs control-plane binaries: tests/e2e/build.sh"]
async fn with_its_loop_running_an_increase_answers_once_stored_and_the_loop_creates_the_nodes() {
    const N: u32 = 40;
    let g = kwok_group("h100", 0, 2 * N, instant());
    let (_cluster, client, p) = kwok_fixture("answer-fast", &g).await;
    let p = Arc::new(p);
    // No loop: the call creates the nodes due at once itself (the behaviour before).
    let started = Instant::now();
    assert_eq!(p.increase(&g, N).await.unwrap(), N);
    let inline = started.elapsed();
    assert_eq!(group_nodes(&client, "h100").await.len(), N as usize);
    // With the loop running (an hour between its own ticks, so only the call's wake-up can
    // make it create anything): the call answers once the target is stored.
    let shutdown = tokio_util::sync::CancellationToken::new();
    let looping = {
        let (p, g, shutdown) = (Arc::clone(&p), g.clone(), shutdown.clone());
        tokio::spawn(async move {
            p.run(move || vec![g.clone()], Duration::from_secs(3600), shutdown)
                .await;
        })
    };
    // The loop's first pass runs at once; give it time to start.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let started = Instant::now();
    assert_eq!(p.increase(&g, N).await.unwrap(), 2 * N);
    let answered = started.elapsed();
    eventually(
        "the loop creates the nodes",
        Duration::from_secs(60),
        || {
            let client = client.clone();
            async move { (group_nodes(&client, "h100").await.len() == 2 * N as usize).then_some(()) }
        },
    )
    .await;
    let created = started.elapsed();
    shutdown.cancel();
    looping.await.unwrap();
    eprintln!(
        "measured: increase of {N} kwok nodes due at once: {} ms creating them in the call; {} ms answering with the loop running ({} ms until the loop had created them)",
        inline.as_millis(),
        answered.as_millis(),
        created.as_millis()
    );
}

#[tokio::test]
#[ignore = "needs control-plane binaries: tests/e2e/build.sh"]
async fn a_restarted_provider_recovers_target_and_pending_capacity_without_duplicates() {
    let cluster = Cluster::start("restart").await;
    let client = cluster.client().await;
    let delayed = KwokBackendSpec {
        provision_delay: Duration::from_secs(2),
        ..instant()
    };
    let g = kwok_group("train", 0, 10, delayed);
    {
        let first = provisioner(&cluster).await;
        first.sync_groups(std::slice::from_ref(&g)).await.unwrap();
        assert_eq!(first.increase(&g, 3).await.unwrap(), 3);
        assert!(
            group_nodes(&client, "train").await.is_empty(),
            "nodes are not due yet"
        );
        // `first` goes away here, as a crashed provider would.
    }
    let a = provisioner(&cluster).await;
    let b = provisioner(&cluster).await;
    assert_eq!(
        a.target_size(&g).await.unwrap(),
        3,
        "target survives the restart"
    );
    tokio::time::sleep(Duration::from_millis(2100)).await;
    // Two providers materialise the same due capacity at once: still exactly three nodes.
    let (ra, rb) = tokio::join!(a.materialize(&g), b.materialize(&g));
    ra.unwrap();
    rb.unwrap();
    let nodes = group_nodes(&client, "train").await;
    assert_eq!(
        nodes.len(),
        3,
        "{:?}",
        nodes
            .iter()
            .map(|n| n.metadata.name.clone())
            .collect::<Vec<_>>()
    );
    let ids: BTreeSet<String> = b
        .instances(&g)
        .await
        .unwrap()
        .into_iter()
        .map(|i| i.id)
        .collect();
    assert_eq!(ids.len(), 3);
    assert_eq!(b.target_size(&g).await.unwrap(), 3);
    // Nothing left to cancel: all capacity exists.
    assert!(b.decrease_target(&g, 1).await.is_err());
}

#[tokio::test]
#[ignore = "needs control-plane binaries: tests/e2e/build.sh"]
async fn concurrent_increases_from_two_providers_never_pass_max() {
    let cluster = Cluster::start("concurrent").await;
    let a = Arc::new(provisioner(&cluster).await);
    let b = Arc::new(provisioner(&cluster).await);
    let delayed = KwokBackendSpec {
        provision_delay: Duration::from_secs(3600),
        ..instant()
    };
    let g = Arc::new(kwok_group("burst", 0, 12, delayed));
    let mut tasks = Vec::new();
    for i in 0..20 {
        let p = if i % 2 == 0 { a.clone() } else { b.clone() };
        let g = g.clone();
        tasks.push(tokio::spawn(async move { p.increase(&g, 1).await }));
    }
    let mut ok = 0;
    for t in tasks {
        if t.await.unwrap().is_ok() {
            ok += 1;
        }
    }
    assert_eq!(ok, 12, "exactly the headroom is granted");
    assert_eq!(a.target_size(&g).await.unwrap(), 12);
    // Not-yet-created capacity can be cancelled, and only that.
    assert_eq!(b.decrease_target(&g, 5).await.unwrap(), 7);
    assert!(a.decrease_target(&g, 8).await.is_err());
}

#[tokio::test]
#[ignore = "needs control-plane binaries: tests/e2e/build.sh"]
async fn delete_removes_nodes_lowers_target_and_refuses_foreign_nodes() {
    let g = kwok_group("del", 1, 5, instant());
    let (_cluster, client, p) = kwok_fixture("delete", &g).await;
    p.increase(&g, 2).await.unwrap();
    let instances = p.instances(&g).await.unwrap();
    assert_eq!(instances.len(), 3);
    let foreign = NodeRef {
        provider_id: "kwok://other/other-abcde".into(),
        name: "other-abcde".into(),
    };
    let victim = NodeRef {
        provider_id: instances[0].id.clone(),
        name: instances[0].node_name.clone(),
    };
    assert!(p.delete(&g, &[victim.clone(), foreign]).await.is_err());
    assert_eq!(group_nodes(&client, "del").await.len(), 3, "all or nothing");
    assert_eq!(p.delete(&g, &[victim]).await.unwrap(), 2);
    let names: Vec<String> = group_nodes(&client, "del")
        .await
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .collect();
    assert_eq!(names.len(), 2);
    assert!(!names.contains(&instances[0].node_name));
    // A CA fake node (name = providerID = instance id) deletes too, down to min and no further.
    let fake = NodeRef {
        provider_id: instances[1].id.clone(),
        name: instances[1].id.clone(),
    };
    assert_eq!(p.delete(&g, &[fake]).await.unwrap(), 1);
    let last = NodeRef {
        provider_id: instances[2].id.clone(),
        name: String::new(),
    };
    assert!(p.delete(&g, &[last]).await.is_err(), "min size 1");
}

#[tokio::test]
#[ignore = "needs control-plane binaries: tests/e2e/build.sh"]
async fn a_stockout_reports_failed_instances_that_delete_removes() {
    let spec = KwokBackendSpec {
        failure: Some(SimulatedFailure {
            after_instances: 1,
            code: ErrorCode::Stockout,
            per_million: SimulatedFailure::ALWAYS,
        }),
        ..instant()
    };
    let g = kwok_group("scarce", 0, 5, spec);
    let (_cluster, client, p) = kwok_fixture("stockout", &g).await;
    p.increase(&g, 3).await.unwrap();
    let instances = p.instances(&g).await.unwrap();
    let failed: Vec<_> = instances.iter().filter(|i| i.error.is_some()).collect();
    assert_eq!(failed.len(), 2, "{instances:?}");
    assert!(failed.iter().all(|i| i.state == InstanceState::Creating
        && i.error.as_ref().unwrap().code == ErrorCode::Stockout));
    assert_eq!(
        group_nodes(&client, "scarce").await.len(),
        1,
        "failed instances have no Node"
    );
    let refs: Vec<NodeRef> = failed
        .iter()
        .map(|i| NodeRef {
            provider_id: i.id.clone(),
            name: i.id.clone(),
        })
        .collect();
    assert_eq!(p.delete(&g, &refs).await.unwrap(), 1);
    assert!(
        p.instances(&g)
            .await
            .unwrap()
            .iter()
            .all(|i| i.error.is_none())
    );
}

#[tokio::test]
#[ignore = "needs control-plane binaries: tests/e2e/build.sh"]
async fn each_instance_keeps_its_claim_on_its_node_or_failure_across_a_restart() {
    let spec = KwokBackendSpec {
        failure: Some(SimulatedFailure {
            after_instances: 1,
            code: ErrorCode::Stockout,
            per_million: SimulatedFailure::ALWAYS,
        }),
        ..instant()
    };
    let g = kwok_group("claimed", 0, 5, spec);
    let (cluster, client, p) = kwok_fixture("claims", &g).await;
    assert!(p.keeps_claims());
    let a = Claim::for_gang("su-1-1", "ml", "a");
    let b = Claim::for_gang("su-1-1", "ml", "b");
    // Three instances: the first for gang a (it comes up), two for gang b (they stock out),
    // and a fourth without a claim.
    p.increase_for(&g, 3, &[a.clone(), b.clone(), b.clone()])
        .await
        .unwrap();
    p.increase(&g, 1).await.unwrap();
    let nodes = group_nodes(&client, "claimed").await;
    assert_eq!(nodes.len(), 1, "one node; the rest stocked out");
    let annotation = nodes[0]
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(gangscaler::model::labels::REQUESTED_FOR))
        .cloned();
    assert_eq!(annotation.as_deref(), Some("su-1-1/ml/a"));
    drop(p);
    // A restarted provider reads every claim back from the cluster.
    let restarted = provisioner(&cluster).await;
    let mut claims: Vec<(bool, Option<Claim>)> = restarted
        .instances(&g)
        .await
        .unwrap()
        .into_iter()
        .map(|i| (i.error.is_some(), i.claim))
        .collect();
    claims.sort();
    assert_eq!(
        claims,
        vec![
            (false, Some(a)),
            (true, None),
            (true, Some(b.clone())),
            (true, Some(b)),
        ]
    );
}

#[tokio::test]
#[ignore = "needs control-plane binaries: tests/e2e/build.sh"]
async fn withdraw_takes_back_pending_nodes_of_the_claims_named_and_nothing_else() {
    let slow = KwokBackendSpec {
        provision_delay: Duration::from_secs(3600),
        ..instant()
    };
    let g = kwok_group("withdrawn", 0, 8, slow);
    let (cluster, client, p) = kwok_fixture("withdraw", &g).await;
    let a = Claim::for_gang("su-1-1", "ml", "a");
    let b = Claim::for_gang("su-1-1", "ml", "b");
    p.increase_for(&g, 5, &[a.clone(), a.clone(), b.clone(), b.clone()])
        .await
        .unwrap();
    let mut pending = p.pending_claims(&g).await.unwrap();
    pending.sort();
    assert_eq!(pending, [a.clone(), a.clone(), b.clone(), b.clone()]);
    assert_eq!(
        p.withdraw(&g, &[a.clone(), a.clone(), a.clone()])
            .await
            .unwrap(),
        2
    );
    assert_eq!(p.withdraw(&g, &[a]).await.unwrap(), 0, "nothing left of a");
    // A restarted provider sees the same: b's two and the unclaimed one remain.
    drop(p);
    let restarted = provisioner(&cluster).await;
    assert_eq!(restarted.target_size(&g).await.unwrap(), 3);
    assert_eq!(restarted.pending_claims(&g).await.unwrap(), [b.clone(), b]);
    assert!(group_nodes(&client, "withdrawn").await.is_empty());
}

#[tokio::test]
#[ignore = "needs control-plane binaries: tests/e2e/build.sh"]
async fn the_simulated_attacher_attaches_or_fails_volume_attachments_on_its_nodes() {
    let spec = KwokBackendSpec {
        attach: Some(AttachSimulation {
            delay: Duration::from_millis(500),
            fail_driver: Some("broken.csi.example.com".into()),
        }),
        ..instant()
    };
    let g = kwok_group("vol", 0, 2, spec);
    let (_cluster, client, p) = kwok_fixture("attach", &g).await;
    p.increase(&g, 1).await.unwrap();
    let node = p.instances(&g).await.unwrap().remove(0).node_name;
    let api: Api<VolumeAttachment> = Api::all(client.clone());
    for (name, driver) in [
        ("va-good", "ebs.csi.aws.com"),
        ("va-bad", "broken.csi.example.com"),
    ] {
        let va: VolumeAttachment = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name},
            "spec": {"attacher": driver, "nodeName": node, "source": {"persistentVolumeName": format!("pv-{name}")}}
        }))
        .unwrap();
        api.create(&PostParams::default(), &va).await.unwrap();
    }
    p.simulate_attach(std::slice::from_ref(&g)).await.unwrap();
    let fresh = api.get("va-good").await.unwrap();
    assert!(
        !fresh.status.is_some_and(|s| s.attached),
        "attach waits for the configured delay"
    );
    // Creation timestamps have whole seconds, so the attacher counts from the end of that second.
    tokio::time::sleep(Duration::from_millis(1600)).await;
    p.simulate_attach(std::slice::from_ref(&g)).await.unwrap();
    let good = api.get("va-good").await.unwrap().status.unwrap();
    assert!(good.attached);
    let bad = api.get("va-bad").await.unwrap().status.unwrap();
    assert!(!bad.attached);
    assert!(
        bad.attach_error
            .unwrap()
            .message
            .unwrap()
            .contains("broken.csi.example.com")
    );
}

/// Writes a config dir for the gangscaler binary with one kwok GPU group (max 4).
fn write_config(cluster: &Cluster, dir: &std::path::Path, provision_delay: &str) -> (u16, u16) {
    write_config_with(
        cluster,
        dir,
        "",
        "",
        &format!("provisionDelay: {provision_delay}"),
    )
}

/// [`write_config`] with extra provider.yaml lines, extra node-group lines and the kwok backend
/// settings (inside `backend: {type: kwok, ...}`).
fn write_config_with(
    cluster: &Cluster,
    dir: &std::path::Path,
    provider_extra: &str,
    group_extra: &str,
    backend: &str,
) -> (u16, u16) {
    let (grpc, http) = (free_port(), free_port());
    std::fs::create_dir_all(dir.join("nodegroups")).unwrap();
    std::fs::write(
        dir.join("provider.yaml"),
        format!(
            "server: {{address: \"127.0.0.1:{grpc}\", metricsAddress: \"127.0.0.1:{http}\", plaintext: true}}\nkubernetes: {{kubeconfig: {}}}\n{provider_extra}",
            cluster.kubeconfig.display()
        ),
    )
    .unwrap();
    std::fs::write(
        dir.join("nodegroups/gpu.yaml"),
        format!(
            "id: gpu\nminSize: 0\nmaxSize: 4\ninstanceType: p5.48xlarge\nregion: local\nzone: local-a\n\
             capacity: {{cpu: \"192\", memory: 2048Gi, ephemeralStorage: 7600Gi, pods: 110}}\n\
             gpu: {{count: 8, product: NVIDIA-H100-80GB-HBM3, memory: 81559Mi}}\n\
             taints: [{{key: nvidia.com/gpu, value: present, effect: NoSchedule}}]\n\
             backend: {{type: kwok, {backend}}}\n{group_extra}"
        ),
    )
    .unwrap();
    (grpc, http)
}

#[tokio::test]
#[ignore = "needs control-plane binaries: tests/e2e/build.sh"]
async fn a_pending_gpu_pod_runs_on_a_node_added_through_the_grpc_api_and_a_kill_9_duplicates_nothing()
 {
    let cluster = Cluster::start("pod-runs").await;
    let client = cluster.client().await;
    let config = cluster.dir.join("gangscaler");
    let (grpc, http) = write_config(&cluster, &config, "3s");
    let mut server = start_gangscaler(&cluster, &config, http, "gangscaler-1");

    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "trainer-0"},
        "spec": {
            "nodeSelector": {"gangscaler.io/node-group": "gpu"},
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
            "containers": [{"name": "train", "image": "example.invalid/train:1",
                "resources": {"limits": {"nvidia.com/gpu": "1"}, "requests": {"cpu": "1", "nvidia.com/gpu": "1"}}}]
        }
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    let created = Instant::now();
    eventually("trainer-0 Unschedulable", Duration::from_secs(30), || {
        let pods = pods.clone();
        async move {
            let p = pods.get("trainer-0").await.ok()?;
            p.status?
                .conditions?
                .iter()
                .any(|c| c.type_ == "PodScheduled" && c.reason.as_deref() == Some("Unschedulable"))
                .then_some(())
        }
    })
    .await;

    // Stand-in for CA: the real cluster-autoscaler cannot be built here (module refused).
    let mut c = CloudProviderClient::connect(format!("http://127.0.0.1:{grpc}"))
        .await
        .unwrap();
    c.node_group_increase_size(NodeGroupIncreaseSizeRequest {
        id: "gpu".into(),
        delta: 1,
    })
    .await
    .unwrap();
    // Crash right after the increase, before the node is due, and restart.
    server.kill9();
    assert!(group_nodes(&client, "gpu").await.is_empty());
    let _server = start_gangscaler(&cluster, &config, http, "gangscaler-2");
    let mut c = CloudProviderClient::connect(format!("http://127.0.0.1:{grpc}"))
        .await
        .unwrap();
    let target = c
        .node_group_target_size(NodeGroupTargetSizeRequest { id: "gpu".into() })
        .await
        .unwrap()
        .into_inner()
        .target_size;
    assert_eq!(target, 1, "the increase survived kill -9");

    let node = eventually("trainer-0 Running", Duration::from_secs(60), || {
        let pods = pods.clone();
        async move {
            let p = pods.get("trainer-0").await.ok()?;
            let running = p.status.as_ref()?.phase.as_deref() == Some("Running");
            running.then(|| p.spec.and_then(|s| s.node_name)).flatten()
        }
    })
    .await;
    eprintln!(
        "pending-to-running: {:.1}s (includes a 3s provision delay and a kill -9 restart)",
        created.elapsed().as_secs_f64()
    );
    let nodes = group_nodes(&client, "gpu").await;
    assert_eq!(nodes.len(), 1, "no duplicate node after the restart");
    assert_eq!(nodes[0].metadata.name.as_deref(), Some(node.as_str()));
    let instances = c
        .node_group_nodes(NodeGroupNodesRequest { id: "gpu".into() })
        .await
        .unwrap()
        .into_inner()
        .instances;
    assert_eq!(instances.len(), 1);
    assert_eq!(
        parse_provider_id(&instances[0].id).map(|(_, n)| n),
        Some(node.as_str())
    );
}

#[tokio::test]
#[ignore = "needs control-plane binaries: tests/e2e/build.sh"]
async fn the_control_plane_serves_the_gang_scheduling_api_of_its_version_row() {
    let cluster = Cluster::start("gang-api").await;
    let client = cluster.client().await;
    let want = harness::Versions::load().gang_api;
    let (group, version) = want.split_once('/').unwrap();
    let groups = client.list_api_groups().await.unwrap();
    let served: Vec<String> = groups
        .groups
        .iter()
        .filter(|g| g.name == group)
        .flat_map(|g| g.versions.iter().map(|v| v.version.clone()))
        .collect();
    assert!(
        served.iter().any(|v| v == version),
        "{want} not served; {group} serves {served:?}"
    );
    let resources = client.list_api_group_resources(&want).await.unwrap();
    let kinds: BTreeSet<String> = resources.resources.iter().map(|r| r.kind.clone()).collect();
    assert!(kinds.contains("Workload"), "{want} kinds: {kinds:?}");
}

#[tokio::test]
#[ignore = "needs control-plane binaries: tests/e2e/build.sh"]
async fn the_cluster_view_discovers_the_gang_api_and_joins_pods_to_their_gang() {
    let cluster = Cluster::start("cluster-view").await;
    let client = cluster.client().await;
    let api = harness::Versions::load().gang_api;
    let pod = |name: &str, link: serde_json::Value| {
        let mut spec = serde_json::json!({
            "containers": [{"name": "c", "image": "example.invalid/train:1",
                "resources": {"requests": {"cpu": "2", "nvidia.com/gpu": "8"}, "limits": {"nvidia.com/gpu": "8"}}}]
        });
        spec.as_object_mut()
            .unwrap()
            .extend(link.as_object().unwrap().clone());
        serde_json::json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"}, "spec": spec})
    };
    if api.ends_with("/v1alpha1") {
        create_dynamic(&client, serde_json::json!({
            "apiVersion": api, "kind": "Workload", "metadata": {"name": "train", "namespace": "default"},
            "spec": {"podGroups": [{"name": "workers", "policy": {"gang": {"minCount": 2}}}]}
        }))
        .await;
        for i in 0..3 {
            create_dynamic(
                &client,
                pod(
                    &format!("train-{i}"),
                    serde_json::json!({"workloadRef": {"name": "train", "podGroup": "workers"}}),
                ),
            )
            .await;
        }
    } else {
        create_dynamic(&client, serde_json::json!({
            "apiVersion": api, "kind": "PodGroup", "metadata": {"name": "train", "namespace": "default"},
            "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}}
        }))
        .await;
        for i in 0..3 {
            create_dynamic(
                &client,
                pod(
                    &format!("train-{i}"),
                    serde_json::json!({"schedulingGroup": {"podGroupName": "train"}}),
                ),
            )
            .await;
        }
    }
    create_dynamic(&client, pod("loner", serde_json::json!({}))).await;

    let shutdown = tokio_util::sync::CancellationToken::new();
    let view = gangscaler::cluster::ClusterView::start(client.clone(), &shutdown)
        .await
        .unwrap();
    assert_eq!(view.gang_api(), Some(api.as_str()));
    view.wait_ready().await;
    let gangs = eventually(
        "the gang with its three pods",
        Duration::from_secs(20),
        || {
            let set = view.snapshot();
            async move {
                let v = gangscaler::cluster::gangs(&set, 0);
                if !v.problems.is_empty() {
                    eprintln!("problems: {:?}", v.problems);
                }
                (v.gangs.len() == 1 && v.gangs[0].members.len() == 3).then_some(v)
            }
        },
    )
    .await;
    let gang = &gangs.gangs[0];
    assert_eq!(gang.min_count, 2);
    assert_eq!(gang.id.api_version, api);
    assert!(gang.is_pending());
    assert!(
        gang.members
            .iter()
            .all(|m| m.demand.extended.get(GPU_RESOURCE) == Some(&8))
    );
    assert_eq!(
        gangs.ungrouped_pending.len(),
        1,
        "{:?}",
        gangs.ungrouped_pending
    );
    assert!(gangs.ungrouped_pending[0].0.ends_with("loner"));
    shutdown.cancel();
}
