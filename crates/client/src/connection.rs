//! A connection to one server: connect (TLS optionally), authenticate, send commands (one, or many
//! pipelined) and read their replies through the resp crate's bounded decoder.

use crate::error::Error;
use crate::info::Info;
use crate::tls;
use replication::replica::Auth;
use resp::{Frame, Limits};
use std::io::{Read, Write};
use std::time::Duration;

/// A connection to one server.
pub struct Client {
    s: tls::Stream,
    addr: String,
    buf: Vec<u8>,
    limits: Limits,
}

impl Client {
    /// Connect, and authenticate if `auth` is given.
    pub fn connect(addr: &str, auth: Option<&Auth>, timeout: Duration) -> Result<Client, Error> {
        Self::connect_tls(addr, auth, timeout, None)
    }

    /// Connect over TLS when `tls` is given, and authenticate if `auth` is given.
    pub fn connect_tls(addr: &str, auth: Option<&Auth>, timeout: Duration, tls: Option<&tls::Tls>) -> Result<Client, Error> {
        let s = tls::connect(addr, tls, timeout).map_err(|(op, source)| Error::Io { op, addr: addr.into(), source })?;
        let mut c = Client { s, addr: addr.to_string(), buf: Vec::new(), limits: Limits { bulk_len_max: limits::CLIENT_BULK_BYTES_MAX, ..Limits::default() } };
        if let Some(a) = auth {
            let r = match &a.user {
                Some(u) => c.raw(&[b"AUTH".as_slice(), u.as_bytes(), a.password.as_bytes()])?,
                None => c.raw(&[b"AUTH".as_slice(), a.password.as_bytes()])?,
            };
            if let Frame::Error(e) = r {
                return Err(Error::server(addr, b"AUTH", &e));
            }
        }
        Ok(c)
    }

    /// The server's address.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// Change the read timeout (long-running commands such as `DEBUG RELOAD`).
    pub fn set_timeout(&mut self, t: Duration) {
        let _ = self.s.tcp().set_read_timeout(Some(t));
    }

    /// Send one command and return its reply, error replies included.
    pub fn raw<A: AsRef<[u8]>>(&mut self, args: &[A]) -> Result<Frame, Error> {
        let mut out = Vec::new();
        resp::encode_command(&mut out, args);
        self.send(&out)?;
        self.read_reply()
    }

    /// Send one command; an error reply becomes [`Error::Server`].
    pub fn cmd<A: AsRef<[u8]>>(&mut self, args: &[A]) -> Result<Frame, Error> {
        match self.raw(args)? {
            Frame::Error(e) => Err(Error::server(&self.addr, args.first().map(AsRef::as_ref).unwrap_or(b""), &e)),
            f => Ok(f),
        }
    }

    /// Send many commands at once and read all replies (error replies included, in order).
    pub fn pipeline(&mut self, cmds: &[Vec<Vec<u8>>]) -> Result<Vec<Frame>, Error> {
        let mut out = Vec::new();
        for c in cmds {
            resp::encode_command(&mut out, c);
        }
        self.send(&out)?;
        (0..cmds.len()).map(|_| self.read_reply()).collect()
    }

    /// `INFO <section>`.
    pub fn info(&mut self, section: &str) -> Result<Info, Error> {
        let f = self.cmd(&["INFO", section])?;
        Ok(Info::parse(&f.as_text().unwrap_or_default()))
    }

    /// `CONFIG GET <name>` (one value; `None` when the server does not know the parameter).
    pub fn config_get(&mut self, name: &str) -> Result<Option<String>, Error> {
        let f = self.cmd(&["CONFIG", "GET", name])?;
        Ok(f.as_array().and_then(|a| a.get(1)).and_then(Frame::as_text))
    }

    /// `CONFIG SET <name> <value>`.
    pub fn config_set(&mut self, name: &str, value: &str) -> Result<(), Error> {
        self.cmd(&["CONFIG", "SET", name, value]).map(|_| ())
    }

    /// The next frame the server pushes (pub/sub messages after `SUBSCRIBE`), or `None` when nothing
    /// arrived within `wait`. A partial frame stays buffered for the next call.
    pub fn next_push(&mut self, wait: Duration) -> Result<Option<Frame>, Error> {
        let before = self.s.tcp().read_timeout().ok().flatten();
        let _ = self.s.tcp().set_read_timeout(Some(wait));
        let r = self.read_reply();
        let _ = self.s.tcp().set_read_timeout(before);
        match r {
            Ok(f) => Ok(Some(f)),
            Err(Error::Io { source, .. }) if matches!(source.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn send(&mut self, bytes: &[u8]) -> Result<(), Error> {
        let addr = self.addr.clone();
        self.s.write_all(bytes).map_err(|source| Error::Io { op: "send to", addr, source })
    }

    fn read_reply(&mut self) -> Result<Frame, Error> {
        loop {
            match resp::parse(&self.buf, &self.limits) {
                Ok((f, used)) => {
                    self.buf.drain(..used);
                    return Ok(f);
                }
                Err(resp::Error::Incomplete) => {}
                Err(source) => return Err(Error::Resp { addr: self.addr.clone(), source }),
            }
            let mut chunk = [0u8; limits::READ_CHUNK_BYTES];
            let n = self.s.read(&mut chunk).map_err(|source| Error::Io { op: "read from", addr: self.addr.clone(), source })?;
            if n == 0 {
                return Err(Error::Io { op: "read from", addr: self.addr.clone(), source: std::io::ErrorKind::UnexpectedEof.into() });
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }
}

/// Convenience: turn string-ish arguments into an owned command for [`Client::pipeline`].
pub fn command<A: AsRef<[u8]>>(args: &[A]) -> Vec<Vec<u8>> {
    args.iter().map(|a| a.as_ref().to_vec()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_splits_arguments() {
        assert_eq!(command(&["SET", "k", "v"]), vec![b"SET".to_vec(), b"k".to_vec(), b"v".to_vec()]);
    }
}
