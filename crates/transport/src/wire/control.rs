//! The control connection's messages: the relay pushes `u32 length (big-endian) + JSON`, each bounded
//! by [`CONTROL_MESSAGE_MAX`].

use super::capture_failure::CaptureFailure;
use super::descriptor::Descriptor;
use super::status;
use super::transport_kind::TransportKind;
use crate::{Error, Operation};
use serde::{Deserialize, Serialize};
use std::io::{Read, Write};

/// Largest control message accepted.
pub const CONTROL_MESSAGE_MAX: u32 = limits::CONTROL_MESSAGE_BYTES_MAX;
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
    /// The generation's state; `table` holds only the entries not sent before on this connection.
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
            stored: 10,
            table: vec![snapshot::Entry { crc: 1, stored_len: 10, codec: snapshot::Codec::Raw }],
            rdb_version: None,
            log_end: 0,
            state: snapshot::State::Complete,
            error: None,
        };
        let mut buf = Vec::new();
        send_control(&mut buf, &Control::Descriptor(d.into())).unwrap();
        let Control::Descriptor(got) = recv_control(&mut &buf[..]).unwrap() else { panic!("not a descriptor") };
        assert!(matches!(got.validate(crate::wire::Before::default()), Err(Error::Protocol(m)) if m.contains("block_size")));
    }
}
