//! Undoing a block's codec where it is fed to a replica, to exactly the length its table entry names.

use crate::codec::Codec;
use crate::error::Error;

/// Decompresses blocks, reusing its zstd context from block to block (one per thread that feeds).
#[derive(Default)]
pub struct Decompressor {
    zstd: Option<zstd::bulk::Decompressor<'static>>,
}

impl Decompressor {
    /// A decompressor for every codec.
    pub fn new() -> Decompressor {
        Decompressor::default()
    }

    /// Decode `stored` (kept with `codec`) into `out` (replaced), which must come to exactly
    /// `raw_len` bytes. `raw_len` is bounded (a block is one range read at most,
    /// [`limits::READ_BYTES_MAX`]) before anything is allocated, and a compressed block must be
    /// shorter than it; the decoders write into at most `raw_len` bytes of room (zstd: the vector's
    /// room, which may be more if an earlier block grew it, but is never grown past `raw_len` here)
    /// and fail rather than go past it, so a block claiming more cannot make us allocate more. On
    /// error `out` is empty.
    pub fn decompress(&mut self, codec: Codec, stored: &[u8], raw_len: usize, out: &mut Vec<u8>) -> Result<(), Error> {
        out.clear();
        let r = self.decode(codec, stored, raw_len, out);
        if r.is_err() {
            out.clear();
        }
        r
    }

    fn decode(&mut self, codec: Codec, stored: &[u8], raw_len: usize, out: &mut Vec<u8>) -> Result<(), Error> {
        let max = limits::READ_BYTES_MAX as u64;
        if raw_len as u64 > max {
            return Err(Error::TooLong { raw_len: raw_len as u64, max });
        }
        let stored_len = stored.len();
        if codec != Codec::Raw && stored_len >= raw_len {
            return Err(Error::NotShorter { codec, stored_len, raw_len });
        }
        let corrupt = |why: String| Error::Corrupt { codec, stored_len, why };
        let got = match codec {
            Codec::Raw => {
                if stored_len == raw_len {
                    out.extend_from_slice(stored);
                }
                stored_len
            }
            Codec::Lz4 => {
                out.resize(raw_len, 0);
                match lz4_flex::block::decompress_into(stored, out) {
                    Ok(n) => n,
                    // The output filled before the input ended: it would come to more than the entry says.
                    Err(lz4_flex::block::DecompressError::OutputTooSmall { .. }) => return Err(Error::Longer { codec, stored_len, want: raw_len }),
                    Err(e) => return Err(corrupt(e.to_string())),
                }
            }
            Codec::Zstd => {
                // A frame's header may say its length: a frame that says another is refused before
                // it is decoded (typed, not read from the decoder's error text).
                match zstd::zstd_safe::get_frame_content_size(stored) {
                    Ok(Some(n)) if n > raw_len as u64 => return Err(Error::Longer { codec, stored_len, want: raw_len }),
                    Ok(Some(n)) if n < raw_len as u64 => return Err(Error::WrongLength { codec, stored_len, got: n as usize, want: raw_len }),
                    Ok(_) => {}
                    Err(e) => return Err(corrupt(format!("frame header: {e:?}"))),
                }
                // Into the vector's room, not a zero-filled slice: no memset of a whole block per
                // block on the feeding path. The room is `raw_len`, or more when the vector was
                // grown by an earlier, larger block: never more than is already allocated.
                out.reserve_exact(raw_len);
                let d = match &mut self.zstd {
                    Some(d) => d,
                    empty => empty.insert(zstd::bulk::Decompressor::new().map_err(|e| corrupt(format!("make a decoder: {e}")))?),
                };
                // A frame without its length in the header and longer than the room fails here
                // ("destination buffer too small"): as corrupt as any other failure.
                d.decompress_to_buffer(stored, out).map_err(|e| corrupt(e.to_string()))?
            }
        };
        if got > raw_len {
            return Err(Error::Longer { codec, stored_len, want: raw_len });
        }
        if got != raw_len {
            return Err(Error::WrongLength { codec, stored_len, got, want: raw_len });
        }
        Ok(())
    }
}

/// [`Decompressor::decompress`] with a decoder of its own (for one block; a feeding thread keeps a
/// [`Decompressor`]).
pub fn decompress(codec: Codec, stored: &[u8], raw_len: usize, out: &mut Vec<u8>) -> Result<(), Error> {
    Decompressor::new().decompress(codec, stored, raw_len, out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compressor::Compressor;

    fn stored(codec: Codec, raw: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        assert_eq!(Compressor::new(codec, 1).unwrap().compress(raw, &mut out), codec);
        out
    }

    #[test]
    fn a_block_that_lies_about_its_length_or_bytes_is_refused_and_nothing_is_kept() {
        let raw = b"abcabcabcabcabcabcabcabcabcabcabcabcabcabcabcabcabcabcabcabcabcabc".repeat(64);
        let mut d = Decompressor::new();
        for codec in [Codec::Lz4, Codec::Zstd] {
            let s = stored(codec, &raw);
            let mut out = Vec::new();
            let e = d.decompress(codec, &s, raw.len() + 1, &mut out).unwrap_err();
            assert!(matches!(e, Error::WrongLength { got, .. } if got == raw.len()), "{codec}: longer entry: {e}");
            assert!(out.is_empty());
            let e = d.decompress(codec, &s, raw.len() - 1, &mut out).unwrap_err();
            assert!(matches!(e, Error::Longer { .. }), "{codec}: shorter entry: {e}");
            assert!(out.is_empty());
            // Bytes damaged: it does not decode, or to the wrong length; never Ok.
            assert!(d.decompress(codec, &s[..s.len() / 2], raw.len(), &mut out).is_err(), "{codec}: truncated");
            assert!(out.is_empty());
            // No shorter than raw: no relay keeps it compressed.
            let e = d.decompress(codec, &raw, raw.len(), &mut out).unwrap_err();
            assert!(matches!(e, Error::NotShorter { .. }), "{codec}: {e}");
            d.decompress(codec, &s, raw.len(), &mut out).unwrap();
            assert_eq!(out, raw, "{codec}: and the true block after all that");
        }
        assert!(matches!(decompress(Codec::Raw, b"abc", 4, &mut Vec::new()), Err(Error::WrongLength { got: 3, want: 4, .. })));
        let huge = limits::READ_BYTES_MAX as usize + 1;
        assert!(matches!(decompress(Codec::Zstd, b"x", huge, &mut Vec::new()), Err(Error::TooLong { .. })), "bounded before allocating");
        decompress(Codec::Raw, b"abc", 3, &mut Vec::new()).unwrap();
    }

    #[test]
    fn a_zstd_frame_that_claims_more_than_the_entry_allocates_no_more() {
        // A frame of 1 MiB of zeros, read as a block of 4 KiB: refused, with no 1 MiB buffer.
        let s = stored(Codec::Zstd, &vec![0u8; 1 << 20]);
        let mut out = Vec::new();
        let e = decompress(Codec::Zstd, &s, 4096, &mut out).unwrap_err();
        assert!(matches!(e, Error::Longer { want: 4096, .. }), "{e}");
        assert!(out.capacity() <= 1 << 13, "allocated {} for a 4 KiB entry", out.capacity());
    }

    #[test]
    fn fuzz_smoke() {
        // The fuzz target's invariant on stable, over inputs built to reach its branches: true
        // blocks (decoded whole), damaged ones, unknown codecs, short inputs.
        let raw = b"hello hello hello hello hello hello hello hello".repeat(16);
        for codec in [Codec::Lz4, Codec::Zstd] {
            let len = raw.len() as u32;
            let mut input = vec![codec.to_wire(), (len >> 16) as u8, (len >> 8) as u8, len as u8];
            input.extend(stored(codec, &raw));
            assert!(crate::fuzz::decompress(&input), "{codec}: a true block decodes");
            input[3] ^= 1;
            assert!(!crate::fuzz::decompress(&input), "{codec}: one byte off in length does not");
        }
        for input in [&b""[..], b"\x00", b"\x01\xff\xff\xff\x00garbage", b"\x02\x00\x10\x28\xb5\x2f\xfd", b"\x07\x00\x00\x00", b"\x00\x00\x00\x03abc"] {
            crate::fuzz::decompress(input);
        }
        assert!(crate::fuzz::decompress(b"\x00\x00\x00\x03abc"), "raw, exact length");
    }
}
