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
        let line = if json { serde_json::json!({"level": "ERROR", "message": text, "thread": name}).to_string() } else { text };
        metrics::output::stderr_line(&line);
        exit_now(PANIC_EXIT);
    }));
}

/// On the first SIGTERM or SIGINT, a deadline: if the process has not ended [`limits::STOP_GRACE_MAX`]
/// later (its graceful path stuck), it says so and exits with [`STOP_DEADLINE_EXIT`]. The signals'
/// own handling (a flag, the relay's stop) is installed beside this and goes on as before.
pub fn stop_deadline_on_signal() -> anyhow::Result<()> {
    use anyhow::Context;
    use signal_hook::consts::{SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGTERM, SIGINT]).context("install the stop deadline's signal handler")?;
    std::thread::Builder::new()
        .name("stop-deadline".into())
        .spawn(move || {
            if let Some(sig) = signals.forever().next() {
                exit_after(limits::STOP_GRACE_MAX, if sig == SIGTERM { "SIGTERM" } else { "SIGINT" });
            }
        })
        .context("spawn the stop deadline's thread")?;
    Ok(())
}

/// Sleep `grace` (this thread has nothing else to do: the deadline is its whole job), then end the
/// process with [`STOP_DEADLINE_EXIT`].
fn exit_after(grace: Duration, signal: &str) {
    std::thread::sleep(grace);
    metrics::output::stderr_line(&format!("fastrepl: still stopping {} s after {signal}; exiting now (status {STOP_DEADLINE_EXIT})", grace.as_secs()));
    exit_now(STOP_DEADLINE_EXIT);
}

/// End the process at once: no exit handlers, no flush of buffered output (a stalled reader, or a
/// library's handler waiting on the thread that failed, must not hold the exit).
fn exit_now(code: i32) -> ! {
    // SAFETY: _exit takes no pointer and never returns; it ends the process without running
    // anything of this process's in the meantime, which is the point.
    unsafe { libc::_exit(code) }
}
