//! Choosing the transport for a join from what the relay offers and what works from here.

use crate::error::Error;
use crate::pull::progress::Offered;
use endpoint::Endpoint;
use transport::{Credentials, Transport, TransportKind};

/// Open the transport `choice` names, or for `None` (`auto`) the best one that works; the second
/// value says why (for the log and the report's notes).
pub fn select(choice: Option<TransportKind>, relay: &Endpoint, token: &Credentials, offered: &Offered) -> Result<(Box<dyn Transport>, String), Error> {
    use TransportKind::{Shm, Tcp, Ucx};
    let offers = |kind: TransportKind| offered.transports.contains(&kind);
    let list = || offered.transports.iter().map(|k| k.name()).collect::<Vec<_>>().join(", ");
    let not_offered = |kind: TransportKind| Error::Incompatible(format!("the relay does not offer {kind} (it offers: {}); nothing was changed", list()));
    let shm = || -> Result<Option<transport::shm::ShmTransport>, Error> {
        let Some(name) = offered.shm_socket.clone().filter(|_| offers(Shm)) else { return Ok(None) };
        let t = transport::shm::ShmTransport::new(name, token.token().clone());
        Ok(t.reachable().map_err(Error::relay)?.then_some(t))
    };
    match choice {
        Some(Tcp) if offers(Tcp) => Ok((Box::new(transport::tcp::TcpTransport::new(relay.clone(), token.clone())), "asked for".into())),
        Some(Tcp) => Err(not_offered(Tcp)),
        Some(Shm) => match shm()? {
            Some(t) => Ok((Box::new(t), "asked for".into())),
            None if offers(Shm) => {
                Err(Error::Incompatible("shm needs the agent on the relay's host and in its network namespace; the relay's socket is not reachable from here. Use --transport tcp or ucx".into()))
            }
            None => Err(not_offered(Shm)),
        },
        #[cfg(feature = "ucx")]
        Some(Ucx) if offers(Ucx) => {
            let t = crate::pull::ucx_reader::UcxTransport::connect(relay.clone(), token.clone()).map_err(|e| Error::unavailable(crate::error::Party::Relay, format!("ucx transport: {e}")))?;
            Ok((Box::new(t), "asked for".into()))
        }
        #[cfg(not(feature = "ucx"))]
        Some(Ucx) => Err(Error::Incompatible("this fastrepl was built without ucx (cargo feature `ucx`); use --transport tcp or shm".into())),
        #[cfg(feature = "ucx")]
        Some(Ucx) => Err(not_offered(Ucx)),
        None => {
            if let Some(t) = shm()? {
                return Ok((Box::new(t), "auto: the relay is on this host".into()));
            }
            #[cfg(feature = "ucx")]
            if offers(Ucx) && offered.ucx_transports.iter().any(|t| ucx::is_rdma_transport(t)) {
                // One UCX context serves both the check and, if it passes, the reads.
                match crate::pull::ucx_reader::UcxTransport::connect(relay.clone(), token.clone()) {
                    Ok(t) if t.local_transports().iter().any(|l| ucx::is_rdma_transport(l)) => {
                        return Ok((Box::new(t), "auto: UCX found an RDMA device on both ends".into()));
                    }
                    Ok(_) => tracing::debug!("no RDMA device here; not using ucx"),
                    Err(e) => tracing::debug!(error = %e, "UCX unavailable here"),
                }
            }
            if offers(Tcp) {
                return Ok((Box::new(transport::tcp::TcpTransport::new(relay.clone(), token.clone())), "auto: no shared host or RDMA device".into()));
            }
            Err(Error::Incompatible(format!("no transport offered by the relay works from here (it offers: {})", list())))
        }
    }
}
