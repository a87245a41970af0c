//! Every message the relay and agents exchange after authentication, and nothing else: the leaf of
//! the crate (no sockets beyond "read one frame from a `Read`, write one to a `Write`", no knowledge
//! of the client or server modules above it).
//!
//! Control: the relay sends `u32 length (big-endian) + JSON`; messages are bounded by
//! [`CONTROL_MESSAGE_MAX`]. Data: fixed 21-byte [`Request`]s, answered by a 5-byte
//! [`ResponseHeader`] and the bytes. Binary bodies (swarm messages, ucx keys) are read through one
//! [`cursor::Cursor`].

use crate::{Error, Operation};
use serde::{Deserialize, Serialize};
use std::io::{Read, Write};

mod capture_failure;
pub mod cursor;
pub mod descriptor;
pub mod request;
pub mod response;
pub mod status;
pub mod swarm;
mod transport_kind;
mod ucx_key;

pub use capture_failure::CaptureFailure;
pub use descriptor::Descriptor;
pub use request::{read_request, AttachKind, Op, Renewal, Request, ALL_BLOCKS, REQUEST_LEN, UPLOADS_REPORTED_MAX};
pub use response::{ResponseHeader, Status, RESPONSE_HEADER_LEN};
pub use transport_kind::TransportKind;
pub use ucx_key::{UcxKey, UCX_BLOB_MAX, UCX_SEGMENT};

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
    /// The answer on a status connection: what the relay holds and has done.
    Status(Box<status::RelayStatus>),
    /// The capture tried for this agent failed, and why, by kind (so the agent retries only what time
    /// can mend). Older relays send [`Control::Error`] instead.
    CaptureFailed {
        /// What kind of failure.
        kind: CaptureFailure,
        /// The relay's account of it.
        message: String,
    },
}

/// Write one control message.
pub fn send_control<W: Write>(w: &mut W, msg: &Control) -> Result<(), Error> {
    let body = serde_json::to_vec(msg).map_err(|e| Error::Protocol(format!("encode control message: {e}")))?;
    let mut frame = (body.len() as u32).to_be_bytes().to_vec();
    frame.extend_from_slice(&body);
    w.write_all(&frame).map_err(Error::io(Operation::SendControlMessage))
}

/// Read one control message.
pub fn recv_control<R: Read>(r: &mut R) -> Result<Control, Error> {
    let mut len = [0u8; 4];
    r.read_exact(&mut len).map_err(Error::io(Operation::ReadControlMessage))?;
    let len = u32::from_be_bytes(len);
    if len > CONTROL_MESSAGE_MAX {
        return Err(Error::Protocol(format!("control message of {len} bytes exceeds {CONTROL_MESSAGE_MAX}")));
    }
    debug_assert!(len <= CONTROL_MESSAGE_MAX, "a control message's length is bounded before its buffer is allocated");
    let mut body = vec![0u8; len as usize];
    r.read_exact(&mut body).map_err(Error::io(Operation::ReadControlMessage))?;
    serde_json::from_slice(&body).map_err(|e| Error::Protocol(format!("decode control message: {e}")))
}

/// Fuzz entry point: decoding arbitrary control and data messages never panics.
#[cfg(any(test, fuzzing))]
#[doc(hidden)]
pub fn fuzz_one(data: &[u8]) {
    if let Ok(Control::Descriptor(d)) = recv_control(&mut &data[..]) {
        let before = (data.len() % 4) as u64; // checksums said to have come before
        if let Ok(s) = d.validate(before) {
            assert!(s.block_size >= descriptor::BLOCK_MIN, "a validated descriptor has a usable block size");
        }
    }
    if let Ok(h) = <&[u8; RESPONSE_HEADER_LEN]>::try_from(data.get(..RESPONSE_HEADER_LEN).unwrap_or(&[])) {
        if let Ok(r) = ResponseHeader::decode(h) {
            assert_eq!(ResponseHeader::decode(&r.encode()).unwrap(), r);
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
        let mut decoded = 0;
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
            decoded += usize::from(matches!(super::recv_control(&mut &d[..]), Ok(super::Control::Descriptor(_))));
            super::fuzz_one(&d);
        }
        assert_eq!(decoded, 2000, "every framed descriptor reaches validation");
    }
}
