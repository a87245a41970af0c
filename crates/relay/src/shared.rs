//! What the relay's threads share: the configuration, the tokens, the generations' machine and the
//! generations it speaks of (under one lock), the swarms, the counters and the UCX side. The machine
//! decides; `Shared` feeds it events under its lock and carries its actions out on the real
//! generations, so every seal, failure and release happens (and is counted) in one place.

use crate::config::Config;
use crate::error::Error;
use crate::generations::{self, Action, Answer, Generations, Next, Ticket, Turn};
use crate::stats;
use crate::tracker;
use snapshot::{Generation, State};
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::{Duration, Instant};
use transport::Token;

/// State shared by the capture loop and every connection.
pub(crate) struct Shared {
    pub(crate) config: Config,
    /// Tokens accepted now (the configured ones, or those a reload set).
    tokens: std::sync::RwLock<Vec<Token>>,
    /// The generations' lifecycle and the generations it speaks of, under one lock.
    life: Mutex<Life>,
    /// Signalled after every change of `life` (the capture thread and waiting agents wait on it).
    changed: Condvar,
    /// The abstract unix socket of the shm transport, when offered.
    pub(crate) shm_socket: Option<String>,
    /// Each generation's swarm of agents (who holds which block).
    pub(crate) swarms: tracker::Swarms,
    /// Counters for status and metrics.
    pub(crate) stats: stats::Stats,
    /// Admission to the agents' port and the shm socket (one budget for both); its reaper runs on a
    /// thread of the relay's.
    pub(crate) gate: Arc<admission::Gate>,
    /// Where generations are kept with `--store` (locked for this relay); `None`: in memory.
    pub(crate) store: Option<snapshot::Store>,
    /// The UCX side, when offered and UCX initialised.
    #[cfg(feature = "ucx")]
    pub(crate) ucx: Option<crate::ucx_serve::UcxServer>,
}

/// What `Shared::life` guards: the machine, and the generations whose ids it holds.
struct Life {
    machine: Generations,
    /// The generation agents arriving now are handed (the machine's current one).
    current: Option<Arc<Generation>>,
    /// Every generation an agent may still hold.
    all: Vec<Weak<Generation>>,
}

impl Life {
    fn find(&self, id: u64) -> Option<Arc<Generation>> {
        self.all.iter().filter_map(Weak::upgrade).find(|g| g.id() == id)
    }
}

impl Shared {
    /// A relay's shared state, before any generation: tokens from the configuration, `machine` fresh.
    pub(crate) fn new(config: Config, machine: Generations, shm_socket: Option<String>, store: Option<snapshot::Store>, #[cfg(feature = "ucx")] ucx: Option<crate::ucx_serve::UcxServer>) -> Shared {
        let tokens = std::iter::once(config.token.clone()).chain(config.extra_tokens.iter().cloned()).collect();
        let budget = admission::Budget {
            unauthenticated_max: limits::UNAUTHENTICATED_MAX,
            per_source_max: limits::UNAUTHENTICATED_PER_SOURCE_MAX,
            authenticated_max: config.connections_max,
            deadline: limits::UNAUTHENTICATED_DEADLINE,
        };
        let gate = admission::Gate::new("agents", budget);
        Shared {
            tokens: std::sync::RwLock::new(tokens),
            config,
            life: Mutex::new(Life { machine, current: None, all: Vec::new() }),
            changed: Condvar::new(),
            shm_socket,
            swarms: tracker::Swarms::default(),
            stats: stats::Stats::new(),
            gate,
            store,
            #[cfg(feature = "ucx")]
            ucx,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Life> {
        self.life.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Feed the machine one event and carry out what it decides, under the lock.
    pub(crate) fn feed<R>(&self, event: impl FnOnce(&mut Generations) -> (R, Vec<Action>)) -> R {
        let mut life = self.lock();
        let (r, actions) = event(&mut life.machine);
        self.carry_out(&mut life, actions);
        r
    }

    /// The one place generations are sealed, failed and released (so each is counted once).
    fn carry_out(&self, life: &mut Life, actions: Vec<Action>) {
        let mut wake = false;
        for action in actions {
            match action {
                Action::StartCapture | Action::TellWaiters => wake = true,
                Action::Complete { id } => {
                    if let Some(g) = life.find(id) {
                        g.record(State::Complete, None);
                    }
                }
                Action::Seal { id, reason } => {
                    self.stats.sealed(reason);
                    if let Some(g) = life.find(id) {
                        g.record(State::Sealed, Some(reason.describe()));
                        tracing::info!(generation = id, reason = reason.describe(), log_bytes = g.log_len(), "generation sealed");
                    }
                }
                Action::Fail { id, why } => {
                    if let Some(g) = life.find(id) {
                        g.record(State::Failed, Some(&why));
                    }
                }
                Action::CountFailure => stats::Stats::add(&self.stats.capture_failures, 1),
                Action::Release { id } => {
                    if life.current.as_ref().is_some_and(|g| g.id() == id) {
                        life.current = None;
                    }
                    stats::Stats::add(&self.stats.released_idle, 1);
                    let rdb_bytes = life.find(id).map(|g| g.descriptor(usize::MAX).0.published);
                    tracing::info!(generation = id, ?rdb_bytes, "released an idle generation; the next agent triggers a new capture");
                }
            }
        }
        if wake {
            self.changed.notify_all();
        }
    }

    /// A capture's RDB started: `gen` is the current generation, and waiting agents get it.
    pub(crate) fn publish(&self, gen: Arc<Generation>) {
        let mut life = self.lock();
        life.all.retain(|w| w.strong_count() > 0);
        life.all.push(Arc::downgrade(&gen));
        life.current = Some(gen.clone());
        let actions = life.machine.rdb_started(gen.id());
        self.carry_out(&mut life, actions);
    }

    /// Generation `id`'s RDB is complete.
    pub(crate) fn rdb_complete(&self, id: u64) {
        self.feed(|g| ((), g.rdb_complete(id)));
    }

    /// Generation `id`'s RDB could not be completed (a served file shrank).
    pub(crate) fn rdb_failed(&self, id: u64, why: String) {
        self.feed(|g| ((), g.rdb_failed(id, why)));
    }

    /// Generation `id`'s store file failed under it (`why` names the file and the operation): it fails,
    /// whatever its phase, and its agents are told.
    pub(crate) fn store_failed(&self, id: u64, why: String) {
        // Every request on a failed generation finds the fault again, several readers at once: the
        // check and the failing under one lock, so it is failed, told and counted once (checked
        // apart, two readers of one agent both counted it: a suite run saw 2).
        let mut life = self.lock();
        if life.find(id).is_none_or(|g| g.state() == State::Failed) {
            return;
        }
        tracing::error!(generation = id, error = %why, "the store failed under a published generation: failing it");
        stats::Stats::add(&self.stats.store_faults, 1);
        let actions = life.machine.store_failed(id, why);
        self.carry_out(&mut life, actions);
    }

    /// The relay is stopping (loops check it on every turn).
    pub(crate) fn stopping(&self) -> bool {
        self.lock().machine.stopped()
    }

    /// Whether capture `id` goes on (see [`Generations::capture_turn`]).
    pub(crate) fn capture_turn(&self, id: u64, master_changes: u64, rdb_done: bool) -> Turn {
        self.lock().machine.capture_turn(id, master_changes, rdb_done)
    }

    /// The current generation's id.
    pub(crate) fn current_id(&self) -> Option<u64> {
        self.lock().machine.current().map(|(id, _)| id)
    }

    /// How many captures failed so far, and why the last one did.
    pub(crate) fn capture_failures(&self) -> (u64, Option<generations::Failure>) {
        let life = self.lock();
        let (n, f) = life.machine.failures();
        (n, f.cloned())
    }

    /// The master agents are handed to now, and how many times it changed (read together).
    pub(crate) fn master_now(&self) -> (String, u64) {
        let life = self.lock();
        let (m, changes) = life.machine.master();
        (m.to_string(), changes)
    }

    /// The master agents are handed to now.
    pub(crate) fn master(&self) -> String {
        self.master_now().0
    }

    /// Sentinel named a new master: later captures read from it (or its replicas), and the current
    /// generation is sealed (its history is the old master's; agents already on it finish from it,
    /// and the new master knows it as its replid2).
    pub(crate) fn set_master(&self, new: &str) {
        let old = self.feed(|g| {
            let old = g.master().0.to_string();
            (old, g.master_changed(new.to_string()))
        });
        tracing::warn!(%old, %new, "Sentinel switched the master; the current generation is sealed, the next agent triggers a capture from the new master");
    }

    /// The tokens accepted now.
    pub(crate) fn tokens(&self) -> Vec<Token> {
        self.tokens.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Accept these tokens from now on.
    pub(crate) fn set_tokens(&self, tokens: Vec<Token>) {
        *self.tokens.write().unwrap_or_else(|p| p.into_inner()) = tokens;
    }

    /// Every generation still held (the current one and sealed ones agents still read).
    pub(crate) fn held(&self) -> Vec<Arc<Generation>> {
        self.lock().all.iter().filter_map(Weak::upgrade).collect()
    }

    /// An agent connection began (admitted by the gate, which holds `--connections-max`).
    pub(crate) fn connection_opened(&self) {
        self.lock().machine.connection_opened(Instant::now())
    }

    /// Agent connections open now.
    pub(crate) fn connections(&self) -> usize {
        self.lock().machine.connections()
    }

    /// An agent connection ended.
    pub(crate) fn connection_closed(&self) {
        self.lock().machine.connection_closed(Instant::now());
    }

    /// Time passed (`--idle-release-secs` is decided by the machine).
    pub(crate) fn idle_tick(&self) {
        self.feed(|g| ((), g.idle_tick(Instant::now())));
    }

    /// The capture thread waits until a capture is wanted (`Some(id)`) or the relay stops (`None`),
    /// ticking the machine meanwhile.
    pub(crate) fn wait_to_capture(&self) -> Option<u64> {
        let mut life = self.lock();
        loop {
            match life.machine.next_capture() {
                Next::Capture(id) => return Some(id),
                Next::Stop => return None,
                Next::Wait => {}
            }
            life = self.changed.wait_timeout(life, limits::IDLE_RELEASE_TICK).unwrap_or_else(|p| p.into_inner()).0;
            let actions = life.machine.idle_tick(Instant::now());
            self.carry_out(&mut life, actions);
        }
    }

    /// An agent needs a snapshot at `min_offset` or later and holds `gen` (see
    /// [`generations::Generations::renew`]).
    pub(crate) fn renew(&self, gen: &Generation, min_offset: u64) -> transport::wire::Renewal {
        let renewed = self.feed(|m| m.renew(gen.id(), gen.offset(), min_offset));
        match renewed {
            generations::Renewed::Sealed => transport::wire::Renewal::Sealed,
            generations::Renewed::Newer => transport::wire::Renewal::Newer,
            generations::Renewed::FreshEnough => transport::wire::Renewal::FreshEnough,
        }
    }

    /// Where a new agent begins waiting for a generation.
    pub(crate) fn ticket(&self) -> Ticket {
        self.lock().machine.ticket()
    }

    /// A new agent waits (up to `timeout`) for a generation it may use; `Err` says why it has none
    /// ([`Answer::Wait`]: not yet).
    pub(crate) fn generation_for_agent(&self, ticket: Ticket, timeout: Duration) -> Result<Arc<Generation>, Answer> {
        let deadline = Instant::now() + timeout;
        let mut life = self.lock();
        loop {
            let (answer, actions) = life.machine.want(ticket);
            self.carry_out(&mut life, actions);
            match answer {
                Answer::Ready(id) => match life.current.clone() {
                    Some(g) if g.id() == id => return Ok(g),
                    _ => return Err(Answer::Wait),
                },
                Answer::Wait => {}
                other => return Err(other),
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(Answer::Wait);
            }
            life = self.changed.wait_timeout(life, deadline - now).unwrap_or_else(|p| p.into_inner()).0;
        }
    }

    /// The transports this relay offers.
    pub(crate) fn offered(&self) -> Vec<transport::TransportKind> {
        let mut v = Vec::new();
        if self.shm_socket.is_some() {
            v.push(transport::TransportKind::Shm);
        }
        #[cfg(feature = "ucx")]
        if self.ucx.is_some() {
            v.push(transport::TransportKind::Ucx);
        }
        if self.config.offer.tcp {
            v.push(transport::TransportKind::Tcp);
        }
        v
    }

    /// The TCP addresses UCX listens on (empty without ucx).
    pub(crate) fn ucx_listeners(&self) -> Vec<std::net::SocketAddr> {
        #[cfg(feature = "ucx")]
        if let Some(u) = &self.ucx {
            return u.listeners();
        }
        Vec::new()
    }

    /// Times the UCX side process was started again (0 without ucx).
    pub(crate) fn ucx_side_restarts(&self) -> u64 {
        #[cfg(feature = "ucx")]
        if let Some(u) = &self.ucx {
            return u.restarts();
        }
        0
    }

    pub(crate) fn ucx_transports(&self) -> Vec<String> {
        #[cfg(feature = "ucx")]
        if let Some(u) = &self.ucx {
            return u.transports();
        }
        Vec::new()
    }

    /// The UCX remote key of one segment of `gen`, serialized for the agent.
    pub(crate) fn ucx_key(&self, gen: &Arc<Generation>, segment: u64) -> Result<Vec<u8>, Error> {
        #[cfg(feature = "ucx")]
        if let Some(u) = &self.ucx {
            return u.key(gen, segment).map_err(Error::Ucx);
        }
        let _ = (gen, segment);
        Err(Error::NotOffered("ucx"))
    }

    /// Generation `id` if anyone still holds it.
    pub(crate) fn find(&self, id: u64) -> Option<Arc<Generation>> {
        self.lock().find(id)
    }
}
