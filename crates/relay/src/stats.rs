//! What a running relay holds and has done: counters the capture and serving threads bump, and
//! [`Status`], the one picture of them that `fastrepl status` prints and `--metrics` exposes.
//!
//! Counters are monotonic (`_total`); everything else is read at the moment the status is taken.
//! Reads over one-sided transports (shm, ucx) never reach the relay's CPU — that is their point — so
//! the relay counts their attaches, not their bytes; the agents' reports count those bytes.

use crate::generations::SealReason;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

/// Counters, bumped where things happen.
pub(crate) struct Stats {
    started: Instant,
    pub captures: AtomicU64,
    pub capture_failures: AtomicU64,
    pub sealed: AtomicU64,
    /// Seals by reason, indexed by `SealReason::index`.
    pub sealed_by: [AtomicU64; 4],
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
            sealed_by: Default::default(),
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

    /// A generation was sealed (each one once).
    pub fn sealed(&self, reason: SealReason) {
        Stats::add(&self.sealed, 1);
        Stats::add(&self.sealed_by[reason.index()], 1);
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

/// The status is a wire message (the answer on a status connection); the relay fills it here.
pub use transport::wire::status::{GenerationStatus, RelayStatus as Status};

/// Prometheus text exposition of a status, metric names `fastrepl_relay_*`.
pub fn prometheus(st: &Status) -> String {
    let mut e = metrics::Exposition::new("fastrepl_relay");
    let info = [("version", st.version.as_str()), ("master", &st.master), ("source", &st.source), ("source_policy", &st.source_policy), ("capture_policy", &st.capture_policy)];
    e.gauge("info", "The relay: version, master, source, policies (value 1).", &info, 1.0);
    e.gauge("uptime_seconds", "Seconds since the relay started.", &[], st.uptime_secs);
    e.counter("captures_total", "Captures started (each one fork on its source).", &[], st.captures_total as f64);
    e.counter("capture_failures_total", "Captures that failed.", &[], st.capture_failures_total as f64);
    e.counter("generations_sealed_total", "Generations sealed.", &[], st.sealed_total as f64);
    for (reason, n) in &st.sealed_by_reason {
        e.counter("generations_sealed_by_reason_total", "Generations sealed, by reason.", &[("reason", reason.as_str())], *n as f64);
    }
    e.counter("generations_released_idle_total", "Generations released after --idle-release-secs without agents.", &[], st.released_idle_total as f64);
    e.gauge("source_last_io_seconds", "Seconds since the capture source last sent anything (-1: never).", &[], st.source_silent_secs.unwrap_or(-1.0));
    e.counter("source_bytes_total", "Bytes received from capture sources.", &[], st.source_bytes_total as f64);
    e.gauge("generations", "Generations held in memory.", &[], st.generations.len() as f64);
    e.gauge("held_bytes", "Snapshot bytes held in memory, all generations.", &[], st.held_bytes as f64);
    for g in &st.generations {
        let id = g.id.to_string();
        let l = [("generation", id.as_str()), ("state", g.state.as_str()), ("current", if g.current { "1" } else { "0" })];
        e.gauge("generation_rdb_bytes", "RDB bytes held by a generation.", &l, g.rdb_bytes as f64);
        e.gauge("generation_blocks", "Blocks published by a generation.", &l, g.blocks as f64);
        e.gauge("generation_log_bytes", "Stream log bytes held after a generation's snapshot.", &l, g.log_bytes as f64);
        e.gauge("generation_age_seconds", "Seconds since a generation's capture started.", &l, g.age_secs);
        e.gauge("generation_agents", "Agents in a generation's swarm.", &l, g.agents as f64);
    }
    e.gauge("connections", "Agent connections open.", &[], st.connections as f64);
    e.gauge("connections_max", "--connections-max.", &[], st.connections_max as f64);
    e.counter("connections_refused_total", "Connections closed at once at --connections-max.", &[], st.refused_over_limit_total as f64);
    e.gauge("agents_attached", "Agents attached to a generation now.", &[], st.agents_attached as f64);
    e.counter("agents_attached_total", "Agents attached since the start.", &[], st.agents_attached_total as f64);
    e.counter("served_bytes_total", "Snapshot bytes sent by the relay's CPU, by transport.", &[("transport", "tcp")], st.tcp_block_bytes_total as f64);
    e.counter("log_served_bytes_total", "Stream log bytes sent to agents.", &[], st.log_bytes_served_total as f64);
    e.counter("attaches_total", "One-sided attaches (reads then bypass the relay), by transport.", &[("transport", "shm")], st.shm_attaches_total as f64);
    e.counter("attaches_total", "", &[("transport", "ucx")], st.ucx_attaches_total as f64);
    e.counter("errors_total", "Connections closed on an error, by kind.", &[("kind", "auth")], st.errors_auth_total as f64);
    e.counter("errors_total", "", &[("kind", "protocol")], st.errors_protocol_total as f64);
    e.counter("errors_total", "", &[("kind", "io")], st.errors_io_total as f64);
    e.counter("errors_total", "", &[("kind", "capture")], st.capture_failures_total as f64);
    e.gauge("resident_memory_bytes", "The relay's resident memory.", &[], st.rss_bytes as f64);
    e.finish()
}

/// Take the status of `shared` now.
pub(crate) fn status(shared: &crate::Shared, listen: std::net::SocketAddr) -> Status {
    let s = &shared.stats;
    let current = shared.current_id();
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
    let last_capture_error = shared.capture_failures().1.map(|f| f.why);
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
        last_capture_error,
        sealed_total: get(&s.sealed),
        sealed_by_reason: SealReason::ALL.iter().map(|r| (r.name().to_string(), get(&s.sealed_by[r.index()]))).collect(),
        released_idle_total: get(&s.released_idle),
        source_silent_secs: s.source_silent_secs(),
        source_bytes_total: get(&s.source_bytes),
        held_bytes: generations.iter().map(|g| g.rdb_bytes).sum(),
        generations,
        connections: shared.connections() as u64,
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
