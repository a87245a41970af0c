//! Why the relay stops (or refuses to start).

use std::net::SocketAddr;

/// Errors that stop the relay.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Binding the agents' port failed.
    #[error("listen on {addr}: {source}")]
    Listen {
        /// Where.
        addr: SocketAddr,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// The configuration is unsafe or inconsistent.
    #[error("{0}")]
    Config(String),
    /// An agent asked for a transport this relay does not offer.
    #[error("this relay does not offer {0}")]
    NotOffered(&'static str),
    /// The UCX side failed.
    #[cfg(feature = "ucx")]
    #[error("ucx: {0}")]
    Ucx(#[source] crate::ucx_serve::UcxServeError),
}
