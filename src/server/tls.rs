//! The gRPC listener's mutual TLS, built from the PEM files of `server.tls`: client
//! certificates chaining to the client CA are required, and ALPN `h2` is offered (grpc-go
//! clients, CA 1.33+, insist on it). Handshakes run in [`super::conn`] under its timeout.
//!
//! **Rotation.** [`Tls::run`] reads the three files every `server.tls.pollInterval` and
//! compares a digest of their bytes with the material being served. Polling the content was
//! chosen over inotify: it catches every way certificates are rotated in place (cert-manager or
//! a script rewriting a file, a Kubernetes Secret volume swapping its `..data` symlink, which
//! inotify only sees through a watch on the directory re-armed after each swap, network and
//! overlay filesystems that send no events), it needs no new dependency, and reading three
//! files of a few KiB every few seconds costs nothing. A change is applied once the files have
//! stayed the same for one more poll, so a rotation written file by file (certificate, then
//! key) is not caught half-way. Applying it builds a new rustls `ServerConfig` and swaps it in:
//! connections accepted from then on use it, established ones keep the session they have.
//! Material that cannot be used (a truncated file, a key of another certificate) is rejected:
//! the previous material stays in use, the error names the files, and the
//! `gangscaler_tls_*` metrics say so; the next change is tried again.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use arc_swap::ArcSwap;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::ServerConfig;
use tokio_rustls::rustls::crypto::ring;
use tokio_rustls::rustls::server::WebPkiClientVerifier;
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info};

use super::Error;
use crate::config::{TlsFiles, TlsFingerprint, TlsMaterial};
use crate::metrics::TlsMetrics;
use crate::telemetry::Chain;

/// The served TLS configuration and what is known about the files it came from.
#[derive(Debug)]
pub struct Tls {
    files: TlsFiles,
    config: ArcSwap<ServerConfig>,
    watch: Mutex<Watch>,
}

/// What [`Tls::poll`] has seen of the files.
#[derive(Debug)]
struct Watch {
    /// The files' digest when the served material was read from them.
    served: TlsFingerprint,
    /// A changed digest seen at the previous poll and not applied yet.
    pending: Option<TlsFingerprint>,
    /// The digest of the last change that was rejected (so it is reported once).
    rejected: Option<TlsFingerprint>,
    /// The served certificate's notAfter, Unix seconds.
    not_after: Option<i64>,
}

/// What one [`Tls::poll`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Polled {
    /// The files hold the served material.
    Unchanged,
    /// The files changed since the last poll; they are applied if they stay so.
    Settling,
    /// New material is served.
    Reloaded,
    /// The files changed into something unusable; the previous material is still served.
    Rejected,
    /// The files still hold the change rejected before.
    StillRejected,
}

impl Tls {
    /// Reads and checks `files` with the loader `validate` uses ([`TlsFiles::load`]) and
    /// builds the first configuration.
    ///
    /// # Errors
    /// [`Error::TlsFiles`] naming every unusable file (unreadable, no PEM block of the kind its
    /// field needs, a key that does not match the certificate, a CA that cannot be a root), or
    /// [`Error::Tls`] if rustls refuses the checked material.
    pub fn load(files: &TlsFiles) -> Result<Self, Error> {
        let contents = files.read();
        let material = files.parse(&contents).map_err(Error::TlsFiles)?;
        let not_after = not_after(&material);
        let config = server_config(files, material)?;
        Ok(Self {
            files: files.clone(),
            config: ArcSwap::from_pointee(config),
            watch: Mutex::new(Watch {
                served: contents.fingerprint(),
                pending: None,
                rejected: None,
                not_after,
            }),
        })
    }

    /// Whether a completed handshake proves a client certificate chaining to the client CA
    /// (a client CA is configured: the gRPC server always has one).
    pub fn verifies_clients(&self) -> bool {
        self.files.client_ca_file.is_some()
    }

    /// An acceptor with the material served now, for one new connection.
    pub fn acceptor(&self) -> TlsAcceptor {
        TlsAcceptor::from(self.config.load_full())
    }

    /// The served certificate's notAfter, as Unix seconds (`None` if it could not be read).
    pub fn not_after(&self) -> Option<i64> {
        self.lock().not_after
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Watch> {
        // A poisoned lock only means a poll panicked; its state is still consistent.
        self.watch.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Reads the files once and applies a change that has been stable since the previous
    /// call; `now_ms` timestamps a successful reload in `metrics`.
    pub fn poll(&self, metrics: Option<&TlsMetrics>, now_ms: i64) -> Polled {
        let contents = self.files.read();
        let seen = contents.fingerprint();
        let mut watch = self.lock();
        if seen == watch.served {
            if watch.rejected.take().is_some() {
                info!("TLS files are back to the served material");
                if let Some(m) = metrics {
                    m.valid.set(1);
                }
            }
            watch.pending = None;
            return Polled::Unchanged;
        }
        if watch.rejected == Some(seen) {
            return Polled::StillRejected;
        }
        if watch.pending != Some(seen) {
            debug!("TLS files changed; applying them once they stay unchanged for one poll");
            watch.pending = Some(seen);
            return Polled::Settling;
        }
        watch.pending = None;
        let built = self
            .files
            .parse(&contents)
            .map_err(Error::TlsFiles)
            .and_then(|material| {
                let not_after = not_after(&material);
                server_config(&self.files, material).map(|c| (c, not_after))
            });
        match built {
            Ok((config, not_after)) => {
                self.config.store(Arc::new(config));
                watch.served = seen;
                watch.rejected = None;
                watch.not_after = not_after;
                if let Some(m) = metrics {
                    m.loaded(now_ms, not_after, true);
                }
                info!(
                    tls.cert_file = %self.files.cert_file.display(),
                    tls.key_file = %self.files.key_file.display(),
                    tls.client_ca_file = %ca_display(&self.files),
                    tls.not_after = not_after.map(rfc3339).as_deref().unwrap_or("unknown"),
                    "TLS material reloaded; new connections use it"
                );
                Polled::Reloaded
            }
            Err(e) => {
                watch.rejected = Some(seen);
                if let Some(m) = metrics {
                    m.rejected();
                }
                error!(
                    error = %Chain(&e),
                    "TLS files changed but cannot be used; still serving the previous certificate and client CA"
                );
                Polled::Rejected
            }
        }
    }

    /// Polls the files every `interval` until `shutdown` is cancelled. `now_ms` reads the
    /// clock for the reload timestamp.
    pub async fn run(
        self: Arc<Self>,
        interval: Duration,
        metrics: Option<TlsMetrics>,
        now_ms: fn() -> i64,
        shutdown: CancellationToken,
    ) {
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // The first tick completes at once; the files were read just before.
        tick.tick().await;
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                _ = tick.tick() => {}
            }
            // Three small files: read on the runtime, like the configuration on Refresh.
            self.poll(metrics.as_ref(), now_ms());
        }
    }
}

/// The error and its sources on one line.
/// Unix seconds as RFC 3339.
fn rfc3339(t: i64) -> String {
    jiff::Timestamp::from_second(t).map_or_else(|_| t.to_string(), |ts| ts.to_string())
}

/// The notAfter of the first (leaf) certificate, Unix seconds.
fn not_after(material: &TlsMaterial) -> Option<i64> {
    let leaf = material.certs.first()?;
    let (_, cert) = x509_parser::parse_x509_certificate(leaf.as_ref()).ok()?;
    Some(cert.validity().not_after.timestamp())
}

/// The client CA file for a log line or message (`none` without one).
fn ca_display(files: &TlsFiles) -> String {
    files
        .client_ca_file
        .as_deref()
        .map_or_else(|| "none".to_owned(), |p| p.display().to_string())
}

/// The rustls configuration for checked material.
fn server_config(files: &TlsFiles, material: TlsMaterial) -> Result<ServerConfig, Error> {
    let provider = Arc::new(ring::default_provider());
    let verifier = match material.client_roots {
        Some(roots) => Some(
            WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                .build()
                .map_err(|source| Error::Tls {
                    what: format!(
                        "building the client certificate verifier from server.tls.clientCaFile {}",
                        ca_display(files)
                    ),
                    source: source.into(),
                })?,
        ),
        None => None,
    };
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .and_then(|b| {
            match verifier {
                Some(v) => b.with_client_cert_verifier(v),
                None => b.with_no_client_auth(),
            }
            .with_single_cert(material.certs, material.key)
        })
        .map_err(|source| Error::Tls {
            what: format!(
                "pairing server.tls.certFile {} with server.tls.keyFile {}",
                files.cert_file.display(),
                files.key_file.display()
            ),
            source: source.into(),
        })?;
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(config)
}

#[cfg(test)]
mod tests {
    use rcgen::{CertificateParams, KeyPair};

    use std::path::Path;

    use super::*;

    /// A self-signed certificate and its key, in PEM.
    fn pair(name: &str) -> (String, String) {
        let key = KeyPair::generate().unwrap();
        let cert = CertificateParams::new(vec![name.to_owned()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        (cert.pem(), key.serialize_pem())
    }

    fn refused(files: &TlsFiles) -> Error {
        match Tls::load(files) {
            Ok(_) => panic!("accepted {files:?}"),
            Err(e) => e,
        }
    }

    fn files(dir: &Path, cert: &str, key: &str, ca: &str) -> TlsFiles {
        let write = |name: &str, text: &str| {
            let path = dir.join(name);
            std::fs::write(&path, text).unwrap();
            path
        };
        TlsFiles {
            cert_file: write("server.crt", cert),
            key_file: write("server.key", key),
            client_ca_file: Some(write("ca.crt", ca)),
        }
    }

    /// Runs one handshake of a client without a certificate against `tls`, over memory;
    /// returns whether the server accepted it.
    async fn certless_client_accepted(tls: &Tls, server_cert: &rcgen::Certificate) -> bool {
        use tokio_rustls::rustls::pki_types::ServerName;
        use tokio_rustls::rustls::{ClientConfig, RootCertStore};
        let mut roots = RootCertStore::empty();
        roots.add(server_cert.der().clone()).unwrap();
        let client = ClientConfig::builder_with_provider(Arc::new(ring::default_provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        let (client_io, server_io) = tokio::io::duplex(64 * 1024);
        let connector = tokio_rustls::TlsConnector::from(Arc::new(client));
        let name = ServerName::try_from("localhost").unwrap();
        let (server, _client) = tokio::join!(
            tls.acceptor().accept(server_io),
            connector.connect(name, client_io)
        );
        server.is_ok()
    }

    #[tokio::test]
    async fn without_a_client_ca_a_client_without_a_certificate_is_served_and_with_one_it_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let key = KeyPair::generate().unwrap();
        let cert = CertificateParams::new(vec!["localhost".to_owned()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let (ca, _) = pair("client CA");
        let mutual = files(dir.path(), &cert.pem(), &key.serialize_pem(), &ca);
        let server_only = TlsFiles {
            client_ca_file: None,
            ..mutual.clone()
        };
        let tls = Tls::load(&server_only).unwrap();
        assert!(certless_client_accepted(&tls, &cert).await);
        let tls = Tls::load(&mutual).unwrap();
        assert!(!certless_client_accepted(&tls, &cert).await);
    }

    #[test]
    fn good_material_gives_an_acceptor_and_bad_material_names_its_file() {
        let dir = tempfile::tempdir().unwrap();
        let (cert, key) = pair("gangscaler");
        let (ca, other_key) = pair("client CA");
        assert!(Tls::load(&files(dir.path(), &cert, &key, &ca)).is_ok());

        let named = |err: &Error, field: &str, file: &str| match err {
            Error::TlsFiles(e) => {
                e.0.iter()
                    .any(|p| p.field == field && p.path.ends_with(file))
            }
            _ => false,
        };
        let err = refused(&files(dir.path(), "not a certificate\n", &key, &ca));
        assert!(named(&err, "server.tls.certFile", "server.crt"), "{err:?}");

        let err = refused(&files(dir.path(), &cert, "garbage", &ca));
        assert!(named(&err, "server.tls.keyFile", "server.key"), "{err:?}");

        let err = refused(&files(dir.path(), &cert, &key, ""));
        assert!(named(&err, "server.tls.clientCaFile", "ca.crt"), "{err:?}");

        // A key that belongs to another certificate: refused at start, naming both files.
        let err = refused(&files(dir.path(), &cert, &other_key, &ca));
        assert!(named(&err, "server.tls.keyFile", "server.key"), "{err:?}");
        let text = crate::telemetry::chain(&err);
        assert!(
            text.contains("server.crt") && text.contains("server.key"),
            "{text}"
        );
    }

    #[test]
    fn a_change_is_applied_after_one_stable_poll_and_a_bad_one_is_rejected_once() {
        let dir = tempfile::tempdir().unwrap();
        let (cert, key) = pair("gangscaler");
        let (ca, _) = pair("client CA");
        let f = files(dir.path(), &cert, &key, &ca);
        let tls = Tls::load(&f).unwrap();
        let metrics = TlsMetrics::default();
        let served = || tls.config.load_full();
        let first = served();
        assert_eq!(tls.poll(Some(&metrics), 1_000), Polled::Unchanged);

        // A half-done rotation: new certificate, old key.
        let (cert2, key2) = pair("gangscaler");
        std::fs::write(&f.cert_file, &cert2).unwrap();
        assert_eq!(tls.poll(Some(&metrics), 2_000), Polled::Settling);
        assert_eq!(tls.poll(Some(&metrics), 3_000), Polled::Rejected);
        assert!(Arc::ptr_eq(&served(), &first), "the old material is kept");
        assert_eq!(metrics.valid.get(), 0);
        assert_eq!(tls.poll(Some(&metrics), 4_000), Polled::StillRejected);
        let failures = |m: &TlsMetrics| {
            m.reloads
                .get_or_create(&crate::metrics::OutcomeLabels { outcome: "failure" })
                .get()
        };
        assert_eq!(failures(&metrics), 1, "reported once");

        // The key follows: the pair is applied after one stable poll.
        std::fs::write(&f.key_file, &key2).unwrap();
        assert_eq!(tls.poll(Some(&metrics), 5_000), Polled::Settling);
        assert_eq!(tls.poll(Some(&metrics), 6_000), Polled::Reloaded);
        assert!(!Arc::ptr_eq(&served(), &first), "new material is served");
        assert_eq!(metrics.valid.get(), 1);
        assert_eq!(metrics.last_reload_success.get(), 6.0);
        assert!(metrics.certificate_expiration.get() > 0);
        assert_eq!(tls.poll(Some(&metrics), 7_000), Polled::Unchanged);
    }
}
