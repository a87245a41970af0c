//! Packing a generation's blocks as they are captured: each whole block compressed by a pool of
//! threads (one [`codec::Compressor`] each) and checksummed as it will be stored, and handed back
//! **in order**, because a block's place is the sum of the stored lengths before it.
//!
//! Block `k` goes to worker `k mod n`, and each worker answers in the order it was given work, so
//! the oldest block in flight is always the next answer of one known worker: no reordering, and no
//! queue shared by the workers. The writer never holds more than [`Packer::in_flight_max`] blocks
//! in flight (each a raw and a stored buffer); at that bound it waits for the oldest, so the pool
//! slows a capture only when it cannot keep up with it (docs/design/compression.md has the cores a
//! link's rate needs).

use crate::checksum::block_checksum;
use codec::{Codec, Compressor};
use std::collections::VecDeque;
use std::sync::mpsc::{self, Receiver, Sender, TryRecvError};

/// zstd's level 1 (what `zstd -1` on the command line means; not the negative "fast" levels), chosen by measurement (docs/design/compression.md, "Measured: which codec").
pub const ZSTD_LEVEL: i32 = 1;

/// One block as it will be stored.
pub(crate) struct Packed {
    /// The block as captured.
    pub raw: Vec<u8>,
    /// Its compressed bytes (empty when kept raw).
    pub stored: Vec<u8>,
    pub codec: Codec,
    /// CRC32C of [`Packed::bytes`].
    pub crc: u32,
}

impl Packed {
    /// The bytes to store: compressed, or the raw block.
    pub fn bytes(&self) -> &[u8] {
        if self.codec == Codec::Raw {
            &self.raw
        } else {
            &self.stored
        }
    }
}

/// A worker thread, its queue of blocks and its answers.
struct Worker {
    jobs: Option<Sender<(Vec<u8>, Vec<u8>)>>,
    done: Receiver<Packed>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// The packing pool of one generation's writer; blocks packed on the writer's thread when it has no
/// worker (`threads` 0, or raw: a checksum is all there is to do).
pub(crate) struct Packer {
    workers: Vec<Worker>,
    /// Without workers: the compressor, and the blocks packed and not yet taken.
    inline: Option<Compressor>,
    ready: VecDeque<Packed>,
    sent: u64,
    taken: u64,
    /// Buffers back from placed blocks, for the next ones.
    spare: Vec<Vec<u8>>,
}

impl Packer {
    /// A pool of `threads` workers for `codec` (named after generation `id`).
    pub fn new(id: u64, codec: Codec, threads: usize) -> std::io::Result<Packer> {
        let threads = if codec == Codec::Raw { 0 } else { threads };
        let mut workers = Vec::with_capacity(threads);
        for k in 0..threads {
            let (jobs, rx) = mpsc::channel::<(Vec<u8>, Vec<u8>)>();
            let (tx, done) = mpsc::channel();
            let mut c = Compressor::new(codec, ZSTD_LEVEL)?;
            let thread = std::thread::Builder::new().name(format!("pack-{id}-{k}")).spawn(move || {
                for (raw, mut stored) in rx {
                    if tx.send(pack(&mut c, raw, &mut stored).with(stored)).is_err() {
                        return;
                    }
                }
            })?;
            workers.push(Worker { jobs: Some(jobs), done, thread: Some(thread) });
        }
        let inline = if threads == 0 { Some(Compressor::new(codec, ZSTD_LEVEL)?) } else { None };
        Ok(Packer { workers, inline, ready: VecDeque::new(), sent: 0, taken: 0, spare: Vec::new() })
    }

    /// Most blocks in flight: every worker busy and one more queued behind them.
    pub fn in_flight_max(&self) -> u64 {
        self.workers.len() as u64 + 1
    }

    /// Blocks given and not yet taken back.
    pub fn in_flight(&self) -> u64 {
        self.sent - self.taken
    }

    /// An empty buffer for the next raw block (one of a placed block's, when there is one).
    pub fn buffer(&mut self) -> Vec<u8> {
        let mut b = self.spare.pop().unwrap_or_default();
        b.clear();
        b
    }

    /// Pack `raw`, the next block. The caller keeps [`Packer::in_flight`] under the bound.
    pub fn submit(&mut self, raw: Vec<u8>) {
        let stored = self.buffer();
        let k = self.sent;
        self.sent += 1;
        match &mut self.inline {
            Some(c) => {
                let mut stored = stored;
                let packed = pack(c, raw, &mut stored).with(stored);
                self.ready.push_back(packed);
            }
            None => {
                let w = &self.workers[(k % self.workers.len() as u64) as usize];
                // A worker only ends when its queue closes (here, at drop) or it panicked: then its
                // answer channel is closed too, and `next` says so.
                let _ = w.jobs.as_ref().expect("queues close at drop").send((raw, stored));
            }
        }
    }

    /// The oldest block in flight, once packed: waiting for it when `wait`, else only if it is ready.
    /// An error when its worker is gone (it panicked).
    pub fn next(&mut self, wait: bool) -> Result<Option<Packed>, std::io::Error> {
        if self.in_flight() == 0 {
            return Ok(None);
        }
        let got = if self.inline.is_some() {
            self.ready.pop_front()
        } else {
            let w = &self.workers[(self.taken % self.workers.len() as u64) as usize];
            let r = if wait { w.done.recv().map_err(|_| TryRecvError::Disconnected) } else { w.done.try_recv() };
            match r {
                Ok(p) => Some(p),
                Err(TryRecvError::Empty) => None,
                Err(TryRecvError::Disconnected) => return Err(std::io::Error::other("a block-packing thread ended (it panicked)")),
            }
        };
        if got.is_some() {
            self.taken += 1;
        }
        Ok(got)
    }

    /// A placed block's buffers, for reuse (as many as the blocks in flight can use).
    pub fn recycle(&mut self, p: Packed) {
        let room = 2 * self.in_flight_max() as usize;
        for b in [p.raw, p.stored] {
            if self.spare.len() < room && b.capacity() > 0 {
                self.spare.push(b);
            }
        }
    }
}

impl Drop for Packer {
    fn drop(&mut self) {
        for w in &mut self.workers {
            w.jobs = None;
        }
        for w in &mut self.workers {
            if let Some(t) = w.thread.take() {
                let _ = t.join();
            }
        }
    }
}

/// What packing decided for a block, before its stored buffer is put back in.
struct Decided {
    raw: Vec<u8>,
    codec: Codec,
    crc: u32,
}

impl Decided {
    fn with(self, stored: Vec<u8>) -> Packed {
        Packed { raw: self.raw, stored, codec: self.codec, crc: self.crc }
    }
}

fn pack(c: &mut Compressor, raw: Vec<u8>, stored: &mut Vec<u8>) -> Decided {
    let codec = c.compress(&raw, stored);
    let crc = if codec == Codec::Raw { block_checksum(&raw) } else { block_checksum(stored) };
    Decided { raw, codec, crc }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(k: u64, n: usize) -> Vec<u8> {
        // Text for even blocks (compresses), noise for odd ones (kept raw).
        let mut x = k.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        (0..n)
            .map(|i| {
                if k.is_multiple_of(2) {
                    b"fastrepl "[i % 9]
                } else {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                }
            })
            .collect()
    }

    #[test]
    fn blocks_come_back_in_order_packed_and_checksummed_as_stored() {
        for threads in [0, 1, 3] {
            let mut p = Packer::new(1, Codec::Zstd, threads).unwrap();
            let mut got = Vec::new();
            for k in 0..10u64 {
                if p.in_flight() == p.in_flight_max() {
                    got.push(p.next(true).unwrap().unwrap());
                }
                p.submit(block(k, 4096));
            }
            while let Some(b) = p.next(true).unwrap() {
                got.push(b);
            }
            assert_eq!(got.len(), 10, "{threads} threads");
            for (k, b) in got.iter().enumerate() {
                assert_eq!(b.raw, block(k as u64, 4096), "block {k} in order, {threads} threads");
                let want = if k % 2 == 0 { Codec::Zstd } else { Codec::Raw };
                assert_eq!(b.codec, want, "block {k}");
                assert_eq!(b.crc, block_checksum(b.bytes()));
                let mut back = Vec::new();
                codec::decompress(b.codec, b.bytes(), 4096, &mut back).unwrap();
                assert_eq!(back, b.raw);
            }
        }
    }

    #[test]
    fn raw_packs_inline_and_nothing_waits_when_nothing_is_in_flight() {
        let mut p = Packer::new(1, Codec::Raw, 4).unwrap();
        assert_eq!(p.in_flight_max(), 1, "raw has no workers");
        assert!(p.next(true).unwrap().is_none());
        p.submit(block(0, 100));
        let b = p.next(false).unwrap().unwrap();
        assert_eq!((b.codec, b.bytes().len()), (Codec::Raw, 100));
    }
}
