//! Every listener's refusal counts in the process, by listener name, for the metrics endpoint: the
//! relay's status shows its agent port's, but an agent's peer port and every metrics endpoint are
//! counted nowhere else. Gates of one name (a join's peer server after a retry) add to the same
//! totals, so the counters never go back.

use crate::refusal::Refusal;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// One listener name's refusals so far, by kind.
#[derive(Default)]
pub struct Totals {
    refused: [AtomicU64; Refusal::ALL.len()],
}

impl Totals {
    /// Count one refusal.
    pub(crate) fn add(&self, kind: Refusal) {
        self.refused[kind.index()].fetch_add(1, Ordering::Relaxed);
    }

    /// Refusals of `kind` so far.
    pub fn refused(&self, kind: Refusal) -> u64 {
        self.refused[kind.index()].load(Ordering::Relaxed)
    }
}

fn registry() -> &'static Mutex<BTreeMap<&'static str, Arc<Totals>>> {
    static REGISTRY: OnceLock<Mutex<BTreeMap<&'static str, Arc<Totals>>>> = OnceLock::new();
    REGISTRY.get_or_init(Default::default)
}

/// The totals of listener `name` (made on first use).
pub(crate) fn totals(name: &'static str) -> Arc<Totals> {
    registry().lock().unwrap_or_else(|p| p.into_inner()).entry(name).or_default().clone()
}

/// Every listener the process has had, by name, with its totals.
pub fn listeners() -> Vec<(&'static str, Arc<Totals>)> {
    registry().lock().unwrap_or_else(|p| p.into_inner()).iter().map(|(n, t)| (*n, t.clone())).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gates_of_one_name_add_to_one_total() {
        let (a, b) = (totals("registry-test"), totals("registry-test"));
        a.add(Refusal::Deadline);
        b.add(Refusal::Deadline);
        let (_, t) = listeners().into_iter().find(|(n, _)| *n == "registry-test").expect("listed");
        assert_eq!(t.refused(Refusal::Deadline), 2);
        assert_eq!(t.refused(Refusal::Full), 0);
    }
}
