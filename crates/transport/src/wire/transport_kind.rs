//! The transports a relay offers and an agent reads over, as one type on the wire, in reports and in
//! code.

use serde::{Deserialize, Serialize};

/// A data transport. On the wire and in JSON it is its lower-case name (`"tcp"`, `"shm"`, `"ucx"`),
/// and so it prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
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
    pub const ALL: [TransportKind; 3] = [TransportKind::Tcp, TransportKind::Shm, TransportKind::Ucx];

    /// The name users type and reports show.
    pub fn name(self) -> &'static str {
        match self {
            TransportKind::Tcp => "tcp",
            TransportKind::Shm => "shm",
            TransportKind::Ucx => "ucx",
        }
    }
}

impl std::fmt::Display for TransportKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::TransportKind;

    #[test]
    fn json_display_and_name_agree() {
        for k in TransportKind::ALL {
            assert_eq!(serde_json::to_string(&k).unwrap(), format!("\"{k}\""));
            assert_eq!(serde_json::from_str::<TransportKind>(&format!("\"{}\"", k.name())).unwrap(), k);
        }
        assert!(serde_json::from_str::<TransportKind>("\"rdma\"").is_err());
    }
}
