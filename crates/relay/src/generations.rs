//! The relay's generation lifecycle as one machine: which generation agents get, when a capture (a
//! fork on the source) starts, when a generation is sealed or let go of, and what waiting agents are
//! told. No sockets, no clock, no snapshot memory: it holds generation ids and states, takes events
//! (with `now` where time matters) and returns [`Action`]s. The threads feed it under one lock and
//! carry the actions out on the real generations (see `shared::Shared`).

use crate::capture_policy::CapturePolicy;
use std::time::{Duration, Instant};

/// Why a generation was sealed (agents already on it finish from it; new agents need a new capture).
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::VariantArray, strum::IntoStaticStr)]
#[strum(serialize_all = "snake_case")]
pub(crate) enum SealReason {
    /// Its stream log reached its bound (bytes or age).
    LogBound,
    /// The link to the source dropped after the snapshot was complete.
    LinkLost,
    /// Sentinel named another master: the generation's history is the old master's.
    MasterChanged,
    /// No agent connection for `--idle-release-secs`: its memory is let go of.
    IdleRelease,
    /// An agent staging a server needed a newer snapshot: the master's backlog no longer reaches
    /// back to this one's offset, so a server started on it would need a full sync.
    Stale,
    /// Its stream log outweighs its RDB ([`log_outweighs`]): a warm join would spend longer replaying
    /// it than a fresh capture costs the next agent.
    #[strum(serialize = "log_outweighs_snapshot")]
    LogOutweighs,
}

impl SealReason {
    /// Every reason, in the order of [`SealReason::index`].
    pub(crate) const ALL: &'static [SealReason] = <SealReason as strum::VariantArray>::VARIANTS;

    /// Its place in [`SealReason::ALL`] (a counter per reason).
    pub(crate) fn index(self) -> usize {
        self as usize
    }

    /// Its name in the status and the metrics' `reason` label.
    pub(crate) fn name(self) -> &'static str {
        self.into()
    }

    /// How the generation's descriptor and the log say it.
    pub(crate) fn describe(self) -> &'static str {
        match self {
            SealReason::LogBound => "stream log reached its bound",
            SealReason::LinkLost => "the link to the source was lost",
            SealReason::MasterChanged => "the master changed (Sentinel)",
            SealReason::IdleRelease => "no agent for --idle-release-secs: memory released",
            SealReason::Stale => "an agent needed a newer snapshot (the master's backlog no longer covers this one)",
            SealReason::LogOutweighs => "its stream log outweighs its snapshot: a fresh capture serves the next join sooner",
        }
    }
}

/// The rule that ends a generation's warm joins: a warm join loads the RDB, then replays the whole
/// log after it, which a replica applies more slowly per byte than it loads an RDB; a fresh capture
/// streams a new RDB while the source writes it, with almost no log. So past a log of `percent` of
/// the RDB the next agent is served sooner by a fresh capture (docs/results/issue44-warm measures
/// where). Never for a log under [`limits::LOG_OUTWEIGHS_MIN_BYTES`]: its replay takes seconds
/// whatever the RDB, and a fork on the source is not worth them.
pub(crate) fn log_outweighs(log_bytes: u64, rdb_bytes: u64, percent: u32) -> bool {
    log_bytes >= limits::LOG_OUTWEIGHS_MIN_BYTES && u128::from(log_bytes) * 100 >= u128::from(rdb_bytes) * u128::from(percent)
}

/// Where the current generation is in its life, as far as the machine knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Its RDB is arriving (agents may already read the published blocks).
    Capturing,
    /// The RDB is complete; the stream log grows.
    Complete,
    /// Readable by those on it, but new agents need a new capture.
    Sealed(SealReason),
    /// Its capture failed mid-RDB.
    Failed,
}

impl Phase {
    /// A new agent may attach to a generation in this phase.
    fn usable(self) -> bool {
        matches!(self, Phase::Capturing | Phase::Complete)
    }
}

/// What the driver must do, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Action {
    /// Wake the capture thread: a capture is wanted and none runs.
    StartCapture,
    /// Seal generation `id` (count it once, under `reason`); its capture must stop appending.
    Seal {
        /// Which.
        id: u64,
        /// Why.
        reason: SealReason,
    },
    /// Record generation `id` complete: its whole RDB is published, the stream log grows.
    Complete {
        /// Which.
        id: u64,
    },
    /// Mark generation `id` failed (its capture broke mid-RDB, or its master changed under it).
    Fail {
        /// Which.
        id: u64,
        /// Why (its descriptor says it to the agents on it).
        why: String,
    },
    /// Count a failed capture (status and metrics): counted here, once, by the machine that decided it
    /// was a failure.
    CountFailure,
    /// Stop holding generation `id` as the current one (its memory goes with its last reader).
    Release {
        /// Which.
        id: u64,
    },
    /// Wake the agents waiting for a generation: something they wait for happened.
    TellWaiters,
}

/// What a [`Generations::renew`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Renewed {
    /// The generation was sealed and a capture is wanted: the next attach gets a newer one.
    Sealed,
    /// A newer generation is current already, or one is being captured (its offset is where the
    /// source was when it started): attach again and check.
    Newer,
    /// The generation is already old enough for the asker, nothing done.
    FreshEnough,
}

/// What the capture thread is to do next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Next {
    /// Capture generation `id` now.
    Capture(u64),
    /// Nothing wanted yet: wait for a change (and tick).
    Wait,
    /// The relay stops.
    Stop,
}

/// What a running capture does after a turn of its loop (asked with what it knew when it began).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Turn {
    /// Go on with its source.
    Go,
    /// The relay stops.
    Stop,
    /// Sentinel named another master since the capture began: its history is the old master's. The
    /// machine has sealed (or failed, mid-RDB) its generation already and keeps any demand for a
    /// capture from the new master: the capture ends, it did not fail.
    MasterChanged,
    /// Its generation's RDB is complete and the generation is no longer current and complete (sealed
    /// by a failover, an idle release or an agent's renewal, or released): the link to the source
    /// goes with it.
    Sealed,
}

/// What an agent waiting for a generation gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Answer {
    /// Attach to generation `id`.
    Ready(u64),
    /// A capture failed since the agent began waiting: tell it why now.
    CaptureFailed(Failure),
    /// The relay stops.
    Stopped,
    /// Keep waiting (a capture is wanted or running).
    Wait,
}

/// Where an agent began waiting: the failures it must not be told about (they happened before).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ticket {
    failures: u64,
}

/// Why a capture failed: its kind (which tells a waiting agent whether retrying can help) and the
/// capture's own account.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Failure {
    /// What kind of failure, as agents are told.
    pub(crate) kind: transport::wire::CaptureFailure,
    /// What happened.
    pub(crate) why: String,
}

/// How a capture ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Ended {
    /// It ended without failing: its generation was sealed (by its bound, a failover or an idle
    /// release), or the master changed under it (the machine already failed or sealed its
    /// generation, and a wanted capture follows from the new master); the link is closed.
    Sealed,
    /// It failed, at whatever stage (before the RDB, during it, or streaming after it).
    Failed(Failure),
    /// The relay stops.
    Stopped,
}

/// The lifecycle of the relay's generations.
#[derive(Debug)]
pub(crate) struct Generations {
    policy: CapturePolicy,
    idle_release: Option<Duration>,
    /// The generation new agents are handed, with its phase.
    current: Option<(u64, Phase)>,
    /// The capture running now (its generation id), if any.
    running: Option<u64>,
    /// Captures started so far (the last id handed out).
    captures: u64,
    /// Someone wants a fresh generation: set by a waiting agent (or `--capture on-start`), cleared
    /// when a generation is published (the demand is met) or a capture fails with nobody to retry for.
    demand: bool,
    failures: u64,
    last_error: Option<Failure>,
    /// A generation's RDB has completed at least once (after that, `--capture on-start` has done its
    /// job: later captures are on demand only).
    completed_any: bool,
    connections: usize,
    last_active: Instant,
    master: String,
    master_changes: u64,
    stopped: bool,
    /// `--log-max-percent`: [`log_outweighs`]'s percent, `None` when off.
    log_percent: Option<u32>,
}

impl Generations {
    /// A relay that has captured nothing yet.
    pub(crate) fn new(policy: CapturePolicy, idle_release: Option<Duration>, master: String, now: Instant) -> Generations {
        Generations {
            policy,
            idle_release,
            current: None,
            running: None,
            captures: 0,
            demand: policy == CapturePolicy::OnStart,
            failures: 0,
            last_error: None,
            completed_any: false,
            connections: 0,
            last_active: now,
            master,
            master_changes: 0,
            stopped: false,
            log_percent: None,
        }
    }

    /// Seal a generation once its log outweighs `percent` of its RDB ([`log_outweighs`]).
    pub(crate) fn with_log_percent(mut self, percent: Option<u32>) -> Generations {
        self.log_percent = percent.filter(|&p| p > 0);
        self
    }

    /// The current generation's id and phase.
    pub(crate) fn current(&self) -> Option<(u64, Phase)> {
        self.current
    }

    /// The master agents are handed to, and how many times it changed.
    pub(crate) fn master(&self) -> (&str, u64) {
        (&self.master, self.master_changes)
    }

    /// Captures that failed, and why the last one did.
    pub(crate) fn failures(&self) -> (u64, Option<&Failure>) {
        (self.failures, self.last_error.as_ref())
    }

    /// Agent connections open now.
    pub(crate) fn connections(&self) -> usize {
        self.connections
    }

    /// The relay is stopping.
    pub(crate) fn stopped(&self) -> bool {
        self.stopped
    }

    /// Capture `id`, begun when the master had changed `master_changes` times, asks whether to go on;
    /// `rdb_done`: its RDB is complete (before that, only a master change ends it).
    pub(crate) fn capture_turn(&self, id: u64, master_changes: u64, rdb_done: bool) -> Turn {
        if self.stopped {
            return Turn::Stop;
        }
        if self.master_changes != master_changes {
            return Turn::MasterChanged;
        }
        if rdb_done && self.current != Some((id, Phase::Complete)) {
            return Turn::Sealed;
        }
        Turn::Go
    }

    /// The relay stops: the capture thread ends, waiters are told.
    pub(crate) fn stop(&mut self) -> Vec<Action> {
        self.stopped = true;
        vec![Action::StartCapture, Action::TellWaiters]
    }

    /// An agent connection opened (the admission gate holds `--connections-max`; counted here for
    /// the idle release and the status).
    pub(crate) fn connection_opened(&mut self, now: Instant) {
        self.connections += 1;
        self.last_active = now;
    }

    /// An agent connection ended.
    pub(crate) fn connection_closed(&mut self, now: Instant) {
        self.connections = self.connections.saturating_sub(1);
        self.last_active = now;
    }

    /// An agent begins waiting for a generation.
    pub(crate) fn ticket(&self) -> Ticket {
        Ticket { failures: self.failures }
    }

    /// An agent (holding `ticket`) wants a generation: the current one if new agents may use it,
    /// otherwise a capture is wanted and it waits, unless a capture failed since it began waiting.
    pub(crate) fn want(&mut self, ticket: Ticket) -> (Answer, Vec<Action>) {
        if self.stopped {
            return (Answer::Stopped, Vec::new());
        }
        if let Some((id, phase)) = self.current {
            if phase.usable() {
                return (Answer::Ready(id), Vec::new());
            }
        }
        if self.failures > ticket.failures {
            if let Some(f) = &self.last_error {
                return (Answer::CaptureFailed(f.clone()), Vec::new());
            }
        }
        let wake = !self.demand && self.running.is_none();
        self.demand = true;
        (Answer::Wait, if wake { vec![Action::StartCapture] } else { Vec::new() })
    }

    /// The capture thread asks what to do.
    pub(crate) fn next_capture(&mut self) -> Next {
        if self.stopped {
            return Next::Stop;
        }
        if !self.demand || self.running.is_some() {
            return Next::Wait;
        }
        self.captures += 1;
        debug_assert!(self.current.is_none_or(|(cur, _)| cur < self.captures), "generation ids only move forward");
        self.running = Some(self.captures);
        Next::Capture(self.captures)
    }

    /// Capture `id`'s RDB started: its generation is the current one, and the demand is met. (Left
    /// set, a demand from agents that waited during this capture would start a second capture, a
    /// second fork on the source, as soon as this one ended.)
    pub(crate) fn rdb_started(&mut self, id: u64) -> Vec<Action> {
        self.current = Some((id, Phase::Capturing));
        self.demand = false;
        vec![Action::TellWaiters]
    }

    /// Capture `id`'s RDB is complete: recorded so, unless the machine failed it meanwhile (its
    /// master changed mid-RDB), which stands.
    pub(crate) fn rdb_complete(&mut self, id: u64) -> Vec<Action> {
        if self.current != Some((id, Phase::Capturing)) {
            return Vec::new();
        }
        self.current = Some((id, Phase::Complete));
        self.completed_any = true;
        vec![Action::Complete { id }]
    }

    /// Generation `id`'s RDB could not be completed other than by a capture (a served file shrank
    /// while being read): it fails, and its waiters are told.
    pub(crate) fn rdb_failed(&mut self, id: u64, why: String) -> Vec<Action> {
        if self.current != Some((id, Phase::Capturing)) {
            return Vec::new();
        }
        self.current = Some((id, Phase::Failed));
        vec![Action::Fail { id, why }, Action::TellWaiters]
    }

    /// Generation `id`'s store file failed under it after it was published (a read error, a file
    /// truncated under the relay): nothing more may be served from it, whatever its phase, and its
    /// agents are told. If it is the current one, it is current no more: the next agent wants a
    /// fresh capture. An older generation is failed all the same (agents may still hold it).
    pub(crate) fn store_failed(&mut self, id: u64, why: String) -> Vec<Action> {
        match self.current {
            Some((cur, Phase::Failed)) if cur == id => Vec::new(),
            Some((cur, _)) if cur == id => {
                self.current = Some((id, Phase::Failed));
                vec![Action::Fail { id, why }, Action::TellWaiters]
            }
            _ => vec![Action::Fail { id, why }],
        }
    }

    /// An agent needs a snapshot at replication offset `min_offset` or later, and holds generation
    /// `id`, taken at `offset`: if that is still the current generation and older than that, seal it
    /// (agents on it finish from it) and want a capture, so the next attach gets a newer one. The
    /// condition on the offset bounds the captures one agent can cause: a capture started after the
    /// request is at or past `min_offset` (the master's offset the agent read), so asking again with
    /// the same offset does nothing.
    pub(crate) fn renew(&mut self, id: u64, offset: u64, min_offset: u64) -> (Renewed, Vec<Action>) {
        if offset >= min_offset {
            return (Renewed::FreshEnough, Vec::new());
        }
        match self.current {
            Some((cur, Phase::Complete)) if cur == id => {
                let mut actions = self.seal(id, SealReason::Stale);
                if !self.demand && self.running.is_none_or(|r| r == id) {
                    actions.push(Action::StartCapture);
                }
                self.demand = true;
                (Renewed::Sealed, actions)
            }
            // Sealed or failed already: the next attach wants a capture anyway.
            Some((cur, Phase::Sealed(_) | Phase::Failed)) if cur == id => (Renewed::Sealed, Vec::new()),
            _ => (Renewed::Newer, Vec::new()),
        }
    }

    /// Capture `id`'s stream log reached its bound.
    pub(crate) fn log_bound(&mut self, id: u64) -> Vec<Action> {
        self.seal(id, SealReason::LogBound)
    }

    /// Capture `id`'s stream log holds `log_bytes` after an RDB of `rdb_bytes`: sealed once it
    /// outweighs the snapshot ([`log_outweighs`]), so the next agent gets a fresh capture — but
    /// only while no agent is connected: a seal stops the log, and an agent still pulling would
    /// then hand off at the seal's offset, which the master's backlog may no longer cover under the
    /// writes that grew the log (a full sync, the fork this is all for). The capture asks again
    /// at its next megabyte.
    pub(crate) fn log_grew(&mut self, id: u64, log_bytes: u64, rdb_bytes: u64) -> Vec<Action> {
        match self.log_percent {
            Some(p) if self.connections == 0 && log_outweighs(log_bytes, rdb_bytes, p) => self.seal(id, SealReason::LogOutweighs),
            _ => Vec::new(),
        }
    }

    /// Seal `id` if it is the current, complete generation; a generation is sealed at most once.
    fn seal(&mut self, id: u64, reason: SealReason) -> Vec<Action> {
        match self.current {
            Some((cur, Phase::Complete)) if cur == id => {
                self.current = Some((id, Phase::Sealed(reason)));
                vec![Action::Seal { id, reason }, Action::TellWaiters]
            }
            _ => Vec::new(),
        }
    }

    /// Capture `id` ended.
    pub(crate) fn capture_ended(&mut self, id: u64, how: Ended) -> Vec<Action> {
        if self.running == Some(id) {
            self.running = None;
        }
        let failure = match how {
            Ended::Sealed | Ended::Stopped => return Vec::new(),
            Ended::Failed(f) => f,
        };
        // The link of a generation the machine already sealed or failed (a log bound, a failover)
        // breaking afterwards is no failure of a capture: agents waiting for the next one are not
        // told it, and their demand stands.
        if matches!(self.current, Some((cur, Phase::Sealed(_) | Phase::Failed)) if cur == id) {
            return Vec::new();
        }
        self.failures += 1;
        let why = failure.why.clone();
        self.last_error = Some(failure);
        let mut actions = match self.current {
            Some((cur, Phase::Capturing)) if cur == id => {
                self.current = Some((id, Phase::Failed));
                vec![Action::Fail { id, why: why.clone() }]
            }
            Some((cur, Phase::Complete)) if cur == id => self.seal(id, SealReason::LinkLost),
            _ => Vec::new(),
        };
        actions.push(Action::CountFailure);
        // Waiters are told and leave (they ask again if they retry), so their demand goes with them:
        // no loop of captures for nobody. With --capture on-start a first generation is wanted even
        // without agents, until one has completed: the relay's job is to be ready.
        self.demand = self.policy == CapturePolicy::OnStart && !self.completed_any;
        actions.push(Action::TellWaiters);
        actions
    }

    /// Sentinel named another master: the current generation's history is the old master's, so it
    /// is sealed (or failed, mid-RDB); the next agent triggers a capture from the new master.
    pub(crate) fn master_changed(&mut self, new: String) -> Vec<Action> {
        let why = format!("the master changed from {} to {new} (Sentinel)", self.master);
        self.master = new;
        self.master_changes += 1;
        match self.current {
            Some((id, Phase::Capturing)) => {
                self.current = Some((id, Phase::Failed));
                vec![Action::Fail { id, why }, Action::TellWaiters]
            }
            Some((id, Phase::Complete)) => self.seal(id, SealReason::MasterChanged),
            _ => vec![Action::TellWaiters],
        }
    }

    /// Time passed: with `--idle-release-secs`, a generation nobody has been connected for that long
    /// is sealed (if still complete) and released, so its memory is freed once any reader is gone.
    /// Never one whose RDB is still arriving.
    pub(crate) fn idle_tick(&mut self, now: Instant) -> Vec<Action> {
        let Some(idle) = self.idle_release else { return Vec::new() };
        if self.connections > 0 || now.saturating_duration_since(self.last_active) < idle {
            return Vec::new();
        }
        let Some((id, phase)) = self.current else { return Vec::new() };
        if phase == Phase::Capturing {
            return Vec::new();
        }
        let mut actions = self.seal(id, SealReason::IdleRelease);
        self.current = None;
        actions.push(Action::Release { id });
        actions
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const IDLE: Duration = Duration::from_secs(10);

    fn failure(why: &str) -> Failure {
        Failure { kind: transport::wire::CaptureFailure::Unreachable, why: why.into() }
    }

    fn machine(policy: CapturePolicy) -> (Generations, Instant) {
        let t0 = Instant::now();
        (Generations::new(policy, Some(IDLE), "m1:6379".into(), t0), t0)
    }

    /// Start, publish and complete one capture; returns its id.
    fn capture(g: &mut Generations) -> u64 {
        let Next::Capture(id) = g.next_capture() else { panic!("a capture should start: {g:?}") };
        g.rdb_started(id);
        g.rdb_complete(id);
        id
    }

    fn seals(actions: &[Action]) -> Vec<(u64, SealReason)> {
        actions.iter().filter_map(|a| if let Action::Seal { id, reason } = a { Some((*id, *reason)) } else { None }).collect()
    }

    #[test]
    fn on_start_captures_at_once_on_demand_waits_for_an_agent() {
        let (mut g, _) = machine(CapturePolicy::OnStart);
        assert_eq!(g.next_capture(), Next::Capture(1));

        let (mut g, _) = machine(CapturePolicy::OnDemand);
        assert_eq!(g.next_capture(), Next::Wait, "nobody asked");
        let t = g.ticket();
        let (answer, actions) = g.want(t);
        assert_eq!(answer, Answer::Wait);
        assert_eq!(actions, vec![Action::StartCapture]);
        assert_eq!(g.next_capture(), Next::Capture(1));
    }

    /// Regression: a demand set by agents waiting during a capture was cleared only when a capture
    /// started, so a second capture (a second fork) followed as soon as the first ended.
    #[test]
    fn agents_waiting_during_a_capture_do_not_start_a_second_one() {
        let (mut g, _) = machine(CapturePolicy::OnDemand);
        let t = g.ticket();
        g.want(t);
        let Next::Capture(id) = g.next_capture() else { panic!() };
        // Agents arrive while the capture runs, before its RDB starts.
        for _ in 0..3 {
            let t = g.ticket();
            assert_eq!(g.want(t).0, Answer::Wait);
        }
        g.rdb_started(id);
        g.rdb_complete(id);
        g.log_bound(id);
        g.capture_ended(id, Ended::Sealed);
        assert_eq!(g.next_capture(), Next::Wait, "the waiters' demand was met by the publish");
    }

    /// Regression: a sealed generation's log kept growing when another thread (Sentinel, idle
    /// release) sealed it. Every seal is one state change, reported once, and a sealed generation
    /// is not sealed again by its bound or by its link dropping (no double count).
    #[test]
    fn a_generation_is_sealed_once_and_stays_sealed() {
        let (mut g, _) = machine(CapturePolicy::OnStart);
        let id = capture(&mut g);
        assert_eq!(seals(&g.master_changed("m2:6379".into())), vec![(id, SealReason::MasterChanged)]);
        assert_eq!(g.current(), Some((id, Phase::Sealed(SealReason::MasterChanged))));
        assert!(seals(&g.log_bound(id)).is_empty(), "the log of a sealed generation takes no more bytes");
        assert!(seals(&g.capture_ended(id, Ended::Failed(failure("link dropped")))).is_empty(), "not counted again");
        assert_eq!(g.current(), Some((id, Phase::Sealed(SealReason::MasterChanged))));
    }

    #[test]
    fn one_publish_releases_every_waiter() {
        let (mut g, _) = machine(CapturePolicy::OnDemand);
        let tickets: Vec<Ticket> = (0..5).map(|_| g.ticket()).collect();
        for t in &tickets {
            assert_eq!(g.want(*t).0, Answer::Wait);
        }
        let Next::Capture(id) = g.next_capture() else { panic!() };
        assert!(g.rdb_started(id).contains(&Action::TellWaiters));
        for t in tickets {
            assert_eq!(g.want(t).0, Answer::Ready(id));
        }
    }

    #[test]
    fn a_failed_capture_tells_every_waiter_and_the_next_want_captures_again() {
        let (mut g, _) = machine(CapturePolicy::OnDemand);
        let tickets: Vec<Ticket> = (0..3).map(|_| g.ticket()).collect();
        for t in &tickets {
            g.want(*t);
        }
        let Next::Capture(id) = g.next_capture() else { panic!() };
        assert!(g.capture_ended(id, Ended::Failed(failure("connection refused"))).contains(&Action::TellWaiters));
        for t in tickets {
            assert_eq!(g.want(t).0, Answer::CaptureFailed(failure("connection refused")));
        }
        assert_eq!(g.next_capture(), Next::Wait, "nobody waits: no loop of captures");
        let t = g.ticket();
        assert_eq!(g.want(t), (Answer::Wait, vec![Action::StartCapture]));
        assert_eq!(g.next_capture(), Next::Capture(id + 1));
    }

    #[test]
    fn a_store_fault_fails_the_generation_in_any_phase() {
        let (mut g, _) = machine(CapturePolicy::OnStart);
        let id = capture(&mut g);
        g.log_bound(id);
        g.capture_ended(id, Ended::Sealed);
        assert!(matches!(g.current(), Some((_, Phase::Sealed(_)))));
        // Sealed, then its file failed under it: failed (agents told), and never twice.
        assert_eq!(g.store_failed(id, "read gen-1.rdb: EIO".into()), vec![Action::Fail { id, why: "read gen-1.rdb: EIO".into() }, Action::TellWaiters]);
        assert_eq!(g.current(), Some((id, Phase::Failed)));
        assert_eq!(g.store_failed(id, "again".into()), Vec::new());
        // The next agent asks for a fresh capture.
        let t = g.ticket();
        assert_eq!(g.want(t), (Answer::Wait, vec![Action::StartCapture]));
        // A generation no longer current is failed too (agents may still read it).
        assert_eq!(g.store_failed(id - 1, "old".into()), vec![Action::Fail { id: id - 1, why: "old".into() }]);
    }

    #[test]
    fn a_failure_mid_rdb_fails_the_generation() {
        let (mut g, _) = machine(CapturePolicy::OnDemand);
        let t = g.ticket();
        g.want(t);
        let Next::Capture(id) = g.next_capture() else { panic!() };
        g.rdb_started(id);
        assert_eq!(g.capture_ended(id, Ended::Failed(failure("cut off"))), vec![Action::Fail { id, why: "cut off".into() }, Action::CountFailure, Action::TellWaiters]);
        assert_eq!(g.current(), Some((id, Phase::Failed)));
    }

    #[test]
    fn on_start_retries_its_first_capture_without_agents() {
        let (mut g, _) = machine(CapturePolicy::OnStart);
        let Next::Capture(id) = g.next_capture() else { panic!() };
        g.capture_ended(id, Ended::Failed(failure("master down")));
        assert_eq!(g.next_capture(), Next::Capture(id + 1));
    }

    #[test]
    fn a_master_change_seals_and_the_next_want_captures_from_the_new_master() {
        let (mut g, _) = machine(CapturePolicy::OnStart);
        let id = capture(&mut g);
        let t = g.ticket();
        assert_eq!(g.want(t).0, Answer::Ready(id));
        g.master_changed("m2:6379".into());
        assert_eq!(g.master(), ("m2:6379", 1));
        g.capture_ended(id, Ended::Sealed);
        assert_eq!(g.next_capture(), Next::Wait);
        assert_eq!(g.want(t).0, Answer::Wait);
        assert_eq!(g.next_capture(), Next::Capture(id + 1));
    }

    #[test]
    fn a_master_change_mid_rdb_fails_the_generation() {
        let (mut g, _) = machine(CapturePolicy::OnStart);
        let Next::Capture(id) = g.next_capture() else { panic!() };
        g.rdb_started(id);
        assert!(matches!(g.master_changed("m2:6379".into())[0], Action::Fail { id: failed, .. } if failed == id));
        let t = g.ticket();
        assert_eq!(g.want(t).0, Answer::Wait);
    }

    #[test]
    fn idle_release_only_after_the_idle_time_without_connections() {
        let (mut g, t0) = machine(CapturePolicy::OnStart);
        let id = capture(&mut g);
        assert!(g.idle_tick(t0 + IDLE / 2).is_empty(), "not idle long enough");
        g.connection_opened(t0 + IDLE / 2);
        assert!(g.idle_tick(t0 + IDLE * 3).is_empty(), "a connection is open");
        g.connection_closed(t0 + IDLE * 3);
        assert!(g.idle_tick(t0 + IDLE * 3 + IDLE / 2).is_empty(), "idle time counts from the last close");
        let a = g.idle_tick(t0 + IDLE * 4);
        assert_eq!(seals(&a), vec![(id, SealReason::IdleRelease)], "counted as a seal");
        assert!(a.contains(&Action::Release { id }));
        assert_eq!(g.current(), None);
        assert!(g.idle_tick(t0 + IDLE * 9).is_empty(), "released once");
        assert!(seals(&g.capture_ended(id, Ended::Failed(failure("link closed")))).is_empty(), "not counted again when the link drops");
    }

    #[test]
    fn idle_release_leaves_a_capture_in_progress_alone() {
        let (mut g, t0) = machine(CapturePolicy::OnStart);
        let Next::Capture(id) = g.next_capture() else { panic!() };
        g.rdb_started(id);
        assert!(g.idle_tick(t0 + IDLE * 2).is_empty());
    }

    #[test]
    fn the_log_bound_seals() {
        let (mut g, _) = machine(CapturePolicy::OnStart);
        let id = capture(&mut g);
        assert_eq!(g.log_bound(id), vec![Action::Seal { id, reason: SealReason::LogBound }, Action::TellWaiters]);
        g.capture_ended(id, Ended::Sealed);
        let t = g.ticket();
        assert_eq!(g.want(t), (Answer::Wait, vec![Action::StartCapture]), "the next agent wants a fresh capture");
    }

    #[test]
    fn a_log_that_outweighs_its_snapshot_seals_once_and_only_when_on() {
        const MIB: u64 = 1 << 20;
        let min = limits::LOG_OUTWEIGHS_MIN_BYTES;
        assert!(!log_outweighs(min - 1, 0, 50), "never under the floor, however small the RDB");
        assert!(log_outweighs(min, 0, 50));
        assert!(!log_outweighs(499 * MIB, 1000 * MIB, 50) && log_outweighs(500 * MIB, 1000 * MIB, 50));
        assert!(!log_outweighs(u64::MAX / 2, u64::MAX, 60), "no overflow at the extremes");
        let (g, _) = machine(CapturePolicy::OnStart);
        let mut g = g.with_log_percent(Some(50));
        let id = capture(&mut g);
        assert!(g.log_grew(id, 400 * MIB, 1000 * MIB).is_empty());
        let now = Instant::now();
        g.connection_opened(now);
        assert!(g.log_grew(id, 600 * MIB, 1000 * MIB).is_empty(), "never under an agent still on it");
        g.connection_closed(now);
        assert_eq!(g.log_grew(id, 600 * MIB, 1000 * MIB), vec![Action::Seal { id, reason: SealReason::LogOutweighs }, Action::TellWaiters]);
        assert!(g.log_grew(id, 700 * MIB, 1000 * MIB).is_empty(), "sealed once");
        g.capture_ended(id, Ended::Sealed);
        let t = g.ticket();
        assert_eq!(g.want(t), (Answer::Wait, vec![Action::StartCapture]), "the next agent wants a fresh capture");
        let (g, _) = machine(CapturePolicy::OnStart);
        let mut off = g.with_log_percent(Some(0));
        let id = capture(&mut off);
        assert!(off.log_grew(id, 100 * 1000 * MIB, MIB).is_empty(), "0 turns the rule off");
    }

    #[test]
    fn seal_reasons_index_their_counters() {
        for (i, r) in SealReason::ALL.iter().enumerate() {
            assert_eq!(r.index(), i, "{r:?}");
        }
    }

    #[test]
    fn connections_are_counted() {
        let (mut g, t0) = machine(CapturePolicy::OnDemand);
        g.connection_opened(t0);
        g.connection_opened(t0);
        assert_eq!(g.connections(), 2);
        g.connection_closed(t0);
        assert_eq!(g.connections(), 1);
    }

    #[test]
    fn stop_ends_the_capture_thread_and_the_waiters() {
        let (mut g, _) = machine(CapturePolicy::OnStart);
        let t = g.ticket();
        g.stop();
        assert_eq!(g.next_capture(), Next::Stop);
        assert_eq!(g.want(t).0, Answer::Stopped);
    }

    /// The link of a generation already sealed (here by its log bound) breaking afterwards is not a
    /// failed capture: agents waiting for the next generation are not told so, and their demand stands.
    #[test]
    fn a_sealed_generations_link_breaking_is_not_a_failed_capture() {
        let (mut g, _) = machine(CapturePolicy::OnDemand);
        let t = g.ticket();
        g.want(t);
        let id = capture(&mut g);
        assert_eq!(seals(&g.log_bound(id)), vec![(id, SealReason::LogBound)]);
        let t = g.ticket();
        assert_eq!(g.want(t).0, Answer::Wait, "a sealed generation is not handed to new agents");
        assert!(g.capture_ended(id, Ended::Failed(failure("link reset"))).is_empty(), "nothing counted, nobody told");
        assert_eq!(g.failures().0, 0);
        assert_eq!(g.want(t).0, Answer::Wait, "still waiting, not told of a failure");
        assert_eq!(g.next_capture(), Next::Capture(id + 1), "the demand stands");
    }

    /// `--capture on-start` keeps trying until a first generation has completed (however its
    /// attempts failed), and not after: later captures are on demand.
    #[test]
    fn on_start_tries_until_a_first_generation_completes() {
        let (mut g, _) = machine(CapturePolicy::OnStart);
        let Next::Capture(one) = g.next_capture() else { panic!() };
        g.rdb_started(one);
        g.capture_ended(one, Ended::Failed(failure("cut mid-RDB")));
        let Next::Capture(two) = g.next_capture() else { panic!("retried after a failure mid-RDB: {g:?}") };
        g.capture_ended(two, Ended::Failed(failure("connection refused")));
        let three = capture(&mut g);
        assert_eq!(g.capture_ended(three, Ended::Failed(failure("link lost"))).iter().filter(|a| matches!(a, Action::CountFailure)).count(), 1);
        assert_eq!(g.next_capture(), Next::Wait, "a first generation completed: the next capture waits for an agent");
    }

    /// A master change under a running capture fails (mid-RDB) its generation in the machine; the
    /// capture then ends without a failure, and the agents waiting get a capture from the new master.
    #[test]
    fn a_master_change_mid_rdb_is_no_failed_capture() {
        let (mut g, _) = machine(CapturePolicy::OnDemand);
        let t = g.ticket();
        g.want(t);
        let Next::Capture(id) = g.next_capture() else { panic!() };
        g.rdb_started(id);
        g.master_changed("m2:6379".into());
        let t = g.ticket();
        assert_eq!(g.want(t).0, Answer::Wait);
        assert!(g.capture_ended(id, Ended::Sealed).is_empty());
        assert_eq!(g.failures().0, 0);
        assert_eq!(g.next_capture(), Next::Capture(id + 1), "captured again, from the new master");
    }

    #[test]
    fn a_stale_generation_is_sealed_once_and_a_capture_follows() {
        let (mut g, _) = machine(CapturePolicy::OnDemand);
        let t = g.ticket();
        g.want(t);
        let Next::Capture(id) = g.next_capture() else { panic!() };
        g.rdb_started(id);
        // Mid-RDB: not sealed (its offset is where the source was when it started).
        assert_eq!(g.renew(id, 100, 500).0, Renewed::Newer);
        g.rdb_complete(id);
        assert_eq!(g.renew(id, 100, 100), (Renewed::FreshEnough, vec![]), "at the offset asked for: fresh enough");
        let (r, actions) = g.renew(id, 100, 500);
        assert_eq!(r, Renewed::Sealed);
        assert!(actions.contains(&Action::Seal { id, reason: SealReason::Stale }), "{actions:?}");
        assert_eq!(g.current(), Some((id, Phase::Sealed(SealReason::Stale))));
        // Its capture thread ends (sealed); a new capture is wanted without another agent asking.
        g.capture_ended(id, Ended::Sealed);
        assert_eq!(g.next_capture(), Next::Capture(id + 1));
        // Asking again about the sealed one seals and starts nothing more.
        assert_eq!(g.renew(id, 100, 500), (Renewed::Sealed, vec![]));
        assert_eq!(g.next_capture(), Next::Wait, "one capture runs");
    }

    #[test]
    fn a_complete_rdb_is_recorded_once_and_not_over_a_failure() {
        let (mut g, _) = machine(CapturePolicy::OnStart);
        let Next::Capture(id) = g.next_capture() else { panic!() };
        g.rdb_started(id);
        assert_eq!(g.rdb_complete(id), vec![Action::Complete { id }]);
        assert!(g.rdb_complete(id).is_empty(), "recorded once");
        // A master change mid-RDB fails the generation; its RDB completing afterwards does not undo that.
        g.log_bound(id);
        g.capture_ended(id, Ended::Sealed);
        let t = g.ticket();
        g.want(t);
        let Next::Capture(two) = g.next_capture() else { panic!() };
        g.rdb_started(two);
        g.master_changed("m2:6379".into());
        assert!(g.rdb_complete(two).is_empty());
        assert_eq!(g.current(), Some((two, Phase::Failed)));
    }

    #[test]
    fn a_served_file_that_breaks_fails_its_generation_once() {
        let (mut g, _) = machine(CapturePolicy::OnStart);
        g.rdb_started(1);
        assert_eq!(g.rdb_failed(1, "shrank".into()), vec![Action::Fail { id: 1, why: "shrank".into() }, Action::TellWaiters]);
        assert_eq!(g.current(), Some((1, Phase::Failed)));
        assert!(g.rdb_failed(1, "again".into()).is_empty(), "failed once");
        assert!(g.rdb_complete(1).is_empty(), "a failed generation is not completed");
    }

    #[test]
    fn a_capture_goes_on_until_its_master_changes_or_its_generation_is_sealed() {
        let (mut g, t0) = machine(CapturePolicy::OnStart);
        let Next::Capture(id) = g.next_capture() else { panic!() };
        assert_eq!(g.capture_turn(id, 0, false), Turn::Go, "handshake");
        g.rdb_started(id);
        assert_eq!(g.capture_turn(id, 0, false), Turn::Go, "mid-RDB");
        g.rdb_complete(id);
        assert_eq!(g.capture_turn(id, 0, true), Turn::Go, "streaming");
        g.renew(id, 1, 2);
        assert_eq!(g.capture_turn(id, 0, true), Turn::Sealed, "sealed by a renewal");

        // Released when idle.
        g.capture_ended(id, Ended::Sealed);
        let Next::Capture(two) = g.next_capture() else { panic!() };
        g.rdb_started(two);
        g.rdb_complete(two);
        g.idle_tick(t0 + IDLE * 2);
        assert_eq!(g.current(), None);
        assert_eq!(g.capture_turn(two, 0, true), Turn::Sealed, "released");

        // A master change ends a capture at any stage.
        let (mut g, _) = machine(CapturePolicy::OnStart);
        let Next::Capture(id) = g.next_capture() else { panic!() };
        g.master_changed("m2:6379".into());
        assert_eq!(g.capture_turn(id, 0, false), Turn::MasterChanged);
        assert_eq!(g.capture_turn(id, 1, false), Turn::Go, "a capture begun after the change");
    }

    #[test]
    fn stop_is_told() {
        let (mut g, _) = machine(CapturePolicy::OnStart);
        let Next::Capture(id) = g.next_capture() else { panic!() };
        assert!(!g.stopped());
        g.stop();
        assert!(g.stopped());
        assert_eq!(g.capture_turn(id, 0, false), Turn::Stop);
    }
}
