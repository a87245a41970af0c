//! The planner thread: it owns the pull's decisions (the swarm's [`Chooser`], the in-order
//! [`Scheduler`], the fetchers' bookkeeping of [`crate::pull::planner`]), gives each read to a
//! fetcher, has the tracker link's thread ask and tell, acts on every report, and sends the writer
//! the blocks in order. Apart because it is the one thread that decides: the others only move
//! bytes, and it never waits on a network round trip (the tracker's answers come back as reports).

use crate::error::Error;
use crate::peers::peering::Peering;
use crate::peers::tracker_link::{self, Ask, Heard};
use crate::pull::cuts::Cuts;
use crate::pull::pipeline::job::{Job, Source};
use crate::pull::pipeline::messages::{Feed, FetcherId, PeerMiss, Report};
use crate::pull::pipeline::pool::Pool;
use crate::pull::pipeline::request::Pull;
use crate::pull::pipeline::stats::{Planned, RELAY};
use crate::pull::planner::{self, Fetcher};
use crate::pull::scheduler::Scheduler;
use codec::Codec;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, TryRecvError};
use std::sync::Arc;
use std::time::{Duration, Instant};
use swarm::Chooser;
use transport::wire::swarm::{Locate, Located, Where, LOCATE_BLOCKS_MAX};

/// Reads a peer may cut off part-way, beyond the blocks it served this agent, before this agent stops
/// asking it (see [`PeerMiss::CutOff`]; [`limits::PEER_CUT_OFFS_MAX`]).
const CUT_OFFS_MAX: u32 = limits::PEER_CUT_OFFS_MAX;

/// The planner thread's state: everything it decides with (see the module's doc).
pub(super) struct Planner<'a> {
    p: &'a Pull<'a>,
    chooser: Chooser,
    sched: Scheduler<Arc<Vec<u8>>>,
    relay_depth: usize,
    relay: Vec<(Sender<Job>, Fetcher)>,
    peers: Vec<(Sender<Job>, Fetcher)>,
    peer_addrs: HashMap<u32, String>,
    /// Block buffers kept for reuse, as many as the window and every read in flight take.
    pool: Pool,
    /// The tracker link's thread; `None` without a tracker (none, or its link failed): every block
    /// from the relay.
    tracker: Option<tracker_link::AskSender>,
    /// When the next `locate` may go out.
    asking: planner::Asking,
    asked_needed: Option<Instant>,
    feed: Sender<Feed>,
    out: Planned,
    /// Blocks the tracker was told are arriving here and that are not held yet.
    arriving: HashSet<u64>,
    /// Reads each peer cut off part-way (see [`PeerMiss::CutOff`]).
    cut_offs: HashMap<u32, u32>,
    /// The peer fetchers' connections, to cut those carrying abandoned reads.
    cuts: &'a Cuts,
}

impl<'a> Planner<'a> {
    pub(super) fn new(p: &'a Pull<'a>, window: u64, relay: Vec<Sender<Job>>, peers: Vec<Sender<Job>>, tracker: Option<tracker_link::AskSender>, feed: Sender<Feed>, cuts: &'a Cuts) -> Planner<'a> {
        let depth = limits::PEER_READS_IN_FLIGHT;
        let relay_depth = p.transport.depth();
        // Enough buffers for the window and every read in flight: steady state allocates nothing.
        let in_flight = relay.len() * relay_depth + peers.len() * depth;
        let pool = Pool::new(usize::try_from(window).unwrap_or(usize::MAX).saturating_add(in_flight));
        Planner {
            p,
            // The serve cache's room still unused widens the window (the blocks in memory stay
            // within the window and the cache together): early in a pull, when the blocks have spread
            // least, the agent looks furthest ahead.
            chooser: Chooser::new(window, swarm::PEER_FETCHES_MAX)
                .with_relay_fetches(relay.len())
                .with_depth(depth)
                .with_relay_depth(relay_depth)
                .with_cache_room(p.peering.map_or(0, |peering| peering.held.cache_blocks())),
            sched: Scheduler::new(),
            relay_depth,
            relay: relay.into_iter().map(|tx| (tx, Fetcher::default())).collect(),
            peers: peers.into_iter().map(|tx| (tx, Fetcher::default())).collect(),
            peer_addrs: HashMap::new(),
            pool,
            tracker,
            asking: planner::Asking::default(),
            asked_needed: None,
            feed,
            out: Planned::default(),
            arriving: HashSet::new(),
            cut_offs: HashMap::new(),
            cuts,
        }
    }

    /// Plan and dispatch until every block went to the writer, the pull failed, or the writer is gone;
    /// then shut every peer connection still open, and any opened after ([`Cuts::cut_all`]). A read
    /// still on one can give only a duplicate, or nothing the pull can use any more, and the pull's
    /// end joins the fetchers' threads: a read left on the wire held it for as long as its peer took
    /// (a bench run: 10 s, the peer I/O timeout, after the replica had loaded every block).
    pub(super) fn run(mut self, reports: &Receiver<Report>, over: &AtomicBool) -> Planned {
        self.drive(reports, over);
        let cut = self.cuts.cut_all();
        if cut > 0 {
            tracing::debug!(connections = cut, "the pull is over: shut its peer connections");
        }
        self.out
    }

    fn drive(&mut self, reports: &Receiver<Report>, over: &AtomicBool) {
        while !over.load(Ordering::SeqCst) {
            if let Err(e) = self.relay_state() {
                let _ = self.feed.send(Feed::Failed(e));
                break;
            }
            // Before the end too: the pull's threads are joined, and an abandoned read left running
            // would hold its fetcher's until the slow peer sent its last byte.
            self.cut_abandoned();
            if self.sched.finished() {
                let _ = self.feed.send(Feed::End);
                break;
            }
            self.poll_needed();
            self.move_overdue();
            let planned = self.plan();
            // A completion, a write or the tracker's answer wakes us; otherwise look again soon
            // (blocks being published, blocks another agent claimed).
            let first = if planned {
                reports.try_recv().map_err(|e| e == TryRecvError::Disconnected)
            } else {
                reports.recv_timeout(limits::LOCATE_RETRY_EVERY).map_err(|e| e == RecvTimeoutError::Disconnected)
            };
            let mut next = first;
            loop {
                match next {
                    Ok(r) => {
                        if !self.handle(r) {
                            return;
                        }
                    }
                    Err(true) => return,
                    Err(false) => break,
                }
                next = reports.try_recv().map_err(|e| e == TryRecvError::Disconnected);
            }
        }
    }

    /// The relay's view: blocks published, the total once known; an error when the relay's
    /// generation failed or its control link is lost.
    fn relay_state(&mut self) -> Result<(), Error> {
        let (readable, total) = self.p.progress.with(|v| v.check().map(|()| (v.blocks_readable(), v.blocks_total())))?;
        self.chooser.published(readable);
        if let Some(t) = total {
            self.sched.set_total(t);
        }
        Ok(())
    }

    /// Have the tracker link's thread say or ask something (a link already lost: nothing; its
    /// failure comes back as a report).
    fn tell(&mut self, ask: Ask) {
        if let Some(t) = &self.tracker {
            if t.send(ask).is_err() {
                // The thread ended at the link's failure: its `Heard::Lost`, already queued, says why.
                self.tracker = None;
                self.asking.tracker_lost();
            }
        }
    }

    fn lose_tracker(&mut self, e: transport::Error) {
        tracing::warn!(error = %e, "the relay's tracker failed; pulling the rest from the relay alone");
        self.tracker = None;
        self.asking.tracker_lost();
        self.out.swarm_lost = Some(e.to_string());
    }

    /// Whether anyone else still needs blocks decides whether fed blocks are kept for them (asked at
    /// most every [`limits::NEEDED_POLL_EVERY`]).
    fn poll_needed(&mut self) {
        if self.tracker.is_none() || matches!(self.asked_needed, Some(t) if t.elapsed() < limits::NEEDED_POLL_EVERY) {
            return;
        }
        self.asked_needed = Some(Instant::now());
        self.tell(Ask::Needed);
    }

    /// Reads from peers that take far longer than this agent's blocks do (a holder receiving the block
    /// at a slow host's pace, named before it was known to be slow) are moved: their blocks are
    /// located anew, while the reads run on to their end (a read on a connection cannot be taken
    /// back; whichever ends first gives the block).
    fn move_overdue(&mut self) {
        let now = Instant::now();
        for b in self.chooser.overdue(now) {
            if let Some(p) = self.chooser.move_away(b, now) {
                tracing::debug!(block = b, peer = %self.peer_addrs.get(&p).map_or("?", String::as_str), "a read from a peer takes too long; locating the block anew");
                self.asking.changed();
            }
        }
    }

    /// Cut the connections whose every read on the wire was moved elsewhere and whose block is held
    /// since (the chooser decides which): they can only give duplicates, and they hold a fetcher, a
    /// flow and the slow peer's uplink. Their misses are ours, not the peer's ([`Planner::missed`]).
    fn cut_abandoned(&mut self) {
        for p in self.chooser.to_cut() {
            // The one fetcher reading from the peer (see `planner::peer_fetcher`).
            let Some(f) = self.peers.iter().position(|(_, f)| f.outstanding > 0 && f.serving == Some(p)) else { continue };
            // Marked only once it happened: a peer marked without a cut would have its reads' real
            // failures taken for ours, and never judged. Named again next round until then.
            if self.cuts.cut(f, p) {
                self.chooser.cutting(p);
                tracing::debug!(peer = %self.peer_addrs.get(&p).map_or("?", String::as_str), "cutting reads moved away from a peer: their blocks are held");
            }
        }
    }

    /// Find sources for the blocks the chooser wants: ask the tracker (the answer comes back as a
    /// report), or, without one, read them from the relay. Whether anything was decided or asked.
    fn plan(&mut self) -> bool {
        if !self.asking.may_ask(Instant::now()) {
            return false;
        }
        let mut wanted = self.chooser.wanted(|_| 0);
        wanted.truncate(LOCATE_BLOCKS_MAX);
        if wanted.is_empty() {
            return false;
        }
        if self.tracker.is_none() {
            let answers: Vec<Located> = wanted.iter().take(self.chooser.relay_slots()).map(|b| Located { block: *b, at: Where::Relay }).collect();
            return self.assign(answers);
        }
        let fetching = self.chooser.fetching();
        self.tell(Ask::Locate(Locate {
            relay_slots: self.chooser.relay_slots().min(255) as u8,
            peer_slots: self.chooser.peer_slots().min(255) as u8,
            blocks: wanted,
            window_end: self.chooser.window_end(),
            flows_free: fetching.flows_free.min(255) as u8,
            open: fetching.open,
        }));
        if self.tracker.is_some() {
            self.asking.asked();
        }
        true
    }

    /// Turn answers into reads given to fetchers; whether anything was decided. Blocks that arrived
    /// or went out since the question are left alone.
    fn assign(&mut self, mut answers: Vec<Located>) -> bool {
        answers.retain(|a| !self.chooser.holds(a.block) && !self.chooser.in_flight(a.block));
        for a in &answers {
            if let Where::Peers(peers) = &a.at {
                for pe in peers {
                    self.peer_addrs.insert(pe.id, pe.addr.clone());
                }
            }
        }
        let assigned = planner::assign(&mut self.chooser, &answers, Instant::now());
        for (peer, b) in &assigned.shunned {
            self.tell(Ask::NotAt { peer: *peer, block: *b });
        }
        for b in &assigned.relay {
            self.dispatch(*b, Source::Relay);
        }
        for (b, id) in &assigned.peers {
            let addr = self.peer_addrs.get(id).cloned().unwrap_or_default();
            self.dispatch(*b, Source::Peer { id: *id, addr });
        }
        !(assigned.relay.is_empty() && assigned.peers.is_empty() && assigned.shunned.is_empty())
    }

    /// Give the read of block `b` to a fetcher (the chooser has counted it as in flight).
    fn dispatch(&mut self, b: u64, from: Source) {
        let block = self.p.progress.with(|v| v.block(b));
        let depth = limits::PEER_READS_IN_FLIGHT;
        let fetcher = match &from {
            Source::Relay => planner::relay_reader(&self.relay.iter().map(|(_, f)| *f).collect::<Vec<_>>(), self.relay_depth).map(FetcherId::Relay),
            Source::Peer { id, .. } => planner::peer_fetcher(&self.peers.iter().map(|(_, f)| *f).collect::<Vec<_>>(), *id, depth).map(FetcherId::Peer),
        };
        let (Some(block), Some(fetcher)) = (block, fetcher) else {
            // Not published after all, or no fetcher free (a transient the chooser's counts rule
            // out): the block goes back to the wanted ones.
            self.chooser.failed(b, false);
            return;
        };
        let (offset, len, want, codec) = (block.start, block.entry.stored_len, block.entry.crc, block.entry.codec);
        // At most a read's length (the descriptor was validated against the block size).
        let raw_len = block.raw_len as u32;
        let mut buf = self.pool.take();
        buf.resize(len as usize, 0);
        let raw = if codec == Codec::Raw { Vec::new() } else { self.pool.take() };
        let serving = match &from {
            Source::Peer { id, .. } => Some(*id),
            Source::Relay => None,
        };
        let (tx, f) = match fetcher {
            FetcherId::Relay(i) => &mut self.relay[i],
            FetcherId::Peer(i) => &mut self.peers[i],
        };
        if tx.send(Job { block: b, offset, len, want, codec, raw_len, from, buf, raw }).is_err() {
            // The fetcher is gone (a relay reader that failed: its report ends the pull).
            self.chooser.failed(b, false);
            return;
        }
        f.outstanding += 1;
        f.serving = serving;
        self.sched.started();
    }

    fn fetcher(&mut self, id: FetcherId) -> &mut Fetcher {
        match id {
            FetcherId::Relay(i) => &mut self.relay[i].1,
            FetcherId::Peer(i) => &mut self.peers[i].1,
        }
    }

    /// A job's buffers, back to the pool.
    fn recycle(&mut self, job: Job) {
        self.pool.put(job.buf);
        self.pool.put(job.raw);
    }

    /// Act on a report; false when the pull is over (failed, or the writer is gone).
    fn handle(&mut self, r: Report) -> bool {
        match r {
            Report::Done { fetcher, job, took, rereads } => {
                self.fetcher(fetcher).outstanding -= 1;
                self.asking.changed();
                self.done(job, took, rereads)
            }
            Report::Missed { fetcher, job, miss } => {
                self.fetcher(fetcher).outstanding -= 1;
                self.asking.changed();
                self.missed(job, miss);
                true
            }
            Report::Arriving(b) => {
                if !self.chooser.holds(b) && self.arriving.insert(b) {
                    self.tell(Ask::Arriving(b));
                }
                true
            }
            Report::ArrivalFailed(b) => {
                // Taken back like a dropped block (the tracker lists us again on the block's `have`).
                if self.arriving.remove(&b) {
                    if let Some(me) = self.p.peering.map(Peering::id) {
                        self.tell(Ask::NotAt { peer: me, block: b });
                    }
                }
                true
            }
            Report::Tracker(Heard::Located(answers, took)) => {
                tracing::debug!(secs = took.as_secs_f64(), "tracker answered a locate");
                // Answers that come after the tracker was lost are left alone: the relay serves all.
                let useful = self.tracker.is_none() || self.assign(answers);
                self.asking.answered(useful, Instant::now());
                true
            }
            Report::Tracker(Heard::Needed(n)) => {
                if let Some(peering) = self.p.peering {
                    peering.held.set_others_need(n > 0);
                }
                true
            }
            Report::Tracker(Heard::Lost(e)) => {
                self.lose_tracker(e);
                true
            }
            Report::Failed(e) => {
                let _ = self.feed.send(Feed::Failed(e));
                false
            }
            Report::Written { n, dropped, freed } => {
                self.chooser.written(n);
                self.asking.changed();
                // Cached blocks dropped: the tracker stops naming us for them (told here, not by the
                // writer, so that the replica's feed never waits on the tracker; and after their
                // `have`, which the planner sent when they arrived).
                if let Some(me) = self.p.peering.filter(|p| p.serves()).map(Peering::id) {
                    for b in dropped {
                        self.tell(Ask::NotAt { peer: me, block: b });
                    }
                }
                for buf in freed {
                    self.pool.put(buf);
                }
                true
            }
        }
    }

    /// Block `job.block` arrived verified: keep it, announce it, hand it on in order.
    fn done(&mut self, job: Job, took: Duration, rereads: u32) -> bool {
        // Counted as they travel (stored, compressed where that paid).
        let (b, bytes) = (job.block, u64::from(job.len));
        // Invariant 1: a block is kept, served or fed only after its checksum passed and it
        // decompressed to its length.
        debug_assert!(job.buf.len() == job.len as usize && snapshot::block_checksum(&job.buf) == job.want && job.rdb_bytes().len() == job.raw_len as usize, "block {b} reported done unverified");
        self.out.rereads += u64::from(rereads);
        let moved = match &job.from {
            Source::Peer { id, .. } => self.chooser.moved_ended(b, *id).then_some(*id),
            Source::Relay => None,
        };
        if self.chooser.holds(b) {
            // A duplicate (a read moved elsewhere and its replacement both gave the block): nothing
            // to do with it but free its slot, if it is the one the chooser counts in flight.
            if moved.is_none() {
                self.chooser.failed(b, false);
            }
            self.sched.abandoned();
            self.recycle(job);
            return true;
        }
        let source = match &job.from {
            Source::Relay => RELAY.to_string(),
            Source::Peer { addr, .. } => addr.clone(),
        };
        tracing::debug!(block = b, from = %source, secs = took.as_secs_f64(), "block verified");
        // Peers are served the stored bytes, the writer feeds the RDB's: one buffer for a raw block,
        // two for a compressed one while peers may want it (else the stored one goes back at once).
        let (stored, block) = if job.codec == Codec::Raw {
            let block = Arc::new(job.buf);
            (Some(block.clone()), block)
        } else if self.p.peering.is_some() {
            (Some(Arc::new(job.buf)), Arc::new(job.raw))
        } else {
            self.pool.put(job.buf);
            (None, Arc::new(job.raw))
        };
        // Kept and announced before the writer can see it: the writer may drop it from the cache at
        // once, and that `not_at` must follow this `have`.
        if let (Some(peering), Some(stored)) = (self.p.peering, stored) {
            peering.held.insert(b, job.offset, stored);
            self.arriving.remove(&b);
            self.tell(Ask::Have(b));
        }
        match moved {
            Some(p) => self.chooser.done_moved(b, p, bytes, took.as_secs_f64()),
            None => self.chooser.done(b, bytes, took.as_secs_f64()),
        }
        self.sched.completed(b, block);
        // A block served takes one cut-off off the peer's count (not all: one that serves a block
        // and then cuts three off would never be avoided).
        if let Source::Peer { id, .. } = &job.from {
            if let Some(n) = self.cut_offs.get_mut(id) {
                *n = n.saturating_sub(1);
            }
        }
        self.out.stored += bytes;
        let e = self.out.sources.entry(source).or_default();
        e.0 += bytes;
        e.1 += 1;
        if let Some(c) = self.p.counters {
            let counter = if job.from == Source::Relay { &c.from_relay } else { &c.from_peers };
            counter.fetch_add(bytes, Ordering::Relaxed);
        }
        while let Some(next) = self.sched.next_ready() {
            if self.feed.send(Feed::Block(next)).is_err() {
                return false; // the writer is gone
            }
        }
        self.out.in_flight_max = self.sched.in_flight_max();
        true
    }

    /// A read from a peer gave no block: the block goes back to the wanted ones, and the tracker and
    /// the chooser learn what the miss says about the peer.
    fn missed(&mut self, job: Job, miss: PeerMiss) {
        let (b, Source::Peer { id: peer, addr }) = (job.block, &job.from) else { return };
        let peer = *peer;
        // A read this agent abandoned and cut itself (its block is held): a drop, saying nothing of
        // the peer, whatever the connection's end looked like.
        let cut = self.chooser.is_cut(peer);
        let miss = if cut { PeerMiss::Dropped } else { miss };
        match &miss {
            PeerMiss::Busy => {
                tracing::debug!(peer = %addr, block = b, "peer busy");
                self.chooser.refused(peer, Instant::now());
            }
            PeerMiss::NotHeld => {
                tracing::debug!(peer = %addr, block = b, "peer no longer holds the block");
                self.tell(Ask::NotAt { peer, block: b });
            }
            PeerMiss::Corrupt => {
                tracing::warn!(peer = %addr, block = b, "a peer sent a block that fails its checksum; never asking it again");
                self.tell(Ask::NotAt { peer, block: transport::wire::ALL_BLOCKS });
                self.out.peer_bad_blocks += 1;
            }
            PeerMiss::Failed(e) => {
                tracing::warn!(peer = %addr, block = b, error = %e, "peer failed; fetching its blocks elsewhere");
                self.tell(Ask::NotAt { peer, block: b });
            }
            PeerMiss::CutOff => {
                tracing::debug!(peer = %addr, block = b, "peer cut its block off part-way");
                self.tell(Ask::NotAt { peer, block: b });
            }
            PeerMiss::Dropped => {}
        }
        if matches!(miss, PeerMiss::Busy) {
            self.out.peer_refusals += 1;
        } else if !cut {
            self.out.peer_failures += 1;
        }
        // An honest holder cuts a read off only when its own arrival of the block failed (rare); one
        // that keeps doing it wastes the asker's flows like a failing peer, and is avoided like one.
        // Counted less the blocks it served us whole (one upstream failure cuts off everyone below
        // it; an honest holder serves blocks in between).
        let cut_off_too_often = matches!(miss, PeerMiss::CutOff) && {
            let n = self.cut_offs.entry(peer).or_default();
            *n += 1;
            *n > CUT_OFFS_MAX
        };
        if cut_off_too_often {
            tracing::warn!(peer = %addr, cut_offs = CUT_OFFS_MAX + 1, "a peer keeps cutting blocks off part-way without serving one; no longer asking it");
        }
        let bad = cut_off_too_often || matches!(miss, PeerMiss::Corrupt | PeerMiss::Failed(_));
        if self.chooser.moved_ended(b, peer) {
            // A read moved elsewhere: its replacement stands; only the peer is judged.
            if bad {
                self.chooser.avoid(peer);
            }
        } else {
            self.chooser.failed(b, bad);
        }
        self.sched.abandoned();
        self.recycle(job);
    }
}
