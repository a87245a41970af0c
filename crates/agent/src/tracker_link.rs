//! The pull's tracker-link thread: it does the planner's talking to the relay's tracker, so that the
//! planner never waits on a round trip (one that crosses this host's busy uplink queue, up to 100 ms
//! on the bench's links). Questions go one at a time and their answers come back as what was
//! [`Heard`]; what needs no answer is sent without waiting for it.

use crate::peer::Peering;
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};
use transport::wire::swarm::{Locate, Located};

/// What the planner has the thread say or ask.
pub(crate) enum Ask {
    /// Where are these blocks (answered with [`Heard::Located`]).
    Locate(Locate),
    /// Do others still need blocks (answered with [`Heard::Needed`]).
    Needed,
    /// This agent holds the block, verified.
    Have(u64),
    /// `peer` (or this agent itself) does not hold `block`.
    NotAt { peer: u32, block: u64 },
}

/// What the thread heard back.
pub(crate) enum Heard {
    /// The tracker's answer to a `locate`, and how long it took.
    Located(Vec<Located>, Duration),
    /// How many other agents still miss blocks.
    Needed(u32),
    /// The link failed: the rest comes from the relay alone. The last thing heard.
    Lost(transport::Error),
}

/// Do what the planner asks, in order, and pass on what is heard (`hear` returns false once nobody
/// listens); stop at the link's first failure or when the planner is done.
pub(crate) fn run(peering: &Peering, asks: &Receiver<Ask>, hear: impl Fn(Heard) -> bool) {
    for ask in asks {
        // Locked per request: the load reporter shares the link.
        let mut link = peering.tracker();
        let answered = match ask {
            Ask::Locate(l) => {
                let asked = Instant::now();
                link.locate(&l).map(|a| Some(Heard::Located(a, asked.elapsed())))
            }
            Ask::Needed => link.needed().map(|n| Some(Heard::Needed(n))),
            Ask::Have(b) => link.have(b).map(|()| None),
            Ask::NotAt { peer, block } => link.not_at(peer, block).map(|()| None),
        };
        drop(link);
        match answered {
            Ok(None) => {}
            Ok(Some(h)) => {
                if !hear(h) {
                    return;
                }
            }
            Err(e) => {
                hear(Heard::Lost(e));
                return;
            }
        }
    }
}
