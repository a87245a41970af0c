//! Flat fan-out, decided without I/O: where each block comes from once agents serve each other.
//!
//! The design is a swarm with a tracker, the shape of Uber's Kraken: the relay is the **seed** (it has
//! every block) and the **tracker** (it knows which agents of a generation hold which blocks); agents
//! fetch each block from a peer that holds it whenever one does, and from the relay only when none
//! does. The tracker hands each block to the relay's link once — the first agent to ask *claims* it and
//! everyone else waits for a peer copy — the way a BitTorrent super-seed gives out each piece once. So
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

use std::collections::HashMap;
use std::time::{Duration, Instant};

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
    /// No peer holds it and nobody is fetching it from the relay: fetch it from the relay (the claim
    /// is yours).
    Relay,
    /// These peers hold it and can serve the asker: a few of them, a different few for different
    /// askers, those it would open a new connection to first.
    Peers(Vec<AgentId>),
    /// Another agent is fetching it from the relay right now: ask again soon.
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

/// Most holders named in one answer.
pub const PEERS_PER_ANSWER: usize = 4;
/// Most holders of a block looked at for one answer, from a different place for every answer: with
/// thousands of holders per block, an answer must not cost a scan of all of them (at 10 000 agents
/// asking every few milliseconds, that is the relay's whole CPU). When these are all full, the asker
/// waits and asks again, and sees another stretch of holders.
pub const HOLDERS_LOOKED_AT_MAX: usize = 16 * PEERS_PER_ANSWER;
/// Most flows the relay sends blocks on at once. Few, so that each new block leaves the relay fast and
/// starts spreading among agents: with one relay flow per agent, a thousand agents would each get a
/// thousandth of the relay's uplink, and every new block would be held back by its slow first copy.
pub const RELAY_FLOWS_MAX: usize = 4;
/// Claims per relay flow: an agent keeps this many reads in flight on one connection
/// ([`limits::READS_IN_FLIGHT_PER_CONNECTION`]), so that the flow never idles between blocks.
pub const CLAIMS_PER_FLOW: usize = limits::READS_IN_FLIGHT_PER_CONNECTION;
/// How long a holder named first to an asker counts as one more upload on it, unless its next load
/// report comes sooner: about the time the asker's request and the holder's report take through busy
/// queues (a shaped link queues up to 100 ms each way). An asker that went elsewhere leaves a
/// reservation behind until then: the holder may look full to new askers for that long (chosen with
/// the simulator: 250 ms against 0, 150 and 500 ms at 8 and 64 agents).
pub const NAMED_HOLD: Duration = Duration::from_millis(250);
/// A relay claim not completed within this is given to the next agent that asks (the claimer is slow
/// or dead): the repair that keeps one slow host from holding a block back from everyone.
pub const CLAIM_TIMEOUT: Duration = Duration::from_secs(5);

/// The relay's view of a generation's agents and what they hold.
#[derive(Debug)]
pub struct Tracker {
    /// Per block: the agents that hold it, verified.
    holders: Vec<Vec<AgentId>>,
    /// Per block: the agent fetching it from the relay, and since when.
    claims: HashMap<u64, (AgentId, Instant)>,
    /// Agents present, and whether each serves what it holds (`join --no-serve` does not).
    alive: HashMap<AgentId, bool>,
    /// Blocks each present agent has received (served or not): who still needs blocks.
    received: HashMap<AgentId, u64>,
    /// Per present agent: the blocks it received, and those it is listed in `holders` for (every
    /// per-agent question answered without scanning a block's holders: thousands of them per block).
    got: HashMap<AgentId, Bits>,
    listed: HashMap<AgentId, Bits>,
    /// Blocks in the snapshot, once the relay knows.
    total: Option<u64>,
    /// Present agents that have received every block (kept as a count: `locate` needs it per call).
    complete: usize,
    relay_grants: u64,
    /// Uploads each agent last reported serving: holders with a free upload slot are named first.
    uploads: HashMap<AgentId, u32>,
    /// Per holder: the askers it was named first to since its last load report, and when. Reports
    /// arrive a round trip late; without counting what it hands out, the tracker names the same idle
    /// holder to every asker in that time and all but the first are refused (herding).
    named: HashMap<AgentId, Vec<(AgentId, Instant)>>,
    /// Turns with every answer, so that an asker that was refused sees other holders next time.
    rotor: u64,
    /// Uploads an agent serves at once ([`UPLOADS_MAX`]; another number only in the simulator).
    uploads_max: usize,
}

impl Default for Tracker {
    fn default() -> Tracker {
        Tracker::new(0)
    }
}

impl Tracker {
    /// A tracker for a snapshot of `blocks` blocks (it may grow while the relay captures).
    pub fn new(blocks: u64) -> Tracker {
        Tracker {
            holders: vec![Vec::new(); blocks as usize],
            claims: HashMap::new(),
            alive: HashMap::new(),
            received: HashMap::new(),
            got: HashMap::new(),
            listed: HashMap::new(),
            total: None,
            complete: 0,
            relay_grants: 0,
            uploads: HashMap::new(),
            named: HashMap::new(),
            rotor: 0,
            uploads_max: UPLOADS_MAX,
        }
    }

    /// A tracker for agents that serve `n` uploads at once (the simulator tries other numbers than
    /// the agents' [`UPLOADS_MAX`]).
    pub fn with_uploads_max(mut self, n: usize) -> Tracker {
        self.uploads_max = n.max(1);
        self
    }

    /// The relay published more blocks.
    pub fn published(&mut self, blocks: u64) {
        if blocks as usize > self.holders.len() {
            self.holders.resize(blocks as usize, Vec::new());
        }
    }

    /// The snapshot has exactly `blocks` blocks (the relay has the whole RDB).
    pub fn set_total(&mut self, blocks: u64) {
        self.published(blocks);
        if self.total != Some(blocks) {
            self.total = Some(blocks);
            self.complete = self.received.values().filter(|got| **got >= blocks).count();
        }
    }

    fn is_complete(&self, received: u64) -> bool {
        self.total.is_some_and(|t| received >= t)
    }

    /// An agent joined; `serves` says whether it serves the blocks it holds to others.
    pub fn join(&mut self, a: AgentId, serves: bool) {
        self.alive.insert(a, serves);
        self.received.insert(a, 0);
        self.got.insert(a, Bits::default());
        self.listed.insert(a, Bits::default());
    }

    /// `a` is no longer named as a holder of `b`.
    fn unlist(&mut self, a: AgentId, b: u64) {
        if let Some(h) = self.holders.get_mut(b as usize) {
            h.retain(|x| *x != a);
        }
        if let Some(l) = self.listed.get_mut(&a) {
            l.set(b, false);
        }
    }

    /// `a` is no longer named as a holder of anything.
    fn unlist_all(&mut self, a: AgentId) {
        let blocks: Vec<u64> = self.listed.get(&a).map(Bits::ones).unwrap_or_default();
        for b in blocks {
            self.unlist(a, b);
        }
    }

    /// An agent left, finished or was dropped: it serves nothing any more, and its claims are free.
    pub fn leave(&mut self, a: AgentId) {
        self.alive.remove(&a);
        self.uploads.remove(&a);
        self.named.remove(&a);
        for askers in self.named.values_mut() {
            askers.retain(|(x, _)| *x != a);
        }
        if let Some(got) = self.received.remove(&a) {
            if self.is_complete(got) {
                self.complete -= 1;
            }
        }
        self.unlist_all(a);
        self.got.remove(&a);
        self.listed.remove(&a);
        self.claims.retain(|_, (c, _)| *c != a);
    }

    /// Agent `a` holds block `b`, verified, at `now`. Its other claims' clocks restart: an agent keeps
    /// several reads in flight on its relay flow ([`CLAIMS_PER_FLOW`]), and the last of them waits
    /// behind the others — a claimer that completes blocks is not slow, one that completes none for
    /// [`CLAIM_TIMEOUT`] is.
    pub fn have(&mut self, a: AgentId, b: u64, now: Instant) {
        let Some(&serves) = self.alive.get(&a) else { return };
        if let (Some(h), Some(got)) = (self.holders.get_mut(b as usize), self.got.get_mut(&a)) {
            if !got.get(b) {
                got.set(b, true);
                if serves {
                    h.push(a);
                    self.listed.entry(a).or_default().set(b, true);
                }
                let got = self.received.entry(a).or_default();
                *got += 1;
                let got = *got;
                if self.total == Some(got) {
                    self.complete += 1;
                }
            }
        }
        if self.claims.get(&b).is_some_and(|(c, _)| *c == a) {
            self.claims.remove(&b);
            for (c, since) in self.claims.values_mut() {
                if *c == a {
                    *since = now;
                }
            }
        }
    }

    /// Agent `a` serves `uploads` uploads right now (it reports when the number changes). The report
    /// counts the askers it was named to that have reached it: their reservations end.
    pub fn load(&mut self, a: AgentId, uploads: u32) {
        if self.alive.contains_key(&a) {
            self.uploads.insert(a, uploads);
            self.named.remove(&a);
        }
    }

    /// Uploads holder `x` serves or will soon: its last report plus the distinct askers named to it
    /// since, within [`NAMED_HOLD`].
    fn expected_uploads(&self, x: AgentId, now: Instant) -> usize {
        let reported = self.uploads.get(&x).map_or(0, |u| *u as usize);
        let named = self.named.get(&x).map_or(0, |v| v.iter().filter(|(_, at)| now.saturating_duration_since(*at) < NAMED_HOLD).count());
        reported + named
    }

    /// Agent `a` could not get `b` from peer `p` (refused, corrupt, gone): the tracker forgets that `p`
    /// holds it, so that nobody else is sent there for it.
    pub fn not_at(&mut self, p: AgentId, b: u64) {
        if self.listed.get(&p).is_some_and(|l| l.get(b)) {
            self.unlist(p, b);
        }
    }

    /// `p` sent a block that failed its checksum: it is named for no block any more (it stays a member
    /// and may still fetch). A corrupt block is proof of a broken or hostile peer, not bad luck.
    pub fn forget(&mut self, p: AgentId) {
        self.unlist_all(p);
    }

    /// Where `a` should fetch block `b`, given what it fetches now (`f`; see [`Fetching`]). Without
    /// `f.may_claim` the relay is not offered. A holder is named if the asker can use it: one it
    /// reads from already (room on that connection), or, while it may open a flow, one with a free
    /// upload slot as far as the tracker knows. Holders that exist but that the asker cannot use now
    /// give `Wait` (never a claim: the block has a source). When the asker is expected to open a
    /// connection to the first holder named, `f` is updated as the asker's chooser will be, so that
    /// the next answers of one question agree with it.
    pub fn locate(&mut self, a: AgentId, b: u64, f: &mut Fetching, now: Instant) -> Answer {
        let Some(h) = self.holders.get(b as usize) else { return Answer::Wait };
        if h.iter().any(|x| *x != a) {
            // A different window of holders for each asker, so that load spreads over all of them
            // (and the answer costs O(PEERS_PER_ANSWER), not O(holders), for large fleets).
            self.rotor = self.rotor.wrapping_add(1);
            let mix = (u64::from(a) ^ b.rotate_left(32) ^ self.rotor.rotate_left(17)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
            let start = (mix >> 16) as usize % h.len();
            // Holders the asker reads from already take one more read on that connection whatever
            // their load. Others only while the asker may open a flow, and only with a free upload
            // slot: the last report plus the askers named to it since (reports arrive a round trip
            // late; without counting what it hands out, the tracker would name the same idle holder
            // to every asker in that time, and all but the first would be refused). Taken lazily,
            // and from a bounded stretch: a block may have thousands of holders.
            let listed = |x: &AgentId| self.listed.get(x).is_some_and(|l| l.get(b));
            let on_open: Vec<AgentId> = f.open.iter().copied().filter(|x| *x != a && listed(x)).collect();
            let fresh: Vec<AgentId> = if f.flows_free > 0 {
                (0..h.len().min(HOLDERS_LOOKED_AT_MAX))
                    .map(|i| h[(start + i) % h.len()])
                    .filter(|x| *x != a && !f.open.contains(x) && self.expected_uploads(*x, now) < self.uploads_max)
                    .take(PEERS_PER_ANSWER)
                    .collect()
            } else {
                Vec::new()
            };
            // The asker's chooser takes a holder it does not read from yet before deepening a
            // connection: the first fresh one. Count it there until that holder's next report.
            if let Some(&p) = fresh.first() {
                let askers = self.named.entry(p).or_default();
                askers.retain(|(_, at)| now.saturating_duration_since(*at) < NAMED_HOLD);
                if let Some(r) = askers.iter_mut().find(|(x, _)| *x == a) {
                    r.1 = now;
                } else {
                    askers.push((a, now));
                }
                f.flows_free -= 1;
                f.open.push(p);
            }
            let named: Vec<AgentId> = fresh.into_iter().chain(on_open).take(PEERS_PER_ANSWER).collect();
            // None usable: wait for one (a second copy from the relay would cost the master's host
            // more than its one copy; see docs/design/flat-fanout.md on late joiners).
            return if named.is_empty() { Answer::Wait } else { Answer::Peers(named) };
        }
        self.claim(a, b, f, now)
    }

    /// The relay for `a`'s block `b`, if one of its flows is free for `a` and nobody else fetches the
    /// block from it.
    fn claim(&mut self, a: AgentId, b: u64, f: &Fetching, now: Instant) -> Answer {
        // Claims that went stale (slow or dead claimer) free their block and their relay flow.
        let alive = &self.alive;
        self.claims.retain(|_, (c, since)| alive.contains_key(c) && now.saturating_duration_since(*since) < CLAIM_TIMEOUT);
        // The relay's flows are shared out among the agents still pulling: with one flow each, every
        // agent gets new blocks from the relay at once and forwards them, instead of one agent taking
        // all the fresh blocks while the others wait for it to finish each one.
        let pulling = self.alive.len().saturating_sub(self.complete).max(1);
        let per_agent = (RELAY_FLOWS_MAX / pulling).max(1) * CLAIMS_PER_FLOW;
        let mine = self.claims.values().filter(|(c, _)| *c == a).count();
        match self.claims.get(&b) {
            _ if !f.may_claim => Answer::Wait,
            Some((c, _)) if *c != a => Answer::Wait,
            None if self.claims.len() >= RELAY_FLOWS_MAX * CLAIMS_PER_FLOW || mine >= per_agent => Answer::Wait,
            _ => {
                self.claims.insert(b, (a, now));
                self.relay_grants += 1;
                Answer::Relay
            }
        }
    }

    /// How many agents hold block `b`: agents fetch the rarest blocks of their window first, so that
    /// different agents work on different blocks and every block spreads.
    pub fn holders(&self, b: u64) -> usize {
        self.holders.get(b as usize).map_or(0, Vec::len)
    }

    /// Agents other than `a` still missing blocks (or all, while the snapshot's size is unknown): an
    /// agent that finished keeps serving while this is not zero.
    pub fn needing(&self, a: AgentId) -> usize {
        self.received.iter().filter(|(x, got)| **x != a && !matches!(self.total, Some(t) if **got >= t)).count()
    }

    /// Agents present.
    pub fn agents(&self) -> usize {
        self.alive.len()
    }

    /// Blocks the relay was asked to serve so far (copies of the snapshot = this / blocks).
    pub fn relay_grants(&self) -> u64 {
        self.relay_grants
    }
}

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
    /// Sum of the rates of peers with at least two samples, and how many: their mean is the yardstick
    /// for "slow" (kept incrementally: a choice must not cost a sort of every peer's rate).
    rate_sum: f64,
    rated: u32,
    avoid: HashMap<AgentId, ()>,
    /// Peers that refused a fetch (busy), until when they are passed over.
    busy: HashMap<AgentId, Instant>,
    /// Peers that have refused in a row since this moment (and last refused at the second), without
    /// serving us a block in between.
    busy_since: HashMap<AgentId, (Instant, Instant)>,
}

/// Peers an agent fetches from at once (besides the relay), and uploads an agent serves at once
/// (it refuses more: the asker goes to another holder). Each is one flow, with up to
/// [`limits::PEER_READS_IN_FLIGHT`] reads in flight on it. Equal, so that the swarm's download slots
/// match its upload slots; small, so that each flow gets a large share of its links. Chosen with the
/// simulator (at a window of 32): with 2 and 2, 1 000 agents took 1.11× the time of one; with 3 and 2,
/// or 4 and 4, 1.3–1.6×. At the shipped window of 16, 1.16× (docs/results/issue10-simulate). With
/// round trips modelled (issue 22) 3 uploads per agent were worse at N = 8 (docs/results/issue22-simulate/knobs-100mbit-n8.md).
pub const PEER_FETCHES_MAX: usize = 2;
/// See [`PEER_FETCHES_MAX`].
pub const UPLOADS_MAX: usize = 2;

/// How long a holder that refused a fetch (busy) is passed over: a fraction of a block's time on a
/// 100 Mbit/s link, a few blocks' on 1 Gbit/s.
pub const BUSY_BACKOFF: Duration = Duration::from_millis(100);
/// A peer that answers "busy" for this long without serving a block is avoided (see
/// [`Chooser::refused`]).
pub const BUSY_GIVE_UP: Duration = Duration::from_secs(5);
/// Refusals further apart than this are not "in a row" for [`BUSY_GIVE_UP`].
pub const BUSY_STREAK_GAP: Duration = Duration::from_secs(1);

/// A source slower than this fraction of the mean peer rate is avoided while others hold the block.
pub const SLOW_FRACTION: f64 = 0.25;

impl Chooser {
    /// An agent that looks at most `window` blocks ahead of what it has handed on, fetching from at
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
            rate_sum: 0.0,
            rated: 0,
            avoid: HashMap::new(),
            busy: HashMap::new(),
            busy_since: HashMap::new(),
        }
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

    /// Distinct peers with fetches in flight: the flows in use.
    fn peers_fetched_from(&self) -> usize {
        let mut ps: Vec<AgentId> = self.in_flight.values().filter_map(|f| if let Origin::Peer(p) = f { Some(*p) } else { None }).collect();
        ps.sort_unstable();
        ps.dedup();
        ps.len()
    }

    fn peer_fetches(&self) -> usize {
        self.in_flight.values().filter(|f| **f != Origin::Relay).count()
    }

    /// What to tell the tracker of this agent's fetching when locating (see [`Fetching`]): mirrors
    /// what [`Chooser::choose`] will accept from a peer — one it reads from with room on that
    /// connection, or a new one while fewer than `peer_flows` are read from. Peers it avoids are
    /// left out of `open`.
    pub fn fetching(&self) -> Fetching {
        let mut open: Vec<AgentId> = Vec::new();
        let mut flows = 0;
        for p in self.in_flight.values().filter_map(|f| if let Origin::Peer(p) = f { Some(*p) } else { None }) {
            if open.contains(&p) {
                continue;
            }
            open.push(p);
            flows += 1;
        }
        open.retain(|p| self.in_flight.values().filter(|f| **f == Origin::Peer(*p)).count() < self.depth && !self.avoid.contains_key(p));
        let slots = self.peer_fetches() < self.peer_fetches_max();
        Fetching {
            may_claim: self.may_claim(),
            open: if slots { open } else { Vec::new() },
            flows_free: if slots { self.peer_flows.saturating_sub(flows) } else { 0 },
        }
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

    /// The next blocks to locate: not held, not in flight, inside the window — rarest first (by
    /// `holders`, the tracker's count), in order among equals, so that different agents work on
    /// different blocks and every block spreads. Empty when every fetch slot is busy.
    pub fn wanted(&self, holders: impl Fn(u64) -> usize) -> Vec<u64> {
        if !self.has_free_slot() {
            return Vec::new();
        }
        let end = (self.next_write + self.window).min(self.published);
        let mut v: Vec<u64> = (self.next_write..end).filter(|b| !self.have[*b as usize] && !self.in_flight.contains_key(b)).collect();
        v.sort_by_key(|b| holders(*b));
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
                let mean = (self.rated >= 2).then(|| self.rate_sum / f64::from(self.rated));
                let slow = |p: &AgentId| self.rates.get(p).is_some_and(|r| r.samples >= 2 && mean.is_some_and(|m| r.bytes_per_sec < SLOW_FRACTION * m));
                let busy = |p: &AgentId| now.is_some_and(|n| self.is_busy(*p, n));
                let usable: Vec<AgentId> = ps.iter().copied().filter(|p| !self.avoid.contains_key(p) && !busy(p)).collect();
                let fast: Vec<AgentId> = usable.iter().copied().filter(|p| !slow(p)).collect();
                let pool = if fast.is_empty() { usable } else { fast };
                let load = |p: &AgentId| self.in_flight.values().filter(|f| **f == Origin::Peer(*p)).count();
                // A new peer only while fewer than `peer_flows` are fetched from; else another read
                // on a flow that has room. Least loaded first: flows fill before they deepen.
                let flows_full = self.peers_fetched_from() >= self.peer_flows;
                let open = |p: &AgentId| load(p) < self.depth && (load(p) > 0 || !flows_full);
                Origin::Peer(*pool.iter().filter(|p| open(p)).min_by_key(|p| load(p))?)
            }
        };
        self.in_flight.insert(b, from);
        Some(from)
    }

    /// Block `b` arrived from `from` and passed its checksum, `bytes` in `secs`.
    pub fn done(&mut self, b: u64, bytes: u64, secs: f64) {
        if let Some(Origin::Peer(p)) = self.in_flight.remove(&b) {
            self.busy_since.remove(&p);
            let r = self.rates.entry(p).or_default();
            let sample = bytes as f64 / secs.max(1e-6);
            if r.samples >= 2 {
                self.rate_sum -= r.bytes_per_sec;
            }
            // A moving average: a peer that became slow is noticed within a few blocks.
            r.bytes_per_sec = if r.samples == 0 { sample } else { 0.5 * r.bytes_per_sec + 0.5 * sample };
            r.samples += 1;
            if r.samples >= 2 {
                self.rate_sum += r.bytes_per_sec;
                if r.samples == 2 {
                    self.rated += 1;
                }
            }
        }
        if let Some(h) = self.have.get_mut(b as usize) {
            // Counted as it changes: the pipeline's planner asks `held` every round.
            self.held += u64::from(!*h);
            *h = true;
        }
    }

    /// Fetching `b` failed: refused or gone peer (try elsewhere), or a corrupt block (`bad`: never ask
    /// that peer again). Returns the source it was asked from.
    pub fn failed(&mut self, b: u64, bad: bool) -> Option<Origin> {
        let from = self.in_flight.remove(&b)?;
        if let (Origin::Peer(p), true) = (from, bad) {
            self.avoid.insert(p, ());
        }
        Some(from)
    }

    /// A peer is gone: every fetch from it failed.
    pub fn peer_gone(&mut self, p: AgentId) -> Vec<u64> {
        let lost: Vec<u64> = self.in_flight.iter().filter(|(_, f)| **f == Origin::Peer(p)).map(|(b, _)| *b).collect();
        for b in &lost {
            self.in_flight.remove(b);
        }
        self.avoid.insert(p, ());
        lost
    }
}

/// A growable set of block numbers.
#[derive(Debug, Default, Clone)]
struct Bits(Vec<u64>);

impl Bits {
    fn get(&self, b: u64) -> bool {
        self.0.get((b / 64) as usize).is_some_and(|w| w & (1 << (b % 64)) != 0)
    }

    fn set(&mut self, b: u64, on: bool) {
        let i = (b / 64) as usize;
        if i >= self.0.len() {
            if !on {
                return;
            }
            self.0.resize(i + 1, 0);
        }
        if on {
            self.0[i] |= 1 << (b % 64);
        } else {
            self.0[i] &= !(1 << (b % 64));
        }
    }

    fn ones(&self) -> Vec<u64> {
        (0..self.0.len() as u64 * 64).filter(|b| self.get(*b)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    impl Tracker {
        /// Asked by an agent that may claim and open flows to any number of peers.
        fn locate_t(&mut self, a: AgentId, b: u64, now: Instant) -> Answer {
            self.locate(a, b, &mut Fetching { may_claim: true, open: Vec::new(), flows_free: usize::MAX }, now)
        }
        fn have_t(&mut self, a: AgentId, b: u64) {
            self.have(a, b, Instant::now())
        }
    }

    #[test]
    fn no_claim_while_the_relay_slot_is_busy() {
        let t = Instant::now();
        let mut tr = Tracker::new(1);
        tr.join(0, true);
        assert_eq!(tr.locate(0, 0, &mut Fetching::default(), t), Answer::Wait);
        assert_eq!(tr.relay_grants(), 0, "nothing was claimed");
        let mut c = Chooser::new(4, 1);
        c.published(4);
        assert_eq!(c.choose(0, &Answer::Relay), Some(Origin::Relay));
        assert!(!c.may_claim());
        assert_eq!(c.choose(1, &Answer::Relay), None, "one relay fetch at a time");
        assert_eq!(c.choose(1, &Answer::Peers(vec![3])), Some(Origin::Peer(3)));
        assert_eq!(c.choose(2, &Answer::Peers(vec![3])), None, "peer slots full");
        assert!(!c.has_free_slot());
    }

    #[test]
    fn the_relay_serves_each_block_once_and_peers_serve_the_rest() {
        let t = Instant::now();
        let mut tr = Tracker::new(2);
        for a in 0..3 {
            tr.join(a, true);
        }
        assert_eq!(tr.locate_t(0, 0, t), Answer::Relay, "first asker claims block 0");
        assert_eq!(tr.locate_t(1, 0, t), Answer::Wait, "others wait for a peer copy");
        assert_eq!(tr.locate_t(1, 1, t), Answer::Relay, "a different block: agent 1 claims it");
        tr.have_t(0, 0);
        assert_eq!(tr.locate_t(1, 0, t), Answer::Peers(vec![0]));
        assert_eq!(tr.locate_t(2, 0, t), Answer::Peers(vec![0]));
        assert_eq!(tr.relay_grants(), 2);
    }

    #[test]
    fn blocks_published_later_can_be_claimed() {
        let t = Instant::now();
        let mut tr = Tracker::new(1);
        tr.join(0, true);
        assert_eq!(tr.locate_t(0, 3, t), Answer::Wait, "not published yet");
        tr.published(4);
        assert_eq!(tr.locate_t(0, 3, t), Answer::Relay);
    }

    #[test]
    fn the_relays_flows_are_shared_among_the_agents_still_pulling() {
        let t = Instant::now();
        let all = RELAY_FLOWS_MAX * CLAIMS_PER_FLOW;
        let mut tr = Tracker::new(64);
        tr.join(0, true);
        let alone: Vec<Answer> = (0..all as u64 + 1).map(|b| tr.locate_t(0, b, t)).collect();
        assert_eq!(alone.iter().filter(|a| **a == Answer::Relay).count(), all, "an agent alone may use every relay flow, each pipelined");
        let mut tr = Tracker::new(64);
        tr.set_total(64);
        for a in 0..2 {
            tr.join(a, true);
        }
        let first: Vec<Answer> = (0..all as u64).map(|b| tr.locate_t(0, b, t)).collect();
        assert_eq!(first.iter().filter(|a| **a == Answer::Relay).count(), all / 2, "two agents pulling: half each");
        assert_eq!(tr.locate_t(1, all as u64, t), Answer::Relay, "the other agent's share is free");
        for b in 0..64 {
            tr.have_t(1, b);
        }
        assert_eq!(tr.needing(0), 0);
        assert_eq!(tr.locate_t(0, 40, t), Answer::Peers(vec![1]));
        tr.join(2, true);
        tr.leave(1);
        assert_eq!(tr.locate_t(0, 40, t), Answer::Wait, "agents 0 and 2 pull: agent 0 holds its claims");
        tr.have_t(0, 0);
        assert_eq!(tr.locate_t(0, 40, t), Answer::Relay, "a claim completed frees a read on the flow");
    }

    #[test]
    fn a_stale_or_dead_claim_is_handed_on() {
        let t = Instant::now();
        let mut tr = Tracker::new(1);
        tr.join(0, true);
        tr.join(1, true);
        assert_eq!(tr.locate_t(0, 0, t), Answer::Relay);
        assert_eq!(tr.locate_t(1, 0, t + CLAIM_TIMEOUT / 2), Answer::Wait);
        assert_eq!(tr.locate_t(1, 0, t + CLAIM_TIMEOUT), Answer::Relay, "the claimer is too slow: repair from the relay");
        let mut tr = Tracker::new(1);
        tr.join(0, true);
        tr.join(1, true);
        tr.locate_t(0, 0, t);
        tr.leave(0);
        assert_eq!(tr.locate_t(1, 0, t), Answer::Relay, "the claimer died");
        // Pipelined claims: completing one restarts the clock of the others.
        let mut tr = Tracker::new(2);
        tr.join(0, true);
        tr.join(1, true);
        assert_eq!((tr.locate_t(0, 0, t), tr.locate_t(0, 1, t)), (Answer::Relay, Answer::Relay));
        tr.have(0, 0, t + CLAIM_TIMEOUT / 2);
        assert_eq!(tr.locate_t(1, 1, t + CLAIM_TIMEOUT), Answer::Wait, "the claimer makes progress: its next claim stands");
        assert_eq!(tr.locate_t(1, 1, t + CLAIM_TIMEOUT / 2 + CLAIM_TIMEOUT), Answer::Relay, "no progress for the timeout: handed on");
    }

    #[test]
    fn a_departed_or_bad_holder_is_not_named() {
        let t = Instant::now();
        let mut tr = Tracker::new(1);
        for a in 0..3 {
            tr.join(a, true);
        }
        tr.have_t(0, 0);
        tr.have_t(1, 0);
        tr.leave(0);
        assert_eq!(tr.locate_t(2, 0, t), Answer::Peers(vec![1]));
        tr.not_at(1, 0);
        assert_eq!(tr.locate_t(2, 0, t), Answer::Relay);
        tr.have_t(7, 0);
        assert_eq!(tr.locate_t(2, 0, t), Answer::Relay, "an agent that never joined (or left) is not a holder");
        let mut tr = Tracker::new(2);
        for a in 0..2 {
            tr.join(a, true);
            tr.have_t(a, 0);
            tr.have_t(a, 1);
        }
        tr.forget(0);
        assert_eq!((tr.holders(0), tr.holders(1)), (1, 1), "a peer that sent a corrupt block is named for nothing");
    }

    #[test]
    fn a_holder_serving_its_maximum_is_named_only_to_an_agent_reading_from_it() {
        let t = Instant::now();
        let mut tr = Tracker::new(1);
        for a in 0..4 {
            tr.join(a, true);
        }
        tr.have_t(0, 0);
        tr.have_t(1, 0);
        tr.load(0, UPLOADS_MAX as u32);
        let new_reader = || Fetching { may_claim: true, open: Vec::new(), flows_free: 2 };
        assert_eq!(tr.locate(3, 0, &mut new_reader(), t), Answer::Peers(vec![1]), "the full holder is left out");
        tr.load(1, UPLOADS_MAX as u32);
        assert_eq!(tr.locate(3, 0, &mut new_reader(), t), Answer::Wait, "every holder full: wait (never a claim: the block has a source)");
        assert_eq!(tr.relay_grants(), 0);
        let mut reading = Fetching { may_claim: true, open: vec![1], flows_free: 0 };
        assert_eq!(tr.locate(3, 0, &mut reading, t), Answer::Peers(vec![1]), "another read on the connection it has open");
        assert_eq!(reading, Fetching { may_claim: true, open: vec![1], flows_free: 0 }, "no new connection counted");
        tr.load(0, 0);
        assert_eq!(tr.locate(3, 0, &mut Fetching { may_claim: true, open: vec![1], flows_free: 1 }, t), Answer::Peers(vec![0, 1]), "a new holder first, the open one after");
        tr.leave(0);
        tr.load(0, 0);
        assert_eq!(tr.locate(3, 0, &mut new_reader(), t), Answer::Wait, "a departed agent's report is not kept, nor it named");
    }

    #[test]
    fn the_tracker_counts_the_holders_it_names_until_their_next_report() {
        let t = Instant::now();
        let mut tr = Tracker::new(1);
        for a in 0..6 {
            tr.join(a, true);
        }
        tr.have_t(0, 0);
        let reader = || Fetching { may_claim: true, open: Vec::new(), flows_free: 2 };
        // The holder reports nothing yet; askers are named to it up to its upload slots, then wait.
        let mut f = reader();
        assert_eq!(tr.locate(1, 0, &mut f, t), Answer::Peers(vec![0]));
        assert_eq!(f, Fetching { may_claim: true, open: vec![0], flows_free: 1 }, "the asker's new connection, as its chooser will count it");
        assert_eq!(tr.locate(1, 0, &mut reader(), t), Answer::Peers(vec![0]), "the same asker again: one connection, counted once");
        for a in 2..UPLOADS_MAX as AgentId + 1 {
            assert_eq!(tr.locate(a, 0, &mut reader(), t), Answer::Peers(vec![0]));
        }
        let next = UPLOADS_MAX as AgentId + 1;
        assert_eq!(tr.locate(next, 0, &mut reader(), t), Answer::Wait, "its slots are taken by the askers sent there");
        // Its report counts the askers that reached it: theirs end.
        tr.load(0, 1);
        assert_eq!(tr.locate(next, 0, &mut reader(), t), Answer::Peers(vec![0]), "one upload reported: one slot free");
        assert_eq!(tr.locate(next + 1, 0, &mut reader(), t), Answer::Wait);
        // An asker that went elsewhere holds its count only for NAMED_HOLD.
        assert_eq!(tr.locate(next + 1, 0, &mut reader(), t + NAMED_HOLD), Answer::Peers(vec![0]));
    }

    #[test]
    fn what_an_agent_tells_the_tracker_is_what_its_chooser_accepts() {
        let mut c = Chooser::new(16, 2).with_depth(2);
        c.published(16);
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
        c.failed(4, true);
        assert_eq!(c.fetching(), Fetching { may_claim: false, open: Vec::new(), flows_free: 1 }, "an avoided peer is never open");
    }

    #[test]
    fn a_finished_agent_knows_whether_anyone_still_needs_blocks() {
        let mut tr = Tracker::new(2);
        tr.join(0, true);
        tr.join(1, false);
        tr.have_t(0, 0);
        tr.have_t(0, 1);
        assert_eq!(tr.needing(0), 1, "agent 1 has nothing yet");
        assert_eq!(tr.needing(1), 1, "the snapshot's size is not known yet: agent 0 may need more");
        tr.set_total(2);
        assert_eq!(tr.needing(1), 0);
        tr.have_t(1, 0);
        assert_eq!(tr.holders(0), 1, "an agent that does not serve is never named as a holder");
        tr.have_t(1, 1);
        assert_eq!(tr.needing(0), 0);
        tr.join(2, true);
        assert_eq!(tr.needing(0), 1, "a late joiner");
        tr.leave(2);
        assert_eq!((tr.needing(0), tr.agents()), (0, 2));
    }

    #[test]
    fn relay_fetch_slots() {
        let mut c = Chooser::new(8, 2).with_relay_fetches(3);
        c.published(8);
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
    fn holders_are_spread_over_askers() {
        let t = Instant::now();
        let mut tr = Tracker::new(1);
        for a in 0..40 {
            tr.join(a, true);
        }
        for a in 0..20 {
            tr.have_t(a, 0);
        }
        let mut named = std::collections::HashSet::new();
        for a in 20..40 {
            if let Answer::Peers(p) = tr.locate_t(a, 0, t) {
                assert!(p.len() <= PEERS_PER_ANSWER && !p.contains(&a));
                named.extend(p);
            }
        }
        assert!(named.len() > PEERS_PER_ANSWER * 2, "answers name many different holders: {named:?}");
    }

    #[test]
    fn chooser_stays_in_its_window_and_within_its_slots() {
        let mut c = Chooser::new(3, 1);
        c.published(10);
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
    fn reads_deepen_on_the_flows_in_use_and_a_new_peer_waits_for_a_free_flow() {
        let mut c = Chooser::new(16, 2).with_depth(3).with_relay_fetches(1);
        c.published(16);
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
        let mut c = Chooser::new(10, 2);
        c.published(10);
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
    fn chooser_prefers_the_least_loaded_fast_peer_and_drops_bad_ones() {
        let mut c = Chooser::new(100, 100);
        c.published(100);
        // Peer 1 fast, peer 2 slow, peer 3 fast: two samples each.
        for (b, p, secs) in [(0, 1, 1.0), (1, 2, 20.0), (2, 3, 1.0), (3, 1, 1.0), (4, 2, 20.0), (5, 3, 1.0)] {
            c.choose(b, &Answer::Peers(vec![p]));
            c.done(b, 1000, secs);
        }
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
