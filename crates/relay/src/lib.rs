//! The relay: runs beside the master, poses as one of its replicas, holds one point-in-time snapshot
//! in memory plus the stream after it, and serves any number of agents from it.
//!
//! - [`capture`]: the replica side towards the master (handshake, `PSYNC ? -1`, RDB into the
//!   generation's region, stream log, ACKs).
//! - [`serve`]: the agents' side (authenticated control and data connections).
//!
//! Generations: the first is captured when the relay starts (or when the first agent asks, with
//! `--capture on-demand`). When its log reaches a bound (bytes or age), the master link drops,
//! Sentinel names another master or no agent has connected for `--idle-release-secs`, it is sealed:
//! agents already on it finish from it; the next agent that arrives triggers a new capture (the
//! master forks only when someone needs a fresh snapshot). A sealed generation's memory is freed
//! when its last agent disconnects.
//!
//! That lifecycle is one machine, `generations::Generations`, with no sockets and no clock, under one
//! lock in `Shared`. The current generation is *capturing* (RDB arriving), *complete* (log growing),
//! *sealed* (with a typed reason: log bound, link lost, master changed, idle release) or *failed*; a
//! capture is idle or running, and a *demand* for one is set by a waiting agent (or on-start) and
//! cleared when a generation is published. Events: an agent wants a generation, a connection opened or
//! closed, capture started / published / RDB complete / log bound / ended (sealed, failed, stopped),
//! master changed, idle tick, stop. Actions: start a capture, seal or fail generation X, release the
//! current one, tell the waiters. The capture, accept, control and sentinel threads only feed events
//! and carry the actions out; every seal goes through that one place, so each is counted once.
#![deny(missing_docs)]

pub mod capture;
pub mod events;
mod file;
mod generations;
pub mod serve;
pub mod source;
pub mod stats;
mod tracker;
#[cfg(feature = "ucx")]
mod ucx_serve;
pub mod ucx_messages;
#[cfg(feature = "ucx")]
pub mod ucx_side;


use generations::{Action, Answer, Generations, Next, Ticket};
use replication::replica::Auth;
use snapshot::Generation;
use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::{Duration, Instant};
use transport::Token;

/// How often the lifecycle is ticked (idle release) by the capture thread.
const IDLE_TICK: Duration = Duration::from_millis(500);

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
    /// The server version announced to a Valkey source (`REPLCONF version`: it picks the RDB version
    /// the source writes); `None`: the source's own version, as a replica of its version would say.
    pub announce_version: Option<String>,
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

impl From<Option<transport::TransportKind>> for Offer {
    /// `--transport` on the relay: `auto` (`None`) offers everything that works here, a transport
    /// only that.
    fn from(c: Option<transport::TransportKind>) -> Offer {
        use transport::TransportKind::{Shm, Tcp, Ucx};
        match c {
            None => Offer::ALL,
            Some(Tcp) => Offer { tcp: true, shm: false, ucx: false },
            Some(Shm) => Offer { tcp: false, shm: true, ucx: false },
            Some(Ucx) => Offer { tcp: false, shm: false, ucx: true },
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
        if self.snapshot.snapshot_bytes_max > limits::REGION_BYTES_MAX {
            return Err(Error::Config(format!("--snapshot-max-bytes can be at most {} (agents refuse a larger snapshot region)", limits::REGION_BYTES_MAX)));
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
    /// The generations' lifecycle and the generations it speaks of, under one lock.
    life: Mutex<Life>,
    /// Signalled after every change of `life` (the capture thread and waiting agents wait on it).
    changed: Condvar,
    /// How many times the master changed, a copy of the machine's count: what the capture loop
    /// compares on every read, instead of taking the lock.
    master_changes: AtomicU64,
    /// The relay stops (a copy of the machine's flag, for loops that check it on every turn).
    stop: AtomicBool,
    /// The abstract unix socket of the shm transport, when offered.
    shm_socket: Option<String>,
    /// Each generation's swarm of agents (who holds which block).
    swarms: tracker::Swarms,
    /// Counters for status and metrics.
    stats: stats::Stats,
    /// The UCX side, when offered and UCX initialised.
    #[cfg(feature = "ucx")]
    ucx: Option<ucx_serve::UcxServer>,
}

/// What `Shared::life` guards: the machine, and the generations whose ids it holds.
struct Life {
    machine: Generations,
    /// The generation agents arriving now are handed (the machine's current one).
    current: Option<Arc<Generation>>,
    /// Every generation an agent may still hold.
    all: Vec<Weak<Generation>>,
}

impl Life {
    fn find(&self, id: u64) -> Option<Arc<Generation>> {
        self.all.iter().filter_map(Weak::upgrade).find(|g| g.id() == id)
    }
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Life> {
        self.life.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Feed the machine one event and carry out what it decides, under the lock.
    fn feed<R>(&self, event: impl FnOnce(&mut Generations) -> (R, Vec<Action>)) -> R {
        let mut life = self.lock();
        let (r, actions) = event(&mut life.machine);
        self.carry_out(&mut life, actions);
        r
    }

    /// The one place generations are sealed, failed and released (so each is counted once).
    fn carry_out(&self, life: &mut Life, actions: Vec<Action>) {
        let mut wake = false;
        for action in actions {
            match action {
                Action::StartCapture | Action::TellWaiters => wake = true,
                Action::Seal { id, reason } => {
                    self.stats.sealed(reason);
                    if let Some(g) = life.find(id) {
                        g.seal(reason.describe());
                        tracing::info!(generation = id, reason = reason.describe(), log_bytes = g.log_len(), "generation sealed");
                    }
                }
                Action::Fail { id, why } => {
                    if let Some(g) = life.find(id) {
                        g.fail(&why);
                    }
                }
                Action::CountFailure => stats::Stats::add(&self.stats.capture_failures, 1),
                Action::Release { id } => {
                    if life.current.as_ref().is_some_and(|g| g.id() == id) {
                        life.current = None;
                    }
                    stats::Stats::add(&self.stats.released_idle, 1);
                    let rdb_bytes = life.find(id).map(|g| g.descriptor(usize::MAX).0.published);
                    tracing::info!(generation = id, ?rdb_bytes, "released an idle generation; the next agent triggers a new capture");
                }
            }
        }
        if wake {
            self.changed.notify_all();
        }
    }

    /// A capture's RDB started: `gen` is the current generation, and waiting agents get it.
    fn publish(&self, gen: Arc<Generation>) {
        let mut life = self.lock();
        life.all.retain(|w| w.strong_count() > 0);
        life.all.push(Arc::downgrade(&gen));
        life.current = Some(gen.clone());
        let actions = life.machine.rdb_started(gen.id());
        self.carry_out(&mut life, actions);
    }

    /// Generation `id`'s RDB is complete.
    fn rdb_complete(&self, id: u64) {
        self.lock().machine.rdb_complete(id);
    }

    /// The current generation's id.
    fn current_id(&self) -> Option<u64> {
        self.lock().machine.current().map(|(id, _)| id)
    }

    /// How many captures failed so far, and why the last one did.
    fn capture_failures(&self) -> (u64, Option<generations::Failure>) {
        let life = self.lock();
        let (n, f) = life.machine.failures();
        (n, f.cloned())
    }

    /// The master agents are handed to now, and how many times it changed (read together).
    fn master_now(&self) -> (String, u64) {
        let life = self.lock();
        let (m, changes) = life.machine.master();
        (m.to_string(), changes)
    }

    /// The master agents are handed to now.
    fn master(&self) -> String {
        self.master_now().0
    }

    /// Sentinel named a new master: later captures read from it (or its replicas), and the current
    /// generation is sealed (its history is the old master's; agents already on it finish from it,
    /// and the new master knows it as its replid2).
    fn set_master(&self, new: &str) {
        let old = self.feed(|g| {
            let old = g.master().0.to_string();
            let actions = g.master_changed(new.to_string());
            self.master_changes.store(g.master().1, Ordering::SeqCst);
            (old, actions)
        });
        tracing::warn!(%old, %new, "Sentinel switched the master; the current generation is sealed, the next agent triggers a capture from the new master");
    }

    /// The tokens accepted now.
    fn tokens(&self) -> Vec<Token> {
        self.tokens.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Every generation still held (the current one and sealed ones agents still read).
    fn held(&self) -> Vec<Arc<Generation>> {
        self.lock().all.iter().filter_map(Weak::upgrade).collect()
    }

    /// An agent connection began: false when the relay is at `--connections-max`.
    fn connection_opened(&self) -> bool {
        self.lock().machine.connection_opened(self.config.connections_max, Instant::now())
    }

    /// Agent connections open now.
    fn connections(&self) -> usize {
        self.lock().machine.connections()
    }

    /// An agent connection ended.
    fn connection_closed(&self) {
        self.lock().machine.connection_closed(Instant::now());
    }

    /// Time passed (`--idle-release-secs` is decided by the machine).
    fn idle_tick(&self) {
        self.feed(|g| ((), g.idle_tick(Instant::now())));
    }

    /// The capture thread waits until a capture is wanted (`Some(id)`) or the relay stops (`None`),
    /// ticking the machine meanwhile.
    fn wait_to_capture(&self) -> Option<u64> {
        let mut life = self.lock();
        loop {
            match life.machine.next_capture() {
                Next::Capture(id) => return Some(id),
                Next::Stop => return None,
                Next::Wait => {}
            }
            life = self.changed.wait_timeout(life, IDLE_TICK).unwrap_or_else(|p| p.into_inner()).0;
            let actions = life.machine.idle_tick(Instant::now());
            self.carry_out(&mut life, actions);
        }
    }

    /// An agent needs a snapshot at `min_offset` or later and holds `gen` (see
    /// [`generations::Generations::renew`]).
    fn renew(&self, gen: &Generation, min_offset: u64) -> transport::wire::Renewal {
        let renewed = self.feed(|m| m.renew(gen.id(), gen.offset(), min_offset));
        match renewed {
            generations::Renewed::Sealed => transport::wire::Renewal::Sealed,
            generations::Renewed::Newer => transport::wire::Renewal::Newer,
            generations::Renewed::FreshEnough => transport::wire::Renewal::FreshEnough,
        }
    }

    /// Where a new agent begins waiting for a generation.
    fn ticket(&self) -> Ticket {
        self.lock().machine.ticket()
    }

    /// A new agent waits (up to `timeout`) for a generation it may use; `Err` says why it has none
    /// ([`Answer::Wait`]: not yet).
    fn generation_for_agent(&self, ticket: Ticket, timeout: Duration) -> Result<Arc<Generation>, Answer> {
        let deadline = Instant::now() + timeout;
        let mut life = self.lock();
        loop {
            let (answer, actions) = life.machine.want(ticket);
            self.carry_out(&mut life, actions);
            match answer {
                Answer::Ready(id) => match life.current.clone() {
                    Some(g) if g.id() == id => return Ok(g),
                    _ => return Err(Answer::Wait),
                },
                Answer::Wait => {}
                other => return Err(other),
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(Answer::Wait);
            }
            life = self.changed.wait_timeout(life, deadline - now).unwrap_or_else(|p| p.into_inner()).0;
        }
    }

    /// The transports this relay offers.
    fn offered(&self) -> Vec<transport::TransportKind> {
        let mut v = Vec::new();
        if self.shm_socket.is_some() {
            v.push(transport::TransportKind::Shm);
        }
        #[cfg(feature = "ucx")]
        if self.ucx.is_some() {
            v.push(transport::TransportKind::Ucx);
        }
        if self.config.offer.tcp {
            v.push(transport::TransportKind::Tcp);
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

    /// Times the UCX side process was started again (0 without ucx).
    pub(crate) fn ucx_side_restarts(&self) -> u64 {
        #[cfg(feature = "ucx")]
        if let Some(u) = &self.ucx {
            return u.restarts();
        }
        0
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
        self.lock().find(id)
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
        let master = match &config.sentinel {
            Some(s) => s.master(limits::CONNECT_TIMEOUT).map_err(Error::Config)?,
            None => config.master.clone(),
        };
        let tokens = std::iter::once(config.token.clone()).chain(config.extra_tokens.iter().cloned()).collect();
        let machine = Generations::new(config.capture, config.idle_release, master, Instant::now());
        let shared = Arc::new(Shared {
            tokens: std::sync::RwLock::new(tokens),
            config,
            life: Mutex::new(Life { machine, current: None, all: Vec::new() }),
            changed: Condvar::new(),
            master_changes: AtomicU64::new(0),
            stop: AtomicBool::new(false),
            shm_socket: shm.as_ref().map(|(name, _)| name.clone()),
            swarms: tracker::Swarms::default(),
            stats: stats::Stats::new(),
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
        tracing::info!(listen = %local_addr, master = %shared.master(), transports = %json_list(&shared.offered()), ucx = %json_list(&shared.ucx_transports()), ucx_listeners = %json_list(&shared.ucx_listeners()), "relay started");
        Ok(Relay { shared, local_addr, threads: Mutex::new(threads) })
    }

    /// The transports offered.
    pub fn offered(&self) -> Vec<transport::TransportKind> {
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
        self.shared.feed(|g| ((), g.stop()));
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

/// A list as one log field: JSON array text (`["shm","tcp"]`), which `--log-format json` embeds as a
/// real list (the binary's log writer does), and which reads plainly in text logs.
pub fn json_list<T: std::fmt::Display>(items: &[T]) -> String {
    serde_json::to_string(&items.iter().map(|i| i.to_string()).collect::<Vec<_>>()).unwrap_or_default()
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
            announce_version: None,
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
        assert_eq!(Offer::from(None), Offer::ALL);
        assert_eq!(Offer::from(Some(transport::TransportKind::Tcp)), Offer { tcp: true, shm: false, ucx: false });
        assert_eq!(Offer::from(Some(transport::TransportKind::Shm)), Offer { tcp: false, shm: true, ucx: false });
        assert_eq!(Offer::from(Some(transport::TransportKind::Ucx)), Offer { tcp: false, shm: false, ucx: true });
    }
}
