//! The relay's typed event stream (`fastrepl relay --events PATH`): one JSON object per line, for
//! tools (the lab's fault matrix strikes on it). A stable interface, documented in
//! docs/operations.md: the first line is [`Event::Start`] with [`VERSION`]; names are lower case;
//! new event kinds or fields may be added within a version.
//!
//! Process-wide like the log: opened once by the binary and written where the capture logs the same
//! moment, so the capture's code needs no sink passed through it.

use serde::{Deserialize, Serialize};
use std::path::Path;

/// The stream's version (the first line's `version`).
pub const VERSION: u32 = 1;

/// One line of the stream. `at_ms`: milliseconds since the stream was opened.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    /// The first line.
    Start {
        /// [`VERSION`].
        version: u32,
        /// `relay`.
        process: String,
    },
    /// The master's RDB began to arrive for a generation (a capture is under way).
    RdbStarted {
        /// The generation.
        generation: u64,
        /// When.
        at_ms: u64,
    },
    /// A generation's snapshot is complete: agents can pull all of it.
    Published {
        /// The generation.
        generation: u64,
        /// The snapshot's size.
        bytes: u64,
        /// When.
        at_ms: u64,
    },
}

/// The stream, opened by [`open`].
static STREAM: metrics::EventStream = metrics::EventStream::new();

/// Open the stream at `path` (truncated) and write its first line. Once per process.
pub fn open(path: &Path) -> std::io::Result<()> {
    STREAM.open(path, &Event::Start { version: VERSION, process: "relay".into() })
}

/// Generation `generation`'s RDB began to arrive.
pub fn rdb_started(generation: u64) {
    STREAM.write(|at_ms| Event::RdbStarted { generation, at_ms });
}

/// Generation `generation`'s snapshot is complete, `bytes` long.
pub fn published(generation: u64, bytes: u64) {
    STREAM.write(|at_ms| Event::Published { generation, bytes, at_ms });
}

/// Read a stream back: its events in order (a torn last line, still being written, is left out).
pub fn parse(text: &str) -> Result<Vec<Event>, serde_json::Error> {
    metrics::event_stream::parse(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_lower_case_and_typed() {
        let e = Event::RdbStarted { generation: 1, at_ms: 5 };
        assert_eq!(serde_json::to_string(&e).unwrap(), r#"{"event":"rdb_started","generation":1,"at_ms":5}"#);
        let text = "{\"event\":\"start\",\"version\":1,\"process\":\"relay\"}\n{\"event\":\"published\",\"generation\":1,\"bytes\":9,\"at_ms\":6}\n";
        assert_eq!(parse(text).unwrap(), [Event::Start { version: 1, process: "relay".into() }, Event::Published { generation: 1, bytes: 9, at_ms: 6 }]);
    }
}
