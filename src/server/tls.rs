//! The gRPC listener's mutual TLS, built from the PEM files of `server.tls`: client
//! certificates chaining to the client CA are required, and ALPN `h2` is offered (grpc-go
//! clients, CA 1.33+, insist on it). Handshakes run in [`super::conn`] under its timeout.

use std::sync::Arc;

use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::ServerConfig;
use tokio_rustls::rustls::crypto::ring;
use tokio_rustls::rustls::server::WebPkiClientVerifier;

use super::Error;
use crate::config::TlsFiles;

/// The acceptor for `files`, read and checked by the same loader `validate` uses
/// ([`TlsFiles::load`]).
///
/// # Errors
/// [`Error::TlsFiles`] naming every unusable file (unreadable, no PEM block of the kind its
/// field needs, a key that does not match the certificate, a CA that cannot be a root), or
/// [`Error::Tls`] if rustls refuses the checked material.
pub fn acceptor(files: &TlsFiles) -> Result<TlsAcceptor, Error> {
    let material = files.load().map_err(Error::TlsFiles)?;
    let provider = Arc::new(ring::default_provider());
    let verifier = WebPkiClientVerifier::builder_with_provider(
        Arc::new(material.client_roots),
        provider.clone(),
    )
    .build()
    .map_err(|source| Error::Tls {
        what: format!(
            "building the client certificate verifier from server.tls.clientCaFile {}",
            files.client_ca_file.display()
        ),
        source: source.into(),
    })?;
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .and_then(|b| {
            b.with_client_cert_verifier(verifier)
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
    Ok(TlsAcceptor::from(Arc::new(config)))
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

    /// The error and its sources, as `main` prints them.
    fn anyhow_like(err: &Error) -> String {
        let mut text = err.to_string();
        let mut source = std::error::Error::source(err);
        while let Some(s) = source {
            text.push_str(": ");
            text.push_str(&s.to_string());
            source = s.source();
        }
        text
    }

    fn refused(files: &TlsFiles) -> Error {
        match acceptor(files) {
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
            client_ca_file: write("ca.crt", ca),
        }
    }

    #[test]
    fn good_material_gives_an_acceptor_and_bad_material_names_its_file() {
        let dir = tempfile::tempdir().unwrap();
        let (cert, key) = pair("gangscaler");
        let (ca, other_key) = pair("client CA");
        assert!(acceptor(&files(dir.path(), &cert, &key, &ca)).is_ok());

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
        let text = anyhow_like(&err);
        assert!(
            text.contains("server.crt") && text.contains("server.key"),
            "{text}"
        );
    }
}
