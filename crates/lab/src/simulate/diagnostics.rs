//! What the simulator says about a run on stderr, at an environment variable's asking (`SIM_DEBUG`,
//! `SIM_TRACE`, `SIM_TRACE_EVERY`, `SIM_READS`: see the module above). None of it changes a run.

use super::fleet::{Agent, Host};
use super::network::Transfer;
use swarm::{Origin, Tracker};

/// `SIM_TRACE=<agent index>`: why that agent's downlink is not full, counted over its pull, and every
/// `every` steps one line (its next block to write, the window's blocks it is not reading with their
/// holders and whole holders, and its reads: source, the source's uploads, rate, round trip left).
#[derive(Default)]
pub(super) struct Trace {
    agent: usize,
    every: u64,
    pulling: u64,
    window_full: u64,
    unread: u64,
    idle: u64,
    /// Over the steps with blocks of the window not asked for, those blocks by where they are: held
    /// by nobody (claimed by another agent, or beyond the relay's share), only arriving somewhere,
    /// held whole somewhere (every holder full, or avoided).
    unread_by_where: [u64; 3],
    /// The same for the window's next block to write alone, when it is one of them.
    next_by_where: [u64; 3],
}

/// Where block `b` is, as [`Trace::unread_by_where`] counts it.
fn where_is(tracker: &Tracker, b: u64) -> usize {
    if tracker.holders(b) == 0 {
        0
    } else if tracker.whole_holders(b) == 0 {
        1
    } else {
        2
    }
}

/// What a diagnostic needs of the simulation's moment.
pub(super) struct Moment {
    pub t: f64,
    pub step: u64,
    pub bps: f64,
    pub block: f64,
    pub blocks: u64,
}

impl Trace {
    /// `SIM_TRACE=<agent index>` (one of `n`), its line every `SIM_TRACE_EVERY` steps (60 by default).
    pub fn from_env(n: usize) -> Option<Trace> {
        let every = std::env::var("SIM_TRACE_EVERY").ok().and_then(|v| v.parse::<u64>().ok()).filter(|e| *e > 0).unwrap_or(60);
        std::env::var("SIM_TRACE").ok().and_then(|v| v.parse::<usize>().ok()).filter(|w| *w < n).map(|w| Trace { agent: w, every, ..Trace::default() })
    }

    /// The traced agent's counts over its pull, at the end of the run.
    pub fn summary(&self) {
        eprintln!(
            "trace of agent {}: {} steps pulling, its downlink under 99 % in {}: its window full (every block held or in flight) in {}, blocks of it not asked for in {} (the tracker's answer Wait, or no slot), nothing in flight in {}",
            self.agent, self.pulling, self.window_full + self.unread, self.window_full, self.unread, self.idle
        );
        let [n0, n1, n2] = self.unread_by_where;
        let [h0, h1, h2] = self.next_by_where;
        eprintln!("the window's blocks not asked for, summed over those steps: held by nobody {n0}, only arriving {n1}, held whole {n2} (every holder full or avoided); its next block to write among them in {} steps: held by nobody {h0}, only arriving {h1}, held whole {h2}", h0 + h1 + h2);
    }

    /// One step of the traced agent: why its downlink is not full, and every `every` steps a line.
    pub fn step(&mut self, agents: &[Agent], transfers: &[Transfer], rates: &[f64], tracker: &Tracker, at: &Moment) {
        let g = &agents[self.agent];
        if !g.started || !g.alive || g.finished.is_some() {
            return;
        }
        self.pulling += 1;
        let down: f64 = transfers.iter().zip(rates).filter(|(x, _)| x.dst == g.host).map(|(_, r)| r).sum();
        if down >= 0.99 * at.bps {
            return;
        }
        let next = g.chooser.held_prefix();
        let unread: Vec<u64> = (next..(next + g.chooser.window_now()).min(at.blocks)).filter(|b| !g.chooser.holds(*b) && !g.chooser.in_flight(*b)).collect();
        if unread.is_empty() {
            self.window_full += 1;
        } else {
            self.unread += 1;
            for b in &unread {
                self.unread_by_where[where_is(tracker, *b)] += 1;
            }
            if unread.contains(&next) {
                self.next_by_where[where_is(tracker, next)] += 1;
            }
        }
        if !transfers.iter().any(|x| x.dst == g.host && !x.refusal) {
            self.idle += 1;
        }
        if at.step.is_multiple_of(self.every) {
            let uploads = |src: usize| transfers.iter().filter(|y| y.src == src && !y.refusal).count();
            let reads: Vec<String> = transfers
                .iter()
                .zip(rates)
                .filter(|(x, _)| x.dst == g.host)
                .map(|(x, r)| {
                    let from = if x.src == 0 { "relay".to_string() } else { format!("a{} ({} up)", x.src - 1, uploads(x.src)) };
                    let refused = if x.refusal { " refused" } else { "" };
                    format!("b{} from {from}{refused} at {:.0} %, wait {:.2} s, {:.0} % left", x.block, r / at.bps * 100.0, x.wait.max(0.0), x.left / at.block * 100.0)
                })
                .collect();
            let holders: Vec<(usize, usize)> = unread.iter().map(|b| (tracker.holders(*b), tracker.whole_holders(*b))).collect();
            eprintln!(
                "t={:.2} a{} downlink {:.0} %, next {next}, held {}, not read {unread:?} (holders, whole) {holders:?}; reads: {}",
                at.t,
                self.agent,
                down / at.bps * 100.0,
                g.chooser.held(),
                reads.join("; ")
            );
        }
    }
}

/// `SIM_DEBUG=1`: the relay's and all flows' rates and every agent's progress every 40 steps, why the
/// relay's link was not full, and at the end each agent's start, time and upload. `SIM_READS=1`:
/// every completed read.
pub(super) struct Debug {
    /// `SIM_DEBUG` is set.
    pub on: bool,
    /// `SIM_READS` is set.
    pub reads: bool,
    /// Steps with the relay's link under 99 % while full-rate agents pull: with relay reads under way
    /// (held back by their claimers' downlinks), with no block nobody holds in any window (nothing to
    /// claim), and with such blocks not claimed (the relay's flows shared out).
    relay_short: [u64; 3],
}

impl Debug {
    /// As the environment says.
    pub fn from_env() -> Debug {
        Debug { on: std::env::var_os("SIM_DEBUG").is_some(), reads: std::env::var_os("SIM_READS").is_some(), relay_short: [0; 3] }
    }

    /// Every 40 steps: the relay's flows and rate, all flows' rate, every agent's progress.
    pub fn rates(&self, at: &Moment, relay: f64, agents: &[Agent], transfers: &[Transfer], rates: &[f64]) {
        let (t, bps) = (at.t, at.bps);
        if !self.on || !at.step.is_multiple_of(40) {
            return;
        }
        let total: f64 = rates.iter().sum();
        let nrelay = transfers.iter().filter(|x| x.src == 0).count();
        let prefix: Vec<u64> = agents.iter().map(|g| g.chooser.held_prefix()).collect();
        let held: Vec<u64> = agents.iter().map(|g| g.chooser.held()).collect();
        eprintln!(
            "t={t:.2} relay flows {nrelay} at {:.0}% of B; all flows {} at {:.0}% of N·B; prefix {prefix:?} held {held:?}",
            relay / bps * 100.0,
            transfers.len(),
            total / (bps * agents.len() as f64) * 100.0
        );
    }

    /// A step with full-rate agents pulling and the relay's link under 99 %: why, counted.
    pub fn relay_short(&mut self, agents: &[Agent], transfers: &[Transfer], tracker: &Tracker, blocks: u64) {
        if !self.on {
            return;
        }
        let relay_reads = transfers.iter().any(|x| x.src == 0 && !x.refusal);
        let unclaimed = agents.iter().filter(|g| g.started && g.alive && g.finished.is_none()).any(|g| {
            let next = g.chooser.held_prefix();
            (next..(next + g.chooser.window_now()).min(blocks)).any(|b| tracker.holders(b) == 0 && !g.chooser.holds(b) && !g.chooser.in_flight(b))
        });
        self.relay_short[if relay_reads {
            0
        } else if !unclaimed {
            1
        } else {
            2
        }] += 1;
    }

    /// `SIM_READS`: a read that completed.
    pub fn read(&self, x: &Transfer, t: f64) {
        if !self.reads {
            return;
        }
        let from = match x.from {
            Origin::Relay => "relay".to_string(),
            Origin::Peer(p) => format!("a{p}"),
        };
        eprintln!("read b{} by a{} from {from}: {:.2}-{:.2} s", x.block, x.dst - 1, x.since, t);
    }

    /// At the end: why the relay's link was not full, and each agent's start, time and upload.
    pub fn summary(&self, pulling_steps: u64, agents: &[Agent], hosts: &[Host], snapshot: f64) {
        if !self.on {
            return;
        }
        let [reads, nothing, unclaimed] = self.relay_short;
        eprintln!("the relay's link under 99 % in {} of {pulling_steps} steps with full-rate agents pulling: relay reads under way (held back by their claimers' downlinks) {reads}, no block nobody holds in any window {nothing}, such blocks not claimed {unclaimed}", reads + nothing + unclaimed);
        for g in agents {
            let took = g.finished.map_or("unfinished".to_string(), |f| format!("{:.2} s", f - g.start));
            eprintln!("agent {}: started {:.2} s, took {took}, slow {}, alive {}, uplink carried {:.2} copies", g.id, g.start, g.slow, g.alive, hosts[g.host].sent / snapshot);
        }
    }
}
