//! `fastrepl-lab soak`: many joins against one relay, with a writer on the master, to show that the
//! relay does not leak: its RSS, open fds and memfds (one per live snapshot generation) must stay
//! flat however many agents came and went, while generations are sealed (a small `--log-max-bytes`)
//! and captured anew. Every join is verified against the master (the writer pauses while a replica
//! is compared, so the comparison sees a still dataset).

use crate::faults::writer::Writer;
use anyhow::{anyhow, bail, Context, Result};
use fixtures::{Flavor, Proc, Server};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// `fastrepl-lab soak`.
#[derive(clap::Args, Debug)]
pub struct SoakArgs {
    /// Joins in all.
    #[arg(long, default_value_t = 200)]
    pub joins: usize,
    /// Joins at once (one replica server each).
    #[arg(long, default_value_t = 4)]
    pub concurrency: usize,
    /// Run a writer against the master throughout.
    #[arg(long)]
    pub writes: bool,
    /// Dataset, MiB.
    #[arg(long, default_value_t = 8)]
    pub mib: usize,
    /// The relay's `--log-max-bytes`: small, so generations are sealed and captured again during the run.
    #[arg(long, default_value_t = 65_536)]
    pub log_max_bytes: u64,
    /// Server build.
    #[arg(long, default_value = "redis-7.0")]
    pub flavor: String,
    /// Where results.json and results.md go.
    #[arg(long, default_value = "docs/results/soak")]
    pub out: PathBuf,
}

/// One join of the soak.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JoinRow {
    /// Its number (in order of completion).
    pub n: usize,
    /// The join's exit code.
    pub exit: Option<i32>,
    /// Its snapshot generation.
    pub generation: u64,
    /// Seconds it took.
    pub secs: f64,
    /// Keys that differed from the master once caught up (None: not compared).
    pub differences: Option<u64>,
    /// The relay after it: RSS (KiB), open fds, memfds.
    pub relay_rss_kib: u64,
    /// Open fds.
    pub relay_fds: u64,
    /// memfds (live generations).
    pub relay_memfds: u64,
}

/// What `results.json` holds.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SoakResults {
    /// The command's settings.
    pub settings: serde_json::Value,
    /// Every join.
    pub joins: Vec<JoinRow>,
    /// The relay once every agent left (RSS KiB, fds, memfds), at the start and at the end.
    pub relay_idle: [(u64, u64, u64); 2],
    /// Generations the relay captured.
    pub generations: u64,
    /// Writer batches acknowledged.
    pub writes: u64,
    /// The one-line summary.
    pub summary: String,
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status")).ok().and_then(|s| s.lines().find(|l| l.starts_with("VmRSS:")).and_then(|l| l.split_whitespace().nth(1)?.parse().ok())).unwrap_or(0)
}

fn relay_state(pid: u32) -> (u64, u64, u64) {
    let (fds, memfds) = crate::faults::cell::count_fds(pid);
    (rss_kib(pid), fds, memfds)
}

/// The relay idle: wait (bounded) until it holds at most one generation and no more fds than
/// `fds_before` (agents' connections closed), then sample it.
fn idle_state(pid: u32, fds_before: u64) -> (u64, u64, u64) {
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        let s = relay_state(pid);
        if (s.2 <= 1 && s.1 <= fds_before) || Instant::now() > until {
            return s;
        }
        std::thread::sleep(Duration::from_millis(50)); // Waiting for sealed generations to be freed, with a deadline.
    }
}

/// Run the soak; fails if a join failed or was wrong, or the relay grew.
pub fn run(a: SoakArgs) -> Result<SoakResults> {
    let flavor = Flavor::parse(&a.flavor).ok_or_else(|| anyhow!("unknown flavor {:?}", a.flavor))?;
    if a.concurrency == 0 || a.joins == 0 {
        bail!("--joins and --concurrency must be at least 1");
    }
    let exe = crate::fastrepl_bin()?;
    fixtures::children_die_with_parent(true);
    let t0 = Instant::now();
    let master = Server::try_start(flavor, &[]).map_err(|e| anyhow!(e))?;
    fixtures::data::fill_big_values(&mut master.try_client()?, a.mib * 16, 64 << 10);
    fixtures::data::fill_every_type(&mut master.try_client()?, 1, flavor.has_functions());
    let replicas: Vec<Server> = (0..a.concurrency).map(|_| Server::try_start(flavor, &[]).map_err(|e| anyhow!(e))).collect::<Result<_>>()?;
    let token = "soak-token-0123456789abcdef";
    let relay_addr = format!("127.0.0.1:{}", fixtures::free_port());
    let mut cmd = std::process::Command::new(&exe);
    cmd.args(["relay", "--master", &master.addr(), "--listen", &relay_addr, "--log-max-bytes", &a.log_max_bytes.to_string()]).env("FASTREPL_TOKEN", token).env("FASTREPL_LOG", "info");
    let relay = Proc::spawn("relay", cmd);
    let until = Instant::now() + Duration::from_secs(30);
    while !relay.output().contains("snapshot complete") {
        if Instant::now() > until {
            bail!("the relay did not capture its first snapshot:\n{}", relay.output());
        }
        std::thread::sleep(Duration::from_millis(20)); // Waiting for the first capture, with a deadline.
    }
    let relay_pid = relay.pid();
    let idle_start = idle_state(relay_pid, u64::MAX);
    let maddr = master.addr();
    let writer = a.writes.then(|| Writer::start(Box::new(move || Ok(client::Client::connect(&maddr, None, Duration::from_secs(5))?)), 32));
    // Verifiers pause the writer; each waits for fresh writes first, so writes go on between them.
    let gate = writer.as_ref().map(|w| Pause { gate: w.gate.clone(), acked: w.acked.clone(), mark: Arc::new(AtomicU64::new(0)) });
    let next = AtomicUsize::new(0);
    let rows = Mutex::new(Vec::new());
    let failure: Mutex<Option<String>> = Mutex::new(None);
    std::thread::scope(|sc| {
        for replica in &replicas {
            let (exe, relay_addr, master, next, rows, failure, gate) = (&exe, &relay_addr, &master, &next, &rows, &failure, gate.clone());
            sc.spawn(move || {
                while next.fetch_add(1, Ordering::SeqCst) < a.joins && failure.lock().unwrap_or_else(|p| p.into_inner()).is_none() {
                    if let Err(e) = one_join(exe, relay_addr, token, master, replica, gate.as_ref(), relay_pid, rows) {
                        *failure.lock().unwrap_or_else(|p| p.into_inner()) = Some(format!("{e:#}"));
                    }
                }
            });
        }
    });
    let writes = writer.map_or(0, Writer::stop);
    let idle_end = idle_state(relay_pid, idle_start.1);
    let generations = relay.output().matches("snapshot complete").count() as u64;
    let joins = rows.into_inner().unwrap_or_else(|p| p.into_inner());
    let ok = joins.iter().filter(|r| r.exit == Some(0) && r.differences == Some(0)).count();
    let summary = format!(
        "{} joins ({} at once{}): {ok} verified identical; {generations} generations captured; relay idle before → after: RSS {} → {} MiB, fds {} → {}, memfds {} → {}",
        joins.len(),
        a.concurrency,
        if a.writes { ", writer running" } else { "" },
        idle_start.0 >> 10,
        idle_end.0 >> 10,
        idle_start.1,
        idle_end.1,
        idle_start.2,
        idle_end.2
    );
    let results = SoakResults {
        settings: serde_json::json!({"joins": a.joins, "concurrency": a.concurrency, "writes": a.writes, "mib": a.mib,
            "log_max_bytes": a.log_max_bytes, "flavor": a.flavor, "secs": t0.elapsed().as_secs_f64()}),
        joins,
        relay_idle: [idle_start, idle_end],
        generations,
        writes,
        summary: summary.clone(),
    };
    std::fs::create_dir_all(&a.out)?;
    std::fs::write(a.out.join("results.json"), serde_json::to_string_pretty(&results)?)?;
    std::fs::write(a.out.join("results.md"), markdown(&results))?;
    println!("{summary}");
    if let Some(f) = failure.into_inner().unwrap_or_else(|p| p.into_inner()) {
        bail!("a join failed: {f}");
    }
    if ok != results.joins.len() {
        bail!("{} of {} joins were not verified identical", results.joins.len() - ok, results.joins.len());
    }
    // Flat: after the run the idle relay holds no more generations, fds or memory than a little over
    // what it held before (a new generation's log and the allocator's slack).
    if idle_end.2 > idle_start.2.max(1) || idle_end.1 > idle_start.1 + 4 || idle_end.0 > idle_start.0 + (64 << 10) {
        bail!("the relay grew: {summary}");
    }
    Ok(results)
}

/// Pausing the writer to compare a still dataset, fairly: a verifier first waits until the writer
/// got [`WRITES_BETWEEN_PAUSES`] batches in since the last pause (bounded), so concurrent verifiers
/// cannot starve it.
#[derive(Clone)]
struct Pause {
    gate: Arc<Mutex<()>>,
    acked: Arc<AtomicU64>,
    mark: Arc<AtomicU64>,
}

const WRITES_BETWEEN_PAUSES: u64 = 50;

impl Pause {
    fn while_paused<T>(&self, f: impl FnOnce() -> T) -> T {
        let until = Instant::now() + Duration::from_secs(5);
        while self.acked.load(Ordering::SeqCst) < self.mark.load(Ordering::SeqCst) + WRITES_BETWEEN_PAUSES && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(5)); // Letting the writer in, with a deadline.
        }
        let _paused = self.gate.lock().unwrap_or_else(|p| p.into_inner());
        let out = f();
        self.mark.store(self.acked.load(Ordering::SeqCst), Ordering::SeqCst);
        out
    }
}

/// Reset the replica, join it, verify it; record the relay's state.
#[allow(clippy::too_many_arguments)]
fn one_join(exe: &std::path::Path, relay: &str, token: &str, master: &Server, replica: &Server, gate: Option<&Pause>, relay_pid: u32, rows: &Mutex<Vec<JoinRow>>) -> Result<()> {
    let mut c = replica.try_client()?;
    c.cmd(&["REPLICAOF", "NO", "ONE"])?;
    c.cmd(&["FLUSHALL"])?;
    let t = Instant::now();
    let mut cmd = std::process::Command::new(exe);
    cmd.args(["join", "--relay", relay, "--replica", &replica.addr(), "--json", "--serve-linger-secs", "0"]).env("FASTREPL_TOKEN", token).env("FASTREPL_LOG", "warn");
    let out = cmd.output().context("run fastrepl join")?;
    let secs = t.elapsed().as_secs_f64();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let report: serde_json::Value = stdout.lines().rev().find_map(|l| serde_json::from_str(l).ok()).unwrap_or_default();
    let exit = out.status.code();
    let differences = if exit == Some(0) {
        match gate {
            Some(p) => p.while_paused(|| crate::faults::cell::compare(master, replica)),
            None => crate::faults::cell::compare(master, replica),
        }
    } else {
        None
    };
    let (rss, fds, memfds) = relay_state(relay_pid);
    let mut rows = rows.lock().unwrap_or_else(|p| p.into_inner());
    let n = rows.len() + 1;
    rows.push(JoinRow { n, exit, generation: report["generation"].as_u64().unwrap_or(0), secs, differences, relay_rss_kib: rss, relay_fds: fds, relay_memfds: memfds });
    if exit != Some(0) || differences != Some(0) {
        bail!("join {n} exited {exit:?}, differences {differences:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(())
}

fn markdown(r: &SoakResults) -> String {
    let mut s = format!(
        "# Soak\n\n**{}**\n\nSettings: `{}`. Reproduce: `fastrepl-lab soak --joins {} --concurrency {}{}` (raw: results.json).\n\n",
        r.summary,
        r.settings,
        r.settings["joins"],
        r.settings["concurrency"],
        if r.settings["writes"].as_bool() == Some(true) { " --writes" } else { "" }
    );
    s.push_str("The relay after every tenth join (while other joins run):\n\n| join | generation | secs | relay RSS (MiB) | fds | memfds |\n|---:|---:|---:|---:|---:|---:|\n");
    for j in r.joins.iter().filter(|j| j.n % 10 == 0 || j.n == 1) {
        s.push_str(&format!("| {} | {} | {:.2} | {:.1} | {} | {} |\n", j.n, j.generation, j.secs, j.relay_rss_kib as f64 / 1024.0, j.relay_fds, j.relay_memfds));
    }
    s.push_str(&format!(
        "\nIdle (every agent gone) before the first join and after the last: RSS {:.1} → {:.1} MiB, fds {} → {}, memfds {} → {}.\n",
        r.relay_idle[0].0 as f64 / 1024.0,
        r.relay_idle[1].0 as f64 / 1024.0,
        r.relay_idle[0].1,
        r.relay_idle[1].1,
        r.relay_idle[0].2,
        r.relay_idle[1].2
    ));
    s
}
