//! The generation descriptor as it travels on a control connection, apart from the relay's in-memory
//! [`snapshot::Descriptor`], so that nothing an agent computes with (block arithmetic divides by the
//! block size) comes from the network unchecked: [`Descriptor::validate`] is the only way from the
//! wire form to the in-memory one.

use crate::Error;
use serde::{Deserialize, Serialize};

/// Smallest block size a relay may announce (its `--block-size` floor).
pub const BLOCK_MIN: u64 = limits::BLOCK_BYTES_MIN;
/// Largest block size a relay may announce: a block is one range read.
pub const BLOCK_MAX: u64 = limits::READ_BYTES_MAX as u64;
/// Largest RDB a descriptor may describe (what an agent would map over shm).
pub const LENGTH_MAX: u64 = limits::REGION_BYTES_MAX;
/// Longest replication ID accepted (Redis uses 40 hex characters).
pub const REPLID_MAX: usize = limits::REPLID_BYTES_MAX;

/// One block's table entry on the wire: `[crc32c of the stored bytes, stored length, codec byte]`
/// (a JSON array: a 100 GB snapshot's 25 600 entries take ~600 KB in the first descriptor).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry(pub u32, pub u32, pub u8);

impl From<snapshot::Entry> for Entry {
    fn from(e: snapshot::Entry) -> Self {
        Entry(e.crc, e.stored_len, e.codec.to_wire())
    }
}

/// A generation's state on the wire: one control message. Field names are those of
/// [`snapshot::Descriptor`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Descriptor {
    /// Generation number.
    pub generation: u64,
    /// The master's replication ID.
    pub replid: String,
    /// The master's offset at the snapshot.
    pub offset: u64,
    /// Block size in bytes.
    pub block_size: u64,
    /// RDB length, once known.
    pub length: Option<u64>,
    /// RDB bytes readable now, as the source wrote them.
    pub published: u64,
    /// The bytes those blocks are kept in: the region's watermark.
    pub stored: u64,
    /// The table entries of the blocks published since the previous descriptor on this connection.
    pub table: Vec<Entry>,
    /// RDB format version, once known.
    pub rdb_version: Option<u32>,
    /// End of the last complete command in the log (absolute replication offset).
    pub log_end: u64,
    /// State.
    pub state: snapshot::State,
    /// Why it failed, if it did.
    pub error: Option<String>,
}

impl From<snapshot::Descriptor> for Descriptor {
    fn from(d: snapshot::Descriptor) -> Self {
        let snapshot::Descriptor { generation, replid, offset, block_size, length, published, stored, table, rdb_version, log_end, state, mut error } = d;
        // The agent refuses a longer message (a bound on what it reads): cut it here, on a character
        // boundary, rather than have a long capture error make the whole descriptor unreadable.
        if let Some(e) = error.as_mut().filter(|e| e.len() > limits::ERROR_MESSAGE_BYTES_MAX) {
            let mut cut = limits::ERROR_MESSAGE_BYTES_MAX - 3;
            while !e.is_char_boundary(cut) {
                cut -= 1;
            }
            e.truncate(cut);
            e.push_str("...");
        }
        let table = table.into_iter().map(Entry::from).collect();
        Descriptor { generation, replid, offset, block_size, length, published, stored, table, rdb_version, log_end, state, error }
    }
}

impl Descriptor {
    /// Check what a relay sent and turn it into the in-memory descriptor. `before` is what earlier
    /// descriptors on this connection said (the watermark may only move on, a known length stays),
    /// how many table entries they carried and the stored bytes those cover:
    /// together with these they must cover exactly the published blocks, each entry must fit its
    /// block (a known codec; stored no longer than the block, and exactly as long when raw), and
    /// their stored lengths must add up to `stored`. Every rejection is an [`Error::Protocol`] naming
    /// the field.
    pub fn validate(self, before: Before) -> Result<snapshot::Descriptor, Error> {
        let bad = |field: &str, why: String| Err(Error::Protocol(format!("descriptor field {field}: {why}")));
        if !(BLOCK_MIN..=BLOCK_MAX).contains(&self.block_size) {
            return bad("block_size", format!("{} is outside [{BLOCK_MIN}, {BLOCK_MAX}]", self.block_size));
        }
        if self.replid.len() > REPLID_MAX {
            return bad("replid", format!("{} bytes exceed {REPLID_MAX}", self.replid.len()));
        }
        if let Some(length) = self.length {
            if length > LENGTH_MAX {
                return bad("length", format!("{length} exceeds {LENGTH_MAX}"));
            }
            if self.published > length {
                return bad("published", format!("{} is beyond the length {length}", self.published));
            }
        }
        // Against what this connection said before: published bytes never change and a length once
        // known is final (so no entry can follow a partial last block).
        if self.published < before.published {
            return bad("published", format!("{} is before the {} already published", self.published, before.published));
        }
        if before.length.is_some_and(|l| self.length != Some(l)) {
            return bad("length", format!("{:?} after the length {} was sent", self.length, before.length.unwrap_or_default()));
        }
        if self.published > LENGTH_MAX {
            return bad("published", format!("{} exceeds {LENGTH_MAX}", self.published));
        }
        // Published bytes are whole blocks, and the last partial block only at the end.
        let whole_blocks = self.published / self.block_size * self.block_size == self.published;
        if !whole_blocks && Some(self.published) != self.length {
            return bad("published", format!("{} is not a whole number of {}-byte blocks", self.published, self.block_size));
        }
        let blocks = self.published.div_ceil(self.block_size);
        let entries = before.entries.checked_add(self.table.len() as u64);
        if entries != Some(blocks) {
            return bad("table", format!("{} earlier and {} new entries for {blocks} published blocks", before.entries, self.table.len()));
        }
        let mut table = Vec::with_capacity(self.table.len());
        let mut stored = before.stored;
        for (k, Entry(crc, stored_len, codec)) in self.table.iter().copied().enumerate() {
            let b = before.entries + k as u64;
            // Whole blocks but the last, which ends at the published bytes.
            let raw_len = self.block_size.min(self.published - b * self.block_size);
            let Some(codec) = codec::Codec::from_wire(codec) else { return bad("table", format!("block {b}: unknown codec {codec}")) };
            let fits = match codec {
                codec::Codec::Raw => u64::from(stored_len) == raw_len,
                _ => stored_len > 0 && u64::from(stored_len) < raw_len,
            };
            if !fits {
                return bad("table", format!("block {b}: {stored_len} stored bytes cannot be a {raw_len}-byte block kept {codec}"));
            }
            stored += u64::from(stored_len);
            table.push(snapshot::Entry { crc, stored_len, codec });
        }
        if stored != self.stored {
            return bad("stored", format!("{} is not the {stored} bytes the table places", self.stored));
        }
        if self.log_end < self.offset {
            return bad("log_end", format!("{} is before the snapshot's offset {}", self.log_end, self.offset));
        }
        if self.error.as_ref().is_some_and(|e| e.len() > limits::ERROR_MESSAGE_BYTES_MAX) {
            return bad("error", format!("longer than {} bytes", limits::ERROR_MESSAGE_BYTES_MAX));
        }
        let Descriptor { generation, replid, offset, block_size, length, published, stored, rdb_version, log_end, state, error, .. } = self;
        Ok(snapshot::Descriptor { generation, replid, offset, block_size, length, published, stored, table, rdb_version, log_end, state, error })
    }
}

/// What earlier descriptors on a connection carried: table entries, and the stored bytes they place.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Before {
    /// Entries.
    pub entries: u64,
    /// Stored bytes (their lengths' sum).
    pub stored: u64,
    /// The RDB bytes the last descriptor published: a watermark never goes back.
    pub published: u64,
    /// The RDB's length, once a descriptor said it: it never changes after.
    pub length: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn good() -> Descriptor {
        Descriptor {
            generation: 1,
            replid: "8f".repeat(20),
            offset: 100,
            block_size: 1 << 20,
            length: Some((3 << 20) + 5),
            published: 2 << 20,
            stored: (1 << 20) + 1000,
            table: vec![Entry(1, 1 << 20, 0), Entry(2, 1000, 2)],
            rdb_version: Some(10),
            log_end: 100,
            state: snapshot::State::Capturing,
            error: None,
        }
    }

    fn at(entries: u64, stored: u64) -> Before {
        Before { entries, stored, ..Before::default() }
    }

    fn rejects(d: Descriptor, before: Before, field: &str) {
        match d.validate(before) {
            Err(Error::Protocol(m)) => assert!(m.contains(&format!("field {field}:")), "{m}"),
            other => panic!("expected a protocol error about {field}, got {other:?}"),
        }
    }

    #[test]
    fn a_sane_descriptor_passes_unchanged() {
        let d = good();
        let s = d.clone().validate(Before::default()).unwrap();
        assert_eq!((s.table[1].codec, s.table[1].stored_len, s.stored), (codec::Codec::Zstd, 1000, (1 << 20) + 1000));
        assert_eq!(Descriptor::from(s), d);
        // The last partial block once the length is known (raw: its own length); the table split
        // over two messages.
        let last = Descriptor { published: (3 << 20) + 5, stored: (1 << 20) + 1000 + 2000 + 5, table: vec![Entry(9, 2000, 1), Entry(9, 5, 0)], ..good() };
        assert_eq!(last.validate(at(2, (1 << 20) + 1000)).unwrap().published, (3 << 20) + 5);
        // Nothing yet, length unknown.
        assert!(Descriptor { length: None, published: 0, stored: 0, table: vec![], ..good() }.validate(Before::default()).is_ok());
    }

    #[test]
    fn block_size_zero_tiny_or_huge_is_refused() {
        for bs in [0, 1, BLOCK_MIN - 1, BLOCK_MAX + 1, u64::MAX] {
            rejects(Descriptor { block_size: bs, ..good() }, Before::default(), "block_size");
        }
    }

    #[test]
    fn lengths_beyond_bounds_or_published_beyond_length_are_refused() {
        let none = Before::default();
        rejects(Descriptor { length: Some(LENGTH_MAX + 1), ..good() }, none, "length");
        rejects(Descriptor { length: Some(1 << 20), ..good() }, none, "published");
        rejects(Descriptor { length: None, published: u64::MAX, ..good() }, none, "published");
        rejects(Descriptor { published: (1 << 20) + 1, ..good() }, none, "published");
    }

    #[test]
    fn the_table_must_cover_the_published_blocks() {
        let none = Before::default();
        rejects(Descriptor { table: vec![Entry(1, 1 << 20, 0)], ..good() }, none, "table");
        rejects(Descriptor { table: vec![Entry(1, 1 << 20, 0); 3], ..good() }, none, "table");
        rejects(good(), at(1, 0), "table");
        rejects(good(), at(u64::MAX, 0), "table");
    }

    #[test]
    fn a_lying_table_entry_is_refused() {
        let none = Before::default();
        let with = |second: Entry, stored: u64| Descriptor { table: vec![Entry(1, 1 << 20, 0), second], stored: (1 << 20) + stored, ..good() };
        // Raw, but not the block's length; compressed, but not shorter; empty; an unknown codec.
        for (e, stored) in [
            (Entry(2, 1000, 0), 1000),
            (Entry(2, (1 << 20) + 1, 0), (1 << 20) + 1),
            (Entry(2, 1 << 20, 2), 1 << 20),
            (Entry(2, (1 << 20) + 9, 1), (1 << 20) + 9),
            (Entry(2, 0, 2), 0),
            (Entry(2, 1000, 3), 1000),
        ] {
            rejects(with(e, stored), none, "table");
        }
        // Entries that do not add up to the watermark sent with them, alone or after earlier ones.
        rejects(with(Entry(2, 1000, 2), 999), none, "stored");
        rejects(good(), at(0, 1), "stored");
        let later = Descriptor { table: vec![Entry(2, 1000, 2)], stored: 2000, ..good() };
        assert!(later.clone().validate(at(1, 1000)).is_ok());
        rejects(later, at(1, 1001), "stored");
    }

    #[test]
    fn a_watermark_going_back_or_a_length_changing_is_refused() {
        let sent = Before { entries: 2, stored: (1 << 20) + 1000, published: 2 << 20, length: Some((3 << 20) + 5) };
        // The same watermark again (a descriptor with nothing new) passes; one that went back does not.
        assert!(Descriptor { table: vec![], ..good() }.validate(sent).is_ok());
        rejects(Descriptor { published: 1 << 20, table: vec![], stored: (1 << 20) + 1000, ..good() }, Before { entries: 1, ..sent }, "published");
        // A length once sent is final: neither dropped nor moved (a partial last block stays last).
        rejects(Descriptor { table: vec![], length: None, ..good() }, sent, "length");
        rejects(Descriptor { table: vec![], length: Some(4 << 20), ..good() }, sent, "length");
    }

    #[test]
    fn other_fields_are_bounded() {
        let none = Before::default();
        rejects(Descriptor { log_end: 99, ..good() }, none, "log_end");
        rejects(Descriptor { replid: "x".repeat(REPLID_MAX + 1), ..good() }, none, "replid");
        rejects(Descriptor { error: Some("e".repeat(limits::ERROR_MESSAGE_BYTES_MAX + 1)), ..good() }, none, "error");
        // What the relay sends is always within the bound: a long capture error is cut, not refused.
        let long = snapshot::Descriptor { error: Some("é".repeat(limits::ERROR_MESSAGE_BYTES_MAX)), ..good().validate(none).unwrap() };
        let sent = Descriptor::from(long);
        assert!(sent.error.as_ref().unwrap().len() <= limits::ERROR_MESSAGE_BYTES_MAX);
        assert!(sent.validate(none).is_ok());
    }
}
