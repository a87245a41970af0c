//! The checksum of a block.

/// Checksum of a block as agents must compute it.
pub fn block_checksum(bytes: &[u8]) -> u32 {
    crc32c::crc32c(bytes)
}
