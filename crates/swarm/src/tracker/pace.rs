//! Paces: how long blocks take to arrive at each agent that serves (first bytes to verified), the
//! swarm's median of them, and when they and the links (`link`) are recomputed. Apart because they are
//! measurements, kept from the times passed in; what they make slow is `slowness`'s to say.

use super::link::Busy;
use super::Tracker;
use crate::{lower_median, AgentId};
use std::collections::HashMap;
use std::time::Instant;

/// Arrivals an agent's pace is the median of.
const PACE_SAMPLES: usize = 4;

/// How long blocks take to arrive at each agent that serves, from the first bytes (its `arriving`) to
/// the block verified (its `have`), as times passed in: a holder's reader of a block still arriving
/// goes no faster than that. A host on a slow link takes several times the swarm's median; its
/// arrivals are not named to askers that can be served otherwise (issue 33: with cut-through a host at
/// 20 Mbit/s was named for the blocks it took from the relay, and every reader of those went at its
/// pace).
#[derive(Debug, Default)]
pub(super) struct Pace {
    /// Per agent: seconds per block, the lower median of its last [`PACE_SAMPLES`] arrivals (kept in
    /// `recent`): a block it read from a slow source (its arrival goes at that source's pace) or one
    /// that was already waiting in a socket's buffer moves it little.
    pub(super) secs: HashMap<AgentId, f64>,
    pub(super) recent: HashMap<AgentId, std::collections::VecDeque<f64>>,
    /// Arrivals under way: since when (an arrival that has taken long already is slow, measured or not).
    pub(super) since: HashMap<(AgentId, u64), Instant>,
    /// The median of `secs` (the lower of two), recomputed every few updates.
    pub(super) median: Option<f64>,
    /// Per agent: how long it has had some arrival under way, and the blocks those completed (see
    /// [`Busy`]).
    pub(super) busy: HashMap<AgentId, Busy>,
    /// Per agent: its link's time per block as of the last recomputation (see [`Tracker::links`]),
    /// and their median (the lower of two: of two agents, the faster, so that any gap of 2.5× makes
    /// the other slow).
    pub(super) link: HashMap<AgentId, f64>,
    pub(super) link_median: Option<f64>,
    /// The latest time passed in with an arrival or a block (the recomputation's "now").
    pub(super) clock: Option<Instant>,
    /// Agents still pulling that are not slow, as of that recomputation.
    pub(super) fast_pulling: usize,
    updates: usize,
}

impl Tracker {
    /// An arrival at `a` took `secs`: its pace follows (see [`Pace`]); the median and the agents
    /// slow against it are recomputed every `agents / 8` updates (a pass over the fleet each time).
    pub(super) fn paced(&mut self, a: AgentId, secs: f64) {
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
    pub(super) fn measure(&mut self) {
        self.pace.updates = 0;
        self.pace.median = lower_median(self.pace.secs.values().copied().collect());
        self.links();
        self.pace.link_median = lower_median(self.pace.link.values().copied().collect());
        self.pace.fast_pulling = self.received.iter().filter(|(a, got)| !self.is_complete(**got) && !self.slow(**a)).count();
    }

    /// Time moves on to `now` (never back: the relay's events come in its own clock's order, the
    /// simulator's in its own).
    pub(super) fn tick(&mut self, now: Instant) {
        if self.pace.clock.is_none_or(|c| now > c) {
            self.pace.clock = Some(now);
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::tracker::testing::joined;
    use crate::Answer;
    use std::time::{Duration, Instant};

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
}
