//! The ucx transport: the agent's side of one-sided reads through UCX.
//!
//! Each reader owns a UCX worker and one endpoint to the relay's worker, plus an authenticated TCP
//! data connection used only for set-up (the relay's worker address and a remote key per segment of
//! the region) and for stream-log reads. Block reads are `ucp_get_nbx` — on InfiniBand/RoCE a true
//! RDMA READ with the relay's CPU idle — split into chunks that are all in flight at once.

use endpoint::Endpoint as RelayAddr;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::sync::{Arc, Mutex};
use std::time::Instant;
use transport::auth::Kind;
use transport::tcp::{StreamReader, IO_TIMEOUT};
use transport::wire::{AttachKind, Request, UcxKey, UCX_BLOB_MAX, UCX_SEGMENT};
use transport::{Credentials, Error, RangeReader, Transport};
use ucx::{Context, Endpoint, RemoteKey, Worker};

/// Size of the GETs a block read is split into (all in flight together).
pub const CHUNK: usize = limits::UCX_GET_BYTES;

/// The ucx transport to one relay.
pub struct UcxTransport {
    relay: RelayAddr,
    token: Credentials,
    ctx: Arc<Context>,
    /// UCX's transport/device for GETs, as the first endpoint reports it.
    lane: Arc<Mutex<Option<String>>>,
}

impl UcxTransport {
    /// Initialise UCX for reading from the relay at `relay` (no connection is made yet).
    pub fn connect(relay: RelayAddr, token: Credentials) -> Result<UcxTransport, ucx::Error> {
        Self::with_tls(relay, token, None)
    }

    /// As [`UcxTransport::connect`], restricted to the UCX transports `tls` names (e.g. `tcp`, `sm`).
    pub fn with_tls(relay: RelayAddr, token: Credentials, tls: Option<&str>) -> Result<UcxTransport, ucx::Error> {
        // UCX's tcp transport listens on every network device it uses: keep it on the one this
        // host reaches the relay through (RDMA devices stay available; they open no TCP listener).
        let devices = match relay.resolve().ok().and_then(|a| a.first().copied()).and_then(route_device) {
            Some(d) => Some(Context::net_devices_listening_on(&d)?),
            None => None,
        };
        Ok(UcxTransport { relay, token, ctx: Context::with_options(tls, devices.as_deref())?, lane: Arc::default() })
    }

    /// The UCX transports/devices this side found (for `auto`: is there an RDMA one?).
    pub fn local_transports(&self) -> Vec<String> {
        self.ctx.transports()
    }
}

impl Transport for UcxTransport {
    fn kind(&self) -> transport::TransportKind {
        transport::TransportKind::Ucx
    }
    fn default_readers(&self) -> usize {
        2
    }
    fn detail(&self) -> Option<String> {
        self.lane.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
    fn open(&self) -> Result<Box<dyn RangeReader>, Error> {
        let s = transport::tcp::connect(&self.relay, &self.token, Kind::Data, IO_TIMEOUT)?;
        let worker = Worker::new(&self.ctx).map_err(|e| Error::Rma(e.to_string()))?;
        Ok(Box::new(UcxReader { keys: HashMap::new(), ep: None, worker, conn: StreamReader::new(s), lane: self.lane.clone() }))
    }
}

/// One segment's remote key and where it lies.
struct Segment {
    rkey: RemoteKey,
    base: u64,
    len: u64,
}

/// One reader: its own worker and endpoint. Keys hold their endpoint and the endpoint its worker
/// (`Arc`s inside the ucx crate), so no drop order has to be kept here.
pub struct UcxReader {
    keys: HashMap<(u64, u64), Segment>,
    ep: Option<(Vec<u8>, Endpoint)>,
    worker: Worker,
    conn: StreamReader<transport::tls::Conn>,
    lane: Arc<Mutex<Option<String>>>,
}

// SAFETY: UCX handles are !Send because a single-threaded worker must be used by one thread at a
// time. This reader owns its worker and every handle made from it (endpoint, keys; no request
// outlives a `read`), none is shared outside it, so moving the reader moves the whole set at once
// and only the thread that owns it ever calls into UCX for this worker.
unsafe impl Send for UcxReader {}

impl UcxReader {
    fn segment(&mut self, generation: u64, segment: u64) -> Result<&Segment, Error> {
        if !self.keys.contains_key(&(generation, segment)) {
            let len = self.conn.request(Request::Attach { generation, transport: AttachKind::Ucx, arg: segment }, transport::Operation::UcxAttach)?;
            if len as usize > 2 * UCX_BLOB_MAX + 24 {
                return Err(Error::Protocol(format!("ucx attach answer of {len} bytes")));
            }
            let mut body = vec![0u8; len as usize];
            std::io::Read::read_exact(&mut self.conn.s, &mut body).map_err(Error::io(transport::Operation::ReadUcxAttachAnswer))?;
            let key = UcxKey::decode(&body)?;
            if self.ep.as_ref().map(|(a, _)| a != &key.worker).unwrap_or(true) {
                // A new relay worker (first attach, or the relay restarted its UCX side).
                self.keys.clear();
                self.ep = None;
                let ep = self.worker.connect(&key.worker).map_err(|e| Error::Rma(e.to_string()))?;
                // Which UCX transport carries GETs is fixed when the endpoint is made: record it once.
                let mut lane = self.lane.lock().unwrap_or_else(|p| p.into_inner());
                if lane.is_none() {
                    *lane = ep.rma_transport();
                }
                drop(lane);
                self.ep = Some((key.worker.clone(), ep));
            }
            let (_, ep) = self.ep.as_ref().expect("set above");
            let rkey = ep.unpack_rkey(&key.rkey).map_err(|e| Error::Rma(e.to_string()))?;
            self.keys.insert((generation, segment), Segment { rkey, base: key.base, len: key.len });
        }
        Ok(&self.keys[&(generation, segment)])
    }
}

impl RangeReader for UcxReader {
    fn read(&mut self, generation: u64, offset: u64, buf: &mut [u8]) -> Result<(), Error> {
        match self.read_once(generation, offset, buf) {
            // The relay is still there but its UCX side failed: the relay starts another, whose
            // address the next attach gives. Once: a second failure is the relay's.
            Err(Error::Rma(e)) if !peer_closed(self.conn.s.tcp().as_raw_fd()) => {
                tracing::warn!(error = %e, "a read over UCX failed; attaching to the relay's UCX side again");
                self.read_once(generation, offset, buf)
            }
            r => r,
        }
    }

    fn read_log(&mut self, generation: u64, from: u64, max: u32) -> Result<Vec<u8>, Error> {
        self.conn.read_log(generation, from, max)
    }
}

impl UcxReader {
    fn read_once(&mut self, generation: u64, offset: u64, buf: &mut [u8]) -> Result<(), Error> {
        let deadline = Instant::now() + IO_TIMEOUT;
        // UCX's shared-memory transports cannot tell that the relay died; its data connection can,
        // at once: a GET to a dead relay then fails now instead of at the deadline. Only a close seen
        // during this read counts: the relay also closes a data connection idle for long
        // (`DATA_IDLE_MAX`), and GETs to segments attached before that still work.
        let conn = self.conn.s.tcp().as_raw_fd();
        let was_open = !peer_closed(conn);
        let mut done = 0usize;
        while done < buf.len() {
            let pos = offset + done as u64;
            let (seg_no, within) = (pos / UCX_SEGMENT, pos % UCX_SEGMENT);
            let seg = self.segment(generation, seg_no)?;
            let n = ((seg.len.saturating_sub(within)) as usize).min(buf.len() - done);
            if n == 0 {
                return Err(Error::Protocol(format!("read at {pos} beyond the relay's registered segment")));
            }
            let base = seg.base + within;
            let mut ops: Vec<(&mut [u8], u64)> = buf[done..done + n].chunks_mut(CHUNK).enumerate().map(|(i, c)| (c, base + (i * CHUNK) as u64)).collect();
            let (_, ep) = self.ep.as_ref().expect("segment() connected");
            let seg = &self.keys[&(generation, seg_no)];
            let got = ep.get_into_unless(&mut ops, &seg.rkey, deadline, &mut || (was_open && peer_closed(conn)).then(|| "the relay closed its data connection".to_string()));
            if let Err(e) = got {
                // The endpoint may have been closed to end the failed GETs: the next read starts over.
                self.keys.clear();
                self.ep = None;
                return Err(Error::Rma(format!("{e} (relay gone or unreachable over UCX?)")));
            }
            done += n;
        }
        Ok(())
    }
}

/// Has the other end of the TCP connection `fd` closed it (or is it broken)? Does not wait.
fn peer_closed(fd: std::os::fd::RawFd) -> bool {
    let mut pfd = libc::pollfd { fd, events: libc::POLLRDHUP, revents: 0 };
    // SAFETY: one valid pollfd on the stack; `fd` is an open socket owned by the caller's reader.
    let n = unsafe { libc::poll(&mut pfd, 1, 0) };
    n > 0 && pfd.revents & (libc::POLLRDHUP | libc::POLLHUP | libc::POLLERR) != 0
}

/// The network device this host reaches `relay` through (the kernel's route choice, asked with an
/// unconnected-then-connected UDP socket: nothing is sent), or `None` when it cannot be told.
fn route_device(relay: SocketAddr) -> Option<String> {
    let any: SocketAddr = if relay.is_ipv4() { ([0, 0, 0, 0], 0).into() } else { (std::net::Ipv6Addr::UNSPECIFIED, 0).into() };
    let s = std::net::UdpSocket::bind(any).ok()?;
    s.connect(relay).ok()?;
    ucx::netdev::device_of(s.local_addr().ok()?.ip())
}
