//! A typed event stream written as JSON lines (`--events PATH` of `join` and `relay`): one object per
//! line, flushed as it is written, for tools that must follow a process without parsing its log. The
//! event types live with their process (`agent::events`, `relay::events`); this is the one writer and
//! reader they share.

use serde::de::DeserializeOwned;
use serde::Serialize;
use std::io::Write;
use std::path::Path;
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

/// A process-wide stream: opened once by the binary, written from wherever the moment happens (like
/// the log), a no-op while not opened.
pub struct EventStream {
    sink: OnceLock<Mutex<Sink>>,
}

struct Sink {
    file: std::fs::File,
    opened: Instant,
}

impl EventStream {
    /// A stream not opened yet (for a `static`).
    pub const fn new() -> EventStream {
        EventStream { sink: OnceLock::new() }
    }

    /// Create `path` (truncated) and write `first` as its first line. Once per stream.
    pub fn open<E: Serialize>(&self, path: &Path, first: &E) -> std::io::Result<()> {
        // Checked before the file is created: a second open must not truncate the first's file.
        if self.sink.get().is_some() {
            return Err(std::io::Error::other("the event stream is already open"));
        }
        let file = std::fs::File::create(path)?;
        if self.sink.set(Mutex::new(Sink { file, opened: Instant::now() })).is_err() {
            return Err(std::io::Error::other("the event stream is already open"));
        }
        self.write(|_| first);
        Ok(())
    }

    /// Write the event `event(at_ms)` makes, `at_ms` being milliseconds since the stream was opened.
    pub fn write<E: Serialize>(&self, event: impl FnOnce(u64) -> E) {
        let Some(sink) = self.sink.get() else { return };
        let mut sink = sink.lock().unwrap_or_else(|p| p.into_inner());
        let at_ms = sink.opened.elapsed().as_millis() as u64;
        let mut line = match serde_json::to_string(&event(at_ms)) {
            Ok(l) => l,
            Err(e) => return tracing::warn!("serialize an event: {e}"),
        };
        line.push('\n');
        // One unbuffered write per line: a reader sees whole events (a torn tail at worst), and a
        // killed process loses nothing it reported.
        if let Err(e) = sink.file.write_all(line.as_bytes()) {
            tracing::warn!("write the event stream: {e}");
        }
    }
}

impl Default for EventStream {
    fn default() -> EventStream {
        EventStream::new()
    }
}

/// Read a stream back: its events in order (a torn last line, still being written, is left out).
pub fn parse<E: DeserializeOwned>(text: &str) -> Result<Vec<E>, serde_json::Error> {
    let complete = text.rfind('\n').map_or("", |end| &text[..end]);
    complete.lines().filter(|l| !l.trim().is_empty()).map(serde_json::from_str).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_round_trip_and_a_torn_tail_is_left_out() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events");
        let s = EventStream::new();
        s.write(|_| 0u32); // not open: nothing, no panic
        s.open(&path, &serde_json::json!({"event": "start"})).unwrap();
        s.write(|at| serde_json::json!({"event": "x", "at_ms": at}));
        assert!(s.open(&path, &1).is_err(), "once");
        assert!(s.open(&dir.path().join("other"), &1).is_err(), "once, wherever");
        let mut text = std::fs::read_to_string(&path).unwrap();
        text.push_str("{\"event\":\"to");
        let v: Vec<serde_json::Value> = parse(&text).unwrap();
        assert_eq!(v.len(), 2);
        assert_eq!(v[1]["event"], "x");
    }
}
