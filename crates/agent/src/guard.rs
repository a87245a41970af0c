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

use crate::Error;
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

/// The hidden subcommand that runs a guard.
pub const SUBCOMMAND: &str = "__guard";

/// A running guard; disarm it once the replica no longer follows the agent.
pub struct Guard {
    child: Child,
}

/// Start a guard for `cfg.replica`, which is about to follow `follows` (the agent's listener).
pub fn arm(cfg: &crate::Config, follows: std::net::SocketAddr, diskless_load_before: Option<&str>) -> Result<Guard, Error> {
    let exe = std::env::current_exe().map_err(|e| Error::Internal(format!("find our own binary for the replica guard: {e}")))?;
    let mut cmd = Command::new(exe);
    cmd.arg(SUBCOMMAND)
        .env(ENV_REPLICA, &cfg.replica)
        .env(ENV_FOLLOWS, follows.to_string())
        .env_remove(ENV_USER)
        .env_remove(ENV_PASSWORD)
        .stdin(Stdio::piped())
        .stdout(Stdio::null());
    if let Some(a) = &cfg.replica_auth {
        if let Some(u) = &a.user {
            cmd.env(ENV_USER, u);
        }
        cmd.env(ENV_PASSWORD, &a.password);
    }
    if let Some(v) = diskless_load_before {
        cmd.env(ENV_DISKLESS, v);
    }
    // A TLS-only local server: the guard needs the same files (paths, not secrets, but not argv either).
    for k in [ENV_TLS, ENV_TLS_CACERT, ENV_TLS_CERT, ENV_TLS_KEY, ENV_TLS_NAME] {
        cmd.env_remove(k);
    }
    if let Some(t) = cfg.replica_tls() {
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
    let child = cmd.spawn().map_err(|e| Error::Internal(format!("start the replica guard: {e}")))?;
    Ok(Guard { child })
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
/// still follows the agent. Returns the exit code.
pub fn run() -> i32 {
    let (Ok(replica), Ok(follows)) = (std::env::var(ENV_REPLICA), std::env::var(ENV_FOLLOWS)) else {
        eprintln!("fastrepl {SUBCOMMAND} is started by `fastrepl join`, not by hand");
        return 2;
    };
    let auth = std::env::var(ENV_PASSWORD).ok().map(|password| replication::replica::Auth { user: std::env::var(ENV_USER).ok(), password });
    let mut word = Vec::new();
    // EOF (the agent died or dropped us) or the word; a read error counts as the agent gone.
    let _ = std::io::stdin().take(DISARM.len() as u64).read_to_end(&mut word);
    if word == DISARM {
        return 0;
    }
    let tls = match std::env::var_os(ENV_TLS) {
        None => None,
        Some(_) => {
            let path = |k: &str| std::env::var_os(k).map(std::path::PathBuf::from);
            let o = client::tls::Options { cacert: path(ENV_TLS_CACERT), cert: path(ENV_TLS_CERT), key: path(ENV_TLS_KEY), server_name: std::env::var(ENV_TLS_NAME).ok() };
            match client::tls::Tls::load(&o) {
                Ok(t) => Some(t),
                Err(e) => {
                    eprintln!("fastrepl: the join's agent died; could not load TLS to reset the replica {replica}: {e}");
                    return 1;
                }
            }
        }
    };
    match crate::local::reset(&replica, auth.as_ref(), tls.as_ref(), std::env::var(ENV_DISKLESS).ok().as_deref(), Some(&follows)) {
        Ok(crate::local::Reset::Done) => {
            eprintln!("fastrepl: the join's agent died before the handoff; the replica {replica} was reset to an empty standalone server");
            0
        }
        // Handed over already, or reconfigured by someone else: not ours to touch, nothing to say
        // about its data.
        Ok(crate::local::Reset::NotOurs) => 0,
        Ok(crate::local::Reset::Unreachable(e)) => {
            eprintln!("fastrepl: the join's agent died; the replica {replica} did not answer to be reset ({e}): a restarted server comes back standalone, check its role");
            1
        }
        Err(e) => {
            eprintln!("fastrepl: the join's agent died; could not reset the replica {replica}: {e}");
            1
        }
    }
}
