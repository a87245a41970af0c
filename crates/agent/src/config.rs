//! The join's configuration, as the binary builds it from flags and the environment.

use crate::join::retry;
use crate::peers::member as peer;
use crate::report::Live;
use crate::staged::cluster_node as staged;
use replication::replica::Auth;
use std::net::SocketAddr;
use std::time::Duration;
use transport::Credentials;

/// The join's configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// The relay's address.
    pub relay: SocketAddr,
    /// Shared secret for the relay, and TLS to it when it requires it.
    pub token: Credentials,
    /// The local server, `host:port`.
    pub replica: String,
    /// Its credentials.
    pub replica_auth: Option<Auth>,
    /// The master as the replica must reach it (default: as the relay reaches it).
    pub master: Option<String>,
    /// TLS to the master and the sentinels, and served to a replica with `tls-replication yes`.
    pub tls: Option<client::tls::Tls>,
    /// Speak TLS (with `tls`) to the local server too (`--replica-tls`: a TLS-only local server).
    pub replica_tls: bool,
    /// Find the master through these sentinels, at the start and again at the handoff.
    pub sentinel: Option<client::sentinel::Sentinels>,
    /// The master's credentials (for the backlog check and the replica's `masterauth`).
    pub master_auth: Option<Auth>,
    /// Replace a non-empty replica's data.
    pub force: bool,
    /// Where the agent listens for its replica (loopback, port 0 by default).
    pub listen: SocketAddr,
    /// Reads in flight.
    pub readers: usize,
    /// Blocks buffered ahead of the replica at most.
    pub window_blocks: u64,
    /// How long to wait for the replica to load the snapshot.
    pub load_timeout: Duration,
    /// How long to wait for the replica to be in sync with the master after the handoff.
    pub handoff_timeout: Duration,
    /// Live progress for a display: RDB bytes sent to the replica so far, and the phase.
    pub live: std::sync::Arc<Live>,
    /// Set from outside (a signal) to abandon the join; before the handoff the replica is reset.
    pub cancel: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// The transport for the snapshot (`--transport`); `None` for `auto`.
    pub transport: Option<transport::TransportKind>,
    /// How this agent takes part in its generation's swarm.
    pub peers: peer::PeerConfig,
    /// How often and how patiently a failed join is tried again.
    pub retry: retry::Policy,
    /// How a cluster node is restarted by a staged join.
    pub restart: staged::Restart,
}

impl Config {
    /// TLS for the agent's own connections to its local server, when asked for.
    pub fn replica_tls(&self) -> Option<&client::tls::Tls> {
        self.tls.as_ref().filter(|_| self.replica_tls)
    }
}
