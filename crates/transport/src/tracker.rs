//! The agent's tracker link: one more authenticated data connection to the relay, registered in a
//! generation's swarm ([`Request::Register`]): from then until that connection closes — the agent
//! finished, failed or was killed — it is a member of the swarm. On the same link it asks where to
//! fetch blocks ([`Locate`] → [`Located`]), says which blocks it holds ([`Request::Have`]), reports
//! peers that failed it ([`Request::NotAt`]) and, once done, whether anyone still needs it
//! ([`Request::Needed`]). The decisions are the `swarm` crate's; the messages are [`crate::wire::swarm`].
//!
//! `have`, `not_at` and `load` are *sent without waiting*: the relay answers every request in order, so their
//! (empty) answers are read before the next answer that matters. Waiting would cost a round trip per
//! block — behind whatever the agent's uplink has queued — on the one link every block's bookkeeping
//! crosses.

use crate::auth::Kind;
use crate::Credentials;
use crate::tcp::StreamReader;
use crate::wire::swarm::{check_addr, decode_located, Locate, Located, LOCATE_ANSWER_MAX};
use crate::wire::Request;
use crate::Error;
use std::io::Read;
use std::net::SocketAddr;
use std::time::Duration;

fn bad(what: &str) -> Error {
    Error::Protocol(format!("tracker answer: {what}"))
}

/// An agent's tracker link: a registered data connection to the relay.
pub struct TrackerLink {
    conn: StreamReader<crate::tls::Conn>,
    generation: u64,
    id: Option<u32>,
    /// Answers owed to requests sent without waiting, read before the next answer that matters.
    owed: u32,
    refused_later: u64,
}

/// Most requests sent without waiting before their answers are read: the relay's answers then never
/// fill its side of the connection while the agent does not read.
pub const OWED_MAX: u32 = 256;

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
    /// Connect to the relay at `relay` and authenticate; [`TrackerLink::register`] next.
    pub fn connect(relay: SocketAddr, creds: &Credentials, timeout: Duration) -> Result<TrackerLink, Error> {
        let s = crate::tcp::connect(relay, creds, Kind::Data, timeout)?;
        Ok(TrackerLink { conn: StreamReader::new(s), generation: 0, id: None, owed: 0, refused_later: 0 })
    }

    /// Our address on the connection to the relay: where peers most likely reach us too.
    pub fn local_ip(&self) -> Result<std::net::IpAddr, Error> {
        self.conn.s.tcp().local_addr().map(|a| a.ip()).map_err(Error::io("local address of the tracker link"))
    }

    /// Join `generation`'s swarm; returns our number in it.
    pub fn register(&mut self, generation: u64, reg: &Registration) -> Result<u32, Error> {
        let advertise = reg.advertise.as_deref().unwrap_or("").as_bytes();
        if !advertise.is_empty() {
            check_addr(advertise)?;
        }
        self.settle()?;
        let req = Request::Register { generation, port: reg.port, serves: reg.serves, local: reg.local, advertise_len: advertise.len() as u32 };
        let len = self.conn.request_with_body(req, advertise, "swarm registration")?;
        let id = u32::from_be_bytes(read_body(&mut self.conn.s, len, 4)?.try_into().map_err(|_| bad("registration answer is not 4 bytes"))?);
        self.generation = generation;
        self.id = Some(id);
        Ok(id)
    }

    /// Our number in the swarm, once registered.
    pub fn id(&self) -> Option<u32> {
        self.id
    }

    /// Where to fetch `ask.blocks` from; blocks to wait for are left out of the answer.
    pub fn locate(&mut self, ask: &Locate) -> Result<Vec<Located>, Error> {
        self.settle()?;
        let body = ask.encode();
        let req = Request::Locate { generation: self.generation, body_len: body.len() as u32 };
        let len = self.conn.request_with_body(req, &body, "locate")?;
        let answer = decode_located(&read_body(&mut self.conn.s, len, LOCATE_ANSWER_MAX)?)?;
        if answer.iter().any(|a| !ask.blocks.contains(&a.block)) {
            return Err(bad("answer about a block that was not asked"));
        }
        Ok(answer)
    }

    /// We hold `block`, verified. Sent without waiting for the answer.
    pub fn have(&mut self, block: u64) -> Result<(), Error> {
        self.send_later(Request::Have { generation: self.generation, block })
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
        if self.owed >= OWED_MAX {
            self.settle()?;
        }
        std::io::Write::write_all(&mut self.conn.s, &req.encode()).map_err(Error::io("send tracker request"))?;
        self.owed += 1;
        Ok(())
    }

    /// Read the answers owed. A refusal of one of those requests (a block the relay no longer
    /// publishes, a generation replaced) changes nothing for this agent: it is counted
    /// ([`TrackerLink::refused_later`]), and the link stays; a broken or garbled answer fails it.
    pub fn settle(&mut self) -> Result<(), Error> {
        while self.owed > 0 {
            match self.conn.response("have, not-at or load") {
                Ok(len) => drop(read_body(&mut self.conn.s, len, 0)?),
                Err(Error::Refused { .. } | Error::Busy(_)) => self.refused_later += 1,
                Err(e) => return Err(e),
            }
            self.owed -= 1;
        }
        Ok(())
    }

    /// Other agents still missing blocks.
    pub fn needed(&mut self) -> Result<u32, Error> {
        self.settle()?;
        let len = self.conn.request(Request::Needed { generation: self.generation }, "needed")?;
        Ok(u32::from_be_bytes(read_body(&mut self.conn.s, len, 4)?.try_into().map_err(|_| bad("needed answer is not 4 bytes"))?))
    }
}

fn read_body<S: Read>(s: &mut S, len: u32, max: usize) -> Result<Vec<u8>, Error> {
    if len as usize > max {
        return Err(bad(&format!("answer of {len} bytes, expected at most {max}")));
    }
    let mut b = vec![0u8; len as usize];
    s.read_exact(&mut b).map_err(Error::io("read tracker answer"))?;
    Ok(b)
}
