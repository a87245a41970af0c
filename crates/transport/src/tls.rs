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

/// How an agent reaches a relay over TLS — and, under TLS, its peers.
#[derive(Clone)]
pub struct RelayTls {
    config: Arc<ClientConfig>,
    server_name: Option<String>,
    /// TLS to peer agents: their certificates checked against the same CA, but not by name (their
    /// addresses come from the tracker, often private or NATed; the token's challenge–response inside
    /// still proves them). `None` on the peer side's own copy.
    peers: Option<Arc<ClientConfig>>,
    /// This agent's certificate for serving peers (`--peer-tls-cert/-key`), if it serves.
    peer_server: Option<Arc<ServerConfig>>,
}

/// Checks a peer agent's certificate chain against the CA, whatever name it carries.
#[derive(Debug)]
struct ChainOnly(Arc<rustls::client::WebPkiServerVerifier>);

impl rustls::client::danger::ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        use rustls::{CertificateError, Error as E};
        match self.0.verify_server_cert(end_entity, intermediates, server_name, ocsp, now) {
            Err(E::InvalidCertificate(CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. })) => Ok(rustls::client::danger::ServerCertVerified::assertion()),
            other => other,
        }
    }
    fn verify_tls12_signature(&self, message: &[u8], cert: &CertificateDer<'_>, dss: &rustls::DigitallySignedStruct) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }
    fn verify_tls13_signature(&self, message: &[u8], cert: &CertificateDer<'_>, dss: &rustls::DigitallySignedStruct) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }
    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.supported_verify_schemes()
    }
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
        let roots = Arc::new(roots(cacert)?);
        let config = ClientConfig::builder_with_provider(provider()).with_safe_default_protocol_versions().map_err(|e| e.to_string())?.with_root_certificates(roots.clone()).with_no_client_auth();
        let verifier = rustls::client::WebPkiServerVerifier::builder_with_provider(roots, provider()).build().map_err(|e| format!("CA in {}: {e}", cacert.display()))?;
        let peers = ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(ChainOnly(verifier)))
            .with_no_client_auth();
        Ok(RelayTls { config: Arc::new(config), server_name, peers: Some(Arc::new(peers)), peer_server: None })
    }

    /// Serve peers over TLS with this certificate (signed by the same CA).
    pub fn serving_peers(mut self, cert: &Path, key: &Path) -> Result<RelayTls, String> {
        self.peer_server = Some(server_config(cert, key)?);
        Ok(self)
    }

    /// The configuration to serve peers with, if this agent has a certificate for it.
    pub fn peer_server(&self) -> Option<&Arc<ServerConfig>> {
        self.peer_server.as_ref()
    }

    /// How to reach a peer agent: TLS with the chain-only check.
    pub(crate) fn to_peers(&self) -> Option<RelayTls> {
        self.peers.clone().map(|config| RelayTls { config, server_name: None, peers: None, peer_server: None })
    }

    /// TLS over `tcp` to the relay at `ip`, handshake completed.
    pub fn connect(&self, tcp: TcpStream, ip: std::net::IpAddr) -> std::io::Result<Conn> {
        let name = match &self.server_name {
            Some(n) => ServerName::try_from(n.clone()).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("relay server name {n:?}: {e}")))?,
            None => ServerName::IpAddress(ip.into()),
        };
        connect(&self.config, name, tcp, "TLS handshake with the relay")
    }
}

/// TLS over `tcp` to `name`, handshake completed (so a refused certificate is reported as such);
/// `what` names the handshake in errors.
pub fn connect(config: &Arc<ClientConfig>, name: ServerName<'static>, mut tcp: TcpStream, what: &str) -> std::io::Result<Conn> {
    let mut conn = ClientConnection::new(config.clone(), name).map_err(std::io::Error::other)?;
    while conn.is_handshaking() {
        conn.complete_io(&mut tcp).map_err(|e| std::io::Error::new(e.kind(), format!("{what}: {e}")))?;
    }
    Ok(Conn::Tls(Box::new(StreamOwned::new(conn, tcp))))
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

    /// Whether a read would find bytes without waiting: decrypted by TLS already, or on the socket
    /// (also at the end of the stream, so that the read that follows reports it). Under TLS, bytes on
    /// the socket may be a record's first part: the read that follows then waits for the rest.
    pub fn readable_now(&mut self) -> std::io::Result<bool> {
        if let Conn::Tls(s) = self {
            let state = s.conn.process_new_packets().map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
            if state.plaintext_bytes_to_read() > 0 {
                return Ok(true);
            }
        }
        // Closed or failed counts as readable: the read that follows reports it.
        Ok(crate::tcp::bytes_waiting(self.tcp()) != Some(false))
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
