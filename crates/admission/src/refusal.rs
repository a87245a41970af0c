//! Why a connection was closed before it was served: the kinds the counters and log summaries are
//! keyed by.

/// The kinds, each with its name, written once: the enum, [`Refusal::ALL`] and [`Refusal::name`]
/// come from this one list, so a kind added to the enum cannot be left out of the counters' arrays
/// (indexed by [`Refusal::index`]) or go nameless.
macro_rules! refusals {
    ($($(#[$doc:meta])* $variant:ident => $name:literal,)*) => {
        /// Why a connection was closed before it was served.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Refusal {
            $($(#[$doc])* $variant,)*
        }

        impl Refusal {
            /// Every kind, in the order of [`Refusal::index`].
            pub const ALL: &[Refusal] = &[$(Refusal::$variant,)*];

            /// Its name in metrics labels, status keys and log lines.
            pub fn name(self) -> &'static str {
                match self {
                    $(Refusal::$variant => $name,)*
                }
            }
        }
    };
}

refusals! {
    /// A newer unauthenticated connection took its place: the strangers' budget was full.
    Displaced => "displaced",
    /// A newer unauthenticated connection from the same address took its place: that address held
    /// its share of the budget.
    SourceCap => "source_cap",
    /// It had not authenticated by its deadline.
    Deadline => "deadline",
    /// It authenticated, but the listener serves its maximum of connections already.
    Full => "full",
    /// It closed (or its socket failed) before authenticating: a port probe, most likely.
    Closed => "closed",
    /// It does not speak our protocol (bad magic, unknown kind, a failed TLS handshake, a request
    /// too large).
    Protocol => "protocol",
    /// It presented a wrong token, or none where one is required.
    Auth => "auth",
}

impl Refusal {
    /// Its position in [`Refusal::ALL`] (for arrays of counters).
    pub fn index(self) -> usize {
        self as usize
    }

    /// What a failed read or handshake before authentication counts as, by its I/O error: timed out
    /// is past the deadline, bytes that are not TLS (or not our framing) are the protocol, anything
    /// else is the peer gone. One rule for every listener.
    pub fn of_io(e: &std::io::Error) -> Refusal {
        match e.kind() {
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => Refusal::Deadline,
            std::io::ErrorKind::InvalidData => Refusal::Protocol,
            _ => Refusal::Closed,
        }
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_sits_at_its_index_under_its_own_name() {
        for (i, k) in Refusal::ALL.iter().enumerate() {
            assert_eq!(k.index(), i);
        }
        let names: std::collections::BTreeSet<_> = Refusal::ALL.iter().map(|k| k.name()).collect();
        assert_eq!(names.len(), Refusal::ALL.len());
    }
}
