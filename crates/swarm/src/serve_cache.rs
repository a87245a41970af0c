//! Which of the blocks an agent handed on to its replica it still keeps for other agents
//! ([`ServeCache`]): the rule the agent's store and the lab's simulator both follow, in one place so
//! that what the simulator measures is what agents do.

use crate::Keep;
use std::collections::BTreeSet;

/// The serve cache's bookkeeping, in blocks (the agent keeps the bytes beside it): blocks join it as
/// they are handed on, and beyond its bound it drops as its choice says.
#[derive(Debug, Clone)]
pub struct ServeCache {
    capacity: u64,
    choice: Choice,
    /// Blocks `0..fed` were handed on.
    fed: u64,
    cached: BTreeSet<u64>,
}

/// How a full cache chooses what to drop.
#[derive(Debug, Clone)]
enum Choice {
    /// The agents' rule: see [`Keep`]. Its victim is the first of `old` or, with none, the oldest
    /// block cached: the block [`Keep::victim`] finds by a scan of the whole cache, found here for
    /// one move of each block into `old` as it ages. The scan at every drop cost a pass over the
    /// cache per block handed on, in every agent and in each of the simulator's (a cache of 8 192
    /// blocks: 1.1 ms per block in a debug build, against 8 µs with `old`).
    Sample {
        keep: Keep,
        /// The cached blocks older than the newest half (below `recent_from`), by [`Keep::rank`].
        old: BTreeSet<(u64, u64)>,
        /// [`Keep::recent_from`] as of the blocks handed on: blocks below it are in `old` while cached.
        recent_from: u64,
    },
    /// The oldest first (every cache of a fleet keeps the same newest blocks): the rule before
    /// [`Keep`], kept for the simulator's side-by-side rows (`--cache-keeps-newest`).
    Newest,
}

impl ServeCache {
    /// A cache of at most `capacity` blocks, choosing by `keep` once full.
    pub fn new(capacity: u64, keep: Keep) -> ServeCache {
        ServeCache { capacity, choice: Choice::Sample { keep, old: BTreeSet::new(), recent_from: 0 }, fed: 0, cached: BTreeSet::new() }
    }

    /// A cache that drops its oldest block first (the simulator's comparison with the rule before).
    pub fn keeping_newest(capacity: u64) -> ServeCache {
        ServeCache { capacity, choice: Choice::Newest, fed: 0, cached: BTreeSet::new() }
    }

    /// Most blocks it keeps (the pull's window looks further ahead while it keeps fewer:
    /// [`crate::Chooser::with_cache_room`]).
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// Blocks `0..n` were handed on: the new ones join the cache, and it drops what is beyond its
    /// bound — its capacity while `others_need` (other agents still miss blocks), nothing kept
    /// otherwise (an agent alone holds only its window, and keeps again once someone joins).
    /// Returns the dropped blocks, in the order dropped (the tracker must stop naming this agent for
    /// them).
    pub fn fed(&mut self, n: u64, others_need: bool) -> Vec<u64> {
        self.cached.extend(self.fed..n);
        self.fed = self.fed.max(n);
        if let Choice::Sample { keep, old, recent_from } = &mut self.choice {
            // The blocks that left the newest half join the old ones, each once: the bound only grows,
            // and the blocks handed on just now are all above the old bound.
            let now_from = Keep::recent_from(self.fed, self.capacity);
            if now_from > *recent_from {
                old.extend(self.cached.range(*recent_from..now_from).map(|b| keep.rank(*b)));
                *recent_from = now_from;
            }
        }
        let bound = if others_need { self.capacity } else { 0 };
        let mut dropped = Vec::new();
        while self.cached.len() as u64 > bound {
            let victim = match &mut self.choice {
                Choice::Sample { old, .. } => old.pop_first().map(|(_, b)| b).or_else(|| self.cached.first().copied()),
                Choice::Newest => self.cached.first().copied(),
            };
            let Some(b) = victim else { break };
            self.cached.remove(&b);
            dropped.push(b);
        }
        dropped
    }

    /// Blocks handed on so far (`0..handed_on()`).
    pub fn handed_on(&self) -> u64 {
        self.fed
    }

    /// Blocks it keeps now.
    pub fn len(&self) -> usize {
        self.cached.len()
    }

    /// Whether it keeps nothing now.
    pub fn is_empty(&self) -> bool {
        self.cached.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handed_on_blocks_are_kept_up_to_the_capacity_as_the_choice_says() {
        let keep = Keep::new(3);
        let mut c = ServeCache::new(2, keep);
        assert!(c.fed(1, true).is_empty(), "one block kept of two");
        let dropped = c.fed(4, true);
        assert_eq!(dropped.len(), 2, "four handed on, two kept");
        assert_eq!(dropped[0], keep.victim(4, 2, [0, 1, 2, 3]).unwrap(), "the choice's victim goes first");
        assert!(!dropped.contains(&3), "the newest half of the cache stays");
        assert_eq!(c.len(), 2);
        assert!(c.fed(4, true).is_empty(), "nothing new handed on, nothing dropped");
    }

    #[test]
    fn an_agent_nobody_needs_keeps_nothing_and_keeps_again_once_someone_does() {
        let mut c = ServeCache::new(8, Keep::new(1));
        c.fed(3, true);
        let mut dropped = c.fed(5, false);
        dropped.sort_unstable();
        assert_eq!(dropped, vec![0, 1, 2, 3, 4]);
        assert!(c.is_empty());
        assert!(c.fed(7, true).is_empty(), "needed again: blocks handed on from now are kept");
        assert_eq!(c.len(), 2);
    }

    #[test]
    fn the_rule_before_drops_the_oldest_and_a_cache_of_nothing_drops_everything() {
        let mut c = ServeCache::keeping_newest(2);
        assert_eq!(c.fed(5, true), vec![0, 1, 2]);
        let mut none = ServeCache::new(0, Keep::new(0));
        assert_eq!(none.fed(2, true), vec![0, 1]);
    }

    /// The cache as it was before it kept its old blocks in order: each victim found by a scan of
    /// the whole cache ([`Keep::victim`]).
    struct Scanned {
        keep: Keep,
        capacity: u64,
        fed: u64,
        cached: BTreeSet<u64>,
    }

    impl Scanned {
        fn fed(&mut self, n: u64, others_need: bool) -> Vec<u64> {
            self.cached.extend(self.fed..n);
            self.fed = self.fed.max(n);
            let bound = if others_need { self.capacity } else { 0 };
            let mut dropped = Vec::new();
            while self.cached.len() as u64 > bound {
                let Some(b) = self.keep.victim(self.fed, self.capacity, self.cached.iter().copied()) else { break };
                self.cached.remove(&b);
                dropped.push(b);
            }
            dropped
        }
    }

    #[test]
    fn a_drop_takes_the_victim_a_scan_of_the_whole_cache_takes() {
        let mut state = 0u64;
        let mut random = |below: u64| {
            state += 1;
            crate::mix(state) % below.max(1)
        };
        for run in 0..100 {
            let capacity = random(12);
            let keep = Keep::new(random(u64::MAX));
            let (mut cache, mut scanned) = (ServeCache::new(capacity, keep), Scanned { keep, capacity, fed: 0, cached: BTreeSet::new() });
            let mut n = 0;
            for step in 0..60 {
                // Mostly a block or two at a time, now and then none, a burst, or a count already passed.
                n += if random(5) == 0 { random(3 * capacity + 4) } else { random(3) };
                let told = if random(10) == 0 { n.saturating_sub(random(4)) } else { n };
                let others_need = random(8) != 0;
                assert_eq!(cache.fed(told, others_need), scanned.fed(told, others_need), "run {run}, step {step}: capacity {capacity}, {told} handed on");
                assert_eq!(cache.len(), scanned.cached.len());
            }
        }
    }
}
