//! `--transport` of `relay`, `join` and `fetch`: the one mapping between the names users type and
//! the libraries' transports (libraries take `Option<TransportKind>`, `None` meaning `auto`).

use transport::TransportKind;

/// A transport as users name it: what to use, or on the relay what to offer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum TransportArg {
    /// Join: shm on the relay's host, ucx where UCX has an RDMA device on both ends, tcp otherwise.
    /// Relay: offer everything that works here.
    #[default]
    Auto,
    /// UCX one-sided reads (RDMA READ on InfiniBand/RoCE).
    Ucx,
    /// The relay's memfd, mapped (same host and network namespace).
    Shm,
    /// Range reads over TCP.
    Tcp,
}

impl TransportArg {
    /// The transport asked for; `None` for `auto`.
    pub fn kind(self) -> Option<TransportKind> {
        match self {
            TransportArg::Auto => None,
            TransportArg::Ucx => Some(TransportKind::Ucx),
            TransportArg::Shm => Some(TransportKind::Shm),
            TransportArg::Tcp => Some(TransportKind::Tcp),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::TransportArg;
    use clap::ValueEnum;

    #[test]
    fn the_names_users_type_are_the_transports_names() {
        for a in TransportArg::value_variants() {
            let typed = a.to_possible_value().expect("no skipped variants");
            match a.kind() {
                Some(k) => assert_eq!(typed.get_name(), k.name(), "{a:?}"),
                None => assert_eq!(typed.get_name(), "auto"),
            }
        }
    }
}
