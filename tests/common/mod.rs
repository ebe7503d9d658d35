//! Shared fixtures for the integration tests: an in-process gangscaler on 127.0.0.1 ports
//! picked by the kernel, a plaintext client, thin RPC wrappers and a raw HTTP/1.1 GET for the
//! metrics endpoints. Each test binary uses a different subset, hence the `dead_code` allow;
//! helpers panic on broken fixtures, which fails the calling test.

#![expect(
    dead_code,
    clippy::expect_used,
    reason = "shared test helpers: each test crate uses part of them, and a panic is the test failure"
)]

pub mod pki;

use std::collections::HashMap;
use std::fmt::Debug;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use gangscaler::config::Source;
use gangscaler::proto;
use gangscaler::proto::cloud_provider_client::CloudProviderClient;
use gangscaler::readiness::Readiness;
use gangscaler::server::Server;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tonic::transport::Channel;
use tonic::{Code, Status};

/// The generated client over a tonic channel.
pub type Client = CloudProviderClient<Channel>;

/// Upper bound for anything that talks to the server; a hang fails the test instead of
/// blocking the suite.
pub const DEADLINE: Duration = Duration::from_secs(10);

/// Writes `files` (paths relative to `dir`, parent directories created) into `dir`.
pub fn write_files(dir: &Path, files: &[(&str, &str)]) {
    for (rel, text) in files {
        let path = dir.join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).expect("creating fixture directory");
        }
        std::fs::write(&path, text).expect("writing fixture file");
    }
}

/// A running server over a temporary configuration directory.
pub struct TestServer {
    /// The configuration directory (kept alive as long as the server).
    pub dir: tempfile::TempDir,
    /// gRPC address.
    pub grpc: SocketAddr,
    /// HTTP address (`/metrics`, `/healthz`, `/readyz`).
    pub http: SocketAddr,
    /// The server's readiness conditions (tests set the ones a collaborator would).
    pub readiness: Arc<Readiness>,
    shutdown: CancellationToken,
    task: JoinHandle<Result<(), gangscaler::server::Error>>,
}

impl TestServer {
    /// Writes `files` into a fresh temporary directory and serves it.
    pub async fn start(files: &[(&str, &str)]) -> Self {
        let dir = tempfile::tempdir().expect("creating temp dir");
        write_files(dir.path(), files);
        Self::start_in(dir).await
    }

    /// Serves the configuration already written into `dir`.
    pub async fn start_in(dir: tempfile::TempDir) -> Self {
        let source = Source::with_env(dir.path(), HashMap::new());
        let loaded = source
            .load()
            .unwrap_or_else(|e| panic!("fixture configuration is invalid: {e}"));
        let server = Server::bind(loaded, Some(source))
            .await
            .expect("binding the server");
        let grpc = server.grpc_addr().expect("gRPC listener has an address");
        let http = server.http_addr().expect("HTTP listener has an address");
        assert!(
            grpc.ip().is_loopback() && http.ip().is_loopback(),
            "{grpc} {http}"
        );
        let readiness = server.readiness();
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(server.run(shutdown.clone()));
        Self {
            dir,
            grpc,
            http,
            readiness,
            shutdown,
            task,
        }
    }

    /// Starts the shutdown (as SIGTERM does) without waiting for it.
    pub fn begin_shutdown(&self) {
        self.shutdown.cancel();
    }

    /// Whether the server task has ended.
    pub fn stopped(&self) -> bool {
        self.task.is_finished()
    }

    /// Waits up to `within` for the server to stop after [`Self::begin_shutdown`]; panics if
    /// it is still running or failed.
    pub async fn stopped_within(self, within: Duration) {
        let joined = tokio::time::timeout(within, self.task)
            .await
            .expect("server stops within the deadline");
        joined
            .expect("server task did not panic")
            .expect("server ran without error");
    }

    /// A new plaintext client on its own connection.
    pub async fn client(&self) -> Client {
        let channel = Channel::from_shared(format!("http://{}", self.grpc))
            .expect("valid uri")
            .connect_timeout(DEADLINE)
            .timeout(DEADLINE)
            .connect()
            .await
            .expect("connecting to the server");
        CloudProviderClient::new(channel)
    }

    /// Overwrites (or creates) a file in the configuration directory.
    pub fn write(&self, rel: &str, text: &str) {
        write_files(self.dir.path(), &[(rel, text)]);
    }

    /// Removes a file from the configuration directory.
    pub fn remove(&self, rel: &str) {
        std::fs::remove_file(self.dir.path().join(rel)).expect("removing fixture file");
    }

    /// Cancels the server and waits for a clean stop.
    pub async fn stop(self) {
        self.shutdown.cancel();
        self.stopped_within(DEADLINE).await;
    }
}

/// Asserts that `result` failed with `want` and returns the status.
#[track_caller]
pub fn expect_code<T: Debug>(result: Result<T, Status>, want: Code, what: &str) -> Status {
    match result {
        Ok(v) => panic!("{what}: expected {want:?}, got OK {v:?}"),
        Err(s) => {
            assert_eq!(s.code(), want, "{what}: message {:?}", s.message());
            s
        }
    }
}

/// Unwraps a call that must succeed, naming it on failure.
#[track_caller]
pub fn ok<T>(result: Result<T, Status>, what: &str) -> T {
    match result {
        Ok(v) => v,
        Err(s) => panic!("{what}: {:?}: {}", s.code(), s.message()),
    }
}

/// A node as CA sends it for a registered node.
pub fn node(provider_id: &str, name: &str) -> proto::ExternalGrpcNode {
    proto::ExternalGrpcNode {
        provider_id: provider_id.to_owned(),
        name: name.to_owned(),
        ..Default::default()
    }
}

/// A fake node as CA builds it from an instance: name = providerID = instance id.
pub fn fake_node(instance_id: &str, reason: &str) -> proto::ExternalGrpcNode {
    proto::ExternalGrpcNode {
        provider_id: instance_id.to_owned(),
        name: instance_id.to_owned(),
        labels: HashMap::new(),
        annotations: HashMap::from([(
            "k8s.io/cluster-autoscaler/fake-node-reason".to_owned(),
            reason.to_owned(),
        )]),
    }
}

/// The node name of a memory instance: the last path segment of its id.
pub fn node_name(instance_id: &str) -> &str {
    instance_id.rsplit('/').next().unwrap_or(instance_id)
}

/// NodeGroups as id → (min, max).
pub async fn node_groups(c: &mut Client) -> HashMap<String, (i32, i32)> {
    c.node_groups(proto::NodeGroupsRequest {})
        .await
        .expect("NodeGroups")
        .into_inner()
        .node_groups
        .into_iter()
        .map(|g| (g.id, (g.min_size, g.max_size)))
        .collect()
}

/// NodeGroupTargetSize.
pub async fn target_size(c: &mut Client, id: &str) -> Result<i32, Status> {
    c.node_group_target_size(proto::NodeGroupTargetSizeRequest { id: id.to_owned() })
        .await
        .map(|r| r.into_inner().target_size)
}

/// NodeGroupTargetSize that must succeed.
pub async fn target(c: &mut Client, id: &str) -> i32 {
    target_size(c, id)
        .await
        .unwrap_or_else(|s| panic!("TargetSize({id}): {s:?}"))
}

/// NodeGroupIncreaseSize.
pub async fn increase(c: &mut Client, id: &str, delta: i32) -> Result<(), Status> {
    c.node_group_increase_size(proto::NodeGroupIncreaseSizeRequest {
        id: id.to_owned(),
        delta,
    })
    .await
    .map(|_| ())
}

/// NodeGroupDecreaseTargetSize.
pub async fn decrease(c: &mut Client, id: &str, delta: i32) -> Result<(), Status> {
    c.node_group_decrease_target_size(proto::NodeGroupDecreaseTargetSizeRequest {
        id: id.to_owned(),
        delta,
    })
    .await
    .map(|_| ())
}

/// NodeGroupDeleteNodes.
pub async fn delete(
    c: &mut Client,
    id: &str,
    nodes: Vec<proto::ExternalGrpcNode>,
) -> Result<(), Status> {
    c.node_group_delete_nodes(proto::NodeGroupDeleteNodesRequest {
        id: id.to_owned(),
        nodes,
    })
    .await
    .map(|_| ())
}

/// NodeGroupNodes.
pub async fn instances(c: &mut Client, id: &str) -> Result<Vec<proto::Instance>, Status> {
    c.node_group_nodes(proto::NodeGroupNodesRequest { id: id.to_owned() })
        .await
        .map(|r| r.into_inner().instances)
}

/// NodeGroupNodes that must succeed.
pub async fn nodes(c: &mut Client, id: &str) -> Vec<proto::Instance> {
    instances(c, id)
        .await
        .unwrap_or_else(|s| panic!("NodeGroupNodes({id}): {s:?}"))
}

/// Instance ids, sorted.
pub fn ids(instances: &[proto::Instance]) -> Vec<String> {
    let mut ids: Vec<String> = instances.iter().map(|i| i.id.clone()).collect();
    ids.sort();
    ids
}

/// NodeGroupForNode: the returned group (an empty id for unmanaged nodes).
pub async fn group_for(c: &mut Client, node: proto::ExternalGrpcNode) -> proto::NodeGroup {
    c.node_group_for_node(proto::NodeGroupForNodeRequest { node: Some(node) })
        .await
        .expect("NodeGroupForNode")
        .into_inner()
        .node_group
        .unwrap_or_default()
}

/// A minimal HTTP/1.1 GET: (status code, body).
pub async fn http_get(addr: SocketAddr, path: &str) -> (u16, String) {
    let fetch = async {
        let mut stream = TcpStream::connect(addr)
            .await
            .expect("connecting to HTTP endpoint");
        let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
        stream
            .write_all(request.as_bytes())
            .await
            .expect("writing HTTP request");
        let mut raw = Vec::new();
        stream
            .read_to_end(&mut raw)
            .await
            .expect("reading HTTP response");
        raw
    };
    let raw = tokio::time::timeout(DEADLINE, fetch)
        .await
        .expect("HTTP response within the deadline");
    let text = String::from_utf8(raw).expect("HTTP response is UTF-8");
    let (head, body) = text
        .split_once("\r\n\r\n")
        .expect("HTTP response has a header block");
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("malformed status line in {head:?}"));
    (status, body.to_owned())
}

/// The value of the sample `series` (metric name plus label set, exactly as exposed) in a
/// text exposition; `None` if the series is absent.
pub fn sample(exposition: &str, series: &str) -> Option<f64> {
    exposition.lines().find_map(|line| {
        let value = line.strip_prefix(series)?.strip_prefix(' ')?;
        value.split_whitespace().next()?.parse().ok()
    })
}

/// Fetches `/metrics` and returns the body.
pub async fn metrics(addr: SocketAddr) -> String {
    let (status, body) = http_get(addr, "/metrics").await;
    assert_eq!(status, 200, "/metrics status; body {body:?}");
    body
}
