//! The commands, a file each with its clap arguments, its handler (`run`) and its printing:
//! [`relay`], [`join`], [`stage`], [`fetch`], [`status`], [`verify`]; the argument groups they
//! share in [`args`]; and here what more than one handler does: a report's `--json` envelope
//! ([`Versioned`]), SIGINT/SIGTERM as a cancel flag ([`on_interrupt`]), the dropped-output counters
//! beside a command's metrics ([`dropped_output`]), a closed stdout taken quietly
//! ([`quiet_on_broken_pipe`]).

use crate::exits;
use anyhow::{Context, Result};
use std::process::ExitCode;

pub mod args;
pub mod fetch;
pub mod join;
pub mod relay;
pub mod stage;
pub mod status;
pub mod verify;

/// The process's dropped log and report writes ([`metrics::output`]) as an exposition of their own,
/// after the command's (`prefix`: the command's).
fn dropped_output(prefix: &str) -> String {
    let mut e = metrics::Exposition::new(prefix);
    metrics::output::expose(&mut e);
    e.finish()
}

/// A `--json` object with its schema version and `ok` first, then the object's own fields.
#[derive(serde::Serialize)]
struct Versioned<'a, T: serde::Serialize> {
    schema_version: u32,
    ok: bool,
    #[serde(flatten)]
    body: &'a T,
}

/// SIGINT and SIGTERM set `cancel` (a join then resets the replica before exiting), instead of
/// killing the process and leaving the replica pointed at a listener that is gone.
fn on_interrupt(cancel: std::sync::Arc<std::sync::atomic::AtomicBool>) -> Result<()> {
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, cancel.clone()).context("install signal handler")?;
    }
    exits::stop_deadline_on_signal()
}

/// Stdout written, or closed by its reader (`fastrepl status | head`): that ends the command
/// quietly with success, not with a panic or an error about a pipe nobody reads.
fn quiet_on_broken_pipe(written: std::io::Result<()>) -> Result<ExitCode> {
    match written {
        Ok(()) => Ok(ExitCode::SUCCESS),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(ExitCode::SUCCESS),
        Err(e) => Err(e).context("write to stdout"),
    }
}
