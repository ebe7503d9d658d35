//! Reads and checks the mutual-TLS files: [`TlsFiles::load`] is the one loader, used by
//! `validate` (through [`TlsFiles::check`]) and by `serve` (which builds its acceptor from the
//! [`TlsMaterial`] it returns), so `validate` refuses exactly what `serve` would: a certificate
//! file with no PEM certificate, a key file with no usable private key, a key that does not
//! belong to the certificate, a client CA that cannot be a trust anchor. `serve` watches for
//! rotations by reading the files ([`TlsFiles::read`]) and comparing their
//! [`TlsContents::fingerprint`], then parses exactly the bytes it compared
//! ([`TlsFiles::parse`]).

use std::fmt;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::RootCertStore;
use rustls::pki_types::pem::{self, PemObject};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::sign::CertifiedKey;

use super::TlsFiles;

/// Largest TLS file read: 1 MiB (a large CA bundle is a few hundred KiB).
pub const MAX_TLS_FILE_BYTES: u64 = 1 << 20;

/// One problem with one TLS file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsProblem {
    /// The setting naming the file, e.g. `server.tls.certFile`.
    pub field: &'static str,
    /// The file.
    pub path: PathBuf,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for TlsProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {}: {}",
            self.field,
            self.path.display(),
            self.message
        )
    }
}

/// Every problem found in a set of TLS files.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
pub struct TlsError(pub Vec<TlsProblem>);

/// The parsed contents of the three TLS files, checked to fit together.
#[derive(Debug)]
pub struct TlsMaterial {
    /// The server's certificate chain, leaf first.
    pub certs: Vec<CertificateDer<'static>>,
    /// The private key of the leaf certificate.
    pub key: PrivateKeyDer<'static>,
    /// The client CA certificates, as trust anchors; `None` when no client CA is configured.
    pub client_roots: Option<RootCertStore>,
}

const CERT: &str = "server.tls.certFile";
const KEY: &str = "server.tls.keyFile";
const CA: &str = "server.tls.clientCaFile";

/// The bytes of the three TLS files as read at one moment, or why each could not be read.
/// Symbolic links are followed, so a Kubernetes Secret volume's `..data` swap reads as new
/// contents.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsContents {
    cert: Result<Vec<u8>, String>,
    key: Result<Vec<u8>, String>,
    /// `None` when no client CA is configured.
    client_ca: Option<Result<Vec<u8>, String>>,
}

/// A digest of [`TlsContents`]: equal digests mean (but for a 64-bit hash collision) that
/// nothing changed, including an unreadable file staying unreadable for the same reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TlsFingerprint(u64);

impl TlsContents {
    /// The digest of these contents.
    pub fn fingerprint(&self) -> TlsFingerprint {
        let mut h = DefaultHasher::new();
        self.hash(&mut h);
        TlsFingerprint(h.finish())
    }
}

impl Hash for TlsContents {
    fn hash<H: Hasher>(&self, state: &mut H) {
        for part in [Some(&self.cert), Some(&self.key), self.client_ca.as_ref()] {
            match part {
                Some(Ok(bytes)) => (0u8, bytes).hash(state),
                Some(Err(why)) => (1u8, why).hash(state),
                None => 2u8.hash(state),
            }
        }
    }
}

impl TlsFiles {
    /// Reads and checks the three files: the certificate file holds at least one PEM
    /// certificate, the key file a PEM private key (PKCS#8, PKCS#1 or SEC1) of a supported
    /// type whose public key is the certificate's, and the client CA file at least one PEM
    /// certificate usable as a trust anchor.
    ///
    /// # Errors
    /// [`TlsError`] listing every problem, each naming its setting and file.
    pub fn load(&self) -> Result<TlsMaterial, TlsError> {
        self.parse(&self.read())
    }

    /// The three files' bytes, each at most [`MAX_TLS_FILE_BYTES`], without parsing them.
    pub fn read(&self) -> TlsContents {
        TlsContents {
            cert: read(&self.cert_file),
            key: read(&self.key_file),
            client_ca: self.client_ca_file.as_deref().map(read),
        }
    }

    /// Parses and checks `contents`, read from these files, as [`Self::load`] does.
    ///
    /// # Errors
    /// [`TlsError`] listing every problem, each naming its setting and file.
    pub fn parse(&self, contents: &TlsContents) -> Result<TlsMaterial, TlsError> {
        let mut problems = Vec::new();
        let mut problem = |field, path: &Path, message: String| {
            problems.push(TlsProblem {
                field,
                path: path.to_path_buf(),
                message,
            });
        };
        let certs = contents
            .cert
            .as_deref()
            .map_err(String::clone)
            .and_then(certificates);
        let certs = certs.map_err(|m| problem(CERT, &self.cert_file, m)).ok();
        let key = contents
            .key
            .as_deref()
            .map_err(String::clone)
            .and_then(private_key);
        let key = key.map_err(|m| problem(KEY, &self.key_file, m)).ok();
        let mut matched = false;
        if let (Some(certs), Some((_, signer))) = (&certs, &key) {
            match CertifiedKey::new(certs.clone(), signer.clone()).keys_match() {
                Ok(())
                | Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::Unknown)) => {
                    matched = true;
                }
                Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::KeyMismatch)) => {
                    problem(
                        KEY,
                        &self.key_file,
                        format!(
                            "does not match the certificate in {} (its public key differs)",
                            self.cert_file.display()
                        ),
                    );
                }
                Err(e) => problem(
                    CERT,
                    &self.cert_file,
                    format!("the first certificate cannot be parsed: {e}"),
                ),
            }
        }
        let roots = match (&contents.client_ca, &self.client_ca_file) {
            (Some(read), Some(path)) => read
                .as_deref()
                .map_err(String::clone)
                .and_then(trust_anchors)
                .map(Some)
                .map_err(|m| problem(CA, path, m))
                .ok(),
            _ => Some(None),
        };
        match (certs, key, roots) {
            (Some(certs), Some((key, _)), Some(client_roots)) if matched && problems.is_empty() => {
                Ok(TlsMaterial {
                    certs,
                    key,
                    client_roots,
                })
            }
            _ => Err(TlsError(problems)),
        }
    }

    /// [`Self::load`], keeping only the verdict.
    ///
    /// # Errors
    /// As [`Self::load`].
    pub fn check(&self) -> Result<(), TlsError> {
        self.load().map(|_| ())
    }
}

/// The file's bytes, at most [`MAX_TLS_FILE_BYTES`].
fn read(path: &Path) -> Result<Vec<u8>, String> {
    let meta = std::fs::metadata(path).map_err(|e| format!("cannot be read: {e}"))?;
    if !meta.is_file() {
        return Err(format!(
            "is a {}, not a regular file",
            crate::yaml::file_kind(&meta)
        ));
    }
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(MAX_TLS_FILE_BYTES + 1).read_to_end(&mut bytes))
        .map_err(|e| format!("cannot be read: {e}"))?;
    if bytes.len() as u64 > MAX_TLS_FILE_BYTES {
        return Err(format!(
            "is larger than the {} limit for TLS files",
            crate::yaml::Size(MAX_TLS_FILE_BYTES)
        ));
    }
    Ok(bytes)
}

fn pem_error(e: &pem::Error) -> String {
    format!("is not valid PEM: {e}")
}

fn certificates(bytes: &[u8]) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_slice_iter(bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| pem_error(&e))?;
    if certs.is_empty() {
        return Err(
            "contains no PEM certificate (a \"-----BEGIN CERTIFICATE-----\" block)".to_owned(),
        );
    }
    Ok(certs)
}

/// The key, and the signer rustls makes of it (proof that its type is supported).
type Key = (PrivateKeyDer<'static>, Arc<dyn rustls::sign::SigningKey>);

fn private_key(bytes: &[u8]) -> Result<Key, String> {
    let key = match PrivateKeyDer::from_pem_slice(bytes) {
        Ok(key) => key,
        Err(pem::Error::NoItemsFound) => {
            return Err(
                "contains no PEM private key (a \"-----BEGIN PRIVATE KEY-----\", \
                        \"RSA PRIVATE KEY\" or \"EC PRIVATE KEY\" block)"
                    .to_owned(),
            );
        }
        Err(e) => return Err(pem_error(&e)),
    };
    let signer = rustls::crypto::ring::sign::any_supported_type(&key)
        .map_err(|e| format!("holds a private key that cannot be used: {e}"))?;
    Ok((key, signer))
}

fn trust_anchors(bytes: &[u8]) -> Result<RootCertStore, String> {
    let mut store = RootCertStore::empty();
    for cert in certificates(bytes)? {
        store
            .add(cert)
            .map_err(|e| format!("holds a certificate that cannot be a trust anchor: {e}"))?;
    }
    Ok(store)
}
