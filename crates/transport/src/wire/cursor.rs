//! The one byte cursor every binary decoder of the protocol reads through: big-endian integers and
//! byte runs that fail with a protocol error (never panic) when the message is short.

use crate::Error;

/// A reader over one message's bytes. `what` names the message in errors.
pub struct Cursor<'a> {
    bytes: &'a [u8],
    what: &'static str,
}

impl<'a> Cursor<'a> {
    /// Read `bytes`, a `what` (e.g. "tracker message").
    pub fn new(bytes: &'a [u8], what: &'static str) -> Self {
        Cursor { bytes, what }
    }

    /// A protocol error about this message.
    pub fn bad(&self, why: &str) -> Error {
        Error::Protocol(format!("{}: {why}", self.what))
    }

    /// The next `n` bytes.
    pub fn take(&mut self, n: usize) -> Result<&'a [u8], Error> {
        if self.bytes.len() < n {
            return Err(self.bad("truncated"));
        }
        let (a, rest) = self.bytes.split_at(n);
        debug_assert_eq!(a.len() + rest.len(), self.bytes.len(), "the cursor never moves beyond its buffer");
        self.bytes = rest;
        Ok(a)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], Error> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }

    /// One byte.
    pub fn u8(&mut self) -> Result<u8, Error> {
        Ok(self.array::<1>()?[0])
    }
    /// A big-endian u16.
    pub fn u16(&mut self) -> Result<u16, Error> {
        Ok(u16::from_be_bytes(self.array()?))
    }
    /// A big-endian u32.
    pub fn u32(&mut self) -> Result<u32, Error> {
        Ok(u32::from_be_bytes(self.array()?))
    }
    /// A big-endian u64.
    pub fn u64(&mut self) -> Result<u64, Error> {
        Ok(u64::from_be_bytes(self.array()?))
    }

    /// Fail unless every byte was read.
    pub fn end(&self) -> Result<(), Error> {
        if self.bytes.is_empty() {
            Ok(())
        } else {
            Err(self.bad("trailing bytes"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Cursor;

    #[test]
    fn reads_big_endian_and_fails_on_truncation_or_trailing_bytes() {
        let mut c = Cursor::new(&[1, 0, 2, 0, 0, 0, 3, 9], "test message");
        assert_eq!(c.u8().unwrap(), 1);
        assert_eq!(c.u16().unwrap(), 2);
        assert_eq!(c.u32().unwrap(), 3);
        assert!(c.end().is_err(), "one byte left");
        assert!(matches!(c.u16(), Err(crate::Error::Protocol(m)) if m == "test message: truncated"));
        assert_eq!(c.u8().unwrap(), 9, "a failed read consumes nothing");
        assert!(c.end().is_ok());
    }
}
