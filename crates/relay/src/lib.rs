//! The relay: runs beside the master, poses as one of its replicas, holds one point-in-time snapshot
//! in memory plus the stream after it, and serves any number of agents from it.
//!
//! - [`capture`]: the replica side towards the master (handshake, `PSYNC ? -1`, RDB into the
//!   generation's region, stream log, ACKs).
//! - [`serve`]: the agents' side (authenticated control and data connections).
//!
//! Generations: the first is captured when the relay starts. When its log reaches a bound (bytes or
//! age) or the master link drops, it is sealed: agents already on it finish from it; the next agent
//! that arrives triggers a new capture (the master forks only when someone needs a fresh snapshot).
//! A sealed generation's memory is freed when its last agent disconnects.
#![deny(missing_docs)]

pub mod capture;
mod file;
pub mod serve;
pub mod source;
pub mod stats;
mod tracker;
#[cfg(feature = "ucx")]
mod ucx_serve;


use replication::replica::Auth;
use snapshot::{Generation, State};
use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::Duration;
use transport::Token;

/// Errors that stop the relay.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Binding the agents' port failed.
    #[error("listen on {addr}: {source}")]
    Listen {
        /// Where.
        addr: SocketAddr,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// The configuration is unsafe or inconsistent.
    #[error("{0}")]
    Config(String),
    /// An agent asked for a transport this relay does not offer.
    #[error("this relay does not offer {0}")]
    NotOffered(&'static str),
    /// The UCX side failed.
    #[cfg(feature = "ucx")]
    #[error("ucx: {0}")]
    Ucx(#[source] ucx_serve::UcxServeError),
}

/// The relay's configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// The master, `host:port` (with `sentinel`: found through the sentinels, this is ignored when
    /// empty).
    pub master: String,
    /// Find the master through these sentinels and follow its failovers.
    pub sentinel: Option<client::sentinel::Sentinels>,
    /// Credentials for the master.
    pub master_auth: Option<Auth>,
    /// TLS to the master, its replicas and the sentinels.
    pub tls: Option<client::tls::Tls>,
    /// Where agents connect.
    pub listen: SocketAddr,
    /// The agents' shared secret.
    pub token: Token,
    /// More tokens accepted besides `token` (a rotation in progress); replaced by [`Relay::set_tokens`].
    pub extra_tokens: Vec<Token>,
    /// Port announced to the master with `REPLCONF listening-port` (default: the listen port).
    pub announce_port: Option<u16>,
    /// Snapshot tunables.
    pub snapshot: snapshot::Config,
    /// Most agent connections served at once.
    pub connections_max: usize,
    /// Which transports to offer besides the TCP control connection.
    pub offer: Offer,
    /// Serve this file as the snapshot instead of capturing from a master (`master` is then only a
    /// label).
    pub file: Option<std::path::PathBuf>,
    /// Agents must connect over TLS, to this server configuration (`--agents-tls-cert/-key`).
    pub agents_tls: Option<Arc<rustls::ServerConfig>>,
    /// Where snapshots are captured from (the master, one of its replicas, or one chosen).
    pub source: source::Source,
    /// Switch RDB compression and checksums off on a replica source during its captures.
    pub source_rdb_raw: bool,
    /// When the first generation is captured.
    pub capture: CapturePolicy,
    /// Release the current generation's memory after this long without any agent connection.
    pub idle_release: Option<Duration>,
}

/// When the relay takes its first snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CapturePolicy {
    /// When the relay starts, so the first agent finds it ready (the master forks even if nobody
    /// comes).
    #[default]
    OnStart,
    /// When the first agent asks (nothing is forked or held until someone needs it).
    OnDemand,
}

impl std::str::FromStr for CapturePolicy {
    type Err = String;
    fn from_str(s: &str) -> Result<CapturePolicy, String> {
        match s {
            "on-start" => Ok(CapturePolicy::OnStart),
            "on-demand" => Ok(CapturePolicy::OnDemand),
            s => Err(format!("--capture {s:?}: expected on-start or on-demand")),
        }
    }
}

impl std::fmt::Display for CapturePolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            CapturePolicy::OnStart => "on-start",
            CapturePolicy::OnDemand => "on-demand",
        })
    }
}

/// Transports a relay offers. Control connections and log reads always use TCP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Offer {
    /// Range reads over TCP.
    pub tcp: bool,
    /// The memfd over a unix socket, for agents on this host.
    pub shm: bool,
    /// UCX RMA (RDMA READ where there is a device).
    pub ucx: bool,
}

impl Offer {
    /// Everything that works here (`--transport auto`).
    pub const ALL: Offer = Offer { tcp: true, shm: true, ucx: true };
}

impl From<transport::Choice> for Offer {
    /// `--transport` on the relay: `auto` offers everything that works here, a name only that.
    fn from(c: transport::Choice) -> Offer {
        match c {
            transport::Choice::Auto => Offer::ALL,
            transport::Choice::Tcp => Offer { tcp: true, shm: false, ucx: false },
            transport::Choice::Shm => Offer { tcp: false, shm: true, ucx: false },
            transport::Choice::Ucx => Offer { tcp: false, shm: false, ucx: true },
        }
    }
}

impl Config {
    /// Refuse configurations that would expose the dataset.
    pub fn validate(&self) -> Result<(), Error> {
        if self.token.is_empty() && !self.listen.ip().is_loopback() {
            return Err(Error::Config(format!(
                "refusing to listen on {} without a token: the snapshot is the whole dataset. Set FASTREPL_TOKEN or --token-file",
                self.listen
            )));
        }
        if self.source_rdb_raw && self.source == source::Source::Master {
            return Err(Error::Config("--source-rdb-raw changes the source's configuration, which is only done to a replica: use it with --source REPLICA or --source auto".into()));
        }
        if self.snapshot.block_size < limits::BLOCK_BYTES_MIN || self.snapshot.block_size > transport::wire::READ_MAX as u64 {
            return Err(Error::Config(format!("block size must be between {} and {} bytes", limits::BLOCK_BYTES_MIN, transport::wire::READ_MAX)));
        }
        Ok(())
    }
}

/// State shared by the capture loop and every connection.
pub(crate) struct Shared {
    config: Config,
    /// Tokens accepted now (the configured ones, or those a reload set).
    tokens: std::sync::RwLock<Vec<Token>>,
    /// The master now (changes when Sentinel fails over).
    master: Mutex<String>,
    /// How many times the master changed: what the capture loop compares on every read, instead of
    /// locking and copying the address.
    master_changes: std::sync::atomic::AtomicU64,
    current: Mutex<Option<Arc<Generation>>>,
    changed: Condvar,
    /// Every generation an agent may still hold.
    all: Mutex<Vec<Weak<Generation>>>,
    /// An agent wants a fresh generation (the current one is sealed or failed).
    demand: AtomicBool,
    stop: AtomicBool,
    connections: std::sync::atomic::AtomicUsize,
    /// The abstract unix socket of the shm transport, when offered.
    shm_socket: Option<String>,
    /// Each generation's swarm of agents (who holds which block).
    swarms: tracker::Swarms,
    /// Captures that failed so far, and the last one's error (agents waiting for a snapshot are told).
    capture_failed: Mutex<(u64, String, transport::wire::CaptureFailure)>,
    /// Counters for status and metrics.
    stats: stats::Stats,
    /// When the last agent connection ended or began (for `--idle-release-secs`).
    last_active: Mutex<std::time::Instant>,
    /// The UCX side, when offered and UCX initialised.
    #[cfg(feature = "ucx")]
    ucx: Option<ucx_serve::UcxServer>,
}

impl Shared {
    fn lock_current(&self) -> std::sync::MutexGuard<'_, Option<Arc<Generation>>> {
        self.current.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn publish(&self, gen: Arc<Generation>) {
        let mut all = self.all.lock().unwrap_or_else(|p| p.into_inner());
        all.retain(|w| w.strong_count() > 0);
        all.push(Arc::downgrade(&gen));
        drop(all);
        *self.lock_current() = Some(gen);
        // Agents that waited for this capture asked for one; the demand is met. Left set, it would
        // start another capture (another fork on the source) as soon as this one ends.
        self.demand.store(false, Ordering::SeqCst);
        self.changed.notify_all();
    }

    /// How many captures failed so far, and why the last one did.
    fn capture_failures(&self) -> (u64, String, transport::wire::CaptureFailure) {
        self.capture_failed.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The master agents are handed to now.
    fn master(&self) -> String {
        self.master.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Sentinel named a new master: later captures read from it (or its replicas), and the current
    /// generation is sealed by the capture thread (its history is the old master's; agents already on
    /// it finish from it, and the new master knows it as its replid2).
    fn set_master(&self, new: &str) {
        let old = std::mem::replace(&mut *self.master.lock().unwrap_or_else(|p| p.into_inner()), new.to_string());
        self.master_changes.fetch_add(1, Ordering::SeqCst);
        tracing::warn!(%old, %new, "Sentinel switched the master; the current generation is sealed, the next agent triggers a capture from the new master");
        if let Some(g) = self.lock_current().as_ref() {
            g.seal(&format!("the master changed from {old} to {new} (Sentinel)"));
        }
        self.changed.notify_all();
    }

    /// The tokens accepted now.
    fn tokens(&self) -> Vec<Token> {
        self.tokens.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Every generation still held (the current one and sealed ones agents still read).
    fn held(&self) -> Vec<Arc<Generation>> {
        let all = self.all.lock().unwrap_or_else(|p| p.into_inner());
        all.iter().filter_map(Weak::upgrade).collect()
    }

    /// An agent connection began or ended.
    fn touch(&self) {
        *self.last_active.lock().unwrap_or_else(|p| p.into_inner()) = std::time::Instant::now();
    }

    /// `--idle-release-secs`: when no agent has been connected for that long, seal the current
    /// generation and stop holding it, so its memory is freed (once any sealed reader is gone). The
    /// next agent triggers a new capture. Returns whether it released one.
    fn release_if_idle(&self) -> bool {
        let Some(idle) = self.config.idle_release else { return false };
        if self.connections.load(Ordering::SeqCst) > 0 || self.last_active.lock().unwrap_or_else(|p| p.into_inner()).elapsed() < idle {
            return false;
        }
        let mut cur = self.lock_current();
        let Some(gen) = cur.take() else { return false };
        drop(cur);
        gen.seal(&format!("no agent for {} s (--idle-release-secs): memory released", idle.as_secs()));
        stats::Stats::add(&self.stats.released_idle, 1);
        tracing::info!(generation = gen.id(), rdb_bytes = gen.descriptor(usize::MAX).0.published, "released an idle generation; the next agent triggers a new capture");
        self.changed.notify_all();
        true
    }

    fn record_capture_failure(&self, why: String, kind: transport::wire::CaptureFailure) {
        stats::Stats::add(&self.stats.capture_failures, 1);
        let mut f = self.capture_failed.lock().unwrap_or_else(|p| p.into_inner());
        *f = (f.0 + 1, why, kind);
        drop(f);
        self.changed.notify_all();
    }

    /// The transports this relay offers, by name.
    fn offered(&self) -> Vec<String> {
        let mut v = Vec::new();
        if self.shm_socket.is_some() {
            v.push("shm".to_string());
        }
        #[cfg(feature = "ucx")]
        if self.ucx.is_some() {
            v.push("ucx".to_string());
        }
        if self.config.offer.tcp {
            v.push("tcp".to_string());
        }
        v
    }

    /// The TCP addresses UCX listens on (empty without ucx).
    pub(crate) fn ucx_listeners(&self) -> Vec<std::net::SocketAddr> {
        #[cfg(feature = "ucx")]
        if let Some(u) = &self.ucx {
            return u.listeners();
        }
        Vec::new()
    }

    fn ucx_transports(&self) -> Vec<String> {
        #[cfg(feature = "ucx")]
        if let Some(u) = &self.ucx {
            return u.transports();
        }
        Vec::new()
    }

    /// The UCX remote key of one segment of `gen`, serialized for the agent.
    fn ucx_key(&self, gen: &Arc<Generation>, segment: u64) -> Result<Vec<u8>, Error> {
        #[cfg(feature = "ucx")]
        if let Some(u) = &self.ucx {
            return u.key(gen, segment).map_err(Error::Ucx);
        }
        let _ = (gen, segment);
        Err(Error::NotOffered("ucx"))
    }

    /// Generation `id` if anyone still holds it.
    fn find(&self, id: u64) -> Option<Arc<Generation>> {
        let all = self.all.lock().unwrap_or_else(|p| p.into_inner());
        all.iter().filter_map(Weak::upgrade).find(|g| g.id() == id)
    }

    /// The generation a new agent should use: the current one unless sealed or failed, in which case
    /// a new capture is requested and we wait for it (up to `timeout`).
    fn generation_for_agent(&self, timeout: Duration) -> Option<Arc<Generation>> {
        let deadline = std::time::Instant::now() + timeout;
        let mut cur = self.lock_current();
        loop {
            if let Some(g) = cur.as_ref() {
                if matches!(g.state(), State::Capturing | State::Complete) {
                    return Some(g.clone());
                }
            }
            self.demand.store(true, Ordering::SeqCst);
            self.changed.notify_all();
            let now = std::time::Instant::now();
            if now >= deadline || self.stop.load(Ordering::SeqCst) {
                return None;
            }
            cur = self.changed.wait_timeout(cur, (deadline - now).min(Duration::from_millis(500))).unwrap_or_else(|p| p.into_inner()).0;
        }
    }
}

/// A running relay.
pub struct Relay {
    shared: Arc<Shared>,
    local_addr: SocketAddr,
    threads: Mutex<Vec<std::thread::JoinHandle<()>>>,
}

impl Relay {
    /// Bind, start capturing, start serving.
    pub fn start(mut config: Config) -> Result<Relay, Error> {
        config.validate()?;
        if config.agents_tls.is_some() && config.offer.ucx {
            // UCX reads cannot be encrypted: a relay that requires TLS does not offer them.
            tracing::info!("agents connect over TLS: not offering ucx (its reads cannot be encrypted)");
            config.offer.ucx = false;
        }
        let listener = TcpListener::bind(config.listen).map_err(|source| Error::Listen { addr: config.listen, source })?;
        let local_addr = listener.local_addr().map_err(|source| Error::Listen { addr: config.listen, source })?;
        let shm = if config.offer.shm { Some(bind_shm_socket(local_addr)?) } else { None };
        #[cfg(not(feature = "ucx"))]
        if config.offer.ucx && !config.offer.tcp && !config.offer.shm {
            return Err(Error::Config("this fastrepl was built without ucx (cargo feature `ucx`)".into()));
        }
        #[cfg(feature = "ucx")]
        let ucx = if config.offer.ucx {
            match ucx_serve::UcxServer::start(local_addr) {
                Ok(u) => Some(u),
                Err(e) => {
                    tracing::warn!(error = %e, "UCX unavailable; not offering ucx");
                    None
                }
            }
        } else {
            None
        };
        let on_start = config.capture == CapturePolicy::OnStart;
        let master = match &config.sentinel {
            Some(s) => s.master(limits::CONNECT_TIMEOUT).map_err(Error::Config)?,
            None => config.master.clone(),
        };
        let tokens = std::iter::once(config.token.clone()).chain(config.extra_tokens.iter().cloned()).collect();
        let shared = Arc::new(Shared {
            tokens: std::sync::RwLock::new(tokens),
            master: Mutex::new(master),
            master_changes: std::sync::atomic::AtomicU64::new(0),
            config,
            current: Mutex::new(None),
            changed: Condvar::new(),
            all: Mutex::new(Vec::new()),
            demand: AtomicBool::new(on_start),
            stop: AtomicBool::new(false),
            connections: std::sync::atomic::AtomicUsize::new(0),
            shm_socket: shm.as_ref().map(|(name, _)| name.clone()),
            swarms: tracker::Swarms::default(),
            capture_failed: Mutex::new((0, String::new(), transport::wire::CaptureFailure::Other)),
            stats: stats::Stats::new(),
            last_active: Mutex::new(std::time::Instant::now()),
            #[cfg(feature = "ucx")]
            ucx,
        });
        let announce = shared.config.announce_port.unwrap_or(local_addr.port());
        let spawn = |name: &str, f: Box<dyn FnOnce() + Send>| {
            std::thread::Builder::new().name(name.into()).spawn(f).map_err(|e| Error::Config(format!("spawn {name} thread: {e}")))
        };
        let mut threads = Vec::new();
        // A served file is loaded once, before anyone connects; a master is captured by a thread.
        if let Some(path) = shared.config.file.clone() {
            file::load(&shared, &path)?;
        } else {
            let s1 = shared.clone();
            threads.push(spawn("capture", Box::new(move || capture::supervise(s1, announce)))?);
        }
        if let Some(sentinels) = shared.config.sentinel.clone() {
            let s = shared.clone();
            threads.push(spawn(
                "sentinel",
                Box::new(move || {
                    let stop = || s.stop.load(Ordering::SeqCst);
                    sentinels.follow(s.master(), &stop, &mut |new| s.set_master(new))
                }),
            )?);
        }
        let s2 = shared.clone();
        threads.push(spawn("accept", Box::new(move || serve::accept_loop(s2, listener)))?);
        if let Some((_, unix)) = shm {
            let s3 = shared.clone();
            threads.push(spawn("accept-shm", Box::new(move || serve::accept_unix_loop(s3, unix)))?);
        }
        tracing::info!(listen = %local_addr, master = %shared.master(), transports = ?shared.offered(), ucx = ?shared.ucx_transports(), ucx_listeners = ?shared.ucx_listeners(), "relay started");
        Ok(Relay { shared, local_addr, threads: Mutex::new(threads) })
    }

    /// The transports offered, by name.
    pub fn offered(&self) -> Vec<String> {
        self.shared.offered()
    }

    /// Where agents connect.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Accept these tokens from now on (a reload during a rotation; connections already
    /// authenticated are not affected). Refused when it would leave a non-loopback relay open.
    pub fn set_tokens(&self, tokens: Vec<Token>) -> Result<(), Error> {
        if tokens.is_empty() || (tokens.iter().any(Token::is_empty) && !self.local_addr.ip().is_loopback()) {
            return Err(Error::Config("refusing an empty token on a non-loopback relay".into()));
        }
        *self.shared.tokens.write().unwrap_or_else(|p| p.into_inner()) = tokens;
        Ok(())
    }

    /// What the relay holds and has done, now.
    pub fn status(&self) -> stats::Status {
        stats::status(&self.shared, self.local_addr)
    }

    /// Block until the relay stops (it runs until the process ends).
    pub fn wait(&self) {
        let threads = std::mem::take(&mut *self.threads.lock().unwrap_or_else(|p| p.into_inner()));
        for t in threads {
            let _ = t.join();
        }
    }

    /// Stop capturing and serving (for embedding; the daemon runs until killed).
    pub fn stop(&self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        self.shared.changed.notify_all();
        let _ = std::net::TcpStream::connect(self.local_addr);
        if let Some(name) = &self.shared.shm_socket {
            let _ = transport::shm::connect(name, &Token::empty(), transport::auth::Kind::Data);
        }
    }
}

/// Bind the shm transport's abstract unix socket. The name carries the TCP port and our pid, so two
/// relays on one host never collide, and it vanishes with the process (abstract sockets have no file).
fn bind_shm_socket(local: SocketAddr) -> Result<(String, std::os::unix::net::UnixListener), Error> {
    use std::os::linux::net::SocketAddrExt;
    let name = format!("fastrepl-relay-{}-{}", local.port(), std::process::id());
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).map_err(|e| Error::Config(format!("shm socket name: {e}")))?;
    let l = std::os::unix::net::UnixListener::bind_addr(&addr).map_err(|e| Error::Config(format!("bind shm socket @{name}: {e}")))?;
    Ok((name, l))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(listen: &str, token: Token) -> Config {
        Config {
            master: "127.0.0.1:6379".into(),
            master_auth: None,
            listen: listen.parse().unwrap(),
            token,
            announce_port: None,
            snapshot: snapshot::Config::default(),
            connections_max: 4,
            offer: Offer::ALL,
            file: None,
            extra_tokens: Vec::new(),
            agents_tls: None,
            source: source::Source::Master,
            sentinel: None,
            tls: None,
            source_rdb_raw: false,
            capture: CapturePolicy::OnStart,
            idle_release: None,
        }
    }

    #[test]
    fn refuses_to_expose_the_dataset_without_a_token() {
        assert!(config("127.0.0.1:0", Token::empty()).validate().is_ok(), "loopback may go without");
        let e = config("0.0.0.0:7400", Token::empty()).validate().unwrap_err();
        assert!(e.to_string().contains("without a token"), "{e}");
        assert!(config("0.0.0.0:7400", Token::new(b"0123456789abcdef").unwrap()).validate().is_ok());
    }

    #[test]
    fn block_size_within_one_read() {
        let mut c = config("127.0.0.1:0", Token::empty());
        c.snapshot.block_size = limits::BLOCK_BYTES_MIN - 1;
        assert!(c.validate().is_err());
        c.snapshot.block_size = u64::from(transport::wire::READ_MAX) + 1;
        assert!(c.validate().is_err());
        c.snapshot.block_size = limits::BLOCK_BYTES_DEFAULT;
        assert!(c.validate().is_ok());
    }

    #[test]
    fn transport_choice_maps_to_what_is_offered() {
        assert_eq!(Offer::from(transport::Choice::Auto), Offer::ALL);
        assert_eq!(Offer::from(transport::Choice::Tcp), Offer { tcp: true, shm: false, ucx: false });
        assert_eq!(Offer::from(transport::Choice::Shm), Offer { tcp: false, shm: true, ucx: false });
        assert_eq!(Offer::from(transport::Choice::Ucx), Offer { tcp: false, shm: false, ucx: true });
    }
}
