//! The agent as its local replica's master: a loopback listener, the handshake, the RDB framing, and
//! a thread that keeps reading what the replica sends back (its ACKs tell how far it has applied,
//! and an unread socket would stall it).

use crate::Error;
use replication::framing::{Framing, EOF_MARK_LEN};
use replication::master::{AckReader, Event, Handshake};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The replica's connection to us, after its handshake.
pub struct ReplicaLink {
    /// Write side.
    pub s: TcpStream,
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
    let l = TcpListener::bind(bind).map_err(|e| Error::Local(format!("listen for the replica on {bind}: {e}")))?;
    let a = l.local_addr().map_err(|e| Error::Local(format!("listener address: {e}")))?;
    Ok((l, a))
}

/// Accept the replica and run its handshake up to `PSYNC`; `keepalive` is called while we wait.
pub fn accept(l: &TcpListener, timeout: Duration) -> Result<ReplicaLink, Error> {
    l.set_nonblocking(true).map_err(|e| Error::Local(format!("configure listener: {e}")))?;
    let deadline = Instant::now() + timeout;
    let mut s = loop {
        match l.accept() {
            Ok((s, _)) => break s,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if Instant::now() > deadline {
                    return Err(Error::ReplicaLink(format!("the replica did not connect to the agent within {timeout:?} (see its log)")));
                }
                std::thread::sleep(Duration::from_millis(10)); // Polling a non-blocking accept with a deadline.
            }
            Err(e) => return Err(Error::ReplicaLink(format!("accept the replica: {e}"))),
        }
    };
    s.set_nonblocking(false).and_then(|_| s.set_nodelay(true)).map_err(|e| Error::ReplicaLink(format!("configure replica socket: {e}")))?;
    s.set_read_timeout(Some(limits::IO_TIMEOUT)).map_err(|e| Error::ReplicaLink(format!("configure replica socket: {e}")))?;
    let mut hs = Handshake::default();
    let mut buf = [0u8; limits::READ_CHUNK_BYTES];
    let capa_eof = 'outer: loop {
        let n = s.read(&mut buf).map_err(|e| Error::ReplicaLink(format!("read the replica's handshake: {e}")))?;
        if n == 0 {
            return Err(Error::ReplicaLink("the replica closed the link during its handshake".into()));
        }
        for ev in hs.on_bytes(&buf[..n]).map_err(|e| Error::ReplicaLink(format!("replica handshake: {e}")))? {
            match ev {
                Event::Reply(r) => s.write_all(&r).map_err(|e| Error::ReplicaLink(format!("answer the replica's handshake: {e}")))?,
                Event::Psync { capa_eof, .. } => break 'outer capa_eof,
            }
        }
    };
    s.set_read_timeout(None).map_err(|e| Error::ReplicaLink(format!("configure replica socket: {e}")))?;
    let acked = Arc::new(AtomicU64::new(0));
    let ack_seen = Arc::new(AtomicBool::new(false));
    let closed = Arc::new(AtomicBool::new(false));
    let closed_why = Arc::new(std::sync::Mutex::new(None));
    let mut rs = s.try_clone().map_err(|e| Error::ReplicaLink(format!("clone replica socket: {e}")))?;
    let (a, seen, c, w) = (acked.clone(), ack_seen.clone(), closed.clone(), closed_why.clone());
    std::thread::Builder::new()
        .name("replica-acks".into())
        .spawn(move || {
            let mut r = AckReader::default();
            let mut buf = [0u8; limits::READ_CHUNK_BYTES];
            let why = loop {
                match rs.read(&mut buf) {
                    Ok(0) => break "the replica closed its link to the agent".to_string(),
                    Ok(n) => match r.on_bytes(&buf[..n]) {
                        Ok(Some(off)) => {
                            a.store(off, Ordering::SeqCst);
                            seen.store(true, Ordering::SeqCst);
                        }
                        Ok(None) => {}
                        Err(e) => break format!("the replica sent something unexpected: {e}"),
                    },
                    Err(e) => break format!("read from the replica: {e}"),
                }
            };
            *w.lock().unwrap_or_else(|p| p.into_inner()) = Some(why);
            c.store(true, Ordering::SeqCst);
        })
        .map_err(|e| Error::Local(format!("spawn ack thread: {e}")))?;
    Ok(ReplicaLink { s, capa_eof, acked, ack_seen, closed, closed_why })
}

impl ReplicaLink {
    /// Send bytes to the replica.
    pub fn send(&mut self, bytes: &[u8], what: &str) -> Result<(), Error> {
        self.s.write_all(bytes).map_err(|e| Error::ReplicaLink(format!("send {what} to the replica: {e}{}", self.why_suffix())))
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
            return Err(Error::ReplicaLink(format!("lost the replica{}", self.why_suffix())));
        }
        Ok(())
    }
}

/// A fresh EOF framing with a random 40-character mark.
pub fn eof_framing() -> Result<Framing, Error> {
    let mut raw = [0u8; EOF_MARK_LEN / 2];
    getrandom::getrandom(&mut raw).map_err(|e| Error::Local(format!("randomness for the EOF mark: {e}")))?;
    let mut mark = [0u8; EOF_MARK_LEN];
    for (i, b) in raw.iter().enumerate() {
        let hex = b"0123456789abcdef";
        mark[2 * i] = hex[(b >> 4) as usize];
        mark[2 * i + 1] = hex[(b & 15) as usize];
    }
    Ok(Framing::Eof(mark))
}
