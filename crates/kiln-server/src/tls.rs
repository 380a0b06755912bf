//! HTTPS: a certificate chain and private key (PEM files) loaded into a rustls server
//! configuration (ring as the crypto provider, TLS 1.2 and 1.3, ALPN `http/1.1`). The
//! connection loop (`guard.rs`) runs the handshake before HTTP, so every other guard (the
//! header, body and write timeouts, the connection limit, API keys, CORS) applies
//! unchanged over TLS.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls;

/// A loaded TLS configuration (`ServerConfig::tls`).
#[derive(Clone)]
pub struct TlsConfig(pub(crate) Arc<rustls::ServerConfig>);

impl fmt::Debug for TlsConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("TlsConfig")
    }
}

/// The certificate or key could not be used; each names the file.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read the TLS {what} file {path}: {source}")]
    Read {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "the TLS certificate file {path} holds no certificate (expected PEM: -----BEGIN CERTIFICATE-----)"
    )]
    NoCertificate { path: PathBuf },
    #[error(
        "the TLS key file {path} holds no private key (expected PEM: PKCS#8 -----BEGIN PRIVATE KEY-----, PKCS#1 RSA or SEC1 EC)"
    )]
    NoKey { path: PathBuf },
    #[error("the TLS {what} file {path} is not valid PEM: {reason}")]
    BadPem {
        what: &'static str,
        path: PathBuf,
        reason: String,
    },
    #[error("the TLS key {key} cannot be used with the certificate {cert}: {reason}")]
    Mismatch {
        cert: PathBuf,
        key: PathBuf,
        reason: String,
    },
}

fn read(what: &'static str, path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        what,
        path: path.to_path_buf(),
        source,
    })
}

/// Loads `cert` (the server's certificate first, then any intermediates) and `key`.
pub fn load(cert: &Path, key: &Path) -> Result<TlsConfig, TlsError> {
    let bad = |what: &'static str, path: &Path, e: rustls_pki_types::pem::Error| TlsError::BadPem {
        what,
        path: path.to_path_buf(),
        reason: e.to_string(),
    };
    let cert_pem = read("certificate", cert)?;
    let chain = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad("certificate", cert, e))?;
    if chain.is_empty() {
        return Err(TlsError::NoCertificate {
            path: cert.to_path_buf(),
        });
    }
    let key_pem = read("key", key)?;
    let private = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| match e {
        rustls_pki_types::pem::Error::NoItemsFound => TlsError::NoKey {
            path: key.to_path_buf(),
        },
        e => bad("key", key, e),
    })?;
    let mismatch = |reason: String| TlsError::Mismatch {
        cert: cert.to_path_buf(),
        key: key.to_path_buf(),
        reason,
    };
    let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| mismatch(e.to_string()))?
    .with_no_client_auth()
    .with_single_cert(chain, private)
    .map_err(|e| mismatch(e.to_string()))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(TlsConfig(Arc::new(config)))
}
