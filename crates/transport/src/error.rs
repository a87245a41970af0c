//! The transport's errors, and the operations that can fail ([`Operation`]: an I/O step, or a request
//! refused): a type, so that callers decide on it (a block read cut off, a shm socket absent) by
//! value, never by comparing text.

/// Errors of a transport.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A socket operation failed.
    #[error("{op}: {source}")]
    Io {
        /// What we were doing.
        op: Operation,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// Authentication failed (either side).
    #[error("authentication failed: {0}")]
    Auth(String),
    /// The peer broke the protocol.
    #[error("protocol error: {0}")]
    Protocol(String),
    /// A one-sided read (UCX) failed.
    #[error("one-sided read: {0}")]
    Rma(String),
    /// A peer agent serves its maximum already: the request may go to another holder.
    #[error("peer busy: {0}")]
    Busy(String),
    /// The relay (or a peer) refused a request.
    #[error("refused {op}: {message}")]
    Refused {
        /// Which request.
        op: Operation,
        /// The relay's reason.
        message: String,
    },
}

impl Error {
    /// Wrap an I/O error with the operation that failed.
    pub fn io(op: Operation) -> impl FnOnce(std::io::Error) -> Error {
        move |source| Error::Io { op, source }
    }

    /// Whether a block read's body ended early in an orderly end of stream: what a holder serving a
    /// block while it arrives does when that arrival fails (a cut-off). An end of stream anywhere
    /// else (before the answer's header, in an error message) or a reset is not one.
    pub fn is_cut_off(&self) -> bool {
        matches!(self, Error::Io { op: Operation::ReadBlockBytes, source } if source.kind() == std::io::ErrorKind::UnexpectedEof)
    }
}

/// Declares [`Operation`]: each variant with the words it is shown as (in error messages, which
/// stay as they were when these were strings), and the list of them all.
macro_rules! operations {
    ($($variant:ident => $words:literal,)*) => {
        /// An operation that can fail: an I/O step, named in [`Error::Io`] (the agent's and the relay's
        /// uses of the transport's connections included), or a request, named in [`Error::Refused`].
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Operation {
            $(#[doc = concat!("\"", $words, "\"")] $variant,)*
        }

        impl Operation {
            /// Every operation, in declaration order.
            pub const ALL: &[Operation] = &[$(Operation::$variant,)*];

            /// The words an error message names it with.
            pub fn words(self) -> &'static str {
                match self {
                    $(Operation::$variant => $words,)*
                }
            }
        }
    };
}

operations! {
    // Authentication (`auth`).
    ReadRelayGreetingClosed => "read relay greeting (closed without a word: the relay may be at its --connections-max, or require TLS (--agents-tls-cert): then give --relay-cacert)",
    ReadRelayGreetingSilent => "read relay greeting (silence: a relay with --agents-tls-cert waits for TLS; give --relay-cacert)",
    ReadRelayGreeting => "read relay greeting",
    SendAuthentication => "send authentication",
    ReadAuthenticationResult => "read authentication result",
    ReadRelayProof => "read relay proof",
    SendGreeting => "send greeting",
    ReadAgentAuthentication => "read agent authentication",
    SendAuthenticationResult => "send authentication result",
    // Connecting (`tcp`, `shm`).
    ConnectToRelay => "connect to relay",
    ConnectToPeer => "connect to peer",
    SetNodelay => "set TCP_NODELAY",
    SetReadTimeout => "set read timeout",
    SetWriteTimeout => "set write timeout",
    TlsToRelay => "TLS to relay",
    MakeUnixSocketAddress => "make unix socket address",
    ConnectToShmSocket => "connect to the relay's shm socket",
    // The agent's reads (`tcp`, `shm`, `renew`, `tracker`, the ucx reader).
    SendReadRequest => "send read request",
    SendRequest => "send request",
    ReadResponseHeader => "read response header",
    ReadErrorMessage => "read error message",
    SendBlockReadRequest => "send block read request",
    ReadBlockBytes => "read block bytes",
    ReadLogBytes => "read log bytes",
    ReadRenewalAnswer => "read renewal answer",
    SendShmAttachRequest => "send shm attach request",
    ReceiveRegionDescriptor => "receive the region's descriptor",
    ReadRegionSize => "read region size",
    MapRelayRegion => "map the relay's region",
    ReadRelayStoreFile => "read the relay's store file",
    ReadUcxAttachAnswer => "read ucx attach answer",
    // The tracker link (`tracker`, the agent's side of it).
    TrackerLinkLocalAddress => "local address of the tracker link",
    DuplicateTrackerLinkSocket => "duplicate the tracker link's socket",
    SendLocate => "send locate",
    SendNeeded => "send needed",
    SendTrackerRequest => "send tracker request",
    ReadTrackerAnswer => "read tracker answer",
    MakeTrackerWakeUpSocket => "make the tracker link's wake-up socket",
    WaitForTrackerAnswer => "wait for the tracker's answer",
    // Control messages (`wire`).
    SendControlMessage => "send control message",
    ReadControlMessage => "read control message",
    // The serving side: the relay's and a peer agent's answers (`serve`, `wire`).
    ReadDataRequest => "read data request",
    ReadRequestBody => "read request body",
    SendResponseHeader => "send response header",
    ReadBlockFromRegion => "read block from the region",
    SendBlock => "send block",
    SendfileBlock => "sendfile block",
    SendLogBytes => "send log bytes",
    SendError => "send error",
    SendBusy => "send busy",
    ReopenRegionReadOnly => "reopen region read-only",
    SendRegionDescriptor => "send the region's descriptor",
    // The relay's accepted connections.
    ConfigureSocket => "configure socket",
    CloneSocket => "clone socket",
    TlsHandshakeWithAgent => "TLS handshake with the agent",
    LocalAddress => "local address",
    WatchControlConnection => "watch the agent's control connection",
    // A peer agent's accepted connections, and its reads from peers.
    ConfigurePeerSocket => "configure peer socket",
    ClonePeerSocket => "clone peer socket",
    TlsHandshakeWithPeer => "TLS handshake with a peer",
    SendBlockToPeer => "send block to peer",
    SendArrivingBlockToPeer => "send arriving block to peer",
    ResolvePeerAddress => "resolve peer address",
    // Requests, named when refused or asked out of turn.
    BlockRead => "block read",
    LogRead => "log read",
    Renew => "renew",
    SwarmRegistration => "swarm registration",
    Locate => "locate",
    Needed => "needed",
    HaveNotAtOrLoad => "have, not-at or load",
    JoinEnd => "join end report",
    ShmAttach => "shm attach",
    UcxAttach => "ucx attach",
}

impl std::fmt::Display for Operation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.words())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::ErrorKind;

    #[test]
    fn only_a_block_body_ended_early_is_a_cut_off() {
        let eof = |op| Error::io(op)(ErrorKind::UnexpectedEof.into());
        assert!(eof(Operation::ReadBlockBytes).is_cut_off());
        for &op in Operation::ALL.iter().filter(|&&op| op != Operation::ReadBlockBytes) {
            assert!(!eof(op).is_cut_off(), "{op:?}: an end of stream there is not a cut-off");
        }
        assert!(!Error::io(Operation::ReadBlockBytes)(ErrorKind::ConnectionReset.into()).is_cut_off(), "a reset is not a cut-off");
        assert!(!Error::Protocol("read block bytes".into()).is_cut_off());
    }

    #[test]
    fn operations_read_as_the_words_they_were() {
        let e = Error::io(Operation::ReadBlockBytes)(ErrorKind::UnexpectedEof.into());
        assert_eq!(e.to_string(), format!("read block bytes: {}", std::io::Error::from(ErrorKind::UnexpectedEof)));
        assert_eq!(Operation::SetNodelay.to_string(), "set TCP_NODELAY");
        assert_eq!(Operation::ConnectToShmSocket.to_string(), "connect to the relay's shm socket");
        assert_eq!(Error::Refused { op: Operation::LogRead, message: "generation 3 is gone".into() }.to_string(), "refused log read: generation 3 is gone");
        let words: std::collections::HashSet<_> = Operation::ALL.iter().map(|op| op.words()).collect();
        assert_eq!(words.len(), Operation::ALL.len(), "no two operations read alike");
    }
}
