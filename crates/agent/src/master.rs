//! The master as the join and the staged path see it: how it is reached (found through Sentinel,
//! given, or as the relay reaches it; with its credentials and TLS), its replication state from `INFO
//! replication` (what the handoff and the snapshot's freshness are judged by), and its address as
//! `REPLICAOF` and `CLUSTER MEET` take it.

use crate::error::Error;
use client::{Client, Info, Role};
use endpoint::Endpoint;
use replication::replica::Auth;

/// How the agent reaches the master (`--master`, `--sentinel`, the master's credentials, `--tls`).
#[derive(Debug, Clone, Copy, Default)]
pub struct MasterAccess<'a> {
    /// The master as given (`--master`).
    pub given: Option<&'a str>,
    /// Sentinels that name the master; they win over `given`.
    pub sentinel: Option<&'a client::sentinel::Sentinels>,
    /// Its credentials (also for the other nodes of its shard).
    pub auth: Option<&'a Auth>,
    /// TLS to it (and to the sentinels).
    pub tls: Option<&'a client::tls::Tls>,
}

impl MasterAccess<'_> {
    /// The master's address: what Sentinel names now, else as given, else the relay's (`relays`, asked
    /// only then).
    pub fn find(&self, relays: impl FnOnce() -> Result<String, Error>) -> Result<String, Error> {
        match (self.sentinel, self.given) {
            (Some(s), _) => s.find_master(limits::COMMAND_TIMEOUT).map_err(Error::sentinel),
            (None, Some(m)) => Ok(m.to_string()),
            (None, None) => relays(),
        }
    }

    /// A connection to the master at `addr` (or another node of its shard), with the command timeout.
    pub fn connect(&self, addr: &str) -> Result<Client, client::Error> {
        Client::connect_tls(addr, self.auth, limits::COMMAND_TIMEOUT, self.tls)
    }
}

/// The master's replication state (from `INFO replication`), what the handoff decision needs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MasterRepl {
    /// Where the replica will be told to follow it; `None`: the master the join started with. Differs
    /// when Sentinel named another master since.
    pub addr: Option<Endpoint>,
    /// `role` (`None`: none or one we do not know).
    pub role: Option<Role>,
    /// `master_replid`.
    pub replid: String,
    /// `master_replid2` (the history before its last promotion).
    pub replid2: String,
    /// `repl_backlog_active:1`.
    pub backlog_active: bool,
    /// `repl_backlog_first_byte_offset`.
    pub backlog_first: Option<u64>,
    /// `master_repl_offset`.
    pub offset: Option<u64>,
}

impl MasterRepl {
    /// From the master's `INFO replication` (`addr` left out: the master the join started with).
    pub fn from_info(i: &Info) -> MasterRepl {
        let num = |k: &str| i.num(k).and_then(|n| u64::try_from(n).ok());
        MasterRepl {
            addr: None,
            role: i.role().ok(),
            replid: i.get("master_replid").unwrap_or_default().to_string(),
            replid2: i.get("master_replid2").unwrap_or_default().to_string(),
            backlog_active: i.get("repl_backlog_active") == Some("1"),
            backlog_first: num("repl_backlog_first_byte_offset"),
            offset: num("master_repl_offset"),
        }
    }

    /// Does the master's history include `replid` (current or previous ID)?
    pub fn knows(&self, replid: &str) -> bool {
        self.replid == replid || self.replid2 == replid
    }
}

/// `CLUSTER NODES` of a node (the master or any node of its cluster), as its text.
pub fn cluster_nodes(c: &mut Client) -> Result<String, client::Error> {
    match c.cmd(&["CLUSTER", "NODES"])? {
        resp::Frame::Bulk(b) => Ok(String::from_utf8_lossy(&b).into_owned()),
        other => Err(client::Error::Unexpected { addr: c.addr().into(), what: format!("CLUSTER NODES answered {other:?}") }),
    }
}

/// The master's address (`--master`, Sentinel's, the relay's) as an address; not `host:port` is a
/// precondition the operator mends.
pub fn parse_addr(addr: &str) -> Result<Endpoint, Error> {
    addr.parse().map_err(|e| Error::Precondition(format!("the master's address: {e}")))
}

/// The master's address as an IP and a port (a name resolved here): what `CLUSTER MEET` takes, and
/// what a cluster config file holds (the servers read an IP there).
pub fn ip_address(addr: &str) -> Result<(String, String), Error> {
    let ep = parse_addr(addr)?;
    let ip = ep.resolve().ok().and_then(|a| a.first().copied()).ok_or_else(|| Error::unavailable(crate::error::Party::Master, format!("resolve {}", ep.host_str())))?.ip();
    Ok((ip.to_string(), ep.port().to_string()))
}

/// An address as its host (an IPv6 address without brackets) and port, as `REPLICAOF` takes them.
pub fn replicaof_args(ep: &Endpoint) -> (String, String) {
    (ep.host_str(), ep.port().to_string())
}

/// `host:port` as its host (brackets of an IPv6 address removed) and port, as `REPLICAOF` takes them.
pub fn split_host_port(addr: &str) -> Result<(String, String), Error> {
    parse_addr(addr).map(|ep| replicaof_args(&ep))
}

/// `master_repl_offset` from `INFO replication` (0 when it does not say).
pub fn repl_offset(repl: &Info) -> u64 {
    repl.num("master_repl_offset").and_then(|n| u64::try_from(n).ok()).unwrap_or(0)
}
