//! The join's typed event stream (`fastrepl join --events PATH`): one JSON object per line, for
//! tools (the lab's fault matrix strikes on it) rather than people (who read the log). A stable
//! interface, documented in docs/operations.md: the first line is [`Event::Start`] with
//! [`VERSION`]; names are lower case; new event kinds or fields may be added within a version.
//!
//! Process-wide like the log itself: opened once by the binary, written from wherever the join
//! logs the same moment, so the join's code needs no sink passed through it.

pub use crate::phase::JoinPhase;
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
        /// `join`.
        process: String,
    },
    /// The join entered a phase.
    Phase {
        /// Which.
        phase: JoinPhase,
        /// When.
        at_ms: u64,
    },
    /// The replica was handed to the master (the join succeeds).
    HandedOff {
        /// The replication offset it was handed over at.
        offset: u64,
        /// When.
        at_ms: u64,
    },
}

/// The stream, opened by [`open`].
static STREAM: metrics::EventStream = metrics::EventStream::new();

/// Open the stream at `path` (truncated) and write its first line. Once per process.
pub fn open(path: &Path) -> std::io::Result<()> {
    STREAM.open(path, &Event::Start { version: VERSION, process: "join".into() })
}

/// The join entered `phase`.
pub fn phase(phase: JoinPhase) {
    STREAM.write(|at_ms| Event::Phase { phase, at_ms });
}

/// The join handed the replica over at `offset`.
pub fn handed_off(offset: u64) {
    STREAM.write(|at_ms| Event::HandedOff { offset, at_ms });
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
        let e = Event::Phase { phase: JoinPhase::StreamingLog, at_ms: 12 };
        assert_eq!(serde_json::to_string(&e).unwrap(), r#"{"event":"phase","phase":"streaming_log","at_ms":12}"#);
        let text = "{\"event\":\"start\",\"version\":1,\"process\":\"join\"}\n{\"event\":\"handed_off\",\"offset\":7,\"at_ms\":3}\n{\"event\":\"pha";
        let got = parse(text).unwrap();
        assert_eq!(got, [Event::Start { version: 1, process: "join".into() }, Event::HandedOff { offset: 7, at_ms: 3 }]);
    }
}
