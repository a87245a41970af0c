//! The transports a relay offers and an agent reads over, as one type on the wire, in reports and in
//! code.

use serde::{Deserialize, Serialize};

/// A data transport. On the wire and in JSON it is its lower-case name (`"tcp"`, `"shm"`, `"ucx"`),
/// and so it prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, strum::VariantArray, strum::IntoStaticStr, strum::Display)]
#[serde(rename_all = "lowercase")]
#[strum(serialize_all = "lowercase")]
pub enum TransportKind {
    /// Range reads over TCP.
    Tcp,
    /// The relay's memfd, mapped (same host and network namespace).
    Shm,
    /// UCX one-sided reads (RDMA READ on InfiniBand/RoCE).
    Ucx,
}

impl TransportKind {
    /// Every transport.
    pub const ALL: &'static [TransportKind] = <TransportKind as strum::VariantArray>::VARIANTS;

    /// The name users type and reports show.
    pub fn name(self) -> &'static str {
        self.into()
    }
}

#[cfg(test)]
mod tests {
    use super::TransportKind;

    #[test]
    fn json_display_and_name_agree() {
        assert_eq!(TransportKind::ALL.iter().map(|k| k.name()).collect::<Vec<_>>(), ["tcp", "shm", "ucx"]);
        for &k in TransportKind::ALL {
            assert_eq!(serde_json::to_string(&k).unwrap(), format!("\"{k}\""));
            assert_eq!(serde_json::from_str::<TransportKind>(&format!("\"{}\"", k.name())).unwrap(), k);
        }
        assert!(serde_json::from_str::<TransportKind>("\"rdma\"").is_err());
    }
}
