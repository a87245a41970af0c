//! A generation's tunables.

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
}

impl Default for Config {
    fn default() -> Self {
        Config {
            block_size: limits::BLOCK_BYTES_DEFAULT,
            snapshot_bytes_max: limits::SNAPSHOT_BYTES_DEFAULT,
            log_bytes_max: limits::LOG_BYTES_DEFAULT,
            log_age_max: limits::LOG_AGE_DEFAULT,
        }
    }
}
