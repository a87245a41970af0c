//! Fuzz entry points (built for `cargo fuzz`, which sets `--cfg fuzzing`, and for the stable smoke
//! test): invariants that must hold for any bytes a master or a replica sends.

use crate::capture::{Capture, Event, Phase};
use crate::framing::{parse_header, Framing};
use std::time::Instant;

/// The parsers: header parsing never panics and never accepts an over-long length; PSYNC replies,
/// the stream scanner and a replica's handshake never panic.
pub fn parsers(data: &[u8]) {
    if let Ok(Some((Framing::Length(n), used))) = parse_header(data, 1 << 20) {
        assert!(n <= 1 << 20 && used <= data.len());
    }
    let _ = crate::replica::parse_psync_reply(data, &resp::Limits::default());
    let mut s = crate::stream::Scanner::new(0, resp::Limits { bulk_len_max: 1 << 20, ..Default::default() });
    let _ = s.feed(data);
    let _ = crate::master::Handshake::default().on_bytes(data);
    if let Some(v) = crate::rdb::version(data) {
        assert!(data.starts_with(b"REDIS") || data.starts_with(b"VALKEY"), "a version from a header that is not one: {v}");
    }
}

/// The capture machine as a master's bytes drive it, cut at arbitrary points: it never panics, never
/// hands out more RDB bytes than a `$<len>` header announced, and the offsets it logs never go back.
pub fn capture(data: &[u8]) {
    let now = Instant::now();
    // What a source says it is (its `INFO server`) decides what is announced to it.
    let server = crate::rdb::Server::from_info(&String::from_utf8_lossy(data));
    let _ = crate::capture::announced(server.as_ref(), Some("8.0.0"));
    let (mut c, _) = Capture::new(None, 1, None, 1 << 20, now);
    // Answer the handshake (AUTH-less: PING, INFO, two REPLCONFs) so the fuzzed bytes reach PSYNC, the
    // RDB and the stream.
    for _ in 0..4 {
        if c.on_bytes(now, b"+OK\r\n").is_err() {
            return;
        }
    }
    let mut region: Vec<u8> = Vec::new();
    let mut announced: Option<u64> = None;
    let mut last_offset = 0u64;
    for chunk in data.chunks(7) {
        let events = if c.phase() == Phase::Rdb {
            let mut got = c.take_buffered_rdb(u64::MAX);
            if got.is_empty() {
                got = chunk.to_vec();
                got.truncate(c.rdb_read_max().min(got.len() as u64) as usize);
            }
            region.extend_from_slice(&got);
            if let Some(n) = announced {
                assert!(region.len() as u64 <= n, "more RDB bytes than announced");
            }
            let tail = &region[region.len().saturating_sub(40)..];
            c.on_rdb(now, got.len() as u64, tail)
        } else {
            c.on_bytes(now, chunk)
        };
        let Ok(events) = events else { return };
        for e in events {
            match e {
                Event::RdbStart { length } => announced = length,
                Event::FullResync { offset, .. } => last_offset = offset,
                Event::Log { complete_offset, .. } => {
                    assert!(complete_offset >= last_offset, "log offsets went back");
                    last_offset = complete_offset;
                }
                _ => {}
            }
        }
    }
}
