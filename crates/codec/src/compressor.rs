//! Compressing a block once, where the snapshot is captured, and keeping it raw when that does not
//! pay.

use crate::codec::Codec;

/// Compresses blocks with one codec, reusing its context from block to block (one per thread of a
/// compression pool).
pub struct Compressor {
    codec: Codec,
    zstd: Option<zstd::bulk::Compressor<'static>>,
}

impl Compressor {
    /// A compressor for `codec` at `level` (zstd's level; ignored by LZ4, which has one speed here,
    /// the `lz4 -1` of its command line; and by raw).
    pub fn new(codec: Codec, level: i32) -> std::io::Result<Compressor> {
        let zstd = match codec {
            Codec::Zstd => Some(zstd::bulk::Compressor::new(level)?),
            Codec::Raw | Codec::Lz4 => None,
        };
        Ok(Compressor { codec, zstd })
    }

    /// Its codec.
    pub fn codec(&self) -> Codec {
        self.codec
    }

    /// Compress `raw` into `out` (cleared first) and say how it is to be kept: this compressor's codec
    /// when the result is at most [`limits::BLOCK_COMPRESSED_PAYS_EIGHTHS`] eighths of `raw`, else
    /// [`Codec::Raw`] (and `out` is left empty: keep `raw` itself).
    pub fn compress(&mut self, raw: &[u8], out: &mut Vec<u8>) -> Codec {
        out.clear();
        if raw.is_empty() {
            return Codec::Raw;
        }
        // Anything longer than this does not pay. zstd is given only that much room and gives up at
        // its end; LZ4's block encoder needs room for its worst case, so it is judged after.
        let pays = raw.len() / 8 * limits::BLOCK_COMPRESSED_PAYS_EIGHTHS as usize;
        let done = match (self.codec, self.zstd.as_mut()) {
            (Codec::Lz4, _) => {
                out.resize(lz4_flex::block::get_maximum_output_size(raw.len()), 0);
                lz4_flex::block::compress_into(raw, out).ok()
            }
            (Codec::Zstd, Some(z)) => {
                // zstd fails rather than overflow a buffer too small for the frame: that is "does
                // not pay".
                out.resize(pays.max(1), 0);
                z.compress_to_buffer(raw, out.as_mut_slice()).ok()
            }
            _ => None,
        };
        match done {
            Some(n) if n <= pays => {
                out.truncate(n);
                self.codec
            }
            _ => {
                out.clear();
                Codec::Raw
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decompress::decompress;

    fn text(n: usize) -> Vec<u8> {
        let mut v = Vec::with_capacity(n);
        let mut i = 0u64;
        while v.len() < n {
            v.extend_from_slice(format!("{{\"id\":{i},\"name\":\"user-{}\",\"active\":true}},", i % 977).as_bytes());
            i += 1;
        }
        v.truncate(n);
        v
    }

    fn noise(n: usize) -> Vec<u8> {
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect()
    }

    #[test]
    fn a_block_that_compresses_is_kept_compressed_and_comes_back_whole() {
        let raw = text(1 << 20);
        for codec in [Codec::Lz4, Codec::Zstd] {
            let mut c = Compressor::new(codec, 1).unwrap();
            let mut stored = Vec::new();
            assert_eq!(c.compress(&raw, &mut stored), codec);
            assert!(stored.len() < raw.len() / 4, "{codec}: {} of {}", stored.len(), raw.len());
            let mut back = Vec::new();
            decompress(codec, &stored, raw.len(), &mut back).unwrap();
            assert_eq!(back, raw, "{codec}");
        }
    }

    #[test]
    fn a_block_that_does_not_pay_stays_raw() {
        let raw = noise(1 << 20);
        for codec in [Codec::Lz4, Codec::Zstd, Codec::Raw] {
            let mut c = Compressor::new(codec, 1).unwrap();
            let mut stored = vec![1, 2, 3];
            assert_eq!(c.compress(&raw, &mut stored), Codec::Raw, "{codec}");
            assert!(stored.is_empty(), "{codec}: nothing to keep but the raw block");
        }
        assert_eq!(Compressor::new(Codec::Zstd, 1).unwrap().compress(&[], &mut Vec::new()), Codec::Raw);
    }
}
