//! The Redis/Valkey replication protocol, both sides, as plain functions and state machines over
//! bytes. Nothing here opens a socket or reads a clock: the relay and the agent do the I/O and feed
//! bytes in, which keeps every step testable with byte strings.
//!
//! - [`capture`]: one whole full synchronization from the replica's side, as a state machine (what
//!   the relay runs against the master).
//! - [`replica`]: what a replica says to its master and how it reads the answers (used by the relay,
//!   which poses as a replica of the real master).
//! - [`framing`]: the RDB payload framings (`$<len>` and `$EOF:<mark>`), keep-alive newlines.
//! - [`stream`]: the command stream after the RDB: complete-command offsets, `REPLCONF GETACK`.
//! - [`master`]: what a master answers to a replica's handshake (used by the agent, which poses as
//!   its local replica's master).
//! - [`rdb`]: the little the agent must know about an RDB: its version, and which servers load it.
#![deny(missing_docs)]

pub mod capture;
pub mod framing;
#[cfg(any(test, fuzzing))]
#[doc(hidden)]
pub mod fuzz;
pub mod master;
pub mod rdb;
pub mod replica;
pub mod stream;

/// A replication ID: 40 hexadecimal characters.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct ReplId(pub [u8; 40]);

impl ReplId {
    /// Parse and validate 40 hex characters.
    pub fn parse(s: &[u8]) -> Result<Self, Error> {
        if s.len() != 40 || !s.iter().all(u8::is_ascii_hexdigit) {
            return Err(Error::Protocol(format!("bad replication id {:?}", String::from_utf8_lossy(s))));
        }
        let mut b = [0u8; 40];
        b.copy_from_slice(s);
        Ok(ReplId(b))
    }
    /// As text.
    pub fn as_str(&self) -> &str {
        // Validated as ASCII hex on construction.
        std::str::from_utf8(&self.0).expect("hex is utf-8")
    }
}

impl std::fmt::Debug for ReplId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
impl std::fmt::Display for ReplId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Errors of the protocol layer: the peer said something we cannot accept.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The bytes are not valid RESP, or exceed a bound.
    #[error("malformed reply: {0}")]
    Resp(#[from] resp::Error),
    /// Valid RESP, wrong content.
    #[error("{0}")]
    Protocol(String),
    /// The peer answered with an error reply.
    #[error("{step} refused: {message}")]
    Refused {
        /// Which step of the exchange.
        step: &'static str,
        /// The peer's error text.
        message: String,
    },
}

/// Parse a decimal offset sent by a peer.
/// Bounds on everything said before the stream, by a master or by a replica: single-line replies
/// and short commands, nothing nested.
pub const HANDSHAKE_LIMITS: resp::Limits =
    resp::Limits { bulk_len_max: limits::HANDSHAKE_LINE_BYTES_MAX, array_len_max: limits::HANDSHAKE_ARGS_MAX, depth_max: 1, line_len_max: limits::HANDSHAKE_LINE_BYTES_MAX };

pub(crate) fn parse_u64(s: &[u8], what: &str) -> Result<u64, Error> {
    std::str::from_utf8(s).ok().and_then(|s| s.parse::<u64>().ok()).ok_or_else(|| Error::Protocol(format!("bad {what}: {:?}", String::from_utf8_lossy(s))))
}

#[cfg(test)]
mod fuzz_smoke {
    /// The fuzz target's invariants over a deterministic walk of mutated seeds (cargo fuzz explores
    /// further; this keeps the target honest on stable in every test run).
    #[test]
    fn fuzz_smoke() {
        let seeds: [&[u8]; 4] = [
            b"+FULLRESYNC 6c879f910fada50e6bee517c0d0ea8a0b46c6e0b 0\r\n",
            b"\n\n$EOF:0123456789012345678901234567890123456789\r\nREDIS",
            b"$1234\r\n",
            b"*3\r\n$8\r\nREPLCONF\r\n$6\r\nGETACK\r\n$1\r\n*\r\n",
        ];
        let mut x: u64 = 0x2545_F491_4F6C_DD1D;
        for i in 0..20_000 {
            let mut d = seeds[i % seeds.len()].to_vec();
            for _ in 0..3 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let pos = (x as usize) % (d.len() + 1);
                match x % 3 {
                    0 if pos < d.len() => d[pos] = (x >> 8) as u8,
                    1 => d.insert(pos, (x >> 16) as u8),
                    _ => d.truncate(pos),
                }
            }
            crate::fuzz::parsers(&d);
            crate::fuzz::capture(&d);
        }
    }
}
