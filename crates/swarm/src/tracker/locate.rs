//! The tracker's answer to an asker: where block `b` comes from ([`Tracker::locate`]: holders that
//! can take the asker, the relay, or a wait), and in what order an asker's blocks are answered
//! ([`Tracker::precedence`]). Apart because it is the path every question takes: it reads the other
//! files' verdicts (claims, busy holders, slowness, the starvation guard) and owns none of them.

use super::Tracker;
use crate::{mix, AgentId, Answer, Fetching, Origin};
use std::time::Instant;

/// Most holders named in one answer ([`limits::PEERS_PER_ANSWER`]).
pub const PEERS_PER_ANSWER: usize = limits::PEERS_PER_ANSWER;

/// Most holders of a block looked at for one answer, from a different place for every answer
/// ([`limits::HOLDERS_LOOKED_AT_MAX`]: an answer must not cost a scan of thousands).
pub const HOLDERS_LOOKED_AT_MAX: usize = limits::HOLDERS_LOOKED_AT_MAX;

impl Tracker {
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
            // reports it arrived.
            if let Some(p) = first_fresh {
                self.sent(a, p, now);
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tracker::testing::joined;

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
