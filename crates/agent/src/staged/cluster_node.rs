//! The staged join, for a local server that is a cluster node: a cluster node refuses `REPLICAOF`, and
//! a cluster replica takes its master's address from the cluster's table, so it cannot be pointed at
//! the agent. Instead the snapshot becomes its RDB file and the node restarts as the master's replica:
//! loading an RDB as a replica, it takes the replication ID and offset from the RDB's aux fields and
//! asks the master for `PSYNC <id> <offset+1>`, a partial resync while the master's backlog still
//! holds that offset.
//!
//! The steps, each undone on a failure after it ([`staging::undo`]):
//! 1. Check everything, changing nothing ([`staging::check`]), and pull the snapshot into an unnamed
//!    file in the node's data directory (`O_TMPFILE`: it vanishes if the agent dies), checking that
//!    its aux fields are the snapshot's and that it is fresh enough for the master's backlog
//!    ([`staging::freshness`]; a stale one is renewed by the relay).
//! 2. Introduce the node to the master if it does not know it (`CLUSTER MEET`).
//! 3. Park its replication link — `masteruser`/`masterauth` set to a user the master refuses, so its
//!    handshake stops at `AUTH`, before any `PSYNC` — and `CLUSTER REPLICATE` the master: the cluster
//!    and its config file record it as the master's replica, without a full sync (and a fork on the
//!    master). The server writes its own config file, also at shutdown; this way what it writes is
//!    what we want.
//! 4. Make the snapshot its RDB file (the one there before kept aside), shut it down without saving,
//!    and let its supervisor start it again (systemd `Restart=`, a container restart), or run
//!    `--restart-command`. The restarted server reads its own config: `masterauth` as configured.
//! 5. See it through: loaded, linked, the master's counters showing a partial resync (never claimed
//!    when they do not), the master's table listing it as its replica.

use crate::config::Restart;
use crate::error::Error;
use crate::error::Party;
use crate::guard::PARKED_USER;
use crate::local;
use crate::master::MasterAccess;
use crate::node::Node;
use crate::phase::JoinPhase;
use crate::pull::progress;
use crate::report::Handoff;
use crate::report::Phases;
use crate::report::ReplicaState;
use crate::report::Report;
use crate::staged::cluster::{self, Role};
use crate::staged::snapshot_file::{self, Pulled, Source, Staged};
use crate::staged::staging::{self, MasterFacts, NodeFacts, Resync, Step, SyncCounters, Undo};
use client::Client;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// How long the node may take to record a role change in its config file.
const CONFIG_SAVE_MAX: Duration = limits::CLUSTER_CONFIG_SAVE_MAX;
/// How long a node may take to learn of another after `CLUSTER MEET`, and a master to list a new replica.
const GOSSIP_MAX: Duration = limits::CLUSTER_GOSSIP_MAX;
/// How long a node may take to exit after `SHUTDOWN NOSAVE`.
const SHUTDOWN_MAX: Duration = limits::NODE_SHUTDOWN_MAX;
/// What a staged join takes from the join's configuration: the node, where the snapshot comes from,
/// how to reach the master, and how the node restarts.
pub struct StagedConfig<'a> {
    /// The local server (a cluster node), and the join's cancel flag.
    pub node: &'a Node,
    /// The relay, how to pull from it, and the live progress.
    pub source: Source<'a>,
    /// How the master (and the other nodes of its shard) is reached.
    pub master: MasterAccess<'a>,
    /// How the node is restarted.
    pub restart: &'a Restart,
    /// How long the node may take to load the snapshot.
    pub load_timeout: Duration,
    /// How long its link to the master may take to come up.
    pub handoff_timeout: Duration,
}

/// Whether the local server is a cluster node (`cluster_enabled:1`).
pub fn is_cluster_node(node: &Node) -> Result<bool, Error> {
    let mut c = node.connect()?;
    Ok(c.info("cluster").map_err(Error::replica)?.get("cluster_enabled") == Some("1"))
}

/// What a failed staging left: the error, and the node's state.
type Failure = (Error, ReplicaState);

/// One staged attempt.
pub(crate) fn attempt(cfg: &StagedConfig<'_>) -> Result<Report, Failure> {
    let t0 = Instant::now();
    let untouched = |e: Error| (e, ReplicaState::Untouched);
    let mut s = Staging::check(cfg).map_err(untouched)?;
    let connected = t0.elapsed().as_secs_f64();
    let pulled = s.pull_fresh(cfg).map_err(untouched)?;
    tracing::info!(node = %cfg.node.addr, master = %s.master_addr, dir = %s.dir.display(), headroom_bytes = s.headroom.0, "snapshot staged in the node's directory; recording the node as the master's replica and restarting it");
    let result = s.apply(cfg);
    match result {
        Ok(done) => Ok(s.report(cfg, done, connected, pulled)),
        Err(e) => {
            let state = s.unwind(cfg);
            Err((e, state))
        }
    }
}

/// What the node's end told.
struct Done {
    resync: Handoff,
    notes: Vec<String>,
    restarted: f64,
    loaded: f64,
    linked: f64,
    offset: u64,
}

/// A staging under way: what the checks learned and how far it got.
struct Staging {
    node: Client,
    node_server: String,
    node_id: String,
    node_run_id: String,
    master: Client,
    master_addr: String,
    master_server: String,
    master_id: String,
    plan: staging::Plan,
    dir: PathBuf,
    rdb_name: String,
    config_name: String,
    /// The node's cluster config file as it was (restored if the staging fails while it is down).
    config_before: Option<Vec<u8>>,
    /// `masteruser`/`masterauth` before the link was parked (restored on an unwind while it runs).
    parked_from: (Option<String>, Option<String>),
    /// Where the RDB file that was there before is kept, if there was one.
    rdb_aside: Option<PathBuf>,
    desc: Option<snapshot::Descriptor>,
    file: Option<Staged>,
    headroom: (u64, Option<f64>),
    renewals: u32,
    step: Option<Step>,
    /// Armed from the park to the shutdown (see [`crate::guard::arm_staged`]).
    guard: Option<crate::guard::Guard>,
}

impl Staging {
    /// Connect to the node, the relay and the master and check them all; nothing is changed.
    fn check(cfg: &StagedConfig<'_>) -> Result<Staging, Error> {
        let mut node = cfg.node.connect()?;
        let server_info = node.info("server").map_err(Error::replica)?;
        let node_server =
            replication::rdb::Server::from_info(&local::info_text(&server_info)).ok_or_else(|| Error::Incompatible(format!("{}: cannot tell its version from INFO server", cfg.node.addr)))?;
        let node_run_id = server_info.get("run_id").unwrap_or_default().to_string();
        let keys = local::key_count(&mut node).map_err(Error::replica)?;
        let node_table_text = crate::master::cluster_nodes(&mut node).map_err(Error::replica)?;
        let node_table = cluster::parse(&node_table_text).map_err(|e| Error::protocol(Party::Replica, format!("CLUSTER NODES: {e}")))?;
        let me = cluster::myself(&node_table).map_err(|e| Error::protocol(Party::Replica, format!("CLUSTER NODES: {e}")))?.clone();
        let aof = node.config_get("appendonly").map_err(Error::replica)?.as_deref() == Some("yes");
        let dir_conf = node.config_get("dir").map_err(Error::replica)?.ok_or_else(|| Error::protocol(Party::Replica, "CONFIG GET dir answered nothing"))?;
        let rdb_name = node.config_get("dbfilename").map_err(Error::replica)?.unwrap_or_else(|| "dump.rdb".into());
        let config_name = node.config_get("cluster-config-file").map_err(Error::replica)?.unwrap_or_else(|| "nodes.conf".into());
        let parked_from = (node.config_get("masteruser").map_err(Error::replica)?, node.config_get("masterauth").map_err(Error::replica)?);

        let master_addr = cfg.master.find(|| Ok(progress::attach(cfg.source.relay, cfg.source.token, limits::GENERATION_WAIT_MAX)?.master))?;
        let mut master = cfg.master.connect(&master_addr).map_err(Error::master)?;
        let master_server = match master.info("server") {
            Ok(i) => replication::rdb::Server::from_info(&local::info_text(&i)).map(|s| s.to_string()).unwrap_or_else(|| "unknown".into()),
            Err(e) => return Err(Error::master(e)),
        };
        if master.info("cluster").map_err(Error::master)?.get("cluster_enabled") != Some("1") {
            return Err(Error::Precondition(format!("{master_addr} is not a cluster node, and {} is: name the shard's master with --master", cfg.node.addr)));
        }
        let master_table = cluster::parse(&crate::master::cluster_nodes(&mut master).map_err(Error::master)?).map_err(|e| Error::protocol(Party::Master, format!("CLUSTER NODES: {e}")))?;
        let master_me = cluster::myself(&master_table).map_err(|e| Error::protocol(Party::Master, format!("CLUSTER NODES: {e}")))?.clone();
        let knows_master = node_table.iter().any(|n| n.id == master_me.id && !n.unsettled);
        let facts = NodeFacts {
            addr: cfg.node.addr.clone(),
            keys,
            me: me.clone(),
            aof,
            knows_master,
            has_masterauth: parked_from.1.as_deref().is_some_and(|a| !a.is_empty()),
            master_needs_auth: cfg.master.auth.is_some(),
        };
        let plan = staging::check(&facts, &MasterFacts { addr: master_addr.clone(), me: master_me.clone() }).map_err(Error::Precondition)?;
        let dir = cfg.restart.dir.clone().unwrap_or_else(|| PathBuf::from(&dir_conf));
        if cfg.restart.command.is_none() {
            tracing::info!(node = %cfg.node.addr, "no --restart-command: the node's supervisor must start it again after its shutdown");
        }
        Ok(Staging {
            node,
            node_server: node_server.to_string(),
            node_id: me.id,
            node_run_id,
            master,
            master_addr,
            master_server,
            master_id: master_me.id,
            plan,
            dir,
            rdb_name,
            config_name,
            config_before: None,
            parked_from,
            rdb_aside: None,
            desc: None,
            file: None,
            headroom: (0, None),
            renewals: 0,
            step: None,
            guard: None,
        })
    }

    /// Pull a fresh enough snapshot into the node's directory (see [`crate::staged::snapshot_file`]).
    fn pull_fresh(&mut self, cfg: &StagedConfig<'_>) -> Result<Pulled, Error> {
        let source = &cfg.source;
        let node = &mut self.node;
        let master_server = self.master_server.clone();
        let loads = |rdb_version: u32| -> Result<(), Error> {
            let server =
                replication::rdb::Server::from_info(&local::info_text(&node.info("server").map_err(Error::replica)?)).ok_or_else(|| Error::Incompatible("cannot tell the node's version".into()))?;
            let check = local::rdb_version_check(node, &server)?;
            server.loads(rdb_version, check.as_deref()).map_err(|why| Error::Incompatible(format!("the master ({master_server}) writes RDB version {rdb_version}: {why}. Nothing was changed")))
        };
        let f = snapshot_file::pull_fresh(source, &mut self.master, &self.dir, loads)?;
        self.headroom = f.headroom;
        self.renewals = f.renewals;
        self.desc = Some(f.desc);
        self.file = Some(f.file);
        self.step = Some(Step::Pulled);
        Ok(f.pulled)
    }

    /// From the meet to the node's end: each step recorded, so a failure knows what to undo.
    fn apply(&mut self, cfg: &StagedConfig<'_>) -> Result<Done, Error> {
        let t = Instant::now();
        cfg.node.check_cancel()?;
        phase(cfg, JoinPhase::Recording);
        // The shard's nodes and their counters: the node may end up following another of them if
        // the master fails over meanwhile, and is judged by the one it follows.
        let shard = self.shard(cfg)?;
        if self.plan.meet {
            self.meet()?;
        }
        self.park_and_record(cfg)?;
        self.place_and_shut_down()?;
        phase(cfg, JoinPhase::Restarting);
        let restarted = self.wait_restart(cfg)?;
        self.step = Some(Step::Restarted);
        phase(cfg, JoinPhase::Loading);
        let loaded = self.wait_loaded(cfg)?;
        phase(cfg, JoinPhase::Linking);
        let (linked, offset) = self.wait_linked(cfg)?;
        // A replica of the shard now: from here a failure leaves it as it is.
        self.step = Some(Step::Linked);
        crate::events::handed_off(offset);
        let (resync, notes) = self.judge_resync(cfg, &shard)?;
        if let Some(aside) = self.rdb_aside.take() {
            let _ = std::fs::remove_file(aside); // The node holds the data now; the old empty file is no use.
        }
        let secs = |i: Instant| i.duration_since(t).as_secs_f64();
        Ok(Done { resync, notes, restarted: secs(restarted), loaded: secs(loaded), linked: secs(linked), offset })
    }

    /// Introduce the node to the master (`CLUSTER MEET`) and wait until it knows it.
    fn meet(&mut self) -> Result<(), Error> {
        let (host, port) = crate::master::ip_address(&self.master_addr)?;
        self.node.cmd(&["CLUSTER", "MEET", &host, &port]).map_err(Error::replica)?;
        self.step = Some(Step::Met);
        let id = self.master_id.clone();
        wait_for(GOSSIP_MAX, "the node to know the master after CLUSTER MEET", || {
            let t = crate::master::cluster_nodes(&mut self.node).map_err(Error::replica)?;
            Ok(cluster::parse(&t).ok().is_some_and(|ns| ns.iter().any(|n| n.id == id && !n.unsettled)))
        })
    }

    /// The node's RDB file, and where the one there before is kept aside.
    fn rdb_paths(&self) -> (PathBuf, PathBuf) {
        (self.dir.join(&self.rdb_name), self.dir.join(format!("{}.before-fastrepl", self.rdb_name)))
    }

    /// Arm the guard, park the node's link and record it as the master's replica (`CLUSTER
    /// REPLICATE`), then wait until its cluster config file says so.
    fn park_and_record(&mut self, cfg: &StagedConfig<'_>) -> Result<(), Error> {
        self.config_before = std::fs::read(self.dir.join(&self.config_name)).ok();
        // From the park to the shutdown the node would be left half-staged if this process died: a
        // guard process undoes it then.
        let (target, aside) = self.rdb_paths();
        let (user_before, auth_before) = self.parked_from.clone();
        let (meet_host, meet_port) = crate::master::ip_address(&self.master_addr)?;
        let meet_at = endpoint::host_port(&meet_host, &meet_port);
        let guard = crate::guard::arm_staged(
            cfg.node,
            &crate::guard::StagedNode { master: &meet_at, masteruser: user_before.as_deref(), masterauth: auth_before.as_deref(), rdb: &target, rdb_aside: &aside },
        )?;
        self.guard = Some(guard);
        // Park the link, then record the role: from here no handshake of the node gets past AUTH.
        let secret = parked_secret()?;
        self.node.config_set("masteruser", PARKED_USER).map_err(Error::replica)?;
        self.step = Some(Step::Recorded);
        self.node.config_set("masterauth", &secret).map_err(Error::replica)?;
        self.node.cmd(&["CLUSTER", "REPLICATE", &self.master_id]).map_err(Error::replica)?;
        let (config_path, master_id, node_id) = (self.dir.join(&self.config_name), self.master_id.clone(), self.node_id.clone());
        wait_for(CONFIG_SAVE_MAX, "the node's cluster config file to record it as the master's replica", || {
            let text = std::fs::read_to_string(&config_path).unwrap_or_default();
            Ok(cluster::parse(&text).ok().and_then(|ns| cluster::myself(&ns).ok().cloned()).is_some_and(|me| me.id == node_id && me.role == Role::Replica && me.master.as_deref() == Some(&master_id)))
        })
    }

    /// Make the snapshot the node's RDB file (the one there before kept aside), shut the node down
    /// without saving, and disarm the guard.
    fn place_and_shut_down(&mut self) -> Result<(), Error> {
        let (target, aside) = self.rdb_paths();
        if target.exists() {
            std::fs::rename(&target, &aside).map_err(|e| Error::Resource(format!("keep the node's RDB file aside ({}): {e}", target.display())))?;
            self.rdb_aside = Some(aside);
        }
        self.step = Some(Step::Placed);
        self.file.take().ok_or_else(|| Error::Internal("no staged file".into()))?.place(&target)?;
        // Shut down without saving (a save would overwrite the snapshot with the empty dataset).
        match self.node.cmd(&["SHUTDOWN", "NOSAVE"]) {
            // The server closes the connection as it exits: no answer is the success.
            Err(client::Error::Io { .. }) | Ok(_) => {}
            // Refused (a permission, a server that cannot stop now): it still runs, say so now.
            Err(e) => return Err(Error::replica(e)),
        }
        self.step = Some(Step::ShutDown);
        // Down (or going): a dead agent now leaves a node that starts as the master's replica.
        if let Some(g) = self.guard.take() {
            g.disarm();
        }
        Ok(())
    }

    /// Partial or full, from the counters of the master the node follows once the cluster agrees
    /// (in doubt, full, with the reason in the notes).
    fn judge_resync(&mut self, cfg: &StagedConfig<'_>, shard: &[ShardNode]) -> Result<(Handoff, Vec<String>), Error> {
        let mut notes = Vec::new();
        // The cluster agrees once the master the node's own table names lists it as its replica
        // (after a failover during the staging, that is the shard's new master).
        let (master_id, master_addr) = self.wait_cluster_agrees(cfg)?;
        let resync = match shard.iter().find(|m| m.id == master_id) {
            None => Resync::Unknown(format!("the node follows {master_addr} ({master_id}), not a node of the shard it was staged for")),
            Some(m) => {
                if m.id != self.master_id {
                    notes.push(format!("the master failed over during the staging: the node follows the shard's new master {master_addr} ({master_id})"));
                }
                let mut c = cfg.master.connect(&m.addr).map_err(Error::master)?;
                staging::judge(m.before, sync_counters(&mut c)?)
            }
        };
        let resync = match resync {
            Resync::Partial => Handoff::Partial,
            Resync::Full => Handoff::Full,
            Resync::Unknown(why) => {
                notes.push(format!("not reported as a partial resync: {why}"));
                Handoff::Full
            }
        };
        Ok((resync, notes))
    }

    /// Wait for the node to go down and answer again as a new process (its run id changes).
    fn wait_restart(&mut self, cfg: &StagedConfig<'_>) -> Result<Instant, Error> {
        let addr = cfg.node.addr.clone();
        let connect = || cfg.node.connect_within(limits::NODE_RESTART_CONNECT_TIMEOUT);
        if let Some(cmd) = &cfg.restart.command {
            wait_for(SHUTDOWN_MAX, "the node to exit after SHUTDOWN NOSAVE", || Ok(connect().is_err()))?;
            tracing::info!(node = %addr, "node down; running --restart-command");
            let out = std::process::Command::new("sh").arg("-c").arg(cmd).stdin(std::process::Stdio::null()).output().map_err(|e| Error::Internal(format!("run --restart-command: {e}")))?;
            if !out.status.success() {
                let stderr = String::from_utf8_lossy(&out.stderr);
                let said = if stderr.trim().is_empty() { String::new() } else { format!(": {}", stderr.trim()) };
                return Err(Error::unavailable(Party::Replica, format!("--restart-command failed ({}){said}", out.status)));
            }
        }
        let old = self.node_run_id.clone();
        let mut back: Option<Client> = None;
        wait_for(cfg.restart.timeout, "the node to be started again (by its supervisor or --restart-command)", || {
            cfg.node.check_cancel()?;
            if let Ok(mut c) = connect() {
                match c.info("server") {
                    Ok(i) if i.get("run_id").is_some_and(|r| r != old) => {
                        back = Some(c);
                        return Ok(true);
                    }
                    Err(e) if e.code().is_some_and(|c| *c == client::ErrorCode::Loading) => {
                        back = Some(c);
                        return Ok(true);
                    }
                    _ => {}
                }
            }
            Ok(false)
        })?;
        self.node = back.expect("set when the wait ends");
        tracing::info!(node = %addr, "node started again");
        Ok(Instant::now())
    }

    /// Wait until the node has loaded its RDB.
    /// A node that dies while it loads (or links) is started again by its supervisor and loads the
    /// same file again: a lost connection is waited through (up to the phase's deadline), not a
    /// failure.
    fn wait_loaded(&mut self, cfg: &StagedConfig<'_>) -> Result<Instant, Error> {
        wait_for(cfg.load_timeout, "the node to load the snapshot", || {
            cfg.node.check_cancel()?;
            match self.node.info("persistence") {
                Ok(i) => Ok(i.get("loading") == Some("0")),
                Err(e) if e.code().is_some_and(|c| *c == client::ErrorCode::Loading) => Ok(false),
                Err(e @ client::Error::Io { .. }) => self.reconnect(cfg, e),
                Err(e) => Err(Error::replica(e)),
            }
        })?;
        Ok(Instant::now())
    }

    /// The connection to the node broke: connect again if it answers (`Ok(false)`: not done yet).
    fn reconnect(&mut self, cfg: &StagedConfig<'_>, e: client::Error) -> Result<bool, Error> {
        tracing::warn!(node = %cfg.node.addr, error = %e, "lost the node; waiting for it to answer again");
        if let Ok(c) = cfg.node.connect() {
            self.node = c;
        }
        Ok(false)
    }

    /// Wait until the node is a replica with its link up and no sync in progress; its offset then.
    fn wait_linked(&mut self, cfg: &StagedConfig<'_>) -> Result<(Instant, u64), Error> {
        let mut offset = 0;
        wait_for(cfg.handoff_timeout, "the node's link to the master", || {
            cfg.node.check_cancel()?;
            let st = match local::repl_state(&mut self.node) {
                Ok(st) => st,
                Err(e @ client::Error::Io { .. }) => return self.reconnect(cfg, e),
                Err(e) => return Err(Error::replica(e)),
            };
            offset = st.offset.unwrap_or(0);
            Ok(st.role == Some(client::Role::Replica) && st.link_up && !st.syncing)
        })?;
        Ok((Instant::now(), offset))
    }

    /// Wait until the master the node's own table names (id, address) is a master and lists the
    /// node as its replica.
    fn wait_cluster_agrees(&mut self, cfg: &StagedConfig<'_>) -> Result<(String, String), Error> {
        let node_id = self.node_id.clone();
        let mut agreed = (String::new(), String::new());
        wait_for(GOSSIP_MAX, "the cluster to list the node as its master's replica (CLUSTER NODES on the master)", || {
            let table = match crate::master::cluster_nodes(&mut self.node) {
                Ok(t) => cluster::parse(&t),
                Err(e @ client::Error::Io { .. }) => return self.reconnect(cfg, e),
                Err(_) => return Ok(false),
            };
            let Ok(table) = table else { return Ok(false) };
            let Some(id) = table.iter().find(|n| n.myself).and_then(|me| me.master.clone()) else { return Ok(false) };
            let Some(m) = table.iter().find(|n| n.id == id && n.role == Role::Master && !n.unsettled) else { return Ok(false) };
            let addr = if m.addr.starts_with(':') { self.master_addr.clone() } else { m.addr.clone() };
            let Ok(mut c) = cfg.master.connect(&addr) else { return Ok(false) };
            let listed = crate::master::cluster_nodes(&mut c)
                .ok()
                .and_then(|t| cluster::parse(&t).ok())
                .is_some_and(|ns| ns.iter().any(|n| n.id == node_id && n.role == Role::Replica && n.master.as_deref() == Some(id.as_str()) && !n.unsettled));
            if listed {
                agreed = (id, addr);
            }
            Ok(listed)
        })?;
        Ok(agreed)
    }

    /// The shard's master and replicas as the master's table lists them (addresses as the cluster
    /// knows them: what a replica's `master_host` says), each with its sync counters now.
    fn shard(&mut self, cfg: &StagedConfig<'_>) -> Result<Vec<ShardNode>, Error> {
        let table = cluster::parse(&crate::master::cluster_nodes(&mut self.master).map_err(Error::master)?).map_err(|e| Error::protocol(Party::Master, format!("CLUSTER NODES: {e}")))?;
        let mut out = Vec::new();
        for n in table.iter().filter(|n| n.id == self.master_id || (n.role == Role::Replica && n.master.as_deref() == Some(self.master_id.as_str()) && !n.unsettled)) {
            let before = if n.id == self.master_id {
                sync_counters(&mut self.master)?
            } else {
                // A replica that does not answer now is no candidate to judge by later.
                match cfg.master.connect(&n.addr) {
                    Ok(mut c) => sync_counters(&mut c)?,
                    Err(_) => continue,
                }
            };
            // A master alone in its cluster has not learned its own address: it is where we reach it.
            let addr = if n.addr.starts_with(':') { self.master_addr.clone() } else { n.addr.clone() };
            out.push(ShardNode { id: n.id.clone(), addr, before });
        }
        Ok(out)
    }

    /// Undo what the staging did, as far as it got; the node's state to report.
    fn unwind(&mut self, cfg: &StagedConfig<'_>) -> ReplicaState {
        let state = self.undo(cfg);
        // Undone here (or failed to be: said in the state): the guard must not try again.
        if let Some(g) = self.guard.take() {
            g.disarm();
        }
        state
    }

    fn undo(&mut self, cfg: &StagedConfig<'_>) -> ReplicaState {
        let Some(step) = self.step else { return ReplicaState::Untouched };
        if step == Step::Linked {
            return ReplicaState::HandedOver;
        }
        let mut node = cfg.node.connect().ok();
        // Asked with INFO, which the node's user has for the join's own checks: a user without PING
        // (operations.md's) would make a running, parked node look stopped and undo it as one.
        let running = node.as_mut().is_some_and(|c| c.info("server").is_ok());
        let mut failed: Vec<String> = Vec::new();
        let mut done: Vec<&str> = Vec::new();
        for u in staging::undo(step, running) {
            let r: Result<(), String> = match u {
                Undo::ResetRole => node.as_mut().map_or(Err("not connected".into()), |c| self.reset_role(c)),
                Undo::Unpark => node.as_mut().map_or(Err("not connected".into()), |c| {
                    let (u, a) = &self.parked_from;
                    c.config_set("masteruser", u.as_deref().unwrap_or("")).and_then(|_| c.config_set("masterauth", a.as_deref().unwrap_or(""))).map_err(|e| e.to_string())
                }),
                Undo::RestoreRdb => self.restore_rdb(),
                Undo::RestoreConfig => match &self.config_before {
                    Some(b) => std::fs::write(self.dir.join(&self.config_name), b).map_err(|e| e.to_string()),
                    None => std::fs::remove_file(self.dir.join(&self.config_name)).or_else(|e| if e.kind() == std::io::ErrorKind::NotFound { Ok(()) } else { Err(e) }).map_err(|e| e.to_string()),
                },
            };
            match r {
                Ok(()) => done.push(match u {
                    Undo::ResetRole => "reset to an empty master and introduced to the master again",
                    Undo::Unpark => "its masteruser/masterauth restored",
                    Undo::RestoreRdb => "the staged RDB file removed (the one before put back)",
                    Undo::RestoreConfig => "its cluster config file restored",
                }),
                Err(e) => failed.push(format!("{u:?}: {e}")),
            }
        }
        if !failed.is_empty() {
            return ReplicaState::ResetFailed(format!("undoing the staging failed ({}); done: {}", failed.join("; "), done.join(", ")));
        }
        if step == Step::Pulled {
            return ReplicaState::Untouched;
        }
        if !running {
            return ReplicaState::Down(done.join(", "));
        }
        let met = if self.plan.meet { " (it stays known to the cluster: the join introduced it)" } else { "" };
        tracing::warn!(node = %cfg.node.addr, "staging undone: {}{met}", done.join(", "));
        ReplicaState::Unstaged
    }

    /// `CLUSTER RESET SOFT` (an empty master, the cluster forgotten), then meet the master again.
    fn reset_role(&self, c: &mut Client) -> Result<(), String> {
        c.cmd(&["CLUSTER", "RESET", "SOFT"]).map_err(|e| format!("CLUSTER RESET SOFT: {e}"))?;
        let (host, port) = crate::master::ip_address(&self.master_addr).map_err(|e| e.to_string())?;
        c.cmd(&["CLUSTER", "MEET", &host, &port]).map_err(|e| format!("CLUSTER MEET {}: {e}", self.master_addr))?;
        Ok(())
    }

    fn restore_rdb(&mut self) -> Result<(), String> {
        let target = self.dir.join(&self.rdb_name);
        match self.rdb_aside.take() {
            Some(aside) => std::fs::rename(&aside, &target).map_err(|e| format!("put {} back: {e}", aside.display())),
            None => match std::fs::remove_file(&target) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(format!("remove {}: {e}", target.display())),
                _ => Ok(()),
            },
        }
    }

    fn report(&mut self, cfg: &StagedConfig<'_>, done: Done, connected: f64, pulled: Pulled) -> Report {
        let desc = self.desc.clone().expect("set by the pull");
        let base = connected + pulled.secs;
        let mut notes = done.notes;
        notes.push(format!(
            "staged: the node restarted {} and resynced from the snapshot's offset; backlog headroom left at staging: {} bytes{}",
            if cfg.restart.command.is_some() { "by --restart-command" } else { "by its supervisor" },
            self.headroom.0,
            self.headroom.1.map(|s| format!(" (~{s:.0} s at the write rate)")).unwrap_or_else(|| " (the master wrote nothing)".into())
        ));
        if self.plan.meet {
            notes.push("the node did not know the master: the join introduced it (CLUSTER MEET)".into());
        }
        let s = &pulled.stats;
        Report {
            handoff: done.resync,
            transport: pulled.transport,
            transport_detail: pulled.detail,
            relay: cfg.source.relay.to_string(),
            replica: cfg.node.addr.clone(),
            master: self.master_addr.clone(),
            replica_server: self.node_server.clone(),
            master_server: self.master_server.clone(),
            generation: desc.generation,
            replid: desc.replid.clone(),
            snapshot_offset: desc.offset,
            handoff_offset: done.offset,
            rdb_length_bytes: s.bytes,
            rdb_stored_bytes: s.stored_bytes,
            log_bytes: 0,
            blocks: s.blocks,
            blocks_reread: s.reread,
            readers: 0,
            reads_in_flight_max: s.reads_in_flight_max,
            streamed_while_capturing: s.streamed_while_capturing,
            phases: Phases {
                wait_capture: 0.0,
                connect: connected,
                first_byte: pulled.first_byte,
                pulled: base,
                loaded: base + done.loaded,
                caught_up: base + done.linked,
                handed_off: base + done.linked,
            },
            pull_mib_s: s.bytes as f64 / (1 << 20) as f64 / pulled.secs.max(1e-9),
            notes,
            agent_cpu_secs: crate::procstat::own_cpu_secs(),
            agent_peak_rss_kib: crate::procstat::own_peak_rss_kib(),
            agent_peak_pss_kib: 0,
            swarm: "not in a swarm (staged join)".into(),
            received_bytes_total: crate::report::ReceivedBytes { relay: s.bytes, peers: 0 },
            sources: Vec::new(),
            peer_bad_blocks: 0,
            peer_failures: 0,
            peer_refusals: 0,
            bytes_served_to_peers: 0,
            attempts: Vec::new(),
            staged: Some(crate::report::StagedReport {
                node_id: self.node_id.clone(),
                master_id: self.master_id.clone(),
                restart: if cfg.restart.command.is_some() { crate::report::RestartBy::Command } else { crate::report::RestartBy::Supervisor },
                met: self.plan.meet,
                backlog_headroom_bytes: self.headroom.0,
                backlog_headroom_secs: self.headroom.1,
                restarted_secs: done.restarted,
                renewals: self.renewals,
            }),
        }
    }
}

/// A node of the shard and its sync counters before the restart.
struct ShardNode {
    id: String,
    addr: String,
    before: SyncCounters,
}

/// Enter a phase: the display and metrics, and the event stream.
fn phase(cfg: &StagedConfig<'_>, p: JoinPhase) {
    cfg.source.live.set_phase(p);
    crate::events::phase(p);
}

fn sync_counters(master: &mut Client) -> Result<SyncCounters, Error> {
    let i = master.info("stats").map_err(Error::master)?;
    Ok(SyncCounters { full: i.num("sync_full").unwrap_or(0) as u64, partial_ok: i.num("sync_partial_ok").unwrap_or(0) as u64 })
}

fn parked_secret() -> Result<String, Error> {
    let mut b = [0u8; 24];
    getrandom::getrandom(&mut b).map_err(|e| Error::Internal(format!("randomness for the parked link: {e}")))?;
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
}

/// Poll `f` until it says done, fails, or `max` passes (then a timeout naming `what`).
fn wait_for(max: Duration, what: &str, mut f: impl FnMut() -> Result<bool, Error>) -> Result<(), Error> {
    let deadline = Instant::now() + max;
    loop {
        if f()? {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(Error::Timeout(format!("waited {:.0} s for {what}", max.as_secs_f64())));
        }
        std::thread::sleep(limits::SERVER_POLL_EVERY); // Polling a server's state, with a deadline.
    }
}
