//! The report: each run's [`Row`], summed up from the fleet at its end, and the tables `simulate`
//! prints (one row per fleet size; with many seeds, their median and worst).

use super::args::{Scale, SimulateArgs};
use super::fleet::{Agent, Host};
use crate::stats;
use serde::Serialize;

/// One fleet size's outcome.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// Agents.
    pub agents: usize,
    /// The fleet's seed.
    pub seed: u64,
    /// The longest pull of an agent on a full-rate link, from its own start to its last block (with
    /// all agents starting together: the time until every one of them holds the snapshot).
    pub secs: f64,
    /// That over one agent alone.
    pub t_over_t1: f64,
    /// Slow hosts: the longest pull over what their own link allows at best (1.0 = as fast as their
    /// link permits); `None` without slow hosts.
    pub slow_over_own_bound: Option<f64>,
    /// Copies of the snapshot the relay's uplink carried.
    pub relay_copies: f64,
    /// Most copies any agent's uplink carried.
    pub agent_upload_copies_max: f64,
    /// The slowest surviving agent: seconds from its start to its last block, and whether it was slow.
    pub slowest_secs: f64,
    /// Whether the slowest agent is one of the slow hosts.
    pub slowest_is_slow_host: bool,
    /// Agents that died.
    pub failed: usize,
    /// Agents that did not finish within the simulated time limit.
    pub unfinished: usize,
    /// Refusals ("busy") per block per agent.
    pub refusals_per_block: f64,
    /// The share of the time full-rate agents were pulling that the relay's uplink ran full (at 99 %
    /// of the link or more). The first agent of a fleet gets each block no sooner than the relay sends it:
    /// the relay's link idle while agents pull is time every agent at the front waits.
    pub relay_busy: Option<f64>,
    /// Full-rate survivors' pulls, one agent's time alone over their mean: the share of their links
    /// the swarm kept busy on average (1.0: every one as fast as alone); `None` when none finished.
    pub pull_efficiency: Option<f64>,
    /// The full-rate survivors' last blocks came within this many seconds of each other. With joins
    /// spread, a small figure says the fleet ends together: the first to join then takes its
    /// `mean start + T(1) / pull_efficiency`, whatever its own link could do. `None` with fewer than two.
    pub ends_within: Option<f64>,
}

/// What a run counted as it went, beside the fleet it leaves.
pub(super) struct Counts {
    /// Refusals ("busy") holders answered.
    pub refusals: u64,
    /// Steps with a full-rate agent pulling.
    pub pulling_steps: u64,
    /// Those of them with the relay's uplink full.
    pub relay_full_steps: u64,
}

impl Row {
    /// Fleet `agents` on `hosts` at the end of `a`'s run with `n` agents.
    pub(super) fn of(a: &SimulateArgs, s: &Scale, n: usize, agents: &[Agent], hosts: &[Host], c: &Counts) -> Row {
        let (t_one, snapshot, blocks) = (s.t_one, s.snapshot, s.blocks);
        let survivors: Vec<&Agent> = agents.iter().filter(|g| g.alive).collect();
        let fast_pulls: Vec<(f64, f64)> = survivors.iter().filter(|g| !g.slow).filter_map(|g| g.finished.map(|f| (g.start, f))).collect();
        let pull_efficiency = (!fast_pulls.is_empty()).then(|| t_one * fast_pulls.len() as f64 / fast_pulls.iter().map(|(s, f)| f - s).sum::<f64>());
        let ends_within = (fast_pulls.len() >= 2).then(|| fast_pulls.iter().map(|p| p.1).fold(f64::MIN, f64::max) - fast_pulls.iter().map(|p| p.1).fold(f64::MAX, f64::min));
        let end = survivors.iter().filter(|g| !g.slow).filter_map(|g| g.finished.map(|f| f - g.start)).fold(0.0, f64::max);
        let slow_bound = t_one * a.slow_factor;
        let slow_over_own_bound = survivors.iter().filter(|g| g.slow).filter_map(|g| g.finished.map(|f| (f - g.start) / slow_bound)).reduce(f64::max);
        let slowest = survivors.iter().filter(|g| g.finished.is_some()).max_by(|x, y| (x.finished.unwrap() - x.start).total_cmp(&(y.finished.unwrap() - y.start)));
        Row {
            agents: n,
            seed: a.seed,
            secs: end,
            t_over_t1: end / t_one,
            slow_over_own_bound,
            relay_copies: hosts[0].sent / snapshot,
            agent_upload_copies_max: hosts[1..].iter().map(|h| h.sent).fold(0.0, f64::max) / snapshot,
            slowest_secs: slowest.map(|g| g.finished.unwrap_or(0.0) - g.start).unwrap_or(0.0),
            slowest_is_slow_host: slowest.is_some_and(|g| g.slow),
            failed: agents.iter().filter(|g| !g.alive).count(),
            unfinished: survivors.iter().filter(|g| g.finished.is_none()).count(),
            refusals_per_block: c.refusals as f64 / (n as f64 * blocks as f64),
            relay_busy: (c.pulling_steps > 0).then(|| c.relay_full_steps as f64 / c.pulling_steps as f64),
            pull_efficiency,
            ends_within,
        }
    }
}

/// The line that heads the output: the scenario's settings.
pub(super) fn settings(a: &SimulateArgs) -> String {
    format!(
        "swarm simulation: {} MiB in {} MiB blocks, link {} each way, window {} blocks{}, serve cache {}, 1 relay + {} peer fetches and {} uploads per agent, reads in flight {} per relay and {} per peer connection; \
         slow hosts {:.0} %{} (×{} slower), failures {:.0} %, joins spread over {} s; round trips {} ms, {} ms more per busy link",
        a.mib,
        a.block_mib,
        a.link,
        a.window,
        if a.window_fixed || a.serve_cache_mib == 0 { "" } else { " (more by the serve cache's unused room)" },
        if a.serve_cache_mib == 0 { "unbounded".to_string() } else { format!("{} MiB", a.serve_cache_mib) },
        a.downloads,
        a.uploads,
        a.relay_depth,
        a.peer_depth,
        a.slow_fraction * 100.0,
        a.slow_hosts.map(|k| format!(" (exactly {k})")).unwrap_or_default(),
        a.slow_factor,
        a.fail_fraction * 100.0,
        a.join_spread,
        a.rtt_ms,
        a.queue_ms
    )
}

/// The one-seed table's head.
pub(super) const TABLE_HEAD: &str = "| agents | T(N) s | T(N)/T(1) | slow hosts ÷ their own bound | relay copies | max agent upload copies | slowest agent s (slow host?) | failed | unfinished | refusals per block per agent | relay link full | pull efficiency | full-rate ends within (s) |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|";

/// One fleet size's line of the one-seed table.
pub(super) fn table_row(r: &Row) -> String {
    format!(
        "| {} | {:.2} | {:.3} | {} | {:.2} | {:.2} | {:.2} ({}) | {} | {} | {:.2} | {} | {} | {} |",
        r.agents,
        r.secs,
        r.t_over_t1,
        r.slow_over_own_bound.map(|v| format!("{v:.2}")).unwrap_or_else(|| "–".into()),
        r.relay_copies,
        r.agent_upload_copies_max,
        r.slowest_secs,
        if r.slowest_is_slow_host { "yes" } else { "no" },
        r.failed,
        r.unfinished,
        r.refusals_per_block,
        r.relay_busy.map_or("–".into(), |v| format!("{:.0} %", v * 100.0)),
        r.pull_efficiency.map_or("–".into(), |v| format!("{v:.3}")),
        r.ends_within.map_or("–".into(), |v| format!("{v:.1}"))
    )
}

/// The many-seeds table's head, for seeds `a.seed` on.
pub(super) fn seeds_head(a: &SimulateArgs) -> String {
    format!(
        "seeds {} to {}; T(N)/T(1) is the slowest full-rate agent's pull over one agent's time, as in a one-seed table\n\
         | agents | T(N)/T(1) median | worst (seed) | every seed's, ascending | slow hosts ÷ their own bound, median (worst) | relay copies, median (most) | pull efficiency, median | unfinished, all seeds |\n\
         |---|---|---|---|---|---|---|---|",
        a.seed,
        a.seed + a.seeds - 1
    )
}

/// One fleet size's line of the many-seeds table.
pub(super) fn seeds_row(n: usize, runs: &[Row]) -> String {
    // A run where no full-rate agent finished (one slow host alone; every full-rate agent failed or
    // unfinished) has no ratio: left out, and counted.
    let with_ratio: Vec<&Row> = runs.iter().filter(|r| r.secs > 0.0).collect();
    let left_out = runs.len() - with_ratio.len();
    let ratios: Vec<f64> = with_ratio.iter().map(|r| r.t_over_t1).collect();
    let mut sorted = ratios.clone();
    sorted.sort_by(f64::total_cmp);
    let worst = with_ratio.iter().max_by(|x, y| x.t_over_t1.total_cmp(&y.t_over_t1));
    let slow: Vec<f64> = runs.iter().filter_map(|r| r.slow_over_own_bound).collect();
    let copies: Vec<f64> = runs.iter().map(|r| r.relay_copies).collect();
    let efficiency: Vec<f64> = runs.iter().filter_map(|r| r.pull_efficiency).collect();
    let most = |v: &[f64]| v.iter().copied().fold(f64::MIN, f64::max);
    format!(
        "| {n} | {} | {} | {} | {} | {:.2} ({:.2}) | {} | {} |",
        stats::median(&ratios).map_or("–".into(), |m| format!("{m:.3}")),
        worst.map_or("–".into(), |w| format!("{:.3} ({})", w.t_over_t1, w.seed)),
        sorted.iter().map(|v| format!("{v:.3}")).collect::<Vec<_>>().join(", ")
            + &if left_out > 0 { format!(" ({left_out} of {} without a full-rate agent that finished)", runs.len()) } else { String::new() },
        stats::median(&slow).map_or("–".into(), |m| format!("{m:.2} ({:.2})", most(&slow))),
        stats::median(&copies).unwrap_or(f64::NAN),
        most(&copies),
        stats::median(&efficiency).map_or("–".into(), |m| format!("{m:.3}")),
        runs.iter().map(|r| r.unfinished).sum::<usize>()
    )
}
