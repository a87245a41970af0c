//! CPU time and peak memory of a process, from `/proc` (through `procfs`): what the agent reports
//! about itself, and what the lab reads of servers and relays.

use procfs::process::Process;

/// CPU seconds (user + system) of process `pid`, plus those of its children: those it has reaped
/// (a server's fork children, once they exit and are waited for) and those still running (the
/// relay's UCX side). `None` if it is gone.
pub fn cpu_secs_with_children(pid: u32) -> Option<f64> {
    Some(ticks_with_children(pid)? as f64 / procfs::ticks_per_second() as f64)
}

fn ticks_with_children(pid: u32) -> Option<u64> {
    let st = Process::new(pid as i32).ok()?.stat().ok()?;
    let own = st.utime + st.stime + st.cutime.max(0) as u64 + st.cstime.max(0) as u64;
    Some(own + children(pid).into_iter().filter_map(ticks_with_children).sum::<u64>())
}

/// The running processes `pid` started (from every thread's `children` list).
pub fn children(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).into_iter().flatten().flatten() {
        let text = std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
        out.extend(text.split_whitespace().filter_map(|c| c.parse::<u32>().ok()));
    }
    out
}

/// PSS in KiB of `pid` and the processes it started that still run (`None` if `pid` is gone).
pub fn pss_kib_with_children(pid: u32) -> Option<u64> {
    Some(pss_kib(pid)? + children(pid).into_iter().filter_map(pss_kib_with_children).sum::<u64>())
}

/// CPU seconds (user + system) this process has used so far, to the microsecond (`getrusage`; /proc
/// counts in clock ticks of 10 ms, too coarse for the probe's per-read figures).
pub fn own_cpu_secs() -> f64 {
    // SAFETY: getrusage fills the struct we pass; RUSAGE_SELF has no other preconditions, and an
    // all-zero rusage is a valid value of the plain C struct.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above; `ru` is writable and outlives the call.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let t = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    t(ru.ru_utime) + t(ru.ru_stime)
}

/// Peak resident memory (`VmHWM`) of process `pid` in KiB. Not `getrusage`'s `ru_maxrss`: that
/// survives `execve` and so includes whatever process forked us before we were exec'd.
pub fn peak_rss_kib(pid: u32) -> Option<u64> {
    Process::new(pid as i32).ok()?.status().ok()?.vmhwm
}

/// Resident memory (`VmRSS`) of process `pid` in KiB, now: the baseline a later peak is compared
/// with (a peak so far would include whatever came and went before).
pub fn rss_kib(pid: u32) -> Option<u64> {
    Process::new(pid as i32).ok()?.status().ok()?.vmrss
}

/// This process's peak resident memory in KiB (0 if `/proc` cannot say).
pub fn own_peak_rss_kib() -> u64 {
    Process::myself().ok().and_then(|p| p.status().ok()).and_then(|s| s.vmhwm).unwrap_or(0)
}

/// Proportional set size of process `pid` in KiB (`Pss:` of `/proc/PID/smaps_rollup`): its private
/// pages plus its share of every page it shares. Unlike RSS it does not count a mapping of another
/// process's memory (an agent's view of the relay's snapshot over shm, the relay's second mapping of
/// its own region for UCX) as this process's own.
pub fn pss_kib(pid: u32) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).ok()?;
    text.lines().find_map(|l| l.strip_prefix("Pss:")).and_then(|v| v.split_whitespace().next()).and_then(|v| v.parse().ok())
}

/// This process's proportional set size in KiB (0 if `/proc` cannot say).
pub fn own_pss_kib() -> u64 {
    pss_kib(std::process::id()).unwrap_or(0)
}

/// Run `f` while another thread samples this process's PSS every `every` (off `f`'s path: reading
/// smaps_rollup walks every mapping); returns `f`'s result and the largest PSS seen, in KiB.
pub fn with_peak_pss<T>(every: std::time::Duration, f: impl FnOnce() -> T) -> (T, u64) {
    let done = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        let sampler = s.spawn(|| {
            let mut peak = own_pss_kib();
            while !done.load(std::sync::atomic::Ordering::SeqCst) {
                std::thread::park_timeout(every); // Sampling period; woken early when `f` is done.
                peak = peak.max(own_pss_kib());
            }
            peak
        });
        let out = f();
        done.store(true, std::sync::atomic::Ordering::SeqCst);
        sampler.thread().unpark();
        (out, sampler.join().unwrap_or(0))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_this_process() {
        let v: Vec<u8> = vec![1; 8 << 20];
        assert!(own_peak_rss_kib() >= 8 << 10, "peak RSS covers an 8 MiB buffer");
        assert_eq!(v.iter().map(|&b| b as u64).sum::<u64>(), 8 << 20);
        let cpu0 = own_cpu_secs();
        let spin = std::time::Instant::now();
        while std::time::Instant::now() < spin + std::time::Duration::from_millis(30) {
            std::hint::black_box(0u64);
        }
        assert!(own_cpu_secs() > cpu0, "30 ms of spinning shows in this process's CPU time");
        assert!(cpu_secs_with_children(std::process::id()).is_some());
        assert!(peak_rss_kib(std::process::id()).is_some());
        let pss = own_pss_kib();
        assert!(pss >= 8 << 10, "the buffer is private memory, counted whole in PSS: {pss} KiB");
        let (got, peak) = with_peak_pss(std::time::Duration::from_millis(5), || {
            let big: Vec<u8> = vec![2; 32 << 20];
            std::thread::sleep(std::time::Duration::from_millis(30)); // Let the sampler see it; not synchronization.
            big.iter().map(|&b| b as u64).sum::<u64>()
        });
        assert_eq!(got, 64 << 20);
        assert!(peak >= pss + (24 << 10), "the sampler saw the 32 MiB buffer: {peak} KiB, {pss} before");
    }
}
