//! A fresh enough snapshot, as a file in a server's data directory: what a staged start loads. Shared
//! by the staged join of a cluster node (`staged::cluster_node`) and `fastrepl stage` (`staged::stage`).
//!
//! The relay's generation is checked against the master (same history, and its offset still in the
//! master's backlog with room for the time the start needs: [`staging::freshness`]), pulled into an
//! unnamed file in the directory, its RDB aux fields checked (a server takes its replication ID and
//! offset from them), and judged again with the pull's real duration. A snapshot too old is renewed
//! by the relay ([`transport::renew`]), a bounded number of times.

use crate::config::PullConfig;
use crate::error::check_cancel;
use crate::error::Error;
use crate::error::Party;
use crate::master::MasterRepl;
use crate::phase::JoinPhase;
use crate::pull::pipeline;
use crate::pull::progress;
use crate::pull::select;
use crate::staged::staging::{self, Backlog, Freshness};
use client::{Client, Info};
use endpoint::Endpoint;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;
use transport::{Credentials, TransportKind};

/// Most times a stale snapshot is renewed before giving up ([`limits::SNAPSHOT_RENEWALS_MAX`]).
pub const RENEWALS_MAX: u32 = limits::SNAPSHOT_RENEWALS_MAX;
/// The shortest window the master's write rate is measured over.
const RATE_WINDOW_MIN: std::time::Duration = limits::WRITE_RATE_WINDOW_MIN;
/// Bytes of the RDB's head kept to read its aux fields.
const HEAD_BYTES: usize = limits::RDB_HEAD_BYTES;

/// Where the snapshot comes from and how it is pulled.
pub struct Source<'a> {
    /// The relay.
    pub relay: &'a Endpoint,
    /// Its token (and TLS).
    pub token: &'a Credentials,
    /// How to pull (`--transport`, `--readers`, `--window-blocks`).
    pub pull: &'a PullConfig,
    /// Set from outside to stop.
    pub cancel: &'a AtomicBool,
    /// Progress for the display and the metrics.
    pub live: &'a crate::report::Live,
}

/// What the pull did.
pub struct Pulled {
    /// The pipeline's account.
    pub stats: pipeline::Stats,
    /// The transport used.
    pub transport: TransportKind,
    /// Its detail and why it was chosen.
    pub detail: String,
    /// Seconds of the pull.
    pub secs: f64,
    /// Seconds from the start to the first byte.
    pub first_byte: f64,
}

/// A snapshot in the directory, not yet placed.
pub struct Fetched {
    /// The file.
    pub file: Staged,
    /// The pull's account.
    pub pulled: Pulled,
    /// The generation.
    pub desc: snapshot::Descriptor,
    /// Backlog headroom when judged fresh: bytes, and seconds at the write rate.
    pub headroom: (u64, Option<f64>),
    /// Times the relay was asked for a newer snapshot.
    pub renewals: u32,
}

/// Pull the relay's generation into `dir`, fresh enough for `master`'s backlog; `loads(rdb_version)`
/// refuses a version the server cannot load.
pub fn pull_fresh(src: &Source<'_>, master: &mut Client, dir: &Path, mut loads: impl FnMut(u32) -> Result<(), Error>) -> Result<Fetched, Error> {
    let t0 = Instant::now();
    let mut renewals = 0;
    loop {
        check_cancel(src.cancel)?;
        src.live.set_phase(JoinPhase::WaitingForCapture);
        let attached = progress::attach(src.relay, src.token, limits::GENERATION_WAIT_MAX)?;
        let v = attached.progress.wait_until(limits::GENERATION_WAIT_MAX, |v| v.desc.rdb_version.is_some());
        v.check()?;
        let desc = v.desc.clone();
        let rdb_version = desc.rdb_version.ok_or_else(|| Error::Timeout("the relay has not received the RDB header".into()))?;
        loads(rdb_version)?;
        let repl = master.info("replication").map_err(Error::master)?;
        if !MasterRepl::from_info(&repl).knows(&desc.replid) {
            return Err(Error::Changed(format!("the master's replication ID is no longer the snapshot's ({}): it restarted or failed over", desc.replid)));
        }
        // Judged before the pull (a snapshot already out of the backlog is renewed now), then after
        // it, with its real duration and the write rate over it.
        let before = (Instant::now(), crate::master::repl_offset(&repl));
        let length = desc.length.unwrap_or(desc.published);
        if let Err(why) = judge(&repl, desc.offset, 0.0, staging::needed_secs(length, length, 0.0)) {
            renew(src, &desc, &repl, &why, &mut renewals)?;
            continue;
        }
        let (transport, why) = select::select(src.pull.transport, src.relay, src.token, &attached.offered)?;
        tracing::info!(transport = %transport.kind(), reason = %why, generation = desc.generation, offset = desc.offset, dir = %dir.display(), "pulling the snapshot into the server's directory");
        let mut file = Staged::create(dir)?;
        src.live.set_phase(JoinPhase::Pulling);
        crate::events::phase(JoinPhase::Pulling);
        let pull = pipeline::Pull {
            transport: transport.as_ref(),
            progress: &attached.progress,
            readers: crate::pull::pipeline::readers(src.pull.readers, transport.as_ref()),
            window: crate::pull::pipeline::window(src.pull.window_blocks, crate::pull::pipeline::Membership::Alone),
            cancel: src.cancel,
            peering: None,
            counters: Some(&src.live.sources),
        };
        let pulled_at = Instant::now();
        let mut head: Vec<u8> = Vec::new();
        let stats = pipeline::pull(&pull, &mut |bytes| {
            if head.len() < HEAD_BYTES {
                head.extend_from_slice(&bytes[..bytes.len().min(HEAD_BYTES - head.len())]);
            }
            src.live.rdb_bytes_sent.fetch_add(bytes.len() as u64, Ordering::Relaxed);
            file.write(bytes)
        })?;
        file.sync()?;
        let secs = pulled_at.elapsed().as_secs_f64();
        check_head(&head, &desc)?;
        // The write rate over at least a second (a pull of a small snapshot takes milliseconds:
        // too short a window to say anything about the rate).
        if let Some(left) = RATE_WINDOW_MIN.checked_sub(before.0.elapsed()) {
            std::thread::sleep(left); // A measurement interval, not a synchronization.
        }
        let repl = master.info("replication").map_err(Error::master)?;
        let rate = crate::master::repl_offset(&repl).saturating_sub(before.1) as f64 / before.0.elapsed().as_secs_f64();
        let headroom = match judge(&repl, desc.offset, rate, staging::needed_secs(stats.bytes, 0, 0.0)) {
            Ok(h) => h,
            Err(why) => {
                renew(src, &desc, &repl, &why, &mut renewals)?;
                continue;
            }
        };
        src.live.rdb_bytes_total.store(stats.bytes, Ordering::Relaxed);
        let detail = transport.detail().map(|d| format!("{d}; {why}")).unwrap_or(why);
        let first_byte = stats.first_byte.map(|f| f.duration_since(t0).as_secs_f64()).unwrap_or(0.0);
        let pulled = Pulled { stats, transport: transport.kind(), detail, secs, first_byte };
        return Ok(Fetched { file, pulled, desc, headroom, renewals });
    }
}

/// The RDB's aux fields must carry the snapshot's replication ID and offset.
fn check_head(head: &[u8], desc: &snapshot::Descriptor) -> Result<(), Error> {
    match crate::staged::rdb_aux::replication(head) {
        Ok(Some((id, off))) if id == desc.replid && off == desc.offset => Ok(()),
        Ok(Some((id, off))) => Err(Error::protocol(Party::Relay, format!("the snapshot's RDB says replication {id}:{off}, its descriptor {}:{}", desc.replid, desc.offset))),
        Ok(None) => Err(Error::Incompatible("the snapshot's RDB carries no replication ID and offset (repl-id, repl-offset aux fields): a server started on it could not resync partially".into())),
        Err(e) => Err(Error::protocol(Party::Relay, format!("the snapshot's RDB head: {e}"))),
    }
}

/// The headroom of a snapshot at `offset`, or why it is too old.
fn judge(repl: &Info, offset: u64, rate: f64, needed: f64) -> Result<(u64, Option<f64>), String> {
    let backlog = Backlog::from_info(|k| repl.num(k)).ok_or("the master does not report its backlog (repl_backlog_* in INFO replication)")?;
    match staging::freshness(&backlog, offset, rate, needed) {
        Freshness::Fresh { headroom_bytes, headroom_secs } => Ok((headroom_bytes, headroom_secs)),
        Freshness::Stale(why) => Err(why),
    }
}

/// Ask the relay for a snapshot newer than the master's offset now.
fn renew(src: &Source<'_>, desc: &snapshot::Descriptor, repl: &Info, why: &str, renewals: &mut u32) -> Result<(), Error> {
    *renewals += 1;
    if *renewals > RENEWALS_MAX {
        return Err(Error::Changed(format!("the snapshot was too old for the master's backlog {RENEWALS_MAX} times ({why}): raise the master's repl-backlog-size, or stage while it writes less")));
    }
    let min_offset = crate::master::repl_offset(repl);
    let answer = transport::renew::renew(src.relay, src.token, desc.generation, min_offset, limits::COMMAND_TIMEOUT).map_err(Error::relay)?;
    tracing::warn!(generation = desc.generation, offset = desc.offset, min_offset, ?answer, "the snapshot is too old to stage ({why}); the relay takes a newer one");
    Ok(())
}

/// The snapshot being written into the node's directory: an unnamed file (`O_TMPFILE`) that becomes
/// the RDB file only when placed, so an agent that dies leaves nothing behind; where the filesystem
/// has no unnamed files, a hidden name removed on drop.
pub struct Staged {
    file: std::io::BufWriter<std::fs::File>,
    dir: PathBuf,
    named: Option<PathBuf>,
}

impl Staged {
    /// An unnamed file in `dir` (a hidden named one where the filesystem has none).
    pub fn create(dir: &Path) -> Result<Staged, Error> {
        use std::os::unix::fs::OpenOptionsExt;
        let unnamed = std::fs::OpenOptions::new().write(true).mode(0o644).custom_flags(libc::O_TMPFILE).open(dir);
        let (file, named) = match unnamed {
            Ok(f) => (f, None),
            Err(e) if matches!(e.raw_os_error(), Some(libc::EOPNOTSUPP) | Some(libc::EISDIR) | Some(libc::EINVAL)) => {
                let p = dir.join(format!(".fastrepl-staging-{}.rdb", std::process::id()));
                let f = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o644).open(&p).map_err(|e| Error::Resource(format!("create {} : {e}", p.display())))?;
                (f, Some(p))
            }
            Err(e) => return Err(Error::Precondition(format!("the node's data directory {} is not writable by the agent: {e} (use --replica-dir for its path as this host sees it)", dir.display()))),
        };
        Ok(Staged { file: std::io::BufWriter::with_capacity(1 << 20, file), dir: dir.to_path_buf(), named })
    }

    /// Append bytes.
    pub fn write(&mut self, b: &[u8]) -> Result<(), Error> {
        self.file.write_all(b).map_err(|e| Error::Resource(format!("write the snapshot into {}: {e}", self.dir.display())))
    }

    /// Flush and sync the data to disk.
    pub fn sync(&mut self) -> Result<(), Error> {
        self.file.flush().and_then(|_| self.file.get_ref().sync_all()).map_err(|e| Error::Resource(format!("sync the snapshot in {}: {e}", self.dir.display())))
    }

    /// Make it the file at `target` (atomically replacing nothing: the caller moved any file aside),
    /// and sync the directory so the name survives a crash.
    pub fn place(mut self, target: &Path) -> Result<(), Error> {
        let fail = |what: &str, e: std::io::Error| Error::Resource(format!("{what} {}: {e}", target.display()));
        match self.named.take() {
            Some(p) => std::fs::rename(&p, target).map_err(|e| fail("rename the snapshot to", e))?,
            None => {
                // Link the unnamed file under a hidden name, then rename it over the target: linkat
                // cannot replace a name.
                let tmp = self.dir.join(format!(".fastrepl-staging-{}.rdb", std::process::id()));
                let proc_path = std::ffi::CString::new(format!("/proc/self/fd/{}", self.file.get_ref().as_raw_fd())).expect("no NUL");
                let tmp_c = std::ffi::CString::new(tmp.as_os_str().as_encoded_bytes()).map_err(|_| Error::Internal("a NUL in the directory's path".into()))?;
                // SAFETY: both paths are valid NUL-terminated strings that outlive the call; linkat
                // reads them and touches no memory of ours otherwise.
                let r = unsafe { libc::linkat(libc::AT_FDCWD, proc_path.as_ptr(), libc::AT_FDCWD, tmp_c.as_ptr(), libc::AT_SYMLINK_FOLLOW) };
                if r != 0 {
                    return Err(fail("name the snapshot for", std::io::Error::last_os_error()));
                }
                std::fs::rename(&tmp, target).map_err(|e| fail("rename the snapshot to", e))?;
            }
        }
        std::fs::File::open(&self.dir).and_then(|d| d.sync_all()).map_err(|e| fail("sync the directory of", e))
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        if let Some(p) = &self.named {
            let _ = std::fs::remove_file(p); // Not placed: the hidden file goes.
        }
    }
}
