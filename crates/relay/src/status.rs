//! The relay's status taken now: the counters of [`crate::stats`], the machine's view and every
//! generation held, as one [`Status`] (what `fastrepl status` prints and `--metrics` exposes).

use crate::generations::SealReason;
use crate::shared::Shared;
use crate::stats::{get, GenerationStatus, Status};
use admission::Refusal;

/// Take the status of `shared` now.
pub(crate) fn status(shared: &Shared, listen: std::net::SocketAddr) -> Status {
    let s = &shared.stats;
    let current = shared.current_id();
    // One look at the generations held, for their lines and the memory and disk they take.
    let held = shared.held();
    let mut generations: Vec<GenerationStatus> = held
        .iter()
        .map(|g| {
            let (d, _) = g.descriptor(usize::MAX);
            let (blocks, blocks_total) = g.blocks();
            GenerationStatus {
                id: d.generation,
                state: format!("{:?}", d.state).to_lowercase(),
                current: Some(d.generation) == current,
                replid: d.replid,
                offset: d.offset,
                rdb_bytes: d.published,
                rdb_stored_bytes: d.stored,
                rdb_length: d.length,
                rdb_version: d.rdb_version,
                blocks,
                blocks_total,
                log_bytes: g.log_len(),
                age_seconds: g.age().as_secs_f64(),
                agents: shared.swarms.members(d.generation) as u64,
                error: d.error,
            }
        })
        .collect();
    generations.sort_by_key(|g| g.id);
    let last_capture_error = shared.capture_failures().1.map(|f| f.why);
    let disk = shared.store.as_ref().and_then(|s| disk(s.dir()));
    Status {
        schema_version: transport::wire::status::STATUS_SCHEMA_VERSION,
        ok: true,
        version: env!("CARGO_PKG_VERSION").into(),
        listen: listen.to_string(),
        ucx_listeners: shared.ucx_listeners().iter().map(|a| a.to_string()).collect(),
        master: shared.master(),
        source_policy: shared.config.source.to_string(),
        source: s.source(),
        capture_policy: shared.config.capture.to_string(),
        uptime_seconds: s.uptime_secs(),
        captures_total: get(&s.captures),
        capture_failures_total: get(&s.capture_failures),
        master_full_syncs_total: get(&s.master_full_syncs),
        last_capture_error,
        generations_sealed_total: get(&s.sealed),
        generations_sealed_by_reason_total: SealReason::ALL.iter().map(|r| (r.name().to_string(), get(&s.sealed_by[r.index()]))).collect(),
        generations_released_idle_total: get(&s.released_idle),
        source_last_io_seconds: s.source_silent_secs(),
        source_bytes_total: get(&s.source_bytes),
        held_bytes: generations.iter().map(|g| g.rdb_stored_bytes).sum(),
        generations,
        connections: shared.connections() as u64,
        connections_max: shared.config.connections_max as u64,
        connections_refused_total: shared.gate.refused(Refusal::Full),
        connections_unauthenticated: shared.gate.strangers() as u64,
        connections_refused_by_kind_total: Refusal::ALL.iter().map(|k| (k.name().to_string(), shared.gate.refused(*k))).collect(),
        agents_attached: get(&s.agents_attached),
        agents_attached_total: get(&s.agents_attached_total),
        served_bytes_total: s.served_by_transport(),
        log_served_bytes_total: get(&s.log_bytes_served),
        attaches_total: s.attaches_by_transport(),
        ucx_side_restarts_total: shared.ucx_side_restarts(),
        errors_total: s.errors_by_kind(),
        resident_memory_bytes: rss_bytes(),
        memory_unreclaimable_bytes: anonymous_bytes() + held.iter().map(|g| g.region().memory_bytes()).sum::<u64>(),
        memory_bound_bytes: shared.store.as_ref().map(|_| memory_bound(shared, held.iter().map(|g| g.blocks().0).sum())),
        store: shared.store.as_ref().map(|s| s.dir().display().to_string()),
        store_bytes: held.iter().map(|g| g.store_bytes()).sum(),
        store_faults_total: get(&s.store_faults),
        store_size_bytes: disk.map(|d| d.size),
        store_free_bytes: disk.map(|d| d.free),
        log_max_bytes: shared.config.snapshot.log_bytes_max,
        snapshot_max_bytes: shared.config.snapshot.snapshot_bytes_max,
        joins_total: s.joins_by_outcome(),
    }
}

/// A filesystem's size and the bytes on it available to an unprivileged user.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Disk {
    size: u64,
    free: u64,
}

/// `statvfs` of `dir`; `None` when it fails (the directory gone: the status says nothing rather than 0).
fn disk(dir: &std::path::Path) -> Option<Disk> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    let mut st = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: `path` is a NUL-terminated string that outlives the call, and `st` points to writable
    // memory the size of a `statvfs`, which the call fills entirely when it returns 0.
    let rc = unsafe { libc::statvfs(path.as_ptr(), st.as_mut_ptr()) };
    if rc != 0 {
        return None;
    }
    // SAFETY: statvfs returned 0, so it initialised the whole struct.
    let st = unsafe { st.assume_init() };
    let frsize = st.f_frsize;
    Some(Disk { size: st.f_blocks.saturating_mul(frsize), free: st.f_bavail.saturating_mul(frsize) })
}

/// With a store, what the relay's unreclaimable memory stays under: a base (threads, allocator,
/// queues), the capture's block and its packing ([`limits::pack_bytes`]), each open connection's most (a log read's answer, a TLS copy
/// buffer, its thread), and a few bytes per block held (table entries, the swarm's bits). None of it is
/// a snapshot's or a log's bytes: those are on the store's files, in the page cache.
fn memory_bound(shared: &Shared, blocks: u64) -> u64 {
    let pack_threads = if shared.config.snapshot.codec == snapshot::Codec::Raw { 0 } else { shared.config.snapshot.pack_threads as u64 };
    limits::relay_memory_bound(shared.config.snapshot.block_size, pack_threads, shared.connections() as u64, blocks)
}

/// The heap and other anonymous memory: `RssAnon` from /proc/self/status (0 where there is none). A
/// memfd's pages are not in it once unmapped (they are shmem, counted per generation instead).
fn anonymous_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kib = status.lines().find_map(|l| l.strip_prefix("RssAnon:")).and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok()).unwrap_or(0);
    kib * 1024
}

/// Resident memory from /proc/self/statm (0 where there is none).
fn rss_bytes() -> u64 {
    let pages = std::fs::read_to_string("/proc/self/statm").ok().and_then(|s| s.split_whitespace().nth(1).and_then(|p| p.parse::<u64>().ok())).unwrap_or(0);
    // SAFETY: sysconf has no preconditions; it only reads a system constant.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    pages * u64::try_from(page).unwrap_or(4096)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directorys_filesystem_has_a_size_and_at_most_that_free() {
        let d = disk(std::path::Path::new(env!("CARGO_MANIFEST_DIR"))).expect("statvfs of the crate's directory");
        assert!(d.size > 0 && d.free <= d.size, "{d:?}");
        assert_eq!(disk(std::path::Path::new("/nonexistent/fastrepl-store")), None);
    }
}
