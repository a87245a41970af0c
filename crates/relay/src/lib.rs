//! The relay: runs beside the master, poses as one of its replicas, holds one point-in-time snapshot
//! in memory plus the stream after it, and serves any number of agents from it.
//!
//! - [`capture`]: the replica side towards the master (handshake, `PSYNC ? -1`, RDB into the
//!   generation's region, stream log, ACKs).
//! - [`serve`]: the agents' side (authenticated control and data connections).
//!
//! Generations: the first is captured when the relay starts (or when the first agent asks, with
//! `--capture on-demand`). When its log reaches a bound (bytes or age), the master link drops,
//! Sentinel names another master or no agent has connected for `--idle-release-secs`, it is sealed:
//! agents already on it finish from it; the next agent that arrives triggers a new capture (the
//! master forks only when someone needs a fresh snapshot). A sealed generation's memory is freed
//! when its last agent disconnects.
//!
//! That lifecycle is one machine, `generations::Generations`, with no sockets and no clock, under one
//! lock in `shared::Shared`. The current generation is *capturing* (RDB arriving), *complete* (log growing),
//! *sealed* (with a typed reason: log bound, link lost, master changed, idle release) or *failed*; a
//! capture is idle or running, and a *demand* for one is set by a waiting agent (or on-start) and
//! cleared when a generation is published. Events: an agent wants a generation, a connection opened or
//! closed, capture started / published / RDB complete / log bound / ended (sealed, failed, stopped),
//! master changed, idle tick, stop. Actions: start a capture, seal or fail generation X, release the
//! current one, tell the waiters. The capture, accept, control and sentinel threads only feed events
//! and carry the actions out; every seal goes through that one place, so each is counted once.
#![deny(missing_docs)]

pub mod capture;
mod capture_policy;
mod config;
mod error;
pub mod events;
mod file;
mod generations;
mod json_list;
mod offer;
mod relay;
pub mod serve;
mod shared;
pub mod source;
mod source_rdb;
pub mod stats;
mod status;
mod tracker;
pub mod ucx_messages;
#[cfg(feature = "ucx")]
mod ucx_serve;
#[cfg(feature = "ucx")]
pub mod ucx_side;

pub use capture_policy::CapturePolicy;
pub use config::Config;
pub use error::Error;
pub use json_list::json_list;
pub use offer::Offer;
pub use relay::Relay;
pub use source_rdb::SourceRdb;
