//! The writer: the caller's own thread, passing the blocks the planner sends it, in order, to the
//! sink (invariant 3), and reporting what it wrote (the window moves) and which cached blocks it
//! dropped. Apart because it is the one part of the pull on the replica's side: it never waits on a
//! fetcher's socket or the tracker, only on the planner's feed.

use crate::error::Error;
use crate::pull::pipeline::messages::{Feed, Report};
use crate::pull::pipeline::request::Pull;
use crate::pull::pipeline::stats::Stats;
use snapshot::State;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Longest the writer waits for the next block before it checks for a cancel.
const POLL: Duration = limits::BLOCK_WAIT_MAX;

/// The writer: pass the blocks the planner sends, in order, to `sink`; report what was written.
pub(super) fn write_loop(p: &Pull<'_>, feed: &Receiver<Feed>, reports: &Sender<Report>, sink: &mut dyn FnMut(&[u8]) -> Result<(), Error>) -> Result<Stats, Error> {
    let mut stats = Stats::default();
    loop {
        crate::error::check_cancel(p.cancel)?;
        let buf = match feed.recv_timeout(POLL) {
            Ok(Feed::Block(b)) => b,
            Ok(Feed::End) => return Ok(stats),
            Ok(Feed::Failed(e)) => return Err(e),
            Err(RecvTimeoutError::Timeout) => continue,
            Err(RecvTimeoutError::Disconnected) => return Err(Error::Internal("the pull's planner ended without a word".into())),
        };
        sink(&buf)?;
        if stats.first_byte.is_none() {
            stats.first_byte = Some(Instant::now());
            stats.streamed_while_capturing = p.progress.with(|v| v.desc.state == State::Capturing);
        }
        stats.bytes += buf.len() as u64;
        stats.blocks += 1;
        let (dropped, freed): (Vec<u64>, Vec<Arc<Vec<u8>>>) = match p.peering {
            None => (Vec::new(), vec![buf]),
            Some(peering) => {
                // A decompressed block is the writer's alone (peers hold its stored bytes); a raw
                // one is shared with the serve cache, which frees it when it drops it.
                let own = Arc::try_unwrap(buf).ok();
                let (dropped, mut freed): (Vec<u64>, Vec<Arc<Vec<u8>>>) = peering.held.fed(stats.blocks).into_iter().unzip();
                freed.extend(own.map(Arc::new));
                (dropped, freed)
            }
        };
        let freed = freed.into_iter().filter_map(|v| Arc::try_unwrap(v).ok()).collect();
        let _ = reports.send(Report::Written { n: stats.blocks, dropped, freed });
    }
}
