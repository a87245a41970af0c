//! The handoff's decisions: is the replica loaded, does every precondition of the handoff hold (the
//! machine's module doc says why each exists), can the master continue it ([`Plan`]), and was it
//! partial or full ([`classify`]; in doubt, full).

use super::inputs::Counters;
use crate::error::Error;
use crate::local::ReplState;
use crate::master::MasterRepl;
use crate::report::Handoff;
use client::Role;
use endpoint::Endpoint;
use std::time::Duration;

/// What the handoff is expected to be, from the master's state before it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan {
    /// The master can continue from the replica's offset.
    Partial,
    /// It cannot; the master will send a full sync, for this reason.
    Full(String),
}

/// The replica finished loading our snapshot: its link to us is up, it is not syncing, it follows the
/// snapshot's replid, and (with the EOF framing) it sent its first ACK — a diskless-loading replica
/// acknowledges only once it has read the whole payload.
pub fn loaded(st: &ReplState, replid: &str, acked: bool) -> bool {
    st.link_up && !st.syncing && st.replid == replid && acked
}

/// Why the replica may not be handed over yet; `None` when every precondition holds (see the module
/// comment for why each exists).
pub fn not_ready_for_handoff(st: &ReplState, replid: &str, streamed: u64) -> Option<String> {
    if st.syncing {
        return Some("it is still loading".into());
    }
    if !st.link_up {
        return Some("its link to the agent is down".into());
    }
    if st.replid != replid {
        return Some(format!("it follows replid {} instead of the snapshot's {replid}", st.replid));
    }
    if st.offset != Some(streamed) {
        return Some(format!("it applied up to {:?}, not {streamed}", st.offset));
    }
    None
}

/// What a join whose handoff did not end in sync within `waited` saw: the master's full syncs and
/// refusals since the handoff, its output-buffer disconnects, the replica's link.
pub(super) fn unfinished_note(waited: Duration, before: &Counters, after: &Counters, st: &ReplState) -> String {
    let obuf = match (before.output_buffer_disconnects, after.output_buffer_disconnects) {
        (Some(b), Some(a)) => format!("{} output-buffer disconnects", a - b),
        _ => "output-buffer disconnects not reported by this server".to_string(),
    };
    let link = match (st.link_up, st.syncing) {
        (true, false) => "link up",
        (_, true) => "link down, a full sync in progress",
        (false, false) => "link down",
    };
    format!(
        "the replica was not in sync with the master {waited:?} after the handoff: the master started {} full sync(s) and refused {} partial resync(s) since, {obuf}; the replica: {link} (master {}). It stays the master's replica, which goes on trying natively; if full syncs repeat, raise the master's client-output-buffer-limit replica and repl-backlog-size",
        after.full - before.full,
        after.partial_err - before.partial_err,
        st.follows.as_ref().map_or_else(|| "none".to_string(), Endpoint::to_string),
    )
}

/// Can the master continue from `next` (the replica's next offset)? An error when handing over would
/// be wrong (the address is no longer a master); `Plan::Full` with the reason when the master will
/// have to send a full sync.
pub fn plan_handoff(m: &MasterRepl, replid: &str, next: u64) -> Result<Plan, Error> {
    if m.role != Some(Role::Master) {
        return Err(Error::Changed(format!(
            "the master's address now answers as a {} (a failover?): not handing the replica to it. Point --master at the current master and retry",
            m.role.map_or_else(|| "server of unknown role".to_string(), |r| r.to_string())
        )));
    }
    if !m.knows(replid) {
        return Ok(Plan::Full(format!("the master's replication ID ({}) no longer includes the snapshot's ({replid}): it restarted or failed over since; the master will send a full sync", m.replid)));
    }
    let (first, end) = (m.backlog_first.unwrap_or(u64::MAX), m.offset.unwrap_or(0));
    if !m.backlog_active || first > next || next > end + 1 {
        return Ok(Plan::Full(format!(
            "the master's backlog (offsets {first}..={end}) no longer covers the replica's next offset {next}: a partial resync is impossible, \
             the master will send a full sync. Raise repl-backlog-size on the master (it must hold the writes made during a join)"
        )));
    }
    Ok(Plan::Partial)
}

/// Was the handoff a partial resync? From the master's counters; when other replicas resynced at the
/// same moment and both counters moved, from the bytes this replica took from the master (a backlog
/// tail, not a whole RDB). In doubt: full — never a false success.
pub fn classify(before: &Counters, after: &Counters, rdb_length: Option<u64>) -> Handoff {
    let partial = after.partial_ok > before.partial_ok;
    let full = after.full > before.full;
    match (partial, full) {
        (true, false) => Handoff::Partial,
        (false, true) | (false, false) => Handoff::Full,
        (true, true) => match (before.replica_input_bytes, after.replica_input_bytes, rdb_length) {
            (Some(a), Some(b), Some(len)) if b >= a && ((b - a) as u64) < len / 2 => Handoff::Partial,
            _ => Handoff::Full,
        },
    }
}
