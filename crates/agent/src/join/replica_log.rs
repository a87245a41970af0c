//! The local server's own log, read by the join as a fact: when the replica drops its link while it
//! is fed, the lines it wrote since the feed began say whether it refused the data (a type it does
//! not have) or lost a connection. The join finds the file from the server itself (`CONFIG GET
//! logfile`, relative to `dir`, where a server chdirs at start); a server logging to stdout or
//! syslog, one that refuses `CONFIG`, or a file this process cannot read (another container) gives
//! no lines, and the join then treats a dropped link as it always did. What the lines mean is the
//! machine's to decide ([`crate::join::machine::refusal`]).

use client::Client;
use std::io::{Read, Seek, SeekFrom};
use std::path::PathBuf;

use limits::REPLICA_LOG_READ_MAX as LOG_READ_MAX;

/// Where the server logs, and how long the file was before the feed began.
#[derive(Debug, Clone)]
pub struct LogTail {
    path: PathBuf,
    from: u64,
}

impl LogTail {
    /// Ask the server where it logs (`None`: not to a file this process can read).
    pub fn find(c: &mut Client) -> Option<LogTail> {
        let file = c.config_get("logfile").ok().flatten().filter(|f| !f.is_empty())?;
        let mut path = PathBuf::from(&file);
        if path.is_relative() {
            let dir = c.config_get("dir").ok().flatten()?;
            path = PathBuf::from(dir).join(path);
        }
        let from = std::fs::metadata(&path).ok()?.len();
        Some(LogTail { path, from })
    }

    /// The lines written since [`LogTail::find`] (at most the last [`LOG_READ_MAX`] bytes of them);
    /// `None` when the file cannot be read now.
    pub fn lines_since(&self) -> Option<Vec<String>> {
        let mut f = std::fs::File::open(&self.path).ok()?;
        let len = f.metadata().ok()?.len();
        // A file shorter than it was was rotated or truncated: all of it is new.
        let from = if len < self.from { 0 } else { self.from };
        let start = from.max(len.saturating_sub(LOG_READ_MAX));
        f.seek(SeekFrom::Start(start)).ok()?;
        let mut buf = Vec::with_capacity((len - start) as usize);
        f.take(len - start).read_to_end(&mut buf).ok()?;
        let text = String::from_utf8_lossy(&buf);
        let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
        if start > from && !lines.is_empty() {
            lines.remove(0); // cut mid-line
        }
        Some(lines)
    }

    /// The file read.
    pub fn path(&self) -> &std::path::Path {
        &self.path
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn only_what_was_written_since_is_read_and_a_truncated_file_is_read_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("server.log");
        std::fs::write(&path, "old line\n").unwrap();
        let t = LogTail { path: path.clone(), from: std::fs::metadata(&path).unwrap().len() };
        assert_eq!(t.lines_since(), Some(vec![]));
        std::fs::OpenOptions::new().append(true).open(&path).unwrap().write_all(b"new 1\nnew 2\n").unwrap();
        assert_eq!(t.lines_since(), Some(vec!["new 1".to_string(), "new 2".to_string()]));
        std::fs::write(&path, "rotated\n").unwrap();
        assert_eq!(t.lines_since(), Some(vec!["rotated".to_string()]));
        let big = format!("{}\nlast\n", "x".repeat(LOG_READ_MAX as usize * 2));
        std::fs::write(&path, format!("{}{big}", "o".repeat(9))).unwrap();
        assert_eq!(t.lines_since(), Some(vec!["last".to_string()]), "the cut first line is dropped");
        std::fs::remove_file(&path).unwrap();
        assert_eq!(t.lines_since(), None);
    }
}
