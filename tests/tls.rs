//! Mutual TLS over a real socket on 127.0.0.1, with certificates made by rcgen in the test:
//! clients without a certificate, or with one from an unrelated CA, are refused; the right
//! client is served; the server negotiates ALPN `h2` (grpc-go in CA 1.33+ insists on it); and
//! the transport settings are validated with field paths.

// clippy.toml's allow-expect-in-tests covers #[test] functions only, not the fixture helpers
// beside them; a failed expectation is a test failure either way.
#![expect(
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "test helpers outside #[test] fns: a panic is the test failure"
)]

mod common;

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use common::pki::TestCa;
use common::{Client, DEADLINE, TestServer, sample, write_files};
use gangscaler::config::{self, Source, Transport};
use gangscaler::proto;
use gangscaler::proto::cloud_provider_client::CloudProviderClient;
use rcgen::ExtendedKeyUsagePurpose;
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::ServerName;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Identity};

/// A PEM certificate and its PEM private key.
#[derive(Clone)]
struct Pair {
    cert: String,
    key: String,
}

/// Everything the tests need: the server's CA and chain, a client it trusts, and a client
/// from an unrelated CA.
struct Pki {
    ca: String,
    server: Pair,
    client: Pair,
    other_ca: String,
    other_client: Pair,
}

fn leaf(ca: &TestCa, name: &str, sans: &[&str], usage: ExtendedKeyUsagePurpose) -> Pair {
    let (cert, key) = ca.leaf(name, None, sans, usage);
    Pair { cert, key }
}

fn pki() -> Pki {
    let ca_ = TestCa::new("gangscaler test CA");
    let other = TestCa::new("unrelated CA");
    Pki {
        ca: ca_.pem(),
        server: leaf(
            &ca_,
            "gangscaler",
            &["localhost", "127.0.0.1"],
            ExtendedKeyUsagePurpose::ServerAuth,
        ),
        client: leaf(
            &ca_,
            "cluster-autoscaler",
            &[],
            ExtendedKeyUsagePurpose::ClientAuth,
        ),
        other_ca: other.pem(),
        other_client: leaf(
            &other,
            "cluster-autoscaler",
            &[],
            ExtendedKeyUsagePurpose::ClientAuth,
        ),
    }
}

const TLS_SERVER: &str = r#"server:
  address: "127.0.0.1:0"
  metricsAddress: "127.0.0.1:0"
  tls:
    certFile: tls/server.crt
    keyFile: tls/server.key
    clientCaFile: tls/ca.crt
nodeGroupsDir: nodegroups
"#;

const GROUP: &str = r#"id: gpu
minSize: 0
maxSize: 4
instanceType: p5.48xlarge
region: us-east-1
zone: us-east-1a
"#;

/// Writes the TLS files and a node group into `dir`, plus `provider` as provider.yaml.
fn write_config(dir: &Path, pki: &Pki, provider: &str) {
    write_files(
        dir,
        &[
            ("provider.yaml", provider),
            ("nodegroups/gpu.yaml", GROUP),
            ("tls/ca.crt", &pki.ca),
            ("tls/server.crt", &pki.server.cert),
            ("tls/server.key", &pki.server.key),
        ],
    );
}

fn install_crypto_provider() {
    // Already installed by another test in this process: fine.
    let _ = rustls::crypto::ring::default_provider().install_default();
}

async fn start(pki: &Pki) -> TestServer {
    install_crypto_provider();
    let dir = tempfile::tempdir().expect("temp dir");
    write_config(dir.path(), pki, TLS_SERVER);
    TestServer::start_in(dir).await
}

/// A tonic client trusting `ca`, presenting `identity` if given.
async fn tls_client(
    server: &TestServer,
    ca: &str,
    identity: Option<&Pair>,
) -> Result<Client, tonic::transport::Error> {
    let mut tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(ca))
        .domain_name("localhost");
    if let Some(id) = identity {
        tls = tls.identity(Identity::from_pem(&id.cert, &id.key));
    }
    // Dial the IP: "localhost" may resolve to ::1, where nothing listens.
    let channel = Channel::from_shared(format!("https://{}", server.grpc))
        .expect("valid uri")
        .tls_config(tls)?
        .connect_timeout(DEADLINE)
        .timeout(DEADLINE)
        .connect()
        .await?;
    Ok(CloudProviderClient::new(channel))
}

/// Connects and calls NodeGroups: the ids served, or why the call failed (connect or RPC).
async fn node_groups(
    server: &TestServer,
    ca: &str,
    identity: Option<&Pair>,
) -> Result<Vec<String>, String> {
    let attempt = async {
        let mut client = tls_client(server, ca, identity)
            .await
            .map_err(|e| format!("connect: {e:?}"))?;
        let resp = client
            .node_groups(proto::NodeGroupsRequest {})
            .await
            .map_err(|s| format!("call: {s:?}"))?;
        Ok(resp
            .into_inner()
            .node_groups
            .into_iter()
            .map(|g| g.id)
            .collect())
    };
    tokio::time::timeout(DEADLINE + DEADLINE, attempt)
        .await
        .expect("the server answers or refuses promptly instead of hanging")
}

async fn served_node_groups(server: &TestServer) -> f64 {
    let m = common::metrics(server.http).await;
    sample(
        &m,
        "grpc_server_handled_total{grpc_type=\"unary\",grpc_service=\"clusterautoscaler.cloudprovider.v1.externalgrpc.CloudProvider\",grpc_method=\"NodeGroups\",grpc_code=\"OK\"}",
    )
    .unwrap_or(0.0)
}

#[tokio::test]
async fn only_clients_with_a_certificate_from_the_configured_ca_are_served() {
    let pki = pki();
    let server = start(&pki).await;

    // The right client certificate: served.
    let ids = node_groups(&server, &pki.ca, Some(&pki.client))
        .await
        .expect("trusted client is served");
    assert_eq!(ids, vec!["gpu".to_owned()]);

    // Each refusal must happen for its own reason (the TLS alert or verification error).
    let refused: [(&str, &str, Option<&Pair>, &str); 4] = [
        (
            "no client certificate",
            &pki.ca,
            None,
            "CertificateRequired",
        ),
        (
            "client certificate from an unrelated CA",
            &pki.ca,
            Some(&pki.other_client),
            "UnknownCA",
        ),
        // A server-auth leaf of the right CA is not a client certificate.
        (
            "server's own certificate as client identity",
            &pki.ca,
            Some(&pki.server),
            "UnsupportedCertificate",
        ),
        // The client verifies the server too: a client trusting another CA must not proceed.
        (
            "client does not trust the server's CA",
            &pki.other_ca,
            Some(&pki.client),
            "UnknownIssuer",
        ),
    ];
    for (what, ca, identity, reason) in refused {
        match node_groups(&server, ca, identity).await {
            Ok(ids) => panic!("{what}: served {ids:?}"),
            Err(e) => assert!(
                e.contains(reason),
                "{what}: refused, but not with {reason}: {e}"
            ),
        }
    }

    // Plaintext against the TLS port fails as well.
    let plaintext = async {
        let mut c = CloudProviderClient::connect(format!("http://{}", server.grpc))
            .await
            .map_err(|e| e.to_string())?;
        c.node_groups(proto::NodeGroupsRequest {})
            .await
            .map_err(|s| s.to_string())
    };
    let plaintext = tokio::time::timeout(DEADLINE + DEADLINE, plaintext)
        .await
        .expect("plaintext attempt ends promptly");
    assert!(plaintext.is_err(), "plaintext client served: {plaintext:?}");

    // None of the refused attempts reached the service, and the server still serves.
    assert_eq!(served_node_groups(&server).await, 1.0);
    let ids = node_groups(&server, &pki.ca, Some(&pki.client))
        .await
        .expect("still serving");
    assert_eq!(ids, vec!["gpu".to_owned()]);
    assert_eq!(served_node_groups(&server).await, 2.0);
    server.stop().await;
}

fn pem_certs(pem: &str) -> Vec<rustls::pki_types::CertificateDer<'static>> {
    rustls_pemfile::certs(&mut pem.as_bytes())
        .collect::<Result<_, _>>()
        .expect("PEM certificates")
}

/// A mutual-TLS session with `server` over a raw rustls client presenting the trusted client
/// certificate and offering ALPN `h2`, as CA's grpc-go client does; nothing is sent after the
/// handshake.
async fn raw_tls(
    server: &TestServer,
    pki: &Pki,
) -> tokio_rustls::client::TlsStream<tokio::net::TcpStream> {
    // Read the files the server was configured with, as CA's client would.
    let tls_dir = server.dir.path().join("tls");
    let ca_pem = std::fs::read_to_string(tls_dir.join("ca.crt")).expect("ca.crt");
    let mut roots = rustls::RootCertStore::empty();
    for cert in pem_certs(&ca_pem) {
        roots.add(cert).expect("CA certificate is usable as a root");
    }
    let key = rustls_pemfile::private_key(&mut pki.client.key.as_bytes())
        .expect("PEM key")
        .expect("a private key");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("protocol versions")
        .with_root_certificates(roots)
        .with_client_auth_cert(pem_certs(&pki.client.cert), key)
        .expect("client identity");
    config.alpn_protocols = vec![b"h2".to_vec()];

    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let handshake = async {
        let tcp = tokio::net::TcpStream::connect(server.grpc)
            .await
            .expect("TCP connect");
        let name = ServerName::try_from("localhost").expect("server name");
        connector.connect(name, tcp).await
    };
    tokio::time::timeout(DEADLINE, handshake)
        .await
        .expect("handshake within the deadline")
        .expect("mutual TLS handshake succeeds")
}

#[tokio::test]
async fn server_negotiates_alpn_h2_with_a_raw_rustls_client() {
    let pki = pki();
    let server = start(&pki).await;

    let stream = raw_tls(&server, &pki).await;
    assert_eq!(
        stream.get_ref().1.alpn_protocol(),
        Some(&b"h2"[..]),
        "server must select ALPN h2"
    );
    drop(stream);
    server.stop().await;
}

/// Loads a configuration whose provider.yaml has `server` as its server block.
fn load(pki: &Pki, server: &str) -> (tempfile::TempDir, config::Result<config::Loaded>) {
    let dir = tempfile::tempdir().expect("temp dir");
    let provider = format!("server:\n{server}nodeGroupsDir: nodegroups\n");
    write_config(dir.path(), pki, &provider);
    let loaded = Source::with_env(dir.path(), HashMap::new()).load();
    (dir, loaded)
}

fn invalid_fields(result: config::Result<config::Loaded>) -> Vec<String> {
    match result {
        Err(config::Error::Invalid(list)) => list.into_iter().map(|e| e.field).collect(),
        Err(other) => panic!("expected Error::Invalid, got {other:?}"),
        Ok(loaded) => panic!("expected Error::Invalid, got {:?}", loaded.provider.server),
    }
}

#[test]
fn transport_settings_are_validated_with_field_paths() {
    let pki = pki();
    let tls = "  tls:\n    certFile: tls/server.crt\n    keyFile: tls/server.key\n    clientCaFile: tls/ca.crt\n";
    let addrs = "  address: \"127.0.0.1:0\"\n  metricsAddress: \"127.0.0.1:0\"\n";

    let refused = [
        (
            "plaintext together with tls",
            format!("{addrs}  plaintext: true\n{tls}"),
            "server.plaintext",
        ),
        (
            "plaintext on a non-loopback address",
            "  address: \"0.0.0.0:0\"\n  metricsAddress: \"127.0.0.1:0\"\n  plaintext: true\n"
                .to_owned(),
            "server.address",
        ),
        ("neither tls nor plaintext", addrs.to_owned(), "server.tls"),
        (
            "missing certificate file",
            format!(
                "{addrs}{}",
                tls.replace("tls/server.crt", "tls/missing.crt")
            ),
            "server.tls.certFile",
        ),
    ];
    for (what, server, field) in refused {
        let (_dir, result) = load(&pki, &server);
        let fields = invalid_fields(result);
        assert!(
            fields.iter().any(|f| f == field),
            "{what}: no error on {field}; errors on {fields:?}"
        );
    }

    // Positive controls: the refusals above are about the combination, not the parts.
    let (dir, result) = load(&pki, &format!("{addrs}{tls}"));
    let loaded = result.expect("tls alone is valid");
    match &loaded.provider.server.transport {
        Transport::Tls(files) => {
            assert_eq!(
                files.cert_file,
                dir.path().join("tls/server.crt"),
                "relative to the config dir"
            );
            assert_eq!(files.key_file, dir.path().join("tls/server.key"));
            assert_eq!(files.client_ca_file, Some(dir.path().join("tls/ca.crt")));
        }
        other => panic!("expected TLS, got {other:?}"),
    }
    let (_dir, result) = load(&pki, &format!("{addrs}  plaintext: true\n"));
    let loaded = result.expect("plaintext on loopback is valid");
    assert_eq!(
        loaded.provider.server.transport,
        Transport::Plaintext {
            non_loopback: false
        }
    );
    let forced = "  address: \"0.0.0.0:0\"\n  metricsAddress: \"127.0.0.1:0\"\n  plaintext: true\n  allowNonLoopbackPlaintext: true\n";
    let (_dir, result) = load(&pki, forced);
    let loaded = result.expect("forced non-loopback plaintext is valid");
    assert_eq!(
        loaded.provider.server.transport,
        Transport::Plaintext { non_loopback: true }
    );
}

/// TLS_SERVER with `server.connections` set to `connections` (YAML flow mapping).
fn tls_server_with(connections: &str) -> String {
    TLS_SERVER.replace(
        "nodeGroupsDir:",
        &format!("  connections: {connections}\nnodeGroupsDir:"),
    )
}

async fn start_with(pki: &Pki, provider: &str) -> TestServer {
    install_crypto_provider();
    let dir = tempfile::tempdir().expect("temp dir");
    write_config(dir.path(), pki, provider);
    TestServer::start_in(dir).await
}

/// Reads until the server closes the connection: `Ok` on EOF or reset, `Err` if it is still
/// open after `DEADLINE`.
async fn closed_by_server(stream: &mut tokio::net::TcpStream) -> Result<(), String> {
    use tokio::io::AsyncReadExt;
    let read_all = async {
        let mut buf = [0u8; 4096];
        loop {
            match stream.read(&mut buf).await {
                Ok(0) => return Ok(()),
                // Whatever the server sent first (its TLS alert or HTTP/2 settings) is read on.
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return Ok(()),
                Err(e) => return Err(format!("read failed: {e}")),
            }
        }
    };
    tokio::time::timeout(DEADLINE, read_all)
        .await
        .map_err(|_| format!("still open after {DEADLINE:?}"))?
}

/// The first bytes of a TLS ClientHello record: a record header announcing 512 bytes and the
/// start of the handshake message, then nothing more.
const HALF_CLIENT_HELLO: &[u8] = &[0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03];

#[tokio::test]
async fn silent_and_half_finished_connections_are_closed_after_the_handshake_timeout() {
    let pki = pki();
    let server = start_with(&pki, &tls_server_with("{handshakeTimeout: 1s}")).await;

    // A TCP connection that never says anything.
    let mut silent = tokio::net::TcpStream::connect(server.grpc).await.unwrap();
    closed_by_server(&mut silent)
        .await
        .expect("silent TCP connection is closed");

    // Half a TLS ClientHello.
    let mut half = tokio::net::TcpStream::connect(server.grpc).await.unwrap();
    {
        use tokio::io::AsyncWriteExt;
        half.write_all(HALF_CLIENT_HELLO).await.unwrap();
    }
    closed_by_server(&mut half)
        .await
        .expect("half TLS handshake is dropped");

    // A finished mutual-TLS handshake that never speaks HTTP/2.
    let mut session = raw_tls(&server, &pki).await;
    let read_all = async {
        use tokio::io::AsyncReadExt;
        let mut buf = [0u8; 4096];
        loop {
            match session.read(&mut buf).await {
                // The server's HTTP/2 settings frame may come first; then the end.
                Ok(n) if n > 0 => {}
                Ok(_) => return,
                // The server closes the TCP connection without a TLS close_notify.
                Err(_) => return,
            }
        }
    };
    tokio::time::timeout(DEADLINE, read_all)
        .await
        .expect("a TLS session without an HTTP/2 request is closed");

    // A real client is still served at once.
    let ids = node_groups(&server, &pki.ca, Some(&pki.client))
        .await
        .expect("trusted client is served");
    assert_eq!(ids, vec!["gpu".to_owned()]);
    server.stop().await;
}

#[tokio::test]
async fn connections_beyond_the_limit_are_closed_and_a_client_is_served_once_they_go_away() {
    let pki = pki();
    // A long handshake timeout: only the limit can close the third connection promptly.
    let server = start_with(&pki, &tls_server_with("{max: 2, handshakeTimeout: 5m}")).await;

    let first = tokio::net::TcpStream::connect(server.grpc).await.unwrap();
    let second = tokio::net::TcpStream::connect(server.grpc).await.unwrap();
    let mut third = tokio::net::TcpStream::connect(server.grpc).await.unwrap();
    closed_by_server(&mut third)
        .await
        .expect("the connection past the limit is closed");
    // While both silent connections hold their slots, a real client is refused as well.
    assert!(
        node_groups(&server, &pki.ca, Some(&pki.client))
            .await
            .is_err(),
        "served past the connection limit"
    );

    drop(first);
    drop(second);
    // The server notices the closes on its own time: retry until served.
    let served = async {
        loop {
            match node_groups(&server, &pki.ca, Some(&pki.client)).await {
                Ok(ids) => return ids,
                Err(_) => tokio::time::sleep(std::time::Duration::from_millis(50)).await,
            }
        }
    };
    let ids = tokio::time::timeout(DEADLINE, served)
        .await
        .expect("served once the silent connections are gone");
    assert_eq!(ids, vec!["gpu".to_owned()]);
    server.stop().await;
}

#[tokio::test]
async fn a_silent_plaintext_connection_is_closed_after_the_handshake_timeout() {
    let server = common::TestServer::start(&[
        (
            "provider.yaml",
            "server:\n  address: \"127.0.0.1:0\"\n  metricsAddress: \"127.0.0.1:0\"\n  plaintext: true\n  connections: {handshakeTimeout: 200ms}\nnodeGroupsDir: nodegroups\n",
        ),
        ("nodegroups/gpu.yaml", GROUP),
    ])
    .await;
    let mut silent = tokio::net::TcpStream::connect(server.grpc).await.unwrap();
    closed_by_server(&mut silent)
        .await
        .expect("silent plaintext connection is closed");
    // The metrics endpoint closes a silent connection on the same timeout.
    let mut silent = tokio::net::TcpStream::connect(server.http).await.unwrap();
    closed_by_server(&mut silent)
        .await
        .expect("silent metrics connection is closed");
    // A connection that speaks HTTP/2 in time is served.
    let mut c = server.client().await;
    let groups = common::node_groups(&mut c).await;
    assert!(groups.contains_key("gpu"), "{groups:?}");
    server.stop().await;
}

#[test]
fn connection_settings_are_validated_with_field_paths() {
    let pki = pki();
    let base = "  address: \"127.0.0.1:0\"\n  metricsAddress: \"127.0.0.1:0\"\n  plaintext: true\n";
    let refused = [
        (
            "no connections at all",
            "{max: 0}",
            "server.connections.max",
        ),
        (
            "zero handshake timeout",
            "{handshakeTimeout: 0s}",
            "server.connections.handshakeTimeout",
        ),
        (
            "not a duration",
            "{keepaliveInterval: soon}",
            "server.connections.keepaliveInterval",
        ),
        (
            "idle shorter than a keepalive round",
            "{idleTimeout: 40s, keepaliveInterval: 30s, keepaliveTimeout: 20s}",
            "server.connections.idleTimeout",
        ),
        (
            "unknown key",
            "{maxConnections: 3}",
            "server.connections.maxConnections",
        ),
        (
            "one address allowed more than the listener",
            "{max: 4, maxPerPeer: 5}",
            "server.connections.maxPerPeer",
        ),
        (
            "every slot reserved",
            "{max: 4, reservedForCertified: 4}",
            "server.connections.reservedForCertified",
        ),
        (
            "more per address than the metrics listener serves",
            "{metricsMaxPerPeer: 65}",
            "server.connections.metricsMaxPerPeer",
        ),
    ];
    for (what, connections, field) in refused {
        let (_dir, result) = load(&pki, &format!("{base}  connections: {connections}\n"));
        let fields = invalid_fields(result);
        assert!(
            fields.iter().any(|f| f == field),
            "{what}: no error on {field}; errors on {fields:?}"
        );
    }

    let (_dir, result) = load(&pki, base);
    let defaults = result
        .expect("no connections section")
        .provider
        .server
        .connections;
    assert_eq!(defaults, config::ConnectionSettings::default());
    let (_dir, result) = load(
        &pki,
        &format!(
            "{base}  connections: {{max: 3, handshakeTimeout: 2s, idleTimeout: 10m, keepaliveInterval: 1m, keepaliveTimeout: 5s}}\n"
        ),
    );
    let set = result
        .expect("valid connections section")
        .provider
        .server
        .connections;
    assert_eq!(
        set,
        config::ConnectionSettings {
            max: 3,
            // Unset: 32 capped at max, and a sixteenth of max.
            max_per_peer: 3,
            reserved_for_certified: 0,
            metrics_max_per_peer: 8,
            handshake_timeout: std::time::Duration::from_secs(2),
            idle_timeout: std::time::Duration::from_secs(600),
            keepalive_interval: std::time::Duration::from_secs(60),
            keepalive_timeout: std::time::Duration::from_secs(5),
        }
    );
}

// ---------------------------------------------------------------------------------------------
// Rotation: the files are re-read while serving; new connections use the new material.
// ---------------------------------------------------------------------------------------------

/// TLS_SERVER polling its files every 100ms.
fn rotating_server() -> String {
    TLS_SERVER.replace(
        "    clientCaFile: tls/ca.crt\n",
        "    clientCaFile: tls/ca.crt\n    pollInterval: 100ms\n",
    )
}

/// `gangscaler_tls_reloads_total{outcome}`.
async fn reloads(server: &TestServer, outcome: &str) -> f64 {
    let m = common::metrics(server.http).await;
    sample(
        &m,
        &format!("gangscaler_tls_reloads_total{{outcome=\"{outcome}\"}}"),
    )
    .unwrap_or_else(|| panic!("no {outcome} reload counter: {m}"))
}

/// Waits until `outcome` reloads reach `n`.
async fn until_reloads(server: &TestServer, outcome: &str, n: f64) {
    let wait = async {
        while reloads(server, outcome).await < n {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    };
    tokio::time::timeout(DEADLINE, wait)
        .await
        .unwrap_or_else(|_| panic!("no {n} {outcome} TLS reload(s) within {DEADLINE:?}"));
}

/// A server certificate for "localhost" and 127.0.0.1 from `ca`.
/// Rewrites the server's certificate and key with a pair from a new CA, waits for the first
/// successful reload, and returns that CA.
async fn rotate_server_to_new_ca(server: &TestServer) -> TestCa {
    let new_ca = TestCa::new("rotated server CA");
    let rotated = server_pair(&new_ca);
    write_files(
        server.dir.path(),
        &[
            ("tls/server.crt", &rotated.cert),
            ("tls/server.key", &rotated.key),
        ],
    );
    until_reloads(server, "success", 1.0).await;
    new_ca
}

fn server_pair(ca: &TestCa) -> Pair {
    leaf(
        ca,
        "gangscaler",
        &["localhost", "127.0.0.1"],
        ExtendedKeyUsagePurpose::ServerAuth,
    )
}

fn client_pair(ca: &TestCa) -> Pair {
    leaf(
        ca,
        "cluster-autoscaler",
        &[],
        ExtendedKeyUsagePurpose::ClientAuth,
    )
}

#[tokio::test]
async fn a_server_certificate_rotated_to_a_new_ca_is_served_on_new_connections_only() {
    let pki = pki();
    let server = start_with(&pki, &rotating_server()).await;
    let mut established = tls_client(&server, &pki.ca, Some(&pki.client))
        .await
        .expect("connected before the rotation");
    established
        .node_groups(proto::NodeGroupsRequest {})
        .await
        .expect("served");
    let m = common::metrics(server.http).await;
    assert_eq!(sample(&m, "gangscaler_tls_valid"), Some(1.0), "{m}");
    assert!(
        sample(
            &m,
            "gangscaler_tls_certificate_expiration_timestamp_seconds"
        )
        .is_some_and(|t| t > 1.7e9),
        "{m}"
    );
    assert!(
        sample(&m, "gangscaler_tls_last_reload_success_timestamp_seconds")
            .is_some_and(|t| t > 1.7e9),
        "set at start: {m}"
    );

    let new_ca = rotate_server_to_new_ca(&server).await;

    let ids = node_groups(&server, &new_ca.pem(), Some(&pki.client))
        .await
        .expect("a client trusting the new CA is served");
    assert_eq!(ids, vec!["gpu".to_owned()]);
    let err = node_groups(&server, &pki.ca, Some(&pki.client))
        .await
        .expect_err("a new connection trusting only the old CA must fail");
    assert!(err.contains("UnknownIssuer"), "{err}");
    // The connection made before the rotation keeps its session.
    established
        .node_groups(proto::NodeGroupsRequest {})
        .await
        .expect("the established connection is still served");
    assert_eq!(reloads(&server, "failure").await, 0.0);
    server.stop().await;
}

#[tokio::test]
async fn a_rotated_client_ca_refuses_old_clients_and_accepts_new_ones_on_new_connections() {
    let pki = pki();
    let server = start_with(&pki, &rotating_server()).await;
    let new_ca = TestCa::new("rotated client CA");
    let new_client = client_pair(&new_ca);
    let err = node_groups(&server, &pki.ca, Some(&new_client))
        .await
        .expect_err("not trusted yet");
    assert!(err.contains("UnknownCA"), "{err}");

    write_files(server.dir.path(), &[("tls/ca.crt", &new_ca.pem())]);
    until_reloads(&server, "success", 1.0).await;

    let ids = node_groups(&server, &pki.ca, Some(&new_client))
        .await
        .expect("a client of the new CA is served");
    assert_eq!(ids, vec!["gpu".to_owned()]);
    let err = node_groups(&server, &pki.ca, Some(&pki.client))
        .await
        .expect_err("a client of the old CA is refused on a new connection");
    assert!(err.contains("UnknownCA"), "{err}");
    server.stop().await;
}

#[tokio::test]
async fn a_bad_rotation_keeps_the_old_chain_and_the_next_good_one_is_picked_up() {
    let pki = pki();
    let server = start_with(&pki, &rotating_server()).await;

    // A key of another certificate.
    let stranger = server_pair(&TestCa::new("stranger"));
    write_files(server.dir.path(), &[("tls/server.key", &stranger.key)]);
    until_reloads(&server, "failure", 1.0).await;
    let m = common::metrics(server.http).await;
    assert_eq!(sample(&m, "gangscaler_tls_valid"), Some(0.0), "{m}");
    let ids = node_groups(&server, &pki.ca, Some(&pki.client))
        .await
        .expect("the old chain and key are still served");
    assert_eq!(ids, vec!["gpu".to_owned()]);

    // A half-written certificate (with the original key back).
    let half = &pki.server.cert[..pki.server.cert.len() / 2];
    write_files(
        server.dir.path(),
        &[
            ("tls/server.crt", half),
            ("tls/server.key", &pki.server.key),
        ],
    );
    until_reloads(&server, "failure", 2.0).await;
    node_groups(&server, &pki.ca, Some(&pki.client))
        .await
        .expect("still the old chain");

    // The next good rotation is picked up.
    let new_ca = rotate_server_to_new_ca(&server).await;
    node_groups(&server, &new_ca.pem(), Some(&pki.client))
        .await
        .expect("the good rotation is served");
    let m = common::metrics(server.http).await;
    assert_eq!(sample(&m, "gangscaler_tls_valid"), Some(1.0), "{m}");
    assert_eq!(reloads(&server, "failure").await, 2.0, "{m}");
    server.stop().await;
}

/// Lays `files` out as a Kubernetes Secret volume does: the files in a timestamped directory,
/// `..data` a symlink to it, and each file a symlink through `..data`.
#[cfg(unix)]
fn secret_volume_generation(tls: &Path, generation: &str, files: &[(&str, &str)]) {
    let dir = tls.join(generation);
    std::fs::create_dir_all(&dir).unwrap();
    for (name, text) in files {
        std::fs::write(dir.join(name), text).unwrap();
    }
    // The kubelet's atomic swap: a new link renamed over `..data`.
    let tmp = tls.join("..data_tmp");
    std::os::unix::fs::symlink(generation, &tmp).unwrap();
    std::fs::rename(&tmp, tls.join("..data")).unwrap();
    for (name, _) in files {
        let link = tls.join(name);
        if std::fs::symlink_metadata(&link).is_err() {
            std::os::unix::fs::symlink(format!("..data/{name}"), &link).unwrap();
        }
    }
}

#[cfg(unix)]
#[tokio::test]
async fn a_secret_volume_data_symlink_swap_is_picked_up() {
    install_crypto_provider();
    let pki = pki();
    let dir = tempfile::tempdir().expect("temp dir");
    write_files(
        dir.path(),
        &[
            ("provider.yaml", &rotating_server()),
            ("nodegroups/gpu.yaml", GROUP),
        ],
    );
    let tls = dir.path().join("tls");
    secret_volume_generation(
        &tls,
        "..2026_05_01_13_00_00.1",
        &[
            ("server.crt", &pki.server.cert),
            ("server.key", &pki.server.key),
            ("ca.crt", &pki.ca),
        ],
    );
    let server = TestServer::start_in(dir).await;
    node_groups(&server, &pki.ca, Some(&pki.client))
        .await
        .expect("served through the symlinks");

    let new_ca = TestCa::new("rotated server CA");
    let rotated = server_pair(&new_ca);
    let tls = server.dir.path().join("tls");
    secret_volume_generation(
        &tls,
        "..2026_05_01_14_00_00.2",
        &[
            ("server.crt", &rotated.cert),
            ("server.key", &rotated.key),
            ("ca.crt", &pki.ca),
        ],
    );
    std::fs::remove_dir_all(tls.join("..2026_05_01_13_00_00.1")).unwrap();
    until_reloads(&server, "success", 1.0).await;
    node_groups(&server, &new_ca.pem(), Some(&pki.client))
        .await
        .expect("the swapped-in certificate is served");
    assert_eq!(reloads(&server, "failure").await, 0.0);
    server.stop().await;
}
