//! Links: each agent's receiving time per block whatever the reads sharing its downlink ([`Busy`]),
//! recomputed with the paces. Apart from `pace` because it measures the host, not one arrival: a host
//! on a slow link that took its first block alone on that link looks fast by its arrivals (issue 33).

use super::Tracker;
use crate::AgentId;
use std::collections::HashMap;
use std::time::Instant;

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
pub(super) struct Busy {
    /// Arrivals under way.
    under_way: usize,
    /// Since when, if any are, counted up to now (a completion moves it on).
    from: Option<Instant>,
    /// Seconds counted so far, and the blocks completed in them.
    pub(super) secs: f64,
    pub(super) blocks: u64,
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
    pub(super) fn started(&mut self, now: Instant) {
        self.under_way += 1;
        self.from.get_or_insert(now);
    }

    /// An arrival completed at `now`; `counts`: whether its block counts (the last block is short).
    pub(super) fn completed(&mut self, now: Instant, counts: bool) {
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
    pub(super) fn failed(&mut self) {
        self.under_way = self.under_way.saturating_sub(1);
        if self.under_way == 0 {
            self.from = None;
        }
    }
}

impl Tracker {
    /// Recompute every agent's link (see [`Busy`]) as of the clock. Each arrival still under way is
    /// credited with its time so far over the agent's pace (its arrivals' time), up to one block: the
    /// time shared by reads under way goes to whichever completes first, and without the credit a fast
    /// agent whose first block came with three more nearly done looked four times slower than its
    /// link until they came (on the bench, an even fan-out of two then sent 1.07 copies: the
    /// other agent took its claims as too slow).
    pub(super) fn links(&mut self) {
        let Some(now) = self.pace.clock else { return };
        let mut credit: HashMap<AgentId, f64> = HashMap::new();
        for ((a, _), start) in &self.pace.since {
            if let Some(p) = self.pace.secs.get(a).filter(|p| **p > 0.0) {
                *credit.entry(*a).or_default() += (now.saturating_duration_since(*start).as_secs_f64() / p).min(1.0);
            }
        }
        self.pace.link = self.pace.busy.iter().filter_map(|(a, b)| b.per_block(now, credit.get(a).copied().unwrap_or(0.0)).map(|x| (*a, x))).collect();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tracker::testing::joined;
    use crate::Answer;
    use std::time::Duration;

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
}
