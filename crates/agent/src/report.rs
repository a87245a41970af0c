//! What a join tells: the live progress a display polls, the report printed at the end (`--json`),
//! and what became of the local server when it failed.

use crate::error::Error;
use crate::phase::JoinPhase;
use serde::{Deserialize, Serialize};

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
    /// removed, it is an empty master of the cluster again (the staged path).
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

/// A join that failed for good: the last error and every attempt (the last one included).
#[derive(Debug)]
pub struct Failed {
    /// Why the last attempt failed.
    pub error: Error,
    /// Every attempt, in order.
    pub attempts: Vec<Attempt>,
    /// What became of the replica in the last attempt.
    pub replica: ReplicaState,
}

impl Failed {
    /// The last attempt had handed the replica to the master (it is the master's now, not reset).
    pub fn handed_over(&self) -> bool {
        self.replica == ReplicaState::HandedOver
    }
}

/// One failed attempt, as reported (log and `--json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Attempt {
    /// 1 for the first attempt.
    pub attempt: u32,
    /// Why it failed.
    pub error: String,
    /// The error's kind (absent from reports written before kinds existed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_kind: Option<crate::error::Kind>,
    /// Seconds it ran.
    pub secs: f64,
    /// Seconds waited after this attempt failed, before the next one started (0: none followed, or
    /// the wait was interrupted).
    pub waited_secs: f64,
}

/// Verified bytes received so far, by source: counters a display reads while the pull runs.
#[derive(Debug, Default)]
pub struct SourceCounters {
    /// Verified bytes from the relay.
    pub from_relay: std::sync::atomic::AtomicU64,
    /// Verified bytes from peers.
    pub from_peers: std::sync::atomic::AtomicU64,
}

/// Bytes that came from one source.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceBytes {
    /// `relay`, or the peer's address.
    pub source: String,
    /// Bytes of verified blocks.
    pub bytes: u64,
    /// Blocks.
    pub blocks: u64,
}

/// Progress that a display can poll while a join runs.
#[derive(Debug, Default)]
pub struct Live {
    /// RDB bytes sent to the replica.
    pub rdb_bytes_sent: std::sync::atomic::AtomicU64,
    /// RDB length once known (0 = not yet).
    pub rdb_bytes_total: std::sync::atomic::AtomicU64,
    /// Current phase (`None` before the first).
    pub phase: std::sync::Mutex<Option<JoinPhase>>,
    /// RDB bytes received from the relay and from peers.
    pub sources: SourceCounters,
}

impl Live {
    pub(crate) fn set_phase(&self, p: JoinPhase) {
        *self.phase.lock().unwrap_or_else(|e| e.into_inner()) = Some(p);
    }

    /// The current phase (`None` before the first).
    pub fn phase(&self) -> Option<JoinPhase> {
        *self.phase.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The join's progress as Prometheus text (`join --metrics`): the phase as a state set (one
    /// sample per phase, 1 for the current), and byte counters to take rates of.
    pub fn prometheus(&self) -> String {
        use std::sync::atomic::Ordering::Relaxed;
        let mut e = metrics::Exposition::new("fastrepl_join");
        let now = self.phase();
        for &p in JoinPhase::ALL {
            e.gauge("phase", "The join's phase (1 = current).", &[("phase", p.name())], if Some(p) == now { 1.0 } else { 0.0 });
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
    /// What it travelled as: its blocks as the relay keeps them, compressed where that paid.
    pub rdb_stored_bytes: u64,
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
    pub sources: Vec<SourceBytes>,
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
    pub attempts: Vec<Attempt>,
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

#[cfg(test)]
mod display_tests {
    use super::Handoff;
    use crate::error::Kind;

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
        live.set_phase(crate::phase::JoinPhase::Loading);
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
