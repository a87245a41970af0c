//! Capture: the relay as a replica of the master. One call of [`capture_generation`] is one
//! `PSYNC ? -1`: one fork on the master, one generation.

use crate::Shared;
use replication::framing::{self, Framing, Payload, Progress, EOF_MARK_LEN};
use replication::replica::{self, PsyncReply};
use replication::stream::Scanner;
use resp::Limits;
use snapshot::Generation;
use std::io::{ErrorKind, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Read timeout on the master link: the granularity of ACK ticks.
const TICK: Duration = Duration::from_millis(200);
/// How long the master may stay silent before we give up on it (its `repl-timeout` default).
const SILENCE_MAX: Duration = Duration::from_secs(60);
/// How often a replica acknowledges its offset.
const ACK_EVERY: Duration = Duration::from_secs(1);
/// How often we acknowledge until the stream starts: a master may receive our first ACK before it
/// has noticed its RDB child exited, and then starts the stream only at the next ACK.
const ACK_EVERY_UNTIL_STREAM: Duration = Duration::from_millis(100);

/// Why a capture ended.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A socket operation on the master link failed.
    #[error("{op} (master {master}): {source}")]
    Io {
        /// What.
        op: &'static str,
        /// The master.
        master: String,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// The master broke the protocol or refused us.
    #[error("master {master}, {phase}: {source}")]
    Protocol {
        /// The master.
        master: String,
        /// What we were doing.
        phase: &'static str,
        /// Cause.
        #[source]
        source: replication::Error,
    },
    /// The master was silent too long.
    #[error("master {master} silent for {secs} s during {phase}")]
    Silent {
        /// The master.
        master: String,
        /// Seconds.
        secs: u64,
        /// Phase.
        phase: &'static str,
    },
    /// Storing the snapshot failed.
    #[error(transparent)]
    Snapshot(#[from] snapshot::Error),
    /// The relay is stopping.
    #[error("relay stopping")]
    Stopped,
}

/// Run captures for as long as the relay lives: the first at once, the next ones when an agent asks
/// for a fresh generation. Failures are retried with backoff while agents are waiting.
pub(crate) fn supervise(shared: Arc<Shared>, announce_port: u16) {
    let mut id = 0;
    let mut backoff = Duration::from_millis(500);
    while !shared.stop.load(Ordering::SeqCst) {
        // Wait for demand.
        {
            let mut cur = shared.lock_current();
            while !shared.demand.load(Ordering::SeqCst) && !shared.stop.load(Ordering::SeqCst) {
                cur = shared.changed.wait_timeout(cur, Duration::from_millis(500)).unwrap_or_else(|p| p.into_inner()).0;
            }
        }
        if shared.stop.load(Ordering::SeqCst) {
            break;
        }
        shared.demand.store(false, Ordering::SeqCst);
        id += 1;
        let span = tracing::info_span!("capture", generation = id);
        let _g = span.enter();
        let started = Instant::now();
        match capture_generation(&shared, id, announce_port) {
            Ok(()) => {
                backoff = Duration::from_millis(500);
                tracing::info!(secs = started.elapsed().as_secs_f64(), "generation sealed; next capture on demand");
            }
            Err(Error::Stopped) => break,
            Err(e) => {
                tracing::error!(error = %e, "capture failed; retrying in {:?}", backoff);
                shared.changed.notify_all();
                std::thread::sleep(backoff); // Backoff between attempts at the master, not synchronization.
                backoff = (backoff * 2).min(Duration::from_secs(30));
                // The first generation is wanted even without agents: the relay's job is to be ready.
                if id == 1 || shared.lock_current().is_none() {
                    shared.demand.store(true, Ordering::SeqCst);
                }
            }
        }
    }
}

struct Link {
    s: TcpStream,
    master: String,
    buf: Vec<u8>,
    last_io: Instant,
}

impl Link {
    fn io(&self, op: &'static str) -> impl FnOnce(std::io::Error) -> Error + '_ {
        move |source| Error::Io { op, master: self.master.clone(), source }
    }
    fn proto(&self, phase: &'static str) -> impl FnOnce(replication::Error) -> Error + '_ {
        move |source| Error::Protocol { master: self.master.clone(), phase, source }
    }
    fn send(&mut self, bytes: &[u8], op: &'static str) -> Result<(), Error> {
        let r = self.s.write_all(bytes);
        r.map_err(self.io(op))
    }
    /// Read more bytes into `buf`; `Ok(false)` on a quiet tick.
    fn fill(&mut self, phase: &'static str) -> Result<bool, Error> {
        let mut chunk = [0u8; 64 * 1024];
        match self.s.read(&mut chunk) {
            Ok(0) => Err(Error::Io { op: phase, master: self.master.clone(), source: ErrorKind::UnexpectedEof.into() }),
            Ok(n) => {
                self.buf.extend_from_slice(&chunk[..n]);
                self.last_io = Instant::now();
                Ok(true)
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted) => {
                if self.last_io.elapsed() > SILENCE_MAX {
                    return Err(Error::Silent { master: self.master.clone(), secs: SILENCE_MAX.as_secs(), phase });
                }
                Ok(false)
            }
            Err(e) => Err(Error::Io { op: phase, master: self.master.clone(), source: e }),
        }
    }
}

/// One generation: handshake, PSYNC, RDB, then the stream until the log is sealed or the link drops.
fn capture_generation(shared: &Arc<Shared>, id: u64, announce_port: u16) -> Result<(), Error> {
    let cfg = &shared.config;
    let master = cfg.master.clone();
    let addr = master
        .to_socket_addrs()
        .map_err(|source| Error::Io { op: "resolve master", master: master.clone(), source })?
        .next()
        .ok_or_else(|| Error::Io { op: "resolve master", master: master.clone(), source: ErrorKind::NotFound.into() })?;
    let t0 = Instant::now();
    let s = TcpStream::connect_timeout(&addr, Duration::from_secs(10))
        .map_err(|source| Error::Io { op: "connect to master", master: master.clone(), source })?;
    s.set_read_timeout(Some(TICK)).and_then(|_| s.set_write_timeout(Some(SILENCE_MAX))).and_then(|_| s.set_nodelay(true)).map_err(|source| Error::Io {
        op: "configure master socket",
        master: master.clone(),
        source,
    })?;
    let mut link = Link { s, master, buf: Vec::new(), last_io: Instant::now() };
    let limits = Limits { bulk_len_max: 4096, array_len_max: 16, depth_max: 1, line_len_max: 4096 };

    // Handshake: one command, one reply at a time.
    for step in replica::handshake(cfg.master_auth.as_ref(), announce_port) {
        link.send(&step.command, "send handshake")?;
        let reply = loop {
            match resp::parse(&link.buf, &limits) {
                Ok((f, used)) => {
                    link.buf.drain(..used);
                    break f;
                }
                Err(resp::Error::Incomplete) => {
                    link.fill("handshake")?;
                }
                Err(e) => return Err((link.proto("handshake"))(e.into())),
            }
        };
        replica::check_reply(&step, &reply).map_err(link.proto("handshake"))?;
    }

    // PSYNC ? -1: the master forks (after its repl-diskless-sync-delay) and answers.
    link.send(&replica::psync_full(), "send PSYNC")?;
    let (replid, offset) = loop {
        // Until the reply, only newlines arrive (one a second while the master waits to fork).
        if let Some((reply, used)) = replica::parse_psync_reply(&link.buf, &limits).map_err(link.proto("PSYNC reply"))? {
            link.buf.drain(..used);
            match reply {
                PsyncReply::FullResync { replid, offset } => break (replid, offset),
                PsyncReply::Continue(_) => {
                    return Err((link.proto("PSYNC reply"))(replication::Error::Protocol("master answered PSYNC ? -1 with +CONTINUE".into())))
                }
            }
        }
        link.fill("wait for PSYNC reply")?;
    };
    let psync_secs = t0.elapsed().as_secs_f64();
    let framing = loop {
        if let Some((f, used)) = framing::parse_header(&link.buf, cfg.snapshot.snapshot_bytes_max).map_err(link.proto("RDB header"))? {
            link.buf.drain(..used);
            break f;
        }
        link.fill("wait for RDB")?;
    };
    let first_byte_secs = t0.elapsed().as_secs_f64();
    let length = match framing {
        Framing::Length(n) => Some(n),
        Framing::Eof(_) => None,
    };
    tracing::info!(
        %replid, offset, psync_secs, first_byte_secs,
        framing = if length.is_some() { "length" } else { "eof" },
        "master answered FULLRESYNC (time to answer includes its repl-diskless-sync-delay)"
    );
    let (gen, mut writer) = Generation::create(id, replid, offset, length, cfg.snapshot)?;
    shared.publish(gen.clone());
    let result = receive(shared, &mut link, &mut writer, framing);
    let mut writer = Some(writer);
    let result = result.and_then(|len| {
        writer.take().expect("writer").finish(len);
        tracing::info!(bytes = len, secs = t0.elapsed().as_secs_f64(), "snapshot complete");
        stream(shared, &mut link, &gen, offset, length.is_none())
    });
    match &result {
        Ok(()) => {}
        Err(e) if writer.is_some() => gen.fail(&e.to_string()),
        Err(e) => gen.seal(&format!("master link lost: {e}")),
    }
    shared.changed.notify_all();
    result
}

/// Receive the RDB payload straight into the region; returns its length.
fn receive(shared: &Shared, link: &mut Link, writer: &mut snapshot::Writer, framing: Framing) -> Result<u64, Error> {
    let mut payload = Payload::new(framing);
    // Bytes that came with the header first.
    let leftover = std::mem::take(&mut link.buf);
    let mut rest = &leftover[..];
    loop {
        if shared.stop.load(Ordering::SeqCst) {
            return Err(Error::Stopped);
        }
        let max = payload.next_read_max();
        let n = if !rest.is_empty() {
            let take = (rest.len() as u64).min(max) as usize;
            let spare = writer.spare(take as u64);
            if spare.len() < take {
                return Err(snapshot::Error::TooLarge { max: shared.config.snapshot.snapshot_bytes_max }.into());
            }
            spare[..take].copy_from_slice(&rest[..take]);
            rest = &rest[take..];
            take
        } else {
            let spare = writer.spare(max.min(4 << 20));
            if spare.is_empty() {
                return Err(snapshot::Error::TooLarge { max: shared.config.snapshot.snapshot_bytes_max }.into());
            }
            match link.s.read(spare) {
                Ok(0) => {
                    return Err(Error::Io { op: "read RDB (cut off mid-stream)", master: link.master.clone(), source: ErrorKind::UnexpectedEof.into() })
                }
                Ok(n) => {
                    link.last_io = Instant::now();
                    n
                }
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted) => {
                    if link.last_io.elapsed() > SILENCE_MAX {
                        return Err(Error::Silent { master: link.master.clone(), secs: SILENCE_MAX.as_secs(), phase: "RDB transfer" });
                    }
                    continue;
                }
                Err(e) => return Err(Error::Io { op: "read RDB", master: link.master.clone(), source: e }),
            }
        };
        writer.commit(n);
        if let Progress::Done(len) = payload.received(n as u64, writer.tail(EOF_MARK_LEN)) {
            // With the length framing the stream may follow at once: keep what came after the payload.
            link.buf.extend_from_slice(rest);
            return Ok(len);
        }
    }
}

/// Follow the master's stream into the generation's log, answering GETACK and acknowledging every
/// second, until the log reaches its bound (Ok) or the link drops (Err).
fn stream(shared: &Shared, link: &mut Link, gen: &Generation, offset: u64, eof_framing: bool) -> Result<(), Error> {
    let mut scanner = Scanner::new(offset, Limits::default());
    // After an EOF-framed RDB the master waits for our first ACK before it streams.
    if eof_framing {
        link.send(&replica::ack(offset), "send first ACK")?;
    }
    let mut last_ack = Instant::now();
    let mut streaming = false;
    loop {
        if shared.stop.load(Ordering::SeqCst) {
            return Err(Error::Stopped);
        }
        // Bytes may be buffered already (what followed a length-framed RDB).
        let got = !link.buf.is_empty() || link.fill("follow stream")?;
        if got {
            streaming = true;
            let bytes = std::mem::take(&mut link.buf);
            let scanned = scanner.feed(&bytes).map_err(link.proto("replication stream"))?;
            let full = gen.append_log(&bytes, scanned.complete_offset);
            if scanned.getack {
                link.send(&replica::ack(scanned.complete_offset), "answer GETACK")?;
                last_ack = Instant::now();
            }
            if full {
                gen.seal("stream log reached its bound");
                tracing::info!(log_bytes = gen.log_len(), "stream log bound reached: generation sealed");
                return Ok(());
            }
        }
        if last_ack.elapsed() >= if streaming { ACK_EVERY } else { ACK_EVERY_UNTIL_STREAM } {
            link.send(&replica::ack(scanner.complete_offset()), "send ACK")?;
            last_ack = Instant::now();
        }
    }
}
