//! Mutual TLS over a real socket on 127.0.0.1, with certificates made by rcgen in the test:
//! clients without a certificate, or with one from an unrelated CA, are refused; the right
//! client is served; the server negotiates ALPN `h2` (grpc-go in CA 1.33+ insists on it); and
//! the transport settings are validated with field paths.

// clippy.toml's allow-expect-in-tests covers #[test] functions only, not the fixture helpers
// beside them; a failed expectation is a test failure either way.
#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use common::{Client, DEADLINE, TestServer, sample, write_files};
use gangscaler::config::{self, Source, Transport};
use gangscaler::proto;
use gangscaler::proto::cloud_provider_client::CloudProviderClient;
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};
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

fn ca(name: &str) -> CertifiedIssuer<'static, KeyPair> {
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
    params.distinguished_name.push(DnType::CommonName, name);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    CertifiedIssuer::self_signed(params, KeyPair::generate().expect("CA key"))
        .expect("CA certificate")
}

fn leaf(
    issuer: &Issuer<'_, KeyPair>,
    name: &str,
    sans: &[&str],
    usage: ExtendedKeyUsagePurpose,
) -> Pair {
    let sans: Vec<String> = sans.iter().map(|s| (*s).to_owned()).collect();
    let mut params = CertificateParams::new(sans).expect("leaf params");
    params.distinguished_name.push(DnType::CommonName, name);
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![usage];
    let key = KeyPair::generate().expect("leaf key");
    let cert = params.signed_by(&key, issuer).expect("signing leaf");
    Pair {
        cert: cert.pem(),
        key: key.serialize_pem(),
    }
}

fn pki() -> Pki {
    let ca_ = ca("gangscaler test CA");
    let other = ca("unrelated CA");
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
        "gangscaler_grpc_requests_total{rpc=\"NodeGroups\",code=\"Ok\"}",
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

#[tokio::test]
async fn server_negotiates_alpn_h2_with_a_raw_rustls_client() {
    let pki = pki();
    let server = start(&pki).await;

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
    let stream = tokio::time::timeout(DEADLINE, handshake)
        .await
        .expect("handshake within the deadline")
        .expect("mutual TLS handshake succeeds");
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
            assert_eq!(files.client_ca_file, dir.path().join("tls/ca.crt"));
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
