//! Fuzz entry points for what a peer sends on a data path (built for `cargo fuzz`, which sets
//! `--cfg fuzzing`, and for the stable smoke tests): the authentication handshake from either side,
//! the responses an agent reads from the relay or from a peer agent, and the request stream a relay
//! or a peer agent's server reads.

use crate::auth::{self, Kind};
use crate::tcp::StreamReader;
use crate::{wire, RangeReader, Token};
use std::io::{Read, Write};

/// A connection whose far side says `input` and swallows what we write.
struct Scripted<'a> {
    input: &'a [u8],
    written: usize,
}

impl Read for Scripted<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.input.read(buf)
    }
}

impl Write for Scripted<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.written += buf.len();
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

const TOKEN: &[u8] = b"fuzzing-token-0123456789";

/// Authentication with a peer that sends arbitrary bytes: never panics, and never accepts it (the
/// peer would have to forge an HMAC over our fresh nonce).
pub fn auth(data: &[u8]) {
    let token = Token::new(TOKEN).expect("a long enough token");
    let mut s = Scripted { input: data, written: 0 };
    assert!(auth::client(&mut s, &token, Kind::Data).is_err(), "accepted a relay that does not know the token");
    let mut s = Scripted { input: data, written: 0 };
    assert!(auth::server(&mut s, &token).is_err(), "accepted an agent that does not know the token");
}

/// An agent reading blocks from a relay or a peer that answers arbitrary bytes: every read either
/// fails or fills exactly the bytes asked; nothing panics or allocates beyond the bounds. Then the
/// same bytes as a request stream, as a relay's or a peer's server reads it.
pub fn data_path(data: &[u8]) {
    let mut r = StreamReader::new(Scripted { input: data, written: 0 });
    let mut buf = vec![0u8; 64];
    for _ in 0..4 {
        match r.read(1, 0, &mut buf) {
            Ok(()) => {}
            Err(_) => break,
        }
    }
    let mut input = data;
    for _ in 0..64 {
        match wire::read_request(&mut input) {
            Ok(Some(req)) => assert_eq!(wire::Request::decode(&req.encode()).ok(), Some(req)),
            Ok(None) | Err(_) => break,
        }
    }
}

#[cfg(test)]
mod fuzz_smoke {
    fn inputs() -> impl Iterator<Item = Vec<u8>> {
        let mut x: u64 = 0x2545_F491_4F6C_DD1D;
        (0..3000usize).map(move |len| {
            (0..len % 160)
                .map(|i| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    // Mostly small values (statuses, short lengths), sometimes the magic.
                    if i < 8 && len % 3 == 0 {
                        crate::auth::MAGIC[i]
                    } else {
                        (x % 5) as u8
                    }
                })
                .collect()
        })
    }

    #[test]
    fn fuzz_smoke() {
        for d in inputs() {
            super::auth(&d);
            super::data_path(&d);
        }
    }
}
