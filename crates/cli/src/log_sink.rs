//! Where log lines wait for stderr: a bounded queue and one thread that writes them. A thread that
//! logs only queues its line, so a log reader that stalls (a log shipper hung, not gone: its pipe
//! full) blocks no thread of the work; when the queue is full the line is dropped and counted
//! ([`metrics::output`]) like a failed write. Before the process ends its queue is drained, within
//! a bound ([`drain`]): what was said last (a failure, "relay stopping") still reaches a reader
//! that reads.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, SyncSender, TrySendError};
use std::sync::{Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// The queue's sending end, once [`start`] ran.
static QUEUE: OnceLock<SyncSender<Vec<u8>>> = OnceLock::new();
/// Lines queued, and lines written or dropped by the writer: equal when the queue is empty.
static QUEUED: AtomicU64 = AtomicU64::new(0);
static DONE: Mutex<u64> = Mutex::new(0);
static DONE_CHANGED: Condvar = Condvar::new();

/// Start the writer thread; `write` puts one line out (on stderr, above a progress bar). Without it
/// (the thread could not start), lines are written by the thread that logs, as before.
pub fn start(write: fn(&[u8])) {
    let (tx, rx) = sync_channel::<Vec<u8>>(limits::LOG_QUEUE_LINES);
    let spawned = std::thread::Builder::new().name("log-writer".into()).spawn(move || {
        for line in rx {
            write(&line);
            *DONE.lock().unwrap_or_else(|p| p.into_inner()) += 1;
            DONE_CHANGED.notify_all();
        }
    });
    if spawned.is_ok() {
        let _ = QUEUE.set(tx);
    }
}

/// Queue `line` for the writer; dropped and counted when the queue is full (the reader is behind by
/// [`limits::LOG_QUEUE_LINES`] lines). Before [`start`], written at once by `write`.
pub fn send(line: Vec<u8>, write: fn(&[u8])) {
    let Some(q) = QUEUE.get() else { return write(&line) };
    // Counted before it is sent: the writer may finish it before try_send returns.
    QUEUED.fetch_add(1, Ordering::SeqCst);
    match q.try_send(line) {
        Ok(()) => {}
        Err(TrySendError::Full(_)) => {
            QUEUED.fetch_sub(1, Ordering::SeqCst);
            metrics::output::count_dropped();
        }
        Err(TrySendError::Disconnected(line)) => {
            QUEUED.fetch_sub(1, Ordering::SeqCst);
            write(&line);
        }
    }
}

/// Wait until every line queued so far is written (or dropped by a failed write), at most `within`:
/// a reader that stalled does not hold the end. True when the queue emptied.
pub fn drain(within: Duration) -> bool {
    let target = QUEUED.load(Ordering::SeqCst);
    let deadline = Instant::now() + within;
    let mut done = DONE.lock().unwrap_or_else(|p| p.into_inner());
    while *done < target {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        done = DONE_CHANGED.wait_timeout(done, left).unwrap_or_else(|p| p.into_inner()).0;
    }
    true
}
