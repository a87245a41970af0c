//! The event loop: one fleet run in small time steps. Each step, agents join or die, loads reach the
//! tracker, each agent asks about the blocks it wants and starts reads, the links share their rates,
//! and bytes move: reads end, blocks are handed on, refusals come back, reads from a holder that lost
//! its block are cut off.

use super::args::{Scale, SimulateArgs};
use super::diagnostics::{Debug, Moment, Trace};
use super::fleet::{hosts_and_agents, Agent, Host, Rng};
use super::network::{end_read, full, max_min_rates, open, Flows, Rates, Transfer};
use super::report::{Counts, Row};
use anyhow::Result;
use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};
use swarm::{AgentId, Answer, Origin, Tracker};

/// What an agent's load report carries: its uploads, the times they changed, its arrivals.
type Load = (usize, u64, u64);

/// One fleet's run under way.
pub(super) struct Sim<'a> {
    a: &'a SimulateArgs,
    s: Scale,
    n: usize,
    rng: Rng,
    /// Simulated time 0, for the product's types that take an `Instant`.
    t0: Instant,
    hosts: Vec<Host>,
    agents: Vec<Agent>,
    tracker: Tracker,
    transfers: Vec<Transfer>,
    /// Reads in flight per (source host, destination host) connection.
    flows: Flows,
    /// Which links held a queue in the last step: those that were a flow's bottleneck (TCP fills the
    /// queue there; a link that is not any flow's bottleneck passes packets through).
    busy_up: Vec<bool>,
    busy_down: Vec<bool>,
    /// Every agent's load, per step, until it reaches the tracker.
    load_history: VecDeque<Vec<Load>>,
    load_lag_steps: usize,
    /// Per agent: the changes and the arrivals its last report covered.
    load_told: Vec<(u64, u64)>,
    t: f64,
    step: u64,
    /// Transfers asked for so far (each one's `seq`).
    seq: u64,
    counts: Counts,
    debug: Debug,
    traced: Option<Trace>,
}

impl<'a> Sim<'a> {
    /// Fleet `n` of `a`'s scenario, before its first step.
    pub fn new(a: &'a SimulateArgs, n: usize) -> Result<Sim<'a>> {
        let s = Scale::of(a)?;
        let mut rng = Rng(a.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        let t0 = Instant::now();
        let (hosts, agents) = hosts_and_agents(a, &s, n, &mut rng);
        let mut tracker = Tracker::new(s.blocks).with_uploads_max(a.uploads);
        // The relay holds the whole snapshot before the first agent joins (the bench's relays too: they
        // are warm when the replicas join), so the tracker knows its size: agents that hold every block
        // are complete, no longer share the relay's flows and no longer count as fast agents pulling.
        // (Until issue 33's ninth pass the simulator never said so, and every agent stayed "pulling".)
        if !a.size_unknown {
            tracker.set_total(s.blocks);
        }
        let load_lag_steps = (s.queue / s.dt).ceil() as usize;
        Ok(Sim {
            a,
            n,
            rng,
            t0,
            busy_up: vec![false; hosts.len()],
            busy_down: vec![false; hosts.len()],
            hosts,
            agents,
            tracker,
            transfers: Vec::new(),
            flows: HashMap::new(),
            load_history: VecDeque::new(),
            load_lag_steps,
            load_told: vec![(0, 0); n],
            t: 0.0,
            step: 0,
            seq: 0,
            counts: Counts { refusals: 0, pulling_steps: 0, relay_full_steps: 0 },
            debug: Debug::from_env(),
            traced: Trace::from_env(n),
            s,
        })
    }

    /// Step until every surviving agent holds the snapshot (or the time limit), then sum the run up.
    pub fn run(mut self) -> Row {
        while self.agents.iter().any(|g| g.alive && g.finished.is_none()) {
            if self.t > self.s.limit {
                break;
            }
            self.step();
        }
        if let Some(tr) = &self.traced {
            tr.summary();
        }
        self.debug.summary(self.counts.pulling_steps, &self.agents, &self.hosts, self.s.snapshot);
        Row::of(self.a, &self.s, self.n, &self.agents, &self.hosts, &self.counts)
    }

    /// The product's clock at simulated time `t`.
    fn at(&self, t: f64) -> Instant {
        self.t0 + Duration::from_secs_f64(t)
    }

    /// One time step.
    fn step(&mut self) {
        self.joins_and_failures();
        self.end_transfers_of_the_dead();
        if !self.a.oracle_load {
            self.report_loads();
        }
        for i in self.asking_order() {
            self.ask(i);
        }
        let rates = self.share_links();
        let moment = Moment { t: self.t, step: self.step, bps: self.s.bps, block: self.s.block, blocks: self.s.blocks };
        self.count_relay_use(&rates, &moment);
        if let Some(tr) = self.traced.as_mut() {
            tr.step(&self.agents, &self.transfers, &rates, &self.tracker, &moment);
        }
        self.t += self.s.dt;
        self.step += 1;
        self.move_bytes(rates);
    }

    /// Agents whose start has come join; those whose failure has come die.
    fn joins_and_failures(&mut self) {
        let t = self.t;
        for g in self.agents.iter_mut() {
            if !g.started && g.alive && t >= g.start {
                g.started = true;
                self.tracker.join(g.id, true);
            }
            if g.alive && g.fail_at.is_some_and(|f| t >= f) && g.finished.is_none() {
                g.alive = false;
                self.tracker.leave(g.id);
            }
        }
    }

    /// Transfers touching a dead agent end: its downloads are lost; whoever fetched from it learns it
    /// is gone (the tracker already forgot it) and goes elsewhere.
    fn end_transfers_of_the_dead(&mut self) {
        let Sim { transfers, agents, flows, tracker, .. } = self;
        let mut gone: Vec<(usize, AgentId)> = Vec::new();
        transfers.retain(|x| {
            let dead_src = x.src > 0 && !agents[x.src - 1].alive;
            if !dead_src && agents[x.dst - 1].alive {
                return true;
            }
            if !x.refusal {
                end_read(flows, agents, x.from, x.src, x.dst);
            }
            if let Origin::Peer(p) = x.from {
                if dead_src && agents[x.dst - 1].alive {
                    gone.push((x.dst - 1, p));
                }
            }
            // An arrival that will not complete is taken back, as a real agent does.
            if x.announced && agents[x.dst - 1].alive {
                let me = agents[x.dst - 1].id;
                tracker.not_at(me, me, x.block);
            }
            false
        });
        gone.dedup();
        for (g, p) in gone {
            agents[g].chooser.peer_gone(p);
        }
    }

    /// Each agent's upload load reaches the tracker a queue's delay late (the report crosses the
    /// agent's busy uplink).
    fn report_loads(&mut self) {
        self.load_history.push_back(self.agents.iter().map(|g| (g.uploads, g.load_changes, g.arrivals)).collect());
        if self.load_history.len() <= self.load_lag_steps {
            return;
        }
        let now = self.at(self.t);
        let seen = self.load_history.pop_front().unwrap_or_default();
        for (g, ((u, changes, arrivals), told)) in self.agents.iter().zip(seen.iter().zip(self.load_told.iter_mut())) {
            if g.alive && *changes != told.0 {
                self.tracker.load(g.id, *u as u32, (arrivals - told.1) as u32, now);
                *told = (*changes, *arrivals);
            }
        }
    }

    /// The order agents ask in this step, a different one every step: no agent is first to the relay
    /// or to a holder by its number (real agents' requests interleave the same way; a fixed order let
    /// four agents starve the other four).
    fn asking_order(&mut self) -> Vec<usize> {
        let mut order: Vec<usize> = (0..self.agents.len()).collect();
        for k in (1..order.len()).rev() {
            order.swap(k, (self.rng.next() * (k + 1) as f64) as usize % (k + 1));
        }
        order
    }

    /// Agent `i`, if pulling: its overdue reads moved, its dead connections cut, and the tracker asked
    /// about the blocks it wants while it has free slots.
    fn ask(&mut self, i: usize) {
        let g = &self.agents[i];
        if !g.started || !g.alive || g.finished.is_some() {
            return;
        }
        self.move_overdue_reads(i);
        self.cut_moved_connections(i);
        let me = self.agents[i].id;
        let tracker = &self.tracker;
        let wanted = self.agents[i].chooser.wanted(|b| tracker.precedence(me, b));
        for b in wanted {
            if self.request(i, b) && !self.agents[i].chooser.has_free_slot() {
                break;
            }
        }
    }

    /// Reads that take far too long move elsewhere (they run on, holding their flow), as real agents'
    /// do.
    fn move_overdue_reads(&mut self, i: usize) {
        let now = self.at(self.t);
        let chooser = &mut self.agents[i].chooser;
        for b in chooser.overdue(now) {
            chooser.move_away(b, now);
        }
    }

    /// Connections whose every read was moved and whose blocks are held since are cut, as real agents
    /// cut them: their reads end at once, giving the holder's slot back.
    fn cut_moved_connections(&mut self, i: usize) {
        let host = self.agents[i].host;
        for p in self.agents[i].chooser.to_cut() {
            self.agents[i].chooser.cutting(p);
            let mut k = 0;
            while k < self.transfers.len() {
                let x = &self.transfers[k];
                if x.dst != host || x.from != Origin::Peer(p) {
                    k += 1;
                    continue;
                }
                let x = self.transfers.swap_remove(k);
                if !x.refusal {
                    end_read(&mut self.flows, &mut self.agents, x.from, x.src, x.dst);
                }
                self.agents[i].chooser.moved_ended(x.block, p);
            }
        }
    }

    /// Agent `i` asks the tracker about block `b` and, if it chose a source, asks it: a transfer
    /// started (a read, or a full holder's refusal on its way back). Whether one was.
    fn request(&mut self, i: usize, b: u64) -> bool {
        let Some(answer) = self.locate(i, b) else { return false };
        let now = self.at(self.t);
        let Some(from) = self.agents[i].chooser.choose_at(b, &answer, now) else { return false };
        // As real agents do: a holder the tracker's (late) load reports put first may be full by the
        // time the request arrives, and refuses it — a round trip that moves nothing, after which the
        // asker passes over that holder for a while.
        match from {
            Origin::Peer(p) if full(&self.agents, &self.flows, p, self.agents[i].host, self.a.uploads) => self.refuse(i, b, p),
            _ => self.start_read(i, b, from),
        }
        true
    }

    /// The tracker's answer for agent `i` about block `b`, asked with the chooser's state of the moment
    /// (a real agent asks about its window at once, and the relay mirrors what its chooser will do with
    /// each answer). With `--oracle-load` askers see every holder's load and never ask a full one:
    /// `None` when every holder is.
    fn locate(&mut self, i: usize, b: u64) -> Option<Answer> {
        let now = self.at(self.t);
        let g = &mut self.agents[i];
        let answer = self.tracker.locate(g.id, b, &mut g.chooser.fetching(), now);
        let host = g.host;
        match answer {
            Answer::Peers(ps) if self.a.oracle_load => {
                let free: Vec<AgentId> = ps.into_iter().filter(|p| !full(&self.agents, &self.flows, *p, host, self.a.uploads)).collect();
                (!free.is_empty()).then_some(Answer::Peers(free))
            }
            other => Some(other),
        }
    }

    /// Full holder `p` refuses agent `i`'s request for block `b`: the refusal comes back after a round
    /// trip through every busy queue on the way.
    fn refuse(&mut self, i: usize, b: u64, p: AgentId) {
        let dst = self.agents[i].host;
        let src = self.agents[p as usize].host;
        let queues = [self.busy_up[dst], self.busy_down[src], self.busy_up[src], self.busy_down[dst]].iter().filter(|b| **b).count();
        self.seq += 1;
        self.counts.refusals += 1;
        let wait = self.s.rtt + self.s.queue * queues as f64;
        self.transfers.push(Transfer { src, from: Origin::Peer(p), dst, block: b, left: 0.0, since: self.t, wait, seq: self.seq, refusal: true, announced: false, upstream: None });
    }

    /// Agent `i` reads block `b` from `from`, on a connection opened for it (taking one of a peer's
    /// upload slots) or pipelined on one already open.
    fn start_read(&mut self, i: usize, b: u64, from: Origin) {
        let dst = self.agents[i].host;
        let src = match from {
            Origin::Relay => 0,
            Origin::Peer(p) => self.agents[p as usize].host,
        };
        // The request waits behind the queues on its way (the asker's uplink, the source's downlink).
        // On a connection that is idle, the answer's first bytes also wait behind the source's uplink
        // and the asker's downlink queues; on one with reads in flight, what is queued there is this
        // connection's own earlier answer, and this one follows it without a gap — which is what
        // pipelining buys.
        let idle = !self.flows.contains_key(&(src, dst));
        let mut queues = [self.busy_up[dst], self.busy_down[src]].iter().filter(|b| **b).count();
        if idle {
            queues += [self.busy_up[src], self.busy_down[dst]].iter().filter(|b| **b).count();
        }
        let wait = self.s.rtt + self.s.queue * queues as f64;
        if open(&mut self.flows, (src, dst)) {
            if let Origin::Peer(p) = from {
                let holder = &mut self.agents[p as usize];
                holder.uploads += 1;
                holder.load_changes += 1;
                holder.arrivals += 1;
            }
        }
        self.seq += 1;
        self.transfers.push(Transfer { src, from, dst, block: b, left: self.s.block, since: self.t, wait, seq: self.seq, refusal: false, announced: false, upstream: None });
    }

    /// Links shared max-min fairly among their transfers (what TCP approximates): each transfer's
    /// rate, and which links hold a queue for the next step.
    fn share_links(&mut self) -> Vec<f64> {
        let Rates { rate, up_queue, down_queue } = max_min_rates(&self.hosts, &self.transfers);
        self.busy_up = up_queue;
        self.busy_down = down_queue;
        rate
    }

    /// The relay's uplink this step: counted full or not while full-rate agents pull (and, with
    /// `SIM_DEBUG`, why not).
    fn count_relay_use(&mut self, rates: &[f64], moment: &Moment) {
        let bps = self.s.bps;
        let relay: f64 = self.transfers.iter().zip(rates).filter(|(x, _)| x.src == 0).map(|(_, r)| r).sum();
        self.debug.rates(moment, relay, &self.agents, &self.transfers, rates);
        if self.agents.iter().any(|g| g.started && g.alive && g.finished.is_none() && !g.slow) {
            self.counts.pulling_steps += 1;
            self.counts.relay_full_steps += u64::from(relay >= 0.99 * bps);
            if relay < 0.99 * bps {
                self.debug.relay_short(&self.agents, &self.transfers, &self.tracker, self.s.blocks);
            }
        }
    }

    /// Bytes of each block each host has received so far, for blocks still arriving: a holder serves
    /// such a block while it arrives, and its reader can be no further along than it. A block read
    /// twice at once (a read moved elsewhere and its replacement) is served from the first arrival
    /// only, as a real agent's. Keyed by (host, block): the arrival's `seq` and its bytes.
    fn arrivals(&self) -> HashMap<(usize, u64), (u64, f64)> {
        let block = self.s.block;
        let mut arrived: HashMap<(usize, u64), (u64, f64)> = HashMap::new();
        for x in self.transfers.iter().filter(|x| !x.refusal) {
            let e = arrived.entry((x.dst, x.block)).or_insert((x.seq, block - x.left));
            if x.seq < e.0 {
                *e = (x.seq, block - x.left);
            }
        }
        arrived
    }

    /// One step's bytes moved at `rates` (one per transfer): refusals come back, reads advance, end
    /// or are cut off.
    fn move_bytes(&mut self, mut rates: Vec<f64>) {
        let arrived = self.arrivals();
        let mut cut_off: Vec<CutOff> = Vec::new();
        let mut i = 0;
        while i < self.transfers.len() {
            let x = &mut self.transfers[i];
            x.wait -= self.s.dt;
            if x.refusal {
                if x.wait > 0.0 {
                    i += 1;
                    continue;
                }
                let x = self.transfers.swap_remove(i);
                rates.swap_remove(i);
                self.refusal_came_back(&x);
                continue;
            }
            match self.advance(i, rates[i], &arrived) {
                Advance::Moving => i += 1,
                Advance::CutOff(p) => {
                    let x = self.transfers.swap_remove(i);
                    rates.swap_remove(i);
                    end_read(&mut self.flows, &mut self.agents, x.from, x.src, x.dst);
                    cut_off.push(CutOff { agent: x.dst - 1, holder: p, block: x.block, announced: x.announced });
                }
                Advance::Arrived => {
                    let x = self.transfers.swap_remove(i);
                    rates.swap_remove(i);
                    self.read_ended(&x);
                }
            }
        }
        for c in cut_off {
            self.take_back(c);
        }
    }

    /// A holder's refusal reached its asker: unless the read had been moved elsewhere, the block is
    /// asked for again, and the holder passed over for a while.
    fn refusal_came_back(&mut self, x: &Transfer) {
        let now = self.at(self.t);
        let g = &mut self.agents[x.dst - 1];
        if let Origin::Peer(p) = x.from {
            if g.chooser.moved_ended(x.block, p) {
                return;
            }
        }
        if let (Some(Origin::Peer(p)), true) = (g.chooser.failed(x.block, false), g.alive) {
            g.chooser.refused(p, now);
        }
    }

    /// Transfer `i`'s bytes of this step at `rate`: from a holder still receiving the block, as far
    /// as it got at most, and cut off if its own arrival ended without the block. Its first bytes
    /// tell the tracker the block is arriving.
    fn advance(&mut self, i: usize, rate: f64, arrived: &HashMap<(usize, u64), (u64, f64)>) -> Advance {
        let (dt, block) = (self.s.dt, self.s.block);
        let now = self.at(self.t);
        let x = &mut self.transfers[i];
        let mut moved = (rate * dt).min(x.left);
        if let Origin::Peer(p) = x.from {
            if !self.agents[p as usize].chooser.holds(x.block) {
                match arrived.get(&(x.src, x.block)) {
                    Some((from, ahead)) if x.upstream.unwrap_or(*from) == *from => {
                        x.upstream = Some(*from);
                        moved = moved.min((ahead - (block - x.left)).max(0.0));
                    }
                    _ => return Advance::CutOff(p),
                }
            }
        }
        if moved > 0.0 && !x.announced && self.agents[x.dst - 1].alive {
            x.announced = true;
            self.tracker.arriving(self.agents[x.dst - 1].id, x.block, now);
        }
        x.left -= moved;
        self.hosts[x.src].sent += moved;
        if x.left > 0.5 {
            Advance::Moving
        } else {
            Advance::Arrived
        }
    }

    /// Read `x` moved its last byte: its connection given back, the block held (unless a moved read
    /// or its replacement gave it first), the tracker told, and blocks handed on in order.
    fn read_ended(&mut self, x: &Transfer) {
        end_read(&mut self.flows, &mut self.agents, x.from, x.src, x.dst);
        self.debug.read(x, self.t);
        let (t, block) = (self.t, self.s.block);
        let g = &mut self.agents[x.dst - 1];
        let moved = match x.from {
            Origin::Peer(p) => g.chooser.moved_ended(x.block, p).then_some(p),
            Origin::Relay => None,
        };
        match moved {
            // Whichever of a moved read and its replacement ends first gives the block.
            _ if g.chooser.holds(x.block) => {
                if moved.is_none() {
                    g.chooser.failed(x.block, false);
                }
                return;
            }
            Some(p) => g.chooser.done_moved(x.block, p, block as u64, t - x.since),
            None => g.chooser.done(x.block, block as u64, t - x.since),
        }
        let now = self.at(t);
        self.tracker.have(self.agents[x.dst - 1].id, x.block, now);
        self.hand_on(x.dst - 1);
    }

    /// Agent `i`'s replica takes blocks in order as soon as the next one is there; those handed on go
    /// to the serve cache, which drops what is beyond its bound as the agent's choice says (a read
    /// already on the wire ends from the buffer it holds, as in a real agent) and tells the tracker.
    fn hand_on(&mut self, i: usize) {
        let g = &mut self.agents[i];
        let fed = g.chooser.held_prefix();
        g.chooser.written(fed);
        if let Some(c) = g.cache.as_mut() {
            for v in c.fed(fed, self.tracker.needing(g.id) > 0) {
                self.tracker.not_at(g.id, g.id, v);
            }
        }
        if g.chooser.complete() {
            g.finished = Some(self.t);
        }
    }

    /// A read cut off (its holder's own arrival ended without the block): asked for again unless it
    /// had been moved; the reader says the holder lacks it (the holder's own arrival ended: the holder
    /// said so itself when it did), and its own arrival, fed by that one, failed.
    fn take_back(&mut self, c: CutOff) {
        let g = &mut self.agents[c.agent];
        if !g.chooser.moved_ended(c.block, c.holder) {
            g.chooser.failed(c.block, false);
        }
        let me = g.id;
        self.tracker.not_at(me, c.holder, c.block);
        if c.announced {
            self.tracker.not_at(me, me, c.block);
        }
    }
}

/// What a read did in a step.
enum Advance {
    /// It moves on.
    Moving,
    /// Its last byte arrived.
    Arrived,
    /// Its holder (this peer) is still receiving the block and that arrival ended: it ends too.
    CutOff(AgentId),
}

/// A read cut off in a step, taken back after the step's bytes moved.
struct CutOff {
    /// The reading agent.
    agent: usize,
    /// The holder it read from.
    holder: AgentId,
    block: u64,
    /// It had told the tracker the block was arriving.
    announced: bool,
}
