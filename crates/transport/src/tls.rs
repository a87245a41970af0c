//! TLS (rustls, *ring* provider): the PEM loading every TLS user here shares, and the relay ↔ agent
//! connection over TLS — the relay serves a certificate (`relay --agents-tls-cert/-key`), agents
//! check it (`--relay-cacert`, `--relay-server-name`). The token's challenge–response runs inside
//! it, unchanged: TLS adds privacy, the token still decides who may read.

use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConfig, ClientConnection, RootCertStore, ServerConfig, ServerConnection, StreamOwned};
use std::io::{Read, Write};
use std::net::TcpStream;
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

/// How an agent reaches a relay over TLS.
#[derive(Clone)]
pub struct RelayTls {
    config: Arc<ClientConfig>,
    server_name: Option<String>,
}

impl std::fmt::Debug for RelayTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RelayTls").field("server_name", &self.server_name).finish()
    }
}

impl RelayTls {
    /// Trust the relay certificates `cacert` signs; check them against `server_name` (default: the
    /// relay's address as given).
    pub fn load(cacert: &Path, server_name: Option<String>) -> Result<RelayTls, String> {
        let config = ClientConfig::builder_with_provider(provider()).with_safe_default_protocol_versions().map_err(|e| e.to_string())?.with_root_certificates(roots(cacert)?).with_no_client_auth();
        Ok(RelayTls { config: Arc::new(config), server_name })
    }

    /// TLS over `tcp` to the relay at `ip`, handshake completed.
    pub fn connect(&self, mut tcp: TcpStream, ip: std::net::IpAddr) -> std::io::Result<Conn> {
        let name = match &self.server_name {
            Some(n) => ServerName::try_from(n.clone()).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("relay server name {n:?}: {e}")))?,
            None => ServerName::IpAddress(ip.into()),
        };
        let mut conn = ClientConnection::new(self.config.clone(), name).map_err(std::io::Error::other)?;
        while conn.is_handshaking() {
            conn.complete_io(&mut tcp).map_err(|e| std::io::Error::new(e.kind(), format!("TLS handshake with the relay: {e}")))?;
        }
        Ok(Conn::Tls(Box::new(StreamOwned::new(conn, tcp))))
    }
}

/// Serve TLS on an accepted connection, handshake completed (bounded by the socket's timeouts).
pub fn accept(config: &Arc<ServerConfig>, mut tcp: TcpStream) -> std::io::Result<StreamOwned<ServerConnection, TcpStream>> {
    let mut conn = ServerConnection::new(config.clone()).map_err(std::io::Error::other)?;
    while conn.is_handshaking() {
        conn.complete_io(&mut tcp)?;
    }
    Ok(StreamOwned::new(conn, tcp))
}

/// A connection to a relay (or a peer agent): plain TCP or TLS over it.
pub enum Conn {
    /// Plain.
    Plain(TcpStream),
    /// TLS.
    Tls(Box<StreamOwned<ClientConnection, TcpStream>>),
}

impl Conn {
    /// The TCP socket underneath (timeouts, addresses).
    pub fn tcp(&self) -> &TcpStream {
        match self {
            Conn::Plain(s) => s,
            Conn::Tls(s) => s.get_ref(),
        }
    }
}

impl Read for Conn {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Conn::Plain(s) => s.read(buf),
            Conn::Tls(s) => s.read(buf),
        }
    }
}

impl Write for Conn {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Conn::Plain(s) => s.write(buf),
            Conn::Tls(s) => s.write(buf),
        }
    }
    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Conn::Plain(s) => s.flush(),
            Conn::Tls(s) => s.flush(),
        }
    }
}
