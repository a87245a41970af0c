//! Pull blocks out of order with several readers in flight, hand them on in order.
//!
//! Readers claim block numbers in order but finish in any order; a bounded window (`window` blocks
//! between the next block to write and the furthest claimed) caps memory and keeps readers from running
//! far ahead of a slow replica. Every block's CRC32C is checked against the relay's published
//! checksum before it is passed on; a mismatch is re-read once, then the pull fails.

use crate::progress::{Progress, View};
use crate::Error;
use snapshot::State;
use std::collections::BTreeMap;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};
use transport::Transport;

/// How a pull went.
#[derive(Debug, Clone, Default)]
pub struct Stats {
    /// RDB bytes passed on.
    pub bytes: u64,
    /// Blocks passed on.
    pub blocks: u64,
    /// Blocks read twice because a checksum did not match.
    pub reread: u64,
    /// When the first byte was passed on.
    pub first_byte: Option<Instant>,
    /// Most block reads that were in flight at once.
    pub reads_in_flight_max: u64,
    /// The first block was passed on while the relay was still receiving the RDB from the master.
    pub streamed_while_capturing: bool,
}

struct Sched {
    next_claim: u64,
    next_write: u64,
    ready: BTreeMap<u64, Vec<u8>>,
    pool: Vec<Vec<u8>>,
    failed: Option<Error>,
    finished: bool,
    reread: u64,
    in_flight: u64,
    in_flight_max: u64,
}

struct Shared {
    sched: Mutex<Sched>,
    cond: Condvar,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Sched> {
        self.sched.lock().unwrap_or_else(|p| p.into_inner())
    }
    fn fail(&self, e: Error) {
        let mut s = self.lock();
        if s.failed.is_none() {
            s.failed = Some(e);
        }
        drop(s);
        self.cond.notify_all();
    }
}

/// Block buffers kept for reuse. Enough for the whole window, so steady state allocates nothing:
/// a freed multi-MiB buffer goes back to the kernel, and a new one costs a page fault per 4 KiB.
const POOL_MAX: usize = 64;

/// Longest wait for the relay to publish the next block before re-checking its state.
const POLL: Duration = Duration::from_millis(200);

/// Pull the whole generation described by `progress` and pass its bytes, in order, to `sink`.
pub fn pull(
    transport: &dyn Transport,
    progress: &Arc<Progress>,
    readers: usize,
    window: u64,
    cancel: &std::sync::atomic::AtomicBool,
    sink: &mut dyn FnMut(&[u8]) -> Result<(), Error>,
) -> Result<Stats, Error> {
    let shared = Shared {
        sched: Mutex::new(Sched { next_claim: 0, next_write: 0, ready: BTreeMap::new(), pool: Vec::new(), failed: None, finished: false, reread: 0, in_flight: 0, in_flight_max: 0 }),
        cond: Condvar::new(),
    };
    let generation = progress.with(|v| v.desc.generation);
    let window = window.max(readers as u64);
    std::thread::scope(|scope| {
        for r in 0..readers.max(1) {
            let shared = &shared;
            std::thread::Builder::new()
                .name(format!("reader-{r}"))
                .spawn_scoped(scope, move || {
                    if let Err(e) = read_loop(transport, progress, shared, generation, window) {
                        shared.fail(e);
                    }
                })
                .map_err(|e| Error::Local(format!("spawn reader thread: {e}")))?;
        }
        let result = write_loop(progress, &shared, cancel, sink);
        shared.lock().finished = true;
        shared.cond.notify_all();
        let mut stats = result?;
        let s = shared.lock();
        stats.reread = s.reread;
        stats.reads_in_flight_max = s.in_flight_max;
        Ok(stats)
    })
}

fn check_view(v: &View) -> Result<(), Error> {
    if let Some(l) = &v.lost {
        return Err(Error::RelayProtocol(l.clone()));
    }
    if v.desc.state == State::Failed {
        return Err(Error::RelayProtocol(format!("the relay's snapshot failed: {}", v.desc.error.clone().unwrap_or_default())));
    }
    Ok(())
}

/// Where block `i` stands at the relay.
enum Published {
    /// Readable: its range and checksum.
    Ready { offset: u64, len: u64, checksum: u32 },
    /// The snapshot has fewer blocks.
    NoSuchBlock,
    NotYet,
}

fn read_loop(transport: &dyn Transport, progress: &Progress, shared: &Shared, generation: u64, window: u64) -> Result<(), Error> {
    let mut reader = transport.open().map_err(Error::Relay)?;
    loop {
        // Claim the next block, within the window.
        let i = {
            let mut s = shared.lock();
            loop {
                if s.finished || s.failed.is_some() {
                    return Ok(());
                }
                if s.next_claim < s.next_write + window {
                    break;
                }
                s = shared.cond.wait_timeout(s, POLL).unwrap_or_else(|p| p.into_inner()).0;
            }
            let i = s.next_claim;
            s.next_claim += 1;
            i
        };
        // Wait until the relay has published it (or we learn there is no such block).
        let (offset, len, want) = loop {
            let next = progress.wait_with(
                POLL,
                |v| v.blocks_readable() > i || v.desc.state == State::Failed || v.blocks_total().is_some(),
                |v| -> Result<Published, Error> {
                    check_view(v)?;
                    if v.blocks_total().is_some_and(|t| i >= t) {
                        return Ok(Published::NoSuchBlock);
                    }
                    if v.blocks_readable() > i {
                        let (offset, len) = v.block_range(i);
                        return Ok(Published::Ready { offset, len, checksum: v.desc.checksums[i as usize] });
                    }
                    Ok(Published::NotYet)
                },
            )?;
            match next {
                Published::Ready { offset, len, checksum } => break (offset, len, checksum),
                Published::NoSuchBlock => return Ok(()), // the pull is complete
                Published::NotYet => {
                    let s = shared.lock();
                    if s.finished || s.failed.is_some() {
                        return Ok(());
                    }
                }
            }
        };
        let mut buf = {
            let mut s = shared.lock();
            s.in_flight += 1;
            s.in_flight_max = s.in_flight_max.max(s.in_flight);
            s.pool.pop().unwrap_or_default()
        };
        buf.resize(len as usize, 0);
        let mut attempt = 0;
        loop {
            reader.read(generation, offset, &mut buf).map_err(Error::Relay)?;
            if snapshot::block_checksum(&buf) == want {
                break;
            }
            attempt += 1;
            tracing::warn!(block = i, attempt, "block checksum mismatch; re-reading");
            if attempt > 1 {
                return Err(Error::Checksum { block: i, offset });
            }
            shared.lock().reread += 1;
        }
        let mut s = shared.lock();
        s.in_flight -= 1;
        s.ready.insert(i, buf);
        drop(s);
        shared.cond.notify_all();
    }
}

fn write_loop(
    progress: &Progress,
    shared: &Shared,
    cancel: &std::sync::atomic::AtomicBool,
    sink: &mut dyn FnMut(&[u8]) -> Result<(), Error>,
) -> Result<Stats, Error> {
    let mut stats = Stats::default();
    loop {
        crate::check_cancel(cancel)?;
        let total = progress.with(|v| check_view(v).map(|_| v.blocks_total()))?;
        let next = shared.lock().next_write;
        if total.is_some_and(|t| next >= t) {
            return Ok(stats);
        }
        let buf = {
            let mut s = shared.lock();
            loop {
                if let Some(e) = s.failed.take() {
                    return Err(e);
                }
                let next = s.next_write;
                if let Some(b) = s.ready.remove(&next) {
                    s.next_write += 1;
                    break Some(b);
                }
                let (g, t) = shared.cond.wait_timeout(s, POLL).unwrap_or_else(|p| p.into_inner());
                s = g;
                if t.timed_out() {
                    break None; // re-check the relay's state
                }
            }
        };
        let Some(buf) = buf else { continue };
        shared.cond.notify_all();
        sink(&buf)?;
        if stats.first_byte.is_none() {
            stats.first_byte = Some(Instant::now());
            stats.streamed_while_capturing = progress.with(|v| v.desc.state == State::Capturing);
        }
        stats.bytes += buf.len() as u64;
        stats.blocks += 1;
        let mut s = shared.lock();
        if s.pool.len() < POOL_MAX {
            s.pool.push(buf);
        }
    }
}
