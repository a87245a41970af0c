//! The relay's side of the swarm: who holds which block, who may take one from the relay, and which
//! holders an asker is sent to. See the crate's documentation for the design.

use crate::bits::Bits;
use crate::{lower_median, mix};
use crate::{AgentId, Answer, Fetching, Origin, UPLOADS_MAX};
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Most holders named in one answer ([`limits::PEERS_PER_ANSWER`]).
pub const PEERS_PER_ANSWER: usize = limits::PEERS_PER_ANSWER;
/// Most holders of a block looked at for one answer, from a different place for every answer
/// ([`limits::HOLDERS_LOOKED_AT_MAX`]: an answer must not cost a scan of thousands).
pub const HOLDERS_LOOKED_AT_MAX: usize = limits::HOLDERS_LOOKED_AT_MAX;
/// Most flows the relay sends blocks on at once ([`limits::RELAY_FLOWS_MAX`]: few, so that each new
/// block leaves the relay fast).
pub const RELAY_FLOWS_MAX: usize = limits::RELAY_FLOWS_MAX;
/// Claims per relay flow: an agent keeps this many reads in flight on one connection
/// ([`limits::READS_IN_FLIGHT_PER_CONNECTION`]), so that the flow never idles between blocks.
pub const CLAIMS_PER_FLOW: usize = limits::READS_IN_FLIGHT_PER_CONNECTION;
/// How long an asker sent to a holder for a new connection counts as one more upload on it, unless
/// the holder reports it arrived sooner ([`limits::TRACKER_NAMED_HOLD`]).
pub const NAMED_HOLD: Duration = limits::TRACKER_NAMED_HOLD;
/// A relay claim not completed within this is given to the next agent that asks
/// ([`limits::RELAY_CLAIM_TIMEOUT`]).
pub const CLAIM_TIMEOUT: Duration = limits::RELAY_CLAIM_TIMEOUT;
/// An agent whose blocks take more than this many times the swarm's median to arrive is slow
/// ([`limits::ARRIVAL_SLOW_RATIO`]; see [`Tracker::arriving`]).
pub const SLOW_RATIO: f64 = limits::ARRIVAL_SLOW_RATIO;

/// The relay's view of a generation's agents and what they hold.
#[derive(Debug)]
pub struct Tracker {
    /// Per block: the agents that hold it, verified, or receive it (served while it arrives; see
    /// `whole`) — and some that no longer count (see `listed`):
    /// an agent is taken off lazily, since a block may have thousands of holders and every agent
    /// drops blocks from its cache.
    holders: Vec<Vec<AgentId>>,
    /// Per block: how many of `holders` are listed.
    live: Vec<usize>,
    /// Per block: how many of the listed hold it whole (the others are receiving it).
    whole: Vec<usize>,
    /// Per block: its relay claim, if any.
    claims: HashMap<u64, Claim>,
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
    /// Uploads each agent last reported serving: only holders with a free upload slot are named to
    /// askers that would open a connection.
    uploads: HashMap<AgentId, u32>,
    /// Per holder: the askers sent there for a new connection that it has not reported yet, and when
    /// (see [`Tracker::load`]). Reports arrive a round trip late; without counting what it hands out,
    /// the tracker names the same idle holder to every asker in that time and all but the first are
    /// refused (herding).
    named: HashMap<AgentId, Vec<(AgentId, Instant)>>,
    /// Turns with every answer, so that an asker that was refused sees other holders next time.
    rotor: u64,
    /// Uploads an agent serves at once ([`UPLOADS_MAX`]; another number only in the simulator).
    uploads_max: usize,
    /// How fast each agent receives (see [`Pace`]).
    pace: Pace,
    /// Per (agent, block) not yet received: the source last named to it for the block — the relay, or
    /// the first holder of the answer (assumed to be the one its chooser takes, as `named` assumes;
    /// the chooser may pass it over for a busy, slow or already-read one) — kept once its arrival starts (the read whose first bytes came is the one its
    /// readers are served from; a read moved elsewhere later runs on beside it). An arrival goes no
    /// faster than its source (see [`Tracker::fed_too_slow`]).
    feeds: HashMap<(AgentId, u64), Origin>,
    /// Per block with holders: since when askers ready to open a flow have been told to wait because
    /// none of its holders could take a new one, and when one last was (see [`Tracker::starved_after`]).
    /// Cleared when a holder is named for it or the relay serves it; a wait that
    /// nobody renewed for [`STARVED_AFTER_MIN`] starts again (waiting askers ask again within
    /// milliseconds: a gap that long means nobody waited, and an old start must not hand a later asker
    /// a copy at once). At most one entry per block.
    starved: HashMap<u64, Starved>,
    /// Blocks some agent has held whole: one of them that nobody is named for any more was dropped
    /// from every cache that kept it (or its holders left), and only the relay can bring it back.
    reached: Bits,
}

/// A block's relay claim.
#[derive(Debug, Clone, Copy)]
struct Claim {
    /// The agent fetching the block from the relay.
    by: AgentId,
    /// Since when: the grant, restarted whenever the claimer completes a claimed block (see
    /// [`Tracker::have`]: its claims are pipelined, and a claim behind another waits for it).
    since: Instant,
    /// Granted while the claimer's arrival of the block was under way: it replaces a read the claimer
    /// moved away from a slow holder (see [`Tracker::claim_too_slow`]).
    replaces_moved: bool,
}

/// Block times (the swarm's median link time per block) askers ready to read wait for a block whose
/// every holder is full before the relay serves it again ([`Tracker::starved_after`]). A guard against
/// a stall, not a source of speed: chosen in the simulator (issue 33, eighth pass; 20 seeds, joins
/// spread over 30 s, window 32): 8 and 16 cost 1.10–1.16 copies at 8 agents for no gain, 32 kept
/// 1.00–1.01, and the worst run at 64 agents went from 1.66 (seed 2: one block starved for 36 s; 1.33 with
/// the guard) to 1.37 (another seed).
const STARVED_BLOCK_TIMES: f64 = 32.0;

/// The least such wait: holders of a block on fast links also free a slot within a round trip or two.
const STARVED_AFTER_MIN: Duration = Duration::from_secs(1);

/// A block's askers kept waiting by full holders (see `Tracker::starved`).
#[derive(Debug, Clone, Copy)]
struct Starved {
    since: Instant,
    last: Instant,
}

/// How far back an arrival's sources are followed (an arrival fed by an arrival fed by a slow host):
/// two hops cover a fleet of four to eight, where each block's arrivals chain through few agents, and
/// keep an answer's cost bounded.
const FEED_HOPS: usize = 2;

/// Arrivals an agent's pace is the median of.
const PACE_SAMPLES: usize = 4;

/// How long blocks take to arrive at each agent that serves, from the first bytes (its `arriving`) to
/// the block verified (its `have`), as times passed in: a holder's reader of a block still arriving
/// goes no faster than that. A host on a slow link takes several times the swarm's median; its
/// arrivals are not named to askers that can be served otherwise (issue 33: with cut-through a host at
/// 20 Mbit/s was named for the blocks it took from the relay, and every reader of those went at its
/// pace).
#[derive(Debug, Default)]
struct Pace {
    /// Per agent: seconds per block, the lower median of its last [`PACE_SAMPLES`] arrivals (kept in
    /// `recent`): a block it read from a slow source (its arrival goes at that source's pace) or one
    /// that was already waiting in a socket's buffer moves it little.
    secs: HashMap<AgentId, f64>,
    recent: HashMap<AgentId, std::collections::VecDeque<f64>>,
    /// Arrivals under way: since when (an arrival that has taken long already is slow, measured or not).
    since: HashMap<(AgentId, u64), Instant>,
    /// The median of `secs` (the lower of two), recomputed every few updates.
    median: Option<f64>,
    /// Per agent: how long it has had some arrival under way, and the blocks those completed (see
    /// [`Busy`]).
    busy: HashMap<AgentId, Busy>,
    /// Per agent: its link's time per block as of the last recomputation (see [`Tracker::links`]),
    /// and their median (the lower of two: of two agents, the faster, so that any gap of 2.5× makes
    /// the other slow).
    link: HashMap<AgentId, f64>,
    link_median: Option<f64>,
    /// The latest time passed in with an arrival or a block (the recomputation's "now").
    clock: Option<Instant>,
    /// Agents still pulling that are not slow, as of that recomputation.
    fast_pulling: usize,
    updates: usize,
}

/// An agent's link, as the tracker sees it: the time it has had at least one arrival under way over
/// the blocks those arrivals completed. Unlike an arrival's own time, this does not depend on how
/// many reads share the agent's downlink (issue 33: a fast agent splits its link over four reads, so
/// each of its blocks took about 1 s, and the host at 20 Mbit/s took its first block alone, in
/// 1.7 s — not slow by arrivals, so it claimed another block from the relay, which then took it 10 s
/// to receive with its link shared, and the window of every fast agent stalled on that block).
///
/// The arrivals still under way are credited with part of a block each (see [`Tracker::links`]).
/// Its limits, known: time with only a slow-fed arrival under way counts, and is never forgotten (two
/// blocks read one after the other from a slow source, each 6 s against the others' 1 s, make an
/// agent slow; side by side they do not); and the credit goes by the agent's pace, which a slow host
/// took from its first block, alone on its link: with four arrivals under way it is credited as if
/// each ran at that speed, and looks 2–2.5× the median for a while (on the bench it took a third block
/// from the relay in one run of five).
/// Sharing the time out by the arrivals under way instead (each arrival's time over the mean number
/// beside it, the lower median of the last four) was tried: in the simulator it judged early joiners
/// slow while the relay's share held them back (issue 33, sixth pass).
#[derive(Debug, Default)]
struct Busy {
    /// Arrivals under way.
    under_way: usize,
    /// Since when, if any are, counted up to now (a completion moves it on).
    from: Option<Instant>,
    secs: f64,
    blocks: u64,
}

impl Busy {
    /// Seconds of receiving per block received by `now`, once it received one; `credit`: how much of
    /// a block the arrivals still under way are taken to have brought.
    fn per_block(&self, now: Instant, credit: f64) -> Option<f64> {
        let open = match (self.under_way, self.from) {
            (1.., Some(from)) => now.saturating_duration_since(from).as_secs_f64(),
            _ => 0.0,
        };
        (self.blocks > 0).then(|| (self.secs + open) / (self.blocks as f64 + credit))
    }

    /// An arrival started at `now`.
    fn started(&mut self, now: Instant) {
        self.under_way += 1;
        self.from.get_or_insert(now);
    }

    /// An arrival completed at `now`; `counts`: whether its block counts (the last block is short).
    fn completed(&mut self, now: Instant, counts: bool) {
        self.under_way = self.under_way.saturating_sub(1);
        if let Some(from) = self.from {
            self.secs += now.saturating_duration_since(from).as_secs_f64();
        }
        // Never back: time is counted once.
        let end = self.from.map_or(now, |from| now.max(from));
        self.from = (self.under_way > 0).then_some(end);
        self.blocks += u64::from(counts);
    }

    /// An arrival failed (no clock here: the time since the last completion stays uncounted if
    /// nothing else is under way, as it gave no block).
    fn failed(&mut self) {
        self.under_way = self.under_way.saturating_sub(1);
        if self.under_way == 0 {
            self.from = None;
        }
    }
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
            live: vec![0; blocks as usize],
            whole: vec![0; blocks as usize],
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
            pace: Pace::default(),
            feeds: HashMap::new(),
            starved: HashMap::new(),
            reached: Bits::default(),
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
            self.live.resize(blocks as usize, 0);
            self.whole.resize(blocks as usize, 0);
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

    /// An agent joined; `serves` says whether it serves the blocks it holds to others. `a` must never
    /// have joined before (the relay counts ids up): a departed agent's entries may remain in the
    /// holder lists until they are compacted, and the same id joining again would be listed twice.
    pub fn join(&mut self, a: AgentId, serves: bool) {
        self.alive.insert(a, serves);
        self.received.insert(a, 0);
        self.got.insert(a, Bits::default());
        self.listed.insert(a, Bits::default());
    }

    /// Whether `a` is named as a holder of `b`.
    fn is_listed(&self, a: AgentId, b: u64) -> bool {
        self.listed.get(&a).is_some_and(|l| l.get(b))
    }

    /// `a` is no longer named as a holder of `b`. Its entry in the block's list goes when those no
    /// longer listed outnumber the listed.
    fn unlist(&mut self, a: AgentId, b: u64) {
        let Some(l) = self.listed.get_mut(&a) else { return };
        if !l.get(b) {
            return;
        }
        l.set(b, false);
        let i = b as usize;
        self.live[i] -= 1;
        if self.got.get(&a).is_some_and(|g| g.get(b)) {
            self.whole[i] -= 1;
        }
        if self.holders[i].len() > 2 * self.live[i] + PEERS_PER_ANSWER {
            let listed = &self.listed;
            self.holders[i].retain(|x| listed.get(x).is_some_and(|l| l.get(b)));
        }
        self.debug_check(b);
    }

    /// The counts kept per block and per fleet agree (checked in debug builds): a block's holders
    /// whole are some of those listed, every listed one has an entry in its list, and the agents
    /// complete are some of those present.
    fn debug_check(&self, b: u64) {
        let i = b as usize;
        debug_assert!(self.whole[i] <= self.live[i] && self.live[i] <= self.holders[i].len(), "block {b}: {} whole, {} listed, {} entries", self.whole[i], self.live[i], self.holders[i].len());
        debug_assert!(self.complete <= self.received.len(), "{} complete of {} agents", self.complete, self.received.len());
        debug_assert!(self.holders.len() == self.live.len() && self.live.len() == self.whole.len(), "per-block counts of different lengths");
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
        self.claims.retain(|_, c| c.by != a);
        self.pace.secs.remove(&a);
        self.pace.recent.remove(&a);
        self.pace.since.retain(|(x, _), _| *x != a);
        self.pace.busy.remove(&a);
        self.feeds.retain(|(x, _), _| *x != a);
        self.measure();
    }

    /// Agent `a` is receiving block `b` (its first bytes came at `now`) and serves it while it
    /// arrives: it is named as a holder from now on (after those that hold it whole, and not to askers
    /// it is too slow for: see `locate`), but has not received it. An arrival that fails is taken back
    /// like a dropped block ([`Tracker::not_at`] with `a` itself); one that completes is a
    /// [`Tracker::have`], and how long it took is `a`'s pace.
    pub fn arriving(&mut self, a: AgentId, b: u64, now: Instant) {
        let Some(&serves) = self.alive.get(&a) else { return };
        let got = self.got.get(&a).is_some_and(|g| g.get(b));
        if serves && !got && (b as usize) < self.holders.len() {
            self.list(a, b);
            if let std::collections::hash_map::Entry::Vacant(e) = self.pace.since.entry((a, b)) {
                e.insert(now);
                self.pace.busy.entry(a).or_default().started(now);
                self.tick(now);
            }
        }
    }

    /// An arrival at `a` took `secs`: its pace follows (see [`Pace`]); the median and the agents
    /// slow against it are recomputed every `agents / 8` updates (a pass over the fleet each time).
    fn paced(&mut self, a: AgentId, secs: f64) {
        let recent = self.pace.recent.entry(a).or_default();
        if recent.len() == PACE_SAMPLES {
            recent.pop_front();
        }
        recent.push_back(secs);
        if let Some(m) = lower_median(recent.iter().copied().collect()) {
            self.pace.secs.insert(a, m);
        }
        self.pace.updates += 1;
        if self.pace.updates >= (self.alive.len() / 8).max(1) {
            self.measure();
        }
    }

    /// Recompute the median pace and the agents still pulling that are not slow against it.
    fn measure(&mut self) {
        self.pace.updates = 0;
        self.pace.median = lower_median(self.pace.secs.values().copied().collect());
        self.links();
        self.pace.link_median = lower_median(self.pace.link.values().copied().collect());
        self.pace.fast_pulling = self.received.iter().filter(|(a, got)| !self.is_complete(**got) && !self.slow(**a)).count();
    }

    /// Whether agent `a` receives more than [`SLOW_RATIO`] times slower than the swarm's median: its
    /// arrivals, or its link (see [`Busy`]).
    fn slow(&self, a: AgentId) -> bool {
        matches!((self.pace.secs.get(&a), self.pace.median), (Some(p), Some(m)) if *p > SLOW_RATIO * m) || self.link_slow(a)
    }

    /// Whether agent `a`'s link (see [`Busy`]) is more than [`SLOW_RATIO`] times slower than the
    /// swarm's median.
    fn link_slow(&self, a: AgentId) -> bool {
        matches!((self.pace.link.get(&a), self.pace.link_median), (Some(p), Some(m)) if *p > SLOW_RATIO * m)
    }

    /// Time moves on to `now` (never back: the relay's events come in its own clock's order, the
    /// simulator's in its own).
    fn tick(&mut self, now: Instant) {
        if self.pace.clock.is_none_or(|c| now > c) {
            self.pace.clock = Some(now);
        }
    }

    /// Recompute every agent's link (see [`Busy`]) as of the clock. Each arrival still under way is
    /// credited with its time so far over the agent's pace (its arrivals' time), up to one block: the
    /// time shared by reads under way goes to whichever completes first, and without the credit a fast
    /// agent whose first block came with three more nearly done looked four times slower than its
    /// link until they came (on the bench, an even fan-out of two then sent 1.07 copies: the
    /// other agent took its claims as too slow).
    fn links(&mut self) {
        let Some(now) = self.pace.clock else { return };
        let mut credit: HashMap<AgentId, f64> = HashMap::new();
        for ((a, _), start) in &self.pace.since {
            if let Some(p) = self.pace.secs.get(a).filter(|p| **p > 0.0) {
                *credit.entry(*a).or_default() += (now.saturating_duration_since(*start).as_secs_f64() / p).min(1.0);
            }
        }
        self.pace.link = self.pace.busy.iter().filter_map(|(a, b)| b.per_block(now, credit.get(a).copied().unwrap_or(0.0)).map(|x| (*a, x))).collect();
    }

    /// Whether holder `x`'s arrival of block `b` is too slow for asker `a`: its pace, or the time
    /// this arrival has taken so far, above [`SLOW_RATIO`] times the swarm's median or the asker's own
    /// pace, whichever is longer (a slow asker is no faster than a holder as slow as itself).
    /// Or its arrival is fed by a source too slow for the asker (see [`Tracker::fed_too_slow`]).
    fn too_slow_for(&self, x: AgentId, b: u64, a: AgentId, now: Instant) -> bool {
        self.own_too_slow_for(x, b, a, now) || self.fed_too_slow(x, b, a, now, FEED_HOPS)
    }

    /// Whether `x`'s own pace, or its arrival of `b` so far, is too slow for `a` (see `too_slow_for`).
    fn own_too_slow_for(&self, x: AgentId, b: u64, a: AgentId, now: Instant) -> bool {
        let so_far = self.pace.since.get(&(x, b)).map_or(0.0, |s| now.saturating_duration_since(*s).as_secs_f64());
        self.slower_than(x, so_far, a)
    }

    /// Whether agent `x` is too slow for asker `a`, with something of `x`'s under way for `so_far`
    /// seconds: `x`'s link slow and `a`'s not (a holder on a slow link receives every block slowly,
    /// whatever this one has shown yet), or `x`'s pace or `so_far` above [`SLOW_RATIO`] times the
    /// swarm's median or `a`'s own pace, whichever is longer.
    fn slower_than(&self, x: AgentId, so_far: f64, a: AgentId) -> bool {
        if self.link_slow(x) && !self.link_slow(a) {
            return true;
        }
        let Some(m) = self.pace.median else { return false };
        let bar = SLOW_RATIO * m.max(self.pace.secs.get(&a).copied().unwrap_or(0.0));
        self.pace.secs.get(&x).copied().unwrap_or(0.0).max(so_far) > bar
    }

    /// Whether relay claim `c` on block `b` is too slow for asker `a`: as its claimer's arrival of
    /// the block is (`too_slow_for`), unless the claim replaces a read the claimer moved away from a
    /// slow holder. That read's arrival is still the one the claimer serves (fed by that holder and
    /// under way since the read began), but the claim will give it the block whole soon: it is judged
    /// by its claimer's link and pace and by its own time so far (issue 33: every fast agent moved its
    /// read of a slow host's claim at about the same time, and the second and third judged the first
    /// one's new claim by its old arrival and took one more copy from the relay each: a block sent
    /// four times, 8 MiB of the relay's uplink, in three bench runs of five).
    fn claim_too_slow(&self, c: &Claim, b: u64, a: AgentId, now: Instant) -> bool {
        if c.replaces_moved {
            self.slower_than(c.by, now.saturating_duration_since(c.since).as_secs_f64(), a)
        } else {
            self.too_slow_for(c.by, b, a, now)
        }
    }

    /// Whether `x`'s arrival of `b` is fed (as far as the tracker named its source) by an agent that has
    /// not received `b` and whose own arrival of it is too slow for asker `a`, or by `a` itself (a
    /// circle: `a` would read its own arrival back), following up to `hops` sources back. An arrival
    /// is only as fast as its source (issue 33: a host on a slow link took its first block at its link's
    /// rate, looked as fast as the others and claimed a second one, which then took it 13 s; the fast
    /// agents moved their reads of it away, and were next named each other's arrivals of the block,
    /// fed by the slow host: moved again 5 s later). Only the first holder named counts: counting every
    /// one named would mark fast arrivals slow whenever the slow host had been named beside their
    /// source (most answers in a small fleet name two or three holders). With equal paces no source is slow and nothing changes.
    fn fed_too_slow(&self, x: AgentId, b: u64, a: AgentId, now: Instant, hops: usize) -> bool {
        let Some(&Origin::Peer(y)) = self.feeds.get(&(x, b)) else { return false };
        let arriving = y != x && self.alive.contains_key(&y) && !self.got.get(&y).is_some_and(|g| g.get(b));
        y == a || (arriving && (self.own_too_slow_for(y, b, a, now) || (hops > 1 && self.fed_too_slow(y, b, a, now, hops - 1))))
    }

    /// Whether the block is held whole by nobody and agent `x` receives it (listed, not held).
    fn only_arriving_at(&self, x: AgentId, b: u64) -> bool {
        self.is_listed(x, b) && !self.got.get(&x).is_some_and(|g| g.get(b))
    }

    /// Name `a` as a holder of `b` (unless it is already). An agent listed, taken off and listed again
    /// (an arrival that failed, then the block) may have a stale entry left in the block's list
    /// besides the new one: `locate` names nobody twice.
    fn list(&mut self, a: AgentId, b: u64) {
        let Some(l) = self.listed.get_mut(&a) else { return };
        if !l.get(b) {
            l.set(b, true);
            self.holders[b as usize].push(a);
            self.live[b as usize] += 1;
        }
        self.debug_check(b);
    }

    /// Agent `a` holds block `b`, verified, at `now`. Its other claims' clocks restart: an agent keeps
    /// several reads in flight on its relay flow ([`CLAIMS_PER_FLOW`]), and the last of them waits
    /// behind the others — a claimer that completes blocks is not slow, one that completes none for
    /// [`CLAIM_TIMEOUT`] is.
    pub fn have(&mut self, a: AgentId, b: u64, now: Instant) {
        let Some(&serves) = self.alive.get(&a) else { return };
        // The last block is short: its time is no pace.
        let last = self.total.is_some_and(|t| b + 1 == t);
        self.feeds.remove(&(a, b));
        if let Some(since) = self.pace.since.remove(&(a, b)) {
            self.tick(now);
            self.pace.busy.entry(a).or_default().completed(now, !last);
            if !last {
                self.paced(a, now.saturating_duration_since(since).as_secs_f64());
            }
        }
        let known = (b as usize) < self.holders.len();
        if let (true, Some(got)) = (known, self.got.get_mut(&a)) {
            if !got.get(b) {
                got.set(b, true);
                self.reached.set(b, true);
                if serves {
                    self.list(a, b);
                    self.whole[b as usize] += 1;
                }
                let got = self.received.entry(a).or_default();
                *got += 1;
                let got = *got;
                if self.total == Some(got) {
                    self.complete += 1;
                    self.measure();
                }
                self.debug_check(b);
            }
        }
        if self.claims.get(&b).is_some_and(|c| c.by == a) {
            self.claims.remove(&b);
            for c in self.claims.values_mut() {
                if c.by == a {
                    c.since = now;
                }
            }
        }
    }

    /// Agent `a` serves `uploads` uploads right now, and `arrived` askers took an upload slot since
    /// its last report (it reports when either changes), reported at `now`. That many of the askers
    /// sent there — the longest waiting — have reached it and are counted in `uploads` now; the others
    /// are still on their way (a report can overtake them) and stay counted. Askers named longer than
    /// [`NAMED_HOLD`] ago no longer count (they went elsewhere): they are dropped first, or an arrival
    /// would be spent on one of them and a fresh asker counted twice, in the report and as on its way.
    pub fn load(&mut self, a: AgentId, uploads: u32, arrived: u32, now: Instant) {
        if self.alive.contains_key(&a) {
            self.uploads.insert(a, uploads);
            if let Some(askers) = self.named.get_mut(&a) {
                askers.retain(|(_, at)| now.saturating_duration_since(*at) < NAMED_HOLD);
                // In the order named, oldest first (see `locate`).
                askers.drain(..askers.len().min(arrived as usize));
            }
        }
    }

    /// Uploads holder `x` serves or will soon, as asker `a` sees it: its last report plus the other
    /// askers sent there since, within [`NAMED_HOLD`].
    fn expected_uploads(&self, x: AgentId, a: AgentId, now: Instant) -> usize {
        let reported = self.uploads.get(&x).map_or(0, |u| *u as usize);
        let named = self.named.get(&x).map_or(0, |v| v.iter().filter(|(y, at)| *y != a && now.saturating_duration_since(*at) < NAMED_HOLD).count());
        reported + named
    }

    /// `by` says that `p` does not hold `b`: the tracker forgets that `p` holds it, so that nobody
    /// else is sent there for it. Said by `p` itself (it dropped the block, or its arrival of it
    /// failed), it also ends `p`'s arrival. Said by a reader that could not get it there (refused,
    /// connection failed, passed over), it does not: `p`'s arrival may go on, and `p` says so itself
    /// if it fails. Ending it on a reader's word dropped the arrival's time and its block from `p`'s
    /// pace and link, and a slow holder looked faster than it was (issue 33, sixth pass's review).
    pub fn not_at(&mut self, by: AgentId, p: AgentId, b: u64) {
        self.unlist(p, b);
        if by != p {
            return;
        }
        if let (Some(_), Some(busy)) = (self.pace.since.remove(&(p, b)), self.pace.busy.get_mut(&p)) {
            busy.failed();
        }
        self.feeds.remove(&(p, b));
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
    /// give `Wait` (not a claim: the block has a source), unless askers ready to read have waited for
    /// them far longer than a moment (see [`Tracker::starved_after`]). When the asker is expected to open a
    /// connection to the first holder named, `f` is updated as the asker's chooser will be, so that
    /// the next answers of one question agree with it.
    ///
    /// The source named is recorded as the one feeding `a`'s coming arrival of `b` (see `feeds`).
    pub fn locate(&mut self, a: AgentId, b: u64, f: &mut Fetching, now: Instant) -> Answer {
        let answer = self.answer(a, b, f, now);
        let from = match &answer {
            Answer::Relay => Some(Origin::Relay),
            Answer::Peers(named) => named.first().map(|p| Origin::Peer(*p)),
            Answer::Wait => None,
        };
        // Once its arrival is under way, the arrival is fed by the read that started it.
        if let (Some(from), false) = (from, self.pace.since.contains_key(&(a, b))) {
            if self.alive.contains_key(&a) {
                self.feeds.insert((a, b), from);
            }
        }
        answer
    }

    /// The answer to `locate`, before its source is recorded.
    fn answer(&mut self, a: AgentId, b: u64, f: &mut Fetching, now: Instant) -> Answer {
        if b as usize >= self.holders.len() {
            return Answer::Wait;
        }
        // A relay claim not completed within CLAIM_TIMEOUT goes to the next asker, also when its
        // claimer is named as the block's holder while it arrives (its readers go no faster than it):
        // while nobody holds the block whole, the repair is another copy from the relay.
        // So is a claimer receiving it too slowly for the asker (issue 33): no reader of its arrival
        // would go faster than it. An asker that may not claim now is not named the arrivals fed by
        // that claimer either (`fed_too_slow`): it waits for a relay read of its own or a whole holder.
        // This release of an overdue claim, rather than a cap of one claim per agent until its pace is
        // known, is what keeps a slow host from holding a block's only arrival: on the bench the slow
        // host's second block was claimed with its first, but one claimed right after its first
        // arrival would have gone as slowly (its downlink then shared with three peer reads), the
        // lower median of two arrivals is the faster one (it still looked normal), and a cap would
        // idle the relay's flows at the start of every fan-out, an even one too.
        let claim_stale = self.claims.get(&b).is_some_and(|x| x.by != a && (!self.stands(x, now) || self.claim_too_slow(x, b, a, now)));
        if self.whole[b as usize] == 0 && claim_stale && self.claim(a, b, f, now) == Answer::Relay {
            return Answer::Relay;
        }
        let h = &self.holders[b as usize];
        if self.live[b as usize] > usize::from(self.is_listed(a, b)) {
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
            // Fresh holders first (the asker opens a new flow before it deepens one), then the open ones.
            let mut named: Vec<AgentId> = Vec::with_capacity(PEERS_PER_ANSWER);
            // Holders still receiving the block too slowly for the asker are not named (their readers
            // go at their pace); when they are all there is, the relay serves the asker if it may.
            let mut too_slow = 0;
            // Holders of the whole block before those still receiving it (whose uploads go no faster
            // than their own download of it).
            if f.flows_free > 0 {
                let mut arriving: Vec<AgentId> = Vec::new();
                for x in (0..h.len().min(HOLDERS_LOOKED_AT_MAX)).map(|i| h[(start + i) % h.len()]) {
                    if named.len() == PEERS_PER_ANSWER {
                        break;
                    }
                    let usable = x != a && self.is_listed(x, b) && !f.open.contains(&x) && self.expected_uploads(x, a, now) < self.uploads_max;
                    if !usable || named.contains(&x) || arriving.contains(&x) {
                        continue;
                    }
                    if self.got.get(&x).is_some_and(|g| g.get(b)) {
                        named.push(x);
                    } else if self.too_slow_for(x, b, a, now) {
                        too_slow += 1;
                    } else if arriving.len() < PEERS_PER_ANSWER {
                        arriving.push(x);
                    }
                }
                let room = PEERS_PER_ANSWER - named.len();
                named.extend(arriving.into_iter().take(room));
            }
            let first_fresh = named.first().copied();
            let room = PEERS_PER_ANSWER - named.len();
            let (slow_open, open): (Vec<AgentId>, Vec<AgentId>) =
                f.open.iter().copied().filter(|x| *x != a && self.is_listed(*x, b)).partition(|x| self.only_arriving_at(*x, b) && self.too_slow_for(*x, b, a, now));
            too_slow += slow_open.len();
            named.extend(open.into_iter().take(room));
            if named.is_empty() && too_slow > 0 && self.whole[b as usize] == 0 {
                return self.claim(a, b, f, now);
            }
            // The asker's chooser takes the first fresh holder: count it there until that holder
            // reports it arrived. Kept in the order named (a refresh moves to the back): `load`
            // takes the longest waiting first.
            if let Some(p) = first_fresh {
                let askers = self.named.entry(p).or_default();
                askers.retain(|(x, at)| *x != a && now.saturating_duration_since(*at) < NAMED_HOLD);
                askers.push((a, now));
                f.flows_free -= 1;
                f.open.push(p);
            }
            if !named.is_empty() {
                // Any holder named ends the wait, also another read on a connection the asker has open
                // to a full holder: the block spreads (its reader becomes a holder). Keeping the clock
                // through those reads cost copies for nothing in the simulator (20 seeds, window 32:
                // 1.05 / 1.03 copies at 8 / 64 agents against 1.00 / 1.01, and 1.319 against 1.308 at
                // 64).
                self.starved.remove(&b);
                return Answer::Peers(named);
            }
            // None usable: wait for one, unless askers have waited far too long.
            return self.wait_or_repair(a, b, f, now);
        }
        self.claim(a, b, f, now)
    }

    /// The relay for `a`'s block `b`, if one of its flows is free for `a` and nobody else fetches the
    /// block from it.
    fn claim(&mut self, a: AgentId, b: u64, f: &Fetching, now: Instant) -> Answer {
        // Claims that went stale (slow or dead claimer) free their block and their relay flow. They
        // stay in the map until replaced, completed or their claimer leaves: `locate` must still see
        // that a block's claim went stale (its claimer may be named as the block's holder meanwhile).
        // The relay's flows are shared out among the agents still pulling: with one flow each, every
        // agent gets new blocks from the relay at once and forwards them, instead of one agent taking
        // all the fresh blocks while the others wait for it to finish each one.
        let pulling = self.alive.len().saturating_sub(self.complete).max(1);
        let per_agent = (RELAY_FLOWS_MAX / pulling).max(1) * CLAIMS_PER_FLOW;
        debug_assert!(per_agent <= RELAY_FLOWS_MAX * CLAIMS_PER_FLOW, "one agent's share of the relay's flows is more than all of them");
        let standing = self.claims.values().filter(|x| self.stands(x, now)).count();
        let mine = self.claims.values().filter(|x| x.by == a && self.stands(x, now)).count();
        match self.claims.get(&b) {
            _ if !f.may_claim => Answer::Wait,
            Some(x) if x.by != a && self.stands(x, now) && !self.claim_too_slow(x, b, a, now) => Answer::Wait,
            Some(x) if x.by == a && self.stands(x, now) => self.grant(a, b, now),
            // A slow agent takes its blocks from peers while faster agents pull: a block it took from
            // the relay would reach the others at its pace, or cost the relay a second copy. Not a
            // block that reached the swarm and that nobody is named for any more (dropped from every
            // serve cache, its holders gone): no faster agent will bring it back, and a slow agent
            // lagging more than a cache behind would wait until the last fast agent of the swarm is
            // done, however late that one joined (found once the simulator modelled the caches, issue
            // 33's ninth pass). One such copy at a time: its relay reads go at its own pace and hold
            // one of the relay's few flows the while (several at once took a fleet of four with two
            // slow hosts from 1.24 to 1.37 of one agent's time, seed 3). A block with holders (all
            // full, or too slow) is no such block: the slow agent waits for them.
            _ if self.slow(a) && self.pace.fast_pulling > 0 && (self.live[b as usize] > 0 || !self.reached.get(b) || mine > 0) => Answer::Wait,
            _ if standing >= RELAY_FLOWS_MAX * CLAIMS_PER_FLOW || mine >= per_agent => Answer::Wait,
            _ => self.grant(a, b, now),
        }
    }

    /// `Wait` for `a`, whom none of block `b`'s holders can take now; or, once askers ready to read
    /// have waited for them [`Tracker::starved_after`], a second copy from the relay (`claim`: on a
    /// free relay flow only).
    ///
    /// A second copy whenever no claim stood (its uplink idle) was tried for late joiners (issue 33):
    /// it cost an even fan-out of eight 1.05–1.11 copies from the master's host at its end, where
    /// every block has gone out once and holders are busy for a moment (docs/results/issue33-final).
    /// Only a block that has waited far longer than a moment gets that copy: its few holders' upload
    /// slots are held by askers reading other blocks (connections stay with their askers), and every
    /// window that reaches the block stalls on it. In the simulator (issue 33, eighth pass) the one
    /// holder of block 53 of 256 was full for 36 s while 60 agents' windows waited on it and the
    /// relay's link idled. Only an asker that serves what it holds takes the copy: one that does not
    /// would never pass the block on, and the others would wait another 32 block times.
    fn wait_or_repair(&mut self, a: AgentId, b: u64, f: &Fetching, now: Instant) -> Answer {
        let ready = f.flows_free > 0 && self.alive.get(&a) == Some(&true);
        if !ready || self.claims.get(&b).is_some_and(|x| self.stands(x, now)) {
            return Answer::Wait;
        }
        let w = self.starved.entry(b).or_insert(Starved { since: now, last: now });
        if now.saturating_duration_since(w.last) > STARVED_AFTER_MIN {
            w.since = now;
        }
        w.last = now;
        let since = w.since;
        if now.saturating_duration_since(since) < self.starved_after() {
            return Answer::Wait;
        }
        // `grant` ends the wait.
        self.claim(a, b, f, now)
    }

    /// `a` fetches `b` from the relay from `now`.
    fn grant(&mut self, a: AgentId, b: u64, now: Instant) -> Answer {
        // Whatever path served it, a block the relay serves is no longer waited for.
        self.starved.remove(&b);
        // A claimer asking again for its own claim keeps what the claim replaced: its relay read may
        // have begun the arrival since.
        let replaces_moved = match self.claims.get(&b) {
            Some(c) if c.by == a => c.replaces_moved,
            _ => self.pace.since.contains_key(&(a, b)),
        };
        self.claims.insert(b, Claim { by: a, since: now, replaces_moved });
        self.relay_grants += 1;
        Answer::Relay
    }

    /// How long askers may be told to wait for a block whose holders are all full before the relay
    /// serves it again: [`STARVED_BLOCK_TIMES`] of the swarm's median link time per block (its holders
    /// free a slot within a block time or two when they serve blocks others could serve too), at
    /// least [`STARVED_AFTER_MIN`]; that minimum alone while no link is measured yet.
    fn starved_after(&self) -> Duration {
        let t = self.pace.link_median.map_or(0.0, |m| m * STARVED_BLOCK_TIMES);
        // A median that makes no duration (it cannot, from times passed in) waits for good rather
        // than at once.
        STARVED_AFTER_MIN.max(Duration::try_from_secs_f64(t).unwrap_or(Duration::MAX))
    }

    /// Whether a claim (its claimer, since when) still stands: its claimer is present and completed a
    /// block within [`CLAIM_TIMEOUT`].
    fn stands(&self, c: &Claim, now: Instant) -> bool {
        self.alive.contains_key(&c.by) && now.saturating_duration_since(c.since) < CLAIM_TIMEOUT
    }

    /// How many agents are named for block `b`, holding it whole or receiving it: agents fetch the
    /// rarest blocks of their window first (see [`Tracker::precedence`]).
    pub fn holders(&self, b: u64) -> usize {
        self.live.get(b as usize).copied().unwrap_or(0)
    }

    /// How many agents hold block `b` whole (not counting those still receiving it).
    pub fn whole_holders(&self, b: u64) -> usize {
        self.whole.get(b as usize).copied().unwrap_or(0)
    }

    /// Where block `b` comes in the order asker `a`'s blocks are answered (lowest first): blocks some
    /// agent holds whole first — a read of a block still arriving goes no faster than its holder's
    /// own, so it takes a flow only when no whole block is there for it — then the rarest first, so
    /// that the members of a swarm work on different blocks and every block spreads; among equals, in
    /// an order of the asker's own, not the blocks' — agents that joined together after others hold
    /// the same blocks and would ask for the same ones in the same order, each taking a share of the
    /// same holder's uplink, with nothing to trade among themselves (in the simulator, four agents
    /// joining over 30 s at 100 Mbit/s took 1.98× one agent's time in block order, 1.31× so).
    pub fn precedence(&self, a: AgentId, b: u64) -> (bool, usize, u64) {
        (self.whole_holders(b) == 0, self.holders(b), mix((u64::from(a) << 40) ^ b))
    }

    /// Agents other than `a` still missing blocks (or all, while the snapshot's size is unknown): an
    /// agent that finished keeps serving while this is not zero.
    pub fn needing(&self, a: AgentId) -> usize {
        // From the counts (agents that linger ask this every few hundred milliseconds: a scan would
        // cost O(fleet) per question); `complete` is 0 while the size is unknown.
        let incomplete = self.received.len().saturating_sub(self.complete);
        let a_incomplete = self.received.get(&a).is_some_and(|got| !self.is_complete(*got));
        incomplete.saturating_sub(usize::from(a_incomplete))
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Chooser, Origin};

    impl Tracker {
        /// Asked by an agent that may claim and open flows to any number of peers.
        fn locate_t(&mut self, a: AgentId, b: u64, now: Instant) -> Answer {
            self.locate(a, b, &mut Fetching { may_claim: true, open: Vec::new(), flows_free: usize::MAX }, now)
        }
        fn have_t(&mut self, a: AgentId, b: u64) {
            self.have(a, b, Instant::now())
        }
    }

    /// What an asker that reads from no peer yet and may open two flows says.
    fn reader() -> Fetching {
        Fetching { may_claim: true, open: Vec::new(), flows_free: 2 }
    }

    /// A tracker for `blocks` blocks with agents `0..agents` joined, all serving.
    fn joined(blocks: u64, agents: AgentId) -> Tracker {
        let mut tr = Tracker::new(blocks);
        for a in 0..agents {
            tr.join(a, true);
        }
        tr
    }

    #[test]
    fn no_claim_while_the_relay_slot_is_busy() {
        let t = Instant::now();
        let mut tr = joined(1, 1);
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
        let mut tr = joined(2, 3);
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
        let mut tr = joined(1, 1);
        assert_eq!(tr.locate_t(0, 3, t), Answer::Wait, "not published yet");
        tr.published(4);
        assert_eq!(tr.locate_t(0, 3, t), Answer::Relay);
    }

    #[test]
    fn the_relays_flows_are_shared_among_the_agents_still_pulling() {
        let t = Instant::now();
        let all = RELAY_FLOWS_MAX * CLAIMS_PER_FLOW;
        let mut tr = joined(64, 1);
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
        let mut tr = joined(1, 2);
        assert_eq!(tr.locate_t(0, 0, t), Answer::Relay);
        assert_eq!(tr.locate_t(1, 0, t + CLAIM_TIMEOUT / 2), Answer::Wait);
        assert_eq!(tr.locate_t(1, 0, t + CLAIM_TIMEOUT), Answer::Relay, "the claimer is too slow: repair from the relay");
        let mut tr = joined(1, 2);
        tr.locate_t(0, 0, t);
        tr.leave(0);
        assert_eq!(tr.locate_t(1, 0, t), Answer::Relay, "the claimer died");
        // Pipelined claims: completing one restarts the clock of the others.
        let mut tr = joined(2, 2);
        assert_eq!((tr.locate_t(0, 0, t), tr.locate_t(0, 1, t)), (Answer::Relay, Answer::Relay));
        tr.have(0, 0, t + CLAIM_TIMEOUT / 2);
        assert_eq!(tr.locate_t(1, 1, t + CLAIM_TIMEOUT), Answer::Wait, "the claimer makes progress: its next claim stands");
        assert_eq!(tr.locate_t(1, 1, t + CLAIM_TIMEOUT / 2 + CLAIM_TIMEOUT), Answer::Relay, "no progress for the timeout: handed on");
    }

    #[test]
    fn an_agent_receiving_a_block_is_named_after_those_holding_it_whole() {
        let t = Instant::now();
        let mut tr = joined(1, 4);
        tr.set_total(1);
        assert_eq!(tr.locate_t(0, 0, t), Answer::Relay);
        tr.arriving(0, 0, t);
        assert_eq!((tr.holders(0), tr.whole_holders(0)), (1, 0));
        assert_eq!(tr.locate_t(1, 0, t), Answer::Peers(vec![0]), "served while it arrives: no waiting for the whole block");
        tr.arriving(2, 0, t);
        tr.have_t(2, 0);
        assert_eq!((tr.holders(0), tr.whole_holders(0)), (2, 1), "arriving, then held: listed once");
        assert_eq!(tr.needing(3), 2, "agents 0 and 1 still miss the block: an arrival is not a receipt");
        for _ in 0..8 {
            let Answer::Peers(named) = tr.locate_t(3, 0, t) else { panic!("holders named") };
            assert_eq!(named[0], 2, "a whole holder before one still receiving: {named:?}");
        }
        tr.have_t(0, 0);
        assert_eq!((tr.holders(0), tr.whole_holders(0)), (2, 2));
        assert_eq!(tr.needing(3), 1);
    }

    #[test]
    fn a_claimer_too_slow_is_repaired_from_the_relay_even_while_it_serves_the_block_arriving() {
        let t = Instant::now();
        let mut tr = joined(1, 2);
        assert_eq!(tr.locate_t(0, 0, t), Answer::Relay);
        tr.arriving(0, 0, t);
        assert_eq!(tr.locate_t(1, 0, t + CLAIM_TIMEOUT / 2), Answer::Peers(vec![0]), "served while it arrives");
        assert_eq!(tr.locate_t(1, 0, t + CLAIM_TIMEOUT), Answer::Relay, "no block for the timeout: from the relay");
        let mut tr = joined(1, 3);
        tr.locate_t(0, 0, t);
        tr.arriving(0, 0, t);
        tr.have_t(2, 0);
        assert_eq!(tr.locate_t(1, 0, t + CLAIM_TIMEOUT), Answer::Peers(vec![2, 0]), "held whole elsewhere: no second copy from the relay");
        // Another claim answered after the timeout does not wipe the stale one out of sight first.
        let mut tr = joined(2, 3);
        tr.locate_t(0, 0, t);
        tr.arriving(0, 0, t);
        assert_eq!(tr.locate_t(2, 1, t + CLAIM_TIMEOUT), Answer::Relay);
        let mut may_not = Fetching { may_claim: false, open: Vec::new(), flows_free: 2 };
        assert_eq!(tr.locate(1, 0, &mut may_not, t + CLAIM_TIMEOUT), Answer::Peers(vec![0]), "an asker that may not claim still gets the arriving holder");
        assert_eq!(tr.locate_t(1, 0, t + CLAIM_TIMEOUT), Answer::Relay, "still repaired");
    }

    #[test]
    fn a_holder_too_slow_for_the_asker_is_not_named_for_a_block_arriving_there_while_the_relay_can_serve_it() {
        let t = Instant::now();
        let s = Duration::from_secs;
        let mut tr = joined(16, 4);
        // Before anyone's pace is known, agent 3 claims block 10 from the relay.
        assert_eq!(tr.locate_t(3, 10, t), Answer::Relay);
        // Paces: agents 0–2 receive a block in 1 s, agent 3 (a slow link) in 5 s.
        for a in 0..3 {
            tr.arriving(a, u64::from(a), t);
            tr.have(a, u64::from(a), t + s(1));
        }
        tr.arriving(3, 3, t);
        tr.have(3, 3, t + s(5));
        let now = t + s(5);
        tr.arriving(3, 10, now);
        let grants = tr.relay_grants();
        assert_eq!(tr.locate_t(0, 10, now), Answer::Relay, "only the slow claimer receives it: the relay serves the asker, not the slow host");
        assert_eq!(tr.relay_grants(), grants + 1, "a second copy from the relay");
        // The slow agent receives block 8 (from a peer); a fast one receives block 9.
        tr.arriving(3, 8, now);
        tr.arriving(1, 9, now);
        assert_eq!(tr.locate_t(0, 9, now), Answer::Peers(vec![1]), "an arrival at the swarm's pace is named as before");
        assert_eq!(tr.locate_t(3, 9, now), Answer::Peers(vec![1]), "and to the slow agent");
        let may_not = &mut Fetching { may_claim: false, open: Vec::new(), flows_free: 2 };
        assert_eq!(tr.locate(0, 8, may_not, now), Answer::Wait, "an asker that may not claim now waits rather than read at the slow host's pace");
        tr.have(2, 8, now);
        for _ in 0..8 {
            assert_eq!(tr.locate_t(1, 8, now), Answer::Peers(vec![2]), "a whole holder, and never the slow arrival beside it");
        }
        // Its own claims: none while faster agents pull.
        assert_eq!(tr.locate_t(3, 12, now), Answer::Wait, "a slow agent takes no fresh block from the relay while faster agents pull");
        assert_eq!(tr.locate_t(2, 12, now), Answer::Relay, "a fast one does");
        // An arrival under way much longer than the swarm's pace is slow, measured or not.
        tr.join(4, true);
        tr.arriving(4, 11, now);
        assert_eq!(tr.locate_t(0, 11, now), Answer::Peers(vec![4]), "a new agent's arrival, just started");
        assert_eq!(tr.locate_t(1, 11, now + s(3)), Answer::Relay, "the same arrival 3 s later (the median is 1 s)");
    }

    /// Four agents whose first blocks each took 1 s; agent 3 then claims block 7 from the relay at
    /// `t1` and its arrival starts; agent 0 is named it, its arrival starts 2.4 s later (its read queued
    /// behind others), and agent 1 (reading from agent 0 already) is named agent 0's.
    fn chain_of_arrivals(t: Instant) -> (Tracker, Instant) {
        let ms = Duration::from_millis;
        let mut tr = joined(16, 4);
        for a in 0..4 {
            tr.arriving(a, u64::from(a), t);
            tr.have(a, u64::from(a), t + ms(1000));
        }
        let t1 = t + ms(1000);
        assert_eq!(tr.locate_t(3, 7, t1), Answer::Relay);
        tr.arriving(3, 7, t1);
        assert_eq!(tr.locate_t(0, 7, t1 + ms(200)), Answer::Peers(vec![3]), "a fresh arrival at the swarm's pace");
        tr.arriving(0, 7, t1 + ms(2400));
        let mut on_0 = Fetching { may_claim: true, open: vec![0], flows_free: 0 };
        assert_eq!(tr.locate(1, 7, &mut on_0, t1 + ms(2400)), Answer::Peers(vec![0]));
        tr.arriving(1, 7, t1 + ms(2500));
        (tr, t1)
    }

    #[test]
    fn an_arrival_fed_by_a_slow_arrival_is_not_named_while_the_relay_can_serve_it() {
        let t = Instant::now();
        let ms = Duration::from_millis;
        let (mut tr, t1) = chain_of_arrivals(t);
        assert_eq!((tr.feeds[&(3, 7)], tr.feeds[&(0, 7)], tr.feeds[&(1, 7)]), (Origin::Relay, Origin::Peer(3), Origin::Peer(0)), "each arrival's source as named");
        // 3 s in, agent 3's arrival is over 2.5× the swarm's median (1 s): slow itself. Agents 0 and 1
        // receive the block from it (one and two hops) and are fresh themselves: before, agent 2 was
        // named them and read at agent 3's pace.
        // Block 9: agent 2 holds it whole, agent 3 receives it; agent 0 is named both, the whole first.
        tr.have(2, 9, t1);
        tr.arriving(3, 9, t1 + ms(100));
        assert_eq!(tr.locate_t(0, 9, t1 + ms(200)), Answer::Peers(vec![2, 3]));
        tr.arriving(0, 9, t1 + ms(2600));
        let now = t1 + ms(3000);
        let mut on_0 = Fetching { may_claim: true, open: vec![0], flows_free: 0 };
        assert_eq!(tr.locate(1, 9, &mut on_0, now), Answer::Peers(vec![0]), "agent 0's arrival of block 9 is fed by the whole holder named first, not by the slow one named beside it");
        let busy = &mut Fetching { may_claim: false, open: Vec::new(), flows_free: 2 };
        assert_eq!(tr.locate(2, 7, busy, now), Answer::Wait, "an asker whose relay reads are all taken waits rather than read at the slow host's pace, one or two hops away");
        let grants = tr.relay_grants();
        assert_eq!(tr.locate_t(2, 7, now), Answer::Relay, "the slow claim is released to the next asker: a second copy from the relay");
        assert_eq!(tr.relay_grants(), grants + 1);
        tr.arriving(2, 7, now);
        // Agent 0 moves its read away from agent 3 and asks again: agent 1 is fed by agent 0 itself
        // (a circle), agent 3 is slow; agent 2's arrival comes from the relay.
        assert_eq!(tr.locate_t(0, 7, now + ms(100)), Answer::Peers(vec![2]));
        assert_eq!(tr.feeds[&(0, 7)], Origin::Peer(3), "agent 0's arrival under way is still the read from agent 3 (the moved read runs on and feeds it)");
        let mut on_0 = Fetching { may_claim: true, open: vec![0], flows_free: 1 };
        assert_eq!(tr.locate(1, 7, &mut on_0, now + ms(100)), Answer::Peers(vec![2]), "agent 1: agent 0's arrival is fed by the slow host, not named even on a connection open to it");
        // Once agent 3 holds the block, arrivals fed by it are as fast as its upload.
        tr.have(3, 7, now + ms(200));
        let Answer::Peers(named) = tr.locate(1, 7, &mut Fetching { may_claim: true, open: vec![0], flows_free: 1 }, now + ms(200)) else { panic!("holders") };
        assert!(named.contains(&0), "agent 0's source holds the block whole: {named:?}");
    }

    #[test]
    fn with_equal_paces_an_arrivals_source_changes_no_answer() {
        let t = Instant::now();
        let ms = Duration::from_millis;
        // The same questions to two trackers, one of which never knows an arrival's source.
        let (mut tr, t1) = chain_of_arrivals(t);
        let (mut blind, _) = chain_of_arrivals(t);
        // (Agents that receive the block already would be named arrivals fed by their own: that is
        // no longer answered, whatever the paces, but such an agent asks only once it moved its read.)
        for (asker, at) in [(2, 500), (2, 2000), (2, 2450), (2, 2490)] {
            blind.feeds.clear();
            let now = t1 + ms(at);
            assert_eq!(tr.locate_t(asker, 7, now), blind.locate_t(asker, 7, now), "agent {asker} at {at} ms");
        }
        assert_eq!(tr.relay_grants(), blind.relay_grants(), "no second copy");
        // A swarm at one pace: chains of arrivals are named as before, and the relay sends one copy.
        let mut tr = joined(8, 4);
        for b in 0..4 {
            tr.arriving(b as AgentId, b, t);
            tr.have(b as AgentId, b, t + ms(1000));
        }
        let t1 = t + ms(1000);
        assert_eq!(tr.locate_t(0, 5, t1), Answer::Relay);
        tr.arriving(0, 5, t1);
        assert_eq!(tr.locate_t(1, 5, t1), Answer::Peers(vec![0]));
        tr.arriving(1, 5, t1 + ms(100));
        let mut on_1 = Fetching { may_claim: true, open: vec![1], flows_free: 0 };
        assert_eq!(tr.locate(2, 5, &mut on_1, t1 + ms(200)), Answer::Peers(vec![1]), "an arrival fed by an arrival at the swarm's pace");
        tr.arriving(2, 5, t1 + ms(200));
        let mut on_2 = Fetching { may_claim: true, open: vec![2], flows_free: 0 };
        assert_eq!(tr.locate(3, 5, &mut on_2, t1 + ms(1500)), Answer::Peers(vec![2]), "two hops from the claimer, all at the swarm's pace");
        assert_eq!(tr.relay_grants(), 1);
    }

    #[test]
    fn a_block_whose_holders_are_all_full_waits_for_them_even_with_the_relay_idle() {
        let t = Instant::now();
        let mut tr = joined(4, 4);
        tr.have_t(0, 0);
        tr.load(0, UPLOADS_MAX as u32, 0, t);
        let grants = tr.relay_grants();
        assert_eq!(tr.locate(2, 0, &mut reader(), t), Answer::Wait, "block 0's only holder is full: wait, no second copy from the relay");
        assert_eq!(tr.relay_grants(), grants, "the master's host sends each block once");
    }

    /// A tracker for 4 blocks with agents `0..agents` joined, all serving, agent 0 holding block 0
    /// and serving its maximum at the time returned.
    fn full_holder_of_block_0(agents: AgentId) -> (Tracker, Instant) {
        let t = Instant::now();
        let mut tr = joined(4, agents);
        tr.have_t(0, 0);
        tr.load(0, UPLOADS_MAX as u32, 0, t);
        (tr, t)
    }

    #[test]
    fn a_block_whose_holders_stay_full_far_longer_than_a_moment_is_served_again_by_the_relay() {
        let ms = Duration::from_millis;
        let (mut tr, t) = full_holder_of_block_0(4);
        let grants = tr.relay_grants();
        // No link measured yet: the least wait counts.
        assert_eq!(tr.starved_after(), STARVED_AFTER_MIN);
        // An asker with no flow free is not kept from a holder: its wait starts no clock.
        let busy = || Fetching { may_claim: true, open: Vec::new(), flows_free: 0 };
        for at in [0, 500, 1000] {
            assert_eq!(tr.locate(1, 0, &mut busy(), t + ms(at)), Answer::Wait);
        }
        assert_eq!(tr.locate(2, 0, &mut reader(), t + ms(1000)), Answer::Wait, "only askers ready to read are starved: a wait from 1 s");
        // Askers ready to read are told to wait from 3 s on (nobody renewed the wait since 1 s).
        assert_eq!(tr.locate(2, 0, &mut reader(), t + ms(3000)), Answer::Wait);
        // A holder with a free slot named in between ends the wait: the clock starts again.
        tr.load(0, 0, 0, t + ms(3500));
        assert_eq!(tr.locate(2, 0, &mut reader(), t + ms(3500)), Answer::Peers(vec![0]));
        tr.load(0, UPLOADS_MAX as u32, 0, t + ms(3600));
        assert_eq!(tr.locate(3, 0, &mut reader(), t + ms(3600)), Answer::Wait);
        // Another read on a connection open to the full holder: the block spreads, the wait ends too.
        let mut reading = Fetching { may_claim: true, open: vec![0], flows_free: 0 };
        assert_eq!(tr.locate(1, 0, &mut reading, t + ms(4000)), Answer::Peers(vec![0]));
        assert_eq!(tr.locate(3, 0, &mut reader(), t + ms(4100)), Answer::Wait);
        assert_eq!(tr.locate(3, 0, &mut reader(), t + ms(5000)), Answer::Wait, "0.9 s: a moment");
        assert_eq!(tr.relay_grants(), grants, "no second copy while the holders are busy for a moment");
        assert_eq!(tr.locate(3, 0, &mut reader(), t + ms(5100)), Answer::Relay, "1 s of askers kept from every holder: the relay serves it again");
        assert_eq!(tr.relay_grants(), grants + 1);
        // While that claim stands nobody waits for the block: asked now, no clock starts, so once the
        // claim is done and both holders are full, a wait starts only from the next ask.
        assert_eq!(tr.locate(2, 0, &mut reader(), t + ms(5200)), Answer::Wait);
        tr.have(3, 0, t + ms(5500));
        tr.load(3, UPLOADS_MAX as u32, 0, t + ms(5500));
        assert_eq!(tr.locate(2, 0, &mut reader(), t + ms(5800)), Answer::Wait);
        assert_eq!(tr.locate(2, 0, &mut reader(), t + ms(6300)), Answer::Wait, "a wait from 5.8 s, not 5.2 s");
        assert_eq!(tr.relay_grants(), grants + 1);
    }

    #[test]
    fn a_wait_nobody_renewed_starts_again() {
        let ms = Duration::from_millis;
        let (mut tr, t) = full_holder_of_block_0(4);
        assert_eq!(tr.locate(2, 0, &mut reader(), t), Answer::Wait);
        // Nobody asks for 5 s (the asker left, or read other blocks): a later asker is not handed a
        // copy at once on the strength of that old wait.
        assert_eq!(tr.locate(3, 0, &mut reader(), t + ms(5000)), Answer::Wait, "the wait starts again");
        assert_eq!(tr.locate(3, 0, &mut reader(), t + ms(5500)), Answer::Wait);
        assert_eq!(tr.locate(3, 0, &mut reader(), t + ms(6000)), Answer::Relay, "1 s of a renewed wait");
    }

    #[test]
    fn the_wait_before_a_second_copy_is_thirty_two_of_the_swarms_block_times() {
        let ms = Duration::from_millis;
        let (mut tr, t) = full_holder_of_block_0(4);
        tr.pace.link_median = Some(0.5);
        assert_eq!(tr.starved_after(), Duration::from_secs(16));
        tr.pace.link_median = Some(0.001);
        assert_eq!(tr.starved_after(), STARVED_AFTER_MIN, "on fast links, at least the least wait");
        for m in [f64::INFINITY, f64::NAN] {
            tr.pace.link_median = Some(m);
            assert_eq!(tr.starved_after(), Duration::MAX, "a median that makes no duration waits for good");
        }
        // `locate` goes by it: 3.2 s at 0.1 s per block.
        tr.pace.link_median = Some(0.1);
        for at in (0..=3100).step_by(500).chain([3100]) {
            assert_eq!(tr.locate(2, 0, &mut reader(), t + ms(at)), Answer::Wait, "at {at} ms");
        }
        assert_eq!(tr.locate(2, 0, &mut reader(), t + ms(3200)), Answer::Relay);
    }

    #[test]
    fn a_wait_ends_with_any_relay_grant() {
        let ms = Duration::from_millis;
        let (mut tr, t) = full_holder_of_block_0(4);
        assert_eq!(tr.locate(2, 0, &mut reader(), t), Answer::Wait);
        assert_eq!(tr.locate(2, 0, &mut reader(), t + ms(500)), Answer::Wait);
        // The only holder leaves: the relay serves the block again, not through the guard.
        tr.leave(0);
        assert_eq!(tr.locate(3, 0, &mut reader(), t + ms(700)), Answer::Relay);
        tr.have(3, 0, t + ms(800));
        tr.load(3, UPLOADS_MAX as u32, 0, t + ms(800));
        // A wait from 0.9 s, not from 0 s.
        assert_eq!(tr.locate(2, 0, &mut reader(), t + ms(900)), Answer::Wait);
        assert_eq!(tr.locate(2, 0, &mut reader(), t + ms(1200)), Answer::Wait, "the grant at 0.7 s ended the wait from 0 s");
        assert_eq!(tr.locate(2, 0, &mut reader(), t + ms(1900)), Answer::Relay);
    }

    #[test]
    fn an_asker_that_does_not_serve_takes_no_repair_copy() {
        let ms = Duration::from_millis;
        let (mut tr, t) = full_holder_of_block_0(3);
        tr.join(3, false);
        for at in [0, 500, 1000, 1500] {
            assert_eq!(tr.locate(3, 0, &mut reader(), t + ms(at)), Answer::Wait, "it would never pass the block on");
        }
        assert_eq!(tr.locate(2, 0, &mut reader(), t + ms(2000)), Answer::Wait);
        assert_eq!(tr.locate(2, 0, &mut reader(), t + ms(3000)), Answer::Relay, "one that serves does, after its own wait");
    }

    #[test]
    fn an_agent_that_read_two_blocks_side_by_side_from_a_slow_source_keeps_its_own_pace() {
        let t = Instant::now();
        let s = Duration::from_secs;
        let mut tr = joined(16, 3);
        // (agent, block, started, took): each agent's arrivals one after another, agent 0's last two
        // side by side from a slow source (its link busy 8 s for four blocks: 2× the others').
        let arrivals = [(0, 0, 0, 1), (1, 1, 0, 1), (2, 2, 0, 1), (0, 3, 1, 1), (1, 4, 1, 1), (2, 5, 1, 1), (0, 6, 2, 6), (0, 7, 2, 6)];
        for (a, b, from, _) in arrivals {
            tr.arriving(a, b, t + s(from));
        }
        for (a, b, from, took) in arrivals {
            tr.have(a, b, t + s(from + took));
        }
        tr.arriving(0, 9, t + s(10));
        assert_eq!(tr.locate_t(1, 9, t + s(10)), Answer::Peers(vec![0]), "two blocks at a slow source's pace of its last four: agent 0 still keeps the swarm's");
        assert_eq!(tr.locate_t(0, 10, t + s(10)), Answer::Relay, "and claims from the relay");
    }

    /// Agent `a` takes blocks `4a..4a + 4` at once from `t`, its link split over the four: they come
    /// 1.2–1.35 s later, 0.34 s of its link each.
    fn four_at_once(tr: &mut Tracker, a: AgentId, t: Instant) {
        for i in 0..4 {
            tr.arriving(a, 4 * u64::from(a) + i, t);
        }
        for i in 0..4 {
            tr.have(a, 4 * u64::from(a) + i, t + Duration::from_millis(1200 + 50 * i));
        }
    }

    #[test]
    fn a_reader_saying_a_holder_lacks_a_block_does_not_end_the_holder_s_arrival() {
        let t = Instant::now();
        let ms = Duration::from_millis;
        let mut tr = joined(8, 3);
        tr.arriving(0, 0, t);
        // Agent 1's read of it from agent 0 failed (its connection broke): agent 0 is named no more
        // for block 0, ...
        tr.not_at(1, 0, 0);
        assert_eq!(tr.holders(0), 0);
        assert_eq!(tr.locate_t(2, 0, t), Answer::Relay, "no holder named: from the relay");
        // ... but its own arrival went on, and its time counts for its pace and its link.
        tr.have(0, 0, t + ms(3000));
        assert_eq!(tr.pace.secs.get(&0), Some(&3.0), "the arrival's 3 s are agent 0's pace");
        assert_eq!(tr.pace.busy.get(&0).map(|b| (b.blocks, b.secs)), Some((1, 3.0)), "and its link's");
        // Said by agent 0 itself, its arrival ends: the block, when it comes by another read later,
        // brings no arrival time with it.
        tr.arriving(0, 1, t + ms(3000));
        tr.not_at(0, 0, 1);
        tr.have(0, 1, t + ms(9000));
        assert_eq!(tr.pace.busy.get(&0).map(|b| b.blocks), Some(1), "an arrival taken back by its holder counts nothing");
        assert_eq!(tr.holders(1), 1, "and the block, held, is named again");
    }

    #[test]
    fn a_host_on_a_slow_link_is_known_by_its_link_not_by_its_first_arrival_alone() {
        let t = Instant::now();
        let ms = Duration::from_millis;
        let mut tr = joined(32, 4);
        // Agents 0–2 split their links over four reads each: every block takes them about 1.3 s,
        // and they receive one every 0.34 s.
        for a in 0..3 {
            four_at_once(&mut tr, a, t);
        }
        // Agent 3's first block came alone on its link, in 1.7 s: not slow by that arrival (under
        // 2.5× the others' 1.3 s), five times slower by its link.
        assert_eq!(tr.locate_t(3, 13, t), Answer::Relay, "at the start nobody's pace is known");
        tr.arriving(3, 12, t);
        tr.have(3, 12, t + ms(1700));
        tr.arriving(3, 13, t + ms(1700));
        assert_eq!(tr.locate_t(3, 20, t + ms(1800)), Answer::Wait, "a host on a slow link takes no more blocks from the relay while faster agents pull");
        assert_eq!(tr.locate_t(0, 13, t + ms(1800)), Answer::Relay, "its claim, arriving at its link's pace, is served again to a faster asker");
        assert_eq!(tr.locate_t(1, 13, t + ms(1800)), Answer::Wait, "the others wait for that copy");
        tr.arriving(0, 13, t + ms(1850));
        assert_eq!(tr.locate_t(1, 13, t + ms(1900)), Answer::Peers(vec![0]), "and read it, not agent 3's");
    }

    #[test]
    fn an_agent_whose_reads_share_its_link_is_not_slow_at_its_first_block() {
        let t = Instant::now();
        let ms = Duration::from_millis;
        let mut tr = joined(32, 3);
        for a in 0..2 {
            four_at_once(&mut tr, a, t);
        }
        // Agent 2 started its four 0.3 s later: its first block took 1.2 s, with three beside it.
        for i in 0..4 {
            tr.arriving(2, 8 + i, t + ms(300));
        }
        tr.have(2, 8, t + ms(1500));
        assert_eq!(tr.locate_t(2, 20, t + ms(1500)), Answer::Relay, "not slow: it claims from the relay");
    }

    #[test]
    fn a_claim_taken_for_a_read_moved_from_a_slow_holder_is_judged_by_the_claim_not_the_old_arrival() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut tr = joined(32, 4);
        // Agents 0–2 took a block a second each, one after another.
        for a in 0..3u64 {
            for i in 0..2 {
                tr.arriving(a as AgentId, 10 + 2 * a + i, t0 + ms(1000 * i));
                tr.have(a as AgentId, 10 + 2 * a + i, t0 + ms(1000 * (i + 1)));
            }
        }
        let t = t0 + ms(2000);
        // Agent 3, whose link nobody knows yet, claims block 6; agents 0 and 1 read its arrival.
        assert_eq!(tr.locate_t(3, 6, t), Answer::Relay);
        tr.arriving(3, 6, t + ms(100));
        for a in [0, 1] {
            assert_eq!(tr.locate_t(a, 6, t + ms(200)), Answer::Peers(vec![3]), "not yet overdue");
        }
        for a in [0, 1] {
            tr.arriving(a, 6, t + ms(300));
        }
        // Five seconds on, agent 0 moves its read: the claim is overdue, and agent 0 takes it over.
        assert_eq!(tr.locate_t(0, 6, t + ms(5000)), Answer::Relay, "agent 3's claim is overdue");
        // Agent 1 moves its read too. Agent 0's arrival (the one it serves) is still fed by agent 3,
        // and under way since 4.7 s, but its claim is a moment old.
        let grants = tr.relay_grants();
        assert_eq!(tr.locate_t(1, 6, t + ms(5100)), Answer::Wait, "agent 0's claim will give it the block whole: no third copy");
        assert_eq!(tr.relay_grants(), grants);
        tr.have(0, 6, t + ms(6000));
        assert_eq!(tr.locate_t(1, 6, t + ms(6100)), Answer::Peers(vec![0]), "and agent 1 reads it there");
    }

    #[test]
    fn a_claim_is_judged_by_its_own_arrival_after_the_claimer_completes_another() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut tr = joined(32, 3);
        for a in 0..2u64 {
            tr.arriving(a as AgentId, 10 + a, t0);
            tr.have(a as AgentId, 10 + a, t0 + ms(1000));
        }
        let t = t0 + ms(1000);
        // Agent 2 claims blocks 6 and 7; its arrival of 6 begins at once and goes slowly.
        assert_eq!(tr.locate_t(2, 6, t), Answer::Relay);
        assert_eq!(tr.locate_t(2, 7, t), Answer::Relay);
        tr.arriving(2, 6, t + ms(100));
        // It completes block 7 (read elsewhere): its claims' clock restarts, after block 6's arrival began.
        tr.have(2, 7, t + ms(2000));
        // Block 6's arrival has taken 3.9 s, over 2.5× the swarm's 1 s: not a moved read's, so it is
        // judged as it is, and the next asker gets a copy of its own.
        assert_eq!(tr.locate_t(0, 6, t + ms(4000)), Answer::Relay);
    }

    /// Two agents of a snapshot of `blocks` blocks: agent 0 took blocks 0 and 2 in 1 s each, agent 1
    /// block 1 in 5 s (slow against 0).
    fn a_slow_agent_beside_a_fast_one(blocks: u64) -> (Tracker, Instant) {
        let t = Instant::now();
        let s = Duration::from_secs;
        let mut tr = joined(blocks, 2);
        tr.set_total(blocks);
        tr.arriving(0, 0, t);
        tr.have(0, 0, t + s(1));
        tr.arriving(1, 1, t);
        tr.have(1, 1, t + s(5));
        tr.arriving(0, 2, t);
        tr.have(0, 2, t + s(1));
        (tr, t)
    }

    #[test]
    fn a_slow_agent_claims_from_the_relay_once_no_faster_agent_pulls() {
        let s = Duration::from_secs;
        let (mut tr, t) = a_slow_agent_beside_a_fast_one(4);
        assert_eq!(tr.locate_t(1, 3, t + s(5)), Answer::Wait, "agent 0 is faster and still pulls");
        tr.arriving(0, 1, t + s(5));
        tr.have(0, 1, t + s(6));
        tr.arriving(0, 3, t + s(6));
        tr.have(0, 3, t + s(7));
        assert_eq!(tr.needing(1), 0, "agent 0 is complete");
        tr.leave(0);
        assert_eq!(tr.locate_t(1, 3, t + s(8)), Answer::Relay, "alone, the slow agent is the swarm's pace");
    }

    #[test]
    fn a_slow_agent_takes_a_block_nobody_keeps_any_more_from_the_relay_while_faster_agents_pull() {
        let s = Duration::from_secs;
        let (mut tr, t) = a_slow_agent_beside_a_fast_one(8);
        assert_eq!(tr.locate_t(1, 3, t + s(5)), Answer::Wait, "agent 1 is slow: block 3 nobody has yet comes to it through agent 0");
        // The relay's other ways to a claim (the repair of a starved block, holders too slow) do not
        // serve a slow agent a block that has a holder.
        let f = Fetching { may_claim: true, open: Vec::new(), flows_free: 1 };
        assert_eq!(tr.claim(1, 2, &f, t + s(5)), Answer::Wait, "block 2 is held: the slow agent waits for its holder");
        // Agent 0 drops block 0 from its cache (it still pulls): nobody holds it now.
        tr.not_at(0, 0, 0);
        assert_eq!(tr.holders(0), 0);
        assert_eq!(tr.locate_t(1, 0, t + s(5)), Answer::Relay, "no faster agent will bring block 0 back");
        assert_eq!(tr.locate_t(1, 3, t + s(5)), Answer::Wait, "still, not a block the swarm has yet");
        tr.not_at(0, 0, 2);
        assert_eq!(tr.locate_t(1, 2, t + s(5)), Answer::Wait, "one such copy at a time: its relay reads go at its pace and hold a relay flow");
        tr.arriving(1, 0, t + s(5));
        tr.have(1, 0, t + s(10));
        assert_eq!(tr.locate_t(1, 2, t + s(10)), Answer::Relay, "block 0 done: the next");
    }

    #[test]
    fn askers_take_equally_rare_blocks_in_orders_of_their_own() {
        let t = Instant::now();
        let mut tr = joined(16, 3);
        for b in 0..16 {
            tr.have_t(2, b);
        }
        let order = |tr: &Tracker, a: AgentId| {
            let mut v: Vec<u64> = (0..16).collect();
            v.sort_by_key(|b| tr.precedence(a, *b));
            v
        };
        let (o0, o1) = (order(&tr, 0), order(&tr, 1));
        assert_ne!(o0, o1, "two agents that joined together would ask one holder for the same blocks in the same order");
        // Not one cycle entered at different points: the first blocks differ between any two askers.
        for x in 0..16 {
            for y in x + 1..16 {
                assert_ne!(order(&tr, x)[..3], order(&tr, y)[..3], "agents {x} and {y} start alike");
            }
        }
        let mut sorted = o0.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..16).collect::<Vec<_>>());
        tr.have_t(1, 3);
        tr.not_at(2, 2, 5);
        tr.arriving(1, 5, t);
        let o0 = order(&tr, 0);
        assert_eq!(o0.last(), Some(&5), "only arriving somewhere: last, however rare");
        assert_eq!(o0[o0.len() - 2], 3, "two holders: after the blocks one holds");
    }

    #[test]
    fn a_failed_arrival_is_taken_back_and_named_once_when_it_comes_again() {
        let t = Instant::now();
        let mut tr = joined(1, 3);
        tr.set_total(1);
        tr.arriving(0, 0, t);
        tr.not_at(0, 0, 0);
        assert_eq!((tr.holders(0), tr.whole_holders(0)), (0, 0));
        assert_eq!(tr.locate_t(1, 0, t), Answer::Relay, "no holder: from the relay");
        tr.arriving(0, 0, t);
        tr.have_t(0, 0);
        assert_eq!((tr.holders(0), tr.whole_holders(0)), (1, 1));
        assert_eq!(tr.locate_t(2, 0, t), Answer::Peers(vec![0]), "its stale entry and its new one: named once");
        tr.not_at(0, 0, 0);
        assert_eq!((tr.holders(0), tr.whole_holders(0)), (0, 0), "a whole holder taken off counts as neither");
        let mut quiet = joined(1, 2);
        quiet.join(5, false);
        quiet.arriving(5, 0, t);
        assert_eq!(quiet.holders(0), 0, "an agent that does not serve is never named");
    }

    #[test]
    fn a_departed_or_bad_holder_is_not_named() {
        let t = Instant::now();
        let mut tr = joined(1, 3);
        tr.have_t(0, 0);
        tr.have_t(1, 0);
        tr.leave(0);
        assert_eq!(tr.locate_t(2, 0, t), Answer::Peers(vec![1]));
        tr.not_at(2, 1, 0);
        assert_eq!(tr.locate_t(2, 0, t), Answer::Relay);
        tr.have_t(7, 0);
        assert_eq!(tr.locate_t(2, 0, t), Answer::Relay, "an agent that never joined (or left) is not a holder");
        let mut tr = joined(2, 2);
        for (a, b) in [(0, 0), (0, 1), (1, 0), (1, 1)] {
            tr.have_t(a, b);
        }
        tr.forget(0);
        assert_eq!((tr.holders(0), tr.holders(1)), (1, 1), "a peer that sent a corrupt block is named for nothing");
    }

    #[test]
    fn a_holder_serving_its_maximum_is_named_only_to_an_agent_reading_from_it() {
        let t = Instant::now();
        let mut tr = joined(2, 4);
        assert_eq!(tr.locate_t(2, 1, t), Answer::Relay, "the relay is busy sending block 1");
        tr.have_t(0, 0);
        tr.have_t(1, 0);
        tr.load(0, UPLOADS_MAX as u32, 0, t);
        assert_eq!(tr.locate(3, 0, &mut reader(), t), Answer::Peers(vec![1]), "the full holder is left out");
        tr.load(1, UPLOADS_MAX as u32, 0, t);
        assert_eq!(tr.locate(3, 0, &mut reader(), t), Answer::Wait, "every holder full: wait (not a claim: the block has a source)");
        assert_eq!(tr.relay_grants(), 1, "block 1's claim only");
        let mut reading = Fetching { may_claim: true, open: vec![1], flows_free: 0 };
        assert_eq!(tr.locate(3, 0, &mut reading, t), Answer::Peers(vec![1]), "another read on the connection it has open");
        assert_eq!(reading, Fetching { may_claim: true, open: vec![1], flows_free: 0 }, "no new connection counted");
        tr.load(0, 0, 0, t);
        assert_eq!(tr.locate(3, 0, &mut Fetching { may_claim: true, open: vec![1], flows_free: 1 }, t), Answer::Peers(vec![0, 1]), "a new holder first, the open one after");
        tr.leave(0);
        assert_eq!(tr.locate(3, 0, &mut reader(), t), Answer::Wait, "a departed agent is not named");
        tr.load(0, 0, 0, t);
        assert!(!tr.uploads.contains_key(&0), "a departed agent's report is not kept");
    }

    #[test]
    fn the_tracker_counts_the_holders_it_names_until_their_next_report() {
        let t = Instant::now();
        let mut tr = joined(2, 7);
        assert_eq!(tr.locate_t(6, 1, t), Answer::Relay, "the relay is busy sending block 1");
        tr.have_t(0, 0);
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
        assert_eq!(tr.locate(1, 0, &mut reader(), t), Answer::Peers(vec![0]), "an asker's own count does not keep it out");
        // A report that overtook the askers: they stay counted.
        tr.load(0, 0, 0, t);
        assert_eq!(tr.locate(next, 0, &mut reader(), t), Answer::Wait, "the askers sent there are still on their way");
        // One arrived: counted in the report now, and its own count ends (the longest waiting's).
        tr.load(0, 1, 1, t);
        assert_eq!(tr.locate(next, 0, &mut reader(), t), Answer::Wait, "one serving, one on its way: full");
        // It finished, and the other arrived.
        tr.load(0, 1, 1, t);
        assert_eq!(tr.locate(next, 0, &mut reader(), t), Answer::Peers(vec![0]), "one upload, nobody on the way: a slot free");
        assert_eq!(tr.locate(next + 1, 0, &mut reader(), t), Answer::Wait, "the slot went to the asker sent there just now");
        // An asker that went elsewhere holds its count only for NAMED_HOLD.
        assert_eq!(tr.locate(next + 1, 0, &mut reader(), t + NAMED_HOLD), Answer::Peers(vec![0]));
    }

    #[test]
    fn an_asker_that_went_elsewhere_does_not_take_the_place_of_one_that_arrives() {
        let t = Instant::now();
        let mut tr = joined(1, 4);
        tr.have_t(0, 0);
        // Agent 1 is sent to holder 0 and goes elsewhere; half a hold later agent 2 is sent there.
        assert_eq!(tr.locate(1, 0, &mut reader(), t), Answer::Peers(vec![0]));
        assert_eq!(tr.locate(2, 0, &mut reader(), t + NAMED_HOLD / 2), Answer::Peers(vec![0]));
        // Agent 1's count has run out when the holder reports one upload, one arrival: agent 2's.
        let now = t + NAMED_HOLD;
        tr.load(0, 1, 1, now);
        assert_eq!(tr.locate(3, 0, &mut reader(), now), Answer::Peers(vec![0]), "one upload and nobody on the way: a slot free");
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
    fn holders_taken_off_are_never_named_and_the_list_is_compacted() {
        let t = Instant::now();
        let mut tr = joined(1, 41);
        for a in 0..40 {
            tr.have_t(a, 0);
        }
        for a in 0..36 {
            tr.not_at(a, a, 0);
        }
        tr.not_at(0, 0, 0);
        assert_eq!(tr.holders(0), 4, "each taken off once");
        assert!(tr.holders[0].len() <= 2 * 4 + PEERS_PER_ANSWER, "entries no longer listed are dropped once they outnumber the listed: {}", tr.holders[0].len());
        for _ in 0..20 {
            let Answer::Peers(named) = tr.locate_t(40, 0, t) else { panic!("four holders are listed") };
            assert!(named.iter().all(|p| (36..40).contains(p)), "{named:?}");
        }
    }

    #[test]
    fn holders_are_spread_over_askers() {
        let t = Instant::now();
        let mut tr = joined(1, 40);
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
}
