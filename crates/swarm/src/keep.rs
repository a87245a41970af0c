//! Which of the blocks an agent handed on to its replica it keeps for other agents, once its serve
//! cache is full ([`Keep`]).

use crate::mix;

/// An agent's choice of the blocks its serve cache keeps: the newest half of the cache always (the
/// agents just behind it want those next), and for the other half a sample of the older blocks of its
/// own, different in every agent.
///
/// Why not simply the newest: every agent passes the blocks in the same order, so a fleet whose
/// caches all kept the newest would all have dropped the same old blocks, and an agent lagging more
/// than a cache behind (a slow host, a late joiner) would find nobody holding what it needs next: the
/// relay would send those blocks again. In the simulator (issue 33, ninth pass: 64 agents, 5 % of them
/// slow, joins over 30 s, 1 GiB with 512 MiB caches) that cost 1.27 copies of the snapshot from the
/// relay's host, against 1.00 with caches that kept everything.
///
/// A sample rather than every agent keeping the same slice: each older block is kept by the agents
/// whose own priority for it ranks among their highest (a reservoir: the older half holds, of every
/// block passed, those of highest priority), so every block stays with about `half / passed` of the
/// fleet, whatever the order in which agents join.
#[derive(Debug, Clone, Copy)]
pub struct Keep {
    seed: u64,
}

impl Keep {
    /// An agent's choice, by `seed`: a different seed in every agent (its number, or any random value)
    /// spreads the old blocks kept over the fleet.
    pub fn new(seed: u64) -> Keep {
        Keep { seed: mix(seed) }
    }

    /// Of the blocks `cached` (all handed on: below `fed`), the one to drop first from a cache of
    /// `capacity` blocks: the lowest priority among those older than the newest half, or, when every
    /// cached block is among the newest half, the oldest. `None` when `cached` is empty.
    ///
    /// This looks at every block cached; the serve cache (`ServeCache`) keeps its old blocks in this
    /// order as they age, and finds the same victim without a scan.
    pub fn victim(&self, fed: u64, capacity: u64, cached: impl IntoIterator<Item = u64>) -> Option<u64> {
        let recent_from = Keep::recent_from(fed, capacity);
        let mut oldest: Option<u64> = None;
        let mut lowest: Option<(u64, u64)> = None;
        for b in cached {
            debug_assert!(b < fed, "block {b} cached before it was handed on ({fed} were)");
            oldest = Some(oldest.map_or(b, |o| o.min(b)));
            if b < recent_from {
                let rank = self.rank(b);
                if lowest.is_none_or(|l| rank < l) {
                    lowest = Some(rank);
                }
            }
        }
        lowest.map(|(_, b)| b).or(oldest)
    }

    /// The first block of the newest half of a cache of `capacity` blocks once `fed` were handed on:
    /// blocks below it are old. The half is rounded up, so that a cache of one block keeps the newest,
    /// not a sampled old one. It only grows as `fed` does.
    pub(crate) fn recent_from(fed: u64, capacity: u64) -> u64 {
        fed.saturating_sub(capacity.div_ceil(2))
    }

    /// Where old block `b` comes in the order old blocks are dropped, lowest first: by this agent's
    /// priority for it, then by number (two blocks of equal priority still come in one order).
    pub(crate) fn rank(&self, b: u64) -> (u64, u64) {
        (self.priority(b), b)
    }

    /// How much this agent wants to keep old block `b`, against its other old blocks.
    fn priority(&self, b: u64) -> u64 {
        mix(self.seed ^ b.wrapping_mul(0x9E37_79B9_7F4A_7C15))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A cache of `capacity` blocks through which `blocks` blocks pass, in order: what it keeps.
    fn pass(k: Keep, capacity: u64, blocks: u64) -> Vec<u64> {
        let mut cached: Vec<u64> = Vec::new();
        for fed in 1..=blocks {
            cached.push(fed - 1);
            while cached.len() as u64 > capacity {
                let v = k.victim(fed, capacity, cached.iter().copied()).unwrap();
                cached.retain(|b| *b != v);
            }
        }
        cached.sort_unstable();
        cached
    }

    #[test]
    fn the_newest_half_of_the_cache_is_always_kept() {
        for seed in 0..20 {
            let kept = pass(Keep::new(seed), 8, 100);
            assert_eq!(kept.len(), 8);
            assert_eq!(kept[4..], [96, 97, 98, 99], "seed {seed}: {kept:?}");
            assert!(kept[..4].iter().all(|b| *b < 96));
        }
    }

    #[test]
    fn a_fleet_keeps_every_old_block_somewhere_and_no_agent_keeps_only_the_newest() {
        // 64 agents, caches of 16 blocks, 128 blocks passed: each block older than the newest 8 is
        // kept by about 64 × 8 / 120 ≈ 4 agents (by none with a chance of (1 - 8/120)^64 ≈ 1 %);
        // kept by the newest alone, blocks 0..112 would be nowhere.
        let fleet: Vec<Vec<u64>> = (0..64).map(|a| pass(Keep::new(a), 16, 128)).collect();
        let nowhere = (0..120).filter(|b| !fleet.iter().any(|k| k.contains(b))).count();
        assert!(nowhere <= 6, "{nowhere} of 120 old blocks dropped by every agent");
        let kept: usize = (0..120).map(|b| fleet.iter().filter(|k| k.contains(&b)).count()).max().unwrap();
        assert!(kept <= 16, "no old block is kept by a large part of the fleet: {kept} of 64 keep one");
        let distinct: std::collections::HashSet<&Vec<u64>> = fleet.iter().collect();
        assert!(distinct.len() > 60, "agents keep different old blocks: {} distinct caches", distinct.len());
        assert!(fleet.iter().all(|k| k[..8].iter().any(|b| *b < 112)), "every agent keeps some blocks older than its newest");
    }

    #[test]
    fn with_only_recent_blocks_cached_the_oldest_goes_first() {
        let k = Keep::new(7);
        assert_eq!(k.victim(10, 8, [6, 7, 8, 9]), Some(6), "all four within the newest half of 8");
        for seed in 0..20 {
            assert_eq!(Keep::new(seed).victim(10, 1, [3, 9]), Some(3), "a cache of one keeps the newest");
        }
        assert_eq!(k.victim(10, 0, Vec::new()), None);
        let first = k.victim(3, 0, [0, 1, 2]).unwrap();
        let rest: Vec<u64> = [0, 1, 2].into_iter().filter(|b| *b != first).collect();
        let second = k.victim(3, 0, rest.iter().copied()).unwrap();
        assert!(first != second && first < 3 && second < 3, "a cache of nothing drops every block, one by one, by priority alone");
    }
}
