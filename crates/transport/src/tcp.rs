//! The TCP transport: range reads as framed request/response on an authenticated data connection.
//! The relay answers from the generation's memfd with `sendfile`, so the bytes go from the page cache
//! to the socket without passing through user space.

use crate::auth::{self, Kind, Token};
use crate::wire::{response_header, Request, READ_MAX};
use crate::tls::Conn;
use crate::{Error, RangeReader, Transport};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// How long a read may wait on the relay before the agent gives up on it.
pub const IO_TIMEOUT: Duration = limits::IO_TIMEOUT;

/// Connect to a relay and authenticate as `kind` (over TLS when the token says the relay wants it).
pub fn connect(addr: SocketAddr, token: &Token, kind: Kind, timeout: Duration) -> Result<Conn, Error> {
    connect_with(addr, token, kind, timeout, timeout, "connect to relay")
}

/// Connect (within `connect_timeout`) to a relay or a peer agent and authenticate as `kind`; every
/// later read and write must complete within `io_timeout`. `op` names the connect in errors.
pub fn connect_with(addr: SocketAddr, token: &Token, kind: Kind, connect_timeout: Duration, io_timeout: Duration, op: &'static str) -> Result<Conn, Error> {
    let s = TcpStream::connect_timeout(&addr, connect_timeout).map_err(Error::io(op))?;
    s.set_nodelay(true).map_err(Error::io("set TCP_NODELAY"))?;
    s.set_read_timeout(Some(io_timeout)).map_err(Error::io("set read timeout"))?;
    s.set_write_timeout(Some(io_timeout)).map_err(Error::io("set write timeout"))?;
    let mut s = match token.relay_tls() {
        None => Conn::Plain(s),
        Some(t) => t.connect(s, addr.ip()).map_err(Error::io("TLS to relay"))?,
    };
    auth::client(&mut s, token, kind)?;
    Ok(s)
}

/// The TCP transport to one relay.
#[derive(Debug, Clone)]
pub struct TcpTransport {
    addr: SocketAddr,
    token: Token,
}

impl TcpTransport {
    /// A transport to the relay at `addr`.
    pub fn new(addr: SocketAddr, token: Token) -> Self {
        TcpTransport { addr, token }
    }
}

impl Transport for TcpTransport {
    fn kind(&self) -> crate::TransportKind {
        crate::TransportKind::Tcp
    }
    fn open(&self) -> Result<Box<dyn RangeReader>, Error> {
        let s = connect(self.addr, &self.token, Kind::Data, IO_TIMEOUT)?;
        Ok(Box::new(StreamReader { s }))
    }
}

/// One data connection over a byte stream (TCP, or the shm transport's unix socket).
pub struct StreamReader<S> {
    /// The authenticated connection.
    pub s: S,
}

impl<S: Read + Write> StreamReader<S> {
    /// Send a request and read the response header; returns the body length of a success, or the
    /// relay's refusal as an error.
    pub fn request(&mut self, req: Request, op: &'static str) -> Result<u32, Error> {
        self.s.write_all(&req.encode()).map_err(Error::io("send read request"))?;
        self.response(op)
    }

    /// Read a response header: the body length of a success, or the peer's refusal as an error.
    pub fn response(&mut self, op: &'static str) -> Result<u32, Error> {
        let mut h = [0u8; 5];
        self.s.read_exact(&mut h).map_err(Error::io("read response header"))?;
        let len = u32::from_be_bytes(h[1..].try_into().expect("4 bytes"));
        if len > READ_MAX {
            return Err(Error::Protocol(format!("response of {len} bytes exceeds {READ_MAX}")));
        }
        if h[0] != 0 {
            if len as usize > limits::ERROR_MESSAGE_BYTES_MAX {
                return Err(Error::Protocol(format!("error message of {len} bytes exceeds {}", limits::ERROR_MESSAGE_BYTES_MAX)));
            }
            let mut msg = vec![0u8; len as usize];
            self.s.read_exact(&mut msg).map_err(Error::io("read error message"))?;
            let message = String::from_utf8_lossy(&msg).into_owned();
            return Err(match h[0] {
                crate::wire::STATUS_BUSY => Error::Busy(message),
                _ => Error::Refused { op, message },
            });
        }
        Ok(len)
    }
}

impl<S: Read + Write + Send> RangeReader for StreamReader<S> {
    fn read(&mut self, generation: u64, offset: u64, buf: &mut [u8]) -> Result<(), Error> {
        let len = u32::try_from(buf.len()).ok().filter(|l| *l <= READ_MAX).ok_or_else(|| Error::Protocol("read too large".into()))?;
        let got = self.request(Request::Range { generation, offset, len }, "block read")?;
        if got != len {
            return Err(Error::Protocol(format!("asked {len} bytes, relay answers {got}")));
        }
        self.s.read_exact(buf).map_err(Error::io("read block bytes"))
    }

    fn read_log(&mut self, generation: u64, from: u64, max: u32) -> Result<Vec<u8>, Error> {
        let got = self.request(Request::Log { generation, from, max }, "log read")?;
        if got > max {
            return Err(Error::Protocol(format!("asked at most {max} log bytes, relay answers {got}")));
        }
        let mut buf = vec![0u8; got as usize];
        self.s.read_exact(&mut buf).map_err(Error::io("read log bytes"))?;
        Ok(buf)
    }
}

/// Relay side, over TLS: the same answer, the bytes read from `file` and encrypted (no `sendfile`:
/// the bytes must pass through user space to be encrypted).
pub fn send_range_copied<S: Write>(s: &mut S, file: &std::fs::File, offset: u64, len: u32) -> Result<(), Error> {
    use std::os::unix::fs::FileExt;
    s.write_all(&response_header(true, len)).map_err(Error::io("send response header"))?;
    let mut buf = vec![0u8; (len as usize).min(limits::READ_CHUNK_BYTES.max(1 << 20))];
    let (mut off, mut left) = (offset, len as usize);
    while left > 0 {
        let n = left.min(buf.len());
        file.read_exact_at(&mut buf[..n], off).map_err(Error::io("read block from the region"))?;
        s.write_all(&buf[..n]).map_err(Error::io("send block"))?;
        off += n as u64;
        left -= n;
    }
    Ok(())
}

/// Relay side: answer a range read with a header and `len` bytes of `file` from `offset`, with
/// `sendfile`.
pub fn send_range<S: Write + std::os::fd::AsFd>(s: &mut S, file: &std::fs::File, offset: u64, len: u32) -> Result<(), Error> {
    s.write_all(&response_header(true, len)).map_err(Error::io("send response header"))?;
    let mut off = offset;
    let mut left = len as usize;
    while left > 0 {
        let n = match rustix::fs::sendfile(&*s, file, Some(&mut off), left) {
            Ok(n) => n,
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(Error::Io { op: "sendfile block", source: e.into() }),
        };
        if n == 0 {
            return Err(Error::Protocol("sendfile made no progress (region shorter than published?)".into()));
        }
        left -= n as usize;
    }
    Ok(())
}

/// Relay side: answer with bytes from memory.
pub fn send_bytes<S: Write>(s: &mut S, bytes: &[u8]) -> Result<(), Error> {
    let mut out = response_header(true, bytes.len() as u32).to_vec();
    out.extend_from_slice(bytes);
    s.write_all(&out).map_err(Error::io("send log bytes"))
}

/// Relay side: refuse a request with a message.
pub fn send_error<S: Write>(s: &mut S, message: &str) -> Result<(), Error> {
    send_status(s, 1, message)
}

/// Peer side: refuse a block read because this agent serves its maximum already.
pub fn send_busy<S: Write>(s: &mut S) -> Result<(), Error> {
    send_status(s, crate::wire::STATUS_BUSY, "busy")
}

fn send_status<S: Write>(s: &mut S, status: u8, message: &str) -> Result<(), Error> {
    let m = &message.as_bytes()[..message.len().min(limits::ERROR_MESSAGE_BYTES_MAX)];
    let mut out = crate::wire::status_header(status, m.len() as u32).to_vec();
    out.extend_from_slice(m);
    s.write_all(&out).map_err(Error::io("send error"))
}
