//! How the process ends when a part of it cannot go on: a thread that panicked, a stop that takes
//! too long. The rule (docs/design/decisions.md#a-dead-thread-ends-the-process): a panic anywhere ends
//! the process with [`PANIC_EXIT`] after one line on stderr, because a thread that died alone leaves
//! the others serving nothing (a relay whose capture thread died kept its port open, agents hung on
//! it, and its SIGTERM thread was gone too); a supervisor restarts a process, a join's guard resets
//! its replica. And a SIGTERM or SIGINT ends the process within [`limits::STOP_GRACE_MAX`], graceful
//! or not ([`STOP_DEADLINE_EXIT`]).

use std::time::Duration;

/// The exit status after a panic in any thread (EX_SOFTWARE: an internal error).
pub const PANIC_EXIT: i32 = 70;
/// The exit status of a process that did not finish its graceful stop within
/// [`limits::STOP_GRACE_MAX`] of a SIGTERM or SIGINT (as timeout(1)'s).
pub const STOP_DEADLINE_EXIT: i32 = 124;

/// From now on a panic in any thread ends the process: one line on stderr (dropped if stderr fails:
/// the hook must not panic again), then [`PANIC_EXIT`].
pub fn exit_on_panic(json: bool) {
    std::panic::set_hook(Box::new(move |info| {
        let thread = std::thread::current();
        let name = thread.name().unwrap_or("unnamed");
        let what = info.payload_as_str().unwrap_or("(no message)");
        let at = info.location().map(|l| format!("{}:{}", l.file(), l.line())).unwrap_or_default();
        let text = format!("fastrepl: internal error: thread '{name}' panicked at {at}: {what}; exiting (status {PANIC_EXIT})");
        // The default hook's backtrace, kept: as it does, on RUST_BACKTRACE alone (unset or "0":
        // none; "full": every frame; anything else: the short form).
        let trace = match std::env::var("RUST_BACKTRACE").ok().as_deref() {
            None | Some("0") => None,
            Some("full") => Some(format!("{:#}", std::backtrace::Backtrace::force_capture())),
            Some(_) => Some(std::backtrace::Backtrace::force_capture().to_string()),
        };
        let line = match (json, trace) {
            (true, Some(t)) => serde_json::json!({"level": "ERROR", "message": text, "thread": name, "backtrace": t}).to_string(),
            (true, None) => serde_json::json!({"level": "ERROR", "message": text, "thread": name}).to_string(),
            (false, Some(t)) => format!("{text}\nbacktrace:\n{t}"),
            (false, None) => text,
        };
        last_word(line);
        exit_now(PANIC_EXIT);
    }));
}

/// On the first SIGTERM or SIGINT, a deadline: if the process has not ended [`limits::STOP_GRACE_MAX`]
/// later (its graceful path stuck), it says so and exits with [`STOP_DEADLINE_EXIT`]. The signals'
/// own handling (a flag, the relay's stop) is installed beside this and goes on as before.
pub fn stop_deadline_on_signal() -> anyhow::Result<()> {
    stop_deadline_after(limits::STOP_GRACE_MAX)
}

/// [`stop_deadline_on_signal`] with a deadline of `grace`.
fn stop_deadline_after(grace: Duration) -> anyhow::Result<()> {
    use anyhow::Context;
    use signal_hook::consts::{SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGTERM, SIGINT]).context("install the stop deadline's signal handler")?;
    std::thread::Builder::new()
        .name("stop-deadline".into())
        .spawn(move || {
            if let Some(sig) = signals.forever().next() {
                exit_after(grace, if sig == SIGTERM { "SIGTERM" } else { "SIGINT" });
            }
        })
        .context("spawn the stop deadline's thread")?;
    Ok(())
}

/// Sleep `grace` (this thread has nothing else to do: the deadline is its whole job), then end the
/// process with [`STOP_DEADLINE_EXIT`].
fn exit_after(grace: Duration, signal: &str) {
    std::thread::sleep(grace);
    last_word(format!("fastrepl: still stopping {} s after {signal}; exiting now (status {STOP_DEADLINE_EXIT})", grace.as_secs()));
    exit_now(STOP_DEADLINE_EXIT);
}

/// `line` on stderr, waited for at most [`limits::LAST_WORD_WAIT`]: written from a thread of its own,
/// as another thread may hold stderr's lock, blocked in a write to a reader that stalled; the process
/// ends all the same (without the line if it could not go, or no thread could be started for it).
fn last_word(line: String) {
    // The log's queued lines first (bounded the same way: the log's reader may be what stalled).
    crate::log_sink::drain(limits::LAST_WORD_WAIT);
    let (said, heard) = std::sync::mpsc::channel();
    let spawned = std::thread::Builder::new().name("last-word".into()).spawn(move || {
        metrics::output::stderr_line(&line);
        let _ = said.send(());
    });
    if spawned.is_ok() {
        let _ = heard.recv_timeout(limits::LAST_WORD_WAIT);
    }
}

/// End the process at once: no exit handlers, no flush of buffered output (a stalled reader, or a
/// library's handler waiting on the thread that failed, must not hold the exit).
fn exit_now(code: i32) -> ! {
    // SAFETY: _exit takes no pointer and never returns; it ends the process without running
    // anything of this process's in the meantime, which is the point.
    unsafe { libc::_exit(code) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::{Command, Stdio};

    /// Set in this test binary run again as a child: the test then plays the process under test.
    const CHILD: &str = "FASTREPL_EXITS_TEST_CHILD";

    /// This test binary again, running only `test`, as the child, stderr where `stderr` says; its
    /// exit status and what it wrote there, once it ended (killed after 30 s: the test then fails).
    fn child(test: &str, stderr: Stdio, env: &[(&str, &str)]) -> (Option<i32>, String) {
        use std::io::Read;
        let exe = std::env::current_exe().expect("the test binary");
        let mut c = Command::new(exe)
            .args(["--exact", test, "--nocapture", "--test-threads", "1"])
            .env(CHILD, "1")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .expect("run the test binary again");
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        let status = loop {
            if let Some(st) = c.try_wait().expect("try_wait") {
                break st;
            }
            if std::time::Instant::now() > deadline {
                let _ = c.kill();
                let _ = c.wait();
                panic!("the child {test} still running after 30 s");
            }
            std::thread::sleep(Duration::from_millis(10)); // Polling for exit with a deadline.
        };
        let mut err = String::new();
        if let Some(mut e) = c.stderr.take() {
            let _ = e.read_to_string(&mut err);
        }
        (status.code(), err)
    }

    #[test]
    fn a_panicking_thread_ends_the_process_also_with_stderr_on_a_full_disk() {
        if std::env::var_os(CHILD).is_some() {
            exit_on_panic(false);
            let t = std::thread::Builder::new().name("doomed".into()).spawn(|| panic!("on purpose")).unwrap();
            let _ = t.join();
            // Without the hook the thread dies alone and the process goes on: status 0.
            std::process::exit(0);
        }
        let test = "exits::tests::a_panicking_thread_ends_the_process_also_with_stderr_on_a_full_disk";
        let (code, err) = child(test, Stdio::piped(), &[("RUST_BACKTRACE", "0"), ("RUST_LIB_BACKTRACE", "0")]);
        assert_eq!(code, Some(PANIC_EXIT), "{err}");
        assert!(err.contains("thread 'doomed' panicked at") && err.contains("on purpose"), "{err}");
        assert!(!err.contains("backtrace:"), "no backtrace unless asked for: {err}");
        let (code, err) = child(test, Stdio::piped(), &[("RUST_BACKTRACE", "1"), ("RUST_LIB_BACKTRACE", "0")]);
        assert_eq!(code, Some(PANIC_EXIT), "{err}");
        assert!(err.contains("on purpose") && err.contains("backtrace:"), "RUST_BACKTRACE=1 keeps the backtrace: {err}");
        let full = std::fs::OpenOptions::new().write(true).open("/dev/full").expect("open /dev/full");
        let (code, _) = child("exits::tests::a_panicking_thread_ends_the_process_also_with_stderr_on_a_full_disk", full.into(), &[]);
        assert_eq!(code, Some(PANIC_EXIT));
    }

    /// In the child: a thread takes stderr and keeps it, writing to a pipe nobody reads (a log reader
    /// that stalled); returns once it holds it.
    fn stall_stderr() {
        use std::io::Write;
        let (held, holding) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut e = std::io::stderr().lock();
            let _ = held.send(());
            loop {
                let _ = e.write_all(&[b'x'; 4096]);
            }
        });
        holding.recv().unwrap();
    }

    #[test]
    fn a_stalled_stderr_does_not_hold_the_end() {
        if std::env::var_os(CHILD).is_some() {
            stall_stderr();
            if std::env::var_os("FASTREPL_EXITS_TEST_PANIC").is_some() {
                exit_on_panic(false);
                let _ = std::thread::spawn(|| panic!("on purpose")).join();
            } else {
                stop_deadline_after(Duration::from_millis(100)).unwrap();
                signal_hook::low_level::raise(signal_hook::consts::SIGTERM).unwrap();
            }
            loop {
                std::thread::sleep(Duration::from_secs(60));
            }
        }
        let test = "exits::tests::a_stalled_stderr_does_not_hold_the_end";
        let (code, _) = child(test, Stdio::piped(), &[]);
        assert_eq!(code, Some(STOP_DEADLINE_EXIT), "a stop past its deadline");
        let (code, _) = child(test, Stdio::piped(), &[("FASTREPL_EXITS_TEST_PANIC", "1")]);
        assert_eq!(code, Some(PANIC_EXIT), "a panic");
    }

    #[test]
    fn a_stop_that_does_not_end_ends_at_its_deadline() {
        if std::env::var_os(CHILD).is_some() {
            stop_deadline_after(Duration::from_millis(100)).unwrap();
            signal_hook::low_level::raise(signal_hook::consts::SIGTERM).unwrap();
            // A graceful path that never ends.
            loop {
                std::thread::sleep(Duration::from_secs(60));
            }
        }
        let (code, err) = child("exits::tests::a_stop_that_does_not_end_ends_at_its_deadline", Stdio::piped(), &[]);
        assert_eq!(code, Some(STOP_DEADLINE_EXIT), "{err}");
        assert!(err.contains("after SIGTERM; exiting now"), "{err}");
    }
}
