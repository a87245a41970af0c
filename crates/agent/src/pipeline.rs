//! Pull blocks out of order — from the relay, and from peers when the agent is in a swarm — and hand
//! them on in order. This module is only threads: the swarm's [`Chooser`] decides which blocks to fetch
//! next and from where (asking the relay's tracker through [`Peering`]), the [`Scheduler`] keeps the
//! in-order hand-on and the rereads.
//!
//! Threads: a *planner* asks the tracker about the blocks the chooser wants and queues fetches; relay
//! readers (`readers` of them, each with its own connection or endpoint) and, in a swarm, peer fetchers
//! (one per peer-fetch slot) take them; the caller's thread writes blocks in order to the sink.
//!
//! Every block's CRC32C is checked against the relay's published checksum before it is used, kept or
//! served: a peer's block that does not match is thrown away, that peer is never asked again, and the
//! block is fetched elsewhere.

use crate::peer::Peering;
use crate::progress::Progress;
use crate::scheduler::{Mismatch, Scheduler};
use crate::Error;
use serde::{Deserialize, Serialize};
use snapshot::State;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};
use swarm::{Answer, Chooser, Origin};
use transport::wire::swarm::{Locate, Located, Where, LOCATE_BLOCKS_MAX};
use transport::{RangeReader, Transport};

/// Bytes that came from one source.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceBytes {
    /// `relay`, or the peer's address.
    pub source: String,
    /// Bytes of verified blocks.
    pub bytes: u64,
    /// Blocks.
    pub blocks: u64,
}

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
    /// Where the bytes came from: the relay first, then each peer.
    pub sources: Vec<SourceBytes>,
    /// Blocks from peers that failed their checksum (thrown away, fetched elsewhere).
    pub peer_bad_blocks: u64,
    /// Fetches from peers that failed (refused, timed out, connection lost) and went elsewhere.
    pub peer_failures: u64,
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

/// Counters a display reads while the pull runs.
#[derive(Debug, Default)]
pub struct Counters {
    /// Verified bytes from the relay.
    pub from_relay: AtomicU64,
    /// Verified bytes from peers.
    pub from_peers: AtomicU64,
}

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
    pub counters: Option<&'a Counters>,
}

/// The decisions' state and what the threads share around it.
struct Shared {
    state: Mutex<PullState>,
    cond: Condvar,
}

struct PullState {
    chooser: Chooser,
    sched: Scheduler<Arc<Vec<u8>>>,
    relay_jobs: VecDeque<u64>,
    /// Block, the peer chosen, and the other holders named (tried in turn when a peer refuses).
    peer_jobs: VecDeque<(u64, u32, Vec<u32>)>,
    peer_addrs: HashMap<u32, String>,
    /// Block buffers kept for reuse: a freed multi-MiB buffer goes back to the kernel, and a new one
    /// costs a page fault per 4 KiB. Bounded by `pool_max`.
    pool: Vec<Vec<u8>>,
    pool_max: usize,
    failed: Option<Error>,
    finished: bool,
    /// Every block is fetched or being fetched: fetch threads exit once their queue is empty.
    planned_all: bool,
    /// No tracker (none, or its link failed): every block from the relay.
    solo: bool,
    swarm_lost: Option<String>,
    /// Blocks verified and kept, for the planner to announce to the tracker (`have`).
    announce: Vec<u64>,
    /// Blocks the writer dropped from the serving cache, for the planner to report to the tracker.
    dropped: Vec<u64>,
    /// Peers that could not give a block (refused, failed, corrupt: `ALL_BLOCKS`), for the planner to
    /// report to the tracker.
    not_at: Vec<(u32, u64)>,
    sources: BTreeMap<String, (u64, u64)>,
    peer_bad_blocks: u64,
    peer_failures: u64,
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

/// Pull the whole generation and pass its bytes, in order, to `sink`.
pub fn pull(p: &Pull<'_>, sink: &mut dyn FnMut(&[u8]) -> Result<(), Error>) -> Result<Stats, Error> {
    let readers = p.readers.max(1);
    let window = p.window.max(readers as u64);
    let peer_fetchers = if p.peering.is_some() { swarm::PEER_FETCHES_MAX } else { 0 };
    // Enough buffers for the window and one in each fetcher's hands: steady state allocates nothing.
    let pool_max = usize::try_from(window).unwrap_or(usize::MAX).saturating_add(readers + peer_fetchers);
    let shared = Shared {
        state: Mutex::new(PullState {
            chooser: Chooser::new(window, swarm::PEER_FETCHES_MAX).with_relay_fetches(readers),
            sched: Scheduler::new(),
            relay_jobs: VecDeque::new(),
            peer_jobs: VecDeque::new(),
            peer_addrs: HashMap::new(),
            pool: Vec::new(),
            pool_max,
            failed: None,
            finished: false,
            planned_all: false,
            solo: p.peering.is_none(),
            swarm_lost: None,
            announce: Vec::new(),
            dropped: Vec::new(),
            not_at: Vec::new(),
            sources: BTreeMap::new(),
            peer_bad_blocks: 0,
            peer_failures: 0,
        }),
        cond: Condvar::new(),
    };
    let generation = p.progress.with(|v| v.desc.generation);
    std::thread::scope(|scope| {
        let shared = &shared;
        spawn_in(scope, shared, "planner".into(), move || plan_loop(p, shared))?;
        for r in 0..readers {
            spawn_in(scope, shared, format!("reader-{r}"), move || relay_loop(p, shared, generation))?;
        }
        if let Some(peering) = p.peering {
            for f in 0..peer_fetchers {
                spawn_in(scope, shared, format!("peer-fetch-{f}"), move || peer_loop(p, shared, peering, generation))?;
            }
        }
        let result = write_loop(p, shared, sink);
        shared.lock().finished = true;
        shared.cond.notify_all();
        let mut stats = result?;
        let s = shared.lock();
        stats.reread = s.sched.rereads();
        stats.reads_in_flight_max = s.sched.in_flight_max();
        stats.peer_bad_blocks = s.peer_bad_blocks;
        stats.peer_failures = s.peer_failures;
        stats.swarm_lost = s.swarm_lost.clone();
        let mut sources: Vec<SourceBytes> = s.sources.iter().map(|(k, (bytes, blocks))| SourceBytes { source: k.clone(), bytes: *bytes, blocks: *blocks }).collect();
        sources.sort_by_key(|s| (s.source != RELAY, std::cmp::Reverse(s.bytes)));
        stats.sources = sources;
        Ok(stats)
    })
}

/// Run `f` on a thread of the pull; its error fails the pull.
fn spawn_in<'scope, 'env: 'scope>(
    scope: &'scope std::thread::Scope<'scope, 'env>,
    shared: &'env Shared,
    name: String,
    f: impl FnOnce() -> Result<(), Error> + Send + 'scope,
) -> Result<(), Error> {
    std::thread::Builder::new()
        .name(name)
        .spawn_scoped(scope, move || {
            if let Err(e) = f() {
                shared.fail(e);
            }
        })
        .map(drop)
        .map_err(|e| Error::Internal(format!("spawn pull thread: {e}")))
}

/// Ask where the blocks the chooser wants are and queue fetches, until every block is fetched or
/// being fetched.
fn plan_loop(p: &Pull<'_>, shared: &Shared) -> Result<(), Error> {
    let mut asked_needed: Option<Instant> = None;
    loop {
        let (solo, announce, not_at, dropped) = {
            let mut s = shared.lock();
            (s.solo, std::mem::take(&mut s.announce), std::mem::take(&mut s.not_at), std::mem::take(&mut s.dropped))
        };
        if let (Some(peering), false) = (p.peering, solo) {
            // The planner alone talks to the tracker: fetchers and the writer leave what it must hear
            // in the state, and it is sent here without waiting for the answers. In this order: a
            // block is announced before the writer can drop it (and a `have` sent after its `not_at`
            // would name us for a block we no longer hold).
            let mut t = peering.tracker();
            let told = announce.iter().try_for_each(|b| t.have(*b)).and_then(|()| not_at.iter().try_for_each(|(peer, b)| t.not_at(*peer, *b))).and_then(|()| dropped.iter().try_for_each(|b| t.not_at(peering.id(), *b)));
            drop(t);
            if let Err(e) = told {
                lose_tracker(shared, e);
                continue;
            }
            // Whether anyone else still needs blocks decides whether fed blocks are kept for them.
            if !matches!(asked_needed, Some(t) if t.elapsed() < limits::NEEDED_POLL_EVERY) {
                asked_needed = Some(Instant::now());
                if let Ok(n) = peering.tracker().needed() {
                    peering.held.set_others_need(n > 0);
                }
            }
        }
        let (readable, total) = p.progress.with(|v| v.check().map(|()| (v.blocks_readable(), v.blocks_total())))?;
        if let (Some(peering), Some(l)) = (p.peering, p.progress.get_length()) {
            peering.held.set_length(l);
        }
        let (ask, solo) = {
            let mut s = shared.lock();
            if s.finished || s.failed.is_some() {
                return Ok(());
            }
            s.chooser.published(readable);
            if let Some(t) = total {
                s.sched.set_total(t);
                if s.chooser.held() >= t {
                    s.planned_all = true;
                    drop(s);
                    shared.cond.notify_all();
                    return Ok(());
                }
            }
            let mut wanted = s.chooser.wanted(|_| 0);
            wanted.truncate(LOCATE_BLOCKS_MAX);
            if wanted.is_empty() {
                // Every slot busy, or nothing more published yet: a completion or a write wakes us.
                let _ = shared.cond.wait_timeout(s, limits::LOCATE_RETRY_EVERY).unwrap_or_else(|e| e.into_inner());
                continue;
            }
            let solo = s.solo;
            let ask = Locate {
                relay_slots: s.chooser.relay_slots().min(255) as u8,
                peer_slots: if solo { 0 } else { s.chooser.peer_slots().min(255) as u8 },
                blocks: wanted,
            };
            (ask, solo)
        };
        let answers = match (p.peering, solo) {
            (Some(peering), false) => match peering.tracker().locate(&ask) {
                Ok(a) => a,
                Err(e) => {
                    lose_tracker(shared, e);
                    continue;
                }
            },
            _ => ask.blocks.iter().take(usize::from(ask.relay_slots)).map(|b| Located { block: *b, at: Where::Relay }).collect(),
        };
        let mut s = shared.lock();
        let mut queued = 0;
        // Blocks whose every named holder this agent avoids: the tracker must stop naming them for
        // those blocks, or it would never offer the relay for them.
        let mut shunned: Vec<(u64, u32)> = Vec::new();
        for a in answers {
            match a.at {
                Where::Relay => {
                    if s.chooser.choose(a.block, &Answer::Relay).is_some() {
                        s.relay_jobs.push_back(a.block);
                        queued += 1;
                    }
                }
                Where::Peers(peers) => {
                    let ids: Vec<u32> = peers.iter().map(|pe| pe.id).collect();
                    if ids.iter().all(|id| s.chooser.avoids(*id)) {
                        shunned.extend(ids.iter().map(|id| (a.block, *id)));
                        continue;
                    }
                    for pe in peers {
                        s.peer_addrs.insert(pe.id, pe.addr);
                    }
                    let now = Instant::now();
                    if let Some(Origin::Peer(id)) = s.chooser.choose_at(a.block, &Answer::Peers(ids.clone()), now) {
                        let others: Vec<u32> = ids.into_iter().filter(|x| *x != id && !s.chooser.avoids(*x) && !s.chooser.is_busy(*x, now)).collect();
                        s.peer_jobs.push_back((a.block, id, others));
                        queued += 1;
                    }
                }
            }
        }
        if !shunned.is_empty() {
            s.not_at.extend(shunned.into_iter().map(|(b, id)| (id, b)));
            continue;
        }
        if queued > 0 {
            drop(s);
            shared.cond.notify_all();
        } else {
            // Every wanted block is being fetched by another agent from the relay: ask again soon.
            let _ = shared.cond.wait_timeout(s, limits::LOCATE_RETRY_EVERY).unwrap_or_else(|e| e.into_inner());
        }
    }
}

/// The tracker link failed: the rest of the pull comes from the relay alone.
fn lose_tracker(shared: &Shared, e: transport::Error) {
    tracing::warn!(error = %e, "the relay's tracker failed; pulling the rest from the relay alone");
    let mut s = shared.lock();
    s.solo = true;
    s.swarm_lost = Some(e.to_string());
}

/// The next job from a queue; `None` once the pull is over or everything was planned and the queue is
/// empty.
fn next_job<T>(shared: &Shared, take: impl Fn(&mut PullState) -> Option<T>) -> Option<T> {
    let mut s = shared.lock();
    loop {
        if s.finished || s.failed.is_some() {
            return None;
        }
        if let Some(j) = take(&mut s) {
            return Some(j);
        }
        if s.planned_all {
            return None;
        }
        s = shared.cond.wait_timeout(s, POLL).unwrap_or_else(|p| p.into_inner()).0;
    }
}

/// Where block `i` stands at the relay.
enum Published {
    /// Readable: its range and checksum.
    Ready { offset: u64, len: u64, checksum: u32 },
    /// The snapshot has fewer blocks.
    NoSuchBlock,
    NotYet,
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

/// A buffer of `len` bytes from the pool, counted as a read in flight.
fn take_buffer(shared: &Shared, len: u64) -> Vec<u8> {
    let mut buf = {
        let mut s = shared.lock();
        s.sched.started();
        s.pool.pop().unwrap_or_default()
    };
    buf.resize(len as usize, 0);
    buf
}

fn relay_loop(p: &Pull<'_>, shared: &Shared, generation: u64) -> Result<(), Error> {
    let mut reader: Option<Box<dyn RangeReader>> = None;
    while let Some(i) = next_job(shared, |s| s.relay_jobs.pop_front()) {
        let Some((offset, len, want)) = wait_published(shared, p.progress, i)? else { return Ok(()) };
        if reader.is_none() {
            reader = Some(p.transport.open().map_err(Error::relay)?);
        }
        let r = reader.as_mut().expect("opened above");
        let mut buf = take_buffer(shared, len);
        let t = Instant::now();
        let mut attempt = 0;
        loop {
            r.read(generation, offset, &mut buf).map_err(Error::relay)?;
            if snapshot::block_checksum(&buf) == want {
                break;
            }
            attempt += 1;
            tracing::warn!(block = i, attempt, "block checksum mismatch");
            if shared.lock().sched.mismatch(attempt) == Mismatch::Fail {
                return Err(Error::Checksum { block: i, offset });
            }
        }
        complete(p, shared, i, buf, None, t.elapsed());
    }
    Ok(())
}

/// Why a fetch from a peer gave no block.
enum PeerMiss {
    /// It serves its maximum: try the next holder named at once; pass it over for a moment.
    Busy,
    /// It does not hold the block (dropped from its cache): the tracker must stop naming it for this
    /// block, or it would never offer another source; try the next holder named.
    NotHeld,
    /// Its block failed the checksum: never fed, kept or served; it is never asked again and the
    /// tracker names it for nothing any more.
    Corrupt,
    /// It failed, stalled or vanished: never asked again; the tracker stops naming it for this block.
    Failed(transport::Error),
}

fn peer_loop(p: &Pull<'_>, shared: &Shared, peering: &Peering, generation: u64) -> Result<(), Error> {
    let mut conns: HashMap<u32, Box<dyn RangeReader>> = HashMap::new();
    while let Some((i, first, others)) = next_job(shared, |s| s.peer_jobs.pop_front()) {
        let Some((offset, len, want)) = wait_published(shared, p.progress, i)? else { return Ok(()) };
        let mut buf = take_buffer(shared, len);
        let mut candidates = std::iter::once(first).chain(others).peekable();
        while let Some(peer) = candidates.next() {
            let addr = shared.lock().peer_addrs.get(&peer).cloned().unwrap_or_default();
            let t = Instant::now();
            let miss = match read_from_peer(&mut conns, peer, &addr, &peering.token, generation, offset, &mut buf) {
                Ok(()) if snapshot::block_checksum(&buf) == want => {
                    complete(p, shared, i, buf, Some(addr), t.elapsed());
                    break;
                }
                Ok(()) => PeerMiss::Corrupt,
                Err(transport::Error::Busy(_)) => PeerMiss::Busy,
                Err(transport::Error::Refused { .. }) => PeerMiss::NotHeld,
                Err(e) => PeerMiss::Failed(e),
            };
            let not_at = match &miss {
                PeerMiss::Busy => {
                    tracing::debug!(peer = %addr, block = i, "peer busy");
                    None
                }
                PeerMiss::NotHeld => {
                    tracing::debug!(peer = %addr, block = i, "peer no longer holds the block");
                    Some(i)
                }
                PeerMiss::Corrupt => {
                    tracing::warn!(peer = %addr, block = i, "a peer sent a block that fails its checksum; never asking it again");
                    Some(transport::wire::ALL_BLOCKS)
                }
                PeerMiss::Failed(e) => {
                    tracing::warn!(peer = %addr, block = i, error = %e, "peer failed; fetching its blocks elsewhere");
                    Some(i)
                }
            };
            let gone = matches!(miss, PeerMiss::Corrupt | PeerMiss::Failed(_));
            if gone {
                conns.remove(&peer);
            }
            let mut s = shared.lock();
            if let Some(b) = not_at {
                s.not_at.push((peer, b));
            }
            s.peer_failures += 1;
            if matches!(miss, PeerMiss::Busy) {
                s.chooser.refused(peer, Instant::now());
            }
            match candidates.peek().copied().filter(|_| !gone) {
                Some(next) => s.chooser.retarget(i, next),
                None => {
                    drop(s);
                    given_up(shared, i, buf, gone, matches!(miss, PeerMiss::Corrupt));
                    break;
                }
            }
        }
    }
    Ok(())
}

/// Read one block from a peer over a connection kept per peer (opened on first use).
fn read_from_peer(
    conns: &mut HashMap<u32, Box<dyn RangeReader>>,
    peer: u32,
    addr: &str,
    token: &transport::Credentials,
    generation: u64,
    offset: u64,
    buf: &mut [u8],
) -> Result<(), transport::Error> {
    let reader = match conns.entry(peer) {
        std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
        std::collections::hash_map::Entry::Vacant(e) => {
            let sa = resolve(addr)?;
            // Under a TLS relay, peers serve TLS too.
            let s = transport::tcp::connect_with(sa, &token.for_peers(), transport::auth::Kind::Data, limits::PEER_CONNECT_TIMEOUT, limits::PEER_IO_TIMEOUT, "connect to peer")?;
            e.insert(Box::new(transport::tcp::StreamReader { s }))
        }
    };
    reader.read(generation, offset, buf)
}

fn resolve(addr: &str) -> Result<std::net::SocketAddr, transport::Error> {
    use std::net::ToSocketAddrs;
    addr.to_socket_addrs()
        .map_err(transport::Error::io("resolve peer address"))?
        .next()
        .ok_or_else(|| transport::Error::Protocol(format!("peer address {addr} resolves to nothing")))
}

/// A fetch from a peer failed: the block goes back to the wanted ones. `avoid`: never ask that peer
/// again; `corrupt`: it sent a bad block.
fn given_up(shared: &Shared, i: u64, buf: Vec<u8>, avoid: bool, corrupt: bool) {
    let mut s = shared.lock();
    s.chooser.failed(i, avoid);
    s.sched.abandoned();
    if corrupt {
        s.peer_bad_blocks += 1;
    }
    if s.pool.len() < s.pool_max {
        s.pool.push(buf);
    }
    drop(s);
    shared.cond.notify_all();
}

/// Block `i` arrived verified, from the relay (`from` = None) or a peer: keep it, hand it on in order,
/// and tell the tracker we hold it.
fn complete(p: &Pull<'_>, shared: &Shared, i: u64, buf: Vec<u8>, from: Option<String>, took: Duration) {
    let bytes = buf.len() as u64;
    tracing::debug!(block = i, from = from.as_deref().unwrap_or(RELAY), secs = took.as_secs_f64(), "block verified");
    let block = Arc::new(buf);
    // Kept before the writer can see it, and announced (by the planner) before the writer can drop
    // it: see `plan_loop`.
    if let Some(peering) = p.peering {
        peering.held.insert(i, block.clone());
    }
    {
        let mut s = shared.lock();
        if s.chooser.holds(i) {
            s.sched.abandoned(); // a duplicate (a slow fetch that was given up on, then arrived)
            return;
        }
        if p.peering.is_some() && !s.solo {
            s.announce.push(i);
        }
        s.chooser.done(i, bytes, took.as_secs_f64());
        s.sched.completed(i, block.clone());
        let e = s.sources.entry(from.clone().unwrap_or_else(|| RELAY.to_string())).or_default();
        e.0 += bytes;
        e.1 += 1;
    }
    shared.cond.notify_all();
    if let Some(c) = p.counters {
        let counter = if from.is_some() { &c.from_peers } else { &c.from_relay };
        counter.fetch_add(bytes, Ordering::Relaxed);
    }
}

fn write_loop(p: &Pull<'_>, shared: &Shared, sink: &mut dyn FnMut(&[u8]) -> Result<(), Error>) -> Result<Stats, Error> {
    let mut stats = Stats::default();
    loop {
        crate::check_cancel(p.cancel)?;
        let total = p.progress.with(|v| v.check().map(|_| v.blocks_total()))?;
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
                    let n = s.sched.written();
                    s.chooser.written(n);
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
            stats.streamed_while_capturing = p.progress.with(|v| v.desc.state == State::Capturing);
        }
        stats.bytes += buf.len() as u64;
        stats.blocks += 1;
        let freed: Vec<Arc<Vec<u8>>> = match p.peering {
            None => vec![buf],
            Some(peering) => {
                drop(buf);
                let fed = shared.lock().sched.written();
                let dropped = peering.held.fed(fed);
                if peering.serves() {
                    shared.lock().dropped.extend(dropped.iter().map(|(b, _)| *b));
                }
                dropped.into_iter().map(|(_, v)| v).collect()
            }
        };
        let mut s = shared.lock();
        for v in freed {
            if let (Ok(v), true) = (Arc::try_unwrap(v), s.pool.len() < s.pool_max) {
                s.pool.push(v);
            }
        }
    }
}
