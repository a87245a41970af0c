//! The admission decision, without sockets or a clock: which connections hold a place before they
//! have authenticated, which one a newcomer displaces, which are past their deadline, and whether an
//! authenticated one fits the listener's limit.

use crate::refusal::Refusal;
use std::collections::{HashMap, HashSet, VecDeque};
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// One connection's number in its listener's admission.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Id(u64);

/// Where a connection comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Source {
    /// A network address.
    Ip(IpAddr),
    /// A process of this host on a unix socket, by its user id (`SO_PEERCRED`): a local stranger
    /// under another user fills its own share, not the agents'.
    LocalUser(u32),
    /// This host (a unix socket whose peer could not be told), or an address the socket could not tell.
    Local,
}

impl Source {
    /// A TCP connection's source: its peer's address, or [`Source::Local`] if the socket cannot tell.
    pub fn of_tcp(s: &std::net::TcpStream) -> Source {
        s.peer_addr().map_or(Source::Local, |a| Source::Ip(a.ip()))
    }
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Ip(ip) => write!(f, "{ip}"),
            Source::LocalUser(uid) => write!(f, "local uid {uid}"),
            Source::Local => f.write_str("local"),
        }
    }
}

/// A listener's bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// Unauthenticated connections held at once.
    pub unauthenticated_max: usize,
    /// Unauthenticated connections held at once from one source.
    pub per_source_max: usize,
    /// Authenticated connections served at once (the listener's real limit).
    pub authenticated_max: usize,
    /// How long after its arrival a connection must have authenticated.
    pub deadline: Duration,
}

/// A stranger's place.
#[derive(Debug, Clone, Copy)]
struct Stranger {
    id: Id,
    source: Source,
    deadline: Instant,
}

/// What a new connection was given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Admitted {
    /// Its number.
    pub id: Id,
    /// When it must have authenticated.
    pub deadline: Instant,
    /// The stranger whose place it took (its socket is to be shut), with why.
    pub displaced: Option<(Id, Source, Refusal)>,
}

/// What became of a connection that authenticated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// It counts against the real limit now.
    Served,
    /// Refused: it is to be closed (and counted, with this kind).
    Refused(Refusal),
    /// It had lost its place already (displaced, or expired): counted then, its socket shut.
    Gone,
}

/// The admission of one listener.
#[derive(Debug)]
pub struct Admission {
    budget: Budget,
    next: u64,
    /// Oldest first.
    strangers: VecDeque<Stranger>,
    /// How many of `strangers` each source holds (kept with it: an arrival looks it up, not them all).
    held_by: HashMap<Source, usize>,
    served: HashSet<Id>,
}

impl Admission {
    /// An admission with no connection.
    pub fn new(budget: Budget) -> Admission {
        Admission { budget, next: 0, strangers: VecDeque::new(), held_by: HashMap::new(), served: HashSet::new() }
    }

    /// A connection from `source` was accepted at `now`. It is always given a place: when its
    /// source holds its share, it takes that source's oldest; else, when the budget is full, the
    /// oldest stranger's of the source holding the most places (with one each, the oldest of all,
    /// as sshd's `MaxStartups`). The newest connection is the likeliest to be an agent about to
    /// authenticate, the oldest has had its chance; and a flood from a few addresses displaces its
    /// own before an agent's lone connection.
    pub fn arrive(&mut self, source: Source, now: Instant) -> Admitted {
        let from_source = self.held_by.get(&source).copied().unwrap_or(0);
        let displaced = if from_source >= self.budget.per_source_max.max(1) {
            self.displace(source).map(|(id, s)| (id, s, Refusal::SourceCap))
        } else if self.strangers.len() >= self.budget.unauthenticated_max.max(1) {
            let busiest = self.busiest().expect("a full budget holds strangers");
            self.displace(busiest).map(|(id, s)| (id, s, Refusal::Displaced))
        } else {
            None
        };
        let id = Id(self.next);
        self.next += 1;
        let deadline = now + self.budget.deadline;
        self.strangers.push_back(Stranger { id, source, deadline });
        *self.held_by.entry(source).or_default() += 1;
        Admitted { id, deadline, displaced }
    }

    /// The source holding the most places; of those, the one whose oldest arrived first (the
    /// strangers are oldest first).
    fn busiest(&self) -> Option<Source> {
        let most = self.held_by.values().copied().max()?;
        self.strangers.iter().map(|s| s.source).find(|src| self.held_by.get(src) == Some(&most))
    }

    /// Remove the oldest stranger of `source`.
    fn displace(&mut self, source: Source) -> Option<(Id, Source)> {
        let at = self.strangers.iter().position(|s| s.source == source)?;
        self.remove_at(at).map(|s| (s.id, s.source))
    }

    /// Remove the stranger at `at`, and its source's count with it.
    fn remove_at(&mut self, at: usize) -> Option<Stranger> {
        let s = self.strangers.remove(at)?;
        if let Some(n) = self.held_by.get_mut(&s.source) {
            *n -= 1;
            if *n == 0 {
                self.held_by.remove(&s.source);
            }
        }
        Some(s)
    }

    /// Connection `id` authenticated at `now`.
    pub fn authenticated(&mut self, id: Id, now: Instant) -> Verdict {
        let Some(at) = self.strangers.iter().position(|s| s.id == id) else { return Verdict::Gone };
        let s = self.remove_at(at).expect("found just now");
        if now >= s.deadline {
            return Verdict::Refused(Refusal::Deadline);
        }
        if self.served.len() >= self.budget.authenticated_max {
            return Verdict::Refused(Refusal::Full);
        }
        self.served.insert(id);
        Verdict::Served
    }

    /// Connection `id` closed (whatever its stage; a connection already displaced or expired is
    /// no longer known).
    pub fn closed(&mut self, id: Id) {
        if !self.served.remove(&id) {
            if let Some(at) = self.strangers.iter().position(|s| s.id == id) {
                self.remove_at(at);
            }
        }
    }

    /// The strangers past their deadline at `now`, removed: their sockets are to be shut.
    pub fn expire(&mut self, now: Instant) -> Vec<(Id, Source)> {
        let mut late = Vec::new();
        while let Some(at) = self.strangers.iter().position(|s| now >= s.deadline) {
            let s = self.remove_at(at).expect("found just now");
            late.push((s.id, s.source));
        }
        late
    }

    /// The earliest deadline of a stranger held.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.strangers.iter().map(|s| s.deadline).min()
    }

    /// Unauthenticated connections held now.
    pub fn strangers(&self) -> usize {
        self.strangers.len()
    }

    /// Authenticated connections served now.
    pub fn served(&self) -> usize {
        self.served.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    const DEADLINE: Duration = Duration::from_secs(2);

    fn budget() -> Budget {
        Budget { unauthenticated_max: 4, per_source_max: 2, authenticated_max: 3, deadline: DEADLINE }
    }

    fn ip(n: u8) -> Source {
        Source::Ip(IpAddr::V4(Ipv4Addr::new(10, 0, 0, n)))
    }

    #[test]
    fn a_full_budget_makes_the_newest_stranger_displace_the_oldest() {
        let (mut a, t) = (Admission::new(budget()), Instant::now());
        let first: Vec<Admitted> = (1..=4).map(|n| a.arrive(ip(n), t)).collect();
        assert!(first.iter().all(|x| x.displaced.is_none()));
        let fifth = a.arrive(ip(5), t);
        assert_eq!(fifth.displaced, Some((first[0].id, ip(1), Refusal::Displaced)));
        assert_eq!(a.strangers(), 4);
        // The displaced one lost its place: authenticating now does not serve it.
        assert_eq!(a.authenticated(first[0].id, t), Verdict::Gone);
        assert_eq!(a.authenticated(fifth.id, t), Verdict::Served);
    }

    #[test]
    fn a_full_budget_is_paid_for_by_the_source_holding_the_most_places() {
        let (mut a, t) = (Admission::new(budget()), Instant::now());
        // An agent's connection first, then two sources holding the rest (one of them twice).
        let agent = a.arrive(ip(1), t);
        let flood: Vec<Admitted> = [ip(2), ip(3), ip(3)].iter().map(|s| a.arrive(*s, t)).collect();
        let next = a.arrive(ip(4), t);
        assert_eq!(next.displaced, Some((flood[1].id, ip(3), Refusal::Displaced)), "the busiest source's oldest, not the agent, oldest of all");
        assert_eq!(a.authenticated(agent.id, t), Verdict::Served);
    }

    #[test]
    fn one_source_over_its_share_displaces_its_own_oldest_not_anyone_elses() {
        let (mut a, t) = (Admission::new(budget()), Instant::now());
        let other = a.arrive(ip(9), t);
        let mine: Vec<Admitted> = (0..2).map(|_| a.arrive(ip(1), t)).collect();
        let third = a.arrive(ip(1), t);
        assert_eq!(third.displaced, Some((mine[0].id, ip(1), Refusal::SourceCap)));
        // However many more it opens, the other source keeps its place.
        for _ in 0..100 {
            assert_eq!(a.arrive(ip(1), t).displaced.map(|d| d.1), Some(ip(1)));
        }
        assert_eq!(a.authenticated(other.id, t), Verdict::Served);
    }

    #[test]
    fn authenticated_connections_count_against_the_real_limit_and_strangers_never_take_it() {
        let (mut a, t) = (Admission::new(budget()), Instant::now());
        let agents: Vec<Id> = (1..=3).map(|n| a.arrive(ip(n), t).id).collect();
        for id in &agents {
            assert_eq!(a.authenticated(*id, t), Verdict::Served);
        }
        // Strangers fill their own budget, and churn; none displaces a served connection.
        for n in 0..50 {
            a.arrive(ip(10 + n % 5), t);
        }
        assert_eq!((a.served(), a.strangers()), (3, 4));
        // A fourth agent authenticates at the limit: refused, as the limit says.
        let late = a.arrive(ip(4), t).id;
        assert_eq!(a.authenticated(late, t), Verdict::Refused(Refusal::Full));
        // One leaves: the next agent is served although strangers still wait.
        a.closed(agents[0]);
        let next = a.arrive(ip(4), t).id;
        assert_eq!(a.authenticated(next, t), Verdict::Served);
        // (It took the oldest stranger's place while it authenticated.)
        assert_eq!((a.served(), a.strangers()), (3, 3));
    }

    #[test]
    fn a_stranger_past_its_deadline_is_expired_and_cannot_authenticate_late() {
        let (mut a, t) = (Admission::new(budget()), Instant::now());
        let early = a.arrive(ip(1), t).id;
        let later = a.arrive(ip(2), t + DEADLINE / 2).id;
        assert_eq!(a.next_deadline(), Some(t + DEADLINE));
        assert_eq!(a.expire(t + DEADLINE - Duration::from_millis(1)), vec![]);
        assert_eq!(a.expire(t + DEADLINE), vec![(early, ip(1))]);
        assert_eq!(a.next_deadline(), Some(t + DEADLINE + DEADLINE / 2));
        // Not expired yet, but past its deadline when it authenticates: refused.
        assert_eq!(a.authenticated(later, t + DEADLINE * 2), Verdict::Refused(Refusal::Deadline));
        assert_eq!((a.strangers(), a.served(), a.next_deadline()), (0, 0, None));
    }

    #[test]
    fn the_counts_by_source_follow_every_change() {
        let (mut a, t) = (Admission::new(budget()), Instant::now());
        let mut ids = Vec::new();
        for n in 0..40u32 {
            let x = a.arrive(ip((n % 3) as u8), t + Duration::from_millis(u64::from(n) * 100));
            ids.push(x.id);
            match n % 7 {
                0 => a.closed(ids[(n / 2) as usize]),
                3 => {
                    a.authenticated(ids[(n / 3) as usize], t);
                }
                5 => {
                    a.expire(t + Duration::from_millis(u64::from(n) * 100));
                }
                _ => {}
            }
            let mut counted: HashMap<Source, usize> = HashMap::new();
            for s in &a.strangers {
                *counted.entry(s.source).or_default() += 1;
            }
            assert_eq!(counted, a.held_by, "after arrival {n}");
            assert!(a.strangers() <= 4 && a.held_by.values().all(|c| *c <= 2));
        }
    }

    #[test]
    fn closing_frees_the_place_at_either_stage_and_twice_is_harmless() {
        let (mut a, t) = (Admission::new(budget()), Instant::now());
        let s = a.arrive(ip(1), t).id;
        let d = a.arrive(ip(2), t).id;
        assert_eq!(a.authenticated(d, t), Verdict::Served);
        a.closed(s);
        a.closed(d);
        a.closed(d);
        assert_eq!((a.strangers(), a.served()), (0, 0));
    }
}
