//! What the machine is given: the snapshot and deadlines it starts with ([`Snapshot`], [`Timeouts`]),
//! and each observation the driver feeds it ([`Input`]: the replica's and the master's states, the
//! counters, what a replica that dropped its link left behind).

use crate::error::Error;
use crate::local::ReplState;
use crate::master::MasterRepl;
use std::time::{Duration, Instant};

/// The snapshot being joined, as the relay described it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    /// The master's replication ID at the snapshot.
    pub replid: String,
    /// The snapshot's replication offset.
    pub offset: u64,
}

/// Deadlines of the waits that depend on the dataset (from `--load-timeout-secs`,
/// `--handoff-timeout-secs`).
#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    /// For the replica to load the snapshot.
    pub load: Duration,
    /// For the replica's link to the master after the handoff.
    pub handoff: Duration,
}

/// Counters that tell a partial resync from a full one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    /// The master's `sync_full`.
    pub full: i64,
    /// The master's `sync_partial_ok`.
    pub partial_ok: i64,
    /// The replica's `total_net_repl_input_bytes`, where the server reports it.
    pub replica_input_bytes: Option<i64>,
    /// The master's `sync_partial_err`: partial resyncs it refused.
    pub partial_err: i64,
    /// The master's `client_output_buffer_limit_disconnections`, where the server reports it (a
    /// replica cut off mid full sync because its output buffer overran).
    pub output_buffer_disconnects: Option<i64>,
}

/// What the driver found out about a replica that dropped its link while it was fed or loading
/// ([`Action::ExamineReplica`]): facts, each `None` where it could not be had.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LoadFacts {
    /// The replica's server, as its `INFO server` said before the join (`valkey 9.1.2`).
    pub replica_server: String,
    /// The master's (`redis 8.2.3`, or `unknown`).
    pub master_server: String,
    /// Whether the replica answers now (one that refused a load may have exited).
    pub answers: bool,
    /// Its `INFO persistence` `loading` (a load in progress), where it answered.
    pub loading: Option<bool>,
    /// Its `rdb_last_load_keys_loaded`: keys of the last load (a failed one's, on Valkey 9), where it
    /// answered.
    pub keys_loaded: Option<i64>,
    /// The lines its log file gained since the feed began, where the join could read the file.
    pub log: Option<Vec<String>>,
}

/// What the driver observed.
#[derive(Debug)]
pub enum Input<'a> {
    /// The replica's settings are made and the agent listens for it; nothing points it at the agent
    /// yet.
    Prepared,
    /// The replica connected to the agent, sent `PSYNC` and was answered `+FULLRESYNC`; it offered
    /// `capa eof` or not.
    ReplicaConnected {
        /// `capa eof`.
        capa_eof: bool,
        /// The RDB length, if the relay knows it already.
        length: Option<u64>,
    },
    /// The relay now knows the RDB length.
    Length(u64),
    /// Every block was pulled and sent; the first byte went out at `first_byte`.
    Pulled {
        /// When the first RDB byte was sent.
        first_byte: Option<Instant>,
        /// RDB bytes sent.
        rdb_bytes: u64,
    },
    /// The replica's replication state, and whether it has acknowledged anything on our link.
    Replica {
        /// From `INFO replication`.
        state: &'a ReplState,
        /// Any `REPLCONF ACK` seen on the link.
        ack_seen: bool,
    },
    /// A log read returned `got` bytes of the `asked` (all sent to the replica).
    LogRead {
        /// Bytes returned and sent.
        got: u64,
        /// Bytes asked for.
        asked: u64,
    },
    /// The master's replication state, just before the handoff.
    Master(&'a MasterRepl),
    /// The counters: first as read right before `REPLICAOF` (reported once `REPLICAOF` succeeded),
    /// then once the replica's link to the master is up.
    Counters(Counters),
    /// Something failed, or the join was interrupted.
    Failed(Error),
    /// The replica answered `REPLICAOF <agent>` with an error: it did not take effect, the replica
    /// never followed the agent.
    PointRefused(Error),
    /// What the driver found when told to [`Action::ExamineReplica`].
    Examined(&'a LoadFacts),
}
