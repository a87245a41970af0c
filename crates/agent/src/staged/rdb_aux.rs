//! The aux fields at the head of an RDB (`repl-id`, `repl-offset`, `repl-stream-db`, …). A server
//! started on a staged RDB takes its replication ID and offset from them, so before staging a
//! snapshot the agent checks that they are there and are the snapshot's: without them the server
//! would start with a history of its own and need a full sync.
//!
//! Format (Redis's `rdb.c`, written here from the format): the 9-byte header (`REDIS0011`,
//! `VALKEY080`), then opcodes; `0xFA` is an aux field, two strings. A string is a length (6-bit, 14-bit,
//! 32-bit or 64-bit big-endian), or an integer encoding (8/16/32-bit little-endian), or LZF-compressed
//! (compressed length, plain length, data). The first other opcode ends the aux fields.

/// Aux fields read at most ([`limits::RDB_AUX_FIELDS_MAX`]).
pub const FIELDS_MAX: usize = limits::RDB_AUX_FIELDS_MAX;
/// Longest aux string accepted ([`limits::RDB_AUX_STRING_BYTES_MAX`]).
pub const STRING_MAX: usize = limits::RDB_AUX_STRING_BYTES_MAX;

const OP_AUX: u8 = 0xFA;

/// The aux fields, in order; an error names what was malformed. `bytes` is the start of the RDB (a
/// prefix is enough: reading stops at the first opcode that is not an aux field).
pub fn fields(bytes: &[u8]) -> Result<Vec<(String, String)>, String> {
    if bytes.len() < 9 || !(bytes.starts_with(b"REDIS") || bytes.starts_with(b"VALKEY")) {
        return Err("not an RDB (no REDIS/VALKEY header)".into());
    }
    let mut r = Reader { b: bytes, at: 9 };
    let mut out = Vec::new();
    while r.peek() == Some(OP_AUX) {
        if out.len() == FIELDS_MAX {
            return Err(format!("more than {FIELDS_MAX} aux fields"));
        }
        r.at += 1;
        let k = r.string()?;
        let v = r.string()?;
        out.push((String::from_utf8_lossy(&k).into_owned(), String::from_utf8_lossy(&v).into_owned()));
    }
    Ok(out)
}

/// The replication ID and offset a server started on this RDB takes (`repl-id`, `repl-offset`).
pub fn replication(bytes: &[u8]) -> Result<Option<(String, u64)>, String> {
    let f = fields(bytes)?;
    let get = |k: &str| f.iter().find(|(key, _)| key == k).map(|(_, v)| v.as_str());
    match (get("repl-id"), get("repl-offset")) {
        (Some(id), Some(off)) => Ok(Some((id.to_string(), off.parse().map_err(|_| format!("repl-offset {off:?} is not a number"))?))),
        _ => Ok(None),
    }
}

struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn peek(&self) -> Option<u8> {
        self.b.get(self.at).copied()
    }

    fn take(&mut self, n: usize) -> Result<&[u8], String> {
        let end = self.at.checked_add(n).filter(|e| *e <= self.b.len()).ok_or("the RDB's aux fields are cut short")?;
        let s = &self.b[self.at..end];
        self.at = end;
        Ok(s)
    }

    /// A length, or `Err(encoding)` for a special string encoding.
    fn length(&mut self) -> Result<Result<u64, u8>, String> {
        let first = self.take(1)?[0];
        Ok(match first >> 6 {
            0 => Ok(u64::from(first & 0x3F)),
            1 => Ok((u64::from(first & 0x3F) << 8) | u64::from(self.take(1)?[0])),
            2 if first == 0x80 => Ok(u64::from(u32::from_be_bytes(self.take(4)?.try_into().expect("4 bytes")))),
            2 if first == 0x81 => Ok(u64::from_be_bytes(self.take(8)?.try_into().expect("8 bytes"))),
            2 => return Err(format!("unknown length encoding {first:#x}")),
            _ => Err(first & 0x3F),
        })
    }

    fn plain_length(&mut self) -> Result<usize, String> {
        match self.length()? {
            Ok(n) if n as usize <= STRING_MAX => Ok(n as usize),
            Ok(n) => Err(format!("aux string of {n} bytes exceeds {STRING_MAX}")),
            Err(_) => Err("an encoded integer where a length belongs".into()),
        }
    }

    fn string(&mut self) -> Result<Vec<u8>, String> {
        match self.length()? {
            Ok(n) if n as usize <= STRING_MAX => Ok(self.take(n as usize)?.to_vec()),
            Ok(n) => Err(format!("aux string of {n} bytes exceeds {STRING_MAX}")),
            Err(0) => Ok((self.take(1)?[0] as i8).to_string().into_bytes()),
            Err(1) => Ok(i16::from_le_bytes(self.take(2)?.try_into().expect("2 bytes")).to_string().into_bytes()),
            Err(2) => Ok(i32::from_le_bytes(self.take(4)?.try_into().expect("4 bytes")).to_string().into_bytes()),
            Err(3) => {
                let clen = self.plain_length()?;
                let len = self.plain_length()?;
                lzf(self.take(clen)?, len)
            }
            Err(e) => Err(format!("unknown string encoding {e}")),
        }
    }
}

/// LZF decompression into exactly `len` bytes (bounded by the caller).
fn lzf(input: &[u8], len: usize) -> Result<Vec<u8>, String> {
    let bad = || "malformed LZF string".to_string();
    let mut out = Vec::with_capacity(len);
    let mut i = 0;
    while i < input.len() {
        let ctrl = input[i] as usize;
        i += 1;
        if ctrl < 32 {
            // A literal run of ctrl+1 bytes.
            let run = input.get(i..i + ctrl + 1).ok_or_else(bad)?;
            out.extend_from_slice(run);
            i += ctrl + 1;
        } else {
            // A back reference: length (3 bits, extended by a byte when 7) + 2, distance 13 bits + 1.
            let mut n = ctrl >> 5;
            if n == 7 {
                n += *input.get(i).ok_or_else(bad)? as usize;
                i += 1;
            }
            let back = ((ctrl & 0x1F) << 8) + *input.get(i).ok_or_else(bad)? as usize + 1;
            i += 1;
            let from = out.len().checked_sub(back).ok_or_else(bad)?;
            for k in 0..n + 2 {
                let b = out[from + k];
                out.push(b);
            }
        }
        if out.len() > len {
            return Err(bad());
        }
    }
    if out.len() != len {
        return Err(bad());
    }
    Ok(out)
}

/// Fuzz entry point: any input is parsed or refused, never a panic.
#[doc(hidden)]
pub fn fuzz(data: &[u8]) {
    let _ = replication(data);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn aux(k: &str, v: &[u8]) -> Vec<u8> {
        let mut b = vec![OP_AUX, k.len() as u8];
        b.extend_from_slice(k.as_bytes());
        b.extend_from_slice(v);
        b
    }

    fn rdb(fields: &[Vec<u8>]) -> Vec<u8> {
        let mut b = b"REDIS0011".to_vec();
        for f in fields {
            b.extend_from_slice(f);
        }
        b.extend_from_slice(&[0xFE, 0x00]);
        b
    }

    #[test]
    fn replication_fields_are_read_in_every_encoding() {
        let id = "c185ac7f70f5ca7be2c8faed85afb526d433e72f";
        let mut idv = vec![40u8];
        idv.extend_from_slice(id.as_bytes());
        let bytes = rdb(&[aux("redis-ver", b"\x067.0.15"), aux("repl-id", &idv), aux("repl-offset", &[0xC2, 0x40, 0xE2, 0x01, 0x00]), aux("repl-stream-db", &[0xC0, 0x00])]);
        assert_eq!(replication(&bytes).unwrap(), Some((id.to_string(), 123_456)));
        let small = rdb(&[aux("repl-id", &idv), aux("repl-offset", &[0xC1, 0x01, 0x01])]);
        assert_eq!(replication(&small).unwrap().unwrap().1, 257);
        assert_eq!(replication(&rdb(&[aux("redis-ver", b"\x015")])).unwrap(), None, "no replication fields");
    }

    #[test]
    fn lzf_strings_decompress() {
        // "aaaaaaaaaa": literal "a", then a back reference of 9 bytes at distance 1.
        let compressed = [0x00, b'a', 0xE0, 0x00, 0x00];
        assert_eq!(lzf(&compressed, 10).unwrap(), b"aaaaaaaaaa");
        assert!(lzf(&compressed, 9).is_err() && lzf(&[0x20, 0x05], 3).is_err());
        let mut v = vec![0xC3, 5, 10];
        v.extend_from_slice(&compressed);
        assert_eq!(fields(&rdb(&[aux("x", &v)])).unwrap()[0].1, "aaaaaaaaaa");
    }

    #[test]
    fn malformed_heads_are_refused() {
        assert!(fields(b"NOTANRDB0").is_err());
        assert!(fields(&[b"REDIS0011".as_slice(), &[OP_AUX, 0x80, 0xFF, 0xFF, 0xFF, 0xFF]].concat()).is_err(), "length over the bound");
        assert!(fields(&[b"REDIS0011".as_slice(), &[OP_AUX, 5, b'a']].concat()).is_err(), "cut short");
        assert!(fields(&[b"REDIS0011".as_slice(), &[OP_AUX, 0xC5]].concat()).is_err(), "unknown encoding");
    }
}
