//! Slowness: whether an agent receives more than [`SLOW_RATIO`] times slower than the swarm's median,
//! and whether a holder's arrival of a block (or the arrival feeding it, up to [`FEED_HOPS`] back) is
//! too slow for a given asker, whose read of it would go at its pace. Apart because `locate` and
//! `claim` both judge by these verdicts, and the paces and links they read are only measurements.

use super::Tracker;
use crate::{AgentId, Origin};
use std::time::Instant;

/// An agent whose blocks take more than this many times the swarm's median to arrive is slow
/// ([`limits::ARRIVAL_SLOW_RATIO`]; see [`Tracker::arriving`]).
pub const SLOW_RATIO: f64 = limits::ARRIVAL_SLOW_RATIO;

/// How far back an arrival's sources are followed (an arrival fed by an arrival fed by a slow host):
/// two hops cover a fleet of four to eight, where each block's arrivals chain through few agents, and
/// keep an answer's cost bounded.
const FEED_HOPS: usize = 2;

impl Tracker {
    /// Whether agent `a` receives more than [`SLOW_RATIO`] times slower than the swarm's median: its
    /// arrivals, or its link (see [`Busy`](super::link::Busy)).
    pub(super) fn slow(&self, a: AgentId) -> bool {
        matches!((self.pace.secs.get(&a), self.pace.median), (Some(p), Some(m)) if *p > SLOW_RATIO * m) || self.link_slow(a)
    }

    /// Whether agent `a`'s link (see [`Busy`](super::link::Busy)) is more than [`SLOW_RATIO`] times slower than the
    /// swarm's median.
    fn link_slow(&self, a: AgentId) -> bool {
        matches!((self.pace.link.get(&a), self.pace.link_median), (Some(p), Some(m)) if *p > SLOW_RATIO * m)
    }

    /// Whether holder `x`'s arrival of block `b` is too slow for asker `a`: its pace, or the time
    /// this arrival has taken so far, above [`SLOW_RATIO`] times the swarm's median or the asker's own
    /// pace, whichever is longer (a slow asker is no faster than a holder as slow as itself).
    /// Or its arrival is fed by a source too slow for the asker (see [`Tracker::fed_too_slow`]).
    pub(super) fn too_slow_for(&self, x: AgentId, b: u64, a: AgentId, now: Instant) -> bool {
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
    pub(super) fn slower_than(&self, x: AgentId, so_far: f64, a: AgentId) -> bool {
        if self.link_slow(x) && !self.link_slow(a) {
            return true;
        }
        let Some(m) = self.pace.median else { return false };
        let bar = SLOW_RATIO * m.max(self.pace.secs.get(&a).copied().unwrap_or(0.0));
        self.pace.secs.get(&x).copied().unwrap_or(0.0).max(so_far) > bar
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tracker::testing::joined;
    use crate::{Answer, Fetching};
    use std::time::Duration;

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
}
