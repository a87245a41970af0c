//! A generation's block table: each block's codec, stored length and checksum, packed in order.
//!
//! Blocks are kept as they were packed ([`codec::Compressor`]): compressed, or raw when that did not
//! pay. Their places are packed too, each at the sum of the stored lengths before it, so a reader
//! learns a block's place and length from the table before it reads: the relay's descriptor carries
//! the entries of the blocks it publishes (docs/design/compression.md).

use codec::Codec;

/// One block as it is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    /// CRC32C of the stored bytes ([`crate::block_checksum`]): what a reader checks before it
    /// decompresses, trusts, keeps or serves them.
    pub crc: u32,
    /// Bytes kept (and read); the raw length when `codec` is [`Codec::Raw`], shorter otherwise.
    pub stored_len: u32,
    /// How the bytes are kept.
    pub codec: Codec,
}

/// The entries of a generation's blocks so far, with each block's place in the region.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Table {
    entries: Vec<Entry>,
    /// Where each block starts in the region (the stored lengths before it).
    starts: Vec<u64>,
    end: u64,
}

impl Table {
    /// An empty table.
    pub fn new() -> Table {
        Table::default()
    }

    /// Append the next block's entry.
    pub fn push(&mut self, e: Entry) {
        self.entries.push(e);
        self.starts.push(self.end);
        self.end += u64::from(e.stored_len);
    }

    /// Blocks in the table.
    pub fn len(&self) -> u64 {
        self.entries.len() as u64
    }

    /// No block yet.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Block `i`'s entry and where it starts in the region.
    pub fn get(&self, i: u64) -> Option<(Entry, u64)> {
        let i = usize::try_from(i).ok()?;
        Some((*self.entries.get(i)?, self.starts[i]))
    }

    /// The stored bytes the table covers: the region's watermark.
    pub fn stored_end(&self) -> u64 {
        self.end
    }

    /// The entries from block `from` on (none past the end).
    pub fn entries_from(&self, from: usize) -> &[Entry] {
        self.entries.get(from..).unwrap_or(&[])
    }

    /// The block that starts at `offset`, if any.
    pub fn block_at(&self, offset: u64) -> Option<u64> {
        self.starts.binary_search(&offset).ok().map(|i| i as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_are_packed_in_order() {
        let mut t = Table::new();
        assert!(t.is_empty() && t.get(0).is_none() && t.block_at(0).is_none());
        t.push(Entry { crc: 1, stored_len: 10, codec: Codec::Zstd });
        t.push(Entry { crc: 2, stored_len: 16, codec: Codec::Raw });
        t.push(Entry { crc: 3, stored_len: 3, codec: Codec::Lz4 });
        assert_eq!((t.len(), t.stored_end()), (3, 29));
        assert_eq!(t.get(1), Some((Entry { crc: 2, stored_len: 16, codec: Codec::Raw }, 10)));
        assert_eq!(t.get(2).map(|(_, s)| s), Some(26));
        assert_eq!((t.block_at(26), t.block_at(11), t.block_at(29)), (Some(2), None, None));
        assert_eq!(t.entries_from(2).len(), 1);
        assert!(t.entries_from(9).is_empty());
    }
}
