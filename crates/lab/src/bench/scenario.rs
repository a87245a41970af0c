//! The scenarios: what data, which links, how many replicas, which modes, and how they join.

use crate::bench::BenchArgs;
use anyhow::{bail, Result};
use serde::{Deserialize, Serialize};

/// Every scenario, in the order `all` runs them.
pub const ALL: &[&str] = &["original", "fanout", "staggered", "small-keys", "mixed", "under-load", "slow-host", "agent-killed", "late-joiner", "zero-fork"];

/// The master's data.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Dataset {
    /// `count` values of `size` bytes (the original experiment: 256 × 3.66 MB).
    BigValues {
        /// Values.
        count: usize,
        /// Bytes each.
        size: usize,
    },
    /// `count` string values of `size` bytes.
    SmallValues {
        /// Values.
        count: usize,
        /// Bytes each.
        size: usize,
    },
    /// `keys` keys of what caches hold (`fixtures::cache_data`: JSON profiles, sessions, text,
    /// counters, lists of ids), from a fixed seed: the data compression is measured on.
    Realistic {
        /// Keys.
        keys: u64,
    },
    /// Every type and encoding, plus `small` small keys of mixed types and `big_mib` MiB of big values.
    Mixed {
        /// Small keys.
        small: usize,
        /// MiB in big values.
        big_mib: usize,
    },
}

/// How replicas join.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Arrival {
    /// All at once.
    Together,
    /// One after another, each once the previous is in sync, while a client writes to the master.
    Staggered,
    /// All but the last at once; the last once the master's host has sent half the dataset's bytes
    /// (the others are mid-pull: it joins a swarm under way).
    Late,
}

/// One scenario, resolved against the command line.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Spec {
    /// Its name.
    pub name: String,
    /// The data.
    pub dataset: Dataset,
    /// Egress rate of every host; None = unshaped.
    pub links: Vec<Option<String>>,
    /// Replica counts to run.
    pub replicas: Vec<usize>,
    /// Modes, side by side.
    pub modes: Vec<String>,
    /// How replicas arrive.
    pub arrival: Arrival,
    /// Measure GET/SET latency on the master during each sync.
    pub latency_probe: bool,
    /// Namespace hosts (false: loopback).
    pub netns: bool,
    /// The first this many replica hosts are on a link `slow_factor` times slower than the others.
    #[serde(default)]
    pub slow_hosts: usize,
    /// How much slower their link is.
    #[serde(default)]
    pub slow_factor: u32,
    /// The slow hosts are the *last* replica hosts, not the first (`uneven`: N = 1 then runs on a
    /// full-rate host and gives the T(1) the others are measured against).
    #[serde(default)]
    pub slow_last: bool,
    /// Kill replica 1's agent (fastrepl) or replica server (native) once the master's host has sent a
    /// third of the dataset's bytes; the others must still sync, and are timed.
    #[serde(default)]
    pub kill_one: bool,
    /// A writer on the master through each run, value bytes per second (0: none): `write-heavy`'s
    /// stream that outpaces the replica's link during a full sync.
    #[serde(default)]
    pub writes_bytes_per_sec: u64,
    /// The master's `repl-backlog-size`.
    #[serde(default = "backlog_default")]
    pub master_backlog: String,
    /// A run not in sync after this many seconds is given up and reported with what the master did
    /// meanwhile (its full syncs, its output-buffer disconnects): a native replica that loops under
    /// writes never ends by itself. None: 2 hours.
    #[serde(default)]
    pub give_up_secs: Option<u64>,
    /// fastrepl's relay keeps its generations in a store (`--store`, a directory on the master's
    /// host's disk) instead of memory.
    #[serde(default)]
    pub relay_store: bool,
}

fn backlog_default() -> String {
    "512mb".into()
}

impl Dataset {
    /// Roughly the bytes of its RDB (for triggers; big values dominate).
    pub fn approx_bytes(&self) -> u64 {
        match *self {
            Dataset::BigValues { count, size } | Dataset::SmallValues { count, size } => (count * size) as u64,
            Dataset::Mixed { small, big_mib } => (big_mib << 20) as u64 + small as u64 * 64,
            // ~350 bytes a key in the LZF RDB a master sends (docs/results/issue45-codecs).
            Dataset::Realistic { keys } => keys * 350,
        }
    }
}

/// Every mode there is.
pub const MODES: &[&str] =
    &["native-disk", "native-diskless", "fastrepl-tcp", "fastrepl-ucx", "fastrepl-shm", "fastrepl-tcp-from-replica", "fastrepl-tcp-from-replica-raw", "fastrepl-tcp-uncompressed"];

/// Modes whose relay keeps blocks as the source wrote them (`--compression none`, tcp): what
/// compression costs or saves, side by side in one run.
pub fn uncompressed(mode: &str) -> bool {
    mode == "fastrepl-tcp-uncompressed"
}

/// The transport a fastrepl mode's agents pull over.
pub fn transport(mode: &str) -> &str {
    if from_replica(mode) || uncompressed(mode) {
        "tcp"
    } else {
        mode.trim_start_matches("fastrepl-")
    }
}

/// Modes whose relay captures from a standing replica of the master (on the master's host) instead
/// of the master: `-raw` also switches the replica's RDB compression off for the capture.
pub fn from_replica(mode: &str) -> bool {
    mode.starts_with("fastrepl-tcp-from-replica")
}

impl Spec {
    /// The scenario `name` at full or `--quick` scale, with the command line's overrides.
    pub fn get(name: &str, a: &BenchArgs) -> Result<Spec> {
        let q = a.quick;
        let big = |count_full: usize, count_quick: usize, size_full: usize, size_quick: usize| Dataset::BigValues {
            count: if q { count_quick } else { count_full },
            size: if q { size_quick } else { size_full },
        };
        let links = |full: &[&str], quick: &[&str]| -> Vec<Option<String>> { (if q { quick } else { full }).iter().map(|l| (*l != "unshaped").then(|| l.to_string())).collect() };
        let (dataset, links, replicas, arrival, latency_probe) = match name {
            "original" => (big(256, 16, 3_660_000, 1_000_000), links(&["100mbit", "1gbit", "unshaped"], &["1gbit", "unshaped"]), if q { vec![1, 2] } else { vec![1, 2, 3] }, Arrival::Together, false),
            "fanout" => (big(256, 8, 4 << 20, 1 << 20), links(&["1gbit"], &["1gbit"]), if q { vec![1, 3] } else { vec![1, 2, 4, 8] }, Arrival::Together, false),
            "staggered" => {
                (Dataset::Mixed { small: if q { 5_000 } else { 200_000 }, big_mib: if q { 8 } else { 256 } }, links(&["1gbit"], &["unshaped"]), vec![if q { 3 } else { 4 }], Arrival::Staggered, false)
            }
            "small-keys" => (Dataset::SmallValues { count: if q { 20_000 } else { 3_000_000 }, size: 100 }, links(&["unshaped"], &["unshaped"]), vec![1], Arrival::Together, false),
            "mixed" => (Dataset::Mixed { small: if q { 5_000 } else { 500_000 }, big_mib: if q { 4 } else { 128 } }, links(&["unshaped"], &["unshaped"]), vec![1], Arrival::Together, false),
            "under-load" => (big(64, 8, 4 << 20, 1 << 20), links(&["1gbit"], &["unshaped"]), vec![1], Arrival::Together, true),
            // One replica host on a link 5× slower: do the others wait for it?
            "slow-host" => (big(64, 8, 4 << 20, 1 << 20), links(&["1gbit"], &["1gbit"]), if q { vec![3] } else { vec![4] }, Arrival::Together, false),
            // The issue-33 fleet: 4 replicas join one cold relay at once, 128 MiB, one host 5× slower
            // (20 Mbit/s beside 100), the last; N = 1 (a full-rate host alone) is T(1) for the ratios.
            "uneven" => (big(32, 8, 4 << 20, 1 << 20), links(&["100mbit"], &["100mbit"]), if q { vec![1, 3] } else { vec![1, 4] }, Arrival::Together, false),
            // An agent (or a native replica) dies mid-pull: do the others notice?
            "agent-killed" => (big(64, 8, 4 << 20, 1 << 20), links(&["1gbit"], &["1gbit"]), if q { vec![3] } else { vec![4] }, Arrival::Together, false),
            // One replica arrives while the others are mid-pull.
            "late-joiner" => (big(64, 8, 4 << 20, 1 << 20), links(&["1gbit"], &["1gbit"]), if q { vec![3] } else { vec![4] }, Arrival::Late, false),
            // The master forks nothing: the relay captures from a replica. Compressible data (mixed
            // types), so switching the source's compression off shows in CPU and in bytes.
            "zero-fork" => {
                (Dataset::Mixed { small: if q { 5_000 } else { 300_000 }, big_mib: if q { 8 } else { 256 } }, links(&["unshaped", "100mbit"], &["unshaped"]), vec![1], Arrival::Together, true)
            }
            // Issue 44's master: 600 MiB at 100 Mbit/s with ~8 MB/s of writes through the sync and a
            // 64 MB backlog. Natively, the replica's output buffer passes its default hard limit
            // (256 MB) ~32 s into a ~50 s transfer: the sync starts again, and again. Through a relay
            // with a store, the stream waits on disk while the pull runs.
            "write-heavy" => (big(150, 16, 4 << 20, 1 << 20), links(&["100mbit"], &["100mbit"]), vec![1], Arrival::Together, false),
            // Issue 45's data: what caches hold, from the master and from a replica asked for an RDB
            // without LZF; today's bytes, before blocks are compressed.
            "compressible" => (Dataset::Realistic { keys: if q { 5_000 } else { 300_000 } }, links(&["100mbit", "1gbit"], &["100mbit"]), vec![1], Arrival::Together, false),
            other => bail!("unknown scenario {other:?} ({}, uneven, write-heavy, compressible, or all)", ALL.join(", ")),
        };
        let netns = !a.no_netns;
        let mut spec = Spec {
            name: name.to_string(),
            dataset,
            links: if netns { links } else { vec![None] },
            replicas,
            modes: Vec::new(),
            arrival,
            latency_probe,
            netns,
            slow_hosts: if name == "slow-host" || name == "uneven" { 1 } else { 0 },
            slow_factor: a.slow_factor,
            slow_last: name == "uneven",
            kill_one: name == "agent-killed",
            writes_bytes_per_sec: if name == "write-heavy" {
                if q {
                    2_000_000
                } else {
                    8_000_000
                }
            } else {
                0
            },
            master_backlog: if name == "write-heavy" { "64mb".into() } else { backlog_default() },
            give_up_secs: (name == "write-heavy").then_some(a.give_up_secs.unwrap_or(if q { 60 } else { 240 })),
            relay_store: name == "write-heavy",
        };
        if let (Some(v), Dataset::BigValues { count, .. }) = (a.values, &mut spec.dataset) {
            *count = v;
        }
        if (spec.kill_one || spec.arrival == Arrival::Late) && !netns {
            bail!("{name} times its event by the master host's traffic: it needs namespace hosts (drop --no-netns)");
        }
        if let Some(k) = a.slow_hosts {
            spec.slow_hosts = k;
        }
        if spec.slow_hosts > 0 && (!netns || spec.links.iter().any(Option::is_none)) {
            bail!("slow hosts need shaped links on namespace hosts (a --links rate, not unshaped or --no-netns)");
        }
        if a.slow_factor < 2 {
            bail!("--slow-factor must be at least 2");
        }
        if !a.links.is_empty() {
            if !netns {
                bail!("--links needs namespace hosts (drop --no-netns)");
            }
            spec.links = a.links.iter().map(|l| (l != "unshaped").then(|| l.clone())).collect();
        }
        if !a.replicas.is_empty() {
            spec.replicas = a.replicas.clone();
        }
        if spec.replicas.iter().any(|n| !(1..=16).contains(n)) {
            bail!("replica counts must be 1..16");
        }
        if spec.writes_bytes_per_sec > 0 && !netns {
            bail!("{name} needs shaped links for its writes to outpace: namespace hosts (drop --no-netns)");
        }
        spec.modes = if a.modes.is_empty() && name == "write-heavy" {
            vec!["native-diskless".to_string(), "fastrepl-tcp".to_string()]
        } else if a.modes.is_empty() && name == "uneven" {
            vec!["fastrepl-tcp".to_string()]
        } else if a.modes.is_empty() && (name == "zero-fork" || name == "compressible") {
            ["native-diskless", "fastrepl-tcp", "fastrepl-tcp-from-replica", "fastrepl-tcp-from-replica-raw"].iter().map(|m| m.to_string()).collect()
        } else if a.modes.is_empty() {
            // shm only where relay and replica share a host; ucx wherever UCX runs (over its tcp here).
            let mut m = vec!["native-disk", "native-diskless", "fastrepl-tcp", "fastrepl-ucx"];
            if !netns {
                m.push("fastrepl-shm");
            }
            m.into_iter().map(str::to_string).collect()
        } else {
            a.modes.clone()
        };
        for m in &spec.modes {
            if !MODES.contains(&m.as_str()) {
                bail!("unknown mode {m:?} ({})", MODES.join(", "));
            }
            if m == "fastrepl-shm" && netns {
                bail!("fastrepl-shm needs relay and replica on one host: add --no-netns");
            }
        }
        Ok(spec)
    }

    /// One line for people.
    pub fn describe(&self) -> String {
        let links: Vec<String> = self.links.iter().map(|l| l.clone().unwrap_or_else(|| "unshaped".into())).collect();
        let writes = match (self.writes_bytes_per_sec, self.give_up_secs) {
            (0, _) => String::new(),
            (w, give_up) => format!(
                "; {:.0} MB/s of writes on the master through each run; backlog {}; a run not in sync after {} s given up{}",
                w as f64 / 1e6,
                self.master_backlog,
                give_up.unwrap_or(7200),
                if self.relay_store { "; the relay's generations in a store on disk" } else { "" }
            ),
        };
        let event = match (self.kill_one, self.arrival) {
            (true, _) => "; replica 1's agent (or server) killed after a third of the data left the master's host",
            (_, Arrival::Late) => "; the last replica joins after half the data left the master's host",
            _ => "",
        };
        let slow = match (self.slow_hosts, self.slow_last) {
            (0, _) => String::new(),
            (k, true) => format!("; the last {k} replica host(s) of the largest N on a link {}× slower", self.slow_factor),
            (k, false) => format!("; replica host(s) 1..={k} on a link {}× slower", self.slow_factor),
        };
        format!(
            "{:?}; links {}{slow}{event}{writes}; replicas {:?}; modes {}; {}",
            self.dataset,
            links.join(", "),
            self.replicas,
            self.modes.join(", "),
            if self.netns { "namespace hosts" } else { "loopback" }
        )
    }
}
