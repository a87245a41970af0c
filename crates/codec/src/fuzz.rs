//! Fuzz entry points (`fuzz/fuzz_targets/codec.rs`), also run on stable by the `fuzz_smoke` test.

use crate::codec::Codec;
use crate::decompress::Decompressor;

/// A block from a peer: byte 0 its codec, bytes 1–3 its raw length (big-endian, at most 1 MiB so
/// that each input stays fast), the rest its stored bytes. Whatever they are, decoding either fails
/// and leaves nothing, or gives exactly the length asked for; it never panics. True if it decoded.
pub fn decompress(data: &[u8]) -> bool {
    let [c, a, b, l, stored @ ..] = data else { return false };
    let Some(codec) = Codec::from_wire(*c) else { return false };
    let raw_len = (usize::from(*a) << 16 | usize::from(*b) << 8 | usize::from(*l)) % ((1 << 20) + 1);
    let mut out = Vec::new();
    match Decompressor::new().decompress(codec, stored, raw_len, &mut out) {
        Ok(()) => {
            assert_eq!(out.len(), raw_len, "decoded to another length than asked");
            true
        }
        Err(_) => {
            assert!(out.is_empty(), "an error left bytes behind");
            false
        }
    }
}
