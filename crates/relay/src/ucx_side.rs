//! The relay's UCX side: a process of its own, started by the relay's UCX service (`ucx_serve`) from the
//! relay's own binary (`fastrepl relay-ucx-side`, hidden). It ends when the relay closes its socket
//! or ends.
//!
//! Why a process: UCX runs its protocol inside whoever calls it, and UCX 1.13 aborts that process
//! when a peer dies at the wrong moment: an agent killed while the relay answers its endpoint's
//! set-up (`ucp_request.c:684 … got REP message`, an assertion removed upstream in openucx/ucx#8175),
//! or while it answers the agent's GET (`ucp_request.inl:346 Fatal: … Endpoint timeout`). In the
//! relay's process that abort took the snapshot, the stream log and every other agent with it. Here
//! it takes this process only; the relay starts another and agents reconnect to its new address.
//!
//! The side holds a UCX context, a worker kept progressing by its own thread, and registrations of
//! generations' regions, one per segment. It opens a generation's memfd through the relay's
//! `/proc/<relay>/fd/<n>` (a child of the relay, same user: no descriptor passing needed) and maps it
//! read-only. The relay asks over a Unix socket (this process's stdin), one message at a time
//! ([`crate::ucx_messages`]).

use crate::ucx_messages::{receive, send, Answer, Ready, Request};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use ucx::{Context, MemRegion, Worker};

/// The hidden subcommand that runs [`run`].
pub const SUBCOMMAND: &str = "relay-ucx-side";
/// Where the relay listens (the side restricts UCX's devices to the one that holds it).
pub const ENV_LISTEN: &str = "FASTREPL_UCX_SIDE_LISTEN";

/// One generation's registrations over a read-only mapping of its memfd. Field order matters:
/// segments unregister before the mapping goes.
struct GenReg {
    segments: HashMap<u64, MemRegion>,
    map: memmap2::Mmap,
}

/// The side's process: answer the relay until it closes the socket. The exit code is the outcome.
/// `before_exit` runs before the process ends at once (the relay gone): the binary's logging writes
/// its queued lines there.
pub fn run(before_exit: fn()) -> i32 {
    // We end when the relay's end of the socket closes, which the kernel does when the relay ends,
    // however it ends. (Not PR_SET_PDEATHSIG: it fires when the *thread* that started us ends, and
    // the relay may start a side from a connection's thread.)
    let relay = std::os::unix::process::parent_id();
    // SAFETY: the relay started us with one end of a Unix socket pair as stdin; nothing else in this
    // process owns descriptor 0.
    let mut conn = unsafe { <UnixStream as std::os::fd::FromRawFd>::from_raw_fd(0) };
    let listen: Option<SocketAddr> = std::env::var(ENV_LISTEN).ok().and_then(|a| a.parse().ok());
    let Some(listen) = listen else {
        let _ = send(&mut conn, &Ready::Failed(format!("{ENV_LISTEN} is not an address")));
        return 1;
    };
    let side = match Side::start(listen) {
        Ok(s) => s,
        Err(e) => {
            let _ = send(&mut conn, &Ready::Failed(e));
            return 1;
        }
    };
    if send(&mut conn, &Ready::Up { address: side.address.clone(), transports: side.ctx.transports(), listeners: side.listeners.clone() }).is_err() {
        return 1;
    }
    let mut regs: HashMap<u64, GenReg> = HashMap::new();
    loop {
        let req: Request = match receive(&mut conn) {
            Ok(Some(r)) => r,
            // The relay closed us, or ended. Exit at once: a progress thread stuck in UCX must not
            // keep this process alive.
            Ok(None) => {
                before_exit();
                std::process::exit(0)
            }
            Err(e) => {
                tracing::error!(error = %e, "the relay's UCX side: bad request; stopping");
                return 1;
            }
        };
        let answer = match req {
            Request::Register { generation, fd, capacity, segment, start, len } => match side.register(&mut regs, relay, generation, fd, capacity, segment, start, len) {
                Ok(a) => a,
                Err(e) => Answer::Failed(e),
            },
            Request::Forget { generation } => {
                regs.remove(&generation);
                Answer::Done
            }
        };
        if send(&mut conn, &answer).is_err() {
            return 1;
        }
    }
}

/// UCX in this process: the context, its worker's address and listeners, the progress thread.
struct Side {
    ctx: Arc<Context>,
    address: Vec<u8>,
    listeners: Vec<SocketAddr>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Side {
    /// Initialise UCX and start the progress thread. UCX's network devices are restricted to the
    /// one that carries `listen` (UCX's tcp transport listens on every device it uses), unless
    /// `listen` is unspecified (every device asked for) or `UCX_NET_DEVICES` names them.
    fn start(listen: SocketAddr) -> Result<Side, String> {
        let devices = if std::env::var_os("UCX_NET_DEVICES").is_some() || listen.ip().is_unspecified() {
            None
        } else {
            // An address no device holds cannot be listened on by UCX either: better no ucx than a
            // listener elsewhere.
            let device =
                ucx::netdev::device_of(listen.ip()).ok_or_else(|| format!("no network device holds {listen}, the relay's --listen address; UCX is restricted to that device (or to --ucx-devices)"))?;
            Some(Context::net_devices_listening_on(&device).map_err(|e| e.to_string())?)
        };
        let before = ucx::netdev::listening();
        let ctx = Context::with_options(None, devices.as_deref()).map_err(|e| e.to_string())?;
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = std::sync::mpsc::channel();
        let (c, s) = (ctx.clone(), stop.clone());
        // The worker is created, progressed and destroyed on its own thread: nothing else touches it.
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
                let mut wait_failed = false;
                while !s.load(Ordering::SeqCst) {
                    if !w.progress() {
                        if let Err(e) = w.wait(limits::UCX_SIDE_PROGRESS_WAIT_MAX) {
                            // Stopping here would leave every agent's GET unanswered: keep
                            // progressing, polling instead of sleeping on the event descriptor.
                            if !wait_failed {
                                tracing::error!(error = %e, "UCX progress thread cannot sleep on its worker's events; polling every millisecond instead");
                                wait_failed = true;
                            }
                            std::thread::sleep(limits::UCX_SIDE_PROGRESS_POLL_EVERY);
                            // Polling period, not synchronization.
                        }
                    }
                }
            })
            .map_err(|e| format!("spawn the UCX progress thread: {e}"))?;
        let address = rx.recv().map_err(|_| "the UCX progress thread died before it started".to_string())?.map_err(|e| e.to_string())?;
        // The worker's interfaces are open now: what this process listens on beyond what it did
        // before is UCX's.
        let listeners = ucx::netdev::listening().into_iter().filter(|a| !before.contains(a)).collect();
        Ok(Side { ctx, address, listeners, stop, thread: Some(thread) })
    }

    /// Register one segment (mapping the generation's region on first use) and pack its key.
    #[allow(clippy::too_many_arguments)]
    fn register(&self, regs: &mut HashMap<u64, GenReg>, relay: u32, generation: u64, fd: i32, capacity: u64, segment: u64, start: u64, len: u64) -> Result<Answer, String> {
        if start.checked_add(len).is_none_or(|end| end > capacity) || len == 0 {
            return Err(format!("segment {segment} [{start}, +{len}) is not inside the region of {capacity} bytes"));
        }
        let reg = match regs.entry(generation) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(e) => {
                let path = format!("/proc/{relay}/fd/{fd}");
                let file = std::fs::File::open(&path).map_err(|e| format!("open generation {generation}'s region at {path}: {e}"))?;
                let map = snapshot::map_region_read_only(&file, capacity).map_err(|e| format!("map generation {generation}'s region: {e}"))?;
                e.insert(GenReg { segments: HashMap::new(), map })
            }
        };
        if reg.map.len() as u64 != capacity {
            return Err(format!("generation {generation}: region of {capacity} bytes asked, {} mapped", reg.map.len()));
        }
        if !reg.segments.contains_key(&segment) {
            // SAFETY: [start, start+len) lies inside `reg.map` (checked above against capacity, which
            // is the mapping's length), which lives in the same GenReg and is dropped after its
            // segments.
            let mr = unsafe { self.ctx.mem_map(reg.map.as_ptr().add(start as usize), len as usize) }.map_err(|e| e.to_string())?;
            tracing::debug!(generation, segment, bytes = len, "registered segment for ucx");
            reg.segments.insert(segment, mr);
        }
        let mr = &reg.segments[&segment];
        let rkey = mr.pack_rkey().map_err(|e| e.to_string())?;
        Ok(Answer::Key { base: mr.addr(), len: mr.len() as u64, rkey })
    }
}

impl Drop for Side {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
