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

/// Join only a standalone server: a master without replicas, not in cluster mode, loaded.
pub fn decide(seen: &Seen) -> Verdict {
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
        Seen::Master { .. } => Verdict::Join,
    }
}

/// One look at the local server.
pub fn look(node: &Node) -> Seen {
    let mut c = match node.connect_within(limits::COMMAND_TIMEOUT) {
        Ok(c) => c,
        Err(e) => return Seen::Unreachable(e.to_string()),
    };
    let sections = (|| Ok::<_, client::Error>((c.info("persistence")?, c.info("replication")?, c.info("cluster")?)))();
    let (persistence, replication, cluster) = match sections {
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
        Ok(Role::Master) => Seen::Master { replicas: replication.num("connected_slaves").unwrap_or(0), cluster: cluster.get("cluster_enabled") == Some("1") },
        Err(e) => Seen::Unreachable(format!("INFO replication: {e}")),
    }
}

/// Watch the local server until cancelled (then `Err(Interrupted)`), joining it whenever [`decide`]
/// says so; every join's outcome goes to `done` (the report printed, peers served a while). After a
/// failed join the same server is joined again [`limits::WATCH_REJOIN_AFTER_FAILURE`] later at the
/// earliest (the join's own retries came first).
pub fn run(cfg: &Config, mut done: impl FnMut(Result<Joined, Failed>)) -> Result<(), Error> {
    let node = cfg.node();
    let mut said: Option<&'static str> = None;
    loop {
        crate::error::check_cancel(&cfg.cancel)?;
        match decide(&look(&node)) {
            Verdict::Join => {
                tracing::info!(replica = %cfg.replica, "the local server runs standalone: joining it");
                said = None;
                let r = join(cfg);
                let outcome = match &r {
                    Ok(_) => None,
                    Err(f) => Some(matches!(f.error, Error::Interrupted)),
                };
                done(r);
                match outcome {
                    None => {}
                    Some(true) => return Err(Error::Interrupted),
                    Some(false) => wait(limits::WATCH_REJOIN_AFTER_FAILURE, &cfg.cancel)?,
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
        decide(&s) == Verdict::Join
    }

    #[test]
    fn only_a_standalone_server_is_joined() {
        assert!(joins(Seen::Master { replicas: 0, cluster: false }), "a server back standalone (its config has no replicaof) is joined");
        assert!(!joins(Seen::Replica { master: "redis-master:6379".into(), link_up: true }), "a linked replica is never joined");
        assert!(!joins(Seen::Replica { master: "redis-master:6379".into(), link_up: false }), "a replica reconnecting by itself is left to it");
        assert!(!joins(Seen::Master { replicas: 2, cluster: false }), "a master serving replicas (promoted) is left alone");
        assert!(!joins(Seen::Master { replicas: 0, cluster: true }), "a cluster node is staged, not watched");
        assert!(!joins(Seen::Loading), "a server loading its AOF is waited for");
        assert!(!joins(Seen::Unreachable("connection refused".into())));
    }

    #[test]
    fn a_state_is_said_once_whatever_its_detail() {
        let a = decide(&Seen::Unreachable("connection refused".into()));
        let b = decide(&Seen::Unreachable("timed out".into()));
        let state = |v: &Verdict| match v {
            Verdict::Watch { state, .. } => *state,
            Verdict::Join => "join",
        };
        assert_eq!(state(&a), state(&b));
        assert_ne!(state(&a), state(&decide(&Seen::Loading)));
    }
}
