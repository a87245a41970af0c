//! PEM loading for every TLS user of the workspace (rustls, *ring* provider): the Redis client here,
//! and the relay ↔ agent link in `transport`, which builds on this crate for it. Errors name the file.

use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::{RootCertStore, ServerConfig};
use std::path::Path;
use std::sync::Arc;

/// The certificates in a PEM file (at least one).
pub fn certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let f = std::fs::File::open(path).map_err(|e| format!("open {}: {e}", path.display()))?;
    let certs: Vec<_> = rustls_pemfile::certs(&mut std::io::BufReader::new(f)).collect::<Result<_, _>>().map_err(|e| format!("read certificates from {}: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!("{} holds no PEM certificate", path.display()));
    }
    Ok(certs)
}

/// The private key in a PEM file (PKCS#8, PKCS#1 or SEC1).
pub fn key(path: &Path) -> Result<PrivateKeyDer<'static>, String> {
    let f = std::fs::File::open(path).map_err(|e| format!("open {}: {e}", path.display()))?;
    rustls_pemfile::private_key(&mut std::io::BufReader::new(f)).map_err(|e| format!("read the key in {}: {e}", path.display()))?.ok_or_else(|| format!("{} holds no PEM private key", path.display()))
}

/// The one crypto provider we use.
pub fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Trust anchors from a PEM file.
pub fn roots(path: &Path) -> Result<RootCertStore, String> {
    let mut roots = RootCertStore::empty();
    for c in certs(path)? {
        roots.add(c).map_err(|e| format!("CA certificate in {}: {e}", path.display()))?;
    }
    Ok(roots)
}

/// A server configuration presenting `cert` (chain) with `key`, asking no client certificate.
pub fn server_config(cert: &Path, key_path: &Path) -> Result<Arc<ServerConfig>, String> {
    let cfg = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_no_client_auth()
        .with_single_cert(certs(cert)?, key(key_path)?)
        .map_err(|e| format!("certificate {}: {e}", cert.display()))?;
    Ok(Arc::new(cfg))
}
