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
#[derive(Debug, Clone, Copy)]
enum Choice {
    /// The agents' rule: see [`Keep`].
    Sample(Keep),
    /// The oldest first (every cache of a fleet keeps the same newest blocks): the rule before
    /// [`Keep`], kept for the simulator's side-by-side rows (`--cache-keeps-newest`).
    Newest,
}

impl ServeCache {
    /// A cache of at most `capacity` blocks, choosing by `keep` once full.
    pub fn new(capacity: u64, keep: Keep) -> ServeCache {
        ServeCache { capacity, choice: Choice::Sample(keep), fed: 0, cached: BTreeSet::new() }
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
        let bound = if others_need { self.capacity } else { 0 };
        let mut dropped = Vec::new();
        while self.cached.len() as u64 > bound {
            let victim = match self.choice {
                Choice::Sample(k) => k.victim(self.fed, self.capacity, self.cached.iter().copied()),
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
}
