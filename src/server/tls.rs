//! The gRPC listener's mutual TLS, built from the PEM files of `server.tls`: client
//! certificates chaining to the client CA are required, and ALPN `h2` is offered (grpc-go
//! clients, CA 1.33+, insist on it). Handshakes run in [`super::conn`] under its timeout.

use std::path::Path;
use std::sync::Arc;

use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::crypto::ring;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::server::WebPkiClientVerifier;
use tokio_rustls::rustls::{RootCertStore, ServerConfig};

use super::{Error, read};
use crate::config::TlsFiles;

/// The acceptor for `files`.
///
/// # Errors
/// [`Error::TlsFile`] for an unreadable file, [`Error::TlsPem`] for a file without the
/// expected PEM blocks, [`Error::Tls`] for material rustls refuses (a key that does not match
/// the certificate, a CA that is not a usable root).
pub fn acceptor(files: &TlsFiles) -> Result<TlsAcceptor, Error> {
    let certs = certificates("server.tls.certFile", &files.cert_file)?;
    let key_pem = read(&files.key_file)?;
    let key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| Error::TlsPem {
        field: "server.tls.keyFile",
        path: files.key_file.clone(),
        message: format!("no PEM private key: {e}"),
    })?;
    let mut roots = RootCertStore::empty();
    for ca in certificates("server.tls.clientCaFile", &files.client_ca_file)? {
        roots.add(ca).map_err(|source| Error::Tls {
            what: format!(
                "adding a client CA certificate from server.tls.clientCaFile {}",
                files.client_ca_file.display()
            ),
            source: source.into(),
        })?;
    }
    let provider = Arc::new(ring::default_provider());
    let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
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
                .with_single_cert(certs, key)
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

fn certificates(field: &'static str, path: &Path) -> Result<Vec<CertificateDer<'static>>, Error> {
    let pem = read(path)?;
    let pem_error = |message: String| Error::TlsPem {
        field,
        path: path.to_path_buf(),
        message,
    };
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| pem_error(format!("malformed PEM: {e}")))?;
    if certs.is_empty() {
        return Err(pem_error(
            "no PEM certificate (BEGIN CERTIFICATE)".to_owned(),
        ));
    }
    Ok(certs)
}

#[cfg(test)]
mod tests {
    use rcgen::{CertificateParams, KeyPair};

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

        let err = refused(&files(dir.path(), "not a certificate\n", &key, &ca));
        assert!(
            matches!(
                &err,
                Error::TlsPem {
                    field: "server.tls.certFile",
                    ..
                }
            ),
            "{err:?}"
        );
        assert!(err.to_string().contains("server.crt"), "{err}");

        let err = refused(&files(dir.path(), &cert, "garbage", &ca));
        assert!(
            matches!(
                &err,
                Error::TlsPem {
                    field: "server.tls.keyFile",
                    ..
                }
            ),
            "{err:?}"
        );

        let err = refused(&files(dir.path(), &cert, &key, ""));
        assert!(
            matches!(
                &err,
                Error::TlsPem {
                    field: "server.tls.clientCaFile",
                    ..
                }
            ),
            "{err:?}"
        );

        // A key that belongs to another certificate: refused at start, naming both files.
        let err = refused(&files(dir.path(), &cert, &other_key, &ca));
        let text = err.to_string();
        assert!(matches!(&err, Error::Tls { .. }), "{err:?}");
        assert!(
            text.contains("server.crt") && text.contains("server.key"),
            "{text}"
        );
    }
}
