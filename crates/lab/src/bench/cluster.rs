//! `fastrepl-lab bench --scenario cluster`: a zone lost in a cluster. Three shards on namespace
//! hosts, each master with one replica; then one new replica per shard, all at once: natively
//! (`CLUSTER REPLICATE` on each new node: every master forks and streams its dataset) and through
//! fastrepl (a relay per shard beside the shard's replica, `--source` that replica, and a staged
//! `fastrepl join` per new node: no master forks). Measured per run: the time until every new replica
//! is in sync, and per master its forks, its CPU seconds, its `sync_full`/`sync_partial_ok` and the
//! latency its clients saw during the sync (a GET/SET probe from the master's own host: p50, p99,
//! max) — the figures Valkey's "sync from replica" design reports.
//!
//! CPU: this machine has 2 cores for every host. The three masters are pinned to core 0, everything
//! else (replicas, new nodes, relays, agents, this harness) to core 1, the latency probes' threads to
//! core 0 with the masters (on the busy core they would measure their own scheduling delays): the
//! masters' latency is about the masters, not about the work around them; the three masters share
//! their core, so one master's fork delays the others' clients too (said in the results).

use super::BenchArgs;
use anyhow::{anyhow, bail, Context, Result};
use fixtures::cluster::{self, Cluster, Node, NodeOpts, Placement};
use fixtures::netns::Lab;
use fixtures::{Flavor, Proc};
use serde::{Deserialize, Serialize};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const SHARDS: usize = 3;
/// The CPU the masters run on, and the one for everything else.
const MASTER_CPU: &str = "0";
const OTHER_CPU: &str = "1";
const TOKEN: &str = "cluster-bench-token-0123456789ab";

/// One run of one mode.
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
pub struct ClusterRun {
    /// `native` or `fastrepl`.
    pub mode: String,
    /// Which run of the mode (from 1).
    pub run: u32,
    /// Seconds from the start until every new replica was in sync.
    pub secs: f64,
    /// Per master, shard order.
    pub masters: Vec<MasterFigures>,
    /// Per new replica: the join's handoff (`partial`/`full`; native: `native`), and differences
    /// from its master once caught up.
    pub replicas: Vec<(String, u64)>,
}

/// What one master went through during a run.
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
pub struct MasterFigures {
    /// `total_forks` delta.
    pub forks: i64,
    /// CPU seconds (user + system, children included).
    pub cpu_secs: f64,
    /// `sync_full` delta.
    pub sync_full: i64,
    /// `sync_partial_ok` delta.
    pub sync_partial_ok: i64,
    /// Client latency during the run, ms: p50, p99, max, count.
    pub latency_ms: serde_json::Value,
}

/// Run the scenario: `--repeat` runs of each mode, interleaved; results.json and results.md in --out.
pub fn main(args: &BenchArgs) -> Result<()> {
    let flavor = Flavor::parse(&args.server).with_context(|| format!("unknown server {:?}", args.server))?;
    if args.no_netns || !fixtures::netns::available() {
        bail!("--scenario cluster runs on namespace hosts: run as root with iproute2");
    }
    let exe = crate::fastrepl_bin()?;
    let values = args.values.unwrap_or(32);
    let modes: Vec<String> = if args.modes.is_empty() { vec!["native".into(), "fastrepl".into()] } else { args.modes.clone() };
    for m in &modes {
        if m != "native" && m != "fastrepl" {
            bail!("--scenario cluster knows the modes native and fastrepl, not {m:?}");
        }
    }
    let link = args.links.first().cloned();
    // Counted before this process is pinned to one of them.
    let cpus = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0);
    pin_self(OTHER_CPU)?;
    fixtures::children_die_with_parent(true);
    std::fs::create_dir_all(&args.out)?;
    let mut runs = Vec::new();
    for run in 1..=args.repeat {
        for mode in &modes {
            println!("== cluster: {mode}, run {run}/{}", args.repeat);
            let r = one(mode, run, flavor, values, link.as_deref(), &exe)?;
            println!(
                "   all in sync after {:.1} s; forks {:?}; max latency ms {:?}",
                r.secs,
                r.masters.iter().map(|m| m.forks).collect::<Vec<_>>(),
                r.masters.iter().map(|m| m.latency_ms["max"].clone()).collect::<Vec<_>>()
            );
            runs.push(r);
        }
    }
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    let doc = serde_json::json!({
        "command": command, "server": flavor.name(), "shards": SHARDS, "values": values, "value_bytes": 4 << 20,
        "link": link.clone().unwrap_or_else(|| "unshaped".into()), "pinning": format!("masters and their latency probes on CPU {MASTER_CPU}; replicas, new nodes, relays, agents on CPU {OTHER_CPU}"),
        "cpus": cpus, "runs": runs,
    });
    std::fs::write(args.out.join("results.json"), serde_json::to_string_pretty(&doc)?)?;
    std::fs::write(args.out.join("results.md"), markdown(&doc, &runs, &modes))?;
    println!("results: {}", args.out.display());
    Ok(())
}

fn one(mode: &str, run: u32, flavor: Flavor, values: usize, link: Option<&str>, exe: &std::path::Path) -> Result<ClusterRun> {
    // Hosts: per shard its master, its replica (and the relay), its new node (and the agent).
    let lab = Lab::new(SHARDS * 3, link).map_err(|e| anyhow!("namespace hosts: {e}"))?;
    let host = |shard: usize, role: usize| lab.hosts[shard * 3 + role].clone();
    let at = Placement { master_hosts: (0..SHARDS).map(|s| host(s, 0)).collect(), replica_hosts: (0..SHARDS).map(|s| host(s, 1)).collect(), master_cpus: Some(MASTER_CPU.into()) };
    let c = Cluster::start_on(flavor, SHARDS, 1, NodeOpts { backlog: "256mb".into(), cpus: Some(OTHER_CPU.into()), ..Default::default() }, &at);
    for s in 0..SHARDS {
        fill(&c, s, values)?;
    }
    let nodes: Vec<Node> = (0..SHARDS).map(|s| c.add_empty_node(NodeOpts { supervised: mode == "fastrepl", host: Some(host(s, 2)), cpus: Some(OTHER_CPU.into()), ..Default::default() })).collect();
    wait_replicas_caught_up(&c)?;
    let before: Vec<(i64, f64, i64, i64)> = (0..SHARDS).map(|s| counters(c.master(s))).collect();
    let probes: Vec<Probe> = (0..SHARDS).map(|s| Probe::start(c.master(s))).collect::<Result<_>>()?;
    let t0 = Instant::now();
    let mut handoffs = vec![String::from("native"); SHARDS];
    let mut _procs: Vec<Proc> = Vec::new();
    if mode == "native" {
        for (s, n) in nodes.iter().enumerate() {
            n.client().cmd(&["CLUSTER", "REPLICATE", &c.master_id(s)]).map_err(|e| anyhow!("CLUSTER REPLICATE: {e}"))?;
        }
    } else {
        let token = tempfile::NamedTempFile::new()?;
        std::fs::write(token.path(), TOKEN)?;
        let mut joins = Vec::new();
        for (s, node) in nodes.iter().enumerate() {
            let relay_host = host(s, 1);
            let relay_addr = format!("{}:7400", relay_host.ip);
            let mut r = Command::new("ip");
            r.args(["netns", "exec", &relay_host.ns, "taskset", "-c", OTHER_CPU]).arg(exe);
            r.args(["relay", "--master", &c.master(s).addr(), "--source", &c.replicas(s)[0].addr(), "--listen", &relay_addr]).env("FASTREPL_TOKEN_FILE", token.path());
            _procs.push(Proc::spawn(&format!("relay-{s}"), r));
            let node_host = host(s, 2);
            let mut j = Command::new("ip");
            j.args(["netns", "exec", &node_host.ns, "taskset", "-c", OTHER_CPU]).arg(exe);
            j.args(["join", "--relay", &relay_addr, "--replica", &node.addr(), "--master", &c.master(s).addr(), "--json", "--restart-timeout-secs", "300"]);
            j.env("FASTREPL_TOKEN_FILE", token.path());
            joins.push(Proc::spawn(&format!("join-{s}"), j));
        }
        for (s, mut j) in joins.into_iter().enumerate() {
            let code = j.wait(Duration::from_secs(1800));
            let out = j.output();
            let report = out.lines().rev().find_map(|l| serde_json::from_str::<serde_json::Value>(l).ok()).unwrap_or_default();
            if code != Some(0) && code != Some(3) {
                bail!("shard {s}: the join exited {code:?}:\n{out}");
            }
            handoffs[s] = report["handoff"].as_str().unwrap_or("?").to_string();
        }
    }
    wait_in_sync(&c, &nodes)?;
    let secs = t0.elapsed().as_secs_f64();
    let masters: Vec<MasterFigures> = probes
        .into_iter()
        .enumerate()
        .map(|(s, p)| {
            let after = counters(c.master(s));
            MasterFigures { forks: after.0 - before[s].0, cpu_secs: after.1 - before[s].1, sync_full: after.2 - before[s].2, sync_partial_ok: after.3 - before[s].3, latency_ms: p.finish() }
        })
        .collect();
    let replicas = (0..SHARDS).map(|s| (handoffs[s].clone(), differences(c.master(s), &nodes[s]))).collect();
    Ok(ClusterRun { mode: mode.into(), run, secs, masters, replicas })
}

/// `values` values of 4 MiB into shard `s`, pipelined.
fn fill(c: &Cluster, s: usize, values: usize) -> Result<()> {
    let tag = cluster::shard_tag(c, s);
    let mut cl = c.master(s).client();
    for chunk in (0..values).collect::<Vec<_>>().chunks(8) {
        let cmds: Vec<Vec<Vec<u8>>> = chunk.iter().map(|i| vec![b"SET".to_vec(), format!("{{{tag}}}:v{i}").into_bytes(), fixtures::data::bytes(*i as u64, 4 << 20)]).collect();
        cl.pipeline(&cmds).map_err(|e| anyhow!("fill shard {s}: {e}"))?;
    }
    Ok(())
}

/// `total_forks`, CPU seconds (children included), `sync_full`, `sync_partial_ok` of a master.
fn counters(m: &Node) -> (i64, f64, i64, i64) {
    let cpu = m.pid().and_then(agent::procstat::cpu_secs_with_children).unwrap_or(0.0);
    (m.info_num("stats", "total_forks"), cpu, m.info_num("stats", "sync_full"), m.info_num("stats", "sync_partial_ok"))
}

fn wait_replicas_caught_up(c: &Cluster) -> Result<()> {
    for s in 0..SHARDS {
        let r = &c.replicas(s)[0];
        wait(Duration::from_secs(600), "the shards' replicas to catch up", || in_sync(c.master(s), r))?;
    }
    Ok(())
}

fn wait_in_sync(c: &Cluster, nodes: &[Node]) -> Result<()> {
    wait(Duration::from_secs(1800), "every new replica to be in sync", || (0..SHARDS).all(|s| in_sync(c.master(s), &nodes[s])))
}

/// A replica with its link up, no sync in progress, at its master's offset.
fn in_sync(master: &Node, r: &Node) -> bool {
    let m = master.try_client().ok().and_then(|mut c| c.info("replication").ok()).and_then(|i| i.num("master_repl_offset"));
    let ri = r.try_client().ok().and_then(|mut c| c.info("replication").ok());
    match (m, ri) {
        (Some(m), Some(i)) => i.get("master_link_status") == Some("up") && i.get("master_sync_in_progress") == Some("0") && i.num("slave_repl_offset") == Some(m),
        _ => false,
    }
}

fn differences(master: &Node, r: &Node) -> u64 {
    let (Ok(mut a), Ok(mut b)) = (master.try_client(), r.try_client()) else { return u64::MAX };
    if b.cmd(&["READONLY"]).is_err() {
        return u64::MAX;
    }
    verify::compare(&mut a, &mut b, &verify::Options::default()).map(|o| o.difference_count).unwrap_or(u64::MAX)
}

fn wait(max: Duration, what: &str, mut f: impl FnMut() -> bool) -> Result<()> {
    let deadline = Instant::now() + max;
    while !f() {
        if Instant::now() >= deadline {
            bail!("timed out after {max:?} waiting for {what}");
        }
        std::thread::sleep(Duration::from_millis(50)); // Polling servers, with a deadline.
    }
    Ok(())
}

/// GET/SET against a master from its own host (the socket made in its namespace) until stopped.
struct Probe {
    stop: Arc<AtomicBool>,
    handle: std::thread::JoinHandle<Vec<f64>>,
}

impl Probe {
    fn start(m: &Node) -> Result<Probe> {
        let mut c = m.try_client().map_err(|e| anyhow!("probe {}: {e}", m.addr()))?;
        let stop = Arc::new(AtomicBool::new(false));
        let st = stop.clone();
        let handle = std::thread::spawn(move || {
            // On the masters' CPU: a probe sharing the busy CPU with fastrepl's work would measure
            // its own scheduling delays, not the master.
            let pinned = pin_thread(MASTER_CPU.parse().unwrap_or(0));
            let mut lat = Vec::new();
            let mut i = 0u64;
            while !st.load(Ordering::Relaxed) {
                let t = Instant::now();
                let r = if i.is_multiple_of(2) { c.cmd(&["SET", "{probe}", &i.to_string()]) } else { c.cmd(&["GET", "{probe}"]) };
                // A MOVED answer is a round trip all the same: the probe measures the master's loop.
                if let Err(client::Error::Io { .. }) = r {
                    break;
                }
                lat.push(t.elapsed().as_secs_f64() * 1e3);
                i += 1;
                std::thread::sleep(Duration::from_millis(1)); // The probe's rate (~1000/s), not synchronization.
            }
            if !pinned {
                lat.clear(); // Measured from the wrong CPU: not reported.
            }
            lat
        });
        Ok(Probe { stop, handle })
    }

    fn finish(self) -> serde_json::Value {
        self.stop.store(true, Ordering::Relaxed);
        super::run::latency_summary(self.handle.join().unwrap_or_default())
    }
}

/// Pin the calling thread to CPU `cpu`; false if the kernel refused.
fn pin_thread(cpu: usize) -> bool {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; CPU_SET writes within it for cpu < CPU_SETSIZE;
    // sched_setaffinity(0, ...) reads the set for the calling thread only.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0
    }
}

/// Pin this process (the harness; its probe threads re-pin themselves) to `cpus`.
fn pin_self(cpus: &str) -> Result<()> {
    let st = Command::new("taskset").args(["-a", "-p", "-c", cpus, &std::process::id().to_string()]).output().context("run taskset")?;
    if !st.status.success() {
        bail!("taskset: {}", String::from_utf8_lossy(&st.stderr));
    }
    Ok(())
}

fn median(v: impl Iterator<Item = f64>) -> f64 {
    let v: Vec<f64> = v.filter(|x| x.is_finite()).collect();
    crate::stats::median(&v).unwrap_or(f64::NAN)
}

fn markdown(doc: &serde_json::Value, runs: &[ClusterRun], modes: &[String]) -> String {
    let mut s = String::from("# Cluster: a new replica per shard, all at once\n\n");
    s.push_str(&format!("Command: `{}`\n\n", doc["command"].as_str().unwrap_or_default()));
    s.push_str(&format!(
        "{} shards of {} × 4 MiB values ({} MiB per shard) on namespace hosts (link: {}); server {}; {}; the machine has {} CPUs. \
         Medians over runs (every run in results.json). Latency: a GET/SET probe from each master's own host, every ~1 ms, during the whole sync. \
         Time to sync is bound by this machine's CPU: with the masters on CPU 0, everything fastrepl runs (three relays, their captures on the \
         shards' replicas, three agents, three nodes loading) shares CPU 1, while a native sync's work runs in the masters' fork children on CPU 0.\n\n",
        doc["shards"],
        doc["values"],
        doc["values"].as_u64().unwrap_or(0) * 4,
        doc["link"].as_str().unwrap_or_default(),
        doc["server"].as_str().unwrap_or_default(),
        doc["pinning"].as_str().unwrap_or_default(),
        doc["cpus"]
    ));
    s.push_str("| mode | runs | all in sync (s) | forks per master | master CPU s (sum) | sync_full / partial_ok (sum) | p50 ms (worst master) | p99 ms (worst master) | max ms (worst master) | handoffs | keys differing |\n");
    s.push_str("|---|---:|---:|---|---:|---|---:|---:|---:|---|---:|\n");
    for m in modes {
        let rs: Vec<&ClusterRun> = runs.iter().filter(|r| &r.mode == m).collect();
        let worst = |k: &str| median(rs.iter().map(|r| r.masters.iter().map(|x| x.latency_ms[k].as_f64().unwrap_or(f64::NAN)).fold(f64::NAN, f64::max)));
        let forks: Vec<String> = (0..SHARDS).map(|i| format!("{}", median(rs.iter().map(|r| r.masters[i].forks as f64)))).collect();
        s.push_str(&format!(
            "| {m} | {} | {:.1} | {} | {:.2} | {} / {} | {:.2} | {:.2} | {:.1} | {} | {} |\n",
            rs.len(),
            median(rs.iter().map(|r| r.secs)),
            forks.join(", "),
            median(rs.iter().map(|r| r.masters.iter().map(|x| x.cpu_secs).sum::<f64>())),
            median(rs.iter().map(|r| r.masters.iter().map(|x| x.sync_full as f64).sum::<f64>())),
            median(rs.iter().map(|r| r.masters.iter().map(|x| x.sync_partial_ok as f64).sum::<f64>())),
            worst("p50"),
            worst("p99"),
            worst("max"),
            rs.iter().flat_map(|r| r.replicas.iter().map(|x| x.0.clone())).collect::<Vec<_>>().join(" "),
            rs.iter().flat_map(|r| r.replicas.iter().map(|x| x.1)).max().unwrap_or(0)
        ));
    }
    s
}
