//! How a pull went: the [`Stats`] its callers report, and what the planner thread learnt on the way
//! ([`Planned`]), folded into them once the pull is over. Apart because the stats are the pull's
//! account to the world (reports, events, the lab), and gather what every thread of the pull saw.

use crate::report::SourceBytes;
use std::collections::BTreeMap;
use std::time::Instant;

/// How a pull went.
#[derive(Debug, Clone, Default)]
pub struct Stats {
    /// RDB bytes passed on.
    pub bytes: u64,
    /// The bytes they travelled as (compressed where that paid): the blocks' stored lengths.
    pub stored_bytes: u64,
    /// Blocks passed on.
    pub blocks: u64,
    /// Blocks read twice because a checksum did not match or the block did not decompress.
    pub reread: u64,
    /// When the first byte was passed on.
    pub first_byte: Option<Instant>,
    /// Most block reads that were in flight at once.
    pub reads_in_flight_max: u64,
    /// The first block was passed on while the relay was still receiving the RDB from the master.
    pub streamed_while_capturing: bool,
    /// Where the bytes came from: the relay first, then each peer.
    pub sources: Vec<SourceBytes>,
    /// Blocks from peers that failed their checksum (thrown away, fetched elsewhere).
    pub peer_bad_blocks: u64,
    /// Fetches from peers that failed (timed out, connection lost, block not held) and went elsewhere.
    pub peer_failures: u64,
    /// Fetches a peer refused, serving its maximum of uploads (asked elsewhere or later).
    pub peer_refusals: u64,
    /// The tracker link failed during the pull: the rest came from the relay alone.
    pub swarm_lost: Option<String>,
}

impl Stats {
    /// Bytes from the relay.
    pub fn relay_bytes(&self) -> u64 {
        self.sources.iter().filter(|s| s.source == RELAY).map(|s| s.bytes).sum()
    }
    /// Bytes from peers.
    pub fn peer_bytes(&self) -> u64 {
        self.sources.iter().filter(|s| s.source != RELAY).map(|s| s.bytes).sum()
    }
}

/// The source name of the relay in [`SourceBytes`].
pub const RELAY: &str = "relay";

/// What the planner learnt, for the pull's stats.
#[derive(Default)]
pub(super) struct Planned {
    pub(super) rereads: u64,
    pub(super) in_flight_max: u64,
    pub(super) peer_bad_blocks: u64,
    pub(super) peer_failures: u64,
    pub(super) peer_refusals: u64,
    pub(super) swarm_lost: Option<String>,
    pub(super) sources: BTreeMap<String, (u64, u64)>,
    pub(super) stored: u64,
}

impl Stats {
    /// Take in what the planner learnt: its counts, and the bytes by source (the relay first, then
    /// the peers, most bytes first).
    pub(super) fn add_planned(&mut self, planned: Planned) {
        self.reread = planned.rereads;
        self.reads_in_flight_max = planned.in_flight_max;
        self.peer_bad_blocks = planned.peer_bad_blocks;
        self.peer_failures = planned.peer_failures;
        self.peer_refusals = planned.peer_refusals;
        self.swarm_lost = planned.swarm_lost;
        self.stored_bytes = planned.stored;
        let mut sources: Vec<SourceBytes> = planned.sources.into_iter().map(|(source, (bytes, blocks))| SourceBytes { source, bytes, blocks }).collect();
        sources.sort_by_key(|s| (s.source != RELAY, std::cmp::Reverse(s.bytes)));
        self.sources = sources;
    }
}
