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
//!
//! Its rooms: [`inputs`] (what it is given), [`actions`] (what it answers), [`handoff`] (the
//! preconditions, the plan, partial or full), [`examine`] (a replica that dropped its link: lost or
//! refusing); here, the join itself: its phases, the transition table, when to reset the replica.

mod actions;
mod examine;
mod handoff;
mod inputs;
#[cfg(test)]
mod tests;

pub use actions::{Action, Outcome, Timeline};
pub use examine::{lost_replica, refusal, REDIS_TO_VALKEY_DOC};
pub use handoff::{classify, loaded, not_ready_for_handoff, plan_handoff, Plan};
pub use inputs::{Counters, Input, LoadFacts, Snapshot, Timeouts};
pub use limits::{APPLY_TIMEOUT, LOG_CHUNK_BYTES as LOG_CHUNK};

use crate::error::Error;
use crate::local::ReplState;
use crate::master::MasterRepl;
use crate::phase::JoinPhase;
use crate::report::Handoff;
use client::Role;
use endpoint::Endpoint;
use handoff::unfinished_note;
use std::time::Instant;

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
    /// The master the replica is handed to, as an address: what it must be seen following.
    master: Endpoint,
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
    /// Checks passed at `now`; the join started at `started`. `master` is where the replica is handed
    /// to: once it follows that address ([`ReplState::follows`], however its `INFO` spells it) with
    /// its link up, the handoff is done.
    pub fn new(snapshot: Snapshot, master: Endpoint, timeouts: Timeouts, started: Instant, now: Instant) -> Join {
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
        if let Some(addr) = m.addr.as_ref().filter(|a| **a != self.master) {
            self.notes.push(format!("handed to {addr} (Sentinel's master at handoff time) instead of {}", self.master));
            self.master = addr.clone();
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
        if state.follows.as_ref() == Some(&self.master) && state.link_up && !state.syncing {
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
