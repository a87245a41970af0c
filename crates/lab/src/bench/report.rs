//! Results: `results.json` (every run, raw, with the machine and settings), `results.md` (tables),
//! and PNG charts, all in `--out`; the table is printed too.

use crate::bench::run::RunResult;
use crate::bench::scenario::{Arrival, Spec};
use crate::bench::BenchArgs;
use crate::charts::{self, Series};
use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use std::path::Path;

/// A scenario and its runs.
#[derive(Debug, Serialize, Deserialize)]
pub struct ScenarioResult {
    /// What ran.
    pub spec: Spec,
    /// The runs.
    pub runs: Vec<RunResult>,
}

/// The machine: cores, CPU, memory, kernel.
pub fn machine() -> serde_json::Value {
    let uname = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split_once(':').map(|(_, v)| v.trim().to_string()))
        .unwrap_or_default();
    serde_json::json!({
        "cores": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        "cpu": cpu,
        "kernel": uname.trim(),
        "memory": std::fs::read_to_string("/proc/meminfo").unwrap_or_default().lines().next().unwrap_or("").to_string(),
    })
}

fn server_version(flavor: fixtures::Flavor) -> String {
    std::process::Command::new(flavor.binary()).arg("--version").output().map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string()).unwrap_or_else(|e| format!("unknown ({e})"))
}

fn f2(x: Option<f64>) -> String {
    x.map(|v| format!("{v:.2}")).unwrap_or_else(|| "–".into())
}

/// The Markdown table of one scenario's runs.
pub fn table(s: &ScenarioResult) -> String {
    let mut t = String::new();
    let lat = s.spec.latency_probe;
    let _ = writeln!(
        t,
        "| link | N | mode | all in sync (s) | per replica (s) | forks | master CPU (s) | master host sent MB (copies) | busiest replica host sent MB | agents got from peers MB | relay CPU (s) | agents CPU (s) | peak MB master/relay/agent/replica (relay, agent: PSS; † RSS) |{}",
        if lat { " GET/SET ms p50/p99/max |" } else { "" }
    );
    let _ = writeln!(t, "|---|---|---|---|---|---|---|---|---|---|---|---|---|{}", if lat { "---|" } else { "" });
    // Copies are counted against the snapshot's size as the agents reported it for the same link
    // (native runs send the same RDB, give or take the fork's moment).
    let rdb_of = |link: &str| s.runs.iter().filter(|r| r.link == link).find_map(|r| r.rdb_bytes);
    let mb = |b: u64| format!("{:.0}", b as f64 / 1e6);
    for r in &s.runs {
        if let Some(e) = &r.error {
            let _ = writeln!(t, "| {} | {} | {} | FAILED: {} | | | | | | | | | |{}", r.link, r.replicas, r.mode, e.replace('|', "/").lines().next().unwrap_or(""), if lat { " |" } else { "" });
            continue;
        }
        if let Some(g) = r.gave_up_secs {
            let _ = writeln!(
                t,
                "| {} | {} | {} | gave up at {g:.0} s: {} full syncs, {} output-buffer disconnects | | {} | {:.2} | {} | | | | | |{}",
                r.link,
                r.replicas,
                r.mode,
                r.full_syncs.unwrap_or(0),
                r.output_buffer_disconnects.unwrap_or(0),
                r.forks,
                r.master_cpu_secs,
                r.master_host_tx_bytes.map(mb).unwrap_or_else(|| "–".into()),
                if lat { " |" } else { "" }
            );
            continue;
        }
        let mut per: Vec<String> = r.per_replica.iter().map(|v| format!("{v:.2}")).collect();
        if r.killed.is_some() {
            per.insert(0, "killed".into());
        }
        let sent = match (r.master_host_tx_bytes, rdb_of(&r.link)) {
            (Some(b), Some(rdb)) if rdb > 0 => format!("{} ({:.2})", mb(b), b as f64 / rdb as f64),
            (Some(b), _) => mb(b),
            _ => "–".into(),
        };
        let busiest = r.replica_hosts_tx_bytes.iter().max().map(|b| mb(*b)).unwrap_or_else(|| "–".into());
        let peers = r.bytes_from_peers.map(mb).unwrap_or_else(|| "–".into());
        let kib = |k: &str| r.peak_rss_kib[k].as_u64().map(|v| format!("{:.0}", v as f64 / 1024.0)).unwrap_or_else(|| "–".into());
        // Relay and agents in PSS where the run measured it (RSS counts a shared mapping in full: an
        // agent's view of the relay's snapshot over shm); older runs have RSS only, marked †.
        let used = |pss: &str, rss: &str| match r.peak_rss_kib[pss].as_u64() {
            Some(v) if v > 0 => format!("{:.0}", v as f64 / 1024.0),
            _ if r.peak_rss_kib[rss].is_u64() => format!("{}†", kib(rss)),
            _ => "–".into(),
        };
        let _ = write!(
            t,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {}/{}/{}/{} |",
            r.link,
            r.replicas,
            r.mode,
            f2(r.secs),
            per.join(", "),
            match r.source_forks {
                Some(f) => format!("{} (source {f})", r.forks),
                None => r.forks.to_string(),
            },
            match r.source_cpu_secs {
                Some(c) => format!("{:.2} (source {c:.2})", r.master_cpu_secs),
                None => format!("{:.2}", r.master_cpu_secs),
            },
            sent,
            busiest,
            peers,
            f2(r.relay_cpu_secs),
            f2(r.agent_cpu_secs),
            kib("master"),
            used("relay_pss", "relay"),
            used("agent_pss_max", "agent_max"),
            kib("replica_max")
        );
        if lat {
            let l = r.latency_ms.clone().unwrap_or_default();
            let _ = write!(t, " {}/{}/{} |", f2(l["p50"].as_f64()), f2(l["p99"].as_f64()), f2(l["max"].as_f64()));
        }
        let _ = writeln!(t);
    }
    t
}

/// The median time to all in sync over the verified runs of one (link, N, mode); `None` if none verified.
pub fn median_secs<'a>(runs: impl Iterator<Item = &'a RunResult>) -> Option<f64> {
    crate::stats::median(&runs.filter(|r| r.error.is_none()).filter_map(|r| r.secs).collect::<Vec<_>>())
}

/// A run's time to all in sync counted from the master's fork (its first RDB start) rather than from
/// the run's start: the fork starts up to a second later in some runs than in others (the master waits
/// `repl-diskless-sync-delay` and a replication cron tick), which over a short T(1) moves a ratio by
/// several per cent. `None` without a recorded fork.
fn secs_from_fork(r: &RunResult) -> Option<f64> {
    Some(r.secs? - fork_start(r)?)
}

/// When the master's fork started, in seconds from the run's start (its first RDB's start).
fn fork_start(r: &RunResult) -> Option<f64> {
    Some(r.master_rdb.first()?[0])
}

/// With `--repeat`: per (link, N, mode), the median, fastest and slowest time to all in sync, and the
/// median counted from the master's fork with its ratio to N = 1's of the same link and mode.
pub fn median_table(s: &ScenarioResult) -> String {
    let mut t = String::new();
    let _ = writeln!(t, "| link | N | mode | runs verified | median all in sync (s) | min | max | median from the master's fork (s) | that ÷ N = 1's |");
    let _ = writeln!(t, "|---|---|---|---|---|---|---|---|---|");
    let mut keys: Vec<(&str, usize, &str)> = Vec::new();
    for r in &s.runs {
        let k = (r.link.as_str(), r.replicas, r.mode.as_str());
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    // The verified runs of a cell.
    fn cell<'a>(s: &'a ScenarioResult, link: &'a str, n: usize, mode: &'a str) -> impl Iterator<Item = &'a RunResult> + 'a {
        s.runs.iter().filter(move |r| r.link == link && r.replicas == n && r.mode == mode && r.error.is_none())
    }
    let from_fork = |link: &str, n: usize, mode: &str| crate::stats::median(&cell(s, link, n, mode).filter_map(secs_from_fork).collect::<Vec<_>>());
    for &(link, n, mode) in &keys {
        let all = s.runs.iter().filter(|r| r.link == link && r.replicas == n && r.mode == mode).count();
        let ok: Vec<f64> = cell(s, link, n, mode).filter_map(|r| r.secs).collect();
        let fork = from_fork(link, n, mode);
        let _ = writeln!(
            t,
            "| {link} | {n} | {mode} | {}/{all} | {} | {} | {} | {} | {} |",
            ok.len(),
            f2(crate::stats::median(&ok)),
            f2(ok.iter().copied().reduce(f64::min)),
            f2(ok.iter().copied().reduce(f64::max)),
            f2(fork),
            f2(fork.zip(from_fork(link, 1, mode)).map(|(x, one)| x / one))
        );
    }
    t
}

/// Scenarios with writes (`write-heavy`): per (link, mode), how many runs came in sync, in what
/// median time, and what the master did meanwhile (medians over every run, given up or not): its
/// full syncs (the relay's capture is one), the replica links it closed for their output buffer, its
/// forks; how the joins handed off, the log they streamed after the snapshot, and the writes achieved.
pub fn writes_table(s: &ScenarioResult) -> Option<String> {
    if s.spec.writes_bytes_per_sec == 0 {
        return None;
    }
    let mut keys: Vec<(&str, &str)> = Vec::new();
    for r in &s.runs {
        if !keys.contains(&(r.link.as_str(), r.mode.as_str())) {
            keys.push((r.link.as_str(), r.mode.as_str()));
        }
    }
    let mut t = String::new();
    let _ =
        writeln!(t, "| link | mode | runs in sync | median in sync (s) | master full syncs | output-buffer disconnects | master forks | handoffs | log streamed after the snapshot MB | writes MB/s |");
    let _ = writeln!(t, "|---|---|---|---|---|---|---|---|---|---|");
    for (link, mode) in keys {
        let runs: Vec<&RunResult> = s.runs.iter().filter(|r| r.link == link && r.mode == mode && r.error.is_none()).collect();
        let failed = s.runs.iter().filter(|r| r.link == link && r.mode == mode && r.error.is_some()).count();
        let timed: Vec<f64> = runs.iter().filter_map(|r| r.secs).collect();
        let med = |f: &dyn Fn(&RunResult) -> Option<f64>| crate::stats::median(&runs.iter().filter_map(|r| f(r)).collect::<Vec<_>>());
        let mut handoffs: Vec<String> = runs.iter().flat_map(|r| r.handoffs.iter().cloned()).collect();
        handoffs.sort();
        handoffs.dedup();
        let log_mb = med(&|r| Some(r.phases.iter().filter_map(|p| p["log_bytes"].as_u64()).max()? as f64 / 1e6));
        let _ = writeln!(
            t,
            "| {link} | {mode} | {}/{}{} | {} | {} | {} | {} | {} | {} | {} |",
            timed.len(),
            runs.len() + failed,
            if failed > 0 { format!(" ({failed} failed)") } else { String::new() },
            f2(crate::stats::median(&timed)),
            f2(med(&|r| r.full_syncs.map(|v| v as f64))),
            f2(med(&|r| r.output_buffer_disconnects.map(|v| v as f64))),
            f2(med(&|r| Some(r.forks as f64))),
            if handoffs.is_empty() { "–".into() } else { handoffs.join(", ") },
            log_mb.map(|v| format!("{v:.0}")).unwrap_or_else(|| "–".into()),
            f2(med(&|r| r.writes_mb_s)),
        );
    }
    Some(t)
}

/// Where each run's time went: the master's RDB (its fork child, whatever it wrote to) and the
/// slowest replica's milestones, in seconds from the run's start. Milestones rather than durations,
/// because in streaming modes the phases overlap (a diskless replica loads while it receives; an
/// agent pulls while the master still writes the RDB).
pub fn phase_table(s: &ScenarioResult) -> String {
    let mut t = String::new();
    let _ = writeln!(t, "| link | N | mode | master RDB (s) | first byte | transfer done | loaded | in sync | in sync − RDB end |");
    let _ = writeln!(t, "|---|---|---|---|---|---|---|---|---|");
    for r in s.runs.iter().filter(|r| r.error.is_none()) {
        let rdb: Vec<String> = r.master_rdb.iter().map(|[a, b]| format!("{a:.2}–{}", if b.is_nan() { "?".into() } else { format!("{b:.2}") })).collect();
        let slowest = r.per_replica.iter().enumerate().max_by(|a, b| a.1.total_cmp(b.1)).map(|(i, _)| i).unwrap_or(0);
        let ph = r.phases.get(slowest).cloned().unwrap_or_default();
        let at = |k: &str| f2(ph[k].as_f64());
        // native-disk: the replica starts loading once the file is complete; native-diskless loads
        // as it receives (no separate transfer or load end); fastrepl: the agent's own milestones.
        // A replica loading from the socket does not count `master_sync_read_bytes`; its loading
        // starts with the first bytes, so that is its first byte.
        let (first, transfer, loaded) = match r.mode.as_str() {
            "native-disk" => (at("first_byte"), at("loading"), "–".to_string()),
            m if m.starts_with("native") => (at("loading"), "–".to_string(), "–".to_string()),
            _ => (at("first_byte"), at("pulled"), at("loaded")),
        };
        let _ = writeln!(
            t,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            r.link,
            r.replicas,
            r.mode,
            if rdb.is_empty() { "–".into() } else { rdb.join(", ") },
            first,
            transfer,
            loaded,
            match r.gave_up_secs {
                Some(g) => format!("gave up at {g:.0}"),
                None => at("in_sync"),
            },
            // What the sync itself adds once the master has produced its RDB.
            f2(r.master_rdb.iter().map(|s| s[1]).filter(|e| !e.is_nan()).reduce(f64::max).zip(ph["in_sync"].as_f64()).map(|(e, s)| s - e))
        );
    }
    t
}

/// How busy the links were while the master's host sent at half its rate or more (with fastrepl: while
/// the relay sent its copy), from the links sampled through each run: then the replicas' downlinks
/// and uplinks, as a share of what they could carry, and how long after that window ended the last
/// replica was in sync. At the physical limit the downlinks run full from the start and the last
/// replica is in sync about when the master's host stops (plus loading and handoff).
pub fn link_table(runs: &[RunResult]) -> Option<String> {
    let mut rows = Vec::new();
    for r in runs.iter().filter(|r| r.error.is_none()) {
        let (Some(l), Some(secs)) = (&r.links, r.secs) else { continue };
        let (Some(rate), Some(w)) = (l.rate_bytes_per_sec, busy_window(l)) else { continue };
        let (a, b) = (w.0, w.1);
        let n = r.replicas;
        let span = l.secs[b] - l.secs[a];
        if span <= 0.0 || n == 0 {
            continue;
        }
        // Each replica host's own rate (a slow host's link is slower), else the master's.
        let capacity: f64 = (1..=n).map(|h| l.host_rates_bytes_per_sec.get(h).copied().unwrap_or(rate)).sum::<f64>() * span;
        let share = |v: &[Vec<u64>]| (1..=n).map(|h| v[b].get(h).copied().unwrap_or(0).saturating_sub(v[a].get(h).copied().unwrap_or(0))).sum::<u64>() as f64 / capacity;
        rows.push(format!("| {} | {} | {} | {:.2}–{:.2} | {:.0} % | {:.0} % | {:.2} |", r.link, n, r.mode, l.secs[a], l.secs[b], 100.0 * share(&l.received), 100.0 * share(&l.sent), secs - l.secs[b]));
    }
    if rows.is_empty() {
        return None;
    }
    let mut t = String::new();
    let _ = writeln!(t, "| link | N | mode | master's host at ≥ half its rate (s from the start) | replicas' downlinks used then | their uplinks used then | all in sync after it (s) |");
    let _ = writeln!(t, "|---|---|---|---|---|---|---|");
    for row in rows {
        let _ = writeln!(t, "{row}");
    }
    Some(t)
}

/// The first and last samples bounding the intervals in which the master's host sent at half its
/// link's rate or more.
fn busy_window(l: &crate::bench::run::LinkSeries) -> Option<(usize, usize)> {
    let rate = l.rate_bytes_per_sec?;
    let busy: Vec<usize> = (1..l.secs.len())
        .filter(|&i| {
            let dt = l.secs[i] - l.secs[i - 1];
            dt > 0.0 && l.sent[i][0].saturating_sub(l.sent[i - 1][0]) as f64 / dt >= rate / 2.0
        })
        .collect();
    Some((busy.first()? - 1, *busy.last()?))
}

/// A replica's own time in a run: from its join's start to its handoff (seconds).
fn own_secs(r: &RunResult, i: usize) -> Option<f64> {
    secs_to_handoff(r, i, 0.0)
}

/// A replica's time from the master's fork (or its join's start if later) to its handoff (seconds):
/// over a 12 s T(1) the fork's second of jitter (see `secs_from_fork`) is 8 %, so ratios of times
/// from the fork compare like with like.
fn own_secs_from_fork(r: &RunResult, i: usize) -> Option<f64> {
    secs_to_handoff(r, i, fork_start(r)?)
}

/// Replica `i`'s time to its handoff from its join's start, or from `not_before` (seconds into the
/// run) if that is later.
fn secs_to_handoff(r: &RunResult, i: usize, not_before: f64) -> Option<f64> {
    let ph = r.phases.get(i)?;
    Some(ph["in_sync"].as_f64()? - ph["started"].as_f64().unwrap_or(0.0).max(not_before))
}

/// Per replica of a run: whether its host's link is slower than the master's host's.
fn slow_replicas(r: &RunResult) -> Vec<bool> {
    let rates = r.links.as_ref().map(|l| l.host_rates_bytes_per_sec.clone()).unwrap_or_default();
    (0..r.replicas).map(|i| matches!((rates.first(), rates.get(i + 1)), (Some(m), Some(h)) if h < m)).collect()
}

/// `uneven` (slow hosts beside full-rate ones, and N = 1 on a full-rate host in the same set): every
/// run with more replicas, each replica's own time (its join's start to its handoff) over T(1), the
/// median of the N = 1 runs; the slow replicas' over their own link's bound (the RDB at their host's
/// rate); and what the full-rate replicas read from the slow hosts (blocks, median rate per replica;
/// from the joins' `block verified` lines, logged with `FASTREPL_BENCH_JOIN_LOG=debug`).
pub fn uneven_table(s: &ScenarioResult) -> Option<String> {
    let ok = |r: &&RunResult| r.error.is_none() && r.secs.is_some();
    let t1 = crate::stats::median(&s.runs.iter().filter(ok).filter(|r| r.replicas == 1).filter_map(|r| own_secs(r, 0)).collect::<Vec<_>>())?;
    let mut t = String::new();
    // T(1) over its own link's bound, for the slow replicas' figure beside it (a shaped link carries a
    // few per cent less than its nominal rate, and a join has its start and handoff on top).
    let own_bound_1 = s.runs.iter().filter(ok).filter(|r| r.replicas == 1).find_map(|r| Some(r.rdb_bytes? as f64 / r.links.as_ref()?.host_rates_bytes_per_sec.get(1).copied()?));
    // What T(1) spends beyond its link's nominal transfer time: the relay's capture starting, the
    // replica's load and handoff, and the shaped link carrying a little less than nominal (that last
    // share grows with the transfer, so on a slower link this bound is a little low). A slow
    // replica's bound: its link's nominal transfer time plus that.
    let overhead_1 = own_bound_1.map(|b| (t1 - b).max(0.0));
    let t1_fork = crate::stats::median(&s.runs.iter().filter(ok).filter(|r| r.replicas == 1).filter_map(|r| own_secs_from_fork(r, 0)).collect::<Vec<_>>());
    let mut slow_adjusted: Vec<f64> = Vec::new();
    let _ =
        writeln!(t, "T(1) = {t1:.2} s (median of the N = 1 runs: one replica alone on a full-rate host; {} its own link's bound).\n", own_bound_1.map_or("–".into(), |b| format!("{:.2}×", t1 / b)));
    let _ = writeln!(
        t,
        "| N | mode | run | each replica ÷ T(1) (slow host: s) | full-rate max | full-rate max, from the master's fork | slow ÷ own link's bound | slow ÷ (own link's bound + the {} s T(1) takes beyond its own) | read from the slow host by the others: blocks @ median MiB/s |",
        overhead_1.map_or("–".into(), |o| format!("{o:.2}"))
    );
    let _ = writeln!(t, "|---|---|---|---|---|---|---|---|---|");
    let (mut maxes, mut all_fast, mut fork_maxes) = (Vec::new(), Vec::new(), Vec::new());
    for r in s.runs.iter().filter(ok).filter(|r| r.replicas > 1) {
        let slow = slow_replicas(r);
        let rates = r.links.as_ref().map(|l| l.host_rates_bytes_per_sec.clone()).unwrap_or_default();
        let slow_hosts: Vec<usize> = (0..r.replicas).filter(|i| slow[*i]).map(|i| i + 1).collect();
        let (mut cells, mut fast, mut own_bound, mut adjusted) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let mut from_slow = Vec::new();
        for (i, is_slow) in slow.iter().copied().enumerate() {
            let Some(secs) = own_secs(r, i) else { continue };
            if is_slow {
                cells.push(format!("{:.2}s", secs / t1));
                if let (Some(rdb), Some(rate)) = (r.rdb_bytes, rates.get(i + 1)) {
                    own_bound.push(format!("{:.2} ({secs:.1} s / {:.1} s)", secs / (rdb as f64 / rate), rdb as f64 / rate));
                    if let Some(o) = overhead_1 {
                        let bound = rdb as f64 / rate + o;
                        adjusted.push(format!("{:.3} ({secs:.1} s / {bound:.1} s)", secs / bound));
                        slow_adjusted.push(secs / bound);
                    }
                }
                continue;
            }
            cells.push(format!("{:.2}", secs / t1));
            fast.push(secs / t1);
            let sources = r.phases[i]["sources"].as_array().cloned().unwrap_or_default();
            for src in sources.iter().filter(|x| x["host"].as_u64().is_some_and(|h| slow_hosts.contains(&(h as usize)))) {
                let n = src["blocks"].as_array().map_or(0, Vec::len);
                from_slow.push(format!("r{}: {n} @ {}", i + 1, f2(src["mib_s_median"].as_f64())));
            }
        }
        let max = fast.iter().copied().fold(0.0, f64::max);
        maxes.push(max);
        all_fast.extend(fast);
        let fork_max = t1_fork.and_then(|t| (0..r.replicas).filter(|i| !slow[*i]).filter_map(|i| own_secs_from_fork(r, i)).reduce(f64::max).map(|m| m / t));
        fork_maxes.extend(fork_max);
        let logged = r.phases.iter().any(|p| p["sources"].as_array().is_some_and(|a| !a.is_empty()));
        let _ = writeln!(
            t,
            "| {} | {} | {} | {} | {max:.2} | {} | {} | {} | {} |",
            r.replicas,
            r.mode,
            r.repeat + 1,
            cells.join(", "),
            f2(fork_max),
            if own_bound.is_empty() { "–".into() } else { own_bound.join(", ") },
            if adjusted.is_empty() { "–".into() } else { adjusted.join(", ") },
            match (logged, from_slow.is_empty()) {
                (false, _) => "– (not logged)".to_string(),
                (true, true) => "none".to_string(),
                (true, false) => from_slow.join("; "),
            }
        );
    }
    if maxes.is_empty() {
        return None;
    }
    let _ = writeln!(
        t,
        "\nFull-rate replicas ÷ T(1): median of every run's slowest {}, median of all {} ({} replicas), runs with one above 1.3: {} of {}.",
        f2(crate::stats::median(&maxes)),
        f2(crate::stats::median(&all_fast)),
        all_fast.len(),
        maxes.iter().filter(|m| **m > 1.3).count(),
        maxes.len()
    );
    if let (Some(tf), false) = (t1_fork, fork_maxes.is_empty()) {
        let _ = writeln!(
            t,
            "From the master's fork (T(1) = {tf:.2} s so): full-rate replicas ÷ T(1), median of every run's slowest {}, runs with one above 1.3: {} of {}.",
            f2(crate::stats::median(&fork_maxes)),
            fork_maxes.iter().filter(|m| **m > 1.3).count(),
            fork_maxes.len()
        );
    }
    if !slow_adjusted.is_empty() {
        let worst = slow_adjusted.iter().copied().fold(0.0, f64::max);
        let _ = writeln!(t, "Slow replicas ÷ (their link's nominal transfer + what T(1) takes beyond its own): median {}, worst {worst:.3}.", f2(crate::stats::median(&slow_adjusted)));
    }
    Some(t)
}

/// Write everything and print the tables.
pub fn write(a: &BenchArgs, flavor: fixtures::Flavor, all: &[ScenarioResult]) -> Result<()> {
    let doc = serde_json::json!({
        "command": std::env::args().collect::<Vec<_>>().join(" "),
        "machine": machine(),
        "server": {"flavor": flavor.name(), "version": server_version(flavor)},
        "settings": {
            "repl-diskless-sync-delay": a.diskless_delay,
            "native-disk": "master repl-diskless-sync no; replica repl-diskless-load disabled",
            "native-diskless": "master repl-diskless-sync yes; replica repl-diskless-load on-empty-db",
            "fastrepl": "a fresh relay per run (its capture included in the time); agents join with the mode's transport",
            "links": "every host's link shaped alike in both directions with tc tbf on both ends of its veth (burst max(512 KiB, 10 ms of traffic), latency 100 ms); unshaped = veth through a bridge",
            "hosts": if a.no_netns { "loopback, one host" } else { "network namespaces: host 0 master + relay, host i replica i + its agent" },
            "quick": a.quick,
            "repeat": a.repeat,
            "join_extra_args": crate::bench::run::join_extra_args(),
            "relay_extra_args": crate::bench::run::relay_extra_args(),
        },
        "scenarios": all,
    });
    let json_path = a.out.join("results.json");
    std::fs::write(&json_path, serde_json::to_vec_pretty(&doc)?).with_context(|| format!("write {}", json_path.display()))?;
    let md = render(&a.out, &doc, all)?;
    println!("\n{md}");
    println!("raw results: {}; table: {}", json_path.display(), a.out.join("results.md").display());
    let failed = all.iter().flat_map(|s| &s.runs).filter(|r| r.error.is_some()).count();
    if failed > 0 {
        anyhow::bail!("{failed} run(s) failed (see the table)");
    }
    Ok(())
}

/// `results.md` and the charts in `dir`, from a results document (as `write` made it, or as read back
/// from `results.json`); returns the Markdown.
pub fn render(dir: &Path, doc: &serde_json::Value, all: &[ScenarioResult]) -> Result<String> {
    let repeat = doc["settings"]["repeat"].as_u64().unwrap_or(1);
    let mut md = format!(
        "# fastrepl bench\n\n`{}`\n\nServer {} ({}); `repl-diskless-sync-delay {}`; machine: {}.\n\n",
        doc["command"].as_str().unwrap_or(""),
        doc["server"]["flavor"].as_str().unwrap_or("?"),
        doc["server"]["version"].as_str().unwrap_or(""),
        doc["settings"]["repl-diskless-sync-delay"],
        doc["machine"]
    );
    for s in all {
        let _ = writeln!(md, "## {}\n\n{}\n", s.spec.name, s.spec.describe());
        if repeat > 1 {
            let _ = writeln!(md, "Medians of {repeat} runs per cell (every run below):\n");
            md.push_str(&median_table(s));
            md.push('\n');
        }
        md.push_str(&table(s));
        md.push('\n');
        if s.spec.arrival != Arrival::Staggered {
            let _ = writeln!(
                md,
                "Where the time goes (seconds from the run's start; the master's fork child, then the slowest replica's \
                 milestones: first RDB byte received, transfer complete, loaded, in sync):\n"
            );
            md.push_str(&phase_table(s));
            md.push('\n');
        }
        if let Some(t) = writes_table(s) {
            let _ = writeln!(md, "Under writes: what the master did through each sync (medians over every run, given up or not):\n");
            md.push_str(&t);
            md.push('\n');
        }
        if let Some(t) = uneven_table(s).filter(|_| s.spec.slow_last) {
            let _ = writeln!(md, "Each replica against one alone (its own time, join to handoff):\n");
            md.push_str(&t);
            md.push('\n');
        }
        if let Some(t) = link_table(&s.runs) {
            let _ = writeln!(
                md,
                "Links (sampled every 250 ms): while the master's host sent at half its rate or more, how much of their \
                 links' capacity the replicas' hosts received and sent, and how long after that the last replica was in sync:\n"
            );
            md.push_str(&t);
            md.push('\n');
        }
        for png in charts_for(dir, s)? {
            let _ = writeln!(md, "![{png}]({png})\n");
        }
    }
    let md_path = dir.join("results.md");
    std::fs::write(&md_path, &md).with_context(|| format!("write {}", md_path.display()))?;
    Ok(md)
}

/// Per (link, N): the median time to all in sync of each mode side by side, and fastrepl-tcp over
/// native-diskless (the ratio the project tracks). The front table of docs/benchmarks.md.
pub fn summary_table(s: &ScenarioResult) -> String {
    let mut keys: Vec<(&str, usize)> = Vec::new();
    for r in &s.runs {
        if !keys.contains(&(r.link.as_str(), r.replicas)) {
            keys.push((r.link.as_str(), r.replicas));
        }
    }
    let order = |l: &str| ["100mbit", "1gbit", "10gbit", "unshaped"].iter().position(|x| *x == l).unwrap_or(9);
    keys.sort_by_key(|(l, n)| (order(l), *n));
    let modes = &s.spec.modes;
    let mut t = String::new();
    let _ = writeln!(t, "| link | N | {} | fastrepl-tcp ÷ native-diskless |", modes.join(" | "));
    let _ = writeln!(t, "|---|---|{}---|", "---|".repeat(modes.len()));
    for (link, n) in keys {
        let med = |m: &str| median_secs(s.runs.iter().filter(|r| r.link == link && r.replicas == n && r.mode == m));
        let cell = |m: &str| {
            let runs = s.runs.iter().filter(|r| r.link == link && r.replicas == n && r.mode == m).count();
            match (runs, med(m)) {
                (0, _) => "–".to_string(),
                (_, None) => "FAILED".to_string(),
                (1, Some(v)) => format!("{v:.2}"),
                (k, Some(v)) => format!("{v:.2} (median of {k})"),
            }
        };
        let ratio = med("fastrepl-tcp").zip(med("native-diskless")).map(|(a, b)| format!("{:.2}", a / b)).unwrap_or_else(|| "–".into());
        let _ = writeln!(t, "| {link} | {n} | {} | {ratio} |", modes.iter().map(|m| cell(m)).collect::<Vec<_>>().join(" | "));
    }
    t
}

/// Charts of one scenario; returns their file names.
fn charts_for(dir: &Path, s: &ScenarioResult) -> Result<Vec<String>> {
    let mut files = Vec::new();
    let mut links: Vec<&str> = s.runs.iter().map(|r| r.link.as_str()).collect();
    links.dedup();
    for link in links {
        let runs: Vec<&RunResult> = s.runs.iter().filter(|r| r.link == link && r.secs.is_some()).collect();
        let mut series = Vec::new();
        for m in &s.spec.modes {
            let points: Vec<(f64, f64)> = if s.spec.arrival == Arrival::Staggered {
                runs.iter().filter(|r| &r.mode == m).flat_map(|r| r.per_replica.iter().enumerate().map(|(i, t)| ((i + 1) as f64, *t))).collect()
            } else {
                let mut ns: Vec<usize> = runs.iter().filter(|r| &r.mode == m).map(|r| r.replicas).collect();
                ns.dedup();
                ns.iter().filter_map(|&n| median_secs(runs.iter().copied().filter(|r| &r.mode == m && r.replicas == n)).map(|t| (n as f64, t))).collect()
            };
            if !points.is_empty() {
                series.push(Series { name: m.clone(), points, baseline: false });
            }
        }
        let multi = series.iter().any(|s| s.points.len() > 1);
        if series.is_empty() || !multi {
            continue; // one point per mode: the table says it all
        }
        let name = format!("{}-{}.png", s.spec.name, link);
        let (x, title) = if s.spec.arrival == Arrival::Staggered {
            ("replica (joining one after another)", format!("{}: replica in sync at (s), link {link}", s.spec.name))
        } else {
            ("replicas", format!("{}: time to all replicas in sync, link {link}", s.spec.name))
        };
        charts::linear(&dir.join(&name), &title, x, "seconds", &series)?;
        files.push(name);
    }
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::run::LinkSeries;

    #[test]
    fn the_link_table_measures_the_window_in_which_the_masters_host_sends() {
        // 1 000 B/s links, two replicas; samples every second. The master's host sends at full rate
        // from 1 s to 4 s, the replicas receive 800 B/s each then and send 400 B/s; in sync at 6 s.
        let secs: Vec<f64> = (0..7).map(f64::from).collect();
        let master = [0, 100, 1100, 2100, 3100, 3200, 3200];
        let sent = secs.iter().enumerate().map(|(i, _)| vec![master[i], 400 * (i.clamp(1, 4) as u64 - 1), 400 * (i.clamp(1, 4) as u64 - 1)]).collect();
        let received = secs.iter().enumerate().map(|(i, _)| vec![0, 800 * (i.clamp(1, 4) as u64 - 1), 800 * (i.clamp(1, 4) as u64 - 1)]).collect();
        let run = RunResult {
            link: "x".into(),
            replicas: 2,
            mode: "m".into(),
            secs: Some(6.0),
            links: Some(LinkSeries { rate_bytes_per_sec: Some(1000.0), secs, sent, received, ..Default::default() }),
            ..Default::default()
        };
        let t = link_table(std::slice::from_ref(&run)).expect("a row");
        assert!(t.contains("| x | 2 | m | 1.00–4.00 | 80 % | 40 % | 2.00 |"), "{t}");
        // Replica 2 on a link half as fast: its 800 B/s fill it.
        let mut slow = run.clone();
        slow.links.as_mut().unwrap().host_rates_bytes_per_sec = vec![1000.0, 1000.0, 500.0];
        let t = link_table(&[slow]).expect("a row");
        assert!(t.contains("| x | 2 | m | 1.00–4.00 | 107 % | 53 % | 2.00 |"), "(800 + 800) / (1000 + 500): {t}");
        let unshaped = RunResult { secs: Some(1.0), links: Some(LinkSeries::default()), ..Default::default() };
        assert!(link_table(&[unshaped]).is_none(), "no rate, no table");
    }

    #[test]
    fn a_run_given_up_is_reported_with_what_the_master_did_not_timed() {
        let spec: Spec = serde_json::from_value(serde_json::json!({
            "name": "write-heavy", "dataset": {"kind": "big_values", "count": 1, "size": 1}, "links": ["100mbit"], "replicas": [1],
            "modes": ["native-diskless", "fastrepl-tcp"], "arrival": "together", "latency_probe": false, "netns": true,
            "writes_bytes_per_sec": 8_000_000, "give_up_secs": 240, "relay_store": true,
        }))
        .expect("a spec");
        let run = |mode: &str, secs: Option<f64>, gave_up: Option<f64>, full: i64, obuf: u64| RunResult {
            link: "100mbit".into(),
            replicas: 1,
            mode: mode.into(),
            verified: secs.is_some(),
            secs,
            gave_up_secs: gave_up,
            full_syncs: Some(full),
            output_buffer_disconnects: Some(obuf),
            forks: full,
            writes_mb_s: Some(8.0),
            handoffs: if mode.starts_with("fastrepl") { vec!["partial".into()] } else { Vec::new() },
            phases: if mode.starts_with("fastrepl") { vec![serde_json::json!({"log_bytes": 1_434_000_000u64, "in_sync": 180.0})] } else { Vec::new() },
            ..Default::default()
        };
        let s = ScenarioResult {
            spec,
            runs: vec![
                run("native-diskless", None, Some(240.4), 8, 7),
                run("fastrepl-tcp", Some(180.0), None, 1, 0),
                run("native-diskless", None, Some(240.2), 7, 7),
                run("fastrepl-tcp", Some(182.0), None, 1, 0),
            ],
        };
        let t = table(&s);
        assert!(t.contains("| 100mbit | 1 | native-diskless | gave up at 240 s: 8 full syncs, 7 output-buffer disconnects |"), "{t}");
        assert!(!t.contains("FAILED"), "a run given up is not a failed run: {t}");
        let w = writes_table(&s).expect("a scenario with writes has the table");
        assert!(w.contains("| 100mbit | native-diskless | 0/2 | – | 7.50 | 7.00 | 7.50 | – | – | 8.00 |"), "{w}");
        assert!(w.contains("| 100mbit | fastrepl-tcp | 2/2 | 181.00 | 1.00 | 0.00 | 1.00 | partial | 1434 | 8.00 |"), "{w}");
        assert!(writes_table(&ScenarioResult { spec: Spec { writes_bytes_per_sec: 0, ..s.spec.clone() }, runs: Vec::new() }).is_none(), "no writes, no table");
    }
}
