//! The relay's UCX service as the relay sees it: a side process ([`crate::ucx_side`]) that holds UCX,
//! started with the relay and again whenever it dies, and asked for the remote key of each segment
//! an agent reads.
//!
//! UCX runs in a process of its own because UCX 1.13 can abort the process it runs in when a peer
//! dies at the wrong moment (see [`crate::ucx_side`]). The relay's snapshot, stream log, tracker and
//! every other agent must not go with it: when the side dies the relay logs how it ended and starts
//! another, whose worker has a new address; agents reading over ucx see their reads fail, and their
//! next attach hands them the new address (`agent::ucx_reader` reconnects when it changes).

use crate::ucx_messages::{self, Answer, Ready, Request};
use crate::ucx_side;
use snapshot::Generation;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Instant;
use transport::wire::{UcxKey, UCX_SEGMENT};

/// Why the relay's UCX service failed.
#[derive(Debug, thiserror::Error)]
pub enum UcxServeError {
    /// UCX could not start in the side process (no device holds `--listen`, no transport...).
    #[error("UCX could not start: {0}")]
    Start(String),
    /// The side process could not be started, or failed while answering.
    #[error("the relay's UCX side process: {0}")]
    Side(String),
    /// An agent asked for a segment that is not (yet) readable.
    #[error("segment {segment}: {source}")]
    Segment {
        /// The segment.
        segment: u64,
        /// Why.
        #[source]
        source: snapshot::Error,
    },
    /// An agent asked for a segment past the region's end.
    #[error("segment {segment} is beyond the region")]
    BeyondRegion {
        /// The segment.
        segment: u64,
    },
}

use limits::{UCX_SIDE_ANSWER_MAX as SIDE_ANSWER_MAX, UCX_SIDE_RESTART_EVERY as RESTART_EVERY, UCX_SIDE_WATCH_EVERY as WATCH_EVERY};

/// The relay's UCX service: the side process, restarted when it dies.
pub struct UcxServer {
    state: Arc<Mutex<State>>,
    /// Sides started again after one died or failed (read without the state's lock, for `status`).
    restarts: Arc<AtomicU64>,
    /// What `status` shows, kept apart so that it never waits behind a restart or a registration.
    info: Arc<Mutex<Info>>,
    stop: Arc<AtomicBool>,
    watcher: Option<std::thread::JoinHandle<()>>,
}

/// The side process and what the relay knows of it; `side` is `None` while it is dead.
struct State {
    listen: SocketAddr,
    side: Option<Side>,
    last_start: Instant,
    info: Arc<Mutex<Info>>,
    restarts: Arc<AtomicU64>,
}

/// The running side's transports and listeners (empty while none runs).
#[derive(Default, Clone)]
struct Info {
    transports: Vec<String>,
    listeners: Vec<SocketAddr>,
}

/// One running side process.
struct Side {
    child: Child,
    conn: UnixStream,
    address: Vec<u8>,
    /// Its transports and listeners, published to `status` while it runs.
    info: Info,
    /// Generations registered there, forgotten when the relay lets them go.
    generations: HashMap<u64, Weak<Generation>>,
}

impl UcxServer {
    /// Start the side process (UCX restricted to the device that carries `listen`, unless `listen` is
    /// unspecified or `UCX_NET_DEVICES` names devices) and the watcher that restarts it.
    pub fn start(listen: SocketAddr) -> Result<UcxServer, UcxServeError> {
        let side = Side::spawn(listen)?;
        let info = Arc::new(Mutex::new(side.info.clone()));
        let restarts = Arc::new(AtomicU64::new(0));
        let state = Arc::new(Mutex::new(State { listen, side: Some(side), last_start: Instant::now(), info: info.clone(), restarts: restarts.clone() }));
        let stop = Arc::new(AtomicBool::new(false));
        let (st, s) = (state.clone(), stop.clone());
        let watcher = std::thread::Builder::new()
            .name("ucx-side-watch".into())
            .spawn(move || {
                while !s.load(Ordering::SeqCst) {
                    std::thread::park_timeout(WATCH_EVERY);
                    if s.load(Ordering::SeqCst) {
                        break;
                    }
                    let mut st = st.lock().unwrap_or_else(|p| p.into_inner());
                    st.check();
                    if st.side.is_none() {
                        let _ = st.restart();
                    }
                }
            })
            .map_err(|e| UcxServeError::Side(format!("spawn its watcher: {e}")))?;
        Ok(UcxServer { state, restarts, info, stop, watcher: Some(watcher) })
    }

    /// Sides started again after one died or failed.
    pub fn restarts(&self) -> u64 {
        self.restarts.load(Ordering::Relaxed)
    }

    fn info(&self) -> Info {
        self.info.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The transports/devices UCX found here (none while the side restarts).
    pub fn transports(&self) -> Vec<String> {
        self.info().transports
    }

    /// The TCP addresses UCX listens on for this relay (its tcp transport's interfaces, in the side
    /// process; none while it restarts).
    pub fn listeners(&self) -> Vec<SocketAddr> {
        self.info().listeners
    }

    /// The key an agent needs to read `segment` of `gen`, serialized. The side registers the
    /// segment on first use.
    pub fn key(&self, gen: &Arc<Generation>, segment: u64) -> Result<Vec<u8>, UcxServeError> {
        let capacity = gen.region().capacity();
        let start = segment.checked_mul(UCX_SEGMENT).filter(|s| *s < capacity).ok_or(UcxServeError::BeyondRegion { segment })?;
        gen.check_readable(start, 1).map_err(|source| UcxServeError::Segment { segment, source })?;
        let len = UCX_SEGMENT.min(capacity - start);
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let what = format!("register segment {segment} of generation {}", gen.id());
        // Twice: a side killed a moment ago may still look alive to `check` and fail the request;
        // then the next side answers.
        for attempt in 1..=2 {
            st.check();
            if st.side.is_none() {
                st.restart()?;
            }
            let side = st.side.as_mut().expect("started above");
            side.generations.insert(gen.id(), Arc::downgrade(gen));
            let req = Request::Register { generation: gen.id(), fd: gen.region().file().as_raw_fd(), capacity, segment, start, len };
            let e = match side.ask(&req) {
                Ok(Answer::Key { base, len, rkey }) => return Ok(UcxKey { worker: side.address.clone(), base, len, rkey }.encode()),
                Ok(Answer::Failed(e)) => return Err(UcxServeError::Side(format!("{what}: {e}"))),
                Ok(Answer::Done) => format!("{what}: answered Done, not a key"),
                Err(e) => format!("{what}: {e}"),
            };
            st.lost(&e);
            if attempt == 2 {
                return Err(UcxServeError::Side(e));
            }
        }
        unreachable!("the loop returns")
    }
}

impl State {
    /// If the side has exited, say how and let it go.
    fn check(&mut self) {
        let Some(side) = self.side.as_mut() else { return };
        match side.child.try_wait() {
            Ok(None) => {
                if let Err(e) = side.forget_dropped() {
                    self.lost(&e);
                }
            }
            Ok(Some(status)) => {
                tracing::error!(%status, "the relay's UCX side process ended; starting another (agents reading over ucx reconnect to it)");
                self.gone();
            }
            Err(e) => tracing::warn!(error = %e, "cannot tell whether the relay's UCX side process runs"),
        }
    }

    /// The side failed while answering: stop it (it may be stuck); the next use starts another. A side
    /// that has exited is said to have ended, with its status, as the watcher would say it.
    fn lost(&mut self, why: &str) {
        match self.side.as_mut().and_then(|s| s.child.try_wait().ok().flatten()) {
            Some(status) => tracing::error!(%status, error = why, "the relay's UCX side process ended; starting another (agents reading over ucx reconnect to it)"),
            None => tracing::error!(error = why, "the relay's UCX side process failed; starting another"),
        }
        self.gone();
    }

    fn gone(&mut self) {
        self.side = None;
        *self.info.lock().unwrap_or_else(|p| p.into_inner()) = Info::default();
    }

    /// Start a side again, at most every [`RESTART_EVERY`]: a side that crashes at once is not
    /// restarted in a loop, and an agent that asks meanwhile waits for the next start (at most that
    /// long) rather than fail its attempt.
    fn restart(&mut self) -> Result<(), UcxServeError> {
        if let Some(wait) = RESTART_EVERY.checked_sub(self.last_start.elapsed()) {
            std::thread::sleep(wait); // Spacing restarts, not synchronization.
        }
        self.last_start = Instant::now();
        match Side::spawn(self.listen) {
            Ok(s) => {
                tracing::info!(ucx_listeners = ?s.info.listeners, "the relay's UCX side process started again");
                self.restarts.fetch_add(1, Ordering::Relaxed);
                *self.info.lock().unwrap_or_else(|p| p.into_inner()) = s.info.clone();
                self.side = Some(s);
                Ok(())
            }
            Err(e) => {
                tracing::error!(error = %e, "the relay's UCX side process could not start again; trying again in a second");
                Err(e)
            }
        }
    }
}

impl Side {
    fn spawn(listen: SocketAddr) -> Result<Side, UcxServeError> {
        let fail = |what: &str, e: std::io::Error| UcxServeError::Side(format!("{what}: {e}"));
        let (mut ours, theirs) = UnixStream::pair().map_err(|e| fail("socket pair", e))?;
        // Our own binary by its inode, as the join's guard is started (an upgrade that replaced the
        // file must not keep the relay from restarting its side).
        let mut cmd = Command::new("/proc/self/exe");
        if let Ok(path) = std::env::current_exe() {
            std::os::unix::process::CommandExt::arg0(&mut cmd, path.to_string_lossy().trim_end_matches(" (deleted)"));
        }
        cmd.arg(ucx_side::SUBCOMMAND).env(ucx_side::ENV_LISTEN, listen.to_string()).stdin(Stdio::from(std::os::fd::OwnedFd::from(theirs))).stdout(Stdio::null());
        let mut child = cmd.spawn().map_err(|e| fail("start it", e))?;
        // The command holds the side's end of the socket: drop it, or a side that dies before it is
        // ready would leave us waiting for the timeout instead of reading the end of the stream.
        drop(cmd);
        ours.set_read_timeout(Some(SIDE_ANSWER_MAX)).map_err(|e| fail("set its timeout", e))?;
        let ready = ucx_messages::receive::<Ready>(&mut ours);
        let end = |child: &mut Child| {
            let _ = child.kill();
            let _ = child.wait();
        };
        match ready {
            Ok(Some(Ready::Up { address, transports, listeners })) => Ok(Side { child, conn: ours, address, info: Info { transports, listeners }, generations: HashMap::new() }),
            Ok(Some(Ready::Failed(e))) => {
                end(&mut child);
                Err(UcxServeError::Start(e))
            }
            Ok(None) => {
                end(&mut child);
                Err(UcxServeError::Side("it ended before it was ready".into()))
            }
            Err(e) => {
                end(&mut child);
                Err(UcxServeError::Side(format!("read its first message: {}", io_text(&e))))
            }
        }
    }

    /// One request, one answer.
    fn ask(&mut self, req: &Request) -> Result<Answer, String> {
        ucx_messages::send(&mut self.conn, req).map_err(|e| format!("send the request: {}", io_text(&e)))?;
        match ucx_messages::receive::<Answer>(&mut self.conn) {
            Ok(Some(a)) => Ok(a),
            Ok(None) => Err("it closed its socket".into()),
            Err(e) => Err(format!("read its answer: {}", io_text(&e))),
        }
    }

    /// Tell the side to forget generations the relay no longer holds. An error leaves the side in
    /// an unknown state (a late answer would be read as the next one's): the caller drops it.
    fn forget_dropped(&mut self) -> Result<(), String> {
        let gone: Vec<u64> = self.generations.iter().filter(|(_, g)| g.strong_count() == 0).map(|(id, _)| *id).collect();
        for generation in gone {
            self.generations.remove(&generation);
            match self.ask(&Request::Forget { generation }) {
                Ok(Answer::Done) => {}
                Ok(other) => return Err(format!("forget generation {generation}: answered {other:?}")),
                Err(e) => return Err(format!("forget generation {generation}: {e}")),
            }
        }
        Ok(())
    }
}

/// An I/O error as the operator should read it: a read timeout is "no answer within …", not
/// "Resource temporarily unavailable".
fn io_text(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => format!("no answer within {SIDE_ANSWER_MAX:?}"),
        _ => e.to_string(),
    }
}

impl Drop for Side {
    fn drop(&mut self) {
        // It exits when its socket closes; a stuck one is killed.
        let _ = self.conn.shutdown(std::net::Shutdown::Both);
        let deadline = Instant::now() + limits::UCX_SIDE_EXIT_MAX;
        while Instant::now() < deadline {
            if !matches!(self.child.try_wait(), Ok(None)) {
                return;
            }
            std::thread::sleep(limits::UCX_SIDE_EXIT_POLL_EVERY); // Polling a child's exit with a deadline.
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for UcxServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.watcher.take() {
            t.thread().unpark();
            let _ = t.join();
        }
        self.state.lock().unwrap_or_else(|p| p.into_inner()).side = None;
    }
}
