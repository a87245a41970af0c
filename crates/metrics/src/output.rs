//! The process's own output (log lines on stderr, report lines on stdout) written so that it can
//! never stop the work: a write that fails (its reader gone: a closed pipe, a log shipper that died;
//! a full disk) is dropped and counted, never a panic (`println!` and `eprintln!` panic on a failed
//! write, killing the thread that logged) and never retried. The count is exposed in the metrics of
//! the processes that have them ([`expose`]).
//!
//! Output that is the product itself (the bytes of `fetch --out -`) is written by its command, which
//! fails on an error; what goes through here is what the work does not depend on.

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};

/// Writes to stdout or stderr dropped because they failed, since the process started.
static DROPPED: AtomicU64 = AtomicU64::new(0);

/// Writes dropped since the process started.
pub fn dropped() -> u64 {
    DROPPED.load(Ordering::Relaxed)
}

/// Count one dropped write (for a writer of its own that drops a failed write, like the log's).
pub fn count_dropped() {
    DROPPED.fetch_add(1, Ordering::Relaxed);
}

/// `bytes` written whole to `w`, or dropped and counted: false when dropped.
pub fn write_or_drop(w: &mut impl Write, bytes: &[u8]) -> bool {
    let written = w.write_all(bytes).and_then(|()| w.flush());
    if written.is_err() {
        count_dropped();
    }
    written.is_ok()
}

/// One line (a newline added) on stderr, or dropped and counted. For what a process says outside its
/// log (the guard's last word, a command's failure).
pub fn stderr_line(line: &str) -> bool {
    write_or_drop(&mut std::io::stderr().lock(), format!("{line}\n").as_bytes())
}

/// One line (a newline added) on stdout, or dropped and counted. For reports whose loss does not
/// change what the command did (its exit status says that).
pub fn stdout_line(line: &str) -> bool {
    write_or_drop(&mut std::io::stdout().lock(), format!("{line}\n").as_bytes())
}

/// The dropped-writes counter in an exposition.
pub fn expose(e: &mut crate::Exposition) {
    e.counter("output_writes_dropped_total", "Writes of log or report lines to stderr/stdout dropped because they failed (a closed pipe, a full disk).", &[], dropped() as f64);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A writer that fails like a pipe whose reader is gone.
    struct Closed;

    impl Write for Closed {
        fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
            Err(std::io::ErrorKind::BrokenPipe.into())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_failed_write_is_dropped_and_counted() {
        let before = dropped();
        assert!(!write_or_drop(&mut Closed, b"line\n"));
        assert!(dropped() > before, "not counted");
        let mut v = Vec::new();
        assert!(write_or_drop(&mut v, b"line\n"));
        assert_eq!(v, b"line\n");
    }

    #[test]
    fn a_full_disk_is_dropped_and_counted() {
        let mut full = std::fs::OpenOptions::new().write(true).open("/dev/full").expect("open /dev/full");
        let before = dropped();
        assert!(!write_or_drop(&mut full, b"line\n"));
        assert!(dropped() > before);
    }

    #[test]
    fn the_counter_is_exposed() {
        count_dropped();
        let mut e = crate::Exposition::new("fastrepl_test");
        expose(&mut e);
        let samples = crate::parse(&e.finish()).unwrap();
        let s = samples.iter().find(|s| s.name == "fastrepl_test_output_writes_dropped_total").expect("the counter");
        assert!(s.value >= 1.0);
    }
}
