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
//! A failure before the replica was pointed at the agent leaves it untouched; one after that and
//! before the handoff resets it (empty, standalone): it never stays behind looking like a replica it
//! is not. After the handoff the servers own the outcome: a refused partial resync becomes the
//! master's native full sync, which we wait for and report as such. A failure says which of these
//! happened ([`ReplicaState`]), and its [`Error`] kind decides whether it is tried again.
#![deny(missing_docs)]

mod arrival;
pub mod cluster;
pub mod events;
pub mod fetch;
pub mod guard;
mod join;
pub mod local;
pub mod machine;
pub mod peer;
pub mod pipeline;
pub mod planner;
pub mod procstat;
pub mod progress;
pub mod rdb_aux;
pub mod replica_link;
pub mod retry;
pub mod scheduler;
pub mod select;
pub mod stage;
pub mod snapshot_file;
pub mod staged;
pub mod staging;
mod tracker_link;
#[cfg(feature = "ucx")]
pub mod ucx_reader;

pub use join::{join, WAITING_FOR_CAPTURE};
use replication::replica::Auth;
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::time::Duration;
use transport::{Credentials, Transport};

/// The party an error came from (or was about).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Party {
    /// The relay (its control, data or tracker connections).
    Relay,
    /// The master.
    Master,
    /// The local server being joined.
    Replica,
    /// The local server's replication link to this agent.
    ReplicaLink,
    /// The sentinels.
    Sentinel,
}

impl std::fmt::Display for Party {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Party::Relay => "relay",
            Party::Master => "master",
            Party::Replica => "local server",
            Party::ReplicaLink => "replica link",
            Party::Sentinel => "sentinel",
        })
    }
}

/// What went wrong underneath: a server's answer, a relay link's failure, or what we observed.
#[derive(Debug, thiserror::Error)]
pub enum Cause {
    /// A Redis/Valkey server (master, local server, sentinel), with its error code when it answered.
    #[error(transparent)]
    Server(Box<client::Error>),
    /// A connection to the relay or a peer.
    #[error(transparent)]
    Link(#[from] transport::Error),
    /// What the agent observed.
    #[error("{0}")]
    Observed(String),
}

/// Why a join failed, by kind: the kind decides whether another attempt can mend it
/// ([`Error::retryable`]), and it is chosen where the error is made, never from its text.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The operator must act first: the replica holds data and no `--force`, a setting the join
    /// cannot work with, a flag missing. Nothing was changed. Not retried.
    #[error("{0}")]
    Precondition(String),
    /// A server or the relay refused our credentials or a command (`NOPERM`, `WRONGPASS`, `NOAUTH`, a
    /// token the relay refuses). Not retried: it is refused again until an operator grants it.
    #[error("{party}: {cause}")]
    Permission {
        /// Who refused.
        party: Party,
        /// Their answer.
        cause: Cause,
    },
    /// The replica cannot load this master's data, or the relay offers no transport that works
    /// from here. Not retried.
    #[error("incompatible: {0}")]
    Incompatible(String),
    /// The relay could not take a snapshot, for the reason it gave. Retried when the kind is one
    /// time can mend (the master unreachable); not for a configuration error (its `--source`), a
    /// refused permission or a snapshot over its size limit.
    #[error("{}", capture_message(*.kind, .message))]
    Capture {
        /// The relay's kind of failure.
        kind: transport::wire::CaptureFailure,
        /// The relay's account.
        message: String,
    },
    /// A party is down, unreachable, went away or answered "not now" (a relay restarting, a master
    /// loading, a link that dropped). Retried.
    #[error("{party}: {cause}")]
    Unavailable {
        /// Who.
        party: Party,
        /// What happened.
        cause: Cause,
    },
    /// A party broke the protocol (an answer that cannot be). Retried: a restarted relay or master
    /// usually speaks correctly again.
    #[error("{party}: protocol error: {cause}")]
    Protocol {
        /// Who.
        party: Party,
        /// What was wrong.
        cause: Cause,
    },
    /// What the join relies on changed under it: the master's history is no longer the snapshot's
    /// (a restart, a failover), the master's address answers as a replica, the replica was
    /// reconfigured. Retried: the next attempt starts from the relay's current snapshot.
    #[error("{0}")]
    Changed(String),
    /// A block failed its checksum twice. Retried.
    #[error("block {block} (offset {offset}) failed its checksum twice")]
    Checksum {
        /// Block number.
        block: u64,
        /// Its offset.
        offset: u64,
    },
    /// A wait ran past its deadline. Retried.
    #[error("timed out: {0}")]
    Timeout(String),
    /// A local resource could not be had (a port to listen on, the output file). Retried.
    #[error("{0}")]
    Resource(String),
    /// A bug, or the process could not run (a thread that would not start). Not retried.
    #[error("internal: {0}")]
    Internal(String),
    /// The join was interrupted (SIGINT/SIGTERM). Not retried.
    #[error("interrupted")]
    Interrupted,
}

fn capture_message(kind: transport::wire::CaptureFailure, message: &str) -> String {
    use transport::wire::CaptureFailure as K;
    match kind {
        K::Source => format!("the relay's {message}; fix the relay's --source (or --master)"),
        K::Permission => format!("the relay's capture was refused ({message}); grant the relay's user the permissions in docs/operations.md"),
        K::TooLarge => format!("the relay's snapshot would be too large ({message}); raise the relay's --snapshot-max-bytes"),
        K::Unreachable | K::Other => format!("the relay's capture failed ({message}); it keeps retrying"),
    }
}

/// An [`Error`]'s kind, as reported to programs (`--json`'s `error_kind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// [`Error::Precondition`].
    Precondition,
    /// [`Error::Permission`].
    Permission,
    /// [`Error::Incompatible`].
    Incompatible,
    /// [`Error::Capture`].
    Capture,
    /// [`Error::Unavailable`].
    Unavailable,
    /// [`Error::Protocol`].
    Protocol,
    /// [`Error::Changed`].
    Changed,
    /// [`Error::Checksum`].
    Checksum,
    /// [`Error::Timeout`].
    Timeout,
    /// [`Error::Resource`].
    Resource,
    /// [`Error::Internal`].
    Internal,
    /// [`Error::Interrupted`].
    Interrupted,
}

/// The name `--json` prints (`error_kind`) and the logs use.
impl std::fmt::Display for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Kind::Precondition => "precondition",
            Kind::Permission => "permission",
            Kind::Incompatible => "incompatible",
            Kind::Capture => "capture",
            Kind::Unavailable => "unavailable",
            Kind::Protocol => "protocol",
            Kind::Changed => "changed",
            Kind::Checksum => "checksum",
            Kind::Timeout => "timeout",
            Kind::Resource => "resource",
            Kind::Internal => "internal",
            Kind::Interrupted => "interrupted",
        })
    }
}

impl Error {
    /// A server's error (master, local server): a refused permission is [`Error::Permission`], a
    /// reply that is not RESP [`Error::Protocol`], anything else (down, loading, a command failing)
    /// [`Error::Unavailable`].
    pub fn server(party: Party, e: client::Error) -> Error {
        match e {
            e if e.is_permission() => Error::Permission { party, cause: Cause::Server(Box::new(e)) },
            e @ (client::Error::Resp { .. } | client::Error::Unexpected { .. }) => Error::Protocol { party, cause: Cause::Server(Box::new(e)) },
            e => Error::Unavailable { party, cause: Cause::Server(Box::new(e)) },
        }
    }

    /// The master's error ([`Error::server`]).
    pub fn master(e: client::Error) -> Error {
        Error::server(Party::Master, e)
    }

    /// The local server's error ([`Error::server`]).
    pub fn replica(e: client::Error) -> Error {
        Error::server(Party::Replica, e)
    }

    /// A relay connection's error: a refused token is [`Error::Permission`], a broken protocol
    /// [`Error::Protocol`], anything else (down, refused a read, a failed one-sided read)
    /// [`Error::Unavailable`].
    pub fn relay(e: transport::Error) -> Error {
        let party = Party::Relay;
        match e {
            e @ transport::Error::Auth(_) => Error::Permission { party, cause: Cause::Link(e) },
            e @ transport::Error::Protocol(_) => Error::Protocol { party, cause: Cause::Link(e) },
            e => Error::Unavailable { party, cause: Cause::Link(e) },
        }
    }

    /// No sentinel named the master: a permission error when every sentinel refused us, else
    /// unavailable (sentinels down or mid-election answer again).
    pub fn sentinel(e: client::sentinel::NoMaster) -> Error {
        let (party, cause) = (Party::Sentinel, Cause::Observed(e.why));
        if e.refused {
            Error::Permission { party, cause }
        } else {
            Error::Unavailable { party, cause }
        }
    }

    /// `party` is unavailable, as observed.
    pub fn unavailable(party: Party, what: impl Into<String>) -> Error {
        Error::Unavailable { party, cause: Cause::Observed(what.into()) }
    }

    /// `party` broke the protocol, as observed.
    pub fn protocol(party: Party, what: impl Into<String>) -> Error {
        Error::Protocol { party, cause: Cause::Observed(what.into()) }
    }

    /// Its kind.
    pub fn kind(&self) -> Kind {
        match self {
            Error::Precondition(_) => Kind::Precondition,
            Error::Permission { .. } => Kind::Permission,
            Error::Incompatible(_) => Kind::Incompatible,
            Error::Capture { .. } => Kind::Capture,
            Error::Unavailable { .. } => Kind::Unavailable,
            Error::Protocol { .. } => Kind::Protocol,
            Error::Changed(_) => Kind::Changed,
            Error::Checksum { .. } => Kind::Checksum,
            Error::Timeout(_) => Kind::Timeout,
            Error::Resource(_) => Kind::Resource,
            Error::Internal(_) => Kind::Internal,
            Error::Interrupted => Kind::Interrupted,
        }
    }

    /// Can another attempt mend this failure (time, a restart, a fresh snapshot)? Follows from the
    /// kind alone; see each variant.
    pub fn retryable(&self) -> bool {
        match self {
            Error::Capture { kind, .. } => kind.transient(),
            Error::Unavailable { .. } | Error::Protocol { .. } | Error::Changed(_) | Error::Checksum { .. } | Error::Timeout(_) | Error::Resource(_) => true,
            Error::Precondition(_) | Error::Permission { .. } | Error::Incompatible(_) | Error::Internal(_) | Error::Interrupted => false,
        }
    }
}

/// What became of the local server when a join failed: the machine knows whether it was ever
/// pointed at the agent, reset, or handed to the master, and the message says exactly that.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplicaState {
    /// The join failed before pointing the replica at the agent: its data and role are as they were.
    Untouched,
    /// It had been pointed at the agent; it was reset to an empty standalone server.
    Reset,
    /// It had been pointed at the agent and could not be reset (why): it may still follow the
    /// agent's address.
    ResetFailed(String),
    /// It had been pointed at the agent and did not answer to be reset (why): a server that
    /// restarts comes back standalone, but its role should be checked.
    Unreachable(String),
    /// `REPLICAOF <master>` was issued: the replica is the master's.
    HandedOver,
    /// A cluster node's staging was undone after it was recorded as a replica: its staged files
    /// removed, it is an empty master of the cluster again ([`staged`]).
    Unstaged,
    /// A cluster node shut down for its staged start did not come back (no supervisor started it, or
    /// `--restart-command` failed): its staged files were removed and its config restored, so it
    /// starts as the empty master it was. Not retried: nothing here starts it.
    Down(String),
}

impl ReplicaState {
    /// Its name for programs (`--json`'s `replica`).
    pub fn name(&self) -> &'static str {
        match self {
            ReplicaState::Untouched => "untouched",
            ReplicaState::Reset => "reset",
            ReplicaState::ResetFailed(_) => "reset_failed",
            ReplicaState::Unreachable(_) => "unreachable",
            ReplicaState::HandedOver => "handed_over",
            ReplicaState::Unstaged => "unstaged",
            ReplicaState::Down(_) => "down",
        }
    }

    /// What it means for the operator, in a sentence or two.
    pub fn explain(&self) -> String {
        match self {
            ReplicaState::Untouched => "The replica was not changed (the join stopped before pointing it at the agent). Fix the cause above and run the same `fastrepl join` again.".into(),
            ReplicaState::Reset => "The replica was not handed to the master; it was reset to an empty standalone server. Fix the cause above and run the same `fastrepl join` again.".into(),
            ReplicaState::ResetFailed(why) => format!("The replica could not be reset ({why}): it may still follow this agent's address. Run REPLICAOF NO ONE and FLUSHALL on it, then run the same `fastrepl join` again."),
            ReplicaState::Unreachable(why) => format!("The replica did not answer to be reset ({why}); a restarted server comes back standalone. Check its role (INFO replication) before running the same `fastrepl join` again."),
            ReplicaState::HandedOver => "The replica had already been handed to the master: it is the master's replica now (check its link with INFO replication).".into(),
            ReplicaState::Down(what) => format!("The cluster node is down: {what}. Start it (it comes back as the empty master it was), see why its supervisor did not, and run the same `fastrepl join` again."),
            ReplicaState::Unstaged => "The cluster node's staging was undone: its staged RDB file removed, and it is an empty master of the cluster again, with no slots. Fix the cause above and run the same `fastrepl join` again.".into(),
        }
    }
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
    /// How a cluster node is restarted by a staged join.
    pub restart: staged::Restart,
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
    /// What became of the replica in the last attempt.
    pub replica: ReplicaState,
}

impl Failed {
    /// The last attempt had handed the replica to the master (it is the master's now, not reset).
    pub fn handed_over(&self) -> bool {
        self.replica == ReplicaState::HandedOver
    }
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
    pub(crate) fn set_phase(&self, p: &'static str) {
        *self.phase.lock().unwrap_or_else(|e| e.into_inner()) = p;
    }

    /// The join's progress as Prometheus text (`join --metrics`): the phase as a state set (one
    /// sample per phase, 1 for the current), and byte counters to take rates of.
    pub fn prometheus(&self) -> String {
        use std::sync::atomic::Ordering::Relaxed;
        let mut e = metrics::Exposition::new("fastrepl_join");
        let now = *self.phase.lock().unwrap_or_else(|e| e.into_inner());
        for p in [join::WAITING_FOR_CAPTURE].iter().chain(machine::PHASE_NAMES).chain(&staged::PHASES).chain(&[join::WAITING_TO_RETRY]) {
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

/// The name `--json` prints (`handoff`) and the logs use.
impl std::fmt::Display for Handoff {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Handoff::Partial => "partial",
            Handoff::Full => "full",
        })
    }
}

/// Seconds since the join started at which each phase ended.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Phases {
    /// The relay's snapshot was ready to pull (its RDB header had arrived): until then the join
    /// waited for the relay's capture (an on-demand capture, the master's fork).
    #[serde(default)]
    pub wait_capture: f64,
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

/// The version of the `join --json` object (this report, or the failure object), printed as its
/// `schema_version`; raised when a field is renamed, removed or changes meaning (adding one does not).
pub const REPORT_SCHEMA_VERSION: u32 = 1;

/// Verified RDB bytes a join received, by source: the relay, or other agents.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReceivedBytes {
    /// From the relay.
    pub relay: u64,
    /// From other agents.
    pub peers: u64,
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
    /// The snapshot's length (`fastrepl_join_rdb_length_bytes`).
    pub rdb_length_bytes: u64,
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
    /// Verified RDB bytes received, by source (`fastrepl_join_received_bytes_total{source}`).
    #[serde(default)]
    pub received_bytes_total: ReceivedBytes,
    /// Where the RDB bytes came from: the relay, then each peer by address.
    #[serde(default)]
    pub sources: Vec<pipeline::SourceBytes>,
    /// Blocks from peers that failed their checksum (thrown away, fetched elsewhere).
    #[serde(default)]
    pub peer_bad_blocks: u64,
    /// Fetches from peers that failed (timed out, connection lost, block not held) and went elsewhere.
    #[serde(default)]
    pub peer_failures: u64,
    /// Fetches a peer refused because it served its maximum of uploads (asked elsewhere or later): the
    /// tracker names only holders with a free slot, so these stay few.
    #[serde(default)]
    pub peer_refusals: u64,
    /// Bytes this agent served to other agents up to its handoff (it may serve more while it lingers).
    #[serde(default)]
    pub bytes_served_to_peers: u64,
    /// Attempts that failed before this one (each was reset and retried).
    #[serde(default)]
    pub attempts: Vec<retry::Attempt>,
    /// A cluster node's staged join: how it went (absent for a join through the agent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub staged: Option<StagedReport>,
}

/// Who started a staged node again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RestartBy {
    /// Its supervisor (systemd, a container runtime), after the shutdown.
    Supervisor,
    /// `--restart-command`.
    Command,
}

/// What a staged join adds to the report.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StagedReport {
    /// The node's cluster id.
    pub node_id: String,
    /// Its master's.
    pub master_id: String,
    /// Who started it again.
    pub restart: RestartBy,
    /// The join introduced it to the master (`CLUSTER MEET`).
    pub met: bool,
    /// Bytes the master could still write, when the node was staged, before the snapshot's offset
    /// left its backlog.
    pub backlog_headroom_bytes: u64,
    /// The same in seconds at the write rate measured over the pull (absent: it wrote nothing).
    pub backlog_headroom_secs: Option<f64>,
    /// Seconds from the shutdown until it answered again.
    pub restarted_secs: f64,
    /// Times the relay took a newer snapshot because the one it held was too old for the backlog.
    pub renewals: u32,
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


#[cfg(test)]
mod display_tests {
    use super::{Handoff, Kind};

    #[test]
    fn logged_names_are_the_json_names() {
        use Kind::*;
        for k in [Precondition, Permission, Incompatible, Capture, Unavailable, Protocol, Changed, Checksum, Timeout, Resource, Internal, Interrupted] {
            assert_eq!(serde_json::to_value(k).unwrap(), k.to_string());
        }
        for h in [Handoff::Partial, Handoff::Full] {
            assert_eq!(serde_json::to_value(h).unwrap(), h.to_string());
        }
    }
}

#[cfg(test)]
mod live_tests {
    #[test]
    fn the_phase_gauge_lists_each_phase_once_and_one_is_current() {
        let live = super::Live::default();
        live.set_phase("loading");
        let text = live.prometheus();
        let phases: Vec<&str> = text.lines().filter(|l| l.starts_with("fastrepl_join_phase{")).collect();
        let mut names: Vec<&str> = phases.iter().map(|l| l.split('"').nth(1).unwrap_or_default()).collect();
        let n = names.len();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), n, "a phase listed twice: {phases:?}");
        assert_eq!(phases.iter().filter(|l| l.ends_with(" 1")).count(), 1, "{phases:?}");
    }
}
