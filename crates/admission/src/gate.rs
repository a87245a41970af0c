//! The driver of a listener's [`Admission`]: the accept thread asks it for a [`Pass`] for each
//! connection, the connection's thread tells it when the connection authenticated or failed, and
//! its own thread (the reaper) shuts the sockets of strangers past their deadline and writes the
//! refusals' summaries. Displaced strangers' sockets are shut by the thread whose arrival displaced
//! them. The gate keeps a handle on each stranger's socket for that (a clone), dropped once it
//! authenticates.

use crate::machine::{Admission, Admitted, Budget, Id, Source, Verdict};
use crate::refusal::Refusal;
use crate::refusal_log::{Line, RefusalLog};
use crate::registry::{self, Totals};
use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// A socket the gate can shut (both ways: the thread blocked on it wakes to an end of stream).
pub trait Shut: Send {
    /// Shut it; errors are of no interest (it may be closed already).
    fn shut(&self);
}

impl Shut for std::net::TcpStream {
    fn shut(&self) {
        let _ = self.shutdown(std::net::Shutdown::Both);
    }
}

impl Shut for std::os::unix::net::UnixStream {
    fn shut(&self) {
        let _ = self.shutdown(std::net::Shutdown::Both);
    }
}

/// What a displaced stranger's refusal says.
const DISPLACED: &str = "a newer unauthenticated connection took its place";
/// What a late stranger's refusal says.
const LATE: &str = "did not authenticate in time";

struct Inner {
    machine: Admission,
    sockets: HashMap<Id, Box<dyn Shut>>,
    log: RefusalLog,
    stopped: bool,
}

/// One listener's admission, shared by its accept thread, its connections' threads and its reaper.
pub struct Gate {
    /// Names the listener in log lines.
    listener: &'static str,
    inner: Mutex<Inner>,
    changed: Condvar,
    /// This gate's own refusals (the relay's status: one relay's, where the registry sums every gate
    /// of a name in the process).
    refused: Totals,
    /// The process's totals for this listener's name (the metrics endpoint's).
    totals: Arc<Totals>,
}

impl Gate {
    /// A gate for `listener` (named in its log lines) with `budget`. Its owner runs [`Gate::reap`]
    /// on a thread of its own.
    pub fn new(listener: &'static str, budget: Budget) -> Arc<Gate> {
        Arc::new(Gate {
            listener,
            inner: Mutex::new(Inner { machine: Admission::new(budget), sockets: HashMap::new(), log: RefusalLog::new(limits::REFUSAL_SUMMARY_EVERY), stopped: false }),
            changed: Condvar::new(),
            refused: Default::default(),
            totals: registry::totals(listener),
        })
    }

    /// A gate as [`Gate::new`], with its reaper on a thread named after the listener.
    pub fn start(listener: &'static str, budget: Budget) -> std::io::Result<Arc<Gate>> {
        let gate = Gate::new(listener, budget);
        let g = gate.clone();
        std::thread::Builder::new().name(format!("{listener}-reaper")).spawn(move || g.reap())?;
        Ok(gate)
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A connection from `source` was accepted; `socket` is a handle on it (a clone) to shut it by
    /// if it is displaced or late. Its pass ends its place when dropped.
    pub fn arrive(self: &Arc<Self>, socket: Box<dyn Shut>, source: Source) -> Pass {
        let now = Instant::now();
        let (admitted, line) = {
            let mut g = self.lock();
            let a: Admitted = g.machine.arrive(source, now);
            g.sockets.insert(a.id, socket);
            let mut line = None;
            if let Some((old, old_source, why)) = a.displaced {
                if let Some(s) = g.sockets.remove(&old) {
                    s.shut();
                }
                line = self.count(&mut g, why, old_source, DISPLACED, now);
            }
            (a, line)
        };
        self.changed.notify_all();
        self.say(line, DISPLACED);
        Pass { gate: self.clone(), id: admitted.id, source }
    }

    /// Count a refusal and tell the limiter; what to log comes back (logged without the lock).
    fn count(&self, g: &mut Inner, kind: Refusal, source: Source, detail: &str, now: Instant) -> Option<Line> {
        self.refused.add(kind);
        self.totals.add(kind);
        g.log.refused(kind, source, detail, now)
    }

    fn say(&self, line: Option<Line>, detail: &str) {
        match line {
            None => {}
            Some(Line::First { kind, source }) => {
                tracing::warn!(listener = self.listener, %kind, %source, detail, "connection refused before it was served (more are summed up every {:?})", limits::REFUSAL_SUMMARY_EVERY)
            }
            Some(Line::Summary(s)) => tracing::warn!(listener = self.listener, "{s}"),
        }
    }

    /// Refusals so far, of `kind`.
    pub fn refused(&self, kind: Refusal) -> u64 {
        self.refused.refused(kind)
    }

    /// Connections waiting to authenticate now.
    pub fn strangers(&self) -> usize {
        self.lock().machine.strangers()
    }

    /// Authenticated connections served now.
    pub fn served(&self) -> usize {
        self.lock().machine.served()
    }

    /// End the reaper (the listener stops).
    pub fn stop(&self) {
        self.lock().stopped = true;
        self.changed.notify_all();
    }

    /// The reaper, until [`Gate::stop`]: shut late strangers, write due summaries, sleep until the
    /// next of either.
    pub fn reap(&self) {
        let mut g = self.lock();
        loop {
            if g.stopped {
                return;
            }
            let now = Instant::now();
            let late = g.machine.expire(now);
            let mut lines = Vec::new();
            for (id, source) in late {
                if let Some(s) = g.sockets.remove(&id) {
                    s.shut();
                }
                lines.extend(self.count(&mut g, Refusal::Deadline, source, LATE, now));
            }
            lines.extend(g.log.tick(now).map(Line::Summary));
            let next = [g.machine.next_deadline(), g.log.next_due()].into_iter().flatten().min();
            if !lines.is_empty() {
                drop(g);
                for l in lines {
                    self.say(Some(l), LATE);
                }
                g = self.lock();
                continue;
            }
            // Nothing due: wait for the next due time, or a change (an arrival brings a deadline).
            let wait = next.map_or(Duration::from_secs(3600), |n| n.saturating_duration_since(now));
            g = self.changed.wait_timeout(g, wait).unwrap_or_else(|p| p.into_inner()).0;
        }
    }
}

/// A connection's place at its listener, from its acceptance until it is dropped.
pub struct Pass {
    gate: Arc<Gate>,
    id: Id,
    source: Source,
}

impl Pass {
    /// It authenticated: served from now on, or refused (counted and logged here; close it).
    pub fn authenticated(&mut self) -> Result<(), Refusal> {
        const TOO_LATE_OR_FULL: &str = "authenticated too late, or with the listener full";
        let now = Instant::now();
        let (verdict, line) = {
            let mut g = self.gate.lock();
            g.sockets.remove(&self.id);
            let v = g.machine.authenticated(self.id, now);
            let line = match v {
                Verdict::Refused(kind) => self.gate.count(&mut g, kind, self.source, TOO_LATE_OR_FULL, now),
                _ => None,
            };
            (v, line)
        };
        self.gate.say(line, TOO_LATE_OR_FULL);
        match verdict {
            Verdict::Served => Ok(()),
            Verdict::Refused(kind) => Err(kind),
            // Its socket was shut when it lost its place: it cannot be served.
            Verdict::Gone => Err(Refusal::Displaced),
        }
    }

    /// It failed before it authenticated (`detail` says how; the first of a spell is logged with
    /// it). A connection that had lost its place (displaced, late) was counted then, not again.
    pub fn failed(&self, kind: Refusal, detail: &dyn std::fmt::Display) {
        let now = Instant::now();
        let detail = detail.to_string();
        let line = {
            let mut g = self.gate.lock();
            if g.sockets.remove(&self.id).is_none() {
                return;
            }
            g.machine.closed(self.id);
            self.gate.count(&mut g, kind, self.source, &detail, now)
        };
        self.gate.say(line, &detail);
    }
}

impl Drop for Pass {
    fn drop(&mut self) {
        let mut g = self.gate.lock();
        g.sockets.remove(&self.id);
        g.machine.closed(self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::net::{IpAddr, Ipv4Addr, TcpListener, TcpStream};

    fn budget(deadline: Duration) -> Budget {
        Budget { unauthenticated_max: 2, per_source_max: 2, authenticated_max: 1, deadline }
    }

    /// A connected pair: (our end, the far end).
    fn pair(l: &TcpListener) -> (TcpStream, TcpStream) {
        let far = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        (l.accept().unwrap().0, far)
    }

    fn ip(n: u8) -> Source {
        Source::Ip(IpAddr::V4(Ipv4Addr::new(10, 0, 0, n)))
    }

    /// The far end sees its connection closed (end of stream or reset) within ten seconds.
    fn closed(mut far: &TcpStream) -> bool {
        far.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        match far.read(&mut [0u8; 1]) {
            Ok(n) => n == 0,
            Err(e) => !matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut),
        }
    }

    #[test]
    fn a_displaced_strangers_socket_is_shut_and_counted_once() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let gate = Gate::start("test", budget(Duration::from_secs(60))).unwrap();
        let (ours, far) = pair(&l);
        let first = gate.arrive(Box::new(ours.try_clone().unwrap()), ip(1));
        let (b, _fb) = pair(&l);
        let _second = gate.arrive(Box::new(b.try_clone().unwrap()), ip(2));
        let (c, _fc) = pair(&l);
        let mut third = gate.arrive(Box::new(c.try_clone().unwrap()), ip(3));
        assert!(closed(&far), "the oldest stranger's socket is shut");
        // Its thread then fails to authenticate: already counted as displaced, not again.
        first.failed(Refusal::Closed, &"read: end of stream");
        drop(first);
        assert_eq!((gate.refused(Refusal::Displaced), gate.refused(Refusal::Closed)), (1, 0));
        assert_eq!(third.authenticated(), Ok(()));
        assert_eq!((gate.strangers(), gate.served()), (1, 1));
        gate.stop();
    }

    #[test]
    fn the_reaper_shuts_a_stranger_at_its_deadline_however_it_trickles() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let gate = Gate::start("test", budget(Duration::from_millis(200))).unwrap();
        let (ours, far) = pair(&l);
        let mut pass = gate.arrive(Box::new(ours.try_clone().unwrap()), ip(1));
        assert!(closed(&far), "shut at the deadline");
        assert_eq!(pass.authenticated(), Err(Refusal::Displaced));
        assert_eq!(gate.refused(Refusal::Deadline), 1);
        gate.stop();
    }
}
