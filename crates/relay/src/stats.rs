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
use transport::wire::JoinOutcome;
use transport::TransportKind;

/// What a connection ended on when it ended badly: the `kind` of `errors_total` (beside `capture`,
/// the failed captures, counted by [`Stats::capture_failures`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::VariantArray, strum::IntoStaticStr)]
#[strum(serialize_all = "snake_case")]
pub(crate) enum ErrorKind {
    /// A wrong token or a failed proof.
    Auth,
    /// Bytes that are not our protocol, or a request out of bounds.
    Protocol,
    /// The socket failed or the peer went away mid-request.
    Io,
}

impl ErrorKind {
    const ALL: &'static [ErrorKind] = <ErrorKind as strum::VariantArray>::VARIANTS;
}

/// Counters, bumped where things happen.
pub(crate) struct Stats {
    started: Instant,
    pub captures: AtomicU64,
    /// Captures from the master itself that it answered with FULLRESYNC (one `sync_full` each).
    pub master_full_syncs: AtomicU64,
    pub capture_failures: AtomicU64,
    /// Generations failed by their store's files (a read error, a truncation).
    pub store_faults: AtomicU64,
    pub sealed: AtomicU64,
    /// Seals by reason, indexed by `SealReason::index`.
    pub sealed_by: [AtomicU64; crate::generations::SealReason::ALL.len()],
    pub released_idle: AtomicU64,
    pub agents_attached: AtomicU64,
    pub agents_attached_total: AtomicU64,
    /// Snapshot bytes the relay's CPU sent, by transport (only [`SERVED_OVER`] count).
    served_bytes: ByTransport,
    pub log_bytes_served: AtomicU64,
    /// One-sided attaches, by transport (only [`ATTACHED_OVER`] count).
    attaches: ByTransport,
    /// Connections closed on an error, by kind (indexed by `ErrorKind::index`).
    errors: [AtomicU64; ErrorKind::ALL.len()],
    /// Bytes received from the capture source (RDB and stream).
    pub source_bytes: AtomicU64,
    /// When the source last sent anything (ms since `started`); 0 = never.
    pub source_io_ms: AtomicU64,
    source: Mutex<String>,
    /// Joins their agents said ended, by outcome (indexed by `JoinOutcome::index`).
    joins: [AtomicU64; JoinOutcome::ALL.len()],
}

impl Stats {
    pub fn new() -> Stats {
        Stats {
            started: Instant::now(),
            captures: AtomicU64::new(0),
            master_full_syncs: AtomicU64::new(0),
            capture_failures: AtomicU64::new(0),
            store_faults: AtomicU64::new(0),
            sealed: AtomicU64::new(0),
            sealed_by: Default::default(),
            released_idle: AtomicU64::new(0),
            agents_attached: AtomicU64::new(0),
            agents_attached_total: AtomicU64::new(0),
            served_bytes: ByTransport::default(),
            log_bytes_served: AtomicU64::new(0),
            attaches: ByTransport::default(),
            errors: Default::default(),
            source_bytes: AtomicU64::new(0),
            source_io_ms: AtomicU64::new(0),
            source: Mutex::new(String::new()),
            joins: Default::default(),
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

    /// The relay's CPU sent `n` snapshot bytes over `kind`.
    pub fn served(&self, kind: TransportKind, n: u64) {
        debug_assert!(SERVED_OVER.contains(&kind), "{kind} bytes are not counted where the status shows them");
        Stats::add(self.served_bytes.of(kind), n);
    }

    /// An agent attached over the one-sided `kind` (its reads then bypass the relay).
    pub fn attached(&self, kind: TransportKind) {
        debug_assert!(ATTACHED_OVER.contains(&kind), "{kind} attaches are not counted where the status shows them");
        Stats::add(self.attaches.of(kind), 1);
    }

    /// Snapshot bytes sent over each transport that passes through the relay's CPU, by name.
    pub fn served_by_transport(&self) -> std::collections::BTreeMap<String, u64> {
        SERVED_OVER.iter().map(|k| (k.name().to_string(), get(self.served_bytes.of(*k)))).collect()
    }

    /// Attaches over each one-sided transport, by name.
    pub fn attaches_by_transport(&self) -> std::collections::BTreeMap<String, u64> {
        ATTACHED_OVER.iter().map(|k| (k.name().to_string(), get(self.attaches.of(*k)))).collect()
    }

    /// An agent said its join ended with `outcome`.
    pub fn join_ended(&self, outcome: JoinOutcome) {
        Stats::add(&self.joins[outcome.index()], 1);
    }

    /// Joins ended, by outcome name: every outcome, 0 included.
    pub fn joins_by_outcome(&self) -> std::collections::BTreeMap<String, u64> {
        JoinOutcome::ALL.iter().map(|o| (o.name().to_string(), get(&self.joins[o.index()]))).collect()
    }

    /// A connection closed on an error of `kind`.
    pub fn error(&self, kind: ErrorKind) {
        Stats::add(&self.errors[kind as usize], 1);
    }

    /// `errors_total` by kind name, the failed captures as `capture`.
    pub fn errors_by_kind(&self) -> std::collections::BTreeMap<String, u64> {
        let get = |a: &AtomicU64| a.load(std::sync::atomic::Ordering::Relaxed);
        let by_kind = ErrorKind::ALL.iter().map(|&k| (<&str>::from(k).to_string(), get(&self.errors[k as usize])));
        by_kind.chain([("capture".to_string(), get(&self.capture_failures))]).collect()
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

pub(crate) fn get(c: &AtomicU64) -> u64 {
    c.load(Ordering::Relaxed)
}

/// The transports whose reads pass through the relay's CPU, the keys of `served_bytes_total`: TCP
/// range reads (`sendfile`).
pub const SERVED_OVER: [TransportKind; 1] = [TransportKind::Tcp];
/// The one-sided transports, the keys of `attaches_total`: their reads never reach the relay.
pub const ATTACHED_OVER: [TransportKind; 2] = [TransportKind::Shm, TransportKind::Ucx];

/// One counter per transport.
#[derive(Default)]
struct ByTransport([AtomicU64; TransportKind::ALL.len()]);

impl ByTransport {
    fn of(&self, kind: TransportKind) -> &AtomicU64 {
        let i = TransportKind::ALL.iter().position(|k| *k == kind).expect("every kind is in TransportKind::ALL");
        &self.0[i]
    }
}

/// Snapshot bytes a status says the relay's CPU sent over `kind` (0 for a transport it does not count).
pub fn served_bytes(st: &Status, kind: TransportKind) -> u64 {
    st.served_bytes_total.get(kind.name()).copied().unwrap_or(0)
}

/// One-sided attaches a status counts over `kind` (0 for a transport it does not count).
pub fn attaches(st: &Status, kind: TransportKind) -> u64 {
    st.attaches_total.get(kind.name()).copied().unwrap_or(0)
}

/// The status is a wire message (the answer on a status connection); the relay fills it here.
pub use transport::wire::status::{GenerationStatus, RelayStatus as Status};

/// Prometheus text exposition of a status, metric names `fastrepl_relay_*`.
pub fn prometheus(st: &Status) -> String {
    let mut e = metrics::Exposition::new("fastrepl_relay");
    let info = [("version", st.version.as_str()), ("master", &st.master), ("source", &st.source), ("source_policy", &st.source_policy), ("capture_policy", &st.capture_policy)];
    e.gauge("info", "The relay: version, master, source, policies (value 1).", &info, 1.0);
    e.gauge("uptime_seconds", "Seconds since the relay started.", &[], st.uptime_seconds);
    e.counter("captures_total", "Captures started (each one fork on its source).", &[], st.captures_total as f64);
    e.counter("capture_failures_total", "Captures that failed.", &[], st.capture_failures_total as f64);
    e.counter("master_full_syncs_total", "Full syncs the relay's captures cost the master itself (a capture from it answered FULLRESYNC).", &[], st.master_full_syncs_total as f64);
    e.counter("generations_sealed_total", "Generations sealed.", &[], st.generations_sealed_total as f64);
    for (reason, n) in &st.generations_sealed_by_reason_total {
        e.counter("generations_sealed_by_reason_total", "Generations sealed, by reason.", &[("reason", reason.as_str())], *n as f64);
    }
    e.counter("generations_released_idle_total", "Generations released after --idle-release-secs without agents.", &[], st.generations_released_idle_total as f64);
    e.gauge("source_last_io_seconds", "Seconds since the capture source last sent anything (-1: never).", &[], st.source_last_io_seconds.unwrap_or(-1.0));
    e.counter("source_bytes_total", "Bytes received from capture sources.", &[], st.source_bytes_total as f64);
    e.gauge("generations", "Generations held in memory.", &[], st.generations.len() as f64);
    e.gauge("held_bytes", "Snapshot bytes held, all generations, as kept (compressed where that paid).", &[], st.held_bytes as f64);
    for g in &st.generations {
        let id = g.id.to_string();
        let l = [("generation", id.as_str()), ("state", g.state.as_str()), ("current", if g.current { "1" } else { "0" })];
        e.gauge("generation_rdb_bytes", "RDB bytes held by a generation.", &l, g.rdb_bytes as f64);
        e.gauge("generation_rdb_stored_bytes", "The bytes a generation's RDB is kept and sent as (compressed where that paid).", &l, g.rdb_stored_bytes as f64);
        e.gauge("generation_blocks", "Blocks published by a generation.", &l, g.blocks as f64);
        e.gauge("generation_log_bytes", "Stream log bytes held after a generation's snapshot.", &l, g.log_bytes as f64);
        e.gauge("generation_age_seconds", "Seconds since a generation's capture started.", &l, g.age_seconds);
        e.gauge("generation_agents", "Agents in a generation's swarm.", &l, g.agents as f64);
    }
    e.gauge("connections", "Agent connections open.", &[], st.connections as f64);
    e.gauge("connections_max", "--connections-max.", &[], st.connections_max as f64);
    e.counter("connections_refused_total", "Connections refused at --connections-max (authenticated ones).", &[], st.connections_refused_total as f64);
    e.gauge("connections_unauthenticated", "Connections that have not authenticated yet (a budget of their own).", &[], st.connections_unauthenticated as f64);
    labelled(&mut e, "connections_refused_by_kind_total", "Connections closed before they were served, by kind.", "kind", &st.connections_refused_by_kind_total);
    e.gauge("agents_attached", "Agents attached to a generation now.", &[], st.agents_attached as f64);
    e.counter("agents_attached_total", "Agents attached since the start.", &[], st.agents_attached_total as f64);
    // The labelled counters come from the status's maps, so a key there is a label value here.
    labelled(&mut e, "served_bytes_total", "Snapshot bytes sent by the relay's CPU, by transport.", "transport", &st.served_bytes_total);
    e.counter("log_served_bytes_total", "Stream log bytes sent to agents.", &[], st.log_served_bytes_total as f64);
    labelled(&mut e, "attaches_total", "One-sided attaches (reads then bypass the relay), by transport.", "transport", &st.attaches_total);
    e.counter("ucx_side_restarts_total", "Times the UCX side process was started again after it died or failed.", &[], st.ucx_side_restarts_total as f64);
    labelled(&mut e, "errors_total", "Connections closed on an error, by kind; capture: failed captures.", "kind", &st.errors_total);
    e.gauge("resident_memory_bytes", "The relay's resident memory.", &[], st.resident_memory_bytes as f64);
    e.gauge("memory_unreclaimable_bytes", "The relay's memory the kernel cannot take back (anonymous and memfd pages; not a store's page cache).", &[], st.memory_unreclaimable_bytes as f64);
    e.gauge(
        "memory_bound_bytes",
        "With --store: the bound its unreclaimable memory stays under for the connections open (-1: in memory, no such bound).",
        &[],
        st.memory_bound_bytes.map_or(-1.0, |b| b as f64),
    );
    e.gauge("store_bytes", "Bytes the generations held take on the store's disk (0 in memory).", &[], st.store_bytes as f64);
    e.counter("store_faults_total", "Generations failed because their store file failed under them.", &[], st.store_faults_total as f64);
    e.gauge("store_size_bytes", "Size of the filesystem under --store (statvfs; -1: in memory).", &[], st.store_size_bytes.map_or(-1.0, |b| b as f64));
    e.gauge("store_free_bytes", "Bytes of the filesystem under --store available to the relay's user (statvfs f_bavail; -1: in memory).", &[], st.store_free_bytes.map_or(-1.0, |b| b as f64));
    e.gauge("log_max_bytes", "--log-max-bytes: a generation's log seals at it (compare generation_log_bytes).", &[], st.log_max_bytes as f64);
    e.gauge("snapshot_max_bytes", "--snapshot-max-bytes: a larger snapshot is refused.", &[], st.snapshot_max_bytes as f64);
    labelled(&mut e, "joins_total", "Joins their agents reported as they ended, by outcome: in_sync, full_sync, failed.", "outcome", &st.joins_total);
    e.finish()
}

/// One counter per key of `values`, labelled `label`=key; the help goes with the first only.
fn labelled(e: &mut metrics::Exposition, name: &str, help: &str, label: &str, values: &std::collections::BTreeMap<String, u64>) {
    for (i, (key, n)) in values.iter().enumerate() {
        e.counter(name, if i == 0 { help } else { "" }, &[(label, key.as_str())], *n as f64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A status with every map filled, so each labelled counter is written.
    fn sample() -> Status {
        let g = GenerationStatus {
            id: 1,
            state: "complete".into(),
            current: true,
            replid: "r".into(),
            offset: 0,
            rdb_bytes: 1,
            rdb_stored_bytes: 1,
            rdb_length: Some(1),
            rdb_version: Some(11),
            blocks: 1,
            blocks_total: Some(1),
            log_bytes: 0,
            age_seconds: 1.0,
            agents: 0,
            error: Some("e".into()),
        };
        let by = |keys: &[&str]| keys.iter().map(|k| (k.to_string(), 1)).collect();
        Status {
            schema_version: 1,
            ok: true,
            version: "0".into(),
            listen: "l".into(),
            ucx_listeners: vec!["u".into()],
            master: "m".into(),
            source_policy: "master".into(),
            source: "m".into(),
            capture_policy: "on-start".into(),
            uptime_seconds: 1.0,
            captures_total: 1,
            capture_failures_total: 1,
            master_full_syncs_total: 1,
            last_capture_error: Some("e".into()),
            generations_sealed_total: 1,
            generations_sealed_by_reason_total: by(&["idle_release"]),
            generations_released_idle_total: 1,
            source_last_io_seconds: Some(1.0),
            source_bytes_total: 1,
            generations: vec![g],
            held_bytes: 1,
            connections: 1,
            connections_max: 1,
            connections_refused_total: 1,
            connections_unauthenticated: 1,
            connections_refused_by_kind_total: by(&["displaced", "full"]),
            agents_attached: 1,
            agents_attached_total: 1,
            served_bytes_total: by(&["tcp"]),
            log_served_bytes_total: 1,
            attaches_total: by(&["shm", "ucx"]),
            ucx_side_restarts_total: 1,
            errors_total: by(&["auth", "io"]),
            resident_memory_bytes: 1,
            memory_unreclaimable_bytes: 1,
            memory_bound_bytes: Some(1),
            store: Some("/s".into()),
            store_bytes: 1,
            store_faults_total: 1,
            store_size_bytes: Some(2),
            store_free_bytes: Some(1),
            log_max_bytes: 1,
            snapshot_max_bytes: 1,
            joins_total: by(&["in_sync", "full_sync", "failed"]),
        }
    }

    #[test]
    fn every_counted_status_field_is_a_metric_of_the_same_name() {
        let st = sample();
        let text = prometheus(&st);
        let has = |name: &str| text.lines().any(|l| l.strip_prefix(name).is_some_and(|rest| rest.starts_with(['{', ' '])));
        // Fields that describe rather than count: the info gauge's labels, the schema and lists.
        let described = ["schema_version", "ok", "version", "listen", "ucx_listeners", "master", "source_policy", "source", "capture_policy", "last_capture_error", "generations", "store"];
        let json = serde_json::to_value(&st).unwrap();
        for (field, value) in json.as_object().unwrap() {
            if described.contains(&field.as_str()) {
                continue;
            }
            let metric = format!("fastrepl_relay_{field}");
            assert!(has(&metric), "status field {field} has no metric {metric}");
            // A map is a labelled counter: each key is a label value.
            if let Some(map) = value.as_object() {
                for key in map.keys() {
                    assert!(text.lines().any(|l| l.starts_with(&format!("{metric}{{")) && l.contains(&format!("=\"{key}\""))), "{metric} lacks the label {key}");
                }
            }
        }
        assert!(has("fastrepl_relay_generations"), "the generations' count");
        let g = &json["generations"][0];
        for field in ["rdb_bytes", "rdb_stored_bytes", "blocks", "log_bytes", "age_seconds", "agents"] {
            assert!(g.get(field).is_some(), "generation field {field}");
            assert!(has(&format!("fastrepl_relay_generation_{field}")), "generation field {field} has no metric");
        }
    }

    /// The maps' keys are the transports' names, as the status and the metrics' labels always had them.
    #[test]
    fn counters_by_transport_keep_their_names() {
        let s = Stats::new();
        s.served(TransportKind::Tcp, 7);
        s.attached(TransportKind::Ucx);
        s.attached(TransportKind::Ucx);
        assert_eq!(s.served_by_transport(), [("tcp".to_string(), 7)].into());
        assert_eq!(s.attaches_by_transport(), [("shm".to_string(), 0), ("ucx".to_string(), 2)].into());
        let mut st = sample();
        st.served_bytes_total = s.served_by_transport();
        st.attaches_total = s.attaches_by_transport();
        assert_eq!((served_bytes(&st, TransportKind::Tcp), attaches(&st, TransportKind::Shm), attaches(&st, TransportKind::Ucx)), (7, 0, 2));
    }

    /// Every outcome is in the status and the metric, 0 included, each counted under its own name.
    #[test]
    fn joins_are_counted_by_outcome_with_every_outcome_present() {
        let s = Stats::new();
        assert_eq!(s.joins_by_outcome(), [("failed".to_string(), 0), ("full_sync".to_string(), 0), ("in_sync".to_string(), 0)].into());
        s.join_ended(JoinOutcome::InSync);
        s.join_ended(JoinOutcome::InSync);
        s.join_ended(JoinOutcome::Failed);
        let mut st = sample();
        st.joins_total = s.joins_by_outcome();
        assert_eq!(st.joins_total, [("failed".to_string(), 1), ("full_sync".to_string(), 0), ("in_sync".to_string(), 2)].into());
        let text = prometheus(&st);
        for line in ["fastrepl_relay_joins_total{outcome=\"in_sync\"} 2", "fastrepl_relay_joins_total{outcome=\"full_sync\"} 0", "fastrepl_relay_joins_total{outcome=\"failed\"} 1"] {
            assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
        }
    }

    #[test]
    fn a_relay_without_a_store_says_minus_one_for_its_disk_and_null_in_the_status() {
        let mut st = sample();
        (st.store_size_bytes, st.store_free_bytes) = (None, None);
        let text = prometheus(&st);
        assert!(text.lines().any(|l| l == "fastrepl_relay_store_size_bytes -1"));
        assert!(text.lines().any(|l| l == "fastrepl_relay_store_free_bytes -1"));
        let json = serde_json::to_value(&st).unwrap();
        assert!(json["store_size_bytes"].is_null() && json["store_free_bytes"].is_null());
    }

    #[test]
    fn errors_are_counted_by_kind_under_the_names_the_metric_has() {
        let st = Stats::new();
        st.error(ErrorKind::Auth);
        st.error(ErrorKind::Io);
        st.error(ErrorKind::Io);
        let by = st.errors_by_kind();
        assert_eq!(by.into_iter().collect::<Vec<_>>(), [("auth".into(), 1), ("capture".into(), 0), ("io".into(), 2), ("protocol".into(), 0)]);
    }

    #[test]
    fn a_source_never_heard_is_minus_one_in_the_metric_and_null_in_the_status() {
        let mut st = sample();
        st.source_last_io_seconds = None;
        assert!(prometheus(&st).lines().any(|l| l == "fastrepl_relay_source_last_io_seconds -1"));
        assert!(serde_json::to_value(&st).unwrap()["source_last_io_seconds"].is_null());
    }
}
