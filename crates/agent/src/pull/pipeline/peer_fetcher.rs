//! A peer fetcher's thread: the reads the planner gives it, from one peer at a time, pipelined on a
//! connection kept per peer (under a TLS relay, peers serve TLS too); each block checked, and a miss
//! reported as what it says of the peer ([`PeerMiss`]), never retried here. Apart because a peer is
//! never needed (invariant 10): whatever it does, the planner decides again where the block comes
//! from.

use crate::peers::peering::Peering;
use crate::pull::cuts::Cuts;
use crate::pull::pipeline::fetcher::{next_job, receive_serving, settle, Next, ReadClock};
use crate::pull::pipeline::job::{Job, Source, Verified};
use crate::pull::pipeline::messages::{FetcherId, PeerMiss, Report};
use codec::Decompressor;
use std::collections::{HashMap, VecDeque};
use std::sync::mpsc::{Receiver, Sender};
use std::time::Instant;
use transport::RangeReader;

/// A peer fetcher: reads what the planner gives it from one peer at a time, up to the depth in flight
/// on a connection kept per peer. A miss is reported, never retried here: the planner decides again.
pub(super) fn peer_fetcher(peering: &Peering, generation: u64, me: usize, jobs: &Receiver<Job>, reports: &Sender<Report>, cuts: &Cuts) {
    let serving = peering.serves().then_some(&*peering.held);
    let mut decompressor = Decompressor::new();
    let depth = limits::PEER_READS_IN_FLIGHT;
    let mut conns: HashMap<u32, Box<dyn RangeReader>> = HashMap::new();
    let mut wire: VecDeque<(Job, Instant)> = VecDeque::new();
    let mut clock = ReadClock::new();
    let report = |job: Job, miss: PeerMiss| reports.send(Report::Missed { fetcher: FetcherId::Peer(me), job, miss }).is_ok();
    // A connection that failed is closed; the reads still in flight on it are lost with it.
    let close = |conns: &mut HashMap<u32, Box<dyn RangeReader>>, id: u32, wire: &mut VecDeque<(Job, Instant)>| {
        conns.remove(&id);
        cuts.closed(me, id);
        for (j, _) in wire.drain(..) {
            report(j, PeerMiss::Dropped);
        }
    };
    loop {
        while wire.len() < depth {
            let job = match next_job(jobs, wire.len()) {
                Next::Job(j) => j,
                Next::Nothing => break,
                Next::Gone => return,
            };
            let Source::Peer { id, addr } = &job.from else { continue };
            let (id, addr) = (*id, addr.clone());
            // A connection the planner cut after its last read ended is dead: opened anew, not
            // reused (a send on it would fail, and the peer be judged for it). One with reads on the
            // wire is closed by their misses.
            if wire.is_empty() && conns.contains_key(&id) && !cuts.is_open(me, id) {
                conns.remove(&id);
            }
            let conn = match conns.entry(id) {
                std::collections::hash_map::Entry::Occupied(e) => Ok(e.into_mut()),
                std::collections::hash_map::Entry::Vacant(e) => connect_peer(&addr, &peering.token).map(|(c, sock)| {
                    cuts.opened(me, id, sock);
                    e.insert(c)
                }),
            };
            let sent = conn.and_then(|c| c.send(generation, job.offset, job.len));
            if let Err(e) = sent {
                if !report(job, PeerMiss::Failed(e)) {
                    return;
                }
                close(&mut conns, id, &mut wire);
                continue;
            }
            tracing::debug!(block = job.block, peer = %addr, "block read sent to a peer");
            let at = clock.sent(wire.len());
            wire.push_back((job, at));
        }
        let Some((mut job, sent)) = wire.pop_front() else { continue };
        let Source::Peer { id, .. } = job.from else { continue };
        let (got, arrival) = match conns.get_mut(&id) {
            Some(c) => receive_serving(c.as_mut(), &mut job, serving, reports),
            None => (Err(transport::Error::Protocol("connection to the peer closed".into())), None),
        };
        let took = clock.arrived(sent);
        // A block that matches its checksum and does not decompress is as corrupt as one that does
        // not match (a checksum is easily forged): never fed, kept or served.
        let check = got.is_ok().then(|| job.verify(&mut decompressor));
        let verified = matches!(check, Some(Verified::Good));
        if let Some(Verified::Undecodable(e)) = &check {
            tracing::warn!(block = job.block, error = %e, "a peer's block passes its checksum but does not decompress");
        }
        settle(arrival, verified, job.block, serving, reports);
        let miss = match got {
            Ok(()) if verified => {
                if reports.send(Report::Done { fetcher: FetcherId::Peer(me), job, took, rereads: 0 }).is_err() {
                    return;
                }
                continue;
            }
            Ok(()) => PeerMiss::Corrupt,
            Err(transport::Error::Busy(_)) => PeerMiss::Busy,
            Err(transport::Error::Refused { .. }) => PeerMiss::NotHeld,
            Err(e) if e.is_cut_off() => PeerMiss::CutOff,
            Err(e) => PeerMiss::Failed(e),
        };
        let drop_conn = matches!(miss, PeerMiss::Corrupt | PeerMiss::Failed(_) | PeerMiss::CutOff);
        if !report(job, miss) {
            return;
        }
        if drop_conn {
            close(&mut conns, id, &mut wire);
        }
    }
}

/// Connect to a peer (under a TLS relay, peers serve TLS too); with a handle on its socket, to cut it
/// ([`Cuts`]).
fn connect_peer(addr: &str, token: &transport::Credentials) -> Result<(Box<dyn RangeReader>, std::net::TcpStream), transport::Error> {
    let peer = addr.parse::<endpoint::Endpoint>().map_err(|e| transport::Error::Protocol(format!("peer address: {e}")))?;
    let s = transport::tcp::connect_with(&peer, &token.for_peers(), transport::auth::Kind::Data, limits::PEER_CONNECT_TIMEOUT, limits::PEER_IO_TIMEOUT, transport::Operation::ConnectToPeer)?;
    let sock = s.tcp().try_clone().map_err(transport::Error::io(transport::Operation::ClonePeerSocket))?;
    Ok((Box::new(transport::tcp::StreamReader::new(s)), sock))
}
