//! `host:port` as an operator writes it: a DNS name (`fastrepl-relay.redis.svc:7400`, `localhost:7400`),
//! an IPv4 address, or an IPv6 address in brackets (`[::1]:7400`). An [`Endpoint`] keeps the name,
//! not an address: it is resolved again at every connection attempt, so a Kubernetes Service or a pod
//! that moved is found again on the next retry, and every address a name resolves to is tried in
//! turn (`localhost` is `::1` and `127.0.0.1`; a server may listen on one of them only).
//!
//! The host is also what a TLS client checks the server's certificate against ([`Endpoint::host`]).
#![deny(missing_docs)]

use std::fmt;
use std::net::{IpAddr, SocketAddr, TcpStream, ToSocketAddrs};
use std::str::FromStr;
use std::time::Duration;

/// Longest host name accepted (DNS: 253 characters).
pub const HOST_BYTES_MAX: usize = 253;

/// A host and a port, as given.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Endpoint {
    host: Host,
    port: u16,
}

/// The host part.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Host {
    /// An IP address, used as it is.
    Ip(IpAddr),
    /// A DNS name, resolved at each connection attempt.
    Name(String),
}

/// Why a string is not `host:port`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError(String);

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ParseError {}

impl FromStr for Endpoint {
    type Err = ParseError;

    fn from_str(s: &str) -> Result<Endpoint, ParseError> {
        let err = |why: &str| ParseError(format!("{s:?} is not host:port: {why}"));
        let (host, port) = if let Some(rest) = s.strip_prefix('[') {
            let (ip, port) = rest.split_once("]:").ok_or_else(|| err("an IPv6 address in brackets must be followed by :port"))?;
            let ip: std::net::Ipv6Addr = ip.parse().map_err(|_| err("not an IPv6 address between the brackets"))?;
            (Host::Ip(IpAddr::V6(ip)), port)
        } else {
            let (host, port) = s.rsplit_once(':').ok_or_else(|| err("no :port"))?;
            if host.contains(':') {
                return Err(err("an IPv6 address goes in brackets ([::1]:7400)"));
            }
            let host = match host.parse::<std::net::Ipv4Addr>() {
                Ok(ip) => Host::Ip(IpAddr::V4(ip)),
                Err(_) => Host::Name(check_name(host).map_err(|why| err(&why))?),
            };
            (host, port)
        };
        let port = port.parse::<u16>().map_err(|_| err("the port is not a number from 0 to 65535"))?;
        Ok(Endpoint { host, port })
    }
}

/// A DNS name's syntax (RFC 1123 labels; a trailing dot allowed), lower-cased: nothing else may reach
/// the resolver or a TLS server name.
fn check_name(h: &str) -> Result<String, String> {
    if h.is_empty() {
        return Err("no host".into());
    }
    if h.len() > HOST_BYTES_MAX {
        return Err(format!("a host name is at most {HOST_BYTES_MAX} characters"));
    }
    let labels = h.strip_suffix('.').unwrap_or(h);
    for label in labels.split('.') {
        let ok = !label.is_empty() && label.len() <= 63 && label.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_') && !label.starts_with('-') && !label.ends_with('-');
        if !ok {
            return Err(format!("{label:?} is not a host name label"));
        }
    }
    Ok(h.to_ascii_lowercase())
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.host {
            Host::Ip(IpAddr::V6(ip)) => write!(f, "[{ip}]:{}", self.port),
            Host::Ip(ip) => write!(f, "{ip}:{}", self.port),
            Host::Name(n) => write!(f, "{n}:{}", self.port),
        }
    }
}

impl From<SocketAddr> for Endpoint {
    fn from(a: SocketAddr) -> Endpoint {
        Endpoint { host: Host::Ip(a.ip()), port: a.port() }
    }
}

impl serde::Serialize for Endpoint {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for Endpoint {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Endpoint, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

impl Endpoint {
    /// An endpoint from its parts.
    pub fn new(host: Host, port: u16) -> Endpoint {
        Endpoint { host, port }
    }

    /// The host as given: the name a TLS certificate is checked against, or the address.
    pub fn host(&self) -> &Host {
        &self.host
    }

    /// The port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The host as text, without brackets (a TLS server name, a `REPLICAOF` argument).
    pub fn host_str(&self) -> String {
        match &self.host {
            Host::Ip(ip) => ip.to_string(),
            Host::Name(n) => n.clone(),
        }
    }

    /// The address itself, when the host is one (no resolution needed).
    pub fn socket_addr(&self) -> Option<SocketAddr> {
        match self.host {
            Host::Ip(ip) => Some(SocketAddr::new(ip, self.port)),
            Host::Name(_) => None,
        }
    }

    /// Every address the host resolves to now, in the resolver's order.
    pub fn resolve(&self) -> std::io::Result<Vec<SocketAddr>> {
        if let Some(a) = self.socket_addr() {
            return Ok(vec![a]);
        }
        let addrs: Vec<SocketAddr> = (self.host_str().as_str(), self.port).to_socket_addrs()?.collect();
        if addrs.is_empty() {
            return Err(std::io::Error::new(std::io::ErrorKind::NotFound, "it resolves to no address"));
        }
        Ok(addrs)
    }

    /// A TCP connection to the first of its addresses that answers, each tried within `timeout`;
    /// the name is resolved again at every call. The error is the last address's. It does not name
    /// the endpoint (the caller's context does, once): only the address a name resolved to.
    pub fn connect(&self, timeout: Duration) -> std::io::Result<TcpStream> {
        let addrs = self.resolve().map_err(|e| std::io::Error::new(e.kind(), format!("resolve the name: {e}")))?;
        connect_first(self, &addrs, timeout)
    }
}

/// A connection to the first of `addrs` (what `ep` resolved to) that answers, each tried within
/// `timeout`; the error is the last address's, naming it where `ep` is a name (an address given
/// as such is the error's context already).
fn connect_first(ep: &Endpoint, addrs: &[SocketAddr], timeout: Duration) -> std::io::Result<TcpStream> {
    let mut last = std::io::Error::new(std::io::ErrorKind::NotFound, "the name resolves to no address");
    for a in addrs {
        match TcpStream::connect_timeout(a, timeout) {
            Ok(s) => return Ok(s),
            Err(e) if ep.socket_addr().is_some() => last = e,
            Err(e) => last = std::io::Error::new(e.kind(), format!("{a}: {e}")),
        }
    }
    Err(last)
}

/// `host:port` from a host as servers report it (an IPv6 address bare, as in `INFO replication`'s
/// `master_host` or `CLUSTER NODES`): bracketed when it is one, so that it parses again.
pub fn host_port(host: &str, port: impl fmt::Display) -> String {
    if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ep(s: &str) -> Endpoint {
        s.parse().unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn names_addresses_and_brackets() {
        assert_eq!(ep("fastrepl-relay.redis.svc:7400").host(), &Host::Name("fastrepl-relay.redis.svc".into()));
        assert_eq!(ep("LocalHost:1").host_str(), "localhost");
        assert_eq!(ep("10.0.0.5:7400").socket_addr(), Some("10.0.0.5:7400".parse().unwrap()));
        assert_eq!(ep("[::1]:7400").socket_addr(), Some("[::1]:7400".parse().unwrap()));
        assert_eq!(ep("redis-0.redis.ns.svc.cluster.local.:6379").port(), 6379);
        for s in ["fastrepl-relay.redis.svc:7400", "10.0.0.5:7400", "[::1]:7400", "[fe80::1]:0"] {
            assert_eq!(ep(s).to_string(), s, "round trip");
        }
    }

    #[test]
    fn what_is_not_host_port_says_why() {
        for (s, why) in [
            ("localhost", "no :port"),
            ("::1:7400", "in brackets"),
            ("[::1]", "followed by :port"),
            ("[10.0.0.1]:1", "not an IPv6"),
            ("host:99999", "port"),
            (":7400", "no host"),
            ("bad_host!:1", "label"),
            ("-x.example:1", "label"),
            ("a..b:1", "label"),
        ] {
            let e = s.parse::<Endpoint>().unwrap_err().to_string();
            assert!(e.contains(why), "{s}: {e}");
        }
        assert!(format!("{}:1", "a".repeat(254)).parse::<Endpoint>().unwrap_err().to_string().contains("at most"));
    }

    #[test]
    fn a_reported_host_and_port_parse_again() {
        assert_eq!(host_port("::1", 6379), "[::1]:6379");
        assert_eq!(host_port("10.0.0.1", 6379), "10.0.0.1:6379");
        assert_eq!(host_port("redis-0.redis", "6379"), "redis-0.redis:6379");
        assert!(host_port("fe80::1", 1).parse::<Endpoint>().is_ok());
    }

    #[test]
    fn serde_is_the_text() {
        let e = ep("[::1]:7400");
        assert_eq!(serde_json::to_string(&e).unwrap(), "\"[::1]:7400\"");
        assert_eq!(serde_json::from_str::<Endpoint>("\"relay.example:1\"").unwrap(), ep("relay.example:1"));
    }

    #[test]
    fn an_address_that_refuses_is_passed_over_for_the_next() {
        // As `localhost` resolving to ::1 first for a server bound to 127.0.0.1 only.
        let live = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let dead: SocketAddr = "127.0.0.1:0".parse().unwrap(); // nothing can listen on port 0: refused at once
        let ep = ep(&format!("localhost:{}", live.local_addr().unwrap().port()));
        let s = connect_first(&ep, &[dead, live.local_addr().unwrap()], Duration::from_secs(5)).unwrap();
        assert_eq!(s.peer_addr().unwrap(), live.local_addr().unwrap());
        // The error names the address the name resolved to, not the name (the caller's context says it, once).
        let e = connect_first(&ep, &[dead], Duration::from_secs(5)).unwrap_err().to_string();
        assert!(e.starts_with(&format!("{dead}: ")) && !e.contains("localhost"), "{e}");
    }

    #[test]
    fn localhost_reaches_a_listener_on_either_family() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let s = ep(&format!("localhost:{port}")).connect(Duration::from_secs(5)).unwrap();
        assert_eq!(s.peer_addr().unwrap().ip(), IpAddr::from([127, 0, 0, 1]));
        // Nothing listening: the error names what the name resolved to; an address given as such
        // is not repeated (the caller's context names it), and the OS error stays whole.
        drop(l);
        let e = ep(&format!("localhost:{port}")).connect(Duration::from_secs(5)).unwrap_err().to_string();
        assert!(e.contains(&format!(":{port}: ")) && !e.contains("localhost"), "{e}");
        let e = ep(&format!("127.0.0.1:{port}")).connect(Duration::from_secs(5)).unwrap_err();
        assert_eq!((e.kind(), e.raw_os_error().is_some()), (std::io::ErrorKind::ConnectionRefused, true), "{e}");
        assert!(!e.to_string().contains("127.0.0.1"), "{e}");
    }
}
