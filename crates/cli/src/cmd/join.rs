//! `fastrepl join`: its arguments, the agent's configuration from them, the join (once, or for
//! life with `--watch`), its report or failure as printed, and the progress display on a terminal.

use super::args::{LogFormat, PullArgs, RelayTlsArgs, SentinelArgs, TlsArgs};
use super::{dropped_output, on_interrupt, Versioned};
use anyhow::{Context, Result};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// `fastrepl join`'s arguments.
#[derive(clap::Args)]
pub struct JoinArgs {
    /// Write typed events (JSON lines: each phase, the handoff) to this file, for tools; the format
    /// is in docs/operations.md.
    #[arg(long, env = "FASTREPL_EVENTS")]
    events: Option<PathBuf>,
    #[command(flatten)]
    relay_tls: RelayTlsArgs,
    /// The relay, host:port.
    #[arg(long, env = "FASTREPL_RELAY")]
    relay: endpoint::Endpoint,
    /// The local server to make a replica, host:port.
    #[arg(long, env = "FASTREPL_REPLICA")]
    replica: String,
    /// File holding the relay token (else $FASTREPL_TOKEN).
    #[arg(long, env = "FASTREPL_TOKEN_FILE")]
    token_file: Option<PathBuf>,
    /// The master as the replica reaches it (default: as the relay reaches it).
    #[arg(long, conflicts_with = "sentinel", env = "FASTREPL_MASTER")]
    master: Option<String>,
    #[command(flatten)]
    tls: TlsArgs,
    #[command(flatten)]
    sentinel: SentinelArgs,
    /// With --relay-cacert: serve other agents over TLS with this certificate (signed by the same CA;
    /// checked by peers against it, not by name). Without it, an agent on a TLS relay does not serve.
    #[arg(long, requires_all = ["relay_cacert", "peer_tls_key"], env = "FASTREPL_PEER_TLS_CERT")]
    peer_tls_cert: Option<PathBuf>,
    /// Private key of --peer-tls-cert, PEM.
    #[arg(long, requires = "peer_tls_cert", env = "FASTREPL_PEER_TLS_KEY")]
    peer_tls_key: Option<PathBuf>,
    /// ACL user for the master (the replica's masteruser).
    #[arg(long, env = "FASTREPL_MASTER_USER")]
    master_user: Option<String>,
    /// File holding the master's password (else $FASTREPL_MASTER_PASSWORD).
    #[arg(long, env = "FASTREPL_MASTER_PASSWORD_FILE")]
    master_password_file: Option<PathBuf>,
    /// Speak TLS (with --tls's certificates) to the local server too: for a local server that
    /// listens on a tls-port only.
    #[arg(long, requires = "tls", env = "FASTREPL_REPLICA_TLS")]
    replica_tls: bool,
    /// ACL user for the local server.
    #[arg(long, env = "FASTREPL_REPLICA_USER")]
    replica_user: Option<String>,
    /// File holding the local server's password (else $FASTREPL_REPLICA_PASSWORD).
    #[arg(long, env = "FASTREPL_REPLICA_PASSWORD_FILE")]
    replica_password_file: Option<PathBuf>,
    /// Replace the local server's data if it has any.
    #[arg(long, env = "FASTREPL_FORCE")]
    force: bool,
    /// Stay beside the local server until SIGTERM (a Kubernetes native sidecar): wait for it to
    /// answer and load, join it whenever it runs standalone (its first start; after a restart, when
    /// its config has no replicaof), leave it alone while it is a replica (linked or reconnecting by
    /// itself), a master with replicas of its own or promoted holding data, a cluster node, or the
    /// master itself. Each join's report is printed as it ends; a failed one is tried again 30 s
    /// later, or, when another try cannot mend it (incompatible), once the server restarted. With --force for a
    /// server that loads data of its own (AOF). Exit 0 when stopped while watching.
    #[arg(long, env = "FASTREPL_WATCH")]
    watch: bool,
    #[command(flatten)]
    pull: PullArgs,
    /// Where the agent listens for its local replica (it pulls the snapshot from here).
    #[arg(long, alias = "listen", default_value = "127.0.0.1:0", env = "FASTREPL_REPLICA_LISTEN")]
    replica_listen: SocketAddr,
    /// Seconds to wait for the replica to load the snapshot.
    #[arg(long, default_value_t = 3600, env = "FASTREPL_LOAD_TIMEOUT_SECS")]
    load_timeout_secs: u64,
    /// Seconds to wait for the replica to be in sync with the master after the handoff. A partial
    /// resync takes well under a second; past this the join ends as a full sync (exit 3), saying what
    /// it saw (the master's full syncs, its output-buffer disconnects, the replica's link), and leaves
    /// the replica the master's, trying natively.
    #[arg(long, default_value_t = limits::HANDOFF_WAIT_DEFAULT.as_secs(), env = "FASTREPL_HANDOFF_TIMEOUT_SECS")]
    handoff_timeout_secs: u64,
    /// Print one JSON object with the report.
    #[arg(long, env = "FASTREPL_JSON")]
    json: bool,
    /// Do not serve blocks to other agents of the same snapshot (this agent still fetches from them).
    #[arg(long, env = "FASTREPL_NO_SERVE")]
    no_serve: bool,
    /// Where to listen for other agents (default: the address this host reaches the relay from, on
    /// any free port).
    #[arg(long, env = "FASTREPL_PEER_LISTEN")]
    peer_listen: Option<SocketAddr>,
    /// The address other agents should use to reach this one, host:port (NAT, multi-homed hosts);
    /// default: the address the relay sees this agent at, with the listening port.
    #[arg(long, env = "FASTREPL_ADVERTISE")]
    advertise: Option<String>,
    /// MiB of blocks already fed to the replica that are kept to serve other agents: once full, the
    /// newest half, and a sample of the older blocks of this agent's own (so that a fleet keeps every
    /// block somewhere for agents far behind).
    #[arg(long, default_value_t = limits::SERVE_CACHE_BYTES_DEFAULT >> 20, env = "FASTREPL_SERVE_CACHE_MIB")]
    serve_cache_mib: u64,
    /// After the handoff, keep serving other agents that still pull for at most this many seconds.
    #[arg(long, default_value_t = limits::SERVE_LINGER_DEFAULT.as_secs(), env = "FASTREPL_SERVE_LINGER_SECS")]
    serve_linger_secs: u64,
    /// Attempts after the first when a join fails before the handoff for a reason time can mend
    /// (relay, master or link down, snapshot lost or sealed, master failed over); 0 = never retry.
    #[arg(long, default_value_t = limits::JOIN_RETRIES_DEFAULT, value_parser = clap::value_parser!(u32).range(0..=100), env = "FASTREPL_RETRIES")]
    retries: u32,
    /// Longest wait between attempts, in seconds (waits start at 1 s and double, jittered).
    #[arg(long, default_value_t = limits::JOIN_RETRY_MAX.as_secs(), value_parser = clap::value_parser!(u64).range(1..=3600), env = "FASTREPL_RETRY_MAX_SECS")]
    retry_max_secs: u64,
    /// Serve the join's progress as Prometheus metrics on this address while it runs.
    #[arg(long, alias = "metrics", env = "FASTREPL_JOIN_METRICS")]
    join_metrics: Option<SocketAddr>,
    /// Cluster nodes: after staging the snapshot and shutting the node down, run this shell command
    /// (sh -c) to start it again. Without it the node's supervisor must (systemd Restart=, a
    /// container restart policy).
    #[arg(long, env = "FASTREPL_RESTART_COMMAND")]
    restart_command: Option<String>,
    /// Cluster nodes: seconds to wait for the node to answer again after its shutdown.
    #[arg(long, default_value_t = 120, env = "FASTREPL_RESTART_TIMEOUT_SECS")]
    restart_timeout_secs: u64,
    /// Cluster nodes: the node's data directory as this host sees it (default: its CONFIG GET dir),
    /// for an agent in another container or mount namespace.
    #[arg(long, env = "FASTREPL_REPLICA_DIR")]
    replica_dir: Option<PathBuf>,
}

/// `fastrepl join`: one join, or with `--watch` a join whenever the local server needs one.
pub fn run(a: JoinArgs, log_format: LogFormat) -> Result<ExitCode> {
    if let Some(p) = &a.events {
        agent::events::open(p).with_context(|| format!("open the event stream {}", p.display()))?;
    }
    let (relay_addr, replica_addr, json, join_metrics, watch) = (a.relay.clone(), a.replica.clone(), a.json, a.join_metrics, a.watch);
    let cfg = join_config(a)?;
    on_interrupt(cfg.cancel.clone())?;
    if let Some(addr) = join_metrics {
        let live = cfg.live.clone();
        let bound = metrics::serve(addr, std::sync::Arc::new(move || live.prometheus() + &dropped_output("fastrepl_join"))).with_context(|| format!("serve metrics on {addr}"))?;
        tracing::info!("join metrics on http://{bound}/metrics");
    }
    if watch {
        // Each join said as it ends; the watch itself ends only when stopped.
        let mut interrupted = false;
        let _ = agent::join::watch::run(&cfg, |r| match r {
            Ok(joined) => {
                if let Err(e) = join_succeeded(&joined, &cfg, json) {
                    tracing::warn!(error = %format!("{e:#}"), "could not print the join's report");
                }
            }
            Err(f) => {
                interrupted = matches!(f.error, agent::Error::Interrupted);
                join_failed(&f, json, log_format, &relay_addr, &replica_addr);
            }
        });
        tracing::info!("stopped watching the local server");
        return Ok(if interrupted { ExitCode::from(130) } else { ExitCode::SUCCESS });
    }
    let bar = progress_bar(cfg.live.clone());
    let result = agent::join(&cfg);
    if let Some((stop, h)) = bar {
        stop.store(true, std::sync::atomic::Ordering::SeqCst);
        let _ = h.join();
    }
    match result {
        Ok(joined) => join_succeeded(&joined, &cfg, json),
        Err(f) => Ok(join_failed(&f, json, log_format, &relay_addr, &replica_addr)),
    }
}

/// The agent's configuration from `fastrepl join`'s flags (secrets read from their files or the
/// environment).
fn join_config(a: JoinArgs) -> Result<agent::Config> {
    let peer_cert = a.peer_tls_cert.as_ref().zip(a.peer_tls_key.as_ref());
    let token = a.relay_tls.credentials_serving(secrets::token(a.token_file.as_deref())?, peer_cert)?;
    let tls = a.tls.load()?;
    Ok(agent::Config {
        sentinel: a.sentinel.sentinels(tls.as_ref())?,
        tls,
        replica_tls: a.replica_tls,
        relay: a.relay,
        token: token.clone(),
        replica: a.replica,
        replica_auth: secrets::auth(a.replica_user.as_deref(), a.replica_password_file.as_deref(), "FASTREPL_REPLICA_PASSWORD")?,
        master: a.master,
        master_auth: secrets::auth(a.master_user.as_deref(), a.master_password_file.as_deref(), "FASTREPL_MASTER_PASSWORD")?,
        force: a.force,
        listen: a.replica_listen,
        pull: a.pull.config(),
        load_timeout: Duration::from_secs(a.load_timeout_secs),
        handoff_timeout: Duration::from_secs(a.handoff_timeout_secs),
        live: Default::default(),
        cancel: Default::default(),
        peers: agent::config::PeerConfig {
            serve: !a.no_serve,
            listen: a.peer_listen,
            advertise: a.advertise,
            cache_bytes: a.serve_cache_mib.saturating_mul(1 << 20),
            linger: Duration::from_secs(a.serve_linger_secs),
        },
        retry: agent::config::RetryPolicy { retries: a.retries, base: limits::JOIN_RETRY_BASE.min(Duration::from_secs(a.retry_max_secs)), max: Duration::from_secs(a.retry_max_secs) },
        restart: agent::config::Restart { command: a.restart_command, timeout: Duration::from_secs(a.restart_timeout_secs), dir: a.replica_dir },
    })
}

/// A join that ended: its report, then serving other agents a while; exit 0 for a partial resync,
/// 3 for a full one.
fn join_succeeded(joined: &agent::Joined, cfg: &agent::Config, json: bool) -> Result<ExitCode> {
    let report = &joined.report;
    if json {
        outln!("{}", serde_json::to_string(&Versioned { schema_version: agent::REPORT_SCHEMA_VERSION, ok: true, body: report })?);
    } else {
        print_report(report);
    }
    // The replica is done; other agents of the snapshot may still be pulling from this one.
    use std::io::Write;
    let _ = std::io::stdout().flush();
    let (secs, served) = joined.linger(cfg.peers.linger, &cfg.cancel);
    if served > 0 || secs >= 1.0 {
        tracing::info!(served_mib = served as f64 / 1048576.0, lingered_secs = secs, "done serving other agents");
    }
    Ok(match report.handoff {
        agent::Handoff::Partial => ExitCode::SUCCESS,
        agent::Handoff::Full => ExitCode::from(3),
    })
}

/// A join that failed: said from what happened to the replica; exit 130 when interrupted, else 1.
fn join_failed(f: &agent::Failed, json: bool, log_format: LogFormat, relay_addr: &endpoint::Endpoint, replica_addr: &str) -> ExitCode {
    let e = &f.error;
    if json {
        outln!(
            "{}",
            serde_json::json!({
                "schema_version": agent::REPORT_SCHEMA_VERSION,
                "ok": false,
                "error": e.to_string(),
                "error_kind": e.kind(),
                "retryable": e.retryable(),
                "attempts": f.attempts,
                "handed_over": f.handed_over(),
                "replica": f.replica.name(),
            })
        );
    }
    let tries = match f.attempts.len() {
        0 | 1 => String::new(),
        n => format!(" (after {n} attempts)"),
    };
    // Said from what happened to the replica in the last attempt, never a fixed sentence.
    // The addresses as given: "connect to relay: Connection refused" alone names no one.
    match log_format {
        LogFormat::Text => errln!("fastrepl join failed{tries} (relay {}, replica {}): {e}\n{}", relay_addr, replica_addr, f.replica.explain()),
        // Under --log-format json the last word is a log object like every other line.
        LogFormat::Json => tracing::error!(
            relay = %relay_addr,
            replica_addr = %replica_addr,
            attempts = f.attempts.len(),
            error = %e,
            error_kind = %e.kind(),
            replica = f.replica.name(),
            explain = %f.replica.explain(),
            "fastrepl join failed"
        ),
    }
    ExitCode::from(if matches!(e, agent::Error::Interrupted) { 130 } else { 1 })
}

/// A rate from real bytes over real time: bytes counted over the last few seconds of wall time,
/// not an estimate from how often the position moved.
struct Rate {
    samples: std::collections::VecDeque<(std::time::Instant, u64)>,
}

impl Rate {
    const WINDOW: Duration = Duration::from_secs(3);

    fn new() -> Rate {
        Rate { samples: std::collections::VecDeque::new() }
    }

    /// Record `bytes` (a running total) at `now`; bytes per second over the window, once there is
    /// more than one sample.
    fn update(&mut self, now: std::time::Instant, bytes: u64) -> Option<f64> {
        self.samples.push_back((now, bytes));
        while self.samples.len() > 2 && now.duration_since(self.samples[0].0) > Self::WINDOW {
            self.samples.pop_front();
        }
        let (t0, b0) = *self.samples.front()?;
        let secs = now.duration_since(t0).as_secs_f64();
        (secs > 0.0).then(|| bytes.saturating_sub(b0) as f64 / secs)
    }
}

/// What the display shows for the join's state: a spinner and a line while the size is unknown
/// (waiting for the relay's capture, pulling while the master still produces), a bar once it is.
fn progress_line(phase: Option<agent::JoinPhase>, since_phase: Duration, sent: u64, total: u64, rate: Option<f64>, peers: Option<(u64, u64)>) -> (bool, String) {
    use indicatif::HumanBytes;
    let rate = rate.map(|r| format!("{}/s", HumanBytes(r as u64))).unwrap_or_else(|| "-".into());
    let sources = peers.map(|(relay, peers)| format!(" (relay {}, peers {})", HumanBytes(relay), HumanBytes(peers))).unwrap_or_default();
    if phase == Some(agent::JoinPhase::WaitingForCapture) {
        return (false, format!("waiting for the relay's capture ({} s)", since_phase.as_secs()));
    }
    if total == 0 {
        // The master is still producing the snapshot: its size is not known yet.
        let phase = phase.map(agent::JoinPhase::name).unwrap_or_default();
        return (false, format!("{phase}: {} so far, size not known yet (the master is still writing it), {rate}{sources}", HumanBytes(sent)));
    }
    (true, format!("{}  {rate}{sources}", phase.map(agent::JoinPhase::name).unwrap_or_default()))
}

/// A progress display on stderr, only when stderr is a terminal: phase, RDB bytes sent, rate.
fn progress_bar(live: std::sync::Arc<agent::Live>) -> Option<(std::sync::Arc<std::sync::atomic::AtomicBool>, std::thread::JoinHandle<()>)> {
    use std::io::IsTerminal;
    use std::sync::atomic::{AtomicBool, Ordering};
    if !std::io::stderr().is_terminal() {
        return None;
    }
    let bar_style = indicatif::ProgressStyle::with_template("[{bar:30}] {bytes}/{total_bytes}  {msg}").ok()?.progress_chars("#>.");
    let spin_style = indicatif::ProgressStyle::with_template("{spinner} {msg}").ok()?;
    let bar = indicatif::ProgressBar::new(0).with_style(spin_style.clone());
    crate::log_sink::above(Some(bar.clone()));
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    let h = std::thread::spawn(move || {
        let mut rate = Rate::new();
        let (mut phase_was, mut phase_since, mut as_bar) = (None, std::time::Instant::now(), false);
        while !s.load(Ordering::SeqCst) {
            let now = std::time::Instant::now();
            let phase = live.phase();
            if phase != phase_was {
                (phase_was, phase_since) = (phase, now);
            }
            let total = live.rdb_bytes_total.load(Ordering::Relaxed);
            let sent = live.rdb_bytes_sent.load(Ordering::Relaxed);
            let peers = live.sources.from_peers.load(Ordering::Relaxed);
            let sources = (peers > 0).then(|| (live.sources.from_relay.load(Ordering::Relaxed), peers));
            let (show_bar, msg) = progress_line(phase, now.duration_since(phase_since), sent, total, rate.update(now, sent), sources);
            if show_bar != as_bar {
                bar.set_style(if show_bar { bar_style.clone() } else { spin_style.clone() });
                as_bar = show_bar;
            }
            if show_bar {
                bar.set_length(total);
                bar.set_position(sent);
            } else {
                bar.tick();
            }
            bar.set_message(msg);
            std::thread::sleep(Duration::from_millis(200)); // Display refresh period.
        }
        crate::log_sink::above(None);
        bar.finish_and_clear();
    });
    Some((stop, h))
}

fn print_report(r: &agent::Report) {
    let p = &r.phases;
    outln!("replica {} ({}) ← relay {} over {} ({}), master {} ({})", r.replica, r.replica_server, r.relay, r.transport, r.transport_detail, r.master, r.master_server);
    outln!(
        "snapshot: generation {}, {:.1} MiB in {} blocks at {:.0} MiB/s; log {} bytes; handoff at offset {}",
        r.generation,
        r.rdb_length_bytes as f64 / 1048576.0,
        r.blocks,
        r.pull_mib_s,
        r.log_bytes,
        r.handoff_offset
    );
    outln!(
        "phases (s): capture ready {:.2}  connect {:.2}  first byte {:.2}  pulled {:.2}  loaded {:.2}  caught up {:.2}  handed off {:.2}",
        p.wait_capture,
        p.connect,
        p.first_byte,
        p.pulled,
        p.loaded,
        p.caught_up,
        p.handed_off
    );
    let mib = |b: u64| b as f64 / 1048576.0;
    outln!("swarm: {}", r.swarm);
    if r.received_bytes_total.peers > 0 || r.bytes_served_to_peers > 0 {
        let peers: Vec<String> = r.sources.iter().filter(|s| s.source != "relay").map(|s| format!("{} {:.1} MiB", s.source, mib(s.bytes))).collect();
        outln!(
            "sources: relay {:.1} MiB, peers {:.1} MiB ({}); served {:.1} MiB to peers so far",
            mib(r.received_bytes_total.relay),
            mib(r.received_bytes_total.peers),
            peers.join(", "),
            mib(r.bytes_served_to_peers)
        );
    }
    match r.handoff {
        agent::Handoff::Partial => outln!("handoff: partial resync accepted — the replica is a live replica of {}", r.master),
        agent::Handoff::Full => outln!("handoff: the master sent a FULL sync instead — the replica is in sync, natively"),
    }
    for a in &r.attempts {
        outln!("  attempt {} failed after {:.1} s: {} (retried after {:.1} s)", a.attempt, a.secs, a.error, a.waited_secs);
    }
    for n in &r.notes {
        outln!("note: {n}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_display_says_what_the_join_is_doing() {
        let (bar, msg) = progress_line(Some(agent::JoinPhase::WaitingForCapture), Duration::from_secs(7), 0, 0, None, None);
        assert!(!bar && msg == "waiting for the relay's capture (7 s)", "{msg}");
        let (bar, msg) = progress_line(Some(agent::JoinPhase::Pulling), Duration::ZERO, 36 << 20, 0, Some(93.0 * 1048576.0), None);
        assert!(!bar && msg.contains("36.00 MiB so far") && msg.contains("size not known yet") && msg.contains("93.00 MiB/s"), "{msg}");
        let (bar, msg) = progress_line(Some(agent::JoinPhase::Loading), Duration::ZERO, 1 << 20, 1 << 20, None, Some((1 << 20, 2 << 20)));
        assert!(bar && msg.starts_with("loading") && msg.contains("peers 2.00 MiB"), "{msg}");
    }

    #[test]
    fn the_rate_is_bytes_over_elapsed_time() {
        let t0 = std::time::Instant::now();
        let mut r = Rate::new();
        assert_eq!(r.update(t0, 0), None, "one sample is no rate");
        assert_eq!(r.update(t0 + Duration::from_secs(1), 100 << 20), Some((100u64 << 20) as f64));
        // Old samples leave the window: the rate follows what happens now.
        assert_eq!(r.update(t0 + Duration::from_secs(10), 100 << 20), Some(0.0));
    }
}
