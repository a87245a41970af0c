//! One snapshot **generation**: the RDB bytes of one `PSYNC ? -1` in a memfd (or a [`Store`]'s file), cut into fixed-size
//! blocks, each checksummed (CRC32C) as it fills and published behind a watermark, so readers can
//! pull finished blocks while the master is still producing the rest; and the **stream log**, the
//! master's command stream after the RDB, indexed by replication offset.
//!
//! With a store (`--store DIR`) both live in files, written once with `pwrite` from one block's
//! buffer and read back through the page cache, so the relay's own memory stays bounded by what is
//! in flight, not by the snapshot.
//!
//! The memfd lets every transport serve the same bytes without a copy of its own: `sendfile` for TCP,
//! a read-only mapping for shared memory, a registration for RDMA. Only the single [`Writer`] maps it
//! writable; readers only ever see bytes below the watermark, which never change once published.
#![deny(missing_docs)]

mod appended;
mod checksum;
mod config;
mod descriptor;
mod error;
mod generation;
mod log;
mod packer;
mod region;
mod state;
mod store;
mod table;

pub use appended::Appended;
pub use checksum::block_checksum;
pub use codec::Codec;
pub use config::{pack_threads_default, Config};
pub use descriptor::Descriptor;
pub use error::Error;
pub use generation::{Generation, Writer};
pub use log::StreamLog;
pub use packer::ZSTD_LEVEL;
pub use region::{is_sealed, map_region_read_only, map_sealed_read_only, MapError, Region};
pub use state::State;
pub use store::{Cleaned, Gone, Store, StoreError};
pub use table::{Entry, Table};
