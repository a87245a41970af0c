//! Passing one file descriptor over a unix socket (`SCM_RIGHTS`) together with a few bytes.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;

/// Room for one descriptor in a control message (CMSG_SPACE(sizeof(int)) is 24 on 64-bit Linux;
/// 64 leaves margin and keeps the buffer aligned for `cmsghdr`).
#[repr(C, align(8))]
struct CmsgBuf([u8; 64]);

/// Send `bytes` with `fd` attached to the first of them.
pub fn send_with_fd(s: &UnixStream, bytes: &[u8], fd: RawFd) -> io::Result<()> {
    assert!(!bytes.is_empty(), "a descriptor must travel with at least one byte");
    let mut cbuf = CmsgBuf([0; 64]);
    let mut iov = libc::iovec { iov_base: bytes.as_ptr() as *mut libc::c_void, iov_len: bytes.len() };
    // SAFETY: an all-zero msghdr is a valid "empty" value; every pointer we set below points to locals
    // that outlive the sendmsg call.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf.0.as_mut_ptr().cast();
    // SAFETY: CMSG_SPACE is a pure size computation.
    msg.msg_controllen = unsafe { libc::CMSG_SPACE(std::mem::size_of::<RawFd>() as u32) } as usize;
    // SAFETY: msg_control points to an aligned buffer of at least msg_controllen bytes, so the first
    // header and its data (one int) are inside it.
    unsafe {
        let c = libc::CMSG_FIRSTHDR(&msg);
        (*c).cmsg_level = libc::SOL_SOCKET;
        (*c).cmsg_type = libc::SCM_RIGHTS;
        (*c).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<RawFd>() as u32) as usize;
        std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<RawFd>(), fd);
    }
    let mut sent = 0usize;
    while sent == 0 {
        // SAFETY: `msg` is fully initialised and its buffers are live; the socket is open.
        let n = unsafe { libc::sendmsg(s.as_raw_fd(), &msg, libc::MSG_NOSIGNAL) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        sent = n as usize;
    }
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
        let mut cbuf = CmsgBuf([0; 64]);
        let rest = &mut buf[filled..];
        let mut iov = libc::iovec { iov_base: rest.as_mut_ptr().cast(), iov_len: rest.len() };
        // SAFETY: as in send_with_fd: zeroed msghdr, pointers to live locals.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = cbuf.0.as_mut_ptr().cast();
        msg.msg_controllen = cbuf.0.len();
        // SAFETY: the buffers described by `msg` are writable and live for the call; MSG_CMSG_CLOEXEC
        // makes any received descriptor close-on-exec.
        let n = unsafe { libc::recvmsg(s.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        // Take ownership of every descriptor that arrived before judging anything, so none leaks.
        let mut fds = Vec::new();
        // SAFETY: recvmsg filled msg_control/msg_controllen; the CMSG_* walk stays within them, and each
        // SCM_RIGHTS payload holds (cmsg_len - CMSG_LEN(0)) / sizeof(int) descriptors now owned by us.
        unsafe {
            let mut c = libc::CMSG_FIRSTHDR(&msg);
            while !c.is_null() {
                if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                    let data = libc::CMSG_DATA(c).cast::<RawFd>();
                    let count = ((*c).cmsg_len - libc::CMSG_LEN(0) as usize) / std::mem::size_of::<RawFd>();
                    for i in 0..count {
                        fds.push(OwnedFd::from_raw_fd(std::ptr::read_unaligned(data.add(i))));
                    }
                }
                c = libc::CMSG_NXTHDR(&msg, c);
            }
        }
        if msg.msg_flags & libc::MSG_CTRUNC != 0 {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "descriptor message truncated"));
        }
        if fds.len() + usize::from(got_fd.is_some()) > 1 {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "peer sent more than one descriptor"));
        }
        if let Some(fd) = fds.pop() {
            got_fd = Some(fd);
        }
        if n == 0 {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "peer closed the socket"));
        }
        filled += n as usize;
    }
    Ok(got_fd)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Seek, Write};

    #[test]
    fn a_descriptor_travels_with_its_bytes() {
        let (a, b) = UnixStream::pair().unwrap();
        let mut f = std::fs::File::from(tempfile_in_memory());
        f.write_all(b"hello").unwrap();
        send_with_fd(&a, b"0123456789", f.as_raw_fd()).unwrap();
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
        // SAFETY: a constant NUL-terminated name; memfd_create has no other preconditions.
        let fd = unsafe { libc::memfd_create(c"fdpass-test".as_ptr(), libc::MFD_CLOEXEC) };
        assert!(fd >= 0);
        // SAFETY: fd was just created and is owned by nobody else.
        unsafe { OwnedFd::from_raw_fd(fd) }
    }
}
