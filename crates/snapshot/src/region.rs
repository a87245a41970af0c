//! A generation's byte region: a memfd (sparse: memory is used only where written), or with a store a
//! file in it (sparse too: disk is used only where written). Either is shareable with other
//! processes by passing the file descriptor.

use crate::store::{allocated_bytes, StoredFile};
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;

/// An anonymous in-memory file, or a file in the store, of fixed capacity.
pub struct Region {
    backing: Backing,
    capacity: u64,
}

/// Where a region's bytes are.
enum Backing {
    /// A sealed memfd: the kernel frees it with its last descriptor.
    Memfd(File),
    /// A store's file: removed from the store when the region goes.
    Stored(StoredFile),
}

impl Region {
    /// Create a memfd of `capacity` bytes (sparse).
    pub fn create(name: &str, capacity: u64) -> io::Result<Region> {
        use rustix::fs::{MemfdFlags, SealFlags};
        let file = File::from(rustix::fs::memfd_create(name, MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING)?);
        file.set_len(capacity)?;
        // Fix the size for good: agents map the region (shm transport), and a shrink would turn their
        // reads into SIGBUS. F_SEAL_SEAL keeps anyone holding the descriptor from undoing this.
        rustix::fs::fcntl_add_seals(&file, SealFlags::SHRINK | SealFlags::GROW | SealFlags::SEAL)?;
        Ok(Region { backing: Backing::Memfd(file), capacity })
    }

    /// A region in `file`, new in the store at `path`, sized to `capacity` (sparse). A regular file
    /// cannot be sealed: readers on this host get a descriptor they `pread` (a truncation is then a
    /// short read, an error), never a mapping that a truncation would turn into SIGBUS.
    pub(crate) fn in_file(stored: StoredFile, capacity: u64) -> Result<Region, crate::store::StoreError> {
        stored.file.set_len(capacity).map_err(|e| stored.error("size the snapshot file", e))?;
        Ok(Region { backing: Backing::Stored(stored), capacity })
    }

    /// The store's file this region lives in; `None` for memory.
    pub(crate) fn stored(&self) -> Option<&StoredFile> {
        match &self.backing {
            Backing::Memfd(_) => None,
            Backing::Stored(s) => Some(s),
        }
    }

    /// The bytes of memory the kernel cannot take back that this region holds: a memfd's allocated
    /// pages (shmem, mapped or not); 0 for a store's file (page cache, reclaimable).
    pub fn memory_bytes(&self) -> u64 {
        match &self.backing {
            Backing::Memfd(f) => allocated_bytes(f),
            Backing::Stored(_) => 0,
        }
    }

    /// The bytes this region takes on a store's disk; 0 in memory.
    pub fn store_bytes(&self) -> u64 {
        self.stored().map_or(0, |s| allocated_bytes(&s.file))
    }

    /// Capacity in bytes.
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// The file, for `sendfile`, `SCM_RIGHTS` or registration.
    pub fn file(&self) -> &File {
        match &self.backing {
            Backing::Memfd(f) => f,
            Backing::Stored(s) => &s.file,
        }
    }

    /// A new read-only descriptor of the same memory, to hand to agents: they can map it, but not
    /// writable, and cannot write through it.
    pub fn reopen_read_only(&self) -> io::Result<File> {
        std::fs::OpenOptions::new().read(true).open(format!("/proc/self/fd/{}", self.file().as_raw_fd()))
    }

    /// Raw descriptor.
    pub fn raw_fd(&self) -> i32 {
        self.file().as_raw_fd()
    }

    /// Copy bytes out (for tests and checks; transports use the file directly).
    pub fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.file().read_exact_at(buf, offset)
    }

    /// Map the whole region writable. Only the generation's single writer holds this mapping.
    pub(crate) fn map_writable(&self) -> io::Result<memmap2::MmapMut> {
        if self.capacity == 0 {
            // mmap refuses zero lengths; an empty RDB needs no room.
            return memmap2::MmapMut::map_anon(1);
        }
        // SAFETY: the memfd is private to this process until its descriptor is handed out, and others
        // only ever read bytes below the published watermark, which this mapping no longer writes.
        // The file is never truncated while mapped.
        unsafe { memmap2::MmapOptions::new().len(self.capacity as usize).map_mut(self.file()) }
    }
}

/// Map the first `len` bytes of a region's descriptor read-only and shared: a sealed memfd
/// ([`map_sealed_read_only`]), or a regular file of the relay's store. Only the relay's UCX side
/// process maps a store file: a truncation under it (by someone who can already write the relay's
/// 0600 files in its locked store) kills that process with SIGBUS, and the relay starts another,
/// while the relay itself and the shm readers only ever `pread` or `sendfile` a store file.
pub fn map_region_read_only(file: &File, len: u64) -> Result<memmap2::Mmap, MapError> {
    let meta = file.metadata().map_err(MapError::Io)?;
    if is_sealed(file) || !meta.file_type().is_file() {
        return map_sealed_read_only(file, len);
    }
    if meta.len() < len {
        return Err(MapError::TooShort { have: meta.len(), want: len });
    }
    let len = usize::try_from(len).map_err(|_| MapError::TooShort { have: usize::MAX as u64, want: len })?;
    // SAFETY: a read-only shared mapping of a store file at least `len` long (checked above). Bytes
    // below the published watermark never change again; a truncation would raise SIGBUS in this
    // process on access (see above: only the UCX side process, which the relay replaces, maps one).
    unsafe { memmap2::MmapOptions::new().len(len).map(file) }.map_err(MapError::Io)
}

/// Whether a descriptor is a sealed memfd (map it) or not (a store file: `pread` it).
pub fn is_sealed(file: &File) -> bool {
    rustix::fs::fcntl_get_seals(file).is_ok_and(|s| s.contains(rustix::fs::SealFlags::SHRINK))
}

/// Map the first `len` bytes of a region's descriptor read-only and shared: how agents (shm) and the
/// relay's UCX registrations see a generation. Refuses a descriptor that is not sealed against
/// shrinking, or shorter than `len`: a truncation under a mapping turns reads into SIGBUS.
pub fn map_sealed_read_only(file: &File, len: u64) -> Result<memmap2::Mmap, MapError> {
    if !is_sealed(file) {
        return Err(MapError::NotSealed);
    }
    let have = file.metadata().map_err(MapError::Io)?.len();
    if have < len {
        return Err(MapError::TooShort { have, want: len });
    }
    let len = usize::try_from(len).map_err(|_| MapError::TooShort { have: usize::MAX as u64, want: len })?;
    // SAFETY: a read-only shared mapping of a memfd that cannot shrink (sealed, checked above), so every
    // byte below `len` stays mapped. Its bytes below the published watermark never change again; bytes
    // above it may be written by the relay's single writer, which readers do not ask for (and every
    // block is checksummed after the copy).
    unsafe { memmap2::MmapOptions::new().len(len).map(file) }.map_err(MapError::Io)
}

/// Why a region could not be mapped read-only.
#[derive(Debug, thiserror::Error)]
pub enum MapError {
    /// Not sealed against shrinking: a truncation would turn reads into SIGBUS.
    #[error("the region is not sealed against shrinking")]
    NotSealed,
    /// Smaller than announced.
    #[error("the region holds {have} bytes, {want} announced")]
    TooShort {
        /// Its size.
        have: u64,
        /// The size announced.
        want: u64,
    },
    /// The system refused.
    #[error("{0}")]
    Io(#[source] io::Error),
}
