//! How agents talk to a relay.
//!
//! One TCP port serves two kinds of connection, both opened by a mutual challenge–response
//! ([`auth`]) before anything else is said:
//! - **control**: the relay pushes the generation's [`wire::Descriptor`] and every change to it
//!   (watermarks, block table, length, log end), and a heartbeat;
//! - **data**: range reads of a generation's RDB bytes and of its stream log.
//!
//! Layers, each using only those below it:
//! - [`wire`], the leaf: every message and its encoding (control messages, requests with their
//!   [`wire::Op`] table, response headers with their [`wire::Status`], swarm messages, ucx keys,
//!   the descriptor validated on receipt), one byte cursor, every length bounded;
//! - [`auth`] (the handshake), [`tls`] (the relay link over TLS; PEM loading and the connection type
//!   are the `client` crate's), [`credentials`] (token and TLS, above both) and [`fdpass`]
//!   (descriptors over unix sockets);
//! - the agent's clients: [`tcp`] (connecting, range reads, judging every answer's header), [`shm`]
//!   and [`tracker`] (the swarm link), above `tcp`;
//! - the serving side: [`serve`] (the relay's and peers' answers: ranges, refusals, the shm region).
//!
//! Beneath them all, [`Error`] with the [`Operation`] that failed. The agent side reads through the
//! [`RangeReader`] interface, so that other transports (shared memory, UCX RMA, libfabric) slot in
//! beside [`tcp`] without touching the agent's pipeline.
#![deny(missing_docs)]

pub mod auth;
pub mod credentials;
mod error;
pub mod fdpass;
#[cfg(any(test, fuzzing))]
#[doc(hidden)]
pub mod fuzz;
mod reader;
pub mod renew;
pub mod serve;
pub mod shm;
pub mod tcp;
pub mod tls;
pub mod tracker;
pub mod wire;

pub use auth::Token;
pub use credentials::Credentials;
pub use error::{Error, Operation};
pub use reader::{RangeReader, Transport};
pub use wire::TransportKind;
