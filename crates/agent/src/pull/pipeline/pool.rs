//! Block buffers kept for reuse ([`Pool`]): a freed multi-MiB buffer goes back to the kernel, and a
//! new one costs a page fault per 4 KiB. Apart because it is the pull's memory, not its decisions:
//! the planner takes a buffer for each read it gives out and puts back those that come home (from
//! a duplicate, a miss, or the writer once a block is fed), up to a bound.

/// Buffers to reuse, at most `max` of them.
pub(super) struct Pool {
    bufs: Vec<Vec<u8>>,
    max: usize,
}

impl Pool {
    /// A pool that keeps at most `max` buffers.
    pub(super) fn new(max: usize) -> Pool {
        Pool { bufs: Vec::new(), max }
    }

    /// A buffer to fill (one kept, or a new, empty one).
    pub(super) fn take(&mut self) -> Vec<u8> {
        self.bufs.pop().unwrap_or_default()
    }

    /// Keep `buf` for a later read, unless the pool is full or the buffer holds no memory.
    pub(super) fn put(&mut self, buf: Vec<u8>) {
        if self.bufs.len() < self.max && buf.capacity() > 0 {
            self.bufs.push(buf);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Pool;

    #[test]
    fn a_pool_keeps_buffers_with_memory_up_to_its_bound() {
        let mut pool = Pool::new(2);
        pool.put(Vec::new());
        assert_eq!(pool.take().capacity(), 0, "a buffer without memory is not kept: a new one is given");
        for n in [10, 20, 30] {
            pool.put(Vec::with_capacity(n));
        }
        let kept: Vec<usize> = (0..3).map(|_| pool.take().capacity()).collect();
        assert!(kept[0] >= 20 && kept[1] >= 10 && kept[2] == 0, "two kept, the third let go: {kept:?}");
    }
}
