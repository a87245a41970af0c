//! The relay ↔ agent connection over TLS (rustls, *ring* provider): the relay serves a certificate
//! (`relay --agents-tls-cert/-key`), agents check it (`--relay-cacert`, `--relay-server-name`). The
//! token's challenge–response runs inside it, unchanged: TLS adds privacy, the token still decides
//! who may read. PEM loading and the connection type are the `client` crate's, shared with the Redis
//! client (which does not depend on this crate).

use client::pem::{provider, roots};
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, ServerConfig};
use std::net::TcpStream;
use std::path::Path;
use std::sync::Arc;

pub use client::pem::server_config;
pub use client::stream::accept;

/// A connection to a relay (or a peer agent): plain TCP or TLS over it.
pub type Conn = client::stream::Stream;

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

    /// TLS over `tcp` to the relay at `host` (as given: its certificate is checked against that
    /// name or address unless a server name was set), handshake completed.
    pub fn connect(&self, tcp: TcpStream, host: &endpoint::Host) -> std::io::Result<Conn> {
        let invalid = |n: &str, e: rustls::pki_types::InvalidDnsNameError| std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("relay server name {n:?}: {e}"));
        let name = match (&self.server_name, host) {
            (Some(n), _) => ServerName::try_from(n.clone()).map_err(|e| invalid(n, e))?,
            (None, endpoint::Host::Name(n)) => ServerName::try_from(n.clone()).map_err(|e| invalid(n, e))?,
            (None, endpoint::Host::Ip(ip)) => ServerName::IpAddress((*ip).into()),
        };
        client::stream::handshake(&self.config, name, tcp, "TLS handshake with the relay")
    }
}
