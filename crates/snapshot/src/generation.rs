//! One generation and its single writer: the RDB bytes in a memfd, cut into blocks packed
//! (compressed where that pays) and published behind a watermark with their table entries, the
//! stream log after them, and the state the relay records.

use crate::appended::Appended;
use crate::checksum::block_checksum;
use crate::config::Config;
use crate::descriptor::Descriptor;
use crate::error::Error;
use crate::log::StreamLog;
use crate::packer::Packer;
use crate::region::Region;
use crate::state::State;
use crate::store::{write_back, Store, StoreFile};
use crate::table::{Entry, Table};
use codec::Codec;
use replication::ReplId;
use std::os::unix::fs::FileExt;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

struct Inner {
    /// RDB bytes (as the source wrote them) the published blocks hold.
    published: u64,
    /// The published blocks as they are kept; its end is the region's watermark.
    table: Table,
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
    /// the `$<len>` framing. In memory, or with `store` in two new files of it (the RDB, the log).
    /// Returns the shared generation and its only writer.
    pub fn create(id: u64, replid: ReplId, offset: u64, length: Option<u64>, config: Config, store: Option<&Store>) -> Result<(std::sync::Arc<Generation>, Writer), Error> {
        assert!(config.block_size > 0 && config.block_size <= limits::GENERATION_BLOCK_BYTES_MAX, "block size out of range");
        let capacity = match length {
            Some(n) if n > config.snapshot_bytes_max => return Err(Error::TooLarge { max: config.snapshot_bytes_max }),
            // Room for the EOF mark too: it lands in the region before we know it is the mark.
            Some(n) => n,
            None => config.snapshot_bytes_max + replication::framing::EOF_MARK_LEN as u64,
        };
        let holdback = if length.is_some() { 0 } else { replication::framing::EOF_MARK_LEN as u64 };
        let (region, log, target) = match store {
            None => {
                let region = Region::create(&format!("fastrepl-gen-{id}"), capacity).map_err(Error::Region)?;
                let map = region.map_writable().map_err(Error::Region)?;
                (region, StreamLog::new(offset), Target::Map(map))
            }
            Some(store) => {
                let region = Region::in_file(store.create(id, StoreFile::Snapshot)?, capacity)?;
                let log = StreamLog::in_file(offset, store.create(id, StoreFile::Log)?);
                (region, log, Target::File)
            }
        };
        let sink = match (target, config.codec) {
            // In memory and raw, bytes go straight from the socket into the memfd: a block's place
            // is its place in the RDB.
            (Target::Map(map), Codec::Raw) => Sink::Mapped(map),
            (target, codec) => Sink::Buffered {
                // One block and the held-back mark: the most the writer holds before it packs.
                buf: vec![0u8; (config.block_size + holdback) as usize],
                used: 0,
                target,
                packer: Packer::new(id, codec, config.pack_threads).map_err(Error::Pack)?,
            },
        };
        let gen = std::sync::Arc::new(Generation {
            id,
            replid,
            offset,
            config,
            region,
            created: Instant::now(),
            inner: Mutex::new(Inner { published: 0, table: Table::new(), length, rdb_version: None, state: State::Capturing, error: None, log, version: 0 }),
            changed: Condvar::new(),
        });
        let writer = Writer { gen: gen.clone(), sink, written: 0, holdback, capacity, cut: 0, published: 0, stored: 0, head: [0; 9] };
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

    /// The descriptor; `entries_from` skips the table entries the caller already has.
    pub fn descriptor(&self, entries_from: usize) -> (Descriptor, u64) {
        self.descriptor_part(entries_from, usize::MAX)
    }

    /// [`Generation::descriptor`] with at most `entries_max` table entries: when more are published,
    /// the descriptor publishes only the whole blocks it carries (and their stored bytes), and the
    /// next carries the rest. Bounds a control message however many blocks a generation has.
    pub fn descriptor_part(&self, entries_from: usize, entries_max: usize) -> (Descriptor, u64) {
        let inner = self.lock();
        let all = inner.table.entries_from(entries_from);
        let table = all[..all.len().min(entries_max)].to_vec();
        let (published, stored) = match inner.table.get((entries_from + table.len()) as u64) {
            // Cut before block `next`: every block carried is whole.
            Some((_, start)) if table.len() < all.len() => ((entries_from + table.len()) as u64 * self.config.block_size, start),
            _ => (inner.published, inner.table.stored_end()),
        };
        let d = Descriptor {
            generation: self.id,
            replid: self.replid.to_string(),
            offset: self.offset,
            block_size: self.config.block_size,
            length: inner.length,
            published,
            stored,
            table,
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
        (inner.table.len(), inner.length.map(|l| l.div_ceil(self.config.block_size)))
    }

    /// Wait until something changed after `seen_version`, or the timeout; returns the new version.
    pub fn wait_change(&self, seen_version: u64, timeout: Duration) -> u64 {
        let inner = self.lock();
        let (inner, _) = self.changed.wait_timeout_while(inner, timeout, |i| i.version == seen_version).unwrap_or_else(|p| p.into_inner());
        inner.version
    }

    /// Check that `[offset, offset+len)` of the region (stored bytes, as the table places them) is
    /// published.
    pub fn check_readable(&self, offset: u64, len: u64) -> Result<(), Error> {
        let inner = self.lock();
        if inner.state == State::Failed {
            return Err(Error::Failed { generation: self.id, reason: inner.error.clone().unwrap_or_default() });
        }
        let published = inner.table.stored_end();
        if offset.checked_add(len).is_none_or(|end| end > published) {
            return Err(Error::NotPublished { offset, len, published });
        }
        Ok(())
    }

    /// With a store, check that the generation's file is still in the store and holds `[offset,
    /// offset+len)` (`StoredFile::check_holds`): a truncated or removed file is a store fault naming
    /// it, never a short answer. Always fine in memory (a sealed memfd cannot shrink).
    pub fn check_stored(&self, offset: u64, len: u64) -> Result<(), Error> {
        let Some(stored) = self.region.stored() else { return Ok(()) };
        Ok(stored.check_holds("read a snapshot block from", offset.saturating_add(len))?)
    }

    /// Copy log bytes from absolute offset `from` (the first byte is `offset + 1`), at most `max`,
    /// ending at a command boundary. Empty when nothing is there yet.
    pub fn read_log(&self, from: u64, max: usize) -> Result<Vec<u8>, Error> {
        self.lock().log.read(from, max)
    }

    /// Append stream bytes after the RDB; `complete_end` is the offset after the last complete command.
    /// A generation recorded sealed or failed takes no more bytes (readers may already have taken its
    /// log's end as final): [`Appended::Refused`]. A store's write error takes nothing and is returned:
    /// the log as it was stays readable, and the relay seals it.
    pub fn append_log(&self, bytes: &[u8], complete_end: u64) -> Result<Appended, Error> {
        let mut inner = self.lock();
        if matches!(inner.state, State::Sealed | State::Failed) {
            return Ok(Appended::Refused);
        }
        inner.log.append(bytes, complete_end)?;
        let full = inner.log.len() >= self.config.log_bytes_max || self.created.elapsed() >= self.config.log_age_max;
        self.bump(&mut inner);
        Ok(if full { Appended::AtBound } else { Appended::Taken })
    }

    /// Record the state the relay's lifecycle decided (complete, sealed, failed), and why for the last
    /// two: the descriptor tells agents. This store decides no transition; failed is final, and sealed
    /// is but for a store fault (its file failed under it: failed).
    pub fn record(&self, state: State, why: Option<&str>) {
        let mut inner = self.lock();
        debug_assert!(
            inner.state != State::Failed && !(inner.state == State::Sealed && state != State::Failed),
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

    /// Bytes this generation's files take on the store's disk (allocated, so a sparse snapshot file
    /// counts what was written); 0 in memory.
    pub fn store_bytes(&self) -> u64 {
        self.region.store_bytes() + self.lock().log.store_bytes()
    }

    /// Bytes the log holds (in memory, or in its store file).
    pub fn log_len(&self) -> u64 {
        self.lock().log.len()
    }
}

/// Where a writer puts the RDB bytes before they are published.
enum Sink {
    /// Raw, in memory: the memfd mapped writable, bytes read straight into it (socket → memfd, one
    /// copy).
    Mapped(memmap2::MmapMut),
    /// Compressed, or in a store: bytes are read into one block's buffer (and the held-back mark);
    /// a whole block is packed ([`Packer`]), then placed in `target` after the blocks before it and
    /// published. Published bytes are in the region.
    Buffered {
        /// The RDB's bytes not yet cut into a block: `buf[..used]` is `[cut, written)`.
        buf: Vec<u8>,
        used: usize,
        target: Target,
        packer: Packer,
    },
}

/// Where packed blocks are placed.
enum Target {
    /// The memfd, mapped writable.
    Map(memmap2::MmapMut),
    /// The store's file, written with `pwrite`.
    File,
}

/// The single writer of a generation's RDB bytes. Reads from the master go straight into the region
/// (memory) or one block's buffer (store) through [`Writer::spare`].
pub struct Writer {
    gen: std::sync::Arc<Generation>,
    sink: Sink,
    /// Bytes written into the region (may include an EOF mark at the end).
    written: u64,
    /// Bytes at the end that may turn out to be the EOF mark; not published until the length is known.
    holdback: u64,
    capacity: u64,
    /// RDB bytes cut into blocks and handed to the packer (raw, in memory: the same as `published`).
    cut: u64,
    /// The watermark as this writer last moved it (only it moves it), in RDB bytes: [`Writer::spare`]
    /// never hands out room below it, because published bytes never change.
    published: u64,
    /// The same watermark in the region: the stored bytes of the blocks placed.
    stored: u64,
    /// The RDB's first bytes (its header: the format version), as they arrived.
    head: [u8; 9],
}

impl Writer {
    /// The generation written to.
    pub fn generation(&self) -> &std::sync::Arc<Generation> {
        &self.gen
    }

    /// Room to read the next bytes into, at most `max`. Empty when the region is full.
    pub fn spare(&mut self, max: u64) -> &mut [u8] {
        debug_assert!(self.written >= self.published, "room below the watermark: published bytes never change");
        let room = self.capacity.min(self.written.saturating_add(max)) - self.written;
        match &mut self.sink {
            Sink::Mapped(map) => {
                let start = self.written as usize;
                &mut map[start..start + room as usize]
            }
            // Never past one block and the mark: a read then ends exactly where a block can be
            // cut, and what stays behind is at most the mark's bytes.
            Sink::Buffered { buf, used, .. } => {
                let room = (room as usize).min(buf.len() - *used);
                &mut buf[*used..*used + room]
            }
        }
    }

    /// True when the region is full (only an error when the payload is not complete).
    pub fn is_full(&self) -> bool {
        self.written >= self.capacity
    }

    /// The last (up to) `n` bytes written (with a store, at most the bytes not yet published: with
    /// the EOF framing that is always the mark's length, all the machine looks at).
    pub fn tail(&self, n: usize) -> &[u8] {
        match &self.sink {
            Sink::Mapped(map) => {
                let end = self.written as usize;
                &map[end.saturating_sub(n)..end]
            }
            Sink::Buffered { buf, used, .. } => &buf[used.saturating_sub(n)..*used],
        }
    }

    /// Account for `n` bytes just read into [`Writer::spare`] and publish, with its table entry, every
    /// block that is now whole and packed. With a store, a block is on its file before it is
    /// published; a write that fails publishes nothing more and is returned (the capture fails, and
    /// the generation with it).
    pub fn commit(&mut self, n: usize) -> Result<(), Error> {
        let bs = self.gen.config.block_size;
        let from = self.written;
        self.written += n as u64;
        assert!(self.written <= self.capacity, "wrote past the region");
        let just = match &mut self.sink {
            Sink::Mapped(map) => &map[from as usize..self.written as usize],
            Sink::Buffered { buf, used, .. } => {
                *used += n;
                &buf[*used - n..*used]
            }
        };
        // The RDB's header, kept aside as it passes: a store's buffer may have moved on by the time
        // its 9 bytes are all there (blocks smaller than a header, in tests).
        if from < self.head.len() as u64 {
            let k = (self.head.len() - from as usize).min(n);
            self.head[from as usize..from as usize + k].copy_from_slice(&just[..k]);
        }
        // Read once, by the commit that completes the header.
        let version = (from < self.head.len() as u64 && self.written >= self.head.len() as u64).then(|| replication::rdb::version(&self.head)).flatten();
        let publishable = self.written.saturating_sub(self.holdback);
        // Checksummed, packed and placed outside the lock: readers take it at every request, and
        // only this writer moves the watermark.
        let mut entries = Vec::new();
        let placed = if let Sink::Mapped(map) = &self.sink {
            while publishable >= self.published + bs {
                let start = self.published;
                let crc = block_checksum(&map[start as usize..(start + bs) as usize]);
                entries.push(Entry { crc, stored_len: bs as u32, codec: Codec::Raw });
                self.published += bs;
                self.stored += bs;
                self.cut = self.published;
            }
            Ok(())
        } else {
            self.cut_blocks(publishable, &mut entries)
        };
        self.publish(entries, version);
        placed
    }

    /// Place and publish the blocks the packer has finished since the last commit, without waiting:
    /// called when the source is quiet, so that a slow stream does not hold finished blocks back.
    pub fn poll(&mut self) -> Result<(), Error> {
        if !matches!(self.sink, Sink::Buffered { .. }) {
            return Ok(());
        }
        let mut entries = Vec::new();
        let placed = self.place_ready(false, &mut entries);
        self.publish(entries, None);
        placed
    }

    /// Cut every whole block below `until` out of the buffer, hand it to the packer (waiting for the
    /// oldest in flight when the pool is full), and place what is packed, in order, into `entries`.
    fn cut_blocks(&mut self, until: u64, entries: &mut Vec<Entry>) -> Result<(), Error> {
        let bs = self.gen.config.block_size;
        while until >= self.cut + bs {
            self.cut_one(bs as usize, entries)?;
        }
        self.place_ready(false, entries)
    }

    /// Cut the buffer's first `len` bytes as the next block and hand it to the packer.
    fn cut_one(&mut self, len: usize, entries: &mut Vec<Entry>) -> Result<(), Error> {
        let Sink::Buffered { packer, .. } = &mut self.sink else { unreachable!("only a buffered writer cuts blocks") };
        if packer.in_flight() >= packer.in_flight_max() {
            self.place_next(true, entries)?;
        }
        let Sink::Buffered { buf, used, packer, .. } = &mut self.sink else { unreachable!() };
        let mut block = packer.buffer();
        block.extend_from_slice(&buf[..len]);
        buf.copy_within(len..*used, 0);
        *used -= len;
        packer.submit(block);
        self.cut += len as u64;
        Ok(())
    }

    /// Place packed blocks while the oldest is ready (or, with `wait`, every block in flight).
    fn place_ready(&mut self, wait: bool, entries: &mut Vec<Entry>) -> Result<(), Error> {
        while self.place_next(wait, entries)? {}
        Ok(())
    }

    /// Place the oldest block in flight, if packed (waiting for it with `wait`): written at the
    /// region's watermark, its entry added to `entries`. Whether one was placed.
    fn place_next(&mut self, wait: bool, entries: &mut Vec<Entry>) -> Result<bool, Error> {
        let Sink::Buffered { target, packer, .. } = &mut self.sink else { unreachable!("only a buffered writer places blocks") };
        let Some(p) = packer.next(wait).map_err(Error::Pack)? else { return Ok(false) };
        let bytes = p.bytes();
        let at = self.stored;
        match target {
            Target::Map(map) => map[at as usize..at as usize + bytes.len()].copy_from_slice(bytes),
            Target::File => write_block(&self.gen, bytes, at)?,
        }
        entries.push(Entry { crc: p.crc, stored_len: bytes.len() as u32, codec: p.codec });
        self.stored += bytes.len() as u64;
        self.published += p.raw.len() as u64;
        packer.recycle(p);
        Ok(true)
    }

    /// Move the generation's watermark to this writer's, with the table entries of the blocks between.
    fn publish(&self, entries: Vec<Entry>, version: Option<u32>) {
        if entries.is_empty() && version.is_none() {
            // Nothing for readers: no lock taken on most reads from the socket.
            return;
        }
        let bs = self.gen.config.block_size;
        let mut inner = self.gen.lock();
        if version.is_some() {
            inner.rdb_version = version;
        }
        if entries.is_empty() {
            return;
        }
        debug_assert!(self.published > inner.published, "the watermark only moves forward");
        for e in entries {
            inner.table.push(e);
        }
        inner.published = self.published;
        debug_assert!(inner.published <= self.written.saturating_sub(self.holdback) || inner.length.is_some(), "never over held-back bytes");
        debug_assert_eq!(inner.table.len(), inner.published.div_ceil(bs), "one entry per published block");
        debug_assert_eq!(inner.table.stored_end(), self.stored, "the table places every block");
        self.gen.bump(&mut inner);
    }

    /// The payload is complete and its RDB bytes are `length` long (any EOF mark excluded): publish the
    /// last blocks, the partial one too. The generation's state is the relay's to record
    /// ([`Generation::record`]).
    pub fn finish(mut self, length: u64) -> Result<(), Error> {
        assert!(length <= self.written, "RDB length beyond the bytes written");
        assert!(self.cut <= length, "published past the end of the RDB");
        let bs = self.gen.config.block_size;
        let mut entries = Vec::new();
        let placed = if let Sink::Mapped(map) = &self.sink {
            while self.published < length {
                let (start, end) = (self.published, (self.published + bs).min(length));
                let crc = block_checksum(&map[start as usize..end as usize]);
                entries.push(Entry { crc, stored_len: (end - start) as u32, codec: Codec::Raw });
                self.published = end;
                self.stored = end;
            }
            Ok(())
        } else {
            self.finish_buffered(length, &mut entries)
        };
        let mut inner = self.gen.lock();
        for e in entries {
            inner.table.push(e);
        }
        inner.published = self.published;
        // What was placed before a failed write stays published; the length only once all is.
        if placed.is_ok() {
            debug_assert_eq!(inner.table.len(), length.div_ceil(bs), "one entry per published block");
            inner.length = Some(length);
        }
        self.gen.bump(&mut inner);
        placed
    }

    /// Cut the rest up to `length` into blocks (the last one partial) and place every block in flight.
    fn finish_buffered(&mut self, length: u64, entries: &mut Vec<Entry>) -> Result<(), Error> {
        let bs = self.gen.config.block_size;
        while self.cut < length {
            let len = bs.min(length - self.cut) as usize;
            self.cut_one(len, entries)?;
        }
        self.place_ready(true, entries)
    }
}

/// Write one block of a store's generation at `offset`, and keep the dirty pages the capture leaves
/// within about two blocks ([`write_back`]).
fn write_block(gen: &Generation, bytes: &[u8], offset: u64) -> Result<(), Error> {
    let stored = gen.region.stored().expect("a buffered writer writes a store's file");
    // The file is sized to the region's capacity at creation: shorter, someone truncated it, and
    // writing on would leave published blocks as a hole of zeros.
    stored.check_holds("write a snapshot block to", gen.region.capacity())?;
    stored.file.write_all_at(bytes, offset).map_err(|e| stored.error("write a snapshot block to", e))?;
    let bs = gen.config.block_size;
    write_back(&stored.file, offset.saturating_sub(bs), offset, bytes.len() as u64).map_err(|e| stored.error("write back the snapshot to", e))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checksum::block_checksum;

    fn rid() -> ReplId {
        ReplId::parse(&[b'a'; 40]).unwrap()
    }

    /// Raw blocks: a block's place is its place in the RDB.
    fn cfg(bs: u64) -> Config {
        Config { block_size: bs, snapshot_bytes_max: 1 << 20, codec: Codec::Raw, ..Default::default() }
    }

    fn crcs(d: &Descriptor) -> Vec<u32> {
        d.table.iter().map(|e| e.crc).collect()
    }

    #[test]
    fn eof_framing_holds_back_the_mark() {
        let (gen, mut w) = Generation::create(1, rid(), 10, None, cfg(8), None).unwrap();
        let data: Vec<u8> = (0..20u8).collect();
        let mark = [b'M'; 40];
        let mut all = data.clone();
        all.extend_from_slice(&mark);
        for chunk in all.chunks(7) {
            w.spare(7)[..chunk.len()].copy_from_slice(chunk);
            w.commit(chunk.len()).unwrap();
        }
        let (d, _) = gen.descriptor(0);
        // 60 bytes written, 40 held back: only 2 full blocks of 8 published.
        assert_eq!(d.published, 16);
        assert_eq!(d.state, State::Capturing);
        w.finish(20).unwrap();
        let (d, _) = gen.descriptor(0);
        assert_eq!(d.published, 20);
        assert_eq!(d.length, Some(20));
        assert_eq!(crcs(&d), vec![block_checksum(&data[..8]), block_checksum(&data[8..16]), block_checksum(&data[16..])]);
        assert!(d.table.iter().all(|e| e.codec == Codec::Raw) && d.stored == 20);
        assert!(gen.check_readable(16, 4).is_ok());
        assert!(gen.check_readable(16, 5).is_err());
        // The memfd holds the bytes.
        let mut buf = [0u8; 20];
        gen.region().read_at(0, &mut buf).unwrap();
        assert_eq!(&buf[..], &data[..]);
    }

    #[test]
    fn length_framing_and_bounds() {
        assert!(matches!(Generation::create(1, rid(), 0, Some(2 << 20), cfg(8), None), Err(Error::TooLarge { .. })));
        let (gen, mut w) = Generation::create(1, rid(), 0, Some(16), cfg(8), None).unwrap();
        w.spare(100)[..16].copy_from_slice(b"REDIS0011abcdefg");
        w.commit(16).unwrap();
        assert!(w.is_full());
        let (d, _) = gen.descriptor(1);
        assert_eq!((d.published, d.rdb_version, d.table.len()), (16, Some(11), 1));
    }

    #[test]
    fn log_reads_stop_at_command_boundaries() {
        let (gen, w) = Generation::create(1, rid(), 100, Some(0), cfg(8), None).unwrap();
        w.finish(0).unwrap();
        assert_eq!(gen.append_log(b"*1\r\n$4\r\nPING\r\n*1\r\n$4", 114).unwrap(), Appended::Taken);
        assert_eq!(gen.read_log(101, 1000).unwrap(), b"*1\r\n$4\r\nPING\r\n");
        assert_eq!(gen.read_log(115, 1000).unwrap(), b"");
        assert!(gen.read_log(99, 10).is_err());
        gen.append_log(b"\r\nPING\r\n", 128).unwrap();
        assert_eq!(gen.read_log(115, 1000).unwrap(), b"*1\r\n$4\r\nPING\r\n");
        gen.record(State::Sealed, Some("log bound"));
        assert_eq!(gen.append_log(b"*1\r\n", 132).unwrap(), Appended::Refused, "a sealed generation takes no more log bytes");
        assert_eq!(gen.read_log(129, 1000).unwrap(), b"");
        let (d, _) = gen.descriptor(0);
        assert_eq!((d.state, d.error.as_deref()), (State::Sealed, Some("log bound")));
    }

    /// Feed `all` in chunks of the given sizes (cycled), as a capture would, and finish at `len`.
    fn feed(w: &mut Writer, all: &[u8], sizes: &[usize]) {
        let mut done = 0;
        let mut k = 0;
        while done < all.len() {
            let want = sizes[k % sizes.len()].min(all.len() - done);
            k += 1;
            let spare = w.spare(want as u64);
            let n = spare.len().min(want);
            assert!(n > 0, "no room at {done}");
            spare[..n].copy_from_slice(&all[done..done + n]);
            w.commit(n).unwrap();
            // The machine looks for the mark in the tail after every read.
            assert_eq!(w.tail(TAIL), &all[(done + n).saturating_sub(TAIL)..done + n], "tail at {}", done + n);
            done += n;
        }
    }
    const TAIL: usize = replication::framing::EOF_MARK_LEN;

    #[test]
    fn a_store_holds_the_same_blocks_as_memory_and_removes_its_files() {
        let dir = crate::store::tests::tempdir();
        let (store, _) = Store::open(&dir).unwrap();
        let data: Vec<u8> = (0..1000u32).map(|i| (i * 7 % 251) as u8).collect();
        let mut all = data.clone();
        all.extend_from_slice(&[b'M'; TAIL]);
        for sizes in [&[7usize][..], &[1, 64, 3], &[1000], &[48, 48, 5]] {
            let (mem, mut mw) = Generation::create(1, rid(), 10, None, cfg(64), None).unwrap();
            let (disk, mut dw) = Generation::create(2, rid(), 10, None, cfg(64), Some(&store)).unwrap();
            feed(&mut mw, &all, sizes);
            feed(&mut dw, &all, sizes);
            assert_eq!(mem.descriptor(0).0.published, disk.descriptor(0).0.published, "{sizes:?}");
            assert_eq!(disk.descriptor(0).0.published, 960, "never over the held-back mark");
            mw.finish(1000).unwrap();
            dw.finish(1000).unwrap();
            let (m, d) = (mem.descriptor(0).0, disk.descriptor(0).0);
            assert_eq!((d.published, d.length, &d.table), (1000, Some(1000), &m.table), "{sizes:?}");
            let mut buf = vec![0u8; 1000];
            disk.region().read_at(0, &mut buf).unwrap();
            assert_eq!(buf, data, "the file holds the RDB bytes, not the mark");
            assert!(disk.store_bytes() > 0);
            let path = dir.join("gen-2.rdb");
            assert!(path.exists() && dir.join("gen-2.log").exists());
            drop(disk);
            assert!(!path.exists() && !dir.join("gen-2.log").exists(), "a released generation's files are removed");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_stored_log_and_a_truncated_file_are_told_by_name() {
        let dir = crate::store::tests::tempdir();
        let (store, _) = Store::open(&dir).unwrap();
        let (gen, mut w) = Generation::create(1, rid(), 100, Some(16), cfg(8), Some(&store)).unwrap();
        // A length-framed RDB: reads end at block boundaries.
        for half in [&b"REDIS001"[..], b"1abcdefg"] {
            assert_eq!(w.spare(16).len(), 8, "one block's room at most");
            w.spare(8).copy_from_slice(half);
            w.commit(8).unwrap();
        }
        w.finish(16).unwrap();
        assert_eq!(gen.descriptor(0).0.rdb_version, Some(11));
        assert_eq!(gen.append_log(b"*1\r\n$4\r\nPING\r\n*1\r\n$4", 114).unwrap(), Appended::Taken);
        assert_eq!(gen.read_log(101, 1000).unwrap(), b"*1\r\n$4\r\nPING\r\n");
        assert_eq!(gen.read_log(105, 4).unwrap(), b"$4\r\n");
        assert_eq!(gen.log_len(), 20);
        assert!(gen.check_stored(0, 16).is_ok());
        // Someone truncates the files under the relay: an error naming the file, never fewer bytes.
        truncate(&dir.join("gen-1.rdb"), 8);
        let e = gen.check_stored(8, 8).unwrap_err();
        assert!(matches!(e, Error::Store(_)) && e.to_string().contains("gen-1.rdb"), "{e}");
        truncate(&dir.join("gen-1.log"), 4);
        let e = gen.read_log(101, 1000).unwrap_err();
        assert!(matches!(e, Error::Store(_)) && e.to_string().contains("gen-1.log"), "{e}");
        drop(gen);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Generation `id` in `store`: a length-framed 16-byte RDB in two 8-byte blocks, complete.
    fn stored_two_blocks(store: &Store, id: u64) -> std::sync::Arc<Generation> {
        let (gen, mut w) = Generation::create(id, rid(), 100, Some(16), cfg(8), Some(store)).unwrap();
        for half in [&b"REDIS001"[..], b"1abcdefg"] {
            w.spare(8).copy_from_slice(half);
            w.commit(8).unwrap();
        }
        w.finish(16).unwrap();
        gen
    }

    /// What an operator's `truncate -s LEN` does to a store file under the relay.
    fn truncate(path: &std::path::Path, len: u64) {
        std::fs::OpenOptions::new().write(true).open(path).unwrap().set_len(len).unwrap();
    }

    #[test]
    fn a_file_truncated_mid_write_is_never_written_past_its_hole() {
        let dir = crate::store::tests::tempdir();
        let (store, _) = Store::open(&dir).unwrap();
        let (gen, mut w) = Generation::create(1, rid(), 100, Some(16), cfg(8), Some(&store)).unwrap();
        w.spare(8).copy_from_slice(b"REDIS001");
        w.commit(8).unwrap();
        // Truncated mid-capture: the next block is not written at its offset (which would leave the
        // first block a hole of zeros, served with its checksum failing on every agent).
        truncate(&dir.join("gen-1.rdb"), 0);
        w.spare(8).copy_from_slice(b"1abcdefg");
        let e = w.commit(8).unwrap_err();
        assert!(matches!(e, Error::Store(_)) && e.to_string().contains("gen-1.rdb") && e.to_string().contains("truncated"), "{e}");
        drop((gen, w));
        let gen = stored_two_blocks(&store, 2);
        assert_eq!(gen.append_log(b"*1\r\n$4\r\nPING\r\n", 114).unwrap(), Appended::Taken);
        truncate(&dir.join("gen-2.log"), 0);
        let e = gen.append_log(b"*1\r\n$4\r\nPING\r\n", 128).unwrap_err();
        assert!(matches!(e, Error::Store(_)) && e.to_string().contains("gen-2.log"), "{e}");
        assert_eq!(std::fs::metadata(dir.join("gen-2.log")).unwrap().len(), 0, "nothing written past the hole");
        drop(gen);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_file_removed_from_the_store_is_told_by_name() {
        let dir = crate::store::tests::tempdir();
        let (store, _) = Store::open(&dir).unwrap();
        let gen = stored_two_blocks(&store, 1);
        assert!(gen.check_stored(0, 16).is_ok());
        std::fs::remove_file(dir.join("gen-1.rdb")).unwrap();
        let e = gen.check_stored(0, 8).unwrap_err();
        assert!(matches!(e, Error::Store(_)) && e.to_string().contains("gen-1.rdb") && e.to_string().contains("removed"), "{e}");
        drop(gen);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Text that compresses, with a stretch of noise that does not (a block of it is kept raw).
    fn mixed(n: usize) -> Vec<u8> {
        let mut x = 0x2545_F491_4F6C_DD1Du64;
        (0..n)
            .map(|i| {
                if (3000..4100).contains(&i) {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                } else {
                    let text = b"{\"user\":\"ada\",\"active\":true}";
                    text[i % text.len()]
                }
            })
            .collect()
    }

    /// The RDB back from a generation's region, block by block as its table places them.
    fn unpack(gen: &Generation, d: &Descriptor) -> Vec<u8> {
        let mut t = Table::new();
        let mut out = Vec::new();
        for (i, e) in d.table.iter().enumerate() {
            t.push(*e);
            let (_, start) = t.get(i as u64).unwrap();
            let mut stored = vec![0u8; e.stored_len as usize];
            gen.region().read_at(start, &mut stored).unwrap();
            assert_eq!(block_checksum(&stored), e.crc, "block {i} checksummed as stored");
            let raw_len = (d.block_size as usize).min(d.published as usize - i * d.block_size as usize);
            let mut raw = Vec::new();
            codec::decompress(e.codec, &stored, raw_len, &mut raw).unwrap();
            out.extend_from_slice(&raw);
        }
        assert_eq!(t.stored_end(), d.stored);
        out
    }

    #[test]
    fn blocks_are_compressed_once_packed_in_order_and_come_back_whole() {
        let dir = crate::store::tests::tempdir();
        let (store, _) = Store::open(&dir).unwrap();
        let data = mixed(10_000);
        let mut all = data.clone();
        all.extend_from_slice(&[b'M'; TAIL]);
        let mut id = 0;
        for (codec, threads) in [(Codec::Zstd, 0), (Codec::Zstd, 2), (Codec::Lz4, 1)] {
            for store in [None, Some(&store)] {
                for sizes in [&[7usize][..], &[1000, 3], &[10_040]] {
                    id += 1;
                    let c = Config { block_size: 1024, snapshot_bytes_max: 1 << 20, codec, pack_threads: threads, ..Default::default() };
                    let (gen, mut w) = Generation::create(id, rid(), 10, None, c, store).unwrap();
                    feed(&mut w, &all, sizes);
                    let (d, _) = gen.descriptor(0);
                    assert_eq!(d.published % 1024, 0, "whole blocks only before the end");
                    w.finish(10_000).unwrap();
                    let (d, _) = gen.descriptor(0);
                    let case = format!("{codec} threads {threads} store {} reads {sizes:?}", store.is_some());
                    assert_eq!((d.published, d.length, d.table.len()), (10_000, Some(10_000), 10), "{case}");
                    let kept: Vec<Codec> = d.table.iter().map(|e| e.codec).collect();
                    let raw: Vec<usize> = kept.iter().enumerate().filter(|(_, c)| **c == Codec::Raw).map(|(i, _)| i).collect();
                    assert_eq!(raw, [3], "the block of noise alone is kept raw: {kept:?} {case}");
                    assert!(d.stored < d.published / 4, "{} stored of {}: {case}", d.stored, d.published);
                    assert_eq!(unpack(&gen, &d), data, "{case}");
                    assert!(gen.check_readable(0, d.stored).is_ok() && gen.check_readable(0, d.stored + 1).is_err(), "readable up to the region's watermark: {case}");
                    // A later descriptor carries only the entries after those already sent.
                    assert_eq!(gen.descriptor(8).0.table, d.table[8..], "{case}");
                    // In parts of 3 entries: each publishes the whole blocks it carries and their
                    // stored bytes, the last the rest; together the whole table.
                    let mut parts = Vec::new();
                    while parts.len() < d.table.len() {
                        let (p, _) = gen.descriptor_part(parts.len(), 3);
                        parts.extend_from_slice(&p.table);
                        if parts.len() < 10 {
                            assert_eq!((p.published, p.table.len()), (parts.len() as u64 * 1024, 3), "{case}");
                        } else {
                            assert_eq!(p.published, 10_000, "{case}");
                        }
                        assert_eq!(p.stored, d.table[..parts.len()].iter().map(|e| u64::from(e.stored_len)).sum::<u64>(), "{case}");
                    }
                    assert_eq!(parts, d.table, "{case}");
                }
            }
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_quiet_source_does_not_hold_packed_blocks_back() {
        // Two blocks cut and handed to the pool by one read, then the source goes quiet: no commit
        // places them, the poll of a quiet socket must.
        let c = Config { block_size: 1024, snapshot_bytes_max: 1 << 20, codec: Codec::Zstd, pack_threads: 2, ..Default::default() };
        let (gen, mut w) = Generation::create(1, rid(), 10, None, c, None).unwrap();
        let mut all = mixed(2048);
        all.extend_from_slice(&[b'M'; TAIL]);
        feed(&mut w, &all, &[all.len()]);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while gen.descriptor(0).0.published < 2048 {
            assert!(std::time::Instant::now() < deadline, "packed blocks never published: {}", gen.descriptor(0).0.published);
            w.poll().unwrap();
            std::thread::yield_now();
        }
        assert_eq!(gen.descriptor(0).0.table.len(), 2);
    }
}
