//! What can go wrong in the snapshot store.

/// Errors of the snapshot store.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Creating or sizing the memfd failed.
    #[error("create snapshot region: {0}")]
    Region(#[source] std::io::Error),
    /// Starting the block-packing threads failed, or one of them ended (it panicked).
    #[error("pack snapshot blocks: {0}")]
    Pack(#[source] std::io::Error),
    /// The RDB does not fit the configured bound.
    #[error("snapshot exceeds --snapshot-max-bytes ({max} bytes)")]
    TooLarge {
        /// The bound.
        max: u64,
    },
    /// Reading a range that is not published (yet).
    #[error("range {offset}+{len} is beyond the published {published} bytes of the region")]
    NotPublished {
        /// Requested start.
        offset: u64,
        /// Requested length.
        len: u64,
        /// Bytes published.
        published: u64,
    },
    /// A log read outside what the log holds.
    #[error("log offset {from} outside {first}..={end}")]
    LogRange {
        /// Requested offset.
        from: u64,
        /// First offset held.
        first: u64,
        /// One past the last complete command.
        end: u64,
    },
    /// Mapping a region failed.
    #[error("map the snapshot region: {0}")]
    Map(#[from] crate::region::MapError),
    /// A file of the store could not be created, written or read.
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    /// The capture of this generation failed.
    #[error("snapshot generation {generation} failed: {reason}")]
    Failed {
        /// Which generation.
        generation: u64,
        /// Why.
        reason: String,
    },
}

impl Error {
    /// A store's file was truncated or removed under the relay (its generation is no longer whole,
    /// whichever operation found it), as opposed to a capture that could not write (a full disk).
    pub fn is_store_gone(&self) -> bool {
        matches!(self, Error::Store(crate::store::StoreError::Gone { .. }))
    }
}
