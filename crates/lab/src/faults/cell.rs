//! Running one cell of the fault matrix on namespace hosts:
//!
//! ```text
//!   host 0: master (+ a spare replica for the failover)   host 1: relay
//!   host 2: agent A + its replica (the join under test)   host 3: agent B + its replica (a bystander
//!                                                          that also serves A)
//! ```
//!
//! A writer runs against the master throughout. The master produces its RDB slowly
//! (`rdb-key-save-delay`) and the replicas load slowly (`key-load-delay`), so every phase lasts long
//! enough to be struck; the fault strikes when agent A's log (or the relay's, for the capture) says
//! the phase began. Then every agent is waited for and judged by [`super::matrix::judge`].

use super::matrix::{judge, Cell, Fault, Observed, Pair, Phase, SeenRole, StoreFault, Target, Verdict, CUT_SECS, STOP_SECS};
use super::writer::Writer;
use agent::events::Event as AgentEvent;
use anyhow::{anyhow, bail, Context, Result};
use fixtures::netns::Lab;
use fixtures::{Flavor, Proc, Server};
use relay::events::Event as RelayEvent;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// What every cell shares.
#[derive(Debug, Clone)]
pub struct Setup {
    /// Server build for master and replicas.
    pub flavor: Flavor,
    /// Dataset size, MiB (64 KiB values).
    pub mib: usize,
    /// The `fastrepl` binary.
    pub exe: PathBuf,
    /// Keep each cell's logs here (None: not kept).
    pub logs: Option<PathBuf>,
}

/// One cell's outcome, as results.json keeps it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CellResult {
    /// `kill-relay@pull`.
    pub cell: String,
    /// The cell.
    pub spec: Cell,
    /// Agent A's phase when the fault struck (from its log), or why it did not strike there.
    pub struck_in: String,
    /// Agent A.
    pub a: Observed,
    /// Its verdict.
    pub a_verdict: Verdict,
    /// Agent B.
    pub b: Observed,
    /// Its verdict.
    pub b_verdict: Verdict,
    /// For faults on A's side only: B synced as if nothing happened.
    pub b_unaffected: Option<bool>,
    /// A's attempts (1 = no retry).
    pub attempts: usize,
    /// Seconds from the strike until A was done (exit, or the re-run's exit after a kill).
    pub recovery_secs: f64,
    /// Keys that differ on a replica reported in sync (must be 0).
    pub keys_lost: u64,
    /// The relay's open fds before the agents came and after they left; its memfds after.
    pub relay_fds: (u64, u64),
    /// memfds (snapshot generations) the relay still held after every agent left.
    pub relay_memfds: u64,
    /// Leaks found (empty: none).
    pub leaks: Vec<String>,
    /// Batches the writer got acknowledged during the cell.
    pub writes: u64,
    /// Seconds the cell took.
    pub secs: f64,
    /// Why the cell did not run (e.g. netem missing from this kernel).
    pub skipped: Option<String>,
}

impl CellResult {
    /// A cell before it ran (a violation until judged, so a cell cut short never passes).
    pub fn not_run(cell: &Cell) -> CellResult {
        CellResult {
            cell: cell.name(),
            spec: *cell,
            struck_in: String::new(),
            a: Observed::default(),
            a_verdict: Verdict::Violation("not run".into()),
            b: Observed::default(),
            b_verdict: Verdict::Violation("not run".into()),
            b_unaffected: None,
            attempts: 0,
            recovery_secs: 0.0,
            keys_lost: 0,
            relay_fds: (0, 0),
            relay_memfds: 0,
            leaks: Vec::new(),
            writes: 0,
            secs: 0.0,
            skipped: None,
        }
    }

    /// A cell that cannot run here, and why (stored and counted as skipped, never as survived).
    pub fn skipped(cell: &Cell, why: &str) -> CellResult {
        CellResult { a_verdict: Verdict::Skipped(why.to_string()), b_verdict: Verdict::Skipped(why.to_string()), skipped: Some(why.to_string()), ..CellResult::not_run(cell) }
    }
}

impl CellResult {
    /// The invariant held for both agents, B was unaffected where it should be, nothing leaked.
    pub fn passed(&self) -> bool {
        self.skipped.is_some() || (self.a_verdict.survived() && self.b_verdict.survived() && self.b_unaffected != Some(false) && self.leaks.is_empty() && self.keys_lost == 0)
    }
}

const TOKEN: &str = "fault-matrix-token-0123456789";
/// How long a cell's joins may take, faults, retries and all.
const JOIN_DEADLINE: Duration = Duration::from_secs(240);
/// How long the phase a cell strikes in may take to begin.
const PHASE_DEADLINE: Duration = Duration::from_secs(90);
/// A killed agent's replica is given this long to be reset by the agent's guard.
const GUARD_DEADLINE: Duration = Duration::from_secs(10);

/// The processes of one cell.
struct World<'a> {
    setup: &'a Setup,
    lab: &'a Lab,
    master: Server,
    spare: Option<Server>,
    /// The master the replicas must end up following (the spare after a failover).
    real_master: String,
    replicas: [Server; 2],
    relay: Proc,
    relay_addr: String,
    relay_args: Vec<String>,
    agents: [Option<Proc>; 2],
    /// When each agent's join exited (or was killed), and its code.
    exits: [Option<(Instant, Option<i32>)>; 2],
    outputs: [String; 2],
    /// The relay's and the agents' event streams (`--events`), which the strikes wait on.
    events: tempfile::TempDir,
    /// A store cell's `--store`.
    store: Option<StoreDir>,
}

/// A store cell's directory: a plain one, or a small disk that fills mid-capture.
enum StoreDir {
    Plain(tempfile::TempDir),
    Small(fixtures::disk::SmallDisk),
}

impl StoreDir {
    fn path(&self) -> &Path {
        match self {
            StoreDir::Plain(d) => d.path(),
            StoreDir::Small(d) => d.path(),
        }
    }

    /// The generations' files in it (`gen-<id>.rdb`, `gen-<id>.log`).
    fn generation_files(&self) -> Result<Vec<PathBuf>> {
        let entries = std::fs::read_dir(self.path()).with_context(|| format!("list the store {}", self.path().display()))?;
        let mut files: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).filter(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("gen-"))).collect();
        files.sort();
        Ok(files)
    }
}

fn on_host(lab: &Lab, i: usize, exe: &Path) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", &lab.hosts[i].ns]).arg(exe);
    c
}

fn wait_for<T>(what: &str, deadline: Duration, mut f: impl FnMut() -> Result<Option<T>>) -> Result<T> {
    let until = Instant::now() + deadline;
    loop {
        if let Some(v) = f()? {
            return Ok(v);
        }
        if Instant::now() > until {
            bail!("timed out after {deadline:?} waiting for {what}");
        }
        std::thread::sleep(Duration::from_millis(10)); // Polling a condition with a deadline.
    }
}

fn signal(pid: u32, sig: i32) {
    // SAFETY: kill(2) on the pid of a process this cell started and still owns; no memory involved.
    unsafe { libc::kill(pid as i32, sig) };
}

/// Whether two `host:port`s name the same master as addresses (an IPv6 address bare or bracketed, a
/// name in any case), as the join compares them.
fn same_master(a: &str, b: &str) -> bool {
    match (a.parse::<endpoint::Endpoint>(), b.parse::<endpoint::Endpoint>()) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

/// `role`, whom it follows (`host:port`, empty when standalone) and its keys, all databases.
fn replica_state(s: &Server) -> (SeenRole, String, u64) {
    let Ok(mut c) = s.try_client() else { return (SeenRole::Unreachable, String::new(), 0) };
    let (role, following) = match agent::local::repl_state(&mut c) {
        Ok(st) if st.role == Some(client::Role::Replica) => (SeenRole::Replica, st.follows.map(|e| e.to_string()).unwrap_or_default()),
        Ok(st) if st.role == Some(client::Role::Master) => (SeenRole::Standalone, String::new()),
        Ok(_) | Err(_) => (SeenRole::Unreachable, String::new()),
    };
    let keys = agent::local::key_count(&mut c).unwrap_or(0);
    (role, following, keys)
}

/// A process's open fds, and how many of them are memfds (snapshot generations, for the relay).
pub fn count_fds(pid: u32) -> (u64, u64) {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fd")) else { return (0, 0) };
    let mut fds = 0;
    let mut memfds = 0;
    for e in dir.flatten() {
        fds += 1;
        if std::fs::read_link(e.path()).is_ok_and(|t| t.to_string_lossy().starts_with("/memfd:")) {
            memfds += 1;
        }
    }
    (fds, memfds)
}

impl World<'_> {
    fn spawn_relay(&self) -> Proc {
        let mut cmd = on_host(self.lab, 1, &self.setup.exe);
        cmd.args(["relay", "--master", &self.master.addr(), "--listen", &self.relay_addr, "--transport", "tcp", "--block-size", "1048576"])
            .arg("--events")
            .arg(self.relay_events_path())
            .args(&self.relay_args)
            .env("FASTREPL_TOKEN", TOKEN);
        Proc::spawn("relay", cmd)
    }

    fn spawn_join(&self, i: usize) -> Proc {
        let host = 2 + i;
        let mut cmd = on_host(self.lab, host, &self.setup.exe);
        let replica = format!("127.0.0.1:{}", self.replicas[i].port);
        // B lingers to serve A; A leaves at once. The default number of retries, with shorter waits
        // (at most 4 s, 15 s in all: longer than a 5 s cut) so a cell ends in minutes.
        let linger = if i == 0 { "0" } else { "20" };
        cmd.args(["join", "--relay", &self.relay_addr, "--replica", &replica, "--json", "--transport", "tcp"])
            .args(["--retries", "5", "--retry-max-secs", "4", "--handoff-timeout-secs", "180", "--load-timeout-secs", "120"])
            .args(["--serve-linger-secs", linger])
            .arg("--events")
            .arg(self.agent_events_path(i))
            .env("FASTREPL_TOKEN", TOKEN);
        Proc::spawn(if i == 0 { "agent A" } else { "agent B" }, cmd)
    }

    /// Record exits; true when both agents are done.
    fn poll_exits(&mut self) -> bool {
        for i in 0..2 {
            if self.exits[i].is_some() {
                continue;
            }
            if let Some(p) = self.agents[i].as_mut() {
                if !p.running() {
                    let code = p.wait(Duration::from_secs(1));
                    self.exits[i] = Some((Instant::now(), code));
                }
            }
        }
        self.exits.iter().all(Option::is_some)
    }

    fn relay_events_path(&self) -> PathBuf {
        self.events.path().join("relay.jsonl")
    }

    fn agent_events_path(&self, i: usize) -> PathBuf {
        self.events.path().join(format!("agent-{i}.jsonl"))
    }

    /// The relay's events so far (none before it opened its stream).
    fn relay_events(&self) -> Result<Vec<RelayEvent>> {
        let text = std::fs::read_to_string(self.relay_events_path()).unwrap_or_default();
        relay::events::parse(&text).map_err(|e| anyhow!("read the relay's event stream: {e}"))
    }

    /// Agent `i`'s events so far.
    fn agent_events(&self, i: usize) -> Result<Vec<AgentEvent>> {
        let text = std::fs::read_to_string(self.agent_events_path(i)).unwrap_or_default();
        agent::events::parse(&text).map_err(|e| anyhow!("read agent {i}'s event stream: {e}"))
    }

    /// The phase agent A last reported.
    fn a_phase(&self) -> Result<String> {
        let a = self.agent_events(0)?;
        if a.iter().any(|e| matches!(e, AgentEvent::HandedOff { .. })) {
            return Ok("handed off".into());
        }
        let last = a.iter().rev().find_map(|e| match e {
            AgentEvent::Phase { phase, .. } => Some(phase.name()),
            _ => None,
        });
        Ok(last.unwrap_or("attaching").to_string())
    }

    /// Wait until the cell's phase begins; returns where A really was, or why it was missed.
    fn wait_phase(&mut self, phase: Phase) -> Result<String> {
        let until = Instant::now() + PHASE_DEADLINE;
        loop {
            let relay = self.relay_events()?;
            let a = self.agent_events(0)?;
            let capturing = relay.iter().any(|e| matches!(e, RelayEvent::RdbStarted { .. }));
            let published = relay.iter().any(|e| matches!(e, RelayEvent::Published { .. }));
            let reached = |p: Phase| match p.agent_phase() {
                Some(want) => a.iter().any(|e| matches!(e, AgentEvent::Phase { phase, .. } if *phase == want)),
                None => a.iter().any(|e| matches!(e, AgentEvent::HandedOff { .. })),
            };
            let hit = match phase {
                Phase::Capture => capturing && !published,
                Phase::Pull => reached(Phase::Pull) && published && !reached(Phase::Load),
                _ => reached(phase),
            };
            if hit {
                return Ok(if phase == Phase::Capture { format!("capture ({})", self.a_phase()?) } else { self.a_phase()? });
            }
            if self.poll_exits() || (phase == Phase::Capture && published) || Instant::now() > until {
                return Ok(format!("missed: A reached {}", self.a_phase()?));
            }
            std::thread::sleep(Duration::from_millis(5)); // Watching the event streams for a phase, with a deadline.
        }
    }

    fn agent_pid(&self, i: usize) -> Option<u32> {
        self.agents[i].as_ref().map(Proc::pid)
    }

    fn pair_hosts(p: Pair) -> (usize, usize) {
        match p {
            Pair::AgentRelay => (2, 1),
            Pair::AgentMaster => (2, 0),
            Pair::RelayMaster => (1, 0),
        }
    }

    /// Strike; timed faults are undone before this returns.
    fn strike(&mut self, fault: Fault, writer: &Writer) -> Result<()> {
        let hold = |secs: u64| std::thread::sleep(Duration::from_secs(secs)); // The fault's duration.
        match fault {
            Fault::Kill(Target::Relay) => {
                self.relay.kill();
                // A supervisor (systemd's Restart=) brings it back on its address.
                self.relay = self.spawn_relay();
            }
            Fault::Stop(Target::Relay) => {
                signal(self.relay.pid(), libc::SIGSTOP);
                hold(STOP_SECS);
                signal(self.relay.pid(), libc::SIGCONT);
            }
            Fault::Kill(t @ (Target::Agent | Target::Peer)) => {
                let i = usize::from(t == Target::Peer);
                if let Some(p) = self.agents[i].as_mut() {
                    p.kill();
                }
                self.exits[i] = Some((Instant::now(), None));
            }
            Fault::Stop(t @ (Target::Agent | Target::Peer)) => {
                let i = usize::from(t == Target::Peer);
                if let Some(pid) = self.agent_pid(i) {
                    signal(pid, libc::SIGSTOP);
                    hold(STOP_SECS);
                    signal(pid, libc::SIGCONT);
                }
            }
            Fault::Kill(Target::Replica) => {
                // Killed, then restarted by its supervisor: empty, on the same address.
                self.replicas[0].restart().map_err(|e| anyhow!("restart replica: {e}"))?;
            }
            Fault::Stop(Target::Replica) => {
                signal(self.replicas[0].pid(), libc::SIGSTOP);
                hold(STOP_SECS);
                signal(self.replicas[0].pid(), libc::SIGCONT);
            }
            Fault::Kill(Target::Master) => {
                self.master.restart().map_err(|e| anyhow!("restart master: {e}"))?;
            }
            Fault::Stop(Target::Master) => {
                signal(self.master.pid(), libc::SIGSTOP);
                hold(STOP_SECS);
                signal(self.master.pid(), libc::SIGCONT);
            }
            Fault::Cut(p) => {
                let (a, b) = Self::pair_hosts(p);
                self.lab.cut(a, b).map_err(|e| anyhow!(e))?;
                hold(CUT_SECS);
                self.lab.heal(a, b).map_err(|e| anyhow!(e))?;
            }
            Fault::CutForGood(p) => {
                let (a, b) = Self::pair_hosts(p);
                self.lab.cut(a, b).map_err(|e| anyhow!(e))?;
            }
            Fault::LinkDown => {
                self.lab.set_link(2, false).map_err(|e| anyhow!(e))?;
                hold(CUT_SECS);
                self.lab.set_link(2, true).map_err(|e| anyhow!(e))?;
            }
            Fault::Netem(i) => {
                self.lab.netem(2, i.args()).map_err(|e| anyhow!(e))?;
                hold(CUT_SECS * 2);
                self.lab.clear_netem(2).map_err(|e| anyhow!(e))?;
            }
            Fault::Failover => {
                let spare = self.spare.as_ref().context("a failover cell has a spare replica")?;
                spare.try_client()?.cmd(&["REPLICAOF", "NO", "ONE"])?;
                self.master.try_client()?.cmd(&["REPLICAOF", &spare.host, &spare.port.to_string()])?;
                self.real_master = spare.addr();
                let (ns, addr) = (spare.ns.clone(), spare.addr());
                writer.retarget(Box::new(move || connect_in(ns.as_deref(), &addr)));
            }
            Fault::Store(f @ (StoreFault::Truncate | StoreFault::Remove)) => {
                let files = self.store.as_ref().context("a store cell has a store")?.generation_files()?;
                anyhow::ensure!(!files.is_empty(), "no generation's file in the store to strike");
                for p in &files {
                    let done = match f {
                        StoreFault::Truncate => std::fs::OpenOptions::new().write(true).open(p).and_then(|file| file.set_len(0)),
                        _ => std::fs::remove_file(p),
                    };
                    done.with_context(|| format!("{} {}", if f == StoreFault::Truncate { "truncate" } else { "remove" }, p.display()))?;
                }
            }
            // Set up when the relay started; they strike by themselves.
            Fault::LogOverflow | Fault::SnapshotTooBig | Fault::OutOfConnections | Fault::Store(StoreFault::Full) => {}
        }
        Ok(())
    }

    /// A killed agent: where its replica is left (given the guard time to reset it), then the join
    /// run again as a supervisor would.
    fn after_kill(&mut self, i: usize, obs: &mut Observed) -> Result<()> {
        let real = self.real_master.clone();
        let following = wait_for("the killed agent's replica to be reset", GUARD_DEADLINE, || {
            let (_, f, _) = replica_state(&self.replicas[i]);
            Ok((f.is_empty() || same_master(&f, &real)).then_some(f))
        })
        .unwrap_or_else(|_| replica_state(&self.replicas[i]).1);
        let handed_over = !following.is_empty() && same_master(&following, &real);
        obs.after_kill_following = following;
        if let Some(p) = self.agents[i].take() {
            self.outputs[i] = p.output();
        }
        if handed_over {
            // Killed after the handoff: the replica is the master's, and a new join would rightly
            // refuse to replace its data.
            return Ok(());
        }
        let mut p = self.spawn_join(i);
        let code = wait_for("the re-run join", JOIN_DEADLINE, || Ok((!p.running()).then_some(())));
        let code = match code {
            Ok(()) => p.wait(Duration::from_secs(1)),
            Err(_) => {
                obs.hung = true;
                None
            }
        };
        obs.rerun_exit = code;
        self.outputs[i] = format!("{}\n--- re-run ---\n{}", self.outputs[i], p.output());
        self.exits[i] = Some((Instant::now(), None));
        Ok(())
    }
}

fn connect_in(ns: Option<&str>, addr: &str) -> Result<client::Client> {
    let addr2 = addr.to_string();
    let c = match ns {
        None => client::Client::connect(&addr2, None, Duration::from_secs(5)),
        Some(ns) => fixtures::netns::within(ns, move || client::Client::connect(&addr2, None, Duration::from_secs(5))).map_err(|e| anyhow!(e))?,
    };
    Ok(c?)
}

/// The join's `--json` object (its last JSON line).
pub(crate) fn last_json(out: &str) -> Option<serde_json::Value> {
    out.lines().rev().find_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
}

/// How many attempts the join made: a success reports the failed ones before it, a failure all.
fn attempts(out: &str) -> usize {
    let Some(v) = last_json(out) else { return 1 };
    let failed = v["attempts"].as_array().map_or(0, Vec::len);
    if v.get("handoff").is_some() {
        failed + 1
    } else {
        failed.max(1)
    }
}

/// Wait until `replica` applied everything `master` has, then compare them; the differences, or
/// None when it never caught up.
pub fn compare(master: &Server, replica: &Server) -> Option<u64> {
    let caught_up = wait_for("the replica to catch up", Duration::from_secs(60), || {
        let (Ok(mut m), Ok(mut r)) = (master.try_client(), replica.try_client()) else { return Ok(None) };
        let (Ok(mi), Ok(ri)) = (m.info("replication"), r.info("replication")) else { return Ok(None) };
        // Same history and same place in it: after a failover a replica still linked to the old
        // master (before that one resynced from the new one) may sit at the same byte offset in a
        // history that diverged; the replication ID tells them apart.
        let same_history = ri.get("master_replid").is_some() && ri.get("master_replid") == mi.get("master_replid");
        Ok((ri.get("master_link_status") == Some("up") && same_history && ri.num("slave_repl_offset").is_some() && ri.num("slave_repl_offset") == mi.num("master_repl_offset")).then_some(()))
    });
    caught_up.ok()?;
    let (mut m, mut r) = (master.try_client().ok()?, replica.try_client().ok()?);
    verify::compare(&mut m, &mut r, &verify::Options::default()).ok().map(|o| o.difference_count)
}

/// Run one cell: its hosts and servers up, the relay and both joins started, the fault struck in its
/// phase, every join waited for, then leaks looked for and each agent observed and judged.
pub fn run(cell: &Cell, setup: &Setup) -> Result<CellResult> {
    let t0 = Instant::now();
    if let Some(why) = cannot_run_here(cell)? {
        return Ok(CellResult::skipped(cell, why));
    }
    let store = match store_dir(cell, setup)? {
        Ok(store) => store,
        Err(why) => return Ok(CellResult::skipped(cell, why)),
    };
    let lab = Lab::new(4, None).map_err(|e| anyhow!("make namespace hosts: {e}"))?;
    let servers = Servers::start(cell, setup, &lab)?;
    let value_bytes = if cell.fault == Fault::LogOverflow { 8 << 10 } else { 32 };
    let (mns, maddr) = (servers.master.ns.clone(), servers.master.addr());
    let writer = Writer::start(Box::new(move || connect_in(mns.as_deref(), &maddr)), value_bytes);
    let mut w = World::start(setup, &lab, servers, relay_args(cell, setup, store.as_ref()), store)?;
    let mut result = CellResult::not_run(cell);
    result.relay_fds.0 = count_fds(w.relay.pid()).0;
    w.agents = [Some(w.spawn_join(0)), Some(w.spawn_join(1))];
    result.struck_in = w.wait_phase(cell.phase)?;
    let struck = Instant::now();
    w.strike(cell.fault, &writer)?;
    let mut obs = w.wait_joins();
    if let Some(t) = cell.fault.kills_agent() {
        let i = usize::from(t == Target::Peer);
        w.after_kill(i, &mut obs[i])?;
    }
    result.recovery_secs = w.exits[0].map_or(0.0, |(t, _)| t.saturating_duration_since(struck).as_secs_f64());
    w.take_outputs();
    result.writes = writer.stop();
    result.leaks = w.relay_leaks(&mut result.relay_fds.1, &mut result.relay_memfds);
    for (i, o) in obs.iter_mut().enumerate() {
        w.observe(cell, i, o);
    }
    result.attempts = attempts(&w.outputs[0]);
    if let Some(dir) = &setup.logs {
        w.keep_logs(cell, dir);
    }
    let masters = w.masters();
    result.a_verdict = judge(&obs[0], &masters);
    result.b_verdict = judge(&obs[1], &masters);
    if cell.fault.only_agent_a() {
        result.b_unaffected = Some(matches!(result.b_verdict, Verdict::Synced | Verdict::Native));
    }
    result.keys_lost = obs.iter().filter_map(|o| o.differences).sum();
    [result.a, result.b] = obs;
    result.secs = t0.elapsed().as_secs_f64();
    Ok(result)
}

/// Why the cell cannot run on this machine, if it cannot: a netem cell without netem.
fn cannot_run_here(cell: &Cell) -> Result<Option<&'static str>> {
    if let Fault::Netem(_) = cell.fault {
        if !fixtures::netns::netem_available().map_err(|e| anyhow!(e))? {
            return Ok(Some("this kernel has no netem qdisc (sch_netem)"));
        }
    }
    Ok(None)
}

/// A store cell's `--store` (none for other cells), or why it cannot be made here.
fn store_dir(cell: &Cell, setup: &Setup) -> Result<Result<Option<StoreDir>, &'static str>> {
    Ok(Ok(match cell.fault {
        // Half the snapshot: the capture fills it.
        Fault::Store(StoreFault::Full) => match fixtures::disk::SmallDisk::mount(&format!("{}m", (setup.mib / 2).max(1))) {
            Some(d) => Some(StoreDir::Small(d)),
            None => return Ok(Err("cannot mount a small tmpfs here (needs root and mount rights)")),
        },
        Fault::Store(_) => Some(StoreDir::Plain(tempfile::tempdir().context("a directory for the relay's store")?)),
        _ => None,
    }))
}

/// The relay's flags that set a cell's fault up (a small log bound, a small snapshot bound, few
/// connections, a store).
fn relay_args(cell: &Cell, setup: &Setup, store: Option<&StoreDir>) -> Vec<String> {
    match cell.fault {
        Fault::LogOverflow => vec!["--log-max-bytes".into(), "262144".into()],
        Fault::SnapshotTooBig => vec!["--snapshot-max-bytes".into(), ((setup.mib as u64) << 19).to_string()],
        Fault::OutOfConnections => vec!["--connections-max".into(), "10".into()],
        Fault::Store(_) => vec!["--store".into(), store.map(|d| d.path().to_string_lossy().into_owned()).unwrap_or_default()],
        _ => Vec::new(),
    }
}

/// A cell's servers: the master (filled, producing its RDB slowly), the failover's spare replica,
/// and the two replicas (loading slowly).
struct Servers {
    master: Server,
    spare: Option<Server>,
    replicas: [Server; 2],
}

impl Servers {
    /// Started on `lab`'s hosts (master and spare on host 0, the replicas on hosts 2 and 3), the
    /// master filled and the spare in sync with it.
    fn start(cell: &Cell, setup: &Setup, lab: &Lab) -> Result<Servers> {
        let keys = (setup.mib * 16).max(64);
        // The capture takes ~1.5 s and the load ~3 s whatever the size, so each phase can be struck.
        let save_delay = (1_500_000 / keys).to_string();
        let load_delay = (3_000_000 / keys).to_string();
        let h = |i: usize| (Some(lab.hosts[i].ns.as_str()), lab.hosts[i].ip.as_str());
        let start = |i: usize, extra: &[&str]| Server::try_start_in(setup.flavor, h(i).0, h(i).1, extra).map_err(|e| anyhow!(e));
        let master = start(0, &["--rdb-key-save-delay", &save_delay])?;
        fixtures::data::fill_big_values(&mut master.try_client()?, keys, 64 << 10);
        fixtures::data::fill_every_type(&mut master.try_client()?, 1, setup.flavor.has_functions());
        let spare = if cell.fault == Fault::Failover {
            let s = start(0, &[])?;
            s.try_client()?.cmd(&["REPLICAOF", &master.host, &master.port.to_string()])?;
            wait_for("the spare replica to sync", Duration::from_secs(60), || Ok(s.try_client()?.info("replication")?.get("master_link_status").is_some_and(|l| l == "up").then_some(())))?;
            Some(s)
        } else {
            None
        };
        let replicas = [start(2, &["--key-load-delay", &load_delay])?, start(3, &["--key-load-delay", &load_delay])?];
        Ok(Servers { master, spare, replicas })
    }
}

impl<'a> World<'a> {
    /// The cell's world with its relay started and listening (no agent yet).
    fn start(setup: &'a Setup, lab: &'a Lab, servers: Servers, relay_args: Vec<String>, store: Option<StoreDir>) -> Result<World<'a>> {
        let Servers { master, spare, replicas } = servers;
        let relay_addr = format!("{}:{}", lab.hosts[1].ip, fixtures::free_port());
        let real_master = master.addr();
        let mut w = World {
            setup,
            lab,
            master,
            spare,
            real_master,
            replicas,
            relay: Proc::spawn("placeholder", Command::new("true")),
            relay_addr,
            relay_args,
            agents: [None, None],
            exits: [None, None],
            outputs: [String::new(), String::new()],
            events: tempfile::tempdir().context("a directory for the event streams")?,
            store,
        };
        w.relay = w.spawn_relay();
        wait_for("the relay to start", Duration::from_secs(20), || Ok(w.relay.output().contains("relay started").then_some(())))?;
        Ok(w)
    }
}

impl World<'_> {
    /// Wait for both joins (a join still running at the deadline is killed, and counted hung); what
    /// each agent's exit was.
    fn wait_joins(&mut self) -> [Observed; 2] {
        let all_done = wait_for("both joins to end", JOIN_DEADLINE, || Ok(self.poll_exits().then_some(())));
        for i in 0..2 {
            if self.exits[i].is_none() {
                if let Some(p) = self.agents[i].as_mut() {
                    p.kill();
                }
                self.exits[i] = Some((Instant::now(), Some(-1)));
            }
        }
        let hung = all_done.is_err();
        let mut obs = [Observed::default(), Observed::default()];
        for (o, exit) in obs.iter_mut().zip(&self.exits) {
            let (_, code) = exit.expect("recorded above");
            o.exit = code;
            o.hung = hung && code == Some(-1);
        }
        obs
    }

    /// The joins' outputs, from agents still held (a killed agent's was taken when it was re-run).
    fn take_outputs(&mut self) {
        for i in 0..2 {
            if let Some(p) = self.agents[i].take() {
                self.outputs[i] = p.output();
            }
        }
    }

    /// What the relay left once every agent left: sealed generations must be freed (its fds and
    /// memfds after, into `fds` and `memfds`), it must still run, and a store must hold at most the
    /// generation still held. The leaks found.
    fn relay_leaks(&mut self, fds: &mut u64, memfds: &mut u64) -> Vec<String> {
        let mut leaks = Vec::new();
        let relay_pid = self.relay.pid();
        *memfds = wait_for("the relay to free sealed generations", Duration::from_secs(10), || {
            let (_, m) = count_fds(relay_pid);
            Ok((m <= 1).then_some(m))
        })
        .unwrap_or_else(|_| count_fds(relay_pid).1);
        *fds = count_fds(relay_pid).0;
        if *memfds > 1 {
            leaks.push(format!("the relay holds {memfds} memfds after every agent left"));
        }
        if !self.relay.running() {
            leaks.push("the relay exited".into());
        }
        if let Some(store) = &self.store {
            // A failed generation's files go with its last reader: at most the generation still held.
            let files = wait_for("the relay to remove released generations' files", Duration::from_secs(10), || {
                let files = store.generation_files()?;
                Ok((files.len() <= 2).then_some(files))
            })
            .unwrap_or_else(|_| store.generation_files().unwrap_or_default());
            if files.len() > 2 {
                leaks.push(format!("the store holds {} files after every agent left: {files:?}", files.len()));
            }
        }
        leaks
    }

    /// The master the replicas must follow in the end: the spare after a failover.
    fn master_server(&self) -> &Server {
        if self.spare.as_ref().is_some_and(|s| s.addr() == self.real_master) {
            self.spare.as_ref().expect("checked")
        } else {
            &self.master
        }
    }

    /// Agent `i` as the cell left it, into `o`: the join's own account of a failure, its replica's
    /// role, master and keys, and, where the join claims a sync, how the replica differs from the
    /// master.
    fn observe(&self, cell: &Cell, i: usize, o: &mut Observed) {
        // The join's own account of a failure: `{"ok": false, "error", "attempts", "handed_over"}`.
        let report = last_json(&self.outputs[i]).unwrap_or_default();
        o.message = report["error"].as_str().unwrap_or_default().to_string();
        o.handed_over = report["handed_over"] == true;
        let (role, following, keys) = replica_state(&self.replicas[i]);
        (o.role, o.following, o.replica_keys) = (role, following, keys);
        if i == 0 && cell.fault == Fault::Kill(Target::Replica) && cell.phase == Phase::After && o.exit == Some(0) {
            // The join handed over, then the fault erased the replica: nothing left to compare.
            o.replica_lost_after_handoff = true;
        }
        let killed_after_handoff = o.exit.is_none() && !o.after_kill_following.is_empty();
        let claims_sync = !o.replica_lost_after_handoff && (matches!(o.exit, Some(0) | Some(3)) || matches!(o.rerun_exit, Some(0) | Some(3)) || killed_after_handoff);
        if claims_sync {
            o.differences = compare(self.master_server(), &self.replicas[i]);
        }
    }

    /// The cell's logs into `dir`: each join's output, the relay's, and every event stream (a log
    /// that cannot be kept is skipped).
    fn keep_logs(&self, cell: &Cell, dir: &Path) {
        let _ = std::fs::create_dir_all(dir);
        for (i, out) in self.outputs.iter().enumerate() {
            let _ = std::fs::write(dir.join(format!("{}.agent-{}.log", cell.name(), if i == 0 { "a" } else { "b" })), out);
        }
        let _ = std::fs::write(dir.join(format!("{}.relay.log", cell.name())), self.relay.output());
        for (from, to) in [(self.relay_events_path(), "relay"), (self.agent_events_path(0), "agent-a"), (self.agent_events_path(1), "agent-b")] {
            let _ = std::fs::copy(from, dir.join(format!("{}.{to}.events.jsonl", cell.name())));
        }
    }

    /// The masters a replica may rightly follow: the real one, and after the failover the old master
    /// too if it now replicates from the new one.
    fn masters(&self) -> Vec<String> {
        let mut masters = vec![self.real_master.clone()];
        if self.real_master != self.master.addr() {
            let (role, follows, _) = replica_state(&self.master);
            if role == SeenRole::Replica && follows == self.real_master {
                masters.push(self.master.addr());
            }
        }
        masters
    }
}
