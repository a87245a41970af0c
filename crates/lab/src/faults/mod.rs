//! `fastrepl-lab faults`: the fault matrix. Faults (processes killed or hung, paths cut, links down,
//! a master failover, the relay's bounds) strike a join in each of its phases on namespace hosts while
//! a writer runs; every cell is judged by one invariant ([`matrix::judge`]): success only with data
//! identical to the master, failure only with a message and the replica reset, a killed agent's
//! replica never left in sync with a dead agent, the other agent unaffected where the fault was not
//! its, nothing leaked. Writes `results.json` (every cell, raw) and `results.md` to `--out`.

pub mod cell;
pub mod matrix;
pub mod staged;
pub mod writer;

use anyhow::{anyhow, bail, Result};
use fixtures::Flavor;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::time::Instant;

/// `fastrepl-lab faults`.
#[derive(clap::Args, Debug)]
pub struct FaultsArgs {
    /// The short matrix (the test suite's): six cells, one per kind of outcome.
    #[arg(long)]
    pub quick: bool,
    /// Only cells whose name contains this (`kill-relay`, `@handoff`).
    #[arg(long)]
    pub only: Option<String>,
    /// Where results.json and results.md go.
    #[arg(long, default_value = "docs/results/faults")]
    pub out: PathBuf,
    /// Dataset, MiB (the phases are paced by the servers' delays, not by size).
    #[arg(long, default_value_t = 16)]
    pub mib: usize,
    /// Server build for master and replicas.
    #[arg(long, default_value = "redis-7.0")]
    pub flavor: String,
    /// Keep every cell's relay and agent logs in DIR.
    #[arg(long)]
    pub logs: Option<PathBuf>,
    /// Only re-render results.md from the results.json in --out (no cell runs).
    #[arg(long)]
    pub render: bool,
    /// Run the staged-join cells (cluster nodes, on loopback) instead, into --out's staged.json and
    /// staged.md (--only and --flavor apply).
    #[arg(long, conflicts_with_all = ["quick", "render"])]
    pub staged: bool,
}

/// `--staged`: the staged join's cells.
fn run_staged(a: &FaultsArgs) -> Result<Vec<staged::StagedResult>> {
    let flavor = Flavor::parse(&a.flavor).ok_or_else(|| anyhow!("unknown flavor {:?}", a.flavor))?;
    let exe = crate::fastrepl_bin()?;
    let cells: Vec<staged::StagedCell> = staged::cells().into_iter().filter(|c| a.only.as_deref().is_none_or(|f| c.name().contains(f))).collect();
    if cells.is_empty() {
        bail!("no staged cell matches {:?}", a.only);
    }
    fixtures::children_die_with_parent(true);
    let mut results = Vec::new();
    for (n, c) in cells.iter().enumerate() {
        eprintln!("[{}/{}] {} ...", n + 1, cells.len(), c.name());
        let r = staged::run(c, flavor, &exe)?;
        eprintln!("    {:?}: {}", r.verdict, r.told);
        results.push(r);
    }
    std::fs::create_dir_all(&a.out)?;
    std::fs::write(a.out.join("staged.json"), serde_json::to_string_pretty(&serde_json::json!({"flavor": a.flavor, "only": a.only, "cells": results}))?)?;
    let summary = format!("{} staged cells run, {} survived", results.len(), results.iter().filter(|r| r.passed()).count());
    std::fs::write(
        a.out.join("staged.md"),
        format!("# Fault matrix: staged joins\n\n**{summary}**\n\nReproduce: `fastrepl-lab faults --staged --flavor {}`.\n\n{}", a.flavor, staged::markdown(&results)),
    )?;
    println!("{summary}");
    let broken: Vec<&str> = results.iter().filter(|r| !r.passed()).map(|r| r.cell.as_str()).collect();
    if !broken.is_empty() {
        bail!("{} staged cell(s) broke the invariant: {}", broken.len(), broken.join(", "));
    }
    Ok(results)
}
// No `--merge` (re-running a few cells into an existing results.json): a cell's definition lives in
// code as much as in its name, so a merged file could mix cells from two definitions unnoticed. A
// results.json is always one whole run.

/// What `results.json` holds.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Results {
    /// The command's settings.
    pub settings: serde_json::Value,
    /// Every cell.
    pub cells: Vec<cell::CellResult>,
    /// The one-line summary.
    pub summary: String,
}

/// Run the matrix (or its `--quick` part), write the results, and fail if any cell broke the
/// invariant.
pub fn run(a: FaultsArgs) -> Result<Results> {
    if a.staged {
        run_staged(&a)?;
        return Ok(Results { settings: serde_json::json!({"staged": true}), cells: Vec::new(), summary: String::new() });
    }
    if a.render {
        let mut r: Results = serde_json::from_slice(&std::fs::read(a.out.join("results.json"))?)?;
        // The summary line is derived from the cells, like the rest of results.md.
        r.summary = summarize(&r.cells);
        std::fs::write(a.out.join("results.md"), markdown(&r))?;
        println!("{}", r.summary);
        return Ok(r);
    }
    if !fixtures::netns::available() {
        bail!("the fault matrix needs network namespaces (root and iproute2; scripts/setup.sh installs them)");
    }
    let flavor = Flavor::parse(&a.flavor).ok_or_else(|| anyhow!("unknown flavor {:?}", a.flavor))?;
    let setup = cell::Setup { flavor, mib: a.mib, exe: crate::fastrepl_bin()?, logs: a.logs.clone() };
    let cells: Vec<matrix::Cell> = if a.quick { matrix::quick() } else { matrix::full() }.into_iter().filter(|c| a.only.as_deref().is_none_or(|f| c.name().contains(f))).collect();
    if cells.is_empty() {
        bail!("no cell matches {:?}", a.only);
    }
    fixtures::children_die_with_parent(true);
    let t0 = Instant::now();
    let mut results = Vec::new();
    for (n, c) in cells.iter().enumerate() {
        eprintln!("[{}/{}] {} ...", n + 1, cells.len(), c.name());
        let r = cell::run(c, &setup)?;
        eprintln!("    {}", line(&r));
        results.push(r);
    }
    let mut settings = serde_json::json!({
        "flavor": a.flavor, "mib": a.mib, "quick": a.quick, "only": a.only,
        "secs": t0.elapsed().as_secs_f64(), "fastrepl": env!("CARGO_PKG_VERSION"),
    });
    let leftovers = leftovers(&setup.exe);
    let summary = summarize(&results);
    settings["leftover_processes"] = serde_json::json!(leftovers.0);
    settings["leftover_namespaces"] = serde_json::json!(leftovers.1);
    let out = Results { settings, cells: results, summary: summary.clone() };
    std::fs::create_dir_all(&a.out)?;
    std::fs::write(a.out.join("results.json"), serde_json::to_string_pretty(&out)?)?;
    std::fs::write(a.out.join("results.md"), markdown(&out))?;
    println!("{summary}");
    println!("results: {}", a.out.display());
    if !leftovers.0.is_empty() || !leftovers.1.is_empty() {
        bail!("the matrix left processes {:?} and namespaces {:?} behind", leftovers.0, leftovers.1);
    }
    let broken: Vec<&str> = out.cells.iter().filter(|c| !c.passed()).map(|c| c.cell.as_str()).collect();
    if !broken.is_empty() {
        bail!("{} cell(s) broke the invariant: {}", broken.len(), broken.join(", "));
    }
    Ok(out)
}

/// After every cell: processes still running our binary in a namespace host (agents, relays,
/// guards — a guard may need a few seconds to finish a reset, so this waits up to a minute for them;
/// processes in our own network namespace are someone else's) and our namespaces left.
fn leftovers(exe: &std::path::Path) -> (Vec<String>, Vec<String>) {
    let exe = exe.to_string_lossy().to_string();
    let our_net = std::fs::read_link("/proc/self/ns/net").ok();
    let ours = || -> Vec<String> {
        let me = std::process::id().to_string();
        let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
        dir.flatten()
            .filter(|e| e.file_name().to_string_lossy().chars().all(|c| c.is_ascii_digit()) && e.file_name().to_string_lossy() != me.as_str())
            .filter_map(|e| {
                let cmd = std::fs::read(e.path().join("cmdline")).ok()?;
                let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
                let in_a_host = std::fs::read_link(e.path().join("ns/net")).ok() != our_net;
                (cmd.starts_with(&exe) && in_a_host).then(|| format!("{}: {}", e.file_name().to_string_lossy(), cmd.trim()))
            })
            .collect()
    };
    let until = Instant::now() + std::time::Duration::from_secs(60);
    let mut procs = ours();
    while !procs.is_empty() && Instant::now() < until {
        std::thread::sleep(std::time::Duration::from_millis(200)); // Waiting for guards to finish, with a deadline.
        procs = ours();
    }
    let prefix = format!("frl{}x", std::process::id());
    let ns = std::process::Command::new("ip").args(["netns", "list"]).output().map(|o| String::from_utf8_lossy(&o.stdout).into_owned()).unwrap_or_default();
    let ns = ns.lines().filter(|l| l.starts_with(&prefix)).map(|l| l.split_whitespace().next().unwrap_or_default().to_string()).collect();
    (procs, ns)
}

fn verdict(v: &matrix::Verdict) -> String {
    match v {
        matrix::Verdict::Violation(why) => format!("VIOLATION: {why}"),
        other => serde_json::to_value(other).ok().and_then(|j| j["verdict"].as_str().map(str::to_string)).unwrap_or_default(),
    }
}

fn exit(o: &matrix::Observed) -> String {
    match (o.exit, o.rerun_exit) {
        (None, Some(r)) => format!("killed; re-run {r}"),
        (None, None) => "killed".into(),
        (Some(c), _) => c.to_string(),
    }
}

fn line(r: &cell::CellResult) -> String {
    if let Some(why) = &r.skipped {
        return format!("skipped: {why}");
    }
    format!(
        "struck in {}; A: {} (exit {}, {} attempt(s), {:.1} s); B: {}; keys lost {}; leaks {}",
        r.struck_in,
        verdict(&r.a_verdict),
        exit(&r.a),
        r.attempts,
        r.recovery_secs,
        verdict(&r.b_verdict),
        r.keys_lost,
        r.leaks.len()
    )
}

/// "N faults at M phases: 0 keys lost, 0 false successes" and the counts behind it.
pub fn summarize(cells: &[cell::CellResult]) -> String {
    let ran: Vec<&cell::CellResult> = cells.iter().filter(|c| c.skipped.is_none()).collect();
    let faults: std::collections::BTreeSet<String> = ran.iter().map(|c| c.spec.fault.name()).collect();
    let phases: std::collections::BTreeSet<&str> = ran.iter().map(|c| c.spec.phase.name()).collect();
    let survived = ran.iter().filter(|c| c.passed()).count();
    let lost: u64 = ran.iter().map(|c| c.keys_lost).sum();
    let false_successes =
        ran.iter().flat_map(|c| [(&c.a, &c.a_verdict), (&c.b, &c.b_verdict)]).filter(|(o, v)| matches!(o.exit, Some(0) | Some(3)) && matches!(v, matrix::Verdict::Violation(_))).count();
    let skipped = cells.len() - ran.len();
    let skipped = if skipped > 0 { format!(" ({skipped} more skipped)") } else { String::new() };
    format!("{} faults at {} phases, {} cells run{skipped}: {survived} survived, {lost} keys lost, {false_successes} false successes", faults.len(), phases.len(), ran.len())
}

/// Verdicts per agent, where the strikes landed, and how fast the join's own retries recovered.
fn tallies(cells: &[cell::CellResult]) -> String {
    use std::collections::BTreeMap;
    let ran: Vec<&cell::CellResult> = cells.iter().filter(|c| c.skipped.is_none()).collect();
    let count = |f: &dyn Fn(&cell::CellResult) -> String| {
        let mut m: BTreeMap<String, usize> = BTreeMap::new();
        for c in &ran {
            *m.entry(f(c)).or_default() += 1;
        }
        m.iter().map(|(k, n)| format!("{n} {k}")).collect::<Vec<_>>().join(", ")
    };
    let short = |v: &matrix::Verdict| verdict(v).split(':').next().unwrap_or_default().to_string();
    let retried: Vec<f64> = ran.iter().filter(|c| c.attempts > 1 && matches!(c.a_verdict, matrix::Verdict::Synced | matrix::Verdict::Native)).map(|c| c.recovery_secs).collect();
    let a_only = ran.iter().filter(|c| c.b_unaffected.is_some()).count();
    let skipped = cells.len() - ran.len();
    let unaffected = ran.iter().filter(|c| c.b_unaffected == Some(true)).count();
    format!(
        "Agent A: {}. Agent B: {}. Skipped: {skipped} cells. Struck in: {}. Recovered by the join's own retries: {} cells (median {:.1} s from the strike). \
         B unaffected in {unaffected} of the {a_only} cells where the fault was A's alone.\n\n",
        count(&|c| short(&c.a_verdict)),
        count(&|c| short(&c.b_verdict)),
        count(&|c| c.struck_in.split(" (").next().unwrap_or_default().to_string()),
        retried.len(),
        crate::stats::median(&retried).unwrap_or(0.0)
    )
}

fn markdown(r: &Results) -> String {
    let mut s = String::from("# Fault matrix\n\n");
    s.push_str(&format!("**{}**\n\n", r.summary));
    s.push_str(&format!("Settings: `{}`. Reproduce: `fastrepl-lab faults{}` (raw results: results.json).\n\n", r.settings, if r.settings["quick"].as_bool() == Some(true) { " --quick" } else { "" }));
    s.push_str("Hosts: master (host 0), relay (1), agent A + replica (2), agent B + replica (3); a writer on the master throughout. ");
    s.push_str("A is the join under test; B joins beside it and serves it blocks. Verdicts: *synced* (exit 0, identical once caught up), ");
    s.push_str("*native* (exit 3, identical), *failed-clean* (non-zero with a message, replica empty and standalone), ");
    s.push_str("*rerun* (agent killed; its replica was not left following it; the join run again synced it), ");
    s.push_str("*handed-over* (the master went away just after the handoff: non-zero exit saying so, the replica the real master's, not reported in sync), ");
    s.push_str("*skipped* (the cell could not run here, with the reason; not counted as survived).\n\n");
    s.push_str(&tallies(&r.cells));
    s.push_str("| cell | struck in | A | A exit | attempts | A done after (s) | B | B unaffected | keys lost | relay fds before/after | relay memfds | leaks |\n");
    s.push_str("|---|---|---|---|---:|---:|---|---|---:|---|---:|---|\n");
    for c in &r.cells {
        if let Some(why) = &c.skipped {
            s.push_str(&format!("| {} | — | skipped: {why} | | | | skipped | | | | | |\n", c.cell));
            continue;
        }
        s.push_str(&format!(
            "| {} | {} | {} | {} | {} | {:.1} | {} | {} | {} | {}/{} | {} | {} |\n",
            c.cell,
            c.struck_in,
            verdict(&c.a_verdict),
            exit(&c.a),
            c.attempts,
            c.recovery_secs,
            verdict(&c.b_verdict),
            c.b_unaffected.map_or("—".into(), |b| if b { "yes".to_string() } else { "NO".to_string() }),
            c.keys_lost,
            c.relay_fds.0,
            c.relay_fds.1,
            c.relay_memfds,
            if c.leaks.is_empty() { "none".to_string() } else { c.leaks.join("; ") }
        ));
    }
    s.push_str("\nA's last error for the cells where it failed:\n\n");
    for c in r.cells.iter().filter(|c| !c.a.message.is_empty()) {
        s.push_str(&format!("- `{}`: {}\n", c.cell, c.a.message.replace('|', "\\|")));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn skipped_cell() -> cell::CellResult {
        let spec = matrix::full().into_iter().find(|c| matches!(c.fault, matrix::Fault::Netem(_))).expect("a netem cell");
        cell::CellResult::skipped(&spec, "this kernel has no netem qdisc (sch_netem)")
    }

    #[test]
    fn a_skipped_cell_is_stored_and_counted_as_skipped() {
        let c = skipped_cell();
        let json = serde_json::to_value(&c).unwrap();
        assert_eq!(json["a_verdict"]["verdict"], "skipped", "{json}");
        assert_eq!(json["a_verdict"]["why"], "this kernel has no netem qdisc (sch_netem)");
        assert!(!c.a_verdict.survived(), "a skipped cell survived nothing");
        let r = Results { settings: serde_json::json!({}), cells: vec![c.clone()], summary: summarize(std::slice::from_ref(&c)) };
        assert!(r.summary.contains("0 cells run (1 more skipped): 0 survived"), "{}", r.summary);
        let md = markdown(&r);
        assert!(md.contains("Skipped: 1 cells"), "{md}");
        assert!(md.contains(&format!("| {} | — | skipped: this kernel", c.cell)), "{md}");
        assert!(!md.contains("failed-clean |"), "{md}");
        let back: cell::CellResult = serde_json::from_value(json).unwrap();
        assert_eq!(back.a_verdict, c.a_verdict);
    }
}
