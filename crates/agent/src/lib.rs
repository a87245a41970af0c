//! `join`: make a local, unmodified Redis/Valkey server a live replica of the master, with the bulk of
//! the data pulled from a relay instead of sent by the master.
//!
//! The steps (DESIGN.md, Agent): check the local server; attach to the relay's current generation;
//! check the master and that the replica can load this RDB — all before the replica is touched; point
//! the replica at ourselves and answer its `PSYNC` with the snapshot's `+FULLRESYNC`; stream the RDB
//! in order while [`pipeline`] pulls blocks out of order; stream the log until the replica is close
//! to the relay's end; then, once the replica has applied exactly what we sent, hand it to the master
//! with `REPLICAOF`, which it follows with `PSYNC <replid> <offset+1>`.
//!
//! A failure before the handoff resets the replica to what it was (empty, standalone): it never stays
//! behind looking like a replica it is not. After the handoff the servers own the outcome: a refused
//! partial resync becomes the master's native full sync, which we wait for and report as such.
#![deny(missing_docs)]

pub mod fetch;
pub mod local;
pub mod pipeline;
pub mod progress;
pub mod replica_link;
pub mod select;
#[cfg(feature = "ucx")]
pub mod ucx_reader;

use client::Client;
use replication::framing::Framing;
use replication::replica::Auth;
use serde::Serialize;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use transport::{Token, Transport};

/// Why a join failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Talking to the relay failed.
    #[error("relay: {0}")]
    Relay(#[source] transport::Error),
    /// The relay said something wrong or is gone.
    #[error("{0}")]
    RelayProtocol(String),
    /// The local server refused or failed a command.
    #[error("local server: {0}")]
    Replica(#[source] client::Error),
    /// The local server's replication link to the agent failed.
    #[error("replica link: {0}")]
    ReplicaLink(String),
    /// The master refused or failed a command.
    #[error("master: {0}")]
    Master(#[source] client::Error),
    /// A local precondition does not hold.
    #[error("{0}")]
    Local(String),
    /// The replica cannot load this master's data.
    #[error("incompatible: {0}")]
    Incompatible(String),
    /// A block failed its checksum twice.
    #[error("block {block} (offset {offset}) failed its checksum twice")]
    Checksum {
        /// Block number.
        block: u64,
        /// Its offset.
        offset: u64,
    },
    /// A wait ran past its deadline.
    #[error("timed out: {0}")]
    Timeout(String),
    /// The join was interrupted (SIGINT/SIGTERM).
    #[error("interrupted")]
    Interrupted,
}

fn check_cancel(cancel: &std::sync::atomic::AtomicBool) -> Result<(), Error> {
    if cancel.load(Ordering::SeqCst) {
        return Err(Error::Interrupted);
    }
    Ok(())
}

/// The join's configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// The relay's address.
    pub relay: SocketAddr,
    /// Shared secret for the relay.
    pub token: Token,
    /// The local server, `host:port`.
    pub replica: String,
    /// Its credentials.
    pub replica_auth: Option<Auth>,
    /// The master as the replica must reach it (default: as the relay reaches it).
    pub master: Option<String>,
    /// The master's credentials (for the backlog check and the replica's `masterauth`).
    pub master_auth: Option<Auth>,
    /// Replace a non-empty replica's data.
    pub force: bool,
    /// Where the agent listens for its replica (loopback, port 0 by default).
    pub listen: SocketAddr,
    /// Reads in flight.
    pub readers: usize,
    /// Blocks buffered ahead of the replica at most.
    pub window_blocks: u64,
    /// How long to wait for the replica to load the snapshot.
    pub load_timeout: Duration,
    /// How long to wait for the replica to be in sync with the master after the handoff.
    pub handoff_timeout: Duration,
    /// Live progress for a display: RDB bytes sent to the replica so far, and the phase.
    pub live: std::sync::Arc<Live>,
    /// Set from outside (a signal) to abandon the join; before the handoff the replica is reset.
    pub cancel: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// The transport for the snapshot (`--transport`).
    pub transport: select::Choice,
}

/// Progress that a display can poll while a join runs.
#[derive(Debug, Default)]
pub struct Live {
    /// RDB bytes sent to the replica.
    pub rdb_bytes_sent: std::sync::atomic::AtomicU64,
    /// RDB length once known (0 = not yet).
    pub rdb_bytes_total: std::sync::atomic::AtomicU64,
    /// Current phase, as text.
    pub phase: std::sync::Mutex<&'static str>,
}

impl Live {
    fn set_phase(&self, p: &'static str) {
        *self.phase.lock().unwrap_or_else(|e| e.into_inner()) = p;
    }
}

/// How the replica was handed to its master.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Handoff {
    /// `PSYNC` accepted: the replica continued from our offset.
    Partial,
    /// The master insisted on a full resync; the replica is in sync natively.
    Full,
}

/// Seconds since the join started at which each phase ended.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Phases {
    /// Relay attached, local server and master checked.
    pub connect: f64,
    /// First RDB byte sent to the replica.
    pub first_byte: f64,
    /// Every block pulled and sent.
    pub pulled: f64,
    /// The replica finished loading.
    pub loaded: f64,
    /// The replica applied the log up to the handoff offset.
    pub caught_up: f64,
    /// The replica's link to the master is up.
    pub handed_off: f64,
}

/// What happened, for people (summary) and programs (`--json`).
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// How the handoff went.
    pub handoff: Handoff,
    /// The transport used.
    pub transport: String,
    /// What it ran on (for ucx: UCX's transport/device carrying the GETs), and why it was chosen.
    pub transport_detail: String,
    /// Relay, replica and master addresses.
    pub relay: String,
    /// The local server.
    pub replica: String,
    /// The master.
    pub master: String,
    /// Server versions.
    pub replica_server: String,
    /// Master server version.
    pub master_server: String,
    /// Snapshot generation.
    pub generation: u64,
    /// Replication ID.
    pub replid: String,
    /// Snapshot offset.
    pub snapshot_offset: u64,
    /// Offset at which the replica was handed over.
    pub handoff_offset: u64,
    /// RDB bytes.
    pub rdb_bytes: u64,
    /// Log bytes streamed after the RDB.
    pub log_bytes: u64,
    /// Blocks pulled.
    pub blocks: u64,
    /// Blocks read again after a checksum mismatch.
    pub blocks_reread: u64,
    /// Readers (connections) used.
    pub readers: usize,
    /// Most block reads in flight at once.
    pub reads_in_flight_max: u64,
    /// The replica got its first block while the master was still producing the RDB.
    pub streamed_while_capturing: bool,
    /// Phase end times.
    pub phases: Phases,
    /// RDB MiB/s from first byte to pulled.
    pub pull_mib_s: f64,
    /// Anything the operator should know.
    pub notes: Vec<String>,
    /// CPU seconds (user + system) this agent process used so far.
    pub agent_cpu_secs: f64,
    /// This agent process's peak resident memory, KiB.
    pub agent_peak_rss_kib: u64,
}

/// Peak resident memory of this process image so far, in KiB (`VmHWM`). Not `getrusage`'s
/// `ru_maxrss`: that survives `execve` and so includes whatever process forked us (a benchmark
/// harness, `ip netns exec`'s parent) before we were exec'd.
pub fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("VmHWM:")).and_then(|l| l.split_whitespace().nth(1)).and_then(|v| v.parse().ok()))
        .unwrap_or(0)
}

/// Counters on the master that tell full from partial resyncs.
fn sync_counters(m: &mut Client) -> Result<(i64, i64), Error> {
    let s = m.info("stats").map_err(Error::Master)?;
    Ok((s.num("sync_full").unwrap_or(0), s.num("sync_partial_ok").unwrap_or(0)))
}

fn split_host_port(addr: &str) -> Result<(String, String), Error> {
    let (h, p) = addr.rsplit_once(':').ok_or_else(|| Error::Local(format!("master address {addr:?} is not host:port")))?;
    Ok((h.trim_matches(['[', ']']).to_string(), p.to_string()))
}

fn wait_for<T>(cancel: &std::sync::atomic::AtomicBool, what: &str, timeout: Duration, mut f: impl FnMut() -> Result<Option<T>, Error>) -> Result<T, Error> {
    let deadline = Instant::now() + timeout;
    loop {
        check_cancel(cancel)?;
        if let Some(t) = f()? {
            return Ok(t);
        }
        if Instant::now() > deadline {
            return Err(Error::Timeout(format!("{what} (after {timeout:?})")));
        }
        std::thread::sleep(Duration::from_millis(10)); // Polling a server's state with a deadline.
    }
}

/// Readers to use: as asked, or the transport's default when `asked` is 0.
pub fn readers(asked: usize, transport: &dyn Transport) -> usize {
    if asked == 0 {
        transport.default_readers()
    } else {
        asked
    }
}

/// Run a join.
pub fn join(cfg: &Config) -> Result<Report, Error> {
    let t0 = Instant::now();
    let secs = |t: Instant| t.duration_since(t0).as_secs_f64();
    let mut notes = Vec::new();

    // 1. Checks; nothing is changed yet.
    let mut local = local::check(&cfg.replica, cfg.replica_auth.as_ref(), cfg.force)?;
    let attached = progress::attach(cfg.relay, &cfg.token, Duration::from_secs(600))?;
    let progress = attached.progress.clone();
    let (transport, why) = select::select(cfg.transport, cfg.relay, &cfg.token, &attached.offered)?;
    let transport: &dyn Transport = transport.as_ref();
    tracing::info!(transport = transport.name(), reason = %why, "transport selected");
    let master_addr = cfg.master.clone().unwrap_or(attached.master.clone());
    let mut master = Client::connect(&master_addr, cfg.master_auth.as_ref(), local::CMD_TIMEOUT).map_err(Error::Master)?;
    let master_server = master
        .info("server")
        .ok()
        .and_then(|i| replication::rdb::Server::from_info(&i.0.iter().map(|(k, v)| format!("{k}:{v}\n")).collect::<String>()))
        .map(|s| s.to_string())
        .unwrap_or_else(|| "unknown".into());
    let v = progress.wait_until(Duration::from_secs(600), |v| v.desc.rdb_version.is_some());
    pipeline_check(&v)?;
    let rdb_version = v.desc.rdb_version.ok_or_else(|| Error::Timeout("the relay has not received the RDB header".into()))?;
    if rdb_version > local.server.rdb_version_max() {
        return Err(Error::Incompatible(format!(
            "the master ({master_server}) writes RDB version {rdb_version}; the replica ({}) loads at most version {}. \
             Native replication cannot pair them either; nothing was changed",
            local.server,
            local.server.rdb_version_max()
        )));
    }
    let desc = v.desc.clone();
    let mrepl = master.info("replication").map_err(Error::Master)?;
    if mrepl.get("master_replid") != Some(desc.replid.as_str()) && mrepl.get("master_replid2") != Some(desc.replid.as_str()) {
        return Err(Error::RelayProtocol(format!(
            "the master's replication ID is no longer the snapshot's ({}): it restarted or failed over. The relay takes a new snapshot for the next join; retry",
            desc.replid
        )));
    }
    let span = tracing::info_span!("join", replica = %cfg.replica, generation = desc.generation, offset = desc.offset);
    let _g = span.enter();
    let t_connect = Instant::now();
    tracing::info!(relay = %cfg.relay, master = %master_addr, replica_server = %local.server, "checks passed; syncing the replica");

    // 2. From here on a failure resets the replica.
    let result = sync_and_handoff(t0, cfg, transport, &mut local, &mut master, &master_addr, &progress, &desc, &mut notes);
    let (stats, log_bytes, streamed, t_first, t_pulled, t_loaded, t_caught_up, handoff, t_handed) = match result {
        Ok(x) => x,
        Err((e, handed)) => {
            if !handed {
                reset_replica(&mut local, cfg);
            }
            return Err(e);
        }
    };
    if let Some(v) = &local.diskless_load_before {
        if let Err(e) = local.client.config_set("repl-diskless-load", v) {
            notes.push(format!("could not restore repl-diskless-load {v}: {e}"));
        }
    }
    let pull_secs = (t_pulled - t_first).max(1e-9);
    Ok(Report {
        handoff,
        transport: transport.name().into(),
        transport_detail: match transport.detail() {
            Some(d) => format!("{d}; {why}"),
            None => why,
        },
        relay: cfg.relay.to_string(),
        replica: cfg.replica.clone(),
        master: master_addr,
        replica_server: local.server.to_string(),
        master_server,
        generation: desc.generation,
        replid: desc.replid.clone(),
        snapshot_offset: desc.offset,
        handoff_offset: streamed,
        rdb_bytes: stats.bytes,
        log_bytes,
        blocks: stats.blocks,
        blocks_reread: stats.reread,
        readers: readers(cfg.readers, transport),
        reads_in_flight_max: stats.reads_in_flight_max,
        streamed_while_capturing: stats.streamed_while_capturing,
        phases: Phases {
            connect: secs(t_connect),
            first_byte: t_first,
            pulled: t_pulled,
            loaded: t_loaded,
            caught_up: t_caught_up,
            handed_off: t_handed,
        },
        pull_mib_s: stats.bytes as f64 / (1 << 20) as f64 / pull_secs,
        notes,
        agent_cpu_secs: fetch::process_cpu_secs(),
        agent_peak_rss_kib: peak_rss_kib(),
    })
}

fn pipeline_check(v: &progress::View) -> Result<(), Error> {
    if let Some(l) = &v.lost {
        return Err(Error::RelayProtocol(l.clone()));
    }
    if v.desc.state == snapshot::State::Failed {
        return Err(Error::RelayProtocol(format!("the relay's snapshot failed: {}", v.desc.error.clone().unwrap_or_default())));
    }
    Ok(())
}

type Synced = (pipeline::Stats, u64, u64, f64, f64, f64, f64, Handoff, f64);

/// Steps 2–4. The error carries whether the handoff was already issued (then the replica is the
/// master's, and must not be reset).
#[allow(clippy::too_many_arguments)]
fn sync_and_handoff(
    t0: Instant,
    cfg: &Config,
    transport: &dyn Transport,
    local: &mut local::Local,
    master: &mut Client,
    master_addr: &str,
    progress: &std::sync::Arc<progress::Progress>,
    desc: &snapshot::Descriptor,
    notes: &mut Vec<String>,
) -> Result<Synced, (Error, bool)> {
    // Every phase is reported in seconds since the join started.
    let secs = |t0: Instant| t0.elapsed().as_secs_f64();
    let pre = |e: Error| (e, false);
    let c = &mut local.client;
    if local.diskless_load_before.is_some() {
        c.config_set("repl-diskless-load", "on-empty-db").map_err(|e| pre(Error::Replica(e)))?;
    }
    if let Some(a) = &cfg.master_auth {
        if let Some(u) = &a.user {
            c.config_set("masteruser", u).map_err(|e| pre(Error::Replica(e)))?;
        }
        c.config_set("masterauth", &a.password).map_err(|e| pre(Error::Replica(e)))?;
    }
    let (listener, at) = replica_link::listen(cfg.listen).map_err(pre)?;
    c.cmd(&["REPLICAOF", &at.ip().to_string(), &at.port().to_string()]).map_err(|e| pre(Error::Replica(e)))?;
    let mut link = replica_link::accept(&listener, Duration::from_secs(30)).map_err(pre)?;
    drop(listener);

    // The framing: EOF when the replica can take it (length unknown while the master still writes).
    let framing = if link.capa_eof {
        replica_link::eof_framing().map_err(pre)?
    } else {
        let v = progress.wait_until(cfg.load_timeout, |v| v.desc.length.is_some());
        pipeline_check(&v).map_err(pre)?;
        Framing::Length(v.desc.length.ok_or_else(|| pre(Error::Timeout("the RDB length".into())))?)
    };
    let replid = replication::ReplId::parse(desc.replid.as_bytes()).map_err(|e| pre(Error::RelayProtocol(e.to_string())))?;
    link.send(&replication::master::fullresync(&replid, desc.offset), "FULLRESYNC").map_err(pre)?;
    link.send(&framing.header(), "RDB header").map_err(pre)?;
    let t_pull0 = Instant::now();
    cfg.live.set_phase("pulling");
    let stats = pipeline::pull(transport, progress, readers(cfg.readers, transport), cfg.window_blocks, &cfg.cancel, &mut |b| {
        link.send(b, "RDB block")?;
        cfg.live.rdb_bytes_sent.fetch_add(b.len() as u64, Ordering::Relaxed);
        if let Some(l) = progress.get_length() {
            cfg.live.rdb_bytes_total.store(l, Ordering::Relaxed);
        }
        Ok(())
    })
    .map_err(pre)?;
    cfg.live.set_phase("loading");
    if let Framing::Eof(mark) = &framing {
        link.send(mark, "EOF mark").map_err(pre)?;
    }
    let t_first = stats.first_byte.map(|t| t.duration_since(t0).as_secs_f64()).unwrap_or(secs(t0));
    let t_pulled = secs(t0);
    tracing::info!(bytes = stats.bytes, secs = t_pull0.elapsed().as_secs_f64(), "snapshot sent; replica loading");

    // Loaded: the link is up at the snapshot's replid (with EOF framing it also sent its first ACK).
    let need_ack = matches!(framing, Framing::Eof(_));
    wait_for(&cfg.cancel, "the replica to load the snapshot", cfg.load_timeout, || {
        link.check_open()?;
        progress.with(pipeline_check)?;
        if need_ack && !link.ack_seen.load(Ordering::SeqCst) {
            return Ok(None);
        }
        let st = local::repl_state(&mut local.client).map_err(Error::Replica)?;
        Ok((st.link_up && !st.syncing && st.replid == desc.replid).then_some(()))
    })
    .map_err(pre)?;
    let t_loaded = secs(t0);
    cfg.live.set_phase("streaming log");

    // The log, until we have sent everything the relay had when we last asked.
    let mut reader = transport.open().map_err(|e| pre(Error::Relay(e)))?;
    let mut streamed = desc.offset;
    const LOG_CHUNK: u32 = 4 << 20;
    loop {
        link.check_open().map_err(pre)?;
        check_cancel(&cfg.cancel).map_err(pre)?;
        let chunk = reader.read_log(desc.generation, streamed + 1, LOG_CHUNK).map_err(|e| pre(Error::Relay(e)))?;
        if !chunk.is_empty() {
            link.send(&chunk, "stream").map_err(pre)?;
            streamed += chunk.len() as u64;
        }
        if chunk.len() < LOG_CHUNK as usize {
            break;
        }
    }
    let log_bytes = streamed - desc.offset;
    // The replica must have applied exactly what we sent: that offset is what it will offer the master.
    wait_for(&cfg.cancel, "the replica to apply the stream", Duration::from_secs(60), || {
        link.check_open()?;
        let st = local::repl_state(&mut local.client).map_err(Error::Replica)?;
        Ok((st.link_up && st.offset == Some(streamed)).then_some(()))
    })
    .map_err(pre)?;
    let t_caught_up = secs(t0);
    cfg.live.set_phase("handing off");

    // Handoff. Can the master continue from here?
    let m = master.info("replication").map_err(|e| pre(Error::Master(e)))?;
    let first = m.num("repl_backlog_first_byte_offset").unwrap_or(i64::MAX) as u64;
    let end = m.num("master_repl_offset").unwrap_or(0) as u64;
    let backlog_ok = m.get("repl_backlog_active") == Some("1") && first <= streamed + 1 && streamed <= end;
    if !backlog_ok {
        let msg = format!(
            "the master's backlog (offsets {first}..={end}) no longer covers the replica's next offset {}: a partial resync is impossible, \
             the master will send a full sync. Raise repl-backlog-size on the master (it must hold the writes made during a join)",
            streamed + 1
        );
        tracing::warn!("{msg}");
        notes.push(msg);
    }
    let (full0, partial0) = sync_counters(master).map_err(pre)?;
    let input0 = local.client.info("stats").ok().and_then(|s| s.num("total_net_repl_input_bytes"));
    let (host, port) = split_host_port(master_addr).map_err(pre)?;
    local.client.cmd(&["REPLICAOF", &host, &port]).map_err(|e| pre(Error::Replica(e)))?;
    let _ = link.s.shutdown(std::net::Shutdown::Both);
    let post = |e: Error| (e, true);
    let want_master = format!("{host}:{port}");
    wait_for(&cfg.cancel, "the replica's link to the master", cfg.handoff_timeout, || {
        let st = local::repl_state(&mut local.client).map_err(Error::Replica)?;
        Ok((st.master.as_deref() == Some(want_master.as_str()) && st.link_up && !st.syncing).then_some(()))
    })
    .map_err(post)?;
    let t_handed = secs(t0);
    cfg.live.set_phase("done");
    let (full1, partial1) = sync_counters(master).map_err(post)?;
    let handoff = if partial1 > partial0 && full1 == full0 {
        Handoff::Partial
    } else if full1 > full0 && partial1 == partial0 {
        Handoff::Full
    } else {
        // Other replicas resynced at the same moment; the bytes this replica took from the master
        // tell a backlog tail from a whole RDB.
        let input1 = local.client.info("stats").ok().and_then(|s| s.num("total_net_repl_input_bytes"));
        match (input0, input1, desc.length) {
            (Some(a), Some(b), Some(len)) if ((b - a) as u64) < len / 2 => Handoff::Partial,
            _ => Handoff::Full,
        }
    };
    if handoff == Handoff::Full {
        notes.push("the master refused the partial resync and sent a full sync: the replica is in sync, natively".into());
    }
    tracing::info!(?handoff, secs = t_handed, "handed off");
    Ok((stats, log_bytes, streamed, t_first, t_pulled, t_loaded, t_caught_up, handoff, t_handed))
}

/// After a failure before the handoff: make the replica what it was before (standalone, empty),
/// so nothing looks in sync that is not. Best effort: the server may be the thing that failed.
fn reset_replica(local: &mut local::Local, cfg: &Config) {
    let mut c = match Client::connect(&cfg.replica, cfg.replica_auth.as_ref(), local::CMD_TIMEOUT) {
        Ok(c) => c,
        Err(e) => {
            tracing::error!(error = %e, "could not reach the replica to reset it; check its role before retrying");
            return;
        }
    };
    let _ = c.cmd(&["REPLICAOF", "NO", "ONE"]);
    let _ = c.cmd(&["FLUSHALL"]);
    if let Some(v) = &local.diskless_load_before {
        let _ = c.config_set("repl-diskless-load", v);
    }
    tracing::warn!(replica = %cfg.replica, "join failed: the replica was reset to an empty standalone server");
}
