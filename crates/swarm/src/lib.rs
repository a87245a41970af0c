//! Flat fan-out, decided without I/O: where each block comes from once agents serve each other.
//!
//! The design is a swarm with a tracker, the shape of Uber's Kraken: the relay is the **seed** (it has
//! every block) and the **tracker** (it knows which agents of a generation hold which blocks); agents
//! fetch each block from a peer that holds it whenever one does, and from the relay only when none
//! does. The tracker hands each block to the relay's link once — the first agent to ask *claims* it and
//! everyone else waits for a peer copy — the way a BitTorrent super-seed gives out each piece once
//! (again only to repair: a stale or too slow claimer, or holders full for far too long). So
//! the relay's link carries about one copy whatever the number of agents, and every agent's uplink
//! carries a share of the rest.
//!
//! Why a swarm rather than a pipelined chain or tree: a chain reaches m/B + (N−1)·block/B and a tree
//! pays its fan-out on each uplink, but both put a slow or dead host *in front of* everyone below it.
//! In a swarm a slow peer is one source among many (agents move away from it: it is marked slow once its
//! rate falls well below the others'), a dead one costs the blocks in flight from it (fetched again
//! elsewhere), and a late joiner simply pulls from whoever holds blocks. The in-order feed of the
//! local replica bounds how far ahead an agent looks ([`Chooser`]'s window), which also keeps the agents
//! of one generation working on nearby blocks, so that new blocks spread while they are wanted.
//!
//! Both halves are pure (no sockets, no clock: `now` is an argument) so that they are unit-tested alone
//! and drive the lab's simulator of fleets no machine here can host.

mod bits;
mod chooser;
mod keep;
mod serve_cache;
mod tracker;

pub use chooser::*;
pub use keep::*;
pub use serve_cache::*;
pub use tracker::*;

/// A well-mixed 64-bit value of `x` (splitmix64's finalizer): nearby inputs give unrelated outputs.
pub(crate) fn mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// The median of `v`, the lower of the two middle values of an even count (of two agents or peers,
/// the faster is the yardstick, so that any gap of the slow ratio makes the other slow); `None` when
/// empty. The tracker's paces and links and the chooser's peer rates all use this one.
pub(crate) fn lower_median(mut v: Vec<f64>) -> Option<f64> {
    let mid = v.len().checked_sub(1)? / 2;
    Some(*v.select_nth_unstable_by(mid, f64::total_cmp).1)
}

/// An agent of one generation, as the tracker numbers them.
pub type AgentId = u32;

/// Where to fetch a block from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Origin {
    /// The relay (the seed).
    Relay,
    /// Another agent that holds the block.
    Peer(AgentId),
}

/// The tracker's answer to "where do I get block b?".
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// Fetch it from the relay (the claim is yours): no peer holds it and nobody is fetching it from
    /// the relay, or its claimer went stale or too slow, or askers have waited far too long for its
    /// full holders (`Tracker::starved_after`).
    Relay,
    /// These peers hold it and can serve the asker: a few of them, a different few for different
    /// askers, those it would open a new connection to first.
    Peers(Vec<AgentId>),
    /// Ask again soon: another agent is fetching it from the relay right now, or every holder the
    /// asker could use is full.
    Wait,
}

/// What an asker tells the tracker of its own fetching with each question, so that the tracker names
/// only holders it can use: a holder serving its maximum of uploads refuses a new connection (a round
/// trip lost, and the asker's slot idle meanwhile) but takes another read on one already open.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Fetching {
    /// Its relay slot is free: the tracker may hand it a claim.
    pub may_claim: bool,
    /// Peers it reads from now with room for one more read on that connection.
    pub open: Vec<AgentId>,
    /// More peers it may start reading from (flows free).
    pub flows_free: usize,
}

/// Peers an agent fetches from at once (besides the relay): one flow each, as many as the uploads an
/// agent serves ([`limits::PEER_FETCHES_MAX`], with how they were chosen).
pub const PEER_FETCHES_MAX: usize = limits::PEER_FETCHES_MAX;
/// Uploads an agent serves at once; it refuses more ([`limits::UPLOADS_MAX`]).
pub const UPLOADS_MAX: usize = limits::UPLOADS_MAX;
