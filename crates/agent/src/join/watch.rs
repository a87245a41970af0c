//! `join --watch`: the join kept beside its server for the server's whole life (a Kubernetes native
//! sidecar, contrib/k8s/replicas-aof.yaml). It waits for the local server, joins it whenever it runs
//! standalone (its first start; a restart, of the pod or of the server alone: a server whose
//! configuration has no `replicaof` comes back standalone, having loaded its AOF), and leaves it
//! alone while it is a replica (linked, or reconnecting to its master by itself). It never joins a
//! replica, a master with replicas of its own, a cluster node, or the master itself (the join's own
//! check, [`crate::join::driver`]). What it sees is decided by [`decide`], without sockets or a clock;
//! [`run`] drives it.

use crate::config::Config;
use crate::error::Error;
use crate::join::driver::{join, Joined};
use crate::node::Node;
use crate::report::Failed;
use client::Role;
use std::time::{Duration, Instant};

/// The local server, as one look at it found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seen {
    /// It does not answer (starting, down) or refused a command; why.
    Unreachable(String),
    /// It answers but is still loading its dataset (`loading:1`).
    Loading,
    /// A replica.
    Replica {
        /// Its master, as `INFO replication` says it.
        master: String,
        /// `master_link_status:up`.
        link_up: bool,
    },
    /// A master (a standalone server is one).
    Master {
        /// `connected_slaves`.
        replicas: i64,
        /// `cluster_enabled:1`.
        cluster: bool,
        /// `run_id`: this process of the server (a restart changes it).
        run_id: String,
        /// It was a replica until promoted (`second_repl_offset` is not -1: a `REPLICAOF NO ONE`
        /// kept its history) and holds keys: a failover's new master, not a server that loaded
        /// its AOF (that one starts a history of its own, -1) nor a join's reset replica (empty).
        promoted: bool,
    },
}

/// What to do about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Join it now.
    Join,
    /// Look again later.
    Watch {
        /// What was seen (said once per change).
        state: &'static str,
        /// More about it (an error, the master followed).
        detail: String,
    },
}

/// Join only a standalone server: a master without replicas, not in cluster mode, loaded, and not
/// the process whose last join was refused for a reason time does not mend (`refused`: its run_id;
/// an incompatible snapshot, the master itself as the local server): that one is joined again only
/// once it restarted, perhaps as another version.
pub fn decide(seen: &Seen, refused: Option<&str>) -> Verdict {
    let watch = |state, detail: String| Verdict::Watch { state, detail };
    match seen {
        Seen::Unreachable(why) => watch("waiting for the local server to answer", why.clone()),
        Seen::Loading => watch("the local server is loading its dataset", String::new()),
        Seen::Replica { master, link_up: true } => watch("the local server is a replica, linked: nothing to do", format!("of {master}")),
        // Its own reconnection, not ours: it knows its master; joining it could only make it lose a
        // partial resync, or follow another master than the one it follows.
        Seen::Replica { master, link_up: false } => watch("the local server is a replica, its link down: it reconnects by itself", format!("of {master}")),
        Seen::Master { cluster: true, .. } => watch("the local server is a cluster node: --watch joins standalone servers only (stage cluster nodes)", String::new()),
        Seen::Master { replicas, .. } if *replicas > 0 => watch("the local server is a master with replicas of its own: not joined", format!("{replicas} connected")),
        // Its replicas may not have found it yet: the history and the keys say what it is.
        Seen::Master { promoted: true, .. } => watch("the local server is a replica promoted to master, holding data: not joined", String::new()),
        Seen::Master { run_id, .. } if refused == Some(run_id.as_str()) => {
            watch("the local server's last join was refused, and another try cannot mend it: waiting for the server to restart", format!("run_id {run_id}"))
        }
        Seen::Master { .. } => Verdict::Join,
    }
}

/// One look at the local server.
pub fn look(node: &Node) -> Seen {
    let mut c = match node.connect_within(limits::COMMAND_TIMEOUT) {
        Ok(c) => c,
        Err(e) => return Seen::Unreachable(e.to_string()),
    };
    let sections = (|| Ok::<_, client::Error>((c.info("persistence")?, c.info("replication")?, c.info("cluster")?, c.info("server")?, c.info("keyspace")?)))();
    let (persistence, replication, cluster, server, keyspace) = match sections {
        Ok(s) => s,
        Err(e) => return Seen::Unreachable(e.to_string()),
    };
    if persistence.get("loading") != Some("0") {
        return Seen::Loading;
    }
    match replication.role() {
        Ok(Role::Replica) => {
            let master = format!("{}:{}", replication.get("master_host").unwrap_or("?"), replication.get("master_port").unwrap_or("?"));
            Seen::Replica { master, link_up: replication.get("master_link_status") == Some("up") }
        }
        Ok(Role::Master) => Seen::Master {
            replicas: replication.num("connected_slaves").unwrap_or(0),
            cluster: cluster.get("cluster_enabled") == Some("1"),
            run_id: server.get("run_id").unwrap_or_default().to_string(),
            // INFO keyspace lists the databases that hold keys, only those.
            promoted: replication.num("second_repl_offset").is_some_and(|o| o != -1) && keyspace.0.iter().any(|(k, _)| k.starts_with("db")),
        },
        Err(e) => Seen::Unreachable(format!("INFO replication: {e}")),
    }
}

/// Watch the local server until cancelled (then `Err(Interrupted)`), joining it whenever [`decide`]
/// says so; every join's outcome goes to `done` (the report printed, peers served a while). After a
/// failed join the same server is joined again [`limits::WATCH_REJOIN_AFTER_FAILURE`] later at the
/// earliest (the join's own retries came first), or, when the failure is not one another try can
/// mend ([`Error::retryable`]), only once the server restarted.
pub fn run(cfg: &Config, mut done: impl FnMut(Result<Joined, Failed>)) -> Result<(), Error> {
    let node = cfg.node();
    let mut said: Option<&'static str> = None;
    let mut refused: Option<String> = None;
    loop {
        crate::error::check_cancel(&cfg.cancel)?;
        let seen = look(&node);
        match decide(&seen, refused.as_deref()) {
            Verdict::Join => {
                tracing::info!(replica = %cfg.replica, "the local server runs standalone: joining it");
                said = None;
                let r = join(cfg);
                let outcome = match &r {
                    Ok(_) => None,
                    Err(f) if matches!(f.error, Error::Interrupted) => Some(Err(Error::Interrupted)),
                    Err(f) => Some(Ok(f.error.retryable())),
                };
                done(r);
                match outcome {
                    None => refused = None,
                    Some(Err(e)) => return Err(e),
                    Some(Ok(true)) => wait(limits::WATCH_REJOIN_AFTER_FAILURE, &cfg.cancel)?,
                    Some(Ok(false)) => {
                        if let Seen::Master { run_id, .. } = seen {
                            refused = Some(run_id);
                        }
                    }
                }
            }
            Verdict::Watch { state, detail } => {
                if said != Some(state) {
                    tracing::info!(replica = %cfg.replica, detail = %detail, "watching: {state}");
                    said = Some(state);
                }
                wait(limits::WATCH_POLL_EVERY, &cfg.cancel)?;
            }
        }
    }
}

/// Sleep `d` in short steps, returning early (with [`Error::Interrupted`]) when cancelled.
fn wait(d: Duration, cancel: &std::sync::atomic::AtomicBool) -> Result<(), Error> {
    let until = Instant::now() + d;
    loop {
        crate::error::check_cancel(cancel)?;
        let now = Instant::now();
        if now >= until {
            return Ok(());
        }
        std::thread::sleep((until - now).min(limits::RETRY_WAIT_SLICE)); // A poll's cadence, watching for a signal.
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn joins(s: Seen) -> bool {
        decide(&s, None) == Verdict::Join
    }

    fn standalone(run_id: &str) -> Seen {
        Seen::Master { replicas: 0, cluster: false, run_id: run_id.into(), promoted: false }
    }

    #[test]
    fn only_a_standalone_server_is_joined() {
        assert!(joins(standalone("a")), "a server back standalone (its config has no replicaof) is joined");
        assert!(!joins(Seen::Replica { master: "redis-master:6379".into(), link_up: true }), "a linked replica is never joined");
        assert!(!joins(Seen::Replica { master: "redis-master:6379".into(), link_up: false }), "a replica reconnecting by itself is left to it");
        assert!(!joins(Seen::Master { replicas: 2, cluster: false, run_id: "a".into(), promoted: false }), "a master serving replicas (promoted) is left alone");
        assert!(!joins(Seen::Master { replicas: 0, cluster: false, run_id: "a".into(), promoted: true }), "a promoted master whose replicas have not found it yet is left alone");
        assert!(!joins(Seen::Master { replicas: 0, cluster: true, run_id: "a".into(), promoted: false }), "a cluster node is staged, not watched");
        assert!(!joins(Seen::Loading), "a server loading its AOF is waited for");
        assert!(!joins(Seen::Unreachable("connection refused".into())));
    }

    #[test]
    fn a_state_is_said_once_whatever_its_detail() {
        let a = decide(&Seen::Unreachable("connection refused".into()), None);
        let b = decide(&Seen::Unreachable("timed out".into()), None);
        let state = |v: &Verdict| match v {
            Verdict::Watch { state, .. } => *state,
            Verdict::Join => "join",
        };
        assert_eq!(state(&a), state(&b));
        assert_ne!(state(&a), state(&decide(&Seen::Loading, None)));
    }

    #[test]
    fn a_refusal_for_good_waits_for_the_servers_restart() {
        assert!(matches!(decide(&standalone("a"), Some("a")), Verdict::Watch { state, .. } if state.contains("waiting for the server to restart")), "the process refused is not joined again");
        assert_eq!(decide(&standalone("b"), Some("a")), Verdict::Join, "restarted (another run_id): joined again");
    }
}
