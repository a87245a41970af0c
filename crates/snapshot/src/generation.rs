//! One generation and its single writer: the RDB bytes in a memfd, cut into blocks published behind
//! a watermark with their checksums, the stream log after them, and the state the relay records.

use crate::appended::Appended;
use crate::checksum::block_checksum;
use crate::config::Config;
use crate::descriptor::Descriptor;
use crate::error::Error;
use crate::log::StreamLog;
use crate::region::Region;
use crate::state::State;
use replication::ReplId;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

struct Inner {
    published: u64,
    checksums: Vec<u32>,
    length: Option<u64>,
    rdb_version: Option<u32>,
    state: State,
    error: Option<String>,
    log: StreamLog,
    /// Bumped on every change, so waiters can tell "changed since I looked".
    version: u64,
}

/// One snapshot generation, shared by the capturing writer and every reader.
pub struct Generation {
    id: u64,
    replid: ReplId,
    offset: u64,
    config: Config,
    region: Region,
    created: Instant,
    inner: Mutex<Inner>,
    changed: Condvar,
}

impl std::fmt::Debug for Generation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Generation").field("id", &self.id).field("replid", &self.replid).field("offset", &self.offset).finish()
    }
}

impl Generation {
    /// A new generation for the RDB that follows `+FULLRESYNC <replid> <offset>`. `length` is known for
    /// the `$<len>` framing. Returns the shared generation and its only writer.
    pub fn create(id: u64, replid: ReplId, offset: u64, length: Option<u64>, config: Config) -> Result<(std::sync::Arc<Generation>, Writer), Error> {
        assert!(config.block_size > 0 && config.block_size <= limits::GENERATION_BLOCK_BYTES_MAX, "block size out of range");
        let capacity = match length {
            Some(n) if n > config.snapshot_bytes_max => return Err(Error::TooLarge { max: config.snapshot_bytes_max }),
            // Room for the EOF mark too: it lands in the region before we know it is the mark.
            Some(n) => n,
            None => config.snapshot_bytes_max + replication::framing::EOF_MARK_LEN as u64,
        };
        let region = Region::create(&format!("fastrepl-gen-{id}"), capacity).map_err(Error::Region)?;
        let map = region.map_writable().map_err(Error::Region)?;
        let gen = std::sync::Arc::new(Generation {
            id,
            replid,
            offset,
            config,
            region,
            created: Instant::now(),
            inner: Mutex::new(Inner {
                published: 0,
                checksums: Vec::new(),
                length,
                rdb_version: None,
                state: State::Capturing,
                error: None,
                log: StreamLog::new(offset),
                version: 0,
            }),
            changed: Condvar::new(),
        });
        let holdback = if length.is_some() { 0 } else { replication::framing::EOF_MARK_LEN as u64 };
        let writer = Writer { gen: gen.clone(), map, written: 0, holdback, capacity, published: 0 };
        Ok((gen, writer))
    }

    /// Generation number.
    pub fn id(&self) -> u64 {
        self.id
    }
    /// The master's replication ID at the snapshot.
    pub fn replid(&self) -> &ReplId {
        &self.replid
    }
    /// The snapshot's replication offset.
    pub fn offset(&self) -> u64 {
        self.offset
    }
    /// The memfd holding the RDB bytes.
    pub fn region(&self) -> &Region {
        &self.region
    }
    /// Block size.
    pub fn block_size(&self) -> u64 {
        self.config.block_size
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves consistent data (every update is a few assignments).
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn bump(&self, inner: &mut Inner) {
        inner.version += 1;
        self.changed.notify_all();
    }

    /// The descriptor; `checksums_from` skips checksums the caller already has.
    pub fn descriptor(&self, checksums_from: usize) -> (Descriptor, u64) {
        let inner = self.lock();
        let d = Descriptor {
            generation: self.id,
            replid: self.replid.to_string(),
            offset: self.offset,
            block_size: self.config.block_size,
            length: inner.length,
            published: inner.published,
            checksums: inner.checksums.get(checksums_from..).unwrap_or(&[]).to_vec(),
            rdb_version: inner.rdb_version,
            log_end: inner.log.complete_end(),
            state: inner.state,
            error: inner.error.clone(),
        };
        (d, inner.version)
    }

    /// Blocks readable now, and the total once the RDB's length is known.
    pub fn blocks(&self) -> (u64, Option<u64>) {
        let inner = self.lock();
        (inner.checksums.len() as u64, inner.length.map(|l| l.div_ceil(self.config.block_size)))
    }

    /// Wait until something changed after `seen_version`, or the timeout; returns the new version.
    pub fn wait_change(&self, seen_version: u64, timeout: Duration) -> u64 {
        let inner = self.lock();
        let (inner, _) = self
            .changed
            .wait_timeout_while(inner, timeout, |i| i.version == seen_version)
            .unwrap_or_else(|p| p.into_inner());
        inner.version
    }

    /// Check that `[offset, offset+len)` is published.
    pub fn check_readable(&self, offset: u64, len: u64) -> Result<(), Error> {
        let inner = self.lock();
        if inner.state == State::Failed {
            return Err(Error::Failed { generation: self.id, reason: inner.error.clone().unwrap_or_default() });
        }
        if offset.checked_add(len).is_none_or(|end| end > inner.published) {
            return Err(Error::NotPublished { offset, len, published: inner.published });
        }
        Ok(())
    }

    /// Copy log bytes from absolute offset `from` (the first byte is `offset + 1`), at most `max`,
    /// ending at a command boundary. Empty when nothing is there yet.
    pub fn read_log(&self, from: u64, max: usize) -> Result<Vec<u8>, Error> {
        self.lock().log.read(from, max)
    }

    /// Append stream bytes after the RDB; `complete_end` is the offset after the last complete command.
    /// A generation recorded sealed or failed takes no more bytes (readers may already have taken its
    /// log's end as final): [`Appended::Refused`].
    pub fn append_log(&self, bytes: &[u8], complete_end: u64) -> Appended {
        let mut inner = self.lock();
        if matches!(inner.state, State::Sealed | State::Failed) {
            return Appended::Refused;
        }
        inner.log.append(bytes, complete_end);
        let full = inner.log.len() as u64 >= self.config.log_bytes_max || self.created.elapsed() >= self.config.log_age_max;
        self.bump(&mut inner);
        if full {
            Appended::AtBound
        } else {
            Appended::Taken
        }
    }

    /// Record the state the relay's lifecycle decided (complete, sealed, failed), and why for the last
    /// two: the descriptor tells agents. This store decides no transition; sealed and failed are final.
    pub fn record(&self, state: State, why: Option<&str>) {
        let mut inner = self.lock();
        debug_assert!(
            !matches!(inner.state, State::Sealed | State::Failed),
            "generation {}: {:?} is final, {state:?} recorded after it (a sealed generation takes no more log bytes)",
            self.id,
            inner.state
        );
        inner.state = state;
        if let Some(why) = why {
            inner.error = Some(why.to_string());
        }
        self.bump(&mut inner);
    }

    /// State now.
    pub fn state(&self) -> State {
        self.lock().state
    }

    /// Time since the capture of this generation started.
    pub fn age(&self) -> Duration {
        self.created.elapsed()
    }

    /// Bytes held in memory by the log.
    pub fn log_len(&self) -> usize {
        self.lock().log.len()
    }
}

/// The single writer of a generation's RDB bytes. Reads from the master go straight into the region
/// through [`Writer::spare`], so the RDB is copied once: socket → memfd.
pub struct Writer {
    gen: std::sync::Arc<Generation>,
    map: memmap2::MmapMut,
    /// Bytes written into the region (may include an EOF mark at the end).
    written: u64,
    /// Bytes at the end that may turn out to be the EOF mark; not published until the length is known.
    holdback: u64,
    capacity: u64,
    /// The watermark as this writer last moved it (only it moves it): [`Writer::spare`] never hands
    /// out room below it, because published bytes never change.
    published: u64,
}

impl Writer {
    /// The generation written to.
    pub fn generation(&self) -> &std::sync::Arc<Generation> {
        &self.gen
    }

    /// Room to read the next bytes into, at most `max`. Empty when the region is full.
    pub fn spare(&mut self, max: u64) -> &mut [u8] {
        debug_assert!(self.written >= self.published, "room below the watermark: published bytes never change");
        let start = self.written as usize;
        let end = (self.capacity.min(self.written.saturating_add(max))) as usize;
        &mut self.map[start..end]
    }

    /// True when the region is full (only an error when the payload is not complete).
    pub fn is_full(&self) -> bool {
        self.written >= self.capacity
    }

    /// The last (up to) `n` bytes written.
    pub fn tail(&self, n: usize) -> &[u8] {
        let end = self.written as usize;
        &self.map[end.saturating_sub(n)..end]
    }

    /// Account for `n` bytes just read into [`Writer::spare`] and publish, with its checksum, every block
    /// that is now whole.
    pub fn commit(&mut self, n: usize) {
        let bs = self.gen.config.block_size;
        self.written += n as u64;
        assert!(self.written <= self.capacity, "wrote past the region");
        let mut inner = self.gen.lock();
        if inner.rdb_version.is_none() && self.written >= 9 {
            inner.rdb_version = replication::rdb::version(&self.map[..9]);
        }
        let publishable = self.written.saturating_sub(self.holdback);
        let mut changed = false;
        // Publish every block that is now full (and certainly not the EOF mark).
        while publishable >= inner.published + bs {
            let start = inner.published as usize;
            let crc = block_checksum(&self.map[start..start + bs as usize]);
            inner.checksums.push(crc);
            inner.published += bs;
            changed = true;
        }
        debug_assert!(inner.published >= self.published && inner.published <= publishable, "the watermark only moves forward, never over held-back bytes");
        debug_assert_eq!(inner.checksums.len() as u64, inner.published / bs, "one checksum per published block");
        self.published = inner.published;
        if changed {
            self.gen.bump(&mut inner);
        }
    }

    /// The payload is complete and its RDB bytes are `length` long (any EOF mark excluded): publish the
    /// last partial block. The generation's state is the relay's to record ([`Generation::record`]).
    pub fn finish(self, length: u64) {
        assert!(length <= self.written, "RDB length beyond the bytes written");
        let bs = self.gen.config.block_size;
        let mut inner = self.gen.lock();
        assert!(inner.published <= length, "published past the end of the RDB");
        while inner.published < length {
            let start = inner.published as usize;
            let end = (inner.published + bs).min(length) as usize;
            inner.checksums.push(block_checksum(&self.map[start..end]));
            inner.published = end as u64;
        }
        debug_assert_eq!(inner.checksums.len() as u64, length.div_ceil(bs), "one checksum per published block");
        inner.length = Some(length);
        self.gen.bump(&mut inner);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checksum::block_checksum;

    fn rid() -> ReplId {
        ReplId::parse(&[b'a'; 40]).unwrap()
    }

    fn cfg(bs: u64) -> Config {
        Config { block_size: bs, snapshot_bytes_max: 1 << 20, ..Default::default() }
    }

    #[test]
    fn eof_framing_holds_back_the_mark() {
        let (gen, mut w) = Generation::create(1, rid(), 10, None, cfg(8)).unwrap();
        let data: Vec<u8> = (0..20u8).collect();
        let mark = [b'M'; 40];
        let mut all = data.clone();
        all.extend_from_slice(&mark);
        for chunk in all.chunks(7) {
            w.spare(7)[..chunk.len()].copy_from_slice(chunk);
            w.commit(chunk.len());
        }
        let (d, _) = gen.descriptor(0);
        // 60 bytes written, 40 held back: only 2 full blocks of 8 published.
        assert_eq!(d.published, 16);
        assert_eq!(d.state, State::Capturing);
        w.finish(20);
        let (d, _) = gen.descriptor(0);
        assert_eq!(d.published, 20);
        assert_eq!(d.length, Some(20));
        assert_eq!(d.checksums, vec![block_checksum(&data[..8]), block_checksum(&data[8..16]), block_checksum(&data[16..])]);
        assert!(gen.check_readable(16, 4).is_ok());
        assert!(gen.check_readable(16, 5).is_err());
        // The memfd holds the bytes.
        let mut buf = [0u8; 20];
        gen.region().read_at(0, &mut buf).unwrap();
        assert_eq!(&buf[..], &data[..]);
    }

    #[test]
    fn length_framing_and_bounds() {
        assert!(matches!(Generation::create(1, rid(), 0, Some(2 << 20), cfg(8)), Err(Error::TooLarge { .. })));
        let (gen, mut w) = Generation::create(1, rid(), 0, Some(16), cfg(8)).unwrap();
        w.spare(100)[..16].copy_from_slice(b"REDIS0011abcdefg");
        w.commit(16);
        assert!(w.is_full());
        let (d, _) = gen.descriptor(1);
        assert_eq!((d.published, d.rdb_version, d.checksums.len()), (16, Some(11), 1));
    }

    #[test]
    fn log_reads_stop_at_command_boundaries() {
        let (gen, w) = Generation::create(1, rid(), 100, Some(0), cfg(8)).unwrap();
        w.finish(0);
        assert_eq!(gen.append_log(b"*1\r\n$4\r\nPING\r\n*1\r\n$4", 114), Appended::Taken);
        assert_eq!(gen.read_log(101, 1000).unwrap(), b"*1\r\n$4\r\nPING\r\n");
        assert_eq!(gen.read_log(115, 1000).unwrap(), b"");
        assert!(gen.read_log(99, 10).is_err());
        gen.append_log(b"\r\nPING\r\n", 128);
        assert_eq!(gen.read_log(115, 1000).unwrap(), b"*1\r\n$4\r\nPING\r\n");
        gen.record(State::Sealed, Some("log bound"));
        assert_eq!(gen.append_log(b"*1\r\n", 132), Appended::Refused, "a sealed generation takes no more log bytes");
        assert_eq!(gen.read_log(129, 1000).unwrap(), b"");
        let (d, _) = gen.descriptor(0);
        assert_eq!((d.state, d.error.as_deref()), (State::Sealed, Some("log bound")));
    }
}
