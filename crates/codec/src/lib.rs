//! How a snapshot block is kept and carried: its [`Codec`], chosen once where the snapshot is
//! captured ([`Compressor`]), and undone where the block is fed to a replica ([`Decompressor`]).
//!
//! A block is kept compressed only when that pays ([`limits::BLOCK_COMPRESSED_PAYS_EIGHTHS`]); else
//! it stays as the source wrote it. Decompression is bounded by the length the block's table entry
//! names, never by what the compressed bytes claim: a block that decodes to any other length, or
//! does not decode, is an error naming the codec and both lengths, and no byte of it is used.
#![deny(missing_docs)]

mod codec;
mod compressor;
mod decompress;
mod error;
pub mod fuzz;

pub use codec::Codec;
pub use compressor::Compressor;
pub use decompress::{decompress, Decompressor};
pub use error::Error;
