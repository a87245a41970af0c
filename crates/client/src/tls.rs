//! TLS to Redis/Valkey servers, as redis-cli names it: `--tls --cacert --cert --key` and
//! `--tls-server-name`. A server with `tls-auth-clients yes` (the default) wants a client
//! certificate, so `--cert`/`--key` are sent when given. The same certificate can serve the other
//! direction: an agent is its local replica's master, and a replica with `tls-replication yes` speaks
//! TLS to it ([`Tls::accept`]); Redis checks that certificate against the replica's CA but not its
//! name, as it does for real masters. PEM loading is [`crate::pem`], the connection [`Stream`].

use crate::pem;
use crate::stream;
use rustls::pki_types::ServerName;
use rustls::{ClientConfig, ServerConfig, ServerConnection, StreamOwned};
use std::net::TcpStream;
use std::path::PathBuf;
use std::sync::Arc;

pub use crate::stream::Stream;

/// Where the certificates are (the flags).
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// CA certificates to trust (PEM); default: the system's bundle.
    pub cacert: Option<PathBuf>,
    /// Our certificate chain (PEM), sent to servers that ask for one and served to a replica.
    pub cert: Option<PathBuf>,
    /// Its private key (PEM).
    pub key: Option<PathBuf>,
    /// The name to check the server's certificate against (SNI too); default: the host we connect to.
    pub server_name: Option<String>,
}

/// Loaded TLS settings, cheap to clone.
#[derive(Clone)]
pub struct Tls {
    options: Options,
    client: Arc<ClientConfig>,
    server: Option<Arc<ServerConfig>>,
    server_name: Option<String>,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls").field("server_name", &self.server_name).field("has_cert", &self.server.is_some()).finish()
    }
}

/// The system CA bundle Debian-like systems keep.
const SYSTEM_CA_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";

impl Tls {
    /// Load certificates and keys; errors name the file.
    pub fn load(o: &Options) -> Result<Tls, String> {
        let ca = o.cacert.clone().unwrap_or_else(|| PathBuf::from(SYSTEM_CA_BUNDLE));
        let roots = pem::roots(&ca)?;
        let builder = ClientConfig::builder_with_provider(pem::provider()).with_safe_default_protocol_versions().map_err(|e| e.to_string())?.with_root_certificates(roots);
        let (client, server) = match (&o.cert, &o.key) {
            (Some(c), Some(k)) => {
                let client = builder.with_client_auth_cert(pem::certs(c)?, pem::key(k)?).map_err(|e| format!("client certificate {}: {e}", c.display()))?;
                (client, Some(pem::server_config(c, k)?))
            }
            (None, None) => (builder.with_no_client_auth(), None),
            _ => return Err("--cert and --key go together".into()),
        };
        Ok(Tls { options: o.clone(), client: Arc::new(client), server, server_name: o.server_name.clone() })
    }

    /// TLS over `tcp` to `host` (the name checked unless `--tls-server-name` says otherwise); the
    /// handshake is completed here so that a refused certificate is reported as such.
    pub fn connect(&self, tcp: TcpStream, host: &str) -> Result<Stream, std::io::Error> {
        let name = self.server_name.as_deref().unwrap_or(host.trim_matches(['[', ']']));
        let name = ServerName::try_from(name.to_string()).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("TLS server name {name:?}: {e}")))?;
        stream::handshake(&self.client, name, tcp, "TLS handshake")
    }

    /// Serve TLS on an accepted connection (the agent to its replica), handshake completed.
    pub fn accept(&self, tcp: TcpStream) -> Result<StreamOwned<ServerConnection, TcpStream>, String> {
        let cfg = self.server.as_ref().ok_or("serving TLS needs --cert and --key")?;
        stream::accept(cfg, tcp).map_err(|e| format!("TLS handshake: {e}"))
    }

    /// The files it was loaded from (to hand to another process, e.g. the join's guard).
    pub fn options(&self) -> &Options {
        &self.options
    }

    /// Whether [`Tls::accept`] can work (a certificate and key were given).
    pub fn can_serve(&self) -> bool {
        self.server.is_some()
    }
}

/// Connect to `addr` (`host:port`, a DNS name, an IPv4 address or an IPv6 one in brackets) within
/// `timeout` per address, over TLS when `tls` is given (checked against the host as given). A name
/// is resolved at every call and each of its addresses tried in turn: a Service or a pod that moved
/// is found again on the next attempt.
pub fn connect(addr: &str, tls: Option<&Tls>, timeout: std::time::Duration) -> Result<Stream, (&'static str, std::io::Error)> {
    let ep: endpoint::Endpoint = addr.parse().map_err(|e: endpoint::ParseError| ("parse the address", std::io::Error::new(std::io::ErrorKind::InvalidInput, e.to_string())))?;
    let s: TcpStream = ep.connect(timeout).map_err(|e| ("connect to", e))?;
    s.set_read_timeout(Some(timeout)).and_then(|_| s.set_write_timeout(Some(timeout))).and_then(|_| s.set_nodelay(true)).map_err(|e| ("configure", e))?;
    match tls {
        None => Ok(Stream::Plain(s)),
        Some(t) => t.connect(s, &ep.host_str()).map_err(|e| ("TLS to", e)),
    }
}
