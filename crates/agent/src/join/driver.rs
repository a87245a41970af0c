//! The join's driver: the checks before the replica is touched, then a loop that does what the
//! [`machine`](crate::join::machine) says and tells it what happened. All decisions (which framing, when
//! the replica is loaded, caught up, ready to hand over, whether the handoff was partial, whether to
//! reset the replica after a failure) are the machine's.

use crate::config::Config;
use crate::error::check_cancel;
use crate::error::Error;
use crate::error::Party;
use crate::join::machine::{Action, Counters, Input, Join, LoadFacts, Outcome, Snapshot, Timeouts};
use crate::join::replica_link::{self, ReplicaLink};
use crate::join::retry::{Retries, Verdict};
use crate::local::{self, Local, ReplState};
use crate::master::{self, MasterRepl};
use crate::node::Node;
use crate::peers::peering::Peering;
use crate::phase::JoinPhase;
use crate::pull::pipeline;
use crate::pull::pipeline::{readers, window};
use crate::pull::progress;
use crate::pull::select;
use crate::report::Attempt;
use crate::report::Phases;
use crate::report::ReplicaState;
use crate::report::Report;
use crate::staged::cluster_node::{self, StagedConfig};
use crate::staged::snapshot_file::Source;
use client::{Client, Info};
use replication::framing::Framing;
use std::sync::Arc;
use std::time::{Duration, Instant};
use transport::Transport;

use limits::{GENERATION_WAIT_MAX as RELAY_WAIT_MAX, REPLICA_CONNECT_MAX, SERVER_POLL_EVERY as POLL_EVERY};

/// The agent's memory is sampled this often while it pulls, by a thread of its own.
const PSS_SAMPLE_EVERY: std::time::Duration = limits::PSS_SAMPLE_EVERY;

/// What the checks established; nothing has been changed yet.
struct Checked {
    local: Local,
    progress: Arc<progress::Progress>,
    transport: Box<dyn Transport>,
    why: String,
    master: Client,
    master_addr: String,
    master_server: String,
    desc: snapshot::Descriptor,
    /// The relay's snapshot was ready to pull (its RDB header had arrived).
    capture_ready: Instant,
    connected: Instant,
    /// The swarm membership (`None`: every block from the relay), and what to report about it.
    peering: Option<Peering>,
    swarm: String,
}

/// Run a join, trying again after failures that time can mend ([`crate::join::retry`]): each attempt
/// checks, syncs and hands off; a failure after the replica followed the agent resets it (one before
/// leaves it untouched), so the next attempt starts from the server as it was or empty and standalone,
/// on the relay's current generation. At its end the relay is told how it ended ([`tell_relay`]),
/// once a join reached it.
pub fn join(cfg: &Config) -> Result<Joined, crate::report::Failed> {
    let reached = std::cell::Cell::new(None);
    let joined = attempts(cfg, &reached);
    tell_relay(cfg, &joined, reached.get());
    joined
}

/// How long the report of a join's end may wait on the relay (each connect, read and write).
const END_REPORT_WAIT: Duration = limits::JOIN_END_REPORT_WAIT;

/// Tell the relay how the join ended (`joins_total{outcome}`): a handoff partial or full, or a failure
/// once an attempt reached the relay (`reached`: the generation it last attached to). On the tracker
/// link when the agent still holds one, else on a short connection. Best effort: a failure is logged
/// and changes nothing, and it waits [`END_REPORT_WAIT`] at most per step on a relay that went away.
fn tell_relay(cfg: &Config, joined: &Result<Joined, crate::report::Failed>, reached: Option<u64>) {
    use transport::wire::JoinOutcome;
    let (outcome, generation, peering) = match joined {
        Ok(j) => {
            let outcome = match j.report.handoff {
                crate::report::Handoff::Partial => JoinOutcome::InSync,
                crate::report::Handoff::Full => JoinOutcome::FullSync,
            };
            (outcome, j.report.generation, j.peering.as_ref())
        }
        // Stopped by a signal (a pod deleted mid-join): no failure of the join's, nothing to page on.
        Err(f) if matches!(f.error, Error::Interrupted) => return,
        Err(_) => match reached {
            Some(g) => (JoinOutcome::Failed, g, None),
            None => return,
        },
    };
    // The tracker link's lock is let go before the fallback connects: the load reporter shares it.
    let on_link = peering.and_then(|p| {
        let mut link = p.tracker();
        link.can_end().then(|| link.ended(outcome, END_REPORT_WAIT))
    });
    let (told, on) = match on_link {
        Some(told) => (told, "the tracker link"),
        None => (transport::tracker::report_end(&cfg.relay, &cfg.token, generation, outcome, END_REPORT_WAIT), "a connection of its own"),
    };
    match told {
        Ok(()) => tracing::debug!(%outcome, generation, on, "told the relay how the join ended"),
        Err(e) => tracing::info!(error = %e, %outcome, "could not tell the relay how the join ended (its joins_total misses this one)"),
    }
}

/// [`join`]'s attempts; `reached` is set to the generation each attempt attached to.
fn attempts(cfg: &Config, reached: &std::cell::Cell<Option<u64>>) -> Result<Joined, crate::report::Failed> {
    let node = cfg.node();
    let mut retries = Retries::new(cfg.retry);
    let mut attempts: Vec<Attempt> = Vec::new();
    loop {
        let n = retries.attempt();
        let started = Instant::now();
        let (error, replica) = match attempt(cfg, &node, reached) {
            Ok(mut joined) => {
                joined.report.attempts = attempts;
                return Ok(joined);
            }
            Err(f) => f,
        };
        let secs = started.elapsed().as_secs_f64();
        let verdict = retries.failed(&error, &replica, crate::join::retry::jitter());
        let waited = match verdict {
            Verdict::Retry(w) => w,
            Verdict::GiveUp(why) => {
                // A first attempt refused outright is said once, by the caller; otherwise say why it stops.
                if n > 1 || replica != ReplicaState::Untouched {
                    tracing::error!(attempt = n, error = %error, kind = %error.kind(), replica = replica.name(), "join failed; not retrying: {why}");
                }
                attempts.push(Attempt { attempt: n, error: error.to_string(), error_kind: Some(error.kind()), secs, waited_secs: 0.0 });
                return Err(crate::report::Failed { error, attempts, replica });
            }
        };
        tracing::warn!(attempt = n, error = %error, kind = %error.kind(), replica = replica.name(), retry_in_secs = waited.as_secs_f64(), "join attempt failed; trying again");
        attempts.push(Attempt { attempt: n, error: error.to_string(), error_kind: Some(error.kind()), secs, waited_secs: waited.as_secs_f64() });
        cfg.live.set_phase(JoinPhase::WaitingToRetry);
        if let Err(e) = wait_or_cancel(waited, &cfg.cancel) {
            attempts.last_mut().expect("pushed above").waited_secs = 0.0;
            return Err(crate::report::Failed { error: e, attempts, replica });
        }
    }
}

/// Sleep `d` in short steps, returning early (with [`Error::Interrupted`]) when cancelled.
fn wait_or_cancel(d: Duration, cancel: &std::sync::atomic::AtomicBool) -> Result<(), Error> {
    let until = Instant::now() + d;
    loop {
        check_cancel(cancel)?;
        let now = Instant::now();
        if now >= until {
            return Ok(());
        }
        std::thread::sleep((until - now).min(limits::RETRY_WAIT_SLICE)); // A backoff, watching for a signal.
    }
}

/// One attempt; on failure, the error and what became of the replica.
fn attempt(cfg: &Config, node: &Node, reached: &std::cell::Cell<Option<u64>>) -> Result<Joined, (Error, ReplicaState)> {
    // A cluster node refuses REPLICAOF: it is staged instead (see crate::staged::cluster_node).
    if cluster_node::is_cluster_node(node).map_err(|e| (e, ReplicaState::Untouched))? {
        return cluster_node::attempt(&staged_config(cfg, node)).map(|report| Joined { report, peering: None });
    }
    let t0 = Instant::now();
    let c = check(cfg, node, reached).map_err(|e| (e, ReplicaState::Untouched))?;
    let span = tracing::info_span!("join", replica = %cfg.replica, generation = c.desc.generation, offset = c.desc.offset);
    let _g = span.enter();
    tracing::info!(relay = %cfg.relay, master = %c.master_addr, replica_server = %c.local.server, "checks passed; syncing the replica");
    let handoff_to = master::parse_addr(&c.master_addr).map_err(|e| (e, ReplicaState::Untouched))?;
    let snapshot = Snapshot { replid: c.desc.replid.clone(), offset: c.desc.offset };
    let mut machine = Join::new(snapshot, handoff_to.clone(), Timeouts { load: cfg.load_timeout, handoff: cfg.handoff_timeout }, t0, c.connected);
    let mut d = Driver { cfg, node, c, handoff_to, link: None, listener: None, stats: None, peak_pss_kib: 0, log_reader: None, guard: None, silent_since: None, replica_log: None };
    let outcome = d.run(&mut machine)?;
    let mut notes = outcome.notes.clone();
    if let Some(v) = &d.c.local.diskless_load_before {
        if let Err(e) = d.c.local.client.config_set("repl-diskless-load", v) {
            notes.push(format!("could not restore repl-diskless-load {v}: {e}"));
        }
    }
    let report = d.report(&outcome, notes);
    Ok(Joined { report, peering: d.c.peering.take() })
}

/// What a staged join needs of the configuration (see [`StagedConfig`]).
fn staged_config<'a>(cfg: &'a Config, node: &'a Node) -> StagedConfig<'a> {
    StagedConfig {
        node,
        source: Source { relay: &cfg.relay, token: &cfg.token, pull: &cfg.pull, cancel: &cfg.cancel, live: &cfg.live },
        master: cfg.master(),
        restart: &cfg.restart,
        load_timeout: cfg.load_timeout,
        handoff_timeout: cfg.handoff_timeout,
    }
}

/// Connect to everything and check it, changing nothing: the local server (reachable, empty or
/// `--force`), the relay's generation and transport, the master, and that the replica loads the
/// master's RDB version and the master still has the snapshot's history. `reached`: the generation
/// attached to, once the relay answered.
fn check(cfg: &Config, node: &Node, reached: &std::cell::Cell<Option<u64>>) -> Result<Checked, Error> {
    let local = local::check(node, cfg.force)?;
    cfg.live.set_phase(JoinPhase::WaitingForCapture);
    // From the relay's hello on, a failure is one it saw (a capture refused counts as a failed join).
    let attached = progress::attach_with(&cfg.relay, &cfg.token, RELAY_WAIT_MAX, || reached.set(Some(reached.get().unwrap_or(0))))?;
    reached.set(Some(attached.progress.with(|v| v.desc.generation)));
    let (transport, why) = select::select(cfg.pull.transport, &cfg.relay, &cfg.token, &attached.offered)?;
    tracing::info!(transport = %transport.kind(), reason = %why, "transport selected");
    let master_addr = cfg.master().find(|| Ok(attached.master.clone()))?;
    let mut master = cfg.master().connect(&master_addr).map_err(Error::master)?;
    // A refused INFO is said now, as the permission it is. It fails closed: without the master's
    // run_id the check below could not tell the local server from the master.
    let master_info = master.info("server").map_err(Error::master)?;
    let master_server = replication::rdb::Server::from_info(&local::info_text(&master_info)).map(|s| s.to_string()).unwrap_or_else(|| "unknown".into());
    // The master's name may point at the local server itself (promoted by a failover, its name
    // moved to it): joining it would replace the master's dataset with a snapshot of its own past.
    let master_run_id = master_info.get("run_id").unwrap_or_default();
    if !master_run_id.is_empty() && local.run_id == master_run_id {
        return Err(Error::Precondition(format!("{master_addr} is the local server itself ({}): it is the master, not to be joined", cfg.replica)));
    }
    let v = attached.progress.wait_until(RELAY_WAIT_MAX, |v| v.desc.rdb_version.is_some());
    let capture_ready = Instant::now();
    v.check()?;
    let rdb_version = v.desc.rdb_version.ok_or_else(|| Error::Timeout("the relay has not received the RDB header".into()))?;
    if let Err(why) = local.server.loads(rdb_version, local.rdb_version_check.as_deref()) {
        // A Valkey 9 master writes its own format for the version the relay announced (its own),
        // but RDB 11 for an older replica: natively this pair works, through another relay.
        if local.server.loads_what_valkey9_writes_for_older(rdb_version) {
            let (a, b, c) = local.server.version;
            let announce = if local.server.flavour == "valkey" { format!("{a}.{b}.{c}") } else { "8.1.0".into() };
            return Err(Error::Incompatible(format!(
                "the master ({master_server}) writes RDB version {rdb_version} for a replica that says it is Valkey 9 or newer, as the relay did: {why}. For an older replica it writes RDB 11, which this one loads: join it through a relay started with `--announce-version {announce}`; nothing was changed"
            )));
        }
        return Err(Error::Incompatible(format!("the master ({master_server}) writes RDB version {rdb_version}: {why}. Native replication cannot pair them either; nothing was changed")));
    }
    let desc = v.desc.clone();
    let m = MasterRepl::from_info(&master.info("replication").map_err(Error::master)?);
    if !m.knows(&desc.replid) {
        return Err(Error::Changed(format!(
            "the master's replication ID is no longer the snapshot's ({}): it restarted or failed over. The relay takes a new snapshot for the next join; retry",
            desc.replid
        )));
    }
    let (peering, swarm) = join_swarm(cfg, &desc, transport.kind() == transport::TransportKind::Shm);
    Ok(Checked { local, progress: attached.progress, transport, why, master, master_addr, master_server, desc, capture_ready, connected: Instant::now(), peering, swarm })
}

/// Join the generation's swarm. Not being in one only costs the relay's link more copies, so a
/// failure here is reported, not fatal: every block then comes from the relay.
fn join_swarm(cfg: &Config, desc: &snapshot::Descriptor, local: bool) -> (Option<Peering>, String) {
    match Peering::join(&cfg.relay, &cfg.token, desc.generation, desc.block_size, local, &cfg.peers) {
        Ok(p) if p.serves() => {
            let at = cfg.peers.advertise.clone().unwrap_or_else(|| p.listen_addr().map(|a| a.to_string()).unwrap_or_default());
            let s = format!("agent {} of generation {}, serving peers on {at}", p.id(), desc.generation);
            (Some(p), s)
        }
        Ok(p) => {
            let why = if cfg.peers.serve { "a TLS relay and no --peer-tls-cert" } else { "--no-serve" };
            let s = format!("agent {} of generation {}, not serving ({why})", p.id(), desc.generation);
            (Some(p), s)
        }
        Err(e) => {
            tracing::warn!(error = %e, "not in a swarm; every block comes from the relay");
            (None, format!("not in a swarm: {e}"))
        }
    }
}

/// Why pointing the replica at the agent failed: refused (it never followed us) or not.
enum Pointing {
    Refused(Error),
    Failed(Error),
}

struct Driver<'a> {
    cfg: &'a Config,
    /// The local server, as every connection to it is opened.
    node: &'a Node,
    c: Checked,
    /// Where the replica is handed to (`REPLICAOF`): the master's address, Sentinel's latest.
    handoff_to: endpoint::Endpoint,
    /// The replica's link to us, until the handoff.
    link: Option<ReplicaLink>,
    /// Where the agent listens for its replica, and TLS to serve it, until it connects.
    listener: Option<(std::net::TcpListener, std::net::SocketAddr, Option<client::tls::Tls>)>,
    stats: Option<pipeline::Stats>,
    /// Largest PSS seen while pulling (sampled every few blocks).
    peak_pss_kib: u64,
    /// The reader for the stream log, opened at the first log read and kept for the rest.
    log_reader: Option<Box<dyn transport::RangeReader>>,
    /// Resets the replica if this process dies while the replica follows it.
    guard: Option<crate::guard::Guard>,
    /// Since when the replica, busy, has not answered a poll.
    silent_since: Option<Instant>,
    /// The replica's log file and its length before the feed, where the join can read it.
    replica_log: Option<crate::join::replica_log::LogTail>,
}

impl Driver<'_> {
    /// Do what the machine says until it is done or failed.
    fn run(&mut self, m: &mut Join) -> Result<Outcome, (Error, ReplicaState)> {
        let mut action = match self.prepare_replica() {
            Ok(()) => m.on(Instant::now(), Input::Prepared),
            Err(e) => m.on(Instant::now(), Input::Failed(e)),
        };
        let mut phase = None;
        loop {
            if Some(m.join_phase()) != phase {
                // One line per phase: operators read it, and the lab's fault matrix strikes on it.
                let p = m.join_phase();
                phase = Some(p);
                tracing::info!("phase: {p}");
                crate::events::phase(p);
                self.cfg.live.set_phase(p);
            }
            action = match action {
                Action::PointReplica => match self.point_replica() {
                    Ok(capa_eof) => m.on(Instant::now(), Input::ReplicaConnected { capa_eof, length: self.c.progress.get_length() }),
                    Err(Pointing::Refused(e)) => m.on(Instant::now(), Input::PointRefused(e)),
                    Err(Pointing::Failed(e)) => m.on(Instant::now(), Input::Failed(e)),
                },
                Action::WaitLength => match self.wait_length() {
                    Ok(len) => m.on(Instant::now(), Input::Length(len)),
                    Err(e) => m.on(Instant::now(), Input::Failed(e)),
                },
                Action::SendSnapshot { eof, length } => match self.send_snapshot(eof, length) {
                    Ok(s) => m.on(Instant::now(), Input::Pulled { first_byte: s.first_byte, rdb_bytes: s.bytes }),
                    Err(e) => m.on(Instant::now(), Input::Failed(e)),
                },
                Action::PollReplica => match self.poll_replica(m.snapshot_in_use(), m.handed_over()) {
                    Ok((state, ack_seen)) => m.on(Instant::now(), Input::Replica { state: &state, ack_seen }),
                    Err(e) => m.on(Instant::now(), Input::Failed(e)),
                },
                Action::ReadLog { from, max } => match self.stream_log(from, max) {
                    Ok(got) => m.on(Instant::now(), Input::LogRead { got, asked: max }),
                    Err(e) => m.on(Instant::now(), Input::Failed(e)),
                },
                Action::CheckMaster => match self.follow_sentinel().and_then(|()| self.master(|m| m.info("replication"))) {
                    Ok(i) => m.on(Instant::now(), Input::Master(&MasterRepl { addr: Some(self.handoff_to.clone()), ..MasterRepl::from_info(&i) })),
                    Err(e) => m.on(Instant::now(), Input::Failed(e)),
                },
                Action::HandOff => match self.hand_off() {
                    Ok(before) => m.on(Instant::now(), Input::Counters(before)),
                    Err(e) => m.on(Instant::now(), Input::Failed(e)),
                },
                Action::ExamineReplica => {
                    let facts = self.examine_replica();
                    m.on(Instant::now(), Input::Examined(&facts))
                }
                Action::ReadOutcome => match self.counters() {
                    Ok(after) => m.on(Instant::now(), Input::Counters(after)),
                    Err(e) => m.on(Instant::now(), Input::Failed(e)),
                },
                Action::Done(o) => {
                    tracing::info!(handoff = %o.handoff, offset = o.offset, "handed off");
                    crate::events::handed_off(o.offset);
                    return Ok(o);
                }
                Action::Fail { error, reset_replica } => {
                    let state = if reset_replica {
                        match self.reset_replica() {
                            Ok(state) => state,
                            // The guard (dropped with us) tries once more after we are gone.
                            Err(why) => return Err((error, ReplicaState::ResetFailed(why))),
                        }
                    } else if m.handed_over() {
                        ReplicaState::HandedOver
                    } else {
                        self.restore_settings();
                        ReplicaState::Untouched
                    };
                    if let Some(g) = self.guard.take() {
                        g.disarm();
                    }
                    return Err((error, state));
                }
            };
        }
    }

    /// Settings for the sync, the listener for the replica, the guard; nothing points the replica at
    /// the agent yet, and its data and role are as they were.
    fn prepare_replica(&mut self) -> Result<(), Error> {
        let cfg = self.cfg;
        let c = &mut self.c.local.client;
        // A replica with tls-replication yes speaks TLS to whatever it follows, us included.
        let tls_replication = c.config_get("tls-replication").map_err(Error::replica)?.as_deref() == Some("yes");
        let serve_tls = match (&cfg.tls, tls_replication) {
            (_, false) => None,
            (Some(t), true) if t.can_serve() => Some(t.clone()),
            _ => {
                return Err(Error::Precondition(
                    "the replica has tls-replication yes, so it speaks TLS to the agent: run the join with --tls --cert --key (a certificate its tls-ca-cert-file trusts, e.g. its own)".into(),
                ))
            }
        };
        if self.c.local.diskless_load_before.is_some() {
            c.config_set("repl-diskless-load", "on-empty-db").map_err(Error::replica)?;
        }
        if let Some(a) = &cfg.master_auth {
            if let Some(u) = &a.user {
                c.config_set("masteruser", u).map_err(Error::replica)?;
            }
            c.config_set("masterauth", &a.password).map_err(Error::replica)?;
        }
        // Its log, read only if it drops its link while fed: whether it refused what it was fed.
        self.replica_log = crate::join::replica_log::LogTail::find(c);
        let (listener, at) = replica_link::listen(cfg.listen)?;
        self.guard = Some(crate::guard::arm(self.node, at, self.c.local.diskless_load_before.as_deref())?);
        self.listener = Some((listener, at, serve_tls));
        Ok(())
    }

    /// `REPLICAOF` the agent, accept the replica's handshake, answer it `+FULLRESYNC` and make sure it
    /// is the replica ([`replica_link::accept`]); returns whether it offered `capa eof`.
    fn point_replica(&mut self) -> Result<bool, Pointing> {
        let (listener, at, serve_tls) = self.listener.take().ok_or_else(|| Pointing::Failed(Error::Internal("no listener for the replica".into())))?;
        let replid = replication::ReplId::parse(self.c.desc.replid.as_bytes()).map_err(|e| Pointing::Failed(Error::protocol(Party::Relay, e.to_string())))?;
        let fullresync = replication::master::fullresync(&replid, self.c.desc.offset);
        let c = &mut self.c.local.client;
        match c.cmd(&["REPLICAOF", &at.ip().to_string(), &at.port().to_string()]) {
            Ok(_) => {}
            // An error reply: the command did not take effect.
            Err(e @ client::Error::Server { .. }) => return Err(Pointing::Refused(Error::replica(e))),
            // No answer: it may have.
            Err(e) => return Err(Pointing::Failed(Error::replica(e))),
        }
        let link = replica_link::accept(&listener, REPLICA_CONNECT_MAX, serve_tls.as_ref(), &fullresync, &mut |by| replica_link::sync_started(c, at, by)).map_err(Pointing::Failed)?;
        let capa_eof = link.capa_eof;
        self.link = Some(link);
        Ok(capa_eof)
    }

    /// After a failure before the replica was pointed at the agent: put back the load setting we
    /// changed (best effort; the replica's data and role were never touched).
    fn restore_settings(&mut self) {
        if let Some(v) = &self.c.local.diskless_load_before {
            if let Err(e) = self.c.local.client.config_set("repl-diskless-load", v) {
                tracing::warn!(error = %e, "could not restore the replica's repl-diskless-load {v}");
            }
        }
    }

    fn link(&mut self) -> Result<&mut ReplicaLink, Error> {
        self.link.as_mut().ok_or_else(|| Error::Internal("no replica link".into()))
    }

    fn wait_length(&self) -> Result<u64, Error> {
        let v = self.c.progress.wait_until(self.cfg.load_timeout, |v| v.desc.length.is_some());
        v.check()?;
        v.desc.length.ok_or_else(|| Error::Timeout("the RDB length".into()))
    }

    /// The header (`+FULLRESYNC` went with the replica's accept), every block in order while pulling
    /// out of order, the EOF mark.
    fn send_snapshot(&mut self, eof: bool, length: Option<u64>) -> Result<pipeline::Stats, Error> {
        let framing = match (eof, length) {
            (true, _) => replica_link::eof_framing()?,
            (false, Some(n)) => Framing::Length(n),
            (false, None) => return Err(Error::Internal("length framing without a length".into())),
        };
        let (cfg, progress, transport, peering) = (self.cfg, self.c.progress.clone(), &self.c.transport, self.c.peering.as_ref());
        let link = self.link.as_mut().ok_or_else(|| Error::Internal("no replica link".into()))?;
        link.send(&framing.header(), "RDB header")?;
        let t = Instant::now();
        let (stats, peak_pss) = crate::procstat::with_peak_pss(PSS_SAMPLE_EVERY, || {
            let pull = pipeline::Pull {
                transport: transport.as_ref(),
                progress: &progress,
                readers: readers(cfg.pull.readers, transport.as_ref()),
                window: window(cfg.pull.window_blocks, pipeline::Membership::of(peering)),
                cancel: &cfg.cancel,
                peering,
                counters: Some(&cfg.live.sources),
            };
            pipeline::pull(&pull, &mut |b| {
                link.send(b, "RDB block")?;
                cfg.live.rdb_bytes_sent.fetch_add(b.len() as u64, std::sync::atomic::Ordering::Relaxed);
                if let Some(l) = progress.get_length() {
                    cfg.live.rdb_bytes_total.store(l, std::sync::atomic::Ordering::Relaxed);
                }
                Ok(())
            })
        });
        let stats = stats?;
        if let Framing::Eof(mark) = &framing {
            link.send(mark, "EOF mark")?;
        }
        self.peak_pss_kib = peak_pss;
        tracing::info!(bytes = stats.bytes, from_relay = stats.relay_bytes(), from_peers = stats.peer_bytes(), secs = t.elapsed().as_secs_f64(), "snapshot sent; replica loading");
        self.stats = Some(stats.clone());
        Ok(stats)
    }

    /// The replica's state, after the poll interval; fails when the replica left our link or (while
    /// it still depends on the snapshot) the relay lost it.
    ///
    /// While it loads our snapshot, or once it is the master's (`handed_over`), a server too busy to
    /// answer — a loading server answers only now and then — is not a failure: it reads as "still
    /// syncing" and the machine's deadlines decide, unless it stays silent past
    /// [`limits::REPLICA_SILENCE_MAX`] (hung, not busy).
    fn poll_replica(&mut self, snapshot_in_use: bool, handed_over: bool) -> Result<(ReplState, bool), Error> {
        std::thread::sleep(POLL_EVERY); // Polling a server's state; the machine holds the deadline.
        check_cancel(&self.cfg.cancel)?;
        let mut ack_seen = false;
        if let Some(link) = &self.link {
            link.check_open()?;
            ack_seen = link.ack_seen.load(std::sync::atomic::Ordering::SeqCst);
        }
        if snapshot_in_use {
            self.c.progress.with(progress::View::check)?;
        }
        match local::repl_state(&mut self.c.local.client) {
            Ok(st) => {
                self.silent_since = None;
                Ok((st, ack_seen))
            }
            // A server loading an RDB answers only between chunks of its load (every 2 MB in Redis
            // 7.0), so a slow load can outlast a read: busy, not dead, while the machine's deadline
            // (--load-timeout-secs, --handoff-timeout-secs) bounds the wait. Seen in the fault matrix:
            // a second capture's replica loading for 25 s failed every retry at its first timeout.
            Err(client::Error::Io { source, .. }) if (handed_over || snapshot_in_use) && matches!(source.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                let since = *self.silent_since.get_or_insert_with(Instant::now);
                if since.elapsed() > limits::REPLICA_SILENCE_MAX {
                    return Err(Error::unavailable(crate::error::Party::Replica, format!("the replica has not answered for {} s: hung, not loading", since.elapsed().as_secs())));
                }
                tracing::info!("the replica does not answer (busy loading?); still waiting");
                // A timed-out request leaves its reply in flight on that connection: use a new one
                // (kept, its next reply would answer this request, not the next).
                self.c.local.client = self.node.connect()?;
                Ok((ReplState { syncing: true, ..ReplState::default() }, ack_seen))
            }
            Err(e) => Err(Error::replica(e)),
        }
    }

    /// The facts about a replica that dropped its link while fed or loading: whether it answers,
    /// its load's state, its log since the feed began. Changes nothing; what they mean is the
    /// machine's.
    fn examine_replica(&mut self) -> LoadFacts {
        let mut facts = LoadFacts { replica_server: self.c.local.server.to_string(), master_server: self.c.master_server.clone(), ..LoadFacts::default() };
        if let Ok(mut c) = self.node.connect() {
            facts.answers = true;
            if let Ok(p) = c.info("persistence") {
                facts.loading = p.num("loading").map(|n| n != 0);
                facts.keys_loaded = p.num("rdb_last_load_keys_loaded");
            }
            self.c.local.client = c;
        }
        facts.log = self.replica_log.as_ref().and_then(|l| l.lines_since());
        tracing::info!(
            answers = facts.answers,
            loading = ?facts.loading,
            keys_loaded = ?facts.keys_loaded,
            log = %self.replica_log.as_ref().map_or("not readable".to_string(), |l| l.path().display().to_string()),
            log_lines = facts.log.as_ref().map_or(0, Vec::len),
            "the replica dropped its link while fed; looking at why"
        );
        facts
    }

    /// Read up to `max` log bytes from `from` and send them to the replica; returns how many.
    fn stream_log(&mut self, from: u64, max: u64) -> Result<u64, Error> {
        check_cancel(&self.cfg.cancel)?;
        let max32 = u32::try_from(max).map_err(|_| Error::Internal("log read too large".into()))?;
        let generation = self.c.desc.generation;
        if self.log_reader.is_none() {
            self.log_reader = Some(self.c.transport.open().map_err(Error::relay)?);
        }
        let reader = self.log_reader.as_mut().expect("opened above");
        let chunk = reader.read_log(generation, from, max32).map_err(Error::relay)?;
        let link = self.link()?;
        link.check_open()?;
        if !chunk.is_empty() {
            link.send(&chunk, "stream")?;
        }
        Ok(chunk.len() as u64)
    }

    /// A command to the master; a connection that broke (a master restarted or briefly away) is
    /// opened again once before giving up. After the handoff this matters: the replica is the
    /// master's then, and the join must see it through to in-sync (natively, if the master restarted)
    /// rather than fail on a stale client connection.
    fn master<T>(&mut self, f: impl Fn(&mut Client) -> Result<T, client::Error>) -> Result<T, Error> {
        match f(&mut self.c.master) {
            Err(client::Error::Io { .. }) => {
                self.c.master = self.cfg.master().connect(&self.c.master_addr).map_err(Error::master)?;
                f(&mut self.c.master).map_err(Error::master)
            }
            r => r.map_err(Error::master),
        }
    }

    /// With `--sentinel`: hand off to the master Sentinel names now, not the one at the start (a
    /// failover during the join). A promoted replica keeps the old master's history as its replid2,
    /// so the handoff can still be partial; the machine's plan checks that.
    fn follow_sentinel(&mut self) -> Result<(), Error> {
        let Some(s) = &self.cfg.sentinel else { return Ok(()) };
        let now = s.find_master(local::CMD_TIMEOUT).map_err(Error::sentinel)?;
        // Compared as addresses: the same master spelled otherwise is not a new one.
        let at = master::parse_addr(&now)?;
        if at != self.handoff_to {
            tracing::warn!(was = %self.c.master_addr, now = %now, "Sentinel names a new master; handing off to it");
            self.c.master = self.cfg.master().connect(&now).map_err(Error::master)?;
            self.handoff_to = at;
            self.c.master_addr = now;
        }
        Ok(())
    }

    /// The master's and the replica's counters ([`counters`]), through [`Driver::master`].
    fn counters(&mut self) -> Result<Counters, Error> {
        let stats = self.master(|m| m.info("stats"))?;
        counters(&stats, &mut self.c.local.client)
    }

    /// Counters, then `REPLICAOF <master>` (from here the replica is the master's), then close our link.
    fn hand_off(&mut self) -> Result<Counters, Error> {
        let before = self.counters()?;
        let (host, port) = master::replicaof_args(&self.handoff_to);
        self.c.local.client.cmd(&["REPLICAOF", &host, &port]).map_err(Error::replica)?;
        // The replica follows its master now; nothing of ours to reset any more.
        if let Some(g) = self.guard.take() {
            g.disarm();
        }
        self.link = None; // ReplicaLink's Drop shuts the connection down.
        Ok(before)
    }

    /// After a failure between pointing the replica at the agent and the handoff: make it standalone
    /// and empty, so nothing looks in sync that is not. Returns what became of it, or why it could not
    /// be reset when it answers but stays a replica (a server that is down is left to the caller's
    /// retry: it restarts standalone).
    fn reset_replica(&mut self) -> Result<ReplicaState, String> {
        let cfg = self.cfg;
        // Closes the link: a replica loading from us reads to its end, fails the load, and then
        // accepts commands again (meanwhile it answers -LOADING; `local::reset` waits that out).
        self.link = None;
        match local::reset(self.node, self.c.local.diskless_load_before.as_deref(), None) {
            Ok(local::Reset::Unreachable(e)) => {
                tracing::error!(error = %e, "could not reach the replica to reset it; check its role before retrying");
                Ok(ReplicaState::Unreachable(e))
            }
            Ok(_) => {
                tracing::warn!(replica = %cfg.replica, "join failed: the replica was reset to an empty standalone server");
                Ok(ReplicaState::Reset)
            }
            Err(e) => {
                tracing::error!(error = %e, "could not reset the replica; it may still follow this (dead) agent: run REPLICAOF NO ONE and FLUSHALL on it");
                Err(e)
            }
        }
    }

    fn report(&self, o: &Outcome, mut notes: Vec<String>) -> Report {
        if let Some(lost) = self.stats.as_ref().and_then(|s| s.swarm_lost.clone()) {
            notes.push(format!("the relay's tracker failed during the pull ({lost}); the rest came from the relay alone"));
        }
        let (cfg, c) = (self.cfg, &self.c);
        let stats = self.stats.clone().unwrap_or_default();
        let tl = &o.timeline;
        let secs = |t: Option<Instant>| t.map(|t| t.duration_since(tl.started).as_secs_f64()).unwrap_or(0.0);
        let pull_secs = (secs(tl.pulled) - secs(tl.first_byte)).max(1e-9);
        Report {
            handoff: o.handoff,
            transport: c.transport.kind(),
            transport_detail: match c.transport.detail() {
                Some(d) => format!("{d}; {}", c.why),
                None => c.why.clone(),
            },
            relay: cfg.relay.to_string(),
            replica: cfg.replica.clone(),
            master: c.master_addr.clone(),
            replica_server: c.local.server.to_string(),
            master_server: c.master_server.clone(),
            generation: c.desc.generation,
            replid: c.desc.replid.clone(),
            snapshot_offset: c.desc.offset,
            handoff_offset: o.offset,
            rdb_length_bytes: stats.bytes,
            rdb_stored_bytes: stats.stored_bytes,
            log_bytes: o.log_bytes,
            blocks: stats.blocks,
            blocks_reread: stats.reread,
            readers: readers(cfg.pull.readers, c.transport.as_ref()),
            reads_in_flight_max: stats.reads_in_flight_max,
            streamed_while_capturing: stats.streamed_while_capturing,
            phases: Phases {
                wait_capture: secs(Some(c.capture_ready)),
                connect: secs(Some(tl.connected)),
                first_byte: secs(tl.first_byte),
                pulled: secs(tl.pulled),
                loaded: secs(tl.loaded),
                caught_up: secs(tl.caught_up),
                handed_off: secs(tl.handed_off),
            },
            pull_mib_s: stats.bytes as f64 / (1 << 20) as f64 / pull_secs,
            notes,
            agent_cpu_secs: crate::procstat::own_cpu_secs(),
            agent_peak_rss_kib: crate::procstat::own_peak_rss_kib(),
            agent_peak_pss_kib: self.peak_pss_kib.max(crate::procstat::own_pss_kib()),
            swarm: c.swarm.clone(),
            received_bytes_total: crate::report::ReceivedBytes { relay: stats.relay_bytes(), peers: stats.peer_bytes() },
            sources: stats.sources.clone(),
            peer_bad_blocks: stats.peer_bad_blocks,
            peer_failures: stats.peer_failures,
            peer_refusals: stats.peer_refusals,
            bytes_served_to_peers: c.peering.as_ref().map_or(0, |p| p.served_bytes()),
            attempts: Vec::new(),
            staged: None,
        }
    }
}

/// The master's `sync_full`/`sync_partial_ok` (from its `INFO stats`) and the replica's input bytes.
fn counters(s: &Info, replica: &mut Client) -> Result<Counters, Error> {
    let replica_input_bytes = replica.info("stats").ok().and_then(|s| s.num("total_net_repl_input_bytes"));
    Ok(Counters {
        full: s.num("sync_full").unwrap_or(0),
        partial_ok: s.num("sync_partial_ok").unwrap_or(0),
        replica_input_bytes,
        partial_err: s.num("sync_partial_err").unwrap_or(0),
        output_buffer_disconnects: s.num("client_output_buffer_limit_disconnections"),
    })
}

/// A join that succeeded, with its swarm membership: the caller reports, then lets the agent serve
/// the peers that still pull ([`Joined::linger`]) before exiting.
pub struct Joined {
    /// What happened.
    pub report: Report,
    /// The swarm membership, when the agent is in one.
    pub peering: Option<Peering>,
}

impl Joined {
    /// Serve peers that still need blocks for at most `max` (or until `cancel`); returns the seconds
    /// lingered and the bytes served in all.
    pub fn linger(&self, max: Duration, cancel: &std::sync::atomic::AtomicBool) -> (f64, u64) {
        match &self.peering {
            Some(p) => (p.linger(max, cancel).as_secs_f64(), p.served_bytes()),
            None => (0.0, 0),
        }
    }
}
