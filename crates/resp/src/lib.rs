//! RESP2, the Redis serialization protocol, as fastrepl needs it: a bounded decoder that works on
//! whatever bytes are buffered, and an encoder for commands.
//!
//! Decoding is two-phase, as in mini-redis: [`frame_len`] answers "is a whole frame buffered, and how
//! long is it?" without allocating; only then [`parse`] builds the [`Frame`]. `Incomplete` is an
//! ordinary result on the hot path, not an error. Every length, count and depth read from the peer is
//! checked against [`Limits`] before it is trusted, so a hostile peer cannot make us allocate or recurse
//! without bound.
#![deny(missing_docs)]

use std::fmt;

/// Bounds applied to everything a peer tells us.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest bulk string accepted (Redis' own `proto-max-bulk-len` defaults to 512 MiB).
    pub bulk_len_max: usize,
    /// Largest number of elements in one array.
    pub array_len_max: usize,
    /// Deepest nesting of arrays.
    pub depth_max: usize,
    /// Longest simple line (status, error, integer, inline command, length header).
    pub line_len_max: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits { bulk_len_max: 512 * 1024 * 1024, array_len_max: 16 * 1024 * 1024, depth_max: 16, line_len_max: 64 * 1024 }
    }
}

/// One RESP2 value.
#[derive(Clone, PartialEq, Eq)]
pub enum Frame {
    /// `+OK`
    Simple(Vec<u8>),
    /// `-ERR ...`
    Error(Vec<u8>),
    /// `:42`
    Integer(i64),
    /// `$3\r\nfoo`
    Bulk(Vec<u8>),
    /// `$-1` or `*-1`
    Null,
    /// `*2\r\n...`
    Array(Vec<Frame>),
}

impl fmt::Debug for Frame {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Bulk values can be huge and binary: show a bounded, escaped prefix.
        fn short(b: &[u8]) -> String {
            let s: String = b.iter().take(64).flat_map(|c| std::ascii::escape_default(*c)).map(char::from).collect();
            if b.len() > 64 {
                format!("{s}…({} bytes)", b.len())
            } else {
                s
            }
        }
        match self {
            Frame::Simple(b) => write!(f, "+{}", short(b)),
            Frame::Error(b) => write!(f, "-{}", short(b)),
            Frame::Integer(i) => write!(f, ":{i}"),
            Frame::Bulk(b) => write!(f, "${:?}", short(b)),
            Frame::Null => write!(f, "(nil)"),
            Frame::Array(a) => f.debug_list().entries(a).finish(),
        }
    }
}

impl Frame {
    /// The bytes of a simple string or bulk string.
    pub fn as_bytes(&self) -> Option<&[u8]> {
        match self {
            Frame::Simple(b) | Frame::Bulk(b) => Some(b),
            _ => None,
        }
    }
    /// The text of a simple string, bulk string or error, lossily decoded.
    pub fn as_text(&self) -> Option<String> {
        match self {
            Frame::Simple(b) | Frame::Bulk(b) | Frame::Error(b) => Some(String::from_utf8_lossy(b).into_owned()),
            Frame::Integer(i) => Some(i.to_string()),
            _ => None,
        }
    }
    /// The integer value of an integer frame (or of a bulk/simple string holding one).
    pub fn as_int(&self) -> Option<i64> {
        match self {
            Frame::Integer(i) => Some(*i),
            Frame::Simple(b) | Frame::Bulk(b) => std::str::from_utf8(b).ok()?.parse().ok(),
            _ => None,
        }
    }
    /// The elements of an array.
    pub fn as_array(&self) -> Option<&[Frame]> {
        match self {
            Frame::Array(a) => Some(a),
            _ => None,
        }
    }
    /// True for an error reply.
    pub fn is_error(&self) -> bool {
        matches!(self, Frame::Error(_))
    }
}

/// Why a buffer does not hold a valid frame.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// More bytes are needed; not a fault.
    #[error("incomplete frame")]
    Incomplete,
    /// The bytes are not RESP.
    #[error("malformed RESP: {0}")]
    Malformed(&'static str),
    /// A length, count, depth or line exceeds [`Limits`].
    #[error("RESP {what} of {got} exceeds the limit of {max}")]
    TooLarge {
        /// Which bound was hit.
        what: &'static str,
        /// The value the peer sent.
        got: u64,
        /// The bound.
        max: u64,
    },
}

/// Position of the first `\r\n` at or after `from`, bounded by the line limit.
fn line_end(buf: &[u8], from: usize, limits: &Limits) -> Result<usize, Error> {
    let window_end = buf.len().min(from.saturating_add(limits.line_len_max + 2));
    match buf[from..window_end].windows(2).position(|w| w == b"\r\n") {
        Some(p) => Ok(from + p),
        None if window_end - from >= limits.line_len_max + 2 => Err(Error::TooLarge { what: "line length", got: (window_end - from) as u64, max: limits.line_len_max as u64 }),
        None => Err(Error::Incomplete),
    }
}

/// Parse a decimal integer line the way Redis does: optional `-`, digits only, no overflow.
fn parse_int(line: &[u8]) -> Result<i64, Error> {
    let (neg, digits) = match line.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, line),
    };
    if digits.is_empty() || digits.len() > 19 {
        return Err(Error::Malformed("bad integer"));
    }
    let mut v: i64 = 0;
    for &c in digits {
        if !c.is_ascii_digit() {
            return Err(Error::Malformed("bad integer"));
        }
        v = v.checked_mul(10).and_then(|v| v.checked_add(i64::from(c - b'0'))).ok_or(Error::Malformed("integer overflow"))?;
    }
    Ok(if neg { -v } else { v })
}

/// A length header (`$n` or `*n`): -1 means null; anything else below 0 or above `max` is refused.
fn parse_len(line: &[u8], what: &'static str, max: usize) -> Result<Option<usize>, Error> {
    let n = parse_int(line)?;
    if n == -1 {
        return Ok(None);
    }
    if n < 0 {
        return Err(Error::Malformed("negative length"));
    }
    if n as u64 > max as u64 {
        return Err(Error::TooLarge { what, got: n as u64, max: max as u64 });
    }
    Ok(Some(n as usize))
}

/// Phase one: if `buf` starts with a whole frame, its length in bytes.
///
/// Never allocates; cost is linear in the number of headers, not in the size of bulk payloads.
pub fn frame_len(buf: &[u8], limits: &Limits) -> Result<usize, Error> {
    check_at(buf, 0, 0, limits)
}

fn check_at(buf: &[u8], pos: usize, depth: usize, limits: &Limits) -> Result<usize, Error> {
    if depth > limits.depth_max {
        return Err(Error::TooLarge { what: "nesting depth", got: depth as u64, max: limits.depth_max as u64 });
    }
    let Some(&tag) = buf.get(pos) else { return Err(Error::Incomplete) };
    let end = line_end(buf, pos + 1, limits)?;
    let line = &buf[pos + 1..end];
    let after = end + 2;
    match tag {
        b'+' | b'-' => Ok(after - pos),
        b':' => parse_int(line).map(|_| after - pos),
        b'$' => match parse_len(line, "bulk length", limits.bulk_len_max)? {
            None => Ok(after - pos),
            Some(n) => {
                let total = after + n + 2;
                if buf.len() < total {
                    return Err(Error::Incomplete);
                }
                if &buf[after + n..total] != b"\r\n" {
                    return Err(Error::Malformed("bulk string not terminated by CRLF"));
                }
                Ok(total - pos)
            }
        },
        b'*' => match parse_len(line, "array length", limits.array_len_max)? {
            None => Ok(after - pos),
            Some(n) => {
                let mut p = after;
                for _ in 0..n {
                    p += check_at(buf, p, depth + 1, limits)?;
                }
                Ok(p - pos)
            }
        },
        _ => Err(Error::Malformed("unknown frame type byte")),
    }
}

/// Phase two: parse the whole frame at the start of `buf`; returns it and the bytes it used.
///
/// Call after [`frame_len`] succeeded, or directly: it performs the same checks.
pub fn parse(buf: &[u8], limits: &Limits) -> Result<(Frame, usize), Error> {
    let len = frame_len(buf, limits)?;
    let (frame, used) = parse_at(buf, 0);
    debug_assert_eq!(used, len);
    Ok((frame, used))
}

/// Parse a frame already validated by `check_at`; cannot fail.
fn parse_at(buf: &[u8], pos: usize) -> (Frame, usize) {
    let tag = buf[pos];
    let end = pos + 1 + buf[pos + 1..].windows(2).position(|w| w == b"\r\n").expect("validated");
    let line = &buf[pos + 1..end];
    let after = end + 2;
    match tag {
        b'+' => (Frame::Simple(line.to_vec()), after - pos),
        b'-' => (Frame::Error(line.to_vec()), after - pos),
        b':' => (Frame::Integer(parse_int(line).expect("validated")), after - pos),
        b'$' => {
            let n = parse_int(line).expect("validated");
            if n < 0 {
                return (Frame::Null, after - pos);
            }
            let n = n as usize;
            (Frame::Bulk(buf[after..after + n].to_vec()), after + n + 2 - pos)
        }
        b'*' => {
            let n = parse_int(line).expect("validated");
            if n < 0 {
                return (Frame::Null, after - pos);
            }
            let mut items = Vec::with_capacity((n as usize).min(1024));
            let mut p = after;
            for _ in 0..n {
                let (f, used) = parse_at(buf, p);
                items.push(f);
                p += used;
            }
            (Frame::Array(items), p - pos)
        }
        _ => unreachable!("validated"),
    }
}

/// A command as a client (or a replica) sends it: a multibulk array, or an inline line
/// (`PING\r\n`), which Redis also accepts.
///
/// Returns the arguments and the bytes used.
pub fn parse_command(buf: &[u8], limits: &Limits) -> Result<(Vec<Vec<u8>>, usize), Error> {
    match buf.first() {
        None => Err(Error::Incomplete),
        Some(b'*') => {
            let (frame, used) = parse(buf, limits)?;
            match frame {
                Frame::Array(items) => {
                    let mut args = Vec::with_capacity(items.len());
                    for it in items {
                        match it {
                            Frame::Bulk(b) => args.push(b),
                            _ => return Err(Error::Malformed("command argument is not a bulk string")),
                        }
                    }
                    Ok((args, used))
                }
                _ => Err(Error::Malformed("command is a null array")),
            }
        }
        Some(_) => {
            // Inline command, terminated by \n (Redis accepts a bare \n too).
            let window = &buf[..buf.len().min(limits.line_len_max + 1)];
            let Some(nl) = window.iter().position(|&c| c == b'\n') else {
                if window.len() > limits.line_len_max {
                    return Err(Error::TooLarge { what: "inline command length", got: window.len() as u64, max: limits.line_len_max as u64 });
                }
                return Err(Error::Incomplete);
            };
            let line = buf[..nl].strip_suffix(b"\r").unwrap_or(&buf[..nl]);
            let args = line.split(|c| *c == b' ').filter(|a| !a.is_empty()).map(<[u8]>::to_vec).collect();
            Ok((args, nl + 1))
        }
    }
}

/// Append a command (array of bulk strings) to `out`.
pub fn encode_command<A: AsRef<[u8]>>(out: &mut Vec<u8>, args: &[A]) {
    out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
    for a in args {
        let a = a.as_ref();
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
}

/// Append `frame` in wire form to `out`.
pub fn encode(out: &mut Vec<u8>, frame: &Frame) {
    match frame {
        Frame::Simple(b) => {
            out.push(b'+');
            out.extend_from_slice(b);
            out.extend_from_slice(b"\r\n");
        }
        Frame::Error(b) => {
            out.push(b'-');
            out.extend_from_slice(b);
            out.extend_from_slice(b"\r\n");
        }
        Frame::Integer(i) => out.extend_from_slice(format!(":{i}\r\n").as_bytes()),
        Frame::Bulk(b) => {
            out.extend_from_slice(format!("${}\r\n", b.len()).as_bytes());
            out.extend_from_slice(b);
            out.extend_from_slice(b"\r\n");
        }
        Frame::Null => out.extend_from_slice(b"$-1\r\n"),
        Frame::Array(items) => {
            out.extend_from_slice(format!("*{}\r\n", items.len()).as_bytes());
            for it in items {
                encode(out, it);
            }
        }
    }
}

/// Fuzz entry point shared by `fuzz/` and the test suite: decoding arbitrary bytes never panics,
/// and whatever parses re-encodes to bytes that parse to the same frame.
#[cfg(any(test, fuzzing))]
#[doc(hidden)]
pub fn fuzz_one(data: &[u8]) {
    let limits = Limits { bulk_len_max: 1 << 20, array_len_max: 1 << 12, depth_max: 8, line_len_max: 1024 };
    if let Ok((frame, used)) = parse(data, &limits) {
        assert!(used <= data.len());
        let mut out = Vec::new();
        encode(&mut out, &frame);
        let (again, used2) = parse(&out, &limits).expect("re-encoded frame parses");
        assert_eq!(again, frame);
        assert_eq!(used2, out.len());
    }
    let _ = parse_command(data, &limits);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn l() -> Limits {
        Limits::default()
    }

    #[test]
    fn parses_every_type() {
        let buf = b"*6\r\n+OK\r\n-ERR x\r\n:-12\r\n$3\r\na\0b\r\n$-1\r\n*1\r\n*0\r\n";
        let (f, used) = parse(buf, &l()).unwrap();
        assert_eq!(used, buf.len());
        assert_eq!(
            f,
            Frame::Array(vec![
                Frame::Simple(b"OK".to_vec()),
                Frame::Error(b"ERR x".to_vec()),
                Frame::Integer(-12),
                Frame::Bulk(b"a\0b".to_vec()),
                Frame::Null,
                Frame::Array(vec![Frame::Array(vec![])]),
            ])
        );
    }

    #[test]
    fn every_prefix_is_incomplete() {
        let buf = b"*2\r\n$3\r\nSET\r\n$5\r\nhello\r\n";
        for i in 0..buf.len() {
            assert_eq!(frame_len(&buf[..i], &l()), Err(Error::Incomplete), "prefix {i}");
        }
        assert_eq!(frame_len(buf, &l()), Ok(buf.len()));
    }

    #[test]
    fn bounds_are_enforced_before_allocation() {
        let small = Limits { bulk_len_max: 10, array_len_max: 2, depth_max: 2, line_len_max: 8 };
        assert!(matches!(frame_len(b"$11\r\n", &small), Err(Error::TooLarge { .. })));
        assert!(matches!(frame_len(b"*3\r\n", &small), Err(Error::TooLarge { .. })));
        assert!(matches!(frame_len(b"*1\r\n*1\r\n*1\r\n*0\r\n", &small), Err(Error::TooLarge { .. })));
        assert!(matches!(frame_len(b"+0123456789abc", &small), Err(Error::TooLarge { .. })));
        assert!(matches!(frame_len(b"$99999999999999999999\r\n", &l()), Err(Error::Malformed(_))));
    }

    #[test]
    fn rejects_garbage() {
        assert!(matches!(frame_len(b"?x\r\n", &l()), Err(Error::Malformed(_))));
        assert!(matches!(frame_len(b"$3\r\nabcXY", &l()), Err(Error::Malformed(_))));
        assert!(matches!(frame_len(b":12a\r\n", &l()), Err(Error::Malformed(_))));
        assert!(matches!(frame_len(b"*-2\r\n", &l()), Err(Error::Malformed(_))));
    }

    #[test]
    fn commands_multibulk_and_inline() {
        let mut out = Vec::new();
        encode_command(&mut out, &["REPLCONF", "ACK", "10"]);
        let (args, used) = parse_command(&out, &l()).unwrap();
        assert_eq!(used, out.len());
        assert_eq!(args, vec![b"REPLCONF".to_vec(), b"ACK".to_vec(), b"10".to_vec()]);
        let (args, used) = parse_command(b"PING  x\r\nrest", &l()).unwrap();
        assert_eq!((args, used), (vec![b"PING".to_vec(), b"x".to_vec()], 9));
        assert_eq!(parse_command(b"PIN", &l()), Err(Error::Incomplete));
        assert!(parse_command(b"*1\r\n:1\r\n", &l()).is_err());
    }

    #[test]
    fn fuzz_smoke() {
        // A deterministic pseudo-random walk over mutated seeds: the fuzz target's invariants hold.
        let seeds: [&[u8]; 4] = [b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n", b"+OK\r\n", b"$5\r\nhello\r\n", b"*1\r\n*1\r\n:1\r\n"];
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        for i in 0..20_000 {
            let mut d = seeds[i % seeds.len()].to_vec();
            for _ in 0..3 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let pos = (x as usize) % (d.len() + 1);
                match x % 3 {
                    0 if pos < d.len() => d[pos] = (x >> 8) as u8,
                    1 => d.insert(pos, (x >> 16) as u8),
                    _ => d.truncate(pos),
                }
            }
            fuzz_one(&d);
        }
    }
}
