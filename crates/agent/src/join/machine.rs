//! The join after its checks, as a state machine: no socket, no clock. The driver (`join::driver`)
//! feeds it what it observed, with the time, and does the [`Action`] it returns.
//!
//! ```text
//! Preparing ─prepared─► Pointing ─replica sent PSYNC─► [WaitingLength] ─► Pulling ─all blocks sent─► Loading
//!     ─loaded─► StreamingLog ─short read─► CatchingUp ─ready─► CheckingMaster ─plan─► HandingOff ─link up─►
//!     Classifying ─► Done(partial|full)
//!  Preparing                     ─failure─► Fail { reset_replica: false }  (never pointed at the agent: untouched)
//!  Pointing … CheckingMaster     ─failure─► Fail { reset_replica: true }
//!  Pulling, Loading ─the replica dropped its link─► Examining ─its log and state─► Fail { reset_replica: true }
//!                                                  (a refusal: not retryable; else the loss, retried)
//!  HandingOff, Classifying       ─failure─► Fail { reset_replica: false }  (the replica is the master's now)
//! ```
//!
//! The handoff preconditions, and why each exists:
//! - **loaded** (`master_sync_in_progress:0`): a replica still loading has no offset to offer;
//! - **link up** to the agent: the replica caches its master's state only for a live link, and a
//!   `REPLICAOF` issued earlier makes it drop the cached master, after which the real master refuses the
//!   partial resync;
//! - **replid** equals the snapshot's: the replica will offer `PSYNC <replid> <offset+1>`, and only the
//!   snapshot's history is one the master can continue;
//! - **offset** equals what was streamed: what the replica applied is exactly what it will ask the
//!   master to continue from — a byte more or less and the data would silently diverge;
//! - the master's **backlog covers** offset+1 (and its history is still the snapshot's): otherwise the
//!   master must send a full sync. Then the handoff still happens, as a native full sync the agent
//!   reports as such (exit 3), never as success.

use crate::error::Error;
use crate::local::ReplState;
use crate::master::MasterRepl;
use crate::phase::JoinPhase;
use crate::report::Handoff;
use client::Role;
use std::time::{Duration, Instant};

pub use limits::{APPLY_TIMEOUT, LOG_CHUNK_BYTES as LOG_CHUNK};

/// The snapshot being joined, as the relay described it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    /// The master's replication ID at the snapshot.
    pub replid: String,
    /// The snapshot's replication offset.
    pub offset: u64,
}

/// Deadlines of the waits that depend on the dataset (from `--load-timeout-secs`,
/// `--handoff-timeout-secs`).
#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    /// For the replica to load the snapshot.
    pub load: Duration,
    /// For the replica's link to the master after the handoff.
    pub handoff: Duration,
}

/// Counters that tell a partial resync from a full one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    /// The master's `sync_full`.
    pub full: i64,
    /// The master's `sync_partial_ok`.
    pub partial_ok: i64,
    /// The replica's `total_net_repl_input_bytes`, where the server reports it.
    pub replica_input_bytes: Option<i64>,
    /// The master's `sync_partial_err`: partial resyncs it refused.
    pub partial_err: i64,
    /// The master's `client_output_buffer_limit_disconnections`, where the server reports it (a
    /// replica cut off mid full sync because its output buffer overran).
    pub output_buffer_disconnects: Option<i64>,
}

/// What the handoff is expected to be, from the master's state before it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan {
    /// The master can continue from the replica's offset.
    Partial,
    /// It cannot; the master will send a full sync, for this reason.
    Full(String),
}

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

/// What the driver found out about a replica that dropped its link while it was fed or loading
/// ([`Action::ExamineReplica`]): facts, each `None` where it could not be had.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LoadFacts {
    /// The replica's server, as its `INFO server` said before the join (`valkey 9.1.2`).
    pub replica_server: String,
    /// The master's (`redis 8.2.3`, or `unknown`).
    pub master_server: String,
    /// Whether the replica answers now (one that refused a load may have exited).
    pub answers: bool,
    /// Its `INFO persistence` `loading` (a load in progress), where it answered.
    pub loading: Option<bool>,
    /// Its `rdb_last_load_keys_loaded`: keys of the last load (a failed one's, on Valkey 9), where it
    /// answered.
    pub keys_loaded: Option<i64>,
    /// The lines its log file gained since the feed began, where the join could read the file.
    pub log: Option<Vec<String>>,
}

/// What the driver observed.
#[derive(Debug)]
pub enum Input<'a> {
    /// The replica's settings are made and the agent listens for it; nothing points it at the agent
    /// yet.
    Prepared,
    /// The replica connected to the agent and sent `PSYNC`; it offered `capa eof` or not.
    ReplicaConnected {
        /// `capa eof`.
        capa_eof: bool,
        /// The RDB length, if the relay knows it already.
        length: Option<u64>,
    },
    /// The relay now knows the RDB length.
    Length(u64),
    /// Every block was pulled and sent; the first byte went out at `first_byte`.
    Pulled {
        /// When the first RDB byte was sent.
        first_byte: Option<Instant>,
        /// RDB bytes sent.
        rdb_bytes: u64,
    },
    /// The replica's replication state, and whether it has acknowledged anything on our link.
    Replica {
        /// From `INFO replication`.
        state: &'a ReplState,
        /// Any `REPLCONF ACK` seen on the link.
        ack_seen: bool,
    },
    /// A log read returned `got` bytes of the `asked` (all sent to the replica).
    LogRead {
        /// Bytes returned and sent.
        got: u64,
        /// Bytes asked for.
        asked: u64,
    },
    /// The master's replication state, just before the handoff.
    Master(&'a MasterRepl),
    /// The counters: first as read right before `REPLICAOF` (reported once `REPLICAOF` succeeded),
    /// then once the replica's link to the master is up.
    Counters(Counters),
    /// Something failed, or the join was interrupted.
    Failed(Error),
    /// The replica answered `REPLICAOF <agent>` with an error: it did not take effect, the replica
    /// never followed the agent.
    PointRefused(Error),
    /// What the driver found when told to [`Action::ExamineReplica`].
    Examined(&'a LoadFacts),
}

/// What the driver must do next.
#[derive(Debug)]
pub enum Action {
    /// Point the replica at the agent (`REPLICAOF <agent>`; from here it may follow us) and accept its
    /// connection and `PSYNC`.
    PointReplica,
    /// Wait until the relay knows the RDB length (the replica cannot take the EOF framing).
    WaitLength,
    /// Send `+FULLRESYNC <replid> <offset>`, the RDB header (EOF framing, or `$<length>`), then pull
    /// and send every block, then the EOF mark if any.
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

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Preparing,
    Pointing,
    WaitingLength,
    Pulling { eof: bool },
    Loading { eof: bool, deadline: Instant },
    Examining,
    StreamingLog,
    CatchingUp { deadline: Instant },
    CheckingMaster,
    HandingOff { deadline: Instant },
    Classifying,
    Over,
}

/// The join from the replica's preparation to the end of the handoff.
#[derive(Debug)]
pub struct Join {
    snapshot: Snapshot,
    master: String,
    timeouts: Timeouts,
    phase: Phase,
    /// Told to point the replica at the agent: from then on it may follow us.
    pointed: bool,
    streamed: u64,
    plan: Option<Plan>,
    before: Option<Counters>,
    /// The replica's loss while fed or loading, held while its cause is examined.
    lost: Option<Error>,
    /// The replica's state when the handoff's deadline passed without it in sync with the master:
    /// the join then ends as a full sync (exit 3) saying what it saw, never waiting on.
    unfinished: Option<ReplState>,
    rdb_length: Option<u64>,
    timeline: Timeline,
    notes: Vec<String>,
}

impl Join {
    /// Checks passed at `now`; the join started at `started`. `master` is `host:port` as the replica
    /// will report it (`master_host:master_port`).
    pub fn new(snapshot: Snapshot, master: String, timeouts: Timeouts, started: Instant, now: Instant) -> Join {
        let streamed = snapshot.offset;
        Join {
            snapshot,
            master,
            timeouts,
            phase: Phase::Preparing,
            pointed: false,
            streamed,
            plan: None,
            before: None,
            lost: None,
            unfinished: None,
            rdb_length: None,
            timeline: Timeline { started, connected: now, first_byte: None, pulled: None, loaded: None, caught_up: None, handed_off: None },
            notes: Vec::new(),
        }
    }

    /// The offset of the last byte sent to the replica (the snapshot's until the log starts).
    pub fn streamed(&self) -> u64 {
        self.streamed
    }

    /// The phase as the join reports it (display, metrics, log, event stream): several of the
    /// machine's own steps are one reported phase.
    pub fn join_phase(&self) -> JoinPhase {
        match self.phase {
            Phase::Preparing | Phase::Pointing | Phase::WaitingLength => JoinPhase::Preparing,
            Phase::Pulling { .. } => JoinPhase::Pulling,
            Phase::Loading { .. } | Phase::Examining => JoinPhase::Loading,
            Phase::StreamingLog | Phase::CatchingUp { .. } => JoinPhase::StreamingLog,
            Phase::CheckingMaster | Phase::HandingOff { .. } | Phase::Classifying => JoinPhase::HandingOff,
            Phase::Over => JoinPhase::Done,
        }
    }

    /// Does the replica still depend on the relay's snapshot (being sent or being loaded)? Then a
    /// snapshot the relay lost or failed must stop the join.
    pub fn snapshot_in_use(&self) -> bool {
        matches!(self.phase, Phase::Pulling { .. } | Phase::Loading { .. })
    }

    /// Has `REPLICAOF <master>` been issued (the replica is no longer ours to reset)? The driver
    /// reports the counters read before it only once it succeeded.
    pub fn handed_over(&self) -> bool {
        self.before.is_some()
    }

    /// Was the replica ever pointed at the agent? Before that, a failure leaves it untouched.
    pub fn pointed(&self) -> bool {
        self.pointed
    }

    fn fail(&mut self, error: Error) -> Action {
        let reset_replica = self.pointed() && !self.handed_over();
        self.phase = Phase::Over;
        Action::Fail { error, reset_replica }
    }

    fn unexpected(&mut self, what: &str) -> Action {
        let phase = self.phase;
        self.fail(Error::Internal(format!("{what} while {phase:?}")))
    }

    /// Take one observation at `now`; returns what to do next.
    ///
    /// The transition table: one row per (phase, observation), in the order the phases run, each row
    /// naming the transition it takes (the functions below, in the same order). A failure ends the
    /// join in any phase; an observation no row expects is an internal error, not a panic.
    pub fn on(&mut self, now: Instant, input: Input<'_>) -> Action {
        let action = match (self.phase, input) {
            (Phase::Pulling { .. } | Phase::Loading { .. }, Input::Failed(e)) if lost_replica(&e) => self.examine(e),
            (Phase::Examining, Input::Examined(facts)) => self.examined(facts),
            (Phase::Examining, Input::Failed(e)) => self.examine_failed(e),
            (_, Input::Failed(e)) => self.fail(e),
            (_, Input::PointRefused(e)) => self.point_refused(e),
            (Phase::Preparing, Input::Prepared) => self.point(),
            (Phase::Pointing, Input::ReplicaConnected { capa_eof: true, .. }) => self.send_snapshot(true, None),
            (Phase::Pointing, Input::ReplicaConnected { capa_eof: false, length: Some(len) }) => self.send_snapshot(false, Some(len)),
            (Phase::Pointing, Input::ReplicaConnected { capa_eof: false, length: None }) => self.wait_length(),
            (Phase::WaitingLength, Input::Length(len)) => self.send_snapshot(false, Some(len)),
            (Phase::Pulling { eof }, Input::Pulled { first_byte, rdb_bytes }) => self.pulled(now, eof, first_byte, rdb_bytes),
            (Phase::Loading { eof, deadline }, Input::Replica { state, ack_seen }) => self.poll_loading(now, deadline, loaded(state, &self.snapshot.replid, ack_seen || !eof)),
            (Phase::StreamingLog, Input::LogRead { got, asked }) => self.log_read(now, got, asked),
            (Phase::CatchingUp { deadline }, Input::Replica { state, .. }) => self.poll_catching_up(now, deadline, state),
            (Phase::CheckingMaster, Input::Master(m)) => self.master_checked(now, m),
            (Phase::HandingOff { .. }, Input::Counters(c)) if self.before.is_none() => self.replicaof_issued(c),
            (Phase::HandingOff { deadline }, Input::Replica { state, .. }) => self.poll_handing_off(now, deadline, state),
            (Phase::Classifying, Input::Counters(after)) => self.classified(after),
            (_, input) => self.unexpected(&format!("{input:?}")),
        };
        self.debug_check();
        action
    }

    /// Refused while pointing: the replica's role and data are as they were. Later (a stray refusal)
    /// it may follow the agent already, so it is reset as any failure would.
    fn point_refused(&mut self, error: Error) -> Action {
        if self.phase == Phase::Pointing {
            self.pointed = false;
        }
        self.fail(error)
    }

    /// Prepared: point the replica at the agent; from here it may follow us.
    fn point(&mut self) -> Action {
        self.phase = Phase::Pointing;
        self.pointed = true;
        Action::PointReplica
    }

    /// The replica's framing is known (EOF, or `$<length>` with the length): send the snapshot.
    fn send_snapshot(&mut self, eof: bool, length: Option<u64>) -> Action {
        if !eof {
            self.rdb_length = length;
        }
        self.phase = Phase::Pulling { eof };
        Action::SendSnapshot { eof, length }
    }

    /// The replica takes only `$<length>` framing and the relay does not know the length yet.
    fn wait_length(&mut self) -> Action {
        self.phase = Phase::WaitingLength;
        Action::WaitLength
    }

    /// Every block was sent: wait for the replica to load them.
    fn pulled(&mut self, now: Instant, eof: bool, first_byte: Option<Instant>, rdb_bytes: u64) -> Action {
        self.rdb_length = Some(rdb_bytes);
        self.timeline.first_byte = Some(first_byte.unwrap_or(now));
        self.timeline.pulled = Some(now);
        self.phase = Phase::Loading { eof, deadline: now + self.timeouts.load };
        Action::PollReplica
    }

    /// The replica's state while it loads: loaded, start the log; past the deadline, fail; else poll.
    fn poll_loading(&mut self, now: Instant, deadline: Instant, is_loaded: bool) -> Action {
        if is_loaded {
            self.timeline.loaded = Some(now);
            self.phase = Phase::StreamingLog;
            return self.read_log();
        }
        if now > deadline {
            return self.fail(Error::Timeout(format!("the replica to load the snapshot (after {:?})", self.timeouts.load)));
        }
        Action::PollReplica
    }

    /// The replica dropped its link while it was fed or loading: before failing, find out whether it
    /// refused what it was fed (which another attempt would feed it again) or the link was lost.
    fn examine(&mut self, lost: Error) -> Action {
        self.lost = Some(lost);
        self.phase = Phase::Examining;
        Action::ExamineReplica
    }

    /// Why the replica dropped its link: a refusal of the data fails the join for good (not
    /// retryable); anything else fails it with the loss, which is retried. Either way the replica is
    /// reset (it followed the agent).
    fn examined(&mut self, facts: &LoadFacts) -> Action {
        let lost = self.lost.take().unwrap_or_else(|| Error::Internal("examined without a loss".into()));
        match refusal(facts) {
            Some(refused) => self.fail(Error::Incompatible(refused)),
            None => self.fail(lost),
        }
    }

    /// Interrupted (or the driver failed) while examining: the loss stands, unless interrupted.
    fn examine_failed(&mut self, e: Error) -> Action {
        let lost = self.lost.take();
        match (e, lost) {
            (Error::Interrupted, _) => self.fail(Error::Interrupted),
            (_, Some(lost)) => self.fail(lost),
            (e, None) => self.fail(e),
        }
    }

    /// A log read was sent on: read on, or after a short read (everything the relay had when we
    /// asked) wait for the replica to apply it.
    fn log_read(&mut self, now: Instant, got: u64, asked: u64) -> Action {
        if got > asked {
            return self.fail(Error::protocol(crate::error::Party::Relay, format!("a log read returned {got} bytes for {asked} asked")));
        }
        self.streamed += got;
        if got < asked {
            self.phase = Phase::CatchingUp { deadline: now + APPLY_TIMEOUT };
            return Action::PollReplica;
        }
        self.read_log()
    }

    /// The replica's state while it applies the log: every handoff precondition holds, check the
    /// master; past the deadline, fail with the one that does not; else poll.
    fn poll_catching_up(&mut self, now: Instant, deadline: Instant, state: &ReplState) -> Action {
        let Some(why) = not_ready_for_handoff(state, &self.snapshot.replid, self.streamed) else {
            self.timeline.caught_up = Some(now);
            self.phase = Phase::CheckingMaster;
            return Action::CheckMaster;
        };
        if now > deadline {
            return self.fail(Error::Timeout(format!("the replica to apply the stream up to offset {} ({why}; after {APPLY_TIMEOUT:?})", self.streamed)));
        }
        Action::PollReplica
    }

    /// The master's state: hand over (partial or full, noted), or fail when it is no master any more.
    fn master_checked(&mut self, now: Instant, m: &MasterRepl) -> Action {
        let plan = match plan_handoff(m, &self.snapshot.replid, self.streamed + 1) {
            Err(e) => return self.fail(e),
            Ok(plan) => plan,
        };
        if !m.addr.is_empty() && m.addr != self.master {
            self.notes.push(format!("handed to {} (Sentinel's master at handoff time) instead of {}", m.addr, self.master));
            self.master = m.addr.clone();
        }
        if let Plan::Full(why) = &plan {
            self.notes.push(why.clone());
        }
        self.plan = Some(plan);
        self.phase = Phase::HandingOff { deadline: now + self.timeouts.handoff };
        Action::HandOff
    }

    /// `REPLICAOF <master>` succeeded, with the counters read right before it: the replica is the
    /// master's now.
    fn replicaof_issued(&mut self, before: Counters) -> Action {
        self.before = Some(before);
        Action::PollReplica
    }

    /// The replica's state after `REPLICAOF <master>`: linked to the master, read the outcome;
    /// standalone or past the deadline, fail (never reset); else poll.
    fn poll_handing_off(&mut self, now: Instant, deadline: Instant, state: &ReplState) -> Action {
        if state.role == Some(Role::Master) {
            // It answered, standalone: restarted (a runtime REPLICAOF does not survive that)
            // or reconfigured by someone else. It will never link up; waiting is pointless.
            return self.fail(Error::Changed("the replica stopped following the master after REPLICAOF (restarted or reconfigured): it is standalone, not in sync".into()));
        }
        if state.master.as_deref() == Some(self.master.as_str()) && state.link_up && !state.syncing {
            self.timeline.handed_off = Some(now);
            self.phase = Phase::Classifying;
            return Action::ReadOutcome;
        }
        if now > deadline {
            // The replica is the master's now, whatever happens: a join that waited on would wait on
            // a native full sync that may never finish (an output buffer overrun under heavy writes
            // loops it). End it, as a full sync, with what the counters say.
            self.unfinished = Some(state.clone());
            self.phase = Phase::Classifying;
            return Action::ReadOutcome;
        }
        Action::PollReplica
    }

    /// The counters after the link came up: partial or full (in doubt, full), and the join is over.
    fn classified(&mut self, after: Counters) -> Action {
        let before = self.before.expect("counters are read before the handoff");
        let mut handoff = classify(&before, &after, self.rdb_length);
        if let Some(st) = self.unfinished.take() {
            // Not in sync within the deadline: never a success, whatever the counters say.
            handoff = Handoff::Full;
            self.notes.push(unfinished_note(self.timeouts.handoff, &before, &after, &st));
        } else if handoff == Handoff::Full {
            self.notes.push("the master refused the partial resync and sent a full sync: the replica is in sync, natively".into());
        }
        self.phase = Phase::Over;
        Action::Done(Outcome { handoff, offset: self.streamed, log_bytes: self.streamed - self.snapshot.offset, timeline: self.timeline, notes: std::mem::take(&mut self.notes) })
    }

    /// What holds between any two observations (checked in debug builds): the replica is pointed
    /// at the agent from `Pointing` on (it may follow us), handed over only after `REPLICAOF
    /// <master>`, and fed the log only after the snapshot, which the log only adds to (invariant 3).
    fn debug_check(&self) {
        debug_assert!(self.streamed >= self.snapshot.offset, "the log only adds to the snapshot's offset");
        match self.phase {
            Phase::Preparing => debug_assert!(!self.pointed, "pointed before prepared"),
            Phase::Over => {}
            _ => debug_assert!(self.pointed, "{:?} without the replica pointed at the agent", self.phase),
        }
        if matches!(self.phase, Phase::Preparing | Phase::Pointing | Phase::WaitingLength | Phase::Pulling { .. } | Phase::Loading { .. } | Phase::Examining) {
            debug_assert_eq!(self.streamed, self.snapshot.offset, "log bytes streamed before the replica loaded the snapshot");
        }
        if self.before.is_some() {
            debug_assert!(matches!(self.phase, Phase::HandingOff { .. } | Phase::Classifying | Phase::Over), "handed over in {:?}", self.phase);
        }
        if matches!(self.phase, Phase::HandingOff { .. } | Phase::Classifying) {
            debug_assert!(self.plan.is_some(), "handing off without a plan");
        }
    }

    fn read_log(&self) -> Action {
        Action::ReadLog { from: self.streamed + 1, max: LOG_CHUNK }
    }
}

/// The replica finished loading our snapshot: its link to us is up, it is not syncing, it follows the
/// snapshot's replid, and (with the EOF framing) it sent its first ACK — a diskless-loading replica
/// acknowledges only once it has read the whole payload.
pub fn loaded(st: &ReplState, replid: &str, acked: bool) -> bool {
    st.link_up && !st.syncing && st.replid == replid && acked
}

/// Is this failure the replica going away (its link to the agent dropped, or it no longer answers)?
/// While it is fed or loading, that may be its refusal of the data: examined before it is retried.
pub fn lost_replica(e: &Error) -> bool {
    matches!(e, Error::Unavailable { party: crate::error::Party::ReplicaLink | crate::error::Party::Replica, .. })
}

/// What a server logs when it refuses data it cannot load: an RDB version it does not take, a type or
/// opcode it does not have (Valkey 9 under `rdb-version-check relaxed` meets Redis's own types 22–243
/// this way), module data without the module (a Redis 8 vector set is module type `vectorset`). A
/// server that only lost its connection while loading logs "assuming connection error" instead.
const REFUSALS: [&str; 4] = ["Can't handle foreign type or opcode", "Can't handle RDB format version", "no matching module", "Unknown RDB encoding type"];

/// The log's words for a load cut short by the connection, not refused (Redis and Valkey alike).
const CONNECTION_LOST: &str = "assuming connection error";

/// Where in the docs an operator reads which types cross from Redis to Valkey.
pub const REDIS_TO_VALKEY_DOC: &str = "docs/operations.md#redis-to-valkey";

/// Did the replica refuse the snapshot while loading it? From its log since the feed began: a line
/// saying it cannot handle a type, version or module (and not that it lost a connection). The
/// account, for the operator, when it did; `None` when nothing says so (no log, or a lost link),
/// and the join's failure stays the loss it was, retried.
pub fn refusal(f: &LoadFacts) -> Option<String> {
    let lines = f.log.as_ref()?;
    let line = lines.iter().find(|l| REFUSALS.iter().any(|r| l.contains(r)) && !l.contains(CONNECTION_LOST))?;
    let reason = log_message(line);
    let mut said = format!("the replica ({}) refused the snapshot while loading it: {reason}", f.replica_server);
    match (f.answers, f.keys_loaded) {
        (false, _) => said.push_str(" (and the server exited)"),
        (true, Some(n)) if n > 0 => said.push_str(&format!(" (after {n} keys)")),
        _ => {}
    }
    let from_redis = f.master_server.starts_with("redis ");
    if from_redis && f.replica_server.starts_with("valkey ") {
        said.push_str(&format!(
            " — {} types such as vector sets and hash-field TTLs have no Valkey equivalent: remove or convert those keys on the master first, or keep this replica on Redis; another attempt would be refused again; see {REDIS_TO_VALKEY_DOC}",
            capitalized(&f.master_server)
        ));
    } else {
        said.push_str(&format!(" — the master ({}) stores a type or module this server does not have; another attempt would be refused again; see {REDIS_TO_VALKEY_DOC}", f.master_server));
    }
    Some(said)
}

/// A server log line's message: after its `pid:role date time.ms <level>` prefix, without the
/// loader's "Internal error in RDB reading offset N, function at rdb.c:L -> " preamble.
fn log_message(line: &str) -> &str {
    let msg = [" # ", " * ", " - ", " . "].iter().filter_map(|m| line.find(m).map(|i| &line[i + 3..])).next().unwrap_or(line);
    match msg.find(" -> ") {
        Some(i) if msg.starts_with("Internal error in RDB reading") => &msg[i + 4..],
        _ => msg,
    }
}

/// `redis 8.2.3` → `Redis 8.2.3`.
fn capitalized(s: &str) -> String {
    let mut c = s.chars();
    c.next().map(|f| f.to_uppercase().chain(c).collect()).unwrap_or_default()
}

/// Why the replica may not be handed over yet; `None` when every precondition holds (see the module
/// comment for why each exists).
pub fn not_ready_for_handoff(st: &ReplState, replid: &str, streamed: u64) -> Option<String> {
    if st.syncing {
        return Some("it is still loading".into());
    }
    if !st.link_up {
        return Some("its link to the agent is down".into());
    }
    if st.replid != replid {
        return Some(format!("it follows replid {} instead of the snapshot's {replid}", st.replid));
    }
    if st.offset != Some(streamed) {
        return Some(format!("it applied up to {:?}, not {streamed}", st.offset));
    }
    None
}

/// What a join whose handoff did not end in sync within `waited` saw: the master's full syncs and
/// refusals since the handoff, its output-buffer disconnects, the replica's link.
fn unfinished_note(waited: Duration, before: &Counters, after: &Counters, st: &ReplState) -> String {
    let obuf = match (before.output_buffer_disconnects, after.output_buffer_disconnects) {
        (Some(b), Some(a)) => format!("{} output-buffer disconnects", a - b),
        _ => "output-buffer disconnects not reported by this server".to_string(),
    };
    let link = match (st.link_up, st.syncing) {
        (true, false) => "link up",
        (_, true) => "link down, a full sync in progress",
        (false, false) => "link down",
    };
    format!(
        "the replica was not in sync with the master {waited:?} after the handoff: the master started {} full sync(s) and refused {} partial resync(s) since, {obuf}; the replica: {link} (master {}). It stays the master's replica, which goes on trying natively; if full syncs repeat, raise the master's client-output-buffer-limit replica and repl-backlog-size",
        after.full - before.full,
        after.partial_err - before.partial_err,
        st.master.as_deref().unwrap_or("none"),
    )
}

/// Can the master continue from `next` (the replica's next offset)? An error when handing over would
/// be wrong (the address is no longer a master); `Plan::Full` with the reason when the master will
/// have to send a full sync.
pub fn plan_handoff(m: &MasterRepl, replid: &str, next: u64) -> Result<Plan, Error> {
    if m.role != Some(Role::Master) {
        return Err(Error::Changed(format!(
            "the master's address now answers as a {} (a failover?): not handing the replica to it. Point --master at the current master and retry",
            m.role.map_or_else(|| "server of unknown role".to_string(), |r| r.to_string())
        )));
    }
    if !m.knows(replid) {
        return Ok(Plan::Full(format!("the master's replication ID ({}) no longer includes the snapshot's ({replid}): it restarted or failed over since; the master will send a full sync", m.replid)));
    }
    let (first, end) = (m.backlog_first.unwrap_or(u64::MAX), m.offset.unwrap_or(0));
    if !m.backlog_active || first > next || next > end + 1 {
        return Ok(Plan::Full(format!(
            "the master's backlog (offsets {first}..={end}) no longer covers the replica's next offset {next}: a partial resync is impossible, \
             the master will send a full sync. Raise repl-backlog-size on the master (it must hold the writes made during a join)"
        )));
    }
    Ok(Plan::Partial)
}

/// Was the handoff a partial resync? From the master's counters; when other replicas resynced at the
/// same moment and both counters moved, from the bytes this replica took from the master (a backlog
/// tail, not a whole RDB). In doubt: full — never a false success.
pub fn classify(before: &Counters, after: &Counters, rdb_length: Option<u64>) -> Handoff {
    let partial = after.partial_ok > before.partial_ok;
    let full = after.full > before.full;
    match (partial, full) {
        (true, false) => Handoff::Partial,
        (false, true) | (false, false) => Handoff::Full,
        (true, true) => match (before.replica_input_bytes, after.replica_input_bytes, rdb_length) {
            (Some(a), Some(b), Some(len)) if b >= a && ((b - a) as u64) < len / 2 => Handoff::Partial,
            _ => Handoff::Full,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "6c879f910fada50e6bee517c0d0ea8a0b46c6e0b";
    const OTHER: &str = "0000000000000000000000000000000000000000";

    fn snapshot() -> Snapshot {
        Snapshot { replid: ID.into(), offset: 1000 }
    }

    fn timeouts() -> Timeouts {
        Timeouts { load: Duration::from_secs(30), handoff: Duration::from_secs(30) }
    }

    fn replica(link_up: bool, syncing: bool, replid: &str, offset: Option<u64>) -> ReplState {
        ReplState { role: Some(Role::Replica), master: Some("127.0.0.1:7000".into()), link_up, syncing, replid: replid.into(), offset }
    }

    fn master_ok() -> MasterRepl {
        MasterRepl { addr: String::new(), role: Some(Role::Master), replid: ID.into(), replid2: OTHER.into(), backlog_active: true, backlog_first: Some(1), offset: Some(5000) }
    }

    /// A join whose replica is prepared and about to be pointed at the agent.
    fn prepared(master: &str, t: Instant) -> Join {
        let mut j = Join::new(snapshot(), master.into(), timeouts(), t, t);
        assert!(!j.pointed());
        assert!(matches!(j.on(t, Input::Prepared), Action::PointReplica));
        assert!(j.pointed());
        j
    }

    /// A join whose replica loaded the snapshot (offset 1000), reading the log.
    fn streaming_join(t: Instant) -> Join {
        let mut j = prepared("10.0.0.1:6379", t);
        assert!(matches!(j.on(t, Input::ReplicaConnected { capa_eof: true, length: None }), Action::SendSnapshot { eof: true, length: None }));
        assert!(matches!(j.on(t, Input::Pulled { first_byte: Some(t), rdb_bytes: 5000 }), Action::PollReplica));
        let st = replica(true, false, ID, Some(1000));
        assert!(matches!(j.on(t, Input::Replica { state: &st, ack_seen: true }), Action::ReadLog { from: 1001, max: LOG_CHUNK }));
        j
    }

    /// A join driven to CatchingUp with 300 log bytes streamed (offset 1300).
    fn caught_up_join(t: Instant) -> Join {
        let mut j = streaming_join(t);
        assert!(matches!(j.on(t, Input::LogRead { got: 300, asked: LOG_CHUNK }), Action::PollReplica));
        assert_eq!(j.streamed(), 1300);
        j
    }

    /// A join driven past `REPLICAOF <master>` (a partial plan), waiting for the replica's link.
    fn handed_over_join(t: Instant) -> Join {
        let mut j = caught_up_join(t);
        assert!(matches!(j.on(t, Input::Replica { state: &replica(true, false, ID, Some(1300)), ack_seen: true }), Action::CheckMaster));
        assert!(matches!(j.on(t, Input::Master(&master_ok())), Action::HandOff));
        assert!(matches!(j.on(t, Input::Counters(Counters::default())), Action::PollReplica));
        assert!(j.handed_over());
        j
    }

    #[test]
    fn framing_follows_the_replicas_capa_and_the_known_length() {
        let t = Instant::now();
        let mut j = prepared("m:1", t);
        assert!(matches!(j.on(t, Input::ReplicaConnected { capa_eof: false, length: Some(77) }), Action::SendSnapshot { eof: false, length: Some(77) }));
        let mut j = prepared("m:1", t);
        assert!(matches!(j.on(t, Input::ReplicaConnected { capa_eof: false, length: None }), Action::WaitLength));
        assert!(matches!(j.on(t, Input::Length(9)), Action::SendSnapshot { eof: false, length: Some(9) }));
    }

    #[test]
    fn loading_needs_link_done_replid_and_the_first_ack_with_eof_framing() {
        let t = Instant::now();
        let mut j = prepared("m:1", t);
        j.on(t, Input::ReplicaConnected { capa_eof: true, length: None });
        j.on(t, Input::Pulled { first_byte: None, rdb_bytes: 5000 });
        let ok = replica(true, false, ID, Some(1000));
        for (st, ack) in [(replica(true, true, ID, None), true), (replica(false, false, ID, None), true), (replica(true, false, OTHER, None), true), (ok.clone(), false)] {
            assert!(matches!(j.on(t, Input::Replica { state: &st, ack_seen: ack }), Action::PollReplica), "{st:?} ack {ack} is not loaded");
        }
        assert!(matches!(j.on(t, Input::Replica { state: &ok, ack_seen: true }), Action::ReadLog { .. }));
        // With `$<len>` framing no ACK is needed to call it loaded.
        let mut j = prepared("m:1", t);
        j.on(t, Input::ReplicaConnected { capa_eof: false, length: Some(5) });
        j.on(t, Input::Pulled { first_byte: None, rdb_bytes: 5000 });
        assert!(matches!(j.on(t, Input::Replica { state: &ok, ack_seen: false }), Action::ReadLog { .. }));
    }

    #[test]
    fn the_snapshot_matters_until_the_replica_has_loaded_it() {
        let t = Instant::now();
        let mut j = prepared("m:1", t);
        assert!(!j.snapshot_in_use() && j.join_phase() == JoinPhase::Preparing);
        j.on(t, Input::ReplicaConnected { capa_eof: true, length: None });
        assert!(j.snapshot_in_use() && j.join_phase() == JoinPhase::Pulling);
        j.on(t, Input::Pulled { first_byte: None, rdb_bytes: 5000 });
        assert!(j.snapshot_in_use() && j.join_phase() == JoinPhase::Loading);
        j.on(t, Input::Replica { state: &replica(true, false, ID, Some(1000)), ack_seen: true });
        assert!(!j.snapshot_in_use() && j.join_phase() == JoinPhase::StreamingLog, "loaded: a relay that drops the snapshot now no longer matters");
    }

    #[test]
    fn log_is_read_until_a_short_read() {
        let t = Instant::now();
        let mut j = prepared("m:1", t);
        j.on(t, Input::ReplicaConnected { capa_eof: true, length: None });
        j.on(t, Input::Pulled { first_byte: None, rdb_bytes: 5000 });
        j.on(t, Input::Replica { state: &replica(true, false, ID, Some(1000)), ack_seen: true });
        assert!(matches!(j.on(t, Input::LogRead { got: LOG_CHUNK, asked: LOG_CHUNK }), Action::ReadLog { from, .. } if from == 1001 + LOG_CHUNK));
        assert!(matches!(j.on(t, Input::LogRead { got: 0, asked: LOG_CHUNK }), Action::PollReplica));
        assert_eq!(j.streamed(), 1000 + LOG_CHUNK);
        assert!(matches!(j.on(t, Input::LogRead { got: 1, asked: 1 }), Action::Fail { reset_replica: true, .. }), "a log read after the short one is out of order");
    }

    #[test]
    fn each_handoff_precondition_holds_the_handoff_back() {
        let t = Instant::now();
        let cases = [
            ("still loading", replica(true, true, ID, Some(1300))),
            ("link down", replica(false, false, ID, Some(1300))),
            ("other replid", replica(true, false, OTHER, Some(1300))),
            ("offset short", replica(true, false, ID, Some(1299))),
            ("offset beyond", replica(true, false, ID, Some(1301))),
            ("offset unknown", replica(true, false, ID, None)),
        ];
        for (name, st) in cases {
            let mut j = caught_up_join(t);
            assert!(matches!(j.on(t, Input::Replica { state: &st, ack_seen: true }), Action::PollReplica), "{name}: must not hand off");
            let late = t + APPLY_TIMEOUT + Duration::from_millis(1);
            match j.on(late, Input::Replica { state: &st, ack_seen: true }) {
                Action::Fail { error, reset_replica: true } => assert!(error.to_string().contains("apply the stream"), "{name}: {error}"),
                other => panic!("{name}: {other:?}"),
            }
        }
        let mut j = caught_up_join(t);
        assert!(matches!(j.on(t, Input::Replica { state: &replica(true, false, ID, Some(1300)), ack_seen: true }), Action::CheckMaster));
    }

    #[test]
    fn handoff_plan_each_fallback() {
        let next = 1301;
        assert_eq!(plan_handoff(&master_ok(), ID, next).unwrap(), Plan::Partial);
        let mut m = master_ok();
        m.replid = OTHER.into();
        m.replid2 = ID.into();
        assert_eq!(plan_handoff(&m, ID, next).unwrap(), Plan::Partial, "the snapshot's history as replid2 (after a promotion) is continuable");
        let mut m = master_ok();
        m.replid = OTHER.into();
        assert!(matches!(plan_handoff(&m, ID, next).unwrap(), Plan::Full(w) if w.contains("replication ID")));
        let mut m = master_ok();
        m.backlog_active = false;
        assert!(matches!(plan_handoff(&m, ID, next).unwrap(), Plan::Full(w) if w.contains("backlog")));
        let mut m = master_ok();
        m.backlog_first = Some(next + 1);
        assert!(matches!(plan_handoff(&m, ID, next).unwrap(), Plan::Full(w) if w.contains("repl-backlog-size")));
        let mut m = master_ok();
        m.offset = Some(next - 2);
        assert!(matches!(plan_handoff(&m, ID, next).unwrap(), Plan::Full(_)), "a master behind the replica cannot continue it");
        let mut m = master_ok();
        m.offset = Some(next - 1);
        assert_eq!(plan_handoff(&m, ID, next).unwrap(), Plan::Partial, "caught up exactly: nothing to send yet");
        let mut m = master_ok();
        m.role = Some(Role::Replica);
        assert!(matches!(plan_handoff(&m, ID, next), Err(Error::Changed(w)) if w.contains("as a replica")));
        m.role = None;
        assert!(matches!(plan_handoff(&m, ID, next), Err(Error::Changed(w)) if w.contains("unknown role")));
    }

    #[test]
    fn a_refused_plan_fails_before_replicaof_and_resets() {
        let t = Instant::now();
        let mut j = caught_up_join(t);
        j.on(t, Input::Replica { state: &replica(true, false, ID, Some(1300)), ack_seen: true });
        let mut m = master_ok();
        m.role = Some(Role::Replica);
        assert!(matches!(j.on(t, Input::Master(&m)), Action::Fail { reset_replica: true, .. }));
    }

    #[test]
    fn full_plan_still_hands_off_and_is_reported_full_with_the_reason() {
        let t = Instant::now();
        let mut j = caught_up_join(t);
        j.on(t, Input::Replica { state: &replica(true, false, ID, Some(1300)), ack_seen: true });
        let mut m = master_ok();
        m.backlog_first = Some(5000);
        assert!(matches!(j.on(t, Input::Master(&m)), Action::HandOff));
        let before = Counters { full: 1, partial_ok: 0, replica_input_bytes: Some(10), ..Default::default() };
        assert!(matches!(j.on(t, Input::Counters(before)), Action::PollReplica));
        assert!(j.handed_over());
        let mut on_master = replica(true, false, OTHER, Some(9000));
        on_master.master = Some("10.0.0.1:6379".into());
        assert!(matches!(j.on(t, Input::Replica { state: &on_master, ack_seen: false }), Action::ReadOutcome));
        match j.on(t, Input::Counters(Counters { full: 2, partial_ok: 0, replica_input_bytes: Some(10 << 20), ..Default::default() })) {
            Action::Done(o) => {
                assert_eq!(o.handoff, Handoff::Full);
                assert!(o.notes.iter().any(|n| n.contains("backlog")), "{:?}", o.notes);
                assert_eq!((o.offset, o.log_bytes), (1300, 300));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_handoff_not_in_sync_by_its_deadline_ends_as_a_full_sync_saying_what_it_saw() {
        for partial_counted in [false, true] {
            let t = Instant::now();
            let mut j = caught_up_join(t);
            j.on(t, Input::Replica { state: &replica(true, false, ID, Some(1300)), ack_seen: true });
            assert!(matches!(j.on(t, Input::Master(&master_ok())), Action::HandOff));
            let before = Counters { full: 1, partial_ok: 0, replica_input_bytes: None, partial_err: 0, output_buffer_disconnects: Some(0) };
            assert!(matches!(j.on(t, Input::Counters(before)), Action::PollReplica));
            // The master keeps starting full syncs it cannot finish: the replica's link never comes up.
            let mut looping = replica(false, true, OTHER, None);
            looping.master = Some("10.0.0.1:6379".into());
            let soon = t + Duration::from_secs(1);
            assert!(matches!(j.on(soon, Input::Replica { state: &looping, ack_seen: false }), Action::PollReplica), "within the deadline it waits");
            let late = t + Duration::from_secs(31);
            assert!(matches!(j.on(late, Input::Replica { state: &looping, ack_seen: false }), Action::ReadOutcome), "past it, the outcome is read");
            // Even counters that would say partial do not make an unfinished handoff a success.
            let after = Counters { full: 4, partial_ok: i64::from(partial_counted), replica_input_bytes: None, partial_err: 1, output_buffer_disconnects: Some(3) };
            match j.on(late, Input::Counters(after)) {
                Action::Done(o) => {
                    assert_eq!(o.handoff, Handoff::Full);
                    let note = o.notes.iter().find(|n| n.contains("not in sync")).unwrap_or_else(|| panic!("{:?}", o.notes));
                    for said in ["started 3 full sync(s)", "refused 1 partial", "3 output-buffer disconnects", "a full sync in progress", "10.0.0.1:6379", "stays the master's replica"] {
                        assert!(note.contains(said), "{said}: {note}");
                    }
                }
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn partial_handoff_waits_for_the_link_to_the_right_master() {
        let t = Instant::now();
        let mut j = caught_up_join(t);
        j.on(t, Input::Replica { state: &replica(true, false, ID, Some(1300)), ack_seen: true });
        assert!(matches!(j.on(t, Input::Master(&master_ok())), Action::HandOff));
        j.on(t, Input::Counters(Counters::default()));
        let mut st = replica(true, false, ID, Some(1300));
        st.master = Some("127.0.0.1:4444".into()); // still the agent's listener
        assert!(matches!(j.on(t, Input::Replica { state: &st, ack_seen: false }), Action::PollReplica));
        st.master = Some("10.0.0.1:6379".into());
        st.link_up = false;
        assert!(matches!(j.on(t, Input::Replica { state: &st, ack_seen: false }), Action::PollReplica));
        let late = t + timeouts().handoff + Duration::from_millis(1);
        assert!(matches!(j.on(late, Input::Replica { state: &st, ack_seen: false }), Action::ReadOutcome), "past the deadline the outcome is read, the replica left as it is");
        // Never reset after REPLICAOF, never a success when not in sync: a full sync, told.
        assert!(matches!(j.on(late, Input::Counters(Counters::default())), Action::Done(o) if o.handoff == Handoff::Full), "after REPLICAOF the replica is never reset");
    }

    #[test]
    fn a_master_named_by_sentinel_at_handoff_time_is_the_one_waited_for() {
        let t = Instant::now();
        let mut j = caught_up_join(t);
        j.on(t, Input::Replica { state: &replica(true, false, ID, Some(1300)), ack_seen: true });
        // Failed over: the promoted replica knows the snapshot's history as its replid2.
        let promoted = MasterRepl { addr: "10.0.0.2:6380".into(), replid: OTHER.into(), replid2: ID.into(), ..master_ok() };
        assert!(matches!(j.on(t, Input::Master(&promoted)), Action::HandOff));
        j.on(t, Input::Counters(Counters::default()));
        let mut st = replica(true, false, OTHER, Some(1300));
        st.master = Some("10.0.0.1:6379".into()); // the old master: not the one handed to
        assert!(matches!(j.on(t, Input::Replica { state: &st, ack_seen: false }), Action::PollReplica));
        st.master = Some("10.0.0.2:6380".into());
        assert!(matches!(j.on(t, Input::Replica { state: &st, ack_seen: false }), Action::ReadOutcome));
        match j.on(t, Input::Counters(Counters { full: 0, partial_ok: 1, replica_input_bytes: None, ..Default::default() })) {
            Action::Done(o) => assert!(o.notes.iter().any(|n| n.contains("10.0.0.2:6380")), "{:?}", o.notes),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_replica_that_turns_standalone_after_replicaof_fails_the_handoff_at_once() {
        let t = Instant::now();
        let mut j = caught_up_join(t);
        j.on(t, Input::Replica { state: &replica(true, false, ID, Some(1300)), ack_seen: true });
        j.on(t, Input::Master(&master_ok()));
        j.on(t, Input::Counters(Counters::default()));
        let busy = ReplState { syncing: true, ..ReplState::default() }; // did not answer: loading
        assert!(matches!(j.on(t, Input::Replica { state: &busy, ack_seen: false }), Action::PollReplica));
        let restarted = ReplState { role: Some(Role::Master), ..ReplState::default() };
        match j.on(t, Input::Replica { state: &restarted, ack_seen: false }) {
            Action::Fail { reset_replica: false, error: Error::Changed(why) } => assert!(why.contains("standalone"), "{why}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn partial_outcome_with_timeline() {
        let t = Instant::now();
        let mut j = caught_up_join(t);
        j.on(t + Duration::from_secs(1), Input::Replica { state: &replica(true, false, ID, Some(1300)), ack_seen: true });
        j.on(t, Input::Master(&master_ok()));
        j.on(t, Input::Counters(Counters { full: 3, partial_ok: 7, replica_input_bytes: None, ..Default::default() }));
        let mut st = replica(true, false, ID, Some(1300));
        st.master = Some("10.0.0.1:6379".into());
        j.on(t + Duration::from_secs(2), Input::Replica { state: &st, ack_seen: false });
        match j.on(t, Input::Counters(Counters { full: 3, partial_ok: 8, replica_input_bytes: None, ..Default::default() })) {
            Action::Done(o) => {
                assert_eq!(o.handoff, Handoff::Partial);
                assert!(o.notes.is_empty());
                assert_eq!(o.timeline.caught_up, Some(t + Duration::from_secs(1)));
                assert_eq!(o.timeline.handed_off, Some(t + Duration::from_secs(2)));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn failures_reset_the_replica_only_before_replicaof() {
        let t = Instant::now();
        let mut j = caught_up_join(t);
        assert!(matches!(j.on(t, Input::Failed(Error::Interrupted)), Action::Fail { reset_replica: true, .. }));
        let mut j = caught_up_join(t);
        j.on(t, Input::Replica { state: &replica(true, false, ID, Some(1300)), ack_seen: true });
        j.on(t, Input::Master(&master_ok()));
        j.on(t, Input::Counters(Counters::default()));
        assert!(matches!(j.on(t, Input::Failed(Error::Interrupted)), Action::Fail { reset_replica: false, .. }));
    }

    #[test]
    fn load_timeout_fails_and_resets() {
        let t = Instant::now();
        let mut j = prepared("m:1", t);
        j.on(t, Input::ReplicaConnected { capa_eof: true, length: None });
        j.on(t, Input::Pulled { first_byte: None, rdb_bytes: 5000 });
        let loading = replica(true, true, ID, None);
        let late = t + timeouts().load + Duration::from_millis(1);
        assert!(matches!(j.on(late, Input::Replica { state: &loading, ack_seen: false }), Action::Fail { reset_replica: true, error: Error::Timeout(_) }));
    }

    #[test]
    fn classify_in_doubt_is_full() {
        let b = Counters { full: 1, partial_ok: 1, replica_input_bytes: Some(100), ..Default::default() };
        assert_eq!(classify(&b, &Counters { partial_ok: 2, ..b }, Some(1000)), Handoff::Partial);
        assert_eq!(classify(&b, &Counters { full: 2, ..b }, Some(1000)), Handoff::Full);
        let both = Counters { full: 2, partial_ok: 2, replica_input_bytes: Some(150), ..Default::default() };
        assert_eq!(classify(&b, &both, Some(1000)), Handoff::Partial, "a backlog tail, not an RDB");
        assert_eq!(classify(&b, &Counters { replica_input_bytes: Some(900), ..both }, Some(1000)), Handoff::Full);
        assert_eq!(classify(&b, &Counters { replica_input_bytes: None, ..both }, Some(1000)), Handoff::Full);
        assert_eq!(classify(&b, &both, None), Handoff::Full, "unknown RDB length: in doubt");
        assert_eq!(classify(&b, &b, Some(1000)), Handoff::Full, "nothing moved: in doubt");
    }

    #[test]
    fn out_of_order_input_is_an_internal_error_not_a_panic() {
        let t = Instant::now();
        let mut j = prepared("m:1", t);
        assert!(matches!(j.on(t, Input::Master(&master_ok())), Action::Fail { reset_replica: true, error: Error::Internal(_) }));
        let mut j = Join::new(snapshot(), "m:1".into(), timeouts(), t, t);
        assert!(matches!(j.on(t, Input::ReplicaConnected { capa_eof: true, length: None }), Action::Fail { reset_replica: false, error: Error::Internal(_) }), "connected before pointed");
    }

    #[test]
    fn a_log_read_longer_than_asked_is_the_relays_fault() {
        let t = Instant::now();
        let mut j = streaming_join(t);
        match j.on(t, Input::LogRead { got: 11, asked: 10 }) {
            Action::Fail { reset_replica: true, error } => assert!(error.to_string().contains("11 bytes for 10 asked"), "{error}"),
            other => panic!("{other:?}"),
        }
        assert_eq!(j.streamed(), 1000, "nothing of a bad read counts as streamed");
    }

    #[test]
    fn a_catching_up_replica_that_never_applies_the_log_times_out_and_is_reset() {
        let t = Instant::now();
        let mut j = caught_up_join(t);
        let behind = replica(true, false, ID, Some(1200));
        let late = t + APPLY_TIMEOUT + Duration::from_millis(1);
        match j.on(late, Input::Replica { state: &behind, ack_seen: true }) {
            Action::Fail { reset_replica: true, error: Error::Timeout(w) } => assert!(w.contains("up to offset 1300") && w.contains("1200"), "{w}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn rows_no_phase_expects_are_internal_errors() {
        let t = Instant::now();
        // Counters twice before the link is up: the second is out of order, and the replica (the
        // master's now) is not reset.
        let mut j = handed_over_join(t);
        assert!(matches!(j.on(t, Input::Counters(Counters::default())), Action::Fail { reset_replica: false, error: Error::Internal(_) }));
        // Anything after the end.
        let mut j = prepared("m:1", t);
        j.on(t, Input::Failed(Error::Interrupted));
        assert_eq!(j.join_phase(), JoinPhase::Done);
        assert!(matches!(j.on(t, Input::Prepared), Action::Fail { error: Error::Internal(_), .. }));
        // A length nobody waits for.
        let mut j = prepared("m:1", t);
        j.on(t, Input::ReplicaConnected { capa_eof: true, length: None });
        assert!(matches!(j.on(t, Input::Length(5)), Action::Fail { reset_replica: true, error: Error::Internal(_) }));
    }

    #[test]
    fn a_refusal_after_the_replica_followed_the_agent_still_resets_it() {
        let t = Instant::now();
        let mut j = prepared("m:1", t);
        j.on(t, Input::ReplicaConnected { capa_eof: true, length: None });
        assert!(matches!(j.on(t, Input::PointRefused(Error::Precondition("late".into()))), Action::Fail { reset_replica: true, .. }));
        assert!(j.pointed());
    }

    #[test]
    fn a_failure_before_the_replica_is_pointed_at_the_agent_leaves_it_untouched() {
        let t = Instant::now();
        let mut j = Join::new(snapshot(), "m:1".into(), timeouts(), t, t);
        assert_eq!(j.join_phase(), JoinPhase::Preparing);
        match j.on(t, Input::Failed(Error::Precondition("tls-replication yes without --tls".into()))) {
            Action::Fail { reset_replica: false, error: Error::Precondition(_) } => {}
            other => panic!("{other:?}"),
        }
        assert!(!j.pointed() && !j.handed_over());
        // A refused REPLICAOF <agent> never took effect.
        let mut j = prepared("m:1", t);
        assert!(matches!(j.on(t, Input::PointRefused(Error::Precondition("NOPERM replicaof".into()))), Action::Fail { reset_replica: false, .. }));
        assert!(!j.pointed());
        // Once pointed (REPLICAOF <agent> may have taken effect), a failure resets it.
        let mut j = prepared("m:1", t);
        assert_eq!(j.join_phase(), JoinPhase::Preparing);
        assert!(matches!(j.on(t, Input::Failed(Error::unavailable(crate::error::Party::ReplicaLink, "no connection"))), Action::Fail { reset_replica: true, .. }));
    }

    /// What Valkey 9.1.2 under `rdb-version-check relaxed` wrote to its log when fed Redis 8.2.3's
    /// RDB (e2e_compat reproduces both): a hash with field TTLs (type 25), then a vector set (module
    /// data), after which it exits.
    const FOREIGN_TYPE: [&str; 3] = [
        "22821:S 02 Dec 2026 19:19:20.681 # Can't handle foreign type or opcode 25 in RDB with version 12",
        "22821:S 02 Dec 2026 19:19:20.681 # Failed trying to load the PRIMARY synchronization DB from socket, check server logs.",
        "22821:S 02 Dec 2026 19:19:20.681 # Failed to load RDB",
    ];
    const MODULE: [&str; 2] = [
        "20009:S 02 Dec 2026 19:13:29.406 # Internal error in RDB reading offset 0, function at rdb.c:2939 -> The RDB file contains module data I can't load: no matching module type 'vectorset'. Failure loading rdb format",
        "20009:S 02 Dec 2026 19:13:29.406 # Terminating server after rdb file reading failure.",
    ];
    /// A load cut short by the agent going away (Redis and Valkey alike).
    const SHORT_READ: &str = "20009:S 02 Dec 2026 19:13:29.406 # Internal error in RDB reading offset 0, function at rdb.c:3101 -> Unexpected EOF reading RDB file. Failure loading rdb format from socket, assuming connection error, resuming operation.";

    fn facts(log: Option<&[&str]>, answers: bool) -> LoadFacts {
        LoadFacts {
            replica_server: "valkey 9.1.2".into(),
            master_server: "redis 8.2.3".into(),
            answers,
            loading: answers.then_some(false),
            keys_loaded: answers.then_some(114),
            log: log.map(|l| l.iter().map(|s| s.to_string()).collect()),
        }
    }

    fn link_lost() -> Error {
        Error::unavailable(crate::error::Party::ReplicaLink, "lost the replica (the replica closed its link to the agent)")
    }

    /// A join whose replica is loading what it was sent.
    fn loading_join(t: Instant) -> Join {
        let mut j = prepared("m:1", t);
        j.on(t, Input::ReplicaConnected { capa_eof: true, length: None });
        assert!(matches!(j.on(t, Input::Pulled { first_byte: None, rdb_bytes: 5000 }), Action::PollReplica));
        j
    }

    #[test]
    fn a_replica_that_drops_its_link_while_fed_or_loading_is_examined_before_failing() {
        let t = Instant::now();
        let mut j = loading_join(t);
        assert!(matches!(j.on(t, Input::Failed(link_lost())), Action::ExamineReplica));
        assert_eq!(j.join_phase(), JoinPhase::Loading);
        assert!(!j.snapshot_in_use(), "the relay's snapshot is not waited on while examining");
        // While it is fed too, and when it no longer answers at all.
        let mut j = prepared("m:1", t);
        j.on(t, Input::ReplicaConnected { capa_eof: true, length: None });
        let gone = Error::unavailable(crate::error::Party::Replica, "connect: Connection refused");
        assert!(matches!(j.on(t, Input::Failed(gone)), Action::ExamineReplica));
        // Other failures are not the replica's to explain.
        let mut j = loading_join(t);
        assert!(matches!(j.on(t, Input::Failed(Error::unavailable(crate::error::Party::Relay, "gone"))), Action::Fail { reset_replica: true, .. }));
        let mut j = loading_join(t);
        assert!(matches!(j.on(t, Input::Failed(Error::Interrupted)), Action::Fail { reset_replica: true, error: Error::Interrupted }));
        // Nor is a loss later on (streaming the log): its data was loaded.
        let mut j = streaming_join(t);
        assert!(matches!(j.on(t, Input::Failed(link_lost())), Action::Fail { reset_replica: true, error: Error::Unavailable { .. } }));
    }

    #[test]
    fn a_load_the_replica_refused_fails_for_good_resets_it_and_says_what_it_refused() {
        for (log, answers, said) in [
            (&FOREIGN_TYPE[..], true, "Can't handle foreign type or opcode 25 in RDB with version 12 (after 114 keys)"),
            (&MODULE[..], false, "no matching module type 'vectorset'. Failure loading rdb format (and the server exited)"),
        ] {
            let t = Instant::now();
            let mut j = loading_join(t);
            j.on(t, Input::Failed(link_lost()));
            match j.on(t, Input::Examined(&facts(Some(log), answers))) {
                Action::Fail { reset_replica: true, error } => {
                    assert!(!error.retryable(), "{error}");
                    assert!(matches!(error, Error::Incompatible(_)), "{error:?}");
                    let text = error.to_string();
                    for part in ["the replica (valkey 9.1.2) refused the snapshot while loading it: ", said, "Redis 8.2.3 types such as vector sets and hash-field TTLs", REDIS_TO_VALKEY_DOC] {
                        assert!(text.contains(part), "{part:?} in {text}");
                    }
                    assert!(!text.contains("Internal error in RDB reading"), "the loader's preamble is left out: {text}");
                }
                other => panic!("{other:?}"),
            }
            assert_eq!(j.join_phase(), JoinPhase::Done);
        }
    }

    #[test]
    fn a_lost_link_a_restarted_replica_or_no_log_is_still_the_loss_and_retried() {
        let restarted = ["1:M 02 Dec 2026 19:13:30.000 * Server initialized", "1:M 02 Dec 2026 19:13:30.001 * Ready to accept connections tcp"];
        for (log, answers) in [(Some(&[SHORT_READ][..]), true), (Some(&restarted[..]), true), (Some(&[][..]), false), (None, true), (None, false)] {
            let t = Instant::now();
            let mut j = loading_join(t);
            j.on(t, Input::Failed(link_lost()));
            match j.on(t, Input::Examined(&facts(log, answers))) {
                Action::Fail { reset_replica: true, error } => {
                    assert!(error.retryable(), "{log:?}: {error}");
                    assert_eq!(error.to_string(), link_lost().to_string(), "{log:?}");
                }
                other => panic!("{log:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn a_refusal_between_other_servers_names_the_master_without_the_redis_valkey_hint() {
        let f = LoadFacts { replica_server: "redis 8.2.3".into(), master_server: "redis 8.2.3".into(), ..facts(Some(&MODULE[..1]), true) };
        let said = refusal(&f).expect("a refusal");
        assert!(said.contains("the master (redis 8.2.3) stores a type or module this server does not have"), "{said}");
        assert!(!said.contains("Valkey equivalent"), "{said}");
        // Interrupted while examining: the interrupt, not the loss.
        let t = Instant::now();
        let mut j = loading_join(t);
        j.on(t, Input::Failed(link_lost()));
        assert!(matches!(j.on(t, Input::Failed(Error::Interrupted)), Action::Fail { reset_replica: true, error: Error::Interrupted }));
        // Facts nobody asked for are out of order.
        let mut j = loading_join(t);
        assert!(matches!(j.on(t, Input::Examined(&f)), Action::Fail { reset_replica: true, error: Error::Internal(_) }));
    }
}
