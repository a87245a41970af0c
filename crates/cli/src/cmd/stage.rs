//! `fastrepl stage`: its arguments, the staging of a server that is not running yet, and what it
//! decided and did, as printed.

use super::args::{MasterAuthArgs, PullArgs, RelayTlsArgs, SentinelArgs, TlsArgs};
use super::{on_interrupt, Versioned};
use anyhow::Result;
use std::path::PathBuf;
use std::process::ExitCode;

/// `fastrepl stage`'s arguments.
#[derive(clap::Args)]
pub struct StageArgs {
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
    #[command(flatten)]
    master_auth: MasterAuthArgs,
    #[command(flatten)]
    tls: TlsArgs,
    #[command(flatten)]
    pull: PullArgs,
    /// Print one JSON object with the report.
    #[arg(long, env = "FASTREPL_JSON")]
    json: bool,
}

/// `fastrepl stage`: the server's directory prepared (or kept), then its report.
pub fn run(a: StageArgs) -> Result<ExitCode> {
    let token = a.relay_tls.credentials(secrets::token(a.token_file.as_deref())?)?;
    let tls = a.tls.load()?;
    let live = agent::Live::default();
    let cancel = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    on_interrupt(cancel.clone())?;
    let pull = a.pull.config();
    let master_auth = a.master_auth.auth()?;
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
