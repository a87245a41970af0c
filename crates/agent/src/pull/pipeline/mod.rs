//! Pull blocks out of order — from the relay, and from peers when the agent is in a swarm — and hand
//! them on in order.
//!
//! Threads, and what each owns (they talk over channels; none shares a lock with another):
//! - the **planner** owns the decisions — the swarm's [`Chooser`] (which block next, from where), the
//!   [`Scheduler`] (the in-order hand-on), the fetchers' bookkeeping ([`crate::pull::planner`]) — and gives
//!   each read to a fetcher;
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

use crate::error::Error;
use crate::peers::arrival::Arrival;
use crate::peers::held::Held;
use crate::peers::peering::Peering;
use crate::peers::tracker_link::{self, Ask, Heard};
use crate::pull::cuts::Cuts;
use crate::pull::planner::{self, Fetcher};
use crate::pull::progress::Progress;
use crate::pull::scheduler::{Mismatch, Scheduler};
use crate::report::{SourceBytes, SourceCounters};
use codec::{Codec, Decompressor};
use snapshot::State;
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender, TryRecvError};
use std::sync::Arc;
use std::time::{Duration, Instant};
use swarm::Chooser;
use transport::wire::swarm::{Locate, Located, Where, LOCATE_BLOCKS_MAX};
use transport::{RangeReader, Transport};

/// How a pull went.
#[derive(Debug, Clone, Default)]
pub struct Stats {
    /// RDB bytes passed on.
    pub bytes: u64,
    /// The bytes they travelled as (compressed where that paid): the blocks' stored lengths.
    pub stored_bytes: u64,
    /// Blocks passed on.
    pub blocks: u64,
    /// Blocks read twice because a checksum did not match or the block did not decompress.
    pub reread: u64,
    /// When the first byte was passed on.
    pub first_byte: Option<Instant>,
    /// Most block reads that were in flight at once.
    pub reads_in_flight_max: u64,
    /// The first block was passed on while the relay was still receiving the RDB from the master.
    pub streamed_while_capturing: bool,
    /// Where the bytes came from: the relay first, then each peer.
    pub sources: Vec<SourceBytes>,
    /// Blocks from peers that failed their checksum (thrown away, fetched elsewhere).
    pub peer_bad_blocks: u64,
    /// Fetches from peers that failed (timed out, connection lost, block not held) and went elsewhere.
    pub peer_failures: u64,
    /// Fetches a peer refused, serving its maximum of uploads (asked elsewhere or later).
    pub peer_refusals: u64,
    /// The tracker link failed during the pull: the rest came from the relay alone.
    pub swarm_lost: Option<String>,
}

impl Stats {
    /// Bytes from the relay.
    pub fn relay_bytes(&self) -> u64 {
        self.sources.iter().filter(|s| s.source == RELAY).map(|s| s.bytes).sum()
    }
    /// Bytes from peers.
    pub fn peer_bytes(&self) -> u64 {
        self.sources.iter().filter(|s| s.source != RELAY).map(|s| s.bytes).sum()
    }
}

/// The source name of the relay in [`SourceBytes`].
pub const RELAY: &str = "relay";

/// What to pull and how.
pub struct Pull<'a> {
    /// The transport to the relay.
    pub transport: &'a dyn Transport,
    /// The generation, as the relay describes it.
    pub progress: &'a Arc<Progress>,
    /// Relay readers.
    pub readers: usize,
    /// Blocks fetched ahead of the one the sink needs next, at most.
    pub window: u64,
    /// Set from outside to stop.
    pub cancel: &'a AtomicBool,
    /// The swarm, when the agent is in one; `None`: every block from the relay.
    pub peering: Option<&'a Peering>,
    /// Live counters for a display.
    pub counters: Option<&'a SourceCounters>,
}

/// Reads a peer may cut off part-way, beyond the blocks it served this agent, before this agent stops
/// asking it (see [`PeerMiss::CutOff`]; [`limits::PEER_CUT_OFFS_MAX`]).
const CUT_OFFS_MAX: u32 = limits::PEER_CUT_OFFS_MAX;

/// Longest the writer waits for the next block before it checks for a cancel.
const POLL: Duration = limits::BLOCK_WAIT_MAX;

/// Where a read goes.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Source {
    Relay,
    /// A peer: its number in the swarm and its address.
    Peer {
        id: u32,
        addr: String,
    },
}

/// One read, as the planner gives it to a fetcher.
struct Job {
    block: u64,
    /// Where the block's stored bytes are in the relay's region, and how many.
    offset: u64,
    len: u32,
    /// The relay's published CRC32C of the stored bytes.
    want: u32,
    /// How they are kept, and the block's length in the RDB.
    codec: Codec,
    raw_len: u32,
    from: Source,
    /// `len` bytes, from the planner's pool.
    buf: Vec<u8>,
    /// The block decompressed, once verified (empty for a raw block: `buf` is the RDB's bytes); a
    /// buffer from the pool.
    raw: Vec<u8>,
}

impl Job {
    /// Check the stored bytes against the entry, then undo the codec into `raw`. A block that passes
    /// its checksum and does not decompress to its length was compressed wrongly or forged to match:
    /// bad bytes all the same, never fed.
    fn verify(&mut self, d: &mut Decompressor) -> Verified {
        if snapshot::block_checksum(&self.buf) != self.want {
            return Verified::Mismatch;
        }
        if self.codec == Codec::Raw {
            return if self.buf.len() == self.raw_len as usize { Verified::Good } else { Verified::Mismatch };
        }
        match d.decompress(self.codec, &self.buf, self.raw_len as usize, &mut self.raw) {
            Ok(()) => Verified::Good,
            Err(e) => Verified::Undecodable(e),
        }
    }

    /// The block's RDB bytes, once verified.
    fn rdb_bytes(&self) -> &[u8] {
        if self.codec == Codec::Raw {
            &self.buf
        } else {
            &self.raw
        }
    }
}

/// What checking a block found.
#[derive(Debug)]
enum Verified {
    Good,
    /// Its checksum does not match its entry.
    Mismatch,
    /// It matches, and does not decompress to its length.
    Undecodable(codec::Error),
}

/// Why a read from a peer gave no block.
#[derive(Debug)]
enum PeerMiss {
    /// It serves its maximum: pass it over for a moment.
    Busy,
    /// It does not hold the block (dropped from its cache): the tracker must stop naming it for this
    /// block, or it would never offer another source.
    NotHeld,
    /// Its block failed the checksum: never fed, kept or served; it is never asked again and the
    /// tracker names it for nothing any more.
    Corrupt,
    /// It failed, stalled or vanished: never asked again; the tracker stops naming it for this block.
    Failed(transport::Error),
    /// Not answered: the connection was closed for an earlier read's miss (corrupt or failed).
    Dropped,
    /// The peer ended the connection part-way through the block's bytes (an orderly end of stream,
    /// [`transport::Error::is_cut_off`]): it served the block while it arrived and the arrival failed
    /// (see [`crate::peers::arrival`]). The tracker stops naming it for this block; it is not avoided unless
    /// its cut-offs exceed the blocks it served this agent by more than [`CUT_OFFS_MAX`].
    CutOff,
}

/// A fetcher thread, by kind and number.
#[derive(Debug, Clone, Copy)]
enum FetcherId {
    Relay(usize),
    Peer(usize),
}

/// What fetchers and the writer tell the planner.
enum Report {
    /// A read ended with the block, verified. `took`: its own transfer (not its wait behind earlier
    /// reads on the connection); `rereads`: reads of it that failed the checksum first.
    Done { fetcher: FetcherId, job: Job, took: Duration, rereads: u32 },
    /// A read from a peer gave no block.
    Missed { fetcher: FetcherId, job: Job, miss: PeerMiss },
    /// A block's bytes started to arrive and peers may read it from us while they do.
    Arriving(u64),
    /// A block that was arriving will not complete from that read (its `Done` or `Missed` follows).
    ArrivalFailed(u64),
    /// A relay reader failed: so does the pull.
    Failed(Error),
    /// The writer passed blocks `0..n` on; it dropped `dropped` from the serving cache; `freed` are
    /// buffers to reuse.
    Written { n: u64, dropped: Vec<u64>, freed: Vec<Vec<u8>> },
    /// What the tracker link's thread heard back.
    Tracker(Heard),
}

/// What the planner sends the writer.
enum Feed {
    /// The next block in order.
    Block(Arc<Vec<u8>>),
    /// Every block was sent.
    End,
    Failed(Error),
}

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
        stats.reread = planned.rereads;
        stats.reads_in_flight_max = planned.in_flight_max;
        stats.peer_bad_blocks = planned.peer_bad_blocks;
        stats.peer_failures = planned.peer_failures;
        stats.peer_refusals = planned.peer_refusals;
        stats.swarm_lost = planned.swarm_lost;
        stats.stored_bytes = planned.stored;
        let mut sources: Vec<SourceBytes> = planned.sources.into_iter().map(|(source, (bytes, blocks))| SourceBytes { source, bytes, blocks }).collect();
        sources.sort_by_key(|s| (s.source != RELAY, std::cmp::Reverse(s.bytes)));
        stats.sources = sources;
        Ok(stats)
    })
}

/// Run a fetcher on a thread of the pull.
fn spawn_in<'scope, 'env: 'scope>(scope: &'scope std::thread::Scope<'scope, 'env>, name: String, f: impl FnOnce() + Send + 'scope) -> Result<(), Error> {
    std::thread::Builder::new().name(name).spawn_scoped(scope, f).map(drop).map_err(|e| Error::Internal(format!("spawn pull thread: {e}")))
}

/// What the planner learnt, for the pull's stats.
#[derive(Default)]
struct Planned {
    rereads: u64,
    in_flight_max: u64,
    peer_bad_blocks: u64,
    peer_failures: u64,
    peer_refusals: u64,
    swarm_lost: Option<String>,
    sources: BTreeMap<String, (u64, u64)>,
    stored: u64,
}

/// The planner thread's state: everything it decides with (see the module's doc).
struct Planner<'a> {
    p: &'a Pull<'a>,
    chooser: Chooser,
    sched: Scheduler<Arc<Vec<u8>>>,
    relay_depth: usize,
    relay: Vec<(Sender<Job>, Fetcher)>,
    peers: Vec<(Sender<Job>, Fetcher)>,
    peer_addrs: HashMap<u32, String>,
    /// Block buffers kept for reuse: a freed multi-MiB buffer goes back to the kernel, and a new one
    /// costs a page fault per 4 KiB. Bounded by `pool_max`.
    pool: Vec<Vec<u8>>,
    pool_max: usize,
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
    fn new(p: &'a Pull<'a>, window: u64, relay: Vec<Sender<Job>>, peers: Vec<Sender<Job>>, tracker: Option<tracker_link::AskSender>, feed: Sender<Feed>, cuts: &'a Cuts) -> Planner<'a> {
        let depth = limits::PEER_READS_IN_FLIGHT;
        let relay_depth = p.transport.depth();
        // Enough buffers for the window and every read in flight: steady state allocates nothing.
        let in_flight = relay.len() * relay_depth + peers.len() * depth;
        let pool_max = usize::try_from(window).unwrap_or(usize::MAX).saturating_add(in_flight);
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
            pool: Vec::new(),
            pool_max,
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
    fn run(mut self, reports: &Receiver<Report>, over: &AtomicBool) -> Planned {
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
        let mut buf = self.pool.pop().unwrap_or_default();
        buf.resize(len as usize, 0);
        let raw = if codec == Codec::Raw { Vec::new() } else { self.pool.pop().unwrap_or_default() };
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

    fn reuse(&mut self, buf: Vec<u8>) {
        if self.pool.len() < self.pool_max && buf.capacity() > 0 {
            self.pool.push(buf);
        }
    }

    /// A job's buffers, back to the pool.
    fn recycle(&mut self, job: Job) {
        self.reuse(job.buf);
        self.reuse(job.raw);
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
                    self.reuse(buf);
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
            self.reuse(job.buf);
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

/// What a fetcher takes next from the planner.
enum Next {
    Job(Job),
    /// Nothing waiting, and reads are in flight: receive those.
    Nothing,
    /// The planner is done.
    Gone,
}

/// The next job for a fetcher with `in_flight` reads on the wire: it waits for one only when nothing
/// is in flight (otherwise it goes on to receive what it sent).
fn next_job(jobs: &Receiver<Job>, in_flight: usize) -> Next {
    let got = if in_flight == 0 { jobs.recv().map_err(|_| true) } else { jobs.try_recv().map_err(|e| e == TryRecvError::Disconnected) };
    match got {
        Ok(j) => Next::Job(j),
        Err(true) => Next::Gone,
        Err(false) => Next::Nothing,
    }
}

/// How long each read took on a pipelined connection: from when it was sent or when the read before
/// it arrived, whichever is later — its own time on the wire, not its wait behind the one before.
struct ReadClock {
    last: Instant,
}

impl ReadClock {
    fn new() -> ReadClock {
        ReadClock { last: Instant::now() }
    }

    /// A read is sent now, `in_flight` reads ahead of it; returns when.
    fn sent(&mut self, in_flight: usize) -> Instant {
        let now = Instant::now();
        if in_flight == 0 {
            self.last = now;
        }
        now
    }

    /// The read sent at `sent` arrived.
    fn arrived(&mut self, sent: Instant) -> Duration {
        let took = self.last.elapsed().min(sent.elapsed());
        self.last = Instant::now();
        took
    }
}

/// A relay reader: reads what the planner gives it on its own connection or endpoint, up to its
/// reader's depth in flight, and checks and decompresses each block (a mismatch or a block that does
/// not decompress is read again once, behind what is in flight; twice fails the pull).
fn relay_reader(p: &Pull<'_>, generation: u64, me: usize, jobs: &Receiver<Job>, reports: &Sender<Report>) {
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

/// A peer fetcher: reads what the planner gives it from one peer at a time, up to the depth in flight
/// on a connection kept per peer. A miss is reported, never retried here: the planner decides again.
fn peer_fetcher(peering: &Peering, generation: u64, me: usize, jobs: &Receiver<Job>, reports: &Sender<Report>, cuts: &Cuts) {
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

/// Receive the oldest pipelined read's block into `job.buf`. An agent that serves peers serves the
/// block while it arrives: its arrival starts with the first bytes (the planner tells the tracker)
/// and follows every piece. Returns the arrival, to be settled once the block is checked.
fn receive_serving(r: &mut dyn RangeReader, job: &mut Job, serving: Option<&Held>, reports: &Sender<Report>) -> (Result<(), transport::Error>, Option<Arc<Arrival>>) {
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
fn settle(arrival: Option<Arc<Arrival>>, verified: bool, block: u64, serving: Option<&Held>, reports: &Sender<Report>) {
    let (Some(a), Some(held)) = (arrival, serving) else { return };
    if verified {
        a.settle(true);
    } else {
        held.fail_arrival(block, &a);
        let _ = reports.send(Report::ArrivalFailed(block));
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

/// The writer: pass the blocks the planner sends, in order, to `sink`; report what was written.
fn write_loop(p: &Pull<'_>, feed: &Receiver<Feed>, reports: &Sender<Report>, sink: &mut dyn FnMut(&[u8]) -> Result<(), Error>) -> Result<Stats, Error> {
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

/// How a pull takes part in a swarm, for its default window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Membership {
    /// It pulls from the relay alone (`stage`, `fetch`, a join that is no member of a swarm).
    Alone,
    /// It reads from other agents too, and keeps no serve cache (`--no-serve`, a TLS relay without a
    /// peer certificate, `--serve-cache-mib` under one block).
    Uncached,
    /// It reads from other agents and keeps a serve cache for them.
    Cached,
}

impl Membership {
    /// A join's: alone without `peering`, else by whether it keeps a serve cache.
    pub fn of(peering: Option<&Peering>) -> Membership {
        match peering {
            None => Membership::Alone,
            Some(p) if p.serves() && p.held.cache_blocks() > 0 => Membership::Cached,
            Some(_) => Membership::Uncached,
        }
    }
}

/// The window to pull with: as asked, or by default [`limits::WINDOW_BLOCKS_SERVING_DEFAULT`] for a
/// member of a swarm that keeps a serve cache (its window's blocks are what other agents read while
/// they are new, its cache's only what lagging agents read; the two defaults are sized together),
/// [`limits::WINDOW_BLOCKS_SWARM_DEFAULT`] for one that keeps none (its memory stays what it was
/// before the serving default grew), and [`limits::WINDOW_BLOCKS_DEFAULT`] for a pull from the relay
/// alone (a larger one would only hold memory).
pub fn window(asked: Option<u64>, membership: Membership) -> u64 {
    asked.unwrap_or(match membership {
        Membership::Alone => limits::WINDOW_BLOCKS_DEFAULT,
        Membership::Uncached => limits::WINDOW_BLOCKS_SWARM_DEFAULT,
        Membership::Cached => limits::WINDOW_BLOCKS_SERVING_DEFAULT,
    })
}

/// Readers to use: as asked, or the transport's default when `asked` is 0.
pub fn readers(asked: usize, transport: &dyn Transport) -> usize {
    if asked == 0 {
        transport.default_readers()
    } else {
        asked
    }
}

#[cfg(test)]
mod tests {
    use super::{window, Codec, Decompressor, Job, Membership, Source, Verified};

    fn job(stored: Vec<u8>, codec: Codec, raw_len: usize) -> Job {
        let want = snapshot::block_checksum(&stored);
        Job { block: 3, offset: 0, len: stored.len() as u32, want, codec, raw_len: raw_len as u32, from: Source::Relay, buf: stored, raw: Vec::new() }
    }

    #[test]
    fn a_block_is_good_only_when_it_matches_its_entry_and_decompresses_to_its_length() {
        let raw: Vec<u8> = b"fastrepl ".iter().copied().cycle().take(64 << 10).collect();
        let mut c = codec::Compressor::new(Codec::Zstd, 1).unwrap();
        let mut zstd = Vec::new();
        assert_eq!(c.compress(&raw, &mut zstd), Codec::Zstd);
        let mut d = Decompressor::new();
        let mut good = job(zstd.clone(), Codec::Zstd, raw.len());
        assert!(matches!(good.verify(&mut d), Verified::Good));
        assert_eq!(good.rdb_bytes(), &raw[..], "the writer gets the RDB's bytes");
        let mut plain = job(raw.clone(), Codec::Raw, raw.len());
        assert!(matches!(plain.verify(&mut d), Verified::Good) && plain.rdb_bytes() == &raw[..]);
        // A flipped byte: the checksum catches it before anything is decoded.
        let mut flipped = job(zstd.clone(), Codec::Zstd, raw.len());
        flipped.buf[10] ^= 1;
        assert!(matches!(flipped.verify(&mut d), Verified::Mismatch));
        // Bytes whose checksum matches (a relay that compressed wrongly, or a forged checksum) but
        // that do not decode, or decode to another length: bad all the same, and nothing is kept.
        let mut garbage = job(vec![0xAB; 4000], Codec::Zstd, raw.len());
        assert!(matches!(garbage.verify(&mut d), Verified::Undecodable(_)) && garbage.raw.is_empty());
        let mut short = job(zstd.clone(), Codec::Zstd, raw.len() + 1);
        assert!(matches!(short.verify(&mut d), Verified::Undecodable(_)));
        let mut lz4 = Vec::new();
        assert_eq!(codec::Compressor::new(Codec::Lz4, 1).unwrap().compress(&raw, &mut lz4), Codec::Lz4);
        let mut lz4_as_zstd = job(lz4, Codec::Zstd, raw.len());
        assert!(matches!(lz4_as_zstd.verify(&mut d), Verified::Undecodable(_)));
        let mut raw_too_short = job(raw[..100].to_vec(), Codec::Raw, raw.len());
        assert!(matches!(raw_too_short.verify(&mut d), Verified::Mismatch));
    }

    #[test]
    fn a_member_of_a_swarm_looks_further_ahead_by_default_than_a_pull_from_the_relay_alone() {
        assert_eq!(window(None, Membership::Cached), limits::WINDOW_BLOCKS_SERVING_DEFAULT);
        assert_eq!(window(None, Membership::Uncached), limits::WINDOW_BLOCKS_SWARM_DEFAULT);
        assert_eq!(window(None, Membership::Alone), limits::WINDOW_BLOCKS_DEFAULT);
        assert_eq!(window(Some(8), Membership::Cached), 8, "an asked window is kept");
        assert_eq!(window(Some(64), Membership::Alone), 64);
    }
}
