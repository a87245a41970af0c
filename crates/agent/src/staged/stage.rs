//! `fastrepl stage`: prepare a server that is not running yet (a container's init step, a systemd
//! `ExecStartPre`) so that it starts as a replica that resyncs partially. It runs at *every* start of
//! the server, and decides from what the volume holds and what the master (or the cluster) says
//! ([`crate::staged::start`]): keep the server's own RDB when the master's backlog still continues it,
//! keep a cluster node that is a master serving slots, and otherwise make the relay's snapshot the RDB
//! file in the data directory (for a cluster node, its cluster config records it as its shard
//! master's replica). A standalone server then needs only `replicaof <master>` in its config; a new
//! cluster node needs to be introduced to the cluster (`CLUSTER MEET`) once it runs.
//!
//! The server must load the RDB: with `appendonly yes` it would load its AOF instead, so staging is
//! refused when its config says so or an AOF is in the directory; and a snapshot it cannot load (its
//! RDB version) is refused before any byte is pulled.

use crate::error::{Error, Party};
use crate::master::MasterAccess;
use crate::staged::cluster::{self, Node, Role};
use crate::staged::snapshot_file::{self, Source};
use crate::staged::staging::Backlog;
use crate::staged::start::{self, Decision, MasterView, NodeOnVolume};
use crate::staged::target::{self, ServerConfig};
use crate::staged::volume;
use client::{Client, Info};
use replication::rdb::Server;
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Instant;

/// What to stage, and where.
pub struct StageConfig<'a> {
    /// The relay and how to pull from it.
    pub source: Source<'a>,
    /// The master the server will follow, as it reaches it (`given`; `None`: as the relay reaches
    /// it), and its credentials and TLS.
    pub master: MasterAccess<'a>,
    /// The server's data directory.
    pub dir: PathBuf,
    /// Its RDB file name.
    pub dbfilename: String,
    /// Its cluster config file (relative to `dir`), for a cluster node.
    pub cluster_config: Option<String>,
    /// Its config file, read to refuse `appendonly yes` and for its `rdb-version-check`.
    pub server_config: Option<PathBuf>,
    /// The master is the one `server_config`'s `replicaof` names (instead of `master`); a config
    /// without one is a primary's, kept as it is. For charts whose own init step writes the config
    /// and decides which pod is the primary (the official Valkey chart): stage never disagrees
    /// with it.
    pub master_from_server_config: bool,
    /// The server that will load the file ([`target::server`]).
    pub server: Server,
}

/// What a stage decided and did (`--json`).
#[derive(Debug, Clone, Serialize)]
pub struct StageReport {
    /// Keep the volume or stage, and why.
    pub start: Decision,
    /// The master the server is to follow (`None`: a cluster node that is a master itself).
    pub master: Option<String>,
    /// What was staged, when the decision was to stage.
    #[serde(flatten)]
    pub staged: Option<Staged>,
    /// Seconds in all.
    pub secs: f64,
}

/// What a stage placed in the directory.
#[derive(Debug, Clone, Serialize)]
pub struct Staged {
    /// The RDB file written.
    pub rdb_file: PathBuf,
    /// The relay's generation.
    pub generation: u64,
    /// Its replication ID.
    pub replid: String,
    /// Its offset: the server asks for `PSYNC <replid> <offset+1>`.
    pub snapshot_offset: u64,
    /// RDB bytes written.
    pub rdb_length_bytes: u64,
    /// What they travelled as (compressed where that paid).
    pub rdb_stored_bytes: u64,
    /// The transport used.
    pub transport: transport::TransportKind,
    /// Bytes the master could still write before the snapshot's offset leaves its backlog.
    pub backlog_headroom_bytes: u64,
    /// The same in seconds at the write rate (absent: it wrote nothing).
    pub backlog_headroom_secs: Option<f64>,
    /// Times the relay took a newer snapshot.
    pub renewals: u32,
    /// For a cluster node: the config file written, its id, and its master's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster: Option<ClusterStaged>,
}

/// A cluster node's staged config.
#[derive(Debug, Clone, Serialize)]
pub struct ClusterStaged {
    /// The file.
    pub config_file: PathBuf,
    /// The node's id (kept from an existing config, else new).
    pub node_id: String,
    /// The master's id.
    pub master_id: String,
}

/// Decide what this start of the server needs, and stage the snapshot in `cfg.dir` when it needs one.
pub fn stage(cfg: &StageConfig<'_>) -> Result<StageReport, Error> {
    let t0 = Instant::now();
    let server_config = cfg.server_config.as_deref().map(|p| Ok::<_, Error>((p, ServerConfig::read(p)?))).transpose()?;
    target::refuse_aof(&cfg.dir, server_config.as_ref().map(|(p, c)| (*p, c)))?;
    let configured_master = match (cfg.master_from_server_config, &server_config) {
        (false, _) => None,
        (true, None) => return Err(Error::Precondition("--master-from-server-config needs --server-config, the file whose replicaof names the master".into())),
        (true, Some((p, c))) => match &c.replicaof {
            None => return Ok(StageReport { start: Decision::Keep(start::Keep::Primary { config: p.to_path_buf() }), master: None, staged: None, secs: t0.elapsed().as_secs_f64() }),
            Some(m) => {
                endpoint::Endpoint::from_str(m).map_err(|e| Error::Precondition(format!("{}: replicaof {m}: {e}", p.display())))?;
                Some(m.clone())
            }
        },
    };
    let node = match &cfg.cluster_config {
        Some(name) => Some(volume::node(&cfg.dir.join(name))?),
        None => None,
    };
    // A node promoted to master keeps everything: no master to ask, nothing to pull.
    if let Some(keep) = node.as_ref().and_then(start::keeps_as_master) {
        return Ok(StageReport { start: Decision::Keep(keep), master: None, staged: None, secs: t0.elapsed().as_secs_f64() });
    }
    let relays_master = || Ok(crate::pull::progress::attach(cfg.source.relay, cfg.source.token, limits::GENERATION_WAIT_MAX)?.master);
    let (master_addr, previous_master) = match &node {
        None => match configured_master {
            Some(m) => (m, None),
            None => (cfg.master.find(relays_master)?, None),
        },
        Some(NodeOnVolume::Parsed(me)) if me.role == Role::Replica => shard_master(cfg, me, relays_master)?,
        Some(_) => (first_master(cfg, relays_master)?, None),
    };
    let mut master = cfg.master.connect(&master_addr).map_err(Error::master)?;
    let decision = decide(&mut master, &cfg.dir.join(&cfg.dbfilename))?;
    if let Decision::Keep(_) = decision {
        return Ok(StageReport { start: decision, master: Some(master_addr), staged: None, secs: t0.elapsed().as_secs_f64() });
    }
    tracing::info!(decision = ?decision, master = %master_addr, "staging the relay's snapshot");
    // A cluster node's config is prepared (and checked) before the pull, so a refusal costs nothing.
    let cluster = match &cfg.cluster_config {
        None => None,
        Some(name) => Some(cluster_config(&mut master, &master_addr, &cfg.dir.join(name), node.as_ref(), previous_master.as_deref())?),
    };
    let rdb_version_check = server_config.as_ref().and_then(|(_, c)| c.rdb_version_check.clone());
    let loads = |v: u32| cfg.server.loads(v, rdb_version_check.as_deref()).map_err(|why| Error::Incompatible(format!("the relay's snapshot is RDB version {v}: {why}; nothing was pulled or written")));
    let f = snapshot_file::pull_fresh(&cfg.source, &mut master, &cfg.dir, loads)?;
    let rdb_file = cfg.dir.join(&cfg.dbfilename);
    // The RDB there before stays until this one replaces it, in one rename.
    f.file.place(&rdb_file)?;
    let cluster = match cluster {
        None => None,
        Some((path, text, node_id, master_id)) => {
            write_atomically(&path, text.as_bytes())?;
            Some(ClusterStaged { config_file: path, node_id, master_id })
        }
    };
    let staged = Staged {
        rdb_file,
        generation: f.desc.generation,
        replid: f.desc.replid,
        snapshot_offset: f.desc.offset,
        rdb_length_bytes: f.pulled.stats.bytes,
        rdb_stored_bytes: f.pulled.stats.stored_bytes,
        transport: f.pulled.transport,
        backlog_headroom_bytes: f.headroom.0,
        backlog_headroom_secs: f.headroom.1,
        renewals: f.renewals,
        cluster,
    };
    Ok(StageReport { start: decision, master: Some(master_addr), staged: Some(staged), secs: t0.elapsed().as_secs_f64() })
}

/// The volume's RDB judged against the master (its write rate measured only when the RDB continues
/// its history: that is when the headroom decides).
fn decide(master: &mut Client, rdb_path: &Path) -> Result<Decision, Error> {
    let rdb = volume::rdb(rdb_path);
    let before = (Instant::now(), master.info("replication").map_err(Error::master)?);
    let view = master_view(&before.1, 0.0)?;
    let first = start::decide(&rdb, &view);
    if !matches!(first, Decision::Keep(_)) {
        return Ok(first);
    }
    std::thread::sleep(limits::WRITE_RATE_WINDOW_MIN); // A measurement interval, not a synchronization.
    let after = master.info("replication").map_err(Error::master)?;
    let written = crate::master::repl_offset(&after).saturating_sub(crate::master::repl_offset(&before.1));
    let rate = written as f64 / before.0.elapsed().as_secs_f64();
    Ok(start::decide(&rdb, &master_view(&after, rate)?))
}

/// The master as the start decision sees it, from its `INFO replication`.
fn master_view(repl: &Info, write_rate: f64) -> Result<MasterView, Error> {
    let backlog = Backlog::from_info(|k| repl.num(k)).ok_or_else(|| Error::protocol(Party::Master, "it does not report its backlog (repl_backlog_* in INFO replication)"))?;
    Ok(MasterView {
        replid: repl.get("master_replid").unwrap_or_default().to_string(),
        replid2: repl.get("master_replid2").unwrap_or_default().to_string(),
        second_offset: repl.num("second_repl_offset").and_then(|n| u64::try_from(n).ok()),
        backlog,
        write_rate,
    })
}

/// A cluster replica's shard master now, asked of the cluster: of the node given (`--master`, any
/// node of the cluster), then — only when it does not answer — the relay's master. Returns its
/// address and the master the node's config names (a staged config may replace that one: it was
/// the shard's master before a failover).
fn shard_master(cfg: &StageConfig<'_>, me: &Node, relays_master: impl FnOnce() -> Result<String, Error>) -> Result<(String, Option<String>), Error> {
    let ask = |seed: &str| {
        let table = cfg.master.connect(seed).map_err(Error::master).and_then(|mut c| cluster_nodes(&mut c))?;
        start::shard_master(me, &table).map(|m| (m.addr.clone(), me.master.clone())).map_err(Error::Precondition)
    };
    let given = match cfg.master.given {
        Some(seed) => match ask(seed) {
            Ok(found) => return Ok(found),
            Err(e) => Some(e),
        },
        None => None,
    };
    // The relay is asked only now: attaching waits for its generation, which a kept volume never needs.
    match relays_master() {
        Ok(seed) => ask(&seed),
        Err(e) => Err(given.unwrap_or(e)),
    }
}

/// A new cluster node's master: the node given when it is a master serving slots, else the relay's
/// master (a relay captures for one shard).
fn first_master(cfg: &StageConfig<'_>, relays_master: impl FnOnce() -> Result<String, Error>) -> Result<String, Error> {
    if let Some(given) = cfg.master.given {
        let mut c = cfg.master.connect(given).map_err(Error::master)?;
        let table = cluster_nodes(&mut c)?;
        let me = cluster::myself(&table).map_err(|e| Error::protocol(Party::Master, format!("CLUSTER NODES: {e}")))?;
        if me.serves_slots() {
            return Ok(given.to_string());
        }
        tracing::info!(given, "not a master serving slots: the node follows the relay's master");
    }
    relays_master()
}

/// `CLUSTER NODES` of a node, parsed.
fn cluster_nodes(c: &mut Client) -> Result<Vec<Node>, Error> {
    let text = crate::master::cluster_nodes(c).map_err(Error::master)?;
    cluster::parse(&text).map_err(|e| Error::protocol(Party::Master, format!("CLUSTER NODES: {e}")))
}

/// The node's cluster config as the master's replica: (path, text, node id, master id). An existing
/// config (`node`, as the volume holds it) keeps its node id, and must be an empty master's, or
/// already this master's replica's, or the replica's of `previous` (its shard's master before a
/// failover).
fn cluster_config(master: &mut Client, master_addr: &str, path: &Path, node: Option<&NodeOnVolume>, previous: Option<&str>) -> Result<(PathBuf, String, String, String), Error> {
    if master.info("cluster").map_err(Error::master)?.get("cluster_enabled") != Some("1") {
        return Err(Error::Precondition(format!("{master_addr} is not a cluster node: --cluster-config stages a cluster node, which must follow a cluster master")));
    }
    let table_text = crate::master::cluster_nodes(master).map_err(Error::master)?;
    let table = cluster::parse(&table_text).map_err(|e| Error::protocol(Party::Master, format!("CLUSTER NODES: {e}")))?;
    let me = cluster::myself(&table).map_err(|e| Error::protocol(Party::Master, format!("CLUSTER NODES: {e}")))?;
    if !me.serves_slots() {
        return Err(Error::Precondition(format!("{master_addr} is not a cluster master serving slots: name the shard's master with --master")));
    }
    let node_id = match node {
        Some(NodeOnVolume::Parsed(mine)) => {
            let follows = |id: Option<&str>| id.is_some() && mine.master.as_deref() == id;
            let ok = (mine.role == Role::Master && mine.slots == 0) || (mine.role == Role::Replica && (follows(Some(me.id.as_str())) || follows(previous)));
            if !ok {
                return Err(Error::Precondition(format!(
                    "{} is the config of a node that serves slots or follows another master: staging would change its role in the cluster; remove the file if the node is to start anew",
                    path.display()
                )));
            }
            mine.id.clone()
        }
        Some(NodeOnVolume::Absent) | None => cluster::new_id().map_err(Error::Internal)?,
    };
    // A master that has not learned its own address is written with the one the stager reached, as
    // an IP: the servers read an IP in that field of a cluster config.
    let (ip, port) = crate::master::ip_address(master_addr)?;
    let text = cluster::staged_config(&node_id, &table, &me.id, &endpoint::host_port(&ip, &port), &table_text).map_err(|e| Error::protocol(Party::Master, e))?;
    Ok((path.to_path_buf(), text, node_id, me.id.clone()))
}

/// Write through a temporary file, synced, renamed over `path`.
fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), Error> {
    use std::io::Write;
    let tmp = path.with_extension(format!("fastrepl-{}", std::process::id()));
    let r = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)?;
        if let Some(d) = path.parent() {
            std::fs::File::open(d)?.sync_all()?;
        }
        Ok::<(), std::io::Error>(())
    })();
    if r.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    r.map_err(|e| Error::Resource(format!("write {}: {e}", path.display())))
}
