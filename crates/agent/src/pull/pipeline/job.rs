//! One read as the planner gives it to a fetcher (where the block is, its entry, its buffers), and
//! the check every block passes before it is used or kept: its CRC32C against the relay's entry, then
//! its codec undone to exactly its length in the RDB. Apart because a job goes from the planner to a
//! fetcher and back, owned by no thread, and because the check is invariant 1 at the agent's end,
//! tested alone.

use codec::{Codec, Decompressor};

/// Where a read goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Source {
    Relay,
    /// A peer: its number in the swarm and its address.
    Peer {
        id: u32,
        addr: String,
    },
}

/// One read, as the planner gives it to a fetcher.
pub(super) struct Job {
    pub(super) block: u64,
    /// Where the block's stored bytes are in the relay's region, and how many.
    pub(super) offset: u64,
    pub(super) len: u32,
    /// The relay's published CRC32C of the stored bytes.
    pub(super) want: u32,
    /// How they are kept, and the block's length in the RDB.
    pub(super) codec: Codec,
    pub(super) raw_len: u32,
    pub(super) from: Source,
    /// `len` bytes, from the planner's pool.
    pub(super) buf: Vec<u8>,
    /// The block decompressed, once verified (empty for a raw block: `buf` is the RDB's bytes); a
    /// buffer from the pool.
    pub(super) raw: Vec<u8>,
}

impl Job {
    /// Check the stored bytes against the entry, then undo the codec into `raw`. A block that passes
    /// its checksum and does not decompress to its length was compressed wrongly or forged to match:
    /// bad bytes all the same, never fed.
    pub(super) fn verify(&mut self, d: &mut Decompressor) -> Verified {
        if snapshot::block_checksum(&self.buf) != self.want {
            return Verified::Mismatch;
        }
        if self.codec == Codec::Raw {
            return if self.buf.len() == self.raw_len as usize { Verified::Good } else { Verified::Mismatch };
        }
        match d.decompress(self.codec, &self.buf, self.raw_len as usize, &mut self.raw) {
            Ok(()) => Verified::Good,
            Err(e) => Verified::Undecodable(e),
        }
    }

    /// The block's RDB bytes, once verified.
    pub(super) fn rdb_bytes(&self) -> &[u8] {
        if self.codec == Codec::Raw {
            &self.buf
        } else {
            &self.raw
        }
    }
}

/// What checking a block found.
#[derive(Debug)]
pub(super) enum Verified {
    Good,
    /// Its checksum does not match its entry.
    Mismatch,
    /// It matches, and does not decompress to its length.
    Undecodable(codec::Error),
}

#[cfg(test)]
mod tests {
    use super::{Codec, Decompressor, Job, Source, Verified};

    fn job(stored: Vec<u8>, codec: Codec, raw_len: usize) -> Job {
        let want = snapshot::block_checksum(&stored);
        Job { block: 3, offset: 0, len: stored.len() as u32, want, codec, raw_len: raw_len as u32, from: Source::Relay, buf: stored, raw: Vec::new() }
    }

    #[test]
    fn a_block_is_good_only_when_it_matches_its_entry_and_decompresses_to_its_length() {
        let raw: Vec<u8> = b"fastrepl ".iter().copied().cycle().take(64 << 10).collect();
        let mut c = codec::Compressor::new(Codec::Zstd, 1).unwrap();
        let mut zstd = Vec::new();
        assert_eq!(c.compress(&raw, &mut zstd), Codec::Zstd);
        let mut d = Decompressor::new();
        let mut good = job(zstd.clone(), Codec::Zstd, raw.len());
        assert!(matches!(good.verify(&mut d), Verified::Good));
        assert_eq!(good.rdb_bytes(), &raw[..], "the writer gets the RDB's bytes");
        let mut plain = job(raw.clone(), Codec::Raw, raw.len());
        assert!(matches!(plain.verify(&mut d), Verified::Good) && plain.rdb_bytes() == &raw[..]);
        // A flipped byte: the checksum catches it before anything is decoded.
        let mut flipped = job(zstd.clone(), Codec::Zstd, raw.len());
        flipped.buf[10] ^= 1;
        assert!(matches!(flipped.verify(&mut d), Verified::Mismatch));
        // Bytes whose checksum matches (a relay that compressed wrongly, or a forged checksum) but
        // that do not decode, or decode to another length: bad all the same, and nothing is kept.
        let mut garbage = job(vec![0xAB; 4000], Codec::Zstd, raw.len());
        assert!(matches!(garbage.verify(&mut d), Verified::Undecodable(_)) && garbage.raw.is_empty());
        let mut short = job(zstd.clone(), Codec::Zstd, raw.len() + 1);
        assert!(matches!(short.verify(&mut d), Verified::Undecodable(_)));
        let mut lz4 = Vec::new();
        assert_eq!(codec::Compressor::new(Codec::Lz4, 1).unwrap().compress(&raw, &mut lz4), Codec::Lz4);
        let mut lz4_as_zstd = job(lz4, Codec::Zstd, raw.len());
        assert!(matches!(lz4_as_zstd.verify(&mut d), Verified::Undecodable(_)));
        let mut raw_too_short = job(raw[..100].to_vec(), Codec::Raw, raw.len());
        assert!(matches!(raw_too_short.verify(&mut d), Verified::Mismatch));
    }
}
