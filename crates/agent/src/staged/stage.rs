//! `fastrepl stage`: prepare a server that is not running yet (a container's init step, a systemd
//! `ExecStartPre`) so that it starts as a replica that resyncs partially: the relay's snapshot becomes
//! the RDB file in its data directory; for a cluster node, its cluster config records it as the
//! master's replica. A standalone server then needs only `replicaof <master>` in its config; a cluster
//! node needs to be introduced to the cluster (`CLUSTER MEET`) once it runs.
//!
//! The server must load the RDB: with `appendonly yes` it would load its AOF instead, so staging is
//! refused when its config says so or an AOF is in the directory.

use crate::staged::cluster::{self, Role};
use crate::staged::snapshot_file::{self, Source};
use crate::master::MasterAccess;
use crate::error::Error;
use crate::error::Party;
use client::Client;
use serde::Serialize;
use std::path::{Path, PathBuf};
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
    /// Its config file, read to refuse `appendonly yes`.
    pub server_config: Option<PathBuf>,
}

/// What a stage did (`--json`).
#[derive(Debug, Clone, Serialize)]
pub struct StageReport {
    /// The RDB file written.
    pub rdb_file: PathBuf,
    /// The master the server is to follow.
    pub master: String,
    /// The relay's generation.
    pub generation: u64,
    /// Its replication ID.
    pub replid: String,
    /// Its offset: the server asks for `PSYNC <replid> <offset+1>`.
    pub snapshot_offset: u64,
    /// RDB bytes written.
    pub rdb_length_bytes: u64,
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
    /// Seconds in all.
    pub secs: f64,
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

/// Stage the snapshot in `cfg.dir`.
pub fn stage(cfg: &StageConfig<'_>) -> Result<StageReport, Error> {
    let t0 = Instant::now();
    refuse_aof(&cfg.dir, cfg.server_config.as_deref())?;
    let master_addr = cfg.master.find(|| Ok(crate::pull::progress::attach(cfg.source.relay, cfg.source.token, limits::GENERATION_WAIT_MAX)?.master))?;
    let mut master = cfg.master.connect(&master_addr).map_err(Error::master)?;
    // A cluster node's config is prepared (and checked) before the pull, so a refusal costs nothing.
    let cluster = match &cfg.cluster_config {
        None => None,
        Some(name) => Some(cluster_config(&mut master, &master_addr, &cfg.dir.join(name))?),
    };
    let f = snapshot_file::pull_fresh(&cfg.source, &mut master, &cfg.dir, |_| Ok(()))?;
    let rdb_file = cfg.dir.join(&cfg.dbfilename);
    f.file.place(&rdb_file)?;
    let cluster = match cluster {
        None => None,
        Some((path, text, node_id, master_id)) => {
            write_atomically(&path, text.as_bytes())?;
            Some(ClusterStaged { config_file: path, node_id, master_id })
        }
    };
    Ok(StageReport {
        rdb_file,
        master: master_addr,
        generation: f.desc.generation,
        replid: f.desc.replid,
        snapshot_offset: f.desc.offset,
        rdb_length_bytes: f.pulled.stats.bytes,
        transport: f.pulled.transport,
        backlog_headroom_bytes: f.headroom.0,
        backlog_headroom_secs: f.headroom.1,
        renewals: f.renewals,
        cluster,
        secs: t0.elapsed().as_secs_f64(),
    })
}

/// A server that would load an AOF at start is refused: its config says `appendonly yes`, or (no
/// config given) an AOF lies in the directory.
fn refuse_aof(dir: &Path, server_config: Option<&Path>) -> Result<(), Error> {
    if let Some(p) = server_config {
        let text = std::fs::read_to_string(p).map_err(|e| Error::Precondition(format!("read the server's config {}: {e}", p.display())))?;
        let aof = text.lines().map(str::trim).filter(|l| !l.starts_with('#')).filter_map(|l| l.split_once(char::is_whitespace)).rfind(|(k, _)| k.eq_ignore_ascii_case("appendonly"));
        if aof.is_some_and(|(_, v)| v.trim().trim_matches('"').eq_ignore_ascii_case("yes")) {
            return Err(Error::Precondition(format!(
                "{} sets appendonly yes: the server would load its AOF at start, not the staged snapshot. Start it with appendonly no and turn AOF on after its resync (CONFIG SET appendonly yes)",
                p.display()
            )));
        }
        return Ok(());
    }
    for name in ["appendonlydir", "appendonly.aof"] {
        if dir.join(name).exists() {
            return Err(Error::Precondition(format!(
                "{} holds an AOF ({name}): a server with appendonly yes would load it, not the staged snapshot. Remove it, or give --server-config to show that appendonly is off",
                dir.display()
            )));
        }
    }
    Ok(())
}

/// The node's cluster config as the master's replica: (path, text, node id, master id). An existing
/// config keeps its node id, and must be an empty master's or already this master's replica's.
fn cluster_config(master: &mut Client, master_addr: &str, path: &Path) -> Result<(PathBuf, String, String, String), Error> {
    if master.info("cluster").map_err(Error::master)?.get("cluster_enabled") != Some("1") {
        return Err(Error::Precondition(format!("{master_addr} is not a cluster node: --cluster-config stages a cluster node, which must follow a cluster master")));
    }
    let table_text = match master.cmd(&["CLUSTER", "NODES"]).map_err(Error::master)? {
        resp::Frame::Bulk(b) => String::from_utf8_lossy(&b).into_owned(),
        other => return Err(Error::protocol(Party::Master, format!("CLUSTER NODES answered {other:?}"))),
    };
    let table = cluster::parse(&table_text).map_err(|e| Error::protocol(Party::Master, format!("CLUSTER NODES: {e}")))?;
    let me = cluster::myself(&table).map_err(|e| Error::protocol(Party::Master, format!("CLUSTER NODES: {e}")))?;
    if me.role != Role::Master || me.slots == 0 {
        return Err(Error::Precondition(format!("{master_addr} is not a cluster master serving slots: name the shard's master with --master")));
    }
    let node_id = match std::fs::read_to_string(path) {
        Ok(text) => {
            let nodes = cluster::parse(&text).map_err(|e| Error::Precondition(format!("{}: {e}", path.display())))?;
            let mine = cluster::myself(&nodes).map_err(|e| Error::Precondition(format!("{}: {e}", path.display())))?;
            let ok = (mine.role == Role::Master && mine.slots == 0) || (mine.role == Role::Replica && mine.master.as_deref() == Some(me.id.as_str()));
            if !ok {
                return Err(Error::Precondition(format!(
                    "{} is the config of a node that serves slots or follows another master: staging would change its role in the cluster; remove the file if the node is to start anew",
                    path.display()
                )));
            }
            mine.id.clone()
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => cluster::new_id().map_err(Error::Internal)?,
        Err(e) => return Err(Error::Precondition(format!("read {}: {e}", path.display()))),
    };
    let text = cluster::staged_config(&node_id, &table, &me.id, master_addr, &table_text).map_err(|e| Error::protocol(Party::Master, e))?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_aof_server_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let conf = d.path().join("redis.conf");
        std::fs::write(&conf, "port 6379\n# appendonly yes\nappendonly \"yes\"\n").unwrap();
        assert!(matches!(refuse_aof(d.path(), Some(&conf)), Err(Error::Precondition(e)) if e.contains("appendonly yes")));
        std::fs::write(&conf, "appendonly yes\nappendonly no\n").unwrap();
        assert!(refuse_aof(d.path(), Some(&conf)).is_ok(), "the last setting counts");
        assert!(refuse_aof(d.path(), None).is_ok());
        std::fs::create_dir(d.path().join("appendonlydir")).unwrap();
        assert!(matches!(refuse_aof(d.path(), None), Err(Error::Precondition(e)) if e.contains("holds an AOF")));
    }
}
