//! Pull blocks out of order with several readers in flight, hand them on in order: the threads that
//! drive the [`Scheduler`], which makes every decision (which block, from where, the window, rereads).
//!
//! Every block's CRC32C is checked against the relay's published checksum before it is passed on.

use crate::progress::Progress;
use crate::scheduler::{Claim, Mismatch, Scheduler, Source};
use crate::Error;
use snapshot::State;
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

/// The scheduler and what the threads share around it.
struct Shared {
    state: Mutex<PullState>,
    cond: Condvar,
}

struct PullState {
    sched: Scheduler<Vec<u8>>,
    /// Block buffers kept for reuse: a freed multi-MiB buffer goes back to the kernel, and a new one
    /// costs a page fault per 4 KiB. Bounded by `pool_max`.
    pool: Vec<Vec<u8>>,
    pool_max: usize,
    failed: Option<Error>,
    finished: bool,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, PullState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
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

/// Longest wait for the relay to publish the next block before re-checking its state.
const POLL: Duration = limits::BLOCK_WAIT_MAX;

/// Pull the whole generation described by `progress` and pass its bytes, in order, to `sink`.
pub fn pull(
    transport: &dyn Transport,
    progress: &Arc<Progress>,
    readers: usize,
    window: u64,
    cancel: &std::sync::atomic::AtomicBool,
    sink: &mut dyn FnMut(&[u8]) -> Result<(), Error>,
) -> Result<Stats, Error> {
    let readers = readers.max(1);
    let window = window.max(readers as u64);
    // Enough buffers for the window and one in each reader's hands: steady state allocates nothing.
    let pool_max = usize::try_from(window).unwrap_or(usize::MAX).saturating_add(readers);
    let shared = Shared { state: Mutex::new(PullState { sched: Scheduler::new(window), pool: Vec::new(), pool_max, failed: None, finished: false }), cond: Condvar::new() };
    let generation = progress.with(|v| v.desc.generation);
    std::thread::scope(|scope| {
        for r in 0..readers {
            let shared = &shared;
            std::thread::Builder::new()
                .name(format!("reader-{r}"))
                .spawn_scoped(scope, move || {
                    if let Err(e) = read_loop(transport, progress, shared, generation) {
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
        stats.reread = s.sched.rereads();
        stats.reads_in_flight_max = s.sched.in_flight_max();
        Ok(stats)
    })
}

/// Where block `i` stands at the relay.
enum Published {
    /// Readable: its range and checksum.
    Ready { offset: u64, len: u64, checksum: u32 },
    /// The snapshot has fewer blocks.
    NoSuchBlock,
    NotYet,
}

/// Claim the next block, waiting while the window is full; `None` when the pull is over.
fn claim(shared: &Shared, progress: &Progress) -> Option<(u64, Source)> {
    let mut s = shared.lock();
    loop {
        if s.finished || s.failed.is_some() {
            return None;
        }
        if let Some(t) = progress.with(|v| v.blocks_total()) {
            s.sched.set_total(t);
        }
        match s.sched.claim() {
            Claim::Block { index, source } => return Some((index, source)),
            Claim::Done => return None,
            Claim::Wait => s = shared.cond.wait_timeout(s, POLL).unwrap_or_else(|p| p.into_inner()).0,
        }
    }
}

/// Wait until the relay has published block `i`; `None` if there is no such block or the pull is over.
fn wait_published(shared: &Shared, progress: &Progress, i: u64) -> Result<Option<(u64, u64, u32)>, Error> {
    loop {
        let next = progress.wait_with(
            POLL,
            |v| v.blocks_readable() > i || v.desc.state == State::Failed || v.blocks_total().is_some(),
            |v| -> Result<Published, Error> {
                v.check()?;
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
            Published::Ready { offset, len, checksum } => return Ok(Some((offset, len, checksum))),
            Published::NoSuchBlock => return Ok(None),
            Published::NotYet => {
                let s = shared.lock();
                if s.finished || s.failed.is_some() {
                    return Ok(None);
                }
            }
        }
    }
}

fn read_loop(transport: &dyn Transport, progress: &Progress, shared: &Shared, generation: u64) -> Result<(), Error> {
    let mut reader = transport.open().map_err(Error::Relay)?;
    while let Some((i, Source::Relay)) = claim(shared, progress) {
        let Some((offset, len, want)) = wait_published(shared, progress, i)? else { return Ok(()) };
        let mut buf = {
            let mut s = shared.lock();
            s.sched.started();
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
            tracing::warn!(block = i, attempt, "block checksum mismatch");
            if shared.lock().sched.mismatch(attempt) == Mismatch::Fail {
                return Err(Error::Checksum { block: i, offset });
            }
        }
        shared.lock().sched.completed(i, buf);
        shared.cond.notify_all();
    }
    Ok(())
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
        let total = progress.with(|v| v.check().map(|_| v.blocks_total()))?;
        let buf = {
            let mut s = shared.lock();
            if let Some(t) = total {
                s.sched.set_total(t);
            }
            if s.sched.finished() {
                return Ok(stats);
            }
            loop {
                if let Some(e) = s.failed.take() {
                    return Err(e);
                }
                if let Some(b) = s.sched.next_ready() {
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
        if s.pool.len() < s.pool_max {
            s.pool.push(buf);
        }
    }
}
