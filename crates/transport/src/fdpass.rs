//! Passing one file descriptor over a unix socket (`SCM_RIGHTS`) together with a few bytes.

use rustix::net::{RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, ReturnFlags, SendAncillaryBuffer, SendAncillaryMessage, SendFlags};
use std::io::{self, IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;

/// Send `bytes` with `fd` attached to the first of them.
pub fn send_with_fd(s: &UnixStream, bytes: &[u8], fd: BorrowedFd<'_>) -> io::Result<()> {
    assert!(!bytes.is_empty(), "a descriptor must travel with at least one byte");
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let fds = [fd];
    let sent = loop {
        let mut control = SendAncillaryBuffer::new(&mut space);
        let pushed = control.push(SendAncillaryMessage::ScmRights(&fds));
        assert!(pushed, "room for one descriptor was reserved");
        match rustix::net::sendmsg(s, &[IoSlice::new(bytes)], &mut control, SendFlags::NOSIGNAL) {
            Ok(n) => break n,
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    };
    // The descriptor went with the first byte; the rest is an ordinary write.
    if sent < bytes.len() {
        use std::io::Write;
        (&*s).write_all(&bytes[sent..])?;
    }
    Ok(())
}

/// Receive exactly `buf.len()` bytes; returns the descriptor that came with them, if any. More than
/// one descriptor, or a truncated control message, is an error (and any extra descriptors are closed).
pub fn recv_with_fd(s: &UnixStream, buf: &mut [u8]) -> io::Result<Option<OwnedFd>> {
    let mut got_fd: Option<OwnedFd> = None;
    let mut filled = 0usize;
    while filled < buf.len() {
        // Room for two: a peer that sends more than one is detected (and both are closed), not truncated.
        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(2))];
        let mut control = RecvAncillaryBuffer::new(&mut space);
        let r = match rustix::net::recvmsg(s, &mut [IoSliceMut::new(&mut buf[filled..])], &mut control, RecvFlags::CMSG_CLOEXEC) {
            Ok(r) => r,
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        };
        // Take ownership of every descriptor that arrived before judging anything, so none leaks.
        let mut fds: Vec<OwnedFd> = Vec::new();
        for msg in control.drain() {
            if let RecvAncillaryMessage::ScmRights(arrived) = msg {
                fds.extend(arrived);
            }
        }
        if r.flags.contains(ReturnFlags::CTRUNC) {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "descriptor message truncated"));
        }
        if fds.len() + usize::from(got_fd.is_some()) > 1 {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "peer sent more than one descriptor"));
        }
        if let Some(fd) = fds.pop() {
            got_fd = Some(fd);
        }
        if r.bytes == 0 {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "peer closed the socket"));
        }
        filled += r.bytes;
    }
    Ok(got_fd)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Seek, Write};
    use std::os::fd::AsFd;

    #[test]
    fn a_descriptor_travels_with_its_bytes() {
        let (a, b) = UnixStream::pair().unwrap();
        let mut f = std::fs::File::from(tempfile_in_memory());
        f.write_all(b"hello").unwrap();
        send_with_fd(&a, b"0123456789", f.as_fd()).unwrap();
        let mut buf = [0u8; 10];
        let fd = recv_with_fd(&b, &mut buf).unwrap().expect("a descriptor");
        assert_eq!(&buf, b"0123456789");
        let mut g = std::fs::File::from(fd);
        g.rewind().unwrap();
        let mut s = String::new();
        g.read_to_string(&mut s).unwrap();
        assert_eq!(s, "hello");
        // Plain bytes arrive without one.
        (&a).write_all(b"xy").unwrap();
        let mut two = [0u8; 2];
        assert!(recv_with_fd(&b, &mut two).unwrap().is_none());
        drop(a);
        assert_eq!(recv_with_fd(&b, &mut two).unwrap_err().kind(), io::ErrorKind::UnexpectedEof);
    }

    fn tempfile_in_memory() -> OwnedFd {
        rustix::fs::memfd_create("fdpass-test", rustix::fs::MemfdFlags::CLOEXEC).unwrap()
    }
}
