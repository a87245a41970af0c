//! A join's phase: one type for the live state a display polls, the `phase` metric, the log's
//! `phase: <name>` lines and the event stream, so no place keeps a list of names of its own.

use serde::{Deserialize, Serialize};

/// A join's phase, ordered as a join goes through them (a staged join's order: pulling, recording,
/// restarting, loading, linking, done).
///
/// Its name people read (the log's `phase: <name>` line, the progress display, the metric's `phase`
/// label) is the derive's, one per variant; serde's is snake case (reports, events).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, strum::VariantArray, strum::IntoStaticStr, strum::Display)]
#[serde(rename_all = "snake_case")]
pub enum JoinPhase {
    /// Attached, the relay is still taking its snapshot: nothing is known of its size yet.
    #[strum(serialize = "waiting for capture")]
    WaitingForCapture,
    /// Preparing the replica, waiting for the snapshot's length.
    #[strum(serialize = "preparing")]
    Preparing,
    /// Blocks stream to the replica (or, staged, into the node's RDB file).
    #[strum(serialize = "pulling")]
    Pulling,
    /// Every block sent; the replica loads.
    #[strum(serialize = "loading")]
    Loading,
    /// The relay's log streams to the replica.
    #[strum(serialize = "streaming log")]
    StreamingLog,
    /// Checking the master, `REPLICAOF`, reading the outcome.
    #[strum(serialize = "handing off")]
    HandingOff,
    /// A staged join (a cluster node), after `pulling`: recording the node as the master's replica,
    /// placing the snapshot as its RDB file, its shutdown.
    #[strum(serialize = "recording")]
    Recording,
    /// A staged join: the node is down until its supervisor (or `--restart-command`) starts it.
    #[strum(serialize = "restarting")]
    Restarting,
    /// A staged join: the restarted, loaded node links to its master.
    #[strum(serialize = "linking")]
    Linking,
    /// Over (handed off, or failed).
    #[strum(serialize = "done")]
    Done,
    /// An attempt failed with an error time can mend; the next one waits its backoff.
    #[strum(serialize = "waiting to retry")]
    WaitingToRetry,
}

impl JoinPhase {
    /// Every phase, in order.
    pub const ALL: &'static [JoinPhase] = <JoinPhase as strum::VariantArray>::VARIANTS;

    /// The name people read: the log's `phase: <name>` line, the progress display and the `phase`
    /// label of the metric.
    pub fn name(self) -> &'static str {
        self.into()
    }
}

#[cfg(test)]
mod tests {
    use super::JoinPhase;

    #[test]
    fn all_lists_each_phase_once_in_order() {
        assert!(JoinPhase::ALL.windows(2).all(|w| w[0] < w[1]));
        let mut names: Vec<&str> = JoinPhase::ALL.iter().map(|p| p.name()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), JoinPhase::ALL.len());
        // The names are an interface (the metric's label, the log): these, whatever the derive does.
        assert_eq!(JoinPhase::WaitingForCapture.to_string(), "waiting for capture");
        assert_eq!(JoinPhase::StreamingLog.name(), "streaming log");
    }
}
