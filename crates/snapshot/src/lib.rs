//! One snapshot **generation**: the RDB bytes of one `PSYNC ? -1` in a memfd, cut into fixed-size
//! blocks, each checksummed (CRC32C) as it fills and published behind a watermark, so readers can
//! pull finished blocks while the master is still producing the rest; and the **stream log**, the
//! master's command stream after the RDB, indexed by replication offset.
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
mod region;
mod state;

pub use appended::Appended;
pub use checksum::block_checksum;
pub use config::Config;
pub use descriptor::Descriptor;
pub use error::Error;
pub use generation::{Generation, Writer};
pub use log::StreamLog;
pub use region::{map_sealed_read_only, MapError, Region};
pub use state::State;
