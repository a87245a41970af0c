//! A small blocking Redis/Valkey client: what the agent needs to manage its local server and ask the
//! master about its backlog, what `verify` needs to scan and compare datasets (pipelined), and what
//! tests need to write data.
//!
//! Its parts, each using only those before it: [`pem`] (PEM loading) and [`stream`] (a connection,
//! plain TCP or TLS), which the `transport` crate builds on for the relay link, so that this crate
//! needs nothing of it; [`Error`] with the server's [`ErrorCode`], [`Role`], [`Info`]; [`tls`]
//! (redis-cli's TLS options); [`Client`] (one connection to one server); [`sentinel`].
#![deny(missing_docs)]

mod connection;
mod error;
mod info;
pub mod pem;
mod role;
pub mod sentinel;
pub mod stream;
pub mod tls;

pub use connection::{command, Client};
pub use error::{Error, ErrorCode};
pub use info::Info;
pub use role::{Role, UnknownRole};
