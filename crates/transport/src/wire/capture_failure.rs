//! Why a relay's capture failed, as a waiting agent is told: the kind decides whether the agent
//! retries (only what time can mend) or stops and names what an operator must fix.

use serde::{Deserialize, Serialize};

/// Why a relay's capture failed, as the agent decides on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CaptureFailure {
    /// The relay's configuration: its `--source` is not a replica of the master or follows another
    /// master, or `--master` is not a master. Only an operator mends it.
    Source,
    /// The master or the source refused the relay's credentials or a command (`NOPERM`, `WRONGPASS`).
    Permission,
    /// The master or the source is unreachable, or the link to it broke.
    Unreachable,
    /// The snapshot is larger than the relay's `--snapshot-max-bytes`.
    TooLarge,
    /// Anything else (the relay's log says more).
    Other,
}

/// The name `--json` and the logs use: the serde name (`too_large`).
impl std::fmt::Display for CaptureFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            CaptureFailure::Source => "source",
            CaptureFailure::Permission => "permission",
            CaptureFailure::Unreachable => "unreachable",
            CaptureFailure::TooLarge => "too_large",
            CaptureFailure::Other => "other",
        })
    }
}

impl CaptureFailure {
    /// Can a later capture succeed without an operator (the master back, a link restored)?
    pub fn transient(self) -> bool {
        matches!(self, CaptureFailure::Unreachable | CaptureFailure::Other)
    }
}

#[cfg(test)]
mod tests {
    use super::CaptureFailure as F;

    #[test]
    fn the_logged_name_is_the_json_name() {
        for k in [F::Source, F::Permission, F::Unreachable, F::TooLarge, F::Other] {
            assert_eq!(serde_json::to_value(k).unwrap(), k.to_string());
        }
    }
}
