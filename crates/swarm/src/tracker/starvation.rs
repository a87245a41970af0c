//! The starvation guard: a block whose every holder stays full far longer than a moment (askers
//! ready to read told to wait for [`Tracker::starved_after`]) is served once more by the relay. Apart
//! because it is the one way the relay sends again a block some agent holds whole, a guard against a
//! stall rather than a source of speed (its bound was chosen in the simulator).

use super::Tracker;
use crate::{AgentId, Answer, Fetching};
use std::time::{Duration, Instant};

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
pub(super) struct Starved {
    since: Instant,
    last: Instant,
}

impl Tracker {
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
    pub(super) fn wait_or_repair(&mut self, a: AgentId, b: u64, f: &Fetching, now: Instant) -> Answer {
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tracker::testing::{joined, reader};
    use crate::UPLOADS_MAX;

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
}
