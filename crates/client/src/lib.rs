//! A small blocking Redis/Valkey client: what the agent needs to manage its local server and ask the
//! master about its backlog, what `verify` needs to scan and compare datasets (pipelined), and what
//! tests need to write data.
#![deny(missing_docs)]

use replication::replica::Auth;
use resp::{Frame, Limits};
use std::collections::HashMap;
use std::io::{Read, Write};
use std::time::Duration;

/// Errors of the client.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A socket operation failed.
    #[error("{op} {addr}: {source}")]
    Io {
        /// What we were doing.
        op: &'static str,
        /// The server.
        addr: String,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// The server sent bytes that are not RESP, or too large.
    #[error("bad reply from {addr}: {source}")]
    Resp {
        /// The server.
        addr: String,
        /// Cause.
        #[source]
        source: resp::Error,
    },
    /// The server answered with an error.
    #[error("{addr} answered {command}: {message}")]
    Server {
        /// The server.
        addr: String,
        /// The command (name only: arguments may be secrets).
        command: String,
        /// The error text.
        message: String,
    },
}

/// A connection to one server.
pub struct Client {
    s: tls::Stream,
    addr: String,
    buf: Vec<u8>,
    limits: Limits,
}

/// Parsed `INFO` output: `field → value`.
#[derive(Debug, Clone, Default)]
pub struct Info(pub HashMap<String, String>);

impl Info {
    /// Parse the text of an `INFO` reply.
    pub fn parse(text: &str) -> Info {
        Info(
            text.lines()
                .filter(|l| !l.starts_with('#'))
                .filter_map(|l| l.split_once(':'))
                .map(|(k, v)| (k.to_string(), v.trim().to_string()))
                .collect(),
        )
    }
    /// A field's text.
    pub fn get(&self, k: &str) -> Option<&str> {
        self.0.get(k).map(String::as_str)
    }
    /// A numeric field.
    pub fn num(&self, k: &str) -> Option<i64> {
        self.get(k)?.parse().ok()
    }
}

impl Client {
    /// Connect, and authenticate if `auth` is given.
    pub fn connect(addr: &str, auth: Option<&Auth>, timeout: Duration) -> Result<Client, Error> {
        Self::connect_tls(addr, auth, timeout, None)
    }

    /// Connect over TLS when `tls` is given, and authenticate if `auth` is given.
    pub fn connect_tls(addr: &str, auth: Option<&Auth>, timeout: Duration, tls: Option<&tls::Tls>) -> Result<Client, Error> {
        let s = tls::connect(addr, tls, timeout).map_err(|(op, source)| Error::Io { op, addr: addr.into(), source })?;
        let mut c = Client { s, addr: addr.to_string(), buf: Vec::new(), limits: Limits { bulk_len_max: 1 << 30, ..Limits::default() } };
        if let Some(a) = auth {
            let r = match &a.user {
                Some(u) => c.raw(&[b"AUTH".as_slice(), u.as_bytes(), a.password.as_bytes()])?,
                None => c.raw(&[b"AUTH".as_slice(), a.password.as_bytes()])?,
            };
            if let Frame::Error(e) = r {
                return Err(Error::Server { addr: addr.into(), command: "AUTH".into(), message: String::from_utf8_lossy(&e).into() });
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
            Frame::Error(e) => Err(Error::Server {
                addr: self.addr.clone(),
                command: String::from_utf8_lossy(args.first().map(AsRef::as_ref).unwrap_or(b"")).into_owned(),
                message: String::from_utf8_lossy(&e).into_owned(),
            }),
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

pub mod sentinel;
pub mod tls;

/// Convenience: turn string-ish arguments into an owned command for [`Client::pipeline`].
pub fn command<A: AsRef<[u8]>>(args: &[A]) -> Vec<Vec<u8>> {
    args.iter().map(|a| a.as_ref().to_vec()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn info_skips_sections_and_keeps_values_with_colons() {
        let i = Info::parse("# Replication\r\nrole:slave\r\nmaster_host:::1\r\nmaster_repl_offset:42\r\n\r\nslave0:ip=1.2.3.4,port=5\r\n");
        assert_eq!(i.get("role"), Some("slave"));
        assert_eq!(i.get("master_host"), Some("::1"), "only the first colon separates");
        assert_eq!(i.num("master_repl_offset"), Some(42));
        assert_eq!(i.num("role"), None);
        assert_eq!(i.get("# Replication"), None);
        assert_eq!(i.get("missing"), None);
    }

    #[test]
    fn command_splits_arguments() {
        assert_eq!(command(&["SET", "k", "v"]), vec![b"SET".to_vec(), b"k".to_vec(), b"v".to_vec()]);
    }
}
