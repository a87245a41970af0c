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
pub mod serve;

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
}

/// The relay's configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// The master, `host:port`.
    pub master: String,
    /// Credentials for the master.
    pub master_auth: Option<Auth>,
    /// Where agents connect.
    pub listen: SocketAddr,
    /// The agents' shared secret.
    pub token: Token,
    /// Port announced to the master with `REPLCONF listening-port` (default: the listen port).
    pub announce_port: Option<u16>,
    /// Snapshot tunables.
    pub snapshot: snapshot::Config,
    /// Most agent connections served at once.
    pub connections_max: usize,
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
        if self.snapshot.block_size < 4096 || self.snapshot.block_size > transport::wire::READ_MAX as u64 {
            return Err(Error::Config(format!("block size must be between 4 KiB and {} bytes", transport::wire::READ_MAX)));
        }
        Ok(())
    }
}

/// State shared by the capture loop and every connection.
pub(crate) struct Shared {
    config: Config,
    current: Mutex<Option<Arc<Generation>>>,
    changed: Condvar,
    /// Every generation an agent may still hold.
    all: Mutex<Vec<Weak<Generation>>>,
    /// An agent wants a fresh generation (the current one is sealed or failed).
    demand: AtomicBool,
    stop: AtomicBool,
    connections: std::sync::atomic::AtomicUsize,
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
        self.changed.notify_all();
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
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Relay {
    /// Bind, start capturing, start serving.
    pub fn start(config: Config) -> Result<Relay, Error> {
        config.validate()?;
        let listener = TcpListener::bind(config.listen).map_err(|source| Error::Listen { addr: config.listen, source })?;
        let local_addr = listener.local_addr().map_err(|source| Error::Listen { addr: config.listen, source })?;
        let shared = Arc::new(Shared {
            config,
            current: Mutex::new(None),
            changed: Condvar::new(),
            all: Mutex::new(Vec::new()),
            demand: AtomicBool::new(true),
            stop: AtomicBool::new(false),
            connections: std::sync::atomic::AtomicUsize::new(0),
        });
        let announce = shared.config.announce_port.unwrap_or(local_addr.port());
        let s1 = shared.clone();
        let capture = std::thread::Builder::new()
            .name("capture".into())
            .spawn(move || capture::supervise(s1, announce))
            .map_err(|e| Error::Config(format!("spawn capture thread: {e}")))?;
        let s2 = shared.clone();
        let server = std::thread::Builder::new()
            .name("accept".into())
            .spawn(move || serve::accept_loop(s2, listener))
            .map_err(|e| Error::Config(format!("spawn accept thread: {e}")))?;
        tracing::info!(listen = %local_addr, master = %shared.config.master, "relay started");
        Ok(Relay { shared, local_addr, threads: vec![capture, server] })
    }

    /// Where agents connect.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Block until the relay stops (it runs until the process ends).
    pub fn wait(mut self) {
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }

    /// Stop capturing and serving (for embedding; the daemon runs until killed).
    pub fn stop(&self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        self.shared.changed.notify_all();
        let _ = std::net::TcpStream::connect(self.local_addr);
    }
}
