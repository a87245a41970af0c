//! The shared-memory transport, for an agent on the relay's host.
//!
//! The relay listens on an abstract unix socket (named in its hello; abstract sockets live in the
//! network namespace, so only peers that share the relay's host *and* namespace reach it). After the
//! same mutual authentication as on TCP, the agent asks for a generation and receives its memfd over
//! `SCM_RIGHTS`, reopened read-only by the relay and sealed against shrinking. The agent maps it and
//! copies blocks straight out of the relay's memory: the relay does no work per read. Log reads (small,
//! and held in the relay's heap, not in the memfd) go over the same socket as on TCP. The relay's
//! side is [`crate::serve::send_region`].
//!
//! A relay with a store (`--store`) passes a read-only descriptor of the generation's file instead.
//! A regular file cannot be sealed, and a truncation under a mapping would turn the agent's reads
//! into SIGBUS, so the agent does not map it: it `pread`s the descriptor (one copy out of the page
//! cache, as the mapping's copy is one out of shmem). A truncated file is then a short read, an
//! error of this reader, and the relay still does nothing per read.

use crate::auth::{self, Kind, Token};
use crate::tcp::{read_answer, StreamReader};
use crate::wire::{AttachKind, Request, RESPONSE_HEADER_LEN};
use crate::{fdpass, Error, Operation, RangeReader, Transport};
use std::os::fd::OwnedFd;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr as UnixAddr, UnixStream};
use std::time::Duration;

/// Reads at least this large populate their pages up front.
const POPULATE_MIN: usize = limits::POPULATE_BYTES_MIN;

/// How long socket operations may wait on the relay.
const IO_TIMEOUT: Duration = crate::tcp::IO_TIMEOUT;
/// Largest region an agent maps (a bound on what a relay can make us reserve).
pub const REGION_MAX: u64 = limits::REGION_BYTES_MAX;

/// Connect to a relay's abstract unix socket `name` and authenticate as `kind`.
pub fn connect(name: &str, token: &Token, kind: Kind) -> Result<UnixStream, Error> {
    let addr = UnixAddr::from_abstract_name(name.as_bytes()).map_err(Error::io(Operation::MakeUnixSocketAddress))?;
    let mut s = UnixStream::connect_addr(&addr).map_err(Error::io(Operation::ConnectToShmSocket))?;
    s.set_read_timeout(Some(IO_TIMEOUT)).map_err(Error::io(Operation::SetReadTimeout))?;
    s.set_write_timeout(Some(IO_TIMEOUT)).map_err(Error::io(Operation::SetWriteTimeout))?;
    auth::client(&mut s, token, kind)?;
    Ok(s)
}

/// The shm transport to one relay.
#[derive(Debug, Clone)]
pub struct ShmTransport {
    name: String,
    token: Token,
}

impl ShmTransport {
    /// A transport to the relay whose hello named the abstract socket `name`.
    pub fn new(name: String, token: Token) -> Self {
        ShmTransport { name, token }
    }

    /// Can we reach the relay's socket from here (same host and network namespace)? Authenticates,
    /// so a reachable socket that refuses us counts as an error, not as "elsewhere".
    pub fn reachable(&self) -> Result<bool, Error> {
        match connect(&self.name, &self.token, Kind::Data) {
            Ok(_) => Ok(true),
            Err(Error::Io { op: Operation::ConnectToShmSocket, .. }) => Ok(false),
            Err(e) => Err(e),
        }
    }
}

impl Transport for ShmTransport {
    fn kind(&self) -> crate::TransportKind {
        crate::TransportKind::Shm
    }
    fn detail(&self) -> Option<String> {
        Some("memfd mapped read-only".into())
    }
    fn open(&self) -> Result<Box<dyn RangeReader>, Error> {
        let s = connect(&self.name, &self.token, Kind::Data)?;
        Ok(Box::new(ShmReader { conn: StreamReader::new(s), map: None }))
    }
}

/// A read-only mapping of one generation's region.
struct Mapping {
    generation: u64,
    access: Access,
}

/// How the agent reads a generation it was handed.
enum Access {
    /// A sealed memfd, mapped read-only.
    Mapped(memmap2::Mmap),
    /// A store's file (not sealable), read with `pread`; its size as the relay announced it.
    Pread(std::fs::File, u64),
}

impl Access {
    fn len(&self) -> u64 {
        match self {
            Access::Mapped(m) => m.len() as u64,
            Access::Pread(_, capacity) => *capacity,
        }
    }
}

/// One agent reader: a mapping of the current generation plus the socket for log reads.
pub struct ShmReader {
    conn: StreamReader<UnixStream>,
    map: Option<Mapping>,
}

impl ShmReader {
    fn mapping(&mut self, generation: u64) -> Result<&Mapping, Error> {
        if self.map.as_ref().map(|m| m.generation) != Some(generation) {
            self.map = None;
            self.map = Some(self.attach(generation)?);
        }
        Ok(self.map.as_ref().expect("just set"))
    }

    fn attach(&mut self, generation: u64) -> Result<Mapping, Error> {
        use std::io::Write;
        let req = Request::Attach { generation, transport: AttachKind::Shm, arg: 0 };
        self.conn.s.write_all(&req.encode()).map_err(Error::io(Operation::SendShmAttachRequest))?;
        let mut h = [0u8; RESPONSE_HEADER_LEN];
        let fd = fdpass::recv_with_fd(&self.conn.s, &mut h).map_err(Error::io(Operation::ReceiveRegionDescriptor))?;
        let len = read_answer(&mut self.conn.s, &h, Operation::ShmAttach)?;
        if len != 8 {
            return Err(Error::Protocol(format!("shm attach answer of {len} bytes, expected 8")));
        }
        let fd: OwnedFd = fd.ok_or_else(|| Error::Protocol("shm attach answered without a descriptor".into()))?;
        let mut cap = [0u8; 8];
        std::io::Read::read_exact(&mut self.conn.s, &mut cap).map_err(Error::io(Operation::ReadRegionSize))?;
        let capacity = u64::from_be_bytes(cap);
        if capacity == 0 || capacity > REGION_MAX {
            return Err(Error::Protocol(format!("region of {capacity} bytes is out of bounds")));
        }
        let file = std::fs::File::from(fd);
        // A memfd the relay sealed against shrinking is mapped; anything else (a store's file) is read
        // with pread, which a truncation cannot turn into SIGBUS.
        if !snapshot::is_sealed(&file) {
            let meta = file.metadata().map_err(Error::io(Operation::ReadRegionSize))?;
            if !meta.file_type().is_file() {
                return Err(Error::Protocol("the relay's region is neither a sealed memfd nor a regular file".into()));
            }
            return Ok(Mapping { generation, access: Access::Pread(file, capacity) });
        }
        let map = snapshot::map_sealed_read_only(&file, capacity).map_err(|e| match e {
            snapshot::MapError::Io(source) => Error::Io { op: Operation::MapRelayRegion, source },
            other => Error::Protocol(format!("the relay's region: {other}")),
        })?;
        Ok(Mapping { generation, access: Access::Mapped(map) })
    }
}

impl RangeReader for ShmReader {
    fn read(&mut self, generation: u64, offset: u64, buf: &mut [u8]) -> Result<(), Error> {
        let access = &self.mapping(generation)?.access;
        let Some(end) = offset.checked_add(buf.len() as u64).filter(|e| *e <= access.len()) else {
            return Err(Error::Protocol(format!("read [{offset}, +{}) beyond the region ({} bytes)", buf.len(), access.len())));
        };
        let m = match access {
            Access::Mapped(m) => m,
            Access::Pread(file, _) => {
                // A short read (the relay's file truncated under it) is an error, never fewer bytes.
                return std::os::unix::fs::FileExt::read_exact_at(file, buf, offset).map_err(Error::io(Operation::ReadRelayStoreFile));
            }
        };
        // Large reads: map the range's pages in one call instead of a fault per few pages during the
        // copy (MADV_POPULATE_READ, Linux 5.14+; elsewhere it fails and the copy faults as usual).
        // Small reads skip it: the syscall would cost more than the fault it saves, and only the
        // first touch of a page faults at all.
        if buf.len() >= POPULATE_MIN {
            let page = 4096u64;
            let start = offset / page * page;
            // SAFETY: [start, offset+len) is inside the mapping (start rounds down within it); the
            // advice only populates page tables of our read-only mapping.
            let _ = unsafe { rustix::mm::madvise(m.as_ptr().add(start as usize) as *mut _, (offset - start) as usize + buf.len(), rustix::mm::Advice::LinuxPopulateRead) };
        }
        // The relay only writes bytes above the published watermark, which the agent does not ask
        // for, and every block's checksum is verified after the copy, so a racing writer could at
        // worst cause a re-read, never unchecked data.
        buf.copy_from_slice(&m[offset as usize..end as usize]);
        Ok(())
    }

    fn read_log(&mut self, generation: u64, from: u64, max: u32) -> Result<Vec<u8>, Error> {
        self.conn.read_log(generation, from, max)
    }
}
