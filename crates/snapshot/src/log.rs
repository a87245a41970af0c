//! The master's command stream after the snapshot, indexed by replication offset: in memory, or with
//! a store in a file of it, appended to and read back with `pread`.

use crate::error::Error;
use crate::store::{allocated_bytes, write_back, StoredFile};
use std::os::unix::fs::FileExt;

/// Bytes appended between two write-backs of a store's log: the dirty pages the log leaves stay
/// within about twice this.
const WRITE_BACK_BYTES: u64 = 8 << 20;

/// Where the log's bytes are.
#[derive(Debug)]
enum Backing {
    Memory(Vec<u8>),
    File {
        /// Removed from the store with the log.
        stored: StoredFile,
        /// Where the last write-back started (everything before it is on disk once the next starts).
        kicked: u64,
        /// Where the one before it started.
        waited: u64,
    },
}

/// Stream bytes from `start + 1` on.
#[derive(Debug)]
pub struct StreamLog {
    /// Offset of the byte before the first one held (the snapshot offset).
    start: u64,
    /// Bytes held.
    len: u64,
    backing: Backing,
    /// Offset of the end of the last complete command.
    complete_end: u64,
}

impl StreamLog {
    /// An empty log in memory after offset `start`.
    pub fn new(start: u64) -> Self {
        StreamLog { start, len: 0, backing: Backing::Memory(Vec::new()), complete_end: start }
    }

    /// An empty log after offset `start` in a store's (new, empty) file.
    pub(crate) fn in_file(start: u64, stored: StoredFile) -> Self {
        StreamLog { start, len: 0, backing: Backing::File { stored, kicked: 0, waited: 0 }, complete_end: start }
    }

    /// Bytes held.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Bytes the log's store file takes on disk (allocated); 0 in memory.
    pub fn store_bytes(&self) -> u64 {
        match &self.backing {
            Backing::Memory(_) => 0,
            Backing::File { stored, .. } => allocated_bytes(&stored.file),
        }
    }

    /// True when nothing is held.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Offset of the end of the last complete command.
    pub fn complete_end(&self) -> u64 {
        self.complete_end
    }

    /// Append bytes as they came from the master. On a store's write error nothing is taken: the log
    /// and its end stay what they were (bytes a failed write may have left past the end are never
    /// read).
    pub fn append(&mut self, bytes: &[u8], complete_end: u64) -> Result<(), Error> {
        assert!(complete_end >= self.complete_end, "log offsets only move forward");
        assert!(complete_end <= self.start + self.len + bytes.len() as u64, "complete end beyond the log");
        match &mut self.backing {
            Backing::Memory(v) => v.extend_from_slice(bytes),
            Backing::File { stored, kicked, waited } => {
                // Truncated under the relay, a write at our end would leave a hole of zeros where
                // logged commands were.
                stored.check_holds("write the stream log to", self.len)?;
                stored.file.write_all_at(bytes, self.len).map_err(|e| stored.error("write the stream log to", e))?;
                let end = self.len + bytes.len() as u64;
                if end - *kicked >= WRITE_BACK_BYTES {
                    write_back(&stored.file, *waited, *kicked, end - *kicked).map_err(|e| stored.error("write back the stream log", e))?;
                    *waited = *kicked;
                    *kicked = end;
                }
            }
        }
        self.len += bytes.len() as u64;
        self.complete_end = complete_end;
        Ok(())
    }

    /// Bytes from absolute offset `from` (first byte of the log = `start + 1`), at most `max`, never
    /// past the end of the last complete command.
    pub fn read(&self, from: u64, max: usize) -> Result<Vec<u8>, Error> {
        if from <= self.start || from > self.complete_end + 1 {
            return Err(Error::LogRange { from, first: self.start + 1, end: self.complete_end + 1 });
        }
        let i = from - self.start - 1;
        let end = (self.complete_end - self.start).min(i.saturating_add(max as u64));
        match &self.backing {
            Backing::Memory(v) => Ok(v[i as usize..end as usize].to_vec()),
            Backing::File { stored, .. } => {
                let mut out = vec![0u8; (end - i) as usize];
                // A short read (the file truncated under the relay) is an error, never fewer bytes.
                stored.file.read_exact_at(&mut out, i).map_err(|e| stored.error("read the stream log from", e))?;
                Ok(out)
            }
        }
    }
}
