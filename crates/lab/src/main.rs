//! `fastrepl-lab`: the demo, the benchmarks and their reports. Ships beside `fastrepl` (the way
//! redis-benchmark ships beside redis-server); operators do not need it to run fastrepl.

use anyhow::Result;
use clap::{Parser, Subcommand};
use lab::{bench, codecs, demo, faults, probe, report, simulate, soak};
use std::process::ExitCode;

#[derive(Parser)]
#[command(name = "fastrepl-lab", version, about = "fastrepl's lab: demo, benchmarks, transport probes")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// The self-contained demonstration: a master with data, a relay, two replicas, native side by side.
    Demo(demo::DemoArgs),
    /// The original experiments and more: native replication vs fastrepl side by side on namespace
    /// hosts with shaped links; table, raw JSON, Markdown and PNG charts.
    Bench(bench::BenchArgs),
    /// Transport microbenchmark: throughput, latency and CPU per read for each transport from 32 B to
    /// 32 MiB, next to memcpy and raw TCP baselines; table, JSON and PNG charts.
    Probe(probe::ProbeArgs),
    /// Re-render results.md and charts from bench results.json files, and the docs' summary tables.
    Report(report::ReportArgs),
    /// The fault matrix: faults × the phase they strike in, with a writer running; every cell judged by
    /// one invariant; results.json and results.md in --out.
    Faults(faults::FaultsArgs),
    /// Many joins against one relay with a writer running: every join verified, the relay's RSS, fds
    /// and memfds shown flat.
    Soak(soak::SoakArgs),
    /// Block codecs on a snapshot: each codec's ratio, blocks kept raw and one core's rates on an RDB
    /// with and without LZF, block by block as the relay cuts it.
    Codecs(codecs::CodecsArgs),
    /// The agents' swarm on modelled fleets (1 to 10 000 agents): T(N)/T(1), relay copies, slowest agent.
    Simulate(simulate::SimulateArgs),
}

fn main() -> ExitCode {
    // Before any thread exists: UCX reads these from the environment.
    #[cfg(feature = "ucx")]
    ucx::apply_tuned_env();
    let cli = Cli::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_env("FASTREPL_LOG").unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_target(false).init();
    let r: Result<ExitCode> = match cli.cmd {
        Cmd::Demo(a) => demo::run(a),
        Cmd::Bench(a) => bench::main(a).map(|_| ExitCode::SUCCESS),
        Cmd::Probe(a) => probe::run(a),
        Cmd::Report(a) => report::run(a).map(|_| ExitCode::SUCCESS),
        Cmd::Simulate(a) => simulate::run(a).map(|_| ExitCode::SUCCESS),
        Cmd::Faults(a) => faults::run(a).map(|_| ExitCode::SUCCESS),
        Cmd::Soak(a) => soak::run(a).map(|_| ExitCode::SUCCESS),
        Cmd::Codecs(a) => codecs::run(a).map(|_| ExitCode::SUCCESS),
    };
    match r {
        Ok(code) => code,
        Err(e) => {
            eprintln!("fastrepl-lab: {e:#}");
            ExitCode::from(1)
        }
    }
}
