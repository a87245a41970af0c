//! `fastrepl-lab simulate`: the agents' swarm on fleets no machine here can host. The decisions are
//! the product's own ([`swarm`]: the relay's tracker, each agent's chooser); only the network is
//! modelled: every host has an uplink and a downlink of the link rate (a slow host, a fraction of
//! it), and the transfers through a link share it max-min fairly, advanced in small time steps (a fluid
//! model: no packets, no CPU). Round trips are modelled where they cost time: a read moves no byte
//! until its request has crossed the asker's uplink and the source's downlink and the first bytes of
//! the answer the source's uplink and the asker's downlink, and each of those links that is busy holds
//! it for its queue (`--queue-ms`: the bench's shaped links queue up to 100 ms; 0 gives the pure fluid
//! model). Reads pipelined on one connection move one after the other, and the next one's round trip
//! passes while the one before it moves — which is what pipelining is for.
//!
//! For each fleet size N it prints T(N)/T(1) (time until every surviving agent holds the snapshot,
//! over the time of one agent alone), the copies the relay's link carried, the most any agent's uplink
//! carried, the slowest agent, how much of the time the relay's link ran full, the swarm's pull
//! efficiency (one agent's time alone over the mean pull) and how close together the pulls ended. `SIM_DEBUG=1`
//! prints the relay's and all flows' rates and every agent's progress every 40 steps (for small
//! fleets), why the relay's link was not full, and at the end each agent's start, time and upload;
//! `SIM_TRACE=<agent index>` why that agent's downlink is not full (see `Trace`; one line every
//! `SIM_TRACE_EVERY` steps, 60 by default); `SIM_READS=1` every completed read (block, reader, source,
//! from when to when): which blocks came from a slow host, and how long they took.
//!
//! A seed names a fleet: one seed gives one outcome (nothing depends on a map's order).
//!
//! Its rooms: `args` (the scenario's arguments and numbers), `fleet` (the hosts and agents a seed
//! draws), `network` (transfers, links shared max-min fairly, connections), `event_loop` (one run
//! in time steps), `report` (a run's [`Row`] and the tables), `diagnostics` (what `SIM_*` print).

mod args;
mod diagnostics;
mod event_loop;
mod fleet;
mod network;
mod report;

pub use args::SimulateArgs;
pub use report::Row;

use anyhow::Result;

/// Simulate one fleet of `n` agents.
pub fn run_one(a: &SimulateArgs, n: usize) -> Result<Row> {
    Ok(event_loop::Sim::new(a, n)?.run())
}

/// Fleet size `n` with every seed of `a.seeds`, in seed order; the seeds run on every core.
fn run_seeds(a: &SimulateArgs, n: usize) -> Result<Vec<Row>> {
    use anyhow::Context;
    a.seed.checked_add(a.seeds - 1).with_context(|| format!("--seed {} with --seeds {}: the last seed is past the largest", a.seed, a.seeds))?;
    let next = std::sync::atomic::AtomicU64::new(0);
    // The diagnostics print per run: one run at a time, each headed by its seed, or they interleave.
    let diagnostics = ["SIM_DEBUG", "SIM_TRACE", "SIM_READS"].iter().any(|v| std::env::var_os(v).is_some());
    let threads = if diagnostics { 1 } else { std::thread::available_parallelism().map_or(1, |p| p.get()).min(a.seeds as usize) };
    let mut rows: Vec<Row> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| -> Result<Vec<Row>> {
                    let mut mine = Vec::new();
                    loop {
                        let k = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        if k >= a.seeds {
                            return Ok(mine);
                        }
                        let seed = a.seed + k;
                        if diagnostics {
                            eprintln!("== {n} agents, seed {seed}");
                        }
                        mine.push(run_one(&SimulateArgs { seed, ..a.clone() }, n).with_context(|| format!("simulating {n} agents with seed {seed}"))?);
                    }
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().map_err(|_| anyhow::anyhow!("simulating {n} agents: a thread running seeds panicked"))?).collect::<Result<Vec<Vec<Row>>>>()
    })?
    .into_iter()
    .flatten()
    .collect();
    rows.sort_by_key(|r| r.seed);
    Ok(rows)
}

/// Run every fleet size and print the table.
pub fn run(a: SimulateArgs) -> Result<()> {
    println!("{}", report::settings(&a));
    let mut rows = Vec::new();
    if a.seeds == 1 {
        println!("{}", report::TABLE_HEAD);
        for &n in &a.agents {
            let r = run_one(&a, n.max(1))?;
            println!("{}", report::table_row(&r));
            rows.push(r);
        }
    } else {
        println!("{}", report::seeds_head(&a));
        for &n in &a.agents {
            let runs = run_seeds(&a, n.max(1))?;
            println!("{}", report::seeds_row(n.max(1), &runs));
            rows.extend(runs);
        }
    }
    if let Some(p) = &a.json {
        std::fs::write(p, serde_json::to_vec_pretty(&serde_json::json!({"settings": format!("{a:?}"), "rows": rows}))?)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        a: SimulateArgs,
    }

    fn args(extra: &[&str]) -> SimulateArgs {
        let mut v = vec!["sim", "--mib", "64", "--block-mib", "4"];
        v.extend_from_slice(extra);
        Cli::parse_from(v).a
    }

    #[test]
    fn one_agent_takes_the_time_of_one_copy() {
        let r = run_one(&args(&[]), 1).unwrap();
        assert!((r.t_over_t1 - 1.0).abs() < 0.1, "{r:?}");
        assert!((r.relay_copies - 1.0).abs() < 0.01, "{r:?}");
    }

    #[test]
    fn the_relay_sends_about_one_copy_for_many_agents() {
        let r = run_one(&args(&[]), 16).unwrap();
        assert_eq!(r.unfinished, 0, "{r:?}");
        assert!(r.relay_copies < 1.5, "the relay's link carries about one copy: {r:?}");
    }

    #[test]
    fn failures_leave_no_survivor_unfinished() {
        let r = run_one(&args(&["--fail-fraction", "0.2", "--seed", "7"]), 20).unwrap();
        assert!(r.failed > 0, "{r:?}");
        assert_eq!(r.unfinished, 0, "{r:?}");
    }

    #[test]
    fn blocks_dropped_from_every_serve_cache_come_from_the_relay_again_unless_the_fleet_keeps_them() {
        // 16 blocks; a slow host (a fifth of the others' rate) lags far behind the others. With caches
        // of four blocks that keep the newest, the fast agents all drop what it still needs, and it
        // gets those from the relay again (the tracker was told of every drop); kept for good, they
        // reach it through peers. Caches that keep a sample of their own of the older blocks
        // (`swarm::Keep`) keep most blocks somewhere in a fleet of sixteen.
        let kept = run_one(&args(&["--slow-hosts", "1", "--serve-cache-mib", "0"]), 4).unwrap();
        let newest = run_one(&args(&["--slow-hosts", "1", "--serve-cache-mib", "16", "--cache-keeps-newest"]), 4).unwrap();
        let newest_16 = run_one(&args(&["--slow-hosts", "1", "--serve-cache-mib", "16", "--cache-keeps-newest"]), 16).unwrap();
        let sampled_16 = run_one(&args(&["--slow-hosts", "1", "--serve-cache-mib", "16"]), 16).unwrap();
        for r in [&kept, &newest, &newest_16, &sampled_16] {
            assert_eq!(r.unfinished, 0, "{r:?}");
            assert!(r.slow_over_own_bound.is_some_and(|s| s < 1.1), "the slow host at its own link's pace: {r:?}");
        }
        assert!(kept.relay_copies < 1.02, "{kept:?}");
        assert!(newest.relay_copies > 1.1, "blocks nobody keeps any more come from the relay: {newest:?}");
        assert!(newest_16.relay_copies > 1.1, "{newest_16:?}");
        assert!(sampled_16.relay_copies < newest_16.relay_copies - 0.1, "the fleet's samples keep what the lagging agent needs: {sampled_16:?} against {newest_16:?}");
    }

    #[test]
    fn round_trips_through_busy_queues_cost_time_and_pipelining_hides_them_from_one_agent() {
        let fluid = run_one(&args(&["--queue-ms", "0", "--rtt-ms", "0"]), 8).unwrap();
        let queued = run_one(&args(&[]), 8).unwrap();
        assert!(queued.secs > fluid.secs * 1.02, "peer reads wait behind busy queues: {fluid:?} vs {queued:?}");
        let alone = run_one(&args(&[]), 1).unwrap();
        assert!((alone.t_over_t1 - 1.0).abs() < 0.05, "pipelined relay reads keep one agent's link full: {alone:?}");
        let one_connection = run_one(&args(&["--relay-readers", "1"]), 1).unwrap();
        assert!((one_connection.t_over_t1 - 1.0).abs() < 0.05, "pipelined, one connection is enough: {one_connection:?}");
        let unpipelined = run_one(&args(&["--relay-depth", "1", "--relay-readers", "1"]), 1).unwrap();
        assert!(unpipelined.secs > alone.secs * 1.02, "one read at a time idles a round trip per block: {alone:?} vs {unpipelined:?}");
    }

    #[test]
    fn a_seed_names_one_outcome() {
        // Spread joins, slow hosts and failures: the paths where a map's order once chose among equals.
        let a = Cli::parse_from(["sim", "--mib", "256", "--link", "100mbit", "--join-spread", "30", "--slow-fraction", "0.2", "--fail-fraction", "0.1", "--seed", "3"]).a;
        let (x, y) = (run_one(&a, 8).unwrap(), run_one(&a, 8).unwrap());
        assert_eq!(serde_json::to_string(&x).unwrap(), serde_json::to_string(&y).unwrap());
    }

    #[test]
    fn many_seeds_give_each_seed_its_own_run_in_seed_order() {
        let a = Cli::parse_from(["sim", "--mib", "64", "--link", "100mbit", "--join-spread", "10", "--slow-fraction", "0.3", "--seed", "5", "--seeds", "3"]).a;
        let runs = run_seeds(&a, 4).unwrap();
        assert_eq!(runs.iter().map(|r| r.seed).collect::<Vec<_>>(), vec![5, 6, 7]);
        for r in &runs {
            let alone = run_one(&SimulateArgs { seed: r.seed, ..a.clone() }, 4).unwrap();
            assert_eq!(serde_json::to_string(r).unwrap(), serde_json::to_string(&alone).unwrap(), "seed {} run among others is the seed run alone", r.seed);
        }
        assert_ne!(serde_json::to_string(&runs[0]).unwrap().replace("\"seed\":5", ""), serde_json::to_string(&runs[1]).unwrap().replace("\"seed\":6", ""), "different seeds, different fleets");
        let line = report::seeds_row(4, &runs);
        let worst = runs.iter().max_by(|x, y| x.t_over_t1.total_cmp(&y.t_over_t1)).unwrap();
        assert!(line.contains(&format!("{:.3} ({})", worst.t_over_t1, worst.seed)), "the worst run is named with its seed: {line}");
    }
}
