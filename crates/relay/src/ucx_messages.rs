//! The messages between the relay and its UCX side process (`ucx_side`, which reads them): typed, each a
//! length-prefixed (u32, big-endian) JSON object of at most [`limits::UCX_SIDE_MESSAGE_BYTES_MAX`] bytes. Not behind the
//! `ucx` feature, so that the parser is fuzzed without UCX (`fuzz/fuzz_targets/ucx_messages.rs`).

use serde::{Deserialize, Serialize};
use std::io::{Read, Write};
use std::net::SocketAddr;

use limits::UCX_SIDE_MESSAGE_BYTES_MAX as MESSAGE_MAX;

/// The side's first message: it is ready, or why not.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Ready {
    /// UCX is up.
    Up {
        /// The worker's address, for agents' endpoints.
        address: Vec<u8>,
        /// UCX's transports/devices here.
        transports: Vec<String>,
        /// The TCP addresses UCX listens on.
        listeners: Vec<SocketAddr>,
    },
    /// UCX could not start.
    Failed(String),
}

/// What the relay asks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Request {
    /// Register `[start, start + len)` of generation `generation`'s region (`capacity` bytes, the
    /// relay's descriptor `fd`) and pack its remote key.
    Register {
        /// The generation.
        generation: u64,
        /// The relay's descriptor of the generation's memfd.
        fd: i32,
        /// The region's size (mapped whole).
        capacity: u64,
        /// The segment's number (its key in the registrations).
        segment: u64,
        /// Where the segment starts in the region.
        start: u64,
        /// Its length.
        len: u64,
    },
    /// The relay let the generation go: drop its registrations and mapping.
    Forget {
        /// The generation.
        generation: u64,
    },
}

/// The side's answer to one [`Request`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Answer {
    /// A segment's registration.
    Key {
        /// Its address in this process.
        base: u64,
        /// Its length.
        len: u64,
        /// The packed remote key.
        rkey: Vec<u8>,
    },
    /// Done (a `Forget`).
    Done,
    /// The request failed.
    Failed(String),
}

/// Write one message: its length (u32, big-endian), then its JSON.
pub fn send<T: Serialize>(s: &mut impl Write, msg: &T) -> std::io::Result<()> {
    let body = serde_json::to_vec(msg).map_err(std::io::Error::other)?;
    if body.len() > MESSAGE_MAX {
        return Err(std::io::Error::other(format!("message of {} bytes exceeds {MESSAGE_MAX}", body.len())));
    }
    let mut frame = (body.len() as u32).to_be_bytes().to_vec();
    frame.extend_from_slice(&body);
    s.write_all(&frame)
}

/// Read one message (bounded by [`limits::UCX_SIDE_MESSAGE_BYTES_MAX`]); `Ok(None)` at a clean end of the stream.
pub fn receive<T: for<'de> Deserialize<'de>>(s: &mut impl Read) -> std::io::Result<Option<T>> {
    let mut len = [0u8; 4];
    match s.read_exact(&mut len) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let len = u32::from_be_bytes(len) as usize;
    if len > MESSAGE_MAX {
        return Err(std::io::Error::other(format!("message of {len} bytes exceeds {MESSAGE_MAX}")));
    }
    let mut body = vec![0u8; len];
    s.read_exact(&mut body)?;
    serde_json::from_slice(&body).map(Some).map_err(|e| std::io::Error::other(format!("malformed message: {e}")))
}

/// The fuzz target's body: read messages of every kind from `data` until it ends or is refused; each
/// one read must write back and read again as itself.
pub fn fuzz_one(data: &[u8]) {
    fn each<T: Serialize + for<'de> Deserialize<'de> + PartialEq + std::fmt::Debug>(data: &[u8]) {
        let mut r = data;
        while let Ok(Some(m)) = receive::<T>(&mut r) {
            let mut again = Vec::new();
            send(&mut again, &m).expect("a message read writes back");
            assert_eq!(receive::<T>(&mut &again[..]).expect("reads back").as_ref(), Some(&m), "round trip");
        }
    }
    each::<Request>(data);
    each::<Answer>(data);
    each::<Ready>(data);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fuzz_smoke() {
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut seed = Vec::new();
        send(&mut seed, &Request::Register { generation: 1, fd: 3, capacity: 9, segment: 0, start: 0, len: 9 }).unwrap();
        send(&mut seed, &Answer::Key { base: 7, len: 9, rkey: vec![1, 2, 3] }).unwrap();
        send(&mut seed, &Ready::Up { address: vec![9], transports: vec!["tcp/lo".into()], listeners: vec!["127.0.0.1:1".parse().unwrap()] }).unwrap();
        fuzz_one(&seed);
        for _ in 0..3000 {
            let mut d = seed.clone();
            for _ in 0..4 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let i = (x % d.len() as u64) as usize;
                d[i] = (x >> 32) as u8;
            }
            fuzz_one(&d);
        }
    }

    #[test]
    fn messages_round_trip_and_are_bounded() {
        let mut buf = Vec::new();
        send(&mut buf, &Request::Register { generation: 3, fd: 9, capacity: 1 << 20, segment: 0, start: 0, len: 4096 }).unwrap();
        send(&mut buf, &Request::Forget { generation: 3 }).unwrap();
        let mut r = &buf[..];
        assert!(matches!(receive::<Request>(&mut r).unwrap(), Some(Request::Register { generation: 3, fd: 9, segment: 0, len: 4096, .. })));
        assert!(matches!(receive::<Request>(&mut r).unwrap(), Some(Request::Forget { generation: 3 })));
        assert!(receive::<Request>(&mut r).unwrap().is_none(), "a clean end");
        let mut too_long = ((MESSAGE_MAX + 1) as u32).to_be_bytes().to_vec();
        too_long.extend_from_slice(b"{}");
        assert!(receive::<Request>(&mut &too_long[..]).unwrap_err().to_string().contains("exceeds"));
        let mut garbage = 5u32.to_be_bytes().to_vec();
        garbage.extend_from_slice(b"nope!");
        assert!(receive::<Request>(&mut &garbage[..]).unwrap_err().to_string().contains("malformed"));
        let mut cut = 50u32.to_be_bytes().to_vec();
        cut.extend_from_slice(b"{\"Forget\"");
        assert!(receive::<Request>(&mut &cut[..]).is_err(), "cut off mid-message");
    }
}
