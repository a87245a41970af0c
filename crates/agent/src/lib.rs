//! `join`: make a local, unmodified Redis/Valkey server a live replica of the master, with the bulk of
//! the data pulled from a relay instead of sent by the master.
//!
//! The steps: check the local server; attach to the relay's current generation;
//! check the master and that the replica can load this RDB — all before the replica is touched; point
//! the replica at ourselves and answer its `PSYNC` with the snapshot's `+FULLRESYNC`; stream the RDB
//! in order while [`pipeline`] pulls blocks out of order; stream the log until the replica is close
//! to the relay's end; then, once the replica has applied exactly what we sent, hand it to the master
//! with `REPLICAOF`, which it follows with `PSYNC <replid> <offset+1>`.
//!
//! A failure before the handoff resets the replica to what it was (empty, standalone): it never stays
//! behind looking like a replica it is not. After the handoff the servers own the outcome: a refused
//! partial resync becomes the master's native full sync, which we wait for and report as such.
#![deny(missing_docs)]

pub mod fetch;
pub mod guard;
mod join;
pub mod local;
pub mod machine;
pub mod peer;
pub mod pipeline;
pub mod procstat;
pub mod progress;
pub mod replica_link;
pub mod retry;
pub mod scheduler;
pub mod select;
#[cfg(feature = "ucx")]
pub mod ucx_reader;

pub use join::join;
use replication::replica::Auth;
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::time::Duration;
use transport::{Credentials, Transport};

/// Why a join failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Talking to the relay failed.
    #[error("relay: {0}")]
    Relay(#[source] transport::Error),
    /// The relay said something wrong or is gone.
    #[error("{0}")]
    RelayProtocol(String),
    /// The local server refused or failed a command.
    #[error("local server: {0}")]
    Replica(#[source] client::Error),
    /// The local server's replication link to the agent failed.
    #[error("replica link: {0}")]
    ReplicaLink(String),
    /// No sentinel could name the master.
    #[error("sentinel: {0}")]
    Sentinel(String),
    /// The master refused or failed a command.
    #[error("master: {0}")]
    Master(#[source] client::Error),
    /// A local precondition does not hold.
    #[error("{0}")]
    Local(String),
    /// The replica cannot load this master's data.
    #[error("incompatible: {0}")]
    Incompatible(String),
    /// A block failed its checksum twice.
    #[error("block {block} (offset {offset}) failed its checksum twice")]
    Checksum {
        /// Block number.
        block: u64,
        /// Its offset.
        offset: u64,
    },
    /// A wait ran past its deadline.
    #[error("timed out: {0}")]
    Timeout(String),
    /// Handing the replica to the master would be wrong.
    #[error("handoff refused: {0}")]
    Handoff(String),
    /// The join was interrupted (SIGINT/SIGTERM).
    #[error("interrupted")]
    Interrupted,
}

fn check_cancel(cancel: &std::sync::atomic::AtomicBool) -> Result<(), Error> {
    if cancel.load(Ordering::SeqCst) {
        return Err(Error::Interrupted);
    }
    Ok(())
}

/// The join's configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// The relay's address.
    pub relay: SocketAddr,
    /// Shared secret for the relay, and TLS to it when it requires it.
    pub token: Credentials,
    /// The local server, `host:port`.
    pub replica: String,
    /// Its credentials.
    pub replica_auth: Option<Auth>,
    /// The master as the replica must reach it (default: as the relay reaches it).
    pub master: Option<String>,
    /// TLS to the master and the sentinels, and served to a replica with `tls-replication yes`.
    pub tls: Option<client::tls::Tls>,
    /// Speak TLS (with `tls`) to the local server too (`--replica-tls`: a TLS-only local server).
    pub replica_tls: bool,
    /// Find the master through these sentinels, at the start and again at the handoff.
    pub sentinel: Option<client::sentinel::Sentinels>,
    /// The master's credentials (for the backlog check and the replica's `masterauth`).
    pub master_auth: Option<Auth>,
    /// Replace a non-empty replica's data.
    pub force: bool,
    /// Where the agent listens for its replica (loopback, port 0 by default).
    pub listen: SocketAddr,
    /// Reads in flight.
    pub readers: usize,
    /// Blocks buffered ahead of the replica at most.
    pub window_blocks: u64,
    /// How long to wait for the replica to load the snapshot.
    pub load_timeout: Duration,
    /// How long to wait for the replica to be in sync with the master after the handoff.
    pub handoff_timeout: Duration,
    /// Live progress for a display: RDB bytes sent to the replica so far, and the phase.
    pub live: std::sync::Arc<Live>,
    /// Set from outside (a signal) to abandon the join; before the handoff the replica is reset.
    pub cancel: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// The transport for the snapshot (`--transport`); `None` for `auto`.
    pub transport: Option<transport::TransportKind>,
    /// How this agent takes part in its generation's swarm.
    pub peers: peer::PeerConfig,
    /// How often and how patiently a failed join is tried again.
    pub retry: retry::Policy,
}

impl Config {
    /// TLS for the agent's own connections to its local server, when asked for.
    pub fn replica_tls(&self) -> Option<&client::tls::Tls> {
        self.tls.as_ref().filter(|_| self.replica_tls)
    }
}

/// A join that failed for good: the last error and every attempt (the last one included).
#[derive(Debug)]
pub struct Failed {
    /// Why the last attempt failed.
    pub error: Error,
    /// Every attempt, in order.
    pub attempts: Vec<retry::Attempt>,
    /// The last attempt had handed the replica to the master (it is the master's now, not reset).
    pub handed_over: bool,
}

/// Progress that a display can poll while a join runs.
#[derive(Debug, Default)]
pub struct Live {
    /// RDB bytes sent to the replica.
    pub rdb_bytes_sent: std::sync::atomic::AtomicU64,
    /// RDB length once known (0 = not yet).
    pub rdb_bytes_total: std::sync::atomic::AtomicU64,
    /// Current phase, as text.
    pub phase: std::sync::Mutex<&'static str>,
    /// RDB bytes received from the relay and from peers.
    pub sources: pipeline::Counters,
}

impl Live {
    fn set_phase(&self, p: &'static str) {
        *self.phase.lock().unwrap_or_else(|e| e.into_inner()) = p;
    }

    /// The join's progress as Prometheus text (`join --metrics`): the phase as a state set (one
    /// sample per phase, 1 for the current), and byte counters to take rates of.
    pub fn prometheus(&self) -> String {
        use std::sync::atomic::Ordering::Relaxed;
        let mut e = metrics::Exposition::new("fastrepl_join");
        let now = *self.phase.lock().unwrap_or_else(|e| e.into_inner());
        for p in machine::PHASE_NAMES.iter().chain(&[join::WAITING_TO_RETRY]) {
            e.gauge("phase", "The join's phase (1 = current).", &[("phase", p)], if *p == now { 1.0 } else { 0.0 });
        }
        e.counter("rdb_sent_bytes_total", "Snapshot bytes sent to the local server.", &[], self.rdb_bytes_sent.load(Relaxed) as f64);
        e.gauge("rdb_length_bytes", "The snapshot's length (0 until known).", &[], self.rdb_bytes_total.load(Relaxed) as f64);
        e.counter("received_bytes_total", "Verified snapshot bytes received, by source.", &[("source", "relay")], self.sources.from_relay.load(Relaxed) as f64);
        e.counter("received_bytes_total", "", &[("source", "peers")], self.sources.from_peers.load(Relaxed) as f64);
        e.finish()
    }
}

/// How the replica was handed to its master.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Handoff {
    /// `PSYNC` accepted: the replica continued from our offset.
    Partial,
    /// The master insisted on a full resync; the replica is in sync natively.
    Full,
}

/// Seconds since the join started at which each phase ended.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Phases {
    /// Relay attached, local server and master checked.
    pub connect: f64,
    /// First RDB byte sent to the replica.
    pub first_byte: f64,
    /// Every block pulled and sent.
    pub pulled: f64,
    /// The replica finished loading.
    pub loaded: f64,
    /// The replica applied the log up to the handoff offset.
    pub caught_up: f64,
    /// The replica's link to the master is up.
    pub handed_off: f64,
}

/// What happened, for people (summary) and programs (`--json`, which the lab reads back).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Report {
    /// How the handoff went.
    pub handoff: Handoff,
    /// The transport used.
    pub transport: transport::TransportKind,
    /// What it ran on (for ucx: UCX's transport/device carrying the GETs), and why it was chosen.
    pub transport_detail: String,
    /// Relay, replica and master addresses.
    pub relay: String,
    /// The local server.
    pub replica: String,
    /// The master.
    pub master: String,
    /// Server versions.
    pub replica_server: String,
    /// Master server version.
    pub master_server: String,
    /// Snapshot generation.
    pub generation: u64,
    /// Replication ID.
    pub replid: String,
    /// Snapshot offset.
    pub snapshot_offset: u64,
    /// Offset at which the replica was handed over.
    pub handoff_offset: u64,
    /// RDB bytes.
    pub rdb_bytes: u64,
    /// Log bytes streamed after the RDB.
    pub log_bytes: u64,
    /// Blocks pulled.
    pub blocks: u64,
    /// Blocks read again after a checksum mismatch.
    pub blocks_reread: u64,
    /// Readers (connections) used.
    pub readers: usize,
    /// Most block reads in flight at once.
    pub reads_in_flight_max: u64,
    /// The replica got its first block while the master was still producing the RDB.
    pub streamed_while_capturing: bool,
    /// Phase end times.
    pub phases: Phases,
    /// RDB MiB/s from first byte to pulled.
    pub pull_mib_s: f64,
    /// Anything the operator should know.
    pub notes: Vec<String>,
    /// CPU seconds (user + system) this agent process used so far.
    pub agent_cpu_secs: f64,
    /// This agent process's peak resident memory, KiB (`VmHWM`: counts mapped shared memory, e.g. the
    /// relay's snapshot over shm, in full).
    pub agent_peak_rss_kib: u64,
    /// This agent's largest proportional set size seen while it pulled, KiB: the memory it really
    /// uses (shared pages counted by share).
    #[serde(default)]
    pub agent_peak_pss_kib: u64,
    /// This agent in its generation's swarm: its number and where it serves, or why it is not in one.
    #[serde(default)]
    pub swarm: String,
    /// RDB bytes from the relay.
    #[serde(default)]
    pub bytes_from_relay: u64,
    /// RDB bytes from other agents.
    #[serde(default)]
    pub bytes_from_peers: u64,
    /// Where the RDB bytes came from: the relay, then each peer by address.
    #[serde(default)]
    pub sources: Vec<pipeline::SourceBytes>,
    /// Blocks from peers that failed their checksum (thrown away, fetched elsewhere).
    #[serde(default)]
    pub peer_bad_blocks: u64,
    /// Fetches from peers that failed or were refused and went elsewhere.
    #[serde(default)]
    pub peer_failures: u64,
    /// Bytes this agent served to other agents up to its handoff (it may serve more while it lingers).
    #[serde(default)]
    pub bytes_served_to_peers: u64,
    /// Attempts that failed before this one (each was reset and retried).
    #[serde(default)]
    pub attempts: Vec<retry::Attempt>,
}

/// A join that succeeded, with its swarm membership: the caller reports, then lets the agent serve
/// the peers that still pull ([`Joined::linger`]) before exiting.
pub struct Joined {
    /// What happened.
    pub report: Report,
    /// The swarm membership, when the agent is in one.
    pub peering: Option<peer::Peering>,
}

impl Joined {
    /// Serve peers that still need blocks for at most `max` (or until `cancel`); returns the seconds
    /// lingered and the bytes served in all.
    pub fn linger(&self, max: Duration, cancel: &std::sync::atomic::AtomicBool) -> (f64, u64) {
        match &self.peering {
            Some(p) => (p.linger(max, cancel).as_secs_f64(), p.served_bytes()),
            None => (0.0, 0),
        }
    }
}

/// Readers to use: as asked, or the transport's default when `asked` is 0.
pub fn readers(asked: usize, transport: &dyn Transport) -> usize {
    if asked == 0 {
        transport.default_readers()
    } else {
        asked
    }
}

