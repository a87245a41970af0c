//! The master's command stream after the snapshot, kept in memory and indexed by replication offset.

/// Stream bytes from `start + 1` on.
#[derive(Debug)]
pub struct StreamLog {
    /// Offset of the byte before the first one held (the snapshot offset).
    start: u64,
    bytes: Vec<u8>,
    /// Offset of the end of the last complete command.
    complete_end: u64,
}

impl StreamLog {
    /// An empty log after offset `start`.
    pub fn new(start: u64) -> Self {
        StreamLog { start, bytes: Vec::new(), complete_end: start }
    }

    /// Bytes held.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// True when nothing is held.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// Offset of the end of the last complete command.
    pub fn complete_end(&self) -> u64 {
        self.complete_end
    }

    /// Append bytes as they came from the master.
    pub fn append(&mut self, bytes: &[u8], complete_end: u64) {
        self.bytes.extend_from_slice(bytes);
        assert!(complete_end >= self.complete_end, "log offsets only move forward");
        assert!(complete_end <= self.start + self.bytes.len() as u64, "complete end beyond the log");
        self.complete_end = complete_end;
    }

    /// Bytes from absolute offset `from` (first byte of the log = `start + 1`), at most `max`, never
    /// past the end of the last complete command.
    pub fn read(&self, from: u64, max: usize) -> Result<Vec<u8>, crate::error::Error> {
        if from <= self.start || from > self.complete_end + 1 {
            return Err(crate::error::Error::LogRange { from, first: self.start + 1, end: self.complete_end + 1 });
        }
        let i = (from - self.start - 1) as usize;
        let end = ((self.complete_end - self.start) as usize).min(i.saturating_add(max));
        Ok(self.bytes[i..end].to_vec())
    }
}
