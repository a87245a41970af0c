//! The command stream a master sends after the RDB: find where complete commands end (the offset a
//! replica may acknowledge) and notice `REPLCONF GETACK`, which a replica must answer.

use crate::Error;
use resp::Limits;

/// Scans the replication stream. Bytes are only inspected, never changed: the relay logs them as
/// they came, because the offsets must stay byte-exact with the master's backlog.
#[derive(Debug)]
pub struct Scanner {
    /// Offset of the last byte of the last complete command.
    complete_offset: u64,
    /// Bytes of a command not yet complete.
    pending: Vec<u8>,
    limits: Limits,
}

/// What one [`Scanner::feed`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Scanned {
    /// The master asked for an ACK (`REPLCONF GETACK`).
    pub getack: bool,
    /// Offset of the end of the last complete command so far.
    pub complete_offset: u64,
}

impl Scanner {
    /// Start scanning; `offset` is the offset of the byte before the first one fed (the snapshot's
    /// offset from `+FULLRESYNC`).
    pub fn new(offset: u64, limits: Limits) -> Self {
        Scanner { complete_offset: offset, pending: Vec::new(), limits }
    }

    /// Offset of the end of the last complete command.
    pub fn complete_offset(&self) -> u64 {
        self.complete_offset
    }

    /// Scan more stream bytes.
    pub fn feed(&mut self, bytes: &[u8]) -> Result<Scanned, Error> {
        self.pending.extend_from_slice(bytes);
        let mut pos = 0;
        let mut getack = false;
        while pos < self.pending.len() {
            let rest = &self.pending[pos..];
            if rest[0] != b'*' {
                return Err(Error::Protocol(format!("replication stream at offset {}: expected a command, got byte 0x{:02x}", self.complete_offset + 1, rest[0])));
            }
            let len = match resp::frame_len(rest, &self.limits) {
                Ok(n) => n,
                Err(resp::Error::Incomplete) => break,
                Err(e) => return Err(e.into()),
            };
            // GETACK is tiny; only small commands are worth decoding.
            if len < 128 {
                let (args, _) = resp::parse_command(&rest[..len], &self.limits)?;
                if args.len() >= 2 && args[0].eq_ignore_ascii_case(b"REPLCONF") && args[1].eq_ignore_ascii_case(b"GETACK") {
                    getack = true;
                }
            }
            pos += len;
            self.complete_offset += len as u64;
        }
        self.pending.drain(..pos);
        Ok(Scanned { getack, complete_offset: self.complete_offset })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_and_getack() {
        let mut s = Scanner::new(100, Limits::default());
        let mut cmd = Vec::new();
        resp::encode_command(&mut cmd, &["SET", "k", "v"]);
        let n = cmd.len() as u64;
        let r = s.feed(&cmd[..5]).unwrap();
        assert_eq!(r, Scanned { getack: false, complete_offset: 100 });
        let r = s.feed(&cmd[5..]).unwrap();
        assert_eq!(r.complete_offset, 100 + n);
        let mut ga = Vec::new();
        resp::encode_command(&mut ga, &["REPLCONF", "GETACK", "*"]);
        let r = s.feed(&ga).unwrap();
        assert!(r.getack);
        assert_eq!(r.complete_offset, 100 + n + ga.len() as u64);
        assert!(s.feed(b"garbage").is_err());
    }
}
