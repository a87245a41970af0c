//! `fastrepl demo`: the main job on an embedded default. A local master with a few hundred MB of
//! mixed data; a relay and replicas synced through it, all joining at once, verified; then the same
//! number of replicas synced natively from the same master, verified; a table side by side.

use anyhow::{bail, Context, Result};
use fixtures::{data, Flavor, Proc, Server};
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

#[derive(clap::Args)]
/// `fastrepl-lab demo` arguments.
pub struct DemoArgs {
    /// Server build: redis-7.0, valkey-8.1 or redis-6.2.
    #[arg(long, default_value = "redis-7.0")]
    server: String,
    /// Approximate dataset size in MB.
    #[arg(long, default_value_t = 256)]
    mb: usize,
    /// Replicas per mode.
    #[arg(long, default_value_t = 2)]
    replicas: usize,
    /// `mixed` (big values, small keys of every type, functions) or `original` (the dataset of the
    /// original experiment: 256 values of 3.66 MB, about 937 MB).
    #[arg(long, default_value = "mixed", value_parser = ["mixed", "original"])]
    dataset: String,
    /// Also join the same number of replicas again against the warm relay (cached snapshot).
    #[arg(long)]
    warm_join: bool,
    /// Write the raw results as JSON here.
    #[arg(long)]
    out: Option<std::path::PathBuf>,
    /// Transport for the cold joins: auto, tcp, shm, ucx, ucx-tcp or ucx-sm (ucx restricted to
    /// UCX's tcp or shared-memory transports).
    #[arg(long, value_enum, default_value = "auto")]
    transport: LabTransport,
    /// With --warm-join: one warm round per transport listed (default: the cold one's).
    #[arg(long, value_enum, value_delimiter = ',')]
    warm_transports: Vec<LabTransport>,
}

use crate::transport::LabTransport;

#[derive(serde::Serialize)]
struct Mode {
    name: String,
    secs: f64,
    per_replica: Vec<f64>,
    forks: i64,
    /// CPU seconds of the master process and its reaped fork children during the mode.
    master_cpu_secs: f64,
    verified: bool,
    detail: String,
    /// Per-replica join reports (fastrepl modes).
    reports: Vec<agent::Report>,
}

use crate::bench::run::stat;

/// CPU seconds of the master and its reaped fork children.
fn cpu_secs(pid: u32) -> f64 {
    agent::procstat::cpu_secs_with_children(pid).unwrap_or(0.0)
}

/// Run the demo; the exit status says whether every replica verified.
pub fn run(a: DemoArgs) -> Result<ExitCode> {
    let flavor = Flavor::parse(&a.server).with_context(|| format!("unknown server {:?}", a.server))?;
    let n = a.replicas.clamp(1, 8);
    println!("== fastrepl demo: {} master, {} MB of data, {n} replicas per mode", flavor.name(), a.mb);
    let master = Server::try_start(flavor, &["--repl-backlog-size", "256mb"]).map_err(anyhow::Error::msg)?;
    let mut mc = master.client();
    let t = Instant::now();
    if a.dataset == "original" {
        data::fill_big_values(&mut mc, 256, 3_660_000);
    } else {
        let big = (a.mb * 3 / 4).max(4) / 4;
        data::fill_big_values(&mut mc, big, 4 << 20);
        data::fill_small_mixed(&mut mc, 20_000);
        data::fill_every_type(&mut mc, 1, flavor.has_functions());
    }
    let used = mc.info("memory")?.get("used_memory_human").unwrap_or("?").to_string();
    let keys = mc.cmd(&["DBSIZE"])?.as_int().unwrap_or(0);
    println!("master {} filled in {:.1} s: {used} used, {keys} keys in db0 (+ other dbs)", master.addr(), t.elapsed().as_secs_f64());

    let native = run_native(&master, flavor, n)?;
    let warm: Vec<LabTransport> = if !a.warm_join {
        Vec::new()
    } else if a.warm_transports.is_empty() {
        vec![a.transport]
    } else {
        a.warm_transports.clone()
    };
    let fast = run_fastrepl(&master, flavor, n, a.transport, &warm)?;
    let mut modes = vec![native];
    modes.extend(fast);

    println!();
    println!("| mode | replicas | all in sync (s) | per replica (s) | forks on master | master CPU (s) | verified | notes |");
    println!("|---|---|---|---|---|---|---|---|");
    for m in &modes {
        let per: Vec<String> = m.per_replica.iter().map(|s| format!("{s:.2}")).collect();
        println!("| {} | {n} | {:.2} | {} | {} | {:.2} | {} | {} |", m.name, m.secs, per.join(", "), m.forks, m.master_cpu_secs, if m.verified { "yes" } else { "NO" }, m.detail);
    }
    println!();
    for m in &modes[1..] {
        println!("{} / native time: {:.2}", m.name, m.secs / modes[0].secs.max(1e-9));
    }
    println!("(native: repl-diskless-sync yes, delay 0, replicas repl-diskless-load on-empty-db; the cold fastrepl time runs from starting the relay)");
    if let Some(out) = &a.out {
        let doc = serde_json::json!({
            "command": std::env::args().collect::<Vec<_>>().join(" "),
            "machine": crate::bench::report::machine(),
            "server": mc.info("server")?.get("redis_version").unwrap_or("?"),
            "flavor": flavor.name(),
            "dataset": a.dataset,
            "used_memory": used,
            "master_settings": {"repl-diskless-sync": "yes", "repl-diskless-sync-delay": 0, "repl-backlog-size": "256mb"},
            "modes": modes,
        });
        std::fs::write(out, serde_json::to_string_pretty(&doc)?).with_context(|| format!("write {}", out.display()))?;
        println!("raw results: {}", out.display());
    }
    if modes.iter().all(|m| m.verified) {
        Ok(ExitCode::SUCCESS)
    } else {
        eprintln!("demo: a replica did not verify");
        Ok(ExitCode::from(1))
    }
}

fn run_fastrepl(master: &Server, flavor: Flavor, n: usize, transport: LabTransport, warm: &[LabTransport]) -> Result<Vec<Mode>> {
    let exe = crate::fastrepl_bin()?;
    let mut token = [0u8; 24];
    getrandom::getrandom(&mut token).map_err(|e| anyhow::anyhow!("random token: {e}"))?;
    let token: String = token.iter().map(|b| format!("{b:02x}")).collect();
    let replicas: Vec<Server> = (0..n).map(|_| Server::try_start(flavor, &[]).map_err(anyhow::Error::msg)).collect::<Result<_>>()?;
    let mut mc = master.client();
    let forks0 = stat(&mut mc, "stats", "total_forks")?;
    let cpu0 = cpu_secs(master.pid());
    let relay_port = fixtures::free_port();
    let relay_addr = format!("127.0.0.1:{relay_port}");
    println!("\n-- fastrepl: relay on {relay_addr}, {n} agents joining at once");
    let t0 = Instant::now();
    let mut cmd = Command::new(&exe);
    cmd.args(["relay", "--master", &master.addr(), "--listen", &relay_addr]).env("FASTREPL_TOKEN", &token);
    let _relay = Proc::spawn("relay", cmd);
    fixtures::wait_until("the relay to listen", Duration::from_secs(30), || std::net::TcpStream::connect(&relay_addr).ok());
    let mut cold = joins(&exe, &token, &relay_addr, &replicas, t0, "fastrepl cold", transport)?;
    cold.forks = stat(&mut mc, "stats", "total_forks")? - forks0;
    cold.master_cpu_secs = cpu_secs(master.pid()) - cpu0;
    cold.verified = verify_all(master, &replicas)?;
    let mut modes = vec![cold];
    for &t in warm {
        println!("\n-- fastrepl: {n} more agents against the warm relay, transport {}", t.name());
        let replicas: Vec<Server> = (0..n).map(|_| Server::try_start(flavor, &[]).map_err(anyhow::Error::msg)).collect::<Result<_>>()?;
        let (forks0, cpu0) = (stat(&mut mc, "stats", "total_forks")?, cpu_secs(master.pid()));
        let mut m = joins(&exe, &token, &relay_addr, &replicas, Instant::now(), "fastrepl warm", t)?;
        m.forks = stat(&mut mc, "stats", "total_forks")? - forks0;
        m.master_cpu_secs = cpu_secs(master.pid()) - cpu0;
        m.verified = verify_all(master, &replicas)?;
        modes.push(m);
    }
    Ok(modes)
}

/// Join `replicas` through the relay at once; times from `t0`.
fn joins(exe: &std::path::Path, token: &str, relay_addr: &str, replicas: &[Server], t0: Instant, name: &str, transport: LabTransport) -> Result<Mode> {
    let n = replicas.len();
    let (targ, tls) = (transport.choice().map_or("auto", |k| k.name()), transport.ucx_tls());
    let mut joins: Vec<Proc> = replicas
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let mut cmd = Command::new(exe);
            cmd.args(["join", "--relay", relay_addr, "--replica", &r.addr(), "--json", "--transport", targ]).env("FASTREPL_TOKEN", token).env("FASTREPL_LOG", "warn");
            if let Some(tls) = tls {
                cmd.env("UCX_TLS", tls);
            }
            Proc::spawn(&format!("join-{i}"), cmd)
        })
        .collect();
    let mut per = Vec::new();
    let mut handoffs = Vec::new();
    let mut phases = String::new();
    let mut reports = Vec::new();
    let since = t0.elapsed().as_secs_f64();
    for j in &mut joins {
        let code = j.wait(Duration::from_secs(3600));
        let out = j.output();
        if code != Some(0) && code != Some(3) {
            bail!("{} failed (exit {code:?}):\n{out}", j.name);
        }
        let report: agent::Report = out.lines().rev().find_map(|l| serde_json::from_str(l).ok()).with_context(|| format!("{} printed no report:\n{out}", j.name))?;
        let p = &report.phases;
        // Join phases count from the join's start; the mode's clock may have started earlier (relay).
        per.push(since + p.handed_off);
        handoffs.push(format!("{:?}", report.handoff).to_lowercase());
        if phases.is_empty() {
            phases = format!(
                "first byte {:.2}, pulled {:.2}, loaded {:.2}, caught up {:.2}, handed off {:.2} s; {:.0} MiB/s",
                p.first_byte, p.pulled, p.loaded, p.caught_up, p.handed_off, report.pull_mib_s
            );
        }
        reports.push(report);
    }
    let secs = t0.elapsed().as_secs_f64();
    println!("all {n} replicas handed off ({}) in {secs:.2} s; replica 1 (join clock): {phases}", handoffs.join(", "));
    let used = reports.first().map(|r| r.transport.to_string()).unwrap_or_default();
    let detail_t = reports.first().map(|r| r.transport_detail.split(';').next().unwrap_or("").to_string()).unwrap_or_default();
    Ok(Mode {
        name: if transport.name() == used || transport == LabTransport::Auto { format!("{name} ({used})") } else { format!("{name} ({})", transport.name()) },
        secs,
        per_replica: per,
        forks: 0,
        master_cpu_secs: 0.0,
        verified: false,
        detail: format!("handoff {}; {detail_t}", handoffs.join("/")),
        reports,
    })
}

fn run_native(master: &Server, flavor: Flavor, n: usize) -> Result<Mode> {
    println!("\n-- native: {n} replicas REPLICAOF the master at once");
    let replicas: Vec<Server> = (0..n).map(|_| Server::try_start(flavor, &["--repl-diskless-load", "on-empty-db"]).map_err(anyhow::Error::msg)).collect::<Result<_>>()?;
    let mut mc = master.client();
    let forks0 = stat(&mut mc, "stats", "total_forks")?;
    let cpu0 = cpu_secs(master.pid());
    let (host, port) = master.addr().rsplit_once(':').map(|(h, p)| (h.to_string(), p.to_string())).context("master address")?;
    let t0 = Instant::now();
    for r in &replicas {
        r.client().cmd(&["REPLICAOF", &host, &port])?;
    }
    let mut per = vec![0.0; n];
    let mut phases = vec![serde_json::json!({}); n];
    let mut clients: Vec<client::Client> = replicas.iter().map(Server::client).collect();
    let all: Vec<usize> = (0..n).collect();
    crate::bench::run::wait_native_in_sync(&mut clients, &all, t0, Instant::now() + Duration::from_secs(3600), &mut phases, &mut per)?;
    let secs = t0.elapsed().as_secs_f64();
    println!("all {n} replicas in sync natively in {secs:.2} s");
    let forks = stat(&mut mc, "stats", "total_forks")? - forks0;
    let master_cpu_secs = cpu_secs(master.pid()) - cpu0;
    let verified = verify_all(master, &replicas)?;
    // The replicas are stopped when this returns: the master's replica list is clean for the next mode.
    Ok(Mode { name: "native diskless".into(), secs, per_replica: per, forks, master_cpu_secs, verified, detail: "repl-diskless-sync-delay 0".into(), reports: vec![] })
}

fn verify_all(master: &Server, replicas: &[Server]) -> Result<bool> {
    let mut all = true;
    for r in replicas {
        let mut a = master.client();
        let mut b = r.client();
        let out = verify::compare(&mut a, &mut b, &verify::Options::default())?;
        if out.identical() {
            println!("verify {}: identical ({} keys, dbs {:?})", r.addr(), out.keys, out.databases);
        } else {
            all = false;
            println!("verify {}: {} DIFFERENCES: {:?}", r.addr(), out.difference_count, out.differences);
        }
    }
    Ok(all)
}
