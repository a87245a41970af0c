//! A relay's store: the directory (`--store DIR`) whose files hold each generation's RDB bytes and
//! stream log instead of memory. The page cache is the cache: what the kernel keeps of these files
//! it can take back, so the relay's own memory no longer grows with the snapshot.
//!
//! One relay per directory: a lock file held for the store's life (`flock`, released by the kernel
//! when the process dies, so a killed relay leaves no stale lock). Every file this relay may have
//! left is named `gen-<id>.rdb` or `gen-<id>.log`; at open, those are removed (a killed relay's
//! leftovers: nothing reopens them yet) and every other file is left alone.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// The name of the lock file inside a store.
const LOCK_FILE: &str = "fastrepl-relay.lock";

/// A store directory, locked for this relay.
#[derive(Debug)]
pub struct Store {
    dir: PathBuf,
    /// Held open for the lock; the kernel releases it when the process ends.
    _lock: File,
}

/// What a store's opening found and removed.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Cleaned {
    /// Leftover generation files removed.
    pub files: usize,
    /// Their bytes on disk (allocated, not apparent: a snapshot file is sparse until written).
    pub bytes: u64,
}

/// Why a store could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The directory is missing, not a directory, or cannot be read.
    #[error("store directory {}: {source} (create it first, e.g. systemd's StateDirectory= or a mounted volume)", dir.display())]
    Missing {
        /// The directory.
        dir: PathBuf,
        /// Cause.
        #[source]
        source: io::Error,
    },
    /// Another relay holds the store's lock.
    #[error("store directory {}: another relay uses it (lock {} held); one relay per store", dir.display(), LOCK_FILE)]
    Locked {
        /// The directory.
        dir: PathBuf,
    },
    /// A file of the store was truncated or removed under the relay: its generation is no longer
    /// whole, whatever the operation that found it.
    #[error("{op} {}: {what}", path.display())]
    Gone {
        /// What was attempted.
        op: &'static str,
        /// The file.
        path: PathBuf,
        /// What happened to it.
        what: Gone,
    },
    /// A file operation inside the store failed.
    #[error("{op} {}: {source}", path.display())]
    Io {
        /// What was attempted.
        op: &'static str,
        /// The file.
        path: PathBuf,
        /// Cause.
        #[source]
        source: io::Error,
    },
}

/// What happened to a store's file under the relay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gone {
    /// Unlinked from the store.
    Removed,
    /// Shorter than what was written to it.
    Truncated {
        /// Its length now.
        have: u64,
        /// The least it must hold.
        want: u64,
    },
}

impl std::fmt::Display for Gone {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Gone::Removed => write!(f, "the file was removed from the store under the relay"),
            Gone::Truncated { have, want } => write!(f, "the file holds {have} bytes, at least {want} expected: truncated under the relay"),
        }
    }
}

/// Which of a generation's files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StoreFile {
    /// The RDB bytes.
    Snapshot,
    /// The stream log after them.
    Log,
}

impl StoreFile {
    fn suffix(self) -> &'static str {
        match self {
            StoreFile::Snapshot => "rdb",
            StoreFile::Log => "log",
        }
    }
}

impl Store {
    /// Open `dir` for this relay: lock it, then remove the generation files a killed relay left.
    pub fn open(dir: &Path) -> Result<(Store, Cleaned), StoreError> {
        let meta = std::fs::metadata(dir).map_err(|source| StoreError::Missing { dir: dir.to_path_buf(), source })?;
        if !meta.is_dir() {
            return Err(StoreError::Missing { dir: dir.to_path_buf(), source: io::Error::new(io::ErrorKind::NotADirectory, "not a directory") });
        }
        let lock_path = dir.join(LOCK_FILE);
        // Creating the lock file is also the check that the directory is writable.
        let lock = OpenOptions::new().read(true).write(true).create(true).truncate(false).mode(0o600).open(&lock_path).map_err(|source| StoreError::Io {
            op: "create the store's lock file",
            path: lock_path.clone(),
            source,
        })?;
        match rustix::fs::flock(&lock, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => {}
            Err(rustix::io::Errno::WOULDBLOCK) => return Err(StoreError::Locked { dir: dir.to_path_buf() }),
            Err(e) => return Err(StoreError::Io { op: "lock the store", path: lock_path, source: e.into() }),
        }
        let store = Store { dir: dir.to_path_buf(), _lock: lock };
        let cleaned = store.clean()?;
        Ok((store, cleaned))
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Where generation `id`'s `file` lives.
    pub(crate) fn path(&self, id: u64, file: StoreFile) -> PathBuf {
        self.dir.join(format!("gen-{id}.{}", file.suffix()))
    }

    /// Create generation `id`'s `file`, new (a file of that name is an error: this relay made no
    /// such generation yet, so someone else wrote it), readable and writable by this user only.
    pub(crate) fn create(&self, id: u64, file: StoreFile) -> Result<StoredFile, StoreError> {
        let path = self.path(id, file);
        let open = OpenOptions::new().read(true).write(true).create_new(true).mode(0o600).custom_flags(libc::O_CLOEXEC).open(&path);
        let file = open.map_err(|source| StoreError::Io { op: "create", path: path.clone(), source })?;
        Ok(StoredFile { file, path })
    }

    /// Remove the files of a generation a killed relay left (`gen-<id>.rdb|log`), nothing else.
    fn clean(&self) -> Result<Cleaned, StoreError> {
        let mut cleaned = Cleaned::default();
        let entries = std::fs::read_dir(&self.dir).map_err(|source| StoreError::Io { op: "list the store", path: self.dir.clone(), source })?;
        for entry in entries {
            let entry = entry.map_err(|source| StoreError::Io { op: "list the store", path: self.dir.clone(), source })?;
            let name = entry.file_name();
            if !is_generation_file(&name.to_string_lossy()) {
                continue;
            }
            let path = entry.path();
            let bytes = entry.metadata().map(|m| std::os::unix::fs::MetadataExt::blocks(&m) * 512).unwrap_or(0);
            std::fs::remove_file(&path).map_err(|source| StoreError::Io { op: "remove a leftover generation file", path: path.clone(), source })?;
            cleaned.files += 1;
            cleaned.bytes += bytes;
        }
        Ok(cleaned)
    }
}

/// One file of a store, open: removed from the store when dropped (its generation released and its
/// last reader gone). Already gone is fine (an operator removed it): the bytes leave the disk with the
/// descriptor, closed right after.
#[derive(Debug)]
pub(crate) struct StoredFile {
    pub(crate) file: File,
    pub(crate) path: PathBuf,
}

impl StoredFile {
    /// A failed `op` on this file, naming it.
    pub(crate) fn error(&self, op: &'static str, source: io::Error) -> StoreError {
        StoreError::Io { op, path: self.path.clone(), source }
    }

    /// Before `op`: the file must still be in the store and hold at least `len` bytes (one `fstat`).
    /// A file truncated under the relay would otherwise be read short, or worse, written past its
    /// new end, leaving a hole of zeros where published bytes were; a removed one is space its remover
    /// wanted back. Either is a store fault naming the file.
    pub(crate) fn check_holds(&self, op: &'static str, len: u64) -> Result<(), StoreError> {
        use std::os::unix::fs::MetadataExt;
        let meta = self.file.metadata().map_err(|e| self.error(op, e))?;
        let gone = |what| StoreError::Gone { op, path: self.path.clone(), what };
        if meta.nlink() == 0 {
            return Err(gone(Gone::Removed));
        }
        if meta.len() < len {
            return Err(gone(Gone::Truncated { have: meta.len(), want: len }));
        }
        Ok(())
    }
}

impl Drop for StoredFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The bytes a file takes where it lives (allocated, not apparent: a sparse file counts what was
/// written), 0 when it cannot be told. For a store's file that is disk; for a memfd, memory.
pub(crate) fn allocated_bytes(file: &File) -> u64 {
    use std::os::unix::fs::MetadataExt;
    file.metadata().map(|m| m.blocks() * 512).unwrap_or(0)
}

/// `gen-<digits>.rdb` or `gen-<digits>.log`: the names this relay gives, and the only ones it removes.
fn is_generation_file(name: &str) -> bool {
    let Some(rest) = name.strip_prefix("gen-") else {
        return false;
    };
    let Some((id, suffix)) = rest.rsplit_once('.') else {
        return false;
    };
    !id.is_empty() && id.bytes().all(|b| b.is_ascii_digit()) && matches!(suffix, "rdb" | "log")
}

/// Start writing `[offset, offset+len)` of `file` back to disk now, and wait until
/// `[wait_from, offset)` is on disk: the dirty pages a writer leaves stay within about two of its
/// steps. Without it a fast capture can fill the page cache with dirty pages, and under a memory
/// cgroup (v1 has no writeback of its own) reclaim cannot drop them in time: the relay is killed
/// for pages it meant to give back.
pub(crate) fn write_back(file: &File, wait_from: u64, offset: u64, len: u64) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let fd = file.as_raw_fd();
    if offset > wait_from {
        let flags = libc::SYNC_FILE_RANGE_WAIT_BEFORE | libc::SYNC_FILE_RANGE_WRITE | libc::SYNC_FILE_RANGE_WAIT_AFTER;
        // SAFETY: a plain syscall on a descriptor we own; no memory is passed.
        if unsafe { libc::sync_file_range(fd, wait_from as i64, (offset - wait_from) as i64, flags) } != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    // SAFETY: as above.
    if unsafe { libc::sync_file_range(fd, offset as i64, len as i64, libc::SYNC_FILE_RANGE_WRITE) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn only_generation_files_are_ours() {
        for ours in ["gen-1.rdb", "gen-42.log", "gen-0.rdb"] {
            assert!(is_generation_file(ours), "{ours}");
        }
        for theirs in ["gen-.rdb", "gen-1.rdb.bak", "gen-x.log", "dump.rdb", "gen-1", LOCK_FILE, "gen-1.aof"] {
            assert!(!is_generation_file(theirs), "{theirs}");
        }
    }

    #[test]
    fn opening_cleans_leftovers_and_locks() {
        let dir = tempdir();
        std::fs::write(dir.join("gen-3.rdb"), vec![1u8; 8192]).unwrap();
        std::fs::write(dir.join("gen-3.log"), b"*1\r\n").unwrap();
        std::fs::write(dir.join("notes.txt"), b"the operator's").unwrap();
        let (store, cleaned) = Store::open(&dir).unwrap();
        assert_eq!(cleaned.files, 2);
        assert!(cleaned.bytes >= 8192, "{cleaned:?}");
        assert!(!dir.join("gen-3.rdb").exists() && !dir.join("gen-3.log").exists());
        assert!(dir.join("notes.txt").exists(), "a file not ours is left alone");
        // A second relay on the same store is refused while the first holds it.
        let e = Store::open(&dir).unwrap_err();
        assert!(matches!(e, StoreError::Locked { .. }), "{e}");
        drop(store);
        assert!(Store::open(&dir).is_ok(), "the lock goes with its holder");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_missing_directory_is_named() {
        let e = Store::open(Path::new("/nonexistent/fastrepl-store")).unwrap_err();
        assert!(e.to_string().contains("/nonexistent/fastrepl-store"), "{e}");
    }

    pub(crate) fn tempdir() -> PathBuf {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("fastrepl-store-test-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }
}
