//! The pull's tracker-link thread: it does the planner's talking to the relay's tracker, so that the
//! planner never waits on a round trip (one that crosses this host's busy uplink queue, up to 100 ms
//! on the bench's links). Answers come back as what was [`Heard`]; what needs no answer is sent at
//! once, also while a question is out, and no thread that shares the link waits for an answer.

use std::io::{Read, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::os::unix::net::UnixStream;
use std::sync::mpsc::{self, Receiver, Sender, TryRecvError};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;
use transport::tracker::{Answer, TrackerLink};
use transport::wire::swarm::{Locate, Located};

/// What the planner has the thread say or ask.
pub(crate) enum Ask {
    /// Where are these blocks (answered with [`Heard::Located`]).
    Locate(Locate),
    /// Do others still need blocks (answered with [`Heard::Needed`]).
    Needed,
    /// This agent holds the block, verified.
    Have(u64),
    /// This agent is receiving the block and serves it while it arrives.
    Arriving(u64),
    /// `peer` (or this agent itself) does not hold `block`.
    NotAt { peer: u32, block: u64 },
}

/// What the thread heard back.
pub(crate) enum Heard {
    /// The tracker's answer to a `locate`, and how long it took.
    Located(Vec<Located>, Duration),
    /// How many other agents still miss blocks.
    Needed(u32),
    /// The link failed: the rest comes from the relay alone. The last thing heard.
    Lost(transport::Error),
}

/// The planner's end of the thread's channel: sending also wakes the thread where it waits on the
/// link's socket for an answer (a channel and a socket cannot be waited on together).
pub(crate) struct AskSender {
    tx: Sender<Ask>,
    wake: UnixStream,
}

/// The thread's end (see [`AskSender`]).
pub(crate) struct AskReceiver {
    rx: Receiver<Ask>,
    wake: UnixStream,
}

/// A channel to the thread.
pub(crate) fn channel() -> Result<(AskSender, AskReceiver), transport::Error> {
    let (a, b) = UnixStream::pair().map_err(transport::Error::io(transport::Operation::MakeTrackerWakeUpSocket))?;
    for s in [&a, &b] {
        s.set_nonblocking(true).map_err(transport::Error::io(transport::Operation::MakeTrackerWakeUpSocket))?;
    }
    let (tx, rx) = mpsc::channel();
    Ok((AskSender { tx, wake: a }, AskReceiver { rx, wake: b }))
}

impl AskSender {
    /// Send `ask`; an error once the thread has ended.
    pub(crate) fn send(&self, ask: Ask) -> Result<(), mpsc::SendError<Ask>> {
        self.tx.send(ask)?;
        // A full wake-up socket already holds a wake-up: nothing lost.
        let _ = (&self.wake).write(&[1]);
        Ok(())
    }
}

/// Do what the planner asks, in order, and pass on what is heard (`hear` returns false once nobody
/// listens); stop at the link's first failure or when the planner is done.
///
/// Everything is sent at once, also while a question's answer is awaited: a `have` does not wait
/// behind a `locate`'s round trip. The link is locked to send or to read an answer that has begun to
/// arrive (the load reporter shares it); in between the thread waits on the link's socket and on the
/// planner's wake-ups, holding nothing. Questions still out when it ends are given up. At the link's
/// failure (a question unanswered within the link's timeout among them: the link itself says so) the
/// link is closed ([`TrackerLink::close`]): the relay then ends this agent's membership.
pub(crate) fn run(tracker: &Mutex<TrackerLink>, asks: &AskReceiver, hear: impl Fn(Heard) -> bool) {
    // However this ends, questions still out are given up: their answers must not reach whoever asks
    // next on the link (the agent's linger).
    struct GiveUp<'a>(&'a Mutex<TrackerLink>);
    impl Drop for GiveUp<'_> {
        fn drop(&mut self) {
            lock(self.0).abandon_questions();
        }
    }
    let _give_up = GiveUp(tracker);
    let socket = {
        let link = lock(tracker);
        match link.socket() {
            Ok(s) => s,
            Err(e) => {
                drop(link);
                lock(tracker).close();
                hear(Heard::Lost(e));
                return;
            }
        }
    };
    // Questions whose answers are still wanted: the link's own count (it is their only record, and
    // keeps their deadline), as of the last step.
    let mut owed = 0;
    loop {
        let ask = if owed == 0 {
            match asks.rx.recv() {
                Ok(a) => Some(a),
                Err(_) => return,
            }
        } else {
            match asks.rx.try_recv() {
                Ok(a) => Some(a),
                Err(TryRecvError::Empty) => None,
                Err(TryRecvError::Disconnected) => return,
            }
        };
        let said = ask.is_some();
        let mut link = lock(tracker);
        let sent = match ask {
            None => Ok(()),
            Some(Ask::Locate(l)) => link.ask_locate(&l),
            Some(Ask::Needed) => link.ask_needed(),
            Some(Ask::Have(b)) => link.have(b),
            Some(Ask::Arriving(b)) => link.arriving(b),
            Some(Ask::NotAt { peer, block }) => link.not_at(peer, block),
        };
        // The answer poll_answer returns is for the oldest question still wanted.
        let asked = link.oldest_wanted_at();
        let heard = sent.and_then(|()| if link.questions_owed() == 0 { Ok(None) } else { link.poll_answer() });
        owed = link.questions_owed();
        drop(link);
        let heard = match heard {
            Ok(Some(answer)) => match answer {
                Answer::Located(l) => Heard::Located(l, asked.map(|t| t.elapsed()).unwrap_or_default()),
                Answer::Needed(n) => Heard::Needed(n),
            },
            // (A question unanswered for longer than the link's timeout is the link's failure.)
            Ok(None) if owed == 0 => continue,
            // Nothing said and nothing arrived: wait for either.
            Ok(None) if !said => match wait(&[socket.as_fd(), asks.wake.as_fd()], WAIT_SLICE) {
                Ok(()) => {
                    drain(&asks.wake);
                    continue;
                }
                Err(e) => Heard::Lost(e),
            },
            Ok(None) => continue,
            Err(e) => Heard::Lost(e),
        };
        let lost = matches!(heard, Heard::Lost(_));
        if lost {
            // Given up on: the relay must see the link end, so that this agent's membership, with its
            // listings and arrivals, ends with it (the load reporter would keep it alive).
            lock(tracker).close();
        }
        if !hear(heard) || lost {
            return;
        }
    }
}

/// The link, locked (a thread that panicked holding it left nothing half-written that matters here).
pub(crate) fn lock(tracker: &Mutex<TrackerLink>) -> MutexGuard<'_, TrackerLink> {
    tracker.lock().unwrap_or_else(|p| p.into_inner())
}

/// The longest a thread waits on the link's socket before it looks again
/// ([`limits::TRACKER_WAIT_SLICE`]: under TLS an answer may sit in the TLS layer's buffer).
pub(crate) const WAIT_SLICE: Duration = limits::TRACKER_WAIT_SLICE;

/// Wait until one of `fds` has something to read (or is closed), at most `timeout`.
pub(crate) fn wait(fds: &[BorrowedFd<'_>], timeout: Duration) -> Result<(), transport::Error> {
    let mut polled: Vec<libc::pollfd> = fds.iter().map(|fd| libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 }).collect();
    let ms = libc::c_int::try_from(timeout.as_millis()).unwrap_or(libc::c_int::MAX);
    // SAFETY: `polled` is a live array of `polled.len()` pollfd structs for the duration of the call,
    // and every descriptor in it is borrowed from an open file for at least as long.
    let n = unsafe { libc::poll(polled.as_mut_ptr(), polled.len() as libc::nfds_t, ms) };
    match n {
        n if n > 0 => Ok(()),
        0 => Ok(()), // Timed out: the caller polls again (the link keeps the questions' deadline).
        _ => {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                Ok(())
            } else {
                Err(transport::Error::io(transport::Operation::WaitForTrackerAnswer)(e))
            }
        }
    }
}

/// Read every wake-up waiting (they only say "look at the channel").
fn drain(wake: &UnixStream) {
    let mut buf = [0u8; 64];
    while matches!((&*wake).read(&mut buf), Ok(n) if n > 0) {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;
    use std::sync::Arc;
    use std::time::Instant;
    use transport::auth::Token;
    use transport::Credentials;

    /// A relay that authenticates the link, reads its requests and never answers; the channel ends
    /// when the link's connection does.
    fn silent_relay() -> (std::net::SocketAddr, mpsc::Receiver<transport::wire::Request>, Token) {
        let token = Token::new(b"0123456789abcdef").unwrap();
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let (tx, rx) = mpsc::channel();
        let t = token.clone();
        std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            transport::auth::server(&mut s, &t).unwrap();
            while let Ok(Some(req)) = transport::wire::read_request(&mut s) {
                if tx.send(req).is_err() {
                    return;
                }
            }
        });
        (addr, rx, token)
    }

    #[test]
    fn an_unanswered_question_closes_the_link_so_that_the_relay_ends_the_membership() {
        let (addr, requests, token) = silent_relay();
        let link = TrackerLink::connect(&addr.into(), &Credentials::from(token), Duration::from_millis(300)).unwrap();
        let tracker = Arc::new(Mutex::new(link));
        let (asks, asked) = channel().unwrap();
        let (heard_tx, heard) = mpsc::channel();
        let t = tracker.clone();
        let thread = std::thread::spawn(move || run(&t, &asked, |h| heard_tx.send(h).is_ok()));
        asks.send(Ask::Needed).unwrap();
        match heard.recv_timeout(Duration::from_secs(10)) {
            Ok(Heard::Lost(e)) => assert!(e.to_string().contains("tracker"), "the loss names the tracker's answer: {e}"),
            Ok(_) => panic!("something heard from a relay that never answers"),
            Err(e) => panic!("no loss reported within 10 s: {e}"),
        }
        thread.join().unwrap();
        // The relay saw the question, then the link's end (the load reporter, which shares the link,
        // cannot keep the membership alive).
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut seen = Vec::new();
        loop {
            match requests.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok(r) => seen.push(r),
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
                Err(mpsc::RecvTimeoutError::Timeout) => panic!("the link is still open at the relay after 10 s"),
            }
        }
        assert!(matches!(seen.as_slice(), [transport::wire::Request::Needed { .. }]), "the relay heard {seen:?}");
        let e = lock(&tracker).load(1, 0).unwrap_err();
        assert!(e.to_string().contains("takes nothing more"), "the load reporter's next report fails: {e}");
    }
}
