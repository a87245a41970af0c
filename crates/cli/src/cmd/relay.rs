//! `fastrepl relay`: its arguments, the relay started from them, and its signals (SIGHUP reloads
//! the tokens, SIGTERM/SIGINT are logged before the process ends).

use super::args::{MasterAuthArgs, SentinelArgs, TlsArgs};
use super::dropped_output;
use crate::compression_arg::CompressionArg;
use crate::transport_arg::TransportArg;
use crate::{exits, log_sink};
use anyhow::{Context, Result};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// `fastrepl relay`'s arguments.
#[derive(clap::Args)]
pub struct RelayArgs {
    /// Write typed events (JSON lines: capture started, snapshot published) to this file, for tools;
    /// the format is in docs/operations.md.
    #[arg(long, env = "FASTREPL_EVENTS")]
    events: Option<PathBuf>,
    /// The master, host:port.
    #[arg(long, required_unless_present_any = ["file", "sentinel"], conflicts_with = "sentinel", env = "FASTREPL_MASTER")]
    master: Option<String>,
    /// Serve this file as the snapshot instead of capturing from a master (remote-read benchmarks).
    #[arg(long, conflicts_with = "master", env = "FASTREPL_FILE")]
    file: Option<PathBuf>,
    #[command(flatten)]
    tls: TlsArgs,
    #[command(flatten)]
    sentinel: SentinelArgs,
    /// Where agents connect. A non-loopback address requires a token.
    #[arg(long, default_value = "127.0.0.1:7400", env = "FASTREPL_LISTEN")]
    listen: SocketAddr,
    /// File holding the agents' shared secret (else $FASTREPL_TOKEN).
    #[arg(long, env = "FASTREPL_TOKEN_FILE")]
    token_file: Option<PathBuf>,
    #[command(flatten)]
    master_auth: MasterAuthArgs,
    /// Snapshot block size in bytes.
    #[arg(long, default_value_t = limits::BLOCK_BYTES_DEFAULT, env = "FASTREPL_BLOCK_SIZE")]
    block_size: u64,
    /// Largest snapshot accepted, in bytes.
    #[arg(long, default_value_t = limits::SNAPSHOT_BYTES_DEFAULT, env = "FASTREPL_SNAPSHOT_MAX_BYTES")]
    snapshot_max_bytes: u64,
    /// Keep each snapshot and its stream log in files under this directory (a local disk: NVMe, a
    /// volume) instead of memory: the relay's memory then stays bounded whatever the snapshot's size,
    /// and the log's bound is a disk budget. One relay per directory; a killed relay's files are
    /// removed at start.
    #[arg(long, env = "FASTREPL_STORE")]
    store: Option<PathBuf>,
    // Its help says its defaults from `limits` (log_max_bytes_help).
    #[arg(long, env = "FASTREPL_LOG_MAX_BYTES", help = log_max_bytes_help())]
    log_max_bytes: Option<u64>,
    // Its help says its defaults from `limits` (log_max_age_help).
    #[arg(long, env = "FASTREPL_LOG_MAX_AGE_SECS", help = log_max_age_help())]
    log_max_age_secs: Option<u64>,
    /// Seal the generation once its stream log is this percent of its RDB (and at least 64 MiB): a
    /// warm join replays the whole log, and past that a fresh capture serves the next join sooner
    /// (docs/design/store.md); 0 = never.
    #[arg(long, default_value_t = limits::LOG_PERCENT_DEFAULT, env = "FASTREPL_LOG_MAX_PERCENT")]
    log_max_percent: u32,
    /// Port announced to the master (REPLCONF listening-port); default: the listen port.
    #[arg(long, env = "FASTREPL_ANNOUNCE_PORT")]
    announce_port: Option<u16>,
    /// The server version announced to a Valkey source (REPLCONF version), which picks the RDB version
    /// it writes; default: the source's own. For a fleet of mixed versions: the oldest it runs
    /// (e.g. 8.1.0 for RDB 11). Redis has no such option: not sent to Redis sources.
    #[arg(long, env = "FASTREPL_ANNOUNCE_VERSION")]
    announce_version: Option<String>,
    /// Most authenticated agent connections at once (connections not authenticated yet wait apart, at most 2 s).
    #[arg(long, default_value_t = limits::CONNECTIONS_DEFAULT, env = "FASTREPL_CONNECTIONS_MAX")]
    connections_max: usize,
    /// Transports to offer: auto = all that work here (shm for agents on this host, ucx, tcp).
    #[arg(long, value_enum, default_value_t, env = "FASTREPL_TRANSPORT")]
    transport: TransportArg,
    /// Where snapshots are captured from: `master` (it forks), a replica of the master, host:port
    /// (the master forks nothing; checked to share the master's replication ID before each capture),
    /// or `auto` (a healthy replica, the master only when none qualifies).
    #[arg(long, default_value = "master", env = "FASTREPL_SOURCE")]
    source: relay::source::Source,
    /// The RDB a replica source writes during a capture: auto (raw while blocks are compressed:
    /// rdbcompression and rdbchecksum switched off, restored after; left as configured if the
    /// source's ACL refuses CONFIG), as-configured, or raw (a refusal fails the capture). The
    /// master's configuration is never touched.
    #[arg(long, default_value = "auto", env = "FASTREPL_SOURCE_RDB")]
    source_rdb: relay::SourceRdb,
    /// Same as --source-rdb raw (kept for existing configurations).
    #[arg(long, env = "FASTREPL_SOURCE_RDB_RAW", hide = true)]
    source_rdb_raw: bool,
    /// How blocks are kept and sent: zstd (default: compressed once at the relay for every agent,
    /// each block kept raw where that does not pay), lz4, or none.
    #[arg(long, value_enum, default_value_t = CompressionArg::Zstd, env = "FASTREPL_COMPRESSION")]
    compression: CompressionArg,
    /// Threads compressing blocks while a capture runs (default: the relay's cores, at most 8).
    #[arg(long, env = "FASTREPL_COMPRESSION_THREADS")]
    compression_threads: Option<usize>,
    /// When to take the first snapshot: on-start (ready for the first agent) or on-demand (when the
    /// first agent asks; nothing forked or held before).
    #[arg(long, default_value = "on-start", env = "FASTREPL_CAPTURE")]
    capture: relay::CapturePolicy,
    /// Release the current snapshot's memory after this many seconds without any agent connected
    /// (the next agent triggers a new capture); 0 = keep it.
    #[arg(long, default_value_t = 0, env = "FASTREPL_IDLE_RELEASE_SECS")]
    idle_release_secs: u64,
    /// Serve Prometheus metrics on this address (GET /metrics), e.g. 127.0.0.1:9400.
    #[arg(long, env = "FASTREPL_METRICS")]
    metrics: Option<SocketAddr>,
    /// Agents must connect over TLS: this relay's certificate, PEM (agents check it with
    /// --relay-cacert). ucx is then not offered (its reads cannot be encrypted).
    #[arg(long, requires = "agents_tls_key", env = "FASTREPL_AGENTS_TLS_CERT")]
    agents_tls_cert: Option<PathBuf>,
    /// Private key of --agents-tls-cert, PEM.
    #[arg(long, requires = "agents_tls_cert", env = "FASTREPL_AGENTS_TLS_KEY")]
    agents_tls_key: Option<PathBuf>,
    /// Network devices UCX may use and listen on, UCX_NET_DEVICES syntax (e.g. `eth0`,
    /// `mlx5_0:1`); default: the device that holds --listen's address (every device for 0.0.0.0).
    #[arg(long, env = "FASTREPL_UCX_DEVICES")]
    pub ucx_devices: Option<String>,
}

/// `--log-max-bytes`'s help: its defaults as `limits` holds them, the one place they are said.
fn log_max_bytes_help() -> String {
    let size = |b: u64| if b.is_multiple_of(1 << 30) { format!("{b} ({} GiB)", b >> 30) } else { format!("{b} ({} MiB)", b >> 20) };
    format!(
        "Largest stream log kept after the snapshot before the generation is sealed, in bytes [default: {} in memory, {} with --store]",
        size(limits::LOG_BYTES_DEFAULT),
        size(limits::LOG_BYTES_STORE_DEFAULT)
    )
}

const _: () = assert!(limits::LOG_BYTES_DEFAULT.is_multiple_of(1 << 20) && limits::LOG_BYTES_STORE_DEFAULT.is_multiple_of(1 << 20), "--log-max-bytes's help says its defaults in whole MiB");

/// `--log-max-age-secs`'s help: its defaults as `limits` holds them, the one place they are said.
fn log_max_age_help() -> String {
    let hours = |d: Duration| format!("{} ({} h)", d.as_secs(), d.as_secs() / 3600);
    format!("Oldest the stream log may grow before the generation is sealed, in seconds [default: {} in memory, {} with --store]", hours(limits::LOG_AGE_DEFAULT), hours(limits::LOG_AGE_STORE_DEFAULT))
}

const _: () =
    assert!(limits::LOG_AGE_DEFAULT.as_secs().is_multiple_of(3600) && limits::LOG_AGE_STORE_DEFAULT.as_secs().is_multiple_of(3600), "--log-max-age-secs's help says its defaults in whole hours");

/// `fastrepl relay`: the relay, until a signal ends the process.
pub fn run(a: RelayArgs) -> Result<ExitCode> {
    if let Some(p) = &a.events {
        relay::events::open(p).with_context(|| format!("open the event stream {}", p.display()))?;
    }
    let tls = a.tls.load()?;
    let sentinel = a.sentinel.sentinels(tls.as_ref())?;
    // Every line of the token file is accepted (a rotation in progress); SIGHUP reads it again.
    let tokens = secrets::tokens(a.token_file.as_deref())?;
    let no_token = tokens.iter().all(|t| t.is_empty());
    let cfg = relay::Config {
        tls,
        master: a.master.clone().unwrap_or_else(|| match &a.file {
            Some(f) => format!("file:{}", f.display()),
            None => String::new(),
        }),
        sentinel,
        file: a.file,
        master_auth: a.master_auth.auth()?,
        listen: a.listen,
        token: tokens[0].clone(),
        extra_tokens: tokens[1..].to_vec(),
        announce_port: a.announce_port,
        announce_version: a.announce_version,
        snapshot: snapshot::Config {
            block_size: a.block_size,
            snapshot_bytes_max: a.snapshot_max_bytes,
            log_bytes_max: a.log_max_bytes.unwrap_or(if a.store.is_some() { limits::LOG_BYTES_STORE_DEFAULT } else { limits::LOG_BYTES_DEFAULT }),
            log_age_max: a.log_max_age_secs.map(Duration::from_secs).unwrap_or(if a.store.is_some() { limits::LOG_AGE_STORE_DEFAULT } else { limits::LOG_AGE_DEFAULT }),
            codec: a.compression.codec(),
            pack_threads: a.compression_threads.unwrap_or_else(snapshot::pack_threads_default),
        },
        store: a.store,
        log_percent: Some(a.log_max_percent),
        connections_max: a.connections_max,
        offer: a.transport.kind().into(),
        source: a.source,
        source_rdb: if a.source_rdb_raw { relay::SourceRdb::Raw } else { a.source_rdb },
        capture: a.capture,
        idle_release: (a.idle_release_secs > 0).then(|| Duration::from_secs(a.idle_release_secs)),
        agents_tls: match (&a.agents_tls_cert, &a.agents_tls_key) {
            (Some(c), Some(k)) => Some(transport::tls::server_config(c, k).map_err(anyhow::Error::msg).context("load --agents-tls-cert")?),
            _ => None,
        },
    };
    let r = std::sync::Arc::new(relay::Relay::start(cfg).context("start relay")?);
    if no_token {
        // Said once, at start (beyond loopback the relay refused to start): loopback is every user
        // and process of this host.
        let reach = if r.local_addr().ip().is_loopback() { "anyone on this host" } else { "anyone who can reach it" };
        tracing::warn!(listen = %r.local_addr(), "no token (FASTREPL_TOKEN / --token-file): {reach} can pull the whole dataset from {}", r.local_addr());
    }
    tracing::info!("fastrepl relay listening on {} (transports: {})", r.local_addr(), r.offered().iter().map(|k| k.name()).collect::<Vec<_>>().join(", "));
    if let Some(addr) = a.metrics {
        let r2 = r.clone();
        let bound =
            metrics::serve(addr, std::sync::Arc::new(move || relay::stats::prometheus(&r2.status()) + &dropped_output("fastrepl_relay"))).with_context(|| format!("serve metrics on {addr}"))?;
        tracing::info!("relay metrics on http://{bound}/metrics");
    }
    reload_tokens_on_sighup(r.clone(), a.token_file.clone())?;
    log_stop_on_signal()?;
    r.wait();
    Ok(ExitCode::SUCCESS)
}

/// SIGTERM/SIGINT end the relay (its snapshot is memory only: nothing to flush); say so in the log
/// first, so a stop is told from a crash.
fn log_stop_on_signal() -> Result<()> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    exits::stop_deadline_on_signal()?;
    let mut signals = signal_hook::iterator::Signals::new([SIGTERM, SIGINT]).context("install SIGTERM/SIGINT handler")?;
    std::thread::Builder::new()
        .name("stop".into())
        .spawn(move || {
            if let Some(sig) = signals.forever().next() {
                let name = if sig == SIGTERM { "SIGTERM" } else { "SIGINT" };
                tracing::info!("relay stopping ({name})");
                log_sink::drain(limits::LAST_WORD_WAIT);
                std::process::exit(0);
            }
        })
        .context("spawn stop thread")?;
    Ok(())
}

/// `systemctl reload` (SIGHUP): read the token file again, so a token can be rotated without
/// restarting the relay (and losing its snapshot). Tokens are never logged, only how many.
fn reload_tokens_on_sighup(r: std::sync::Arc<relay::Relay>, file: Option<PathBuf>) -> Result<()> {
    use std::sync::atomic::{AtomicBool, Ordering};
    let hup = std::sync::Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGHUP, hup.clone()).context("install SIGHUP handler")?;
    std::thread::Builder::new()
        .name("reload".into())
        .spawn(move || loop {
            std::thread::sleep(Duration::from_millis(250)); // Polling a signal flag, not synchronization.
            if !hup.swap(false, Ordering::SeqCst) {
                continue;
            }
            let Some(f) = &file else {
                tracing::warn!("SIGHUP: the token comes from $FASTREPL_TOKEN, which cannot change under a running process; use --token-file to rotate without a restart");
                continue;
            };
            match secrets::tokens(Some(f)).map_err(|e| e.to_string()).and_then(|t| {
                let n = t.len();
                r.set_tokens(t).map(|()| n).map_err(|e| e.to_string())
            }) {
                Ok(n) => tracing::info!(file = %f.display(), accepted = n, "SIGHUP: tokens reloaded"),
                Err(e) => tracing::error!(file = %f.display(), error = %e, "SIGHUP: tokens not reloaded; the previous ones stay in force"),
            }
        })
        .context("spawn reload thread")?;
    Ok(())
}
