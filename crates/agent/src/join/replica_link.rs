//! The agent as its local replica's master: a loopback listener, the handshake, the check that the
//! peer is the replica and not a stranger that won the race to the port ([`sync_started`]), the RDB
//! framing, and a thread that keeps reading what the replica sends back (its ACKs tell how far it has
//! applied, and an unread socket would stall it).

use crate::error::Error;
use replication::framing::{Framing, EOF_MARK_LEN};
use replication::master::{AckReader, Event, Handshake};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Our side of a TLS link: one rustls state machine shared by the writer and the ACK thread, each
/// holding the lock only for one read or one write.
type TlsLink = Arc<std::sync::Mutex<rustls::StreamOwned<rustls::ServerConnection, TcpStream>>>;

/// How long the ACK thread waits for readable bytes before letting the writer have the TLS link.
const TLS_ACK_POLL: Duration = limits::TLS_ACK_WAIT_MAX;

/// The replica's connection to us, after its handshake.
pub struct ReplicaLink {
    /// The socket (plain: also the write side).
    pub s: TcpStream,
    /// TLS over it, when the replica has `tls-replication yes`.
    tls: Option<TlsLink>,
    /// Whether it offered `capa eof`.
    pub capa_eof: bool,
    /// Highest offset it acknowledged (meaningful once `ack_seen`: 0 is a valid offset).
    pub acked: Arc<AtomicU64>,
    /// Whether any ACK arrived (the first one means it finished loading).
    pub ack_seen: Arc<AtomicBool>,
    /// Set when the replica closed the link or sent garbage.
    pub closed: Arc<AtomicBool>,
    /// Why it closed.
    pub closed_why: Arc<std::sync::Mutex<Option<String>>>,
}

/// Dropping the link closes the connection for real: the ACK thread holds a clone of the socket, so
/// without a shutdown the replica would keep waiting on it — a replica loading from us blocks in
/// that read (up to its `repl-timeout`) and answers no command, not even the `REPLICAOF NO ONE` that
/// resets it after a failure. (Found by the fault matrix: relay killed mid-pull.)
impl Drop for ReplicaLink {
    fn drop(&mut self) {
        let _ = self.s.shutdown(std::net::Shutdown::Both);
    }
}

/// Listen on `bind` (port 0 = any).
pub fn listen(bind: SocketAddr) -> Result<(TcpListener, SocketAddr), Error> {
    let l = TcpListener::bind(bind).map_err(|e| Error::Resource(format!("listen for the replica on {bind}: {e}")))?;
    let a = l.local_addr().map_err(|e| Error::Resource(format!("listener address: {e}")))?;
    Ok((l, a))
}

/// Whether the peer just answered `+FULLRESYNC` is the local replica, asked of the replica by an
/// instant ([`sync_started`] in the join; a stand-in in tests).
pub type IsReplica<'a> = dyn FnMut(Instant) -> Result<bool, Error> + 'a;

/// Accept the replica and run its handshake up to `PSYNC`, over TLS when `tls` is given (a replica
/// with `tls-replication yes`), then answer it `fullresync` and make sure it is the replica
/// (`is_replica`: has the local replica's sync started?). The first connection to finish the
/// handshake within [`limits::REPLICA_HANDSHAKE_MAX`] and to be the replica within as long again is
/// the replica's; one that closes, sends malformed RESP or more than a handshake holds, does not
/// finish in time, or is not the replica (a local process that won the race to the port: it gets
/// `+FULLRESYNC` and is closed, its address logged) is closed and the agent waits on, until `timeout`
/// in all (a port scan or a stray client must not fail the join). A failure of the replica itself
/// (TLS refused, say) is said at the end; one to ask it is the join's.
pub fn accept(l: &TcpListener, timeout: Duration, tls: Option<&client::tls::Tls>, fullresync: &[u8], is_replica: &mut IsReplica<'_>) -> Result<ReplicaLink, Error> {
    accept_within(l, timeout, limits::REPLICA_HANDSHAKE_MAX, tls, fullresync, is_replica)
}

/// [`accept`] with each connection's handshake bounded by `handshake_max` (shorter in tests).
fn accept_within(l: &TcpListener, timeout: Duration, handshake_max: Duration, tls: Option<&client::tls::Tls>, fullresync: &[u8], is_replica: &mut IsReplica<'_>) -> Result<ReplicaLink, Error> {
    l.set_nonblocking(true).map_err(|e| Error::Resource(format!("configure listener: {e}")))?;
    let deadline = Instant::now() + timeout;
    // Connections that failed the handshake or were not the replica: how many, and the last one's
    // reason (a count, not a list: a local flood of them must not grow memory).
    let (mut failed, mut last_failure) = (0u64, String::new());
    loop {
        // Checked on every pass, not only when nobody is waiting: a peer that keeps reconnecting
        // must not hold the join past its deadline.
        let now = Instant::now();
        if now > deadline {
            let why = if failed == 0 {
                format!("the replica did not connect to the agent within {timeout:?} (see its log)")
            } else {
                format!("no connection completed the replica's handshake within {timeout:?} ({failed} failed; the last: {last_failure}; see the replica's log)")
            };
            return Err(Error::unavailable(crate::error::Party::ReplicaLink, why));
        }
        match l.accept() {
            Ok((s, peer)) => match answer(handshake_with(s, tls, (now + handshake_max).min(deadline)), (Instant::now() + handshake_max).min(deadline), fullresync, is_replica)? {
                // Answered: from now on only the replica that read it says its sync started.
                Ok(link) => {
                    if is_replica((Instant::now() + handshake_max).min(deadline))? {
                        if failed > 0 {
                            tracing::info!(before = failed, "the replica connected after other connections to its port failed the handshake or were not the replica");
                        }
                        return Ok(link);
                    }
                    // Each said: one costs a whole wait for the replica's word, so they come slowly.
                    tracing::warn!(%peer, "a connection to the agent's port for its replica completed a replica's handshake, but the local replica's sync did not start: not the replica; closed, still waiting for the replica");
                    failed += 1;
                    last_failure = format!("{peer} was not the local replica");
                    drop(link); // Its Drop shuts the connection.
                }
                Err(e) => {
                    // The first in full; the rest at debug (a local flood must not flood the log).
                    if failed == 0 {
                        tracing::warn!(%peer, error = %e, "a connection to the agent's port for its replica failed the replica's handshake: closed, still waiting for the replica");
                    } else {
                        tracing::debug!(%peer, error = %e, "another connection failed the replica's handshake");
                    }
                    failed += 1;
                    last_failure = e.to_string();
                }
            },
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(limits::REPLICA_ACCEPT_POLL_EVERY); // Polling a non-blocking accept with a deadline.
            }
            Err(e) => return Err(Error::unavailable(crate::error::Party::ReplicaLink, format!("accept the replica: {e}"))),
        }
    }
}

/// A connection through its handshake answered `+FULLRESYNC`, if the replica's word can still prove
/// it: the replica's word proves this connection only if it was not showing already (a replica still
/// in the sync of a connection closed a moment ago, not having read the close yet, must drop it
/// first, or a stranger answered next would pass on its word). The outer error, to ask the replica,
/// is the join's; the inner one this connection's.
fn answer(handshaken: Result<ReplicaLink, Error>, by: Instant, fullresync: &[u8], is_replica: &mut IsReplica<'_>) -> Result<Result<ReplicaLink, Error>, Error> {
    let mut link = match handshaken {
        Ok(link) => link,
        Err(e) => return Ok(Err(e)),
    };
    if !quiet(by, is_replica)? {
        return Ok(Err(Error::unavailable(crate::error::Party::ReplicaLink, "the local replica still showed a sync started before this connection was answered")));
    }
    Ok(link.send(fullresync, "FULLRESYNC").map(|()| link))
}

/// Does the local replica show no sync with the agent started, by `by` (asked at once, then again
/// until then)? An error to ask it is retried as long; the last is said at `by`.
fn quiet(by: Instant, is_replica: &mut IsReplica<'_>) -> Result<bool, Error> {
    let mut last: Option<Error>;
    loop {
        match is_replica(Instant::now()) {
            Ok(false) => return Ok(true),
            Ok(true) => last = None,
            Err(e) => last = Some(e),
        }
        if Instant::now() >= by {
            return last.map_or(Ok(false), Err);
        }
        std::thread::sleep(limits::SERVER_POLL_EVERY); // Polling the replica's state with a deadline.
    }
}

/// Has the local replica's sync with the agent started, by `by`? [`accept`]'s question in the join,
/// asked of `replica` once a peer was answered `+FULLRESYNC`: it follows `listener` and its `INFO
/// replication` says `master_sync_in_progress:1`. A replica shows that from the moment it reads
/// `+FULLRESYNC` (its transfer state; Redis 6.2, 7.0, 8.2 and Valkey 8.1, 9.1 alike, diskless load
/// or not), and only the replica that read it: one still queued behind a stranger is in its
/// handshake, at 0. (Its own view of the link, `CLIENT LIST TYPE master` with the replica's end as
/// `laddr=`, exists only once it has loaded the RDB: too late, the snapshot would have gone to
/// whoever connected first.)
pub fn sync_started(replica: &mut client::Client, listener: SocketAddr, by: Instant) -> Result<bool, Error> {
    let listener = endpoint::Endpoint::from(listener);
    loop {
        // A refusal to answer (a busy script, a slow command) is asked again until `by`, then said.
        match crate::local::repl_state(replica).map_err(Error::replica) {
            Ok(st) if st.syncing && st.follows.as_ref() == Some(&listener) => return Ok(true),
            Ok(_) if Instant::now() >= by => return Ok(false),
            Err(e) if Instant::now() >= by => return Err(e),
            _ => {}
        }
        std::thread::sleep(limits::SERVER_POLL_EVERY); // Polling the replica's state with a deadline.
    }
}

/// One accepted connection through the replica's handshake (TLS included), by `deadline`. A watchdog
/// shuts the socket at the deadline, however the peer trickles its bytes or stops reading our
/// answers (reads and writes inside the TLS handshake are not ours to time).
fn handshake_with(s: TcpStream, tls: Option<&client::tls::Tls>, deadline: Instant) -> Result<ReplicaLink, Error> {
    let configure = |e: std::io::Error| Error::unavailable(crate::error::Party::ReplicaLink, format!("configure replica socket: {e}"));
    s.set_nonblocking(false).and_then(|_| s.set_nodelay(true)).map_err(configure)?;
    let watched = s.try_clone().map_err(configure)?;
    let (done, finished) = std::sync::mpsc::channel::<()>();
    let wait = deadline.saturating_duration_since(Instant::now());
    // The watchdog says whether it fired (shut the socket).
    let dog = std::thread::Builder::new()
        .name("replica-handshake-deadline".into())
        .spawn(move || {
            let fired = matches!(finished.recv_timeout(wait), Err(std::sync::mpsc::RecvTimeoutError::Timeout));
            if fired {
                let _ = watched.shutdown(std::net::Shutdown::Both);
            }
            fired
        })
        .map_err(|e| Error::Internal(format!("spawn the replica handshake's deadline: {e}")))?;
    let r = match tls {
        None => accept_plain(s),
        Some(t) => accept_tls(s, t),
    };
    let _ = done.send(());
    // Once the watchdog fired the socket is shut, whatever the handshake returned. (The deadline may
    // be the join's own, shorter than a handshake's maximum: said as a deadline, not a duration.)
    if dog.join().unwrap_or(false) {
        return Err(Error::unavailable(crate::error::Party::ReplicaLink, "no complete handshake by its deadline".to_string()));
    }
    r
}

/// The handshake up to `PSYNC` over `io` (its deadline is [`handshake_with`]'s watchdog): whether the
/// replica offered `capa eof`.
fn handshake(io: &mut impl ReadWrite) -> Result<bool, Error> {
    let mut hs = Handshake::default();
    let mut buf = [0u8; limits::READ_CHUNK_BYTES];
    loop {
        let n = io.read(&mut buf).map_err(|e| Error::unavailable(crate::error::Party::ReplicaLink, format!("read the replica's handshake: {e}")))?;
        if n == 0 {
            return Err(Error::unavailable(crate::error::Party::ReplicaLink, "the replica closed the link during its handshake"));
        }
        for ev in hs.on_bytes(&buf[..n]).map_err(|e| Error::unavailable(crate::error::Party::ReplicaLink, format!("replica handshake: {e}")))? {
            match ev {
                Event::Reply(r) => io.write_all(&r).map_err(|e| Error::unavailable(crate::error::Party::ReplicaLink, format!("answer the replica's handshake: {e}")))?,
                Event::Psync { capa_eof, offered, .. } => {
                    let declined = offered.declined();
                    tracing::info!(
                        capas = %offered.capas.join(" "),
                        options = %offered.options.join(" "),
                        declined = %declined.join(" "),
                        "the replica's handshake: the agent serves one channel (the RDB{} then the stream); offers it does not take up fall back to that",
                        if capa_eof { ", EOF-framed," } else { "" }
                    );
                    return Ok(capa_eof);
                }
            }
        }
    }
}

trait ReadWrite: Read + Write {}
impl<T: Read + Write> ReadWrite for T {}

/// The shared state the ACK thread fills in.
struct Acks {
    acked: Arc<AtomicU64>,
    ack_seen: Arc<AtomicBool>,
    closed: Arc<AtomicBool>,
    closed_why: Arc<std::sync::Mutex<Option<String>>>,
}

impl Acks {
    fn new() -> Acks {
        Acks { acked: Arc::new(AtomicU64::new(0)), ack_seen: Arc::new(AtomicBool::new(false)), closed: Arc::new(AtomicBool::new(false)), closed_why: Arc::new(std::sync::Mutex::new(None)) }
    }

    /// Feed what the replica sent; `Some(why)` when the link is over.
    fn on_read(&self, r: &mut AckReader, got: std::io::Result<usize>, buf: &[u8]) -> Option<String> {
        match got {
            Ok(0) => Some("the replica closed its link to the agent".to_string()),
            Ok(n) => match r.on_bytes(&buf[..n]) {
                Ok(Some(off)) => {
                    self.acked.store(off, Ordering::SeqCst);
                    self.ack_seen.store(true, Ordering::SeqCst);
                    None
                }
                Ok(None) => None,
                Err(e) => Some(format!("the replica sent something unexpected: {e}")),
            },
            Err(e) => Some(format!("read from the replica: {e}")),
        }
    }

    fn close(&self, why: String) {
        *self.closed_why.lock().unwrap_or_else(|p| p.into_inner()) = Some(why);
        self.closed.store(true, Ordering::SeqCst);
    }

    fn link(&self, s: TcpStream, tls: Option<TlsLink>, capa_eof: bool) -> ReplicaLink {
        ReplicaLink { s, tls, capa_eof, acked: self.acked.clone(), ack_seen: self.ack_seen.clone(), closed: self.closed.clone(), closed_why: self.closed_why.clone() }
    }
}

fn spawn_acks(f: impl FnOnce() + Send + 'static) -> Result<(), Error> {
    std::thread::Builder::new().name("replica-acks".into()).spawn(f).map(|_| ()).map_err(|e| Error::Internal(format!("spawn ack thread: {e}")))
}

fn accept_tls(s: TcpStream, tls: &client::tls::Tls) -> Result<ReplicaLink, Error> {
    let raw = s.try_clone().map_err(|e| Error::unavailable(crate::error::Party::ReplicaLink, format!("clone replica socket: {e}")))?;
    let mut t = tls.accept(s).map_err(|e| Error::unavailable(crate::error::Party::ReplicaLink, format!("TLS with the replica (tls-replication yes): {e}")))?;
    let capa_eof = handshake(&mut t)?;
    // Reads time out quickly so the ACK thread never holds the link long; writes are not bounded by it.
    raw.set_read_timeout(Some(TLS_ACK_POLL)).map_err(|e| Error::unavailable(crate::error::Party::ReplicaLink, format!("configure replica socket: {e}")))?;
    let link: TlsLink = Arc::new(std::sync::Mutex::new(t));
    let acks = Acks::new();
    let out = acks.link(raw, Some(link.clone()), capa_eof);
    spawn_acks(move || {
        let mut r = AckReader::default();
        let mut buf = [0u8; limits::READ_CHUNK_BYTES];
        let why = loop {
            let got = link.lock().unwrap_or_else(|p| p.into_inner()).read(&mut buf);
            match got {
                Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                    // Nothing yet: let the writer in before trying again.
                    std::thread::yield_now();
                    continue;
                }
                got => {
                    if let Some(why) = acks.on_read(&mut r, got, &buf) {
                        break why;
                    }
                }
            }
        };
        acks.close(why);
    })?;
    Ok(out)
}

fn accept_plain(mut s: TcpStream) -> Result<ReplicaLink, Error> {
    let capa_eof = handshake(&mut s)?;
    let mut rs = s.try_clone().map_err(|e| Error::unavailable(crate::error::Party::ReplicaLink, format!("clone replica socket: {e}")))?;
    let acks = Acks::new();
    let out = acks.link(s, None, capa_eof);
    spawn_acks(move || {
        let mut r = AckReader::default();
        let mut buf = [0u8; limits::READ_CHUNK_BYTES];
        let why = loop {
            let got = rs.read(&mut buf);
            if let Some(why) = acks.on_read(&mut r, got, &buf) {
                break why;
            }
        };
        acks.close(why);
    })?;
    Ok(out)
}

impl ReplicaLink {
    /// Send bytes to the replica.
    pub fn send(&mut self, bytes: &[u8], what: &str) -> Result<(), Error> {
        let r = match &self.tls {
            None => self.s.write_all(bytes),
            Some(t) => t.lock().unwrap_or_else(|p| p.into_inner()).write_all(bytes),
        };
        r.map_err(|e| Error::unavailable(crate::error::Party::ReplicaLink, format!("send {what} to the replica: {e}{}", self.why_suffix())))
    }

    /// Why the replica side closed, if it did.
    pub fn why_suffix(&self) -> String {
        match self.closed_why.lock().unwrap_or_else(|p| p.into_inner()).as_ref() {
            Some(w) => format!(" ({w})"),
            None => String::new(),
        }
    }

    /// Fail if the replica has gone.
    pub fn check_open(&self) -> Result<(), Error> {
        if self.closed.load(Ordering::SeqCst) {
            return Err(Error::unavailable(crate::error::Party::ReplicaLink, format!("lost the replica{}", self.why_suffix())));
        }
        Ok(())
    }
}

/// A fresh EOF framing with a random 40-character mark.
pub fn eof_framing() -> Result<Framing, Error> {
    let mut raw = [0u8; EOF_MARK_LEN / 2];
    getrandom::getrandom(&mut raw).map_err(|e| Error::Internal(format!("randomness for the EOF mark: {e}")))?;
    let mut mark = [0u8; EOF_MARK_LEN];
    for (i, b) in raw.iter().enumerate() {
        let hex = b"0123456789abcdef";
        mark[2 * i] = hex[(b >> 4) as usize];
        mark[2 * i + 1] = hex[(b & 15) as usize];
    }
    Ok(Framing::Eof(mark))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the agent answers a replica's `PSYNC` with.
    const GREETING: &[u8] = b"+FULLRESYNC 6c879f910fada50e6bee517c0d0ea8a0b46c6e0b 1000\r\n";

    /// A replica's handshake up to `PSYNC`, as a server sends it, over `s` (the agent's replies are
    /// left unread).
    fn replica_handshake(mut s: TcpStream) -> TcpStream {
        let mut wire = Vec::new();
        for c in [&["PING"][..], &["REPLCONF", "listening-port", "6380"], &["REPLCONF", "capa", "eof", "capa", "psync2"], &["PSYNC", "?", "-1"]] {
            resp::encode_command(&mut wire, c);
        }
        s.write_all(&wire).unwrap();
        s
    }

    #[test]
    fn connections_that_fail_the_handshake_do_not_take_the_replicas_place() {
        let (l, at) = listen("127.0.0.1:0".parse().unwrap()).unwrap();
        // A client that connects and leaves, one that sends what no replica sends and leaves, then
        // the replica: the join must get the replica, not fail on the first two.
        drop(TcpStream::connect(at).unwrap());
        let mut garbage = TcpStream::connect(at).unwrap();
        garbage.write_all(b"GET / HTTP/1.1\r\n\r\n").unwrap();
        drop(garbage);
        let replica = replica_handshake(TcpStream::connect(at).unwrap());
        // The replica's word: not started when asked before the answer, started after it.
        let mut asked = 0;
        let link = accept(&l, Duration::from_secs(20), None, GREETING, &mut |_| {
            asked += 1;
            Ok(asked % 2 == 0)
        })
        .expect("the replica's connection is taken");
        assert!(link.capa_eof);
        assert_eq!(link.s.peer_addr().unwrap(), replica.local_addr().unwrap(), "the link is the replica's connection");
    }

    #[test]
    fn without_the_replica_the_wait_ends_and_says_what_failed() {
        let (l, at) = listen("127.0.0.1:0".parse().unwrap()).unwrap();
        drop(TcpStream::connect(at).unwrap());
        let e = accept(&l, Duration::from_millis(300), None, GREETING, &mut |_| Ok(true)).err().expect("no replica: an error");
        let text = e.to_string();
        assert!(text.contains("no connection completed the replica's handshake") && text.contains("1 failed") && text.contains("closed the link during its handshake"), "{text}");
        let (l, _) = listen("127.0.0.1:0".parse().unwrap()).unwrap();
        let text = accept(&l, Duration::from_millis(100), None, GREETING, &mut |_| Ok(true)).err().expect("nobody: an error").to_string();
        assert!(text.contains("did not connect"), "{text}");
    }

    #[test]
    fn a_silent_or_trickling_peer_is_cut_at_the_handshakes_deadline_and_the_replica_taken_after_it() {
        let (l, at) = listen("127.0.0.1:0".parse().unwrap()).unwrap();
        let silent = TcpStream::connect(at).unwrap();
        // A byte every 50 ms of a command that never ends: each read returns before its timeout.
        // Connected here, in the order the agent will take them: silent, trickling, the replica.
        let mut t = TcpStream::connect(at).unwrap();
        let trickler = std::thread::spawn(move || {
            for b in b"*1\r\n$100000\r\n".iter().chain(std::iter::repeat_n(&b'x', 200)) {
                if t.write_all(&[*b]).is_err() {
                    return true;
                }
                std::thread::sleep(Duration::from_millis(50)); // The trickle's pace, not a synchronization.
            }
            false
        });
        let replica = replica_handshake(TcpStream::connect(at).unwrap());
        // The replica's word: not started when asked before the answer, started after it.
        let mut asked = 0;
        let link = accept_within(&l, Duration::from_secs(30), Duration::from_millis(300), None, GREETING, &mut |_| {
            asked += 1;
            Ok(asked % 2 == 0)
        })
        .expect("the replica's connection is taken");
        assert_eq!(link.s.peer_addr().unwrap(), replica.local_addr().unwrap());
        assert!(trickler.join().unwrap(), "the trickler was cut off, not served to its end");
        drop(silent);
    }

    #[test]
    fn a_peer_accepted_near_the_deadline_does_not_stretch_it() {
        let (l, at) = listen("127.0.0.1:0".parse().unwrap()).unwrap();
        let _silent = TcpStream::connect(at).unwrap();
        let t = Instant::now();
        let e = accept_within(&l, Duration::from_millis(200), Duration::from_secs(20), None, GREETING, &mut |_| Ok(true)).err().expect("no replica: an error");
        // Bounded by the join's wait (200 ms), not the handshake's (20 s): the margin is wide on purpose.
        assert!(t.elapsed() < Duration::from_secs(10), "{e} after {:?}", t.elapsed());
    }

    /// A peer that does the replica's handshake and reads what the agent answers: `true` in the flag
    /// once `+FULLRESYNC` arrived (as a replica's sync starts), and in the thread's result whether the
    /// agent closed the connection.
    fn answered_peer(at: SocketAddr) -> (SocketAddr, Arc<AtomicBool>, std::thread::JoinHandle<bool>) {
        let s = replica_handshake(TcpStream::connect(at).unwrap());
        let (me, got) = (s.local_addr().unwrap(), Arc::new(AtomicBool::new(false)));
        let flag = got.clone();
        let reader = std::thread::spawn(move || {
            let (mut s, mut seen, mut buf) = (s, Vec::new(), [0u8; 512]);
            s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
            loop {
                match s.read(&mut buf) {
                    Ok(0) => return true,
                    Ok(n) => {
                        seen.extend_from_slice(&buf[..n]);
                        if seen.windows(GREETING.len()).any(|w| w == GREETING) {
                            flag.store(true, Ordering::SeqCst);
                        }
                    }
                    Err(_) => return false,
                }
            }
        });
        (me, got, reader)
    }

    /// The replica's word as the join asks it ([`sync_started`]): polled until `by`.
    fn started(flag: &AtomicBool, by: Instant) -> Result<bool, Error> {
        while !flag.load(Ordering::SeqCst) {
            if Instant::now() >= by {
                return Ok(false);
            }
            std::thread::sleep(Duration::from_millis(5)); // Polling a flag with a deadline.
        }
        Ok(true)
    }

    #[test]
    fn a_stranger_that_completes_the_replicas_handshake_first_is_closed_and_the_replica_taken() {
        let (l, at) = listen("127.0.0.1:0".parse().unwrap()).unwrap();
        // A local process that won the race to the port and speaks the whole handshake, then the
        // replica: only the replica's sync starts when answered.
        let (_, stranger_answered, stranger) = answered_peer(at);
        let (replica_at, replica_answered, _replica) = answered_peer(at);
        let t = Instant::now();
        let link = accept_within(&l, Duration::from_secs(30), Duration::from_millis(500), None, GREETING, &mut |by| started(&replica_answered, by)).expect("the replica's connection is taken");
        assert_eq!(link.s.peer_addr().unwrap(), replica_at, "the link is the replica's, not the stranger's");
        assert!(stranger.join().unwrap(), "the stranger was closed");
        assert!(stranger_answered.load(Ordering::SeqCst), "a stranger gets +FULLRESYNC, then is closed");
        assert!(t.elapsed() < Duration::from_secs(20), "one wait for the replica's word per stranger: {:?}", t.elapsed());
    }

    #[test]
    fn a_replica_still_showing_an_earlier_sync_vouches_for_no_connection() {
        // The replica's word is stale (it still shows the sync of a connection closed a moment ago):
        // a stranger answered now must not pass on it. Nobody is taken; the wait ends at its deadline.
        let (l, at) = listen("127.0.0.1:0".parse().unwrap()).unwrap();
        let (_, stranger_answered, _stranger) = answered_peer(at);
        let e = accept_within(&l, Duration::from_millis(600), Duration::from_millis(200), None, GREETING, &mut |_| Ok(true)).err().expect("no connection taken");
        assert!(e.to_string().contains("still showed a sync started before"), "{e}");
        assert!(!stranger_answered.load(Ordering::SeqCst), "the stranger was not even answered +FULLRESYNC");
    }

    #[test]
    fn with_only_strangers_the_wait_ends_at_its_deadline_saying_one_was_not_the_replica() {
        let (l, at) = listen("127.0.0.1:0".parse().unwrap()).unwrap();
        let (stranger_at, _, _stranger) = answered_peer(at);
        let t = Instant::now();
        let e = accept_within(&l, Duration::from_millis(600), Duration::from_millis(200), None, GREETING, &mut |by| started(&AtomicBool::new(false), by)).err().expect("no replica: an error");
        let text = e.to_string();
        assert!(text.contains(&format!("{stranger_at} was not the local replica")), "{text}");
        assert!(t.elapsed() < Duration::from_secs(10), "within the join's own wait: {:?}", t.elapsed());
        // A replica that cannot be asked fails the wait with its own error.
        let (l, at) = listen("127.0.0.1:0".parse().unwrap()).unwrap();
        let _peer = answered_peer(at);
        let e = accept_within(&l, Duration::from_secs(30), Duration::from_millis(500), None, GREETING, &mut |_| Err(Error::unavailable(crate::error::Party::Replica, "asked: connection refused")))
            .err()
            .expect("an error");
        assert!(matches!(e, Error::Unavailable { party: crate::error::Party::Replica, .. }), "{e:?}");
    }
}
