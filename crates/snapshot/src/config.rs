//! A generation's tunables.

use codec::Codec;
use std::time::Duration;

/// Tunables of a generation.
#[derive(Debug, Clone, Copy)]
pub struct Config {
    /// Block size (bytes).
    pub block_size: u64,
    /// Largest RDB accepted (the memfd is sized to this, sparsely, when the length is not known).
    pub snapshot_bytes_max: u64,
    /// Largest stream log before the generation is sealed.
    pub log_bytes_max: u64,
    /// Oldest the log may grow before the generation is sealed.
    pub log_age_max: Duration,
    /// How blocks are kept: compressed with this codec where that pays ([`codec::Compressor`]),
    /// raw otherwise; [`Codec::Raw`] keeps every block as the source wrote it.
    pub codec: Codec,
    /// Threads compressing blocks while a capture runs (0: on the capture's own thread).
    pub pack_threads: usize,
}

/// Default compression threads: the relay's cores, at most [`limits::PACK_THREADS_DEFAULT_MAX`].
pub fn pack_threads_default() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get()).min(limits::PACK_THREADS_DEFAULT_MAX)
}

impl Default for Config {
    fn default() -> Self {
        Config {
            block_size: limits::BLOCK_BYTES_DEFAULT,
            snapshot_bytes_max: limits::SNAPSHOT_BYTES_DEFAULT,
            log_bytes_max: limits::LOG_BYTES_DEFAULT,
            log_age_max: limits::LOG_AGE_DEFAULT,
            codec: Codec::Zstd,
            pack_threads: pack_threads_default(),
        }
    }
}
