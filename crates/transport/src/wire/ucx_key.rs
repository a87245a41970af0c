//! What a relay answers to a ucx attach: its worker's address and one segment's remote key.

use super::cursor::Cursor;
use crate::Error;

/// UCX registrations cover the region in segments of this size, so a relay never registers (on verbs:
/// pins) the sparse, mostly unwritten capacity of an EOF-framed snapshot all at once.
pub const UCX_SEGMENT: u64 = limits::UCX_SEGMENT_BYTES;
/// Bound on a UCX worker address or packed remote key from the relay.
pub const UCX_BLOB_MAX: usize = limits::UCX_BLOB_BYTES_MAX;

/// What a relay answers to a ucx attach: how to reach its worker and read one segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UcxKey {
    /// The relay worker's address.
    pub worker: Vec<u8>,
    /// Remote address of the segment's first byte.
    pub base: u64,
    /// Bytes registered.
    pub len: u64,
    /// The packed remote key.
    pub rkey: Vec<u8>,
}

impl UcxKey {
    /// Serialize: `u32 len, worker, u64 base, u64 len, u32 len, rkey` (big-endian).
    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(24 + self.worker.len() + self.rkey.len());
        v.extend_from_slice(&(self.worker.len() as u32).to_be_bytes());
        v.extend_from_slice(&self.worker);
        v.extend_from_slice(&self.base.to_be_bytes());
        v.extend_from_slice(&self.len.to_be_bytes());
        v.extend_from_slice(&(self.rkey.len() as u32).to_be_bytes());
        v.extend_from_slice(&self.rkey);
        v
    }
    /// Parse, bounding every length.
    pub fn decode(b: &[u8]) -> Result<UcxKey, Error> {
        let mut c = Cursor::new(b, "ucx attach answer");
        let wl = c.u32()? as usize;
        if wl == 0 || wl > UCX_BLOB_MAX {
            return Err(c.bad("worker address length out of bounds"));
        }
        let worker = c.take(wl)?.to_vec();
        let base = c.u64()?;
        let len = c.u64()?;
        let kl = c.u32()? as usize;
        if kl == 0 || kl > UCX_BLOB_MAX {
            return Err(c.bad("rkey length out of bounds"));
        }
        let rkey = c.take(kl)?.to_vec();
        c.end()?;
        if len == 0 || len > UCX_SEGMENT || base.checked_add(len).is_none() {
            return Err(c.bad("segment bounds"));
        }
        Ok(UcxKey { worker, base, len, rkey })
    }
}
