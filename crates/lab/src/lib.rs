//! The lab that ships beside `fastrepl`: everything that measures or demonstrates it, nothing an
//! operator needs to run it. It drives the real `fastrepl` binary as relay and agent processes (found
//! beside its own executable, or at `$FASTREPL_BIN`), and real servers through [`fixtures`].
//!
//! - [`demo`]: the main job on an embedded default (a master with data, a relay, replicas, verified,
//!   native replication side by side).
//! - [`bench`]: native replication vs fastrepl on namespace hosts with shaped links.
//! - [`probe`]: transport microbenchmarks (throughput, latency, CPU per read) and whole-snapshot pulls.
//! - [`report`]: results.md, charts and the docs' tables re-rendered from raw `results.json` files.
//! - [`faults`]: the fault matrix (faults × phases, one invariant per cell) on namespace hosts.
//! - [`soak`]: hundreds of joins against one relay with a writer; the relay's memory, fds and memfds stay flat.
//! - [`simulate`]: the agents' swarm (the product's own tracker and chooser) on modelled fleets of up
//!   to 10 000 agents.
//! - [`codecs`]: what compressing a snapshot's blocks once would gain and cost, per codec, on an RDB
//!   with and without LZF.
//! - [`charts`]: PNG line charts.
//! - [`stats`]: the median and quantiles every table uses.
//! - [`transport`]: the lab's transport names (the product's plus `ucx-tcp`, `ucx-sm`).
#![deny(missing_docs)]

pub mod bench;
pub mod charts;
pub mod codecs;
pub mod demo;
pub mod faults;
pub mod probe;
pub mod report;
pub mod simulate;
pub mod soak;
pub mod stats;
pub mod transport;

use anyhow::{bail, Result};
use std::path::PathBuf;

/// The product binary the lab runs as relay and agent: `$FASTREPL_BIN` if set, else `fastrepl` beside
/// this executable (where `cargo build` and a package install both put it).
pub fn fastrepl_bin() -> Result<PathBuf> {
    if let Some(p) = std::env::var_os("FASTREPL_BIN") {
        return Ok(PathBuf::from(p));
    }
    let me = std::env::current_exe()?;
    let bin = me.with_file_name("fastrepl");
    if !bin.is_file() {
        bail!("{} not found: build it (cargo build --release) or set FASTREPL_BIN", bin.display());
    }
    Ok(bin)
}
