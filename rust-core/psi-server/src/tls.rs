//! TLS for `psi serve --tls-cert/--tls-key` (docs/adr/0019-tls-and-connection-limits.md):
//! rustls with the ring provider, TLS 1.3 and 1.2, HTTP/1.1 by ALPN, no client
//! certificates.

use std::path::Path;
use std::sync::Arc;
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use zeroize::Zeroizing;

/// Why the certificate or key cannot be used. Messages name files and PEM problems,
/// never key material.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TlsError {
    /// A file cannot be read.
    #[error("{path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The certificate file holds no PEM `CERTIFICATE`.
    #[error("no PEM certificate in the certificate file")]
    NoCertificate,
    /// The key file holds no PEM private key (PKCS#8, PKCS#1 or SEC1), or it is malformed.
    #[error("no usable PEM private key in the key file")]
    NoKey,
    /// rustls refused the pair (e.g. the key does not match the certificate, an
    /// unsupported key type).
    #[error("certificate and key rejected: {0}")]
    Rejected(String),
}

/// A loaded server certificate chain and key, ready to accept TLS connections.
#[derive(Clone)]
pub struct ServerTls {
    config: Arc<rustls::ServerConfig>,
}

impl std::fmt::Debug for ServerTls {
    // Nothing of the key, and nothing that changes between runs.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerTls").finish_non_exhaustive()
    }
}

impl ServerTls {
    /// Reads a PEM certificate chain (leaf first, then intermediates) and a PEM private
    /// key. The key file's bytes are wiped from memory after parsing.
    pub fn from_pem_files(cert: &Path, key: &Path) -> Result<ServerTls, TlsError> {
        let read = |p: &Path| {
            std::fs::read(p)
                .map(Zeroizing::new)
                .map_err(|source| TlsError::Read {
                    path: p.display().to_string(),
                    source,
                })
        };
        let cert_pem = read(cert)?;
        let key_pem = read(key)?;
        ServerTls::from_pem(&cert_pem, &key_pem)
    }

    /// As [`ServerTls::from_pem_files`], from the files' contents.
    pub fn from_pem(cert_pem: &[u8], key_pem: &[u8]) -> Result<ServerTls, TlsError> {
        let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert_pem)
            .collect::<Result<_, _>>()
            .map_err(|_| TlsError::NoCertificate)?;
        if chain.is_empty() {
            return Err(TlsError::NoCertificate);
        }
        let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|_| TlsError::NoKey)?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::Rejected(e.to_string()))?
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .map_err(|e| TlsError::Rejected(e.to_string()))?;
        // The server speaks HTTP/1.1 only (docs/adr/0010-http-stack.md).
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(ServerTls {
            config: Arc::new(config),
        })
    }

    pub(crate) fn acceptor(&self) -> tokio_rustls::TlsAcceptor {
        tokio_rustls::TlsAcceptor::from(self.config.clone())
    }
}
