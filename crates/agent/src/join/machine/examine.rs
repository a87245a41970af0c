//! A replica that dropped its link while fed or loading, examined: was it lost ([`lost_replica`]), or
//! did it refuse what it was fed ([`refusal`], read from its log)? A refusal fails the join for good;
//! a loss is retried.

use super::inputs::LoadFacts;
use crate::error::Error;

/// Is this failure the replica going away (its link to the agent dropped, or it no longer answers)?
/// While it is fed or loading, that may be its refusal of the data: examined before it is retried.
pub fn lost_replica(e: &Error) -> bool {
    matches!(e, Error::Unavailable { party: crate::error::Party::ReplicaLink | crate::error::Party::Replica, .. })
}

/// What a server logs when it refuses data it cannot load: an RDB version it does not take, a type or
/// opcode it does not have (Valkey 9 under `rdb-version-check relaxed` meets Redis's own types 22–243
/// this way), module data without the module (a Redis 8 vector set is module type `vectorset`). A
/// server that only lost its connection while loading logs "assuming connection error" instead.
const REFUSALS: [&str; 4] = ["Can't handle foreign type or opcode", "Can't handle RDB format version", "no matching module", "Unknown RDB encoding type"];

/// The log's words for a load cut short by the connection, not refused (Redis and Valkey alike).
const CONNECTION_LOST: &str = "assuming connection error";

/// Where in the docs an operator reads which types cross from Redis to Valkey.
pub const REDIS_TO_VALKEY_DOC: &str = "docs/operations.md#redis-to-valkey";

/// Did the replica refuse the snapshot while loading it? From its log since the feed began: a line
/// saying it cannot handle a type, version or module (and not that it lost a connection). The
/// account, for the operator, when it did; `None` when nothing says so (no log, or a lost link),
/// and the join's failure stays the loss it was, retried.
pub fn refusal(f: &LoadFacts) -> Option<String> {
    let lines = f.log.as_ref()?;
    let line = lines.iter().find(|l| REFUSALS.iter().any(|r| l.contains(r)) && !l.contains(CONNECTION_LOST))?;
    let reason = log_message(line);
    let mut said = format!("the replica ({}) refused the snapshot while loading it: {reason}", f.replica_server);
    match (f.answers, f.keys_loaded) {
        (false, _) => said.push_str(" (and the server exited)"),
        (true, Some(n)) if n > 0 => said.push_str(&format!(" (after {n} keys)")),
        _ => {}
    }
    let from_redis = f.master_server.starts_with("redis ");
    if from_redis && f.replica_server.starts_with("valkey ") {
        said.push_str(&format!(
            " — {} types such as vector sets and hash-field TTLs have no Valkey equivalent: remove or convert those keys on the master first, or keep this replica on Redis; another attempt would be refused again; see {REDIS_TO_VALKEY_DOC}",
            capitalized(&f.master_server)
        ));
    } else {
        said.push_str(&format!(" — the master ({}) stores a type or module this server does not have; another attempt would be refused again; see {REDIS_TO_VALKEY_DOC}", f.master_server));
    }
    Some(said)
}

/// A server log line's message: after its `pid:role date time.ms <level>` prefix, without the
/// loader's "Internal error in RDB reading offset N, function at rdb.c:L -> " preamble.
fn log_message(line: &str) -> &str {
    let msg = [" # ", " * ", " - ", " . "].iter().filter_map(|m| line.find(m).map(|i| &line[i + 3..])).next().unwrap_or(line);
    match msg.find(" -> ") {
        Some(i) if msg.starts_with("Internal error in RDB reading") => &msg[i + 4..],
        _ => msg,
    }
}

/// `redis 8.2.3` → `Redis 8.2.3`.
fn capitalized(s: &str) -> String {
    let mut c = s.chars();
    c.next().map(|f| f.to_uppercase().chain(c).collect()).unwrap_or_default()
}
