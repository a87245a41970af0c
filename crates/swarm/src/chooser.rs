//! An agent's side of the swarm: which blocks of its window to fetch next, and from which of the
//! sources the tracker named (slow, busy and bad peers passed over). See the crate's documentation.

use crate::{AgentId, Answer, Fetching, Origin};
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// A peer's measured rate, for telling slow sources from fast ones.
#[derive(Debug, Clone, Copy, Default)]
struct Rate {
    bytes_per_sec: f64,
    samples: u32,
}

/// One agent's side: which block to fetch next, and from which of the sources the tracker named.
#[derive(Debug)]
pub struct Chooser {
    window: u64,
    /// Blocks of the agent's serve cache ([`Chooser::with_cache_room`]): while fewer than these have
    /// been handed on, the cache's empty room widens the window.
    cache_blocks: u64,
    /// Peers fetched from at once (flows).
    peer_flows: usize,
    /// Connections to the relay (flows).
    relay_flows: usize,
    /// Reads in flight per flow to a peer, and per flow to the relay.
    depth: usize,
    relay_depth: usize,
    next_write: u64,
    published: u64,
    have: Vec<bool>,
    /// Blocks with `have` set.
    held: u64,
    in_flight: HashMap<u64, Origin>,
    rates: HashMap<AgentId, Rate>,
    /// The median rate of the peers with at least two samples: the yardstick for "slow", kept as the
    /// rates change (a pass over the rated peers per block received, none per choice). The median, not the
    /// mean: a block already waiting in the socket's buffer arrives in milliseconds, and one such
    /// sample (hundreds of MB/s) lifted the mean until peers at their fair share looked slow — and a
    /// peer passed over is never measured again.
    yardstick: Option<f64>,
    avoid: HashMap<AgentId, ()>,
    /// Peers that refused a fetch (busy), until when they are passed over.
    busy: HashMap<AgentId, Instant>,
    /// Peers that have refused in a row since this moment (and last refused at the second), without
    /// serving us a block in between.
    busy_since: HashMap<AgentId, (Instant, Instant)>,
    /// Reads from peers chosen with a time ([`Chooser::choose_at`]): since when.
    since: HashMap<u64, Instant>,
    /// Reads from peers moved elsewhere ([`Chooser::move_away`]) and still on the wire: their block
    /// and peer. Each holds its flow until it ends (a read on a connection cannot be taken back), and
    /// whichever of it and its replacement ends first gives the block.
    moved: Vec<(u64, AgentId)>,
    /// Peers whose connection the pull is cutting ([`Chooser::to_cut`]): every read on the wire from
    /// them is a moved one whose block is held, a duplicate. Until their last read ends.
    cut: Vec<AgentId>,
    /// Moved reads whose move rated their peer ([`Chooser::move_away`]): if one ends with its block,
    /// that is not a second sample of the same read.
    rated_at_move: Vec<(u64, AgentId)>,
    /// This agent's own time per byte, from any source (a moving average, a quarter of the way to
    /// each sample: per byte, since the last block is short; slow to follow, since a block already
    /// waiting in the socket's buffer arrives in milliseconds), and the largest block seen: the
    /// yardstick for a read that takes too long.
    own_secs_per_byte: Option<f64>,
    block_bytes: u64,
}

/// How long a holder that refused a fetch (busy) is passed over ([`limits::PEER_BUSY_BACKOFF`]).
pub const BUSY_BACKOFF: Duration = limits::PEER_BUSY_BACKOFF;
/// A peer that answers "busy" for this long without serving a block is avoided (see
/// [`Chooser::refused`], [`limits::PEER_BUSY_GIVE_UP`]).
pub const BUSY_GIVE_UP: Duration = limits::PEER_BUSY_GIVE_UP;
/// Refusals further apart than this are not "in a row" for [`BUSY_GIVE_UP`].
pub const BUSY_STREAK_GAP: Duration = limits::PEER_BUSY_STREAK_GAP;

/// A source slower than this fraction of the median peer rate is avoided while others hold the block
/// ([`limits::PEER_SLOW_FRACTION`]).
pub const SLOW_FRACTION: f64 = limits::PEER_SLOW_FRACTION;

/// A read from a peer still on the wire after this many times the agent's own time per block is
/// moved elsewhere ([`Chooser::overdue`]): the tracker's slow ratio for a holder ([`limits::ARRIVAL_SLOW_RATIO`]), times
/// the reads that may wait ahead of it on one connection ([`limits::PEER_READS_IN_FLIGHT`]).
pub const MOVE_AFTER: f64 = limits::ARRIVAL_SLOW_RATIO * limits::PEER_READS_IN_FLIGHT as f64;

/// The median of `v` (the lower one of an even count: of two peers, the faster is never the
/// yardstick, so one block that arrived at once cannot make the other look slow); `None` below two
/// values: one peer is no yardstick for another.
fn median(v: Vec<f64>) -> Option<f64> {
    if v.len() < 2 {
        return None;
    }
    crate::lower_median(v)
}

impl Chooser {
    /// An agent that looks `window` blocks ahead of what it has handed on (more while its serve cache
    /// has room: [`Chooser::with_cache_room`]), fetching from at
    /// most `peer_flows` peers at once and on one connection to the relay, one read in flight on each
    /// (see [`Chooser::with_depth`]).
    ///
    /// Why one relay fetch per agent, and few in all: links share their rate among their flows (TCP is
    /// fair per flow), so an agent with many flows gives its relay flow a small share of its downlink,
    /// and the relay's uplink — the one resource that carries the only copy of new blocks — idles. One
    /// relay flow per agent keeps the relay's uplink busy whenever any block is unclaimed, while the
    /// peer flows fill the rest of each downlink.
    pub fn new(window: u64, peer_flows: usize) -> Chooser {
        Chooser {
            window: window.max(1),
            cache_blocks: 0,
            peer_flows: peer_flows.max(1),
            relay_flows: 1,
            depth: 1,
            relay_depth: 1,
            next_write: 0,
            published: 0,
            have: Vec::new(),
            held: 0,
            in_flight: HashMap::new(),
            rates: HashMap::new(),
            yardstick: None,
            avoid: HashMap::new(),
            busy: HashMap::new(),
            busy_since: HashMap::new(),
            since: HashMap::new(),
            moved: Vec::new(),
            cut: Vec::new(),
            rated_at_move: Vec::new(),
            own_secs_per_byte: None,
            block_bytes: 0,
        }
    }

    /// The agent keeps up to `blocks` of the blocks it handed on, for other agents (its serve cache:
    /// every block handed on goes in, and once it is full one goes out for each, as [`crate::Keep`]
    /// chooses): until it holds that many, the window looks further ahead by the room the cache does
    /// not use yet. Those further blocks are asked for after the window's own ([`Chooser::wanted`]). An agent's blocks in memory (the
    /// window's and the cache's) stay within `window + blocks`, as without it, and the window is at its
    /// widest at the start of a pull, when the block a late joiner needs next has spread least and the
    /// agents behind it wait longest (issue 33, ninth pass: see `docs/results/issue33-ninth`). Never
    /// wider than [`limits::WINDOW_BLOCKS_MAX`].
    pub fn with_cache_room(mut self, blocks: u64) -> Chooser {
        self.cache_blocks = blocks;
        self
    }

    /// Where the window as asked ends: blocks from here on (up to [`Chooser::window_now`]) are the
    /// serve cache's room, asked for after the others ([`Chooser::wanted`]; the relay answers in the
    /// same order).
    pub fn window_end(&self) -> u64 {
        self.next_write + self.window
    }

    /// How far ahead of what it handed on the agent looks now: its window, widened by the serve
    /// cache's room still unused.
    pub fn window_now(&self) -> u64 {
        let room = self.cache_blocks.saturating_sub(self.next_write);
        self.window.saturating_add(room).min(limits::WINDOW_BLOCKS_MAX.max(self.window))
    }

    /// Allow `n` fetches from the relay at once (default 1). An agent alone, or one on the relay's host
    /// (whose reads cost the relay's link nothing), needs several in flight to fill its link.
    pub fn with_relay_fetches(mut self, n: usize) -> Chooser {
        self.relay_flows = n.max(1);
        self
    }

    /// Keep up to `d` reads in flight on each flow (pipelined requests: the flow does not idle for a
    /// request's round trip between blocks). A peer gets up to `d` of our fetches at once; more
    /// peers are only taken while fewer than `peer_flows` are fetched from.
    pub fn with_depth(mut self, d: usize) -> Chooser {
        self.depth = d.max(1);
        self.relay_depth = self.depth;
        self
    }

    /// Reads in flight per flow to the relay, when it differs from the peers' (shm and ucx reads are
    /// one-sided: one at a time per reader).
    pub fn with_relay_depth(mut self, d: usize) -> Chooser {
        self.relay_depth = d.max(1);
        self
    }

    fn relay_fetches_max(&self) -> usize {
        self.relay_flows * self.relay_depth
    }

    fn peer_fetches_max(&self) -> usize {
        self.peer_flows * self.depth
    }

    /// The relay published `blocks` blocks.
    pub fn published(&mut self, blocks: u64) {
        self.published = self.published.max(blocks);
        if self.have.len() < blocks as usize {
            self.have.resize(blocks as usize, false);
        }
    }

    /// Blocks this agent holds, verified.
    pub fn held(&self) -> u64 {
        self.held
    }

    /// This agent will not fetch from `p` any more (it sent a bad block, failed or vanished).
    pub fn avoids(&self, p: AgentId) -> bool {
        self.avoid.contains_key(&p)
    }

    /// Peer `p` is rated slow: under [`SLOW_FRACTION`] of the median rated peer's rate, over at
    /// least two samples.
    pub fn is_slow(&self, p: AgentId) -> bool {
        self.rates.get(&p).is_some_and(|r| r.samples >= 2 && self.yardstick.is_some_and(|m| r.bytes_per_sec < SLOW_FRACTION * m))
    }

    /// Block `b` is being fetched.
    pub fn in_flight(&self, b: u64) -> bool {
        self.in_flight.contains_key(&b)
    }

    /// Block `b` is held.
    pub fn holds(&self, b: u64) -> bool {
        self.have.get(b as usize).copied().unwrap_or(false)
    }

    /// Blocks `0..n` held without a gap: what the replica can be fed.
    pub fn held_prefix(&self) -> u64 {
        let mut w = self.next_write;
        while self.have.get(w as usize).copied().unwrap_or(false) {
            w += 1;
        }
        w
    }

    /// Every published block is held.
    pub fn complete(&self) -> bool {
        self.published > 0 && self.held() == self.published
    }

    /// Blocks `0..n` were handed on to the replica: the window moves.
    pub fn written(&mut self, n: u64) {
        // Only what was held is handed on, and the window only moves forward.
        debug_assert!(n <= self.held_prefix().max(self.next_write), "blocks up to {n} handed on, {} held in order", self.held_prefix());
        self.next_write = self.next_write.max(n);
    }

    fn relay_busy(&self) -> bool {
        self.in_flight.values().filter(|f| **f == Origin::Relay).count() >= self.relay_fetches_max()
    }

    /// Fetches from the relay that may start now.
    pub fn relay_slots(&self) -> usize {
        self.relay_fetches_max() - self.in_flight.values().filter(|f| **f == Origin::Relay).count().min(self.relay_fetches_max())
    }

    /// Fetches from peers that may start now.
    pub fn peer_slots(&self) -> usize {
        self.peer_fetches_max().saturating_sub(self.peer_fetches())
    }

    /// The peer of every read from a peer on the wire: those in flight and those moved elsewhere.
    fn peer_reads(&self) -> impl Iterator<Item = AgentId> + '_ {
        self.in_flight.values().filter_map(|f| if let Origin::Peer(p) = f { Some(*p) } else { None }).chain(self.moved.iter().map(|(_, p)| *p))
    }

    /// Distinct peers with fetches in flight: the flows in use.
    fn peers_fetched_from(&self) -> usize {
        let mut ps: Vec<AgentId> = self.peer_reads().collect();
        ps.sort_unstable();
        ps.dedup();
        ps.len()
    }

    fn peer_fetches(&self) -> usize {
        self.peer_reads().count()
    }

    /// Reads on the wire from peer `p`.
    fn load(&self, p: AgentId) -> usize {
        self.peer_reads().filter(|x| *x == p).count()
    }

    /// What to tell the tracker of this agent's fetching when locating (see [`Fetching`]): mirrors
    /// what [`Chooser::choose`] will accept from a peer — one it reads from with room on that
    /// connection, or a new one while fewer than `peer_flows` are read from. Peers it avoids are
    /// left out of `open`.
    pub fn fetching(&self) -> Fetching {
        let mut open: Vec<AgentId> = Vec::new();
        let mut flows = 0;
        for p in self.peer_reads() {
            if open.contains(&p) {
                continue;
            }
            open.push(p);
            flows += 1;
        }
        open.retain(|p| self.load(*p) < self.depth && !self.avoid.contains_key(p) && !self.moved.iter().any(|(_, x)| x == p));
        // In the peers' order, not the map's: the relay sorts what an agent sends the same way, and
        // the simulator's runs of one seed must give one outcome (the map's order differs per process).
        open.sort_unstable();
        let slots = self.peer_fetches() < self.peer_fetches_max();
        Fetching { may_claim: self.may_claim(), open: if slots { open } else { Vec::new() }, flows_free: if slots { self.peer_flows.saturating_sub(flows) } else { 0 } }
    }

    /// Whether this agent may take a block from the relay now (its one relay fetch is free): what to
    /// tell the tracker when locating.
    pub fn may_claim(&self) -> bool {
        !self.relay_busy()
    }

    /// Whether any fetch slot is free.
    pub fn has_free_slot(&self) -> bool {
        !self.relay_busy() || self.peer_fetches() < self.peer_fetches_max()
    }

    /// The next blocks to locate: not held, not in flight, inside the window — lowest `order` first
    /// (the tracker's [`crate::Tracker::precedence`]: held whole, then rarest, then an order of the
    /// asker's own), so that different agents work on different blocks and every block spreads.
    /// Empty when every fetch slot is busy.
    pub fn wanted<K: Ord>(&self, order: impl Fn(u64) -> K) -> Vec<u64> {
        if !self.has_free_slot() {
            return Vec::new();
        }
        let end = (self.next_write + self.window_now()).min(self.published);
        let mut v: Vec<u64> = (self.next_write..end).filter(|b| !self.have[*b as usize] && !self.in_flight.contains_key(b)).collect();
        let own_end = self.window_end();
        v.sort_by_key(|b| (*b >= own_end, order(*b)));
        v
    }

    /// Choose a source for `b` from the tracker's answer; `None` to skip it for now. Among peers: not
    /// avoided, not slow (unless all are), fewest of our own fetches on it.
    pub fn choose(&mut self, b: u64, answer: &Answer) -> Option<Origin> {
        self.choose_among(b, answer, None)
    }

    /// [`Chooser::choose`], also passing over holders that refused this agent less than
    /// [`BUSY_BACKOFF`] before `now` (see [`Chooser::refused`]).
    pub fn choose_at(&mut self, b: u64, answer: &Answer, now: Instant) -> Option<Origin> {
        self.choose_among(b, answer, Some(now))
    }

    /// Peer `p` refused a fetch (it serves its maximum): pass over it until `now + BUSY_BACKOFF`.
    /// Without this an agent asks the one busy holder of a rare block again and again while blocks
    /// that free holders could give it wait; the simulator's agents never ask a full holder at all.
    /// A peer that has answered only "busy" for [`BUSY_GIVE_UP`] is avoided for good, as a failed one
    /// is: a peer that never serves (overloaded, or hostile) must not hold the blocks it alone is
    /// named for.
    ///
    /// Only refusals in a row count: asked again within a second of its last refusal. A popular peer
    /// asked now and then is busy at each ask without ever being a dead end.
    pub fn refused(&mut self, p: AgentId, now: Instant) {
        self.busy.insert(p, now + BUSY_BACKOFF);
        let (since, last) = self.busy_since.entry(p).or_insert((now, now));
        if now.saturating_duration_since(*last) > BUSY_STREAK_GAP {
            *since = now;
        }
        *last = now;
        if now.saturating_duration_since(*since) >= BUSY_GIVE_UP {
            self.avoid.insert(p, ());
        }
    }

    /// Peer `p` refused this agent less than [`BUSY_BACKOFF`] before `now`.
    pub fn is_busy(&self, p: AgentId, now: Instant) -> bool {
        self.busy.get(&p).is_some_and(|until| *until > now)
    }

    fn choose_among(&mut self, b: u64, answer: &Answer, now: Option<Instant>) -> Option<Origin> {
        let from = match answer {
            Answer::Wait => return None,
            Answer::Relay if self.relay_busy() => return None,
            Answer::Relay => Origin::Relay,
            Answer::Peers(_) if self.peer_fetches() >= self.peer_fetches_max() => return None,
            Answer::Peers(ps) => {
                let slow = |p: &AgentId| self.is_slow(*p);
                let busy = |p: &AgentId| now.is_some_and(|n| self.is_busy(*p, n));
                // A peer a read was moved away from is slow for us: not asked again while that read is
                // on the wire (a new read would queue behind it on the same connection).
                let moved_from = |p: &AgentId| self.moved.iter().any(|(_, x)| x == p);
                let usable: Vec<AgentId> = ps.iter().copied().filter(|p| !self.avoid.contains_key(p) && !busy(p) && !moved_from(p)).collect();
                let fast: Vec<AgentId> = usable.iter().copied().filter(|p| !slow(p)).collect();
                let pool = if fast.is_empty() { usable } else { fast };
                let load = |p: &AgentId| self.load(*p);
                // A new peer only while fewer than `peer_flows` are fetched from; else another read
                // on a flow that has room. Least loaded first: flows fill before they deepen.
                let flows_full = self.peers_fetched_from() >= self.peer_flows;
                let open = |p: &AgentId| load(p) < self.depth && (load(p) > 0 || !flows_full);
                Origin::Peer(*pool.iter().filter(|p| open(p)).min_by_key(|p| load(p))?)
            }
        };
        debug_assert!(!self.in_flight.contains_key(&b), "block {b} chosen while it is being fetched");
        self.in_flight.insert(b, from);
        if let (Origin::Peer(_), Some(now)) = (from, now) {
            self.since.insert(b, now);
        }
        self.debug_check();
        Some(from)
    }

    /// The fetches in flight stay within the flows and depths given (checked in debug builds): the
    /// relay's fetches, the peers' fetches, and the peers fetched from at once; the blocks held are
    /// some of those published.
    fn debug_check(&self) {
        let relay = self.in_flight.values().filter(|f| **f == Origin::Relay).count();
        debug_assert!(relay <= self.relay_fetches_max(), "{relay} relay fetches of {}", self.relay_fetches_max());
        debug_assert!(self.peer_fetches() <= self.peer_fetches_max(), "{} peer fetches of {}", self.peer_fetches(), self.peer_fetches_max());
        debug_assert!(self.peers_fetched_from() <= self.peer_flows, "{} peers fetched from of {}", self.peers_fetched_from(), self.peer_flows);
        debug_assert!(self.held <= self.published && self.have.len() as u64 == self.published, "{} held of {} published ({} known)", self.held, self.published, self.have.len());
    }

    /// Block `b` arrived from `from` and passed its checksum, `bytes` in `secs`.
    pub fn done(&mut self, b: u64, bytes: u64, secs: f64) {
        self.since.remove(&b);
        if let Some(Origin::Peer(p)) = self.in_flight.remove(&b) {
            self.rated(p, bytes, secs);
        }
        self.got(b, bytes, secs);
    }

    /// Peer `p` served a block of `bytes` in `secs`.
    fn rated(&mut self, p: AgentId, bytes: u64, secs: f64) {
        self.busy_since.remove(&p);
        self.sample(p, bytes, secs);
    }

    /// A sample of peer `p`'s rate, `bytes` in `secs` (from a block it served, or a read moved away
    /// from it: see [`Chooser::move_away`]).
    fn sample(&mut self, p: AgentId, bytes: u64, secs: f64) {
        let r = self.rates.entry(p).or_default();
        let sample = bytes as f64 / secs.max(1e-6);
        // A moving average: a peer that became slow is noticed within a few blocks.
        r.bytes_per_sec = if r.samples == 0 { sample } else { 0.5 * r.bytes_per_sec + 0.5 * sample };
        r.samples += 1;
        if r.samples >= 2 {
            self.yardstick = median(self.rates.values().filter(|r| r.samples >= 2).map(|r| r.bytes_per_sec).collect());
        }
    }

    /// The reads from peers on the wire longer than [`MOVE_AFTER`] times this agent's own time per
    /// block at `now`, or from a peer rated slow since they started: to be moved elsewhere
    /// ([`Chooser::move_away`]). A read of a block still arriving at its holder goes at that holder's
    /// pace; the tracker names such a holder only while it keeps the swarm's pace, but a read started
    /// before the holder was known to be slow would hold its block back for the holder's whole
    /// arrival (issue 33: 9–14 s for a block the others read in 1).
    ///
    /// The largest block seen stands for every read, compressed or not: a read's time counts from
    /// when it was chosen, so it includes the read queued ahead of it on the same connection and a
    /// cost per read that does not shrink with its bytes. Judged by its own stored length, a small
    /// compressed block behind a raw one would be overdue at once, and its move would rate an
    /// honest peer slow (tried, and taken back after review).
    pub fn overdue(&self, now: Instant) -> Vec<u64> {
        let Some(own) = self.own_secs_per_byte.map(|s| s * self.block_bytes as f64) else { return Vec::new() };
        let mut v: Vec<u64> = self
            .since
            .iter()
            .filter(|(b, at)| {
                let Some(Origin::Peer(p)) = self.in_flight.get(b) else { return false };
                self.is_slow(*p) || now.saturating_duration_since(**at).as_secs_f64() > MOVE_AFTER * own
            })
            .map(|(b, _)| *b)
            .collect();
        v.sort_unstable();
        v
    }

    /// Move the read of `b` from a peer elsewhere at `now`: the block is wanted again (locate it
    /// anew), while the read stays on the wire and holds its flow until it ends
    /// ([`Chooser::moved_ended`]). Returns the peer.
    ///
    /// The peer is rated as if the block had arrived now: it served at most that fast. A moved read
    /// whose block comes from its replacement is cut ([`Chooser::to_cut`]) and gives no sample, so
    /// without this one a slow holder would never be rated slow, and the agent would go back to it
    /// as soon as the cut freed the flow — a block time lost at each return (in the simulator, 64
    /// agents with slow hosts at 1.59× one agent's time against 1.41× without the cut). One sample
    /// per move of a peer's reads, from the read at the head of its connection (one queued behind
    /// another has waited for that one too, and the reads of one connection move together) while no
    /// other moved read of the peer gave one: so one slow episode is one sample, and a peer is rated
    /// slow only after two, as by whole reads. Not
    /// when the peer is rated slow already: a read moved for that may be a moment old, and its
    /// "rate" (a block over that moment) would make the peer look fast.
    pub fn move_away(&mut self, b: u64, now: Instant) -> Option<AgentId> {
        let Some(Origin::Peer(p)) = self.in_flight.get(&b).copied() else { return None };
        self.in_flight.remove(&b);
        if let Some(at) = self.since.remove(&b) {
            let head = !self.since.iter().any(|(o, t)| *t < at && self.in_flight.get(o) == Some(&Origin::Peer(p)));
            let first = !self.rated_at_move.iter().any(|(_, x)| *x == p);
            if self.block_bytes > 0 && head && first && !self.is_slow(p) {
                self.sample(p, self.block_bytes, now.saturating_duration_since(at).as_secs_f64());
                self.rated_at_move.push((b, p));
            }
        }
        self.moved.push((b, p));
        Some(p)
    }

    /// A read of `b` from `p` ended (with the block or without): if it was one moved elsewhere, it no
    /// longer holds its flow, and true is returned — its block, if verified, is taken with
    /// [`Chooser::done_moved`] (unless the replacement gave it first); its miss concerns the peer
    /// only (the replacement stands).
    pub fn moved_ended(&mut self, b: u64, p: AgentId) -> bool {
        let Some(i) = self.moved.iter().position(|x| *x == (b, p)) else { return false };
        self.moved.swap_remove(i);
        if !self.moved.iter().any(|(_, x)| *x == p) {
            self.cut.retain(|x| *x != p);
        }
        // Kept for this read's `done_moved`, if it comes next; those of reads ended before go.
        let moved = &self.moved;
        self.rated_at_move.retain(|r| *r == (b, p) || moved.contains(r));
        true
    }

    /// Peers whose connection to cut now: every read on the wire from them is one moved elsewhere
    /// whose block is held since (its replacement gave it), so all they can still give is a
    /// duplicate, while they hold a flow, a fetcher thread and the peer's uplink (a 4 MiB block at a
    /// slow host's pace: up to 13 s; at the pull's end, its threads are joined). A peer read by this
    /// agent for a block it lacks is left alone: its reads are the only ones in flight there or are
    /// still wanted. Nothing moved: nothing cut. Peers already being cut ([`Chooser::cutting`]) are
    /// not named again; one whose cut could not be made is named until it is.
    pub fn to_cut(&self) -> Vec<AgentId> {
        let mut v: Vec<AgentId> = Vec::new();
        for (_, p) in &self.moved {
            let only_duplicates = self.moved.iter().all(|(b, x)| x != p || self.holds(*b)) && !self.in_flight.values().any(|f| *f == Origin::Peer(*p));
            if only_duplicates && !self.cut.contains(p) && !v.contains(p) {
                v.push(*p);
            }
        }
        v
    }

    /// The connection to `p` (named by [`Chooser::to_cut`]) is being cut: the misses of its reads
    /// still on the wire are this agent's doing ([`Chooser::is_cut`]) until the last of them ends.
    pub fn cutting(&mut self, p: AgentId) {
        if !self.cut.contains(&p) {
            self.cut.push(p);
        }
    }

    /// Whether the reads from `p` still on the wire are being cut ([`Chooser::to_cut`]): their
    /// misses are this agent's doing, not the peer's, and say nothing of it.
    pub fn is_cut(&self, p: AgentId) -> bool {
        self.cut.contains(&p)
    }

    /// A read moved elsewhere gave block `b` (from `p`, verified) before its replacement: held now;
    /// the replacement stays in flight until it ends, a duplicate.
    pub fn done_moved(&mut self, b: u64, p: AgentId, bytes: u64, secs: f64) {
        match self.rated_at_move.iter().position(|r| *r == (b, p)) {
            // Its move rated the peer already: one read, one sample.
            Some(i) => {
                self.rated_at_move.swap_remove(i);
                self.busy_since.remove(&p);
            }
            None => self.rated(p, bytes, secs),
        }
        // Not this agent's own time: the peer's, known to be slow.
        self.got(b, 0, secs);
    }

    /// Block `b` is held, `bytes` taken in `secs`.
    fn got(&mut self, b: u64, bytes: u64, secs: f64) {
        if bytes > 0 {
            let sample = secs / bytes as f64;
            self.own_secs_per_byte = Some(self.own_secs_per_byte.map_or(sample, |o| 0.75 * o + 0.25 * sample));
            self.block_bytes = self.block_bytes.max(bytes);
        }
        if let Some(h) = self.have.get_mut(b as usize) {
            // Counted as it changes: the pipeline's planner asks `held` every round.
            self.held += u64::from(!*h);
            *h = true;
        }
        self.debug_check();
    }

    /// Fetching `b` failed: refused or gone peer (try elsewhere), or a corrupt block (`bad`: never ask
    /// that peer again). Returns the source it was asked from.
    pub fn failed(&mut self, b: u64, bad: bool) -> Option<Origin> {
        let from = self.in_flight.remove(&b)?;
        self.since.remove(&b);
        if let (Origin::Peer(p), true) = (from, bad) {
            self.avoid.insert(p, ());
        }
        Some(from)
    }

    /// Never fetch from `p` again (a read moved away from it failed or was corrupt: its replacement
    /// stands, so [`Chooser::failed`] is not for it).
    pub fn avoid(&mut self, p: AgentId) {
        self.avoid.insert(p, ());
    }

    /// A peer is gone: every fetch from it failed.
    pub fn peer_gone(&mut self, p: AgentId) -> Vec<u64> {
        let mut lost: Vec<u64> = self.in_flight.iter().filter(|(_, f)| **f == Origin::Peer(p)).map(|(b, _)| *b).collect();
        lost.sort_unstable();
        for b in &lost {
            self.in_flight.remove(b);
            self.since.remove(b);
        }
        self.moved.retain(|(_, x)| *x != p);
        self.rated_at_move.retain(|(_, x)| *x != p);
        self.cut.retain(|x| *x != p);
        self.avoid.insert(p, ());
        lost
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A chooser that looks `window` blocks ahead, fetches from `peer_flows` peers at once, and was
    /// told that `published` blocks are published; the builders after it say what else differs.
    fn chooser(window: u64, peer_flows: usize, published: u64) -> Chooser {
        let mut c = Chooser::new(window, peer_flows);
        c.published(published);
        c
    }

    /// Each `(block, peer, secs)` in turn: the block chosen from that peer, its only holder, and
    /// arrived, 1000 bytes in `secs` (how a test rates peers).
    fn served(c: &mut Chooser, reads: &[(u64, AgentId, f64)]) {
        for &(b, p, secs) in reads {
            assert_eq!(c.choose(b, &Answer::Peers(vec![p])), Some(Origin::Peer(p)), "block {b} from peer {p}");
            c.done(b, 1000, secs);
        }
    }

    /// A chooser of 16 blocks, two peer flows two deep, that knows its own pace: block 0 came from
    /// the relay, 1000 bytes in 1 s (what moving an overdue read is measured against).
    fn paced(t: Instant) -> Chooser {
        let mut c = chooser(16, 2, 16).with_depth(2);
        assert_eq!(c.choose_at(0, &Answer::Relay, t), Some(Origin::Relay));
        c.done(0, 1000, 1.0);
        c
    }

    #[test]
    fn what_an_agent_tells_the_tracker_is_what_its_chooser_accepts() {
        let mut c = chooser(16, 2, 16).with_depth(2);
        assert_eq!(c.fetching(), Fetching { may_claim: true, open: Vec::new(), flows_free: 2 });
        assert_eq!(c.choose(0, &Answer::Peers(vec![4])), Some(Origin::Peer(4)));
        assert_eq!(c.choose(1, &Answer::Relay), Some(Origin::Relay));
        assert_eq!(c.fetching(), Fetching { may_claim: true, open: vec![4], flows_free: 1 }, "room for a second read from peer 4 and on the relay's flow");
        assert_eq!(c.choose(2, &Answer::Peers(vec![4])), Some(Origin::Peer(4)));
        assert_eq!(c.choose(3, &Answer::Relay), Some(Origin::Relay));
        assert_eq!(c.fetching(), Fetching { may_claim: false, open: Vec::new(), flows_free: 1 }, "peer 4's connection is at its depth");
        assert_eq!(c.choose(4, &Answer::Peers(vec![5])), Some(Origin::Peer(5)));
        assert_eq!(c.fetching(), Fetching { may_claim: false, open: vec![5], flows_free: 0 });
        assert_eq!(c.choose(5, &Answer::Peers(vec![6])), None, "no flow free: the tracker was told");
        // Peer 4's first read arrives; peer 5's turns out corrupt while a second read from it is out.
        c.done(0, 1, 1.0);
        assert_eq!(c.choose(6, &Answer::Peers(vec![5])), Some(Origin::Peer(5)));
        assert_eq!(c.fetching(), Fetching { may_claim: false, open: vec![4], flows_free: 0 });
        c.failed(4, true);
        assert_eq!(c.fetching(), Fetching { may_claim: false, open: vec![4], flows_free: 0 }, "peer 5 has room on its connection, but it is avoided: never offered as open");
    }

    #[test]
    fn relay_fetch_slots() {
        let mut c = chooser(8, 2, 8).with_relay_fetches(3);
        assert_eq!((c.relay_slots(), c.peer_slots()), (3, 2));
        for b in 0..3 {
            assert_eq!(c.choose(b, &Answer::Relay), Some(Origin::Relay));
        }
        assert_eq!(c.choose(3, &Answer::Relay), None);
        assert!(!c.may_claim() && c.has_free_slot());
        c.done(0, 1, 1.0);
        assert_eq!(c.relay_slots(), 1);
    }

    #[test]
    fn chooser_stays_in_its_window_and_within_its_slots() {
        let mut c = chooser(3, 1, 10);
        assert_eq!(c.wanted(|_| 0), vec![0, 1, 2]);
        assert_eq!(c.choose(0, &Answer::Relay), Some(Origin::Relay));
        assert_eq!(c.choose(1, &Answer::Wait), None);
        assert_eq!(c.wanted(|_| 0), vec![1, 2]);
        assert_eq!(c.choose(2, &Answer::Peers(vec![5])), Some(Origin::Peer(5)));
        assert!(c.wanted(|_| 0).is_empty(), "both slots busy");
        c.done(0, 100, 1.0);
        c.written(1);
        assert_eq!(c.wanted(|_| 0), vec![1, 3]);
        assert_eq!(c.wanted(|b| if b == 1 { 5 } else { 0 }), vec![3, 1], "rarest first");
        assert_eq!(c.held(), 1);
    }

    #[test]
    fn the_window_looks_further_ahead_by_the_room_the_serve_cache_does_not_use_yet() {
        let mut c = chooser(3, 8, 20).with_relay_fetches(8).with_cache_room(4);
        assert_eq!(c.window_now(), 7, "nothing handed on: the cache's four blocks are the window's");
        assert_eq!(c.wanted(|_| 0), (0..7).collect::<Vec<_>>());
        for b in 0..3 {
            assert_eq!(c.choose(b, &Answer::Relay), Some(Origin::Relay));
            c.done(b, 10, 1.0);
        }
        c.written(3);
        assert_eq!(c.window_now(), 4, "three handed on, in the cache: one block of room left");
        assert_eq!(c.wanted(|_| 0), (3..7).collect::<Vec<_>>(), "the window's end stays where it was: blocks in memory stay within window and cache");
        for b in 3..6 {
            assert_eq!(c.choose(b, &Answer::Relay), Some(Origin::Relay));
            c.done(b, 10, 1.0);
        }
        c.written(6);
        assert_eq!(c.window_now(), 3, "the cache is full: the window alone");
        assert_eq!(c.wanted(|_| 0), vec![6, 7, 8]);
        let wide = Chooser::new(limits::WINDOW_BLOCKS_MAX - 1, 1).with_cache_room(1 << 20);
        assert_eq!(wide.window_now(), limits::WINDOW_BLOCKS_MAX, "never wider than the largest window");
        assert_eq!(Chooser::new(3, 1).window_now(), 3, "no cache (a pull from the relay alone, or an agent that does not serve): the window as asked");
    }

    #[test]
    fn the_windows_own_blocks_are_asked_for_before_those_of_the_caches_room() {
        let c = chooser(2, 8, 10).with_cache_room(3);
        // Blocks 2..5 rarer than 0 and 1 (a lower order): the window's own still come first, so that
        // the blocks the replica needs next are fetched while their holders still keep them.
        assert_eq!(c.wanted(|b| if b < 2 { 9 } else { 10 - b }), vec![0, 1, 4, 3, 2]);
        assert_eq!(c.window_end(), 2, "what the agent tells the relay, which answers in the same order");
    }

    #[test]
    fn reads_deepen_on_the_flows_in_use_and_a_new_peer_waits_for_a_free_flow() {
        let mut c = chooser(16, 2, 16).with_depth(3).with_relay_fetches(1);
        assert_eq!((c.relay_slots(), c.peer_slots()), (3, 6));
        assert_eq!(c.choose(0, &Answer::Peers(vec![1])), Some(Origin::Peer(1)));
        assert_eq!(c.choose(1, &Answer::Peers(vec![1, 2])), Some(Origin::Peer(2)), "a second flow before a deeper first one");
        assert_eq!(c.choose(2, &Answer::Peers(vec![3])), None, "two flows in use: a third peer waits");
        assert_eq!(c.choose(2, &Answer::Peers(vec![3, 1])), Some(Origin::Peer(1)), "pipelined on a flow in use");
        assert_eq!(c.choose(3, &Answer::Peers(vec![1])), Some(Origin::Peer(1)));
        assert_eq!(c.choose(4, &Answer::Peers(vec![1])), None, "peer 1 has three reads in flight: the depth");
        assert_eq!(c.peer_slots(), 2);
        for b in 5..8 {
            assert_eq!(c.choose(b, &Answer::Relay), Some(Origin::Relay), "three reads on the relay's flow");
        }
        assert!(!c.may_claim());
        c.done(1, 10, 1.0);
        assert_eq!(c.choose(8, &Answer::Peers(vec![3])), Some(Origin::Peer(3)), "peer 2's flow is free: a new peer may take it");
    }

    #[test]
    fn a_holder_that_refused_is_passed_over_for_a_while() {
        let t = Instant::now();
        let mut c = chooser(10, 2, 10);
        c.refused(4, t);
        assert_eq!(c.choose_at(0, &Answer::Peers(vec![4, 5]), t), Some(Origin::Peer(5)));
        assert_eq!(c.choose_at(1, &Answer::Peers(vec![4]), t), None, "its only holder is busy: another block takes the slot");
        assert_eq!(c.choose_at(1, &Answer::Peers(vec![4]), t + BUSY_BACKOFF), Some(Origin::Peer(4)));
        c.done(1, 10, 1.0);
        c.refused(4, t + BUSY_GIVE_UP);
        assert!(!c.avoids(4), "it served a block since: the clock restarts");
        c.refused(4, t + 2 * BUSY_GIVE_UP);
        assert!(!c.avoids(4), "refusals far apart are not a streak");
        let start = t + 3 * BUSY_GIVE_UP;
        let mut at = start;
        while at < start + BUSY_GIVE_UP {
            c.refused(4, at);
            assert!(!c.avoids(4));
            at += BUSY_BACKOFF;
        }
        c.refused(4, at);
        assert!(c.avoids(4), "busy at every ask for {BUSY_GIVE_UP:?} without serving anything: avoided");
    }

    #[test]
    fn one_block_that_arrived_at_once_does_not_make_the_other_peers_slow() {
        let mut c = chooser(100, 100, 100);
        // Peers 1–3 at their fair share (1000 B/s); peer 4's second block was already in the socket's
        // buffer (a millisecond): with the mean as the yardstick, 1–3 fell below a quarter of it.
        served(&mut c, &[(0, 1, 1.0), (1, 2, 1.0), (2, 3, 1.0), (3, 4, 1.0), (4, 1, 1.0), (5, 2, 1.0), (6, 3, 1.0), (7, 4, 0.001)]);
        assert_eq!(c.choose(10, &Answer::Peers(vec![1, 4])), Some(Origin::Peer(1)), "peer 1 is not slow: the first of two equally loaded is taken");
        // With two rated peers only, the burst does not make the other one slow either.
        let mut two = chooser(100, 100, 100);
        served(&mut two, &[(0, 1, 1.0), (1, 4, 1.0), (2, 1, 1.0), (3, 4, 0.001)]);
        assert_eq!(two.choose(10, &Answer::Peers(vec![1, 4])), Some(Origin::Peer(1)), "of two peers, the faster is not the yardstick");
        // A peer five times slower than the rest still is.
        served(&mut c, &[(20, 5, 5.0), (21, 5, 5.0)]);
        assert_eq!(c.choose(22, &Answer::Peers(vec![5, 2])), Some(Origin::Peer(2)), "slow peer 5 avoided");
    }

    #[test]
    fn a_read_that_takes_too_long_moves_elsewhere_and_holds_its_flow_until_it_ends() {
        let t = Instant::now();
        let secs = Duration::from_secs_f64;
        let mut c = paced(t);
        assert_eq!(c.choose_at(15, &Answer::Relay, t), Some(Origin::Relay));
        c.done(15, 10, 0.01);
        assert_eq!(c.choose_at(1, &Answer::Peers(vec![7]), t), Some(Origin::Peer(7)));
        assert!(c.overdue(t + secs(MOVE_AFTER * 0.9)).is_empty(), "within its time (a block takes 1 s here; the short last block at the same rate is no faster)");
        let later = t + secs(MOVE_AFTER + 0.1);
        assert_eq!(c.overdue(later), vec![1]);
        assert_eq!(c.move_away(1, later), Some(7));
        assert!(!c.in_flight(1) && c.wanted(|_| 0).contains(&1), "the block is wanted again");
        assert_eq!(c.fetching().flows_free, 1, "the moved read still holds its flow");
        assert_eq!(c.choose_at(1, &Answer::Peers(vec![7]), t), None, "not from the peer it moved away from");
        assert_eq!(c.choose_at(1, &Answer::Relay, t), Some(Origin::Relay), "a whole holder or the relay instead");
        // The moved read ends first, with the block: held, and the replacement is a duplicate.
        assert!(c.moved_ended(1, 7) && !c.moved_ended(1, 7));
        c.done_moved(1, 7, 1000, 6.0);
        assert!(c.holds(1) && c.in_flight(1), "the replacement is still on the wire");
        assert_eq!(c.fetching().flows_free, 2, "the moved read's flow is free");
        assert_eq!(c.failed(1, false), Some(Origin::Relay));
        assert_eq!(c.held(), 3);
        // A peer rated slow since: its reads move at once (peer 7, rated slow, is one of the four
        // rated: three fast ones keep the median where it was).
        served(&mut c, &[(2, 4, 1.0), (3, 5, 1.0), (4, 4, 1.0), (5, 5, 1.0), (9, 9, 1.0), (10, 9, 1.0)]);
        assert_eq!(c.rates[&7].samples, 1, "a read rated at its move and then ended with its block: one read, one sample");
        assert_eq!(c.choose_at(6, &Answer::Peers(vec![6]), t), Some(Origin::Peer(6)));
        assert_eq!(c.choose_at(7, &Answer::Peers(vec![6]), t), Some(Origin::Peer(6)));
        c.done(6, 1000, 10.0);
        assert!(c.overdue(t).is_empty(), "one slow sample is no rating");
        c.choose_at(8, &Answer::Peers(vec![6]), t);
        c.done(7, 1000, 10.0);
        assert_eq!(c.overdue(t), vec![8], "peer 6 is rated slow: its read still on the wire moves");
        c.move_away(8, t);
        assert!(c.is_slow(6), "a read moved the moment it started, its peer being slow already, does not rate it fast");
        // A peer gone takes its moved reads with it.
        c.peer_gone(6);
        assert_eq!(c.fetching().flows_free, 2);
    }

    #[test]
    fn a_move_rates_its_peer_once_from_the_read_at_the_head_of_its_connection() {
        let t = Instant::now();
        let secs = Duration::from_secs_f64;
        let mut c = paced(t);
        // Three fast peers rated: the yardstick.
        served(&mut c, &[(1, 4, 1.0), (2, 5, 1.0), (3, 6, 1.0), (4, 4, 1.0), (5, 5, 1.0), (6, 6, 1.0)]);
        // Two reads pipelined on one connection to peer 7, both overdue: moved together.
        assert_eq!(c.choose_at(7, &Answer::Peers(vec![7]), t), Some(Origin::Peer(7)));
        assert_eq!(c.choose_at(8, &Answer::Peers(vec![7]), t + secs(0.5)), Some(Origin::Peer(7)));
        let later = t + secs(MOVE_AFTER + 1.0);
        assert_eq!(c.overdue(later), vec![7, 8]);
        c.refused(7, t);
        c.move_away(8, later);
        assert!(!c.rates.contains_key(&7), "the read queued behind another is no sample");
        c.move_away(7, later);
        assert_eq!(c.rates[&7].samples, 1, "the head of the connection is");
        assert!(c.busy_since.contains_key(&7), "a move is no block served: a refusal streak goes on");
        assert!(!c.is_slow(7), "one slow episode is one sample, no rating");
        // The cut ends both; a second slow episode rates the peer slow.
        assert!(c.moved_ended(7, 7) && c.moved_ended(8, 7));
        assert_eq!(c.choose_at(9, &Answer::Peers(vec![7]), later), Some(Origin::Peer(7)));
        c.move_away(9, later + secs(MOVE_AFTER + 1.0));
        assert!(c.is_slow(7));
    }

    #[test]
    fn moved_reads_whose_blocks_are_held_are_cut_once_they_are_cut() {
        let t = Instant::now();
        let secs = Duration::from_secs_f64;
        let mut c = paced(t);
        assert!(c.to_cut().is_empty(), "nothing moved: nothing cut");
        assert_eq!(c.choose_at(1, &Answer::Peers(vec![7]), t), Some(Origin::Peer(7)));
        assert_eq!(c.choose_at(2, &Answer::Peers(vec![7]), t), Some(Origin::Peer(7)));
        assert!(c.to_cut().is_empty(), "reads in flight, none moved");
        let later = t + secs(MOVE_AFTER + 0.1);
        assert_eq!(c.overdue(later), vec![1, 2]);
        assert_eq!(c.move_away(1, later), Some(7));
        assert!(c.to_cut().is_empty(), "block 1 is not held yet (and block 2 is still wanted from peer 7)");
        assert_eq!(c.choose_at(1, &Answer::Relay, t), Some(Origin::Relay));
        c.done(1, 1000, 1.0);
        assert!(c.to_cut().is_empty(), "block 2 is still wanted from peer 7 on the same connection");
        assert_eq!(c.move_away(2, later), Some(7));
        assert!(c.to_cut().is_empty(), "block 2 moved but not held");
        assert_eq!(c.choose_at(2, &Answer::Relay, t), Some(Origin::Relay));
        c.done(2, 1000, 1.0);
        assert_eq!(c.to_cut(), vec![7], "every read from peer 7 is a duplicate now");
        assert!(!c.is_cut(7), "named, not cut yet");
        assert_eq!(c.to_cut(), vec![7], "named until it is cut");
        c.cutting(7);
        assert!(c.to_cut().is_empty(), "being cut: named no more");
        assert!(c.is_cut(7));
        // The cut reads end without their blocks: the flows are free, and peer 7 is cut no more once
        // its last read ended (that its misses are not held against it is the pull's, `pipeline`).
        assert!(c.moved_ended(1, 7));
        assert!(c.is_cut(7), "a read from it is still on the wire");
        assert!(c.moved_ended(2, 7));
        assert!(!c.is_cut(7));
        assert_eq!(c.fetching().flows_free, 2);
        assert_eq!(c.held(), 3);
    }

    #[test]
    fn chooser_prefers_the_least_loaded_fast_peer_and_drops_bad_ones() {
        let mut c = chooser(100, 100, 100);
        // Peer 1 fast, peer 2 slow, peer 3 fast: two samples each.
        served(&mut c, &[(0, 1, 1.0), (1, 2, 20.0), (2, 3, 1.0), (3, 1, 1.0), (4, 2, 20.0), (5, 3, 1.0)]);
        assert_eq!(c.choose(10, &Answer::Peers(vec![2, 1])), Some(Origin::Peer(1)), "slow peer 2 avoided");
        assert_eq!(c.choose(11, &Answer::Peers(vec![1, 3])), Some(Origin::Peer(3)), "least loaded of the fast");
        assert_eq!(c.choose(12, &Answer::Peers(vec![2])), Some(Origin::Peer(2)), "a slow peer still serves when it is the only holder");
        assert_eq!(c.failed(12, true), Some(Origin::Peer(2)));
        assert_eq!(c.choose(13, &Answer::Peers(vec![2])), None, "a peer that sent a bad block is never asked again");
        let mut gone = c.peer_gone(1);
        gone.sort();
        assert_eq!(gone, vec![10], "the fetches from peer 1 failed with it");
        assert_eq!(c.choose(14, &Answer::Peers(vec![1])), None);
    }
}
