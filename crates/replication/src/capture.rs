//! Capture: the replica side of one full synchronization, as a state machine. It is what the relay
//! runs against the real master (handshake, `PSYNC ? -1`, the RDB in either framing, the stream
//! after it, ACKs), with no socket and no clock: the driver feeds it bytes and the time, and does
//! what the returned [`Event`]s say.
//!
//! ```text
//! Handshake(step) ──replies OK──► AwaitPsync ──+FULLRESYNC──► AwaitRdbHeader ──$len / $EOF:mark──► Rdb ──payload done──► Streaming
//! ```
//!
//! The RDB payload is the one part the machine does not carry: the driver reads it straight into the
//! snapshot's memory (one copy, socket → region) and reports how much arrived with [`Capture::on_rdb`],
//! so the machine can tell where the payload ends. Everything else (handshake replies, keep-alive
//! newlines, the stream) goes through [`Capture::on_bytes`].
//!
//! Why the ACK cadence: a replica acknowledges its offset every second. A master that sends an
//! EOF-framed RDB waits for the replica's first ACK before it streams, and may receive that ACK
//! before it has noticed its RDB child exited — it then starts the stream only at the next ACK. So
//! until the stream flows we acknowledge every 100 ms, then every second.

use crate::framing::{self, Framing, Payload, Progress, EOF_MARK_LEN};
use crate::replica::{self, Auth, Expects, PsyncReply, Step};
use crate::stream::Scanner;
use crate::{Error, ReplId};
use resp::Limits;
use std::time::Instant;

pub use crate::HANDSHAKE_LIMITS;
pub use limits::{ACK_EVERY, ACK_EVERY_UNTIL_STREAM, MASTER_SILENCE_MAX as SILENCE_MAX};

/// Bounds on the `INFO server` reply (a page of text, longer than any handshake line).
const INFO_LIMITS: Limits = Limits { bulk_len_max: 64 * 1024, ..HANDSHAKE_LIMITS };

/// The version to announce to a source (`REPLCONF version`): a Valkey source chooses the RDB version it
/// writes from it (Valkey 9 writes RDB 80 for a replica of its version, RDB 11 — without hash-field
/// TTLs — for one that says nothing), so it is told its own version, or `version_override`
/// (`--announce-version`: the oldest version of a mixed fleet). Redis refuses the option: nothing is
/// announced to it. A source that did not say what it is gets the override, if any.
pub fn announced(server: Option<&crate::rdb::Server>, version_override: Option<&str>) -> Option<String> {
    match server {
        Some(s) if s.flavour == "valkey" => {
            let (a, b, c) = s.version;
            Some(version_override.map_or_else(|| format!("{a}.{b}.{c}"), str::to_string))
        }
        Some(_) => None,
        None => version_override.map(str::to_string),
    }
}

/// Where the capture stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Waiting for the reply to handshake step `n`.
    Handshake(usize),
    /// `PSYNC ? -1` sent; only keep-alive newlines arrive until the master has forked.
    AwaitPsync,
    /// `+FULLRESYNC` received; waiting for `$<len>` or `$EOF:<mark>`.
    AwaitRdbHeader,
    /// Receiving the RDB payload (into the driver's region).
    Rdb,
    /// Following the command stream after the RDB.
    Streaming,
}

impl Phase {
    /// The phase's name, for errors and logs.
    pub fn name(self) -> &'static str {
        match self {
            Phase::Handshake(_) => "handshake",
            Phase::AwaitPsync => "wait for PSYNC reply",
            Phase::AwaitRdbHeader => "wait for RDB",
            Phase::Rdb => "RDB transfer",
            Phase::Streaming => "follow stream",
        }
    }
}

/// What the driver must do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// Write these bytes to the master; the string names them for errors.
    Send(Vec<u8>, &'static str),
    /// What the source said it is (`INFO server`), and the version announced to it, if any (see
    /// [`announced`]).
    Source {
        /// Its flavour and version (`None`: not known — INFO refused or not understood).
        server: Option<crate::rdb::Server>,
        /// The version announced with `REPLCONF version`.
        announced: Option<String>,
    },
    /// The master accepted `PSYNC`: the snapshot is at `offset` of history `replid`.
    FullResync {
        /// The master's replication ID.
        replid: ReplId,
        /// The snapshot's offset.
        offset: u64,
    },
    /// The RDB payload starts now; its length when the framing says it (`$<len>`), else `None`.
    RdbStart {
        /// The payload length, if announced.
        length: Option<u64>,
    },
    /// The payload is complete: `length` RDB bytes (the EOF mark, if any, is not part of them).
    RdbDone {
        /// RDB bytes.
        length: u64,
    },
    /// Stream bytes to log as they came; commands are complete up to `complete_offset`.
    Log {
        /// The bytes, unchanged (offsets must stay byte-exact with the master's backlog).
        bytes: Vec<u8>,
        /// Offset of the end of the last complete command.
        complete_offset: u64,
    },
}

/// Why a capture failed (the driver adds the master's address).
#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    /// The master broke the protocol or refused us.
    #[error("{phase}: {source}")]
    Protocol {
        /// What we were doing.
        phase: &'static str,
        /// Cause.
        #[source]
        source: Error,
    },
    /// The master was silent for longer than [`SILENCE_MAX`].
    #[error("silent for {} s during {phase}", SILENCE_MAX.as_secs())]
    Silent {
        /// What we were waiting for.
        phase: &'static str,
    },
}

/// One capture: one `PSYNC ? -1`, one snapshot, then the stream.
#[derive(Debug)]
pub struct Capture {
    phase: Phase,
    steps: Vec<Step>,
    /// `--announce-version`, when given.
    version_override: Option<String>,
    snapshot_bytes_max: u64,
    /// Bytes received but not yet consumed (replies, keep-alives, what came with the RDB header).
    buf: Vec<u8>,
    payload: Option<Payload>,
    scanner: Option<Scanner>,
    offset: u64,
    last_io: Instant,
    last_ack: Instant,
    streaming: bool,
}

impl Capture {
    /// Start a capture at `now`; returns the machine and the first bytes to send (the first
    /// handshake step). `snapshot_bytes_max` bounds an announced RDB length; `version_override` is the
    /// version to announce to a Valkey source instead of its own ([`announced`]).
    pub fn new(auth: Option<&Auth>, announce_port: u16, version_override: Option<&str>, snapshot_bytes_max: u64, now: Instant) -> (Capture, Event) {
        let steps = replica::handshake(auth, announce_port);
        let first = Event::Send(steps[0].command.clone(), "send handshake");
        let c = Capture {
            phase: Phase::Handshake(0),
            steps,
            version_override: version_override.map(str::to_string),
            snapshot_bytes_max,
            buf: Vec::new(),
            payload: None,
            scanner: None,
            offset: 0,
            last_io: now,
            last_ack: now,
            streaming: false,
        };
        (c, first)
    }

    /// The current phase.
    pub fn phase(&self) -> Phase {
        self.phase
    }

    /// In [`Phase::Rdb`]: the most payload bytes the driver may read now (it must not read the
    /// stream after a length-framed payload into the region).
    pub fn rdb_read_max(&self) -> u64 {
        self.payload.as_ref().map(Payload::next_read_max).unwrap_or(0)
    }

    /// In [`Phase::Rdb`]: payload bytes that arrived with the header, at most `max`, for the driver
    /// to copy into the region before it reads the socket again (then report them with `on_rdb`).
    pub fn take_buffered_rdb(&mut self, max: u64) -> Vec<u8> {
        let n = (self.buf.len() as u64).min(max).min(self.rdb_read_max()) as usize;
        self.buf.drain(..n).collect()
    }

    fn proto(&self) -> impl Fn(Error) -> CaptureError {
        let phase = self.phase.name();
        move |source| CaptureError::Protocol { phase, source }
    }

    /// Bytes from the master (not RDB payload: see [`Capture::on_rdb`]).
    pub fn on_bytes(&mut self, now: Instant, bytes: &[u8]) -> Result<Vec<Event>, CaptureError> {
        if !bytes.is_empty() {
            self.last_io = now;
        }
        self.buf.extend_from_slice(bytes);
        let mut out = Vec::new();
        while self.step(now, &mut out)? {}
        out.extend(self.on_tick(now)?);
        Ok(out)
    }

    /// Consume what the current phase can from the buffer; true if it moved on (call again).
    fn step(&mut self, now: Instant, out: &mut Vec<Event>) -> Result<bool, CaptureError> {
        match self.phase {
            Phase::Handshake(i) => {
                let limits = if self.steps[i].expects == Expects::ServerInfo { INFO_LIMITS } else { HANDSHAKE_LIMITS };
                let reply = match resp::parse(&self.buf, &limits) {
                    Ok((f, used)) => {
                        self.buf.drain(..used);
                        f
                    }
                    Err(resp::Error::Incomplete) => return Ok(false),
                    Err(e) => return Err((self.proto())(e.into())),
                };
                if self.steps[i].expects == Expects::ServerInfo {
                    let server = match &reply {
                        resp::Frame::Bulk(text) => crate::rdb::Server::from_info(&String::from_utf8_lossy(text)),
                        _ => None,
                    };
                    let version = announced(server.as_ref(), self.version_override.as_deref());
                    if let Some(v) = &version {
                        self.steps.push(replica::announce_version(v));
                    }
                    out.push(Event::Source { server, announced: version });
                } else {
                    replica::check_reply(&self.steps[i], &reply).map_err(self.proto())?;
                }
                if let Some(next) = self.steps.get(i + 1) {
                    out.push(Event::Send(next.command.clone(), "send handshake"));
                    self.phase = Phase::Handshake(i + 1);
                } else {
                    out.push(Event::Send(replica::psync_full(), "send PSYNC"));
                    self.phase = Phase::AwaitPsync;
                }
                Ok(true)
            }
            Phase::AwaitPsync => {
                let Some((reply, used)) = replica::parse_psync_reply(&self.buf, &HANDSHAKE_LIMITS).map_err(self.proto())? else { return Ok(false) };
                self.buf.drain(..used);
                match reply {
                    PsyncReply::FullResync { replid, offset } => {
                        self.offset = offset;
                        out.push(Event::FullResync { replid, offset });
                        self.phase = Phase::AwaitRdbHeader;
                        Ok(true)
                    }
                    PsyncReply::Continue(_) => Err((self.proto())(Error::Protocol("master answered PSYNC ? -1 with +CONTINUE".into()))),
                }
            }
            Phase::AwaitRdbHeader => {
                let Some((f, used)) = framing::parse_header(&self.buf, self.snapshot_bytes_max).map_err(self.proto())? else { return Ok(false) };
                self.buf.drain(..used);
                out.push(Event::RdbStart { length: if let Framing::Length(n) = f { Some(n) } else { None } });
                let payload = Payload::new(f);
                let empty = payload.next_read_max() == 0;
                self.payload = Some(payload);
                self.phase = Phase::Rdb;
                if empty {
                    // `$0`: nothing to read; the payload is already complete.
                    out.extend(self.finish_rdb(0));
                    return Ok(true);
                }
                // Whatever else is buffered is payload: the driver takes it with take_buffered_rdb.
                Ok(false)
            }
            Phase::Rdb => Ok(false),
            Phase::Streaming if self.buf.is_empty() => Ok(false),
            Phase::Streaming => {
                self.streaming = true;
                let bytes = std::mem::take(&mut self.buf);
                let scanner = self.scanner.as_mut().expect("a scanner while streaming");
                let scanned = scanner.feed(&bytes).map_err(|source| CaptureError::Protocol { phase: "replication stream", source })?;
                out.push(Event::Log { bytes, complete_offset: scanned.complete_offset });
                if scanned.getack {
                    out.push(Event::Send(replica::ack(scanned.complete_offset), "answer GETACK"));
                    self.last_ack = now;
                }
                Ok(false)
            }
        }
    }

    /// `n` payload bytes were written into the region, whose last bytes (at least the EOF mark's
    /// length when there are that many) are `tail`.
    pub fn on_rdb(&mut self, now: Instant, n: u64, tail: &[u8]) -> Result<Vec<Event>, CaptureError> {
        assert_eq!(self.phase, Phase::Rdb, "RDB bytes outside the RDB phase");
        if n > 0 {
            self.last_io = now;
        }
        let payload = self.payload.as_mut().expect("a payload in the RDB phase");
        match payload.received(n, tail) {
            Progress::More(_) => Ok(Vec::new()),
            Progress::Done(len) => {
                let mut out = self.finish_rdb(len);
                // What followed a length-framed payload in the same read is stream.
                out.extend(self.on_bytes(now, &[])?);
                Ok(out)
            }
        }
    }

    fn finish_rdb(&mut self, length: u64) -> Vec<Event> {
        let eof = matches!(self.payload.as_ref().map(Payload::framing), Some(Framing::Eof(_)));
        self.payload = None;
        self.scanner = Some(Scanner::new(self.offset, Limits::default()));
        self.phase = Phase::Streaming;
        let mut out = vec![Event::RdbDone { length }];
        // After an EOF-framed RDB the master waits for our first ACK before it streams.
        if eof {
            out.push(Event::Send(replica::ack(self.offset), "send first ACK"));
        }
        out
    }

    /// Nothing arrived for a while (a read timed out): acknowledge when due, give up on a master
    /// silent for too long.
    pub fn on_tick(&mut self, now: Instant) -> Result<Vec<Event>, CaptureError> {
        if now.saturating_duration_since(self.last_io) > SILENCE_MAX {
            return Err(CaptureError::Silent { phase: self.phase.name() });
        }
        let Some(scanner) = &self.scanner else { return Ok(Vec::new()) };
        let every = if self.streaming { ACK_EVERY } else { ACK_EVERY_UNTIL_STREAM };
        if now.saturating_duration_since(self.last_ack) >= every {
            self.last_ack = now;
            return Ok(vec![Event::Send(replica::ack(scanner.complete_offset()), "send ACK")]);
        }
        Ok(Vec::new())
    }
}

/// The EOF mark's length, for drivers that keep the region's tail.
pub const TAIL_LEN: usize = EOF_MARK_LEN;

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const ID: &str = "6c879f910fada50e6bee517c0d0ea8a0b46c6e0b";

    fn sends(ev: &[Event]) -> Vec<String> {
        ev.iter().filter_map(|e| if let Event::Send(b, _) = e { Some(String::from_utf8_lossy(b).into_owned()) } else { None }).collect()
    }

    /// Drive a capture through the handshake to `AwaitRdbHeader`.
    fn to_fullresync(now: Instant, auth: Option<&Auth>) -> Capture {
        let (mut c, first) = Capture::new(auth, 7400, None, 1 << 30, now);
        let Event::Send(b, _) = first else { panic!() };
        assert!(String::from_utf8_lossy(&b).contains(if auth.is_some() { "AUTH" } else { "PING" }));
        // AUTH?, PING, INFO server (answered +OK here: a source that does not say what it is), the two REPLCONFs.
        let steps = if auth.is_some() { 5 } else { 4 };
        for i in 0..steps {
            let ev = c.on_bytes(now, b"+OK\r\n").unwrap();
            assert_eq!(sends(&ev).len(), 1, "one command per reply (step {i})");
        }
        assert_eq!(c.phase(), Phase::AwaitPsync);
        let ev = c.on_bytes(now, format!("\n\n+FULLRESYNC {ID} 1000\r\n").as_bytes()).unwrap();
        assert!(matches!(&ev[0], Event::FullResync { offset: 1000, .. }));
        c
    }

    /// An `INFO server` answer as a server sends it.
    fn info(text: &str) -> Vec<u8> {
        format!("${}\r\n{text}\r\n", text.len()).into_bytes()
    }

    #[test]
    fn handshake_sends_one_step_per_reply_and_psync_last() {
        let now = Instant::now();
        let (mut c, _) = Capture::new(None, 7400, None, 1 << 30, now);
        let s0 = sends(&c.on_bytes(now, b"+PONG\r\n").unwrap());
        assert!(s0[0].contains("INFO") && s0[0].contains("server"));
        let s1 = sends(&c.on_bytes(now, &info("# Server\r\nredis_version:7.0.15\r\n")).unwrap());
        assert!(s1[0].contains("listening-port") && s1[0].contains("7400"));
        let s2 = sends(&c.on_bytes(now, b"+OK\r\n").unwrap());
        assert!(s2[0].contains("capa") && s2[0].contains("eof") && s2[0].contains("psync2"));
        let s3 = sends(&c.on_bytes(now, b"+OK\r").unwrap());
        assert!(s3.is_empty(), "a reply split across reads waits for its end");
        let s3 = sends(&c.on_bytes(now, b"\n").unwrap());
        assert!(s3[0].contains("PSYNC") && s3[0].contains('?') && s3[0].contains("-1"));
    }

    #[test]
    fn a_valkey_source_is_told_a_version_and_a_redis_source_is_not() {
        let now = Instant::now();
        let valkey = info("# Server\r\nredis_version:7.2.4\r\nvalkey_version:8.1.8\r\n");
        for (override_, want) in [(None, "8.1.8"), (Some("8.0.0"), "8.0.0")] {
            let (mut c, _) = Capture::new(None, 7400, override_, 1 << 30, now);
            sends(&c.on_bytes(now, b"+PONG\r\n").unwrap());
            let ev = c.on_bytes(now, &valkey).unwrap();
            assert!(ev.iter().any(|e| matches!(e, Event::Source { announced: Some(v), .. } if v == want)), "{ev:?}");
        }
        // Step by step: INFO, listening-port, capa, version, then PSYNC.
        let (mut c, _) = Capture::new(None, 7400, None, 1 << 30, now);
        sends(&c.on_bytes(now, b"+PONG\r\n").unwrap());
        sends(&c.on_bytes(now, &valkey).unwrap());
        sends(&c.on_bytes(now, b"+OK\r\n").unwrap());
        let s = sends(&c.on_bytes(now, b"+OK\r\n").unwrap());
        assert!(s[0].contains("REPLCONF") && s[0].contains("version") && s[0].contains("8.1.8"), "{s:?}");
        assert!(sends(&c.on_bytes(now, b"+OK\r\n").unwrap())[0].contains("PSYNC"));
        // Redis: nothing announced, even with an override; an INFO refused (NOPERM): the override only.
        let (mut c, _) = Capture::new(None, 7400, Some("8.0.0"), 1 << 30, now);
        sends(&c.on_bytes(now, b"+PONG\r\n").unwrap());
        let ev = c.on_bytes(now, &info("redis_version:8.2.3\r\n")).unwrap();
        assert!(ev.iter().any(|e| matches!(e, Event::Source { announced: None, server: Some(_) })), "{ev:?}");
        let (mut c, _) = Capture::new(None, 7400, Some("8.0.0"), 1 << 30, now);
        sends(&c.on_bytes(now, b"+PONG\r\n").unwrap());
        let ev = c.on_bytes(now, b"-NOPERM this user has no permissions to run the 'info' command\r\n").unwrap();
        assert!(ev.iter().any(|e| matches!(e, Event::Source { announced: Some(v), server: None } if v == "8.0.0")), "{ev:?}");
        // A source that refuses the option fails the capture, naming the step.
        let (mut c, _) = Capture::new(None, 7400, None, 1 << 30, now);
        sends(&c.on_bytes(now, b"+PONG\r\n").unwrap());
        sends(&c.on_bytes(now, &valkey).unwrap());
        let e = c.on_bytes(now, b"+OK\r\n+OK\r\n-ERR Unrecognized REPLCONF option: version\r\n").unwrap_err();
        assert!(e.to_string().contains("REPLCONF version"), "{e}");
    }

    #[test]
    fn refused_handshake_and_continue_are_errors() {
        let now = Instant::now();
        let (mut c, _) = Capture::new(Some(&Auth { user: None, password: "x".into() }), 1, None, 1 << 30, now);
        let e = c.on_bytes(now, b"-WRONGPASS invalid\r\n").unwrap_err();
        assert!(e.to_string().contains("AUTH refused"), "{e}");
        let (mut c, _) = Capture::new(None, 1, None, 1 << 30, now);
        for _ in 0..4 {
            c.on_bytes(now, b"+OK\r\n").unwrap();
        }
        let e = c.on_bytes(now, b"+CONTINUE\r\n").unwrap_err();
        assert!(e.to_string().contains("CONTINUE"), "{e}");
    }

    #[test]
    fn length_framing_keeps_what_follows_as_stream() {
        let now = Instant::now();
        let mut c = to_fullresync(now, None);
        let set = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n";
        let mut wire = b"$5\r\nREDIS".to_vec();
        wire.extend_from_slice(set);
        let ev = c.on_bytes(now, &wire).unwrap();
        assert_eq!(ev, vec![Event::RdbStart { length: Some(5) }]);
        assert_eq!(c.rdb_read_max(), 5);
        let got = c.take_buffered_rdb(u64::MAX);
        assert_eq!(got, b"REDIS", "only the payload is handed out as RDB");
        let ev = c.on_rdb(now, got.len() as u64, &got).unwrap();
        assert_eq!(ev[0], Event::RdbDone { length: 5 });
        assert!(!sends(&ev).iter().any(|s| s.contains("ACK")), "no first ACK needed after a length-framed RDB");
        assert_eq!(ev[1], Event::Log { bytes: set.to_vec(), complete_offset: 1000 + set.len() as u64 });
        assert_eq!(c.phase(), Phase::Streaming);
    }

    #[test]
    fn eof_framing_ends_at_the_mark_and_acks_first() {
        let now = Instant::now();
        let mut c = to_fullresync(now, None);
        let mark = [b'm'; 40];
        let mut wire = b"$EOF:".to_vec();
        wire.extend_from_slice(&mark);
        wire.extend_from_slice(b"\r\nREDIS00");
        let ev = c.on_bytes(now, &wire).unwrap();
        assert_eq!(ev, vec![Event::RdbStart { length: None }]);
        let mut region = c.take_buffered_rdb(u64::MAX);
        assert_eq!(region, b"REDIS00");
        assert!(c.on_rdb(now, region.len() as u64, &region).unwrap().is_empty());
        region.extend_from_slice(&mark);
        let tail = &region[region.len() - 40..];
        let ev = c.on_rdb(now, 40, tail).unwrap();
        assert_eq!(ev[0], Event::RdbDone { length: 7 });
        assert!(sends(&ev)[0].contains("ACK") && sends(&ev)[0].contains("1000"), "first ACK at the snapshot offset");
    }

    #[test]
    fn oversized_rdb_is_refused_before_any_byte_is_stored() {
        let now = Instant::now();
        let (mut c, _) = Capture::new(None, 1, None, 100, now);
        for _ in 0..4 {
            c.on_bytes(now, b"+OK\r\n").unwrap();
        }
        c.on_bytes(now, format!("+FULLRESYNC {ID} 0\r\n").as_bytes()).unwrap();
        assert!(c.on_bytes(now, b"$101\r\n").is_err());
    }

    #[test]
    fn acks_every_100ms_until_the_stream_flows_then_every_second_and_answers_getack() {
        let t0 = Instant::now();
        let mut c = to_fullresync(t0, None);
        c.on_bytes(t0, b"$0\r\n").unwrap();
        assert_eq!(c.phase(), Phase::Streaming);
        assert!(c.on_tick(t0 + Duration::from_millis(50)).unwrap().is_empty());
        assert_eq!(sends(&c.on_tick(t0 + Duration::from_millis(100)).unwrap()).len(), 1);
        let t1 = t0 + Duration::from_millis(150);
        let getack = b"*3\r\n$8\r\nREPLCONF\r\n$6\r\nGETACK\r\n$1\r\n*\r\n";
        let ev = c.on_bytes(t1, getack).unwrap();
        let s = sends(&ev);
        assert_eq!(s.len(), 1, "{s:?}");
        assert!(s[0].contains(&(1000 + getack.len()).to_string()), "GETACK answered with the offset after it: {s:?}");
        assert!(c.on_tick(t1 + Duration::from_millis(500)).unwrap().is_empty(), "streaming: one ACK a second");
        assert_eq!(sends(&c.on_tick(t1 + Duration::from_secs(1)).unwrap()).len(), 1);
    }

    #[test]
    fn a_silent_master_is_given_up_on() {
        let t0 = Instant::now();
        let (mut c, _) = Capture::new(None, 1, None, 1 << 30, t0);
        assert!(c.on_tick(t0 + SILENCE_MAX).is_ok());
        let e = c.on_tick(t0 + SILENCE_MAX + Duration::from_millis(1)).unwrap_err();
        assert!(matches!(e, CaptureError::Silent { phase: "handshake" }));
    }

    #[test]
    fn garbage_in_the_stream_is_a_protocol_error() {
        let now = Instant::now();
        let mut c = to_fullresync(now, None);
        c.on_bytes(now, b"$0\r\n").unwrap();
        let e = c.on_bytes(now, b"+OK\r\n").unwrap_err();
        assert!(matches!(e, CaptureError::Protocol { phase: "replication stream", .. }), "{e}");
    }
}
