//! The swarm's messages between an agent and the relay's tracker (see the crate's `tracker` for the
//! agent's link and the relay's `tracker` for the decisions): where to fetch blocks ([`Locate`] →
//! [`Located`]) and the addresses agents advertise.
//!
//! Everything read here is bounded: the number of blocks asked, of answers, of peers per answer, and
//! the length and alphabet of every address.

use super::cursor::Cursor;
use crate::Error;

/// Longest address an agent may advertise (`host:port`, a DNS name or an IP literal).
pub const ADVERTISE_MAX: usize = limits::ADVERTISE_ADDRESS_BYTES_MAX;
/// Most blocks asked about in one [`Locate`] (an agent's window at most).
pub const LOCATE_BLOCKS_MAX: usize = limits::WINDOW_BLOCKS_MAX as usize;
/// Most peers named for one block.
pub const PEERS_PER_BLOCK_MAX: usize = limits::LOCATE_PEERS_PER_BLOCK_MAX;
/// Most peers an agent says it reads from in one [`Locate`] (more are left out when encoding).
pub const OPEN_PEERS_MAX: usize = limits::LOCATE_OPEN_PEERS_MAX;
/// Encoded size bound of a [`Locate`].
pub const LOCATE_BODY_MAX: usize = 4 + 8 * LOCATE_BLOCKS_MAX + 8 + 2 + 4 * OPEN_PEERS_MAX;

/// "Where do I get these blocks?" — in the agent's order of preference (the relay reorders them: the
/// agent's own window first, then rarest first), with how many fetches of each kind the agent can start now and which peers it can
/// use: those it reads from with room on the connection, and how many more it may start reading from
/// (the relay names a holder serving its maximum of uploads only to an agent already reading from it).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Locate {
    /// Fetches from the relay the agent can start now: the relay grants at most this many claims.
    pub relay_slots: u8,
    /// Fetches from peers the agent can start now.
    pub peer_slots: u8,
    /// The blocks wanted.
    pub blocks: Vec<u64>,
    /// The end of the agent's own window: blocks from here on are asked on its serve cache's unused
    /// room (`swarm::Chooser::with_cache_room`), and the relay answers for them after the others,
    /// whatever their rarity (0: no such distinction).
    pub window_end: u64,
    /// Peers the agent may open a connection to, besides those it reads from.
    pub flows_free: u8,
    /// Peers it reads from now with room for another read on that connection.
    pub open: Vec<u32>,
}

/// A peer that holds a block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    /// Its number in the swarm.
    pub id: u32,
    /// Where it serves (`host:port`).
    pub addr: String,
}

/// Where one block is to be fetched from. Blocks to wait for are not answered at all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Where {
    /// From the relay: the claim is the asker's.
    Relay,
    /// From one of these peers.
    Peers(Vec<Peer>),
}

/// The answer for one block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Located {
    /// The block.
    pub block: u64,
    /// Where from.
    pub at: Where,
}

fn bad(what: &str) -> Error {
    Error::Protocol(format!("{WHAT}: {what}"))
}

const WHAT: &str = "tracker message";

/// Check an address a peer gave: bounded, printable, no spaces (it ends up in logs and reports).
pub fn check_addr(a: &[u8]) -> Result<String, Error> {
    if a.is_empty() || a.len() > ADVERTISE_MAX || !a.iter().all(|c| c.is_ascii_graphic()) {
        return Err(bad("address empty, too long or not printable"));
    }
    String::from_utf8(a.to_vec()).map_err(|_| bad("address not ASCII"))
}

impl Locate {
    /// `u8 relay_slots, u8 peer_slots, u16 n, n × u64 block, u64 window_end, u8 flows_free, u8 k,
    /// k × u32 open`.
    pub fn encode(&self) -> Vec<u8> {
        let n = self.blocks.len().min(LOCATE_BLOCKS_MAX);
        let k = self.open.len().min(OPEN_PEERS_MAX);
        let mut v = Vec::with_capacity(14 + 8 * n + 4 * k);
        v.push(self.relay_slots);
        v.push(self.peer_slots);
        v.extend_from_slice(&(n as u16).to_be_bytes());
        for b in &self.blocks[..n] {
            v.extend_from_slice(&b.to_be_bytes());
        }
        v.extend_from_slice(&self.window_end.to_be_bytes());
        v.push(self.flows_free);
        v.push(k as u8);
        for p in &self.open[..k] {
            v.extend_from_slice(&p.to_be_bytes());
        }
        v
    }
    /// Parse, bounding the counts.
    pub fn decode(b: &[u8]) -> Result<Locate, Error> {
        let mut c = Cursor::new(b, WHAT);
        let relay_slots = c.u8()?;
        let peer_slots = c.u8()?;
        let n = c.u16()? as usize;
        if n > LOCATE_BLOCKS_MAX {
            return Err(bad("too many blocks asked"));
        }
        let blocks = (0..n).map(|_| c.u64()).collect::<Result<_, _>>()?;
        let window_end = c.u64()?;
        let flows_free = c.u8()?;
        let k = c.u8()? as usize;
        if k > OPEN_PEERS_MAX {
            return Err(bad("too many open peers"));
        }
        let open = (0..k).map(|_| c.u32()).collect::<Result<_, _>>()?;
        c.end()?;
        Ok(Locate { relay_slots, peer_slots, blocks, window_end, flows_free, open })
    }
}

/// `u16 n`, then per answer `u64 block, u8 kind (0 relay, 1 peers)`, and for peers `u8 count` and per
/// peer `u32 id, u8 len, address`.
pub fn encode_located(answers: &[Located]) -> Vec<u8> {
    let mut v = Vec::new();
    let n = answers.len().min(LOCATE_BLOCKS_MAX);
    v.extend_from_slice(&(n as u16).to_be_bytes());
    for a in &answers[..n] {
        v.extend_from_slice(&a.block.to_be_bytes());
        match &a.at {
            Where::Relay => v.push(0),
            Where::Peers(ps) => {
                v.push(1);
                let ps: Vec<&Peer> = ps.iter().filter(|p| !p.addr.is_empty() && p.addr.len() <= ADVERTISE_MAX).take(PEERS_PER_BLOCK_MAX).collect();
                v.push(ps.len() as u8);
                for p in ps {
                    v.extend_from_slice(&p.id.to_be_bytes());
                    v.push(p.addr.len() as u8);
                    v.extend_from_slice(p.addr.as_bytes());
                }
            }
        }
    }
    v
}

/// Parse the relay's answers, bounding every count and length.
pub fn decode_located(b: &[u8]) -> Result<Vec<Located>, Error> {
    let mut c = Cursor::new(b, WHAT);
    let n = c.u16()? as usize;
    if n > LOCATE_BLOCKS_MAX {
        return Err(bad("too many answers"));
    }
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let block = c.u64()?;
        let at = match c.u8()? {
            0 => Where::Relay,
            1 => {
                let k = c.u8()? as usize;
                if k == 0 || k > PEERS_PER_BLOCK_MAX {
                    return Err(bad("peer count out of bounds"));
                }
                let mut ps = Vec::with_capacity(k);
                for _ in 0..k {
                    let id = c.u32()?;
                    let len = c.u8()? as usize;
                    ps.push(Peer { id, addr: check_addr(c.take(len)?)? });
                }
                Where::Peers(ps)
            }
            k => return Err(bad(&format!("unknown answer kind {k}"))),
        };
        out.push(Located { block, at });
    }
    c.end()?;
    Ok(out)
}

/// Largest locate answer: every block answered with the most peers, each with the longest address.
pub const LOCATE_ANSWER_MAX: usize = 2 + LOCATE_BLOCKS_MAX * (9 + 1 + PEERS_PER_BLOCK_MAX * (5 + ADVERTISE_MAX));

/// Fuzz entry point: decoding arbitrary tracker messages never panics, and what decodes re-encodes
/// to the same value.
#[cfg(any(test, fuzzing))]
#[doc(hidden)]
pub fn fuzz_one(data: &[u8]) {
    if let Ok(l) = Locate::decode(data) {
        assert_eq!(Locate::decode(&l.encode()).unwrap(), l);
    }
    if let Ok(a) = decode_located(data) {
        assert_eq!(decode_located(&encode_located(&a)).unwrap(), a);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locate_round_trips_and_is_bounded() {
        let l = Locate { relay_slots: 2, peer_slots: 1, blocks: vec![3, 1, 9], window_end: 2, flows_free: 1, open: vec![7] };
        assert_eq!(Locate::decode(&l.encode()).unwrap(), l);
        let mut big = vec![0, 0];
        big.extend_from_slice(&(LOCATE_BLOCKS_MAX as u16 + 1).to_be_bytes());
        assert!(Locate::decode(&big).is_err());
        assert!(Locate::decode(&l.encode()[..10]).is_err(), "truncated");
        let without_peers = Locate { open: Vec::new(), ..l.clone() }.encode();
        assert!(Locate::decode(&without_peers[..without_peers.len() - 2]).is_err(), "the peer fields are not optional");
        let mut many = Locate { open: Vec::new(), ..l }.encode();
        *many.last_mut().unwrap() = OPEN_PEERS_MAX as u8 + 1;
        many.extend(std::iter::repeat_n(0u8, 4 * (OPEN_PEERS_MAX + 1)));
        assert!(Locate::decode(&many).is_err(), "too many open peers");
    }

    #[test]
    fn answers_round_trip_and_addresses_are_checked() {
        let a = vec![Located { block: 4, at: Where::Relay }, Located { block: 5, at: Where::Peers(vec![Peer { id: 2, addr: "10.0.0.2:7401".into() }, Peer { id: 7, addr: "h:1".into() }]) }];
        assert_eq!(decode_located(&encode_located(&a)).unwrap(), a);
        let mut evil = encode_located(&[Located { block: 1, at: Where::Peers(vec![Peer { id: 1, addr: "a b".into() }]) }]);
        assert!(decode_located(&evil).is_err(), "a space in an address");
        evil.truncate(5);
        assert!(decode_located(&evil).is_err());
        assert!(decode_located(&[0, 1, 0, 0, 0, 0, 0, 0, 0, 1, 9]).is_err(), "unknown kind");
        assert!(decode_located(&[0, 1, 0, 0, 0, 0, 0, 0, 0, 1, 1, 0]).is_err(), "no peers");
    }

    #[test]
    fn fuzz_smoke() {
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        for len in 0..3000usize {
            let d: Vec<u8> = (0..len % 80)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    (x % 4) as u8 // small values: counts and kinds that decode
                })
                .collect();
            fuzz_one(&d);
        }
    }
}
