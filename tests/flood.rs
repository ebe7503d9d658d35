//! Connection floods over real sockets on the loopback range: a peer on 127.0.0.2 that holds
//! and reopens silent connections cannot lock out a fresh client on 127.0.0.1, on the gRPC
//! listener or the metrics one; with mutual TLS, an address that completed a handshake finds
//! a reserved slot when floods from other addresses have filled the rest. Every flood is
//! bounded in connections and time and stops with its test.

mod common;

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use common::pki::TestCa;
use common::{DEADLINE, TestServer, sample};
use gangscaler::proto;
use gangscaler::proto::cloud_provider_client::CloudProviderClient;
use rcgen::ExtendedKeyUsagePurpose;
use tokio::io::AsyncReadExt;
use tokio::net::{TcpSocket, TcpStream};
use tokio_rustls::rustls;
use tokio_util::sync::CancellationToken;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Identity};

const GROUP: &str = "id: gpu\nminSize: 0\nmaxSize: 4\ninstanceType: p5.48xlarge\nregion: us-east-1\nzone: us-east-1a\n";

fn plaintext(connections: &str) -> String {
    format!(
        "server:\n  address: \"127.0.0.1:0\"\n  metricsAddress: \"127.0.0.1:0\"\n  plaintext: true\n  connections: {connections}\nnodeGroupsDir: nodegroups\n"
    )
}

fn ip(last: u8) -> IpAddr {
    IpAddr::from([127, 0, 0, last])
}

/// A TCP connection to `to` from the address `from`.
async fn connect_from(from: IpAddr, to: SocketAddr) -> std::io::Result<TcpStream> {
    let socket = TcpSocket::new_v4()?;
    socket.bind(SocketAddr::new(from, 0))?;
    socket.connect(to).await
}

/// Waits until the server closes `stream` (EOF or reset), or `stop` fires.
async fn until_closed(stream: &mut TcpStream, stop: &CancellationToken) {
    let mut buf = [0u8; 512];
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            read = stream.read(&mut buf) => match read {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            },
        }
    }
}

/// `conns` silent connections from each of `from` to `to`, each reopened as soon as the
/// server closes it, until the returned token is cancelled.
fn flood(from: &[IpAddr], to: SocketAddr, conns: usize) -> CancellationToken {
    let stop = CancellationToken::new();
    for &addr in from {
        for _ in 0..conns {
            let stop = stop.clone();
            tokio::spawn(async move {
                while !stop.is_cancelled() {
                    match connect_from(addr, to).await {
                        Ok(mut stream) => until_closed(&mut stream, &stop).await,
                        // The backlog is full: try again shortly.
                        Err(_) => tokio::time::sleep(Duration::from_millis(5)).await,
                    }
                }
            });
        }
    }
    stop
}

/// One fresh plaintext client (its own connection, from 127.0.0.1) calling NodeGroups.
async fn fresh_call(grpc: SocketAddr) -> bool {
    let call = async {
        let channel = Channel::from_shared(format!("http://{grpc}"))
            .ok()?
            .connect()
            .await
            .ok()?;
        CloudProviderClient::new(channel)
            .node_groups(proto::NodeGroupsRequest {})
            .await
            .ok()
    };
    tokio::time::timeout(Duration::from_secs(2), call)
        .await
        .ok()
        .flatten()
        .is_some()
}

/// Fresh calls every 200ms for `tries` tries: how many were served.
async fn probe(grpc: SocketAddr, tries: usize) -> usize {
    let mut served = 0;
    for _ in 0..tries {
        if fresh_call(grpc).await {
            served += 1;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    served
}

async fn refused(server: &TestServer, listener: &str, reason: &str) -> f64 {
    let m = common::metrics(server.http).await;
    sample(
        &m,
        &format!(
            "gangscaler_connections_refused_total{{listener=\"{listener}\",reason=\"{reason}\"}}"
        ),
    )
    .unwrap_or_else(|| panic!("no refused series for {listener}/{reason} in {m}"))
}

/// Waits until the flood has met the limit (a refusal of `reason` was counted).
async fn flood_saturates(server: &TestServer, listener: &str, reason: &str) {
    let met = async {
        while refused(server, listener, reason).await < 1.0 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    assert!(
        tokio::time::timeout(DEADLINE, met).await.is_ok(),
        "the flood never met the {listener} limit ({reason})"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconnecting_flood_from_one_address_leaves_other_clients_served() {
    let server = TestServer::start(&[
        ("provider.yaml", &plaintext("{max: 64, maxPerPeer: 8}")),
        ("nodegroups/gpu.yaml", GROUP),
    ])
    .await;
    let stop = flood(&[ip(2)], server.grpc, 100);
    flood_saturates(&server, "grpc", "per_peer").await;
    let served = probe(server.grpc, 8).await;
    stop.cancel();
    assert_eq!(served, 8, "fresh clients on another address are all served");
    server.stop().await;
}

/// The same flood with no per-address limit (`maxPerPeer` = `max`, as before the limit
/// existed): it takes every slot and fresh clients are locked out, which is what the test
/// above would see without the limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_per_address_limit_the_same_flood_locks_fresh_clients_out() {
    let server = TestServer::start(&[
        ("provider.yaml", &plaintext("{max: 64, maxPerPeer: 64}")),
        ("nodegroups/gpu.yaml", GROUP),
    ])
    .await;
    let stop = flood(&[ip(2)], server.grpc, 100);
    // The flood's address holds all 64: its next connections are refused per address.
    flood_saturates(&server, "grpc", "per_peer").await;
    let served = probe(server.grpc, 4).await;
    stop.cancel();
    assert_eq!(
        served, 0,
        "slots held by silent connections are freed only at the handshake timeout"
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_the_metrics_port_leaves_scrapes_from_elsewhere_served() {
    let server = TestServer::start(&[
        ("provider.yaml", &plaintext("{metricsMaxPerPeer: 4}")),
        ("nodegroups/gpu.yaml", GROUP),
    ])
    .await;
    // More than the 64 connections the metrics listener serves.
    let stop = flood(&[ip(2)], server.http, 80);
    flood_saturates(&server, "metrics", "per_peer").await;
    for _ in 0..5 {
        let (status, _) = common::http_get(server.http, "/healthz").await;
        assert_eq!(status, 200);
    }
    stop.cancel();
    server.stop().await;
}

const MTLS: &str = r#"server:
  address: "127.0.0.1:0"
  metricsAddress: "127.0.0.1:0"
  tls:
    certFile: tls/server.crt
    keyFile: tls/server.key
    clientCaFile: tls/ca.crt
  connections: {max: 6, maxPerPeer: 6, reservedForCertified: 2, handshakeTimeout: 5m}
nodeGroupsDir: nodegroups
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certified_address_reconnects_into_a_reserved_slot_when_floods_fill_the_rest() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let ca = TestCa::new("flood test CA");
    let (server_cert, server_key) = ca.leaf(
        "gangscaler",
        None,
        &["localhost", "127.0.0.1"],
        ExtendedKeyUsagePurpose::ServerAuth,
    );
    let (client_cert, client_key) = ca.leaf(
        "cluster-autoscaler",
        None,
        &[],
        ExtendedKeyUsagePurpose::ClientAuth,
    );
    let server = TestServer::start(&[
        ("provider.yaml", MTLS),
        ("nodegroups/gpu.yaml", GROUP),
        ("tls/ca.crt", &ca.pem()),
        ("tls/server.crt", &server_cert),
        ("tls/server.key", &server_key),
    ])
    .await;
    let call = || async {
        let tls = ClientTlsConfig::new()
            .ca_certificate(Certificate::from_pem(ca.pem()))
            .identity(Identity::from_pem(&client_cert, &client_key))
            .domain_name("localhost");
        let channel = Channel::from_shared(format!("https://{}", server.grpc))
            .unwrap()
            .tls_config(tls)
            .unwrap()
            .timeout(Duration::from_secs(2))
            .connect()
            .await
            .map_err(|e| format!("{e:?}"))?;
        CloudProviderClient::new(channel)
            .node_groups(proto::NodeGroupsRequest {})
            .await
            .map_err(|s| format!("{s:?}"))
    };
    // The client completes one handshake: 127.0.0.1 is certified.
    call().await.expect("served before the flood");

    // Silent connections from four other addresses take the four unreserved slots.
    let stop = flood(&[ip(2), ip(3), ip(4), ip(5)], server.grpc, 3);
    flood_saturates(&server, "grpc", "full").await;
    let mut uncertified = connect_from(ip(9), server.grpc).await.unwrap();
    tokio::time::timeout(DEADLINE, until_closed(&mut uncertified, &stop))
        .await
        .expect("an uncertified address finds only reserved slots and is closed at once");

    // The certified address reconnects (a fresh connection) into a reserved slot.
    call()
        .await
        .expect("the certified client is served while the flood holds every other slot");
    stop.cancel();
    server.stop().await;
}
