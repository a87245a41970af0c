//! Pull blocks out of order — from the relay, and from peers when the agent is in a swarm — and hand
//! them on in order.
//!
//! Threads, and what each owns (they talk over channels; none shares a lock with another):
//! - the **planner** owns the decisions — the swarm's [`Chooser`](swarm::Chooser) (which block
//!   next, from where), the [`Scheduler`](crate::pull::scheduler::Scheduler) (the in-order
//!   hand-on), the fetchers' bookkeeping ([`crate::pull::planner`]) — and gives each read to a
//!   fetcher;
//! - in a swarm, the **tracker link**'s thread does the planner's talking to the relay's tracker:
//!   where blocks are (one `locate` out at a time, as [`crate::pull::planner::Asking`] decides; the answer
//!   comes back as a report), what this agent holds and dropped (sent at once, also while a question
//!   is out, without waiting for the answers), whether others still need blocks
//!   (its upload load is reported by [`crate::peers::peer_server`]'s reporter, for as long as it serves);
//! - **relay readers** (`readers` of them, each with its own connection or endpoint) and, in a swarm,
//!   **peer fetchers** (one per peer flow) read what they are given — up to
//!   [`limits::READS_IN_FLIGHT_PER_CONNECTION`] reads in flight on a TCP connection to the relay,
//!   [`limits::PEER_READS_IN_FLIGHT`] on one to a peer — check each block and report it;
//! - the caller's thread, the **writer**, passes the blocks the planner sends it, in order, to the
//!   sink, and reports what it wrote (the window moves) and which cached blocks it dropped.
//!
//! No thread waits on another's network round trip: a reader never waits for the tracker, the writer
//! never for a reader's socket, and the planner never for the tracker (a round trip behind this
//! host's busy uplink queue, up to 100 ms on the bench's links): completions are handled and blocks
//! handed on while a question is out.
//!
//! Blocks travel as the relay keeps them (compressed where that paid: its table entry says how, and
//! where the block is). Every block's CRC32C is checked against its entry before it is used or kept,
//! and a compressed one is decompressed, to exactly its length in the RDB, by the fetcher that read
//! it: a peer's block that fails either is thrown away, that peer is never asked again, and the
//! block is fetched elsewhere; a relay's is read once more, then fails the pull. Peers are served the
//! stored bytes; the writer gets the RDB's. A block is served to peers while it arrives, all but its
//! last byte, which goes only once the check passed ([`crate::peers::arrival`]).
//!
//! Its rooms, a thread or a thing the threads pass each other to a file: `request` (what to pull),
//! `sizing` (the default window and readers), `planner_thread` (with its buffer `pool`),
//! `relay_reader`, `peer_fetcher` and `fetcher` (what the two kinds of fetcher share), `writer`;
//! between them `job` (a read and its check) and `messages` (what the threads tell each other);
//! `stats` (how it went). This file starts the threads and gathers their account.

mod fetcher;
mod job;
mod messages;
mod peer_fetcher;
mod planner_thread;
mod pool;
mod relay_reader;
mod request;
mod sizing;
mod stats;
mod writer;

pub use request::Pull;
pub use sizing::{readers, window, Membership};
pub use stats::{Stats, RELAY};

use crate::error::Error;
use crate::peers::tracker_link;
use crate::pull::cuts::Cuts;
use messages::{Feed, Report};
use peer_fetcher::peer_fetcher;
use planner_thread::Planner;
use relay_reader::relay_reader;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use writer::write_loop;

/// Pull the whole generation and pass its bytes, in order, to `sink`.
pub fn pull(p: &Pull<'_>, sink: &mut dyn FnMut(&[u8]) -> Result<(), Error>) -> Result<Stats, Error> {
    let readers = p.readers.max(1);
    let window = p.window.max(readers as u64);
    let peer_fetchers = if p.peering.is_some() { swarm::PEER_FETCHES_MAX } else { 0 };
    let generation = p.progress.with(|v| v.desc.generation);
    let cache_room = p.peering.map_or(0, |peering| peering.held.cache_blocks());
    tracing::debug!(readers, window_blocks = window, cache_room_blocks = cache_room, peer_fetches = peer_fetchers, generation, "pulling");
    let (report_tx, report_rx) = mpsc::channel::<Report>();
    let (feed_tx, feed_rx) = mpsc::channel::<Feed>();
    let over = AtomicBool::new(false);
    let cuts = Cuts::default();
    std::thread::scope(|scope| {
        let mut relay_jobs = Vec::new();
        for r in 0..readers {
            let (tx, rx) = mpsc::channel();
            let reports = report_tx.clone();
            spawn_in(scope, format!("reader-{r}"), move || relay_reader(p, generation, r, &rx, &reports))?;
            relay_jobs.push(tx);
        }
        let mut peer_jobs = Vec::new();
        if let Some(peering) = p.peering {
            for f in 0..peer_fetchers {
                let (tx, rx) = mpsc::channel();
                let (reports, cuts) = (report_tx.clone(), &cuts);
                spawn_in(scope, format!("peer-fetch-{f}"), move || peer_fetcher(peering, generation, f, &rx, &reports, cuts))?;
                peer_jobs.push(tx);
            }
        }
        let mut tracker = None;
        if let Some(peering) = p.peering {
            let (tx, rx) = tracker_link::channel().map_err(Error::relay)?;
            let reports = report_tx.clone();
            spawn_in(scope, "tracker-link".into(), move || tracker_link::run(&peering.tracker, &rx, |h| reports.send(Report::Tracker(h)).is_ok()))?;
            tracker = Some(tx);
        }
        let planner = Planner::new(p, window, relay_jobs, peer_jobs, tracker, feed_tx, &cuts);
        let over = &over;
        let planned =
            std::thread::Builder::new().name("planner".into()).spawn_scoped(scope, move || planner.run(&report_rx, over)).map_err(|e| Error::Internal(format!("spawn the pull's planner: {e}")))?;
        let written = write_loop(p, &feed_rx, &report_tx, sink);
        // The planner stops within one wait, and with it the fetchers (their job channels close).
        over.store(true, Ordering::SeqCst);
        let planned = planned.join().map_err(|_| Error::Internal("the pull's planner panicked".into()))?;
        let mut stats = written?;
        stats.add_planned(planned);
        Ok(stats)
    })
}

/// Run a fetcher on a thread of the pull.
fn spawn_in<'scope, 'env: 'scope>(scope: &'scope std::thread::Scope<'scope, 'env>, name: String, f: impl FnOnce() + Send + 'scope) -> Result<(), Error> {
    std::thread::Builder::new().name(name).spawn_scoped(scope, f).map(drop).map_err(|e| Error::Internal(format!("spawn pull thread: {e}")))
}
