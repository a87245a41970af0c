//! Who is named as a holder of each block: per block a list of agents (holding it whole or receiving
//! it) with its counts, per agent the blocks it is listed for. Apart because the lists are kept lazily
//! (a block may have thousands of holders, and every agent drops blocks from its cache): an agent
//! taken off stays in a block's list until those no longer listed outnumber the listed, and these
//! methods keep the lists and their counts in step (checked in debug builds).

use super::locate::PEERS_PER_ANSWER;
use super::Tracker;
use crate::bits::Bits;
use crate::AgentId;

impl Tracker {
    /// Whether `a` is named as a holder of `b`.
    pub(super) fn is_listed(&self, a: AgentId, b: u64) -> bool {
        self.listed.get(&a).is_some_and(|l| l.get(b))
    }

    /// Name `a` as a holder of `b` (unless it is already). An agent listed, taken off and listed again
    /// (an arrival that failed, then the block) may have a stale entry left in the block's list
    /// besides the new one: `locate` names nobody twice.
    pub(super) fn list(&mut self, a: AgentId, b: u64) {
        let Some(l) = self.listed.get_mut(&a) else { return };
        if !l.get(b) {
            l.set(b, true);
            self.holders[b as usize].push(a);
            self.live[b as usize] += 1;
        }
        self.debug_check(b);
    }

    /// `a` is no longer named as a holder of `b`. Its entry in the block's list goes when those no
    /// longer listed outnumber the listed.
    pub(super) fn unlist(&mut self, a: AgentId, b: u64) {
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

    /// `a` is no longer named as a holder of anything.
    pub(super) fn unlist_all(&mut self, a: AgentId) {
        let blocks: Vec<u64> = self.listed.get(&a).map(Bits::ones).unwrap_or_default();
        for b in blocks {
            self.unlist(a, b);
        }
    }

    /// Whether the block is held whole by nobody and agent `x` receives it (listed, not held).
    pub(super) fn only_arriving_at(&self, x: AgentId, b: u64) -> bool {
        self.is_listed(x, b) && !self.got.get(&x).is_some_and(|g| g.get(b))
    }

    /// The counts kept per block and per fleet agree (checked in debug builds): a block's holders
    /// whole are some of those listed, every listed one has an entry in its list, and the agents
    /// complete are some of those present.
    pub(super) fn debug_check(&self, b: u64) {
        let i = b as usize;
        debug_assert!(self.whole[i] <= self.live[i] && self.live[i] <= self.holders[i].len(), "block {b}: {} whole, {} listed, {} entries", self.whole[i], self.live[i], self.holders[i].len());
        debug_assert!(self.complete <= self.received.len(), "{} complete of {} agents", self.complete, self.received.len());
        debug_assert!(self.holders.len() == self.live.len() && self.live.len() == self.whole.len(), "per-block counts of different lengths");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tracker::testing::joined;
    use crate::Answer;
    use std::time::Instant;

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
}
