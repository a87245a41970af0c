//! The codecs a block can be kept in, and their one-byte wire encoding.

/// How a block's bytes are kept and carried. The wire byte is a protocol: never renumber. Its name
/// (command line, reports, metrics) is the derive's, lower case.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, strum::VariantArray, strum::IntoStaticStr, strum::Display)]
#[strum(serialize_all = "lowercase")]
pub enum Codec {
    /// As the source wrote it (compression did not pay, or is off).
    Raw,
    /// LZ4 block format (no frame, no size prefix: the table entry holds both lengths).
    Lz4,
    /// One zstd frame.
    Zstd,
}

impl Codec {
    /// Every codec, in wire order.
    pub const ALL: &'static [Codec] = <Codec as strum::VariantArray>::VARIANTS;

    /// Its wire byte.
    pub fn to_wire(self) -> u8 {
        match self {
            Codec::Raw => 0,
            Codec::Lz4 => 1,
            Codec::Zstd => 2,
        }
    }

    /// The codec of a wire byte; None for any other (a peer's error: `Error::UnknownCodec`).
    pub fn from_wire(b: u8) -> Option<Codec> {
        Codec::ALL.iter().copied().find(|c| c.to_wire() == b)
    }

    /// Its name on the command line, in reports and metrics.
    pub fn name(self) -> &'static str {
        self.into()
    }
}

impl std::str::FromStr for Codec {
    type Err = String;
    fn from_str(s: &str) -> Result<Codec, String> {
        Codec::ALL.iter().copied().find(|c| c.name() == s).ok_or_else(|| format!("unknown codec {s:?} (raw, lz4, zstd)"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_bytes_and_names_round_trip_and_strangers_are_refused() {
        for &c in Codec::ALL {
            assert_eq!(Codec::from_wire(c.to_wire()), Some(c));
            assert_eq!(c.name().parse::<Codec>().unwrap(), c);
        }
        assert_eq!(Codec::from_wire(3), None);
        assert_eq!(crate::Error::UnknownCodec(3).to_string(), "unknown block codec 3");
        assert!("gzip".parse::<Codec>().unwrap_err().contains("unknown codec \"gzip\""));
    }
}
