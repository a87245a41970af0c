//! Which transports a relay offers (`--transport` on the relay).

/// Transports a relay offers. Control connections and log reads always use TCP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Offer {
    /// Range reads over TCP.
    pub tcp: bool,
    /// The memfd over a unix socket, for agents on this host.
    pub shm: bool,
    /// UCX RMA (RDMA READ where there is a device).
    pub ucx: bool,
}

impl Offer {
    /// Everything that works here (`--transport auto`).
    pub const ALL: Offer = Offer { tcp: true, shm: true, ucx: true };
}

impl From<Option<transport::TransportKind>> for Offer {
    /// `--transport` on the relay: `auto` (`None`) offers everything that works here, a transport
    /// only that.
    fn from(c: Option<transport::TransportKind>) -> Offer {
        use transport::TransportKind::{Shm, Tcp, Ucx};
        match c {
            None => Offer::ALL,
            Some(Tcp) => Offer { tcp: true, shm: false, ucx: false },
            Some(Shm) => Offer { tcp: false, shm: true, ucx: false },
            Some(Ucx) => Offer { tcp: false, shm: false, ucx: true },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transport_choice_maps_to_what_is_offered() {
        assert_eq!(Offer::from(None), Offer::ALL);
        assert_eq!(Offer::from(Some(transport::TransportKind::Tcp)), Offer { tcp: true, shm: false, ucx: false });
        assert_eq!(Offer::from(Some(transport::TransportKind::Shm)), Offer { tcp: false, shm: true, ucx: false });
        assert_eq!(Offer::from(Some(transport::TransportKind::Ucx)), Offer { tcp: false, shm: false, ucx: true });
    }
}
