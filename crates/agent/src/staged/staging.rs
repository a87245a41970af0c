//! The staged path's decisions, apart from any socket or clock: may this node be staged, is the
//! snapshot fresh enough for the master's backlog, what the master's counters say the node's resync
//! was, and what must be undone after a failure at each step.
//!
//! The staged path (`staged::cluster_node`) is how a server that cannot be pointed at the agent (a cluster
//! node refuses `REPLICAOF`) or is not running yet (`fastrepl stage`) becomes a replica: the snapshot
//! is written into its data directory, it is recorded as the master's replica, and at its next start
//! it loads the RDB, takes the replication ID and offset from the RDB's aux fields and asks the master
//! for `PSYNC <id> <offset+1>`. That succeeds only while the master's backlog still holds that offset,
//! which is what [`freshness`] judges.

use crate::staged::cluster::{Node, Role};

/// What the checks learned about the node to be staged.
#[derive(Debug, Clone)]
pub struct NodeFacts {
    /// Its address, for messages.
    pub addr: String,
    /// Keys it holds.
    pub keys: u64,
    /// Its own line of its cluster table.
    pub me: Node,
    /// `appendonly yes`: at its restart it would load the AOF, not the snapshot.
    pub aof: bool,
    /// Its table lists the master, settled (not failing, not in a handshake).
    pub knows_master: bool,
    /// It has a `masterauth` (a cluster replica authenticates to its master with its own).
    pub has_masterauth: bool,
    /// The master needs a password (the join was given one for it).
    pub master_needs_auth: bool,
}

/// What the checks learned about the master.
#[derive(Debug, Clone)]
pub struct MasterFacts {
    /// Its address, for messages.
    pub addr: String,
    /// Its own line of its cluster table.
    pub me: Node,
}

/// What the staging must do besides the snapshot and the role.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Plan {
    /// Introduce the node to the master (`CLUSTER MEET`) first: it does not know it.
    pub meet: bool,
}

/// May `node` become `master`'s replica by staging? Every refusal says what to do; nothing has been
/// changed when one is given.
pub fn check(node: &NodeFacts, master: &MasterFacts) -> Result<Plan, String> {
    let (n, m) = (&node.addr, &master.addr);
    if master.me.role != Role::Master {
        let of = master.me.master.as_deref().map(|id| format!(" of {id}")).unwrap_or_default();
        return Err(format!("{m} is not a cluster master (it is a replica{of}): name the shard's master with --master"));
    }
    if master.me.slots == 0 {
        return Err(format!("{m} serves no slots: a replica of it would hold nothing; name the shard's master with --master"));
    }
    if node.me.id == master.me.id {
        return Err(format!("{n} and {m} are the same node ({})", node.me.id));
    }
    match (node.me.role, node.me.master.as_deref()) {
        (Role::Replica, Some(id)) if id == master.me.id => return Err(format!("{n} is already a replica of {m}: nothing to do")),
        (Role::Replica, of) => return Err(format!("{n} is a replica (of {}); only an empty master with no slots can be staged", of.unwrap_or("-"))),
        _ => {}
    }
    if node.me.slots > 0 {
        return Err(format!("{n} serves {} slot(s): a node must serve none to become a replica; move them away first (redis-cli --cluster reshard)", node.me.slots));
    }
    if node.keys > 0 {
        return Err(format!(
            "{n} holds {} keys: a cluster node must be empty to become a replica (CLUSTER REPLICATE refuses it too); \
             flush it first if that is intended (--force does not apply to cluster nodes)",
            node.keys
        ));
    }
    if node.aof {
        return Err(format!(
            "{n} has appendonly yes: at its restart it would load its AOF, not the snapshot. Turn AOF off for the join \
             (CONFIG SET appendonly no, and in its config file), and on again after it (CONFIG SET appendonly yes). The join \
             sidecar that keeps AOF on (`fastrepl join --watch`, contrib/k8s/replicas-aof.yaml) is for standalone servers: \
             a cluster node refuses REPLICAOF, so it is staged, and staged with AOF off"
        ));
    }
    if node.master_needs_auth && !node.has_masterauth {
        return Err(format!(
            "the master needs a password (one was given for it) and {n} has no masterauth: a cluster replica authenticates to its \
             master with its own masterauth (and masteruser); set them in its config file, then join"
        ));
    }
    Ok(Plan { meet: !node.knows_master })
}

/// The master's backlog, from its `INFO replication`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backlog {
    /// `repl_backlog_active:1`.
    pub active: bool,
    /// `master_repl_offset`: the last byte written.
    pub master_offset: u64,
    /// `repl_backlog_first_byte_offset`.
    pub first_byte: u64,
    /// `repl_backlog_size`: how many bytes it keeps once full.
    pub size: u64,
}

impl Backlog {
    /// From `INFO replication` fields (`None` when one is missing: a server too old to say).
    pub fn from_info(get: impl Fn(&str) -> Option<i64>) -> Option<Backlog> {
        let u = |k: &str| get(k).and_then(|v| u64::try_from(v).ok());
        Some(Backlog { active: get("repl_backlog_active")? == 1, master_offset: u("master_repl_offset")?, first_byte: u("repl_backlog_first_byte_offset")?, size: u("repl_backlog_size")? })
    }

    /// Bytes the master can still write before `PSYNC <id> <offset+1>` is refused for a snapshot
    /// taken at `offset`; `None` when it is refused already. The backlog keeps the last `size` bytes
    /// (offsets `master_offset-size+1 ..= master_offset` once full), so byte `offset+1` stays while
    /// `master_offset <= offset + size`.
    pub fn headroom(&self, offset: u64) -> Option<u64> {
        if !self.active || offset + 1 < self.first_byte || offset > self.master_offset {
            return None;
        }
        (offset + self.size).checked_sub(self.master_offset)
    }
}

/// Is a snapshot fresh enough to stage?
#[derive(Debug, Clone, PartialEq)]
pub enum Freshness {
    /// Yes, with this much headroom (bytes; seconds at the write rate, `None` when it writes nothing).
    Fresh {
        /// Bytes the master can write before the snapshot's offset leaves its backlog.
        headroom_bytes: u64,
        /// The same at the measured write rate.
        headroom_secs: Option<f64>,
    },
    /// No: why, in the operator's terms.
    Stale(String),
}

/// How many times the time a staging is expected to take the backlog must last
/// ([`limits::STAGED_HEADROOM_FACTOR`]).
pub const HEADROOM_FACTOR: f64 = limits::STAGED_HEADROOM_FACTOR;

/// Judge a snapshot at `offset` against the master's `backlog`, written at `rate` bytes/s, for a
/// staging expected to need `needed_secs` more before the node asks for its `PSYNC`.
pub fn freshness(backlog: &Backlog, offset: u64, rate: f64, needed_secs: f64) -> Freshness {
    let Some(headroom) = backlog.headroom(offset) else {
        return Freshness::Stale(format!("the master's backlog ({} .. {}) no longer holds the snapshot's offset {}", backlog.first_byte, backlog.master_offset, offset + 1));
    };
    if rate <= 0.0 {
        return Freshness::Fresh { headroom_bytes: headroom, headroom_secs: None };
    }
    let secs = headroom as f64 / rate;
    if secs < needed_secs * HEADROOM_FACTOR {
        return Freshness::Stale(format!(
            "at the master's write rate ({:.0} KiB/s) its backlog keeps the snapshot's offset for {secs:.1} s more; staging needs about {needed_secs:.1} s (×{HEADROOM_FACTOR} margin)",
            rate / 1024.0
        ));
    }
    Freshness::Fresh { headroom_bytes: headroom, headroom_secs: Some(secs) }
}

/// A server loads an RDB at least this fast, bytes/s ([`limits::RDB_LOAD_BYTES_PER_SEC_MIN`]).
pub const LOAD_RATE_MIN: f64 = limits::RDB_LOAD_BYTES_PER_SEC_MIN;
/// Time allowed for a shutdown and a supervisor's restart, before the load ([`limits::NODE_RESTART_SECS`]).
pub const RESTART_SECS: f64 = limits::NODE_RESTART_SECS;

/// Seconds from now until the node asks for its `PSYNC`: what is left to pull at `pull_rate`
/// (bytes/s), the restart, and the load of `rdb_bytes`.
pub fn needed_secs(rdb_bytes: u64, left_to_pull: u64, pull_rate: f64) -> f64 {
    let pull = if left_to_pull == 0 { 0.0 } else { left_to_pull as f64 / pull_rate.max(LOAD_RATE_MIN) };
    pull + RESTART_SECS + rdb_bytes as f64 / LOAD_RATE_MIN
}

/// A master's sync counters (`INFO stats`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SyncCounters {
    /// `sync_full`.
    pub full: u64,
    /// `sync_partial_ok`.
    pub partial_ok: u64,
}

/// What the master's counters say about the node's resync.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resync {
    /// A partial resync, and no full sync, was counted.
    Partial,
    /// A full sync was counted and no partial one.
    Full,
    /// The counters cannot tell (both moved: another replica synced meanwhile; or neither).
    Unknown(String),
}

/// Judge the resync from the master's counters before the restart and after the node's link is up.
/// Only an unambiguous count is a partial resync: a replica is never reported in sync without one.
pub fn judge(before: SyncCounters, after: SyncCounters) -> Resync {
    let full = after.full > before.full;
    let partial = after.partial_ok > before.partial_ok;
    match (full, partial) {
        (false, true) => Resync::Partial,
        (true, false) => Resync::Full,
        (true, true) => Resync::Unknown("the master counted a full sync and a partial resync meanwhile (another replica synced too)".into()),
        (false, false) => Resync::Unknown("the master counted no sync for it".into()),
    }
}

/// How far a staging got: what a failure from there must undo.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Step {
    /// Checks and the pull into an unnamed temporary file: nothing of the node changed.
    Pulled,
    /// Introduced to the master with `CLUSTER MEET` (the cluster knows it now).
    Met,
    /// Its link parked (`masteruser`/`masterauth` set to values the master refuses) and recorded as
    /// the master's replica: it cannot start a full sync, and its config says replica.
    Recorded,
    /// The snapshot is its RDB file (the one before kept aside).
    Placed,
    /// Shut down: from here its supervisor, or `--restart-command`, starts it.
    ShutDown,
    /// Back and loading or loaded.
    Restarted,
    /// Linked to a master of its shard: a replica, whatever fails after (the cluster's agreement,
    /// the counters) is reported, not undone.
    Linked,
}

/// One thing to undo.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Undo {
    /// Running: `CLUSTER RESET SOFT` (an empty master, forgetting the cluster), then `CLUSTER MEET`
    /// the master again, so it is the empty master of the cluster it was.
    ResetRole,
    /// Running: restore `masteruser`/`masterauth`.
    Unpark,
    /// Put the RDB file that was there back (or remove ours).
    RestoreRdb,
    /// Down: write its cluster config back as it was before the staging.
    RestoreConfig,
}

/// What to undo after a failure at `step`, in order, given whether the node answers now.
pub fn undo(step: Step, running: bool) -> Vec<Undo> {
    match (step, running) {
        (Step::Pulled | Step::Met | Step::Linked, _) => Vec::new(),
        (Step::Recorded, true) => vec![Undo::ResetRole, Undo::Unpark],
        (Step::Recorded, false) => vec![Undo::RestoreConfig],
        (Step::Placed, true) => vec![Undo::ResetRole, Undo::Unpark, Undo::RestoreRdb],
        // Down before (or during) a restart: its files must not make it a replica when it starts.
        (Step::Placed | Step::ShutDown | Step::Restarted, false) => vec![Undo::RestoreRdb, Undo::RestoreConfig],
        // Running again: the reset empties it and rewrites its config; the file goes too.
        (Step::ShutDown | Step::Restarted, true) => vec![Undo::ResetRole, Undo::RestoreRdb],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::staged::cluster::parse;

    const M: &str = "3d5b146b14cd6bb37f9bfdcca967e98e328a6b43";
    const N: &str = "ef2e1056432fabcc1a72b09e1effa9f519bce09b";

    fn node(line: &str) -> Node {
        parse(line).unwrap().remove(0)
    }

    fn facts() -> (NodeFacts, MasterFacts) {
        (
            NodeFacts {
                addr: "n:1".into(),
                keys: 0,
                me: node(&format!("{N} 127.0.0.1:2@3 myself,master - 0 0 0 connected")),
                aof: false,
                knows_master: true,
                has_masterauth: false,
                master_needs_auth: false,
            },
            MasterFacts { addr: "m:1".into(), me: node(&format!("{M} 127.0.0.1:1@2 myself,master - 0 0 1 connected 0-16383")) },
        )
    }

    #[test]
    fn an_empty_master_without_slots_may_be_staged() {
        let (mut n, m) = facts();
        assert_eq!(check(&n, &m), Ok(Plan { meet: false }));
        n.knows_master = false;
        assert_eq!(check(&n, &m), Ok(Plan { meet: true }));
    }

    #[test]
    fn every_refusal_names_its_cause() {
        let (n, m) = facts();
        let refused = |n: &NodeFacts, m: &MasterFacts, what: &str| {
            let e = check(n, m).unwrap_err();
            assert!(e.contains(what), "{e}");
        };
        refused(&NodeFacts { keys: 3, ..n.clone() }, &m, "holds 3 keys");
        refused(&NodeFacts { aof: true, ..n.clone() }, &m, "appendonly yes");
        refused(&NodeFacts { aof: true, ..n.clone() }, &m, "contrib/k8s/replicas-aof.yaml");
        refused(&NodeFacts { master_needs_auth: true, ..n.clone() }, &m, "no masterauth");
        assert!(check(&NodeFacts { master_needs_auth: true, has_masterauth: true, ..n.clone() }, &m).is_ok());
        refused(&NodeFacts { me: node(&format!("{N} 127.0.0.1:2@3 myself,master - 0 0 0 connected 5-9")), ..n.clone() }, &m, "serves 5 slot(s)");
        refused(&NodeFacts { me: node(&format!("{N} 127.0.0.1:2@3 myself,slave {M} 0 0 0 connected")), ..n.clone() }, &m, "already a replica");
        refused(&n, &MasterFacts { me: node(&format!("{M} 127.0.0.1:1@2 myself,slave {N} 0 0 1 connected")), ..m.clone() }, "not a cluster master");
        refused(&n, &MasterFacts { me: node(&format!("{M} 127.0.0.1:1@2 myself,master - 0 0 1 connected")), ..m.clone() }, "serves no slots");
    }

    #[test]
    fn headroom_is_what_the_master_may_write_before_the_offset_leaves() {
        let full = Backlog { active: true, master_offset: 10_000, first_byte: 9_001, size: 1_000 };
        assert_eq!(full.headroom(9_000), Some(0), "byte 9001 is the first held");
        assert_eq!(full.headroom(9_500), Some(500));
        assert_eq!(full.headroom(8_999), None, "gone");
        assert_eq!(full.headroom(10_000), Some(1_000));
        assert_eq!(full.headroom(10_001), None, "a snapshot ahead of the master is another history");
        let filling = Backlog { active: true, master_offset: 300, first_byte: 1, size: 1_000 };
        assert_eq!(filling.headroom(0), Some(700), "not full yet: it keeps all until 1000 bytes");
        assert_eq!(Backlog { active: false, ..filling }.headroom(0), None);
    }

    #[test]
    fn freshness_weighs_the_headroom_against_the_time_staging_needs() {
        let b = Backlog { active: true, master_offset: 1_000_000, first_byte: 1, size: 64 << 20 };
        assert!(matches!(freshness(&b, 1_000_000, 0.0, 100.0), Freshness::Fresh { headroom_secs: None, .. }));
        // 64 MiB of headroom at 1 MiB/s: 64 s, enough for 30 s needed ×2, not for 40 s.
        assert!(matches!(freshness(&b, 1_000_000, 1048576.0, 30.0), Freshness::Fresh { headroom_secs: Some(s), .. } if (s - 64.0).abs() < 0.01));
        assert!(matches!(freshness(&b, 1_000_000, 1048576.0, 40.0), Freshness::Stale(w) if w.contains("64.0 s")));
        let gone = Backlog { first_byte: 2_000, ..b };
        assert!(matches!(freshness(&gone, 1_000, 0.0, 1.0), Freshness::Stale(w) if w.contains("no longer holds")));
        assert!(needed_secs(1 << 30, 0, 0.0) > needed_secs(1 << 20, 0, 0.0));
    }

    #[test]
    fn only_an_unambiguous_count_is_a_partial_resync() {
        let b = SyncCounters { full: 2, partial_ok: 5 };
        assert_eq!(judge(b, SyncCounters { full: 2, partial_ok: 6 }), Resync::Partial);
        assert_eq!(judge(b, SyncCounters { full: 3, partial_ok: 5 }), Resync::Full);
        assert!(matches!(judge(b, SyncCounters { full: 3, partial_ok: 6 }), Resync::Unknown(_)));
        assert!(matches!(judge(b, b), Resync::Unknown(_)));
    }

    #[test]
    fn undo_depends_on_the_step_and_whether_the_node_runs() {
        assert!(undo(Step::Pulled, true).is_empty());
        assert!(undo(Step::Linked, true).is_empty() && undo(Step::Linked, false).is_empty(), "a linked replica is left as it is");
        assert_eq!(undo(Step::Recorded, true), vec![Undo::ResetRole, Undo::Unpark]);
        assert_eq!(undo(Step::Placed, true), vec![Undo::ResetRole, Undo::Unpark, Undo::RestoreRdb]);
        assert_eq!(undo(Step::ShutDown, false), vec![Undo::RestoreRdb, Undo::RestoreConfig]);
        assert_eq!(undo(Step::Restarted, true), vec![Undo::ResetRole, Undo::RestoreRdb]);
    }
}
