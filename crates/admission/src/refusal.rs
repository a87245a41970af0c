//! Why a connection was closed before it was served: the kinds the counters and log summaries are
//! keyed by.

/// Why a connection was closed before it was served. Its list ([`Refusal::ALL`]) and names (in
/// metrics labels, status keys and log lines: snake case) come from the derive, so a kind added here
/// cannot be left out of the counters' arrays (indexed by [`Refusal::index`]) or go nameless.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, strum::VariantArray, strum::IntoStaticStr, strum::Display)]
#[strum(serialize_all = "snake_case")]
pub enum Refusal {
    /// A newer unauthenticated connection took its place: the strangers' budget was full.
    Displaced,
    /// A newer unauthenticated connection from the same address took its place: that address held
    /// its share of the budget.
    SourceCap,
    /// It had not authenticated by its deadline.
    Deadline,
    /// It authenticated, but the listener serves its maximum of connections already.
    Full,
    /// It closed (or its socket failed) before authenticating: a port probe, most likely.
    Closed,
    /// It does not speak our protocol (bad magic, unknown kind, a failed TLS handshake, a request
    /// too large).
    Protocol,
    /// It presented a wrong token, or none where one is required.
    Auth,
}

impl Refusal {
    /// Every kind, in the order of [`Refusal::index`].
    pub const ALL: &'static [Refusal] = <Refusal as strum::VariantArray>::VARIANTS;

    /// Its name in metrics labels, status keys and log lines.
    pub fn name(self) -> &'static str {
        self.into()
    }
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
        // The names are an interface (metrics labels, status keys): these, whatever the derive does.
        assert_eq!(Refusal::ALL.iter().map(|k| k.to_string()).collect::<Vec<_>>(), ["displaced", "source_cap", "deadline", "full", "closed", "protocol", "auth"]);
    }
}
