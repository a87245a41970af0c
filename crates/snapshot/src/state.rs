//! Where a generation is in its life, as the relay records it and agents see it.

use serde::{Deserialize, Serialize};

/// The state of a generation, as agents see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum State {
    /// The RDB is still arriving.
    Capturing,
    /// The RDB is complete; the log may still grow.
    Complete,
    /// The log stopped growing (a bound, the source's link lost, a failover, an idle release, a
    /// renewal); the snapshot stays readable.
    Sealed,
    /// The capture failed; nothing here may be used.
    Failed,
}
