//! The agent as its local replica's master: a loopback listener, the handshake, the RDB framing, and
//! a thread that keeps reading what the replica sends back (its ACKs tell how far it has applied,
//! and an unread socket would stall it).

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

/// Accept the replica and run its handshake up to `PSYNC`, over TLS when `tls` is given (a replica
/// with `tls-replication yes`). The first connection to finish the handshake within
/// [`limits::REPLICA_HANDSHAKE_MAX`] is the replica's; one that closes, sends malformed RESP or more
/// than a handshake holds, or does not finish in time is closed and the agent waits on, until
/// `timeout` in all (a port scan or a stray client must not fail the join). A failure of the replica
/// itself (TLS refused, say) is said at the end.
pub fn accept(l: &TcpListener, timeout: Duration, tls: Option<&client::tls::Tls>) -> Result<ReplicaLink, Error> {
    accept_within(l, timeout, limits::REPLICA_HANDSHAKE_MAX, tls)
}

/// [`accept`] with each connection's handshake bounded by `handshake_max` (shorter in tests).
fn accept_within(l: &TcpListener, timeout: Duration, handshake_max: Duration, tls: Option<&client::tls::Tls>) -> Result<ReplicaLink, Error> {
    l.set_nonblocking(true).map_err(|e| Error::Resource(format!("configure listener: {e}")))?;
    let deadline = Instant::now() + timeout;
    // Connections that failed the handshake: how many, and the last one's reason (a count, not a
    // list: a local flood of them must not grow memory).
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
            Ok((s, peer)) => match handshake_with(s, tls, (now + handshake_max).min(deadline)) {
                Ok(link) => {
                    if failed > 0 {
                        tracing::info!(before = failed, "the replica connected after other connections to its port failed the handshake");
                    }
                    return Ok(link);
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
        let link = accept(&l, Duration::from_secs(20), None).expect("the replica's connection is taken");
        assert!(link.capa_eof);
        assert_eq!(link.s.peer_addr().unwrap(), replica.local_addr().unwrap(), "the link is the replica's connection");
    }

    #[test]
    fn without_the_replica_the_wait_ends_and_says_what_failed() {
        let (l, at) = listen("127.0.0.1:0".parse().unwrap()).unwrap();
        drop(TcpStream::connect(at).unwrap());
        let e = accept(&l, Duration::from_millis(300), None).err().expect("no replica: an error");
        let text = e.to_string();
        assert!(text.contains("no connection completed the replica's handshake") && text.contains("1 failed") && text.contains("closed the link during its handshake"), "{text}");
        let (l, _) = listen("127.0.0.1:0".parse().unwrap()).unwrap();
        let text = accept(&l, Duration::from_millis(100), None).err().expect("nobody: an error").to_string();
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
        let link = accept_within(&l, Duration::from_secs(30), Duration::from_millis(300), None).expect("the replica's connection is taken");
        assert_eq!(link.s.peer_addr().unwrap(), replica.local_addr().unwrap());
        assert!(trickler.join().unwrap(), "the trickler was cut off, not served to its end");
        drop(silent);
    }

    #[test]
    fn a_peer_accepted_near_the_deadline_does_not_stretch_it() {
        let (l, at) = listen("127.0.0.1:0".parse().unwrap()).unwrap();
        let _silent = TcpStream::connect(at).unwrap();
        let t = Instant::now();
        let e = accept_within(&l, Duration::from_millis(200), Duration::from_secs(20), None).err().expect("no replica: an error");
        // Bounded by the join's wait (200 ms), not the handshake's (20 s): the margin is wide on purpose.
        assert!(t.elapsed() < Duration::from_secs(10), "{e} after {:?}", t.elapsed());
    }
}
