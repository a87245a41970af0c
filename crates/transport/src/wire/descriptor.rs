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

/// A generation's state on the wire: one control message. Field names and JSON are those of
/// [`snapshot::Descriptor`], so relays and agents of neighbouring versions understand each other.
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
    /// RDB bytes readable now.
    pub published: u64,
    /// CRC32C of each block published since the previous descriptor on this connection.
    pub checksums: Vec<u32>,
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
        let snapshot::Descriptor { generation, replid, offset, block_size, length, published, checksums, rdb_version, log_end, state, mut error } = d;
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
        Descriptor { generation, replid, offset, block_size, length, published, checksums, rdb_version, log_end, state, error }
    }
}

impl Descriptor {
    /// Check what a relay sent and turn it into the in-memory descriptor. `checksums_before` is how
    /// many block checksums earlier descriptors on this connection carried: together with these they
    /// must cover exactly the published bytes. Every rejection is an [`Error::Protocol`] naming the
    /// field.
    pub fn validate(self, checksums_before: u64) -> Result<snapshot::Descriptor, Error> {
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
        if self.published > LENGTH_MAX {
            return bad("published", format!("{} exceeds {LENGTH_MAX}", self.published));
        }
        // Published bytes are whole blocks, and the last partial block only at the end.
        let whole_blocks = self.published / self.block_size * self.block_size == self.published;
        if !whole_blocks && Some(self.published) != self.length {
            return bad("published", format!("{} is not a whole number of {}-byte blocks", self.published, self.block_size));
        }
        let blocks = self.published.div_ceil(self.block_size);
        let sums = checksums_before.checked_add(self.checksums.len() as u64);
        if sums != Some(blocks) {
            return bad("checksums", format!("{checksums_before} earlier and {} new for {blocks} published blocks", self.checksums.len()));
        }
        if self.log_end < self.offset {
            return bad("log_end", format!("{} is before the snapshot's offset {}", self.log_end, self.offset));
        }
        if self.error.as_ref().is_some_and(|e| e.len() > limits::ERROR_MESSAGE_BYTES_MAX) {
            return bad("error", format!("longer than {} bytes", limits::ERROR_MESSAGE_BYTES_MAX));
        }
        let Descriptor { generation, replid, offset, block_size, length, published, checksums, rdb_version, log_end, state, error } = self;
        Ok(snapshot::Descriptor { generation, replid, offset, block_size, length, published, checksums, rdb_version, log_end, state, error })
    }
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
            checksums: vec![1, 2],
            rdb_version: Some(10),
            log_end: 100,
            state: snapshot::State::Capturing,
            error: None,
        }
    }

    fn rejects(d: Descriptor, before: u64, field: &str) {
        match d.validate(before) {
            Err(Error::Protocol(m)) => assert!(m.contains(&format!("field {field}:")), "{m}"),
            other => panic!("expected a protocol error about {field}, got {other:?}"),
        }
    }

    #[test]
    fn a_sane_descriptor_passes_unchanged() {
        let d = good();
        let s = d.clone().validate(0).unwrap();
        assert_eq!(Descriptor::from(s), d);
        // The last partial block once the length is known; checksums split over two messages.
        let last = Descriptor { published: (3 << 20) + 5, checksums: vec![9, 9], ..good() };
        assert_eq!(last.validate(2).unwrap().published, (3 << 20) + 5);
        // Nothing yet, length unknown.
        assert!(Descriptor { length: None, published: 0, checksums: vec![], ..good() }.validate(0).is_ok());
    }

    #[test]
    fn block_size_zero_tiny_or_huge_is_refused() {
        for bs in [0, 1, BLOCK_MIN - 1, BLOCK_MAX + 1, u64::MAX] {
            rejects(Descriptor { block_size: bs, ..good() }, 0, "block_size");
        }
    }

    #[test]
    fn lengths_beyond_bounds_or_published_beyond_length_are_refused() {
        rejects(Descriptor { length: Some(LENGTH_MAX + 1), ..good() }, 0, "length");
        rejects(Descriptor { length: Some(1 << 20), ..good() }, 0, "published");
        rejects(Descriptor { length: None, published: u64::MAX, ..good() }, 0, "published");
        rejects(Descriptor { published: (1 << 20) + 1, ..good() }, 0, "published");
    }

    #[test]
    fn checksum_count_must_match_the_published_blocks() {
        rejects(Descriptor { checksums: vec![1], ..good() }, 0, "checksums");
        rejects(Descriptor { checksums: vec![1, 2, 3], ..good() }, 0, "checksums");
        rejects(good(), 1, "checksums");
        rejects(good(), u64::MAX, "checksums");
    }

    #[test]
    fn other_fields_are_bounded() {
        rejects(Descriptor { log_end: 99, ..good() }, 0, "log_end");
        rejects(Descriptor { replid: "x".repeat(REPLID_MAX + 1), ..good() }, 0, "replid");
        rejects(Descriptor { error: Some("e".repeat(limits::ERROR_MESSAGE_BYTES_MAX + 1)), ..good() }, 0, "error");
        // What the relay sends is always within the bound: a long capture error is cut, not refused.
        let long = snapshot::Descriptor { error: Some("é".repeat(limits::ERROR_MESSAGE_BYTES_MAX)), ..good().validate(0).unwrap() };
        let sent = Descriptor::from(long);
        assert!(sent.error.as_ref().unwrap().len() <= limits::ERROR_MESSAGE_BYTES_MAX);
        assert!(sent.validate(0).is_ok());
    }
}
