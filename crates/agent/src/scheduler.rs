//! Which block to pull next, and from where — the pull's decisions with no thread, socket or clock.
//! The pipeline's reader threads claim blocks and report them; the writer takes them back in order.
//!
//! Blocks are claimed in order but complete in any order. A window bounds how far claims may run
//! ahead of the next block to hand on (memory, and readers racing ahead of a slow replica). A block
//! whose checksum does not match is read again once, then the pull fails. Today every block comes
//! from the relay; [`Source`] is where "from a peer that holds it" will be decided.

use std::collections::BTreeMap;

/// Times a block is read again after a checksum mismatch before the pull fails.
pub const REREADS_MAX: u32 = 1;

/// Where a block is read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// The relay's snapshot.
    Relay,
}

/// What a reader should do next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claim {
    /// Read block `index` from `source`.
    Block {
        /// The block number.
        index: u64,
        /// Where from.
        source: Source,
    },
    /// The window is full: wait until the writer hands a block on.
    Wait,
    /// Every block is claimed.
    Done,
}

/// After a checksum mismatch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mismatch {
    /// Read the block again.
    Reread,
    /// Give up: the block failed every attempt.
    Fail,
}

/// The pull's bookkeeping; `B` is a block's buffer.
#[derive(Debug)]
pub struct Scheduler<B> {
    window: u64,
    total: Option<u64>,
    next_claim: u64,
    next_write: u64,
    ready: BTreeMap<u64, B>,
    in_flight: u64,
    in_flight_max: u64,
    reread: u64,
}

impl<B> Scheduler<B> {
    /// A scheduler that lets claims run at most `window` blocks ahead of the writer (at least 1).
    pub fn new(window: u64) -> Self {
        Scheduler { window: window.max(1), total: None, next_claim: 0, next_write: 0, ready: BTreeMap::new(), in_flight: 0, in_flight_max: 0, reread: 0 }
    }

    /// The snapshot has `blocks` blocks (known once the relay has the RDB's length).
    pub fn set_total(&mut self, blocks: u64) {
        self.total = Some(blocks);
    }

    /// The next block for a reader.
    pub fn claim(&mut self) -> Claim {
        if self.total.is_some_and(|t| self.next_claim >= t) {
            return Claim::Done;
        }
        if self.next_claim >= self.next_write + self.window {
            return Claim::Wait;
        }
        let index = self.next_claim;
        self.next_claim += 1;
        Claim::Block { index, source: Source::Relay }
    }

    /// A reader starts reading a claimed block.
    pub fn started(&mut self) {
        self.in_flight += 1;
        self.in_flight_max = self.in_flight_max.max(self.in_flight);
    }

    /// Block `index` failed its checksum on attempt `attempt` (1 = the first read).
    pub fn mismatch(&mut self, attempt: u32) -> Mismatch {
        if attempt > REREADS_MAX {
            return Mismatch::Fail;
        }
        self.reread += 1;
        Mismatch::Reread
    }

    /// Block `index` was read and checked.
    pub fn completed(&mut self, index: u64, buf: B) {
        assert!(index < self.next_claim, "block {index} completed but never claimed");
        assert!(index >= self.next_write && !self.ready.contains_key(&index), "block {index} completed twice");
        self.in_flight -= 1;
        self.ready.insert(index, buf);
    }

    /// The next block in order, if it is ready: the writer hands it on.
    pub fn next_ready(&mut self) -> Option<B> {
        let b = self.ready.remove(&self.next_write)?;
        self.next_write += 1;
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

    /// Blocks read again after a mismatch.
    pub fn rereads(&self) -> u64 {
        self.reread
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claims_stay_within_the_window_and_blocks_leave_in_order() {
        let mut s: Scheduler<&str> = Scheduler::new(2);
        assert_eq!(s.claim(), Claim::Block { index: 0, source: Source::Relay });
        assert_eq!(s.claim(), Claim::Block { index: 1, source: Source::Relay });
        assert_eq!(s.claim(), Claim::Wait, "window of 2 blocks ahead of the writer");
        s.started();
        s.started();
        s.completed(1, "b1");
        assert_eq!(s.next_ready(), None, "block 1 waits for block 0");
        s.completed(0, "b0");
        assert_eq!(s.in_flight_max(), 2);
        assert_eq!(s.next_ready(), Some("b0"));
        assert_eq!(s.claim(), Claim::Block { index: 2, source: Source::Relay }, "the window moved");
        assert_eq!(s.next_ready(), Some("b1"));
        s.set_total(3);
        assert_eq!(s.claim(), Claim::Done);
        assert!(!s.finished());
        s.started();
        s.completed(2, "b2");
        assert_eq!(s.next_ready(), Some("b2"));
        assert!(s.finished());
    }

    #[test]
    fn an_empty_snapshot_is_finished_at_once() {
        let mut s: Scheduler<()> = Scheduler::new(4);
        s.set_total(0);
        assert_eq!(s.claim(), Claim::Done);
        assert!(s.finished());
    }

    #[test]
    fn one_reread_then_fail() {
        let mut s: Scheduler<()> = Scheduler::new(4);
        assert_eq!(s.mismatch(1), Mismatch::Reread);
        assert_eq!(s.mismatch(2), Mismatch::Fail);
        assert_eq!(s.rereads(), 1);
    }

    #[test]
    #[should_panic(expected = "completed twice")]
    fn a_block_cannot_complete_twice() {
        let mut s: Scheduler<()> = Scheduler::new(4);
        s.claim();
        s.started();
        s.started();
        s.completed(0, ());
        s.completed(0, ());
    }
}
