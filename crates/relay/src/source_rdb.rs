//! What RDB the relay asks a replica source to write during a capture (`--source-rdb`).
//!
//! With blocks compressed at the relay, the source's own LZF costs twice: its child spends a core on
//! it, and zstd gains far less on LZF's output (docs/design/compression.md: 2.88× on a cache's RDB
//! written raw, 1.83× on the same data with LZF; 39 against 57 MB). So by default a replica source is
//! asked for a raw RDB whenever the relay compresses. The master's configuration is never touched.

use codec::Codec;

/// `--source-rdb`: the RDB a replica source writes during a capture.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SourceRdb {
    /// Raw (`rdbcompression no`, `rdbchecksum no` where it can change at runtime) while the relay
    /// compresses blocks and the source is a replica; left as configured if the source refuses the
    /// change (an ACL without `CONFIG`), with a warning.
    #[default]
    Auto,
    /// As the source is configured.
    AsConfigured,
    /// Raw from a replica source, compressing or not; a source that refuses fails the capture.
    Raw,
}

/// What a capture does to its source's RDB settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Switch {
    /// Nothing.
    Leave,
    /// Switch them off; if the source refuses, go on as it is.
    Try,
    /// Switch them off, or fail the capture.
    Must,
}

impl SourceRdb {
    /// Its name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            SourceRdb::Auto => "auto",
            SourceRdb::AsConfigured => "as-configured",
            SourceRdb::Raw => "raw",
        }
    }

    /// What to do for a capture from a source that is a replica (`replica`) or the master, when the
    /// relay keeps blocks with `codec`.
    pub fn switch(self, codec: Codec, replica: bool) -> Switch {
        match (self, replica) {
            (_, false) | (SourceRdb::AsConfigured, true) => Switch::Leave,
            (SourceRdb::Raw, true) => Switch::Must,
            (SourceRdb::Auto, true) if codec == Codec::Raw => Switch::Leave,
            (SourceRdb::Auto, true) => Switch::Try,
        }
    }
}

impl std::str::FromStr for SourceRdb {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        [SourceRdb::Auto, SourceRdb::AsConfigured, SourceRdb::Raw].into_iter().find(|v| v.name() == s).ok_or_else(|| format!("--source-rdb must be auto, as-configured or raw, not {s:?}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replica_source_writes_raw_while_blocks_are_compressed_and_the_master_is_never_touched() {
        assert_eq!(SourceRdb::default().switch(Codec::Zstd, true), Switch::Try);
        assert_eq!(SourceRdb::Auto.switch(Codec::Lz4, true), Switch::Try);
        assert_eq!(SourceRdb::Auto.switch(Codec::Raw, true), Switch::Leave, "uncompressed blocks: LZF saves bytes on the link");
        assert_eq!(SourceRdb::Raw.switch(Codec::Raw, true), Switch::Must);
        assert_eq!(SourceRdb::AsConfigured.switch(Codec::Zstd, true), Switch::Leave);
        for v in [SourceRdb::Auto, SourceRdb::AsConfigured, SourceRdb::Raw] {
            assert_eq!(v.switch(Codec::Zstd, false), Switch::Leave, "{v:?} on the master");
            assert_eq!(v.name().parse::<SourceRdb>(), Ok(v));
        }
        assert!("lzf".parse::<SourceRdb>().is_err());
    }
}
