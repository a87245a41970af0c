//! The serving side of a data connection (the relay, and agents serving their peers): answers to
//! requests with a [`ResponseHeader`] and their bytes — ranges with `sendfile` straight from the
//! generation's memfd, or copied through user space under TLS —, refusals, and the shm transport's
//! region handed over a unix socket.

use crate::fdpass;
use crate::wire::response::refusal;
use crate::wire::{ResponseHeader, Status};
use crate::{Error, Operation};
use std::io::Write;
use std::os::unix::net::UnixStream;

/// Over TLS: the same answer, the bytes read from `file` and encrypted (no `sendfile`:
/// the bytes must pass through user space to be encrypted).
pub fn send_range_copied<S: Write>(s: &mut S, file: &std::fs::File, offset: u64, len: u32) -> Result<(), Error> {
    use std::os::unix::fs::FileExt;
    s.write_all(&ResponseHeader::ok(len).encode()).map_err(Error::io(Operation::SendResponseHeader))?;
    let mut buf = vec![0u8; (len as usize).min(limits::READ_CHUNK_BYTES.max(1 << 20))];
    let (mut off, mut left) = (offset, len as usize);
    while left > 0 {
        let n = left.min(buf.len());
        file.read_exact_at(&mut buf[..n], off).map_err(Error::io(Operation::ReadBlockFromRegion))?;
        s.write_all(&buf[..n]).map_err(Error::io(Operation::SendBlock))?;
        off += n as u64;
        left -= n;
    }
    Ok(())
}

/// Answer a range read with a header and `len` bytes of `file` from `offset`, with
/// `sendfile`.
pub fn send_range<S: Write + std::os::fd::AsFd>(s: &mut S, file: &std::fs::File, offset: u64, len: u32) -> Result<(), Error> {
    s.write_all(&ResponseHeader::ok(len).encode()).map_err(Error::io(Operation::SendResponseHeader))?;
    let mut off = offset;
    let mut left = len as usize;
    while left > 0 {
        let n = match rustix::fs::sendfile(&*s, file, Some(&mut off), left) {
            Ok(n) => n,
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(Error::Io { op: Operation::SendfileBlock, source: e.into() }),
        };
        if n == 0 {
            return Err(Error::Protocol("sendfile made no progress (region shorter than published?)".into()));
        }
        left -= n as usize;
    }
    Ok(())
}

/// Answer with bytes from memory (log reads, swarm answers, ucx keys, a peer's cached block).
pub fn send_bytes<S: Write>(s: &mut S, bytes: &[u8]) -> Result<(), Error> {
    let header = ResponseHeader::ok(bytes.len() as u32).encode();
    if bytes.len() > SMALL_ANSWER_BYTES {
        // A large answer (a log chunk) is not copied behind its header: a second copy per connection
        // would double what a connection holds (the relay's memory bound counts one).
        s.write_all(&header).map_err(Error::io(Operation::SendLogBytes))?;
        return s.write_all(bytes).map_err(Error::io(Operation::SendLogBytes));
    }
    let mut out = header.to_vec();
    out.extend_from_slice(bytes);
    s.write_all(&out).map_err(Error::io(Operation::SendLogBytes))
}

/// Answers up to this size go out in one write with their header.
const SMALL_ANSWER_BYTES: usize = 64 << 10;

/// Refuse a request with a message (relay or peer).
pub fn send_error<S: Write>(s: &mut S, message: &str) -> Result<(), Error> {
    s.write_all(&refusal(Status::Error, message)).map_err(Error::io(Operation::SendError))
}

/// Peer side: refuse a block read because this agent serves its maximum already.
pub fn send_busy<S: Write>(s: &mut S) -> Result<(), Error> {
    s.write_all(&refusal(Status::Busy, "busy")).map_err(Error::io(Operation::SendBusy))
}

/// Answer a shm attach with the region's descriptor, reopened read-only so the agent
/// cannot map it writable, and the region's size.
pub fn send_region(s: &UnixStream, region: &snapshot::Region) -> Result<(), Error> {
    let ro = region.reopen_read_only().map_err(Error::io(Operation::ReopenRegionReadOnly))?;
    let mut msg = ResponseHeader::ok(8).encode().to_vec();
    msg.extend_from_slice(&region.capacity().to_be_bytes());
    fdpass::send_with_fd(s, &msg, std::os::fd::AsFd::as_fd(&ro)).map_err(Error::io(Operation::SendRegionDescriptor))
}
