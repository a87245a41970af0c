//! The pull's bookkeeping, with no thread, socket or clock: blocks complete in any order (from the
//! relay and from peers, as the swarm's [`swarm::Chooser`] decides) and leave in order for the replica;
//! a block whose checksum does not match is read again once from the same source, then the source is
//! given up on (a peer) or the pull fails (the relay).

use std::collections::BTreeMap;

/// Times a block is read again after a checksum mismatch before the pull fails
/// ([`limits::BLOCK_REREADS_MAX`]).
pub const REREADS_MAX: u32 = limits::BLOCK_REREADS_MAX;

/// After a checksum mismatch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mismatch {
    /// Read the block again.
    Reread,
    /// Give up: the block failed every attempt.
    Fail,
}

/// What to do after a block failed its checksum on attempt `attempt` (1 = the first read).
pub fn after_mismatch(attempt: u32) -> Mismatch {
    if attempt > REREADS_MAX {
        Mismatch::Fail
    } else {
        Mismatch::Reread
    }
}

/// The pull's bookkeeping; `B` is a block's buffer.
#[derive(Debug)]
pub struct Scheduler<B> {
    total: Option<u64>,
    next_write: u64,
    ready: BTreeMap<u64, B>,
    in_flight: u64,
    in_flight_max: u64,
}

impl<B> Default for Scheduler<B> {
    fn default() -> Self {
        Self::new()
    }
}

impl<B> Scheduler<B> {
    /// A scheduler for a snapshot whose size is not known yet.
    pub fn new() -> Self {
        Scheduler { total: None, next_write: 0, ready: BTreeMap::new(), in_flight: 0, in_flight_max: 0 }
    }

    /// The snapshot has `blocks` blocks (known once the relay has the RDB's length).
    pub fn set_total(&mut self, blocks: u64) {
        debug_assert!(self.total.is_none_or(|t| t == blocks), "the snapshot's block count changed from {:?} to {blocks}", self.total);
        debug_assert!(self.next_write <= blocks && self.ready.keys().next_back().is_none_or(|&i| i < blocks), "blocks beyond the snapshot's {blocks}");
        self.total = Some(blocks);
    }

    /// A reader starts reading a block.
    pub fn started(&mut self) {
        self.in_flight += 1;
        self.in_flight_max = self.in_flight_max.max(self.in_flight);
    }

    /// Block `index` was read and checked.
    pub fn completed(&mut self, index: u64, buf: B) {
        assert!(index >= self.next_write && !self.ready.contains_key(&index), "block {index} completed twice");
        debug_assert!(self.total.is_none_or(|t| index < t), "block {index} beyond the snapshot's {:?}", self.total);
        debug_assert!(self.in_flight > 0, "block {index} completed by a read never started");
        self.in_flight = self.in_flight.saturating_sub(1);
        self.ready.insert(index, buf);
    }

    /// A read started with [`Scheduler::started`] ended without a block (its source failed).
    pub fn abandoned(&mut self) {
        debug_assert!(self.in_flight > 0, "a read abandoned that was never started");
        self.in_flight = self.in_flight.saturating_sub(1);
    }

    /// Blocks handed on so far (`0..n`).
    pub fn written(&self) -> u64 {
        self.next_write
    }

    /// The next block in order, if it is ready: the writer hands it on.
    pub fn next_ready(&mut self) -> Option<B> {
        let b = self.ready.remove(&self.next_write)?;
        self.next_write += 1;
        // Invariant 3: handed on in order, no gap (the block was the next one) and no overlap (none
        // ready below the next).
        debug_assert!(self.ready.keys().next().is_none_or(|&i| i >= self.next_write), "a block ready behind the hand-on");
        debug_assert!(self.total.is_none_or(|t| self.next_write <= t), "handed on beyond the snapshot");
        Some(b)
    }

    /// Every block was handed on.
    pub fn finished(&self) -> bool {
        self.total.is_some_and(|t| self.next_write >= t)
    }

    /// Most reads in flight at once so far.
    pub fn in_flight_max(&self) -> u64 {
        self.in_flight_max
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_leave_in_order() {
        let mut s: Scheduler<&str> = Scheduler::new();
        s.started();
        s.started();
        s.completed(1, "b1");
        assert_eq!(s.next_ready(), None, "block 1 waits for block 0");
        s.completed(0, "b0");
        assert_eq!(s.in_flight_max(), 2);
        assert_eq!(s.next_ready(), Some("b0"));
        assert_eq!(s.next_ready(), Some("b1"));
        assert_eq!(s.written(), 2);
        s.set_total(3);
        assert!(!s.finished());
        s.started();
        s.abandoned();
        s.started();
        s.completed(2, "b2");
        assert_eq!(s.next_ready(), Some("b2"));
        assert!(s.finished());
    }

    #[test]
    fn an_empty_snapshot_is_finished_at_once() {
        let mut s: Scheduler<()> = Scheduler::new();
        s.set_total(0);
        assert!(s.finished());
    }

    #[test]
    fn one_reread_then_fail() {
        assert_eq!(after_mismatch(1), Mismatch::Reread);
        assert_eq!(after_mismatch(2), Mismatch::Fail);
    }

    #[test]
    #[should_panic(expected = "completed twice")]
    fn a_block_cannot_complete_twice() {
        let mut s: Scheduler<()> = Scheduler::new();
        s.started();
        s.started();
        s.completed(0, ());
        s.completed(0, ());
    }
}
