//! What the machine answers: the next [`Action`] for the driver, and at the end the join's
//! [`Outcome`] with its [`Timeline`].

use crate::error::Error;
use crate::report::Handoff;
use std::time::Instant;

/// When each phase ended (the report gives them in seconds since the join started).
#[derive(Debug, Clone, Copy)]
pub struct Timeline {
    /// The join started.
    pub started: Instant,
    /// Checks passed: relay attached, replica and master checked.
    pub connected: Instant,
    /// First RDB byte sent to the replica.
    pub first_byte: Option<Instant>,
    /// Every block pulled and sent.
    pub pulled: Option<Instant>,
    /// The replica finished loading.
    pub loaded: Option<Instant>,
    /// The replica applied the log up to the handoff offset.
    pub caught_up: Option<Instant>,
    /// The replica's link to the master is up.
    pub handed_off: Option<Instant>,
}

/// How the join ended.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// Partial or full.
    pub handoff: Handoff,
    /// The offset at which the replica was handed over.
    pub offset: u64,
    /// Log bytes streamed after the snapshot.
    pub log_bytes: u64,
    /// When each phase ended.
    pub timeline: Timeline,
    /// What the operator should know.
    pub notes: Vec<String>,
}

/// What the driver must do next.
#[derive(Debug)]
pub enum Action {
    /// Point the replica at the agent (`REPLICAOF <agent>`; from here it may follow us), accept its
    /// connection and `PSYNC`, and answer `+FULLRESYNC <replid> <offset>` (whose sync starts tells the
    /// replica from a stranger on its port).
    PointReplica,
    /// Wait until the relay knows the RDB length (the replica cannot take the EOF framing).
    WaitLength,
    /// Send the RDB header (EOF framing, or `$<length>`; `+FULLRESYNC` went before), then pull and
    /// send every block, then the EOF mark if any.
    SendSnapshot {
        /// The EOF framing, else `$<length>`.
        eof: bool,
        /// The length for `$<length>`.
        length: Option<u64>,
    },
    /// Read the replica's state (after the poll interval).
    PollReplica,
    /// Read the log from offset `from`, at most `max` bytes, and send it to the replica.
    ReadLog {
        /// Absolute replication offset of the first byte.
        from: u64,
        /// Most bytes.
        max: u64,
    },
    /// Read the master's replication state.
    CheckMaster,
    /// Read the counters, issue `REPLICAOF <master>`, close the agent's link, then report the
    /// counters.
    HandOff,
    /// Read the counters now that the replica's link to the master is up.
    ReadOutcome,
    /// The replica dropped its link while fed or loading: find out why ([`LoadFacts`]: whether it
    /// answers, its load's state, its log since the feed began), nothing changed.
    ExamineReplica,
    /// The join is over.
    Done(Outcome),
    /// The join failed; reset the replica (empty, standalone) when `reset_replica`.
    Fail {
        /// Why.
        error: Error,
        /// True once the replica may follow the agent and until `REPLICAOF <master>` was issued
        /// (the replica is the master's then); before it was pointed at the agent it is untouched.
        reset_replica: bool,
    },
}
