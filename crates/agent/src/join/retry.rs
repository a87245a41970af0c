//! When a failed join is tried again, and after how long: a decision with no clock and no randomness
//! of its own (the driver passes the jitter), so every rule is unit-tested alone.
//!
//! The rules:
//! - only a join that never handed the replica to the master is retried: once `REPLICAOF <master>`
//!   was issued the replica belongs to the master, and a second sync would fight the master's own;
//! - faults that time can mend are retried (a party unavailable or breaking the protocol, a state
//!   that changed under the join, a timeout, a corrupt block, the relay's capture failing to reach
//!   the master): a relay restarted, a master back after a failover, a link that flapped. The next
//!   attempt attaches to the relay's *current* generation, so a sealed or lost snapshot is replaced
//!   by a fresh one;
//! - what time cannot mend is not (a precondition such as a replica holding data without `--force`,
//!   a refused permission or token, a replica that cannot load the master's RDB version, the relay's
//!   `--source` misconfigured, an internal error, an interrupt): the operator must act. Which is which
//!   follows from the error's kind ([`Error::retryable`]), chosen where the error is made;
//! - a replica that could not be reset is not retried either: it may still follow the agent;
//! - the waits grow exponentially from `base` up to `max`, each drawn uniformly from its upper half
//!   ("equal jitter"), so agents that failed together do not come back together.

use crate::config::RetryPolicy;
use crate::error::Error;
use crate::report::ReplicaState;
use std::time::Duration;

/// What to do after a failed attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Wait this long, then try again.
    Retry(Duration),
    /// Stop; the reason is for the operator.
    GiveUp(&'static str),
}

/// Can another attempt mend this failure? (Independent of how many attempts are left.)
pub fn retryable(e: &Error) -> bool {
    e.retryable()
}

/// The attempts of one join so far.
#[derive(Debug, Clone)]
pub struct Retries {
    policy: RetryPolicy,
    failed: u32,
}

impl Retries {
    /// No attempt has failed yet.
    pub fn new(policy: RetryPolicy) -> Retries {
        Retries { policy, failed: 0 }
    }

    /// The attempt about to run (1 for the first).
    pub fn attempt(&self) -> u32 {
        self.failed + 1
    }

    /// The attempt that just ran failed with `e`, leaving the replica as `replica` says. `jitter` is
    /// uniform in [0, 1) (the driver draws it).
    pub fn failed(&mut self, e: &Error, replica: &ReplicaState, jitter: f64) -> Verdict {
        self.failed += 1;
        match replica {
            ReplicaState::HandedOver => return Verdict::GiveUp("the replica was already handed to the master"),
            ReplicaState::ResetFailed(_) => return Verdict::GiveUp("the replica could not be reset"),
            ReplicaState::Down(_) => return Verdict::GiveUp("the node is down and nothing here starts it"),
            ReplicaState::Untouched | ReplicaState::Reset | ReplicaState::Unstaged | ReplicaState::Unreachable(_) => {}
        }
        if !retryable(e) {
            return Verdict::GiveUp("another attempt cannot mend this");
        }
        if self.failed > self.policy.retries {
            return Verdict::GiveUp("no retries left");
        }
        Verdict::Retry(self.wait(jitter))
    }

    /// `min(max, base · 2^(n-1))` for the n-th retry, then a uniform draw from its upper half.
    fn wait(&self, jitter: f64) -> Duration {
        let doublings = self.failed.saturating_sub(1).min(30);
        let ceiling = self.policy.base.saturating_mul(1u32 << doublings).min(self.policy.max);
        ceiling.mul_f64(0.5 + 0.5 * jitter.clamp(0.0, 1.0))
    }
}

/// A uniform draw in [0, 1) from the OS's randomness (falls back to the clock's nanoseconds).
pub fn jitter() -> f64 {
    let mut b = [0u8; 8];
    if getrandom::getrandom(&mut b).is_err() {
        let n = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.subsec_nanos()).unwrap_or(0);
        b[..4].copy_from_slice(&n.to_le_bytes());
    }
    (u64::from_le_bytes(b) >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(retries: u32) -> RetryPolicy {
        RetryPolicy { retries, base: Duration::from_secs(1), max: Duration::from_secs(8) }
    }

    fn relay_gone() -> Error {
        Error::unavailable(crate::error::Party::Relay, "the relay closed the connection")
    }

    const RESET: ReplicaState = ReplicaState::Reset;

    #[test]
    fn waits_double_up_to_the_ceiling_with_the_upper_half_as_jitter() {
        let mut r = Retries::new(policy(10));
        let mut lows = Vec::new();
        let mut highs = Vec::new();
        for _ in 0..6 {
            let mut probe = r.clone();
            match (r.failed(&relay_gone(), &RESET, 0.0), probe.failed(&relay_gone(), &RESET, 0.999_999)) {
                (Verdict::Retry(lo), Verdict::Retry(hi)) => {
                    lows.push(lo.as_millis());
                    highs.push(hi.as_millis());
                }
                v => panic!("{v:?}"),
            }
        }
        assert_eq!(lows, [500, 1000, 2000, 4000, 4000, 4000]);
        assert_eq!(highs, [999, 1999, 3999, 7999, 7999, 7999]);
    }

    #[test]
    fn gives_up_when_the_retries_are_spent() {
        let mut r = Retries::new(policy(2));
        assert_eq!(r.attempt(), 1);
        assert!(matches!(r.failed(&relay_gone(), &RESET, 0.5), Verdict::Retry(_)));
        assert!(matches!(r.failed(&relay_gone(), &RESET, 0.5), Verdict::Retry(_)));
        assert_eq!(r.attempt(), 3);
        assert_eq!(r.failed(&relay_gone(), &RESET, 0.5), Verdict::GiveUp("no retries left"));
        assert_eq!(Retries::new(policy(0)).failed(&relay_gone(), &RESET, 0.5), Verdict::GiveUp("no retries left"));
    }

    #[test]
    fn never_after_the_handoff_nor_a_failed_reset_nor_for_what_time_cannot_mend() {
        use crate::error::Party;
        use transport::wire::CaptureFailure;
        let mut r = Retries::new(policy(5));
        assert_eq!(r.failed(&Error::Timeout("the replica's link to the master".into()), &ReplicaState::HandedOver, 0.5), Verdict::GiveUp("the replica was already handed to the master"));
        assert_eq!(Retries::new(policy(5)).failed(&relay_gone(), &ReplicaState::ResetFailed("x".into()), 0.5), Verdict::GiveUp("the replica could not be reset"));
        let noperm =
            client::Error::Server { addr: "m:1".into(), command: "INFO".into(), code: client::ErrorCode::NoPerm, message: "NOPERM this user has no permissions to run the 'info' command".into() };
        let never = [
            Error::Precondition("the replica holds 3 keys; --force".into()),
            Error::Incompatible("RDB 12 > 11".into()),
            Error::Interrupted,
            Error::Internal("spawn a thread".into()),
            Error::relay(transport::Error::Auth("the relay refused our token".into())),
            Error::master(noperm),
            Error::Capture { kind: CaptureFailure::Source, message: "snapshot source r:1 is not a replica of the master (role: master)".into() },
            Error::Capture { kind: CaptureFailure::Permission, message: "NOPERM".into() },
            Error::Capture { kind: CaptureFailure::TooLarge, message: "over 1 MiB".into() },
        ];
        for e in never {
            assert!(!retryable(&e), "{e}");
            assert_eq!(Retries::new(policy(5)).failed(&e, &RESET, 0.5), Verdict::GiveUp("another attempt cannot mend this"), "{e}");
        }
        let down = client::Error::Io { op: "connect to", addr: "m:1".into(), source: std::io::ErrorKind::ConnectionRefused.into() };
        let loading = client::Error::Server { addr: "r:1".into(), command: "INFO".into(), code: client::ErrorCode::Loading, message: "LOADING".into() };
        let always = [
            Error::Changed("the master's replication ID changed".into()),
            Error::Checksum { block: 1, offset: 2 },
            Error::Timeout("x".into()),
            Error::master(down),
            Error::replica(loading),
            Error::relay(transport::Error::Rma("connect: relay restarting".into())),
            Error::protocol(Party::Relay, "a log read returned too much"),
            Error::Capture { kind: CaptureFailure::Unreachable, message: "connect to 127.0.0.1:1: refused".into() },
            Error::Resource("listen for the replica".into()),
        ];
        for e in always {
            assert!(retryable(&e), "{e}");
            assert!(matches!(Retries::new(policy(5)).failed(&e, &ReplicaState::Untouched, 0.5), Verdict::Retry(_)), "{e}");
        }
    }

    #[test]
    fn jitter_is_in_the_unit_interval() {
        for _ in 0..1000 {
            let j = jitter();
            assert!((0.0..1.0).contains(&j), "{j}");
        }
    }
}
