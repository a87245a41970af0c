//! Measured runs. Per link: one lab (master host + replica hosts), one master filled once; then per
//! replica count and mode one run with fresh replicas (and, for fastrepl, a fresh relay, so every
//! fastrepl run includes taking the snapshot). Each run is verified; a run that does not verify is
//! reported as failed and not timed.

use crate::bench::scenario::{Arrival, Dataset, Spec};
use crate::bench::BenchArgs;
use anyhow::{anyhow, bail, Context, Result};
use fixtures::netns::Lab;
use fixtures::{Flavor, Proc, Server};
use serde::{Deserialize, Serialize};
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One run's measurements. Fields added after a results file was written read as their defaults.
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct RunResult {
    /// Scenario name.
    pub scenario: String,
    /// Egress rate of every host (`unshaped`, `1gbit`, ...).
    pub link: String,
    /// Replicas synced.
    pub replicas: usize,
    /// Mode.
    pub mode: String,
    /// Which of the `--repeat` runs of this (link, N, mode) this is, from 0.
    pub repeat: u32,
    /// Every replica matched the master afterwards.
    pub verified: bool,
    /// Why the run failed, if it did (then it is not timed).
    pub error: Option<String>,
    /// Seconds from the start (REPLICAOF, or starting the relay) until every replica was in sync.
    pub secs: Option<f64>,
    /// Seconds until each replica was in sync.
    pub per_replica: Vec<f64>,
    /// Per replica: phase end times (seconds from the run's start).
    pub phases: Vec<serde_json::Value>,
    /// The master's fork children (RDB to disk, to replicas' sockets, or to the relay): start and end,
    /// seconds from the run's start, as seen by polling `INFO persistence` every 20 ms (an end of
    /// `null`: still running 30 s after the replicas were in sync).
    #[serde(deserialize_with = "spans")]
    pub master_rdb: Vec<[f64; 2]>,
    /// CPU seconds of the master: main process and its fork children (reaped) during the run.
    pub master_cpu_secs: f64,
    /// `total_forks` on the master during the run.
    pub forks: i64,
    /// Bytes sent by the master host's interface during the run (namespace hosts only).
    pub master_host_tx_bytes: Option<u64>,
    /// CPU seconds of the relay (fastrepl modes).
    pub relay_cpu_secs: Option<f64>,
    /// CPU seconds of all agents together (fastrepl modes).
    pub agent_cpu_secs: Option<f64>,
    /// Peak memory, KiB: RSS of the master (during the run), relay, largest agent, largest replica;
    /// and PSS (sampled peaks) of the relay and the largest agent, which count shared mappings by share.
    pub peak_rss_kib: serde_json::Value,
    /// GET/SET latency on the master during the sync (under-load): p50, p99, max in ms, and count.
    pub latency_ms: Option<serde_json::Value>,
    /// Handoffs (fastrepl): partial / full per replica.
    pub handoffs: Vec<String>,
    /// Bytes sent by each replica host's interface during the run (namespace hosts only): with
    /// fastrepl, what each agent served its peers.
    pub replica_hosts_tx_bytes: Vec<u64>,
    /// The snapshot's RDB bytes (fastrepl: from the agents' reports).
    pub rdb_bytes: Option<u64>,
    /// RDB bytes the agents got from each other rather than from the relay (fastrepl).
    pub bytes_from_peers: Option<u64>,
    /// The replica (0-based) killed mid-sync (`agent-killed`): not verified, not timed.
    pub killed: Option<usize>,
    /// `total_forks` on the capture source replica during the run (from-replica modes).
    pub source_forks: Option<i64>,
    /// CPU seconds of the source replica, fork children included (from-replica modes).
    pub source_cpu_secs: Option<f64>,
    /// The master's and the replicas' hosts' links through the run (namespace hosts only).
    pub links: Option<LinkSeries>,
    /// The master's `sync_full` during the run: full syncs it served (the relay's capture is one).
    pub full_syncs: Option<i64>,
    /// Replica links the master closed for overcoming their output-buffer limit during the run
    /// (counted in its log: not every version has it in INFO).
    pub output_buffer_disconnects: Option<u64>,
    /// A native run given up, not in sync after this many seconds (`give_up_secs`): not verified,
    /// not timed, and not a failure of the bench; the counts above say what the master did. (A
    /// fastrepl run that outlives it fails.)
    pub gave_up_secs: Option<f64>,
    /// The writer's achieved rate through the run, MB/s of values (scenarios with writes).
    pub writes_mb_s: Option<f64>,
}

/// A run that was not in sync by its scenario's `give_up_secs`.
#[derive(Debug)]
pub struct GaveUp {
    /// Seconds from the run's start.
    pub secs: f64,
}

impl std::fmt::Display for GaveUp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "not in sync after {:.0} s: given up", self.secs)
    }
}

impl std::error::Error for GaveUp {}

/// What the master logs when it closes a client for its output buffer (Redis 6.2 to 8.2, Valkey:
/// `networking.c`, "scheduled to be closed ASAP for overcoming of output buffer limits").
const OUTPUT_BUFFER_CLOSED: &str = "for overcoming of output buffer limits";

/// Hosts' links sampled through a run: how busy each link was when (see `report::link_table`).
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct LinkSeries {
    /// The master's host's link rate, bytes per second (None: unshaped).
    pub rate_bytes_per_sec: Option<f64>,
    /// Every host's link rate (0: the master's), bytes per second; empty when unshaped (and in sets
    /// written before it was recorded: every link then has the master's rate).
    pub host_rates_bytes_per_sec: Vec<f64>,
    /// Each sample's time, seconds from the run's start.
    pub secs: Vec<f64>,
    /// Per sample, per host (0: the master's, i: replica i's): bytes sent since the run's start.
    pub sent: Vec<Vec<u64>>,
    /// Per sample, per host: bytes received since the run's start.
    pub received: Vec<Vec<u64>>,
}

/// How often links are sampled during a run.
const LINK_SAMPLE_EVERY: Duration = Duration::from_millis(250);

/// `master_rdb` as written: an end still unknown is `null` in JSON (NaN in memory).
fn spans<'de, D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Vec<[f64; 2]>, D::Error> {
    let raw: Vec<[Option<f64>; 2]> = Deserialize::deserialize(d)?;
    Ok(raw.into_iter().map(|[a, b]| [a.unwrap_or(f64::NAN), b.unwrap_or(f64::NAN)]).collect())
}

/// Run every (link, replica count, mode) of a scenario.
pub fn scenario(spec: &Spec, args: &BenchArgs, flavor: Flavor, exe: &Path) -> Result<Vec<RunResult>> {
    let mut out = Vec::new();
    let max_n = *spec.replicas.iter().max().unwrap_or(&1);
    for link in &spec.links {
        let link_name = link.clone().unwrap_or_else(|| "unshaped".into());
        let lab = if spec.netns {
            // Host 0 (master, relay) and the replica hosts at the link's rate, but the first
            // `slow_hosts` replica hosts slower (the last ones with `slow_last`).
            let slow = if spec.slow_last { (max_n + 1).saturating_sub(spec.slow_hosts).max(1)..=max_n } else { 1..=spec.slow_hosts };
            let rates: Vec<Option<String>> = (0..=max_n)
                .map(|i| match link {
                    Some(l) if slow.contains(&i) => fixtures::netns::scale_rate(l, spec.slow_factor).map(Some),
                    other => Ok(other.clone()),
                })
                .collect::<Result<_, _>>()
                .map_err(|e| anyhow!(e))?;
            Some(Lab::with_rates(&rates).map_err(|e| anyhow!("make namespace hosts: {e}"))?)
        } else {
            None
        };
        let host = |i: usize| -> (Option<String>, String) {
            match &lab {
                Some(l) => (Some(l.hosts[i].ns.clone()), l.hosts[i].ip.clone()),
                None => (None, "127.0.0.1".into()),
            }
        };
        let (mns, mip) = host(0);
        let master = Server::try_start_in(flavor, mns.as_deref(), &mip, &["--repl-backlog-size", &spec.master_backlog]).map_err(|e| anyhow!("start master: {e}"))?;
        let t = Instant::now();
        fill(&master, &spec.dataset, flavor)?;
        println!("-- link {link_name}: master {} filled in {:.1} s ({})", master.addr(), t.elapsed().as_secs_f64(), used_memory(&master));
        // A standing replica of the master on its host, for the relay to capture from.
        let source = if spec.modes.iter().any(|m| crate::bench::scenario::from_replica(m)) { Some(source_replica(&master, flavor, mns.as_deref(), &mip)?) } else { None };
        for &n in &spec.replicas {
            for repeat in 0..args.repeat {
                for mode in &spec.modes {
                    let ctx = Ctx { spec, args, flavor, exe, lab: lab.as_ref(), master: &master, source: source.as_ref(), n, mode, link: &link_name, repeat };
                    let mut r = match one(&ctx) {
                        Ok(r) => r,
                        Err(e) => RunResult { scenario: spec.name.clone(), link: link_name.clone(), replicas: n, mode: mode.clone(), error: Some(format!("{e:#}")), ..Default::default() },
                    };
                    r.repeat = repeat;
                    print_line(&r);
                    out.push(r);
                }
            }
        }
    }
    Ok(out)
}

fn print_line(r: &RunResult) {
    if let Some(g) = r.gave_up_secs {
        println!(
            "   {:<8} N={} {:<16} gave up: not in sync after {g:.0} s; the master served {} full sync(s), closed {} replica link(s) for their output buffer",
            r.link,
            r.replicas,
            r.mode,
            r.full_syncs.unwrap_or(0),
            r.output_buffer_disconnects.unwrap_or(0)
        );
        return;
    }
    match (&r.error, r.secs) {
        (None, Some(s)) => println!(
            "   {:<8} N={} {:<16} {:>7.2} s  forks {}  master CPU {:.2} s{}{}  verified",
            r.link,
            r.replicas,
            r.mode,
            s,
            r.forks,
            r.master_cpu_secs,
            match (r.source_forks, r.source_cpu_secs) {
                (Some(f), Some(c)) => format!("  source forks {f}, CPU {c:.2} s"),
                _ => String::new(),
            },
            r.master_host_tx_bytes.map(|b| format!("  master sent {:.0} MB", b as f64 / 1e6)).unwrap_or_default()
        ),
        (e, _) => println!("   {:<8} N={} {:<16} FAILED: {}", r.link, r.replicas, r.mode, e.clone().unwrap_or_default()),
    }
}

struct Ctx<'a> {
    spec: &'a Spec,
    args: &'a BenchArgs,
    flavor: Flavor,
    exe: &'a Path,
    lab: Option<&'a Lab>,
    master: &'a Server,
    /// A replica of the master to capture from (from-replica modes).
    source: Option<&'a Server>,
    n: usize,
    mode: &'a str,
    link: &'a str,
    /// Which of the `--repeat` runs this is, from 0.
    repeat: u32,
}

impl Ctx<'_> {
    /// With `FASTREPL_BENCH_KEEP_LOGS=DIR`, keep a process's log of this run as
    /// `DIR/{scenario}-{link}-n{N}-{mode}-r{run}-{what}.log` (for investigating a run: every repeat's,
    /// the directory made if missing). A log that cannot be kept is said, not fatal.
    fn keep_log(&self, what: &str, text: &[u8]) {
        let Some(dir) = std::env::var_os("FASTREPL_BENCH_KEEP_LOGS") else { return };
        let path = Path::new(&dir).join(kept_log_name(&self.spec.name, self.link, self.n, self.mode, self.repeat, what));
        if let Err(e) = std::fs::create_dir_all(&dir).and_then(|_| std::fs::write(&path, text)) {
            eprintln!("   (could not keep {}: {e})", path.display());
        }
    }

    fn host(&self, i: usize) -> (Option<String>, String) {
        match self.lab {
            Some(l) => (Some(l.hosts[i].ns.clone()), l.hosts[i].ip.clone()),
            None => (None, "127.0.0.1".into()),
        }
    }
    /// A command for our binary, inside host `i`'s namespace.
    fn fastrepl_on(&self, i: usize) -> Command {
        match self.host(i).0 {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", &ns]).arg(self.exe);
                c
            }
            None => Command::new(self.exe),
        }
    }
}

/// A kept log's file name: `{scenario}-{link}-n{N}-{mode}-r{run}-{what}.log`, `run` counted from 1,
/// so that each of `--repeat`'s runs keeps its own.
fn kept_log_name(scenario: &str, link: &str, n: usize, mode: &str, repeat: u32, what: &str) -> String {
    format!("{scenario}-{link}-n{n}-{mode}-r{}-{what}.log", repeat + 1)
}

/// Start a replica of `master` on its host and wait until it is in sync.
fn source_replica(master: &Server, flavor: Flavor, ns: Option<&str>, ip: &str) -> Result<Server> {
    let port = master.port.to_string();
    let s = Server::try_start_in(flavor, ns, ip, &["--replicaof", &master.host, &port, "--repl-backlog-size", "512mb"]).map_err(|e| anyhow!("start the source replica: {e}"))?;
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let i = s.try_client()?.info("replication")?;
        if i.get("master_link_status") == Some("up") && i.num("master_sync_in_progress") == Some(0) {
            println!("   source replica {} in sync", s.addr());
            return Ok(s);
        }
        if Instant::now() > deadline {
            bail!("the source replica did not sync within 10 minutes");
        }
        std::thread::sleep(Duration::from_millis(100)); // Polling a condition with a deadline.
    }
}

fn fill(master: &Server, d: &Dataset, flavor: Flavor) -> Result<()> {
    let mut c = master.try_client()?;
    match *d {
        Dataset::BigValues { count, size } => fixtures::data::fill_big_values(&mut c, count, size),
        Dataset::SmallValues { count, size } => fixtures::data::fill_small_values(&mut c, count, size),
        Dataset::Realistic { keys } => fixtures::cache_data::fill(&mut c, keys, 44).map_err(|e| anyhow!(e))?,
        Dataset::Mixed { small, big_mib } => {
            fixtures::data::fill_big_values(&mut c, big_mib.div_ceil(4), 4 << 20);
            fixtures::data::fill_small_mixed(&mut c, small);
            fixtures::data::fill_every_type(&mut c, 1, flavor.has_functions());
        }
    }
    Ok(())
}

fn used_memory(s: &Server) -> String {
    s.try_client().ok().and_then(|mut c| c.info("memory").ok()).and_then(|i| i.get("used_memory_human").map(str::to_string)).unwrap_or_default()
}

/// Reset a process's peak RSS to its current RSS (so a long-lived master's peak is per run).
fn reset_peak_rss(pid: u32) {
    let _ = std::fs::write(format!("/proc/{pid}/clear_refs"), "5");
}

/// An integer field of `INFO <section>`, or an error naming it.
pub fn stat(c: &mut client::Client, section: &str, k: &str) -> Result<i64> {
    c.info(section)?.num(k).with_context(|| format!("INFO {section} has no {k}"))
}

/// Wait until the master has no RDB child (the previous run's BGSAVE may still be finishing).
fn master_quiet(m: &mut client::Client) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(600);
    while stat(m, "persistence", "rdb_bgsave_in_progress")? != 0 {
        if Instant::now() > deadline {
            bail!("the master's RDB child did not finish within 10 minutes");
        }
        std::thread::sleep(Duration::from_millis(50)); // Polling the master's state with a deadline.
    }
    Ok(())
}

/// A sampling thread that runs until told to stop and then hands back what it collected.
/// Dropped unfinished (a run that ended early), it is told to stop: it must not sample past its run.
struct Sampler<T> {
    stop: Arc<AtomicBool>,
    handle: Option<std::thread::JoinHandle<T>>,
}

impl<T: Send + Default + 'static> Sampler<T> {
    fn spawn(f: impl FnOnce(&AtomicBool) -> T + Send + 'static) -> Sampler<T> {
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        Sampler { stop, handle: Some(std::thread::spawn(move || f(&s))) }
    }
    fn finish(mut self) -> T {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.take().and_then(|h| h.join().ok()).unwrap_or_default()
    }
}

impl<T> Drop for Sampler<T> {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Watches the master's `rdb_bgsave_in_progress`: when each fork child (the RDB writer, whatever it
/// writes to) started and ended, relative to `t0`. This is the "snapshot" phase of every mode,
/// measured the same way for all of them.
fn watch_rdb(master: &Server, t0: Instant) -> Result<Sampler<Vec<[f64; 2]>>> {
    let mut c = master.try_client()?;
    Ok(Sampler::spawn(move |stop| {
        let mut spans: Vec<[f64; 2]> = Vec::new();
        let mut open: Option<f64> = None;
        let mut stop_seen: Option<Instant> = None;
        loop {
            if stop.load(Ordering::Relaxed) && stop_seen.is_none() {
                stop_seen = Some(Instant::now());
            }
            let Ok(busy) = stat(&mut c, "persistence", "rdb_bgsave_in_progress") else { break };
            let now = t0.elapsed().as_secs_f64();
            match (open, busy == 1) {
                (None, true) => open = Some(now),
                (Some(start), false) => {
                    spans.push([start, now]);
                    open = None;
                }
                _ => {}
            }
            // A replica can be in sync before the master has reaped the child (serverCron notices it
            // within 1/hz s): keep watching for a while, so the span ends and the child's CPU is
            // counted by the caller.
            if stop_seen.is_some_and(|t| open.is_none() || t.elapsed() > Duration::from_secs(30)) {
                break;
            }
            std::thread::sleep(Duration::from_millis(20)); // The sampling period, not synchronization.
        }
        if let Some(start) = open {
            spans.push([start, f64::NAN]); // still running when the run ended
        }
        spans
    }))
}

/// GET/SET against the master until stopped; latencies in ms.
fn probe_latency(master: &Server) -> Result<Sampler<Vec<f64>>> {
    let mut c = master.try_client()?;
    Ok(Sampler::spawn(move |stop| {
        let mut lat = Vec::new();
        let mut i = 0u64;
        while !stop.load(Ordering::Relaxed) {
            let t = Instant::now();
            let r = if i.is_multiple_of(2) { c.cmd(&["SET", "bench:probe", &i.to_string()]) } else { c.cmd(&["GET", "bench:probe"]) };
            if r.is_err() {
                break;
            }
            lat.push(t.elapsed().as_secs_f64() * 1e3);
            i += 1;
            std::thread::sleep(Duration::from_millis(1)); // The probe's request rate (~1000/s), not synchronization.
        }
        lat
    }))
}

/// p50, p99 and max of latencies in ms, and their count.
pub(crate) fn latency_summary(mut v: Vec<f64>) -> serde_json::Value {
    v.sort_by(f64::total_cmp);
    let p = |q: f64| crate::stats::quantile(&v, q);
    serde_json::json!({"count": v.len(), "p50": p(0.5), "p99": p(0.99), "max": v.last()})
}

/// One run: fresh replicas on hosts 1..=n, the mode, metrics, verification.
fn one(c: &Ctx) -> Result<RunResult> {
    let mut r = RunResult { scenario: c.spec.name.clone(), link: c.link.to_string(), replicas: c.n, mode: c.mode.to_string(), ..Default::default() };
    let mut mc = c.master.try_client()?;
    master_quiet(&mut mc)?;
    let native = c.mode.starts_with("native");
    let disk = c.mode == "native-disk";
    mc.config_set("repl-diskless-sync", if disk { "no" } else { "yes" })?;
    mc.config_set("repl-diskless-sync-delay", &c.args.diskless_delay.to_string())?;
    let replica_args: &[&str] = if disk { &["--repl-diskless-load", "disabled"] } else { &["--repl-diskless-load", "on-empty-db"] };
    let replicas: Vec<Server> = (1..=c.n)
        .map(|i| {
            let (ns, ip) = c.host(i);
            Server::try_start_in(c.flavor, ns.as_deref(), &ip, replica_args).map_err(|e| anyhow!("start replica {i}: {e}"))
        })
        .collect::<Result<_>>()?;
    let writer = if c.spec.arrival == Arrival::Staggered { Some(fixtures::data::Writer::start(c.master.try_client()?, u64::MAX, Duration::from_secs(3600))) } else { None };
    // Writes flowing before the sync starts, as on a busy master: 16 KiB values over 4096 keys (64
    // MiB), so the data stays the same size however long a run lasts.
    let paced = (c.spec.writes_bytes_per_sec > 0).then(|| c.master.try_client().map(|m| fixtures::data::PacedWriter::start(m, c.spec.writes_bytes_per_sec, 16 << 10, 4096))).transpose()?;
    let full0 = stat(&mut mc, "stats", "sync_full")?;
    let obuf0 = c.master.log().matches(OUTPUT_BUFFER_CLOSED).count();
    let probe = if c.spec.latency_probe { Some(probe_latency(c.master)?) } else { None };
    let forks0 = stat(&mut mc, "stats", "total_forks")?;
    let source = c.source.filter(|_| crate::bench::scenario::from_replica(c.mode));
    if let Some(s) = source {
        // The source answers the relay's PSYNC as the master would: with the same delay.
        s.try_client()?.config_set("repl-diskless-sync-delay", &c.args.diskless_delay.to_string())?;
    }
    let source0 = match source {
        Some(s) => Some((stat(&mut s.try_client()?, "stats", "total_forks")?, agent::procstat::cpu_secs_with_children(s.pid()).unwrap_or(0.0))),
        None => None,
    };
    reset_peak_rss(c.master.pid());
    let cpu0 = agent::procstat::cpu_secs_with_children(c.master.pid()).unwrap_or(0.0);
    let txs0: Option<Vec<u64>> = c.lab.map(|l| (0..=c.n).map(|h| l.tx_bytes(h)).collect::<Result<_, _>>()).transpose().map_err(|e| anyhow!(e))?;
    let tx0 = txs0.as_ref().map(|v| v[0]);
    let t0 = Instant::now();
    let links = c.lab.map(|l| LinkSampling::start(l, t0));
    let rdb_watch = watch_rdb(c.master, t0)?;
    let outcome = if native { run_native(c, &replicas, t0, tx0) } else { run_fastrepl(c, &replicas, t0, tx0) };
    let secs = t0.elapsed().as_secs_f64();
    if let (Some(l), Some(sampling)) = (c.lab, links) {
        // A diagnostic: a sampler that failed costs its table, not the run.
        match sampling.finish() {
            Ok(samples) => r.links = Some(link_series(&samples, c.n, (0..=c.n).map(|h| l.rate_bytes_per_sec(h)).collect())),
            Err(e) => eprintln!("links not sampled in this run: {e}"),
        }
    }
    // Before the CPU reading: the fork child's CPU is counted once the master has reaped it.
    r.master_rdb = rdb_watch.finish();
    r.latency_ms = probe.map(|p| latency_summary(p.finish()));
    r.master_cpu_secs = agent::procstat::cpu_secs_with_children(c.master.pid()).unwrap_or(0.0) - cpu0;
    r.forks = stat(&mut mc, "stats", "total_forks")? - forks0;
    if let (Some(s), Some((f0, c0))) = (source, source0) {
        r.source_forks = Some(stat(&mut s.try_client()?, "stats", "total_forks")? - f0);
        r.source_cpu_secs = Some(agent::procstat::cpu_secs_with_children(s.pid()).unwrap_or(0.0) - c0);
    }
    r.master_host_tx_bytes = master_host_sent(c, tx0)?;
    if let (Some(l), Some(t0s)) = (c.lab, &txs0) {
        r.replica_hosts_tx_bytes = (1..=c.n).map(|h| l.tx_bytes(h).map(|b| b - t0s[h])).collect::<Result<_, _>>().map_err(|e| anyhow!(e))?;
    }
    let master_rss = agent::procstat::peak_rss_kib(c.master.pid());
    for (i, rep) in replicas.iter().enumerate() {
        c.keep_log(&format!("replica-{}", i + 1), rep.log().as_ref());
    }
    r.full_syncs = Some(stat(&mut mc, "stats", "sync_full")? - full0);
    r.output_buffer_disconnects = Some(c.master.log().matches(OUTPUT_BUFFER_CLOSED).count().saturating_sub(obuf0) as u64);
    // The writer's own failure is reported after the run's outcome, which it must not hide.
    let written = paced.map(fixtures::data::PacedWriter::stop);
    if let Some(Ok(w)) = &written {
        r.writes_mb_s = Some(w.bytes as f64 / 1e6 / w.secs.max(1e-9));
    }
    let extra = match outcome {
        Err(e) if e.downcast_ref::<GaveUp>().is_some() && native && c.spec.give_up_secs.is_some() => {
            // Given up: what the master did is the result; the replica is not compared.
            r.gave_up_secs = e.downcast_ref::<GaveUp>().map(|g| g.secs);
            r.master_host_tx_bytes = master_host_sent(c, tx0)?;
            written.transpose().map_err(|e| anyhow!(e))?;
            return Ok(r);
        }
        other => other?,
    };
    written.transpose().map_err(|e| anyhow!(e))?;
    if let Some(w) = writer {
        w.stop();
    }
    // Verified after any writer stopped and every replica applied the master's stream.
    for (i, rep) in replicas.iter().enumerate() {
        if extra.killed == Some(i) {
            continue;
        }
        wait_caught_up(c.master, rep).with_context(|| format!("replica {} did not catch up", i + 1))?;
        let out = verify::compare(&mut mc, &mut rep.try_client()?, &verify::Options::default()).with_context(|| format!("verify replica {}", i + 1))?;
        if !out.identical() {
            bail!("replica {} differs from the master: {:?}", i + 1, out.differences.iter().take(3).collect::<Vec<_>>());
        }
    }
    r.verified = true;
    r.killed = extra.killed;
    r.rdb_bytes = extra.rdb_bytes;
    r.bytes_from_peers = extra.bytes_from_peers;
    // Time to all in sync: the last replica's, from the run's start.
    r.secs = Some(if extra.per_replica.is_empty() { secs } else { extra.per_replica.iter().copied().fold(0.0, f64::max) });
    r.per_replica = extra.per_replica;
    r.phases = extra.phases;
    r.relay_cpu_secs = extra.relay_cpu;
    r.agent_cpu_secs = extra.agent_cpu;
    r.handoffs = extra.handoffs;
    r.peak_rss_kib = serde_json::json!({
        "master": master_rss,
        "relay": extra.relay_rss,
        "agent_max": extra.agent_rss,
        "replica_max": replicas.iter().filter_map(|s| agent::procstat::peak_rss_kib(s.pid())).max(),
        "relay_pss": extra.relay_pss,
        "agent_pss_max": extra.agent_pss,
    });
    Ok(r)
}

/// Bytes the master's host sent since `tx0` (namespace hosts only).
fn master_host_sent(c: &Ctx, tx0: Option<u64>) -> Result<Option<u64>> {
    match (c.lab, tx0) {
        (Some(l), Some(t0)) => Ok(Some(l.tx_bytes(0).map_err(|e| anyhow!(e))? - t0)),
        _ => Ok(None),
    }
}

#[derive(Default)]
struct Extra {
    per_replica: Vec<f64>,
    phases: Vec<serde_json::Value>,
    relay_cpu: Option<f64>,
    relay_rss: Option<u64>,
    agent_cpu: Option<f64>,
    agent_rss: Option<u64>,
    relay_pss: Option<u64>,
    agent_pss: Option<u64>,
    handoffs: Vec<String>,
    killed: Option<usize>,
    rdb_bytes: Option<u64>,
    bytes_from_peers: Option<u64>,
}

/// `FASTREPL_BENCH_JOIN_ARGS`, split on whitespace: extra flags for every `join` of a run.
pub fn join_extra_args() -> Vec<String> {
    std::env::var("FASTREPL_BENCH_JOIN_ARGS").unwrap_or_default().split_whitespace().map(str::to_string).collect()
}

/// Extra `relay` flags for experiments, from `FASTREPL_BENCH_RELAY_ARGS`.
pub fn relay_extra_args() -> Vec<String> {
    std::env::var("FASTREPL_BENCH_RELAY_ARGS").unwrap_or_default().split_whitespace().map(str::to_string).collect()
}

/// Bytes the master's host must have sent since the run started before the scenario's event (a
/// replica killed, or the late one joining).
fn event_bytes(c: &Ctx) -> u64 {
    c.spec.dataset.approx_bytes() / if c.spec.kill_one { 3 } else { 2 }
}

/// Wait until the master's host has sent `bytes` since `tx0`.
fn wait_master_sent(c: &Ctx, tx0: Option<u64>, bytes: u64) -> Result<()> {
    wait_master_sent_unless(c, tx0, bytes, || false).map(|_| ())
}

/// Wait until the master's host has sent `bytes` since `tx0`, or until `ended()` (the joins it waits
/// on have exited: a join that failed early would otherwise keep this waiting for its whole
/// deadline). True if the bytes were sent.
fn wait_master_sent_unless(c: &Ctx, tx0: Option<u64>, bytes: u64, mut ended: impl FnMut() -> bool) -> Result<bool> {
    let (Some(lab), Some(tx0)) = (c.lab, tx0) else { bail!("this scenario needs namespace hosts") };
    let deadline = Instant::now() + Duration::from_secs(600);
    while lab.tx_bytes(0).map_err(|e| anyhow!(e))? - tx0 < bytes {
        if ended() {
            return Ok(false);
        }
        if Instant::now() > deadline {
            bail!("the master's host did not send {bytes} bytes in 600 s");
        }
        std::thread::sleep(Duration::from_millis(20)); // Polling a byte counter with a deadline.
    }
    Ok(true)
}

fn wait_caught_up(master: &Server, rep: &Server) -> Result<()> {
    let mut m = master.try_client()?;
    let mut c = rep.try_client()?;
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let mo = stat(&mut m, "replication", "master_repl_offset")?;
        let ri = c.info("replication")?;
        if ri.get("master_link_status") == Some("up") && ri.num("slave_repl_offset") == Some(mo) {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("replica at {:?}, master at {mo}", ri.num("slave_repl_offset"));
        }
        std::thread::sleep(Duration::from_millis(20)); // Polling replication offsets with a deadline.
    }
}

/// Native: `REPLICAOF` (all at once, or one after another), polling each replica's state for the
/// phases: first RDB byte received, loading started, in sync.
fn run_native(c: &Ctx, replicas: &[Server], t0: Instant, tx0: Option<u64>) -> Result<Extra> {
    let (_, mip) = c.host(0);
    let port = c.master.port.to_string();
    let mut clients: Vec<client::Client> = replicas.iter().map(|s| s.try_client()).collect::<Result<_, _>>()?;
    let mut ex = Extra { per_replica: vec![0.0; replicas.len()], phases: vec![serde_json::json!({}); replicas.len()], ..Default::default() };
    let deadline = t0 + give_up(c);
    let n = replicas.len();
    if c.spec.kill_one || c.spec.arrival == Arrival::Late {
        let first: Vec<usize> = if c.spec.arrival == Arrival::Late { (0..n - 1).collect() } else { (0..n).collect() };
        for &i in &first {
            clients[i].cmd(&["REPLICAOF", &mip, &port])?;
            ex.phases[i]["started"] = serde_json::json!(t0.elapsed().as_secs_f64());
        }
        wait_master_sent(c, tx0, event_bytes(c))?;
        let wait: Vec<usize> = if c.spec.kill_one {
            // A replica dies mid-sync: the master drops its link; the others carry on.
            // SAFETY: kill(2) on the pid of a server process this run started; no memory involved.
            unsafe { libc::kill(replicas[0].pid() as i32, libc::SIGKILL) };
            ex.killed = Some(0);
            (1..n).collect()
        } else {
            clients[n - 1].cmd(&["REPLICAOF", &mip, &port])?;
            ex.phases[n - 1]["started"] = serde_json::json!(t0.elapsed().as_secs_f64());
            (0..n).collect()
        };
        wait_native_in_sync(&mut clients, &wait, t0, deadline, &mut ex.phases, &mut ex.per_replica)?;
        if c.spec.kill_one {
            ex.per_replica.remove(0);
            ex.phases.remove(0);
        }
        return Ok(ex);
    }
    let order: Vec<Vec<usize>> = match c.spec.arrival {
        Arrival::Staggered => (0..n).map(|i| vec![i]).collect(),
        Arrival::Together | Arrival::Late => vec![(0..n).collect()],
    };
    for group in order {
        for &i in &group {
            clients[i].cmd(&["REPLICAOF", &mip, &port])?;
            ex.phases[i]["started"] = serde_json::json!(t0.elapsed().as_secs_f64());
        }
        wait_native_in_sync(&mut clients, &group, t0, deadline, &mut ex.phases, &mut ex.per_replica)?;
    }
    Ok(ex)
}

/// How long a run may take before it is given up (or, without the scenario's `give_up_secs`, failed).
fn give_up(c: &Ctx) -> Duration {
    Duration::from_secs(c.spec.give_up_secs.unwrap_or(7200))
}

/// Wait until replicas `group` (natively syncing) are in sync, recording into `phases[i]` when each
/// received its first byte, started loading and came in sync, and into `per_replica[i]` the last
/// (seconds since `t0`); past `deadline`, a [`GaveUp`] error. Shared by `bench` and `demo`.
pub fn wait_native_in_sync(clients: &mut [client::Client], group: &[usize], t0: Instant, deadline: Instant, phases: &mut [serde_json::Value], per_replica: &mut [f64]) -> Result<()> {
    let mut done = vec![false; clients.len()];
    while group.iter().any(|&i| !done[i]) {
        for &i in group {
            if done[i] {
                continue;
            }
            let rep = clients[i].info("replication")?;
            let pers = clients[i].info("persistence")?;
            let now = t0.elapsed().as_secs_f64();
            let ph = &mut phases[i];
            if ph.get("first_byte").is_none() && rep.num("master_sync_read_bytes").is_some_and(|b| b > 0) {
                ph["first_byte"] = serde_json::json!(now);
            }
            if ph.get("loading").is_none() && pers.get("loading") == Some("1") {
                ph["loading"] = serde_json::json!(now);
            }
            if rep.get("master_link_status") == Some("up") && rep.get("master_sync_in_progress") == Some("0") {
                done[i] = true;
                per_replica[i] = now;
                ph["in_sync"] = serde_json::json!(now);
            }
        }
        if Instant::now() > deadline {
            return Err(GaveUp { secs: t0.elapsed().as_secs_f64() }.into());
        }
        std::thread::sleep(Duration::from_millis(20)); // Polling replicas' state with a deadline.
    }
    Ok(())
}

/// fastrepl: start a relay on the master's host, then `join` on each replica host (all at once, or
/// one after another). The relay's log is kept however the run ends (`FASTREPL_BENCH_KEEP_LOGS`).
fn run_fastrepl(c: &Ctx, replicas: &[Server], t0: Instant, tx0: Option<u64>) -> Result<Extra> {
    let mut relay = Relay::spawn(c)?;
    let outcome = relay.wait_listening(c).and_then(|()| join_all(c, &mut relay, replicas, t0, tx0)).map(|mut ex| {
        relay.figures(&mut ex);
        ex
    });
    relay.proc.kill();
    c.keep_log("relay", relay.proc.output().as_bytes());
    outcome
}

/// A fastrepl run's relay, on the master's host.
struct Relay {
    /// Its peak PSS (with its UCX side process's) while it runs; taken when the run is measured.
    pss: Option<Sampler<u64>>,
    proc: Proc,
    addr: String,
    token: String,
    /// `UCX_TLS` for the relay and its agents (empty: UCX's own choice).
    ucx_tls: String,
    /// A store on the master's host's disk, removed with the run (the relay removes its
    /// generations' files when it releases them; this is the directory). After `proc`: removed
    /// once the relay is gone.
    _store: Option<tempfile::TempDir>,
}

impl Relay {
    /// Start the run's relay with a fresh token and the mode's flags.
    fn spawn(c: &Ctx) -> Result<Relay> {
        let (_, mip) = c.host(0);
        let mut token = [0u8; 16];
        getrandom::getrandom(&mut token).map_err(|e| anyhow!("random token: {e}"))?;
        let token: String = token.iter().map(|b| format!("{b:02x}")).collect();
        let addr = format!("{mip}:{}", fixtures::free_port());
        // UCX between namespaces of one machine would pick shared memory and bypass the shaped link;
        // keep it on its tcp transport unless told otherwise.
        let ucx_tls = std::env::var("FASTREPL_BENCH_UCX_TLS").unwrap_or_else(|_| if c.spec.netns { "tcp".into() } else { String::new() });
        let mut cmd = c.fastrepl_on(0);
        cmd.args(["relay", "--master", &c.master.addr(), "--listen", &addr])
            .env("FASTREPL_TOKEN", &token)
            .env("FASTREPL_LOG", std::env::var("FASTREPL_BENCH_RELAY_LOG").unwrap_or_else(|_| "warn".into()));
        if crate::bench::scenario::uncompressed(c.mode) {
            cmd.args(["--compression", "none"]);
        }
        // Extra `relay` flags for experiments (e.g. `--block-size 1048576`), recorded with the results.
        cmd.args(relay_extra_args());
        let store = if c.spec.relay_store { Some(tempfile::Builder::new().prefix("fastrepl-bench-store").tempdir().context("make the relay's store directory")?) } else { None };
        if let Some(dir) = &store {
            cmd.arg("--store").arg(dir.path());
        }
        if let Some(s) = c.source.filter(|_| crate::bench::scenario::from_replica(c.mode)) {
            cmd.args(["--source", &s.addr()]);
            // Both said outright: the default (`auto`) is raw only while blocks are compressed, and
            // extra relay flags may switch compression off.
            cmd.args(["--source-rdb", if c.mode.ends_with("-raw") { "raw" } else { "as-configured" }]);
        }
        if !ucx_tls.is_empty() {
            cmd.env("UCX_TLS", &ucx_tls);
        }
        let proc = Proc::spawn("relay", cmd);
        // The relay's memory as it really uses it (PSS), with its UCX side process's: the region is
        // mapped in both when it serves UCX, and RSS would count it twice.
        let relay_pid = proc.pid();
        let pss = Sampler::spawn(move |stop| {
            let mut peak = 0u64;
            while !stop.load(Ordering::Relaxed) {
                peak = peak.max(agent::procstat::pss_kib_with_children(relay_pid).unwrap_or(0));
                std::thread::sleep(Duration::from_millis(200)); // Sampling period, not synchronization.
            }
            peak.max(agent::procstat::pss_kib_with_children(relay_pid).unwrap_or(0))
        });
        Ok(Relay { pss: Some(pss), proc, addr, token, ucx_tls, _store: store })
    }

    /// Wait until the relay takes connections (at most 60 s; failed if it exits first).
    fn wait_listening(&mut self, c: &Ctx) -> Result<()> {
        let (mns, _) = c.host(0);
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let ra = self.addr.clone();
            let up = match &mns {
                Some(ns) => fixtures::netns::within(ns, move || std::net::TcpStream::connect(&ra).is_ok()).unwrap_or(false),
                None => std::net::TcpStream::connect(&ra).is_ok(),
            };
            if up {
                return Ok(());
            }
            if !self.proc.running() {
                bail!("relay exited:\n{}", self.proc.output());
            }
            if Instant::now() > deadline {
                bail!("relay not listening after 60 s");
            }
            std::thread::sleep(Duration::from_millis(20)); // Polling a port with a deadline.
        }
    }

    /// Start `join` for replica `i` on its host, against this relay.
    fn join(&self, c: &Ctx, replicas: &[Server], i: usize) -> Proc {
        let transport = crate::bench::scenario::transport(c.mode);
        let mut cmd = c.fastrepl_on(i + 1);
        cmd.args(["join", "--relay", &self.addr, "--replica", &replicas[i].addr(), "--json", "--transport", transport])
            .env("FASTREPL_TOKEN", &self.token)
            .env("FASTREPL_LOG", std::env::var("FASTREPL_BENCH_JOIN_LOG").unwrap_or_else(|_| "warn".into()));
        if !self.ucx_tls.is_empty() {
            cmd.env("UCX_TLS", &self.ucx_tls);
        }
        // Extra `join` flags for experiments (e.g. `--window-blocks 32`), recorded with the results.
        cmd.args(join_extra_args());
        Proc::spawn(&format!("join-{}", i + 1), cmd)
    }

    /// The relay's CPU, peak RSS and peak PSS over the run, into `ex`.
    fn figures(&mut self, ex: &mut Extra) {
        ex.relay_cpu = Some(agent::procstat::cpu_secs_with_children(self.proc.pid()).unwrap_or(0.0));
        ex.relay_rss = agent::procstat::peak_rss_kib(self.proc.pid());
        ex.relay_pss = self.pss.take().map(Sampler::finish);
    }
}

/// A join under way: its replica's index, when it started (seconds into the run), its process.
type Join = (usize, f64, Proc);

/// The groups of replicas that join together, in order: all at once, one after another, or all
/// but the last (which joins at the scenario's event).
fn join_groups(arrival: Arrival, n: usize) -> Vec<Vec<usize>> {
    match arrival {
        Arrival::Together => vec![(0..n).collect()],
        Arrival::Staggered => (0..n).map(|i| vec![i]).collect(),
        Arrival::Late => vec![(0..n - 1).collect()],
    }
}

/// Every replica's join, group by group, each waited for and its report recorded; the agents'
/// figures summed up. A failed run keeps the logs of the joins it was waiting for.
fn join_all(c: &Ctx, relay: &mut Relay, replicas: &[Server], t0: Instant, tx0: Option<u64>) -> Result<Extra> {
    let n = replicas.len();
    let mut ex = Extra { per_replica: vec![0.0; n], phases: vec![serde_json::json!({}); n], ..Default::default() };
    let mut agents = AgentTotals::default();
    for (g, group) in join_groups(c.spec.arrival, n).iter().enumerate() {
        let started = t0.elapsed().as_secs_f64();
        let mut procs: Vec<Join> = group.iter().map(|&i| (i, started, relay.join(c, replicas, i))).collect();
        let at_event = if g == 0 && (c.spec.kill_one || c.spec.arrival == Arrival::Late) { at_the_event(c, relay, replicas, &mut procs, &mut ex, t0, tx0) } else { Ok(()) };
        let waited = at_event.and_then(|()| {
            procs.iter_mut().try_for_each(|(i, started, p)| {
                let (report, out) = wait_join(c, relay, p, t0)?;
                agents.record(&mut ex, *i, *started, &report, &out, c.lab);
                Ok(())
            })
        });
        if waited.is_err() {
            for (_, _, p) in &procs {
                c.keep_log(&p.name, p.output().as_bytes());
            }
        }
        waited?;
    }
    if let Some(k) = ex.killed {
        ex.per_replica.remove(k);
        ex.phases.remove(k);
    }
    ex.bytes_from_peers = Some(agents.from_peers);
    ex.agent_cpu = Some(agents.cpu);
    ex.agent_rss = Some(agents.rss);
    ex.agent_pss = Some(agents.pss);
    Ok(ex)
}

/// The scenario's event, once the master's host has sent its share: the first join SIGKILLed
/// mid-pull (its peers must fetch what it served from someone else; its log kept), or the last
/// replica joining late. A join that ended before the event (it failed) is reported when waited for,
/// with its error.
fn at_the_event(c: &Ctx, relay: &Relay, replicas: &[Server], procs: &mut Vec<Join>, ex: &mut Extra, t0: Instant, tx0: Option<u64>) -> Result<()> {
    let event = wait_master_sent_unless(c, tx0, event_bytes(c), || procs.iter_mut().any(|(_, _, p)| !p.running()))?;
    if !event {
        tracing::warn!("a join ended before the scenario's event; its error follows");
    } else if c.spec.kill_one {
        let (i, _, mut p) = procs.remove(0);
        p.kill();
        c.keep_log(&p.name, p.output().as_bytes());
        ex.killed = Some(i);
    } else {
        let n = replicas.len();
        procs.push((n - 1, t0.elapsed().as_secs_f64(), relay.join(c, replicas, n - 1)));
    }
    Ok(())
}

/// Wait for join `p` to exit (until the run's time is up: then it failed, for a join has its own
/// bounds), keep its log, and check it succeeded (exit 0, or 3 for a full sync): its `--json`
/// report and its output.
fn wait_join(c: &Ctx, relay: &mut Relay, p: &mut Proc, t0: Instant) -> Result<(serde_json::Value, String)> {
    let deadline = t0 + give_up(c);
    while p.running() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20)); // Polling for the join's exit with a deadline.
    }
    if p.running() {
        // Not given up as a native run is: a join has its own bounds, and one that outlives the
        // scenario's time is a failure of fastrepl, which the bench must say.
        c.keep_log(&p.name, p.output().as_bytes());
        bail!("{} still running {:.0} s into the run:\n{}", p.name, t0.elapsed().as_secs_f64(), tail(&p.output(), 20));
    }
    let code = p.wait(Duration::from_secs(5));
    let out = p.output();
    c.keep_log(&p.name, out.as_bytes());
    let report: serde_json::Value = out.lines().rev().find_map(|l| serde_json::from_str(l).ok()).ok_or_else(|| anyhow!("{} printed no report (exit {code:?}):\n{out}", p.name))?;
    if code != Some(0) && code != Some(3) {
        // A join that cannot reach its relay says little on its own: say whether the relay is still
        // there, and if not, how it ended.
        let relay_state = if relay.proc.running() { String::new() } else { format!("\nthe relay had exited:\n{}", tail(&relay.proc.output(), 40)) };
        bail!("{} failed (exit {code:?}): {}{relay_state}", p.name, report["error"].as_str().unwrap_or(&out));
    }
    Ok((report, out))
}

/// The agents' figures summed over a run's joins.
#[derive(Default)]
struct AgentTotals {
    cpu: f64,
    rss: u64,
    pss: u64,
    from_peers: u64,
}

impl AgentTotals {
    /// Replica `i`'s join (started `started` seconds into the run) from its `--json` report and its
    /// output: its phases and sources into `ex`, its figures into the totals.
    fn record(&mut self, ex: &mut Extra, i: usize, started: f64, report: &serde_json::Value, out: &str, lab: Option<&Lab>) {
        let ph = &report["phases"];
        let at = |k: &str| ph[k].as_f64().map(|s| started + s);
        ex.per_replica[i] = at("handed_off").unwrap_or(started);
        ex.phases[i] = serde_json::json!({
            "log_bytes": report["log_bytes"], "started": started, "first_byte": at("first_byte"), "pulled": at("pulled"), "loaded": at("loaded"),
            "caught_up": at("caught_up"), "in_sync": at("handed_off"),
            "transport": report["transport"], "transport_detail": report["transport_detail"], "pull_mib_s": report["pull_mib_s"],
            "bytes_from_relay": report["received_bytes_total"]["relay"], "bytes_from_peers": report["received_bytes_total"]["peers"],
            "peer_failures": report["peer_failures"], "peer_refusals": report["peer_refusals"], "peer_bad_blocks": report["peer_bad_blocks"],
            "sources": block_sources(out, lab),
        });
        ex.handoffs.push(report["handoff"].as_str().unwrap_or("?").to_string());
        ex.rdb_bytes = report["rdb_length_bytes"].as_u64().or(ex.rdb_bytes);
        self.from_peers += report["received_bytes_total"]["peers"].as_u64().unwrap_or(0);
        self.cpu += report["agent_cpu_secs"].as_f64().unwrap_or(0.0);
        self.rss = self.rss.max(report["agent_peak_rss_kib"].as_u64().unwrap_or(0));
        self.pss = self.pss.max(report["agent_peak_pss_kib"].as_u64().unwrap_or(0));
    }
}

/// Per source host (0: the relay's), the blocks a join read from it and at what rate, from its
/// `block verified` lines (logged at debug: `FASTREPL_BENCH_JOIN_LOG=debug`; empty otherwise): where
/// an agent's time went, e.g. which blocks came from a slow host and how fast (`uneven`).
fn block_sources(log: &str, lab: Option<&Lab>) -> serde_json::Value {
    let mut by_host: std::collections::BTreeMap<usize, Vec<(u64, f64)>> = std::collections::BTreeMap::new();
    for line in log.lines().filter(|l| l.contains("block verified")) {
        let field = |k: &str| line.split_whitespace().find_map(|w| w.strip_prefix(k)).map(|v| v.trim_matches('"'));
        let (Some(block), Some(from), Some(secs)) = (field("block=").and_then(|v| v.parse().ok()), field("from="), field("secs=").and_then(|v| v.parse::<f64>().ok())) else { continue };
        let ip = from.rsplit_once(':').map_or(from, |(ip, _)| ip);
        let host = if from == "relay" { Some(0) } else { lab.and_then(|l| l.hosts.iter().position(|h| h.ip == ip)) };
        if let Some(h) = host {
            by_host.entry(h).or_default().push((block, secs));
        }
    }
    let block_mib = limits::BLOCK_BYTES_DEFAULT as f64 / f64::from(1 << 20);
    serde_json::Value::Array(
        by_host
            .into_iter()
            .map(|(host, reads)| {
                let rates: Vec<f64> = reads.iter().map(|(_, secs)| block_mib / secs.max(1e-6)).collect();
                serde_json::json!({"host": host, "blocks": reads.iter().map(|(b, _)| *b).collect::<Vec<u64>>(), "mib_s_median": crate::stats::median(&rates), "secs_total": reads.iter().map(|(_, s)| s).sum::<f64>()})
            })
            .collect(),
    )
}

/// A run's link sampler: stopped when finished, or dropped (a run that ends early must not leave it
/// sampling).
struct LinkSampling {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<std::result::Result<Vec<fixtures::netns::LinkSample>, String>>>,
}

impl LinkSampling {
    fn start(lab: &Lab, origin: Instant) -> LinkSampling {
        let stop = Arc::new(AtomicBool::new(false));
        LinkSampling { thread: Some(lab.sample_links(LINK_SAMPLE_EVERY, stop.clone(), origin)), stop }
    }

    fn finish(mut self) -> Result<Vec<fixtures::netns::LinkSample>> {
        self.stop.store(true, Ordering::SeqCst);
        let thread = self.thread.take().ok_or_else(|| anyhow!("the link sampler was already stopped"))?;
        thread.join().map_err(|_| anyhow!("the link sampler panicked"))?.map_err(|e| anyhow!(e))
    }
}

impl Drop for LinkSampling {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// The samples of hosts `0..=n`, counted from the first sample (taken at the run's start);
/// `rates[h]`: host h's link rate, bytes per second.
fn link_series(samples: &[fixtures::netns::LinkSample], n: usize, rates: Vec<Option<f64>>) -> LinkSeries {
    let since = |now: &[u64], then: &[u64]| (0..=n).map(|h| now.get(h).copied().unwrap_or(0).saturating_sub(then.get(h).copied().unwrap_or(0))).collect::<Vec<u64>>();
    let rate = rates.first().copied().flatten();
    let host_rates = if rates.iter().all(Option::is_some) { rates.into_iter().flatten().collect() } else { Vec::new() };
    let Some(first) = samples.first() else { return LinkSeries { rate_bytes_per_sec: rate, host_rates_bytes_per_sec: host_rates, ..Default::default() } };
    LinkSeries {
        rate_bytes_per_sec: rate,
        host_rates_bytes_per_sec: host_rates,
        secs: samples.iter().map(|x| x.secs).collect(),
        sent: samples.iter().map(|x| since(&x.sent, &first.sent)).collect(),
        received: samples.iter().map(|x| since(&x.received, &first.received)).collect(),
    }
}

/// The last `n` lines of `s`.
fn tail(s: &str, n: usize) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_repeat_keeps_its_own_logs() {
        let names: Vec<String> = (0..3).map(|r| kept_log_name("uneven", "100mbit", 4, "fastrepl-tcp", r, "relay")).collect();
        assert_eq!(names[0], "uneven-100mbit-n4-fastrepl-tcp-r1-relay.log");
        assert_eq!(names.iter().collect::<std::collections::BTreeSet<_>>().len(), 3, "one file per repeat: {names:?}");
        assert_ne!(kept_log_name("uneven", "100mbit", 4, "fastrepl-tcp", 0, "join-1"), names[0], "one file per process");
    }
}
