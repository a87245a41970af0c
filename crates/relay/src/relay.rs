//! A running relay: binds its ports, starts the capture, Sentinel and accept threads, and stops them.

use crate::capture;
use crate::config::Config;
use crate::error::Error;
use crate::file;
use crate::generations::Generations;
use crate::json_list::json_list;
use crate::serve;
use crate::shared::Shared;
use crate::stats;
use std::net::{SocketAddr, TcpListener};
use std::sync::{Arc, Mutex};
use std::time::Instant;
use transport::Token;

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
            match crate::ucx_serve::UcxServer::start(local_addr) {
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
        let store = match &config.store {
            Some(dir) => {
                let (store, cleaned) = snapshot::Store::open(dir).map_err(|e| Error::Config(format!("open the store: {e}")))?;
                if cleaned.files > 0 {
                    tracing::info!(store = %dir.display(), files = cleaned.files, bytes = cleaned.bytes, "removed the generation files a previous relay left in the store");
                }
                tracing::info!(store = %dir.display(), "generations are kept in files under the store, not in memory");
                Some(store)
            }
            None => None,
        };
        let machine = Generations::new(config.capture, config.idle_release, master, Instant::now()).with_log_percent(config.log_percent);
        let shm_socket = shm.as_ref().map(|(name, _)| name.clone());
        #[cfg(feature = "ucx")]
        let shared = Arc::new(Shared::new(config, machine, shm_socket, store, ucx));
        #[cfg(not(feature = "ucx"))]
        let shared = Arc::new(Shared::new(config, machine, shm_socket, store));
        let announce = shared.config.announce_port.unwrap_or(local_addr.port());
        let spawn = |name: &str, f: Box<dyn FnOnce() + Send>| std::thread::Builder::new().name(name.into()).spawn(f).map_err(|e| Error::Config(format!("spawn {name} thread: {e}")));
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
                    let stop = || s.stopping();
                    sentinels.follow(s.master(), &stop, &mut |new| s.set_master(new))
                }),
            )?);
        }
        let g = shared.gate.clone();
        threads.push(spawn("admission", Box::new(move || g.reap()))?);
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
        self.shared.set_tokens(tokens);
        Ok(())
    }

    /// What the relay holds and has done, now.
    pub fn status(&self) -> stats::Status {
        crate::status::status(&self.shared, self.local_addr)
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
        self.shared.feed(|g| ((), g.stop()));
        self.shared.gate.stop();
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
