//! What to pull and how ([`Pull`]), as the join, `stage`, `fetch` and the lab's probe give it: the
//! transport, the generation's progress, the readers and window, the swarm if any. Apart because
//! every thread of the pull reads it, and none of them is where it is made.

use crate::peers::peering::Peering;
use crate::pull::progress::Progress;
use crate::report::SourceCounters;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use transport::Transport;

/// What to pull and how.
pub struct Pull<'a> {
    /// The transport to the relay.
    pub transport: &'a dyn Transport,
    /// The generation, as the relay describes it.
    pub progress: &'a Arc<Progress>,
    /// Relay readers.
    pub readers: usize,
    /// Blocks fetched ahead of the one the sink needs next, at most.
    pub window: u64,
    /// Set from outside to stop.
    pub cancel: &'a AtomicBool,
    /// The swarm, when the agent is in one; `None`: every block from the relay.
    pub peering: Option<&'a Peering>,
    /// Live counters for a display.
    pub counters: Option<&'a SourceCounters>,
}
