//! Relay claims: who fetches a block from the relay (the seed), so that the relay's link carries
//! about one copy of the snapshot. The first asker of a block nobody holds claims it; the relay's few
//! flows are shared out among the agents still pulling; a claim whose claimer left, completed nothing
//! for [`CLAIM_TIMEOUT`] or receives too slowly for the next asker is handed on. Apart because every
//! way to a block from the relay, the repairs too, ends here.

use super::Tracker;
use crate::{AgentId, Answer, Fetching};
use std::time::{Duration, Instant};

/// Most flows the relay sends blocks on at once ([`limits::RELAY_FLOWS_MAX`]: few, so that each new
/// block leaves the relay fast).
pub const RELAY_FLOWS_MAX: usize = limits::RELAY_FLOWS_MAX;

/// Claims per relay flow: an agent keeps this many reads in flight on one connection
/// ([`limits::READS_IN_FLIGHT_PER_CONNECTION`]), so that the flow never idles between blocks.
pub const CLAIMS_PER_FLOW: usize = limits::READS_IN_FLIGHT_PER_CONNECTION;

/// A relay claim not completed within this is given to the next agent that asks
/// ([`limits::RELAY_CLAIM_TIMEOUT`]).
pub const CLAIM_TIMEOUT: Duration = limits::RELAY_CLAIM_TIMEOUT;

/// A block's relay claim.
#[derive(Debug, Clone, Copy)]
pub(super) struct Claim {
    /// The agent fetching the block from the relay.
    pub(super) by: AgentId,
    /// Since when: the grant, restarted whenever the claimer completes a claimed block (see
    /// [`Tracker::have`]: its claims are pipelined, and a claim behind another waits for it).
    pub(super) since: Instant,
    /// Granted while the claimer's arrival of the block was under way: it replaces a read the claimer
    /// moved away from a slow holder (see [`Tracker::claim_too_slow`]).
    replaces_moved: bool,
}

impl Tracker {
    /// The relay for `a`'s block `b`, if one of its flows is free for `a` and nobody else fetches the
    /// block from it.
    pub(super) fn claim(&mut self, a: AgentId, b: u64, f: &Fetching, now: Instant) -> Answer {
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

    /// Whether a claim (its claimer, since when) still stands: its claimer is present and completed a
    /// block within [`CLAIM_TIMEOUT`].
    pub(super) fn stands(&self, c: &Claim, now: Instant) -> bool {
        self.alive.contains_key(&c.by) && now.saturating_duration_since(c.since) < CLAIM_TIMEOUT
    }

    /// Whether relay claim `c` on block `b` is too slow for asker `a`: as its claimer's arrival of
    /// the block is (`too_slow_for`), unless the claim replaces a read the claimer moved away from a
    /// slow holder. That read's arrival is still the one the claimer serves (fed by that holder and
    /// under way since the read began), but the claim will give it the block whole soon: it is judged
    /// by its claimer's link and pace and by its own time so far (issue 33: every fast agent moved its
    /// read of a slow host's claim at about the same time, and the second and third judged the first
    /// one's new claim by its old arrival and took one more copy from the relay each: a block sent
    /// four times, 8 MiB of the relay's uplink, in three bench runs of five).
    pub(super) fn claim_too_slow(&self, c: &Claim, b: u64, a: AgentId, now: Instant) -> bool {
        if c.replaces_moved {
            self.slower_than(c.by, now.saturating_duration_since(c.since).as_secs_f64(), a)
        } else {
            self.too_slow_for(c.by, b, a, now)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tracker::testing::joined;
    use crate::{Chooser, Origin};

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
}
