//! Message framing after authentication.
//!
//! Control: the relay sends `u32 length (big-endian) + JSON`; messages are bounded by
//! [`CONTROL_MESSAGE_MAX`]. Data: fixed 21-byte requests, answered by a 5-byte header and the bytes.

use crate::Error;
use serde::{Deserialize, Serialize};
use std::io::{Read, Write};

pub mod descriptor;
mod transport_kind;
pub use descriptor::Descriptor;
pub use transport_kind::TransportKind;

/// Largest control message accepted.
pub const CONTROL_MESSAGE_MAX: u32 = limits::CONTROL_MESSAGE_BYTES_MAX;
/// Largest single range read.
pub const READ_MAX: u32 = limits::READ_BYTES_MAX;

/// What the relay pushes on a control connection.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Control {
    /// First message: who the relay is and what it serves.
    Hello {
        /// The master the relay replicates, as the relay reaches it.
        master: String,
        /// Transports this relay offers.
        transports: Vec<TransportKind>,
        /// The relay's version.
        relay_version: String,
        /// The abstract unix socket name of the relay's shared-memory endpoint (same host and network
        /// namespace only), when it offers `shm`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        shm_socket: Option<String>,
        /// The UCX transports the relay's UCX context found (e.g. `rc_mlx5`, `tcp`, `posix`), when it
        /// offers `ucx`; an agent's `auto` uses ucx only where an RDMA-capable one is among them.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        ucx_transports: Vec<String>,
    },
    /// The generation's state; `checksums` holds only those not sent before on this connection.
    /// Agents check it with [`Descriptor::validate`] before using it.
    Descriptor(Descriptor),
    /// Nothing changed; the relay is alive.
    Heartbeat,
    /// The relay cannot serve this agent.
    Error(String),
    /// The answer on a status connection: what the relay holds and has done (`relay::stats::Status`).
    Status(serde_json::Value),
}

/// Write one control message.
pub fn send_control<W: Write>(w: &mut W, msg: &Control) -> Result<(), Error> {
    let body = serde_json::to_vec(msg).map_err(|e| Error::Protocol(format!("encode control message: {e}")))?;
    let mut frame = (body.len() as u32).to_be_bytes().to_vec();
    frame.extend_from_slice(&body);
    w.write_all(&frame).map_err(Error::io("send control message"))
}

/// Read one control message.
pub fn recv_control<R: Read>(r: &mut R) -> Result<Control, Error> {
    let mut len = [0u8; 4];
    r.read_exact(&mut len).map_err(Error::io("read control message"))?;
    let len = u32::from_be_bytes(len);
    if len > CONTROL_MESSAGE_MAX {
        return Err(Error::Protocol(format!("control message of {len} bytes exceeds {CONTROL_MESSAGE_MAX}")));
    }
    let mut body = vec![0u8; len as usize];
    r.read_exact(&mut body).map_err(Error::io("read control message"))?;
    serde_json::from_slice(&body).map_err(|e| Error::Protocol(format!("decode control message: {e}")))
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
    /// Ask for what a one-sided transport needs to read a generation directly: for [`ATTACH_SHM`] the
    /// region's descriptor (over a unix socket), for [`ATTACH_UCX`] the remote key of one segment.
    Attach {
        /// Generation.
        generation: u64,
        /// Which transport ([`ATTACH_SHM`], [`ATTACH_UCX`]).
        transport: u32,
        /// Transport-specific argument (the segment number for ucx).
        arg: u64,
    },
    /// Join the generation's swarm (see [`crate::tracker`]): followed by `advertise_len` bytes of the
    /// address peers should use, or none for "the address you see me at, this port".
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
    /// Where to fetch blocks from: followed by `body_len` bytes of a [`crate::tracker::Locate`].
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
    /// `peer` does not hold `block` (any more): it failed the asker, or is the asker itself, which
    /// dropped it from its cache. `block` = [`ALL_BLOCKS`]: `peer` sent a corrupt block; name it for
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
}

/// UCX registrations cover the region in segments of this size, so a relay never registers (on verbs:
/// pins) the sparse, mostly unwritten capacity of an EOF-framed snapshot all at once.
pub const UCX_SEGMENT: u64 = limits::UCX_SEGMENT_BYTES;
/// Bound on a UCX worker address or packed remote key from the relay.
pub const UCX_BLOB_MAX: usize = limits::UCX_BLOB_BYTES_MAX;

/// What a relay answers to a ucx attach: how to reach its worker and read one segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UcxKey {
    /// The relay worker's address.
    pub worker: Vec<u8>,
    /// Remote address of the segment's first byte.
    pub base: u64,
    /// Bytes registered.
    pub len: u64,
    /// The packed remote key.
    pub rkey: Vec<u8>,
}

impl UcxKey {
    /// Serialize: `u32 len, worker, u64 base, u64 len, u32 len, rkey` (big-endian).
    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(24 + self.worker.len() + self.rkey.len());
        v.extend_from_slice(&(self.worker.len() as u32).to_be_bytes());
        v.extend_from_slice(&self.worker);
        v.extend_from_slice(&self.base.to_be_bytes());
        v.extend_from_slice(&self.len.to_be_bytes());
        v.extend_from_slice(&(self.rkey.len() as u32).to_be_bytes());
        v.extend_from_slice(&self.rkey);
        v
    }
    /// Parse, bounding every length.
    pub fn decode(b: &[u8]) -> Result<UcxKey, Error> {
        let bad = |what: &str| Error::Protocol(format!("ucx attach answer: {what}"));
        let mut r = b;
        let mut take = |n: usize| -> Result<&[u8], Error> {
            if r.len() < n {
                return Err(bad("truncated"));
            }
            let (a, rest) = r.split_at(n);
            r = rest;
            Ok(a)
        };
        let wl = u32::from_be_bytes(take(4)?.try_into().expect("4")) as usize;
        if wl == 0 || wl > UCX_BLOB_MAX {
            return Err(bad("worker address length out of bounds"));
        }
        let worker = take(wl)?.to_vec();
        let base = u64::from_be_bytes(take(8)?.try_into().expect("8"));
        let len = u64::from_be_bytes(take(8)?.try_into().expect("8"));
        let kl = u32::from_be_bytes(take(4)?.try_into().expect("4")) as usize;
        if kl == 0 || kl > UCX_BLOB_MAX {
            return Err(bad("rkey length out of bounds"));
        }
        let rkey = take(kl)?.to_vec();
        if !r.is_empty() {
            return Err(bad("trailing bytes"));
        }
        if len == 0 || len > UCX_SEGMENT || base.checked_add(len).is_none() {
            return Err(bad("segment bounds"));
        }
        Ok(UcxKey { worker, base, len, rkey })
    }
}

/// [`Request::NotAt`] about every block.
pub const ALL_BLOCKS: u64 = u64::MAX;

/// [`Request::Attach`] for the shared-memory transport.
pub const ATTACH_SHM: u32 = 1;
/// [`Request::Attach`] for the UCX transport.
pub const ATTACH_UCX: u32 = 2;

/// Encoded size of a request.
pub const REQUEST_LEN: usize = 21;

impl Request {
    /// Encode.
    pub fn encode(&self) -> [u8; REQUEST_LEN] {
        let (op, g, o, l) = match *self {
            Request::Range { generation, offset, len } => (1u8, generation, offset, len),
            Request::Log { generation, from, max } => (2u8, generation, from, max),
            Request::Attach { generation, transport, arg } => (3u8, generation, arg, transport),
            Request::Register { generation, port, serves, local, advertise_len } => {
                (4u8, generation, u64::from(port) | u64::from(serves) << 16 | u64::from(local) << 17, advertise_len)
            }
            Request::Locate { generation, body_len } => (5u8, generation, 0, body_len),
            Request::Have { generation, block } => (6u8, generation, block, 0),
            Request::NotAt { generation, block, peer } => (7u8, generation, block, peer),
            Request::Needed { generation } => (8u8, generation, 0, 0),
        };
        let mut b = [0u8; REQUEST_LEN];
        b[0] = op;
        b[1..9].copy_from_slice(&g.to_be_bytes());
        b[9..17].copy_from_slice(&o.to_be_bytes());
        b[17..21].copy_from_slice(&l.to_be_bytes());
        b
    }
    /// Decode, checking the op and the length bound.
    pub fn decode(b: &[u8; REQUEST_LEN]) -> Result<Request, Error> {
        let g = u64::from_be_bytes(b[1..9].try_into().expect("8 bytes"));
        let o = u64::from_be_bytes(b[9..17].try_into().expect("8 bytes"));
        let l = u32::from_be_bytes(b[17..21].try_into().expect("4 bytes"));
        if l > READ_MAX {
            return Err(Error::Protocol(format!("read of {l} bytes exceeds {READ_MAX}")));
        }
        match b[0] {
            1 => Ok(Request::Range { generation: g, offset: o, len: l }),
            2 => Ok(Request::Log { generation: g, from: o, max: l }),
            3 if l == ATTACH_SHM || l == ATTACH_UCX => Ok(Request::Attach { generation: g, transport: l, arg: o }),
            3 => Err(Error::Protocol(format!("attach for unknown transport {l}"))),
            4 if o >> 18 == 0 && l as usize <= crate::tracker::ADVERTISE_MAX => {
                Ok(Request::Register { generation: g, port: o as u16, serves: o & 1 << 16 != 0, local: o & 1 << 17 != 0, advertise_len: l })
            }
            4 => Err(Error::Protocol("malformed swarm registration".into())),
            5 if l as usize <= crate::tracker::LOCATE_BODY_MAX => Ok(Request::Locate { generation: g, body_len: l }),
            5 => Err(Error::Protocol(format!("locate request of {l} bytes exceeds {}", crate::tracker::LOCATE_BODY_MAX))),
            6 => Ok(Request::Have { generation: g, block: o }),
            7 => Ok(Request::NotAt { generation: g, block: o, peer: l }),
            8 => Ok(Request::Needed { generation: g }),
            op => Err(Error::Protocol(format!("unknown data request op {op}"))),
        }
    }
}

impl Request {
    /// The generation a request is about.
    pub fn generation(&self) -> u64 {
        match *self {
            Request::Range { generation, .. }
            | Request::Log { generation, .. }
            | Request::Attach { generation, .. }
            | Request::Register { generation, .. }
            | Request::Locate { generation, .. }
            | Request::Have { generation, .. }
            | Request::NotAt { generation, .. }
            | Request::Needed { generation } => generation,
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
        Err(source) => Err(Error::Io { op: "read data request", source }),
    }
}

/// Response header: status (0 = ok, 1 = error with a message as body) and body length.
pub fn response_header(ok: bool, len: u32) -> [u8; 5] {
    status_header(u8::from(!ok), len)
}

/// Response status of a peer that serves its maximum already: ask another holder (body: a message).
pub const STATUS_BUSY: u8 = 2;

/// Response header with an explicit status ([`response_header`], or [`STATUS_BUSY`]).
pub fn status_header(status: u8, len: u32) -> [u8; 5] {
    let mut h = [0u8; 5];
    h[0] = status;
    h[1..].copy_from_slice(&len.to_be_bytes());
    h
}

/// Fuzz entry point: decoding arbitrary control and data messages never panics.
#[cfg(any(test, fuzzing))]
#[doc(hidden)]
pub fn fuzz_one(data: &[u8]) {
    if let Ok(Control::Descriptor(d)) = recv_control(&mut &data[..]) {
        let before = u64::from(data.first().copied().unwrap_or(0));
        if let Ok(s) = d.validate(before) {
            assert!(s.block_size >= descriptor::BLOCK_MIN, "a validated descriptor has a usable block size");
        }
    }
    if let Ok(k) = UcxKey::decode(data) {
        assert_eq!(UcxKey::decode(&k.encode()).unwrap(), k);
    }
    if let Ok(b) = <&[u8; REQUEST_LEN]>::try_from(data.get(..REQUEST_LEN).unwrap_or(&[])) {
        if let Ok(r) = Request::decode(b) {
            assert_eq!(Request::decode(&r.encode()).unwrap(), r);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_round_trip_and_are_bounded() {
        let r = Request::Range { generation: 3, offset: 1 << 40, len: 4 << 20 };
        assert_eq!(Request::decode(&r.encode()).unwrap(), r);
        let mut big = r.encode();
        big[17..21].copy_from_slice(&(READ_MAX + 1).to_be_bytes());
        assert!(Request::decode(&big).is_err());
        for r in [
            Request::Register { generation: 1, port: 7401, serves: true, local: false, advertise_len: 12 },
            Request::Locate { generation: 1, body_len: 40 },
            Request::Have { generation: 1, block: 9 },
            Request::NotAt { generation: 1, block: 9, peer: 4 },
            Request::Needed { generation: 1 },
        ] {
            assert_eq!(Request::decode(&r.encode()).unwrap(), r);
        }
        let mut long = Request::Register { generation: 1, port: 1, serves: true, local: true, advertise_len: 0 }.encode();
        long[17..21].copy_from_slice(&(crate::tracker::ADVERTISE_MAX as u32 + 1).to_be_bytes());
        assert!(Request::decode(&long).is_err(), "advertised address too long");
        let mut bad = r.encode();
        bad[0] = 9;
        assert!(Request::decode(&bad).is_err());
    }

    #[test]
    fn control_messages_are_bounded() {
        let mut buf = Vec::new();
        send_control(&mut buf, &Control::Heartbeat).unwrap();
        assert!(matches!(recv_control(&mut &buf[..]).unwrap(), Control::Heartbeat));
        let huge = (CONTROL_MESSAGE_MAX + 1).to_be_bytes();
        assert!(recv_control(&mut &huge[..]).is_err());
        assert!(recv_control(&mut &b"\0\0\0\x02{x"[..]).is_err());
    }

    #[test]
    fn a_descriptor_with_block_size_zero_is_a_protocol_error_after_decoding() {
        let d = snapshot::Descriptor {
            generation: 1,
            replid: "r".into(),
            offset: 0,
            block_size: 0,
            length: Some(10),
            published: 10,
            checksums: vec![1],
            rdb_version: None,
            log_end: 0,
            state: snapshot::State::Complete,
            error: None,
        };
        let mut buf = Vec::new();
        send_control(&mut buf, &Control::Descriptor(d.into())).unwrap();
        let Control::Descriptor(got) = recv_control(&mut &buf[..]).unwrap() else { panic!("not a descriptor") };
        assert!(matches!(got.validate(0), Err(Error::Protocol(m)) if m.contains("block_size")));
    }
}

#[cfg(test)]
mod fuzz_smoke {
    #[test]
    fn fuzz_smoke() {
        let mut x: u64 = 0x1234_5678_9ABC_DEF1;
        for len in 0..4000usize {
            let mut d = Vec::with_capacity(len % 64);
            for _ in 0..len % 64 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                d.push(x as u8);
            }
            if len % 3 == 0 && d.len() > 4 {
                let body = (d.len() - 4) as u32;
                d[..4].copy_from_slice(&body.to_be_bytes());
            }
            super::fuzz_one(&d);
        }
        // Descriptors as a relay frames them, with numbers replaced by arbitrary ones (zero and huge
        // block sizes and counts among them): decode and validation never panic.
        for i in 0..2000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let n = |k: u64| [0, 1, 4096, 1 << 20, u64::MAX, x.rotate_left(k as u32)][((x >> k) % 6) as usize];
            let body = format!(
                r#"{{"descriptor":{{"generation":1,"replid":"r","offset":{},"block_size":{},"length":{},"published":{},"checksums":{:?},"rdb_version":null,"log_end":{},"state":"capturing","error":null}}}}"#,
                n(1), n(5), n(9), n(13), vec![7u32; (i % 5) as usize], n(17)
            );
            let mut d = (body.len() as u32).to_be_bytes().to_vec();
            d.extend_from_slice(body.as_bytes());
            d[0] = (i % 3) as u8; // checksums_before in fuzz_one; the length's high byte stays 0
            super::fuzz_one(&d);
        }
    }
}
