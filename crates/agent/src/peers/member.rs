//! An agent as a member of its generation's swarm: the blocks it holds ([`Held`]), the server that
//! gives them to other agents ([`PeerServer`]), and its link to the relay's tracker ([`Peering`]).
//!
//! What a peer serves is what this agent verified against the relay's checksum before it kept it, or a
//! block still arriving, whose last byte goes only once it is verified (see [`crate::peers::arrival`]); what it
//! fetches from a peer it verifies the same way before using or keeping it. Peers authenticate with the
//! relay's token, both ways, exactly like relay connections.

use crate::peers::arrival::{Arrival, Next, Spares};
use crate::error::Error;
use std::collections::{BTreeMap, HashMap};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};
use transport::auth::{self, Kind};
use transport::tracker::{Registration, TrackerLink};
use transport::wire::{Request, ResponseHeader};
use transport::{serve, Credentials};

/// The blocks an agent holds, verified: those not yet fed to the replica (the pipeline's window) and
/// a bounded cache of those already fed, kept for peers; and those arriving, served while they do.
pub struct Held {
    generation: u64,
    block_size: u64,
    inner: Mutex<HeldInner>,
}

struct HeldInner {
    blocks: BTreeMap<u64, Arc<Vec<u8>>>,
    /// Blocks `0..fed` went to the replica: they are the cache, evicted oldest first.
    fed: u64,
    cached_bytes: u64,
    cache_max: u64,
    /// Other agents still miss blocks: keep the cache. An agent alone keeps nothing it has fed (its
    /// memory stays the window's), and starts keeping again as soon as someone joins.
    others_need: bool,
    /// Total length of the RDB once known (the last block is short).
    length: Option<u64>,
    /// Blocks being received, served while they arrive (see [`crate::peers::arrival`]).
    arriving: HashMap<u64, Arc<Arrival>>,
    /// Their buffers, kept from one arrival to the next.
    spares: Arc<Spares>,
}

impl Held {
    /// An empty store for `generation` that keeps at most `cache_max` bytes of fed blocks.
    pub fn new(generation: u64, block_size: u64, cache_max: u64) -> Held {
        Held { generation, block_size, inner: Mutex::new(HeldInner { blocks: BTreeMap::new(), fed: 0, cached_bytes: 0, cache_max, others_need: true, length: None, arriving: HashMap::new(), spares: Arc::default() }) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HeldInner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Keep verified block `b` (its arrival, if it was served while arriving, is over: readers still
    /// on it finish from it).
    pub fn insert(&self, b: u64, bytes: Arc<Vec<u8>>) {
        let mut h = self.lock();
        h.arriving.remove(&b);
        if b < h.fed {
            h.cached_bytes += bytes.len() as u64;
        }
        h.blocks.insert(b, bytes);
    }

    /// Block `b`, if held whole (peers are served through `serve`, which also sees arrivals).
    #[cfg(test)]
    fn get(&self, b: u64) -> Option<Arc<Vec<u8>>> {
        self.lock().blocks.get(&b).cloned()
    }

    /// Block `b`, `len` bytes, starts to arrive: peers may read it from the returned arrival as it
    /// fills. None when it is held or arriving already (a second read of it is not served).
    pub fn start_arrival(&self, b: u64, len: usize) -> Option<Arc<Arrival>> {
        let mut h = self.lock();
        if h.blocks.contains_key(&b) || h.arriving.contains_key(&b) {
            return None;
        }
        let a = Arc::new(Arrival::new(len, h.spares.clone()));
        h.arriving.insert(b, a.clone());
        Some(a)
    }

    /// Block `b`'s arrival failed: cut off the peers reading it and stop serving it.
    pub fn fail_arrival(&self, b: u64, a: &Arrival) {
        a.settle(false);
        let mut h = self.lock();
        if h.arriving.get(&b).is_some_and(|x| std::ptr::eq(Arc::as_ptr(x), a)) {
            h.arriving.remove(&b);
        }
    }

    /// What a peer can be served of block `b`: held whole, or arriving.
    fn serve(&self, b: u64) -> Option<Serve> {
        let h = self.lock();
        h.blocks.get(&b).map(|v| Serve::Whole(v.clone())).or_else(|| h.arriving.get(&b).map(|a| Serve::Arriving(a.clone())))
    }

    /// Whether other agents still miss blocks (from the tracker): an agent alone caches nothing.
    pub fn set_others_need(&self, need: bool) {
        self.lock().others_need = need;
    }

    /// The RDB's length is known.
    pub fn set_length(&self, length: u64) {
        self.lock().length = Some(length);
    }

    /// Blocks `0..n` were fed to the replica: they join the cache, and the oldest cached blocks beyond
    /// its bound are dropped. Returns the dropped blocks (the tracker must stop naming us for them)
    /// and their buffers (for reuse).
    pub fn fed(&self, n: u64) -> Vec<(u64, Arc<Vec<u8>>)> {
        let mut h = self.lock();
        let h = &mut *h;
        let newly: u64 = h.blocks.range(h.fed..n).map(|(_, v)| v.len() as u64).sum();
        h.cached_bytes += newly;
        h.fed = h.fed.max(n);
        let mut dropped = Vec::new();
        let bound = if h.others_need { h.cache_max } else { 0 };
        while h.cached_bytes > bound {
            let Some((&b, _)) = h.blocks.range(..h.fed).next() else { break };
            let v = h.blocks.remove(&b).expect("present");
            h.cached_bytes -= v.len() as u64;
            dropped.push((b, v));
        }
        dropped
    }

    /// Bytes held now (window and cache).
    #[cfg(test)]
    fn bytes(&self) -> u64 {
        self.lock().blocks.values().map(|v| v.len() as u64).sum()
    }

    /// The block a request names, if the request is exactly one whole block of ours.
    fn block_of(&self, offset: u64, len: u32) -> Option<u64> {
        if offset % self.block_size != 0 {
            return None;
        }
        let b = offset / self.block_size;
        let want = match self.lock().length {
            Some(l) => self.block_size.min(l.checked_sub(offset)?),
            None => self.block_size,
        };
        (u64::from(len) == want).then_some(b)
    }
}

/// A block as a peer can be served it.
enum Serve {
    Whole(Arc<Vec<u8>>),
    Arriving(Arc<Arrival>),
}

/// Longest a read of an arriving block waits for its next bytes before it is cut off: well inside the
/// asker's own wait for bytes ([`limits::PEER_IO_TIMEOUT`]), so that the asker sees a cut-off (and
/// goes elsewhere for the block) rather than a peer that stalls (and avoids it for good).
const ARRIVAL_STALL_MAX: Duration = Duration::from_millis(limits::PEER_IO_TIMEOUT.as_millis() as u64 / 2);

/// Serves held blocks to other agents over TCP: the same authentication and range requests as the
/// relay's data connections, for whole blocks only.
pub struct PeerServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
    /// Bytes served to peers so far.
    pub served: Arc<AtomicU64>,
    shared: Arc<ServeShared>,
}

struct ServeShared {
    held: Arc<Held>,
    token: Credentials,
    uploads: AtomicUsize,
    uploads_max: usize,
    /// Upload slots taken by a connection that held none (askers arriving), ever.
    arrivals: AtomicU64,
    /// Bumped at every change of `uploads` (and at stop), for the load reporter to wait on.
    load_changes: Mutex<u64>,
    load_changed: Condvar,
    connections: AtomicUsize,
    served: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
}

impl PeerServer {
    /// Listen on `listen` and serve `held` to peers that know `token`, at most `uploads_max` blocks at
    /// once (more are refused: the asker goes to another holder).
    pub fn start(listen: SocketAddr, token: Credentials, held: Arc<Held>, uploads_max: usize) -> Result<PeerServer, Error> {
        let l = TcpListener::bind(listen).map_err(|e| Error::Resource(format!("listen for peers on {listen}: {e}")))?;
        let addr = l.local_addr().map_err(|e| Error::Resource(format!("peer listener address: {e}")))?;
        let stop = Arc::new(AtomicBool::new(false));
        let served = Arc::new(AtomicU64::new(0));
        let sh = Arc::new(ServeShared {
            held,
            token,
            uploads: AtomicUsize::new(0),
            uploads_max: uploads_max.max(1),
            arrivals: AtomicU64::new(0),
            load_changes: Mutex::new(0),
            load_changed: Condvar::new(),
            connections: AtomicUsize::new(0),
            served: served.clone(),
            stop: stop.clone(),
        });
        let shared = sh.clone();
        let thread = std::thread::Builder::new()
            .name("peer-accept".into())
            .spawn(move || accept_loop(l, sh))
            .map_err(|e| Error::Internal(format!("spawn peer server: {e}")))?;
        Ok(PeerServer { addr, stop, thread: Some(thread), served, shared })
    }

    /// Where it listens.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Uploads in progress now: connections sending a block, or with the asker's next read waiting.
    pub fn uploads(&self) -> usize {
        self.shared.uploads.load(Ordering::SeqCst)
    }
}

impl Drop for PeerServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        self.shared.load_change();
        // Wake the accept loop; connections notice the flag at their next request (or idle timeout).
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn accept_loop(l: TcpListener, sh: Arc<ServeShared>) {
    for conn in l.incoming() {
        if sh.stop.load(Ordering::SeqCst) {
            return;
        }
        let Ok(s) = conn else { continue };
        if sh.connections.load(Ordering::SeqCst) >= limits::PEER_CONNECTIONS_MAX {
            tracing::warn!(max = limits::PEER_CONNECTIONS_MAX, "too many peer connections; closing one");
            continue;
        }
        sh.connections.fetch_add(1, Ordering::SeqCst);
        let sh2 = sh.clone();
        let peer = s.peer_addr().map(|a| a.to_string()).unwrap_or_default();
        let spawned = std::thread::Builder::new().name("peer-conn".into()).spawn(move || {
            if let Err(e) = serve_peer(&sh2, s) {
                tracing::debug!(%peer, error = %e, "peer connection ended");
            }
            sh2.connections.fetch_sub(1, Ordering::SeqCst);
        });
        if spawned.is_err() {
            sh.connections.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

fn serve_peer(sh: &ServeShared, s: TcpStream) -> Result<(), transport::Error> {
    use transport::Error as E;
    s.set_read_timeout(Some(limits::AUTH_TIMEOUT)).map_err(E::io(transport::Operation::ConfigurePeerSocket))?;
    s.set_write_timeout(Some(limits::PEER_IO_TIMEOUT)).map_err(E::io(transport::Operation::ConfigurePeerSocket))?;
    s.set_nodelay(true).map_err(E::io(transport::Operation::ConfigurePeerSocket))?;
    let raw = s.try_clone().map_err(E::io(transport::Operation::ClonePeerSocket))?;
    // Under a TLS relay an agent serves peers only over TLS (it does not serve at all without a
    // certificate: see `join`).
    match sh.token.relay_tls().and_then(|t| t.peer_server()) {
        None => serve_blocks(sh, s, &raw),
        Some(cfg) => serve_blocks(sh, transport::tls::accept(cfg, s).map_err(E::io(transport::Operation::TlsHandshakeWithPeer))?, &raw),
    }
}

/// Authenticate a peer, then answer its block reads. `raw` is the socket under `s` (timeouts).
fn serve_blocks<S: Read + Write>(sh: &ServeShared, mut s: S, raw: &TcpStream) -> Result<(), transport::Error> {
    use transport::Error as E;
    if auth::server(&mut s, sh.token.token())? != Kind::Data {
        return Err(E::Protocol("peers open data connections only".into()));
    }
    let mut slot = UploadSlot { sh, held: false };
    let mut wait = None;
    loop {
        // A slot is only kept into a read whose request is already waiting (below); a request that
        // is not served gives it back here, before any wait for the next one.
        if slot.held && !next_request_waiting(raw) {
            slot.give_back();
        }
        // A kept slot is for a request already arriving: one that stalls must not pin it for the
        // connection's idle timeout. (Set only when it changes: this runs once per block.)
        let want = Some(if slot.held { limits::PEER_IO_TIMEOUT } else { limits::DATA_IDLE_MAX });
        if wait != want {
            raw.set_read_timeout(want).map_err(E::io(transport::Operation::ConfigurePeerSocket))?;
            wait = want;
        }
        let Some(req) = transport::wire::read_request(&mut s)? else { return Ok(()) };
        if sh.stop.load(Ordering::SeqCst) {
            return Ok(());
        }
        let (offset, len) = match req {
            Request::Range { generation, offset, len } if generation == sh.held.generation => (offset, len),
            Request::Range { generation, .. } => {
                serve::send_error(&mut s, &format!("this agent serves generation {}, not {generation}", sh.held.generation))?;
                continue;
            }
            _ => return Err(E::Protocol("peers answer block reads only".into())),
        };
        let Some(block) = sh.held.block_of(offset, len).and_then(|b| sh.held.serve(b)) else {
            serve::send_error(&mut s, "block not held")?;
            continue;
        };
        if !slot.take() {
            serve::send_busy(&mut s)?;
            continue;
        }
        s.write_all(&ResponseHeader::ok(len).encode()).map_err(E::io(transport::Operation::SendBlockToPeer))?;
        match block {
            Serve::Whole(bytes) => s.write_all(&bytes).map_err(E::io(transport::Operation::SendBlockToPeer))?,
            Serve::Arriving(a) => {
                if let Err(e) = send_arriving(&mut s, &a) {
                    slot.give_back();
                    cut_off(raw);
                    return Err(e);
                }
            }
        }
        sh.served.fetch_add(u64::from(len), Ordering::Relaxed);
        // An asker's pipelined reads on one connection are one upload: while its next read is
        // already waiting, the connection keeps its slot (checked at the top of the loop: another
        // asker taking it in between would make this one's next read a refusal). The tracker counts
        // uploads the same way.
    }
}

/// Send an arriving block's bytes as they come. Its last byte goes only once the block passed its
/// checksum here; if it fails or stalls the read is cut off (an error: the connection closes), so
/// the asker never completes it from bad bytes.
fn send_arriving<S: Write>(s: &mut S, a: &Arrival) -> Result<(), transport::Error> {
    use transport::Error as E;
    let mut sent = 0;
    loop {
        match a.next(sent, ARRIVAL_STALL_MAX) {
            Next::Bytes(parts) => {
                for (p, r) in parts {
                    s.write_all(&p[r.clone()]).map_err(E::io(transport::Operation::SendArrivingBlockToPeer))?;
                    sent += r.len();
                }
            }
            Next::End => return Ok(()),
            Next::Failed => return Err(E::Protocol("the block failed while it arrived: its read is cut off".into())),
            Next::Stalled => return Err(E::Protocol(format!("no bytes of the arriving block for {ARRIVAL_STALL_MAX:?}: its read is cut off"))),
        }
    }
}

/// End a connection part-way through a block so that the asker reads an early end of the stream (a
/// cut-off), not a reset (a failure, which would make it avoid this agent for good): no more bytes
/// from us, then its pipelined requests read and dropped until it closes (a socket closed with
/// unread bytes sends a reset), for a second at most.
fn cut_off(raw: &TcpStream) {
    let _ = raw.shutdown(std::net::Shutdown::Write);
    let _ = raw.set_read_timeout(Some(Duration::from_secs(1)));
    let deadline = Instant::now() + Duration::from_secs(1);
    let mut sink = [0u8; 4096];
    let mut r = raw;
    while Instant::now() < deadline {
        match r.read(&mut sink) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
    }
}

impl ServeShared {
    fn load_change(&self) {
        *self.load_changes.lock().unwrap_or_else(|p| p.into_inner()) += 1;
        self.load_changed.notify_all();
    }
}

/// A connection's hold on one of the agent's upload slots; given back when dropped.
struct UploadSlot<'a> {
    sh: &'a ServeShared,
    held: bool,
}

impl UploadSlot<'_> {
    /// Hold a slot (if this connection does not already): false when all are taken.
    fn take(&mut self) -> bool {
        if !self.held {
            if self.sh.uploads.fetch_add(1, Ordering::SeqCst) >= self.sh.uploads_max {
                self.sh.uploads.fetch_sub(1, Ordering::SeqCst);
                return false;
            }
            self.held = true;
            self.sh.arrivals.fetch_add(1, Ordering::SeqCst);
            self.sh.load_change();
        }
        true
    }

    fn give_back(&mut self) {
        if std::mem::take(&mut self.held) {
            self.sh.uploads.fetch_sub(1, Ordering::SeqCst);
            self.sh.load_change();
        }
    }
}

impl Drop for UploadSlot<'_> {
    fn drop(&mut self) {
        self.give_back();
    }
}

/// Whether bytes of the asker's next request are already on the socket (checked without waiting).
/// Under TLS a request already decrypted into the TLS layer's buffer is not seen: the slot is then
/// given back and taken again, as without pipelining.
fn next_request_waiting(raw: &TcpStream) -> bool {
    transport::tcp::bytes_waiting(raw) == Some(true)
}

/// How an agent takes part in the swarm (`join`'s `--no-serve`, `--peer-listen`, `--advertise`,
/// `--serve-cache-mib`).
#[derive(Debug, Clone)]
pub struct PeerConfig {
    /// Serve held blocks to other agents.
    pub serve: bool,
    /// Where to listen for peers (default: the address this agent reaches the relay from, any port).
    pub listen: Option<SocketAddr>,
    /// The address to give peers, when they cannot reach the listen address (NAT).
    pub advertise: Option<String>,
    /// Bytes of blocks already fed to the replica kept for peers.
    pub cache_bytes: u64,
    /// Longest an agent keeps serving after its own handoff while others still pull.
    pub linger: Duration,
}

impl Default for PeerConfig {
    fn default() -> Self {
        PeerConfig { serve: true, listen: None, advertise: None, cache_bytes: limits::SERVE_CACHE_BYTES_DEFAULT, linger: limits::SERVE_LINGER_DEFAULT }
    }
}

/// An agent's membership of its generation's swarm: the tracker link, the held blocks, the server.
pub struct Peering {
    /// The tracker link: during a pull, the pipeline's tracker-link thread asks and tells on it, and
    /// after it the linger; the load reporter, for its reports. Each holds the lock to send or to read
    /// an answer that has begun to arrive, not for a round trip.
    pub(crate) tracker: Arc<Mutex<TrackerLink>>,
    /// Verified blocks.
    pub(crate) held: Arc<Held>,
    /// The relay's token, for peer connections.
    pub(crate) token: Credentials,
    server: Option<PeerServer>,
    /// The thread that reports this agent's upload load while it serves.
    reporter: Option<std::thread::JoinHandle<()>>,
    id: u32,
}

impl Drop for Peering {
    fn drop(&mut self) {
        // The server's stop wakes the reporter; then the link closes with the last of its users.
        drop(self.server.take());
        if let Some(r) = self.reporter.take() {
            let _ = r.join();
        }
    }
}

/// Keep the tracker told how many uploads this agent serves and how many askers took a slot since
/// the last report, at every change, for as long as it serves: during its pull and its linger, and
/// in between, while its replica loads (a holder whose last report said "full" would be named to no
/// new asker until it reports again).
fn report_load(sh: &ServeShared, tracker: &Mutex<TrackerLink>) {
    let mut seen = 0;
    let mut told: Option<(usize, u64)> = None;
    loop {
        {
            let mut changes = sh.load_changes.lock().unwrap_or_else(|p| p.into_inner());
            while *changes == seen && !sh.stop.load(Ordering::SeqCst) {
                changes = sh.load_changed.wait(changes).unwrap_or_else(|p| p.into_inner());
            }
            seen = *changes;
        }
        if sh.stop.load(Ordering::SeqCst) {
            return;
        }
        let now = (sh.uploads.load(Ordering::SeqCst), sh.arrivals.load(Ordering::SeqCst));
        if told == Some(now) {
            continue;
        }
        let arrived = now.1 - told.map_or(0, |t| t.1);
        let sent = tracker.lock().unwrap_or_else(|p| p.into_inner()).load(u32::try_from(now.0).unwrap_or(u32::MAX), u32::try_from(arrived).unwrap_or(u32::MAX));
        if let Err(e) = sent {
            // The pull's own requests on the link report its failure; nothing more to tell.
            tracing::debug!(error = %e, "tracker link failed; no more load reports");
            return;
        }
        told = Some(now);
    }
}

impl Peering {
    /// Join the swarm of `generation` at the relay `relay`. `local`: this agent reads the relay over
    /// shared memory.
    pub fn join(relay: SocketAddr, token: &Credentials, generation: u64, block_size: u64, local: bool, cfg: &PeerConfig) -> Result<Peering, Error> {
        let mut link = TrackerLink::connect(relay, token, limits::CONNECT_TIMEOUT).map_err(Error::relay)?;
        // Under a TLS relay the snapshot never travels in the clear: serve peers over TLS, or not at all.
        let serve = cfg.serve && token.relay_tls().map_or(true, |t| t.peer_server().is_some());
        let cache = if serve { cfg.cache_bytes } else { 0 };
        let held = Arc::new(Held::new(generation, block_size, cache));
        let server = if serve {
            let listen = match cfg.listen {
                Some(l) => l,
                None => SocketAddr::new(link.local_ip().map_err(Error::relay)?, 0),
            };
            Some(PeerServer::start(listen, token.clone(), held.clone(), swarm::UPLOADS_MAX)?)
        } else {
            None
        };
        let reg = Registration { port: server.as_ref().map_or(0, |s| s.local_addr().port()), serves: serve, local, advertise: cfg.advertise.clone() };
        let id = link.register(generation, &reg).map_err(Error::relay)?;
        if let Some(s) = &server {
            tracing::info!(agent = id, listen = %s.local_addr(), advertise = cfg.advertise.as_deref().unwrap_or(""), "joined the swarm; serving peers");
        }
        let tracker = Arc::new(Mutex::new(link));
        let reporter = match &server {
            Some(s) => {
                let (sh, link) = (s.shared.clone(), tracker.clone());
                Some(std::thread::Builder::new().name("load-report".into()).spawn(move || report_load(&sh, &link)).map_err(|e| Error::Internal(format!("spawn the load reporter: {e}")))?)
            }
            None => None,
        };
        Ok(Peering { tracker, held, token: token.clone(), server, reporter, id })
    }

    /// Our number in the swarm.
    pub fn id(&self) -> u32 {
        self.id
    }

    /// Where this agent serves peers.
    pub fn listen_addr(&self) -> Option<SocketAddr> {
        self.server.as_ref().map(PeerServer::local_addr)
    }

    /// This agent serves what it holds.
    pub fn serves(&self) -> bool {
        self.server.is_some()
    }

    /// Uploads to peers in progress now (0 when not serving).
    pub fn uploads(&self) -> usize {
        self.server.as_ref().map_or(0, PeerServer::uploads)
    }

    /// Bytes served to peers so far.
    pub fn served_bytes(&self) -> u64 {
        self.server.as_ref().map_or(0, |s| s.served.load(Ordering::Relaxed))
    }

    pub(crate) fn tracker(&self) -> std::sync::MutexGuard<'_, TrackerLink> {
        self.tracker.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Other agents still missing blocks, asked of the tracker without holding the link for the round
    /// trip (the load reporter shares it): the thread waits on the link's socket meanwhile. A question
    /// that fails or goes unanswered is given up (its late answer is dropped).
    fn needed(&self) -> Result<u32, transport::Error> {
        let (socket, timeout) = {
            let mut link = self.tracker();
            let socket = link.socket()?;
            link.ask_needed()?;
            (socket, link.timeout())
        };
        let asked = Instant::now();
        let got = loop {
            match self.tracker().poll_answer() {
                Ok(Some(transport::tracker::Answer::Needed(n))) => break Ok(n),
                Ok(Some(transport::tracker::Answer::Located(_))) => break Err(transport::Error::Protocol("tracker link: a locate answer where a needed's was due".into())),
                Ok(None) if asked.elapsed() > timeout => break Err(crate::peers::tracker_link::unanswered()),
                Ok(None) => {
                    if let Err(e) = crate::peers::tracker_link::wait(&[std::os::fd::AsFd::as_fd(&socket)], crate::peers::tracker_link::WAIT_SLICE) {
                        break Err(e);
                    }
                }
                Err(e) => break Err(e),
            }
        };
        if got.is_err() {
            self.tracker().abandon_questions();
        }
        got
    }

    /// After our own handoff: keep serving while the tracker says other agents still miss blocks, for
    /// at most `max`, or until `cancel`. Returns how long it lingered.
    pub fn linger(&self, max: Duration, cancel: &AtomicBool) -> Duration {
        let t0 = Instant::now();
        if self.server.is_none() {
            return Duration::ZERO;
        }
        let mut said = false;
        loop {
            let needed = match self.needed() {
                Ok(n) => n,
                Err(e) => {
                    tracing::info!(error = %e, "tracker link lost; no longer serving peers");
                    break;
                }
            };
            if needed == 0 || t0.elapsed() >= max || cancel.load(Ordering::SeqCst) {
                break;
            }
            if !said {
                tracing::info!(agents = needed, linger_max_secs = max.as_secs(), "serving peers that still pull");
                said = true;
            }
            std::thread::sleep(limits::LINGER_POLL_EVERY); // Polling the tracker, bounded by `max`.
        }
        t0.elapsed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn held_keeps_a_bounded_cache_of_fed_blocks_oldest_out_first() {
        let h = Held::new(1, 4, 8);
        for b in 0..4 {
            h.insert(b, Arc::new(vec![b as u8; 4]));
        }
        assert!(h.fed(1).is_empty(), "4 bytes cached, bound 8");
        let dropped: Vec<u64> = h.fed(4).into_iter().map(|(b, _)| b).collect();
        assert_eq!(dropped, vec![0, 1], "16 bytes fed, 8 kept: the oldest go");
        assert!(h.get(0).is_none() && h.get(3).is_some());
        h.insert(4, Arc::new(vec![4; 2]));
        assert!(h.get(4).is_some(), "a block not fed yet is never dropped");
        assert_eq!(h.bytes(), 10);
        h.set_others_need(false);
        let dropped: Vec<u64> = h.fed(5).into_iter().map(|(b, _)| b).collect();
        assert_eq!(dropped, vec![2, 3, 4], "alone, an agent keeps nothing it has fed");
    }

    #[test]
    fn only_whole_blocks_are_served() {
        let h = Held::new(1, 4, 0);
        assert_eq!(h.block_of(8, 4), Some(2));
        assert_eq!(h.block_of(6, 4), None, "unaligned");
        assert_eq!(h.block_of(8, 3), None, "partial");
        h.set_length(10);
        assert_eq!(h.block_of(8, 2), Some(2), "the short last block");
        assert_eq!(h.block_of(12, 4), None, "past the end");
    }

    /// Wait for `cond` (a few seconds at most).
    fn wait_for(what: &str, cond: impl Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !cond() {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            std::thread::yield_now();
        }
    }

    #[test]
    fn a_block_is_served_while_it_arrives_and_its_last_byte_only_once_checked() {
        use transport::tcp::connect_with;
        let token = Credentials::from(transport::Token::new(b"0123456789abcdef").unwrap());
        let held = Arc::new(Held::new(7, 8, 0));
        let a = held.start_arrival(1, 8).unwrap();
        assert!(held.start_arrival(1, 8).is_none(), "one arrival per block");
        a.push(b"abcd");
        let srv = PeerServer::start("127.0.0.1:0".parse().unwrap(), token.clone(), held.clone(), 2).unwrap();
        // A raw connection whose reads give up after 300 ms, to see what has been sent so far.
        let mut c = connect_with(srv.local_addr(), &token, Kind::Data, Duration::from_secs(5), Duration::from_millis(300), transport::Operation::ConnectToPeer).unwrap();
        c.write_all(&Request::Range { generation: 7, offset: 8, len: 8 }.encode()).unwrap();
        let mut header = [0u8; transport::wire::RESPONSE_HEADER_LEN];
        c.read_exact(&mut header).unwrap();
        assert_eq!(ResponseHeader::decode(&header).unwrap().len, 8);
        let mut got = [0u8; 8];
        c.read_exact(&mut got[..4]).unwrap();
        assert_eq!(&got[..4], b"abcd", "the bytes here are sent before the block is whole");
        a.push(b"efgh");
        c.read_exact(&mut got[4..7]).unwrap();
        assert_eq!(&got[4..7], b"efg");
        let mut last = [0u8; 1];
        assert!(c.read_exact(&mut last).is_err(), "the last byte waits for the block's checksum");
        a.settle(true);
        let mut c2 = c;
        // The timed-out read consumed nothing: the last byte comes once the block is verified.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match c2.read_exact(&mut last) {
                Ok(()) => break,
                Err(e) if Instant::now() < deadline && matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => continue,
                Err(e) => panic!("last byte: {e}"),
            }
        }
        assert_eq!(&last, b"h");
        held.insert(1, Arc::new(b"abcdefgh".to_vec()));

        // An arrival that fails cuts its readers off before the end: the asker reads an early end
        // of the stream (a cut-off, told apart from a corrupt block), never a whole block.
        let b = held.start_arrival(2, 8).unwrap();
        b.push(b"ABCDEFGH");
        drop(c2);
        wait_for("the first connection's upload slot to come back", || srv.uploads() == 0);
        let t = transport::tcp::TcpTransport::new(srv.local_addr(), token);
        let mut r = transport::Transport::open(&t).unwrap();
        r.send(7, 16, 8).unwrap();
        let asker = std::thread::spawn(move || {
            let mut buf = [0u8; 8];
            r.receive(&mut buf)
        });
        wait_for("the read to take an upload slot", || srv.uploads() == 1);
        held.fail_arrival(2, &b);
        match asker.join().unwrap() {
            Err(e) => assert!(e.is_cut_off(), "a cut-off read, got {e:?}"),
            Ok(()) => panic!("a cut-off read, got the block"),
        }
        assert!(held.serve(2).is_none(), "a failed arrival is served no more");
    }

    #[test]
    fn a_server_serves_held_blocks_to_the_token_holder_only() {
        let token = Credentials::from(transport::Token::new(b"0123456789abcdef").unwrap());
        let held = Arc::new(Held::new(7, 4, 0));
        held.insert(1, Arc::new(b"abcd".to_vec()));
        let srv = PeerServer::start("127.0.0.1:0".parse().unwrap(), token.clone(), held, 2).unwrap();
        let t = transport::tcp::TcpTransport::new(srv.local_addr(), token);
        let mut r = transport::Transport::open(&t).unwrap();
        let mut buf = [0u8; 4];
        r.read(7, 4, &mut buf).unwrap();
        assert_eq!(&buf, b"abcd");
        assert!(matches!(r.read(7, 0, &mut buf), Err(transport::Error::Refused { .. })), "block 0 is not held");
        assert!(matches!(r.read(8, 4, &mut buf), Err(transport::Error::Refused { .. })), "another generation");
        assert_eq!(srv.served.load(Ordering::Relaxed), 4);
        // Pipelined: the depth's reads sent before any answer; answers in the order asked, a refusal
        // included, and the connection goes on.
        let depth = r.depth();
        assert!(depth >= 2, "TCP connections take pipelined reads");
        assert_eq!(depth, limits::READS_IN_FLIGHT_PER_CONNECTION);
        r.send(7, 0, 4).unwrap();
        for _ in 1..depth {
            r.send(7, 4, 4).unwrap();
        }
        assert!(r.send(7, 4, 4).is_err(), "no more than the depth in flight");
        assert!(matches!(r.receive(&mut buf), Err(transport::Error::Refused { .. })), "block 0 is not held");
        for _ in 1..depth {
            let mut a = [0u8; 4];
            r.receive(&mut a).unwrap();
            assert_eq!(&a, b"abcd");
        }
        r.read(7, 4, &mut buf).unwrap();
        assert_eq!(&buf, b"abcd", "a plain read after pipelined ones");
        let wrong = transport::tcp::TcpTransport::new(srv.local_addr(), transport::Token::new(b"fedcba9876543210").unwrap().into());
        assert!(matches!(transport::Transport::open(&wrong), Err(transport::Error::Auth(_))));
    }

    #[test]
    fn a_connection_keeps_its_upload_slot_only_while_its_next_read_waits() {
        let held = Arc::new(Held::new(1, 4, 0));
        let token = Credentials::from(transport::Token::new(b"0123456789abcdef").unwrap());
        let sh = ServeShared {
            held,
            token,
            uploads: AtomicUsize::new(0),
            uploads_max: 1,
            arrivals: AtomicU64::new(0),
            load_changes: Mutex::new(0),
            load_changed: Condvar::new(),
            connections: AtomicUsize::new(0),
            served: Arc::default(),
            stop: Arc::default(),
        };
        let mut a = UploadSlot { sh: &sh, held: false };
        assert!(a.take());
        assert!(a.take(), "a connection holding the slot keeps it for its next read");
        assert_eq!(sh.arrivals.load(Ordering::SeqCst), 1, "one asker arrived, however many reads it sends");
        let mut b = UploadSlot { sh: &sh, held: false };
        assert!(!b.take(), "one slot, held by the other connection");
        a.give_back();
        assert!(b.take());
        drop(b);
        assert_eq!(sh.uploads.load(Ordering::SeqCst), 0, "a connection that ends gives its slot back");
        assert_eq!(sh.arrivals.load(Ordering::SeqCst), 2);
        assert_eq!(*sh.load_changes.lock().unwrap(), 4, "every take and give-back wakes the load reporter");

        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut asker = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (server, _) = l.accept().unwrap();
        assert!(!next_request_waiting(&server), "nothing sent yet");
        asker.write_all(b"x").unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !next_request_waiting(&server) {
            assert!(std::time::Instant::now() < deadline, "the byte sent never showed");
            std::thread::yield_now();
        }
        server.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut one = [0u8; 1];
        (&server).read_exact(&mut one).unwrap();
        assert_eq!(&one, b"x", "looking consumed nothing");
        assert!(!next_request_waiting(&server), "read: nothing waits any more");
    }
}
