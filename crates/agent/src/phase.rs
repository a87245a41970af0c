//! A join's phase: one type for the live state a display polls, the `phase` metric, the log's
//! `phase: <name>` lines and the event stream, so no place keeps a list of names of its own.

use serde::{Deserialize, Serialize};

/// A join's phase, ordered as a join goes through them (a staged join's order: pulling, recording,
/// restarting, loading, linking, done).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JoinPhase {
    /// Attached, the relay is still taking its snapshot: nothing is known of its size yet.
    WaitingForCapture,
    /// Preparing the replica, waiting for the snapshot's length.
    Preparing,
    /// Blocks stream to the replica (or, staged, into the node's RDB file).
    Pulling,
    /// Every block sent; the replica loads.
    Loading,
    /// The relay's log streams to the replica.
    StreamingLog,
    /// Checking the master, `REPLICAOF`, reading the outcome.
    HandingOff,
    /// A staged join (a cluster node), after `pulling`: recording the node as the master's replica,
    /// placing the snapshot as its RDB file, its shutdown.
    Recording,
    /// A staged join: the node is down until its supervisor (or `--restart-command`) starts it.
    Restarting,
    /// A staged join: the restarted, loaded node links to its master.
    Linking,
    /// Over (handed off, or failed).
    Done,
    /// An attempt failed with an error time can mend; the next one waits its backoff.
    WaitingToRetry,
}

impl JoinPhase {
    /// Every phase, in order.
    pub const ALL: [JoinPhase; 11] = [
        JoinPhase::WaitingForCapture,
        JoinPhase::Preparing,
        JoinPhase::Pulling,
        JoinPhase::Loading,
        JoinPhase::StreamingLog,
        JoinPhase::HandingOff,
        JoinPhase::Recording,
        JoinPhase::Restarting,
        JoinPhase::Linking,
        JoinPhase::Done,
        JoinPhase::WaitingToRetry,
    ];

    /// The name people read: the log's `phase: <name>` line, the progress display and the `phase`
    /// label of the metric.
    pub fn name(self) -> &'static str {
        match self {
            JoinPhase::WaitingForCapture => "waiting for capture",
            JoinPhase::Preparing => "preparing",
            JoinPhase::Pulling => "pulling",
            JoinPhase::Loading => "loading",
            JoinPhase::StreamingLog => "streaming log",
            JoinPhase::HandingOff => "handing off",
            JoinPhase::Recording => "recording",
            JoinPhase::Restarting => "restarting",
            JoinPhase::Linking => "linking",
            JoinPhase::Done => "done",
            JoinPhase::WaitingToRetry => "waiting to retry",
        }
    }
}

impl std::fmt::Display for JoinPhase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
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
    }
}
