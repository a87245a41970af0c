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
    /// The server's reply is valid RESP but not an answer the command can give (an unknown
    /// replication role, a missing field).
    #[error("{addr}: {what}")]
    Unexpected {
        /// The server.
        addr: String,
        /// What was wrong.
        what: String,
    },
    /// The server answered with an error.
    #[error("{addr} answered {command}: {message}")]
    Server {
        /// The server.
        addr: String,
        /// The command (name only: arguments may be secrets).
        command: String,
        /// The error's code (its first word), what callers decide on.
        code: ErrorCode,
        /// The error text.
        message: String,
    },
}

impl Error {
    /// The server's error code, when the server answered with an error.
    pub fn code(&self) -> Option<&ErrorCode> {
        match self {
            Error::Server { code, .. } => Some(code),
            _ => None,
        }
    }

    /// The server refused our credentials or the command for lack of permission (`NOPERM`,
    /// `WRONGPASS`, `NOAUTH`): the same request will be refused again until an operator acts.
    pub fn is_permission(&self) -> bool {
        self.code().is_some_and(ErrorCode::is_permission)
    }

    pub(crate) fn server(addr: &str, command: &[u8], message: &[u8]) -> Error {
        let message = String::from_utf8_lossy(message).into_owned();
        Error::Server { addr: addr.into(), command: String::from_utf8_lossy(command).into_owned(), code: ErrorCode::parse(&message), message }
    }
}

/// The first word of a server's error reply (`-NOPERM this user has no permissions …`): the kind of
/// refusal, parsed once here so that callers match on a type, never on the text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ErrorCode {
    /// `NOPERM`: the ACL user may not run this command (or touch this key or channel).
    NoPerm,
    /// `WRONGPASS`: the username or password is wrong.
    WrongPass,
    /// `NOAUTH`: the server requires authentication and we gave none.
    NoAuth,
    /// `LOADING`: the server is loading its dataset; it answers once done.
    Loading,
    /// `READONLY`: a write sent to a read-only replica.
    ReadOnly,
    /// `BUSY`: a script or function is running.
    Busy,
    /// `MASTERDOWN`: a replica whose link to its master is down refuses to serve.
    MasterDown,
    /// `ERR`: the generic error (an unknown command, a bad argument, …).
    Err,
    /// Any other code, as the server spelled it.
    Other(String),
}

impl ErrorCode {
    /// The code of an error reply's text: its first word, when that is all capitals.
    pub fn parse(message: &str) -> ErrorCode {
        let word = message.split(' ').next().unwrap_or("");
        match word {
            "NOPERM" => ErrorCode::NoPerm,
            "WRONGPASS" => ErrorCode::WrongPass,
            "NOAUTH" => ErrorCode::NoAuth,
            "LOADING" => ErrorCode::Loading,
            "READONLY" => ErrorCode::ReadOnly,
            "BUSY" => ErrorCode::Busy,
            "MASTERDOWN" => ErrorCode::MasterDown,
            "ERR" => ErrorCode::Err,
            w if !w.is_empty() && w.len() <= 32 && w.bytes().all(|b| b.is_ascii_uppercase() || b == b'_') => ErrorCode::Other(w.into()),
            _ => ErrorCode::Err,
        }
    }

    /// A refusal of our credentials or of the command: only an operator can change that.
    pub fn is_permission(&self) -> bool {
        matches!(self, ErrorCode::NoPerm | ErrorCode::WrongPass | ErrorCode::NoAuth)
    }
}

/// A server's replication role (`INFO replication`'s `role:` field).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// `role:master`: it takes writes (a standalone server is a master without replicas).
    Master,
    /// `role:slave` (the word Redis and Valkey still print): it follows a master.
    Replica,
}

impl std::str::FromStr for Role {
    type Err = UnknownRole;
    fn from_str(s: &str) -> Result<Role, UnknownRole> {
        match s {
            "master" => Ok(Role::Master),
            "slave" | "replica" => Ok(Role::Replica),
            other => Err(UnknownRole(other.into())),
        }
    }
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Role::Master => "master",
            Role::Replica => "replica",
        })
    }
}

/// A `role:` value that is neither `master` nor `slave` (or no `role:` field at all: empty).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", if .0.is_empty() { "INFO replication has no role field".to_string() } else { format!("unknown replication role {:?}", .0) })]
pub struct UnknownRole(pub String);

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
    /// The `role:` field (of `INFO replication`).
    pub fn role(&self) -> Result<Role, UnknownRole> {
        self.get("role").unwrap_or("").parse()
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

pub mod pem;
pub mod sentinel;
pub mod stream;
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
    fn error_codes_are_the_first_word() {
        assert_eq!(ErrorCode::parse("NOPERM this user has no permissions to run the 'info' command"), ErrorCode::NoPerm);
        assert_eq!(ErrorCode::parse("WRONGPASS invalid username-password pair or user is disabled."), ErrorCode::WrongPass);
        assert_eq!(ErrorCode::parse("NOAUTH Authentication required."), ErrorCode::NoAuth);
        assert_eq!(ErrorCode::parse("LOADING Redis is loading the dataset in memory"), ErrorCode::Loading);
        assert_eq!(ErrorCode::parse("ERR unknown command 'FOO'"), ErrorCode::Err);
        assert_eq!(ErrorCode::parse("CROSSSLOT Keys in request don't hash to the same slot"), ErrorCode::Other("CROSSSLOT".into()));
        assert_eq!(ErrorCode::parse("no code here"), ErrorCode::Err, "an error without a code is the generic one");
        assert_eq!(ErrorCode::parse(""), ErrorCode::Err);
        assert!(ErrorCode::NoPerm.is_permission() && ErrorCode::WrongPass.is_permission() && ErrorCode::NoAuth.is_permission());
        assert!(!ErrorCode::Loading.is_permission() && !ErrorCode::Err.is_permission());
        let e = Error::server("h:1", b"INFO", b"NOPERM this user has no permissions to run the 'info' command");
        assert!(e.is_permission());
        assert!(e.to_string().contains("answered INFO: NOPERM"), "{e}");
    }

    #[test]
    fn roles_parse_from_info_and_unknown_ones_are_errors() {
        assert_eq!(Info::parse("role:master\r\n").role(), Ok(Role::Master));
        assert_eq!(Info::parse("role:slave\r\n").role(), Ok(Role::Replica));
        assert_eq!(Info::parse("role:sentinel\r\n").role(), Err(UnknownRole("sentinel".into())));
        assert!(Info::parse("").role().unwrap_err().to_string().contains("no role"));
    }

    #[test]
    fn command_splits_arguments() {
        assert_eq!(command(&["SET", "k", "v"]), vec![b"SET".to_vec(), b"k".to_vec(), b"v".to_vec()]);
    }
}
