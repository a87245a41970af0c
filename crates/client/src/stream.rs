//! A client's connection, plain TCP or TLS over it: to a Redis server here, and (the same type, as
//! `transport::tls::Conn`) to a relay or a peer agent. The TLS handshake is completed when the
//! connection is made, so that a refused certificate is reported as such.

use rustls::pki_types::ServerName;
use rustls::{ClientConfig, ClientConnection, ServerConfig, ServerConnection, StreamOwned};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;

/// A connection: plain TCP or TLS over it.
pub enum Stream {
    /// Plain.
    Plain(TcpStream),
    /// TLS.
    Tls(Box<StreamOwned<ClientConnection, TcpStream>>),
}

/// TLS over `tcp` to `name`, handshake completed (so a refused certificate is reported as such);
/// `what` names the handshake in errors.
pub fn handshake(config: &Arc<ClientConfig>, name: ServerName<'static>, mut tcp: TcpStream, what: &str) -> std::io::Result<Stream> {
    let mut conn = ClientConnection::new(config.clone(), name).map_err(std::io::Error::other)?;
    while conn.is_handshaking() {
        conn.complete_io(&mut tcp).map_err(|e| std::io::Error::new(e.kind(), format!("{what}: {e}")))?;
    }
    Ok(Stream::Tls(Box::new(StreamOwned::new(conn, tcp))))
}

/// Serve TLS on an accepted connection, handshake completed (bounded by the socket's timeouts).
pub fn accept(config: &Arc<ServerConfig>, mut tcp: TcpStream) -> std::io::Result<StreamOwned<ServerConnection, TcpStream>> {
    let mut conn = ServerConnection::new(config.clone()).map_err(std::io::Error::other)?;
    while conn.is_handshaking() {
        conn.complete_io(&mut tcp)?;
    }
    Ok(StreamOwned::new(conn, tcp))
}

/// What a socket holds to read, looked at without waiting (one non-blocking peek for this call only:
/// the socket stays blocking for its reads and their timeouts): `Some(true)` bytes, `Some(false)`
/// nothing yet, `None` closed by the other end or failed (a read would say which).
pub fn bytes_waiting(s: &TcpStream) -> Option<bool> {
    let mut byte = [0u8; 1];
    match rustix::net::recv(s, &mut byte, rustix::net::RecvFlags::PEEK | rustix::net::RecvFlags::DONTWAIT) {
        Ok((0, _)) => None,
        Ok(_) => Some(true),
        Err(rustix::io::Errno::AGAIN | rustix::io::Errno::INTR) => Some(false),
        Err(_) => None,
    }
}

impl Stream {
    /// The TCP socket underneath (timeouts, addresses).
    pub fn tcp(&self) -> &TcpStream {
        match self {
            Stream::Plain(s) => s,
            Stream::Tls(s) => s.get_ref(),
        }
    }

    /// Whether a read would find bytes without waiting: decrypted by TLS already, or on the socket
    /// (also at the end of the stream, so that the read that follows reports it). Under TLS, bytes on
    /// the socket may be a record's first part: the read that follows then waits for the rest.
    pub fn readable_now(&mut self) -> std::io::Result<bool> {
        if let Stream::Tls(s) = self {
            let state = s.conn.process_new_packets().map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
            if state.plaintext_bytes_to_read() > 0 {
                return Ok(true);
            }
        }
        // Closed or failed counts as readable: the read that follows reports it.
        Ok(bytes_waiting(self.tcp()) != Some(false))
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Stream::Plain(s) => s.read(buf),
            Stream::Tls(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Stream::Plain(s) => s.write(buf),
            Stream::Tls(s) => s.write(buf),
        }
    }
    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Stream::Plain(s) => s.flush(),
            Stream::Tls(s) => s.flush(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_waiting_tells_nothing_yet_bytes_and_closed_apart() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (b, _) = l.accept().unwrap();
        assert_eq!(bytes_waiting(&b), Some(false));
        a.write_all(b"x").unwrap();
        let mut s = Stream::Plain(b);
        while !s.readable_now().unwrap() {
            std::thread::yield_now();
        }
        assert_eq!(bytes_waiting(s.tcp()), Some(true));
        let mut one = [0u8; 1];
        s.read_exact(&mut one).unwrap();
        drop(a);
        while bytes_waiting(s.tcp()).is_some() {
            std::thread::yield_now();
        }
        assert!(s.readable_now().unwrap(), "closed counts as readable: the read that follows reports it");
    }
}
