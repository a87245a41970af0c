//! The 5-byte header of every answer on a data connection: a [`Status`] and the body's length. A
//! success carries the bytes asked for; a refusal carries a short message.

use crate::Error;

/// Encoded size of a [`ResponseHeader`].
pub const RESPONSE_HEADER_LEN: usize = 5;

/// How a relay or a peer answers a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// The body is the answer.
    Ok,
    /// Refused; the body says why.
    Error,
    /// A peer that serves its maximum already: ask another holder (the body is a message).
    Busy,
}

impl Status {
    /// Every status with its byte on the wire: the one table encode and decode both use.
    const TABLE: [(Status, u8); 3] = [(Status::Ok, 0), (Status::Error, 1), (Status::Busy, 2)];

    fn byte(self) -> u8 {
        Self::TABLE.iter().find(|(s, _)| *s == self).map(|(_, b)| *b).unwrap_or(1)
    }

    fn from_byte(b: u8) -> Option<Status> {
        Self::TABLE.iter().find(|(_, x)| *x == b).map(|(s, _)| *s)
    }
}

/// A response header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResponseHeader {
    /// How the request went.
    pub status: Status,
    /// Bytes of body that follow.
    pub len: u32,
}

impl ResponseHeader {
    /// A success with `len` bytes of answer.
    pub fn ok(len: u32) -> Self {
        ResponseHeader { status: Status::Ok, len }
    }

    /// Encode.
    pub fn encode(&self) -> [u8; RESPONSE_HEADER_LEN] {
        let mut h = [0u8; RESPONSE_HEADER_LEN];
        h[0] = self.status.byte();
        h[1..].copy_from_slice(&self.len.to_be_bytes());
        h
    }

    /// Decode, bounding the body: at most [`super::request::READ_MAX`] for a success, at most
    /// [`limits::ERROR_MESSAGE_BYTES_MAX`] for a refusal's message.
    pub fn decode(h: &[u8; RESPONSE_HEADER_LEN]) -> Result<ResponseHeader, Error> {
        let status = Status::from_byte(h[0]).ok_or_else(|| Error::Protocol(format!("unknown response status {}", h[0])))?;
        let len = u32::from_be_bytes([h[1], h[2], h[3], h[4]]);
        let max = match status {
            Status::Ok => super::request::READ_MAX as usize,
            Status::Error | Status::Busy => limits::ERROR_MESSAGE_BYTES_MAX,
        };
        if len as usize > max {
            return Err(Error::Protocol(format!("{status:?} response of {len} bytes exceeds {max}")));
        }
        Ok(ResponseHeader { status, len })
    }
}

/// A refusal: its header and its message, cut to the bound a client accepts.
pub fn refusal(status: Status, message: &str) -> Vec<u8> {
    let m = &message.as_bytes()[..message.len().min(limits::ERROR_MESSAGE_BYTES_MAX)];
    let mut out = ResponseHeader { status, len: m.len() as u32 }.encode().to_vec();
    out.extend_from_slice(m);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_round_trip_and_are_bounded() {
        for status in [Status::Ok, Status::Error, Status::Busy] {
            let h = ResponseHeader { status, len: 17 };
            assert_eq!(ResponseHeader::decode(&h.encode()).unwrap(), h);
        }
        assert!(ResponseHeader::decode(&ResponseHeader::ok(crate::wire::READ_MAX + 1).encode()).is_err());
        let long = ResponseHeader { status: Status::Error, len: limits::ERROR_MESSAGE_BYTES_MAX as u32 + 1 };
        assert!(ResponseHeader::decode(&long.encode()).is_err(), "error messages are short");
        assert!(ResponseHeader::decode(&[3, 0, 0, 0, 0]).is_err(), "unknown status");
        assert_eq!(refusal(Status::Busy, &"x".repeat(10_000)).len(), RESPONSE_HEADER_LEN + limits::ERROR_MESSAGE_BYTES_MAX);
    }
}
