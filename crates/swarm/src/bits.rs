//! A growable set of block numbers, one bit each: the tracker keeps two per agent.

/// A growable set of block numbers.
#[derive(Debug, Default, Clone)]
pub(crate) struct Bits(Vec<u64>);

impl Bits {
    pub(crate) fn get(&self, b: u64) -> bool {
        self.0.get((b / 64) as usize).is_some_and(|w| w & (1 << (b % 64)) != 0)
    }

    pub(crate) fn set(&mut self, b: u64, on: bool) {
        let i = (b / 64) as usize;
        if i >= self.0.len() {
            if !on {
                return;
            }
            self.0.resize(i + 1, 0);
        }
        if on {
            self.0[i] |= 1 << (b % 64);
        } else {
            self.0[i] &= !(1 << (b % 64));
        }
    }

    pub(crate) fn ones(&self) -> Vec<u64> {
        let mut out = Vec::new();
        for (i, w) in self.0.iter().enumerate() {
            let mut w = *w;
            while w != 0 {
                out.push(i as u64 * 64 + u64::from(w.trailing_zeros()));
                w &= w - 1;
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bits_grow_on_demand_and_list_what_is_set() {
        let mut b = Bits::default();
        assert!(!b.get(1000));
        b.set(1000, false);
        assert!(b.0.is_empty(), "clearing past the end allocates nothing");
        for x in [0, 63, 64, 1000] {
            b.set(x, true);
        }
        b.set(64, false);
        assert_eq!(b.ones(), vec![0, 63, 1000]);
        assert!(b.get(63) && !b.get(64));
    }
}
