//! How wide a pull goes: its default window of blocks fetched ahead ([`window`], by how the pull
//! takes part in a swarm, [`Membership`]) and its relay readers ([`readers`]). Apart because the
//! callers size a pull before it starts (the join, `stage`, `fetch`, the lab), from their settings
//! alone, and the defaults are sized together with the serve cache's.

use crate::peers::peering::Peering;
use transport::Transport;

/// How a pull takes part in a swarm, for its default window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Membership {
    /// It pulls from the relay alone (`stage`, `fetch`, a join that is no member of a swarm).
    Alone,
    /// It reads from other agents too, and keeps no serve cache (`--no-serve`, a TLS relay without a
    /// peer certificate, `--serve-cache-mib` under one block).
    Uncached,
    /// It reads from other agents and keeps a serve cache for them.
    Cached,
}

impl Membership {
    /// A join's: alone without `peering`, else by whether it keeps a serve cache.
    pub fn of(peering: Option<&Peering>) -> Membership {
        match peering {
            None => Membership::Alone,
            Some(p) if p.serves() && p.held.cache_blocks() > 0 => Membership::Cached,
            Some(_) => Membership::Uncached,
        }
    }
}

/// The window to pull with: as asked, or by default [`limits::WINDOW_BLOCKS_SERVING_DEFAULT`] for a
/// member of a swarm that keeps a serve cache (its window's blocks are what other agents read while
/// they are new, its cache's only what lagging agents read; the two defaults are sized together),
/// [`limits::WINDOW_BLOCKS_SWARM_DEFAULT`] for one that keeps none (its memory stays what it was
/// before the serving default grew), and [`limits::WINDOW_BLOCKS_DEFAULT`] for a pull from the relay
/// alone (a larger one would only hold memory).
pub fn window(asked: Option<u64>, membership: Membership) -> u64 {
    asked.unwrap_or(match membership {
        Membership::Alone => limits::WINDOW_BLOCKS_DEFAULT,
        Membership::Uncached => limits::WINDOW_BLOCKS_SWARM_DEFAULT,
        Membership::Cached => limits::WINDOW_BLOCKS_SERVING_DEFAULT,
    })
}

/// Readers to use: as asked, or the transport's default when `asked` is 0.
pub fn readers(asked: usize, transport: &dyn Transport) -> usize {
    if asked == 0 {
        transport.default_readers()
    } else {
        asked
    }
}

#[cfg(test)]
mod tests {
    use super::{window, Membership};

    #[test]
    fn a_member_of_a_swarm_looks_further_ahead_by_default_than_a_pull_from_the_relay_alone() {
        assert_eq!(window(None, Membership::Cached), limits::WINDOW_BLOCKS_SERVING_DEFAULT);
        assert_eq!(window(None, Membership::Uncached), limits::WINDOW_BLOCKS_SWARM_DEFAULT);
        assert_eq!(window(None, Membership::Alone), limits::WINDOW_BLOCKS_DEFAULT);
        assert_eq!(window(Some(8), Membership::Cached), 8, "an asked window is kept");
        assert_eq!(window(Some(64), Membership::Alone), 64);
    }
}
