//! The interfaces the agent reads a relay's data through: a [`Transport`] opens [`RangeReader`]s.

use crate::{Error, TransportKind};

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
