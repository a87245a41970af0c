//! The blocks an agent holds, verified, for its replica and for other agents: what a peer is served
//! is what this agent verified against the relay's table entry before it kept it, or a block still
//! arriving, whose last byte goes only once it is verified (see [`crate::peers::arrival`]). Blocks
//! are held and served as the relay keeps them (compressed where that paid), and asked for as the
//! relay is: by their place in its region.

use crate::peers::arrival::{Arrival, Spares};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

/// The blocks an agent holds, verified: those not yet fed to the replica (the pipeline's window) and
/// a bounded cache of those already fed, kept for peers; and those arriving, served while they do.
pub struct Held {
    /// The generation whose blocks these are.
    pub(crate) generation: u64,
    /// Whole blocks the cache of fed blocks keeps at most.
    cache_blocks: u64,
    inner: Mutex<HeldInner>,
}

struct HeldInner {
    blocks: BTreeMap<u64, Arc<Vec<u8>>>,
    /// Which of the blocks fed to the replica are still here (the rest of `blocks` is the window's):
    /// once full, the newest half and a sample of the older ones of this agent's own (see
    /// [`swarm::ServeCache`], [`swarm::Keep`]).
    cache: swarm::ServeCache,
    /// Other agents still miss blocks: keep the cache. An agent alone keeps nothing it has fed (its
    /// memory stays the window's), and starts keeping again as soon as someone joins.
    others_need: bool,
    /// Where each block held or arriving starts in the relay's region, and its stored length: a
    /// peer's read names a block by them. Kept for the generation's life (24 bytes a block).
    places: HashMap<u64, (u64, u32)>,
    /// Blocks being received, served while they arrive (see [`crate::peers::arrival`]).
    arriving: HashMap<u64, Arc<Arrival>>,
    /// Their buffers, kept from one arrival to the next.
    spares: Arc<Spares>,
}

impl Held {
    /// An empty store for `generation` that keeps at most `cache_max` bytes of fed blocks (whole
    /// blocks), chosen by `keep` once it is full.
    pub fn new(generation: u64, block_size: u64, cache_max: u64, keep: swarm::Keep) -> Held {
        let cache_blocks = cache_max / block_size.max(1);
        let cache = swarm::ServeCache::new(cache_blocks, keep);
        Held { generation, cache_blocks, inner: Mutex::new(HeldInner { blocks: BTreeMap::new(), cache, others_need: true, places: HashMap::new(), arriving: HashMap::new(), spares: Arc::default() }) }
    }

    /// Whole blocks the cache of fed blocks may keep (the pull's window looks further ahead while it
    /// keeps fewer: `swarm::Chooser::with_cache_room`).
    pub fn cache_blocks(&self) -> u64 {
        self.cache_blocks
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HeldInner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Keep verified block `b`, whose stored bytes start at `start` in the relay's region (its
    /// arrival, if it was served while arriving, is over: readers still on it finish from it).
    pub fn insert(&self, b: u64, start: u64, bytes: Arc<Vec<u8>>) {
        let mut h = self.lock();
        h.arriving.remove(&b);
        h.places.insert(start, (b, bytes.len() as u32));
        // A block handed on already is held only as the serve cache says; one that arrived after
        // (cannot today: the pipeline asks for no block it holds) would be held beyond its bound.
        if b < h.cache.handed_on() {
            debug_assert!(false, "block {b} inserted after it was handed on");
            return;
        }
        h.blocks.insert(b, bytes);
    }

    /// Block `b`, if held whole (peers are served through `serve`, which also sees arrivals).
    #[cfg(test)]
    fn get(&self, b: u64) -> Option<Arc<Vec<u8>>> {
        self.lock().blocks.get(&b).cloned()
    }

    /// Block `b`, `len` stored bytes at `start` in the relay's region, starts to arrive: peers may
    /// read it from the returned arrival as it fills. None when it is held or arriving already (a
    /// second read of it is not served).
    pub fn start_arrival(&self, b: u64, start: u64, len: usize) -> Option<Arc<Arrival>> {
        let mut h = self.lock();
        if h.blocks.contains_key(&b) || h.arriving.contains_key(&b) {
            return None;
        }
        h.places.insert(start, (b, len as u32));
        let a = Arc::new(Arrival::new(len, h.spares.clone()));
        h.arriving.insert(b, a.clone());
        Some(a)
    }

    /// Block `b`'s arrival failed: cut off the peers reading it and stop serving it.
    pub fn fail_arrival(&self, b: u64, a: &Arrival) {
        a.settle(false);
        let mut h = self.lock();
        if h.arriving.get(&b).is_some_and(|x| std::ptr::eq(Arc::as_ptr(x), a)) {
            h.arriving.remove(&b);
        }
    }

    /// What a peer can be served of block `b`: held whole, or arriving.
    pub(crate) fn serve(&self, b: u64) -> Option<Serve> {
        let h = self.lock();
        h.blocks.get(&b).map(|v| Serve::Whole(v.clone())).or_else(|| h.arriving.get(&b).map(|a| Serve::Arriving(a.clone())))
    }

    /// Whether other agents still miss blocks (from the tracker): an agent alone caches nothing.
    pub fn set_others_need(&self, need: bool) {
        self.lock().others_need = need;
    }

    /// Blocks `0..n` were fed to the replica: they join the cache, and cached blocks beyond its bound
    /// are dropped, as [`swarm::ServeCache`] says. Returns the dropped blocks (the tracker must stop
    /// naming us for them) and their buffers (for reuse).
    pub fn fed(&self, n: u64) -> Vec<(u64, Arc<Vec<u8>>)> {
        let mut h = self.lock();
        let h = &mut *h;
        let dropped = h.cache.fed(n, h.others_need);
        dropped.into_iter().filter_map(|b| h.blocks.remove(&b).map(|v| (b, v))).collect()
    }

    /// Stored bytes held now (window and cache): the blocks' lengths, not their vectors' capacity.
    #[cfg(test)]
    fn bytes(&self) -> u64 {
        self.lock().blocks.values().map(|v| v.len() as u64).sum()
    }

    /// The block a request names, if the request is exactly one whole block that this agent held or
    /// holds (served only while [`Held::serve`] has it).
    pub(crate) fn block_of(&self, offset: u64, len: u32) -> Option<u64> {
        let (b, stored) = *self.lock().places.get(&offset)?;
        (len == stored).then_some(b)
    }
}

/// A block as a peer can be served it.
pub(crate) enum Serve {
    /// Held whole, verified.
    Whole(Arc<Vec<u8>>),
    /// Arriving: served as it fills, its last byte once verified.
    Arriving(Arc<Arrival>),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn held_keeps_a_bounded_cache_of_fed_blocks_as_its_choice_says() {
        let keep = swarm::Keep::new(3);
        // Whole blocks: 10 bytes of 4-byte blocks keep two.
        assert_eq!(Held::new(1, 4, 10, keep).cache_blocks(), 2);
        assert_eq!(Held::new(1, 4, 3, keep).cache_blocks(), 0, "a cache under one block keeps nothing");
        let h = Held::new(1, 4, 8, keep);
        for b in 0..4 {
            h.insert(b, b * 4, Arc::new(vec![b as u8; 4]));
        }
        assert!(h.fed(1).is_empty(), "one block cached, bound two");
        let mut dropped: Vec<u64> = h.fed(4).into_iter().map(|(b, _)| b).collect();
        let first = keep.victim(4, 2, [0, 1, 2, 3]).unwrap();
        assert_eq!(dropped[0], first, "the choice's victim goes first");
        dropped.sort_unstable();
        assert_eq!(dropped.len(), 2, "four blocks fed, two kept");
        assert!(!dropped.contains(&3) && h.get(3).is_some(), "the newest half of the cache stays");
        let kept_old = (0..3).find(|b| !dropped.contains(b)).unwrap();
        assert!(h.get(kept_old).is_some());
        h.insert(4, 16, Arc::new(vec![4; 2]));
        assert!(h.get(4).is_some(), "a block not fed yet is never dropped");
        assert_eq!(h.bytes(), 10);
        h.set_others_need(false);
        let mut dropped: Vec<u64> = h.fed(5).into_iter().map(|(b, _)| b).collect();
        dropped.sort_unstable();
        assert_eq!(dropped, vec![kept_old, 3, 4], "alone, an agent keeps nothing it has fed");
        assert_eq!(h.bytes(), 0);
    }

    #[test]
    fn only_whole_blocks_are_served_by_their_place_in_the_relays_region() {
        let h = Held::new(1, 4, 0, swarm::Keep::new(0));
        // Packed blocks: 3 compressed bytes at 0, 4 raw at 3, a short last one arriving at 7.
        h.insert(0, 0, Arc::new(vec![1; 3]));
        h.insert(1, 3, Arc::new(vec![2; 4]));
        assert!(h.start_arrival(2, 7, 2).is_some());
        assert_eq!((h.block_of(0, 3), h.block_of(3, 4), h.block_of(7, 2)), (Some(0), Some(1), Some(2)));
        assert_eq!(h.block_of(4, 4), None, "not where a block starts (a raw block's place)");
        assert_eq!(h.block_of(3, 3), None, "partial");
        assert_eq!(h.block_of(0, 4), None, "longer than the block");
        assert_eq!(h.block_of(9, 4), None, "past the end");
    }
}
