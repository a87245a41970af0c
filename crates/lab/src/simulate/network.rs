//! The simulated network: transfers through links shared max-min fairly (a fluid model), and the
//! connections reads are pipelined on, each holding one of its holder's upload slots.

use super::fleet::{Agent, Host};
use std::collections::HashMap;
use swarm::{AgentId, Origin};

/// Reads in flight per (source host, destination host) connection.
pub(super) type Flows = HashMap<(usize, usize), usize>;

/// One read under way (or a holder's refusal on its way back).
pub(super) struct Transfer {
    pub src: usize,
    pub from: Origin,
    pub dst: usize,
    pub block: u64,
    pub left: f64,
    pub since: f64,
    /// Seconds until its first byte moves: its round trip through the queues it met.
    pub wait: f64,
    /// A holder's "busy": it moves nothing, and ends when its round trip does.
    pub refusal: bool,
    /// When it was asked for, among all transfers (reads on one connection are answered in this
    /// order; the vector's order is not kept, transfers are swap-removed).
    pub seq: u64,
    /// Its first bytes moved, and the tracker was told the block is arriving at `dst` (served from
    /// there while it arrives, as real agents do).
    pub announced: bool,
    /// From a holder still receiving the block: that arrival (its `seq`). Cut off when it ends
    /// without the block, as a real holder cuts its readers off.
    pub upstream: Option<u64>,
}

/// Rounds of progressive filling; flows still unfrozen after them keep what they have (slightly
/// pessimistic, and only with many distinct bottleneck levels).
const FILL_ROUNDS_MAX: usize = 12;

/// What the network does this step.
pub(super) struct Rates {
    /// Each transfer's rate.
    pub rate: Vec<f64>,
    /// Per host: whether its uplink, and its downlink, is the bottleneck of a flow — where TCP keeps a
    /// full queue.
    pub up_queue: Vec<bool>,
    pub down_queue: Vec<bool>,
}

/// Max-min fair rates (progressive filling): every flow grows at the same pace until a link it crosses
/// is full; a flow bottlenecked at one end leaves the rest of the other end to the other flows.
pub(super) fn max_min_rates(hosts: &[Host], transfers: &[Transfer]) -> Rates {
    let mut rate = vec![0.0; transfers.len()];
    // Reads pipelined on one connection (several claims on an agent's relay flow) arrive one after
    // the other: only the oldest transfer of each (source, destination) pair moves, once its round
    // trip is over.
    let mut oldest: HashMap<(usize, usize), u64> = HashMap::new();
    for x in transfers.iter().filter(|x| !x.refusal) {
        let o = oldest.entry((x.src, x.dst)).or_insert(x.seq);
        *o = (*o).min(x.seq);
    }
    let mut frozen: Vec<bool> = transfers.iter().map(|x| x.refusal || oldest[&(x.src, x.dst)] != x.seq || x.wait > 0.0).collect();
    let mut up: Vec<f64> = hosts.iter().map(|h| h.up).collect();
    let mut down: Vec<f64> = hosts.iter().map(|h| h.down).collect();
    let mut up_queue = vec![false; hosts.len()];
    let mut down_queue = vec![false; hosts.len()];
    for _ in 0..FILL_ROUNDS_MAX {
        let mut nu = vec![0u32; hosts.len()];
        let mut nd = vec![0u32; hosts.len()];
        for (x, f) in transfers.iter().zip(&frozen) {
            if !f {
                nu[x.src] += 1;
                nd[x.dst] += 1;
            }
        }
        let inc = (0..hosts.len()).flat_map(|h| [(nu[h] > 0).then(|| up[h] / f64::from(nu[h])), (nd[h] > 0).then(|| down[h] / f64::from(nd[h]))]).flatten().fold(f64::INFINITY, f64::min);
        if !inc.is_finite() {
            break;
        }
        for (i, x) in transfers.iter().enumerate() {
            if !frozen[i] {
                rate[i] += inc;
                up[x.src] -= inc;
                down[x.dst] -= inc;
            }
        }
        let full = |c: f64, cap: f64| c <= cap * 1e-9;
        for (i, x) in transfers.iter().enumerate() {
            let (u, d) = (full(up[x.src], hosts[x.src].up), full(down[x.dst], hosts[x.dst].down));
            if !frozen[i] && (u || d) {
                frozen[i] = true;
                up_queue[x.src] |= u;
                down_queue[x.dst] |= d;
            }
        }
    }
    Rates { rate, up_queue, down_queue }
}

/// Whether holder `p` refuses a new connection from host `me`: it serves its maximum, on other
/// connections.
pub(super) fn full(agents: &[Agent], flows: &Flows, p: AgentId, me: usize, max: usize) -> bool {
    agents[p as usize].uploads >= max && !flows.contains_key(&(agents[p as usize].host, me))
}

/// One more read on a connection; whether that opened it.
pub(super) fn open(flows: &mut Flows, pair: (usize, usize)) -> bool {
    let n = flows.entry(pair).or_insert(0);
    *n += 1;
    *n == 1
}

/// One read fewer on a connection; whether that closed it.
pub(super) fn close(flows: &mut Flows, pair: (usize, usize)) -> bool {
    let Some(n) = flows.get_mut(&pair) else { return false };
    *n -= 1;
    if *n == 0 {
        flows.remove(&pair);
        return true;
    }
    false
}

/// A read from `from` (host `src`) to host `dst` ended, whatever its end: one read fewer on its
/// connection, and a peer's upload slot given back when that closed it.
pub(super) fn end_read(flows: &mut Flows, agents: &mut [Agent], from: Origin, src: usize, dst: usize) {
    if close(flows, (src, dst)) {
        if let Origin::Peer(p) = from {
            agents[p as usize].uploads -= 1;
            agents[p as usize].load_changes += 1;
        }
    }
}
