//! The server that gives an agent's held blocks ([`Held`]) to other agents. Peers authenticate with
//! the relay's token, both ways, exactly like relay connections; what an agent fetches from a peer it
//! verifies against the relay's checksum before using or keeping it.

use crate::error::Error;
use crate::peers::arrival::{Arrival, Next};
use crate::peers::held::{Held, Serve};
use admission::{Budget, Gate, Pass, Refusal, Source};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};
use transport::auth::{self, Kind};
use transport::tracker::TrackerLink;
use transport::wire::{Request, ResponseHeader};
use transport::{serve, Credentials};

/// Longest a read of an arriving block waits for its next bytes before it is cut off (see
/// [`limits::PEER_ARRIVAL_STALL_MAX`]).
const ARRIVAL_STALL_MAX: Duration = limits::PEER_ARRIVAL_STALL_MAX;

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
    /// Admission: strangers apart, at most [`limits::PEER_CONNECTIONS_MAX`] authenticated peers.
    gate: Arc<Gate>,
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
            gate: Gate::new("peers", peer_budget()),
            served: served.clone(),
            stop: stop.clone(),
        });
        let shared = sh.clone();
        let gate = sh.gate.clone();
        std::thread::Builder::new().name("peer-admission".into()).spawn(move || gate.reap()).map_err(|e| Error::Internal(format!("spawn the peer server's admission: {e}")))?;
        let thread = std::thread::Builder::new().name("peer-accept".into()).spawn(move || accept_loop(l, sh)).map_err(|e| {
            // The admission's reaper started above would wait forever.
            shared.gate.stop();
            Error::Internal(format!("spawn peer server: {e}"))
        })?;
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

impl PeerServer {
    /// Start the thread that keeps the tracker told of this server's upload load ([`report_load`]);
    /// it ends when the server stops or the link fails.
    pub(crate) fn start_load_reporter(&self, tracker: Arc<Mutex<TrackerLink>>) -> Result<std::thread::JoinHandle<()>, Error> {
        let sh = self.shared.clone();
        std::thread::Builder::new().name("load-report".into()).spawn(move || report_load(&sh, &tracker)).map_err(|e| Error::Internal(format!("spawn the load reporter: {e}")))
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

impl Drop for PeerServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        self.shared.gate.stop();
        self.shared.load_change();
        // Wake the accept loop; connections notice the flag at their next request (or idle timeout).
        let _ = TcpStream::connect_timeout(&self.addr, limits::PEER_SERVER_WAKE_TIMEOUT);
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
        let Ok((s, handle)) = conn.and_then(|s| s.try_clone().map(|h| (s, h))) else {
            // Out of descriptors, most likely: a pause rather than a spin (not synchronization).
            std::thread::sleep(limits::ACCEPT_FAILURE_PAUSE);
            continue;
        };
        let peer = s.peer_addr().ok();
        let mut pass = sh.gate.arrive(Box::new(handle), Source::of_tcp(&s));
        let sh2 = sh.clone();
        let spawned = std::thread::Builder::new().name("peer-conn".into()).spawn(move || {
            if let Err(e) = serve_peer(&sh2, s, &mut pass) {
                tracing::debug!(?peer, error = %e, "peer connection ended");
            }
        });
        if let Err(e) = spawned {
            tracing::debug!(error = %e, "spawn a peer connection's thread");
        }
    }
}

/// The peer port's admission.
fn peer_budget() -> Budget {
    Budget {
        unauthenticated_max: limits::PEER_UNAUTHENTICATED_MAX,
        per_source_max: limits::UNAUTHENTICATED_PER_SOURCE_MAX,
        authenticated_max: limits::PEER_CONNECTIONS_MAX,
        deadline: limits::UNAUTHENTICATED_DEADLINE,
    }
}

/// What a failure before authentication counts as.
fn refusal_of(e: &transport::Error) -> Refusal {
    match e {
        transport::Error::Auth(_) => Refusal::Auth,
        // A read timed out is past its deadline (usually shut and counted by the reaper first).
        transport::Error::Io { source, .. } => Refusal::of_io(source),
        _ => Refusal::Protocol,
    }
}

fn serve_peer(sh: &ServeShared, s: TcpStream, pass: &mut Pass) -> Result<(), transport::Error> {
    use transport::Error as E;
    // Per read; the gate's reaper bounds the whole handshake.
    s.set_read_timeout(Some(limits::UNAUTHENTICATED_DEADLINE)).map_err(E::io(transport::Operation::ConfigurePeerSocket))?;
    s.set_write_timeout(Some(limits::PEER_IO_TIMEOUT)).map_err(E::io(transport::Operation::ConfigurePeerSocket))?;
    s.set_nodelay(true).map_err(E::io(transport::Operation::ConfigurePeerSocket))?;
    let raw = s.try_clone().map_err(E::io(transport::Operation::ClonePeerSocket))?;
    // Under a TLS relay an agent serves peers only over TLS (it does not serve at all without a
    // certificate: see `join`).
    match sh.token.relay_tls().and_then(|t| t.peer_server()) {
        None => serve_blocks(sh, s, &raw, pass),
        Some(cfg) => match transport::tls::accept(cfg, s) {
            Ok(tls) => serve_blocks(sh, tls, &raw, pass),
            Err(e) => {
                let e = E::Io { op: transport::Operation::TlsHandshakeWithPeer, source: e };
                pass.failed(refusal_of(&e), &e);
                Ok(())
            }
        },
    }
}

/// Authenticate a peer, then answer its block reads. `raw` is the socket under `s` (timeouts).
fn serve_blocks<S: Read + Write>(sh: &ServeShared, mut s: S, raw: &TcpStream, pass: &mut Pass) -> Result<(), transport::Error> {
    use transport::Error as E;
    // Failures before authentication are the gate's to count and log (at a bounded rate).
    match auth::server(&mut s, sh.token.token()) {
        Ok(Kind::Data) => {}
        Ok(_) => {
            pass.failed(Refusal::Protocol, &"peers open data connections only");
            return Ok(());
        }
        Err(e) => {
            pass.failed(refusal_of(&e), &e);
            return Ok(());
        }
    }
    if pass.authenticated().is_err() {
        return Ok(());
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
    let _ = raw.set_read_timeout(Some(limits::PEER_CUT_OFF_DRAIN_MAX));
    let deadline = Instant::now() + limits::PEER_CUT_OFF_DRAIN_MAX;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_before_authentication_count_by_kind() {
        let io = |kind: std::io::ErrorKind| transport::Error::Io { op: transport::Operation::ReadAgentAuthentication, source: kind.into() };
        assert_eq!(refusal_of(&transport::Error::Auth("a wrong token".into())), Refusal::Auth);
        assert_eq!(refusal_of(&io(std::io::ErrorKind::WouldBlock)), Refusal::Deadline, "a read timing out is the deadline, not a probe");
        assert_eq!(refusal_of(&io(std::io::ErrorKind::TimedOut)), Refusal::Deadline);
        assert_eq!(refusal_of(&io(std::io::ErrorKind::UnexpectedEof)), Refusal::Closed);
        assert_eq!(refusal_of(&io(std::io::ErrorKind::InvalidData)), Refusal::Protocol, "bytes that are not TLS");
        assert_eq!(refusal_of(&transport::Error::Protocol("bad magic".into())), Refusal::Protocol);
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
        let held = Arc::new(Held::new(7, 8, 0, swarm::Keep::new(0)));
        let a = held.start_arrival(1, 8, 8).unwrap();
        assert!(held.start_arrival(1, 8, 8).is_none(), "one arrival per block");
        a.push(b"abcd");
        let srv = PeerServer::start("127.0.0.1:0".parse().unwrap(), token.clone(), held.clone(), 2).unwrap();
        // A raw connection whose reads give up after 300 ms, to see what has been sent so far.
        let mut c = connect_with(&srv.local_addr().into(), &token, Kind::Data, Duration::from_secs(5), Duration::from_millis(300), transport::Operation::ConnectToPeer).unwrap();
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
        held.insert(1, 8, Arc::new(b"abcdefgh".to_vec()));

        // An arrival that fails cuts its readers off before the end: the asker reads an early end
        // of the stream (a cut-off, told apart from a corrupt block), never a whole block.
        let b = held.start_arrival(2, 16, 8).unwrap();
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
        let held = Arc::new(Held::new(7, 4, 0, swarm::Keep::new(0)));
        held.insert(1, 4, Arc::new(b"abcd".to_vec()));
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
        let held = Arc::new(Held::new(1, 4, 0, swarm::Keep::new(0)));
        let token = Credentials::from(transport::Token::new(b"0123456789abcdef").unwrap());
        let sh = ServeShared {
            held,
            token,
            uploads: AtomicUsize::new(0),
            uploads_max: 1,
            arrivals: AtomicU64::new(0),
            load_changes: Mutex::new(0),
            load_changed: Condvar::new(),
            gate: Gate::new("peers", peer_budget()),
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
