//! What `fastrepl stage` does at a server's start, decided from what is on its volume and what the
//! master (or the cluster) says — apart from any file, socket or clock, so that every case an init
//! step meets is a unit test.
//!
//! An init container runs at *every* start of its pod, not only the first, so staging must be right
//! each time:
//! - an empty volume is staged (the first start);
//! - a server's own RDB — written at its last shutdown with its replication ID and offset in the aux
//!   fields — whose offset the master's backlog still holds, with room for the restart and the load,
//!   is kept: the server resumes by itself with a partial resync, and pulling a snapshot would only
//!   cost time (a rolling restart);
//! - a cluster node whose config says it is a master serving slots is kept whole (a node promoted
//!   by a failover): staging it would demote a shard's master;
//! - a cluster replica follows its shard's *current* master, found in the cluster's table (the master
//!   its config names, or the node that took its slots over), not an address fixed in a manifest;
//! - anything else that is stale is staged again; the old RDB stays until the new one replaces it in
//!   one rename.
//!
//! The RDB version check (can the server in the pod load the relay's snapshot?) is made once the
//! relay is attached and before any byte is pulled: [`replication::rdb::Server::loads`].

use crate::staged::cluster::Node;
use crate::staged::staging::{self, Backlog, Freshness};

/// The server's RDB file, as found on the volume.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RdbOnVolume {
    /// No file.
    Absent,
    /// A file whose head is not an RDB's (its error), or that could not be read.
    Unreadable(String),
    /// An RDB.
    Present {
        /// Its size.
        bytes: u64,
        /// The history it continues (`repl-id`, `repl-offset` aux fields), when it says.
        history: Option<(String, u64)>,
    },
}

/// The cluster node's config file, as found on the volume (only for a cluster node).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeOnVolume {
    /// No file: a node that never ran.
    Absent,
    /// The node's own line: its id, role, slots and master.
    Parsed(Node),
}

/// The master a replica is to follow, as its `INFO replication` describes it.
#[derive(Debug, Clone, PartialEq)]
pub struct MasterView {
    /// `master_replid`.
    pub replid: String,
    /// `master_replid2`: the history before its last promotion.
    pub replid2: String,
    /// `second_repl_offset`: the last offset of `replid2` it accepts (`None`: -1, no second history).
    pub second_offset: Option<u64>,
    /// Its backlog.
    pub backlog: Backlog,
    /// Bytes per second it writes (0: idle, or not measured).
    pub write_rate: f64,
}

/// Why a start keeps what the volume holds.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(tag = "reason", rename_all = "snake_case")]
pub enum Keep {
    /// The server's config names no master (no `replicaof`): it starts as a primary, and there is
    /// nothing to stage (`stage --master-from-server-config`: pod 0 of the official Valkey chart).
    Primary {
        /// The config that said so.
        config: std::path::PathBuf,
    },
    /// A cluster node whose config says it is a master serving slots (promoted by a failover).
    ServesSlots {
        /// How many.
        slots: u32,
    },
    /// The server's own RDB continues the master's history inside its backlog: it resumes with a
    /// partial resync by itself.
    ResumesPartially {
        /// The RDB's replication ID.
        replid: String,
        /// Its offset.
        offset: u64,
        /// Bytes the master can still write before that offset leaves its backlog.
        headroom_bytes: u64,
        /// The same in seconds at its write rate (`None`: it writes nothing).
        headroom_secs: Option<f64>,
    },
}

/// Why a start stages the relay's snapshot.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(tag = "reason", rename_all = "snake_case")]
pub enum Stage {
    /// No RDB on the volume: a first start.
    Empty,
    /// The RDB cannot be read as one (kept until the staged one replaces it).
    Unreadable {
        /// What is wrong with it.
        error: String,
    },
    /// The RDB has no replication ID and offset (not written by a replica or for replication): the
    /// server would start a history of its own and need a full sync.
    NoHistory,
    /// The RDB continues another history than the master's.
    OtherHistory {
        /// The RDB's replication ID.
        replid: String,
    },
    /// The master's backlog no longer holds the RDB's offset, or not for long enough.
    Stale {
        /// The RDB's offset.
        offset: u64,
        /// Why, in the operator's terms.
        why: String,
    },
}

/// What a start does.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(tag = "decision", content = "because", rename_all = "snake_case")]
pub enum Decision {
    /// Start the server on what the volume holds; pull nothing.
    Keep(Keep),
    /// Pull the relay's snapshot and place it.
    Stage(Stage),
}

/// Keep the volume whole, whatever any master says? Only for a cluster node that is a master
/// serving slots: its data is the shard's.
pub fn keeps_as_master(node: &NodeOnVolume) -> Option<Keep> {
    match node {
        NodeOnVolume::Parsed(n) if n.serves_slots() => Some(Keep::ServesSlots { slots: n.slots }),
        _ => None,
    }
}

/// Decide from the RDB on the volume and the master it is to follow (see the module's doc).
pub fn decide(rdb: &RdbOnVolume, master: &MasterView) -> Decision {
    let (bytes, replid, offset) = match rdb {
        RdbOnVolume::Absent => return Decision::Stage(Stage::Empty),
        RdbOnVolume::Unreadable(e) => return Decision::Stage(Stage::Unreadable { error: e.clone() }),
        RdbOnVolume::Present { history: None, .. } => return Decision::Stage(Stage::NoHistory),
        RdbOnVolume::Present { bytes, history: Some((id, off)) } => (*bytes, id, *off),
    };
    if !continues(master, replid, offset) {
        return Decision::Stage(Stage::OtherHistory { replid: replid.clone() });
    }
    // The server asks for offset + 1 once it has restarted and loaded the file: nothing to pull.
    let needed = staging::needed_secs(bytes, 0, 0.0);
    match staging::freshness(&master.backlog, offset, master.write_rate, needed) {
        Freshness::Fresh { headroom_bytes, headroom_secs } => Decision::Keep(Keep::ResumesPartially { replid: replid.clone(), offset, headroom_bytes, headroom_secs }),
        Freshness::Stale(why) => Decision::Stage(Stage::Stale { offset, why }),
    }
}

/// Does the master accept `PSYNC <replid> <offset+1>` as far as histories go? Its current ID
/// always; its previous one up to the offset where it was promoted (the servers' own rule; the
/// backlog is judged apart).
fn continues(master: &MasterView, replid: &str, offset: u64) -> bool {
    replid == master.replid || (replid == master.replid2 && master.second_offset.is_some_and(|s| offset < s))
}

/// The node's shard's current master in the cluster's `table` (as a reachable node answered
/// `CLUSTER NODES`), for a node whose own config is `own`: the master the table says it follows, or
/// the one its config names — and if that one is no master serving slots any more (a failover), the
/// master it now follows. `Err` says why none can be named.
pub fn shard_master<'a>(own: &Node, table: &'a [Node]) -> Result<&'a Node, String> {
    let serving = |n: &&Node| n.serves_slots() && !n.unsettled;
    // What the cluster says of this node wins over its own config, which was written before it went down.
    let named = table.iter().find(|n| n.id == own.id).and_then(|n| n.master.clone()).or_else(|| own.master.clone());
    let Some(named) = named else {
        return Err(format!("node {} follows no master in its config and the cluster names none for it", own.id));
    };
    let Some(m) = table.iter().find(|n| n.id == named) else {
        return Err(format!("the cluster does not know master {named}, which node {} follows", own.id));
    };
    if serving(&m) {
        return Ok(m);
    }
    // A failed-over master comes back as its successor's replica: one hop, no more.
    if let Some(next) = m.master.as_deref().and_then(|id| table.iter().find(|n| n.id == id)).filter(serving) {
        return Ok(next);
    }
    Err(format!("master {named}, which node {} follows, serves no slots and follows no master that does (a failover still under way?)", own.id))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::staged::cluster::Role;

    fn master(replid: &str, first: u64, last: u64) -> MasterView {
        MasterView { replid: replid.into(), replid2: "0".repeat(40), second_offset: None, backlog: Backlog { active: true, master_offset: last, first_byte: first, size: 1 << 20 }, write_rate: 0.0 }
    }

    fn rdb(id: &str, off: u64) -> RdbOnVolume {
        RdbOnVolume::Present { bytes: 1 << 20, history: Some((id.into(), off)) }
    }

    fn node(id: char, role: Role, master: Option<char>, slots: u32) -> Node {
        Node {
            id: id.to_string().repeat(40),
            addr: format!("10.0.0.{}:6379", id as u8),
            port: 6379,
            bus_port: 16379,
            role,
            myself: false,
            unsettled: false,
            master: master.map(|m| m.to_string().repeat(40)),
            config_epoch: 1,
            slots,
        }
    }

    #[test]
    fn an_empty_volume_is_staged() {
        assert_eq!(decide(&RdbOnVolume::Absent, &master("a", 1, 100)), Decision::Stage(Stage::Empty));
    }

    #[test]
    fn an_own_rdb_inside_the_backlog_is_kept() {
        let d = decide(&rdb("a", 90), &master("a", 1, 100));
        assert!(matches!(d, Decision::Keep(Keep::ResumesPartially { offset: 90, headroom_bytes, .. }) if headroom_bytes == 90 + (1 << 20) - 100), "{d:?}");
        // Exactly at the master's offset: nothing missed, still partial.
        assert!(matches!(decide(&rdb("a", 100), &master("a", 1, 100)), Decision::Keep(_)));
    }

    #[test]
    fn an_rdb_the_backlog_lost_is_staged_again() {
        let d = decide(&rdb("a", 10), &master("a", 50, 100));
        assert!(matches!(&d, Decision::Stage(Stage::Stale { offset: 10, why }) if why.contains("no longer holds")), "{d:?}");
        // Ahead of the master (it restarted without its data): the backlog cannot serve it either.
        assert!(matches!(decide(&rdb("a", 200), &master("a", 1, 100)), Decision::Stage(Stage::Stale { .. })));
    }

    #[test]
    fn too_little_headroom_at_the_write_rate_is_stale() {
        let mut m = master("a", 1, 100);
        // 1 MiB of backlog left at 1 MiB/s: gone before a 1 MiB file is restarted and loaded (x2).
        m.write_rate = f64::from(1u32 << 20);
        assert!(matches!(decide(&rdb("a", 100), &m), Decision::Stage(Stage::Stale { .. })));
        m.write_rate = 1024.0;
        assert!(matches!(decide(&rdb("a", 100), &m), Decision::Keep(Keep::ResumesPartially { headroom_secs: Some(_), .. })));
    }

    #[test]
    fn another_history_is_staged_and_the_previous_one_counts_up_to_the_promotion() {
        assert_eq!(decide(&rdb("b", 90), &master("a", 1, 100)), Decision::Stage(Stage::OtherHistory { replid: "b".into() }));
        let mut m = master("a", 1, 100);
        m.replid2 = "b".into();
        m.second_offset = Some(91);
        assert!(matches!(decide(&rdb("b", 90), &m), Decision::Keep(_)), "promoted after offset 90: PSYNC b 91 is accepted");
        m.second_offset = Some(90);
        assert!(matches!(decide(&rdb("b", 90), &m), Decision::Stage(Stage::OtherHistory { .. })), "PSYNC b 91 is past the promotion");
    }

    #[test]
    fn an_rdb_without_history_or_unreadable_is_staged() {
        assert_eq!(decide(&RdbOnVolume::Present { bytes: 9, history: None }, &master("a", 1, 100)), Decision::Stage(Stage::NoHistory));
        assert!(matches!(decide(&RdbOnVolume::Unreadable("not an RDB".into()), &master("a", 1, 100)), Decision::Stage(Stage::Unreadable { .. })));
    }

    #[test]
    fn a_master_serving_slots_is_kept_whole() {
        assert_eq!(keeps_as_master(&NodeOnVolume::Parsed(node('a', Role::Master, None, 5461))), Some(Keep::ServesSlots { slots: 5461 }));
        assert_eq!(keeps_as_master(&NodeOnVolume::Parsed(node('a', Role::Master, None, 0))), None, "an empty master is staged");
        assert_eq!(keeps_as_master(&NodeOnVolume::Parsed(node('a', Role::Replica, Some('b'), 0))), None);
        assert_eq!(keeps_as_master(&NodeOnVolume::Absent), None);
    }

    #[test]
    fn the_shard_master_is_the_clusters_not_a_fixed_address() {
        let me = node('c', Role::Replica, Some('a'), 0);
        // No failover: the master the config names.
        let table = [node('a', Role::Master, None, 5461), node('b', Role::Master, None, 5462), node('c', Role::Replica, Some('a'), 0)];
        assert_eq!(shard_master(&me, &table).unwrap().id, "a".repeat(40));
        // a failed over to d while c was down: a now follows d.
        let table = [node('a', Role::Replica, Some('d'), 0), node('d', Role::Master, None, 5461), node('c', Role::Replica, Some('a'), 0)];
        assert_eq!(shard_master(&me, &table).unwrap().id, "d".repeat(40));
        // The cluster already moved c to d.
        let table = [node('a', Role::Master, None, 0), node('d', Role::Master, None, 5461), node('c', Role::Replica, Some('d'), 0)];
        assert_eq!(shard_master(&me, &table).unwrap().id, "d".repeat(40));
    }

    #[test]
    fn no_shard_master_is_an_error_naming_why() {
        let me = node('c', Role::Replica, Some('a'), 0);
        let mut failed = node('a', Role::Master, None, 5461);
        failed.unsettled = true;
        let e = shard_master(&me, &[failed]).unwrap_err();
        assert!(e.contains("serves no slots"), "{e}");
        assert!(shard_master(&me, &[node('b', Role::Master, None, 5461)]).unwrap_err().contains("does not know"));
        assert!(shard_master(&node('c', Role::Master, None, 0), &[]).unwrap_err().contains("follows no master"));
    }
}
