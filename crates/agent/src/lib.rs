//! `join`: make a local, unmodified Redis/Valkey server a live replica of the master, with the bulk of
//! the data pulled from a relay instead of sent by the master.
//!
//! The steps: check the local server; attach to the relay's current generation;
//! check the master and that the replica can load this RDB — all before the replica is touched; point
//! the replica at ourselves and answer its `PSYNC` with the snapshot's `+FULLRESYNC`; stream the RDB
//! in order while [`pipeline`] pulls blocks out of order; stream the log until the replica is close
//! to the relay's end; then, once the replica has applied exactly what we sent, hand it to the master
//! with `REPLICAOF`, which it follows with `PSYNC <replid> <offset+1>`.
//!
//! A failure before the replica was pointed at the agent leaves it untouched; one after that and
//! before the handoff resets it (empty, standalone): it never stays behind looking like a replica it
//! is not. After the handoff the servers own the outcome: a refused partial resync becomes the
//! master's native full sync, which we wait for and report as such. A failure says which of these
//! happened ([`ReplicaState`]), and its [`Error`] kind decides whether it is tried again.
#![deny(missing_docs)]

pub mod config;
pub mod error;
pub mod events;
pub mod guard;
pub mod join;
pub mod local;
pub mod master;
pub mod node;
pub mod peers;
pub mod phase;
pub mod procstat;
pub mod pull;
pub mod report;
pub mod staged;

pub use config::Config;
pub use error::{Cause, Error, Kind, Party};
pub use join::driver::{join, Joined};
pub use phase::JoinPhase;
pub use pull::pipeline::readers;
pub use report::{Failed, Handoff, Live, Phases, ReceivedBytes, ReplicaState, Report, RestartBy, StagedReport, REPORT_SCHEMA_VERSION};
