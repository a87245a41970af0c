//! What the tracker's tests share: a tracker with agents joined, and the askers the tests' questions
//! come from. Apart so that each file's tests stay beside the code they test.

use super::Tracker;
use crate::{AgentId, Answer, Fetching};
use std::time::Instant;

impl Tracker {
    /// Asked by an agent that may claim and open flows to any number of peers.
    pub(super) fn locate_t(&mut self, a: AgentId, b: u64, now: Instant) -> Answer {
        self.locate(a, b, &mut Fetching { may_claim: true, open: Vec::new(), flows_free: usize::MAX }, now)
    }
    pub(super) fn have_t(&mut self, a: AgentId, b: u64) {
        self.have(a, b, Instant::now())
    }
}

/// What an asker that reads from no peer yet and may open two flows says.
pub(super) fn reader() -> Fetching {
    Fetching { may_claim: true, open: Vec::new(), flows_free: 2 }
}

/// A tracker for `blocks` blocks with agents `0..agents` joined, all serving.
pub(super) fn joined(blocks: u64, agents: AgentId) -> Tracker {
    let mut tr = Tracker::new(blocks);
    for a in 0..agents {
        tr.join(a, true);
    }
    tr
}
