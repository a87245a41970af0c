//! `fastrepl-lab bench`: the original experiment (RDMA-accelerated Redis replication: native sync of
//! ~1 GB to 1..N replicas over 100 Mb/s and 1 Gb/s links) and more, native replication and fastrepl
//! side by side in one run, on hosts made of network namespaces with shaped links.
//!
//! - [`scenario`]: what each scenario runs (dataset, links, replica counts, modes).
//! - [`run`]: one measured run — fresh replicas, one mode, metrics, verification.
//! - [`report`]: raw JSON, Markdown table and PNG charts, with the machine described.
pub mod cluster;
pub mod report;
pub mod run;
pub mod scenario;

use anyhow::{bail, Context, Result};
use std::path::PathBuf;

/// `fastrepl-lab bench` arguments.
#[derive(clap::Args, Debug, Clone)]
pub struct BenchArgs {
    /// original, fanout, staggered, small-keys, mixed, under-load, slow-host, agent-killed,
    /// late-joiner, zero-fork, cluster (3 shards, a new replica each: native vs fastrepl; not in
    /// `all`), uneven (4 replicas at 100 Mbit/s, the last at 20, against 1 alone: each replica's time
    /// over T(1); not in `all`), write-heavy (600 MiB at 100 Mbit/s under 8 MB/s of writes, a 64 MB
    /// backlog: native loops, the relay keeps the stream in its store; not in `all`), compressible
    /// (a cache's data, from the master and from a replica with and without LZF; not in `all`), or
    /// all.
    #[arg(long, default_value = "original")]
    pub scenario: String,
    /// Toy scale: every scenario in a few minutes (what the test suite runs).
    #[arg(long)]
    pub quick: bool,
    /// Directory for results.json, results.md and the charts.
    #[arg(long, default_value = "bench-results")]
    pub out: PathBuf,
    /// Run everything on loopback instead of namespace hosts (no root needed; links unshaped).
    #[arg(long)]
    pub no_netns: bool,
    /// Override the scenario's links: 100mbit, 1gbit, 10gbit, unshaped.
    #[arg(long, value_delimiter = ',')]
    pub links: Vec<String>,
    /// Override the scenario's replica counts.
    #[arg(long, value_delimiter = ',')]
    pub replicas: Vec<usize>,
    /// Override the number of big values (scenarios whose data is big values): e.g. `--values 64`
    /// for 256 MiB of 4 MiB values.
    #[arg(long)]
    pub values: Option<usize>,
    /// Override the modes: native-disk, native-diskless, fastrepl-tcp, fastrepl-ucx, fastrepl-shm, fastrepl-tcp-from-replica (the relay captures from a replica of the master, its RDB as configured: LZF), fastrepl-tcp-from-replica-raw (and switches its RDB compression off for the capture: what `--source-rdb auto` does while blocks are compressed), fastrepl-tcp-uncompressed (the relay keeps blocks as the source wrote them: `--compression none`).
    #[arg(long, value_delimiter = ',')]
    pub modes: Vec<String>,
    /// Server build for master and replicas: redis-7.0, valkey-8.1, redis-6.2.
    #[arg(long, default_value = "redis-7.0")]
    pub server: String,
    /// Put the first K replica hosts on a link `--slow-factor` times slower (default: the scenario's;
    /// `slow-host` has one).
    #[arg(long)]
    pub slow_hosts: Option<usize>,
    /// How much slower the slow hosts' link is.
    #[arg(long, default_value_t = 5)]
    pub slow_factor: u32,
    /// `repl-diskless-sync-delay` on the master for diskless modes (native, and the relay's capture);
    /// reported with every figure. 1 s lets replicas that start together share one fork.
    #[arg(long, default_value_t = 1)]
    pub diskless_delay: u32,
    /// Runs per (link, replica count, mode), interleaved across modes so that drift on a shared
    /// machine hits all modes alike; tables and charts show the median, results.json every run.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=20))]
    pub repeat: u32,
    /// Scenarios that give up on a native run not in sync (write-heavy): after this many seconds
    /// (default 240, 60 with --quick). Longer than fastrepl's time there (~180 s, most of it
    /// streaming the log), so that only a sync that does not finish is given up: natively each
    /// attempt there ends in ~34 s. A fastrepl run that outlives it fails.
    #[arg(long)]
    pub give_up_secs: Option<u64>,
}

/// Run the benchmark; writes results into `args.out` and prints the table.
pub fn main(args: BenchArgs) -> Result<()> {
    // A zone lost in a cluster: its own topology and figures (see [`cluster`]).
    if args.scenario == "cluster" {
        on_signal_remove_labs()?;
        return cluster::main(&args);
    }
    let names: Vec<&str> = if args.scenario == "all" { scenario::ALL.to_vec() } else { vec![args.scenario.as_str()] };
    let flavor = fixtures::Flavor::parse(&args.server).with_context(|| format!("unknown server {:?}", args.server))?;
    // Check every scenario's settings before anything runs.
    let specs: Vec<scenario::Spec> = names.iter().map(|n| scenario::Spec::get(n, &args)).collect::<Result<_>>()?;
    if !args.no_netns && !fixtures::netns::available() {
        bail!("namespace hosts need root and `ip` (iproute2): run as root, or pass --no-netns to run on loopback (links unshaped)");
    }
    std::fs::create_dir_all(&args.out).with_context(|| format!("create {}", args.out.display()))?;
    let exe = crate::fastrepl_bin()?;
    // Interrupted (Ctrl-C, SIGTERM): destructors will not run, so remove the namespaces here, and let
    // every server, relay and agent die with us.
    fixtures::children_die_with_parent(true);
    on_signal_remove_labs()?;
    let mut all = Vec::new();
    for spec in specs {
        let name = spec.name.clone();
        println!("== scenario {name}: {}", spec.describe());
        let runs = run::scenario(&spec, &args, flavor, &exe)?;
        all.push(report::ScenarioResult { spec, runs });
    }
    report::write(&args, flavor, &all)
}

/// On SIGINT/SIGTERM: remove every namespace host this process made, then exit with 130.
fn on_signal_remove_labs() -> Result<()> {
    let mut signals = signal_hook::iterator::Signals::new([signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM]).context("install signal handler")?;
    std::thread::spawn(move || {
        if signals.forever().next().is_some() {
            eprintln!("bench: interrupted; removing namespace hosts");
            fixtures::netns::remove_all_labs();
            std::process::exit(130); // children die with us (PR_SET_PDEATHSIG)
        }
    });
    Ok(())
}
