//! The pull's planning decisions that are not the swarm's: what the tracker's answers become (reads
//! from the relay, reads from peers, holders to report) and which fetcher thread takes each read. No
//! thread, socket or clock: the pipeline's planner thread drives it; the swarm's
//! [`Chooser`] decides which block and from which source.
//!
//! A fetcher keeps up to the depth's reads in flight on one connection (see
//! [`limits::READS_IN_FLIGHT_PER_CONNECTION`]): so reads *deepen* a connection that has room before
//! they open another. In a swarm the tracker grants an agent about one flow's worth of relay claims,
//! and those belong on one pipelined connection; split over several, each would idle a round trip
//! between blocks, which is what kept fan-out from being flat.

use std::time::Instant;
use swarm::{Answer, Chooser, Origin};
use transport::wire::swarm::{Located, Where};

/// A fetcher thread as the planner sees it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Fetcher {
    /// Reads given to it and not reported back yet.
    pub outstanding: usize,
    /// For a peer fetcher with reads outstanding: the peer (it keeps one connection busy at a time).
    pub serving: Option<u32>,
}

/// The relay reader that takes the next read: the busiest one that still has room, else an idle
/// one; `None` when every reader is full.
pub fn relay_reader(readers: &[Fetcher], depth: usize) -> Option<usize> {
    debug_assert!(readers.iter().all(|f| f.outstanding <= depth), "a relay reader beyond its depth {depth}");
    let room = |f: &Fetcher| f.outstanding < depth;
    readers.iter().enumerate().filter(|(_, f)| room(f)).max_by_key(|(i, f)| (f.outstanding, std::cmp::Reverse(*i))).map(|(i, _)| i)
}

/// The peer fetcher that takes the next read from `peer`: the one already reading from it, if it
/// has room, else an idle one; `None` otherwise (the chooser keeps the peers read from at once within
/// the fetchers, so this is only a transient state).
pub fn peer_fetcher(fetchers: &[Fetcher], peer: u32, depth: usize) -> Option<usize> {
    debug_assert!(fetchers.iter().filter(|f| f.outstanding > 0 && f.serving == Some(peer)).count() <= 1, "peer {peer} read by two fetchers at once");
    if let Some((i, f)) = fetchers.iter().enumerate().find(|(_, f)| f.outstanding > 0 && f.serving == Some(peer)) {
        return (f.outstanding < depth).then_some(i);
    }
    fetchers.iter().position(|f| f.outstanding == 0)
}

/// What the tracker's answers became.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Assigned {
    /// Blocks to read from the relay.
    pub relay: Vec<u64>,
    /// Blocks to read from a peer.
    pub peers: Vec<(u64, u32)>,
    /// (peer, block): every holder named for the block is one this agent avoids; the tracker must
    /// stop naming them for it, or it would never offer the relay.
    pub shunned: Vec<(u32, u64)>,
}

/// Turn the tracker's answers into reads, as the chooser decides (`now`: for holders that refused a
/// moment ago).
pub fn assign(chooser: &mut Chooser, answers: &[Located], now: Instant) -> Assigned {
    let mut out = Assigned::default();
    // In the relay's order: rarest first (the blocks fewest agents hold spread first — the last ones
    // decide when every agent is done), which is also the order in which the relay counted this
    // agent's new connections to holders (swarm::Fetching): taken in another order, a holder it
    // counted would go unused and one it did not would be asked.
    for a in answers {
        match &a.at {
            Where::Relay => {
                if chooser.choose(a.block, &Answer::Relay).is_some() {
                    out.relay.push(a.block);
                }
            }
            Where::Peers(peers) => {
                let ids: Vec<u32> = peers.iter().map(|p| p.id).collect();
                if ids.iter().all(|id| chooser.avoids(*id)) {
                    out.shunned.extend(ids.iter().map(|id| (*id, a.block)));
                    continue;
                }
                if let Some(Origin::Peer(id)) = chooser.choose_at(a.block, &Answer::Peers(ids), now) {
                    out.peers.push((a.block, id));
                }
            }
        }
    }
    debug_assert!(assigned_once(&out), "a block assigned twice: {out:?}");
    out
}

/// No block is read twice at once: each block the answers became is one read, from one source.
fn assigned_once(out: &Assigned) -> bool {
    let mut blocks: Vec<u64> = out.relay.iter().copied().chain(out.peers.iter().map(|(b, _)| *b)).collect();
    let n = blocks.len();
    blocks.sort_unstable();
    blocks.dedup();
    blocks.len() == n
}

/// When the planner may put its next `locate` to the tracker: one question at a time (its answer
/// reflects what the chooser had when it was asked), and after an answer that gave nothing to do,
/// not again for [`limits::LOCATE_RETRY_EVERY`] unless something changed first (a read ended, a
/// block was written): asking again at once would get the same answer.
#[derive(Debug, Default)]
pub struct Asking {
    out: bool,
    quiet_until: Option<Instant>,
}

impl Asking {
    /// May a question go out at `now`?
    pub fn may_ask(&self, now: Instant) -> bool {
        !self.out && self.quiet_until.is_none_or(|t| now >= t)
    }

    /// A question went out.
    pub fn asked(&mut self) {
        self.out = true;
    }

    /// Its answer came at `now`; `useful` if it gave anything to do.
    pub fn answered(&mut self, useful: bool, now: Instant) {
        self.out = false;
        if !useful {
            self.quiet_until = Some(now + limits::LOCATE_RETRY_EVERY);
        }
    }

    /// Something changed that may change the answer: ask when ready.
    pub fn changed(&mut self) {
        self.quiet_until = None;
    }

    /// The tracker is gone: no answer will come to a question that is out.
    pub fn tracker_lost(&mut self) {
        self.out = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use transport::wire::swarm::Peer;

    fn f(outstanding: usize, serving: Option<u32>) -> Fetcher {
        Fetcher { outstanding, serving }
    }

    #[test]
    fn relay_reads_deepen_a_connection_before_opening_another() {
        assert_eq!(relay_reader(&[f(0, None), f(0, None)], 3), Some(0));
        assert_eq!(relay_reader(&[f(1, None), f(0, None)], 3), Some(0), "deepen the busy one");
        assert_eq!(relay_reader(&[f(1, None), f(2, None)], 3), Some(1));
        assert_eq!(relay_reader(&[f(3, None), f(0, None)], 3), Some(1), "full: the next reader opens");
        assert_eq!(relay_reader(&[f(1, None), f(1, None)], 1), None, "shm/ucx readers: one at a time each");
    }

    #[test]
    fn a_peer_is_read_by_one_fetcher_at_a_time() {
        let fs = [f(2, Some(7)), f(0, None)];
        assert_eq!(peer_fetcher(&fs, 7, 3), Some(0), "pipelined on the connection to peer 7");
        assert_eq!(peer_fetcher(&fs, 8, 3), Some(1), "another peer: the idle fetcher");
        assert_eq!(peer_fetcher(&[f(3, Some(7)), f(0, None)], 7, 3), None, "never a second connection to a peer");
        assert_eq!(peer_fetcher(&[f(1, Some(7)), f(1, Some(8))], 9, 3), None);
        assert_eq!(peer_fetcher(&[f(0, Some(7)), f(1, Some(8))], 9, 3), Some(0), "a fetcher with nothing outstanding serves no one");
    }

    #[test]
    fn answers_become_reads_and_avoided_holders_are_reported() {
        let now = Instant::now();
        let mut c = Chooser::new(8, 2).with_depth(3);
        c.published(8);
        c.done(0, 1, 1.0);
        assert_eq!(c.choose(1, &Answer::Peers(vec![9])), Some(Origin::Peer(9)));
        assert_eq!(c.failed(1, true), Some(Origin::Peer(9)), "peer 9 sent a bad block");
        let peer = |id| Peer { id, addr: format!("10.0.0.{id}:1") };
        let answers = vec![
            Located { block: 2, at: Where::Relay },
            Located { block: 5, at: Where::Peers(vec![peer(4)]) },
            Located { block: 3, at: Where::Peers(vec![peer(4), peer(5)]) },
            Located { block: 4, at: Where::Peers(vec![peer(9)]) },
        ];
        let a = assign(&mut c, &answers, now);
        assert_eq!(a.relay, vec![2]);
        assert_eq!(a.peers, vec![(5, 4), (3, 5)], "in the relay's order; block 3 opens a second flow");
        assert_eq!(a.shunned, vec![(9, 4)], "block 4's only holder is avoided");
    }

    #[test]
    fn answers_are_taken_in_the_trackers_order() {
        // One flow, one read on it: the first answer takes it, whatever the number of holders named
        // (the tracker counted this agent at the holder it named first, for that block).
        let mut c = Chooser::new(8, 1).with_depth(1);
        c.published(8);
        let peer = |id| Peer { id, addr: format!("10.0.0.{id}:1") };
        let answers = vec![Located { block: 3, at: Where::Peers(vec![peer(4), peer(5)]) }, Located { block: 5, at: Where::Peers(vec![peer(4)]) }];
        let a = assign(&mut c, &answers, Instant::now());
        assert_eq!(a.peers, vec![(3, 4)], "fewer holders named does not go first");
    }

    #[test]
    fn one_question_at_a_time_and_a_pause_after_a_useless_answer() {
        let t0 = Instant::now();
        let mut a = Asking::default();
        assert!(a.may_ask(t0));
        a.asked();
        assert!(!a.may_ask(t0), "a question is out");
        a.answered(true, t0);
        assert!(a.may_ask(t0), "a useful answer: ask again at once");
        a.asked();
        a.answered(false, t0);
        assert!(!a.may_ask(t0), "nothing to do: the same question now would get the same answer");
        assert!(a.may_ask(t0 + limits::LOCATE_RETRY_EVERY), "after the pause");
        a.changed();
        assert!(a.may_ask(t0), "a change ends the pause");
        a.asked();
        a.tracker_lost();
        assert!(a.may_ask(t0), "no answer will come from a lost tracker");
        a.asked();
        a.changed();
        assert!(!a.may_ask(t0), "a change does not send a second question while one is out");
    }
}
