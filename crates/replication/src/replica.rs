//! The replica's side of the handshake with a master (what the relay sends to the real master).

use crate::{parse_u64, Error, ReplId};
use resp::{Frame, Limits};

/// Credentials for `AUTH`. The password is never printed by `Debug`.
#[derive(Clone)]
pub struct Auth {
    /// ACL user; `None` for the `requirepass` form.
    pub user: Option<String>,
    /// The password.
    pub password: String,
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Auth").field("user", &self.user).field("password", &"<redacted>").finish()
    }
}

/// One step of the handshake: the command to send and how to name it in errors.
#[derive(Debug, Clone)]
pub struct Step {
    /// Name of the step, for messages.
    pub name: &'static str,
    /// The encoded command.
    pub command: Vec<u8>,
    /// What its answer is.
    pub expects: Expects,
}

/// What a handshake step's answer is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expects {
    /// `+OK` / `+PONG`; an error fails the handshake.
    Ok,
    /// `INFO server`'s text: which server the source is (an error or anything else: not known).
    ServerInfo,
}

impl Step {
    fn new(name: &'static str, args: &[&str], expects: Expects) -> Step {
        let mut command = Vec::new();
        resp::encode_command(&mut command, args);
        Step { name, command, expects }
    }
}

/// `REPLCONF version <v>`: the server version a replica announces; a Valkey master chooses the RDB
/// version it writes from it. Redis refuses the option: sent to Valkey sources only.
pub fn announce_version(version: &str) -> Step {
    Step::new("REPLCONF version", &["REPLCONF", "version", version], Expects::Ok)
}

/// The commands a replica sends before `PSYNC`, in order, with an `INFO server` after `PING` (so the
/// capture knows whom it talks to, and whether to announce a version: [`announce_version`]).
pub fn handshake(auth: Option<&Auth>, listening_port: u16) -> Vec<Step> {
    let mut steps = Vec::new();
    let mut push = |name, args: &[&str]| steps.push(Step::new(name, args, Expects::Ok));
    // AUTH comes first: a master with requirepass answers PING with -NOAUTH.
    if let Some(a) = auth {
        match &a.user {
            Some(u) => push("AUTH", &["AUTH", u, &a.password]),
            None => push("AUTH", &["AUTH", &a.password]),
        }
    }
    push("PING", &["PING"]);
    steps.push(Step::new("INFO server", &["INFO", "server"], Expects::ServerInfo));
    let mut push = |name, args: &[&str]| steps.push(Step::new(name, args, Expects::Ok));
    push("REPLCONF listening-port", &["REPLCONF", "listening-port", &listening_port.to_string()]);
    push("REPLCONF capa", &["REPLCONF", "capa", "eof", "capa", "psync2"]);
    steps
}

/// Check a handshake reply: any non-error simple reply is fine (`+OK`, `+PONG`).
pub fn check_reply(step: &Step, reply: &Frame) -> Result<(), Error> {
    match reply {
        Frame::Error(e) => Err(Error::Refused { step: step.name, message: String::from_utf8_lossy(e).into_owned() }),
        Frame::Simple(_) => Ok(()),
        other => Err(Error::Protocol(format!("unexpected reply to {}: {other:?}", step.name))),
    }
}

/// `PSYNC ? -1`: ask for a full resynchronization.
pub fn psync_full() -> Vec<u8> {
    let mut out = Vec::new();
    resp::encode_command(&mut out, &["PSYNC", "?", "-1"]);
    out
}

/// `REPLCONF ACK <offset>`.
pub fn ack(offset: u64) -> Vec<u8> {
    let mut out = Vec::new();
    resp::encode_command(&mut out, &["REPLCONF", "ACK", &offset.to_string()]);
    out
}

/// The master's answer to `PSYNC`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PsyncReply {
    /// `+FULLRESYNC <replid> <offset>`: an RDB follows; the stream continues at `offset + 1`.
    FullResync {
        /// The master's replication ID.
        replid: ReplId,
        /// The master's offset at the point in time of the RDB.
        offset: u64,
    },
    /// `+CONTINUE [<replid>]`: partial resynchronization accepted.
    Continue(Option<ReplId>),
}

/// Skip the bare `\n` keep-alives a master sends while it prepares (before the PSYNC reply and
/// before the RDB). Returns how many bytes to skip.
pub fn skip_keepalives(buf: &[u8]) -> usize {
    buf.iter().take_while(|&&c| c == b'\n').count()
}

/// Parse the reply to `PSYNC` at the start of `buf` (after keep-alives). `Ok(None)` = need more bytes.
pub fn parse_psync_reply(buf: &[u8], limits: &Limits) -> Result<Option<(PsyncReply, usize)>, Error> {
    let skip = skip_keepalives(buf);
    let (frame, used) = match resp::parse(&buf[skip..], limits) {
        Ok(x) => x,
        Err(resp::Error::Incomplete) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let line = match frame {
        Frame::Simple(s) => s,
        Frame::Error(e) => return Err(Error::Refused { step: "PSYNC", message: String::from_utf8_lossy(&e).into_owned() }),
        other => return Err(Error::Protocol(format!("unexpected reply to PSYNC: {other:?}"))),
    };
    let parts: Vec<&[u8]> = line.split(|c| *c == b' ').filter(|p| !p.is_empty()).collect();
    let reply = match parts.as_slice() {
        [b"FULLRESYNC", id, off] => PsyncReply::FullResync { replid: ReplId::parse(id)?, offset: parse_u64(off, "offset")? },
        [b"CONTINUE"] => PsyncReply::Continue(None),
        [b"CONTINUE", id] => PsyncReply::Continue(Some(ReplId::parse(id)?)),
        _ => return Err(Error::Protocol(format!("unexpected reply to PSYNC: {:?}", String::from_utf8_lossy(&line)))),
    };
    Ok(Some((reply, skip + used)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handshake_puts_auth_first_and_hides_password() {
        let auth = Auth { user: Some("repl".into()), password: "s3cret".into() };
        let steps = handshake(Some(&auth), 7400);
        assert_eq!(steps[0].name, "AUTH");
        assert_eq!(steps[1].name, "PING");
        assert!(!format!("{auth:?}").contains("s3cret"));
        assert!(check_reply(&steps[0], &Frame::Error(b"WRONGPASS".to_vec())).is_err());
        assert!(check_reply(&steps[1], &Frame::Simple(b"PONG".to_vec())).is_ok());
    }

    #[test]
    fn psync_reply_after_keepalives() {
        let id = "a".repeat(40);
        let buf = format!("\n\n+FULLRESYNC {id} 1234\r\n$EOF:");
        let (r, used) = parse_psync_reply(buf.as_bytes(), &Limits::default()).unwrap().unwrap();
        assert_eq!(r, PsyncReply::FullResync { replid: ReplId::parse(id.as_bytes()).unwrap(), offset: 1234 });
        assert_eq!(&buf.as_bytes()[used..], b"$EOF:");
        assert_eq!(parse_psync_reply(b"\n+FULLRES", &Limits::default()).unwrap(), None);
        assert!(parse_psync_reply(b"+FULLRESYNC xyz 1\r\n", &Limits::default()).is_err());
        assert!(parse_psync_reply(b"-NOMASTERLINK\r\n", &Limits::default()).is_err());
    }
}
