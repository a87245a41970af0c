//! Where a generation is captured from: the master itself (it forks), or one of its replicas (the
//! master forks nothing; the replica does).
//!
//! A replica that is in sync shares its master's replication ID and offsets, so a snapshot taken from
//! it continues the master's history: an agent fed from it can still be handed to the master by a
//! partial resync. That holds only while the replica really follows this master, which is what
//! [`check`] establishes before every capture. [`pick`] chooses among the master's replicas for
//! `--source auto`. Both are pure: the I/O (INFO on the servers) is in [`resolve`].

use client::{Info, Role};
use replication::replica::Auth;
use std::time::Duration;
use transport::wire::CaptureFailure;

/// Why no server could be used for the next capture, by kind: a configuration the operator must fix
/// (the source is not a replica of this master), a refused permission, a server out of reach.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{why}")]
pub struct Unusable {
    /// What kind of failure, for the agents waiting.
    pub kind: CaptureFailure,
    /// What was wrong.
    pub why: String,
}

impl Unusable {
    /// A failed request to a server, by what the server (or the socket) said.
    fn from_client(e: &client::Error, why: String) -> Unusable {
        let kind = match e {
            e if e.is_permission() => CaptureFailure::Permission,
            client::Error::Io { .. } => CaptureFailure::Unreachable,
            _ => CaptureFailure::Other,
        };
        Unusable { kind, why }
    }

    fn source(why: String) -> Unusable {
        Unusable { kind: CaptureFailure::Source, why }
    }
}

/// What `--source` asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// The master itself (the default): one fork on the master per generation.
    Master,
    /// This replica of the master, `host:port`.
    Replica(String),
    /// A healthy replica of the master, chosen before each capture; the master only if none qualifies.
    Auto,
}

impl std::str::FromStr for Source {
    type Err = String;
    fn from_str(s: &str) -> Result<Source, String> {
        match s {
            "" | "master" => Ok(Source::Master),
            "auto" => Ok(Source::Auto),
            a => match a.parse::<endpoint::Endpoint>() {
                Ok(_) => Ok(Source::Replica(a.to_string())),
                Err(e) => Err(format!("--source {a:?}: expected master, auto or a replica's host:port ({e})")),
            },
        }
    }
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Master => f.write_str("master"),
            Source::Replica(a) => f.write_str(a),
            Source::Auto => f.write_str("auto"),
        }
    }
}

/// The server a capture will read from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chosen {
    /// `host:port`.
    pub addr: String,
    /// It is a replica (not the master).
    pub replica: bool,
    /// Why it was chosen, for the log (and what was passed over).
    pub why: String,
}

/// A replica as its master lists it (`slaveN:ip=…,port=…,state=online,offset=…,lag=…`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    /// `ip:port` as the master sees it.
    pub addr: String,
    /// `state=online`.
    pub online: bool,
    /// The replica's acknowledged offset.
    pub offset: u64,
}

/// The replicas the master's `INFO replication` lists.
pub fn listed(master: &Info) -> Vec<Listed> {
    let count = master.num("connected_slaves").unwrap_or(0).clamp(0, limits::SOURCE_REPLICAS_LISTED_MAX);
    (0..count)
        .filter_map(|i| master.get(&format!("slave{i}")))
        .filter_map(|line| {
            let field = |name: &str| line.split(',').filter_map(|kv| kv.split_once('=')).find(|(k, _)| *k == name).map(|(_, v)| v);
            let ip = field("ip")?;
            let port: u16 = field("port")?.parse().ok()?;
            let addr = endpoint::host_port(ip, port);
            Some(Listed { addr, online: field("state") == Some("online"), offset: field("offset").and_then(|o| o.parse().ok()).unwrap_or(0) })
        })
        .collect()
}

/// Whether `replica` (its `INFO replication`) can stand in for the master whose replication ID is
/// `master_replid`: it is a replica, its link is up, it is not in a full sync, and it shares the
/// master's history. Ok: its offset. The error's kind says whether time can mend it: a server that
/// is not a replica is the relay's configuration ([`CaptureFailure::Source`]); a link down or a sync
/// in progress passes ([`CaptureFailure::Unreachable`]), and so may another history just after a
/// failover, before the replica has resynced ([`CaptureFailure::Other`]).
pub fn check(master_replid: &str, addr: &str, replica: &Info) -> Result<u64, Unusable> {
    let passing = |why: String| Unusable { kind: CaptureFailure::Unreachable, why };
    match replica.role() {
        Ok(Role::Replica) => {}
        Ok(role) => return Err(Unusable::source(format!("{addr} is not a replica of the master (role: {role})"))),
        Err(e) => return Err(Unusable::source(format!("{addr} is not a replica of the master ({e})"))),
    }
    if replica.get("master_link_status") != Some("up") {
        return Err(passing(format!("{addr}'s link to its master is {}", replica.get("master_link_status").unwrap_or("unknown"))));
    }
    if replica.num("master_sync_in_progress").unwrap_or(0) != 0 {
        return Err(passing(format!("{addr} is in a full sync from its master")));
    }
    let replid = replica.get("master_replid").unwrap_or("");
    if replid != master_replid {
        return Err(Unusable {
            kind: CaptureFailure::Other,
            why: format!(
                "{addr} does not follow this master: its replication ID is {replid:?}, the master's {master_replid:?} (a replica of another master, or one that has not synced since a failover); a snapshot from it could not be handed to the master"
            ),
        });
    }
    Ok(replica.num("master_repl_offset").and_then(|o| u64::try_from(o).ok()).unwrap_or(0))
}

/// `--source auto`: the checked replica furthest ahead (ties: the first listed); the master when no
/// replica qualifies. `checked` holds each candidate's address and its [`check`] result (or why it
/// could not be asked).
pub fn pick(master: &str, checked: &[(String, Result<u64, String>)]) -> Chosen {
    let best = checked.iter().filter_map(|(a, r)| r.as_ref().ok().map(|o| (a, *o))).fold(None::<(&String, u64)>, |best, (a, o)| match best {
        Some((_, bo)) if bo >= o => best,
        _ => Some((a, o)),
    });
    let passed: Vec<String> = checked.iter().filter_map(|(_, r)| r.as_ref().err().cloned()).collect();
    match best {
        Some((addr, offset)) => {
            let mut why = format!("healthy replica at offset {offset}");
            if !passed.is_empty() {
                why += &format!("; passed over: {}", passed.join("; "));
            }
            Chosen { addr: addr.clone(), replica: true, why }
        }
        None if checked.is_empty() => Chosen { addr: master.into(), replica: false, why: "the master lists no online replica; capturing from the master".into() },
        None => Chosen { addr: master.into(), replica: false, why: format!("no replica qualifies ({}); capturing from the master", passed.join("; ")) },
    }
}

/// Resolve `source` for the next capture: ask the master (and the replicas) over `INFO replication`.
/// `exclude`: addresses never to use (the relay's own, as the master may list it).
pub fn resolve(source: &Source, master: &str, auth: Option<&Auth>, tls: Option<&client::tls::Tls>, exclude: &[String], timeout: Duration) -> Result<Chosen, Unusable> {
    let named = match source {
        Source::Master => return Ok(Chosen { addr: master.into(), replica: false, why: "the master (--source master)".into() }),
        Source::Replica(addr) => Some(addr),
        Source::Auto => None,
    };
    let info = |addr: &str| -> Result<Info, client::Error> {
        let mut c = client::Client::connect_tls(addr, auth, timeout, tls)?;
        c.info("replication")
    };
    let m = info(master).map_err(|e| Unusable::from_client(&e, format!("ask the master for its replication ID: {e}")))?;
    match m.role() {
        Ok(Role::Master) => {}
        Ok(role) => return Err(Unusable::source(format!("--master {master} is not a master (role: {role}); point --master at the master"))),
        Err(e) => return Err(Unusable::source(format!("--master {master} is not a master ({e}); point --master at the master"))),
    }
    let replid = m.get("master_replid").unwrap_or("").to_string();
    match named {
        Some(addr) => {
            let i = info(addr).map_err(|e| Unusable::from_client(&e, format!("ask the snapshot source {addr}: {e}")))?;
            let offset = check(&replid, addr, &i).map_err(|u| Unusable { why: format!("snapshot source {}", u.why), ..u })?;
            Ok(Chosen { addr: addr.clone(), replica: true, why: format!("--source, checked: follows the master, at offset {offset}") })
        }
        None => {
            let checked: Vec<(String, Result<u64, String>)> = listed(&m)
                .into_iter()
                .filter(|l| !exclude.contains(&l.addr))
                .map(|l| {
                    let r = if l.online {
                        info(&l.addr).map_err(|e| format!("{}: {e}", l.addr)).and_then(|i| check(&replid, &l.addr, &i).map_err(|u| u.why))
                    } else {
                        Err(format!("{} is not online", l.addr))
                    };
                    (l.addr, r)
                })
                .collect();
            Ok(pick(master, &checked))
        }
    }
}

/// The source's RDB settings while a capture runs with `--source-rdb-raw`, restored when dropped.
///
/// LZF compression and the CRC64 trailer are what bound a cold capture on one core of the source;
/// fastrepl checksums every block end to end, so a capture can go without both. Only ever done to a
/// replica: the master's configuration is never touched.
pub struct RawRdb {
    addr: String,
    auth: Option<Auth>,
    tls: Option<client::tls::Tls>,
    saved: Vec<(&'static str, String)>,
}

impl RawRdb {
    /// Switch `rdbcompression` and `rdbchecksum` off on `addr`, remembering what they were.
    pub fn switch_off(addr: &str, auth: Option<&Auth>, tls: Option<&client::tls::Tls>, timeout: Duration) -> Result<RawRdb, Unusable> {
        let mut c = client::Client::connect_tls(addr, auth, timeout, tls).map_err(|e| Unusable::from_client(&e, format!("connect to the source to switch its RDB compression off: {e}")))?;
        let mut raw = RawRdb { addr: addr.into(), auth: auth.cloned(), tls: tls.cloned(), saved: Vec::new() };
        for name in ["rdbcompression", "rdbchecksum"] {
            let was = c.config_get(name).map_err(|e| Unusable::from_client(&e, format!("CONFIG GET {name} on the source: {e}")))?.unwrap_or_else(|| "yes".into());
            if was == "no" {
                continue;
            }
            match c.config_set(name, "no") {
                Ok(()) => raw.saved.push((name, was)),
                // Redis 7.0 made rdbchecksum immutable at runtime: it can only be set in the source's
                // configuration file. Compression, the larger cost, is still switched.
                // (Any plain ERR for it: a refused permission has its own code and is an error.)
                Err(client::Error::Server { code: client::ErrorCode::Err, .. }) if name == "rdbchecksum" => {
                    tracing::info!(source = addr, "the source's rdbchecksum cannot be changed at runtime (immutable in this server); set it in its configuration to save the CRC64 too");
                }
                Err(e) => return Err(Unusable::from_client(&e, format!("CONFIG SET {name} no on the source: {e}"))),
            }
        }
        tracing::info!(source = addr, switched_off = raw.saved.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(","), "RDB settings switched off on the source for the capture");
        Ok(raw)
    }
}

impl Drop for RawRdb {
    fn drop(&mut self) {
        if self.saved.is_empty() {
            return;
        }
        let restore = || -> Result<(), String> {
            let mut c = client::Client::connect_tls(&self.addr, self.auth.as_ref(), limits::CONNECT_TIMEOUT, self.tls.as_ref()).map_err(|e| e.to_string())?;
            for (name, was) in &self.saved {
                c.config_set(name, was).map_err(|e| e.to_string())?;
            }
            Ok(())
        };
        match restore() {
            Ok(()) => tracing::info!(source = %self.addr, restored = %settings_text(&self.saved), "restored the source's RDB settings"),
            Err(e) => tracing::error!(source = %self.addr, settings = %settings_text(&self.saved), error = %e, "could not restore the source's RDB settings: set them back by hand"),
        }
    }
}

/// Saved settings as one log field: a list of `name=value` ([`crate::json_list`]).
fn settings_text(saved: &[(&'static str, String)]) -> String {
    crate::json_list::json_list(&saved.iter().map(|(n, v)| format!("{n}={v}")).collect::<Vec<_>>())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(text: &str) -> Info {
        Info::parse(&text.replace(' ', "\r\n"))
    }

    #[test]
    fn parses_the_source_flag() {
        assert_eq!("master".parse::<Source>().unwrap(), Source::Master);
        assert_eq!("auto".parse::<Source>().unwrap(), Source::Auto);
        assert_eq!("10.0.0.2:6380".parse::<Source>().unwrap(), Source::Replica("10.0.0.2:6380".into()));
        assert_eq!("[::1]:6380".parse::<Source>().unwrap(), Source::Replica("[::1]:6380".into()));
        assert!("replica".parse::<Source>().is_err());
        assert!("host:port".parse::<Source>().is_err());
        assert_eq!("redis-1.redis.ns.svc:6379".parse::<Source>().unwrap(), Source::Replica("redis-1.redis.ns.svc:6379".into()));
        assert!("::1:6380".parse::<Source>().unwrap_err().contains("brackets"));
    }

    #[test]
    fn lists_the_masters_replicas() {
        let m = info("role:master connected_slaves:3 slave0:ip=10.0.0.2,port=6380,state=online,offset=99,lag=0 slave1:ip=::1,port=7,state=wait_bgsave,offset=0,lag=0 slave2:garbage");
        let l = listed(&m);
        assert_eq!(l.len(), 2, "{l:?}");
        assert_eq!(l[0], Listed { addr: "10.0.0.2:6380".into(), online: true, offset: 99 });
        assert_eq!(l[1], Listed { addr: "[::1]:7".into(), online: false, offset: 0 });
        assert!(listed(&info("role:master connected_slaves:-5")).is_empty());
    }

    #[test]
    fn checks_a_replica_follows_the_master() {
        let ok = info("role:slave master_link_status:up master_sync_in_progress:0 master_replid:abc master_repl_offset:42");
        assert_eq!(check("abc", "r:1", &ok), Ok(42));
        let e = check("xyz", "r:1", &ok).unwrap_err().why;
        assert!(e.contains("does not follow this master") && e.contains("\"abc\"") && e.contains("\"xyz\""), "{e}");
        let not_replica = check("abc", "r:1", &info("role:master master_replid:abc")).unwrap_err();
        assert_eq!((not_replica.kind, not_replica.why.as_str()), (CaptureFailure::Source, "r:1 is not a replica of the master (role: master)"));
        let unknown = check("abc", "r:1", &info("role:sentinel")).unwrap_err();
        assert!(unknown.why.contains("unknown replication role") && unknown.kind == CaptureFailure::Source, "{unknown:?}");
        // States that pass by themselves are not the relay's configuration: agents retry them.
        let down = check("abc", "r:1", &info("role:slave master_link_status:down master_replid:abc")).unwrap_err();
        assert!(down.why.contains("down") && down.kind == CaptureFailure::Unreachable, "{down:?}");
        let syncing = check("abc", "r:1", &info("role:slave master_link_status:up master_sync_in_progress:1 master_replid:abc")).unwrap_err();
        assert!(syncing.why.contains("full sync") && syncing.kind == CaptureFailure::Unreachable, "{syncing:?}");
        assert!(syncing.kind.transient() && down.kind.transient() && !not_replica.kind.transient());
    }

    #[test]
    fn auto_prefers_the_replica_furthest_ahead_and_falls_back_to_the_master() {
        let c = vec![("a:1".to_string(), Ok(10)), ("b:1".to_string(), Err("b:1 is in a full sync".to_string())), ("c:1".to_string(), Ok(30)), ("d:1".to_string(), Ok(30))];
        let p = pick("m:1", &c);
        assert_eq!((p.addr.as_str(), p.replica), ("c:1", true));
        assert!(p.why.contains("passed over: b:1 is in a full sync"), "{}", p.why);
        let none = pick("m:1", &[("b:1".to_string(), Err("down".to_string()))]);
        assert_eq!((none.addr.as_str(), none.replica), ("m:1", false));
        assert!(none.why.contains("no replica qualifies (down)"));
        assert!(!pick("m:1", &[]).replica);
    }
}
