//! The answer on a status connection: what a relay holds and has done, as the relay fills it
//! (`relay::stats`) and `fastrepl status` prints it. The JSON field names are those `fastrepl status
//! --json` has always printed.

use serde::{Deserialize, Serialize};

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
pub struct RelayStatus {
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
    /// The same by reason: log_bound, link_lost, master_changed, idle_release.
    #[serde(default)]
    pub sealed_by_reason: std::collections::BTreeMap<String, u64>,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{recv_control, send_control, Control};

    #[test]
    fn a_status_travels_whole_and_keeps_its_json_field_names() {
        let g = GenerationStatus {
            id: 2,
            state: "complete".into(),
            current: true,
            replid: "r".into(),
            offset: 7,
            rdb_bytes: 10,
            rdb_length: Some(10),
            blocks: 1,
            blocks_total: Some(1),
            log_bytes: 0,
            age_secs: 1.5,
            agents: 0,
            error: None,
        };
        let st = RelayStatus {
            version: "0".into(),
            listen: "127.0.0.1:1".into(),
            ucx_listeners: Vec::new(),
            master: "m:1".into(),
            source_policy: "master".into(),
            source: "m:1".into(),
            capture_policy: "on-start".into(),
            uptime_secs: 1.0,
            captures_total: 1,
            capture_failures_total: 0,
            last_capture_error: None,
            sealed_total: 0,
            sealed_by_reason: Default::default(),
            released_idle_total: 0,
            source_silent_secs: None,
            source_bytes_total: 10,
            generations: vec![g],
            held_bytes: 10,
            connections: 1,
            connections_max: 256,
            refused_over_limit_total: 0,
            agents_attached: 0,
            agents_attached_total: 0,
            tcp_block_bytes_total: 3,
            log_bytes_served_total: 0,
            shm_attaches_total: 0,
            ucx_attaches_total: 0,
            errors_auth_total: 0,
            errors_protocol_total: 0,
            errors_io_total: 0,
            rss_bytes: 0,
        };
        let mut buf = Vec::new();
        send_control(&mut buf, &Control::Status(Box::new(st.clone()))).unwrap();
        let Control::Status(got) = recv_control(&mut &buf[..]).unwrap() else { panic!("not a status") };
        assert_eq!(*got, st);
        let json = serde_json::to_value(&st).unwrap();
        assert_eq!(json["tcp_block_bytes_total"], 3);
        assert_eq!(json["generations"][0]["state"], "complete");
    }
}
