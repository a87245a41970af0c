//! A relay reader's thread: the reads the planner gives it, on its own connection or endpoint to the
//! relay, up to the transport's depth in flight; each block checked and decompressed, a bad one read
//! once more, twice failing the pull. Apart because the relay is the source of last resort
//! (invariant 10): its failures end the pull, where a peer's only send the block elsewhere.

use crate::error::Error;
use crate::pull::pipeline::fetcher::{next_job, receive_serving, settle, Next, ReadClock};
use crate::pull::pipeline::job::{Job, Verified};
use crate::pull::pipeline::messages::{FetcherId, Report};
use crate::pull::pipeline::request::Pull;
use crate::pull::scheduler::Mismatch;
use codec::Decompressor;
use std::collections::VecDeque;
use std::sync::mpsc::{Receiver, Sender};
use std::time::Instant;
use transport::RangeReader;

/// A relay reader: reads what the planner gives it on its own connection or endpoint, up to its
/// reader's depth in flight, and checks and decompresses each block (a mismatch or a block that does
/// not decompress is read again once, behind what is in flight; twice fails the pull).
pub(super) fn relay_reader(p: &Pull<'_>, generation: u64, me: usize, jobs: &Receiver<Job>, reports: &Sender<Report>) {
    let serving = p.peering.filter(|pe| pe.serves()).map(|pe| &*pe.held);
    let mut decompressor = Decompressor::new();
    let mut reader: Option<Box<dyn RangeReader>> = None;
    // Reads sent, oldest first: the job, when it was sent, its attempt.
    let mut wire: VecDeque<(Job, Instant, u32)> = VecDeque::new();
    let mut clock = ReadClock::new();
    let fail = |e: Error| drop(reports.send(Report::Failed(e)));
    loop {
        while wire.len() < reader.as_ref().map_or(1, |r| r.depth()) {
            let job = match next_job(jobs, wire.len()) {
                Next::Job(j) => j,
                Next::Nothing => break,
                Next::Gone => return,
            };
            if reader.is_none() {
                match p.transport.open() {
                    Ok(r) => reader = Some(r),
                    Err(e) => return fail(Error::relay(e)),
                }
            }
            let r = reader.as_mut().expect("opened above");
            if r.depth() > 1 {
                if let Err(e) = r.send(generation, job.offset, job.len) {
                    return fail(Error::relay(e));
                }
            }
            let at = clock.sent(wire.len());
            wire.push_back((job, at, 1));
        }
        let Some((mut job, sent, attempt)) = wire.pop_front() else { continue };
        let r = reader.as_mut().expect("opened with the first read");
        let (got, arrival) = if r.depth() > 1 { receive_serving(r.as_mut(), &mut job, serving, reports) } else { (r.read(generation, job.offset, &mut job.buf), None) };
        if let Err(e) = got {
            settle(arrival, false, job.block, serving, reports);
            return fail(Error::relay(e));
        }
        let took = clock.arrived(sent);
        let check = job.verify(&mut decompressor);
        settle(arrival, matches!(check, Verified::Good), job.block, serving, reports);
        if !matches!(check, Verified::Good) {
            tracing::warn!(block = job.block, attempt, codec = %job.codec, check = ?check, "a block from the relay is bad (checksum mismatch, or it does not decompress)");
            if crate::pull::scheduler::after_mismatch(attempt) == Mismatch::Fail {
                return fail(match check {
                    Verified::Undecodable(e) => {
                        Error::protocol(crate::error::Party::Relay, format!("block {} (offset {} in its region) passes its checksum twice but does not decompress: {e}", job.block, job.offset))
                    }
                    _ => Error::Checksum { block: job.block, offset: job.offset },
                });
            }
            if r.depth() > 1 {
                if let Err(e) = r.send(generation, job.offset, job.len) {
                    return fail(Error::relay(e));
                }
            }
            let at = clock.sent(wire.len());
            wire.push_back((job, at, attempt + 1));
            continue;
        }
        if reports.send(Report::Done { fetcher: FetcherId::Relay(me), job, took, rereads: attempt - 1 }).is_err() {
            return;
        }
    }
}
