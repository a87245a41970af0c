//! `fastrepl`: fast full synchronization of Redis/Valkey replicas through a relay. The product only:
//! the demo, benchmarks and probes are in `fastrepl-lab` (crates/lab).

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use compression_arg::CompressionArg;
use std::io::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;
use transport_arg::TransportArg;

mod compression_arg;
mod exits;
mod log_sink;
mod transport_arg;

/// A line on stdout that the command's outcome does not depend on (its exit status says that): a
/// failed write (a closed pipe, a full disk) is dropped and counted, never a panic like `println!`'s.
macro_rules! outln {
    ($($arg:tt)*) => {{ metrics::output::stdout_line(&format!($($arg)*)); }};
}

/// [`outln`] on stderr, for what is said outside the log: through the log's queue, in order with
/// the log's lines, so a stalled reader blocks no thread ([`log_sink`]).
macro_rules! errln {
    ($($arg:tt)*) => {{ log_sink::send(format!("{}\n", format!($($arg)*)).into_bytes(), write_log_line); }};
}

#[derive(Parser)]
#[command(
    name = "fastrepl",
    version,
    about = "Fast, master-friendly full sync for Redis and Valkey replicas",
    after_help = "Every command: exit 70 when one of its threads died (a bug: the process ends rather than serve nothing), 124 when a SIGTERM/SIGINT did not end it within 85 s."
)]
struct Cli {
    /// Log lines as text for people, or as one JSON object per line for log collectors.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text, env = "FASTREPL_LOG_FORMAT")]
    log_format: LogFormat,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run a relay beside the master: one snapshot, served to any number of agents.
    Relay(RelayArgs),
    /// Sync a local replica through a relay and hand it to its master (exit 0: partial handoff,
    /// 3: the master insisted on a full sync, 130: interrupted (SIGINT/SIGTERM), 1: failed).
    #[command(
        mut_arg("tls", |a| a.help("Speak TLS to the master, its replicas and the sentinels, and to a local replica with tls-replication yes")),
        mut_arg("cert", |a| a.help("Client certificate, PEM, for servers with tls-auth-clients; also served to a local replica with tls-replication yes"))
    )]
    Join(JoinArgs),
    /// Compare two servers' datasets (exit 0 identical, 1 different, 2 a type it cannot compare or an
    /// error).
    #[command(mut_arg("tls", |a| a.help("Speak TLS to both servers")))]
    Verify(VerifyArgs),
    /// Pull a relay's snapshot into a file (or stdout) without a Redis replica.
    Fetch(FetchArgs),
    /// Prepare a server that is not running yet to start as a replica that resyncs partially: the
    /// snapshot as its RDB file (and, for a cluster node, its cluster config as the master's replica).
    /// For a container's init step or systemd's ExecStartPre.
    Stage(StageArgs),
    /// What a running relay holds and serves: generations, capture, agents, bytes, errors.
    Status(StatusArgs),
    /// Started by `join`: resets the replica if the join's process dies before the handoff.
    #[command(name = agent::guard::SUBCOMMAND, hide = true)]
    Guard,
    /// Started by `relay`: holds UCX in a process of its own (see relay::ucx_side).
    #[cfg(feature = "ucx")]
    #[command(name = relay::ucx_side::SUBCOMMAND, hide = true)]
    RelayUcxSide,
}

#[derive(clap::Args)]
struct RelayArgs {
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
    /// ACL user for the master.
    #[arg(long, env = "FASTREPL_MASTER_USER")]
    master_user: Option<String>,
    /// File holding the master's password (else $FASTREPL_MASTER_PASSWORD).
    #[arg(long, env = "FASTREPL_MASTER_PASSWORD_FILE")]
    master_password_file: Option<PathBuf>,
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
    /// Largest stream log kept after the snapshot before the generation is sealed, in bytes
    /// [default: 268435456 (256 MiB) in memory, 4294967296 (4 GiB) with --store].
    #[arg(long, env = "FASTREPL_LOG_MAX_BYTES")]
    log_max_bytes: Option<u64>,
    /// Oldest the stream log may grow before the generation is sealed, in seconds
    /// [default: 3600 (1 h) in memory, 86400 (24 h) with --store].
    #[arg(long, env = "FASTREPL_LOG_MAX_AGE_SECS")]
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
    ucx_devices: Option<String>,
}

/// TLS to the relay (when it has --agents-tls-cert).
#[derive(clap::Args)]
struct RelayTlsArgs {
    /// Reach the relay over TLS, trusting relay certificates this CA signed, PEM.
    #[arg(long, env = "FASTREPL_RELAY_CACERT")]
    relay_cacert: Option<PathBuf>,
    /// Name to check the relay's certificate against (default: the host in --relay, a name or an address).
    #[arg(long, requires = "relay_cacert", env = "FASTREPL_RELAY_SERVER_NAME")]
    relay_server_name: Option<String>,
}

impl RelayTlsArgs {
    /// The token, with TLS to the relay when asked for.
    fn credentials(&self, token: transport::Token) -> Result<transport::Credentials> {
        self.credentials_serving(token, None)
    }

    /// Like `credentials`, serving peers over TLS with `peer` (certificate, key) when given.
    fn credentials_serving(&self, token: transport::Token, peer: Option<(&PathBuf, &PathBuf)>) -> Result<transport::Credentials> {
        let Some(ca) = &self.relay_cacert else { return Ok(token.into()) };
        let mut t = transport::tls::RelayTls::load(ca, self.relay_server_name.clone()).map_err(anyhow::Error::msg).context("load --relay-cacert")?;
        if let Some((c, k)) = peer {
            t = t.serving_peers(c, k).map_err(anyhow::Error::msg).context("load --peer-tls-cert")?;
        }
        Ok(transport::Credentials::from(token).with_relay_tls(t))
    }
}

/// TLS to Redis/Valkey servers and sentinels, as redis-cli names it.
#[derive(clap::Args)]
struct TlsArgs {
    /// Speak TLS to the master, its replicas and the sentinels.
    #[arg(long, env = "FASTREPL_TLS")]
    tls: bool,
    /// CA certificate(s) to trust, PEM (default: the system's bundle).
    #[arg(long, requires = "tls", env = "FASTREPL_CACERT")]
    cacert: Option<PathBuf>,
    /// Client certificate, PEM, for servers with tls-auth-clients.
    #[arg(long, requires_all = ["tls", "key"], env = "FASTREPL_CERT")]
    cert: Option<PathBuf>,
    /// Private key of --cert, PEM.
    #[arg(long, requires_all = ["tls", "cert"], env = "FASTREPL_KEY")]
    key: Option<PathBuf>,
    /// Name to check the servers' certificates against (default: the host connected to), as
    /// redis-cli's --sni; the older spelling tls-server-name is accepted too.
    #[arg(long = "sni", alias = "tls-server-name", requires = "tls", env = "FASTREPL_SNI")]
    tls_server_name: Option<String>,
}

impl TlsArgs {
    fn load(&self) -> Result<Option<client::tls::Tls>> {
        if !self.tls {
            return Ok(None);
        }
        let o = client::tls::Options { cacert: self.cacert.clone(), cert: self.cert.clone(), key: self.key.clone(), server_name: self.tls_server_name.clone() };
        Ok(Some(client::tls::Tls::load(&o).map_err(anyhow::Error::msg).context("load TLS certificates")?))
    }
}

/// Sentinel, as Redis clients use it: the master of a named group, followed through failovers.
#[derive(clap::Args)]
struct SentinelArgs {
    /// Find the master through these sentinels, host:port[,host:port...] (tried in order), and
    /// follow its failovers.
    #[arg(long, requires = "master_name", env = "FASTREPL_SENTINEL")]
    sentinel: Option<String>,
    /// The master group's name, as in `sentinel monitor <name> ...`.
    #[arg(long, requires = "sentinel", env = "FASTREPL_MASTER_NAME")]
    master_name: Option<String>,
    /// ACL user for the sentinels.
    #[arg(long, env = "FASTREPL_SENTINEL_USER")]
    sentinel_user: Option<String>,
    /// File holding the sentinels' password (else $FASTREPL_SENTINEL_PASSWORD).
    #[arg(long, env = "FASTREPL_SENTINEL_PASSWORD_FILE")]
    sentinel_password_file: Option<PathBuf>,
}

impl SentinelArgs {
    fn sentinels(&self, tls: Option<&client::tls::Tls>) -> Result<Option<client::sentinel::Sentinels>> {
        let Some(list) = &self.sentinel else { return Ok(None) };
        let auth = secrets::auth(self.sentinel_user.as_deref(), self.sentinel_password_file.as_deref(), "FASTREPL_SENTINEL_PASSWORD")?;
        let mut s = client::sentinel::Sentinels::new(list, self.master_name.as_deref().unwrap_or(""), auth).map_err(anyhow::Error::msg)?;
        s.tls = tls.cloned();
        Ok(Some(s))
    }
}

#[derive(clap::Args)]
struct StatusArgs {
    #[command(flatten)]
    relay_tls: RelayTlsArgs,
    /// The relay, host:port (its agents' port).
    #[arg(long, env = "FASTREPL_RELAY")]
    relay: endpoint::Endpoint,
    /// File holding the relay token (else $FASTREPL_TOKEN).
    #[arg(long, env = "FASTREPL_TOKEN_FILE")]
    token_file: Option<PathBuf>,
    /// Print the status as JSON.
    #[arg(long, env = "FASTREPL_JSON")]
    json: bool,
}

#[derive(clap::Args)]
struct JoinArgs {
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

/// How a snapshot is pulled from the relay: the same flags for join, stage and fetch.
#[derive(clap::Args)]
struct PullArgs {
    /// Transport for the snapshot: auto picks shm on the relay's host, ucx where UCX finds an RDMA
    /// device, tcp otherwise, and says which.
    #[arg(long, value_enum, default_value_t, env = "FASTREPL_TRANSPORT")]
    transport: TransportArg,
    /// Readers (connections, each with reads in flight); 0 = the transport's default (4; ucx 2).
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=limits::READERS_MAX as u64), env = "FASTREPL_READERS")]
    readers: u64,
    /// Blocks fetched ahead of what is written (to the replica or the file) at most [default: 64 for a
    /// join that serves other agents, 32 for one that only reads from them, 16 for a pull from the
    /// relay alone]. A join that serves other agents also looks ahead by the room its serve cache does
    /// not use yet (its blocks in memory stay within this window and `--serve-cache-mib`).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=limits::WINDOW_BLOCKS_MAX), env = "FASTREPL_WINDOW_BLOCKS")]
    window_blocks: Option<u64>,
}

impl PullArgs {
    /// The pull's settings, as the agent takes them.
    fn config(&self) -> agent::config::PullConfig {
        agent::config::PullConfig { transport: self.transport.kind(), readers: self.readers as usize, window_blocks: self.window_blocks }
    }
}

#[derive(clap::Args)]
struct StageArgs {
    #[command(flatten)]
    relay_tls: RelayTlsArgs,
    /// The relay, host:port.
    #[arg(long, env = "FASTREPL_RELAY")]
    relay: endpoint::Endpoint,
    /// The master the server will follow, as it reaches it (default: what --sentinel names, else as
    /// the relay reaches it). For a cluster node: any node of its cluster, asked for the shard's master.
    #[arg(long, env = "FASTREPL_MASTER", conflicts_with = "sentinel")]
    master: Option<String>,
    #[command(flatten)]
    sentinel: SentinelArgs,
    /// The server's data directory (its `dir`).
    #[arg(long, env = "FASTREPL_DIR")]
    dir: PathBuf,
    /// The server's RDB file name (its `dbfilename`).
    #[arg(long, default_value = "dump.rdb", env = "FASTREPL_DBFILENAME")]
    dbfilename: String,
    /// For a cluster node: its cluster config file (its `cluster-config-file`, relative to --dir),
    /// written as the master's replica (an existing one keeps its node id).
    #[arg(long, env = "FASTREPL_CLUSTER_CONFIG")]
    cluster_config: Option<String>,
    /// The server's config file: staging is refused when it sets appendonly yes (without it, when an
    /// AOF is in --dir).
    #[arg(long, env = "FASTREPL_SERVER_CONFIG")]
    server_config: Option<PathBuf>,
    /// The master is the one --server-config's replicaof names; a config without replicaof is a
    /// primary's, and nothing is staged (charts whose init step writes the config and picks the
    /// primary: the official Valkey chart).
    #[arg(long, requires = "server_config", conflicts_with_all = ["master", "sentinel", "cluster_config"], env = "FASTREPL_MASTER_FROM_SERVER_CONFIG")]
    master_from_server_config: bool,
    /// The server that will load the file, as flavour-version (redis-7.2.4, valkey-8.1.1): a snapshot
    /// it cannot load is refused before anything is pulled. Or --server-binary.
    #[arg(long, env = "FASTREPL_SERVER", required_unless_present = "server_binary", conflicts_with = "server_binary")]
    server: Option<String>,
    /// The server's binary, asked for its version (`--version`), instead of --server.
    #[arg(long, env = "FASTREPL_SERVER_BINARY")]
    server_binary: Option<PathBuf>,
    /// File holding the relay token (else $FASTREPL_TOKEN).
    #[arg(long, env = "FASTREPL_TOKEN_FILE")]
    token_file: Option<PathBuf>,
    /// ACL user for the master.
    #[arg(long, env = "FASTREPL_MASTER_USER")]
    master_user: Option<String>,
    /// File holding the master's password (else $FASTREPL_MASTER_PASSWORD).
    #[arg(long, env = "FASTREPL_MASTER_PASSWORD_FILE")]
    master_password_file: Option<PathBuf>,
    #[command(flatten)]
    tls: TlsArgs,
    #[command(flatten)]
    pull: PullArgs,
    /// Print one JSON object with the report.
    #[arg(long, env = "FASTREPL_JSON")]
    json: bool,
}

#[derive(clap::Args)]
struct FetchArgs {
    #[command(flatten)]
    relay_tls: RelayTlsArgs,
    /// The relay, host:port.
    #[arg(long, env = "FASTREPL_RELAY")]
    relay: endpoint::Endpoint,
    /// Where to write the bytes; `-` for stdout.
    #[arg(long, env = "FASTREPL_OUT")]
    out: PathBuf,
    /// File holding the relay token (else $FASTREPL_TOKEN).
    #[arg(long, env = "FASTREPL_TOKEN_FILE")]
    token_file: Option<PathBuf>,
    #[command(flatten)]
    pull: PullArgs,
    /// Print the report as JSON (on stderr when the bytes go to stdout).
    #[arg(long, env = "FASTREPL_JSON")]
    json: bool,
}

#[derive(clap::Args)]
struct VerifyArgs {
    /// The reference server (normally the master), host:port.
    a: String,
    /// The server to check, host:port.
    b: String,
    /// ACL user for both.
    #[arg(long, env = "FASTREPL_USER")]
    user: Option<String>,
    /// File holding the password for both (else $FASTREPL_VERIFY_PASSWORD).
    #[arg(long, env = "FASTREPL_PASSWORD_FILE")]
    password_file: Option<PathBuf>,
    #[command(flatten)]
    tls: TlsArgs,
    /// Largest TTL difference accepted, in ms.
    #[arg(long, default_value_t = 2000, env = "FASTREPL_TTL_TOLERANCE_MS")]
    ttl_tolerance_ms: i64,
    /// Print the outcome as JSON.
    #[arg(long, env = "FASTREPL_JSON")]
    json: bool,
}

/// The log filter: `FASTREPL_LOG` (`spec`) or `info`, with rustls's own lines at `error` unless the
/// spec names rustls. rustls logs a warning for each bad handshake it reads ("Received a … message
/// while expecting …", "TLS alert warning received"): a line per stranger on a TLS listener, past the
/// admission gate's bounded rate. The failure itself comes back to us as an error and is counted and
/// summed up there.
fn log_filter(spec: Option<&str>) -> tracing_subscriber::EnvFilter {
    let filter = spec.and_then(|s| tracing_subscriber::EnvFilter::try_new(s).ok()).unwrap_or_else(|| tracing_subscriber::EnvFilter::new("info"));
    if spec.is_some_and(|s| s.contains("rustls")) {
        return filter;
    }
    filter.add_directive("rustls=error".parse().expect("a valid directive"))
}

fn init_logging(format: LogFormat) {
    let filter = log_filter(std::env::var("FASTREPL_LOG").ok().as_deref());
    // Colours only for a person at a terminal: journald and log files get plain text.
    use std::io::IsTerminal;
    let ansi = std::io::stderr().is_terminal();
    let json = format == LogFormat::Json;
    let log = tracing_subscriber::fmt().with_env_filter(filter).with_writer(move || LogWriter { json }).with_target(false).with_ansi(ansi);
    // A failed write must not be reported by `eprintln!` (what the subscriber does by default): on a
    // closed stderr that panics the thread that logged. LogWriter drops and counts it instead.
    let log = log.log_internal_errors(false);
    log_sink::start(write_log_line);
    match format {
        LogFormat::Text => log.init(),
        // One object per line, fields flattened, span fields kept: what Loki, Elastic and journald
        // pipelines parse without a grok pattern.
        LogFormat::Json => log.json().flatten_event(true).with_current_span(true).with_span_list(false).init(),
    }
}

fn main() -> ExitCode {
    // Before any thread exists: UCX reads these from the environment.
    #[cfg(feature = "ucx")]
    ucx::apply_tuned_env();
    let cli = Cli::parse();
    exits::exit_on_panic(cli.log_format == LogFormat::Json);
    // Also before any thread: UCX reads its device list from the environment, where an operator's
    // own UCX_NET_DEVICES is already; --ucx-devices is the same setting under our name.
    if let Cmd::Relay(RelayArgs { ucx_devices: Some(d), .. }) = &cli.cmd {
        std::env::set_var("UCX_NET_DEVICES", d);
    }
    // Every process this one starts logs as it does: the relay's UCX side, a join's or a stage's
    // guard (whose lines share this one's stderr).
    std::env::set_var("FASTREPL_LOG_FORMAT", if cli.log_format == LogFormat::Json { "json" } else { "text" });
    init_logging(cli.log_format);
    let r = match cli.cmd {
        Cmd::Relay(a) => relay(a),
        Cmd::Join(a) => join(a, cli.log_format),
        Cmd::Verify(a) => verify(a),
        Cmd::Fetch(a) => fetch(a),
        Cmd::Stage(a) => stage(a),
        Cmd::Status(a) => status(a),
        Cmd::Guard => Ok(ExitCode::from(u8::try_from(agent::guard::run()).unwrap_or(1))),
        #[cfg(feature = "ucx")]
        Cmd::RelayUcxSide => Ok(ExitCode::from(u8::try_from(relay::ucx_side::run(|| log_sink::drain(limits::LAST_WORD_WAIT))).unwrap_or(1))),
    };
    let code = match r {
        Ok(code) => code,
        Err(e) => {
            // Room for the last word first: queued to a full queue it would be dropped (with a
            // reader that stalled, this and the drain below wait a second each).
            log_sink::drain(limits::LAST_WORD_WAIT);
            match cli.log_format {
                LogFormat::Text => errln!("fastrepl: {e:#}"),
                // A collector reading JSON lines would drop a plain-text last word.
                LogFormat::Json => tracing::error!(error = %format!("{e:#}"), "fastrepl failed"),
            }
            ExitCode::from(1)
        }
    };
    // What the process said last reaches a reader that reads; one that stalled does not hold the end.
    log_sink::drain(limits::LAST_WORD_WAIT);
    code
}

fn relay(a: RelayArgs) -> Result<ExitCode> {
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
        master_auth: secrets::auth(a.master_user.as_deref(), a.master_password_file.as_deref(), "FASTREPL_MASTER_PASSWORD")?,
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

/// The process's dropped log and report writes ([`metrics::output`]) as an exposition of their own,
/// after the command's (`prefix`: the command's).
fn dropped_output(prefix: &str) -> String {
    let mut e = metrics::Exposition::new(prefix);
    metrics::output::expose(&mut e);
    e.finish()
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

fn stage(a: StageArgs) -> Result<ExitCode> {
    let token = a.relay_tls.credentials(secrets::token(a.token_file.as_deref())?)?;
    let tls = a.tls.load()?;
    let live = agent::Live::default();
    let cancel = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    on_interrupt(cancel.clone())?;
    let pull = a.pull.config();
    let master_auth = secrets::auth(a.master_user.as_deref(), a.master_password_file.as_deref(), "FASTREPL_MASTER_PASSWORD")?;
    let server = agent::staged::target::server(a.server.as_deref(), a.server_binary.as_deref())?;
    let sentinels = a.sentinel.sentinels(tls.as_ref())?;
    let cfg = agent::staged::stage::StageConfig {
        source: agent::staged::snapshot_file::Source { relay: &a.relay, token: &token, pull: &pull, cancel: &cancel, live: &live },
        master: agent::master::MasterAccess { given: a.master.as_deref(), sentinel: sentinels.as_ref(), auth: master_auth.as_ref(), tls: tls.as_ref() },
        dir: a.dir,
        dbfilename: a.dbfilename,
        cluster_config: a.cluster_config,
        server_config: a.server_config,
        master_from_server_config: a.master_from_server_config,
        server,
    };
    let r = match agent::staged::stage::stage(&cfg) {
        Ok(r) => r,
        Err(e) => {
            if a.json {
                outln!("{}", serde_json::json!({"schema_version": agent::REPORT_SCHEMA_VERSION, "ok": false, "error": e.to_string(), "error_kind": e.kind()}));
            }
            errln!("fastrepl stage failed (relay {}, dir {}): {e}\nNothing was written to the directory but what the report of a success names.", a.relay, cfg.dir.display());
            return Ok(ExitCode::from(if matches!(e, agent::Error::Interrupted) { 130 } else { 1 }));
        }
    };
    if a.json {
        outln!("{}", serde_json::to_string(&Versioned { schema_version: agent::REPORT_SCHEMA_VERSION, ok: true, body: &r })?);
    } else {
        print_stage_report(&r);
    }
    Ok(ExitCode::SUCCESS)
}

/// What `fastrepl stage` decided and did, for people.
fn print_stage_report(r: &agent::staged::stage::StageReport) {
    use agent::staged::start::{Decision, Keep, Stage};
    let master = r.master.as_deref().unwrap_or("-");
    match &r.start {
        Decision::Keep(Keep::Primary { config }) => outln!("kept: {} names no master (no replicaof): the server starts as a primary; nothing pulled or written", config.display()),
        Decision::Keep(Keep::ServesSlots { slots }) => outln!("kept: the node is a cluster master serving {slots} slots; nothing pulled or written"),
        Decision::Keep(Keep::ResumesPartially { replid, offset, headroom_bytes, headroom_secs }) => {
            let secs = headroom_secs.map(|s| format!(", ~{s:.0} s at its write rate")).unwrap_or_default();
            outln!(
                "kept: the server's own RDB ({replid}:{offset}) is in master {master}'s backlog with {headroom_bytes} bytes to spare{secs}: it resumes by a partial resync; nothing pulled or written"
            );
        }
        Decision::Stage(why) => {
            let why = match why {
                Stage::Empty => "no RDB in the directory".to_string(),
                Stage::Unreadable { error } => format!("the RDB there cannot be read ({error})"),
                Stage::NoHistory => "the RDB there names no replication history".to_string(),
                Stage::OtherHistory { replid } => format!("the RDB there continues another history ({replid}) than master {master}'s"),
                Stage::Stale { offset, why } => format!("the RDB there (offset {offset}) is too old: {why}"),
            };
            outln!("staging: {why}");
        }
    }
    let Some(s) = &r.staged else { return };
    outln!("staged generation {} ({:.1} MiB, offset {}) as {} in {:.1} s over {}", s.generation, s.rdb_length_bytes as f64 / 1048576.0, s.snapshot_offset, s.rdb_file.display(), r.secs, s.transport);
    let secs = s.backlog_headroom_secs.map(|s| format!(", ~{s:.0} s at its write rate")).unwrap_or_default();
    outln!("master {master}: its backlog keeps the snapshot's offset for {} more bytes{secs}; start the server before then", s.backlog_headroom_bytes);
    match &s.cluster {
        Some(c) => outln!("cluster config {} written: node {} is a replica of {}; introduce it once it runs (CLUSTER MEET <a node's ip> <port>)", c.config_file.display(), c.node_id, c.master_id),
        None => outln!("start the server with replicaof {} (and masterauth if the master needs it)", agent::master::split_host_port(master).map(|(h, p)| format!("{h} {p}")).unwrap_or_default()),
    }
}

fn fetch(a: FetchArgs) -> Result<ExitCode> {
    use std::io::Write;
    let token = a.relay_tls.credentials(secrets::token(a.token_file.as_deref())?)?;
    let cancel = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    on_interrupt(cancel.clone())?;
    let to_stdout = a.out.as_os_str() == "-";
    let mut out: Box<dyn Write> = if to_stdout {
        Box::new(std::io::BufWriter::with_capacity(4 << 20, std::io::stdout().lock()))
    } else {
        Box::new(std::fs::File::create(&a.out).with_context(|| format!("create {}", a.out.display()))?)
    };
    let r = agent::pull::fetch::fetch(&a.relay, &token, &a.pull.config(), &cancel, &mut |b| out.write_all(b).map_err(|e| agent::Error::Resource(format!("write fetched bytes: {e}"))));
    let r = r.and_then(|r| out.flush().map(|_| r).map_err(|e| agent::Error::Resource(format!("flush output: {e}"))));
    let r = match r {
        Ok(r) => r,
        Err(e) => {
            if !to_stdout {
                let _ = std::fs::remove_file(&a.out); // never leave a partial copy looking whole
            }
            anyhow::bail!("fetch from {} failed: {e}", a.relay);
        }
    };
    let line = if a.json {
        serde_json::to_string(&r)?
    } else {
        format!("fetched {:.1} MiB in {:.2} s ({:.0} MiB/s) over {} ({}); CPU {:.2} s", r.bytes as f64 / (1 << 20) as f64, r.secs, r.mib_s, r.transport, r.transport_detail, r.cpu_secs)
    };
    if to_stdout {
        errln!("{line}");
    } else {
        outln!("{line}");
    }
    Ok(ExitCode::SUCCESS)
}

fn join(a: JoinArgs, log_format: LogFormat) -> Result<ExitCode> {
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

/// A `--json` object with its schema version and `ok` first, then the object's own fields.
#[derive(serde::Serialize)]
struct Versioned<'a, T: serde::Serialize> {
    schema_version: u32,
    ok: bool,
    #[serde(flatten)]
    body: &'a T,
}

/// SIGINT and SIGTERM set `cancel` (a join then resets the replica before exiting), instead of
/// killing the process and leaving the replica pointed at a listener that is gone.
fn on_interrupt(cancel: std::sync::Arc<std::sync::atomic::AtomicBool>) -> Result<()> {
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, cancel.clone()).context("install signal handler")?;
    }
    exits::stop_deadline_on_signal()
}

/// The progress display, while one is shown: log lines are written above it (through
/// [`LogWriter`]) instead of onto the end of its line.
static BAR: std::sync::Mutex<Option<indicatif::ProgressBar>> = std::sync::Mutex::new(None);

/// Where log lines go: stderr, above the progress display when there is one. A line that cannot be
/// written (a closed pipe, a full disk) is dropped and counted ([`metrics::output`]): the thread that
/// logged goes on with its work.
struct LogWriter {
    /// `--log-format json`: embed list fields as JSON lists (see [`json_lists`]).
    json: bool,
}

impl std::io::Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        // One formatted event per call (the fmt layer writes each line whole). Queued for the log
        // sink's thread: a reader that stalls blocks no thread that logs.
        let line = if self.json { json_lists(buf) } else { None };
        log_sink::send(line.unwrap_or_else(|| buf.to_vec()), write_log_line);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        // Each line was flushed as it was written (or dropped).
        Ok(())
    }
}

/// One log line on stderr, above the progress display when there is one; dropped and counted when
/// the write fails ([`metrics::output`]).
fn write_log_line(out: &[u8]) {
    let bar = BAR.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let write = || metrics::output::write_or_drop(&mut std::io::stderr().lock(), out);
    match bar {
        Some(b) => b.suspend(write),
        None => write(),
    };
}

/// A JSON log line with its list fields made real lists. tracing records a field as a string; list
/// fields are logged as JSON array text (`relay::json_list`), which this embeds as the array itself, at
/// the top level and in the span's fields. `None`: nothing to change (or not a JSON object).
fn json_lists(line: &[u8]) -> Option<Vec<u8>> {
    fn embed(map: &mut serde_json::Map<String, serde_json::Value>) -> bool {
        let mut changed = false;
        for v in map.values_mut() {
            match v {
                serde_json::Value::String(s) if s.starts_with('[') && s.ends_with(']') => {
                    if let Ok(list @ serde_json::Value::Array(_)) = serde_json::from_str(s) {
                        *v = list;
                        changed = true;
                    }
                }
                serde_json::Value::Object(inner) => changed |= embed(inner),
                _ => {}
            }
        }
        changed
    }
    let mut v: serde_json::Value = serde_json::from_slice(line).ok()?;
    if !embed(v.as_object_mut()?) {
        return None;
    }
    let mut out = serde_json::to_vec(&v).ok()?;
    out.push(b'\n');
    Some(out)
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
    *BAR.lock().unwrap_or_else(|e| e.into_inner()) = Some(bar.clone());
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
        *BAR.lock().unwrap_or_else(|e| e.into_inner()) = None;
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

fn status(a: StatusArgs) -> Result<ExitCode> {
    let token = a.relay_tls.credentials(secrets::token(a.token_file.as_deref())?)?;
    let mut s = transport::tcp::connect(&a.relay, &token, transport::auth::Kind::Status, limits::CONNECT_TIMEOUT).with_context(|| format!("authenticate to relay {}", a.relay))?;
    let st: relay::stats::Status = match transport::wire::recv_control(&mut s).with_context(|| format!("read status from {}", a.relay))? {
        transport::wire::Control::Status(st) => *st,
        transport::wire::Control::Error(e) => anyhow::bail!("relay {} refused: {e}", a.relay),
        other => anyhow::bail!("relay {} answered {other:?} instead of its status (an older relay?)", a.relay),
    };
    let mut o = std::io::stdout().lock();
    let written = if a.json { writeln!(o, "{}", serde_json::to_string_pretty(&st)?) } else { print_status(&mut o, &st) };
    quiet_on_broken_pipe(written.and_then(|()| o.flush()))
}

fn print_status(o: &mut impl std::io::Write, st: &relay::stats::Status) -> std::io::Result<()> {
    let mib = |b: u64| b as f64 / 1048576.0;
    let at = |m: &std::collections::BTreeMap<String, u64>, k: &str| m.get(k).copied().unwrap_or(0);
    writeln!(o, "relay {} (fastrepl {}), up {:.0} s", st.listen, st.version, st.uptime_seconds)?;
    if !st.ucx_listeners.is_empty() {
        writeln!(o, "ucx listens on {}", st.ucx_listeners.join(", "))?;
    }
    writeln!(o, "master {}; source {} (--source {}); capture {}", st.master, if st.source.is_empty() { "-" } else { &st.source }, st.source_policy, st.capture_policy)?;
    let silent = st.source_last_io_seconds.map(|s| format!("{s:.1} s ago")).unwrap_or_else(|| "never".into());
    writeln!(
        o,
        "captures {} ({} failed), sealed {}, released idle {}; source last sent {silent}, {:.1} MiB received",
        st.captures_total,
        st.capture_failures_total,
        st.generations_sealed_total,
        st.generations_released_idle_total,
        mib(st.source_bytes_total)
    )?;
    if let Some(e) = &st.last_capture_error {
        writeln!(o, "last capture failure: {e}")?;
    }
    writeln!(o, "generations held: {} ({:.1} MiB)", st.generations.len(), mib(st.held_bytes))?;
    for g in &st.generations {
        let total = g.blocks_total.map(|t| t.to_string()).unwrap_or_else(|| "?".into());
        writeln!(
            o,
            "  #{} {:8} {:9} {:.1} MiB{}, {}/{} blocks, log {}, age {:.0} s, {} agents{}",
            g.id,
            if g.current { "current" } else { "" },
            g.state,
            mib(g.rdb_bytes),
            g.rdb_version.map(|v| format!(" (RDB {v})")).unwrap_or_default(),
            g.blocks,
            total,
            bytes_text(g.log_bytes),
            g.age_seconds,
            g.agents,
            g.error.as_deref().map(|e| format!(" — {e}")).unwrap_or_default()
        )?;
    }
    writeln!(
        o,
        "agents attached {} ({} since start); connections {}/{} ({} refused at the limit), {} not authenticated yet",
        st.agents_attached, st.agents_attached_total, st.connections, st.connections_max, st.connections_refused_total, st.connections_unauthenticated
    )?;
    let refused: Vec<String> = st.connections_refused_by_kind_total.iter().filter(|(_, n)| **n > 0).map(|(k, n)| format!("{k} {n}")).collect();
    if !refused.is_empty() {
        writeln!(o, "closed before they were served: {}", refused.join(", "))?;
    }
    use transport::TransportKind::{Shm, Tcp, Ucx};
    writeln!(
        o,
        "served: {:.1} MiB of blocks over {Tcp}, {} of log; one-sided attaches (not agents: one agent may attach more than once): {Shm} {}, {Ucx} {}{}",
        mib(relay::stats::served_bytes(st, Tcp)),
        bytes_text(st.log_served_bytes_total),
        relay::stats::attaches(st, Shm),
        relay::stats::attaches(st, Ucx),
        if st.ucx_side_restarts_total > 0 { format!(" (UCX side process started again {} times)", st.ucx_side_restarts_total) } else { String::new() }
    )?;
    writeln!(o, "joins ended (as their agents said): {} in sync, {} full sync, {} failed", at(&st.joins_total, "in_sync"), at(&st.joins_total, "full_sync"), at(&st.joins_total, "failed"))?;
    let store = match (&st.store, st.store_size_bytes, st.store_free_bytes) {
        (Some(dir), Some(size), Some(free)) => format!("; store {dir}: {:.1} GiB free of {:.1} GiB", free as f64 / GIB, size as f64 / GIB),
        (Some(dir), _, _) => format!("; store {dir}: its filesystem could not be read"),
        _ => String::new(),
    };
    writeln!(o, "bounds: log {} per generation, snapshot {}{store}", bytes_text(st.log_max_bytes), bytes_text(st.snapshot_max_bytes))?;
    writeln!(
        o,
        "errors: auth {}, protocol {}, io {}, capture {}; memory: RSS {:.1} MiB",
        at(&st.errors_total, "auth"),
        at(&st.errors_total, "protocol"),
        at(&st.errors_total, "io"),
        at(&st.errors_total, "capture"),
        mib(st.resident_memory_bytes)
    )?;
    Ok(())
}

/// Bytes in a GiB, for a filesystem's size.
const GIB: f64 = (1u64 << 30) as f64;

/// A byte count in the unit that fits it: "512 B", "21.5 KiB", "3.0 MiB" (a small log is not "0.0 MiB").
fn bytes_text(b: u64) -> String {
    match b {
        0..1024 => format!("{b} B"),
        1024..1048576 => format!("{:.1} KiB", b as f64 / 1024.0),
        _ => format!("{:.1} MiB", b as f64 / 1048576.0),
    }
}

/// Stdout written, or closed by its reader (`fastrepl status | head`): that ends the command
/// quietly with success, not with a panic or an error about a pipe nobody reads.
fn quiet_on_broken_pipe(written: std::io::Result<()>) -> Result<ExitCode> {
    match written {
        Ok(()) => Ok(ExitCode::SUCCESS),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(ExitCode::SUCCESS),
        Err(e) => Err(e).context("write to stdout"),
    }
}

fn verify(a: VerifyArgs) -> Result<ExitCode> {
    let auth = secrets::auth(a.user.as_deref(), a.password_file.as_deref(), "FASTREPL_VERIFY_PASSWORD")?;
    let t = Duration::from_secs(60);
    let tls = a.tls.load()?;
    let mut ca = client::Client::connect_tls(&a.a, auth.as_ref(), t, tls.as_ref()).with_context(|| format!("connect to {}", a.a))?;
    let mut cb = client::Client::connect_tls(&a.b, auth.as_ref(), t, tls.as_ref()).with_context(|| format!("connect to {}", a.b))?;
    // A cluster replica redirects reads to its master unless the connection is READONLY.
    for (c, addr) in [(&mut ca, &a.a), (&mut cb, &a.b)] {
        if c.info("cluster").with_context(|| format!("INFO cluster on {addr}"))?.get("cluster_enabled") == Some("1") {
            c.cmd(&["READONLY"]).with_context(|| format!("READONLY on cluster node {addr}"))?;
        }
    }
    let opts = verify::Options { ttl_tolerance_ms: a.ttl_tolerance_ms, ..Default::default() };
    let out = match verify::compare(&mut ca, &mut cb, &opts) {
        Ok(o) => o,
        Err(e) => {
            errln!("fastrepl verify: {e}");
            return Ok(ExitCode::from(2));
        }
    };
    let mut o = std::io::stdout().lock();
    let written = (|| -> std::io::Result<()> {
        if a.json {
            writeln!(o, "{}", serde_json::to_string(&out)?)?;
        } else if out.identical() {
            writeln!(o, "identical: {} keys in databases {:?}, {} function libraries", out.keys, out.databases, out.function_libraries)?;
        } else {
            if out.difference_count > 0 {
                writeln!(o, "DIFFERENT: {} differences among {} keys; first {}:", out.difference_count, out.keys, out.differences.len())?;
                for d in &out.differences {
                    writeln!(o, "  {d}")?;
                }
            }
            for (t, n) in &out.uncomparable {
                writeln!(o, "cannot compare type {t} ({n} keys): verify does not know how its values are meant")?;
            }
            if out.refused_count > 0 {
                writeln!(o, "cannot read {} keys (a server answered with an error); first {}:", out.refused_count, out.refused.len())?;
                for r in &out.refused {
                    writeln!(o, "  {r}")?;
                }
            }
        }
        o.flush()
    })();
    // A reader that went away (`| head`) saw what it wanted; the verdict is still the exit status.
    quiet_on_broken_pipe(written)?;
    // 1: something differs; 2: nothing found different, but not everything could be compared (a
    // type verify does not know, a key a server refused to read).
    Ok(if out.identical() {
        ExitCode::SUCCESS
    } else if out.difference_count > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::from(2)
    })
}

#[cfg(test)]
mod tests {

    #[test]
    fn the_help_states_the_stop_bound_limits_holds() {
        use clap::CommandFactory;
        let help = super::Cli::command().render_long_help().to_string();
        assert!(help.contains(&format!("within {} s", limits::STOP_GRACE_MAX.as_secs())), "the help's stop bound is not limits::STOP_GRACE_MAX:\n{help}");
    }

    #[test]
    fn the_help_states_the_window_defaults_limits_holds() {
        use clap::CommandFactory;
        let mut cmd = super::Cli::command();
        let join = cmd.find_subcommand_mut("join").expect("a join subcommand");
        let help = join.render_long_help().to_string().split_whitespace().collect::<Vec<_>>().join(" ");
        let said = format!(
            "[default: {} for a join that serves other agents, {} for one that only reads from them, {} for a pull from the relay alone]",
            limits::WINDOW_BLOCKS_SERVING_DEFAULT,
            limits::WINDOW_BLOCKS_SWARM_DEFAULT,
            limits::WINDOW_BLOCKS_DEFAULT
        );
        assert!(help.contains(&said), "the help's window defaults are not limits':\n{help}");
    }

    /// Lines captured by a test's subscriber.
    #[derive(Clone, Default)]
    struct Captured(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

    impl std::io::Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// What `spec`'s filter lets through of a rustls warning (as the log bridge names it), a rustls
    /// error and a warning of ours.
    fn logged_under(spec: Option<&str>) -> String {
        let out = Captured::default();
        let w = out.clone();
        let sub = tracing_subscriber::fmt().with_env_filter(super::log_filter(spec)).with_writer(move || w.clone()).with_ansi(false).finish();
        tracing::subscriber::with_default(sub, || {
            tracing::warn!(target: "rustls::check", "Received a ApplicationData message while expecting [Handshake]");
            tracing::error!(target: "rustls::common_state", "traffic keys exhausted");
            tracing::warn!(target: "relay::serve", "ours");
        });
        let text = out.0.lock().unwrap().clone();
        String::from_utf8(text).unwrap()
    }

    #[test]
    fn rustls_warnings_a_stranger_can_cause_are_not_logged_unless_asked_for() {
        for spec in [None, Some("info"), Some("debug"), Some("warn,relay=debug")] {
            let text = logged_under(spec);
            assert!(!text.contains("Received a") && text.contains("traffic keys exhausted") && text.contains("ours"), "{spec:?}: {text}");
        }
        assert!(logged_under(Some("info,rustls=warn")).contains("Received a"), "an operator who names rustls gets its lines");
    }

    #[test]
    fn json_log_lines_get_real_lists() {
        let line = br#"{"level":"INFO","transports":"[\"shm\",\"tcp\"]","note":"[not json","span":{"restored":"[\"a=1\"]"}}"#;
        let out: serde_json::Value = serde_json::from_slice(&super::json_lists(line).unwrap()).unwrap();
        assert_eq!(out["transports"], serde_json::json!(["shm", "tcp"]));
        assert_eq!(out["span"]["restored"], serde_json::json!(["a=1"]));
        assert_eq!(out["note"], "[not json", "a string that only looks like a list stays a string");
        assert!(super::json_lists(br#"{"level":"INFO","message":"no lists"}"#).is_none());
        assert!(super::json_lists(b"not json").is_none());
    }
    use super::*;

    #[test]
    fn a_byte_count_is_shown_in_the_unit_that_fits_it() {
        assert_eq!(bytes_text(512), "512 B");
        assert_eq!(bytes_text(22 * 1024), "22.0 KiB");
        assert_eq!(bytes_text(3 << 20), "3.0 MiB");
    }

    /// The status's per-transport lines read the counters by `TransportKind` and print their names.
    #[test]
    fn the_status_names_each_transports_counters() {
        let zero = |keys: &[&str]| serde_json::Value::Object(keys.iter().map(|k| (k.to_string(), 0.into())).collect());
        let mut st: relay::stats::Status = serde_json::from_value(serde_json::json!({
            "version": "0", "listen": "l", "master": "m", "source_policy": "master", "source": "", "capture_policy": "on-start",
            "uptime_seconds": 1.0, "captures_total": 0, "capture_failures_total": 0, "generations_sealed_total": 0,
            "generations_sealed_by_reason_total": {}, "generations_released_idle_total": 0, "source_bytes_total": 0,
            "generations": [], "held_bytes": 0, "connections": 0, "connections_max": 1, "connections_refused_total": 0,
            "agents_attached": 0, "agents_attached_total": 0, "served_bytes_total": zero(&["tcp"]), "log_served_bytes_total": 0,
            "attaches_total": zero(&["shm", "ucx"]), "ucx_side_restarts_total": 0, "errors_total": zero(&["auth"]), "resident_memory_bytes": 0,
        }))
        .unwrap();
        st.served_bytes_total.insert("tcp".into(), 3 << 20);
        st.attaches_total.insert("shm".into(), 4);
        st.attaches_total.insert("ucx".into(), 5);
        st.connections_refused_by_kind_total = [("displaced".to_string(), 7), ("auth".to_string(), 1), ("full".to_string(), 0)].into();
        let mut out = Vec::new();
        print_status(&mut out, &st).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("closed before they were served: auth 1, displaced 7\n"), "{text}");
        assert!(text.contains("served: 3.0 MiB of blocks over tcp, 0 B of log; one-sided attaches (not agents: one agent may attach more than once): shm 4, ucx 5\n"), "{text}");
    }

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
