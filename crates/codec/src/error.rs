//! What can be wrong with a block's stored bytes.

use crate::codec::Codec;

/// A block that cannot be used: the source that sent it (relay or peer) is at fault, never the
/// replica fed from it.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Error {
    /// A codec byte no version of fastrepl wrote.
    #[error("unknown block codec {0}")]
    UnknownCodec(u8),
    /// The table entry names a block longer than any block can be.
    #[error("block of {raw_len} bytes is longer than any block ({max} at most)")]
    TooLong {
        /// What the entry said.
        raw_len: u64,
        /// The bound.
        max: u64,
    },
    /// A compressed block no shorter than its raw length: no relay keeps such a block compressed.
    #[error("{codec} block of {stored_len} bytes for {raw_len} raw bytes: a compressed block is shorter than its raw bytes")]
    NotShorter {
        /// Its codec.
        codec: Codec,
        /// Its stored length.
        stored_len: usize,
        /// Bytes the entry names.
        raw_len: usize,
    },
    /// The bytes did not decode.
    #[error("{codec} block of {stored_len} bytes does not decompress: {why}")]
    Corrupt {
        /// Its codec.
        codec: Codec,
        /// Its stored length.
        stored_len: usize,
        /// The decoder's words.
        why: String,
    },
    /// The bytes decode to fewer bytes than the table entry's (or, raw, are another length).
    #[error("{codec} block of {stored_len} bytes comes to {got} bytes, not the {want} its table entry names")]
    WrongLength {
        /// Its codec.
        codec: Codec,
        /// Its stored length.
        stored_len: usize,
        /// Bytes it comes to.
        got: usize,
        /// Bytes the entry names.
        want: usize,
    },
    /// The bytes would decode to more than the table entry's length (decoding stopped there, or the
    /// zstd frame says so in its header).
    #[error("{codec} block of {stored_len} bytes decompresses to more than the {want} bytes its table entry names")]
    Longer {
        /// Its codec.
        codec: Codec,
        /// Its stored length.
        stored_len: usize,
        /// Bytes the entry names.
        want: usize,
    },
}
