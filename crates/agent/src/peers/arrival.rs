//! A block still being received, served to peers while it arrives (cut-through forwarding).
//!
//! Store-and-forward costs a whole block's transfer per hop: at 100 Mbit/s a 4 MiB block from the
//! relay (a quarter of its uplink) takes 1.3 s before its first holder can pass it on, and the
//! fan-out's first seconds are spent waiting for the first blocks. An agent instead names itself to
//! the tracker as soon as a block's bytes flow, and a peer asking for it gets them as they come.
//!
//! What makes it safe: every receiver still checks the whole block against the relay's checksum, and
//! the forwarder withholds the block's last byte until its own check passed. An arrival that fails
//! (its source died, or the bytes fail the checksum) cuts the peers' reads off short of their end:
//! they can never complete a block from bad bytes, and a cut-off is told apart from a corrupt block
//! (which would make them avoid this agent for good).

use std::ops::Range;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// How an arrival stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Standing {
    /// Bytes are coming.
    Filling,
    /// Every byte is here and passed the checksum: all of it may go.
    Verified,
    /// It will not complete (source failed, checksum mismatch): reads of it are cut off.
    Failed,
}

/// The size of an arrival's piece buffers: a TCP read's piece ([`transport::tcp::PIECE`]).
pub const PIECE: usize = transport::tcp::PIECE;

/// Bytes of piece buffers kept for the next arrivals ([`limits::ARRIVAL_SPARE_BYTES_MAX`]).
pub const SPARE_BYTES_MAX: usize = limits::ARRIVAL_SPARE_BYTES_MAX;

/// Piece buffers no arrival uses any more, for the next ones (shared by an agent's arrivals).
#[derive(Default)]
pub struct Spares {
    free: Mutex<Vec<Arc<[u8]>>>,
}

impl Spares {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Arc<[u8]>>> {
        self.free.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A buffer of [`PIECE`] bytes nobody else holds.
    fn take(&self) -> Arc<[u8]> {
        self.lock().pop().unwrap_or_else(|| std::iter::repeat_n(0u8, PIECE).collect())
    }

    /// Keep `a` for reuse, if nobody else holds it and there is room.
    fn give(&self, mut a: Arc<[u8]>) {
        let mut free = self.lock();
        if a.len() == PIECE && Arc::get_mut(&mut a).is_some() && (free.len() + 1) * PIECE <= SPARE_BYTES_MAX {
            free.push(a);
        }
    }
}

/// One block's bytes as they arrive, in pieces (shared with the readers serving it, without copies).
pub struct Arrival {
    len: usize,
    inner: Mutex<Inner>,
    changed: Condvar,
    spares: Arc<Spares>,
}

struct Inner {
    /// Buffers of [`PIECE`] bytes, each with how many of them are the block's.
    pieces: Vec<(Arc<[u8]>, usize)>,
    filled: usize,
    standing: Standing,
}

impl Drop for Arrival {
    fn drop(&mut self) {
        // Every reader is done (each holds the arrival while it sends): its buffers go back.
        let pieces = std::mem::take(&mut self.inner.get_mut().unwrap_or_else(|p| p.into_inner()).pieces);
        for (p, _) in pieces {
            self.spares.give(p);
        }
    }
}

/// What a reader serving the arrival may send next.
#[derive(Debug)]
pub enum Next {
    /// These pieces, in order (each with the range of it to send).
    Bytes(Vec<(Arc<[u8]>, Range<usize>)>),
    /// Everything was sent.
    End,
    /// The arrival failed: cut the read off.
    Failed,
    /// Nothing new within the wait: the source stalls; cut the read off rather than hold the asker.
    Stalled,
}

impl Arrival {
    /// An arrival of a `len`-byte block, its buffers from (and back to) `spares`.
    pub fn new(len: usize, spares: Arc<Spares>) -> Arrival {
        Arrival { len, inner: Mutex::new(Inner { pieces: Vec::new(), filled: 0, standing: Standing::Filling }), changed: Condvar::new(), spares }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The block's length.
    pub fn size(&self) -> usize {
        self.len
    }

    /// The next bytes of the block arrived (in order). Bytes beyond its length are not kept.
    pub fn push(&self, piece: &[u8]) {
        let mut g = self.lock();
        let take = piece.len().min(self.len - g.filled);
        if take == 0 || g.standing != Standing::Filling {
            return;
        }
        // Copied under the lock: readers only look at what `filled` covers, and the copy of a piece is
        // a few microseconds.
        for part in piece[..take].chunks(PIECE) {
            let mut buf = self.spares.take();
            match Arc::get_mut(&mut buf) {
                Some(b) => b[..part.len()].copy_from_slice(part),
                None => buf = Arc::from(part),
            }
            g.pieces.push((buf, part.len()));
        }
        g.filled += take;
        debug_assert!(g.filled <= self.len && g.pieces.iter().map(|(_, used)| used).sum::<usize>() == g.filled, "pieces and filled disagree");
        drop(g);
        self.changed.notify_all();
    }

    /// The arrival ended: verified (only once every byte is here) or failed. A settled arrival stays
    /// as it is.
    pub fn settle(&self, verified: bool) {
        let mut g = self.lock();
        if g.standing == Standing::Filling {
            g.standing = if verified && g.filled == self.len { Standing::Verified } else { Standing::Failed };
        }
        debug_assert!(g.standing != Standing::Verified || g.filled == self.len, "verified with bytes missing");
        drop(g);
        self.changed.notify_all();
    }

    /// How it stands.
    pub fn standing(&self) -> Standing {
        self.lock().standing
    }

    /// What a reader that has sent `sent` bytes may send now, waiting up to `wait` for more: every
    /// byte here but the last one until the block is verified.
    pub fn next(&self, sent: usize, wait: Duration) -> Next {
        let deadline = Instant::now() + wait;
        let mut g = self.lock();
        loop {
            let may = match g.standing {
                Standing::Failed => return Next::Failed,
                Standing::Verified => self.len,
                Standing::Filling => g.filled.min(self.len.saturating_sub(1)),
            };
            if sent >= self.len {
                return Next::End;
            }
            if may > sent {
                // Invariant 1: a block's last byte leaves only once its own check passed, so no peer
                // completes a block that failed.
                debug_assert!(may < self.len || g.standing == Standing::Verified, "the last byte of an unverified block");
                let out = slices(&g.pieces, sent..may);
                debug_assert_eq!(out.iter().map(|(_, r)| r.len()).sum::<usize>(), may - sent, "slices cover what may be sent");
                return Next::Bytes(out);
            }
            let now = Instant::now();
            if now >= deadline {
                return Next::Stalled;
            }
            g = self.changed.wait_timeout(g, deadline - now).unwrap_or_else(|p| p.into_inner()).0;
        }
    }
}

/// The parts of `pieces` (their used lengths laid end to end) that cover `want`.
fn slices(pieces: &[(Arc<[u8]>, usize)], want: Range<usize>) -> Vec<(Arc<[u8]>, Range<usize>)> {
    let mut out = Vec::new();
    let mut at = 0;
    for (p, used) in pieces {
        let (start, end) = (at, at + used);
        at = end;
        if end <= want.start {
            continue;
        }
        if start >= want.end {
            break;
        }
        let from = want.start.max(start) - start;
        let to = want.end.min(end) - start;
        out.push((p.clone(), from..to));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sent(next: Next) -> Vec<u8> {
        match next {
            Next::Bytes(parts) => parts.iter().flat_map(|(p, r)| p[r.clone()].to_vec()).collect(),
            other => panic!("bytes expected, got {other:?}"),
        }
    }

    #[test]
    fn the_last_byte_waits_for_the_checksum() {
        let a = Arrival::new(6, Arc::default());
        a.push(b"abc");
        assert_eq!(sent(a.next(0, Duration::ZERO)), b"abc");
        a.push(b"def");
        assert_eq!(sent(a.next(3, Duration::ZERO)), b"de", "all but the last byte while unverified");
        assert!(matches!(a.next(5, Duration::ZERO), Next::Stalled), "the last byte is held back");
        a.settle(true);
        assert_eq!(sent(a.next(5, Duration::ZERO)), b"f");
        assert!(matches!(a.next(6, Duration::ZERO), Next::End));
    }

    #[test]
    fn a_failed_arrival_cuts_its_readers_off_before_the_end() {
        let a = Arrival::new(4, Arc::default());
        a.push(b"abcd");
        assert_eq!(sent(a.next(0, Duration::ZERO)), b"abc");
        a.settle(false);
        assert!(matches!(a.next(3, Duration::ZERO), Next::Failed), "never the last byte of a block that failed its check");
        a.settle(true);
        assert_eq!(a.standing(), Standing::Failed, "settled once");
    }

    #[test]
    fn an_arrival_short_of_its_length_is_never_verified() {
        let a = Arrival::new(4, Arc::default());
        a.push(b"ab");
        a.settle(true);
        assert_eq!(a.standing(), Standing::Failed);
    }

    #[test]
    fn a_reader_waiting_for_bytes_wakes_when_they_come() {
        let a = Arc::new(Arrival::new(4, Arc::default()));
        let w = {
            let a = a.clone();
            std::thread::spawn(move || sent(a.next(0, Duration::from_secs(30))))
        };
        a.push(b"xy");
        assert_eq!(w.join().unwrap(), b"xy");
    }

    #[test]
    fn piece_buffers_are_kept_for_the_next_arrival_once_no_reader_holds_them() {
        let spares = Arc::new(Spares::default());
        let a = Arrival::new(PIECE + 3, spares.clone());
        a.push(&vec![7u8; PIECE + 3]);
        let held = match a.next(0, Duration::ZERO) {
            Next::Bytes(parts) => parts,
            other => panic!("{other:?}"),
        };
        assert_eq!(held.iter().map(|(_, r)| r.len()).sum::<usize>(), PIECE + 2, "one push longer than a piece: two buffers");
        drop(a);
        assert_eq!(spares.lock().len(), 0, "a reader still holds both buffers");
        drop(held);
        let b = Arrival::new(PIECE, spares.clone());
        b.push(&[1u8; 4]);
        drop(b);
        assert_eq!(spares.lock().len(), 1, "a buffer a reader held until the arrival ended is not taken back; the new one's is");
        let c = Arrival::new(2, spares.clone());
        c.push(b"xy");
        c.settle(true);
        assert_eq!(spares.lock().len(), 0, "reused");
        assert_eq!(sent(c.next(0, Duration::ZERO)), b"xy", "only the bytes of this block, not a reused buffer's");
    }

    #[test]
    fn pieces_are_cut_where_the_reader_stands() {
        let a = Arrival::new(10, Arc::default());
        for p in [&b"012"[..], b"3456", b"789"] {
            a.push(p);
        }
        a.push(b"overflow");
        a.settle(true);
        assert_eq!(sent(a.next(2, Duration::ZERO)), b"23456789");
        assert_eq!(sent(a.next(4, Duration::ZERO)), b"456789");
    }
}
