//! What the relay readers and the peer fetchers share: taking the planner's next job without
//! stalling the reads in flight ([`next_job`]), timing each pipelined read by its own time on the
//! wire ([`ReadClock`]), and serving a block to peers while it arrives, then settling its arrival
//! once it is checked ([`receive_serving`], [`settle`]). Apart because both kinds of fetcher read
//! blocks the same way and differ only in where from and in what a failure means.

use crate::peers::arrival::Arrival;
use crate::peers::held::Held;
use crate::pull::pipeline::job::Job;
use crate::pull::pipeline::messages::Report;
use std::sync::mpsc::{Receiver, Sender, TryRecvError};
use std::sync::Arc;
use std::time::{Duration, Instant};
use transport::RangeReader;

/// What a fetcher takes next from the planner.
pub(super) enum Next {
    Job(Job),
    /// Nothing waiting, and reads are in flight: receive those.
    Nothing,
    /// The planner is done.
    Gone,
}

/// The next job for a fetcher with `in_flight` reads on the wire: it waits for one only when nothing
/// is in flight (otherwise it goes on to receive what it sent).
pub(super) fn next_job(jobs: &Receiver<Job>, in_flight: usize) -> Next {
    let got = if in_flight == 0 { jobs.recv().map_err(|_| true) } else { jobs.try_recv().map_err(|e| e == TryRecvError::Disconnected) };
    match got {
        Ok(j) => Next::Job(j),
        Err(true) => Next::Gone,
        Err(false) => Next::Nothing,
    }
}

/// How long each read took on a pipelined connection: from when it was sent or when the read before
/// it arrived, whichever is later — its own time on the wire, not its wait behind the one before.
pub(super) struct ReadClock {
    last: Instant,
}

impl ReadClock {
    pub(super) fn new() -> ReadClock {
        ReadClock { last: Instant::now() }
    }

    /// A read is sent now, `in_flight` reads ahead of it; returns when.
    pub(super) fn sent(&mut self, in_flight: usize) -> Instant {
        let now = Instant::now();
        if in_flight == 0 {
            self.last = now;
        }
        now
    }

    /// The read sent at `sent` arrived.
    pub(super) fn arrived(&mut self, sent: Instant) -> Duration {
        let took = self.last.elapsed().min(sent.elapsed());
        self.last = Instant::now();
        took
    }
}

/// Receive the oldest pipelined read's block into `job.buf`. An agent that serves peers serves the
/// block while it arrives: its arrival starts with the first bytes (the planner tells the tracker)
/// and follows every piece. Returns the arrival, to be settled once the block is checked.
pub(super) fn receive_serving(r: &mut dyn RangeReader, job: &mut Job, serving: Option<&Held>, reports: &Sender<Report>) -> (Result<(), transport::Error>, Option<Arc<Arrival>>) {
    let Some(held) = serving else { return (r.receive(&mut job.buf), None) };
    let (block, offset, len) = (job.block, job.offset, job.buf.len());
    let mut arrival: Option<Arc<Arrival>> = None;
    let mut first = true;
    let got = r.receive_pieces(&mut job.buf, &mut |piece| {
        if std::mem::take(&mut first) {
            arrival = held.start_arrival(block, offset, len);
            if arrival.is_some() {
                let _ = reports.send(Report::Arriving(block));
            }
        }
        if let Some(a) = &arrival {
            a.push(piece);
        }
    });
    (got, arrival)
}

/// A block that was arriving was checked (`verified`) or its read failed: peers reading it get its
/// last byte, or are cut off (and the planner takes the arrival back from the tracker).
pub(super) fn settle(arrival: Option<Arc<Arrival>>, verified: bool, block: u64, serving: Option<&Held>, reports: &Sender<Report>) {
    let (Some(a), Some(held)) = (arrival, serving) else { return };
    if verified {
        a.settle(true);
    } else {
        held.fail_arrival(block, &a);
        let _ = reports.send(Report::ArrivalFailed(block));
    }
}
