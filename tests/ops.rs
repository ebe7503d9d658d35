//! Operability over real sockets on 127.0.0.1: `/healthz` and `/readyz` (which conditions
//! fail, and why), graceful shutdown (readiness false first, RPCs in flight finish, the grace
//! period bounds the wait), and the build and process metrics.

#![expect(
    clippy::unwrap_used,
    reason = "test helpers outside #[test] fns: a panic is the test failure"
)]

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use common::{DEADLINE, TestServer, http_get, metrics, sample};
use gangscaler::readiness::Condition;

const GROUP: &str = r#"id: gpu
minSize: 0
maxSize: 4
instanceType: p5.48xlarge
region: us-east-1
zone: us-east-1a
"#;

async fn start(grace: &str) -> TestServer {
    let provider = format!(
        "server:\n  address: \"127.0.0.1:0\"\n  metricsAddress: \"127.0.0.1:0\"\n  plaintext: true\n  shutdownGracePeriod: {grace}\nnodeGroupsDir: nodegroups\n"
    );
    TestServer::start(&[("provider.yaml", &provider), ("nodegroups/gpu.yaml", GROUP)]).await
}

/// Polls `/readyz` until `want` is its status; the last (status, body).
async fn readyz_until(addr: SocketAddr, want: u16) -> (u16, String) {
    let poll = async {
        loop {
            let (status, body) = http_get(addr, "/readyz").await;
            if status == want {
                return (status, body);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(DEADLINE, poll)
        .await
        .unwrap_or_else(|_| panic!("/readyz never answered {want}"))
}

#[tokio::test]
async fn readyz_names_each_failing_condition_and_healthz_stays_up() {
    let server = start("5s").await;
    let (status, body) = readyz_until(server.http, 200).await;
    assert_eq!(status, 200);
    assert!(body.contains("[+]serving ok"), "{body}");
    assert!(body.contains("[+]leader ok"), "{body}");
    assert!(body.ends_with("readyz check passed\n"), "{body}");

    // Leader election (another helper's hook) clears `leader`: not ready, and the body says
    // why; liveness is unaffected.
    server.readiness.set(Condition::Leader, false);
    let (status, body) = http_get(server.http, "/readyz").await;
    assert_eq!(status, 503, "{body}");
    assert!(
        body.contains("[-]leader failed: another replica holds the leader lease"),
        "{body}"
    );
    assert!(body.contains("[+]synced ok"), "{body}");
    assert!(body.ends_with("readyz check failed\n"), "{body}");
    assert_eq!(
        http_get(server.http, "/healthz").await,
        (200, "ok\n".into())
    );

    server.readiness.set(Condition::Synced, false);
    let (_, body) = http_get(server.http, "/readyz").await;
    assert!(body.contains("[-]synced failed"), "{body}");
    server.readiness.set(Condition::Synced, true);
    server.readiness.set(Condition::Leader, true);
    readyz_until(server.http, 200).await;
    server.stop().await;
}

/// A raw HTTP/2 client: the RPCs can be left half-sent, which no gRPC client does on purpose.
struct H2 {
    send: h2::client::SendRequest<Bytes>,
    addr: SocketAddr,
}

/// An empty protobuf message in a gRPC frame: no compression, length 0.
const EMPTY_MESSAGE: &[u8] = &[0, 0, 0, 0, 0];

impl H2 {
    async fn connect(addr: SocketAddr) -> Self {
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (send, conn) = h2::client::handshake(tcp).await.unwrap();
        tokio::spawn(async move {
            // Ends with an error when the server closes the connection: expected here.
            let _ = conn.await;
        });
        let send = send.ready().await.unwrap();
        Self { send, addr }
    }

    /// Sends the headers of a `NodeGroups` call, not its message.
    fn start_call(&mut self) -> (h2::client::ResponseFuture, h2::SendStream<Bytes>) {
        let request = http::Request::builder()
            .method("POST")
            .uri(format!(
                "http://{}/clusterautoscaler.cloudprovider.v1.externalgrpc.CloudProvider/NodeGroups",
                self.addr
            ))
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .body(())
            .unwrap();
        self.send.send_request(request, false).unwrap()
    }

    /// A whole `NodeGroups` call on the same connection. Its response proves the server has
    /// read every frame sent before it, such as the headers of a call left half-sent.
    async fn call(&mut self) -> Result<String, String> {
        let (response, mut body) = self.start_call();
        body.send_data(Bytes::from_static(EMPTY_MESSAGE), true)
            .map_err(|e| e.to_string())?;
        grpc_status(response).await
    }
}

/// The `grpc-status` of a response (its trailers), or why there is none.
async fn grpc_status(response: h2::client::ResponseFuture) -> Result<String, String> {
    let response = response.await.map_err(|e| format!("response: {e}"))?;
    let mut body = response.into_body();
    while let Some(chunk) = body.data().await {
        let chunk = chunk.map_err(|e| format!("body: {e}"))?;
        let _ = body.flow_control().release_capacity(chunk.len());
    }
    let trailers = body
        .trailers()
        .await
        .map_err(|e| format!("trailers: {e}"))?
        .ok_or("no trailers")?;
    Ok(trailers
        .get("grpc-status")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("none")
        .to_owned())
}

#[tokio::test]
async fn on_shutdown_readiness_fails_first_and_an_rpc_in_flight_completes() {
    // A grace period far longer than the test: only the RPC finishing can end the drain.
    let server = start("5m").await;
    readyz_until(server.http, 200).await;
    let mut client = H2::connect(server.grpc).await;
    let (in_flight, mut message) = client.start_call();
    assert_eq!(client.call().await, Ok("0".to_owned()), "served");

    server.begin_shutdown();
    let (_, body) = readyz_until(server.http, 503).await;
    assert!(
        body.contains("[-]shutdown failed: shutting down: draining in-flight RPCs"),
        "{body}"
    );
    assert!(
        body.contains("[+]serving ok"),
        "still serving RPCs in flight: {body}"
    );
    // The listener is closed: new connections are refused.
    let refused = async {
        loop {
            if tokio::net::TcpStream::connect(server.grpc).await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(DEADLINE, refused)
        .await
        .expect("new gRPC connections are refused while draining");
    assert!(!server.stopped(), "the server waits for the RPC in flight");

    // The call in flight finishes normally, and the server stops as soon as it has.
    message
        .send_data(Bytes::from_static(EMPTY_MESSAGE), true)
        .unwrap();
    assert_eq!(
        tokio::time::timeout(DEADLINE, grpc_status(in_flight))
            .await
            .expect("answered"),
        Ok("0".to_owned())
    );
    server.stopped_within(DEADLINE).await;
}

#[tokio::test]
async fn the_grace_period_bounds_how_long_an_unfinished_rpc_holds_the_shutdown() {
    let server = start("300ms").await;
    readyz_until(server.http, 200).await;
    let mut client = H2::connect(server.grpc).await;
    // Its message never comes.
    let (in_flight, _message) = client.start_call();
    assert_eq!(client.call().await, Ok("0".to_owned()), "served");

    server.begin_shutdown();
    server.stopped_within(DEADLINE).await;
    let outcome = tokio::time::timeout(DEADLINE, grpc_status(in_flight))
        .await
        .expect("the unfinished call ends when its connection is closed");
    assert_ne!(outcome, Ok("0".to_owned()), "never answered OK");
}

#[tokio::test]
async fn build_and_process_metrics_are_exposed() {
    let server = start("5s").await;
    let m = metrics(server.http).await;
    let build = m
        .lines()
        .find(|l| l.starts_with("gangscaler_build_info{"))
        .unwrap_or_else(|| panic!("no build info: {m}"));
    assert!(
        build.starts_with(&format!(
            "gangscaler_build_info{{version=\"{}\",git_commit=\"",
            env!("CARGO_PKG_VERSION")
        )),
        "{build}"
    );
    assert!(build.contains(",rustc=\"1."), "{build}");
    assert!(build.ends_with("} 1"), "{build}");
    #[cfg(target_os = "linux")]
    {
        for name in [
            "process_cpu_seconds_total",
            "process_resident_memory_bytes",
            "process_virtual_memory_bytes",
            "process_open_fds",
            "process_max_fds",
            "process_start_time_seconds",
        ] {
            assert!(sample(&m, name).is_some(), "{name} missing: {m}");
        }
        // The process's own sockets are among its open descriptors.
        assert!(sample(&m, "process_open_fds").unwrap() >= 3.0);
        assert!(sample(&m, "process_resident_memory_bytes").unwrap() > 0.0);
        // Process metrics have no gangscaler prefix (the standard names), and TLS metrics are
        // absent without TLS.
        assert!(!m.contains("gangscaler_process_"), "{m}");
        assert!(!m.contains("gangscaler_tls_"), "{m}");
    }
    server.stop().await;
}

/// Audit lines a server cannot read back (here: written by a newer schema) do not stop it, and
/// `gangscaler_audit_unreadable_lines` counts them, so that an alert can say the scale-ups
/// they record are not followed.
#[tokio::test]
async fn audit_lines_that_cannot_be_read_back_are_counted_at_start() {
    let provider = "server:\n  address: \"127.0.0.1:0\"\n  metricsAddress: \"127.0.0.1:0\"\n  plaintext: true\naudit:\n  path: audit.jsonl\nnodeGroupsDir: nodegroups\n";
    let line = r#"{"schema":99,"tsMs":1,"event":"phase"}"#;
    let log = format!("{line}\n{line}\n{line}\n");
    let server = TestServer::start(&[
        ("provider.yaml", provider),
        ("nodegroups/gpu.yaml", GROUP),
        ("audit.jsonl", &log),
    ])
    .await;
    let m = metrics(server.http).await;
    assert_eq!(
        sample(&m, "gangscaler_audit_unreadable_lines"),
        Some(3.0),
        "{m}"
    );
    server.stop().await;

    let clean =
        TestServer::start(&[("provider.yaml", provider), ("nodegroups/gpu.yaml", GROUP)]).await;
    let m = metrics(clean.http).await;
    assert_eq!(sample(&m, "gangscaler_audit_unreadable_lines"), Some(0.0));
    clean.stop().await;
}
