//! The relay's UCX side: a context, a worker kept progressing by its own thread (UCX 1.13 emulates
//! GET with active messages over tcp and shared memory, so the relay must answer them; verbs needs it
//! for connection set-up and keep-alives), and registrations of generations' regions, one per
//! segment, made when an agent first asks for that segment's key.

use ucx::{Context, MemRegion, Worker};
use snapshot::Generation;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;
use transport::wire::{UcxKey, UCX_SEGMENT};

/// One generation's registrations over a read-only mapping of its memfd. Field order matters:
/// segments unregister before the mapping goes.
struct GenReg {
    segments: HashMap<u64, MemRegion>,
    map: memmap2::Mmap,
    gen: Weak<Generation>,
}

/// Why the relay's UCX side failed.
#[derive(Debug, thiserror::Error)]
pub enum UcxServeError {
    /// A UCX call failed.
    #[error(transparent)]
    Ucx(#[from] ucx::Error),
    /// The progress thread could not start or died before it said its address.
    #[error("UCX progress thread: {0}")]
    Thread(String),
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
    /// `--listen` is an address no network device here holds, so UCX's listener could not be kept
    /// on it.
    #[error("no network device holds {listen}, the relay's --listen address; UCX is restricted to that device (or to --ucx-devices)")]
    NoDevice {
        /// The relay's listen address.
        listen: std::net::SocketAddr,
    },
    /// Mapping the generation for registration failed.
    #[error("map region for ucx: {0}")]
    Map(#[from] snapshot::MapError),
}

/// The relay's UCX context, progress thread and registrations.
pub struct UcxServer {
    ctx: Arc<Context>,
    address: Vec<u8>,
    transports: Vec<String>,
    listeners: Vec<std::net::SocketAddr>,
    regs: Arc<Mutex<HashMap<u64, GenReg>>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}


impl UcxServer {
    /// Initialise UCX and start the progress thread. UCX's network devices are restricted to the
    /// one that carries `listen` (UCX's tcp transport listens on every device it uses), unless
    /// `listen` is unspecified (every device asked for) or `UCX_NET_DEVICES` names them
    /// (`relay --ucx-devices`).
    pub fn start(listen: std::net::SocketAddr) -> Result<UcxServer, UcxServeError> {
        let devices = if std::env::var_os("UCX_NET_DEVICES").is_some() || listen.ip().is_unspecified() {
            None
        } else {
            // An address no device holds cannot be listened on by UCX either: better no ucx than a
            // listener elsewhere.
            let device = ucx::netdev::device_of(listen.ip()).ok_or(UcxServeError::NoDevice { listen })?;
            Some(Context::net_devices_listening_on(&device)?)
        };
        let before = ucx::netdev::listening();
        let ctx = Context::with_options(None, devices.as_deref())?;
        let transports = ctx.transports();
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = std::sync::mpsc::channel();
        let regs: Arc<Mutex<HashMap<u64, GenReg>>> = Arc::default();
        let (c, s, r) = (ctx.clone(), stop.clone(), regs.clone());
        // The worker is created, progressed and destroyed on its own thread: nothing else touches it.
        // The same thread drops registrations of generations the relay has let go of: their read
        // mapping would otherwise keep the whole snapshot's memory alive until the next ucx attach.
        let thread = std::thread::Builder::new()
            .name("ucx-progress".into())
            .spawn(move || {
                let w = match Worker::new(&c) {
                    Ok(w) => w,
                    Err(e) => {
                        let _ = tx.send(Err(e));
                        return;
                    }
                };
                let _ = tx.send(w.address());
                let mut last_purge = std::time::Instant::now();
                let mut wait_failed = false;
                while !s.load(Ordering::SeqCst) {
                    if last_purge.elapsed() >= PURGE_EVERY {
                        purge(&r);
                        last_purge = std::time::Instant::now();
                    }
                    if !w.progress() {
                        if let Err(e) = w.wait(Duration::from_millis(100)) {
                            // Stopping here would leave every agent's GET unanswered while the
                            // relay still offers ucx: keep progressing, polling instead of sleeping
                            // on the event descriptor, and say so once.
                            if !wait_failed {
                                tracing::error!(error = %e, "UCX progress thread cannot sleep on its worker's events; polling every millisecond instead");
                                wait_failed = true;
                            }
                            std::thread::sleep(Duration::from_millis(1)); // Polling period, not synchronization.
                        }
                    }
                }
            })
            .map_err(|e| UcxServeError::Thread(format!("spawn: {e}")))?;
        let address = rx.recv().map_err(|_| UcxServeError::Thread("died before it started".into()))??;
        // The worker's interfaces are open now: what this process listens on beyond what it did
        // before is UCX's (relay start-up opens nothing else meanwhile).
        let listeners = ucx::netdev::listening().into_iter().filter(|a| !before.contains(a)).collect();
        Ok(UcxServer { ctx, address, transports, listeners, regs, stop, thread: Some(thread) })
    }

    /// The transports/devices UCX found here.
    pub fn transports(&self) -> Vec<String> {
        self.transports.clone()
    }

    /// The TCP addresses UCX listens on for this relay (its tcp transport's interfaces).
    pub fn listeners(&self) -> Vec<std::net::SocketAddr> {
        self.listeners.clone()
    }

    /// The key an agent needs to read `segment` of `gen`, serialized. Registers the segment on first
    /// use; forgets registrations of generations nobody holds any more.
    pub fn key(&self, gen: &Arc<Generation>, segment: u64) -> Result<Vec<u8>, UcxServeError> {
        let capacity = gen.region().capacity();
        let start = segment.checked_mul(UCX_SEGMENT).filter(|s| *s < capacity).ok_or(UcxServeError::BeyondRegion { segment })?;
        gen.check_readable(start, 1).map_err(|source| UcxServeError::Segment { segment, source })?;
        let len = UCX_SEGMENT.min(capacity - start);
        purge(&self.regs);
        let mut regs = self.regs.lock().unwrap_or_else(|p| p.into_inner());
        let reg = match regs.entry(gen.id()) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(e) => e.insert(GenReg { segments: HashMap::new(), map: map_read_only(gen)?, gen: Arc::downgrade(gen) }),
        };
        if !reg.segments.contains_key(&segment) {
            // SAFETY: [start, start+len) lies inside `reg.map` (len <= capacity - start), which lives
            // in the same GenReg and is dropped after its segments.
            let mr = unsafe { self.ctx.mem_map(reg.map.as_ptr().add(start as usize), len as usize) }?;
            tracing::debug!(generation = gen.id(), segment, bytes = len, "registered segment for ucx");
            reg.segments.insert(segment, mr);
        }
        let mr = &reg.segments[&segment];
        let rkey = mr.pack_rkey()?;
        Ok(UcxKey { worker: self.address.clone(), base: mr.addr(), len: mr.len() as u64, rkey }.encode())
    }
}

/// How often the progress thread looks for registrations of dropped generations.
const PURGE_EVERY: Duration = Duration::from_secs(1);

/// Unregister and unmap generations nobody holds any more.
fn purge(regs: &Mutex<HashMap<u64, GenReg>>) {
    regs.lock().unwrap_or_else(|p| p.into_inner()).retain(|_, r| r.gen.strong_count() > 0);
}

fn map_read_only(gen: &Generation) -> Result<memmap2::Mmap, UcxServeError> {
    Ok(snapshot::map_sealed_read_only(gen.region().file(), gen.region().capacity())?)
}

impl Drop for UcxServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.regs.lock().unwrap_or_else(|p| p.into_inner()).clear();
    }
}
