//! Safe wrappers over UCX's UCP API: one RAII type per handle.
//!
//! - [`Context`]: `ucp_context_h` (RMA + wakeup features; shared by the workers of several threads).
//! - [`Worker`]: `ucp_worker_h`; progressed by whoever owns it.
//! - [`Endpoint`]: `ucp_ep_h` to a remote worker; holds an `Arc` of its worker, closed on drop.
//! - [`MemRegion`]: `ucp_mem_h` from `ucp_mem_map` of memory we own elsewhere; packs remote keys.
//! - [`RemoteKey`]: `ucp_rkey_h` unpacked on an endpoint; holds an `Rc` of it, so the endpoint (and
//!   its worker) is not destroyed while a key exists. An endpoint closed early to end GETs that could
//!   not be cancelled (below) refuses everything after; its keys are destroyed as usual.
//!
//! Ownership follows rust-ibverbs: every child holds a counted reference to its parent's inner handle
//! (the context by `Arc`, being thread-safe; a worker and its endpoints by `Rc`), so drop order is
//! whatever the caller likes and no lifetime has to be erased. UCX workers here are single-threaded:
//! `Rc` makes a worker and every handle made from it `!Send` and `!Sync` by construction. A caller
//! that must move a whole set to another thread wraps the set in one owner and vouches for it there
//! (see the agent's UCX reader).
//! - [`Get`]: one `ucp_get_nbx` in flight that **owns** its destination buffer until UCX is done
//!   with it: dropping an in-flight `Get` closes its endpoint by force (`ucp_request_cancel` cancels
//!   receives only; a forced close completes every request on the endpoint) and waits for the
//!   completion; only if UCX never completes it is the buffer leaked rather than freed under UCX's feet.
//! - [`Endpoint::get_into`]: many reads into borrowed slices, issued together and all completed (or
//!   ended by closing the endpoint by force) before it returns — the borrow cannot end while UCX
//!   writes.
//!
//! Lessons from async-ucx, the nearest Rust wrapper: no panics on UCX errors (everything is a `Result`), no request
//! pointer used after `ucp_request_free`, and no buffer released while a request may still write it.
#![deny(missing_docs)]

use std::ffi::CStr;
use std::os::raw::c_void;
use std::ptr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};
use ucx_sys as sys;

pub mod netdev;

/// A UCX failure, naming the call that failed.
#[derive(Debug, thiserror::Error)]
#[error("{op}: {message} (UCX status {status})")]
pub struct Error {
    /// The UCX call or our operation.
    pub op: &'static str,
    /// UCX's status code.
    pub status: i32,
    /// `ucs_status_string` of it, or our own explanation.
    pub message: String,
}

impl Error {
    fn from_status(op: &'static str, status: sys::ucs_status_t) -> Error {
        // SAFETY: ucs_status_string returns a pointer to a static NUL-terminated string for any value.
        let message = unsafe { CStr::from_ptr(sys::ucs_status_string(status)) }.to_string_lossy().into_owned();
        Error { op, status: status as i32, message }
    }
}

fn check(op: &'static str, status: sys::ucs_status_t) -> Result<(), Error> {
    if status == sys::UCS_OK as sys::ucs_status_t {
        Ok(())
    } else {
        Err(Error::from_status(op, status))
    }
}

/// UCX transports that do real one-sided RDMA (verbs RC/DC/UD on InfiniBand or RoCE, and
/// Cray's uGNI). TCP, shared memory (posix, sysv, xpmem, cma, knem) and self are not.
pub fn is_rdma_transport(name: &str) -> bool {
    let n = name.split('/').next().unwrap_or(name);
    ["rc", "rc_verbs", "rc_mlx5", "dc", "dc_mlx5", "ud", "ud_verbs", "ud_mlx5", "ugni_rdma", "ugni_udt"].contains(&n)
}

/// Settings that make GET over UCX's TCP transport fast (measured on a 2-core machine, loopback, 1–4 MiB GETs: ~1 GiB/s default,
/// ~3 GiB/s tuned) and keep shared memory available with peer error handling. Each applies only
/// when the user has not set `UCX_<NAME>` in the environment.
pub const TUNED_DEFAULTS: &[(&str, &str)] = &[("TCP_TX_SEG_SIZE", "1m"), ("TCP_RX_SEG_SIZE", "1m"), ("TCP_SNDBUF", "8m"), ("TCP_RCVBUF", "8m"), ("MM_ERROR_HANDLING", "y")];

/// Put [`TUNED_DEFAULTS`] into the environment where the user has not set them. UCX reads its transport settings from the environment (`ucp_config_modify` does not reach
/// transport-level keys in 1.13), so this must run at the start of `main`, before any thread exists.
pub fn apply_tuned_env() {
    // Set only what the transports UCX will load can use: UCX warns (on stdout) about variables
    // that no loaded component read.
    let tls = std::env::var("UCX_TLS").unwrap_or_default().to_ascii_lowercase();
    let uses = |names: &[&str]| tls.is_empty() || tls.split(',').any(|t| t == "all" || names.iter().any(|n| t.trim_start_matches('^') == *n));
    for (name, value) in TUNED_DEFAULTS {
        let applies = if name.starts_with("TCP_") { uses(&["tcp"]) } else { uses(&["sm", "shm", "mm", "posix", "sysv", "xpmem"]) };
        let key = format!("UCX_{name}");
        if applies && std::env::var_os(&key).is_none() {
            std::env::set_var(key, value);
        }
    }
}

/// A UCP context: the resources (devices, memory domains) of this process.
pub struct Context {
    h: sys::ucp_context_h,
}

// SAFETY: the context is created with `mt_workers_shared`, which makes UCX serialise its own access
// to shared state; context-level calls (mem_map, rkey_pack, print_info) may come from any thread.
unsafe impl Send for Context {}
// SAFETY: as above.
unsafe impl Sync for Context {}

impl Context {
    /// Read UCX's configuration (environment; see [`apply_tuned_env`]) and initialise a context
    /// with RMA and wakeup.
    pub fn new() -> Result<Arc<Context>, Error> {
        Self::with_tls(None)
    }

    /// As [`Context::new`], restricted to the UCX transports `tls` names (UCX's `UCX_TLS` syntax,
    /// e.g. `tcp` or `sm`) when given; for measuring one UCX transport at a time in one process.
    pub fn with_tls(tls: Option<&str>) -> Result<Arc<Context>, Error> {
        Self::with_options(tls, None)
    }

    /// As [`Context::with_tls`], and restricted to the network devices `net_devices` names (UCX's
    /// `UCX_NET_DEVICES` syntax, e.g. `lo` or `eth0,mlx5_0:1`) when given. UCX's tcp transport
    /// listens on every network device it uses, so this is what keeps its listener where the
    /// operator asked. A `UCX_NET_DEVICES` in the environment wins (the operator said so).
    /// Shared-memory devices are not network devices and stay available.
    pub fn with_options(tls: Option<&str>, net_devices: Option<&str>) -> Result<Arc<Context>, Error> {
        let mut config: *mut sys::ucp_config_t = ptr::null_mut();
        // SAFETY: null prefix/filename mean "the defaults and the environment"; `config` is writable.
        check("ucp_config_read", unsafe { sys::ucp_config_read(ptr::null(), ptr::null(), &mut config) })?;
        let net_devices = net_devices.filter(|_| std::env::var_os("UCX_NET_DEVICES").is_none());
        for (key, op, value) in [(c"TLS", "ucp_config_modify TLS", tls), (c"NET_DEVICES", "ucp_config_modify NET_DEVICES", net_devices)] {
            let Some(value) = value else { continue };
            let v = match std::ffi::CString::new(value) {
                Ok(v) => v,
                Err(_) => {
                    // SAFETY: released once on this early return.
                    unsafe { sys::ucp_config_release(config) };
                    return Err(Error { op, status: sys::UCS_ERR_INVALID_PARAM as i32, message: "NUL in the list".into() });
                }
            };
            // SAFETY: live config; NUL-terminated strings that outlive the call.
            let st = unsafe { sys::ucp_config_modify(config, key.as_ptr(), v.as_ptr()) };
            if st != sys::UCS_OK as sys::ucs_status_t {
                // SAFETY: released once on this early return.
                unsafe { sys::ucp_config_release(config) };
                return Err(Error::from_status(op, st));
            }
        }
        let params = sys::ucp_params_t {
            field_mask: (sys::UCP_PARAM_FIELD_FEATURES | sys::UCP_PARAM_FIELD_MT_WORKERS_SHARED) as u64,
            features: (sys::UCP_FEATURE_RMA | sys::UCP_FEATURE_WAKEUP) as u64,
            mt_workers_shared: 1,
            ..Default::default()
        };
        let mut h: sys::ucp_context_h = ptr::null_mut();
        // SAFETY: params and config are valid for the call; `h` is writable.
        let st = unsafe { sys::ucp_init(&params, config, &mut h) };
        // SAFETY: config came from ucp_config_read and is released exactly once.
        unsafe { sys::ucp_config_release(config) };
        check("ucp_init", st)?;
        Ok(Arc::new(Context { h }))
    }

    /// The transports/devices this context can use, as `transport/device` (e.g. `tcp/lo`,
    /// `rc_mlx5/mlx5_0:1`, `posix/memory`), from UCX's own description of its resources.
    pub fn transports(&self) -> Vec<String> {
        // SAFETY: self.h is a live context; the callback only writes to the stream.
        let text = print_to_string(|f| unsafe { sys::ucp_context_print_info(self.h, f) });
        parse_resources(&text)
    }

    /// A `NET_DEVICES` list that keeps UCX's tcp transport (which listens on every network device
    /// it uses) on `device` alone, and every RDMA device (which opens no TCP listener) available:
    /// `device` and the devices of the RDMA transports a fresh context finds.
    pub fn net_devices_listening_on(device: &str) -> Result<String, Error> {
        let mut devices = vec![device.to_string()];
        for t in Context::new()?.transports() {
            if let Some((_, dev)) = t.split_once('/').filter(|_| is_rdma_transport(&t)) {
                if !devices.iter().any(|d| d == dev) {
                    devices.push(dev.to_string());
                }
            }
        }
        Ok(devices.join(","))
    }

    /// The transports a fresh context here finds (for `auto` selection).
    pub fn local_transports() -> Result<Vec<String>, Error> {
        Ok(Context::new()?.transports())
    }

    /// Register `len` bytes at `addr` for remote reads. The memory must stay mapped for the life of
    /// the returned region (the caller owns it; see [`MemRegion`]).
    ///
    /// # Safety
    /// `[addr, addr+len)` must be a mapping that outlives the `MemRegion`.
    pub unsafe fn mem_map(self: &Arc<Self>, addr: *const u8, len: usize) -> Result<MemRegion, Error> {
        let params = sys::ucp_mem_map_params_t {
            field_mask: (sys::UCP_MEM_MAP_PARAM_FIELD_ADDRESS | sys::UCP_MEM_MAP_PARAM_FIELD_LENGTH | sys::UCP_MEM_MAP_PARAM_FIELD_PROT) as u64,
            address: addr as *mut c_void,
            length: len,
            // Read-only: the region is mapped PROT_READ, and verbs must not ask for write access to it.
            prot: sys::UCP_MEM_MAP_PROT_LOCAL_READ | sys::UCP_MEM_MAP_PROT_REMOTE_READ,
            ..Default::default()
        };
        let mut memh: sys::ucp_mem_h = ptr::null_mut();
        // SAFETY: live context; params valid; the caller guarantees the memory outlives the handle.
        check("ucp_mem_map", unsafe { sys::ucp_mem_map(self.h, &params, &mut memh) })?;
        Ok(MemRegion { memh, ctx: self.clone(), addr: addr as u64, len })
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: every worker and registration holds an Arc<Context>, so none outlives this.
        unsafe { sys::ucp_cleanup(self.h) };
    }
}

/// Run `f` with a `FILE*` that collects its output into a string.
fn print_to_string(f: impl FnOnce(*mut sys::FILE)) -> String {
    let mut buf: *mut libc::c_char = ptr::null_mut();
    let mut size: libc::size_t = 0;
    // SAFETY: open_memstream gets two writable locals it updates on fflush/fclose.
    let stream = unsafe { libc::open_memstream(&mut buf, &mut size) };
    if stream.is_null() {
        return String::new();
    }
    f(stream.cast());
    // SAFETY: the stream is ours; after fclose `buf` holds `size` bytes we must free.
    unsafe {
        libc::fclose(stream);
        let s = String::from_utf8_lossy(std::slice::from_raw_parts(buf as *const u8, size)).into_owned();
        libc::free(buf.cast());
        s
    }
}

/// Pull `transport/device` names out of `ucp_context_print_info` output, whose resource lines look
/// like `#     resource 2  :  md 1  dev 1  flags -- tcp/lo`.
fn parse_resources(text: &str) -> Vec<String> {
    let mut v: Vec<String> =
        text.lines().filter(|l| l.contains("resource") && l.contains("flags")).filter_map(|l| l.split_whitespace().last()).filter(|t| t.contains('/')).map(str::to_string).collect();
    v.dedup();
    v
}

/// The worker handle itself, shared (by `Rc`) between the [`Worker`] and its endpoints and requests;
/// destroyed when the last of them goes.
struct WorkerInner {
    h: sys::ucp_worker_h,
    _ctx: Arc<Context>,
}

impl Drop for WorkerInner {
    fn drop(&mut self) {
        // SAFETY: the last reference is gone, so every endpoint, key and request of this worker is gone.
        unsafe { sys::ucp_worker_destroy(self.h) };
    }
}

impl WorkerInner {
    fn progress(&self) -> bool {
        // SAFETY: live worker, used from the one thread that holds its handles (they are !Send).
        unsafe { sys::ucp_worker_progress(self.h) != 0 }
    }

    fn wait(&self, timeout: Duration) -> Result<(), Error> {
        let mut fd: libc::c_int = -1;
        // SAFETY: live worker created in a context with the WAKEUP feature; `fd` writable.
        check("ucp_worker_get_efd", unsafe { sys::ucp_worker_get_efd(self.h, &mut fd) })?;
        // SAFETY: live worker.
        let st = unsafe { sys::ucp_worker_arm(self.h) };
        if st == sys::UCS_ERR_BUSY as sys::ucs_status_t {
            return Ok(()); // events pending: progress again
        }
        check("ucp_worker_arm", st)?;
        let mut pfd = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
        // SAFETY: one valid pollfd on the stack.
        unsafe { libc::poll(&mut pfd, 1, timeout.as_millis().min(i32::MAX as u128) as i32) };
        Ok(())
    }
}

/// A worker: the progress engine. It and everything made from it stay on one thread (`!Send`).
pub struct Worker {
    inner: Rc<WorkerInner>,
}

impl Worker {
    /// A worker for one thread.
    pub fn new(ctx: &Arc<Context>) -> Result<Worker, Error> {
        Self::with_mode(ctx, sys::UCS_THREAD_MODE_SINGLE)
    }

    fn with_mode(ctx: &Arc<Context>, mode: sys::ucs_thread_mode_t) -> Result<Worker, Error> {
        let params = sys::ucp_worker_params_t { field_mask: sys::UCP_WORKER_PARAM_FIELD_THREAD_MODE as u64, thread_mode: mode, ..Default::default() };
        let mut h: sys::ucp_worker_h = ptr::null_mut();
        // SAFETY: live context, valid params, writable handle.
        check("ucp_worker_create", unsafe { sys::ucp_worker_create(ctx.h, &params, &mut h) })?;
        Ok(Worker { inner: Rc::new(WorkerInner { h, _ctx: ctx.clone() }) })
    }

    /// This worker's address, for a peer's `ucp_ep_create`.
    pub fn address(&self) -> Result<Vec<u8>, Error> {
        let mut addr: *mut sys::ucp_address_t = ptr::null_mut();
        let mut len: usize = 0;
        // SAFETY: live worker; both out-pointers writable.
        check("ucp_worker_get_address", unsafe { sys::ucp_worker_get_address(self.inner.h, &mut addr, &mut len) })?;
        // SAFETY: UCX returned `len` readable bytes at `addr`, released right after the copy.
        let v = unsafe { std::slice::from_raw_parts(addr as *const u8, len) }.to_vec();
        // SAFETY: releasing the address we were given, once.
        unsafe { sys::ucp_worker_release_address(self.inner.h, addr) };
        Ok(v)
    }

    /// Make progress on outstanding operations; returns whether anything happened.
    pub fn progress(&self) -> bool {
        self.inner.progress()
    }

    /// Sleep until the worker has something to do or `timeout` passes (UCX's wakeup: arm, then poll
    /// the worker's event descriptor). Returns early, without sleeping, if events are pending.
    pub fn wait(&self, timeout: Duration) -> Result<(), Error> {
        self.inner.wait(timeout)
    }

    /// Connect to the worker whose [`Worker::address`] is `remote`, with peer failure detection (a
    /// dead peer fails our requests instead of hanging them).
    pub fn connect(&self, remote: &[u8]) -> Result<Endpoint, Error> {
        let failed = Box::new(std::sync::atomic::AtomicI32::new(0));
        let params = sys::ucp_ep_params_t {
            field_mask: (sys::UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | sys::UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | sys::UCP_EP_PARAM_FIELD_ERR_HANDLER) as u64,
            address: remote.as_ptr() as *const sys::ucp_address_t,
            err_mode: sys::UCP_ERR_HANDLING_MODE_PEER,
            err_handler: sys::ucp_err_handler { cb: Some(on_ep_error), arg: &*failed as *const _ as *mut c_void },
            ..Default::default()
        };
        let mut h: sys::ucp_ep_h = ptr::null_mut();
        // SAFETY: live worker; `remote` outlives the call (UCX copies the address); the error handler
        // argument points into a Box the Endpoint keeps until after the endpoint is closed.
        check("ucp_ep_create", unsafe { sys::ucp_ep_create(self.inner.h, &params, &mut h) })?;
        Ok(Endpoint { inner: Rc::new(EndpointInner { h, worker: self.inner.clone(), failed, closed: Default::default(), close_incomplete: Default::default() }) })
    }
}

unsafe extern "C" fn on_ep_error(arg: *mut c_void, _ep: sys::ucp_ep_h, status: sys::ucs_status_t) {
    // SAFETY: `arg` is the AtomicI32 boxed in the Endpoint, alive until the endpoint is closed, and
    // UCX calls this only before or during close.
    let failed = unsafe { &*(arg as *const std::sync::atomic::AtomicI32) };
    failed.store(status as i32, std::sync::atomic::Ordering::SeqCst);
}

/// The endpoint handle, shared by the [`Endpoint`] and the remote keys unpacked on it; closed when
/// the last of them goes (and before its worker, which it holds).
struct EndpointInner {
    h: sys::ucp_ep_h,
    worker: Rc<WorkerInner>,
    failed: Box<std::sync::atomic::AtomicI32>,
    /// Closed early, to end GETs that could not be cancelled (see [`Endpoint::get_into`]); the
    /// handle is gone and nothing may be started on it.
    closed: std::cell::Cell<bool>,
    /// The close did not complete in time: UCX may still call the error handler.
    close_incomplete: std::cell::Cell<bool>,
}

/// A connection to a remote worker.
pub struct Endpoint {
    inner: Rc<EndpointInner>,
}

/// Idle progress polls before a waiting GET sleeps on the worker's event descriptor.
const SPIN_BEFORE_WAIT: u32 = 256;

/// Longest sleep on the worker's event descriptor. The descriptor wakes us when anything arrives, so
/// this only bounds how late a deadline is noticed. It was 1 ms: each expiry was followed by another
/// round of idle spinning, and agents waiting on a slow link burnt a quarter of a core each doing it.
const WAIT_MAX: Duration = limits::UCX_WAIT_MAX;

/// How long closing an endpoint, or cancelling a request, may take before we give up on it.
const CLEANUP_MAX: Duration = limits::UCX_CLEANUP_MAX;

impl Endpoint {
    /// The peer failed (UCX reported an error on this endpoint).
    pub fn failure(&self) -> Option<Error> {
        match self.inner.failed.load(std::sync::atomic::Ordering::SeqCst) {
            0 => None,
            s => Some(Error::from_status("endpoint failed", s as sys::ucs_status_t)),
        }
    }

    /// An error for `op` if this endpoint was closed early (its handle is gone).
    fn open(&self, op: &'static str) -> Result<(), Error> {
        if self.inner.closed.get() {
            return Err(Error { op, status: sys::UCS_ERR_CANCELED as i32, message: "endpoint closed after a failed read".into() });
        }
        Ok(())
    }

    /// Unpack a remote key the peer packed with [`MemRegion::pack_rkey`].
    pub fn unpack_rkey(&self, packed: &[u8]) -> Result<RemoteKey, Error> {
        self.open("ucp_ep_rkey_unpack")?;
        let mut h: sys::ucp_rkey_h = ptr::null_mut();
        // SAFETY: live endpoint; `packed` is readable for the call (UCX copies what it needs).
        check("ucp_ep_rkey_unpack", unsafe { sys::ucp_ep_rkey_unpack(self.inner.h, packed.as_ptr().cast(), &mut h) })?;
        Ok(RemoteKey { h, ep: self.inner.clone() })
    }

    /// What UCX chose for this endpoint: its lanes, as `ucp_ep_print_info` describes them.
    pub fn describe(&self) -> String {
        if self.open("ucp_ep_print_info").is_err() {
            return String::new();
        }
        // SAFETY: live endpoint; the callback only writes to the stream.
        print_to_string(|f| unsafe { sys::ucp_ep_print_info(self.inner.h, f) })
    }

    /// The transport/device carrying RMA (GET) on this endpoint, e.g. `tcp/lo` or `rc_mlx5/mlx5_0:1`.
    pub fn rma_transport(&self) -> Option<String> {
        rma_lane(&self.describe())
    }

    /// Start one GET of `buf.len()` bytes from `remote_addr` under `rkey` into `buf`, which the
    /// returned [`Get`] owns until the read is complete.
    pub fn get(&self, buf: Vec<u8>, remote_addr: u64, rkey: &RemoteKey) -> Result<Get, Error> {
        let mut buf = buf;
        let req = self.start_get(buf.as_mut_ptr(), buf.len(), remote_addr, rkey)?;
        Ok(Get { req, buf: Some(buf), ep: self.inner.clone() })
    }

    fn start_get(&self, dst: *mut u8, len: usize, remote_addr: u64, rkey: &RemoteKey) -> Result<*mut c_void, Error> {
        if !Rc::ptr_eq(&rkey.ep, &self.inner) {
            return Err(Error { op: "ucp_get_nbx", status: sys::UCS_ERR_INVALID_PARAM as i32, message: "remote key unpacked on another endpoint".into() });
        }
        self.open("ucp_get_nbx")?;
        if let Some(e) = self.failure() {
            return Err(e);
        }
        let param = sys::ucp_request_param_t::default();
        // SAFETY: live endpoint and rkey (unpacked on this endpoint, checked above); `dst` is writable for `len`
        // bytes and the caller keeps it alive until the request completes (Get owns it; get_into
        // blocks until completion). No callback: completion is polled with ucp_request_check_status.
        let p = unsafe { sys::ucp_get_nbx(self.inner.h, dst.cast(), len, remote_addr, rkey.h, &param) };
        if sys::ucs_ptr_is_err(p) {
            return Err(Error::from_status("ucp_get_nbx", sys::ucs_ptr_status(p)));
        }
        Ok(p) // NULL: completed in place
    }

    /// Read every `(destination, remote address)` pair under `rkey`, all in flight together, and
    /// return when all are complete. On error or when `deadline` passes, the rest are ended before
    /// this returns, so the borrowed slices are never written afterwards.
    pub fn get_into(&self, ops: &mut [(&mut [u8], u64)], rkey: &RemoteKey, deadline: Instant) -> Result<(), Error> {
        self.get_into_unless(ops, rkey, deadline, &mut || None)
    }

    /// As [`Endpoint::get_into`], and gives up early when `gone()` names a reason (checked each time
    /// the worker has been idle for [`SPIN_BEFORE_WAIT`] polls and before it sleeps): the caller knows the
    /// peer is gone by other means (its TCP connection closed), which UCX's shared-memory
    /// transports cannot tell. Giving up closes this endpoint: GETs cannot be cancelled one by one
    /// (`ucp_request_cancel` only cancels receives), but a forced close completes all of them.
    pub fn get_into_unless(&self, ops: &mut [(&mut [u8], u64)], rkey: &RemoteKey, deadline: Instant, gone: &mut dyn FnMut() -> Option<String>) -> Result<(), Error> {
        let worker = &self.inner.worker;
        let mut pending: Vec<*mut c_void> = Vec::with_capacity(ops.len());
        let mut result = Ok(());
        for (dst, addr) in ops.iter_mut() {
            match self.start_get(dst.as_mut_ptr(), dst.len(), *addr, rkey) {
                Ok(p) if p.is_null() => {}
                Ok(p) => pending.push(p),
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        let mut idle = 0u32;
        while result.is_ok() && !pending.is_empty() {
            // Spin while UCX makes progress (lowest latency); after a run of idle polls, sleep on the
            // worker's event descriptor instead, so readers waiting on a busy relay do not take the
            // CPU it needs (GET over tcp and shared memory is served by the relay's progress thread).
            if worker.progress() {
                idle = 0;
            } else {
                idle += 1;
                if idle >= SPIN_BEFORE_WAIT {
                    idle = 0;
                    if let Err(e) = worker.wait(WAIT_MAX) {
                        result = Err(e); // never `?` here: pending requests must be completed below
                    } else if let Some(why) = gone() {
                        result = Err(Error { op: "GET", status: sys::UCS_ERR_CONNECTION_RESET as i32, message: why });
                    }
                }
            }
            free_completed(&mut pending, &mut result);
            if result.is_ok() && !pending.is_empty() && Instant::now() > deadline {
                result = Err(Error::from_status("GET (deadline passed)", sys::UCS_ERR_TIMED_OUT));
            }
        }
        // Whatever is left must finish before the borrows end.
        if !self.inner.end(&mut pending) {
            // UCX never released a request: the destination may still be written. We cannot
            // return while that is possible; this is a UCX bug, so fail loudly.
            std::process::abort();
        }
        result
    }
}

/// Free the requests in `pending` that have completed; the first failure goes to `result`.
fn free_completed(pending: &mut Vec<*mut c_void>, result: &mut Result<(), Error>) {
    let mut i = 0;
    while i < pending.len() {
        // SAFETY: each pointer is a live request (not yet freed).
        let st = unsafe { sys::ucp_request_check_status(pending[i]) };
        if st == sys::UCS_INPROGRESS as sys::ucs_status_t {
            i += 1;
            continue;
        }
        // SAFETY: completed request, freed once and removed from the list.
        unsafe { sys::ucp_request_free(pending.swap_remove(i)) };
        if st != sys::UCS_OK as sys::ucs_status_t && result.is_ok() {
            *result = Err(Error::from_status("GET", st));
        }
    }
}

impl EndpointInner {
    /// End the requests in `pending` (freeing each): if any is still in progress, close the endpoint
    /// by force, which completes every request on it (a GET cannot be cancelled alone:
    /// `ucp_request_cancel` cancels receives only), and progress until they have completed or
    /// [`CLEANUP_MAX`] passes. False if one never completed: UCX may still write its destination.
    fn end(&self, pending: &mut Vec<*mut c_void>) -> bool {
        let mut ignored = Ok(());
        free_completed(pending, &mut ignored);
        if pending.is_empty() {
            return true;
        }
        self.close();
        let until = Instant::now() + CLEANUP_MAX;
        while !pending.is_empty() && Instant::now() < until {
            self.worker.progress();
            free_completed(pending, &mut ignored);
        }
        pending.is_empty()
    }

    /// Close the endpoint by force (its outstanding requests complete, cancelled), once, and
    /// progress until the close itself completes or [`CLEANUP_MAX`] passes.
    fn close(&self) {
        if self.closed.replace(true) {
            return;
        }
        let param = sys::ucp_request_param_t { op_attr_mask: sys::UCP_OP_ATTR_FIELD_FLAGS, flags: sys::UCP_EP_CLOSE_FLAG_FORCE, ..Default::default() };
        // SAFETY: live endpoint, closed once (guarded by `closed`); remote keys unpacked on it may
        // outlive it: destroying an rkey does not touch its endpoint.
        let p = unsafe { sys::ucp_ep_close_nbx(self.h, &param) };
        if sys::ucs_ptr_is_ptr(p) {
            let deadline = Instant::now() + CLEANUP_MAX;
            loop {
                self.worker.progress();
                // SAFETY: live close request.
                if unsafe { sys::ucp_request_check_status(p) } != sys::UCS_INPROGRESS as sys::ucs_status_t {
                    // SAFETY: completed; freed once.
                    unsafe { sys::ucp_request_free(p) };
                    break;
                }
                if Instant::now() > deadline {
                    tracing::warn!("UCX endpoint close did not complete; leaving it to worker destruction");
                    // The error handler's argument must then outlive this inner (see Drop).
                    self.close_incomplete.set(true);
                    break;
                }
            }
        }
    }
}

impl Drop for EndpointInner {
    fn drop(&mut self) {
        self.close();
        if self.close_incomplete.get() {
            // UCX may still call the error handler: its argument must outlive that, so leak it.
            std::mem::forget(std::mem::replace(&mut self.failed, Box::new(std::sync::atomic::AtomicI32::new(0))));
        }
    }
}

/// Which transport carries GETs, from `ucp_ep_print_info`. Lane lines look like
/// `#   lane[1]:  3:rc_mlx5/mlx5_0:1.0 md[2] -> md[2]/ib/sysdev[255] rma_bw#0 ...`, and GET protocols
/// like `#   get[1]: 0..<bcopy>..(inf)` naming the lane. Without an RMA lane UCX emulates GET with
/// active messages on its `am` lane, which we say.
fn rma_lane(info: &str) -> Option<String> {
    let mut lanes: Vec<(usize, String, String)> = Vec::new();
    let mut get_lanes: Vec<usize> = Vec::new();
    for l in info.lines() {
        let t = l.trim_start_matches('#').trim();
        if let Some(rest) = t.strip_prefix("lane[") {
            let (idx, after) = rest.split_once("]:")?;
            let tl = after.split_whitespace().next()?;
            let tl = tl.split_once(':').map(|(_, t)| t).unwrap_or(tl);
            lanes.push((idx.parse().ok()?, tl.trim_end_matches(".0").to_string(), after.to_string()));
        } else if let Some(rest) = t.strip_prefix("get[") {
            if let Some((idx, _)) = rest.split_once(']') {
                get_lanes.extend(idx.parse::<usize>().ok());
            }
        }
    }
    let name = |i: usize| lanes.iter().find(|(n, ..)| *n == i).map(|(_, tl, _)| tl.clone());
    if let Some(l) = lanes.iter().find(|(.., rest)| rest.contains("rma_bw#")) {
        return Some(l.1.clone());
    }
    let mut gets: Vec<String> = get_lanes.into_iter().filter_map(name).collect();
    gets.dedup();
    if !gets.is_empty() {
        return Some(gets.join("+"));
    }
    lanes.iter().find(|(.., rest)| rest.contains(" am")).map(|(_, tl, _)| format!("{tl} (GET emulated by active messages)"))
}

/// A remote key, usable on the endpoint it was unpacked on (which it keeps open).
pub struct RemoteKey {
    h: sys::ucp_rkey_h,
    ep: Rc<EndpointInner>,
}

impl Drop for RemoteKey {
    fn drop(&mut self) {
        // SAFETY: live rkey destroyed once, before its endpoint (it holds a reference to it).
        unsafe { sys::ucp_rkey_destroy(self.h) };
    }
}

/// A registration of memory for remote reads.
pub struct MemRegion {
    memh: sys::ucp_mem_h,
    ctx: Arc<Context>,
    addr: u64,
    len: usize,
}

// SAFETY: the handle is only used with its (thread-safe) context; registration is immutable.
unsafe impl Send for MemRegion {}
// SAFETY: as above.
unsafe impl Sync for MemRegion {}

impl MemRegion {
    /// The registered address (what the peer reads at).
    pub fn addr(&self) -> u64 {
        self.addr
    }
    /// The registered length.
    pub fn len(&self) -> usize {
        self.len
    }
    /// Whether the registration is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// Pack a remote key for a peer.
    pub fn pack_rkey(&self) -> Result<Vec<u8>, Error> {
        let mut buf: *mut c_void = ptr::null_mut();
        let mut size: usize = 0;
        // SAFETY: live context and memh; out-pointers writable.
        check("ucp_rkey_pack", unsafe { sys::ucp_rkey_pack(self.ctx.h, self.memh, &mut buf, &mut size) })?;
        // SAFETY: UCX returned `size` readable bytes at `buf`; released right after the copy.
        let v = unsafe { std::slice::from_raw_parts(buf as *const u8, size) }.to_vec();
        // SAFETY: releasing the buffer ucp_rkey_pack allocated, once.
        unsafe { sys::ucp_rkey_buffer_release(buf) };
        Ok(v)
    }
}

impl Drop for MemRegion {
    fn drop(&mut self) {
        // SAFETY: live registration, unmapped once; the context outlives it (Arc).
        unsafe { sys::ucp_mem_unmap(self.ctx.h, self.memh) };
    }
}

/// One GET in flight, owning its destination buffer (and keeping its endpoint and worker alive).
pub struct Get {
    req: *mut c_void,
    buf: Option<Vec<u8>>,
    ep: Rc<EndpointInner>,
}

impl Get {
    /// Has the read finished (successfully or not)? Does not progress the worker.
    pub fn is_done(&self) -> bool {
        // SAFETY: a non-null `req` is a live request until we free it.
        self.req.is_null() || unsafe { sys::ucp_request_check_status(self.req) } != sys::UCS_INPROGRESS as sys::ucs_status_t
    }

    /// Progress the worker until the read finishes or `deadline` passes; returns the filled buffer.
    pub fn wait(mut self, deadline: Instant) -> Result<Vec<u8>, Error> {
        while !self.is_done() {
            self.ep.worker.progress();
            if Instant::now() > deadline {
                return Err(Error::from_status("GET (deadline passed)", sys::UCS_ERR_TIMED_OUT));
                // Drop cancels
            }
        }
        let status = if self.req.is_null() {
            sys::UCS_OK as sys::ucs_status_t
        } else {
            // SAFETY: live, completed request.
            let st = unsafe { sys::ucp_request_check_status(self.req) };
            // SAFETY: freed once; cleared so Drop does not touch it.
            unsafe { sys::ucp_request_free(self.req) };
            self.req = ptr::null_mut();
            st
        };
        check("GET", status)?;
        Ok(self.buf.take().expect("buffer present until taken"))
    }
}

impl Drop for Get {
    fn drop(&mut self) {
        if self.req.is_null() {
            return;
        }
        if !self.ep.end(&mut vec![self.req]) {
            // UCX may still write into the buffer: leak it rather than free memory under it.
            tracing::error!("an abandoned UCX GET never completed; leaking its buffer");
            std::mem::forget(self.buf.take());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_resources_and_lanes() {
        let ctx = "#     resource 0  :  md 0  dev 0  flags -- posix/memory\n#     resource 1  :  md 2  dev 1  flags -- tcp/lo\n";
        assert_eq!(parse_resources(ctx), vec!["posix/memory", "tcp/lo"]);
        let ep = "#  lane[0]:  1:tcp/lo.0 md[1]  -> md[1]/tcp/sysdev[255] rma_bw#0 am am_bw#0\n";
        assert_eq!(rma_lane(ep).as_deref(), Some("tcp/lo"));
        let shm = "#  lane[0]:  3:sysv/memory.0 md[2] -> md[2]/sysv/sysdev[255] am am_bw#0 keepalive\n#  lane[1]:  4:posix/memory.0 md[3] -> md[3]/posix/sysdev[255]\n#  get[0]: 0..<bcopy>..(inf)\n#  get[1]: 0..<bcopy>..(inf)\n";
        assert_eq!(rma_lane(shm).as_deref(), Some("sysv/memory+posix/memory"));
        let am = "#  lane[0]:  1:tcp/lo.0 md[1]  -> md[1]/tcp/sysdev[255] am am_bw#0\n";
        assert_eq!(rma_lane(am).as_deref(), Some("tcp/lo (GET emulated by active messages)"));
        assert!(is_rdma_transport("rc_mlx5/mlx5_0:1"));
        assert!(!is_rdma_transport("tcp/lo"));
    }

    /// A real UCX GET within one process (loopback through whatever UCX picks), including dropping a
    /// request that may be in flight.
    #[test]
    fn get_within_one_process() {
        let ctx = Context::new().expect("ucp_init");
        assert!(!ctx.transports().is_empty(), "UCX found no transports");
        let data: Vec<u8> = (0..(4 << 20)).map(|i: u32| (i * 7 + 3) as u8).collect();
        // SAFETY: `data` outlives `mr` (dropped at the end of the test, after mr).
        let mr = unsafe { ctx.mem_map(data.as_ptr(), data.len()) }.expect("mem_map");
        let server = Worker::new(&ctx).unwrap();
        let client = Worker::new(&ctx).unwrap();
        let ep = client.connect(&server.address().unwrap()).unwrap();
        let rkey = ep.unpack_rkey(&mr.pack_rkey().unwrap()).unwrap();
        // Progress the "server" worker from another thread (GET may be emulated by messages).
        let stop = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|s| {
            let server = &server;
            let stop = &stop;
            // Worker is Send but not Sync: share it to the progress thread only through this scope,
            // where the test thread never touches it.
            let sp = SendPtr(server as *const Worker);
            s.spawn(move || {
                let sp = sp;
                // SAFETY: the test thread does not use `server` while this thread runs.
                let w = unsafe { &*sp.0 };
                while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                    if !w.progress() {
                        let _ = w.wait(Duration::from_millis(10));
                    }
                }
            });
            let deadline = Instant::now() + Duration::from_secs(30);
            let got = ep.get(vec![0u8; 1 << 20], mr.addr() + 4096, &rkey).unwrap().wait(deadline).unwrap();
            assert_eq!(got, data[4096..4096 + (1 << 20)]);
            let mut a = vec![0u8; 1000];
            let mut b = vec![0u8; 3 << 20];
            ep.get_into(&mut [(&mut a[..], mr.addr()), (&mut b[..], mr.addr() + (1 << 20))], &rkey, deadline).unwrap();
            assert_eq!(a, data[..1000]);
            assert_eq!(b, data[1 << 20..4 << 20]);
            drop(ep.get(vec![0u8; 2 << 20], mr.addr(), &rkey).unwrap()); // cancelled or done: either is safe
            stop.store(true, std::sync::atomic::Ordering::SeqCst);
        });
        drop(rkey);
        drop(ep);
    }

    /// GETs to a peer that never answers (its worker is never progressed, as when its process died
    /// under a transport that cannot tell) end as soon as the caller says the peer is gone: the
    /// endpoint is closed by force, which completes them, and nothing more can start on it.
    #[test]
    fn gets_to_a_silent_peer_end_when_the_caller_gives_up() {
        // tcp only: GET is emulated by messages the silent worker would have to answer.
        let ctx = Context::with_options(Some("tcp"), None).expect("ucp_init");
        let data = vec![7u8; 1 << 20];
        // SAFETY: `data` outlives `mr` (dropped at the end of the test, after mr).
        let mr = unsafe { ctx.mem_map(data.as_ptr(), data.len()) }.expect("mem_map");
        let silent = Worker::new(&ctx).unwrap();
        let client = Worker::new(&ctx).unwrap();
        let ep = client.connect(&silent.address().unwrap()).unwrap();
        let rkey = ep.unpack_rkey(&mr.pack_rkey().unwrap()).unwrap();
        let mut buf = vec![0u8; 1 << 20];
        let mut asked = 0;
        let far = Instant::now() + Duration::from_secs(600);
        let e = ep
            .get_into_unless(&mut [(&mut buf[..], mr.addr())], &rkey, far, &mut || {
                asked += 1;
                Some("the peer went away".to_string())
            })
            .expect_err("nobody answers these GETs");
        assert_eq!(asked, 1, "gave up at the first check");
        assert!(e.to_string().contains("the peer went away"), "{e}");
        let again = ep.get_into(&mut [(&mut buf[..], mr.addr())], &rkey, far).expect_err("the endpoint is closed");
        assert!(again.to_string().contains("endpoint closed"), "{again}");
        drop(rkey);
        drop(ep);
        // A deadline ends them the same way (it used to cancel them one by one, which UCX does not
        // do for GETs, and then abort the process).
        let ep = client.connect(&silent.address().unwrap()).unwrap();
        let rkey = ep.unpack_rkey(&mr.pack_rkey().unwrap()).unwrap();
        let e = ep.get_into(&mut [(&mut buf[..], mr.addr())], &rkey, Instant::now() + Duration::from_millis(100)).expect_err("nobody answers");
        assert!(e.to_string().contains("deadline passed"), "{e}");
    }

    struct SendPtr(*const Worker);
    // SAFETY: used only in the test above, where one thread at a time touches the worker.
    unsafe impl Send for SendPtr {}
}
