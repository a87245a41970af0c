//! What a running relay holds and has done: counters the capture and serving threads bump, and
//! [`Status`], the one picture of them that `fastrepl status` prints and `--metrics` exposes.
//!
//! Counters are monotonic (`_total`); everything else is read at the moment the status is taken.
//! Reads over one-sided transports (shm, ucx) never reach the relay's CPU — that is their point — so
//! the relay counts their attaches, not their bytes; the agents' reports count those bytes.

use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

/// Counters, bumped where things happen.
pub(crate) struct Stats {
    started: Instant,
    pub captures: AtomicU64,
    pub capture_failures: AtomicU64,
    pub sealed: AtomicU64,
    pub released_idle: AtomicU64,
    pub agents_attached: AtomicU64,
    pub agents_attached_total: AtomicU64,
    pub tcp_block_bytes: AtomicU64,
    pub log_bytes_served: AtomicU64,
    pub shm_attaches: AtomicU64,
    pub ucx_attaches: AtomicU64,
    pub refused_over_limit: AtomicU64,
    pub errors_auth: AtomicU64,
    pub errors_protocol: AtomicU64,
    pub errors_io: AtomicU64,
    /// Bytes received from the capture source (RDB and stream).
    pub source_bytes: AtomicU64,
    /// When the source last sent anything (ms since `started`); 0 = never.
    pub source_io_ms: AtomicU64,
    source: Mutex<String>,
}

impl Stats {
    pub fn new() -> Stats {
        Stats {
            started: Instant::now(),
            captures: AtomicU64::new(0),
            capture_failures: AtomicU64::new(0),
            sealed: AtomicU64::new(0),
            released_idle: AtomicU64::new(0),
            agents_attached: AtomicU64::new(0),
            agents_attached_total: AtomicU64::new(0),
            tcp_block_bytes: AtomicU64::new(0),
            log_bytes_served: AtomicU64::new(0),
            shm_attaches: AtomicU64::new(0),
            ucx_attaches: AtomicU64::new(0),
            refused_over_limit: AtomicU64::new(0),
            errors_auth: AtomicU64::new(0),
            errors_protocol: AtomicU64::new(0),
            errors_io: AtomicU64::new(0),
            source_bytes: AtomicU64::new(0),
            source_io_ms: AtomicU64::new(0),
            source: Mutex::new(String::new()),
        }
    }

    pub fn add(c: &AtomicU64, n: u64) {
        c.fetch_add(n, Ordering::Relaxed);
    }

    pub fn set_source(&self, addr: &str) {
        *self.source.lock().unwrap_or_else(|p| p.into_inner()) = addr.to_string();
    }

    /// The source sent `n` bytes just now.
    pub fn source_io(&self, n: u64) {
        Stats::add(&self.source_bytes, n);
        self.source_io_ms.store((self.started.elapsed().as_millis() as u64).max(1), Ordering::Relaxed);
    }

    pub fn source(&self) -> String {
        self.source.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub fn uptime_secs(&self) -> f64 {
        self.started.elapsed().as_secs_f64()
    }

    /// Seconds since the source last sent anything (`None`: never).
    pub fn source_silent_secs(&self) -> Option<f64> {
        match self.source_io_ms.load(Ordering::Relaxed) {
            0 => None,
            ms => Some((self.started.elapsed().as_millis() as u64).saturating_sub(ms) as f64 / 1000.0),
        }
    }
}

fn get(c: &AtomicU64) -> u64 {
    c.load(Ordering::Relaxed)
}

/// One generation as the status shows it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct GenerationStatus {
    /// Its number.
    pub id: u64,
    /// capturing, complete, sealed or failed.
    pub state: String,
    /// The one agents arriving now get.
    pub current: bool,
    /// Replication ID and offset of the snapshot.
    pub replid: String,
    /// Offset of the snapshot.
    pub offset: u64,
    /// RDB bytes held (readable).
    pub rdb_bytes: u64,
    /// The RDB's length once known.
    pub rdb_length: Option<u64>,
    /// Blocks published, and the total once known.
    pub blocks: u64,
    /// Total blocks once the length is known.
    pub blocks_total: Option<u64>,
    /// Stream log bytes held after the snapshot.
    pub log_bytes: u64,
    /// Seconds since the capture started.
    pub age_secs: f64,
    /// Agents in its swarm now.
    pub agents: u64,
    /// Why it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Everything `fastrepl status` prints and `--metrics` exposes.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Status {
    /// The relay's version.
    pub version: String,
    /// Where agents connect.
    pub listen: String,
    /// The TCP addresses UCX listens on for one-sided reads (empty without ucx).
    #[serde(default)]
    pub ucx_listeners: Vec<String>,
    /// The master agents are handed to.
    pub master: String,
    /// `--source`: master, auto, or a replica's address.
    pub source_policy: String,
    /// The server the last capture read from.
    pub source: String,
    /// `--capture`: on-start or on-demand.
    pub capture_policy: String,
    /// Seconds since the relay started.
    pub uptime_secs: f64,
    /// Captures started (each is one fork on its source).
    pub captures_total: u64,
    /// Captures that failed.
    pub capture_failures_total: u64,
    /// The last capture failure, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_capture_error: Option<String>,
    /// Generations sealed (log bound, age, link lost, source changed).
    pub sealed_total: u64,
    /// Generations whose memory was released after `--idle-release-secs` without agents.
    pub released_idle_total: u64,
    /// Seconds since the source last sent anything (the link's silence; `None` before any capture).
    pub source_silent_secs: Option<f64>,
    /// Bytes received from capture sources.
    pub source_bytes_total: u64,
    /// Generations held in memory (the current one and sealed ones agents still use).
    pub generations: Vec<GenerationStatus>,
    /// Bytes of snapshot memory held (RDB bytes of every generation held).
    pub held_bytes: u64,
    /// Connections open now, and the limit.
    pub connections: u64,
    /// `--connections-max`.
    pub connections_max: u64,
    /// Connections closed at once because the relay was at its limit.
    pub refused_over_limit_total: u64,
    /// Agents attached to a generation now (their control connections).
    pub agents_attached: u64,
    /// Agents attached since the start.
    pub agents_attached_total: u64,
    /// Snapshot bytes sent over tcp block reads.
    pub tcp_block_bytes_total: u64,
    /// Stream log bytes sent (always over tcp).
    pub log_bytes_served_total: u64,
    /// Shared-memory attaches (the agent then reads without the relay).
    pub shm_attaches_total: u64,
    /// UCX remote keys handed out (the agent then reads without the relay's CPU).
    pub ucx_attaches_total: u64,
    /// Connections closed on an error, by kind: auth, protocol, io.
    pub errors_auth_total: u64,
    /// Protocol violations.
    pub errors_protocol_total: u64,
    /// Socket errors.
    pub errors_io_total: u64,
    /// The relay's resident memory, bytes (Linux).
    pub rss_bytes: u64,
}

impl Status {
    /// Prometheus text exposition, metric names `fastrepl_relay_*`.
    pub fn prometheus(&self) -> String {
        let mut e = metrics::Exposition::new("fastrepl_relay");
        let info = [("version", self.version.as_str()), ("master", &self.master), ("source", &self.source), ("source_policy", &self.source_policy), ("capture_policy", &self.capture_policy)];
        e.gauge("info", "The relay: version, master, source, policies (value 1).", &info, 1.0);
        e.gauge("uptime_seconds", "Seconds since the relay started.", &[], self.uptime_secs);
        e.counter("captures_total", "Captures started (each one fork on its source).", &[], self.captures_total as f64);
        e.counter("capture_failures_total", "Captures that failed.", &[], self.capture_failures_total as f64);
        e.counter("generations_sealed_total", "Generations sealed.", &[], self.sealed_total as f64);
        e.counter("generations_released_idle_total", "Generations released after --idle-release-secs without agents.", &[], self.released_idle_total as f64);
        e.gauge("source_last_io_seconds", "Seconds since the capture source last sent anything (-1: never).", &[], self.source_silent_secs.unwrap_or(-1.0));
        e.counter("source_bytes_total", "Bytes received from capture sources.", &[], self.source_bytes_total as f64);
        e.gauge("generations", "Generations held in memory.", &[], self.generations.len() as f64);
        e.gauge("held_bytes", "Snapshot bytes held in memory, all generations.", &[], self.held_bytes as f64);
        for g in &self.generations {
            let id = g.id.to_string();
            let l = [("generation", id.as_str()), ("state", g.state.as_str()), ("current", if g.current { "1" } else { "0" })];
            e.gauge("generation_rdb_bytes", "RDB bytes held by a generation.", &l, g.rdb_bytes as f64);
            e.gauge("generation_blocks", "Blocks published by a generation.", &l, g.blocks as f64);
            e.gauge("generation_log_bytes", "Stream log bytes held after a generation's snapshot.", &l, g.log_bytes as f64);
            e.gauge("generation_age_seconds", "Seconds since a generation's capture started.", &l, g.age_secs);
            e.gauge("generation_agents", "Agents in a generation's swarm.", &l, g.agents as f64);
        }
        e.gauge("connections", "Agent connections open.", &[], self.connections as f64);
        e.gauge("connections_max", "--connections-max.", &[], self.connections_max as f64);
        e.counter("connections_refused_total", "Connections closed at once at --connections-max.", &[], self.refused_over_limit_total as f64);
        e.gauge("agents_attached", "Agents attached to a generation now.", &[], self.agents_attached as f64);
        e.counter("agents_attached_total", "Agents attached since the start.", &[], self.agents_attached_total as f64);
        e.counter("served_bytes_total", "Snapshot bytes sent by the relay's CPU, by transport.", &[("transport", "tcp")], self.tcp_block_bytes_total as f64);
        e.counter("log_served_bytes_total", "Stream log bytes sent to agents.", &[], self.log_bytes_served_total as f64);
        e.counter("attaches_total", "One-sided attaches (reads then bypass the relay), by transport.", &[("transport", "shm")], self.shm_attaches_total as f64);
        e.counter("attaches_total", "", &[("transport", "ucx")], self.ucx_attaches_total as f64);
        e.counter("errors_total", "Connections closed on an error, by kind.", &[("kind", "auth")], self.errors_auth_total as f64);
        e.counter("errors_total", "", &[("kind", "protocol")], self.errors_protocol_total as f64);
        e.counter("errors_total", "", &[("kind", "io")], self.errors_io_total as f64);
        e.counter("errors_total", "", &[("kind", "capture")], self.capture_failures_total as f64);
        e.gauge("resident_memory_bytes", "The relay's resident memory.", &[], self.rss_bytes as f64);
        e.finish()
    }
}

/// Take the status of `shared` now.
pub(crate) fn status(shared: &crate::Shared, listen: std::net::SocketAddr) -> Status {
    let s = &shared.stats;
    let current = shared.lock_current().as_ref().map(|g| g.id());
    let mut generations: Vec<GenerationStatus> = shared
        .held()
        .iter()
        .map(|g| {
            let (d, _) = g.descriptor(usize::MAX);
            let (blocks, blocks_total) = g.blocks();
            GenerationStatus {
                id: d.generation,
                state: format!("{:?}", d.state).to_lowercase(),
                current: Some(d.generation) == current,
                replid: d.replid,
                offset: d.offset,
                rdb_bytes: d.published,
                rdb_length: d.length,
                blocks,
                blocks_total,
                log_bytes: g.log_len() as u64,
                age_secs: g.age().as_secs_f64(),
                agents: shared.swarms.members(d.generation) as u64,
                error: d.error,
            }
        })
        .collect();
    generations.sort_by_key(|g| g.id);
    let failure = shared.capture_failures().1;
    Status {
        version: env!("CARGO_PKG_VERSION").into(),
        listen: listen.to_string(),
        ucx_listeners: shared.ucx_listeners().iter().map(|a| a.to_string()).collect(),
        master: shared.master(),
        source_policy: shared.config.source.to_string(),
        source: s.source(),
        capture_policy: shared.config.capture.to_string(),
        uptime_secs: s.uptime_secs(),
        captures_total: get(&s.captures),
        capture_failures_total: get(&s.capture_failures),
        last_capture_error: (!failure.is_empty()).then_some(failure),
        sealed_total: get(&s.sealed),
        released_idle_total: get(&s.released_idle),
        source_silent_secs: s.source_silent_secs(),
        source_bytes_total: get(&s.source_bytes),
        held_bytes: generations.iter().map(|g| g.rdb_bytes).sum(),
        generations,
        connections: shared.connections.load(Ordering::SeqCst) as u64,
        connections_max: shared.config.connections_max as u64,
        refused_over_limit_total: get(&s.refused_over_limit),
        agents_attached: get(&s.agents_attached),
        agents_attached_total: get(&s.agents_attached_total),
        tcp_block_bytes_total: get(&s.tcp_block_bytes),
        log_bytes_served_total: get(&s.log_bytes_served),
        shm_attaches_total: get(&s.shm_attaches),
        ucx_attaches_total: get(&s.ucx_attaches),
        errors_auth_total: get(&s.errors_auth),
        errors_protocol_total: get(&s.errors_protocol),
        errors_io_total: get(&s.errors_io),
        rss_bytes: rss_bytes(),
    }
}

/// Resident memory from /proc/self/statm (0 where there is none).
fn rss_bytes() -> u64 {
    let pages = std::fs::read_to_string("/proc/self/statm").ok().and_then(|s| s.split_whitespace().nth(1).and_then(|p| p.parse::<u64>().ok())).unwrap_or(0);
    // SAFETY: sysconf has no preconditions; it only reads a system constant.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    pages * u64::try_from(page).unwrap_or(4096)
}
