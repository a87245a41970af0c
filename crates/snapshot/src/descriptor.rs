//! What an agent knows of a generation.

use crate::state::State;
use serde::{Deserialize, Serialize};

/// What an agent needs to know about a generation: sent over the control connection.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Descriptor {
    /// Generation number, increasing within one relay.
    pub generation: u64,
    /// The master's replication ID.
    pub replid: String,
    /// The master's offset at the snapshot (from `+FULLRESYNC`); the log starts at `offset + 1`.
    pub offset: u64,
    /// Block size in bytes.
    pub block_size: u64,
    /// RDB length, once known.
    pub length: Option<u64>,
    /// RDB bytes readable now (whole blocks, and the last partial one once the length is known).
    pub published: u64,
    /// CRC32C of each published block, in order.
    pub checksums: Vec<u32>,
    /// RDB format version, once the header arrived.
    pub rdb_version: Option<u32>,
    /// Offset of the end of the last complete command in the log.
    pub log_end: u64,
    /// State.
    pub state: State,
    /// Why it failed, if it did.
    pub error: Option<String>,
}
