//! How agents talk to a relay.
//!
//! One TCP port serves two kinds of connection, both opened by a mutual challenge–response
//! ([`auth`]) before anything else is said:
//! - **control**: the relay pushes the generation's [`wire::Descriptor`] and every change to it
//!   (watermark, checksums, length, log end), and a heartbeat;
//! - **data**: range reads of a generation's RDB bytes and of its stream log.
//!
//! Layers, each using only those below it:
//! - [`wire`], the leaf: every message and its encoding (control messages, requests with their
//!   [`wire::Op`] table, response headers with their [`wire::Status`], swarm messages, ucx keys,
//!   the descriptor validated on receipt), one byte cursor, every length bounded;
//! - [`auth`] (the handshake), [`tls`] (TLS streams) and [`fdpass`] (descriptors over unix sockets);
//! - the agent's clients: [`tcp`] (connecting, range reads, judging every answer's header), [`shm`]
//!   and [`tracker`] (the swarm link), above `tcp`;
//! - the serving side: [`serve`] (the relay's and peers' answers: ranges, refusals, the shm region).
//!
//! The agent side reads through the [`RangeReader`] interface, so that other transports (shared
//! memory, UCX RMA, libfabric) slot in beside [`tcp`] without touching the agent's pipeline.
#![deny(missing_docs)]

pub mod auth;
pub mod credentials;
pub mod fdpass;
#[cfg(any(test, fuzzing))]
#[doc(hidden)]
pub mod fuzz;
pub mod renew;
pub mod serve;
pub mod shm;
pub mod tcp;
pub mod tls;
pub mod tracker;
pub mod wire;

pub use auth::Token;
pub use credentials::Credentials;
pub use wire::TransportKind;

/// Errors of a transport.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A socket operation failed.
    #[error("{op}: {source}")]
    Io {
        /// What we were doing.
        op: &'static str,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// Authentication failed (either side).
    #[error("authentication failed: {0}")]
    Auth(String),
    /// The peer broke the protocol.
    #[error("protocol error: {0}")]
    Protocol(String),
    /// A one-sided read (UCX) failed.
    #[error("one-sided read: {0}")]
    Rma(String),
    /// A peer agent serves its maximum already: the request may go to another holder.
    #[error("peer busy: {0}")]
    Busy(String),
    /// The relay (or a peer) refused a request.
    #[error("refused {op}: {message}")]
    Refused {
        /// Which request.
        op: &'static str,
        /// The relay's reason.
        message: String,
    },
}

impl Error {
    /// Wrap an I/O error with the operation that failed.
    pub fn io(op: &'static str) -> impl FnOnce(std::io::Error) -> Error {
        move |source| Error::Io { op, source }
    }

    /// Whether a block read's body ended early in an orderly end of stream: what a holder serving a
    /// block while it arrives does when that arrival fails (a cut-off). An end of stream anywhere
    /// else (before the answer's header, in an error message) or a reset is not one.
    pub fn is_cut_off(&self) -> bool {
        matches!(self, Error::Io { op, source } if *op == tcp::READ_BLOCK_BYTES && source.kind() == std::io::ErrorKind::UnexpectedEof)
    }
}

/// Reads ranges of a relay's regions into local buffers. One reader is one channel (a connection,
/// an endpoint); the agent opens several to keep many reads in flight.
pub trait RangeReader: Send {
    /// Fill `buf` with the RDB bytes of `generation` starting at `offset`. The range must be published.
    fn read(&mut self, generation: u64, offset: u64, buf: &mut [u8]) -> Result<(), Error>;
    /// Stream-log bytes of `generation` from absolute replication offset `from`, at most `max`, ending at
    /// a command boundary; empty when nothing new is there.
    fn read_log(&mut self, generation: u64, from: u64, max: u32) -> Result<Vec<u8>, Error>;
    /// Reads this reader keeps in flight with [`RangeReader::send`]: 1 when it reads one range at a
    /// time (shm, ucx: their reads are one-sided and need no request on a wire).
    fn depth(&self) -> usize {
        1
    }
    /// Ask for `len` bytes of `generation` at `offset` without waiting for them; they come, in the
    /// order asked, from [`RangeReader::receive`]. At most [`RangeReader::depth`] outstanding.
    fn send(&mut self, _generation: u64, _offset: u64, _len: u32) -> Result<(), Error> {
        Err(Error::Protocol("this reader does not pipeline reads".into()))
    }
    /// The bytes of the oldest read sent with [`RangeReader::send`], into `buf` (its length).
    fn receive(&mut self, _buf: &mut [u8]) -> Result<(), Error> {
        Err(Error::Protocol("this reader does not pipeline reads".into()))
    }
    /// [`RangeReader::receive`], telling `arrived` about each piece of `buf` as it is filled, in
    /// order and once each (an agent serves a block to peers while it arrives). A reader that cannot
    /// tell pieces apart tells the whole at the end.
    fn receive_pieces(&mut self, buf: &mut [u8], arrived: &mut dyn FnMut(&[u8])) -> Result<(), Error> {
        self.receive(buf)?;
        arrived(buf);
        Ok(())
    }
}

/// A way to reach a relay's data; opens readers.
pub trait Transport: Send + Sync {
    /// Which transport it is (reports show its name).
    fn kind(&self) -> TransportKind;
    /// What it runs on underneath, when that is worth reporting (for ucx: UCX's transport and device).
    fn detail(&self) -> Option<String> {
        None
    }
    /// How many readers suit this transport when the user did not say (each ucx reader already keeps
    /// several GETs in flight, and its waits spin; more readers than cores then slow it down).
    fn default_readers(&self) -> usize {
        4
    }
    /// Reads each of its readers keeps in flight ([`RangeReader::depth`]).
    fn depth(&self) -> usize {
        1
    }
    /// Open one more reader.
    fn open(&self) -> Result<Box<dyn RangeReader>, Error>;
}
