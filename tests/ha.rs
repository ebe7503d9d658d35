//! Leader election over real sockets, with the Lease in memory ([`MemoryLeases`]): a standby
//! answers reads, refuses every change with `Unavailable` naming the leader, and is not
//! ready; it takes over once the holder stops renewing; a leader that cannot renew stops
//! acting and its server ends with `LeadershipLost`.

#![expect(clippy::unwrap_used, reason = "tests abort loudly")]
#![expect(
    clippy::disallowed_methods,
    reason = "HA tests time real leases and servers with the real clocks"
)]

mod common;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use common::{Client, expect_code, http_get, metrics, ok, sample};
use gangscaler::config::{LeaderElectionSettings, Source};
use gangscaler::leader::{LeaseRecord, MemoryLeases};
use gangscaler::proto;
use gangscaler::server::{Error, Server};
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep};
use tokio_util::sync::CancellationToken;
use tonic::Code;

const PROVIDER: &str = r#"server:
  address: "127.0.0.1:0"
  metricsAddress: "127.0.0.1:0"
  plaintext: true
"#;

const GPU: &str = r#"id: gpu
minSize: 0
maxSize: 8
instanceType: p5.48xlarge
region: us-east-1
zone: us-east-1a
capacity: {cpu: "192", memory: 2048Gi, ephemeralStorage: 7600Gi, pods: 110}
gpu: {count: 8, product: NVIDIA-H100-80GB-HBM3, memory: 81559Mi}
backend: {type: memory}
"#;

/// Short timings so that the test takes seconds; the algorithm does not depend on them.
fn election(identity: &str) -> LeaderElectionSettings {
    LeaderElectionSettings {
        lease_name: "gangscaler".into(),
        namespace: "kube-system".into(),
        identity: identity.into(),
        lease_duration: Duration::from_secs(3),
        renew_deadline: Duration::from_secs(2),
        retry_period: Duration::from_millis(300),
    }
}

struct Replica {
    _dir: tempfile::TempDir,
    grpc: SocketAddr,
    http: SocketAddr,
    shutdown: CancellationToken,
    task: JoinHandle<Result<(), Error>>,
}

impl Replica {
    /// A server over one memory group (the memory backend is refused with leader election
    /// in the files, since each process would have its own; here only the election is under
    /// test, so the settings are set after loading).
    async fn start(identity: &str, leases: &MemoryLeases) -> Self {
        let dir = tempfile::tempdir().unwrap();
        common::write_files(
            dir.path(),
            &[("provider.yaml", PROVIDER), ("nodegroups/gpu.yaml", GPU)],
        );
        let mut loaded = Source::with_env(dir.path(), HashMap::new()).load().unwrap();
        loaded.provider.leader_election = Some(election(identity));
        let server = Server::bind_with(loaded, None, Some(Arc::new(leases.clone())))
            .await
            .unwrap();
        let (grpc, http) = (server.grpc_addr().unwrap(), server.http_addr().unwrap());
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(server.run(shutdown.clone()));
        Self {
            _dir: dir,
            grpc,
            http,
            shutdown,
            task,
        }
    }

    async fn client(&self) -> Client {
        let channel = tonic::transport::Channel::from_shared(format!("http://{}", self.grpc))
            .unwrap()
            .connect_timeout(common::DEADLINE)
            .timeout(common::DEADLINE)
            .connect()
            .await
            .unwrap();
        proto::cloud_provider_client::CloudProviderClient::new(channel)
    }

    async fn ready(&self) -> (u16, String) {
        http_get(self.http, "/readyz").await
    }

    /// Waits (up to `within`) until `/readyz` answers `status`.
    async fn wait_ready(&self, status: u16, within: Duration) -> Duration {
        let start = Instant::now();
        loop {
            if self.ready().await.0 == status {
                return start.elapsed();
            }
            assert!(start.elapsed() < within, "/readyz never answered {status}");
            sleep(Duration::from_millis(50)).await;
        }
    }
}

fn held_by(holder: &str) -> LeaseRecord {
    LeaseRecord {
        holder: Some(holder.into()),
        lease_duration_s: Some(3),
        acquire_ms: Some(1),
        renew_ms: Some(1),
        transitions: 7,
        version: None,
    }
}

#[tokio::test]
async fn a_standby_answers_reads_refuses_changes_naming_the_leader_and_takes_over_when_the_leader_stops()
 {
    let leases = MemoryLeases::new();
    leases.put(held_by("replica-a"));
    let b = Replica::start("replica-b", &leases).await;
    let mut c = b.client().await;

    // Not ready, saying why.
    let (status, body) = b.ready().await;
    assert_eq!(status, 503, "{body}");
    assert!(
        body.contains("[-]leader failed: standby (replica-b): the leader is replica-a"),
        "{body}"
    );
    // Reads are answered.
    assert_eq!(common::node_groups(&mut c).await["gpu"], (0, 8));
    assert_eq!(common::target(&mut c, "gpu").await, 0);
    // Every change is refused with the retryable code, naming the leader; nothing changes.
    let s = expect_code(
        common::increase(&mut c, "gpu", 2).await,
        Code::Unavailable,
        "increase",
    );
    assert!(s.message().contains("standby"), "{}", s.message());
    assert!(
        s.message().contains("the leader is replica-a"),
        "{}",
        s.message()
    );
    expect_code(
        common::decrease(&mut c, "gpu", -1).await,
        Code::Unavailable,
        "decrease",
    );
    expect_code(
        common::delete(&mut c, "gpu", vec![common::node("memory://gpu/x", "x")]).await,
        Code::Unavailable,
        "delete",
    );
    assert_eq!(common::target(&mut c, "gpu").await, 0);
    let m = metrics(b.http).await;
    assert_eq!(sample(&m, "gangscaler_leader"), Some(0.0), "{m}");

    // While replica-a renews, replica-b stays a standby.
    for _ in 0..10 {
        sleep(Duration::from_millis(300)).await;
        let mut renewed = leases.lease().unwrap();
        renewed.renew_ms = renewed.renew_ms.map(|t| t + 300);
        leases.put(renewed);
    }
    assert_eq!(b.ready().await.0, 503);
    expect_code(
        common::increase(&mut c, "gpu", 1).await,
        Code::Unavailable,
        "increase",
    );

    // replica-a stops renewing: replica-b takes over after the lease duration.
    let took = b.wait_ready(200, Duration::from_secs(20)).await;
    assert!(took >= Duration::from_secs(2), "took over after {took:?}");
    assert_eq!(leases.lease().unwrap().holder(), Some("replica-b"));
    assert_eq!(leases.lease().unwrap().transitions, 8);
    ok(
        common::increase(&mut c, "gpu", 2).await,
        "increase as leader",
    );
    assert_eq!(common::target(&mut c, "gpu").await, 2);
    let m = metrics(b.http).await;
    assert_eq!(sample(&m, "gangscaler_leader"), Some(1.0), "{m}");
    assert_eq!(
        sample(&m, "gangscaler_leader_transitions_total"),
        Some(1.0),
        "{m}"
    );

    // A clean stop gives the Lease up.
    b.shutdown.cancel();
    b.task.await.unwrap().unwrap();
    assert_eq!(leases.lease().unwrap().holder(), None);
}

#[tokio::test]
async fn a_leader_that_cannot_renew_stops_acting_and_its_server_ends_with_leadership_lost() {
    let leases = MemoryLeases::new();
    let a = Replica::start("replica-a", &leases).await;
    a.wait_ready(200, Duration::from_secs(10)).await;
    let mut c = a.client().await;
    ok(
        common::increase(&mut c, "gpu", 1).await,
        "increase as leader",
    );

    // The API server becomes unreachable for this replica.
    leases.set_failing(true);
    let cut = Instant::now();
    let ended = tokio::time::timeout(Duration::from_secs(10), a.task)
        .await
        .expect("the server stops by itself")
        .unwrap();
    let after = cut.elapsed();
    match ended {
        Err(Error::LeadershipLost(lost)) => {
            assert!(lost.reason.contains("renewDeadline"), "{lost}");
        }
        other => panic!("expected LeadershipLost, got {other:?}"),
    }
    // It stopped within the renew deadline (plus the retry it was in), well before another
    // replica could take the Lease (3 s after it last saw it renewed).
    assert!(after <= Duration::from_millis(2_400), "{after:?}");
}
