//! The relay as the swarm's tracker: one [`swarm::Tracker`] per generation with agents, plus what the
//! wire needs around it (each member's address, who reads over shared memory). No sockets here: the
//! data connections (`serve`) call in with what an agent said and `now`.

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::Instant;
use transport::wire::swarm::{Locate, Located, Peer, Where};

/// One generation's swarm.
#[derive(Default)]
struct Swarm {
    tracker: swarm::Tracker,
    addrs: HashMap<u32, String>,
    /// Members that read the relay over shared memory: their relay reads cost no link, so they take
    /// every block from the relay and never hold a claim that others wait on.
    local: HashSet<u32>,
    next_id: u32,
    /// Members ever, for the summary logged when the last one leaves.
    members_ever: u32,
    local_reads: u64,
}

/// Every generation's swarm.
#[derive(Default)]
pub(crate) struct Swarms {
    by_generation: Mutex<HashMap<u64, Swarm>>,
}

/// What an agent asked to register as.
pub(crate) struct Member {
    pub port: u16,
    pub serves: bool,
    pub local: bool,
    /// Its advertised address, checked; else the address the relay sees it at with `port`.
    pub advertise: Option<String>,
}

impl Swarms {
    fn with<T>(&self, generation: u64, f: impl FnOnce(&mut Swarm) -> T) -> Option<T> {
        let mut all = self.by_generation.lock().unwrap_or_else(|p| p.into_inner());
        all.get_mut(&generation).map(f)
    }

    /// A new member of `generation`'s swarm; returns its id.
    pub fn register(&self, generation: u64, seen_at: IpAddr, m: Member, published_blocks: u64) -> u32 {
        let mut all = self.by_generation.lock().unwrap_or_else(|p| p.into_inner());
        let s = all.entry(generation).or_default();
        let id = s.next_id;
        s.next_id = s.next_id.wrapping_add(1);
        s.members_ever += 1;
        s.tracker.published(published_blocks);
        s.tracker.join(id, m.serves);
        if m.serves {
            let addr = m.advertise.unwrap_or_else(|| std::net::SocketAddr::new(seen_at, m.port).to_string());
            s.addrs.insert(id, addr);
        }
        if m.local {
            s.local.insert(id);
        }
        id
    }

    /// Agents in `generation`'s swarm now.
    pub fn members(&self, generation: u64) -> usize {
        self.with(generation, |s| s.tracker.agents()).unwrap_or(0)
    }

    /// The member left (its tracker link closed): it serves nothing any more.
    pub fn leave(&self, generation: u64, id: u32) {
        let mut all = self.by_generation.lock().unwrap_or_else(|p| p.into_inner());
        let Some(s) = all.get_mut(&generation) else { return };
        s.tracker.leave(id);
        s.addrs.remove(&id);
        s.local.remove(&id);
        if s.tracker.agents() == 0 {
            tracing::info!(
                generation,
                agents = s.members_ever,
                relay_blocks_over_the_network = s.tracker.relay_grants(),
                relay_blocks_over_shm = s.local_reads,
                "swarm done: the relay's link carried the blocks counted here; agents carried the rest"
            );
            all.remove(&generation);
        }
    }

    /// Where member `id` should fetch the blocks it asks about.
    pub fn locate(&self, generation: u64, id: u32, ask: &Locate, published: u64, total: Option<u64>, now: Instant) -> Vec<Located> {
        self.with(generation, |s| {
            s.tracker.published(published);
            if let Some(t) = total {
                s.tracker.set_total(t);
            }
            let mut blocks: Vec<u64> = ask.blocks.iter().copied().filter(|b| *b < published).collect();
            blocks.sort_unstable();
            blocks.dedup();
            // The asker's own window before its serve cache's room (its replica needs those first, and
            // late joiners find them dropped from the caches if they leave them for last); within each,
            // held whole first, then rarest first, equals in an order of the asker's own.
            blocks.sort_by_key(|b| (*b >= ask.window_end, s.tracker.precedence(id, *b)));
            let mut relay_left = usize::from(ask.relay_slots);
            let mut peers_left = usize::from(ask.peer_slots) + limits::LOCATE_SPARE_PEERS;
            // What the asker fetches from now; the swarm's tracker updates it answer by answer as the
            // asker's chooser will (a holder it opens a connection to takes no further new ones).
            let mut open = ask.open.clone();
            open.sort_unstable();
            open.dedup();
            let mut fetching = swarm::Fetching { may_claim: false, open, flows_free: usize::from(ask.flows_free) };
            let local = s.local.contains(&id);
            let mut out = Vec::new();
            for b in blocks {
                if relay_left == 0 && (peers_left == 0 || local) {
                    break;
                }
                if local {
                    out.push(Located { block: b, at: Where::Relay });
                    relay_left -= 1;
                    s.local_reads += 1;
                    continue;
                }
                fetching.may_claim = relay_left > 0;
                if peers_left == 0 {
                    fetching.flows_free = 0;
                    fetching.open.clear();
                }
                match s.tracker.locate(id, b, &mut fetching, now) {
                    swarm::Answer::Relay => {
                        out.push(Located { block: b, at: Where::Relay });
                        relay_left -= 1;
                    }
                    swarm::Answer::Peers(ids) if peers_left > 0 => {
                        let peers: Vec<Peer> = ids.iter().filter_map(|p| s.addrs.get(p).map(|a| Peer { id: *p, addr: a.clone() })).collect();
                        if !peers.is_empty() {
                            out.push(Located { block: b, at: Where::Peers(peers) });
                            peers_left -= 1;
                        }
                    }
                    swarm::Answer::Peers(_) | swarm::Answer::Wait => {}
                }
            }
            // Every question and answer, for working out afterwards why an asker was sent nowhere
            // (docs/design/flat-fanout.md, "Where the time goes"); the relay ("R") or the holders named.
            if tracing::enabled!(tracing::Level::DEBUG) {
                let answer: Vec<String> = out.iter().map(|l| match &l.at { Where::Relay => format!("{}:R", l.block), Where::Peers(p) => format!("{}:{:?}", l.block, p.iter().map(|x| x.id).collect::<Vec<_>>()) }).collect();
                tracing::debug!(id, open = ?ask.open, flows_free = ask.flows_free, peer_slots = ask.peer_slots, relay_slots = ask.relay_slots, asked = ?ask.blocks, answer = ?answer, "locate answered");
            }
            out
        })
        .unwrap_or_default()
    }

    /// Member `id` holds `block`.
    pub fn have(&self, generation: u64, id: u32, block: u64) {
        tracing::debug!(id, block, "member holds a block");
        self.with(generation, |s| s.tracker.have(id, block, std::time::Instant::now()));
    }

    /// Member `id` is receiving `block` and serves it while it arrives.
    pub fn arriving(&self, generation: u64, id: u32, block: u64) {
        tracing::debug!(id, block, "member receives a block");
        self.with(generation, |s| s.tracker.arriving(id, block, std::time::Instant::now()));
    }

    /// Member `id` serves `uploads` uploads now; `arrived` askers took a slot since its last report.
    pub fn load(&self, generation: u64, id: u32, uploads: u32, arrived: u32) {
        tracing::debug!(id, uploads, arrived, "member's upload load");
        self.with(generation, |s| s.tracker.load(id, uploads, arrived, std::time::Instant::now()));
    }

    /// Member `by` says `peer` does not hold `block` (`peer` may be `by` itself: see
    /// [`swarm::Tracker::not_at`]).
    pub fn not_at(&self, generation: u64, by: u32, peer: u32, block: u64) {
        self.with(generation, |s| {
            if block == transport::wire::ALL_BLOCKS {
                tracing::warn!(generation, agent = peer, reported_by = by, "an agent reported a corrupt block from this agent; no longer naming it as a source");
                s.tracker.forget(peer);
            } else {
                s.tracker.not_at(by, peer, block);
            }
        });
    }

    /// Members other than `id` still missing blocks.
    pub fn needing(&self, generation: u64, id: u32, total: Option<u64>) -> usize {
        self.with(generation, |s| {
            if let Some(t) = total {
                s.tracker.set_total(t);
            }
            s.tracker.needing(id)
        })
        .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(port: u16, local: bool) -> Member {
        Member { port, serves: true, local, advertise: None }
    }

    #[test]
    fn members_are_named_by_the_address_the_relay_sees_and_leave_with_their_link() {
        let sw = Swarms::default();
        let ip: IpAddr = "10.0.0.2".parse().unwrap();
        let a = sw.register(1, ip, member(7401, false), 4);
        let b = sw.register(1, "10.0.0.3".parse().unwrap(), Member { advertise: Some("peer.example:9".into()), ..member(1, false) }, 4);
        let now = Instant::now();
        let ask = |slots| Locate { relay_slots: slots, peer_slots: 1, blocks: vec![0, 1, 2, 3], flows_free: 2, ..Locate::default() };
        let got = sw.locate(1, a, &ask(1), 4, Some(4), now);
        assert_eq!(got, vec![Located { block: 0, at: Where::Relay }], "one relay slot, one claim; the rest is claimed by nobody yet but a is out of slots");
        sw.have(1, a, 0);
        let got = sw.locate(1, b, &ask(1), 4, Some(4), now);
        assert_eq!(got[0], Located { block: 0, at: Where::Peers(vec![Peer { id: a, addr: "10.0.0.2:7401".into() }]) }, "a block held whole first");
        assert!(got[1].at == Where::Relay && (1..4).contains(&got[1].block), "then the rarest (among equals in the asker's own order): {got:?}");
        // A block only arriving somewhere comes after those held whole, however rare.
        let (x, y, z) = (sw.register(2, ip, member(1, false), 3), sw.register(2, ip, member(2, false), 3), sw.register(2, ip, member(3, false), 3));
        sw.have(2, x, 0);
        sw.have(2, y, 0);
        sw.have(2, x, 1);
        sw.arriving(2, y, 2);
        let got = sw.locate(2, z, &Locate { relay_slots: 0, peer_slots: 3, blocks: vec![2, 1, 0], flows_free: 2, ..Locate::default() }, 3, Some(3), now);
        assert_eq!(got.iter().map(|l| l.block).collect::<Vec<_>>(), vec![1, 0, 2], "{got:?}");
        // Blocks past the asker's own window (asked on its serve cache's room) come after the
        // others, whatever their rarity: block 0 before block 1, which more agents hold whole.
        let got = sw.locate(2, z, &Locate { relay_slots: 0, peer_slots: 3, blocks: vec![2, 1, 0], window_end: 0, flows_free: 2, ..Locate::default() }, 3, Some(3), now);
        assert_eq!(got.iter().map(|l| l.block).collect::<Vec<_>>(), vec![1, 0, 2], "window end 0: no room asked on, rarity alone: {got:?}");
        let got = sw.locate(2, z, &Locate { relay_slots: 0, peer_slots: 3, blocks: vec![2, 1, 0], window_end: 1, flows_free: 2, ..Locate::default() }, 3, Some(3), now);
        assert_eq!(got.iter().map(|l| l.block).collect::<Vec<_>>(), vec![0, 1, 2], "block 0 in the window, 1 and 2 on the room: {got:?}");
        assert_eq!(sw.needing(1, a, Some(4)), 1);
        sw.leave(1, b);
        assert_eq!(sw.needing(1, a, Some(4)), 0);
        sw.leave(1, a);
        assert!(sw.locate(1, a, &ask(1), 4, Some(4), now).is_empty(), "the swarm is gone with its last member");
    }

    #[test]
    fn a_member_on_the_relays_host_reads_everything_from_the_relay_without_claims() {
        let sw = Swarms::default();
        let ip: IpAddr = "127.0.0.1".parse().unwrap();
        let local = sw.register(3, ip, member(1, true), 8);
        let remote = sw.register(3, "10.0.0.9".parse().unwrap(), member(2, false), 8);
        let now = Instant::now();
        let got = sw.locate(3, local, &Locate { relay_slots: 4, peer_slots: 2, blocks: (0..8).collect(), ..Locate::default() }, 8, None, now);
        assert_eq!(got.len(), 4);
        assert!(got.iter().all(|l| l.at == Where::Relay));
        let got = sw.locate(3, remote, &Locate { relay_slots: 1, peer_slots: 0, blocks: vec![0], ..Locate::default() }, 8, None, now);
        assert_eq!(got, vec![Located { block: 0, at: Where::Relay }], "the local member's reads claimed nothing");
    }

    #[test]
    fn unpublished_blocks_are_not_answered() {
        let sw = Swarms::default();
        let a = sw.register(1, "10.0.0.2".parse().unwrap(), member(1, false), 0);
        assert!(sw.locate(1, a, &Locate { relay_slots: 4, peer_slots: 2, blocks: vec![0, 1], ..Locate::default() }, 0, None, Instant::now()).is_empty());
    }

    #[test]
    fn a_holder_serving_its_maximum_is_named_only_to_an_agent_reading_from_it() {
        let sw = Swarms::default();
        let ip = |i: u8| IpAddr::from([10, 0, 0, i]);
        let holder = sw.register(1, ip(1), member(1, false), 2);
        let other = sw.register(1, ip(2), member(2, false), 2);
        let asker = sw.register(1, ip(3), member(3, false), 2);
        let now = Instant::now();
        sw.have(1, holder, 0);
        sw.have(1, other, 1);
        sw.load(1, holder, swarm::UPLOADS_MAX as u32, 0);
        let ask = |flows_free, open: Vec<u32>| Locate { relay_slots: 0, peer_slots: 2, blocks: vec![0, 1], flows_free, open, ..Locate::default() };
        let got = sw.locate(1, asker, &ask(2, Vec::new()), 2, Some(2), now);
        assert_eq!(got.iter().map(|l| l.block).collect::<Vec<_>>(), vec![1], "block 0's only holder is full: not named to a new reader: {got:?}");
        let got = sw.locate(1, asker, &ask(0, vec![holder]), 2, Some(2), now);
        assert_eq!(got.iter().map(|l| l.block).collect::<Vec<_>>(), vec![0], "named to an agent reading from it, which may open no other: {got:?}");
        sw.load(1, holder, 0, 0);
        sw.have(1, holder, 1);
        let got = sw.locate(1, asker, &ask(1, Vec::new()), 2, Some(2), now);
        let named: Vec<u32> = got.iter().flat_map(|l| if let Where::Peers(p) = &l.at { p.iter().map(|p| p.id).collect() } else { Vec::new() }).collect();
        assert_eq!(got.len(), 2, "{got:?}");
        assert_eq!(named.iter().filter(|p| **p != holder).count(), 0, "one flow free: after the first holder named, the same one for the next block: {got:?}");
    }
}
