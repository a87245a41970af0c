//! The join's configuration, as the binary builds it from flags and the environment, and the small
//! configurations its steps take from it: the pull's settings, the swarm's, the retries', a staged
//! node's restart. A root of the crate: it names nothing of the rooms (join, pull, peers, staged)
//! that read it.

use crate::master::MasterAccess;
use crate::node::Node;
use crate::report::Live;
use endpoint::Endpoint;
use replication::replica::Auth;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;
use transport::Credentials;

/// The join's configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// The relay, as given (a host name is resolved at each connection attempt).
    pub relay: Endpoint,
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
    /// How the snapshot is pulled (`--transport`, `--readers`, `--window-blocks`).
    pub pull: PullConfig,
    /// How long to wait for the replica to load the snapshot.
    pub load_timeout: Duration,
    /// How long to wait for the replica to be in sync with the master after the handoff.
    pub handoff_timeout: Duration,
    /// Live progress for a display: RDB bytes sent to the replica so far, and the phase.
    pub live: std::sync::Arc<Live>,
    /// Set from outside (a signal) to abandon the join; before the handoff the replica is reset.
    pub cancel: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// How this agent takes part in its generation's swarm.
    pub peers: PeerConfig,
    /// How often and how patiently a failed join is tried again.
    pub retry: RetryPolicy,
    /// How a cluster node is restarted by a staged join.
    pub restart: Restart,
}

impl Config {
    /// TLS for the agent's own connections to its local server, when asked for.
    pub fn replica_tls(&self) -> Option<&client::tls::Tls> {
        self.tls.as_ref().filter(|_| self.replica_tls)
    }

    /// The local server as the join's steps reach it: made once, handed down.
    pub fn node(&self) -> Node {
        Node { addr: self.replica.clone(), auth: self.replica_auth.clone(), tls: self.replica_tls().cloned(), cancel: self.cancel.clone() }
    }

    /// How the master is reached.
    pub fn master(&self) -> MasterAccess<'_> {
        MasterAccess { given: self.master.as_deref(), sentinel: self.sentinel.as_ref(), auth: self.master_auth.as_ref(), tls: self.tls.as_ref() }
    }
}

/// How a snapshot is pulled from the relay (`join`, `stage` and `fetch` take the same flags).
#[derive(Debug, Clone, Default)]
pub struct PullConfig {
    /// The transport (`--transport`); `None` for `auto`.
    pub transport: Option<transport::TransportKind>,
    /// Reads in flight (0: the transport's default).
    pub readers: usize,
    /// Blocks buffered ahead of the consumer at most; `None`: the default for how it pulls
    /// ([`limits::WINDOW_BLOCKS_SERVING_DEFAULT`] for a member of a swarm that serves,
    /// [`limits::WINDOW_BLOCKS_SWARM_DEFAULT`] for one that only reads,
    /// [`limits::WINDOW_BLOCKS_DEFAULT`] for a pull from the relay alone).
    pub window_blocks: Option<u64>,
}

/// How an agent takes part in the swarm (`join`'s `--no-serve`, `--peer-listen`, `--advertise`,
/// `--serve-cache-mib`).
#[derive(Debug, Clone)]
pub struct PeerConfig {
    /// Serve held blocks to other agents.
    pub serve: bool,
    /// Where to listen for peers (default: the address this agent reaches the relay from, any port).
    pub listen: Option<SocketAddr>,
    /// The address to give peers, when they cannot reach the listen address (NAT).
    pub advertise: Option<String>,
    /// Bytes of blocks already fed to the replica kept for peers.
    pub cache_bytes: u64,
    /// Longest an agent keeps serving after its own handoff while others still pull.
    pub linger: Duration,
}

impl Default for PeerConfig {
    fn default() -> Self {
        PeerConfig { serve: true, listen: None, advertise: None, cache_bytes: limits::SERVE_CACHE_BYTES_DEFAULT, linger: limits::SERVE_LINGER_DEFAULT }
    }
}

/// How many times, and how patiently, a failed join is tried again (`--retries`, `--retry-*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts after the first (0: never retry).
    pub retries: u32,
    /// The first wait (before jitter).
    pub base: Duration,
    /// The longest wait.
    pub max: Duration,
}

impl Default for RetryPolicy {
    fn default() -> RetryPolicy {
        RetryPolicy { retries: limits::JOIN_RETRIES_DEFAULT, base: limits::JOIN_RETRY_BASE, max: limits::JOIN_RETRY_MAX }
    }
}

/// How a staged join restarts a cluster node (`--restart-command`, `--restart-timeout-secs`,
/// `--replica-dir`).
#[derive(Debug, Clone, Default)]
pub struct Restart {
    /// A shell command that starts the node (`sh -c`); `None`: its supervisor does.
    pub command: Option<String>,
    /// How long the node may take to answer again.
    pub timeout: Duration,
    /// The node's data directory as this agent sees it (`None`: the node's `dir`).
    pub dir: Option<PathBuf>,
}
