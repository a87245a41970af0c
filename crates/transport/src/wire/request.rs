//! Requests on a data connection: a fixed 21-byte frame `u8 op, u64 generation, u64 a, u32 b`
//! (big-endian), where what `a` and `b` mean depends on the [`Op`]. Some requests are followed by a
//! body whose length the frame gives (bounded here).

use super::cursor::Cursor;
use super::swarm::{ADVERTISE_MAX, LOCATE_BODY_MAX};
use crate::{Error, Operation};
use std::io::Read;

/// Largest single range read.
pub const READ_MAX: u32 = limits::READ_BYTES_MAX;

/// Encoded size of a request.
pub const REQUEST_LEN: usize = 21;

/// Most uploads a [`Request::Load`] may report (an agent serves a handful at once).
pub const UPLOADS_REPORTED_MAX: u32 = limits::LOAD_UPLOADS_MAX;

/// [`Request::NotAt`] about every block.
pub const ALL_BLOCKS: u64 = u64::MAX;

/// What a request asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// [`Request::Range`].
    Range,
    /// [`Request::Log`].
    Log,
    /// [`Request::Attach`].
    Attach,
    /// [`Request::Register`].
    Register,
    /// [`Request::Locate`].
    Locate,
    /// [`Request::Have`].
    Have,
    /// [`Request::NotAt`].
    NotAt,
    /// [`Request::Needed`].
    Needed,
    /// [`Request::Renew`].
    Renew,
    /// [`Request::Load`].
    Load,
    /// [`Request::Arriving`].
    Arriving,
    /// [`Request::Ended`].
    Ended,
}

impl Op {
    /// Every op with its byte on the wire: the one table encode and decode both use.
    const TABLE: [(Op, u8); 12] = [
        (Op::Range, 1),
        (Op::Log, 2),
        (Op::Attach, 3),
        (Op::Register, 4),
        (Op::Locate, 5),
        (Op::Have, 6),
        (Op::NotAt, 7),
        (Op::Needed, 8),
        (Op::Renew, 9),
        (Op::Load, 10),
        (Op::Arriving, 11),
        (Op::Ended, 12),
    ];

    fn byte(self) -> u8 {
        Self::TABLE.iter().find(|(o, _)| *o == self).map(|(_, b)| *b).unwrap_or(0)
    }

    fn from_byte(b: u8) -> Option<Op> {
        Self::TABLE.iter().find(|(_, x)| *x == b).map(|(o, _)| *o)
    }
}

/// What a one-sided transport attaches to ([`Request::Attach`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttachKind {
    /// The region's memfd, over the relay's unix socket.
    Shm,
    /// The remote key of one UCX segment.
    Ucx,
}

impl AttachKind {
    /// Every kind with its number on the wire.
    const TABLE: [(AttachKind, u32); 2] = [(AttachKind::Shm, 1), (AttachKind::Ucx, 2)];

    fn number(self) -> u32 {
        Self::TABLE.iter().find(|(k, _)| *k == self).map(|(_, n)| *n).unwrap_or(0)
    }

    fn from_number(n: u32) -> Option<AttachKind> {
        Self::TABLE.iter().find(|(_, x)| *x == n).map(|(k, _)| *k)
    }
}

/// How a join ended, as its agent tells the relay ([`Request::Ended`]): the relay counts each
/// (`fastrepl_relay_joins_total{outcome}`). Its names are the derive's (snake case); its wire bytes
/// are written out below, a protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, strum::VariantArray, strum::IntoStaticStr, strum::Display)]
#[strum(serialize_all = "snake_case")]
pub enum JoinOutcome {
    /// Handed off, and the master took the replica with a partial resync.
    InSync,
    /// Handed off, but the master answered with a full sync (or could not be told apart from one).
    FullSync,
    /// The join ended in an error after it reached the relay.
    Failed,
}

impl JoinOutcome {
    /// Every outcome, in the order the status lists them.
    pub const ALL: &'static [JoinOutcome] = <JoinOutcome as strum::VariantArray>::VARIANTS;

    /// Every outcome with its byte on the wire (protocol: never renumbered).
    const TABLE: [(JoinOutcome, u8); 3] = [(JoinOutcome::InSync, 1), (JoinOutcome::FullSync, 2), (JoinOutcome::Failed, 3)];

    /// Its byte on the wire.
    pub fn byte(self) -> u8 {
        Self::TABLE.iter().find(|(o, _)| *o == self).map(|(_, b)| *b).unwrap_or(0)
    }

    /// From its byte on the wire; `None` for a byte no outcome has.
    pub fn from_byte(b: u8) -> Option<JoinOutcome> {
        Self::TABLE.iter().find(|(_, x)| *x == b).map(|(o, _)| *o)
    }

    /// Its name in the status and the metric's label.
    pub fn name(self) -> &'static str {
        self.into()
    }

    /// Its place in [`JoinOutcome::ALL`] (an index for counters).
    pub fn index(self) -> usize {
        self as usize
    }
}

/// A data request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Request {
    /// RDB bytes `[offset, offset+len)` of a generation.
    Range {
        /// Generation.
        generation: u64,
        /// Start.
        offset: u64,
        /// Length.
        len: u32,
    },
    /// Log bytes from replication offset `from`, at most `max`.
    Log {
        /// Generation.
        generation: u64,
        /// Absolute replication offset.
        from: u64,
        /// Most bytes wanted.
        max: u32,
    },
    /// Ask for what a one-sided transport needs to read a generation directly: for shm the region's
    /// descriptor (over a unix socket), for ucx the remote key of one segment.
    Attach {
        /// Generation.
        generation: u64,
        /// Which transport.
        transport: AttachKind,
        /// Transport-specific argument (the segment number for ucx).
        arg: u64,
    },
    /// Join the generation's swarm: followed by `advertise_len` bytes of the address peers should
    /// use, or none for "the address you see me at, this port".
    Register {
        /// Generation.
        generation: u64,
        /// The agent's peer port.
        port: u16,
        /// It serves the blocks it holds to other agents.
        serves: bool,
        /// It reads the relay over shared memory (its reads cost the relay's link nothing).
        local: bool,
        /// Bytes of the advertised address that follow.
        advertise_len: u32,
    },
    /// Where to fetch blocks from: followed by `body_len` bytes of a [`super::swarm::Locate`].
    Locate {
        /// Generation.
        generation: u64,
        /// Bytes that follow.
        body_len: u32,
    },
    /// The agent holds `block`, verified.
    Have {
        /// Generation.
        generation: u64,
        /// Block number.
        block: u64,
    },
    /// The agent is receiving `block` and serves it while it arrives (every byte but the last as it
    /// comes, the last once the whole block passed its checksum): it may be named as a holder before
    /// its [`Request::Have`]. An arrival that fails is taken back with a [`Request::NotAt`] naming the
    /// agent itself.
    Arriving {
        /// Generation.
        generation: u64,
        /// Block number.
        block: u64,
    },
    /// `peer` does not hold `block` (any more): it failed the asker or cut its read off, or is the
    /// asker itself, which dropped it from its cache or whose arrival of it failed. `block` = [`ALL_BLOCKS`]: `peer` sent a corrupt block; name it for
    /// nothing.
    NotAt {
        /// Generation.
        generation: u64,
        /// Block number.
        block: u64,
        /// The agent that does not hold it.
        peer: u32,
    },
    /// How many other agents of the generation still miss blocks (an agent that finished serves on
    /// while some do).
    Needed {
        /// Generation.
        generation: u64,
    },
    /// The agent needs a snapshot taken at replication offset `min_offset` or later (a staged start,
    /// which the master's backlog must still cover) and holds `generation`: if it is older, the
    /// relay seals it and captures anew. Answered with one [`Renewal`] byte.
    Renew {
        /// Generation.
        generation: u64,
        /// The oldest snapshot offset the agent can use.
        min_offset: u64,
    },
    /// How many uploads to peers the agent serves right now, and how many askers took an upload slot
    /// since its last report (sent when either changes): the tracker names only holders with a free
    /// upload slot, counting the askers it sent there that have not arrived yet.
    Load {
        /// Generation.
        generation: u64,
        /// Uploads in progress, at most [`UPLOADS_REPORTED_MAX`].
        uploads: u32,
        /// Askers that took a slot since the last report, at most [`UPLOADS_REPORTED_MAX`].
        arrived: u32,
    },
    /// The agent's join ended, with `outcome` (sent once, at its end, on its tracker link or a short
    /// connection of its own). Answered with an empty body once counted. `generation` is the one the
    /// join last attached to (0 when none): the relay counts the outcome whatever it holds.
    Ended {
        /// Generation.
        generation: u64,
        /// How it ended.
        outcome: JoinOutcome,
    },
}

/// The answer to [`Request::Renew`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Renewal {
    /// The generation is at or past the offset asked for: use it.
    FreshEnough,
    /// It was older: sealed, and a capture is wanted; attach again to get the new one.
    Sealed,
    /// Another generation is current, or one is being captured: attach again and check it.
    Newer,
}

impl Renewal {
    const TABLE: [(Renewal, u8); 3] = [(Renewal::FreshEnough, 0), (Renewal::Sealed, 1), (Renewal::Newer, 2)];

    /// Its byte on the wire.
    pub fn byte(self) -> u8 {
        Self::TABLE.iter().find(|(r, _)| *r == self).map(|(_, b)| *b).unwrap_or(u8::MAX)
    }

    /// From the answer's body (exactly one known byte).
    pub fn decode(body: &[u8]) -> Result<Renewal, Error> {
        match body {
            [b] => Self::TABLE.iter().find(|(_, x)| x == b).map(|(r, _)| *r).ok_or_else(|| Error::Protocol(format!("unknown renewal answer {b}"))),
            _ => Err(Error::Protocol(format!("renewal answer of {} bytes, expected 1", body.len()))),
        }
    }
}

/// The register frame's `a`: the port, then flag bits.
const SERVES_BIT: u64 = 1 << 16;
const LOCAL_BIT: u64 = 1 << 17;

impl Request {
    /// The op, the generation and the two operands as the frame carries them.
    fn frame(&self) -> (Op, u64, u64, u32) {
        match *self {
            Request::Range { generation, offset, len } => (Op::Range, generation, offset, len),
            Request::Log { generation, from, max } => (Op::Log, generation, from, max),
            Request::Attach { generation, transport, arg } => (Op::Attach, generation, arg, transport.number()),
            Request::Register { generation, port, serves, local, advertise_len } => {
                let flags = if serves { SERVES_BIT } else { 0 } | if local { LOCAL_BIT } else { 0 };
                (Op::Register, generation, u64::from(port) | flags, advertise_len)
            }
            Request::Locate { generation, body_len } => (Op::Locate, generation, 0, body_len),
            Request::Have { generation, block } => (Op::Have, generation, block, 0),
            Request::Arriving { generation, block } => (Op::Arriving, generation, block, 0),
            Request::NotAt { generation, block, peer } => (Op::NotAt, generation, block, peer),
            Request::Needed { generation } => (Op::Needed, generation, 0, 0),
            Request::Renew { generation, min_offset } => (Op::Renew, generation, min_offset, 0),
            Request::Load { generation, uploads, arrived } => (Op::Load, generation, u64::from(arrived), uploads),
            Request::Ended { generation, outcome } => (Op::Ended, generation, 0, u32::from(outcome.byte())),
        }
    }

    /// Its op.
    pub fn op(&self) -> Op {
        self.frame().0
    }

    /// Encode.
    pub fn encode(&self) -> [u8; REQUEST_LEN] {
        let (op, g, a, b) = self.frame();
        let mut out = [0u8; REQUEST_LEN];
        out[0] = op.byte();
        out[1..9].copy_from_slice(&g.to_be_bytes());
        out[9..17].copy_from_slice(&a.to_be_bytes());
        out[17..21].copy_from_slice(&b.to_be_bytes());
        out
    }

    /// Decode, checking the op and bounding every length.
    pub fn decode(bytes: &[u8; REQUEST_LEN]) -> Result<Request, Error> {
        let mut c = Cursor::new(bytes, "data request");
        let code = c.u8()?;
        let (generation, a, b) = (c.u64()?, c.u64()?, c.u32()?);
        let op = Op::from_byte(code).ok_or_else(|| c.bad(&format!("unknown op {code}")))?;
        if b > READ_MAX {
            return Err(c.bad(&format!("{op:?} of {b} bytes exceeds {READ_MAX}")));
        }
        Ok(match op {
            Op::Range => Request::Range { generation, offset: a, len: b },
            Op::Log => Request::Log { generation, from: a, max: b },
            Op::Attach => {
                let transport = AttachKind::from_number(b).ok_or_else(|| c.bad(&format!("attach for unknown transport {b}")))?;
                Request::Attach { generation, transport, arg: a }
            }
            Op::Register => {
                if a >> 18 != 0 || b as usize > ADVERTISE_MAX {
                    return Err(c.bad("malformed swarm registration"));
                }
                Request::Register { generation, port: a as u16, serves: a & SERVES_BIT != 0, local: a & LOCAL_BIT != 0, advertise_len: b }
            }
            Op::Locate if b as usize > LOCATE_BODY_MAX => return Err(c.bad(&format!("locate body of {b} bytes exceeds {LOCATE_BODY_MAX}"))),
            Op::Locate => Request::Locate { generation, body_len: b },
            Op::Have => Request::Have { generation, block: a },
            Op::Arriving => Request::Arriving { generation, block: a },
            Op::NotAt => Request::NotAt { generation, block: a, peer: b },
            Op::Needed => Request::Needed { generation },
            Op::Renew => Request::Renew { generation, min_offset: a },
            Op::Load if b > UPLOADS_REPORTED_MAX => return Err(c.bad(&format!("load report of {b} uploads exceeds {UPLOADS_REPORTED_MAX}"))),
            Op::Load if a > u64::from(UPLOADS_REPORTED_MAX) => return Err(c.bad(&format!("load report of {a} arrivals exceeds {UPLOADS_REPORTED_MAX}"))),
            Op::Load => Request::Load { generation, uploads: b, arrived: a as u32 },
            Op::Ended => {
                let outcome = u8::try_from(b).ok().and_then(JoinOutcome::from_byte).ok_or_else(|| c.bad(&format!("join end with unknown outcome {b}")))?;
                if a != 0 {
                    return Err(c.bad("join end with a nonzero operand"));
                }
                Request::Ended { generation, outcome }
            }
        })
    }

    /// The generation a request is about.
    pub fn generation(&self) -> u64 {
        self.frame().1
    }

    /// Bytes of body that follow the frame.
    pub fn body_len(&self) -> u32 {
        match *self {
            Request::Register { advertise_len, .. } => advertise_len,
            Request::Locate { body_len, .. } => body_len,
            _ => 0,
        }
    }
}

/// Read and decode the next request on a data connection (relay or peer side); `None` when the other
/// side closed the connection between requests.
pub fn read_request<R: Read>(r: &mut R) -> Result<Option<Request>, Error> {
    let mut req = [0u8; REQUEST_LEN];
    match r.read_exact(&mut req) {
        Ok(()) => Request::decode(&req).map(Some),
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Ok(None),
        Err(source) => Err(Error::Io { op: Operation::ReadDataRequest, source }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_op_has_one_distinct_byte() {
        for (i, (op, b)) in Op::TABLE.iter().enumerate() {
            assert_eq!(Op::from_byte(*b), Some(*op));
            assert!(Op::TABLE[i + 1..].iter().all(|(o, x)| o != op && x != b));
        }
        assert_eq!(Op::from_byte(0), None);
    }

    #[test]
    fn requests_round_trip_and_are_bounded() {
        let r = Request::Range { generation: 3, offset: 1 << 40, len: 4 << 20 };
        assert_eq!(Request::decode(&r.encode()).unwrap(), r);
        let mut big = r.encode();
        big[17..21].copy_from_slice(&(READ_MAX + 1).to_be_bytes());
        assert!(Request::decode(&big).is_err());
        for r in [
            Request::Log { generation: 2, from: 99, max: 4096 },
            Request::Attach { generation: 1, transport: AttachKind::Shm, arg: 0 },
            Request::Attach { generation: 1, transport: AttachKind::Ucx, arg: 3 },
            Request::Register { generation: 1, port: 7401, serves: true, local: false, advertise_len: 12 },
            Request::Register { generation: 1, port: 0, serves: false, local: true, advertise_len: 0 },
            Request::Locate { generation: 1, body_len: 40 },
            Request::Have { generation: 1, block: 9 },
            Request::Arriving { generation: 1, block: 9 },
            Request::NotAt { generation: 1, block: ALL_BLOCKS, peer: 4 },
            Request::Needed { generation: 1 },
            Request::Renew { generation: 4, min_offset: 1 << 33 },
            Request::Load { generation: 1, uploads: 2, arrived: 3 },
            Request::Ended { generation: 1, outcome: JoinOutcome::InSync },
            Request::Ended { generation: 0, outcome: JoinOutcome::Failed },
        ] {
            assert_eq!(Request::decode(&r.encode()).unwrap(), r);
        }
        let mut long = Request::Register { generation: 1, port: 1, serves: true, local: true, advertise_len: 0 }.encode();
        long[17..21].copy_from_slice(&(ADVERTISE_MAX as u32 + 1).to_be_bytes());
        assert!(Request::decode(&long).is_err(), "advertised address too long");
        let mut flags = Request::Register { generation: 1, port: 1, serves: true, local: true, advertise_len: 0 }.encode();
        flags[14] = 4;
        assert!(Request::decode(&flags).is_err(), "unknown registration flag");
        let mut load = Request::Load { generation: 1, uploads: 0, arrived: 0 }.encode();
        load[17..21].copy_from_slice(&(UPLOADS_REPORTED_MAX + 1).to_be_bytes());
        assert!(Request::decode(&load).is_err(), "more uploads than any agent serves");
        let mut arrivals = Request::Load { generation: 1, uploads: 0, arrived: 0 }.encode();
        arrivals[9..17].copy_from_slice(&(u64::from(UPLOADS_REPORTED_MAX) + 1).to_be_bytes());
        assert!(Request::decode(&arrivals).is_err(), "more arrivals than reported uploads could be");
        let mut locate = Request::Locate { generation: 1, body_len: 0 }.encode();
        locate[17..21].copy_from_slice(&(LOCATE_BODY_MAX as u32 + 1).to_be_bytes());
        assert!(Request::decode(&locate).is_err(), "locate body too long");
        let mut attach = Request::Attach { generation: 1, transport: AttachKind::Shm, arg: 0 }.encode();
        attach[20] = 3;
        assert!(Request::decode(&attach).is_err(), "unknown attach transport");
        for r in [Renewal::FreshEnough, Renewal::Sealed, Renewal::Newer] {
            assert_eq!(Renewal::decode(&[r.byte()]).unwrap(), r);
        }
        assert!(Renewal::decode(&[7]).is_err() && Renewal::decode(&[]).is_err() && Renewal::decode(&[0, 0]).is_err());
        let mut bad = r.encode();
        bad[0] = 10;
        assert!(Request::decode(&bad).is_err());
    }

    /// The outcome's bytes are protocol: fixed, distinct, and every other byte refused.
    #[test]
    fn a_join_end_carries_a_known_outcome_byte_and_nothing_else() {
        assert_eq!(JoinOutcome::ALL.iter().map(|o| o.byte()).collect::<Vec<_>>(), [1, 2, 3]);
        assert_eq!(JoinOutcome::ALL.iter().map(|o| o.name()).collect::<Vec<_>>(), ["in_sync", "full_sync", "failed"]);
        for &o in JoinOutcome::ALL {
            assert_eq!(JoinOutcome::from_byte(o.byte()), Some(o));
            assert_eq!(JoinOutcome::ALL[o.index()], o);
            let r = Request::Ended { generation: 9, outcome: o };
            let bytes = r.encode();
            assert_eq!((bytes[0], bytes[20]), (12, o.byte()));
            assert_eq!(Request::decode(&bytes).unwrap(), r);
            assert_eq!(r.body_len(), 0);
        }
        for b in [0u32, 4, 255, 256, 1 << 8 | 1, READ_MAX] {
            let mut bytes = Request::Ended { generation: 1, outcome: JoinOutcome::InSync }.encode();
            bytes[17..21].copy_from_slice(&b.to_be_bytes());
            let e = Request::decode(&bytes).unwrap_err();
            assert!(matches!(&e, Error::Protocol(m) if m.contains("unknown outcome")), "outcome {b}: {e}");
        }
        let mut operand = Request::Ended { generation: 1, outcome: JoinOutcome::Failed }.encode();
        operand[16] = 1;
        assert!(matches!(Request::decode(&operand), Err(Error::Protocol(_))), "a nonzero operand");
    }
}
