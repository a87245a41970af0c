//! Busy holders: how many uploads each holder serves, from its reports (a round trip late) and the
//! askers the tracker sent there since, so that a holder serving its maximum is named only to askers
//! that read from it already. Apart because it is the tracker's one estimate of a holder's load, kept
//! from what it hands out as well as from what it is told (without the first, every asker within a
//! round trip is sent to the same idle holder and all but one are refused).

use super::Tracker;
use crate::AgentId;
use std::time::{Duration, Instant};

/// How long an asker sent to a holder for a new connection counts as one more upload on it, unless
/// the holder reports it arrived sooner ([`limits::TRACKER_NAMED_HOLD`]).
pub const NAMED_HOLD: Duration = limits::TRACKER_NAMED_HOLD;

impl Tracker {
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
    pub(super) fn expected_uploads(&self, x: AgentId, a: AgentId, now: Instant) -> usize {
        let reported = self.uploads.get(&x).map_or(0, |u| *u as usize);
        let named = self.named.get(&x).map_or(0, |v| v.iter().filter(|(y, at)| *y != a && now.saturating_duration_since(*at) < NAMED_HOLD).count());
        reported + named
    }

    /// Asker `a` was sent to holder `p` for a new connection at `now`: it counts as one more upload
    /// there until `p` reports it arrived, or for [`NAMED_HOLD`]. Kept in the order named (a refresh
    /// moves to the back): `load` takes the longest waiting first.
    pub(super) fn sent(&mut self, a: AgentId, p: AgentId, now: Instant) {
        let askers = self.named.entry(p).or_default();
        askers.retain(|(x, at)| *x != a && now.saturating_duration_since(*at) < NAMED_HOLD);
        askers.push((a, now));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tracker::testing::{joined, reader};
    use crate::{Answer, Fetching, UPLOADS_MAX};

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
}
