//! The agent's tracker link: one more authenticated data connection to the relay, registered in a
//! generation's swarm ([`Request::Register`]): from then until that connection closes — the agent
//! finished, failed or was killed — it is a member of the swarm. On the same link it asks where to
//! fetch blocks ([`Locate`] → [`Located`]), says which blocks it holds ([`Request::Have`]), reports
//! peers that failed it ([`Request::NotAt`]) and, once done, whether anyone still needs it
//! ([`Request::Needed`]). The decisions are the `swarm` crate's; the messages are [`crate::wire::swarm`].
//! At the join's end it says how the join ended ([`TrackerLink::ended`]); an agent without a link
//! says it on a short connection ([`report_end`]).
//!
//! `have`, `not_at` and `load` are *sent without waiting*: the relay answers every request in order, so their
//! (empty) answers are read before the next answer that matters. Waiting would cost a round trip per
//! block — behind whatever the agent's uplink has queued — on the one link every block's bookkeeping
//! crosses. Questions (`locate`, `needed`) can be split the same way: [`TrackerLink::ask_locate`] sends
//! one, and [`TrackerLink::poll_answer`] reads its answer once its first bytes have arrived, without
//! waiting for it before that. The agent shares the link between threads behind a lock and holds the
//! lock to send or to read what has begun to arrive, not for a round trip: a load report or a `have`
//! is not held back by a question on its way. A question whose asker gave up
//! ([`TrackerLink::abandon_questions`]) has its answer read and dropped, never handed to the next.

use crate::auth::Kind;
use crate::tcp::StreamReader;
use crate::wire::swarm::{check_addr, decode_located, Locate, Located, LOCATE_ANSWER_MAX};
use crate::wire::Request;
use crate::Credentials;
use crate::{Error, Operation};
use std::collections::VecDeque;
use std::io::Read;
use std::time::{Duration, Instant};

fn bad(what: &str) -> Error {
    Error::Protocol(format!("tracker answer: {what}"))
}

/// An agent's tracker link: a registered data connection to the relay.
pub struct TrackerLink {
    conn: StreamReader<crate::tls::Conn>,
    generation: u64,
    id: Option<u32>,
    /// What the answers not read yet are for, in the order the requests went out (the relay answers
    /// in that order).
    owed: VecDeque<Owed>,
    refused_later: u64,
    /// The I/O timeout the link was connected with: also how long a question may go unanswered.
    timeout: Duration,
    /// An answer could not be read whole (or made no sense), a request could not be sent, or a question
    /// went unanswered ([`TrackerLink::close`]): the link takes nothing more, and its connection is shut.
    failed: bool,
}

/// What an answer not read yet answers.
#[derive(Debug)]
enum Owed {
    /// A request sent without waiting (`have`, `not_at`, `load`): an empty answer.
    Nothing,
    /// A `locate` for these blocks, asked at `at`; `wanted` until whoever asked gives up on it (its
    /// answer is then read and dropped, never handed to a later question).
    Located { asked: Vec<u64>, wanted: bool, at: Instant },
    /// A `needed` (`wanted` and `at` as above).
    Needed { wanted: bool, at: Instant },
}

impl Owed {
    fn wanted(&self) -> bool {
        matches!(self, Owed::Located { wanted: true, .. } | Owed::Needed { wanted: true, .. })
    }
}

/// The answer to a question sent with [`TrackerLink::ask_locate`] or [`TrackerLink::ask_needed`].
#[derive(Debug, PartialEq, Eq)]
pub enum Answer {
    /// Where to fetch the blocks asked about (blocks to wait for are left out).
    Located(Vec<Located>),
    /// Other agents still missing blocks.
    Needed(u32),
}

/// Answers owed at which a request sent without waiting first reads those that have arrived, then
/// waits for the rest before the first wanted question's (the reason: [`limits::TRACKER_ANSWERS_OWED_MAX`]).
/// (Answers behind a wanted question are its asker's to reach: until it reads, more may be owed.)
pub const OWED_MAX: u32 = limits::TRACKER_ANSWERS_OWED_MAX;

/// How an agent registers.
#[derive(Debug, Clone)]
pub struct Registration {
    /// The port it serves peers on (0 when it does not serve).
    pub port: u16,
    /// It serves what it holds.
    pub serves: bool,
    /// It reads the relay over shared memory.
    pub local: bool,
    /// The address peers should use, when not "the address the relay sees, `port`".
    pub advertise: Option<String>,
}

impl TrackerLink {
    /// Connect to the relay at `relay` and authenticate; [`TrackerLink::register`] next. Every read
    /// and write must complete within `timeout`, and every question be answered within it.
    pub fn connect(relay: &endpoint::Endpoint, creds: &Credentials, timeout: Duration) -> Result<TrackerLink, Error> {
        let s = crate::tcp::connect(relay, creds, Kind::Data, timeout)?;
        Ok(TrackerLink { conn: StreamReader::new(s), generation: 0, id: None, owed: VecDeque::new(), refused_later: 0, timeout, failed: false })
    }

    /// Our address on the connection to the relay: where peers most likely reach us too.
    pub fn local_ip(&self) -> Result<std::net::IpAddr, Error> {
        self.conn.s.tcp().local_addr().map(|a| a.ip()).map_err(Error::io(Operation::TrackerLinkLocalAddress))
    }

    /// Join `generation`'s swarm; returns our number in it.
    pub fn register(&mut self, generation: u64, reg: &Registration) -> Result<u32, Error> {
        let advertise = reg.advertise.as_deref().unwrap_or("").as_bytes();
        if !advertise.is_empty() {
            check_addr(advertise)?;
        }
        self.settle()?;
        if !self.owed.is_empty() {
            return Err(Error::Protocol("tracker link: registration asked while questions are unanswered".into()));
        }
        let req = Request::Register { generation, port: reg.port, serves: reg.serves, local: reg.local, advertise_len: advertise.len() as u32 };
        let len = self.conn.request_with_body(req, advertise, Operation::SwarmRegistration)?;
        let id = u32::from_be_bytes(read_body(&mut self.conn.s, len, 4)?.try_into().map_err(|_| bad("registration answer is not 4 bytes"))?);
        self.generation = generation;
        self.id = Some(id);
        Ok(id)
    }

    /// The link's socket (another descriptor for it), to wait on for an answer without holding the
    /// link: see [`TrackerLink::poll_answer`].
    pub fn socket(&self) -> Result<std::net::TcpStream, Error> {
        self.conn.s.tcp().try_clone().map_err(Error::io(Operation::DuplicateTrackerLinkSocket))
    }

    /// Our number in the swarm, once registered.
    pub fn id(&self) -> Option<u32> {
        self.id
    }

    /// Where to fetch `ask.blocks` from; blocks to wait for are left out of the answer. Waits for the
    /// answer: only when no other question is owed.
    pub fn locate(&mut self, ask: &Locate) -> Result<Vec<Located>, Error> {
        self.no_question_owed(Operation::Locate)?;
        self.ask_locate(ask)?;
        match self.next_answer()? {
            Answer::Located(l) => Ok(l),
            Answer::Needed(_) => Err(bad("a needed answer where a locate's was due")),
        }
    }

    /// Ask where to fetch `ask.blocks` from, without waiting: the answer comes from
    /// [`TrackerLink::poll_answer`] or [`TrackerLink::next_answer`], after those of any questions
    /// asked before.
    pub fn ask_locate(&mut self, ask: &Locate) -> Result<(), Error> {
        self.in_step()?;
        let body = ask.encode();
        let req = Request::Locate { generation: self.generation, body_len: body.len() as u32 };
        let mut out = req.encode().to_vec();
        out.extend_from_slice(&body);
        std::io::Write::write_all(&mut self.conn.s, &out).map_err(|e| self.fail(Error::io(Operation::SendLocate)(e)))?;
        self.owed.push_back(Owed::Located { asked: ask.blocks.clone(), wanted: true, at: Instant::now() });
        Ok(())
    }

    /// Ask whether other agents still miss blocks, without waiting (see [`TrackerLink::ask_locate`]).
    pub fn ask_needed(&mut self) -> Result<(), Error> {
        self.in_step()?;
        std::io::Write::write_all(&mut self.conn.s, &Request::Needed { generation: self.generation }.encode()).map_err(|e| self.fail(Error::io(Operation::SendNeeded)(e)))?;
        self.owed.push_back(Owed::Needed { wanted: true, at: Instant::now() });
        Ok(())
    }

    /// Questions asked whose answers are still wanted and not read yet.
    pub fn questions_owed(&self) -> usize {
        self.owed.iter().filter(|o| o.wanted()).count()
    }

    /// When the oldest question whose answer is still wanted was asked: the one the next answer
    /// [`TrackerLink::poll_answer`] returns is for. The link is the only record of its questions.
    pub fn oldest_wanted_at(&self) -> Option<Instant> {
        self.owed.iter().find_map(|o| match o {
            Owed::Located { wanted: true, at, .. } | Owed::Needed { wanted: true, at } => Some(*at),
            _ => None,
        })
    }

    /// Nobody waits for the answers to the questions asked so far any more (whoever asked gave up or
    /// ended): they are read and dropped when they come, never handed to a later question.
    pub fn abandon_questions(&mut self) {
        for o in &mut self.owed {
            match o {
                Owed::Located { wanted, .. } | Owed::Needed { wanted, .. } => *wanted = false,
                Owed::Nothing => {}
            }
        }
    }

    /// Whether bytes of the next owed answer have arrived (never waits). A link that failed says yes:
    /// the read that follows reports how.
    fn answer_arrived(&mut self) -> bool {
        !self.owed.is_empty() && self.conn.s.readable_now().unwrap_or(true)
    }

    /// The first wanted question's answer if it has arrived, reading (and dropping) the answers before
    /// it as far as they have. Waits only for the rest of an answer whose first bytes are here (within
    /// the link's timeout; the relay sends each answer whole). `None` when it has not arrived, or no
    /// question is owed. A wanted question unanswered for longer than the link's timeout fails the
    /// link ([`TrackerLink::close`]): the relay then ends the membership, and whoever polls needs no
    /// clock of its own.
    pub fn poll_answer(&mut self) -> Result<Option<Answer>, Error> {
        self.in_step()?;
        while self.questions_owed() > 0 && self.answer_arrived() {
            if self.owed.front().is_some_and(Owed::wanted) {
                return self.next_answer().map(Some);
            }
            self.settle_one()?;
        }
        if self.oldest_wanted_at().is_some_and(|at| at.elapsed() > self.timeout) {
            return Err(self.fail(Error::io(Operation::WaitForTrackerAnswer)(std::io::Error::from(std::io::ErrorKind::TimedOut))));
        }
        Ok(None)
    }

    /// Read answers in order up to the first wanted question's, and return that: the answers before
    /// it are read and dropped on the way. Waits for it (within the link's timeout); an error when no
    /// question is owed. A refusal of the question is returned as the error it is (the link stays);
    /// an answer that cannot be read whole fails the link.
    pub fn next_answer(&mut self) -> Result<Answer, Error> {
        self.in_step()?;
        loop {
            match self.owed.front() {
                None => return Err(Error::Protocol("tracker link: an answer read where no question was asked".into())),
                Some(o) if !o.wanted() => self.settle_one()?,
                Some(_) => break,
            }
        }
        let got = match self.owed.pop_front() {
            Some(Owed::Located { asked, .. }) => self.read_located(&asked).map(Answer::Located),
            Some(Owed::Needed { .. }) => self.read_needed().map(Answer::Needed),
            _ => unreachable!("the front was checked to be a wanted question"),
        };
        got.map_err(|e| match e {
            Error::Refused { .. } | Error::Busy(_) => e,
            e => self.fail(e),
        })
    }

    fn read_located(&mut self, asked: &[u64]) -> Result<Vec<Located>, Error> {
        let len = self.conn.response(Operation::Locate)?;
        let answer = decode_located(&read_body(&mut self.conn.s, len, LOCATE_ANSWER_MAX)?)?;
        if answer.iter().any(|a| !asked.contains(&a.block)) {
            return Err(bad("answer about a block that was not asked"));
        }
        Ok(answer)
    }

    fn read_needed(&mut self) -> Result<u32, Error> {
        let len = self.conn.response(Operation::Needed)?;
        Ok(u32::from_be_bytes(read_body(&mut self.conn.s, len, 4)?.try_into().map_err(|_| bad("needed answer is not 4 bytes"))?))
    }

    fn no_question_owed(&self, op: Operation) -> Result<(), Error> {
        match self.questions_owed() {
            0 => Ok(()),
            n => Err(Error::Protocol(format!("tracker link: {op} waited for while {n} earlier questions are unanswered"))),
        }
    }

    fn in_step(&self) -> Result<(), Error> {
        if self.failed {
            return Err(Error::Protocol("tracker link: it failed earlier (an answer not read whole, a request not sent, or a question unanswered); the link takes nothing more".into()));
        }
        Ok(())
    }

    fn fail(&mut self, e: Error) -> Error {
        self.close();
        e
    }

    /// Fail the link for good and shut its connection both ways. The relay sees the connection end and
    /// ends this agent's membership: the tracker stops naming it for blocks, and its arrivals under way
    /// end. A link that takes nothing more could no longer say what the agent holds or that an arrival
    /// failed, so a membership kept alive behind it (the load reporter, the linger) would only have
    /// others wait on arrivals that never end. Done at every failure here, and by whoever gives up on
    /// an unanswered question.
    pub fn close(&mut self) {
        self.failed = true;
        // Already shut, or the peer gone: either way nothing more goes out.
        let _ = self.conn.s.tcp().shutdown(std::net::Shutdown::Both);
    }

    /// We hold `block`, verified. Sent without waiting for the answer.
    pub fn have(&mut self, block: u64) -> Result<(), Error> {
        self.send_later(Request::Have { generation: self.generation, block })
    }

    /// We are receiving `block` and serve it while it arrives. Sent without waiting for the answer.
    pub fn arriving(&mut self, block: u64) -> Result<(), Error> {
        self.send_later(Request::Arriving { generation: self.generation, block })
    }

    /// `peer` (or we ourselves) do not hold `block` ([`crate::wire::ALL_BLOCKS`]: `peer` sent a
    /// corrupt block). Sent without waiting for the answer.
    pub fn not_at(&mut self, peer: u32, block: u64) -> Result<(), Error> {
        self.send_later(Request::NotAt { generation: self.generation, block, peer })
    }

    /// Requests sent without waiting that the relay refused.
    pub fn refused_later(&self) -> u64 {
        self.refused_later
    }

    /// We serve `uploads` uploads now, and `arrived` askers took a slot since the last report. Sent
    /// without waiting for the answer.
    pub fn load(&mut self, uploads: u32, arrived: u32) -> Result<(), Error> {
        let max = crate::wire::UPLOADS_REPORTED_MAX;
        self.send_later(Request::Load { generation: self.generation, uploads: uploads.min(max), arrived: arrived.min(max) })
    }

    /// Send a request whose answer is empty without waiting for it.
    fn send_later(&mut self, req: Request) -> Result<(), Error> {
        self.in_step()?;
        if self.owed.len() >= OWED_MAX as usize {
            // Those that have arrived first; if nobody read answers for that long, wait for the
            // ones before the first wanted question (the relay answers at once: its side must not
            // fill while we do not read; a wanted question's answer is its asker's to read).
            self.settle_arrived()?;
            if self.owed.len() >= OWED_MAX as usize {
                self.settle()?;
            }
        }
        std::io::Write::write_all(&mut self.conn.s, &req.encode()).map_err(|e| self.fail(Error::io(Operation::SendTrackerRequest)(e)))?;
        self.owed.push_back(Owed::Nothing);
        Ok(())
    }

    /// Read the answers owed before the first wanted question's (empty ones, and those of questions
    /// given up on). A refusal of a request sent without waiting (a block the relay no longer
    /// publishes, a generation replaced) changes nothing for this agent: it is counted
    /// ([`TrackerLink::refused_later`]), and the link stays; a broken or garbled answer fails it.
    pub fn settle(&mut self) -> Result<(), Error> {
        self.in_step()?;
        while self.owed.front().is_some_and(|o| !o.wanted()) {
            self.settle_one()?;
        }
        Ok(())
    }

    /// [`TrackerLink::settle`] as far as the answers have arrived (waits only for the rest of one
    /// that has begun to).
    fn settle_arrived(&mut self) -> Result<(), Error> {
        while self.owed.front().is_some_and(|o| !o.wanted()) && self.answer_arrived() {
            self.settle_one()?;
        }
        Ok(())
    }

    /// Read the front answer, which nobody wants, and drop it.
    fn settle_one(&mut self) -> Result<(), Error> {
        let read = match self.owed.front() {
            Some(Owed::Located { asked, .. }) => {
                let asked = asked.clone();
                self.read_located(&asked).map(drop)
            }
            Some(Owed::Needed { .. }) => self.read_needed().map(drop),
            Some(Owed::Nothing) => self.conn.response(Operation::HaveNotAtOrLoad).and_then(|len| read_body(&mut self.conn.s, len, 0).map(drop)),
            None => return Ok(()),
        };
        match read {
            Ok(()) => {}
            Err(Error::Refused { .. } | Error::Busy(_)) => self.refused_later += 1,
            Err(e) => return Err(self.fail(e)),
        }
        self.owed.pop_front();
        Ok(())
    }

    /// Tell the relay how this agent's join ended ([`Request::Ended`]) and wait for its empty answer,
    /// reading the answers owed before it: only when no question is owed. Every read and write here
    /// waits `wait` at most (the link's own timeout is restored after); a failure fails the link.
    pub fn ended(&mut self, outcome: crate::wire::JoinOutcome, wait: Duration) -> Result<(), Error> {
        self.no_question_owed(Operation::JoinEnd)?;
        self.in_step()?;
        let tcp = self.conn.s.tcp();
        tcp.set_read_timeout(Some(wait)).map_err(Error::io(Operation::SetReadTimeout))?;
        tcp.set_write_timeout(Some(wait)).map_err(Error::io(Operation::SetWriteTimeout))?;
        let told = self.settle().and_then(|()| {
            let req = Request::Ended { generation: self.generation, outcome };
            std::io::Write::write_all(&mut self.conn.s, &req.encode()).map_err(|e| self.fail(Error::io(Operation::SendTrackerRequest)(e)))?;
            let len = self.conn.response(Operation::JoinEnd).map_err(|e| match e {
                e @ (Error::Refused { .. } | Error::Busy(_)) => e,
                e => self.fail(e),
            })?;
            read_body(&mut self.conn.s, len, 0).map(drop).map_err(|e| self.fail(e))
        });
        let tcp = self.conn.s.tcp();
        let _ = tcp.set_read_timeout(Some(self.timeout)).and_then(|()| tcp.set_write_timeout(Some(self.timeout)));
        told
    }

    /// Whether [`TrackerLink::ended`] can go out on this link now: it has not failed, and no question
    /// is owed.
    pub fn can_end(&self) -> bool {
        !self.failed && self.questions_owed() == 0
    }

    /// Other agents still missing blocks. Waits for the answer: only when no other question is owed.
    pub fn needed(&mut self) -> Result<u32, Error> {
        self.no_question_owed(Operation::Needed)?;
        self.ask_needed()?;
        match self.next_answer()? {
            Answer::Needed(n) => Ok(n),
            Answer::Located(_) => Err(bad("a locate answer where a needed's was due")),
        }
    }
}

/// Tell the relay at `relay` how a join ended ([`Request::Ended`]) on a short data connection of its
/// own, for an agent that holds no tracker link any more (a failed join, one outside any swarm):
/// connect, authenticate, say it, and wait for the empty answer, each step within `timeout`.
pub fn report_end(relay: &endpoint::Endpoint, creds: &Credentials, generation: u64, outcome: crate::wire::JoinOutcome, timeout: Duration) -> Result<(), Error> {
    let conn = crate::tcp::connect(relay, creds, Kind::Data, timeout)?;
    let mut r = StreamReader::new(conn);
    let len = r.request(Request::Ended { generation, outcome }, Operation::JoinEnd)?;
    read_body(&mut r.s, len, 0).map(drop)
}

fn read_body<S: Read>(s: &mut S, len: u32, max: usize) -> Result<Vec<u8>, Error> {
    if len as usize > max {
        return Err(bad(&format!("answer of {len} bytes, expected at most {max}")));
    }
    debug_assert!(len as usize <= max, "a tracker answer's length is bounded before its buffer is allocated");
    let mut b = vec![0u8; len as usize];
    s.read_exact(&mut b).map_err(Error::io(Operation::ReadTrackerAnswer))?;
    Ok(b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::Token;
    use crate::wire::response::ResponseHeader;
    use crate::wire::swarm::{encode_located, Where};
    use crate::wire::{read_request, Status};
    use std::io::Write;
    use std::net::TcpListener;
    use std::sync::mpsc;

    /// A relay that reads requests (reporting each, with a Locate's body skipped) and sends the
    /// answers the test gives it, when the test gives them.
    fn scripted_relay() -> (TrackerLink, mpsc::Receiver<Request>, mpsc::Sender<Vec<u8>>) {
        scripted_relay_within(Duration::from_secs(10))
    }

    /// [`scripted_relay`], with a link whose I/O timeout is `timeout`.
    fn scripted_relay_within(timeout: Duration) -> (TrackerLink, mpsc::Receiver<Request>, mpsc::Sender<Vec<u8>>) {
        let token = Token::new(b"0123456789abcdef").unwrap();
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let (heard_tx, heard) = mpsc::channel();
        let (say, say_rx) = mpsc::channel::<Vec<u8>>();
        let t = token.clone();
        std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            crate::auth::server(&mut s, &t).unwrap();
            let mut w = s.try_clone().unwrap();
            std::thread::spawn(move || {
                for bytes in say_rx {
                    if w.write_all(&bytes).is_err() {
                        return;
                    }
                }
            });
            while let Ok(Some(req)) = read_request(&mut s) {
                if let Request::Locate { body_len, .. } = req {
                    std::io::copy(&mut (&mut s).take(u64::from(body_len)), &mut std::io::sink()).unwrap();
                }
                if heard_tx.send(req).is_err() {
                    return;
                }
            }
        });
        let link = TrackerLink::connect(&addr.into(), &Credentials::from(token), timeout).unwrap();
        (link, heard, say)
    }

    fn empty() -> Vec<u8> {
        ResponseHeader::ok(0).encode().to_vec()
    }

    fn located(blocks: &[Located]) -> Vec<u8> {
        let body = encode_located(blocks);
        [ResponseHeader::ok(body.len() as u32).encode().to_vec(), body].concat()
    }

    /// Wait (within a deadline) for what `f` waits for to be true of the link.
    fn eventually<T>(link: &mut TrackerLink, mut f: impl FnMut(&mut TrackerLink) -> Option<T>) -> T {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(v) = f(link) {
                return v;
            }
            assert!(std::time::Instant::now() < deadline, "nothing within 10 s");
            std::thread::yield_now();
        }
    }

    #[test]
    fn what_needs_no_answer_goes_out_while_a_question_is_unanswered_and_answers_are_read_in_order() {
        let (mut link, heard, say) = scripted_relay();
        link.load(1, 1).unwrap();
        link.ask_locate(&Locate { relay_slots: 1, peer_slots: 1, blocks: vec![3, 4], flows_free: 1, ..Locate::default() }).unwrap();
        link.have(7).unwrap();
        link.not_at(2, 5).unwrap();
        // The relay has the have and the not-at although it has not answered the locate.
        let got: Vec<Request> = (0..4).map(|_| heard.recv_timeout(Duration::from_secs(10)).unwrap()).collect();
        assert!(matches!(got[0], Request::Load { .. }) && matches!(got[1], Request::Locate { .. }));
        assert!(matches!(got[2], Request::Have { block: 7, .. }) && matches!(got[3], Request::NotAt { block: 5, peer: 2, .. }));
        assert_eq!(link.poll_answer().unwrap(), None, "nothing answered yet");
        assert_eq!(link.questions_owed(), 1);
        // The load's answer alone: settled, the locate still awaited.
        say.send(empty()).unwrap();
        eventually(&mut link, |l| (l.owed.len() == 3 || l.poll_answer().unwrap().is_some()).then_some(()));
        assert_eq!(link.owed.len(), 3, "the load's answer was read and nothing else");
        let answer = vec![Located { block: 4, at: Where::Relay }];
        // The locate's, then the have's refused (counted, the link stays) and the not-at's.
        let refusal = [ResponseHeader { status: Status::Error, len: 2 }.encode().to_vec(), b"no".to_vec()].concat();
        say.send([located(&answer), refusal, empty()].concat()).unwrap();
        let got = eventually(&mut link, |l| l.poll_answer().unwrap());
        assert_eq!(got, Answer::Located(answer));
        assert_eq!(link.questions_owed(), 0);
        // The answers after it are read before the next question's.
        say.send([ResponseHeader::ok(4).encode().to_vec(), 2u32.to_be_bytes().to_vec()].concat()).unwrap();
        assert_eq!(link.needed().unwrap(), 2);
        assert_eq!(link.refused_later(), 1);
        assert!(link.owed.is_empty());
    }

    /// The end goes out after the answers owed are read, waits for its own, and keeps its wait short
    /// on a relay that went silent; with a question owed it does not go out at all.
    #[test]
    fn a_joins_end_is_said_after_what_is_owed_and_waits_briefly() {
        use crate::wire::JoinOutcome;
        let (mut link, heard, say) = scripted_relay();
        link.have(1).unwrap();
        assert!(link.can_end());
        say.send([empty(), empty()].concat()).unwrap();
        link.ended(JoinOutcome::InSync, Duration::from_secs(5)).unwrap();
        assert!(matches!(heard.recv_timeout(Duration::from_secs(10)).unwrap(), Request::Have { block: 1, .. }));
        assert!(matches!(heard.recv_timeout(Duration::from_secs(10)).unwrap(), Request::Ended { outcome: JoinOutcome::InSync, .. }));
        assert!(link.owed.is_empty() && link.can_end());

        link.ask_needed().unwrap();
        assert!(!link.can_end(), "a question is owed");
        assert!(link.ended(JoinOutcome::Failed, Duration::from_secs(5)).is_err());
        assert!(matches!(heard.recv_timeout(Duration::from_secs(10)).unwrap(), Request::Needed { .. }));
        assert!(heard.recv_timeout(Duration::from_millis(200)).is_err(), "nothing went out after the needed");

        // A relay that never answers: the end gives up within its wait, and the link is failed.
        let (mut link, heard, _say) = scripted_relay();
        let t = std::time::Instant::now();
        assert!(link.ended(JoinOutcome::FullSync, Duration::from_millis(300)).is_err());
        assert!(t.elapsed() < Duration::from_secs(5), "waited {:?}", t.elapsed());
        assert!(matches!(heard.recv_timeout(Duration::from_secs(10)).unwrap(), Request::Ended { outcome: JoinOutcome::FullSync, .. }));
        assert!(!link.can_end(), "the link failed");
    }

    /// On a relay that accepts and says nothing, the short connection's report gives up within its wait.
    #[test]
    fn a_joins_end_on_a_short_connection_is_bounded_by_its_wait() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let creds = Credentials::from(Token::new(b"0123456789abcdef").unwrap());
        let t = std::time::Instant::now();
        let e = report_end(&addr.into(), &creds, 1, crate::wire::JoinOutcome::Failed, Duration::from_millis(300)).unwrap_err();
        assert!(t.elapsed() < Duration::from_secs(5), "waited {:?}: {e}", t.elapsed());
        drop(l);
    }

    fn ask(blocks: Vec<u64>) -> Locate {
        Locate { relay_slots: 1, peer_slots: 1, blocks, flows_free: 1, ..Locate::default() }
    }

    #[test]
    fn an_answer_about_blocks_not_asked_fails_the_link_for_good() {
        let (mut link, _heard, say) = scripted_relay();
        link.ask_locate(&ask(vec![3])).unwrap();
        let e = link.needed().unwrap_err();
        assert!(e.to_string().contains("1 earlier questions are unanswered"), "a question waited for while another is out: {e}");
        say.send(located(&[Located { block: 9, at: Where::Relay }])).unwrap();
        let e = eventually(&mut link, |l| l.poll_answer().err());
        assert!(e.to_string().contains("not asked"), "{e}");
        say.send(located(&[Located { block: 3, at: Where::Relay }])).unwrap();
        for e in [link.have(1).unwrap_err(), link.ask_locate(&ask(vec![3])).unwrap_err(), link.poll_answer().unwrap_err()] {
            assert!(e.to_string().contains("takes nothing more"), "where the next answer starts is unknown: {e}");
        }
    }

    /// Wait (within a deadline) for the relay's side to see the link end.
    fn relay_sees_the_link_end(heard: &mpsc::Receiver<Request>) {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            match heard.recv_timeout(deadline.saturating_duration_since(std::time::Instant::now())) {
                Ok(_) => continue,
                Err(mpsc::RecvTimeoutError::Disconnected) => return,
                Err(mpsc::RecvTimeoutError::Timeout) => panic!("the relay's side of the link is still open after 10 s"),
            }
        }
    }

    #[test]
    fn a_link_that_fails_is_shut_so_that_the_relay_ends_the_membership() {
        let (mut link, heard, say) = scripted_relay();
        link.have(1).unwrap();
        link.ask_locate(&ask(vec![3])).unwrap();
        say.send(located(&[Located { block: 9, at: Where::Relay }])).unwrap();
        // The have's answer is garbled (it answers a locate): the link fails, and is shut.
        let e = eventually(&mut link, |l| l.poll_answer().err());
        assert!(!e.to_string().contains("takes nothing more"), "the first failure says what failed: {e}");
        relay_sees_the_link_end(&heard);
    }

    #[test]
    fn a_link_given_up_on_is_shut_and_takes_nothing_more() {
        let (mut link, heard, _say) = scripted_relay();
        link.ask_needed().unwrap();
        // Its asker gave up waiting (the agent's timeout).
        link.close();
        relay_sees_the_link_end(&heard);
        for e in [link.have(1).unwrap_err(), link.ask_needed().unwrap_err(), link.poll_answer().unwrap_err()] {
            assert!(e.to_string().contains("takes nothing more"), "{e}");
        }
    }

    #[test]
    fn a_question_unanswered_within_the_links_timeout_fails_the_link_and_shuts_it() {
        let timeout = Duration::from_millis(300);
        let (mut link, heard, _say) = scripted_relay_within(timeout);
        link.ask_needed().unwrap();
        let asked = std::time::Instant::now();
        assert_eq!(link.poll_answer().unwrap(), None, "not answered, not late yet");
        let e = eventually(&mut link, |l| l.poll_answer().err());
        assert!(asked.elapsed() > timeout, "failed before its time");
        assert!(e.to_string().contains("wait for the tracker's answer"), "the error names what failed: {e}");
        relay_sees_the_link_end(&heard);
        assert!(link.poll_answer().unwrap_err().to_string().contains("takes nothing more"));
    }

    #[test]
    fn an_abandoned_question_unanswered_fails_nothing_a_wanted_one_does() {
        let (mut link, _heard, _say) = scripted_relay_within(Duration::from_millis(100));
        link.ask_needed().unwrap();
        link.abandon_questions();
        assert_eq!(link.oldest_wanted_at(), None);
        let deadline = std::time::Instant::now() + Duration::from_millis(300);
        while std::time::Instant::now() < deadline {
            assert_eq!(link.poll_answer().unwrap(), None, "nobody waits for it: no deadline");
            std::thread::yield_now();
        }
        link.have(1).expect("the link goes on");
        // The deadline is alive for a question someone waits for: the abandoned one alone is exempt.
        link.ask_needed().unwrap();
        assert!(link.oldest_wanted_at().is_some());
        let e = eventually(&mut link, |l| l.poll_answer().err());
        assert!(e.to_string().contains("wait for"), "{e}");
    }

    #[test]
    fn a_question_given_up_has_its_answer_dropped_not_handed_to_the_next() {
        let (mut link, heard, say) = scripted_relay();
        link.ask_locate(&ask(vec![3])).unwrap();
        link.ask_needed().unwrap();
        link.abandon_questions();
        assert_eq!(link.questions_owed(), 0);
        assert_eq!(link.poll_answer().unwrap(), None, "nothing wanted");
        link.ask_needed().unwrap();
        for _ in 0..3 {
            heard.recv_timeout(Duration::from_secs(10)).unwrap();
        }
        let needed = |n: u32| [ResponseHeader::ok(4).encode().to_vec(), n.to_be_bytes().to_vec()].concat();
        // The relay answers the given-up locate and needed, then the new needed; a busy refusal of a
        // request sent without waiting after it is counted and the link goes on.
        link.have(1).unwrap();
        let busy = [ResponseHeader { status: Status::Busy, len: 4 }.encode().to_vec(), b"busy".to_vec()].concat();
        say.send([located(&[Located { block: 3, at: Where::Relay }]), needed(7), needed(2), busy].concat()).unwrap();
        assert_eq!(eventually(&mut link, |l| l.poll_answer().unwrap()), Answer::Needed(2), "the answer to the question still wanted");
        link.settle().unwrap();
        assert_eq!(link.refused_later(), 1);
        assert!(link.owed.is_empty());
    }
}
