//! How an RDB payload is framed on a replication link.
//!
//! A master either announces the length (`$<len>\r\n` then exactly `len` bytes: disk-based sync) or,
//! when the replica offered `capa eof`, a 40-byte random mark (`$EOF:<mark>\r\n`, the bytes, then the
//! mark again: diskless sync, length unknown up front).

use crate::Error;

/// Length of the EOF mark.
pub const EOF_MARK_LEN: usize = 40;

/// The framing of one RDB payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Framing {
    /// `$<len>`: exactly this many bytes.
    Length(u64),
    /// `$EOF:<mark>`: bytes until the mark.
    Eof([u8; EOF_MARK_LEN]),
}

impl Framing {
    /// The header line as sent on the wire.
    pub fn header(&self) -> Vec<u8> {
        match self {
            Framing::Length(n) => format!("${n}\r\n").into_bytes(),
            Framing::Eof(mark) => {
                let mut v = b"$EOF:".to_vec();
                v.extend_from_slice(mark);
                v.extend_from_slice(b"\r\n");
                v
            }
        }
    }
}

/// Parse the payload header at the start of `buf`, skipping keep-alive newlines.
/// `Ok(None)` means more bytes are needed. `len_max` bounds an announced length.
pub fn parse_header(buf: &[u8], len_max: u64) -> Result<Option<(Framing, usize)>, Error> {
    let skip = crate::replica::skip_keepalives(buf);
    let rest = &buf[skip..];
    if rest.is_empty() {
        return Ok(None);
    }
    if rest[0] == b'-' {
        let end = rest.iter().position(|&c| c == b'\n').unwrap_or(rest.len());
        return Err(Error::Refused { step: "RDB transfer", message: String::from_utf8_lossy(&rest[1..end]).trim().to_string() });
    }
    if rest[0] != b'$' {
        return Err(Error::Protocol(format!("expected RDB payload header, got byte 0x{:02x}", rest[0])));
    }
    // The longest valid header is "$EOF:" + 40 + "\r\n".
    let window = &rest[..rest.len().min(5 + EOF_MARK_LEN + 2)];
    let Some(cr) = window.windows(2).position(|w| w == b"\r\n") else {
        if window.len() == 5 + EOF_MARK_LEN + 2 {
            return Err(Error::Protocol("RDB payload header too long".into()));
        }
        return Ok(None);
    };
    let line = &rest[1..cr];
    let framing = if let Some(mark) = line.strip_prefix(b"EOF:") {
        if mark.len() != EOF_MARK_LEN {
            return Err(Error::Protocol(format!("EOF mark of {} bytes, expected {EOF_MARK_LEN}", mark.len())));
        }
        let mut m = [0u8; EOF_MARK_LEN];
        m.copy_from_slice(mark);
        Framing::Eof(m)
    } else {
        let n = crate::parse_u64(line, "RDB length")?;
        if n > len_max {
            return Err(Error::Protocol(format!("RDB length {n} exceeds the limit of {len_max} bytes")));
        }
        Framing::Length(n)
    };
    Ok(Some((framing, skip + cr + 2)))
}

/// Tracks an incoming payload so the caller can write bytes straight to their destination and ask,
/// after each read, whether the payload is complete and where it ends.
#[derive(Debug)]
pub struct Payload {
    framing: Framing,
    /// Bytes received so far, including a trailing EOF mark once it arrived.
    received: u64,
}

/// What [`Payload::received`] learned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Progress {
    /// More payload bytes are expected; the caller may read at most this many (`u64::MAX` = any).
    More(u64),
    /// The payload is complete: its RDB bytes are this long (the EOF mark excluded).
    Done(u64),
}

impl Payload {
    /// Start tracking a payload with this framing.
    pub fn new(framing: Framing) -> Self {
        Payload { framing, received: 0 }
    }

    /// The framing.
    pub fn framing(&self) -> &Framing {
        &self.framing
    }

    /// How many bytes the next read may take without running past the payload.
    pub fn next_read_max(&self) -> u64 {
        match self.framing {
            Framing::Length(n) => n - self.received,
            // With the EOF framing the master sends nothing after the mark until the replica's first
            // ACK, so any read is safe.
            Framing::Eof(_) => u64::MAX,
        }
    }

    /// Account for `n` more bytes; `tail` must be the last (up to) [`EOF_MARK_LEN`] bytes received in
    /// total, which the caller has in its buffer.
    pub fn received(&mut self, n: u64, tail: &[u8]) -> Progress {
        self.received += n;
        match &self.framing {
            Framing::Length(len) => {
                assert!(self.received <= *len, "read past the announced RDB length");
                if self.received == *len {
                    Progress::Done(*len)
                } else {
                    Progress::More(len - self.received)
                }
            }
            Framing::Eof(mark) => {
                if self.received >= EOF_MARK_LEN as u64 && tail.len() >= EOF_MARK_LEN && tail[tail.len() - EOF_MARK_LEN..] == mark[..] {
                    Progress::Done(self.received - EOF_MARK_LEN as u64)
                } else {
                    Progress::More(u64::MAX)
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers() {
        let mark = [b'7'; 40];
        let mut buf = b"\n\n".to_vec();
        buf.extend(Framing::Eof(mark).header());
        buf.extend(b"REDIS");
        let (f, used) = parse_header(&buf, 1 << 40).unwrap().unwrap();
        assert_eq!(f, Framing::Eof(mark));
        assert_eq!(&buf[used..], b"REDIS");
        assert_eq!(parse_header(b"$12\r\n", 100).unwrap().unwrap(), (Framing::Length(12), 5));
        assert_eq!(parse_header(b"\n\n$1", 100).unwrap(), None);
        assert!(parse_header(b"$1000\r\n", 100).is_err());
        assert!(parse_header(b"$EOF:short\r\n", 100).is_err());
        assert!(parse_header(b"+OK\r\n", 100).is_err());
        assert!(parse_header(b"-ERR no\r\n", 100).is_err());
        assert!(parse_header(&[b'$'; 60], 100).is_err());
    }

    #[test]
    fn eof_mark_across_reads() {
        let mark = [b'x'; 40];
        let mut p = Payload::new(Framing::Eof(mark));
        let mut all = b"REDIS0011payload".to_vec();
        assert_eq!(p.received(all.len() as u64, &all), Progress::More(u64::MAX));
        all.extend_from_slice(&mark[..10]);
        assert_eq!(p.received(10, &all[all.len().saturating_sub(40)..]), Progress::More(u64::MAX));
        all.extend_from_slice(&mark[10..]);
        assert_eq!(p.received(30, &all[all.len() - 40..]), Progress::Done(16));
    }

    #[test]
    fn length_framing() {
        let mut p = Payload::new(Framing::Length(10));
        assert_eq!(p.next_read_max(), 10);
        assert_eq!(p.received(4, b""), Progress::More(6));
        assert_eq!(p.received(6, b""), Progress::Done(10));
    }
}
