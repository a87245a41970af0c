//! The answer on a status connection: what a relay holds and has done, as the relay fills it
//! (`relay::stats`) and `fastrepl status` prints it. The field names are the relay's metric names
//! without the `fastrepl_relay_` prefix, in the metric's unit; a metric with a label is a map keyed by
//! the label's value (`attaches_total: {"shm": 3, "ucx": 0}`). `relay::stats` tests that every field
//! here has its metric, so the two cannot drift. `fastrepl status --json` prints this object as
//! schema version [`STATUS_SCHEMA_VERSION`].

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The version of the `status --json` object; raised when a field is renamed, removed or changes
/// meaning (adding one does not).
pub const STATUS_SCHEMA_VERSION: u32 = 1;

fn status_schema_version() -> u32 {
    STATUS_SCHEMA_VERSION
}

fn yes() -> bool {
    true
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
    /// The bytes they are kept in (memory or store) and sent as: compressed where that paid.
    #[serde(default)]
    pub rdb_stored_bytes: u64,
    /// The RDB's length once known.
    pub rdb_length: Option<u64>,
    /// The RDB's format version (from its header) once known: which servers can load it.
    #[serde(default)]
    pub rdb_version: Option<u32>,
    /// Blocks published, and the total once known.
    pub blocks: u64,
    /// Total blocks once the length is known.
    pub blocks_total: Option<u64>,
    /// Stream log bytes held after the snapshot.
    pub log_bytes: u64,
    /// Seconds since the capture started.
    pub age_seconds: f64,
    /// Agents in its swarm now.
    pub agents: u64,
    /// Why it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Everything `fastrepl status` prints and `--metrics` exposes.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RelayStatus {
    /// [`STATUS_SCHEMA_VERSION`] for the JSON's readers.
    #[serde(default = "status_schema_version")]
    pub schema_version: u32,
    /// Always true: the status was read (a failure prints `ok: false` and an error instead).
    #[serde(default = "yes")]
    pub ok: bool,
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
    pub uptime_seconds: f64,
    /// Captures started (each is one fork on its source).
    pub captures_total: u64,
    /// Captures that failed.
    pub capture_failures_total: u64,
    /// Full syncs the relay's own captures cost the master itself (captures from the master that it
    /// answered with FULLRESYNC): what its `sync_full` counts of ours.
    #[serde(default)]
    pub master_full_syncs_total: u64,
    /// The last capture failure, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_capture_error: Option<String>,
    /// Generations sealed (log bound, link lost, source changed, idle release).
    pub generations_sealed_total: u64,
    /// The same by reason: log_bound, link_lost, master_changed, idle_release, stale, log_outweighs_snapshot.
    #[serde(default)]
    pub generations_sealed_by_reason_total: BTreeMap<String, u64>,
    /// Generations whose memory was released after `--idle-release-secs` without agents.
    pub generations_released_idle_total: u64,
    /// Seconds since the source last sent anything (the link's silence; `None` before any capture,
    /// where the metric says -1).
    pub source_last_io_seconds: Option<f64>,
    /// Bytes received from capture sources.
    pub source_bytes_total: u64,
    /// Generations held in memory (the current one and sealed ones agents still use); the metric
    /// `generations` is their count.
    pub generations: Vec<GenerationStatus>,
    /// Bytes of snapshot held (every generation's RDB as it is kept: compressed where that paid).
    pub held_bytes: u64,
    /// Connections open now.
    pub connections: u64,
    /// `--connections-max`.
    pub connections_max: u64,
    /// Connections refused because the relay was at its limit (`--connections-max` authenticated
    /// ones): the `full` of `connections_refused_by_kind_total`.
    pub connections_refused_total: u64,
    /// Connections held now that have not authenticated yet (in a budget of their own, apart from
    /// `--connections-max`).
    #[serde(default)]
    pub connections_unauthenticated: u64,
    /// Connections closed before they were served, by kind: displaced, source_cap, deadline, full,
    /// closed, protocol, auth (docs/operations.md).
    #[serde(default)]
    pub connections_refused_by_kind_total: BTreeMap<String, u64>,
    /// Agents attached to a generation now (their control connections).
    pub agents_attached: u64,
    /// Agents attached since the start.
    pub agents_attached_total: u64,
    /// Snapshot bytes sent by the relay's CPU, by transport (tcp: block reads).
    pub served_bytes_total: BTreeMap<String, u64>,
    /// Stream log bytes sent (always over tcp).
    pub log_served_bytes_total: u64,
    /// One-sided attaches by transport (shm: a mapping handed out; ucx: remote keys handed out); the
    /// agent then reads without the relay's CPU. One agent may attach more than once.
    pub attaches_total: BTreeMap<String, u64>,
    /// Times the relay started its UCX side process again after it died or failed (0 without ucx).
    #[serde(default)]
    pub ucx_side_restarts_total: u64,
    /// Connections closed on an error, by kind: auth, protocol, io; and capture (the same count as
    /// `capture_failures_total`).
    pub errors_total: BTreeMap<String, u64>,
    /// The relay's resident memory, bytes (Linux).
    pub resident_memory_bytes: u64,
    /// The relay's memory the kernel cannot take back, bytes: its anonymous resident pages (`RssAnon`)
    /// and its generations' memfd pages (shmem, mapped or not); a store's page cache is not in it.
    #[serde(default)]
    pub memory_unreclaimable_bytes: u64,
    /// With `--store`: the bound the relay's unreclaimable memory stays under, for the connections
    /// open now (it does not grow with the snapshot; docs/operations.md says how it is made up).
    /// `None` in memory, where a snapshot's bytes are the relay's memory.
    #[serde(default)]
    pub memory_bound_bytes: Option<u64>,
    /// `--store`'s directory; `None` in memory.
    #[serde(default)]
    pub store: Option<String>,
    /// Bytes the generations held take on the store's disk (allocated: sparse files count what was
    /// written); 0 in memory.
    #[serde(default)]
    pub store_bytes: u64,
    /// Generations failed because their store file failed under them (a read error, a truncation).
    #[serde(default)]
    pub store_faults_total: u64,
    /// With `--store`: the size of the filesystem it is on (statvfs); `None` in memory (the metric
    /// says -1).
    #[serde(default)]
    pub store_size_bytes: Option<u64>,
    /// With `--store`: the bytes of that filesystem available to the relay's user (statvfs
    /// `f_bavail`, the reserve for root left out); `None` in memory (the metric says -1).
    #[serde(default)]
    pub store_free_bytes: Option<u64>,
    /// `--log-max-bytes`: a generation's log is sealed at it.
    #[serde(default)]
    pub log_max_bytes: u64,
    /// `--snapshot-max-bytes`: a larger snapshot is refused.
    #[serde(default)]
    pub snapshot_max_bytes: u64,
    /// Joins their agents reported as they ended, by outcome: `in_sync`, `full_sync`, `failed`
    /// (every outcome present, 0 included).
    #[serde(default)]
    pub joins_total: BTreeMap<String, u64>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{recv_control, send_control, Control};

    #[test]
    fn a_status_travels_whole_and_keeps_its_json_field_names_and_version() {
        let g = GenerationStatus {
            id: 2,
            state: "complete".into(),
            current: true,
            replid: "r".into(),
            offset: 7,
            rdb_bytes: 10,
            rdb_stored_bytes: 10,
            rdb_length: Some(10),
            rdb_version: Some(11),
            blocks: 1,
            blocks_total: Some(1),
            log_bytes: 0,
            age_seconds: 1.5,
            agents: 0,
            error: None,
        };
        let st = RelayStatus {
            schema_version: STATUS_SCHEMA_VERSION,
            ok: true,
            version: "0".into(),
            listen: "127.0.0.1:1".into(),
            ucx_listeners: Vec::new(),
            master: "m:1".into(),
            source_policy: "master".into(),
            source: "m:1".into(),
            capture_policy: "on-start".into(),
            uptime_seconds: 1.0,
            captures_total: 1,
            capture_failures_total: 0,
            master_full_syncs_total: 0,
            last_capture_error: None,
            generations_sealed_total: 0,
            generations_sealed_by_reason_total: Default::default(),
            generations_released_idle_total: 0,
            source_last_io_seconds: None,
            source_bytes_total: 10,
            generations: vec![g],
            held_bytes: 10,
            connections: 1,
            connections_max: 256,
            connections_refused_total: 0,
            connections_unauthenticated: 0,
            connections_refused_by_kind_total: Default::default(),
            agents_attached: 0,
            agents_attached_total: 0,
            served_bytes_total: [("tcp".to_string(), 3)].into(),
            log_served_bytes_total: 0,
            attaches_total: [("shm".to_string(), 0), ("ucx".to_string(), 0)].into(),
            ucx_side_restarts_total: 0,
            errors_total: Default::default(),
            resident_memory_bytes: 0,
            memory_unreclaimable_bytes: 0,
            memory_bound_bytes: None,
            store: None,
            store_bytes: 0,
            store_faults_total: 0,
            store_size_bytes: Some(1 << 30),
            store_free_bytes: Some(1 << 29),
            log_max_bytes: 1 << 20,
            snapshot_max_bytes: 1 << 40,
            joins_total: [("in_sync".to_string(), 1), ("full_sync".to_string(), 0), ("failed".to_string(), 0)].into(),
        };
        let mut buf = Vec::new();
        send_control(&mut buf, &Control::Status(Box::new(st.clone()))).unwrap();
        let Control::Status(got) = recv_control(&mut &buf[..]).unwrap() else { panic!("not a status") };
        assert_eq!(*got, st);
        let json = serde_json::to_value(&st).unwrap();
        assert_eq!(json["served_bytes_total"]["tcp"], 3);
        assert_eq!((json["schema_version"].as_u64(), json["ok"].as_bool()), (Some(1), Some(true)));
        assert_eq!(json["generations"][0]["state"], "complete");
    }
}
