//! The transports as the lab names them: the product's (`tcp`, `shm`, `ucx`, `auto`) plus UCX held to
//! one of its own transports (`ucx-tcp`, `ucx-sm`), which is how one machine without RDMA measures
//! UCX's paths separately. The one mapping from these names to `--transport` and `UCX_TLS`.

/// A transport for the demo and the probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LabTransport {
    /// The product's choice.
    Auto,
    /// Range reads over TCP.
    Tcp,
    /// The relay's memfd, mapped.
    Shm,
    /// UCX, with whatever transport UCX picks.
    Ucx,
    /// UCX restricted to its TCP transport.
    UcxTcp,
    /// UCX restricted to its shared-memory transports.
    UcxSm,
}

impl LabTransport {
    /// The name on the command line and in results.
    pub fn name(self) -> &'static str {
        match self {
            LabTransport::Auto => "auto",
            LabTransport::Tcp => "tcp",
            LabTransport::Shm => "shm",
            LabTransport::Ucx => "ucx",
            LabTransport::UcxTcp => "ucx-tcp",
            LabTransport::UcxSm => "ucx-sm",
        }
    }

    /// What `fastrepl --transport` gets.
    pub fn choice(self) -> Option<transport::TransportKind> {
        match self {
            LabTransport::Auto => None,
            LabTransport::Tcp => Some(transport::TransportKind::Tcp),
            LabTransport::Shm => Some(transport::TransportKind::Shm),
            LabTransport::Ucx | LabTransport::UcxTcp | LabTransport::UcxSm => Some(transport::TransportKind::Ucx),
        }
    }

    /// `UCX_TLS` for both ends, when UCX is held to one of its transports.
    pub fn ucx_tls(self) -> Option<&'static str> {
        match self {
            LabTransport::UcxTcp => Some("tcp"),
            LabTransport::UcxSm => Some("sm"),
            _ => None,
        }
    }

    /// The raw baseline it is compared with: memcpy for shared-memory paths, a TCP stream otherwise.
    pub fn baseline(self) -> &'static str {
        match self {
            LabTransport::Shm | LabTransport::UcxSm => "memcpy",
            _ => "tcp-stream",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::LabTransport;
    use clap::ValueEnum;

    #[test]
    fn names_are_the_ones_clap_parses() {
        for t in LabTransport::value_variants() {
            assert_eq!(LabTransport::from_str(t.name(), false), Ok(*t), "{t:?}");
        }
    }
}
