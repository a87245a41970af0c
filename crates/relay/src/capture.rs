//! Capture: the relay as a replica of the master. One call of [`capture_generation`] is one
//! `PSYNC ? -1`: one fork on the master, one generation. The protocol is
//! [`replication::capture::Capture`]'s; this module only moves bytes between the master's socket,
//! the machine and the generation (the RDB straight into its region, the stream into its log).

use crate::Shared;
use replication::capture::{Capture, CaptureError, Event, Phase, TAIL_LEN};
use snapshot::Generation;
use std::io::{ErrorKind, Read, Write};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use limits::{CAPTURE_TICK as TICK, CONNECT_TIMEOUT, RDB_READ_BYTES_MAX as RDB_READ_MAX, READ_CHUNK_BYTES as READ_CHUNK};

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
    /// The master broke the protocol, refused us, or fell silent.
    #[error("master {master}, {source}")]
    Protocol {
        /// The master.
        master: String,
        /// Cause.
        #[source]
        source: CaptureError,
    },
    /// Storing the snapshot failed.
    #[error(transparent)]
    Snapshot(#[from] snapshot::Error),
    /// No usable source for the capture (`--source`).
    #[error("capture source: {why}")]
    Source {
        /// What was wrong.
        why: String,
    },
    /// The relay is stopping.
    #[error("relay stopping")]
    Stopped,
}

/// Run captures for as long as the relay lives: the first at once, the next ones when an agent asks
/// for a fresh generation. Failures are retried with backoff while agents are waiting.
pub(crate) fn supervise(shared: Arc<Shared>, announce_port: u16) {
    let mut id = 0;
    let mut backoff = limits::CAPTURE_BACKOFF_MIN;
    while !shared.stop.load(Ordering::SeqCst) {
        // Wait for demand.
        {
            let mut cur = shared.lock_current();
            while !shared.demand.load(Ordering::SeqCst) && !shared.stop.load(Ordering::SeqCst) {
                cur = shared.changed.wait_timeout(cur, Duration::from_millis(500)).unwrap_or_else(|p| p.into_inner()).0;
                // A sealed generation stays current (readable) until the next demand; an idle one is
                // let go of here.
                drop(cur);
                shared.release_if_idle();
                cur = shared.lock_current();
            }
        }
        if shared.stop.load(Ordering::SeqCst) {
            break;
        }
        shared.demand.store(false, Ordering::SeqCst);
        id += 1;
        crate::stats::Stats::add(&shared.stats.captures, 1);
        let span = tracing::info_span!("capture", generation = id);
        let _g = span.enter();
        let started = Instant::now();
        match capture_generation(&shared, id, announce_port) {
            Ok(()) => {
                backoff = limits::CAPTURE_BACKOFF_MIN;
                tracing::info!(secs = started.elapsed().as_secs_f64(), "generation sealed; next capture on demand");
            }
            Err(Error::Stopped) => break,
            Err(e) => {
                tracing::error!(error = %e, "capture failed; retrying in {:?}", backoff);
                shared.record_capture_failure(e.to_string());
                std::thread::sleep(backoff); // Backoff between attempts at the master, not synchronization.
                backoff = (backoff * 2).min(limits::CAPTURE_BACKOFF_MAX);
                // With --capture on-start the first generation is wanted even without agents: the
                // relay's job is to be ready. Otherwise waiting agents renew the demand themselves.
                if shared.config.capture == crate::CapturePolicy::OnStart && (id == 1 || shared.lock_current().is_none()) {
                    shared.demand.store(true, Ordering::SeqCst);
                }
            }
        }
    }
}

/// The master's socket and the machine that speaks to it.
struct Link<'a> {
    s: client::tls::Stream,
    stats: &'a crate::stats::Stats,
    master: String,
    machine: Capture,
}

impl Link<'_> {
    fn io(&self, op: &'static str) -> impl FnOnce(std::io::Error) -> Error + '_ {
        move |source| Error::Io { op, master: self.master.clone(), source }
    }
    fn proto(&self) -> impl FnOnce(CaptureError) -> Error + '_ {
        move |source| Error::Protocol { master: self.master.clone(), source }
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
            Ok(0) => return Err(Error::Io { op: phase, master: self.master.clone(), source: ErrorKind::UnexpectedEof.into() }),
            Ok(n) => {
                self.stats.source_io(n as u64);
                self.machine.on_bytes(Instant::now(), &chunk[..n])
            }
            Err(e) if quiet(&e) => self.machine.on_tick(Instant::now()),
            Err(e) => return Err(Error::Io { op: phase, master: self.master.clone(), source: e }),
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
    /// The source's RDB settings to restore once the RDB is complete (`--source-rdb-raw`).
    raw: Option<crate::source::RawRdb>,
    /// The master-change count when this capture started (its history is that master's).
    master_changes: u64,
}

/// One generation: handshake, PSYNC, RDB, then the stream until the log is sealed or the link drops.
fn capture_generation(shared: &Arc<Shared>, id: u64, announce_port: u16) -> Result<(), Error> {
    let cfg = &shared.config;
    // Read together with the address: a switch after this makes the count differ.
    let master_changes = shared.master_changes.load(Ordering::SeqCst);
    let master_now = shared.master();
    let chosen = crate::source::resolve(&cfg.source, &master_now, cfg.master_auth.as_ref(), cfg.tls.as_ref(), &[shared.config.listen.to_string()], CONNECT_TIMEOUT)
        .map_err(|why| Error::Source { why })?;
    tracing::info!(source = %chosen.addr, replica = chosen.replica, why = %chosen.why, "capture source");
    shared.stats.set_source(&chosen.addr);
    // Switched back when the RDB is complete or the capture fails (its Drop), whichever comes first.
    let raw = match (cfg.source_rdb_raw, chosen.replica) {
        (true, true) => Some(crate::source::RawRdb::switch_off(&chosen.addr, cfg.master_auth.as_ref(), cfg.tls.as_ref(), CONNECT_TIMEOUT).map_err(|why| Error::Source { why })?),
        (true, false) => {
            tracing::warn!("--source-rdb-raw: not switching RDB compression off on the master (only ever on a replica)");
            None
        }
        _ => None,
    };
    let master = chosen.addr.clone();
    let t0 = Instant::now();
    let s = client::tls::connect(&master, cfg.tls.as_ref(), CONNECT_TIMEOUT).map_err(|(op, source)| Error::Io { op, master: master.clone(), source })?;
    s.tcp()
        .set_read_timeout(Some(TICK))
        .and_then(|_| s.tcp().set_write_timeout(Some(replication::capture::SILENCE_MAX)))
        .map_err(|source| Error::Io { op: "configure master socket", master: master.clone(), source })?;
    let (machine, first) = Capture::new(cfg.master_auth.as_ref(), announce_port, cfg.snapshot.snapshot_bytes_max, t0);
    let mut link = Link { s, stats: &shared.stats, master, machine };
    let mut run = Run { raw, master_changes, ..Run::default() };
    let result = drive(shared, id, &mut link, &mut run, first, t0);
    if let (Err(e), Some(gen)) = (&result, &run.gen) {
        if run.writer.is_some() {
            gen.fail(&e.to_string());
        } else if gen.state() == snapshot::State::Complete {
            // (Already sealed, by a failover or an idle release, it stays as it was.)
            gen.seal(&format!("master link lost: {e}"));
            crate::stats::Stats::add(&shared.stats.sealed, 1);
        }
    }
    shared.changed.notify_all();
    result
}

/// Feed the machine and do what it says until the generation is sealed (Ok) or anything fails.
fn drive(shared: &Shared, id: u64, link: &mut Link<'_>, run: &mut Run, first: Event, t0: Instant) -> Result<(), Error> {
    let mut events = vec![first];
    loop {
        if shared.stop.load(Ordering::SeqCst) {
            return Err(Error::Stopped);
        }
        for ev in events.drain(..) {
            if apply(shared, id, link, run, ev, t0)? == Applied::Sealed {
                crate::stats::Stats::add(&shared.stats.sealed, 1);
                return Ok(());
            }
        }
        // Sentinel named another master: this capture's history is the old master's.
        if shared.master_changes.load(Ordering::SeqCst) != run.master_changes {
            let why = format!("the master changed to {} (Sentinel)", shared.master());
            if run.writer.is_some() {
                return Err(Error::Source { why });
            }
            if let Some(g) = &run.gen {
                g.seal(&why);
                crate::stats::Stats::add(&shared.stats.sealed, 1);
            }
            return Ok(());
        }
        // Released for idleness (--idle-release-secs): the link to the source goes with it.
        if run.writer.is_none() && (shared.release_if_idle() || run.gen.as_ref().is_some_and(|g| g.state() == snapshot::State::Sealed)) {
            return Ok(());
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
        Event::FullResync { replid, offset } => {
            tracing::info!(%replid, offset, psync_secs = t0.elapsed().as_secs_f64(), "master answered FULLRESYNC (time to answer includes its repl-diskless-sync-delay)");
            run.resync = Some((replid, offset));
        }
        Event::RdbStart { length } => {
            let (replid, offset) = run.resync.clone().expect("the machine reports FULLRESYNC before the RDB");
            tracing::info!(first_byte_secs = t0.elapsed().as_secs_f64(), framing = if length.is_some() { "length" } else { "eof" }, "RDB starts");
            crate::events::rdb_started(id);
            let (gen, writer) = Generation::create(id, replid, offset, length, shared.config.snapshot)?;
            shared.publish(gen.clone());
            run.gen = Some(gen);
            run.writer = Some(writer);
        }
        Event::RdbDone { length } => {
            run.writer.take().expect("a writer until the RDB is done").finish(length);
            run.raw = None; // restores the source's RDB settings
            tracing::info!(bytes = length, secs = t0.elapsed().as_secs_f64(), "snapshot complete");
            crate::events::published(id, length);
        }
        Event::Log { bytes, complete_offset } => {
            let gen = run.gen.as_ref().expect("a generation before the stream");
            if gen.state() == snapshot::State::Sealed {
                return Ok(Applied::Sealed); // by a failover or an idle release, not by its bound
            }
            if gen.append_log(&bytes, complete_offset) {
                gen.seal("stream log reached its bound");
                tracing::info!(log_bytes = gen.log_len(), "stream log bound reached: generation sealed");
                return Ok(Applied::Sealed);
            }
        }
    }
    Ok(Applied::Continue)
}

/// Move RDB payload into the region: first what came with the header, then straight from the socket.
fn receive_rdb(shared: &Shared, link: &mut Link<'_>, writer: &mut snapshot::Writer) -> Result<Vec<Event>, Error> {
    let too_large = || Error::from(snapshot::Error::TooLarge { max: shared.config.snapshot.snapshot_bytes_max });
    let buffered = link.machine.take_buffered_rdb(RDB_READ_MAX);
    let n = if !buffered.is_empty() {
        let spare = writer.spare(buffered.len() as u64);
        if spare.len() < buffered.len() {
            return Err(too_large());
        }
        spare[..buffered.len()].copy_from_slice(&buffered);
        buffered.len()
    } else {
        let spare = writer.spare(link.machine.rdb_read_max().min(RDB_READ_MAX));
        if spare.is_empty() {
            return Err(too_large());
        }
        match link.s.read(spare) {
            Ok(0) => return Err(Error::Io { op: "read RDB (cut off mid-stream)", master: link.master.clone(), source: ErrorKind::UnexpectedEof.into() }),
            Ok(n) => {
                link.stats.source_io(n as u64);
                n
            }
            Err(e) if quiet(&e) => return link.machine.on_tick(Instant::now()).map_err(link.proto()),
            Err(e) => return Err(Error::Io { op: "read RDB", master: link.master.clone(), source: e }),
        }
    };
    writer.commit(n);
    link.machine.on_rdb(Instant::now(), n as u64, writer.tail(TAIL_LEN)).map_err(link.proto())
}
