//! The local server: checks before we touch it, the settings we change and restore, and how we
//! read its replication state.

use crate::error::Error;
use crate::node::Node;
use client::{Client, Info, Role};
use endpoint::Endpoint;
use replication::rdb::Server;
use std::time::Duration;

/// Timeout for commands to local and master servers.
pub const CMD_TIMEOUT: Duration = limits::COMMAND_TIMEOUT;

/// A connection to the local replica with what we learned about it.
pub struct Local {
    /// The connection.
    pub client: Client,
    /// Flavour and version.
    pub server: Server,
    /// `repl-diskless-load` before we changed it.
    pub diskless_load_before: Option<String>,
    /// Its `rdb-version-check` (Valkey 9+), which decides whether it loads RDBs other servers write.
    pub rdb_version_check: Option<String>,
    /// Its `run_id` (`INFO server`): told apart from the master's.
    pub run_id: String,
}

/// Connect and check: reachable, version known, empty (or `force`).
pub fn check(node: &Node, force: bool) -> Result<Local, Error> {
    let addr = node.addr.as_str();
    let mut client = node.connect()?;
    let info = client.info("server").map_err(Error::replica)?;
    let run_id = info.get("run_id").unwrap_or_default().to_string();
    let server = Server::from_info(&info_text(&info)).ok_or_else(|| Error::Incompatible(format!("{addr}: cannot tell its version from INFO server")))?;
    let keys = key_count(&mut client).map_err(Error::replica)?;
    if keys > 0 && !force {
        return Err(Error::Precondition(format!("{addr} holds {keys} keys; a full sync replaces them. Re-run with --force if that is intended")));
    }
    let repl = client.info("replication").map_err(Error::replica)?;
    if repl.num("connected_slaves").unwrap_or(0) > 0 {
        tracing::warn!(replica = addr, "the local server has replicas of its own; they will resync from it after the join");
    }
    let diskless_load_before = client.config_get("repl-diskless-load").map_err(Error::replica)?;
    let rdb_version_check = rdb_version_check(&mut client, &server)?;
    Ok(Local { client, server, diskless_load_before, rdb_version_check, run_id })
}

/// `rdb-version-check` where the server has it (Valkey 9+; `None` elsewhere).
pub fn rdb_version_check(client: &mut Client, server: &Server) -> Result<Option<String>, Error> {
    if server.flavour != "valkey" || server.version.0 < 9 {
        return Ok(None);
    }
    client.config_get("rdb-version-check").map_err(Error::replica)
}

/// Keys the server holds, over all databases (`INFO keyspace`).
pub fn key_count(client: &mut Client) -> Result<u64, client::Error> {
    let keyspace = client.info("keyspace")?;
    Ok(keyspace.0.iter().filter(|(k, _)| k.starts_with("db")).filter_map(|(_, v)| v.split(',').find_map(|kv| kv.strip_prefix("keys=")).and_then(|n| n.parse::<u64>().ok())).sum())
}

/// `INFO` fields back as text, for parsers that take the reply's text.
pub(crate) fn info_text(i: &Info) -> String {
    i.0.iter().map(|(k, v)| format!("{k}:{v}\r\n")).collect()
}

/// The replica's replication state, from `INFO replication`.
#[derive(Debug, Clone, Default)]
pub struct ReplState {
    /// `role` (`None`: the server did not answer, it is busy loading).
    pub role: Option<Role>,
    /// Whom it follows (`master_host:master_port`) as an address: what the join and the guard compare,
    /// so that `::1` and `[::1]`, or a name in another case, are the same master. `None`: it follows
    /// no one, or something that is not `host:port`.
    pub follows: Option<Endpoint>,
    /// `master_link_status:up`.
    pub link_up: bool,
    /// `master_sync_in_progress:1`.
    pub syncing: bool,
    /// Its replication ID.
    pub replid: String,
    /// Its processed offset (`slave_repl_offset`, else `master_repl_offset`).
    pub offset: Option<u64>,
}

impl ReplState {
    /// From `INFO replication`; `Err` when its role is none we know.
    pub fn from_info(i: &Info) -> Result<ReplState, client::UnknownRole> {
        let follows = match (i.get("master_host"), i.get("master_port")) {
            (Some(h), Some(p)) => endpoint::host_port(h, p).parse().ok(),
            _ => None,
        };
        Ok(ReplState {
            role: Some(i.role()?),
            follows,
            link_up: i.get("master_link_status") == Some("up"),
            syncing: i.get("master_sync_in_progress") == Some("1"),
            replid: i.get("master_replid").unwrap_or_default().to_string(),
            offset: i.num("slave_repl_offset").or_else(|| i.num("master_repl_offset")).map(|n| n as u64),
        })
    }
}

/// Read the replication state.
pub fn repl_state(c: &mut Client) -> Result<ReplState, client::Error> {
    let i = c.info("replication")?;
    ReplState::from_info(&i).map_err(|e| client::Error::Unexpected { addr: c.addr().into(), what: e.to_string() })
}

/// What [`reset`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reset {
    /// The replica is standalone and empty, its load setting restored.
    Done,
    /// It follows someone other than `only_if_following` (or no one): left alone.
    NotOurs,
    /// It does not answer (down): nothing follows anyone there; it restarts standalone.
    Unreachable(String),
}

/// Make the replica standalone and empty again (`REPLICAOF NO ONE`, `FLUSHALL`, the load setting
/// restored, the role checked) — if given, only while it follows `only_if_following` (`host:port`).
/// A replica still loading from a closed link answers `-LOADING` until it has read to the link's
/// end, so refusals are retried up to [`limits::REPLICA_RESET_MAX`]; the last refusal is the error.
/// Shared by the join's own reset and by the guard's.
pub fn reset(node: &Node, diskless_load_before: Option<&str>, only_if_following: Option<&str>) -> Result<Reset, String> {
    let deadline = std::time::Instant::now() + limits::REPLICA_RESET_MAX;
    loop {
        let refused = match reset_once(node, diskless_load_before, only_if_following) {
            Ok(r) => return Ok(r),
            Err(e) => e,
        };
        // A permission refused stays refused: say so now, not after the deadline.
        if refused.permanent || std::time::Instant::now() >= deadline {
            return Err(refused.why);
        }
        std::thread::sleep(limits::LOADING_POLL_EVERY); // Waiting for the server to finish a load, with a deadline.
    }
}

/// Why one try at a reset failed, and whether trying again could help.
struct Refused {
    why: String,
    /// `NOPERM`, `WRONGPASS`, `NOAUTH`: only an operator mends it.
    permanent: bool,
}

impl From<client::Error> for Refused {
    fn from(e: client::Error) -> Refused {
        Refused { permanent: e.is_permission(), why: e.to_string() }
    }
}

/// Does the replica follow `listener` (the agent's, as the guard was given it)? As addresses, so that
/// `[::1]:7` and `[0:0::1]:7` or a host's case agree; a listener that is not `host:port` is no one's.
fn same_address(follows: Option<&Endpoint>, listener: &str) -> bool {
    follows.is_some_and(|f| listener.parse::<Endpoint>().is_ok_and(|l| *f == l))
}

fn reset_once(node: &Node, diskless_load_before: Option<&str>, only_if_following: Option<&str>) -> Result<Reset, Refused> {
    let mut c = match node.connect_within(CMD_TIMEOUT) {
        Ok(c) => c,
        Err(e @ client::Error::Io { .. }) => return Ok(Reset::Unreachable(e.to_string())),
        Err(e) => return Err(e.into()),
    };
    if let Some(follows) = only_if_following {
        let st = repl_state(&mut c)?;
        if st.role != Some(Role::Replica) || !same_address(st.follows.as_ref(), follows) {
            return Ok(Reset::NotOurs);
        }
    }
    c.cmd(&["REPLICAOF", "NO", "ONE"])?;
    c.cmd(&["FLUSHALL"])?;
    if let Some(v) = diskless_load_before {
        c.config_set("repl-diskless-load", v)?;
    }
    match repl_state(&mut c)?.role {
        Some(Role::Master) => Ok(Reset::Done),
        _ => Err(Refused { why: "still a replica after REPLICAOF NO ONE".into(), permanent: false }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ep(s: &str) -> Endpoint {
        s.parse().unwrap_or_else(|e| panic!("{e}"))
    }

    /// `INFO replication` of a replica following `host` `port`.
    fn following(host: &str, port: &str) -> ReplState {
        let text = format!("role:slave\r\nmaster_host:{host}\r\nmaster_port:{port}\r\nmaster_link_status:up\r\nmaster_sync_in_progress:0\r\n");
        ReplState::from_info(&Info::parse(&text)).expect("a replica's INFO")
    }

    #[test]
    fn the_guard_knows_its_listener_in_either_family() {
        let f = |h, p| following(h, p).follows;
        assert!(same_address(f("127.0.0.1", "7000").as_ref(), "127.0.0.1:7000"));
        assert!(same_address(f("::1", "7000").as_ref(), "[::1]:7000"), "INFO's bare ::1 is the listener's bracketed [::1]");
        assert!(same_address(f("0:0::1", "7000").as_ref(), "[::1]:7000"), "one address, two spellings");
        assert!(!same_address(f("::1", "7001").as_ref(), "[::1]:7000"));
        assert!(!same_address(f("10.0.0.1", "6379").as_ref(), "127.0.0.1:7000"));
        assert!(!same_address(None, "127.0.0.1:7000"));
        assert!(!same_address(f("127.0.0.1", "7000").as_ref(), "not an address"));
    }

    #[test]
    fn whom_a_replica_follows_is_an_address_not_its_spelling() {
        // INFO gives an IPv6 master bare: it is the bracketed address the join handed to.
        let st = following("::1", "6379");
        assert_eq!(st.follows, Some(ep("[::1]:6379")));
        assert_eq!(st.follows.as_ref().map(|e| e.to_string()).as_deref(), Some("[::1]:6379"), "shown bracketed, so that it parses again");
        assert_eq!(following("0:0:0:0:0:0:0:1", "6379").follows, Some(ep("[::1]:6379")));
        // A name is the same name in any case (what REPLICAOF was given may differ from --master).
        assert_eq!(following("Redis-Master.Redis.svc", "6379").follows, Some(ep("redis-master.redis.svc:6379")));
        assert_ne!(following("redis-master", "6380").follows, Some(ep("redis-master:6379")));
        // No master, or one that is not host:port: it follows no address.
        let standalone = ReplState::from_info(&Info::parse("role:master\r\n")).unwrap();
        assert_eq!(standalone.follows, None);
        assert_eq!(following("fe80::1%eth0", "6379").follows, None);
    }
}
