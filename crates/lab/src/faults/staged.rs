//! The fault matrix's cells for the staged join of a cluster node (`fastrepl-lab faults --staged`):
//! the agent killed while pulling, while recording the node's role and while the node is down; the
//! node killed while it loads; the shard's master failed over while the node loads; the master's
//! backlog overrun while the node is down. On a loopback cluster of one shard (a master, its replica,
//! a writer throughout) and a new supervised node. Each cell is judged by the matrix's one invariant
//! ([`matrix::judge`]): success only with data identical to a master of the shard, failure only
//! with a message and the node an empty master again, a killed agent's node never left parked or
//! half-staged (a re-run join must then succeed).

use super::cell::last_json;
use super::matrix::{self, Observed, SeenRole, Verdict};
use agent::events::{Event, JoinPhase};
use anyhow::Result;
use fixtures::cluster::{self, Cluster, Node, NodeOpts};
use fixtures::{Flavor, Proc};
use serde::{Deserialize, Serialize};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// What goes wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StagedFault {
    /// The join's agent SIGKILLed.
    KillAgent,
    /// The node SIGKILLed (its supervisor starts it again).
    KillNode,
    /// The shard's replica takes over (`CLUSTER FAILOVER`): the node was staged for the old master.
    Failover,
    /// The master writes more than its backlog holds while the node is down: its `PSYNC` offset is
    /// gone by the time it asks.
    BacklogOverrun,
}

/// One cell: a fault striking when the join enters a phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct StagedCell {
    /// The fault.
    pub fault: StagedFault,
    /// The join's phase it strikes in.
    pub at: JoinPhase,
}

impl StagedCell {
    /// `staged:kill-agent@recording`.
    pub fn name(&self) -> String {
        let f = serde_json::to_value(self.fault).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default();
        let p = serde_json::to_value(self.at).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default();
        format!("staged:{f}@{p}")
    }
}

/// Every staged cell.
pub fn cells() -> Vec<StagedCell> {
    use JoinPhase::*;
    use StagedFault::*;
    vec![
        StagedCell { fault: KillAgent, at: Pulling },
        StagedCell { fault: KillAgent, at: Recording },
        StagedCell { fault: KillAgent, at: Restarting },
        StagedCell { fault: KillNode, at: Loading },
        StagedCell { fault: Failover, at: Loading },
        StagedCell { fault: BacklogOverrun, at: Restarting },
    ]
}

/// One cell's outcome.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StagedResult {
    /// Its name.
    pub cell: String,
    /// The cell.
    pub spec: StagedCell,
    /// Whether (and in which phase) the fault struck.
    pub struck_in: String,
    /// What was seen of the join and the node.
    pub observed: Observed,
    /// The verdict.
    pub verdict: Verdict,
    /// The join's report: `handoff` and the staged notes (what the operator was told).
    pub told: String,
    /// Writes acknowledged during the cell.
    pub writes: u64,
    /// Seconds the cell took.
    pub secs: f64,
}

impl StagedResult {
    /// The invariant held.
    pub fn passed(&self) -> bool {
        self.verdict.survived()
    }
}

const JOIN_DEADLINE: Duration = Duration::from_secs(180);
const PHASE_DEADLINE: Duration = Duration::from_secs(60);
/// A killed agent's node is given this long to be undone by its guard (or restarted).
const SETTLE: Duration = Duration::from_secs(10);
/// How long a synced node may take to apply what its master wrote before it is compared.
const CATCH_UP: Duration = Duration::from_secs(30);

/// Has `node` applied everything `master` wrote (its link up, its offset the master's)?
fn caught_up(master: &Node, node: &Node) -> bool {
    let offset = |n: &Node, k: &str| n.try_client().ok().and_then(|mut c| c.info("replication").ok()).and_then(|i| i.num(k));
    let linked = node.try_client().ok().and_then(|mut c| c.info("replication").ok()).is_some_and(|i| i.get("master_link_status") == Some("up"));
    linked && offset(master, "master_repl_offset").is_some() && offset(master, "master_repl_offset") == offset(node, "slave_repl_offset")
}

/// Run one cell with servers of `flavor` and the `fastrepl` binary `exe`.
pub fn run(cell: &StagedCell, flavor: Flavor, exe: &Path) -> Result<StagedResult> {
    let t0 = Instant::now();
    let backlog = if cell.fault == StagedFault::BacklogOverrun { "1mb" } else { "64mb" };
    let c = Cluster::start(flavor, 1, 1, NodeOpts { backlog: backlog.into(), ..Default::default() });
    cluster::fill_shard(&c, 0, 2000);
    let node = c.add_empty_node(NodeOpts { supervised: true, ..Default::default() });
    let dir = tempfile::tempdir()?;
    let relay_addr = format!("127.0.0.1:{}", fixtures::free_port());
    let mut relay_cmd = Command::new(exe);
    relay_cmd.args(["relay", "--master", &c.master(0).addr(), "--listen", &relay_addr]);
    let _relay = Proc::spawn("relay", relay_cmd);
    let writer = cluster::Writer::start(&c, 0);
    let events = dir.path().join("events.jsonl");
    let join = |extra: &[&str]| {
        let mut cmd = Command::new(exe);
        cmd.args(["join", "--relay", &relay_addr, "--replica", &node.addr(), "--master", &c.master(0).addr(), "--json", "--restart-timeout-secs", "60"]);
        cmd.args(extra);
        Proc::spawn("join", cmd)
    };
    if cell.fault == StagedFault::BacklogOverrun {
        // The node, once the join restarts it, stays down until the overrun is written (`strike`):
        // racing its restart, the overrun was sometimes written after the node had resynced
        // partially (a clean-clone run: exit 0 where 3 is the cell's point).
        node.hold_restarts(true);
    }
    let mut j = join(&["--events", &events.to_string_lossy()]);
    let struck_in = match wait_phase(&events, cell.at, &mut j) {
        Some(p) => {
            strike(cell, &c, &node, &mut j)?;
            format!("{p:?}")
        }
        None => "never: the join did not reach the phase".into(),
    };
    node.hold_restarts(false);
    let mut o = Observed::default();
    let mut masters = vec![c.master(0).addr()];
    if cell.fault == StagedFault::Failover {
        masters.push(c.replicas(0)[0].addr());
    }
    match cell.fault {
        StagedFault::KillAgent => {
            o.exit = None;
            // The guard undoes a parked node; a node already down comes back as the master's replica.
            let parked = || node.try_client().ok().and_then(|mut cl| cl.config_get("masteruser").ok().flatten()).is_some_and(|u| u == agent::guard::PARKED_USER);
            let deadline = Instant::now() + SETTLE;
            while Instant::now() < deadline && (seen(&node).0 == SeenRole::Unreachable || parked()) {
                std::thread::sleep(Duration::from_millis(100)); // Waiting for the guard or the supervisor, with a deadline.
            }
            let (role, following, _) = seen(&node);
            let parked = parked();
            if parked {
                o.message = "the node was left parked".into();
                o.after_kill_following = "a parked link".into();
            } else if role == SeenRole::Replica {
                o.after_kill_following = following;
            } else {
                let mut rerun = join(&[]);
                o.rerun_exit = rerun.wait(JOIN_DEADLINE);
            }
        }
        _ => {
            o.exit = j.wait(JOIN_DEADLINE);
            let out = j.output();
            o.message = out.lines().rev().find(|l| l.starts_with("fastrepl join failed")).unwrap_or_default().to_string();
            if let Some(r) = last_json(&out) {
                o.handed_over = r["replica"] == "handed_over";
            }
        }
    }
    let writes = writer.stop();
    // A node the fault killed is started again by its supervisor (the join may have ended before
    // the kill landed): observe it once it answers.
    let deadline = Instant::now() + SETTLE;
    while Instant::now() < deadline && seen(&node).0 == SeenRole::Unreachable {
        std::thread::sleep(Duration::from_millis(100)); // Waiting for the supervisor, with a deadline.
    }
    let (role, following, keys) = seen(&node);
    o.role = role;
    o.following = following;
    o.replica_keys = keys;
    if role == SeenRole::Replica {
        // Compared with the shard's master as it is now (after a failover, the promoted replica),
        // whichever node the replica follows: right after a failover it may still follow the old
        // master, itself a replica by then, until the cluster moves it.
        let candidates = [c.master(0), &c.replicas(0)[0]];
        let current = candidates.into_iter().find(|n| seen(n).0 == SeenRole::Standalone).unwrap_or(c.master(0));
        // Compared once it has applied what that master wrote (the writer has stopped): read at
        // once, the stream still in flight after a failover shows as differences that are only lag.
        // A replica on a wrong history never gets there, and is compared at the deadline.
        let deadline = Instant::now() + CATCH_UP;
        while Instant::now() < deadline && !caught_up(current, &node) {
            std::thread::sleep(Duration::from_millis(100)); // Waiting for replication, with a deadline.
        }
        o.differences = compare(current, &node);
    }
    let told = last_json(&j.output()).map(|r| format!("handoff {} {}", r["handoff"], r["notes"])).unwrap_or_else(|| o.message.clone());
    let verdict = matrix::judge(&o, &masters);
    Ok(StagedResult { cell: cell.name(), spec: *cell, struck_in, observed: o, verdict, told, writes, secs: t0.elapsed().as_secs_f64() })
}

/// Wait for the join's event stream to say it entered `phase`; `None` if it ended or the deadline
/// passed first.
fn wait_phase(events: &Path, phase: JoinPhase, j: &mut Proc) -> Option<JoinPhase> {
    let deadline = Instant::now() + PHASE_DEADLINE;
    while Instant::now() < deadline {
        let text = std::fs::read_to_string(events).unwrap_or_default();
        if let Ok(evs) = agent::events::parse(&text) {
            if evs.iter().any(|e| matches!(e, Event::Phase { phase: p, .. } if *p == phase)) {
                return Some(phase);
            }
        }
        if !j.running() {
            return None;
        }
        std::thread::sleep(Duration::from_millis(5)); // Polling the event stream, with a deadline.
    }
    None
}

fn strike(cell: &StagedCell, c: &Cluster, node: &Node, j: &mut Proc) -> Result<()> {
    match cell.fault {
        StagedFault::KillAgent => j.kill(),
        StagedFault::KillNode => node.kill(),
        StagedFault::Failover => {
            let r = &c.replicas(0)[0];
            r.client().cmd(&["CLUSTER", "FAILOVER"]).map_err(|e| anyhow::anyhow!("CLUSTER FAILOVER: {e}"))?;
        }
        StagedFault::BacklogOverrun => {
            // The overrun must be written before the restarted node asks to resync: it is held down
            // until then (see `run`), and released as soon as the pipeline is answered.
            let tag = cluster::shard_tag(c, 0);
            let mut m = c.master(0).client();
            let sets: Vec<Vec<Vec<u8>>> = (0..40).map(|i| client::command(&["SET".to_string(), format!("{{{tag}}}:overrun{i}"), "o".repeat(64 * 1024)])).collect();
            let written = m.pipeline(&sets).map_err(|e| anyhow::anyhow!("SET pipeline: {e}"));
            node.hold_restarts(false);
            for r in written? {
                anyhow::ensure!(!r.is_error(), "SET: {r:?}");
            }
        }
    }
    Ok(())
}

/// The node's role, whom it follows, its keys.
fn seen(n: &Node) -> (SeenRole, String, u64) {
    let Ok(mut c) = n.try_client() else { return (SeenRole::Unreachable, String::new(), 0) };
    let Ok(i) = c.info("replication") else { return (SeenRole::Unreachable, String::new(), 0) };
    let keys = agent::local::key_count(&mut c).unwrap_or(0);
    match i.get("role") {
        Some("master") => (SeenRole::Standalone, String::new(), keys),
        Some("slave") => (SeenRole::Replica, format!("{}:{}", i.get("master_host").unwrap_or_default(), i.get("master_port").unwrap_or_default()), keys),
        _ => (SeenRole::Unreachable, String::new(), keys),
    }
}

/// Wait until `node` applied everything `master` has and serves its keys, then compare (READONLY on
/// both: a cluster replica redirects reads otherwise, and `master` may have become one); `None`
/// when it never caught up or never served every key.
fn compare(master: &Node, node: &Node) -> Option<u64> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let m = master.try_client().ok().and_then(|mut c| c.info("replication").ok());
        let r = node.try_client().ok().and_then(|mut c| c.info("replication").ok());
        if let (Some(m), Some(r)) = (m, r) {
            // The same replication ID too: a node still linked to a demoted master can sit at the
            // same offset in a history that diverged.
            let same_history = r.get("master_replid").is_some() && r.get("master_replid") == m.get("master_replid");
            if r.get("master_link_status") == Some("up") && same_history && m.num("master_repl_offset").is_some() && r.num("slave_repl_offset") == m.num("master_repl_offset") {
                break;
            }
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(50)); // Polling replication offsets, with a deadline.
    }
    // A node restarted, or moved to a new master by a failover, answers its keys with CLUSTERDOWN
    // or MOVED until its cluster view settles, however complete its data (a CI run counted those
    // answers as 2 503 differences): a refused read is waited through, up to the deadline. Its view
    // may never settle: a Redis 7.0 replica that hears its old master's demotion before the new
    // master's claim drops the slots' owner instead of following the new one, and stays the
    // demoted master's replica (chained, its data complete) whose reads are all MOVED — a CI run
    // saw that for 60 s. Refused reads are then compared whole by `DEBUG DIGEST` (no key, so no
    // redirection): the writer has stopped and the offsets are equal, so equal digests are equal data.
    let mut told = false;
    loop {
        let (mut a, mut b) = (master.try_client().ok()?, node.try_client().ok()?);
        a.cmd(&["READONLY"]).ok()?;
        b.cmd(&["READONLY"]).ok()?;
        let o = verify::compare(&mut a, &mut b, &verify::Options::default()).ok()?;
        if o.refused_count == 0 {
            for d in &o.differences {
                eprintln!("    differs: {d}");
            }
            return Some(o.difference_count);
        }
        if let (Some(a), Some(b)) = (digest(master), digest(node)) {
            if a == b {
                eprintln!(
                    "    compared by DEBUG DIGEST: {} keys refused by the node's cluster view (it follows {}), first: {}",
                    o.refused_count,
                    seen(node).1,
                    o.refused.first().map(String::as_str).unwrap_or_default()
                );
                return Some(0);
            }
        }
        if Instant::now() >= deadline {
            eprintln!("    not compared: {} keys refused, first: {}", o.refused_count, o.refused.first().map(String::as_str).unwrap_or_default());
            return None;
        }
        if !std::mem::replace(&mut told, true) {
            eprintln!("    waiting to compare: {}", o.refused.first().map(String::as_str).unwrap_or_default());
        }
        std::thread::sleep(Duration::from_millis(100)); // Waiting for the node's cluster view, with a deadline.
    }
}

/// The dataset's `DEBUG DIGEST`; `None` where it cannot be read (DEBUG refused, the node down).
fn digest(n: &Node) -> Option<Vec<u8>> {
    let f = n.try_client().ok()?.cmd(&["DEBUG", "DIGEST"]).ok()?;
    f.as_bytes().map(<[u8]>::to_vec)
}

/// results.md's table for the staged cells.
pub fn markdown(results: &[StagedResult]) -> String {
    let mut s = String::from("## Staged joins (cluster nodes)\n\n");
    s.push_str("A 1-shard cluster (master, replica, writer throughout) and a new supervised node joined by staging. ");
    s.push_str("Judged by the same invariant; a killed agent's node must not be left parked or half-staged.\n\n");
    s.push_str("| cell | struck in | verdict | exit | node | keys differ | what the join told | s |\n|---|---|---|---|---|---:|---|---:|\n");
    for r in results {
        let v = match &r.verdict {
            Verdict::Violation(w) => format!("VIOLATION: {w}"),
            other => serde_json::to_value(other).ok().and_then(|j| j["verdict"].as_str().map(str::to_string)).unwrap_or_default(),
        };
        let exit = match (r.observed.exit, r.observed.rerun_exit) {
            (None, Some(x)) => format!("killed; re-run {x}"),
            (None, None) => "killed".into(),
            (Some(x), _) => x.to_string(),
        };
        s.push_str(&format!(
            "| {} | {} | {v} | {exit} | {:?} {} | {} | {} | {:.1} |\n",
            r.cell,
            r.struck_in,
            r.observed.role,
            r.observed.following,
            r.observed.differences.map(|d| d.to_string()).unwrap_or_else(|| "—".into()),
            r.told.replace('|', "/"),
            r.secs
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells_have_distinct_names() {
        let mut names: Vec<String> = cells().iter().map(StagedCell::name).collect();
        assert!(names.contains(&"staged:kill-agent@recording".to_string()), "{names:?}");
        names.sort();
        names.dedup();
        assert_eq!(names.len(), cells().len());
    }
}
