//! The agent's side of the TCP transport: connecting and authenticating to a relay (or a peer
//! agent), and range reads as framed request/response on the data connection. Every answer's header
//! is read and judged here ([`read_answer`]), for the shm and ucx readers and the tracker link too.
//! The relay's side is [`crate::serve`].

use crate::auth::{self, Kind};
use crate::tls::Conn;
use crate::wire::{Request, ResponseHeader, Status, READ_MAX, RESPONSE_HEADER_LEN};
use crate::Credentials;
use crate::{Error, Operation, RangeReader, Transport};
use endpoint::Endpoint;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// How long a read may wait on the relay before the agent gives up on it.
pub const IO_TIMEOUT: Duration = limits::IO_TIMEOUT;

/// Connect to a relay and authenticate as `kind` (over TLS when the token says the relay wants it).
pub fn connect(addr: &Endpoint, creds: &Credentials, kind: Kind, timeout: Duration) -> Result<Conn, Error> {
    connect_with(addr, creds, kind, timeout, timeout, Operation::ConnectToRelay)
}

/// What a socket holds to read, looked at without waiting (the client crate's peek, beside the
/// connection type it serves).
pub use client::stream::bytes_waiting;

/// Connect (within `connect_timeout`) to a relay or a peer agent and authenticate as `kind`; every
/// later read and write must complete within `io_timeout`. `op` names the connect in errors. A host
/// name is resolved again at every call, and each address it resolves to is tried in turn.
pub fn connect_with(addr: &Endpoint, creds: &Credentials, kind: Kind, connect_timeout: Duration, io_timeout: Duration, op: Operation) -> Result<Conn, Error> {
    // The endpoint's error names only what a name resolved to: the address is said here, once.
    let s: TcpStream = addr.connect(connect_timeout).map_err(|e| std::io::Error::new(e.kind(), format!("{addr}: {e}"))).map_err(Error::io(op))?;
    s.set_nodelay(true).map_err(Error::io(Operation::SetNodelay))?;
    s.set_read_timeout(Some(io_timeout)).map_err(Error::io(Operation::SetReadTimeout))?;
    s.set_write_timeout(Some(io_timeout)).map_err(Error::io(Operation::SetWriteTimeout))?;
    let mut s = match creds.relay_tls() {
        None => Conn::Plain(s),
        Some(t) => t.connect(s, addr.host()).map_err(Error::io(Operation::TlsToRelay))?,
    };
    auth::client(&mut s, creds.token(), kind)?;
    Ok(s)
}

/// The TCP transport to one relay.
#[derive(Debug, Clone)]
pub struct TcpTransport {
    addr: Endpoint,
    creds: Credentials,
}

impl TcpTransport {
    /// A transport to the relay at `addr`.
    pub fn new(addr: impl Into<Endpoint>, creds: Credentials) -> Self {
        TcpTransport { addr: addr.into(), creds }
    }
}

impl Transport for TcpTransport {
    fn kind(&self) -> crate::TransportKind {
        crate::TransportKind::Tcp
    }
    fn depth(&self) -> usize {
        limits::READS_IN_FLIGHT_PER_CONNECTION
    }

    fn open(&self) -> Result<Box<dyn RangeReader>, Error> {
        let s = connect(&self.addr, &self.creds, Kind::Data, IO_TIMEOUT)?;
        Ok(Box::new(StreamReader::new(s)))
    }
}

/// The pieces a block's bytes are read and told in ([`RangeReader::receive_pieces`]; the reason:
/// [`limits::ARRIVAL_PIECE_BYTES`]).
pub const PIECE: usize = limits::ARRIVAL_PIECE_BYTES;

/// One data connection over a byte stream (TCP, or the shm transport's unix socket).
pub struct StreamReader<S> {
    /// The authenticated connection.
    pub s: S,
    /// Lengths of the block reads sent and not answered yet, oldest first.
    sent: std::collections::VecDeque<u32>,
    /// A pipelined read failed part-way: where the next answer starts is unknown, so the connection
    /// takes nothing more.
    broken: bool,
}

impl<S> StreamReader<S> {
    /// A reader on the authenticated connection `s`.
    pub fn new(s: S) -> StreamReader<S> {
        StreamReader { s, sent: std::collections::VecDeque::new(), broken: false }
    }
}

impl<S: Read + Write> StreamReader<S> {
    /// Send a request and read the response header; returns the body length of a success, or the
    /// relay's refusal as an error.
    pub fn request(&mut self, req: Request, op: Operation) -> Result<u32, Error> {
        self.no_reads_outstanding(op)?;
        self.s.write_all(&req.encode()).map_err(Error::io(Operation::SendReadRequest))?;
        self.response(op)
    }

    /// [`StreamReader::request`] for a request followed by a body.
    pub fn request_with_body(&mut self, req: Request, body: &[u8], op: Operation) -> Result<u32, Error> {
        self.no_reads_outstanding(op)?;
        let mut out = req.encode().to_vec();
        out.extend_from_slice(body);
        self.s.write_all(&out).map_err(Error::io(Operation::SendRequest))?;
        self.response(op)
    }

    /// Answers come in the order asked: a request that waits for its answer cannot overtake reads sent
    /// without waiting.
    fn no_reads_outstanding(&self, op: Operation) -> Result<(), Error> {
        self.in_step(op)?;
        if self.sent.is_empty() {
            Ok(())
        } else {
            Err(Error::Protocol(format!("{op} asked while {} block reads are outstanding on the connection", self.sent.len())))
        }
    }

    /// Read a response header: the body length of a success, or the peer's refusal as an error.
    pub fn response(&mut self, op: Operation) -> Result<u32, Error> {
        let mut h = [0u8; RESPONSE_HEADER_LEN];
        self.s.read_exact(&mut h).map_err(Error::io(Operation::ReadResponseHeader))?;
        read_answer(&mut self.s, &h, op)
    }
}

/// Judge a response header read from `s`: the body length of a success, or, after reading its
/// message, the refusal as an error ([`Error::Busy`] for a busy peer). `op` names the request.
pub fn read_answer<S: Read>(s: &mut S, header: &[u8; RESPONSE_HEADER_LEN], op: Operation) -> Result<u32, Error> {
    let h = ResponseHeader::decode(header)?;
    if h.status == Status::Ok {
        return Ok(h.len);
    }
    debug_assert!(h.len as usize <= limits::ERROR_MESSAGE_BYTES_MAX, "a refusal's message is bounded by decode before its buffer is allocated");
    let mut msg = vec![0u8; h.len as usize];
    s.read_exact(&mut msg).map_err(Error::io(Operation::ReadErrorMessage))?;
    let message = String::from_utf8_lossy(&msg).into_owned();
    Err(match h.status {
        Status::Busy => Error::Busy(message),
        Status::Ok | Status::Error => Error::Refused { op, message },
    })
}

impl<S> StreamReader<S> {
    /// Whether the connection can take `op`: not after a block read failed part-way.
    fn in_step(&self, op: Operation) -> Result<(), Error> {
        if self.broken {
            return Err(Error::Protocol(format!("{op} asked on a connection whose earlier block read failed part-way")));
        }
        Ok(())
    }

    /// A block read failed part-way: `e`, and the connection takes nothing more.
    fn out_of_step(&mut self, e: Error) -> Error {
        self.broken = true;
        e
    }
}

impl<S: Read + Write + Send> RangeReader for StreamReader<S> {
    fn read(&mut self, generation: u64, offset: u64, buf: &mut [u8]) -> Result<(), Error> {
        let len = u32::try_from(buf.len()).map_err(|_| Error::Protocol(format!("block read of {} bytes: too large", buf.len())))?;
        // A plain read waits for its own answer: it cannot follow pipelined ones.
        self.no_reads_outstanding(Operation::BlockRead)?;
        self.send(generation, offset, len)?;
        self.receive(buf)
    }

    fn depth(&self) -> usize {
        limits::READS_IN_FLIGHT_PER_CONNECTION
    }

    fn send(&mut self, generation: u64, offset: u64, len: u32) -> Result<(), Error> {
        if len > READ_MAX {
            return Err(Error::Protocol(format!("block read of {len} bytes: more than {READ_MAX}")));
        }
        self.in_step(Operation::BlockRead)?;
        if self.sent.len() >= self.depth() {
            return Err(Error::Protocol(format!("more than {} block reads in flight on one connection", self.depth())));
        }
        if let Err(e) = self.s.write_all(&Request::Range { generation, offset, len }.encode()) {
            return Err(self.out_of_step(Error::io(Operation::SendBlockReadRequest)(e)));
        }
        self.sent.push_back(len);
        Ok(())
    }

    fn receive(&mut self, buf: &mut [u8]) -> Result<(), Error> {
        self.receive_pieces(buf, &mut |_| {})
    }

    fn receive_pieces(&mut self, buf: &mut [u8], arrived: &mut dyn FnMut(&[u8])) -> Result<(), Error> {
        let len = *self.sent.front().ok_or_else(|| Error::Protocol("block read answer awaited with no block read outstanding".into()))?;
        if buf.len() != len as usize {
            return Err(Error::Protocol(format!("a {}-byte buffer for the answer to a {len}-byte block read", buf.len())));
        }
        debug_assert!(len <= READ_MAX, "send queues only reads within the bound");
        self.sent.pop_front();
        // A refusal (an error or busy answer, its message read whole) leaves the connection in step;
        // anything else that fails part-way does not.
        let got = match self.response(Operation::BlockRead) {
            Ok(got) => got,
            Err(e @ (Error::Refused { .. } | Error::Busy(_))) => return Err(e),
            Err(e) => return Err(self.out_of_step(e)),
        };
        if got != len {
            return Err(self.out_of_step(Error::Protocol(format!("block read of {len} bytes answered with {got}"))));
        }
        // In pieces, each told as soon as it is here: what a peer is sent of a block still arriving
        // follows this loop, one piece behind at most.
        let mut at = 0;
        while at < buf.len() {
            let end = (at + PIECE).min(buf.len());
            if let Err(e) = self.s.read_exact(&mut buf[at..end]) {
                return Err(self.out_of_step(Error::io(Operation::ReadBlockBytes)(e)));
            }
            arrived(&buf[at..end]);
            debug_assert!(at < end && end <= buf.len(), "each piece moves on, never past the buffer");
            at = end;
        }
        Ok(())
    }

    fn read_log(&mut self, generation: u64, from: u64, max: u32) -> Result<Vec<u8>, Error> {
        let got = self.request(Request::Log { generation, from, max }, Operation::LogRead)?;
        if got > max {
            return Err(Error::Protocol(format!("asked at most {max} log bytes, relay answers {got}")));
        }
        debug_assert!(got <= max, "a log answer is bounded before its buffer is allocated");
        let mut buf = vec![0u8; got as usize];
        self.s.read_exact(&mut buf).map_err(Error::io(Operation::ReadLogBytes))?;
        Ok(buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A connection whose answers are scripted and whose requests are thrown away.
    struct Scripted(std::io::Cursor<Vec<u8>>);

    impl Read for Scripted {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            self.0.read(buf)
        }
    }

    impl Write for Scripted {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn answers(parts: &[&[u8]]) -> StreamReader<Scripted> {
        StreamReader::new(Scripted(std::io::Cursor::new(parts.concat())))
    }

    #[test]
    fn a_block_is_told_in_pieces_as_it_is_read() {
        let len = 2 * PIECE + 7;
        let body: Vec<u8> = (0..len).map(|i| i as u8).collect();
        let mut r = answers(&[&ResponseHeader::ok(len as u32).encode(), &body]);
        r.send(1, 0, len as u32).unwrap();
        let mut buf = vec![0u8; len];
        let mut pieces: Vec<Vec<u8>> = Vec::new();
        r.receive_pieces(&mut buf, &mut |p| pieces.push(p.to_vec())).unwrap();
        assert_eq!(pieces.iter().map(Vec::len).collect::<Vec<_>>(), vec![PIECE, PIECE, 7]);
        assert_eq!(pieces.concat(), body, "every byte told once, in order");
        assert_eq!(buf, body);
        // A body that ends early: the pieces read are told, the connection takes nothing more.
        let mut r = answers(&[&ResponseHeader::ok(len as u32).encode(), &body[..PIECE + 1]]);
        r.send(1, 0, len as u32).unwrap();
        let mut told = 0;
        let e = r.receive_pieces(&mut buf, &mut |p| told += p.len()).unwrap_err();
        assert!(e.is_cut_off(), "{e:?}");
        assert_eq!(told, PIECE);
        assert!(r.send(1, 0, 4).is_err(), "out of step after a body cut short");
        // An end of stream before the answer's header is a peer that stopped, not a cut-off.
        let mut r = answers(&[]);
        r.send(1, 0, 4).unwrap();
        let e = r.receive(&mut buf[..4]).unwrap_err();
        assert!(!e.is_cut_off(), "{e:?}");
    }

    #[test]
    fn a_plain_read_cannot_overtake_pipelined_ones() {
        let mut r = answers(&[&ResponseHeader::ok(4).encode(), b"abcd"]);
        r.send(1, 0, 4).unwrap();
        let mut buf = [0u8; 4];
        assert!(matches!(r.read(1, 4, &mut buf), Err(Error::Protocol(_))), "its answer would be the earlier read's");
        r.receive(&mut buf).unwrap();
        assert_eq!(&buf, b"abcd");
    }

    #[test]
    fn a_refusal_keeps_the_connection_and_a_wrong_answer_breaks_it() {
        let refusal = ResponseHeader { status: Status::Error, len: 2 }.encode();
        let mut r = answers(&[&refusal, b"no", &ResponseHeader::ok(3).encode(), b"abc"]);
        let mut buf = [0u8; 4];
        assert!(matches!(r.read(1, 0, &mut buf), Err(Error::Refused { .. })));
        r.send(1, 4, 4).unwrap();
        assert!(matches!(r.receive(&mut [0u8; 3]), Err(Error::Protocol(m)) if m.contains("3-byte buffer")), "a buffer of the wrong size is refused before anything is read");
        assert!(matches!(r.receive(&mut buf), Err(Error::Protocol(m)) if m.contains("answered with 3")), "3 bytes answered for a 4-byte read (the read was still outstanding)");
        assert!(r.send(1, 8, 4).is_err() && r.read(1, 8, &mut buf).is_err(), "out of step: nothing more on this connection");
    }
}
