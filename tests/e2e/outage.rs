//! gangscaler alone through an API-server outage: kube-apiserver is stopped while gangscaler
//! serves with `kubernetes.watch`, the kwok backend and the audit log, and started again on the
//! same port and etcd. The RPCs are called directly (as in `alone.rs`): CA itself cannot run
//! its loop without the API server, so this checks gangscaler's side only.
//!
//! What docs/ca-contract.md promises ("API-server outage"): reads answer from the last state; `Refresh`
//! stays OK; `NodeGroupIncreaseSize` answers `Unavailable` while the cluster view is stale (no
//! decision from objects that may be behind, and the kwok backend could not create nodes
//! anyway); the lifecycle loop records nothing while the view is stale; once the API server is
//! back and every watch has listed again, everything resumes: a gang that was pending before
//! the outage runs, its scale-up ends `succeeded` exactly once, and new scale-ups are decided.

use std::time::{Duration, Instant};

use gangscaler::audit::{Event, Outcome, read_files};
use gangscaler::proto::cloud_provider_client::CloudProviderClient;
use gangscaler::proto::{
    NodeGroupIncreaseSizeRequest, NodeGroupNodesRequest, NodeGroupTargetSizeRequest,
    NodeGroupTemplateNodeInfoRequest, NodeGroupsRequest, RefreshRequest,
};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use tonic::transport::Channel;

use super::harness::{self, Cluster, eventually, free_port, http_get, metric_value};
use super::scenario::{GangSpec, create_gang};
use super::start_gangscaler;

/// Writes a config folder: one kwok GPU group (8 GPUs per node, max 4) whose nodes come
/// `provisionDelay` after they are asked for, with the cluster view, strict admission, the
/// audit log and a fast lifecycle loop. Returns the gRPC and HTTP ports.
fn write_config(cluster: &Cluster, dir: &std::path::Path) -> (u16, u16) {
    let (grpc, http) = (free_port(), free_port());
    std::fs::create_dir_all(dir.join("nodegroups")).unwrap();
    harness::write(
        &dir.join("provider.yaml"),
        &format!(
            "server: {{address: \"127.0.0.1:{grpc}\", metricsAddress: \"127.0.0.1:{http}\", plaintext: true}}\n\
             kubernetes: {{kubeconfig: {}, watch: true}}\nadmission: {{policy: strict}}\n\
             audit: {{path: audit.jsonl}}\nlifecycle: {{interval: 500ms}}\n",
            cluster.kubeconfig.display()
        ),
    );
    harness::write(
        &dir.join("nodegroups/gpu.yaml"),
        "id: gpu\nminSize: 0\nmaxSize: 4\ninstanceType: p5.48xlarge\nregion: local\nzone: local-a\n\
         capacity: {cpu: \"192\", memory: 2048Gi, ephemeralStorage: 7600Gi, pods: 110}\n\
         gpu: {count: 8, product: NVIDIA-H100-80GB-HBM3, memory: 81559Mi}\n\
         taints: [{key: nvidia.com/gpu, value: present, effect: NoSchedule}]\n\
         backend: {type: kwok, provisionDelay: 15s}\n",
    );
    (grpc, http)
}

async fn connect(grpc: u16) -> CloudProviderClient<Channel> {
    let channel = Channel::from_shared(format!("http://127.0.0.1:{grpc}"))
        .unwrap()
        .timeout(Duration::from_secs(20))
        .connect()
        .await
        .unwrap();
    CloudProviderClient::new(channel)
}

/// gangscaler's `/metrics` sample `name`, if it answered.
async fn metric(http: u16, name: &str) -> Option<f64> {
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], http));
    let (status, body) = http_get(addr, "/metrics").await?;
    (status == 200).then_some(())?;
    metric_value(&body, name, &[])
}

async fn target(c: &mut CloudProviderClient<Channel>) -> Result<i32, tonic::Status> {
    c.node_group_target_size(NodeGroupTargetSizeRequest { id: "gpu".into() })
        .await
        .map(|r| r.into_inner().target_size)
}

async fn instance_ids(c: &mut CloudProviderClient<Channel>) -> Result<Vec<String>, tonic::Status> {
    c.node_group_nodes(NodeGroupNodesRequest { id: "gpu".into() })
        .await
        .map(|r| r.into_inner().instances.into_iter().map(|i| i.id).collect())
}

/// The members of gang `gang` (pods `<gang>-<i>`) that are Running.
async fn running(pods: &Api<Pod>, gang: &str) -> usize {
    let Ok(list) = pods.list(&ListParams::default()).await else {
        return 0;
    };
    list.items
        .iter()
        .filter(|p| {
            p.metadata
                .name
                .as_deref()
                .is_some_and(|n| n.starts_with(&format!("{gang}-")))
        })
        .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
        .count()
}

/// Waits until every member of `gang` carries the scheduler's Unschedulable verdict, so that
/// the watch has delivered them to gangscaler's view as well.
async fn wait_unschedulable(pods: &Api<Pod>, gang: &str, members: usize) {
    let what = format!("{members} members of {gang} Unschedulable");
    eventually(&what, Duration::from_secs(60), || {
        let pods = pods.clone();
        let prefix = format!("{gang}-");
        async move {
            let list = pods.list(&ListParams::default()).await.ok()?;
            let n = list
                .items
                .iter()
                .filter(|p| {
                    p.metadata
                        .name
                        .as_deref()
                        .is_some_and(|n| n.starts_with(&prefix))
                })
                .filter(|p| {
                    p.status
                        .as_ref()
                        .and_then(|s| s.conditions.as_ref())
                        .is_some_and(|c| {
                            c.iter().any(|c| {
                                c.type_ == "PodScheduled"
                                    && c.reason.as_deref() == Some("Unschedulable")
                            })
                        })
                })
                .count();
            (n == members).then_some(())
        }
    })
    .await;
    // The scheduler and gangscaler watch the same pods; give gangscaler's watch a moment.
    tokio::time::sleep(Duration::from_secs(2)).await;
}

#[tokio::test]
#[ignore = "needs control-plane binaries: tests/e2e/build.sh"]
async fn gangscaler_alone_serves_from_its_last_view_through_an_api_server_outage_and_resumes() {
    let mut cluster = Cluster::start("outage").await;
    let client = cluster.client().await;
    let api = harness::Versions::load().gang_api;
    let config = cluster.dir.join("gangscaler");
    let (grpc, http) = write_config(&cluster, &config);
    let audit = config.join("audit.jsonl");
    let mut server = start_gangscaler(&cluster, &config, http, "gangscaler");
    eventually("gangscaler ready", Duration::from_secs(60), || async move {
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], http));
        http_get(addr, "/readyz")
            .await
            .is_some_and(|(status, _)| status == 200)
            .then_some(())
    })
    .await;
    let mut c = connect(grpc).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");

    // A gang of two whole-node members, pending; its nodes are asked for just before the
    // outage and come 15 s later, so the gang can only run after it.
    create_gang(&client, &api, &GangSpec::new("before", 2)).await;
    wait_unschedulable(&pods, "before", 2).await;
    c.node_group_increase_size(NodeGroupIncreaseSizeRequest {
        id: "gpu".into(),
        delta: 1,
    })
    .await
    .unwrap();
    assert_eq!(
        target(&mut c).await.unwrap(),
        2,
        "rounded up to the whole gang"
    );
    let ids_before = instance_ids(&mut c).await.unwrap();
    let records_before = read_files(std::slice::from_ref(&audit))
        .unwrap()
        .records
        .len();
    assert!(records_before >= 1, "the admission decision is recorded");

    // Outage.
    let outage = Instant::now();
    cluster.stop_apiserver();
    eventually(
        "the cluster view stale",
        Duration::from_secs(60),
        || async move {
            (metric(http, "gangscaler_cluster_view_stale").await == Some(1.0)).then_some(())
        },
    )
    .await;
    server.assert_running();

    // Reads answer from the last state read.
    let groups = c
        .node_groups(NodeGroupsRequest {})
        .await
        .unwrap()
        .into_inner()
        .node_groups;
    assert_eq!(groups.len(), 1);
    assert_eq!(
        target(&mut c).await.unwrap(),
        2,
        "target size from the last read"
    );
    assert_eq!(instance_ids(&mut c).await.unwrap(), ids_before);
    c.node_group_template_node_info(NodeGroupTemplateNodeInfoRequest { id: "gpu".into() })
        .await
        .unwrap();
    // Refresh re-reads only the configuration files.
    c.refresh(RefreshRequest {}).await.unwrap();
    // No scale-up is decided from a view that may be behind.
    let err = c
        .node_group_increase_size(NodeGroupIncreaseSizeRequest {
            id: "gpu".into(),
            delta: 1,
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::Unavailable, "{err:?}");
    assert!(err.message().contains("stale"), "{}", err.message());
    // Still ready: it answers reads; the staleness is in the gauge and the logs.
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], http));
    assert_eq!(http_get(addr, "/readyz").await.map(|(s, _)| s), Some(200));

    // Let the lifecycle loop (500 ms interval) run through the outage: it records nothing.
    tokio::time::sleep(Duration::from_secs(8)).await;
    let during = read_files(std::slice::from_ref(&audit)).unwrap();
    assert!(during.bad.is_empty(), "{:?}", during.bad);
    assert_eq!(
        during.records.len(),
        records_before,
        "no record from a stale view: {:?}",
        &during.records[records_before..]
    );
    server.assert_running();
    eprintln!("API server down for {:.1}s", outage.elapsed().as_secs_f64());

    // The API server returns; every watch lists again and the loop resumes.
    cluster.restart_apiserver().await;
    let back = Instant::now();
    eventually(
        "the cluster view current",
        Duration::from_secs(90),
        || async move {
            (metric(http, "gangscaler_cluster_view_stale").await == Some(0.0)).then_some(())
        },
    )
    .await;
    eprintln!(
        "view current {:.1}s after the API server returned",
        back.elapsed().as_secs_f64()
    );

    // The gang pending before the outage runs, and its scale-up ends once, as succeeded.
    eventually("gang before running", Duration::from_secs(180), || {
        let pods = pods.clone();
        async move { (running(&pods, "before").await == 2).then_some(()) }
    })
    .await;
    let outcome = eventually(
        "the outcome of before's scale-up",
        Duration::from_secs(120),
        || {
            let audit = audit.clone();
            async move {
                let reading = read_files(std::slice::from_ref(&audit)).ok()?;
                let outcomes: Vec<_> = reading
                    .records
                    .iter()
                    .filter_map(|r| match &r.event {
                        Event::Outcome(o)
                            if o.gang
                                .as_ref()
                                .is_some_and(|g| g.name.starts_with("before")) =>
                        {
                            Some(o.clone())
                        }
                        _ => None,
                    })
                    .collect();
                (!outcomes.is_empty()).then_some(outcomes)
            }
        },
    )
    .await;
    assert_eq!(outcome.len(), 1, "{outcome:?}");
    assert_eq!(outcome[0].outcome, Outcome::Succeeded, "{outcome:?}");

    // New scale-ups are decided again.
    create_gang(&client, &api, &GangSpec::new("after", 2)).await;
    wait_unschedulable(&pods, "after", 2).await;
    c.node_group_increase_size(NodeGroupIncreaseSizeRequest {
        id: "gpu".into(),
        delta: 1,
    })
    .await
    .unwrap();
    assert_eq!(target(&mut c).await.unwrap(), 4);
    eventually("gang after running", Duration::from_secs(180), || {
        let pods = pods.clone();
        async move { (running(&pods, "after").await == 2).then_some(()) }
    })
    .await;
    server.assert_running();
}
