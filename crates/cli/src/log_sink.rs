//! Where log lines wait for stderr: a bounded queue and one thread that writes them. A thread that
//! logs only queues its line, so a log reader that stalls (a log shipper hung, not gone: its pipe
//! full) blocks no thread of the work; when the queue is full the line is dropped and counted
//! ([`metrics::output`]) like a failed write. Before the process ends its queue is drained, within
//! a bound ([`drain`]): what was said last (a failure, "relay stopping") still reaches a reader
//! that reads. The writer puts each line on stderr above the progress display, while one is shown
//! ([`write_line`], [`above`]).

use std::sync::mpsc::{channel, sync_channel, Sender, SyncSender, TrySendError};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// What the writer thread is handed.
enum Item {
    /// A line to write.
    Line(Vec<u8>),
    /// Everything queued before this is written (or dropped by a failed write): say so here.
    Flush(Sender<()>),
}

/// The queue's sending end, once [`start`] ran.
static QUEUE: OnceLock<SyncSender<Item>> = OnceLock::new();

/// How often [`drain`] tries again to queue its marker while the queue is full.
const FULL_RETRY_EVERY: Duration = Duration::from_millis(10);

/// Start the writer thread; `write` puts one line out (on stderr, above a progress bar). Without it
/// (the thread could not start), lines are written by the thread that logs, as before.
pub fn start(write: fn(&[u8])) {
    let (tx, rx) = sync_channel::<Item>(limits::LOG_QUEUE_LINES);
    let spawned = std::thread::Builder::new().name("log-writer".into()).spawn(move || {
        for item in rx {
            match item {
                Item::Line(line) => write(&line),
                Item::Flush(done) => {
                    let _ = done.send(());
                }
            }
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
    match q.try_send(Item::Line(line)) {
        Ok(()) => {}
        Err(TrySendError::Full(_)) => metrics::output::count_dropped(),
        // The writer is gone: written here (only lines are sent this way).
        Err(TrySendError::Disconnected(item)) => {
            if let Item::Line(line) = item {
                write(&line);
            }
        }
    }
}

/// Wait until every line queued so far is written (or dropped by a failed write), at most `within`:
/// a reader that stalled does not hold the end. A marker goes through the queue behind those lines
/// and the writer answers it.
pub fn drain(within: Duration) {
    let Some(q) = QUEUE.get() else { return };
    let deadline = Instant::now() + within;
    let (done, written) = channel();
    let mut marker = Item::Flush(done);
    loop {
        match q.try_send(marker) {
            Ok(()) => break,
            // Full: the writer is behind; room comes as it writes (unless the reader stalled).
            Err(TrySendError::Full(m)) if Instant::now() < deadline => {
                marker = m;
                std::thread::sleep(FULL_RETRY_EVERY); // Polling for room in a bounded queue, with a deadline.
            }
            Err(_) => return,
        }
    }
    let _ = written.recv_timeout(deadline.saturating_duration_since(Instant::now()));
}

/// The progress display, while one is shown: log lines are written above it ([`write_line`])
/// instead of onto the end of its line.
static BAR: Mutex<Option<indicatif::ProgressBar>> = Mutex::new(None);

/// Show log lines above `bar` from now on (`None`: no display any more).
pub fn above(bar: Option<indicatif::ProgressBar>) {
    *BAR.lock().unwrap_or_else(|e| e.into_inner()) = bar;
}

/// One log line on stderr, above the progress display when there is one; dropped and counted when
/// the write fails ([`metrics::output`]).
pub fn write_line(out: &[u8]) {
    let bar = BAR.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let write = || metrics::output::write_or_drop(&mut std::io::stderr().lock(), out);
    match bar {
        Some(b) => b.suspend(write),
        None => write(),
    };
}
