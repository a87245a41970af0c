//! What an agent knows of a generation.

use crate::state::State;
use crate::table::Entry;

/// What an agent needs to know about a generation: sent over the control connection.
#[derive(Debug, Clone, PartialEq, Eq)]
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
    /// RDB bytes readable now (whole blocks, and the last partial one once the length is known), as
    /// the source wrote them.
    pub published: u64,
    /// Bytes those blocks take as they are kept (the region's watermark; at most `published`).
    pub stored: u64,
    /// The table entries of the published blocks, in order: all of them, or those after the ones a
    /// connection already sent (the generation's `descriptor(entries_from)`).
    pub table: Vec<Entry>,
    /// RDB format version, once the header arrived.
    pub rdb_version: Option<u32>,
    /// Offset of the end of the last complete command in the log.
    pub log_end: u64,
    /// State.
    pub state: State,
    /// Why it failed, if it did.
    pub error: Option<String>,
}
