//! Why a join failed, by kind, and who it came from: the kind decides whether another attempt can
//! mend it, and it is chosen where the error is made, never from its text.

use serde::{Deserialize, Serialize};
use std::sync::atomic::Ordering;

/// The party an error came from (or was about).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Party {
    /// The relay (its control, data or tracker connections).
    Relay,
    /// The master.
    Master,
    /// The local server being joined.
    Replica,
    /// The local server's replication link to this agent.
    ReplicaLink,
    /// The sentinels.
    Sentinel,
}

impl std::fmt::Display for Party {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Party::Relay => "relay",
            Party::Master => "master",
            Party::Replica => "local server",
            Party::ReplicaLink => "replica link",
            Party::Sentinel => "sentinel",
        })
    }
}

/// What went wrong underneath: a server's answer, a relay link's failure, or what we observed.
#[derive(Debug, thiserror::Error)]
pub enum Cause {
    /// A Redis/Valkey server (master, local server, sentinel), with its error code when it answered.
    #[error(transparent)]
    Server(Box<client::Error>),
    /// A connection to the relay or a peer.
    #[error(transparent)]
    Link(#[from] transport::Error),
    /// What the agent observed.
    #[error("{0}")]
    Observed(String),
}

/// Why a join failed, by kind: the kind decides whether another attempt can mend it
/// ([`Error::retryable`]), and it is chosen where the error is made, never from its text.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The operator must act first: the replica holds data and no `--force`, a setting the join
    /// cannot work with, a flag missing. Nothing was changed. Not retried.
    #[error("{0}")]
    Precondition(String),
    /// A server or the relay refused our credentials or a command (`NOPERM`, `WRONGPASS`, `NOAUTH`, a
    /// token the relay refuses). Not retried: it is refused again until an operator grants it.
    #[error("{party}: {cause}")]
    Permission {
        /// Who refused.
        party: Party,
        /// Their answer.
        cause: Cause,
    },
    /// The replica cannot load this master's data, or the relay offers no transport that works
    /// from here. Not retried.
    #[error("incompatible: {0}")]
    Incompatible(String),
    /// The relay could not take a snapshot, for the reason it gave. Retried when the kind is one
    /// time can mend (the master unreachable); not for a configuration error (its `--source`), a
    /// refused permission or a snapshot over its size limit.
    #[error("{}", capture_message(*.kind, .message))]
    Capture {
        /// The relay's kind of failure.
        kind: transport::wire::CaptureFailure,
        /// The relay's account.
        message: String,
    },
    /// A party is down, unreachable, went away or answered "not now" (a relay restarting, a master
    /// loading, a link that dropped). Retried.
    #[error("{party}: {cause}")]
    Unavailable {
        /// Who.
        party: Party,
        /// What happened.
        cause: Cause,
    },
    /// A party broke the protocol (an answer that cannot be). Retried: a restarted relay or master
    /// usually speaks correctly again.
    #[error("{party}: protocol error: {cause}")]
    Protocol {
        /// Who.
        party: Party,
        /// What was wrong.
        cause: Cause,
    },
    /// What the join relies on changed under it: the master's history is no longer the snapshot's
    /// (a restart, a failover), the master's address answers as a replica, the replica was
    /// reconfigured. Retried: the next attempt starts from the relay's current snapshot.
    #[error("{0}")]
    Changed(String),
    /// A block failed its checksum twice. Retried.
    #[error("block {block} (offset {offset}) failed its checksum twice")]
    Checksum {
        /// Block number.
        block: u64,
        /// Its offset.
        offset: u64,
    },
    /// A wait ran past its deadline. Retried.
    #[error("timed out: {0}")]
    Timeout(String),
    /// A local resource could not be had (a port to listen on, the output file). Retried.
    #[error("{0}")]
    Resource(String),
    /// A bug, or the process could not run (a thread that would not start). Not retried.
    #[error("internal: {0}")]
    Internal(String),
    /// The join was interrupted (SIGINT/SIGTERM). Not retried.
    #[error("interrupted")]
    Interrupted,
}

fn capture_message(kind: transport::wire::CaptureFailure, message: &str) -> String {
    use transport::wire::CaptureFailure as K;
    match kind {
        K::Source => format!("the relay's {message}; fix the relay's --source (or --master)"),
        K::Permission => format!("the relay's capture was refused ({message}); grant the relay's user the permissions in docs/operations.md"),
        K::TooLarge => format!("the relay's snapshot would be too large ({message}); raise the relay's --snapshot-max-bytes"),
        K::Unreachable | K::Other => format!("the relay's capture failed ({message}); it keeps retrying"),
    }
}

/// An [`Error`]'s kind, as reported to programs (`--json`'s `error_kind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// [`Error::Precondition`].
    Precondition,
    /// [`Error::Permission`].
    Permission,
    /// [`Error::Incompatible`].
    Incompatible,
    /// [`Error::Capture`].
    Capture,
    /// [`Error::Unavailable`].
    Unavailable,
    /// [`Error::Protocol`].
    Protocol,
    /// [`Error::Changed`].
    Changed,
    /// [`Error::Checksum`].
    Checksum,
    /// [`Error::Timeout`].
    Timeout,
    /// [`Error::Resource`].
    Resource,
    /// [`Error::Internal`].
    Internal,
    /// [`Error::Interrupted`].
    Interrupted,
}

/// The name `--json` prints (`error_kind`) and the logs use.
impl std::fmt::Display for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Kind::Precondition => "precondition",
            Kind::Permission => "permission",
            Kind::Incompatible => "incompatible",
            Kind::Capture => "capture",
            Kind::Unavailable => "unavailable",
            Kind::Protocol => "protocol",
            Kind::Changed => "changed",
            Kind::Checksum => "checksum",
            Kind::Timeout => "timeout",
            Kind::Resource => "resource",
            Kind::Internal => "internal",
            Kind::Interrupted => "interrupted",
        })
    }
}

impl Error {
    /// A server's error (master, local server): a refused permission is [`Error::Permission`], a
    /// reply that is not RESP [`Error::Protocol`], anything else (down, loading, a command failing)
    /// [`Error::Unavailable`].
    pub fn server(party: Party, e: client::Error) -> Error {
        match e {
            e if e.is_permission() => Error::Permission { party, cause: Cause::Server(Box::new(e)) },
            e @ (client::Error::Resp { .. } | client::Error::Unexpected { .. }) => Error::Protocol { party, cause: Cause::Server(Box::new(e)) },
            e => Error::Unavailable { party, cause: Cause::Server(Box::new(e)) },
        }
    }

    /// The master's error ([`Error::server`]).
    pub fn master(e: client::Error) -> Error {
        Error::server(Party::Master, e)
    }

    /// The local server's error ([`Error::server`]).
    pub fn replica(e: client::Error) -> Error {
        Error::server(Party::Replica, e)
    }

    /// A relay connection's error: a refused token is [`Error::Permission`], a broken protocol
    /// [`Error::Protocol`], anything else (down, refused a read, a failed one-sided read)
    /// [`Error::Unavailable`].
    pub fn relay(e: transport::Error) -> Error {
        let party = Party::Relay;
        match e {
            e @ transport::Error::Auth(_) => Error::Permission { party, cause: Cause::Link(e) },
            e @ transport::Error::Protocol(_) => Error::Protocol { party, cause: Cause::Link(e) },
            e => Error::Unavailable { party, cause: Cause::Link(e) },
        }
    }

    /// No sentinel named the master: a permission error when every sentinel refused us, else
    /// unavailable (sentinels down or mid-election answer again).
    pub fn sentinel(e: client::sentinel::NoMaster) -> Error {
        let (party, cause) = (Party::Sentinel, Cause::Observed(e.why));
        if e.refused {
            Error::Permission { party, cause }
        } else {
            Error::Unavailable { party, cause }
        }
    }

    /// `party` is unavailable, as observed.
    pub fn unavailable(party: Party, what: impl Into<String>) -> Error {
        Error::Unavailable { party, cause: Cause::Observed(what.into()) }
    }

    /// `party` broke the protocol, as observed.
    pub fn protocol(party: Party, what: impl Into<String>) -> Error {
        Error::Protocol { party, cause: Cause::Observed(what.into()) }
    }

    /// Its kind.
    pub fn kind(&self) -> Kind {
        match self {
            Error::Precondition(_) => Kind::Precondition,
            Error::Permission { .. } => Kind::Permission,
            Error::Incompatible(_) => Kind::Incompatible,
            Error::Capture { .. } => Kind::Capture,
            Error::Unavailable { .. } => Kind::Unavailable,
            Error::Protocol { .. } => Kind::Protocol,
            Error::Changed(_) => Kind::Changed,
            Error::Checksum { .. } => Kind::Checksum,
            Error::Timeout(_) => Kind::Timeout,
            Error::Resource(_) => Kind::Resource,
            Error::Internal(_) => Kind::Internal,
            Error::Interrupted => Kind::Interrupted,
        }
    }

    /// Can another attempt mend this failure (time, a restart, a fresh snapshot)? Follows from the
    /// kind alone; see each variant.
    pub fn retryable(&self) -> bool {
        match self {
            Error::Capture { kind, .. } => kind.transient(),
            Error::Unavailable { .. } | Error::Protocol { .. } | Error::Changed(_) | Error::Checksum { .. } | Error::Timeout(_) | Error::Resource(_) => true,
            Error::Precondition(_) | Error::Permission { .. } | Error::Incompatible(_) | Error::Internal(_) | Error::Interrupted => false,
        }
    }
}

pub(crate) fn check_cancel(cancel: &std::sync::atomic::AtomicBool) -> Result<(), Error> {
    if cancel.load(Ordering::SeqCst) {
        return Err(Error::Interrupted);
    }
    Ok(())
}
