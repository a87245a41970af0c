//! The simulated fleet: the hosts (the relay's, then one per agent) with their links, the agents with
//! their choosers and serve caches, and the seeded draws that make them.

use super::args::{Scale, SimulateArgs};
use swarm::{AgentId, Chooser, Keep, ServeCache};

/// A small deterministic generator (xorshift64*), so that a seed names a fleet.
pub(super) struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// A host's links, each way, in bytes per second, and the bytes its uplink carried.
pub(super) struct Host {
    pub up: f64,
    pub down: f64,
    pub sent: f64,
}

/// One simulated agent: when it starts (and fails), its chooser, what it serves and keeps.
pub(super) struct Agent {
    pub id: AgentId,
    pub host: usize,
    pub start: f64,
    pub fail_at: Option<f64>,
    pub slow: bool,
    pub chooser: Chooser,
    pub alive: bool,
    pub started: bool,
    pub finished: Option<f64>,
    /// Connections it serves blocks on (a connection's pipelined reads are served one after the
    /// other, in one upload slot).
    pub uploads: usize,
    /// Times `uploads` changed: an agent reports every change, also one undone within a step.
    pub load_changes: u64,
    /// Connections it started serving (askers that arrived), for its load reports.
    pub arrivals: u64,
    /// Which blocks handed on it keeps (`None`: every block, for good), by the agents' own rule.
    pub cache: Option<ServeCache>,
}

/// Which of `n` agents are the `k` slow ones (all of them if `k >= n`), drawn from `rng`: the first
/// `k` places of a shuffle.
pub(super) fn draw_slow(rng: &mut Rng, n: usize, k: usize) -> Vec<bool> {
    let k = k.min(n);
    let mut order: Vec<usize> = (0..n).collect();
    for j in 0..k {
        // `%`: a draw of 1.0 - ε times (n - j) rounds to n - j at most once in 2^53; it stays in range.
        let pick = j + (rng.next() * (n - j) as f64) as usize % (n - j);
        order.swap(j, pick);
    }
    let mut slow = vec![false; n];
    for i in &order[..k] {
        slow[*i] = true;
    }
    slow
}

/// The hosts (the relay's first, at the full rate) and the `n` agents, agent `i` on host `i + 1`: which
/// are slow, when each starts and whether and when it fails, drawn from `rng` in that order.
pub(super) fn hosts_and_agents(a: &SimulateArgs, s: &Scale, n: usize, rng: &mut Rng) -> (Vec<Host>, Vec<Agent>) {
    let (bps, blocks, cache_blocks, t_one) = (s.bps, s.blocks, s.cache_blocks, s.t_one);
    let mut hosts = vec![Host { up: bps, down: bps, sent: 0.0 }];
    // `--slow-hosts`: which agents, drawn from the seed. Not the last ones: the tracker gives each
    // agent its own order among equal blocks (by its number), so a slow host with the same number in
    // every seed takes the same first blocks from the relay in every seed (issue 33: always blocks 12
    // and 4 of 32, deep enough in the others' windows that a stall on them was absorbed in nineteen
    // seeds of twenty), where the relay numbers agents as they join and the bench's slow host took
    // blocks 0, 6, 7, 9 or 16 first.
    let slow_set: Option<Vec<bool>> = a.slow_hosts.map(|k| draw_slow(rng, n, k));
    let agents: Vec<Agent> = (0..n)
        .map(|i| {
            let slow = rng.next() < a.slow_fraction;
            let slow = slow_set.as_ref().map_or(slow, |s| s[i]);
            let rate = if slow { bps / a.slow_factor } else { bps };
            hosts.push(Host { up: rate, down: rate, sent: 0.0 });
            let start = rng.next() * a.join_spread;
            let fail_at = (rng.next() < a.fail_fraction).then(|| start + rng.next() * t_one);
            let mut chooser = Chooser::new(a.window, a.downloads).with_relay_fetches(a.relay_readers).with_depth(a.peer_depth).with_relay_depth(a.relay_depth);
            if !a.window_fixed {
                chooser = chooser.with_cache_room(cache_blocks);
            }
            chooser.published(blocks);
            let cache = match (a.serve_cache_mib, a.cache_keeps_newest) {
                (0, _) => None,
                (_, true) => Some(ServeCache::keeping_newest(cache_blocks)),
                (_, false) => Some(ServeCache::new(cache_blocks, Keep::new(a.seed.wrapping_mul(0x1_0000_0001) ^ i as u64))),
            };
            Agent { id: i as AgentId, host: i + 1, start, fail_at, slow, chooser, alive: true, started: false, finished: None, uploads: 0, load_changes: 0, arrivals: 0, cache }
        })
        .collect();
    (hosts, agents)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slow_hosts_are_drawn_from_the_seed_exactly_k_of_them() {
        let draw = |seed: u64, n: usize, k: usize| draw_slow(&mut Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1), n, k);
        for seed in 1..50 {
            assert_eq!(draw(seed, 8, 3).iter().filter(|s| **s).count(), 3);
            assert_eq!(draw(seed, 8, 3), draw(seed, 8, 3), "one seed, one draw");
        }
        assert!(draw(1, 3, 5).iter().all(|s| *s), "more slow hosts than agents: all slow");
        assert!(draw(1, 4, 0).iter().all(|s| !*s));
        // Not always the same agent (the last one was, before issue 33's seventh pass): over 100
        // seeds every one of four is drawn.
        let mut drawn = [false; 4];
        for seed in 1..=100 {
            drawn[draw(seed, 4, 1).iter().position(|s| *s).unwrap()] = true;
        }
        assert_eq!(drawn, [true; 4]);
    }
}
