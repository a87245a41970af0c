//! The relay's side of the swarm: who holds which block, who may take one from the relay, and which
//! holders an asker is sent to. See the crate's documentation for the design.
//!
//! This file holds the tracker's state (one [`Tracker`] per generation), the events that change it
//! (agents joining and leaving, blocks arriving and held, holders taken off) and the counts the relay
//! and the agents read. Each concern that decides on that state has a file of its own, with methods
//! of the same `Tracker` over its fields (private to these files):
//!
//! - `locate`: the answer to "where do I get block b?", and the order an asker's blocks are answered in;
//! - `listing`: which agents are named as holders of each block, taken off lazily;
//! - `claim`: who fetches a block from the relay, the relay's flows shared out, stale claims handed on;
//! - `starvation`: the guard that has the relay serve a block again once its every holder stayed full
//!   far too long;
//! - `uploads`: busy holders, from their reports and the askers sent there since;
//! - `pace`: how long each agent's blocks take to arrive, and the swarm's median;
//! - `link`: each agent's link, its receiving time per block whatever the reads sharing it;
//! - `slowness`: whether an agent, a claimer or an arrival's source is too slow for an asker.

mod claim;
mod link;
mod listing;
mod locate;
mod pace;
mod slowness;
mod starvation;
#[cfg(test)]
mod testing;
mod uploads;

pub use claim::{CLAIMS_PER_FLOW, CLAIM_TIMEOUT, RELAY_FLOWS_MAX};
pub use locate::{HOLDERS_LOOKED_AT_MAX, PEERS_PER_ANSWER};
pub use slowness::SLOW_RATIO;
pub use uploads::NAMED_HOLD;

use crate::bits::Bits;
use crate::{AgentId, Origin, UPLOADS_MAX};
use claim::Claim;
use pace::Pace;
use starvation::Starved;
use std::collections::HashMap;
use std::time::Instant;

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
    /// nobody renewed for [`starvation::STARVED_AFTER_MIN`] starts again (waiting askers ask again within
    /// milliseconds: a gap that long means nobody waited, and an old start must not hand a later asker
    /// a copy at once). At most one entry per block.
    starved: HashMap<u64, Starved>,
    /// Blocks some agent has held whole: one of them that nobody is named for any more was dropped
    /// from every cache that kept it (or its holders left), and only the relay can bring it back.
    reached: Bits,
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

    pub(super) fn is_complete(&self, received: u64) -> bool {
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

    /// How many agents are named for block `b`, holding it whole or receiving it: agents fetch the
    /// rarest blocks of their window first (see [`Tracker::precedence`]).
    pub fn holders(&self, b: u64) -> usize {
        self.live.get(b as usize).copied().unwrap_or(0)
    }

    /// How many agents hold block `b` whole (not counting those still receiving it).
    pub fn whole_holders(&self, b: u64) -> usize {
        self.whole.get(b as usize).copied().unwrap_or(0)
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
    use crate::tracker::testing::joined;
    use crate::Answer;
    use std::time::Duration;

    #[test]
    fn blocks_published_later_can_be_claimed() {
        let t = Instant::now();
        let mut tr = joined(1, 1);
        assert_eq!(tr.locate_t(0, 3, t), Answer::Wait, "not published yet");
        tr.published(4);
        assert_eq!(tr.locate_t(0, 3, t), Answer::Relay);
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
}
