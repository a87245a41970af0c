//! Choosing the transport for a join from what the relay offers and what works from here.

use crate::progress::Offered;
use crate::Error;
use std::net::SocketAddr;
use transport::{Token, Transport};

pub use transport::Choice;

/// Open the transport `choice` names, or for `auto` the best one that works; the second value says
/// why (for the log and the report's notes).
pub fn select(choice: Choice, relay: SocketAddr, token: &Token, offered: &Offered) -> Result<(Box<dyn Transport>, String), Error> {
    let offers = |name: &str| offered.transports.iter().any(|t| t == name);
    let not_offered = |name: &str| {
        Error::Incompatible(format!("the relay does not offer {name} (it offers: {}); nothing was changed", offered.transports.join(", ")))
    };
    let shm = || -> Result<Option<transport::shm::ShmTransport>, Error> {
        let Some(name) = offered.shm_socket.clone().filter(|_| offers("shm")) else { return Ok(None) };
        let t = transport::shm::ShmTransport::new(name, token.clone());
        Ok(t.reachable().map_err(Error::relay)?.then_some(t))
    };
    match choice {
        Choice::Tcp if offers("tcp") => Ok((Box::new(transport::tcp::TcpTransport::new(relay, token.clone())), "asked for".into())),
        Choice::Tcp => Err(not_offered("tcp")),
        Choice::Shm => match shm()? {
            Some(t) => Ok((Box::new(t), "asked for".into())),
            None if offers("shm") => Err(Error::Incompatible(
                "shm needs the agent on the relay's host and in its network namespace; the relay's socket is not reachable from here. Use --transport tcp or ucx".into(),
            )),
            None => Err(not_offered("shm")),
        },
        #[cfg(feature = "ucx")]
        Choice::Ucx if offers("ucx") => {
            let t = crate::ucx_reader::UcxTransport::connect(relay, token.clone()).map_err(|e| Error::unavailable(crate::Party::Relay, format!("ucx transport: {e}")))?;
            Ok((Box::new(t), "asked for".into()))
        }
        #[cfg(not(feature = "ucx"))]
        Choice::Ucx => Err(Error::Incompatible("this fastrepl was built without ucx (cargo feature `ucx`); use --transport tcp or shm".into())),
        #[cfg(feature = "ucx")]
        Choice::Ucx => Err(not_offered("ucx")),
        Choice::Auto => {
            if let Some(t) = shm()? {
                return Ok((Box::new(t), "auto: the relay is on this host".into()));
            }
            #[cfg(feature = "ucx")]
            if offers("ucx") && offered.ucx_transports.iter().any(|t| ucx::is_rdma_transport(t)) {
                // One UCX context serves both the check and, if it passes, the reads.
                match crate::ucx_reader::UcxTransport::connect(relay, token.clone()) {
                    Ok(t) if t.local_transports().iter().any(|l| ucx::is_rdma_transport(l)) => {
                        return Ok((Box::new(t), "auto: UCX found an RDMA device on both ends".into()));
                    }
                    Ok(_) => tracing::debug!("no RDMA device here; not using ucx"),
                    Err(e) => tracing::debug!(error = %e, "UCX unavailable here"),
                }
            }
            if offers("tcp") {
                return Ok((Box::new(transport::tcp::TcpTransport::new(relay, token.clone())), "auto: no shared host or RDMA device".into()));
            }
            Err(Error::Incompatible(format!("no transport offered by the relay works from here (it offers: {})", offered.transports.join(", "))))
        }
    }
}
