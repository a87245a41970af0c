//! The fault matrix as data: which faults, in which phases, and how a cell's outcome is judged. No
//! processes here (`faults::cell` runs the cells, on top of this module), so the invariant itself is
//! unit-tested.

use agent::events::JoinPhase;
use serde::{Deserialize, Serialize};

/// A process the fault strikes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Target {
    /// The relay (restarted at once on its address, as a supervisor would).
    Relay,
    /// Agent A, the join under test.
    Agent,
    /// Agent B, which serves blocks to A (and joins its own replica).
    Peer,
    /// A's local server.
    Replica,
    /// The master (SIGKILL: restarted empty on its address, so with a new replication ID).
    Master,
}

/// Two hosts whose path is cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Pair {
    /// Agent A's host and the relay's.
    AgentRelay,
    /// Agent A's host and the master's.
    AgentMaster,
    /// The relay's host and the master's.
    RelayMaster,
}

/// A netem impairment on agent A's link.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Impairment {
    /// 5 % packet loss.
    Loss,
    /// 200 ms delay.
    Delay,
    /// Reordering (25 % of packets sent at once, the rest 50 ms late).
    Reorder,
}

impl Impairment {
    /// The netem arguments.
    pub fn args(self) -> &'static [&'static str] {
        match self {
            Impairment::Loss => &["loss", "5%"],
            Impairment::Delay => &["delay", "200ms"],
            Impairment::Reorder => &["delay", "50ms", "reorder", "25%", "50%"],
        }
    }
}

/// A fault of the relay's store (the cell's relay then runs with `--store` on a directory of its own).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StoreFault {
    /// The generation's files (its RDB and its log) truncated to nothing under the relay.
    Truncate,
    /// The generation's files removed from the store under the relay.
    Remove,
    /// The store a tmpfs half the snapshot's size: the disk fills mid-capture.
    Full,
}

/// What goes wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "kind", content = "of")]
pub enum Fault {
    /// SIGKILL.
    Kill(Target),
    /// SIGSTOP for [`STOP_SECS`], then SIGCONT: a process that hangs rather than dies.
    Stop(Target),
    /// The path between two hosts cut for [`CUT_SECS`].
    Cut(Pair),
    /// The path between two hosts cut for good.
    CutForGood(Pair),
    /// Agent A's host link `ip link set down` for [`CUT_SECS`].
    LinkDown,
    /// netem on agent A's link for [`CUT_SECS`] × 2.
    Netem(Impairment),
    /// The master's replica promoted, the master made its replica.
    Failover,
    /// The relay's log reaches `--log-max-bytes` while agents still load.
    LogOverflow,
    /// The snapshot exceeds the relay's `--snapshot-max-bytes`.
    SnapshotTooBig,
    /// The relay's `--connections-max` (10) holds one agent's connections (about 8), not two agents'.
    OutOfConnections,
    /// The relay's store fails under it.
    Store(StoreFault),
}

/// How long a SIGSTOP lasts.
pub const STOP_SECS: u64 = 10;
/// How long a cut, a link down or an impairment lasts.
pub const CUT_SECS: u64 = 5;

impl Fault {
    /// A short name (`kill-relay`, `cut-agent-relay`).
    pub fn name(&self) -> String {
        let t = |t: &Target| serde_json::to_value(t).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default();
        let p = |p: &Pair| serde_json::to_value(p).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default();
        match self {
            Fault::Kill(x) => format!("kill-{}", t(x)),
            Fault::Stop(x) => format!("stop-{}", t(x)),
            Fault::Cut(x) => format!("cut-{}", p(x)),
            Fault::CutForGood(x) => format!("cut-for-good-{}", p(x)),
            Fault::LinkDown => "link-down-agent".into(),
            Fault::Netem(i) => format!("netem-{}", serde_json::to_value(i).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default()),
            Fault::Failover => "failover".into(),
            Fault::LogOverflow => "log-overflow".into(),
            Fault::SnapshotTooBig => "snapshot-too-big".into(),
            Fault::OutOfConnections => "out-of-connections".into(),
            Fault::Store(f) => format!("store-{}", serde_json::to_value(f).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default()),
        }
    }

    /// Does the fault strike only agent A's side (then agent B must sync as if nothing happened)?
    pub fn only_agent_a(&self) -> bool {
        matches!(
            self,
            Fault::Kill(Target::Agent | Target::Replica)
                | Fault::Stop(Target::Agent | Target::Replica)
                | Fault::Cut(Pair::AgentRelay | Pair::AgentMaster)
                | Fault::CutForGood(Pair::AgentRelay | Pair::AgentMaster)
                | Fault::LinkDown
                | Fault::Netem(_)
        )
    }

    /// The agent this fault kills outright, if any (it cannot report; its replica is checked, then
    /// the join re-run as an operator or a supervisor would).
    pub fn kills_agent(&self) -> Option<Target> {
        match self {
            Fault::Kill(t @ (Target::Agent | Target::Peer)) => Some(*t),
            _ => None,
        }
    }
}

/// Where the join is when the fault strikes (the agent's own phase log, and the relay's capture).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Phase {
    /// The relay is still receiving the master's RDB.
    Capture,
    /// The agent streams blocks to its replica (the snapshot complete at the relay).
    Pull,
    /// Every block sent; the replica finishes loading.
    Load,
    /// The agent streams the relay's log to the replica.
    Log,
    /// The agent checks the master and issues `REPLICAOF`.
    Handoff,
    /// Just after the handoff.
    After,
}

impl Phase {
    /// All, in order.
    pub const ALL: [Phase; 6] = [Phase::Capture, Phase::Pull, Phase::Load, Phase::Log, Phase::Handoff, Phase::After];

    /// The name used in cell names and tables.
    pub fn name(self) -> &'static str {
        match self {
            Phase::Capture => "capture",
            Phase::Pull => "pull",
            Phase::Load => "load",
            Phase::Log => "log",
            Phase::Handoff => "handoff",
            Phase::After => "after",
        }
    }

    /// The join's phase event that marks the phase (`join --events` reports each phase); `None`
    /// for [`Phase::After`], marked by the `handed_off` event.
    pub fn agent_phase(self) -> Option<JoinPhase> {
        match self {
            Phase::Capture | Phase::Pull => Some(JoinPhase::Pulling),
            Phase::Load => Some(JoinPhase::Loading),
            Phase::Log => Some(JoinPhase::StreamingLog),
            Phase::Handoff => Some(JoinPhase::HandingOff),
            Phase::After => None,
        }
    }
}

/// One cell: a fault striking in a phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cell {
    /// The fault.
    pub fault: Fault,
    /// When it strikes.
    pub phase: Phase,
}

impl Cell {
    /// `kill-relay@pull`.
    pub fn name(&self) -> String {
        format!("{}@{}", self.fault.name(), self.phase.name())
    }
}

/// The whole matrix: process and network faults in every phase; the topology faults where they
/// belong (the failover mid-join in three phases, the bounds once each).
pub fn full() -> Vec<Cell> {
    use Target::*;
    let mut faults = Vec::new();
    for t in [Relay, Agent, Peer, Replica, Master] {
        faults.push(Fault::Kill(t));
        faults.push(Fault::Stop(t));
    }
    for p in [Pair::AgentRelay, Pair::AgentMaster, Pair::RelayMaster] {
        faults.push(Fault::Cut(p));
    }
    faults.push(Fault::LinkDown);
    let mut cells: Vec<Cell> = faults.iter().flat_map(|&fault| Phase::ALL.iter().map(move |&phase| Cell { fault, phase })).collect();
    for (fault, phases) in [
        (Fault::CutForGood(Pair::AgentRelay), &[Phase::Pull, Phase::Log][..]),
        (Fault::CutForGood(Pair::AgentMaster), &[Phase::Pull, Phase::Handoff]),
        (Fault::CutForGood(Pair::RelayMaster), &[Phase::Pull]),
        (Fault::Netem(Impairment::Loss), &[Phase::Pull]),
        (Fault::Netem(Impairment::Delay), &[Phase::Pull]),
        (Fault::Netem(Impairment::Reorder), &[Phase::Pull]),
        (Fault::Failover, &[Phase::Pull, Phase::Log, Phase::Handoff]),
        (Fault::LogOverflow, &[Phase::Load]),
        (Fault::SnapshotTooBig, &[Phase::Capture]),
        (Fault::OutOfConnections, &[Phase::Pull]),
        (Fault::Store(StoreFault::Truncate), &[Phase::Pull, Phase::Log]),
        (Fault::Store(StoreFault::Remove), &[Phase::Pull]),
        (Fault::Store(StoreFault::Full), &[Phase::Capture]),
    ] {
        cells.extend(phases.iter().map(|&phase| Cell { fault, phase }));
    }
    cells
}

/// The short matrix the test suite runs: one cell per kind of outcome (a retry on a restarted
/// relay, a hung agent, a dead local server, a flapping path, a master failover, a bound, a store
/// failing under the relay).
pub fn quick() -> Vec<Cell> {
    vec![
        Cell { fault: Fault::Kill(Target::Relay), phase: Phase::Pull },
        Cell { fault: Fault::Kill(Target::Replica), phase: Phase::Pull },
        Cell { fault: Fault::Cut(Pair::AgentRelay), phase: Phase::Pull },
        Cell { fault: Fault::Failover, phase: Phase::Handoff },
        Cell { fault: Fault::SnapshotTooBig, phase: Phase::Capture },
        Cell { fault: Fault::Store(StoreFault::Truncate), phase: Phase::Pull },
    ]
}

/// A replica's replication role as a cell saw it afterwards.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SeenRole {
    /// It did not answer (or with a role we do not know).
    #[default]
    Unreachable,
    /// `role:master`, following no one.
    Standalone,
    /// `role:slave`, following someone.
    Replica,
}

/// What was seen of one agent after a cell.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Observed {
    /// The join's exit code; `None` when the fault killed the agent.
    pub exit: Option<i32>,
    /// The join still ran at the cell's deadline.
    pub hung: bool,
    /// The join's last error line (what the operator reads).
    pub message: String,
    /// The join failed after it had handed the replica to the master (its `--json` says so).
    #[serde(default)]
    pub handed_over: bool,
    /// The replica's role afterwards.
    pub role: SeenRole,
    /// Whom the replica follows, when it is one (`host:port`).
    pub following: String,
    /// Keys in the replica (all databases) afterwards.
    pub replica_keys: u64,
    /// Differences from the master once caught up (`None`: not compared, e.g. the join failed, or a
    /// server never answered every read).
    pub differences: Option<u64>,
    /// For a killed agent: whom its replica followed a few seconds after the kill (empty:
    /// standalone). Anything but the real master is a replica left on a dead agent.
    pub after_kill_following: String,
    /// The re-run's exit code (a killed agent is joined again, as a supervisor would).
    pub rerun_exit: Option<i32>,
    /// The fault destroyed the replica (killed, restarted empty) after the join had handed it over:
    /// what the join reported can no longer be checked against it.
    #[serde(default)]
    pub replica_lost_after_handoff: bool,
}

/// A cell's outcome for one agent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "verdict", content = "why")]
pub enum Verdict {
    /// Exit 0: partial handoff, replica identical to the master once caught up.
    Synced,
    /// Exit 3: the master sent a full sync; the replica is a native replica, identical.
    Native,
    /// Non-zero with a message; the replica empty and standalone.
    FailedClean,
    /// The agent was killed; its replica was not left looking synced, and a re-run synced it.
    Rerun,
    /// Non-zero after the handoff (the master went away just then): the replica is the real master's,
    /// not reported in sync, and resyncs natively when the master is back — as a native replica would.
    HandedOver,
    /// The cell could not run here (the reason): neither survived nor broken, and not counted as
    /// either.
    Skipped(String),
    /// The invariant broke.
    Violation(String),
}

impl Verdict {
    /// Ran, and no violation (a skipped cell did not survive anything).
    pub fn survived(&self) -> bool {
        !matches!(self, Verdict::Violation(_) | Verdict::Skipped(_))
    }
    /// Synced or native (the agent was not disturbed, or recovered by itself).
    pub fn in_sync(&self) -> bool {
        matches!(self, Verdict::Synced | Verdict::Native | Verdict::Rerun)
    }
}

/// The invariant, for one agent: success only with identical data; failure only with a message and
/// the replica reset; never hung; a killed agent's replica never left in sync with a dead agent.
/// `masters`: whom a synced replica may follow — the master, and after a failover that struck once
/// the replica was handed over, the old master now replicating from the new one (as native
/// replication leaves it).
pub fn judge(o: &Observed, masters: &[String]) -> Verdict {
    let master = masters.first().map(String::as_str).unwrap_or_default();
    let follows_a_master = |f: &str| masters.iter().any(|m| m == f);
    if o.hung {
        return Verdict::Violation("the join hung past the cell's deadline".into());
    }
    let identical = |what: &str| match o.differences {
        Some(0) => Ok(()),
        Some(n) => Err(Verdict::Violation(format!("{what} but {n} keys differ from the master"))),
        None => Err(Verdict::Violation(format!("{what} but the replica was never compared: it never caught up with the master, or never served every key"))),
    };
    match o.exit {
        None => {
            if !o.after_kill_following.is_empty() {
                if !follows_a_master(&o.after_kill_following) {
                    return Verdict::Violation(format!("after the agent died, its replica still follows {} (the dead agent)", o.after_kill_following));
                }
                // Killed after the handoff: the replica is the master's; nothing to re-run.
                return identical("killed after the handoff").map_or_else(|v| v, |_| Verdict::Synced);
            }
            match o.rerun_exit {
                Some(0) | Some(3) => identical("re-run join succeeded").map_or_else(|v| v, |_| Verdict::Rerun),
                other => Verdict::Violation(format!("the re-run join after the kill exited {other:?}")),
            }
        }
        Some(0) if o.replica_lost_after_handoff => Verdict::Synced,
        Some(0) => {
            if !follows_a_master(&o.following) {
                return Verdict::Violation(format!("exit 0 but the replica follows {:?}, not the master {master}", o.following));
            }
            identical("exit 0").map_or_else(|v| v, |_| Verdict::Synced)
        }
        Some(3) => identical("exit 3").map_or_else(|v| v, |_| Verdict::Native),
        Some(_) => {
            if o.message.trim().is_empty() {
                return Verdict::Violation("failed without a message".into());
            }
            if o.handed_over && o.role == SeenRole::Replica && follows_a_master(&o.following) {
                return Verdict::HandedOver;
            }
            if o.role != SeenRole::Standalone || o.replica_keys != 0 {
                return Verdict::Violation(format!("failed but the replica is {:?} with {} keys (not reset)", o.role, o.replica_keys));
            }
            Verdict::FailedClean
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const M: &str = "10.77.0.1:6379";

    fn judge(o: &Observed, m: &str) -> Verdict {
        super::judge(o, &[m.to_string()])
    }

    fn ok() -> Observed {
        Observed { exit: Some(0), role: SeenRole::Replica, following: M.into(), differences: Some(0), ..Default::default() }
    }

    #[test]
    fn success_needs_identical_data_from_the_real_master() {
        assert_eq!(judge(&ok(), M), Verdict::Synced);
        assert!(matches!(judge(&Observed { differences: Some(3), ..ok() }, M), Verdict::Violation(w) if w.contains("3 keys differ")));
        assert!(matches!(judge(&Observed { differences: None, ..ok() }, M), Verdict::Violation(_)));
        assert!(matches!(judge(&Observed { following: "127.0.0.1:40000".into(), ..ok() }, M), Verdict::Violation(w) if w.contains("not the master")));
        assert_eq!(judge(&Observed { exit: Some(3), ..ok() }, M), Verdict::Native);
        let old = "10.77.0.1:7000".to_string();
        let chained = Observed { following: old.clone(), ..ok() };
        assert_eq!(super::judge(&chained, &[M.to_string(), old]), Verdict::Synced, "handed to the old master just before it was demoted");
    }

    #[test]
    fn failure_needs_a_message_and_a_reset_replica() {
        let failed = Observed { exit: Some(1), message: "relay: connection refused".into(), role: SeenRole::Standalone, ..Default::default() };
        assert_eq!(judge(&failed, M), Verdict::FailedClean);
        assert!(!judge(&Observed { message: String::new(), ..failed.clone() }, M).survived());
        assert!(!judge(&Observed { replica_keys: 10, ..failed.clone() }, M).survived(), "half-loaded");
        assert!(!judge(&Observed { role: SeenRole::Replica, following: "127.0.0.1:1".into(), ..failed }, M).survived(), "following a fake master");
        assert!(!judge(&Observed { hung: true, ..ok() }, M).survived());
        let after = Observed { exit: Some(1), message: "master: timed out".into(), handed_over: true, role: SeenRole::Replica, following: M.into(), replica_keys: 9, ..Default::default() };
        assert_eq!(judge(&after, M), Verdict::HandedOver);
        assert!(!judge(&Observed { following: "127.0.0.1:40000".into(), ..after.clone() }, M).survived(), "handed to a fake master is not handed over");
        assert!(!judge(&Observed { handed_over: false, ..after }, M).survived(), "a failure before the handoff must reset");
    }

    #[test]
    fn a_killed_agent_is_judged_by_its_replica_and_the_rerun() {
        let killed = Observed { exit: None, role: SeenRole::Replica, following: M.into(), rerun_exit: Some(0), differences: Some(0), ..Default::default() };
        assert_eq!(judge(&killed, M), Verdict::Rerun);
        let handed = Observed { after_kill_following: M.into(), rerun_exit: None, ..killed.clone() };
        assert_eq!(judge(&handed, M), Verdict::Synced, "killed after the handoff");
        assert!(!judge(&Observed { differences: Some(2), ..handed }, M).survived());
        assert!(!judge(&Observed { after_kill_following: "127.0.0.1:40000".into(), ..killed.clone() }, M).survived());
        assert!(!judge(&Observed { rerun_exit: Some(1), ..killed.clone() }, M).survived());
    }

    #[test]
    fn the_matrix_covers_every_phase_and_names_are_unique() {
        let cells = full();
        for p in Phase::ALL {
            assert!(cells.iter().filter(|c| c.phase == p).count() >= 14, "{p:?}");
        }
        let mut names: Vec<String> = cells.iter().map(Cell::name).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), cells.len());
        assert!(names.contains(&"kill-relay@pull".to_string()) && names.contains(&"cut-agent-relay@handoff".to_string()));
        assert!(quick().iter().all(|c| cells.contains(c)));
    }
}
