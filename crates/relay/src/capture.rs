//! Capture: the relay as a replica of the master. One call of [`capture_generation`] is one
//! `PSYNC ? -1`: one fork on the master, one generation. The protocol is
//! [`replication::capture::Capture`]'s; this module only moves bytes between the master's socket,
//! the machine and the generation (the RDB straight into its region, the stream into its log).

use crate::generations::{Action, Ended, Failure, Turn};
use crate::shared::Shared;
use crate::source_rdb::Switch;
use replication::capture::{Capture, CaptureError, Event, Phase, TAIL_LEN};
use snapshot::{Appended, Generation};
use std::io::{ErrorKind, Read, Write};
use std::sync::Arc;
use std::time::Instant;
use transport::wire::CaptureFailure;

use limits::{CAPTURE_TICK as TICK, CONNECT_TIMEOUT, RDB_READ_BYTES_MAX as RDB_READ_MAX, READ_CHUNK_BYTES as READ_CHUNK};

/// Why a capture ended.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A socket operation on the link to the master (or the source replica) failed.
    #[error("{op} ({server}): {source}")]
    Io {
        /// What.
        op: &'static str,
        /// The server captured from: `master <addr>` or `source replica <addr>`.
        server: String,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// The server captured from broke the protocol, refused us, or fell silent.
    #[error("{server}, {source}")]
    Protocol {
        /// The server captured from: `master <addr>` or `source replica <addr>`.
        server: String,
        /// Cause.
        #[source]
        source: CaptureError,
    },
    /// Storing the snapshot failed.
    #[error(transparent)]
    Snapshot(#[from] snapshot::Error),
    /// No usable source for the capture (`--source`), or the master changed under it.
    #[error("{why}")]
    Source {
        /// What kind of failure, for the agents waiting.
        kind: CaptureFailure,
        /// What was wrong.
        why: String,
    },
    /// The relay is stopping.
    #[error("relay stopping")]
    Stopped,
}

impl Error {
    /// The kind of failure, as a waiting agent decides on it (only transient ones are retried).
    pub fn kind(&self) -> CaptureFailure {
        use replication::capture::CaptureError as C;
        match self {
            Error::Io { .. } | Error::Protocol { source: C::Silent { .. }, .. } => CaptureFailure::Unreachable,
            Error::Protocol { source: C::Protocol { source: replication::Error::Refused { message, .. }, .. }, .. } if client::ErrorCode::parse(message).is_permission() => CaptureFailure::Permission,
            Error::Snapshot(snapshot::Error::TooLarge { .. }) => CaptureFailure::TooLarge,
            Error::Source { kind, .. } => *kind,
            Error::Protocol { .. } | Error::Snapshot(_) | Error::Stopped => CaptureFailure::Other,
        }
    }
}

/// Run captures for as long as the relay lives, whenever the generations' machine wants one (the
/// first at once with `--capture on-start`, the next ones when an agent asks for a fresh
/// generation). Failures are retried with backoff while a capture is still wanted.
pub(crate) fn supervise(shared: Arc<Shared>, announce_port: u16) {
    let mut backoff = limits::CAPTURE_BACKOFF_MIN;
    while let Some(id) = shared.wait_to_capture() {
        crate::stats::Stats::add(&shared.stats.captures, 1);
        let span = tracing::info_span!("capture", generation = id);
        let _g = span.enter();
        let started = Instant::now();
        match capture_generation(&shared, id, announce_port) {
            Ok(()) => {
                backoff = limits::CAPTURE_BACKOFF_MIN;
                shared.feed(|g| ((), g.capture_ended(id, Ended::Sealed)));
                tracing::info!(secs = started.elapsed().as_secs_f64(), "generation sealed; next capture on demand");
            }
            Err(Error::Stopped) => {
                shared.feed(|g| ((), g.capture_ended(id, Ended::Stopped)));
                break;
            }
            Err(Error::Snapshot(e)) if e.is_store_gone() => {
                // The capture's own write found its file truncated or removed: a store fault like
                // one a reader finds (failed and counted once, waiters told), not a failed capture
                // (the source did nothing wrong); the next agent gets a fresh capture.
                shared.store_failed(id, e.to_string());
                shared.feed(|g| ((), g.capture_ended(id, Ended::Sealed)));
            }
            Err(e) => {
                // Waiting agents are told now; the machine says whether this was a failure at all (the
                // link of a generation already sealed is not) and whether another capture is wanted.
                let kind = e.kind();
                let failure = Failure { kind, why: e.to_string() };
                let failed = shared.feed(|g| {
                    let actions = g.capture_ended(id, Ended::Failed(failure));
                    (actions.contains(&Action::CountFailure), actions)
                });
                if !failed {
                    tracing::info!(error = %e, "the link of a sealed generation ended; next capture on demand");
                    continue;
                }
                tracing::error!(error = %e, kind = %kind, "capture failed; retrying in {:?}", backoff);
                std::thread::sleep(backoff); // Backoff between attempts at the master, not synchronization.
                backoff = (backoff * 2).min(limits::CAPTURE_BACKOFF_MAX);
            }
        }
    }
}

/// The socket to the server captured from (the master or a replica) and the machine that speaks to it.
struct Link<'a> {
    s: client::tls::Stream,
    stats: &'a crate::stats::Stats,
    /// `master <addr>` or `source replica <addr>`, for the log and errors.
    server: String,
    /// The source is the master itself: its FULLRESYNC is a `sync_full` on it.
    from_master: bool,
    machine: Capture,
}

impl Link<'_> {
    fn io(&self, op: &'static str) -> impl FnOnce(std::io::Error) -> Error + '_ {
        move |source| Error::Io { op, server: self.server.clone(), source }
    }
    fn proto(&self) -> impl FnOnce(CaptureError) -> Error + '_ {
        move |source| Error::Protocol { server: self.server.clone(), source }
    }
    fn send(&mut self, bytes: &[u8], op: &'static str) -> Result<(), Error> {
        let r = self.s.write_all(bytes);
        r.map_err(self.io(op))
    }
    /// One read from the master into the machine (or a tick when the read timed out).
    fn pump(&mut self) -> Result<Vec<Event>, Error> {
        let mut chunk = [0u8; READ_CHUNK];
        let phase = self.machine.phase().name();
        let r = match self.s.read(&mut chunk) {
            Ok(0) => return Err(Error::Io { op: phase, server: self.server.clone(), source: ErrorKind::UnexpectedEof.into() }),
            Ok(n) => {
                self.stats.source_io(n as u64);
                self.machine.on_bytes(Instant::now(), &chunk[..n])
            }
            Err(e) if quiet(&e) => self.machine.on_tick(Instant::now()),
            Err(e) => return Err(Error::Io { op: phase, server: self.server.clone(), source: e }),
        };
        r.map_err(self.proto())
    }
}

/// A read that timed out (a tick), not a failure.
fn quiet(e: &std::io::Error) -> bool {
    matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted)
}

/// What one capture has made so far.
#[derive(Default)]
struct Run {
    /// The master's `+FULLRESYNC`.
    resync: Option<(replication::ReplId, u64)>,
    /// The generation, once the RDB started.
    gen: Option<Arc<Generation>>,
    /// Its writer, until the RDB is complete.
    writer: Option<snapshot::Writer>,
    /// The source's RDB settings to restore once the RDB starts (`--source-rdb auto|raw`).
    raw: Option<crate::source::RawRdb>,
    /// The master-change count when this capture started (its history is that master's).
    master_changes: u64,
    /// When the capture last ticked the generations' machine (idle release).
    ticked: Option<Instant>,
    /// The RDB's length, once complete.
    rdb_bytes: u64,
    /// The log's length, counted as it is appended (not asked of the generation: that takes its
    /// lock at every read from the source).
    logged: u64,
    /// The log's length when the machine was last asked whether it outweighs the RDB.
    log_asked: u64,
}

/// One generation: handshake, PSYNC, RDB, then the stream until the log is sealed or the link drops.
fn capture_generation(shared: &Arc<Shared>, id: u64, announce_port: u16) -> Result<(), Error> {
    let cfg = &shared.config;
    // Read together with the address: a switch after this makes the count differ.
    let (master_now, master_changes) = shared.master_now();
    let chosen = crate::source::resolve(&cfg.source, &master_now, cfg.master_auth.as_ref(), cfg.tls.as_ref(), &[shared.config.listen.to_string()], CONNECT_TIMEOUT)
        .map_err(|u| Error::Source { kind: u.kind, why: u.why })?;
    tracing::info!(source = %chosen.addr, replica = chosen.replica, why = %chosen.why, "capture source");
    shared.stats.set_source(&chosen.addr);
    // Switched back when the RDB starts or the capture fails (its Drop), whichever comes first.
    let raw = match cfg.source_rdb.switch(cfg.snapshot.codec, chosen.replica) {
        Switch::Leave => None,
        Switch::Must => Some(crate::source::RawRdb::switch_off(&chosen.addr, cfg.master_auth.as_ref(), cfg.tls.as_ref(), CONNECT_TIMEOUT).map_err(|u| Error::Source { kind: u.kind, why: u.why })?),
        // A source whose ACL refuses CONFIG still serves: with LZF, the blocks compress less.
        Switch::Try => match crate::source::RawRdb::switch_off(&chosen.addr, cfg.master_auth.as_ref(), cfg.tls.as_ref(), CONNECT_TIMEOUT) {
            Ok(raw) => Some(raw),
            Err(u) => {
                tracing::warn!(source = %chosen.addr, error = %u.why, "could not ask the source replica for a raw RDB (--source-rdb auto); capturing it as configured");
                None
            }
        },
    };
    let server = if chosen.replica { format!("source replica {}", chosen.addr) } else { format!("master {}", chosen.addr) };
    let t0 = Instant::now();
    let s = client::tls::connect(&chosen.addr, cfg.tls.as_ref(), CONNECT_TIMEOUT).map_err(|(op, source)| Error::Io { op, server: server.clone(), source })?;
    s.tcp().set_read_timeout(Some(TICK)).and_then(|_| s.tcp().set_write_timeout(Some(replication::capture::SILENCE_MAX))).map_err(|source| Error::Io {
        op: "configure the socket",
        server: server.clone(),
        source,
    })?;
    let (machine, first) = Capture::new(cfg.master_auth.as_ref(), announce_port, cfg.announce_version.as_deref(), cfg.snapshot.snapshot_bytes_max, t0);
    let mut link = Link { s, stats: &shared.stats, server, from_master: !chosen.replica, machine };
    let mut run = Run { raw, master_changes, ..Run::default() };
    // A failure fails (mid-RDB) or seals (streaming) the generation: the machine decides, once
    // `supervise` reports the end.
    drive(shared, id, &mut link, &mut run, first, t0)
}

/// Feed the machine and do what it says until the generation is sealed (Ok) or anything fails.
fn drive(shared: &Shared, id: u64, link: &mut Link<'_>, run: &mut Run, first: Event, t0: Instant) -> Result<(), Error> {
    let mut events = vec![first];
    loop {
        if run.writer.is_none() && run.ticked.is_none_or(|t| t.elapsed() >= limits::IDLE_RELEASE_TICK) {
            // Idle release is decided on a tick (not on every turn: a tick walks the whole machine).
            run.ticked = Some(Instant::now());
            shared.idle_tick();
        }
        // One look at the machine per turn (its lock, uncontended but for a moment per agent event).
        match shared.capture_turn(id, run.master_changes, run.writer.is_none() && run.gen.is_some()) {
            Turn::Go => {}
            Turn::Stop => return Err(Error::Stopped),
            Turn::MasterChanged => {
                tracing::info!(master = %shared.master(), "the master changed (Sentinel): this capture ends");
                return Ok(());
            }
            // Sealed (by an idle release, a failover or a renewal): the link to the source goes with it.
            Turn::Sealed => return Ok(()),
        }
        for ev in events.drain(..) {
            if apply(shared, id, link, run, ev, t0)? == Applied::Sealed {
                return Ok(());
            }
        }
        events = match link.machine.phase() {
            Phase::Rdb => receive_rdb(shared, link, run.writer.as_mut().expect("a writer during the RDB"))?,
            _ => link.pump()?,
        };
    }
}

#[derive(PartialEq, Eq)]
enum Applied {
    Continue,
    Sealed,
}

fn apply(shared: &Shared, id: u64, link: &mut Link<'_>, run: &mut Run, ev: Event, t0: Instant) -> Result<Applied, Error> {
    match ev {
        Event::Send(bytes, op) => link.send(&bytes, op)?,
        Event::Source { server, announced } => match (&server, &announced) {
            (Some(s), Some(v)) => tracing::info!(server = %s, announced = %v, "{} is {s}: announcing a replica version (REPLCONF version), which picks the RDB version it writes", link.server),
            (Some(s), None) if shared.config.announce_version.is_some() => {
                tracing::warn!(server = %s, "--announce-version is for Valkey sources: {s} has no REPLCONF version, none sent")
            }
            (Some(s), None) => tracing::debug!(server = %s, "{} is {s}", link.server),
            (None, Some(v)) => tracing::warn!(announced = %v, "{} did not say what it is (INFO server refused or not understood): announcing --announce-version", link.server),
            // Routine for a Redis master whose relay user has only +psync +replconf +ping: not a warning.
            (None, None) => tracing::info!(
                "{} did not say what it is (INFO server refused or not understood): no version announced (only Valkey sources use one; for a Valkey 9 source give --announce-version)",
                link.server
            ),
        },
        Event::FullResync { replid, offset } => {
            tracing::info!(%replid, offset, psync_secs = t0.elapsed().as_secs_f64(), "{} answered FULLRESYNC (time to answer includes its repl-diskless-sync-delay)", link.server);
            run.resync = Some((replid, offset));
            if link.from_master {
                crate::stats::Stats::add(&shared.stats.master_full_syncs, 1);
            }
        }
        Event::RdbStart { length } => {
            let (replid, offset) = run.resync.clone().expect("the machine reports FULLRESYNC before the RDB");
            tracing::info!(first_byte_secs = t0.elapsed().as_secs_f64(), framing = if length.is_some() { "length" } else { "eof" }, "RDB starts");
            crate::events::rdb_started(id);
            // The source's RDB settings go back now, not when the RDB is complete: its first bytes
            // come from the child that writes it (diskless: the EOF mark is the child's first write;
            // on disk: the file is written before its length is sent), and that child keeps the
            // settings it forked with. A relay killed mid-capture then leaves nothing switched off.
            run.raw = None;
            let (gen, writer) = Generation::create(id, replid, offset, length, shared.config.snapshot, shared.store.as_ref())?;
            shared.publish(gen.clone());
            run.gen = Some(gen);
            run.writer = Some(writer);
        }
        Event::RdbDone { length } => {
            run.writer.take().expect("a writer until the RDB is done").finish(length)?;
            run.rdb_bytes = length;
            shared.rdb_complete(id);
            tracing::info!(bytes = length, secs = t0.elapsed().as_secs_f64(), "snapshot complete");
            crate::events::published(id, length);
        }
        Event::Log { bytes, complete_offset } => {
            let gen = run.gen.as_ref().expect("a generation before the stream");
            // A store's write error ends the capture: the machine seals a generation whose RDB is
            // complete (its log as far as it was written stays good).
            match gen.append_log(&bytes, complete_offset)? {
                Appended::Taken => {
                    run.logged += bytes.len() as u64;
                    let logged = run.logged;
                    if logged - run.log_asked >= limits::LOG_OUTWEIGHS_CHECK_BYTES {
                        run.log_asked = logged;
                        let rdb = run.rdb_bytes;
                        let actions = shared.feed(|g| {
                            let a = g.log_grew(id, logged, rdb);
                            (!a.is_empty(), a)
                        });
                        if actions {
                            tracing::info!(log_bytes = logged, rdb_bytes = rdb, "the stream log outweighs the snapshot (--log-max-percent): sealed, the next join gets a fresh capture");
                            return Ok(Applied::Sealed);
                        }
                    }
                }
                Appended::AtBound => {
                    shared.feed(|g| ((), g.log_bound(id)));
                    return Ok(Applied::Sealed);
                }
                // Sealed by a failover, an idle release or a renewal, not by its bound.
                Appended::Refused => return Ok(Applied::Sealed),
            }
        }
    }
    Ok(Applied::Continue)
}

/// Move RDB payload into the region: first what came with the header, then straight from the socket.
fn receive_rdb(shared: &Shared, link: &mut Link<'_>, writer: &mut snapshot::Writer) -> Result<Vec<Event>, Error> {
    let too_large = || Error::from(snapshot::Error::TooLarge { max: shared.config.snapshot.snapshot_bytes_max });
    // What came with the header is taken only as far as the writer has room: a buffered writer
    // offers at most a block (and the EOF mark) at a time, which may be less than is buffered.
    let room = writer.spare(RDB_READ_MAX).len() as u64;
    if room == 0 {
        return Err(too_large());
    }
    let buffered = link.machine.take_buffered_rdb(room);
    let n = if !buffered.is_empty() {
        writer.spare(buffered.len() as u64)[..buffered.len()].copy_from_slice(&buffered);
        buffered.len()
    } else {
        let spare = writer.spare(link.machine.rdb_read_max().min(RDB_READ_MAX));
        if spare.is_empty() {
            return Err(too_large());
        }
        match link.s.read(spare) {
            Ok(0) => return Err(Error::Io { op: "read RDB (cut off mid-stream)", server: link.server.clone(), source: ErrorKind::UnexpectedEof.into() }),
            Ok(n) => {
                link.stats.source_io(n as u64);
                n
            }
            Err(e) if quiet(&e) => {
                // A quiet socket must not keep packed blocks from readers: place what the pool has done.
                writer.poll()?;
                return link.machine.on_tick(Instant::now()).map_err(link.proto());
            }
            Err(e) => return Err(Error::Io { op: "read RDB", server: link.server.clone(), source: e }),
        }
    };
    writer.commit(n)?;
    link.machine.on_rdb(Instant::now(), n as u64, writer.tail(TAIL_LEN)).map_err(link.proto())
}

#[cfg(test)]
mod tests {
    use super::*;
    use replication::capture::CaptureError as C;

    fn refused(message: &str) -> Error {
        Error::Protocol { server: "master m:1".into(), source: C::Protocol { phase: "handshake", source: replication::Error::Refused { step: "PSYNC", message: message.into() } } }
    }

    #[test]
    fn failures_are_told_to_agents_by_kind() {
        let down = Error::Io { op: "connect", server: "master m:1".into(), source: ErrorKind::ConnectionRefused.into() };
        assert_eq!(down.kind(), CaptureFailure::Unreachable);
        assert_eq!(Error::Protocol { server: "master m:1".into(), source: C::Silent { phase: "RDB" } }.kind(), CaptureFailure::Unreachable);
        assert_eq!(refused("NOPERM this user has no permissions to run the 'psync' command").kind(), CaptureFailure::Permission);
        assert_eq!(refused("WRONGPASS invalid username-password pair").kind(), CaptureFailure::Permission);
        assert_eq!(refused("ERR something else").kind(), CaptureFailure::Other);
        assert_eq!(Error::from(snapshot::Error::TooLarge { max: 1 }).kind(), CaptureFailure::TooLarge);
        let source = Error::Source { kind: CaptureFailure::Source, why: "snapshot source r:1 is not a replica of the master (role: master)".into() };
        assert_eq!(source.kind(), CaptureFailure::Source);
        assert_eq!(source.to_string(), "snapshot source r:1 is not a replica of the master (role: master)");
        assert!(down.to_string().contains("(master m:1)"), "{down}");
    }
}
