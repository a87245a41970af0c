//! A dead man's switch for the replica. From the moment the agent points its replica at itself until
//! the handoff (or its own reset), the replica follows an address that only this process serves. If
//! the agent is SIGKILLed (OOM killer, `kill -9`, a crashed host process) it cannot reset anything,
//! and the replica would keep retrying a dead fake master — holding a half-loaded or stale dataset that
//! looks like a replica whose link is merely down.
//!
//! So the agent first starts a guard: this same binary (`fastrepl __guard`), holding the read end of
//! a pipe. The agent writes `disarm` before it exits normally; if the pipe ends without it, the agent
//! died, and the guard resets the replica — but only while it still follows the agent's address, so a
//! replica already handed to its master is never touched. Credentials go through the environment,
//! never argv.

use crate::error::Error;
use crate::local::{self, Reset};
use crate::node::Node;
use std::io::{Read, Write};
use std::process::{Child, Command, Stdio};

const ENV_REPLICA: &str = "FASTREPL_GUARD_REPLICA";
const ENV_USER: &str = "FASTREPL_GUARD_REPLICA_USER";
const ENV_PASSWORD: &str = "FASTREPL_GUARD_REPLICA_PASSWORD";
const ENV_FOLLOWS: &str = "FASTREPL_GUARD_FOLLOWS";
const ENV_DISKLESS: &str = "FASTREPL_GUARD_DISKLESS_LOAD";
const ENV_TLS_CACERT: &str = "FASTREPL_GUARD_TLS_CACERT";
const ENV_TLS_CERT: &str = "FASTREPL_GUARD_TLS_CERT";
const ENV_TLS_KEY: &str = "FASTREPL_GUARD_TLS_KEY";
const ENV_TLS_NAME: &str = "FASTREPL_GUARD_TLS_SERVER_NAME";
const ENV_TLS: &str = "FASTREPL_GUARD_TLS";
const DISARM: &[u8] = b"disarm\n";
/// Set for a staged join's guard ([`arm_staged`]): what it guards is a parked cluster node.
const ENV_STAGED_MASTER: &str = "FASTREPL_GUARD_STAGED_MASTER";
const ENV_STAGED_MASTERUSER: &str = "FASTREPL_GUARD_STAGED_MASTERUSER";
const ENV_STAGED_MASTERAUTH: &str = "FASTREPL_GUARD_STAGED_MASTERAUTH";
const ENV_STAGED_RDB: &str = "FASTREPL_GUARD_STAGED_RDB";
const ENV_STAGED_RDB_ASIDE: &str = "FASTREPL_GUARD_STAGED_RDB_ASIDE";

/// The user name a parked link presents (no master has it: its `AUTH` fails). A staged join parks a
/// cluster node's link with it; the guard knows a node still parked by it.
pub const PARKED_USER: &str = "fastrepl-parked-link";

/// The hidden subcommand that runs a guard.
pub const SUBCOMMAND: &str = "__guard";

/// A running guard; disarm it once the replica no longer follows the agent.
pub struct Guard {
    child: Child,
}

/// Start a guard for the local server `node`, which is about to follow `follows` (the agent's listener).
pub fn arm(node: &Node, follows: std::net::SocketAddr, diskless_load_before: Option<&str>) -> Result<Guard, Error> {
    let mut cmd = command(node)?;
    cmd.env(ENV_FOLLOWS, follows.to_string());
    if let Some(v) = diskless_load_before {
        cmd.env(ENV_DISKLESS, v);
    }
    let child = cmd.spawn().map_err(|e| Error::Internal(format!("start the replica guard: {e}")))?;
    Ok(Guard { child })
}

/// What a staged join's guard must know to undo a parked cluster node.
pub struct StagedNode<'a> {
    /// The master it was met with and is to be met with again after a reset.
    pub master: &'a str,
    /// `masteruser` and `masterauth` before the park.
    pub masteruser: Option<&'a str>,
    /// See `masteruser`.
    pub masterauth: Option<&'a str>,
    /// The RDB file the snapshot becomes, and where the one before was kept.
    pub rdb: &'a std::path::Path,
    /// See `rdb`.
    pub rdb_aside: &'a std::path::Path,
}

/// Start a guard for a cluster node about to be parked and recorded as a replica (see
/// the staged join): if the agent dies before the node's shutdown, the guard finds it parked and
/// undoes it — `CLUSTER RESET SOFT`, `CLUSTER MEET` the master, the link's settings back, the staged
/// file removed (the one before put back). A node already down is left to its supervisor: it starts
/// as the master's replica and resyncs.
pub fn arm_staged(node: &Node, staged: &StagedNode<'_>) -> Result<Guard, Error> {
    let mut cmd = command(node)?;
    cmd.env(ENV_STAGED_MASTER, staged.master).env(ENV_STAGED_RDB, staged.rdb).env(ENV_STAGED_RDB_ASIDE, staged.rdb_aside);
    // The password travels in the environment of our own child, never in argv.
    for (k, v) in [(ENV_STAGED_MASTERUSER, staged.masteruser), (ENV_STAGED_MASTERAUTH, staged.masterauth)] {
        match v {
            Some(v) => cmd.env(k, v),
            None => cmd.env_remove(k),
        };
    }
    let child = cmd.spawn().map_err(|e| Error::Internal(format!("start the node's guard: {e}")))?;
    Ok(Guard { child })
}

/// The guard's command with what every guard needs: the replica and how to reach it.
fn command(node: &Node) -> Result<Command, Error> {
    // The running binary by its inode, not by its path: a package upgrade that replaced the file
    // while this join runs must not keep the guard from starting (the path would name another
    // binary, or none: "No such file or directory"). argv[0] keeps the path, for `ps`.
    let mut cmd = Command::new("/proc/self/exe");
    if let Ok(path) = std::env::current_exe() {
        std::os::unix::process::CommandExt::arg0(&mut cmd, path.to_string_lossy().trim_end_matches(" (deleted)"));
    }
    cmd.arg(SUBCOMMAND)
        .env(ENV_REPLICA, &node.addr)
        .env_remove(ENV_FOLLOWS)
        .env_remove(ENV_DISKLESS)
        .env_remove(ENV_STAGED_MASTER)
        .env_remove(ENV_USER)
        .env_remove(ENV_PASSWORD)
        .stdin(Stdio::piped())
        .stdout(Stdio::null());
    if let Some(a) = &node.auth {
        if let Some(u) = &a.user {
            cmd.env(ENV_USER, u);
        }
        cmd.env(ENV_PASSWORD, &a.password);
    }
    // A TLS-only local server: the guard needs the same files (paths, not secrets, but not argv either).
    for k in [ENV_TLS, ENV_TLS_CACERT, ENV_TLS_CERT, ENV_TLS_KEY, ENV_TLS_NAME] {
        cmd.env_remove(k);
    }
    if let Some(t) = &node.tls {
        let o = t.options();
        cmd.env(ENV_TLS, "1");
        for (k, v) in [(ENV_TLS_CACERT, &o.cacert), (ENV_TLS_CERT, &o.cert), (ENV_TLS_KEY, &o.key)] {
            if let Some(p) = v {
                cmd.env(k, p);
            }
        }
        if let Some(n) = &o.server_name {
            cmd.env(ENV_TLS_NAME, n);
        }
    }
    Ok(cmd)
}

impl Guard {
    /// The replica is handed over or reset: the guard exits without touching it.
    pub fn disarm(mut self) {
        if let Some(mut stdin) = self.child.stdin.take() {
            let _ = stdin.write_all(DISARM);
        }
        let _ = self.child.wait();
    }
}

impl Drop for Guard {
    /// Dropped without [`Guard::disarm`] (an error path whose own reset failed): the pipe closes and
    /// the guard tries again on its own, in the background, if the replica still follows us.
    fn drop(&mut self) {
        drop(self.child.stdin.take());
    }
}

/// The guard process: wait for the agent's word or its death; on death, reset the replica if it
/// still follows the agent. Returns the exit code. What it has to say is logged like any line of the
/// join's, in its format (the guard inherits `FASTREPL_LOG_FORMAT`): with `--log-format json` a
/// collector reading the join's lines would drop a plain-text one, and the guard speaks exactly when
/// something went wrong. The binary's log queue carries it: a stalled stderr reader must not keep a
/// guard whose work is done from ending.
pub fn run() -> i32 {
    let staged = std::env::var(ENV_STAGED_MASTER).ok();
    let follows = std::env::var(ENV_FOLLOWS);
    let (Ok(replica), true) = (std::env::var(ENV_REPLICA), follows.is_ok() || staged.is_some()) else {
        tracing::error!("fastrepl {SUBCOMMAND} is started by `fastrepl join`, not by hand");
        return 2;
    };
    let auth = std::env::var(ENV_PASSWORD).ok().map(|password| replication::replica::Auth { user: std::env::var(ENV_USER).ok(), password });
    let mut word = Vec::new();
    // EOF (the agent died or dropped us) or the word; a read error counts as the agent gone.
    let _ = std::io::stdin().take(DISARM.len() as u64).read_to_end(&mut word);
    if word == DISARM {
        return 0;
    }
    let tls = match load_tls(&replica) {
        Ok(t) => t,
        Err(code) => return code,
    };
    let node = Node { addr: replica.clone(), auth, tls, cancel: Default::default() };
    if let Some(master) = staged {
        return undo_staged(&node, &master);
    }
    let follows = follows.unwrap_or_default();
    match local::reset(&node, std::env::var(ENV_DISKLESS).ok().as_deref(), Some(&follows)) {
        Ok(Reset::Done) => {
            tracing::warn!(replica = %replica, "the join's agent died before the handoff; the replica was reset to an empty standalone server");
            0
        }
        // Handed over already, or reconfigured by someone else: not ours to touch, nothing to say
        // about its data.
        Ok(Reset::NotOurs) => 0,
        Ok(Reset::Unreachable(e)) => {
            tracing::error!(replica = %replica, error = %e, "the join's agent died; the replica did not answer to be reset: a restarted server comes back standalone, check its role");
            1
        }
        Err(e) => {
            tracing::error!(replica = %replica, error = %e, "the join's agent died; could not reset the replica");
            1
        }
    }
}

/// TLS to the replica, from the environment (`Err`: the exit code after saying why).
fn load_tls(replica: &str) -> Result<Option<client::tls::Tls>, i32> {
    if std::env::var_os(ENV_TLS).is_none() {
        return Ok(None);
    }
    let path = |k: &str| std::env::var_os(k).map(std::path::PathBuf::from);
    let o = client::tls::Options { cacert: path(ENV_TLS_CACERT), cert: path(ENV_TLS_CERT), key: path(ENV_TLS_KEY), server_name: std::env::var(ENV_TLS_NAME).ok() };
    client::tls::Tls::load(&o).map(Some).map_err(|e| {
        tracing::error!(replica = %replica, error = %e, "the join's agent died; could not load TLS to reset the replica");
        1
    })
}

/// The staged join's agent died: undo a node still parked (its `masteruser` is ours), leave one that
/// is down or was changed by someone else.
fn undo_staged(n: &Node, master: &str) -> i32 {
    let node = &n.addr;
    let mut c = match n.connect() {
        Ok(c) => c,
        // Down: its supervisor starts it as the master's replica, on the staged snapshot.
        Err(_) => return 0,
    };
    match c.config_get("masteruser") {
        Ok(Some(u)) if u == PARKED_USER => {}
        _ => return 0,
    }
    let env = |k: &str| std::env::var(k).unwrap_or_default();
    let (host, port) = crate::master::split_host_port(master).unwrap_or_default();
    let (user, pass) = (env(ENV_STAGED_MASTERUSER), env(ENV_STAGED_MASTERAUTH));
    // The restored values may be empty: that is "none", as the node had before.
    let steps: [(&str, &[&str]); 4] = [
        ("CLUSTER RESET SOFT", &["CLUSTER", "RESET", "SOFT"]),
        ("CLUSTER MEET", &["CLUSTER", "MEET", &host, &port]),
        ("restore masteruser", &["CONFIG", "SET", "masteruser", &user]),
        ("restore masterauth", &["CONFIG", "SET", "masterauth", &pass]),
    ];
    for (what, args) in steps {
        if let Err(e) = c.cmd(args) {
            tracing::error!(node = %node, step = what, error = %e, "the join's agent died while staging the node; undoing it failed");
            return 1;
        }
    }
    let (rdb, aside) = (std::path::PathBuf::from(env(ENV_STAGED_RDB)), std::path::PathBuf::from(env(ENV_STAGED_RDB_ASIDE)));
    let restored = if aside.exists() { std::fs::rename(&aside, &rdb) } else { std::fs::remove_file(&rdb).or_else(|e| if e.kind() == std::io::ErrorKind::NotFound { Ok(()) } else { Err(e) }) };
    if let Err(e) = restored {
        tracing::error!(node = %node, file = %rdb.display(), error = %e, "the join's agent died while staging the node; it was reset, but its staged RDB file could not be removed");
        return 1;
    }
    tracing::warn!(node = %node, master = %master, "the join's agent died while staging the node; it was reset to an empty master and introduced to the master again");
    0
}
