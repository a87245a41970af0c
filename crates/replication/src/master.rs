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
        /// What it offered and asked for, and what the agent did with each.
        offered: Offered,
    },
}

/// What a replica offered in its handshake (`REPLCONF capa …` and the other `REPLCONF` options).
/// The agent serves one channel: the RDB then the stream on the replication link, as any master does
/// for a replica that asked for nothing more. Newer modes a replica may offer — Valkey's dual-channel
/// replication (`capa dual-channel`), Redis 8's RDB channel (`capa rdb-channel-repl`) — are modes the
/// master chooses; the agent does not choose them, and the replica falls back to one channel, as
/// with any master that does not offer them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Offered {
    /// Every `capa` value, in order (bounded: [`OFFERED_MAX`]).
    pub capas: Vec<String>,
    /// Every other option as `name=value` (bounded).
    pub options: Vec<String>,
}

/// Most capabilities and options kept from one handshake.
pub const OFFERED_MAX: usize = 32;

impl Offered {
    /// The offers the agent does not take up (modes the master would have to choose).
    pub fn declined(&self) -> Vec<&str> {
        self.capas.iter().map(String::as_str).filter(|c| !SERVED_CAPAS.contains(c)).collect()
    }
}

/// The capabilities the agent serves: EOF-framed RDBs, and `psync2` (it never sends `+CONTINUE`, so
/// it needs nothing from it).
const SERVED_CAPAS: [&str; 2] = ["eof", "psync2"];

/// Commands a replica sends before PSYNC never carry large arguments.
use crate::HANDSHAKE_LIMITS;

/// State of a replica's handshake with us.
#[derive(Debug, Default)]
pub struct Handshake {
    buf: Vec<u8>,
    capa_eof: bool,
    listening_port: Option<u16>,
    offered: Offered,
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
                        let value = String::from_utf8_lossy(&args[i + 1]).chars().take(64).collect::<String>();
                        if key == b"listening-port" {
                            self.listening_port = Some(parse_u64(&args[i + 1], "listening-port")?.min(65535) as u16);
                        } else if key == b"capa" {
                            self.capa_eof |= args[i + 1].eq_ignore_ascii_case(b"eof");
                            if self.offered.capas.len() < OFFERED_MAX {
                                self.offered.capas.push(value.to_ascii_lowercase());
                            }
                        } else if self.offered.options.len() < OFFERED_MAX {
                            self.offered.options.push(format!("{}={value}", String::from_utf8_lossy(&key).chars().take(32).collect::<String>()));
                        }
                        i += 2;
                    }
                    events.push(ok());
                }
                b"PSYNC" | b"SYNC" => {
                    self.done = true;
                    events.push(Event::Psync { capa_eof: self.capa_eof, listening_port: self.listening_port, offered: std::mem::take(&mut self.offered) });
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
        let offered = Offered { capas: vec!["eof".into(), "psync2".into()], options: vec![] };
        assert_eq!(ev.last(), Some(&Event::Psync { capa_eof: true, listening_port: Some(6380), offered }));
        assert!(h.on_bytes(b"more").unwrap().is_empty());
    }

    #[test]
    fn newer_modes_a_replica_offers_are_recorded_and_declined() {
        // Redis 8 with repl-rdb-channel yes; Valkey with dual-channel-replication-enabled yes (it also
        // says its version): both offered, neither taken up, so each replica uses one channel.
        for (capas, extra, declined) in [(&["eof", "psync2", "rdb-channel-repl"][..], None, "rdb-channel-repl"), (&["eof", "psync2", "dual-channel"], Some(["version", "8.1.8"]), "dual-channel")] {
            let mut h = Handshake::default();
            let mut wire = Vec::new();
            let mut capa: Vec<&str> = vec!["REPLCONF"];
            for c in capas {
                capa.extend(["capa", c]);
            }
            resp::encode_command(&mut wire, &capa);
            if let Some([k, v]) = extra {
                resp::encode_command(&mut wire, &["REPLCONF", k, v]);
            }
            resp::encode_command(&mut wire, &["PSYNC", "?", "-1"]);
            let ev = h.on_bytes(&wire).unwrap();
            let Some(Event::Psync { capa_eof: true, offered, .. }) = ev.last() else { panic!("{ev:?}") };
            assert_eq!(offered.declined(), vec![declined]);
            assert!(ev[..ev.len() - 1].iter().all(|e| *e == Event::Reply(b"+OK\r\n".to_vec())), "every REPLCONF answered +OK: {ev:?}");
            if extra.is_some() {
                assert_eq!(offered.options, vec!["version=8.1.8".to_string()]);
            }
        }
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
