//! The master's side of a replica's handshake: what the agent answers to its local replica.

use crate::{parse_u64, Error};

/// What the replica asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// Send these bytes back.
    Reply(Vec<u8>),
    /// The replica sent `PSYNC`/`SYNC`: the handshake is over; serve a full resync.
    Psync {
        /// Whether it offered `capa eof` (it can take the EOF framing).
        capa_eof: bool,
        /// Its `listening-port`, if it said.
        listening_port: Option<u16>,
    },
}

/// Commands a replica sends before PSYNC never carry large arguments.
use crate::HANDSHAKE_LIMITS;

/// State of a replica's handshake with us.
#[derive(Debug, Default)]
pub struct Handshake {
    buf: Vec<u8>,
    capa_eof: bool,
    listening_port: Option<u16>,
    done: bool,
}

fn ok() -> Event {
    Event::Reply(b"+OK\r\n".to_vec())
}

impl Handshake {
    /// Feed bytes from the replica; returns the events in order. After [`Event::Psync`] no more
    /// events come.
    pub fn on_bytes(&mut self, data: &[u8]) -> Result<Vec<Event>, Error> {
        if self.done {
            return Ok(vec![]);
        }
        self.buf.extend_from_slice(data);
        if self.buf.len() > limits::HANDSHAKE_BUFFER_BYTES_MAX {
            return Err(Error::Protocol("replica handshake exceeds 64 KiB".into()));
        }
        let mut events = Vec::new();
        let mut pos = 0;
        while pos < self.buf.len() && !self.done {
            let (args, used) = match resp::parse_command(&self.buf[pos..], &HANDSHAKE_LIMITS) {
                Ok(x) => x,
                Err(resp::Error::Incomplete) => break,
                Err(e) => return Err(e.into()),
            };
            pos += used;
            let Some(name) = args.first() else { continue };
            let name = name.to_ascii_uppercase();
            match name.as_slice() {
                b"PING" => events.push(Event::Reply(b"+PONG\r\n".to_vec())),
                // The replica may be configured with masterauth; the agent is reachable on loopback only
                // and the replica is ours to configure, so any credentials are accepted.
                b"AUTH" => events.push(ok()),
                b"REPLCONF" => {
                    let mut i = 1;
                    while i + 1 < args.len() {
                        let key = args[i].to_ascii_lowercase();
                        if key == b"listening-port" {
                            self.listening_port = Some(parse_u64(&args[i + 1], "listening-port")?.min(65535) as u16);
                        } else if key == b"capa" && args[i + 1].eq_ignore_ascii_case(b"eof") {
                            self.capa_eof = true;
                        }
                        i += 2;
                    }
                    events.push(ok());
                }
                b"PSYNC" | b"SYNC" => {
                    self.done = true;
                    events.push(Event::Psync { capa_eof: self.capa_eof, listening_port: self.listening_port });
                }
                other => {
                    let msg = format!("-ERR fastrepl agent: unexpected command '{}' during replica handshake\r\n", String::from_utf8_lossy(other));
                    events.push(Event::Reply(msg.into_bytes()));
                }
            }
        }
        self.buf.drain(..pos);
        Ok(events)
    }
}

/// The `+FULLRESYNC` line.
pub fn fullresync(replid: &crate::ReplId, offset: u64) -> Vec<u8> {
    format!("+FULLRESYNC {replid} {offset}\r\n").into_bytes()
}

/// Reads what a connected replica sends its master: `REPLCONF ACK <offset> [FACK <offset>]`.
#[derive(Debug, Default)]
pub struct AckReader {
    buf: Vec<u8>,
}

impl AckReader {
    /// Feed bytes; returns the highest acknowledged offset among complete commands, if any.
    pub fn on_bytes(&mut self, data: &[u8]) -> Result<Option<u64>, Error> {
        self.buf.extend_from_slice(data);
        let mut pos = 0;
        let mut last = None;
        while pos < self.buf.len() {
            let (args, used) = match resp::parse_command(&self.buf[pos..], &HANDSHAKE_LIMITS) {
                Ok(x) => x,
                Err(resp::Error::Incomplete) => break,
                Err(e) => return Err(e.into()),
            };
            pos += used;
            if args.len() >= 3 && args[0].eq_ignore_ascii_case(b"REPLCONF") && args[1].eq_ignore_ascii_case(b"ACK") {
                last = Some(parse_u64(&args[2], "ACK offset")?);
            }
        }
        self.buf.drain(..pos);
        if self.buf.len() > limits::HANDSHAKE_BUFFER_BYTES_MAX {
            return Err(Error::Protocol("replica sent over 64 KiB without a complete command".into()));
        }
        Ok(last)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serves_a_redis_handshake() {
        let mut h = Handshake::default();
        let mut wire = Vec::new();
        for c in [&["PING"][..], &["REPLCONF", "listening-port", "6380"], &["REPLCONF", "capa", "eof", "capa", "psync2"], &["PSYNC", "?", "-1"]] {
            resp::encode_command(&mut wire, c);
        }
        let (a, b) = wire.split_at(7);
        let mut ev = h.on_bytes(a).unwrap();
        ev.extend(h.on_bytes(b).unwrap());
        assert_eq!(ev[0], Event::Reply(b"+PONG\r\n".to_vec()));
        assert_eq!(ev.last(), Some(&Event::Psync { capa_eof: true, listening_port: Some(6380) }));
        assert!(h.on_bytes(b"more").unwrap().is_empty());
    }

    #[test]
    fn acks() {
        let mut r = AckReader::default();
        let mut wire = Vec::new();
        resp::encode_command(&mut wire, &["REPLCONF", "ACK", "10"]);
        resp::encode_command(&mut wire, &["REPLCONF", "ACK", "25", "FACK", "25"]);
        assert_eq!(r.on_bytes(&wire).unwrap(), Some(25));
        assert!(r.on_bytes(b"*1\r\n$99999\r\n").is_err());
    }
}
