//! Serving agents: every connection authenticates first; control connections get the descriptor and
//! its changes pushed, data connections get range reads.

use crate::generations::Answer;
use crate::shared::Shared;
use crate::stats::{ErrorKind, Stats};
use crate::tracker;
use snapshot::Generation;
use std::net::{TcpListener, TcpStream};
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;
use transport::auth::{self, Kind};
use transport::wire::{self, Control, Request};
use transport::{serve as reply, Error, TransportKind};

use admission::{Pass, Refusal, Shut, Source};
use limits::{DATA_IDLE_MAX, DESCRIPTOR_PUSH_GAP, GENERATION_WAIT_MAX as GENERATION_WAIT, HEARTBEAT, UNAUTHENTICATED_DEADLINE};

/// A connection agents read over: TCP (plain or TLS), or the shm transport's unix socket.
pub(crate) trait DataStream: std::io::Read + std::io::Write {
    /// Range reads over this stream are the tcp transport (so only served when tcp is offered).
    const IS_TCP: bool;
    /// Answer a shm attach: only possible over a unix socket.
    fn attach_shm(&mut self, gen: &Generation) -> Result<(), Error>;
    /// The address the peer is seen at (TCP only).
    fn peer_ip(&self) -> Option<std::net::IpAddr>;
    /// Answer a range read from the region.
    fn send_range(&mut self, file: &std::fs::File, offset: u64, len: u32) -> Result<(), Error>;
}

impl DataStream for TcpStream {
    const IS_TCP: bool = true;
    fn attach_shm(&mut self, _: &Generation) -> Result<(), Error> {
        reply::send_error(self, "shared memory is offered only over the relay's unix socket")
    }
    fn peer_ip(&self) -> Option<std::net::IpAddr> {
        self.peer_addr().ok().map(|a| a.ip())
    }
    fn send_range(&mut self, file: &std::fs::File, offset: u64, len: u32) -> Result<(), Error> {
        reply::send_range(self, file, offset, len)
    }
}

/// An agent's connection over TLS (`--agents-tls-cert`).
type TlsStream = rustls::StreamOwned<rustls::ServerConnection, TcpStream>;

impl DataStream for TlsStream {
    const IS_TCP: bool = true;
    fn attach_shm(&mut self, _: &Generation) -> Result<(), Error> {
        reply::send_error(self, "shared memory is offered only over the relay's unix socket")
    }
    fn peer_ip(&self) -> Option<std::net::IpAddr> {
        self.get_ref().peer_addr().ok().map(|a| a.ip())
    }
    fn send_range(&mut self, file: &std::fs::File, offset: u64, len: u32) -> Result<(), Error> {
        reply::send_range_copied(self, file, offset, len)
    }
}

impl DataStream for UnixStream {
    const IS_TCP: bool = false;
    fn attach_shm(&mut self, gen: &Generation) -> Result<(), Error> {
        reply::send_region(self, gen.region())
    }
    fn peer_ip(&self) -> Option<std::net::IpAddr> {
        None
    }
    fn send_range(&mut self, file: &std::fs::File, offset: u64, len: u32) -> Result<(), Error> {
        reply::send_range(self, file, offset, len)
    }
}

/// Serve the agents' TCP port: control and data connections.
pub(crate) fn accept_loop(shared: Arc<Shared>, listener: TcpListener) {
    let source = Source::of_tcp;
    let handle = |s: &TcpStream| s.try_clone().map(|c| Box::new(c) as Box<dyn Shut>);
    let peer = |s: &TcpStream| s.peer_addr().map(|a| a.to_string()).unwrap_or_else(|_| "?".into());
    accept_each(&shared, listener.incoming(), source, peer, handle, "agent-conn", serve_connection);
}

/// Serve the shm transport's unix socket: data connections only.
pub(crate) fn accept_unix_loop(shared: Arc<Shared>, listener: UnixListener) {
    let handle = |s: &UnixStream| s.try_clone().map(|c| Box::new(c) as Box<dyn Shut>);
    accept_each(&shared, listener.incoming(), local_user, |_| "shm".to_string(), handle, "agent-shm", serve_shm_connection);
}

/// A unix socket's peer by its user id: the abstract socket has no permissions, so any local
/// process may connect; keyed by user, one that is not the agents' fills only its own share of
/// the strangers' budget.
fn local_user(s: &UnixStream) -> Source {
    use std::os::fd::AsRawFd;
    let mut cred = libc::ucred { pid: 0, uid: 0, gid: 0 };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: the descriptor is the live socket `s` owns; `cred` and `len` are valid for writes of
    // the size `len` says, which is what SO_PEERCRED writes at most.
    let r = unsafe { libc::getsockopt(s.as_raw_fd(), libc::SOL_SOCKET, libc::SO_PEERCRED, (&mut cred as *mut libc::ucred).cast(), &mut len) };
    if r == 0 && len as usize == std::mem::size_of::<libc::ucred>() {
        Source::LocalUser(cred.uid)
    } else {
        Source::Local
    }
}

/// Accept until the relay stops, serving each connection on its own thread: admitted by the
/// relay's [`admission::Gate`] (strangers in a budget of their own, with a deadline; at most
/// `connections_max` authenticated).
fn accept_each<S: Send + 'static>(
    shared: &Arc<Shared>,
    conns: impl Iterator<Item = std::io::Result<S>>,
    source_of: impl Fn(&S) -> Source,
    peer_of: impl Fn(&S) -> String,
    handle_of: impl Fn(&S) -> std::io::Result<Box<dyn Shut>>,
    thread: &str,
    serve: fn(&Shared, S, &mut Pass) -> Result<(), ConnError>,
) {
    let mut failures = 0u64;
    for conn in conns {
        if shared.stopping() {
            break;
        }
        let s = match conn.and_then(|s| handle_of(&s).map(|h| (s, h))) {
            Ok(s) => s,
            Err(e) => {
                // Out of descriptors, most likely: said now and then, not once per connection.
                failures += 1;
                if failures.is_power_of_two() {
                    tracing::warn!(error = %e, thread, failures, "accept failed");
                }
                std::thread::sleep(limits::ACCEPT_FAILURE_PAUSE); // A pause before the next accept, not synchronization.
                continue;
            }
        };
        let (s, handle) = s;
        let source = source_of(&s);
        let peer = peer_of(&s);
        let mut pass = shared.gate.arrive(handle, source);
        let sh = shared.clone();
        let spawned = std::thread::Builder::new().name(thread.into()).spawn(move || {
            let span = tracing::info_span!("agent", %peer);
            let _g = span.enter();
            if let Err(e) = serve(&sh, s, &mut pass) {
                ended(&sh.stats, &pass, &e);
            }
        });
        if let Err(e) = spawned {
            tracing::error!(error = %e, "spawn connection thread");
        }
    }
}

/// Count and log how a connection ended badly: before authenticating through the gate (counted by
/// kind, logged at a bounded rate), after it one line each.
fn ended(st: &Stats, pass: &Pass, e: &ConnError) {
    match e.class() {
        Class::Refused => {}
        Class::Auth if e.before_auth() => {
            st.error(ErrorKind::Auth);
            pass.failed(Refusal::Auth, e);
        }
        Class::Protocol if e.before_auth() => {
            st.error(ErrorKind::Protocol);
            pass.failed(Refusal::Protocol, e);
        }
        Class::ClosedBeforeAuth => pass.failed(Refusal::Closed, e),
        // Usually the reaper shut it at its deadline first (and counted it then, not here).
        Class::LateBeforeAuth => pass.failed(Refusal::Deadline, e),
        Class::Auth => {
            st.error(ErrorKind::Auth);
            tracing::warn!(error = %e, "closed connection")
        }
        Class::Protocol => {
            st.error(ErrorKind::Protocol);
            tracing::warn!(error = %e, "closed connection")
        }
        Class::Io => {
            st.error(ErrorKind::Io);
            tracing::info!(error = %e, "connection ended")
        }
    }
}

/// Why a connection ended badly: at the authentication exchange, or after it.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ConnError {
    /// The authentication exchange failed (a wrong token, not an agent, a failed TLS handshake, or
    /// closed before a word).
    #[error("authenticate the agent: {0}")]
    Authenticating(#[source] Error),
    /// It authenticated, and the gate refused it (counted and logged there).
    #[error("refused after authenticating: {0}")]
    Refused(Refusal),
    /// Serving the connection failed.
    #[error(transparent)]
    Serving(#[from] Error),
}

/// How a connection's end is counted and logged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    Auth,
    Protocol,
    /// A socket error before the agent said anything: a port probe, most likely.
    ClosedBeforeAuth,
    /// A read that timed out before it authenticated: it is past its deadline.
    LateBeforeAuth,
    Io,
    /// Counted by the gate already.
    Refused,
}

impl ConnError {
    fn class(&self) -> Class {
        match self {
            // By admission's one rule (a TLS handshake with bytes that are not TLS is the protocol).
            ConnError::Authenticating(Error::Io { source, .. }) => match Refusal::of_io(source) {
                Refusal::Protocol => Class::Protocol,
                Refusal::Deadline => Class::LateBeforeAuth,
                _ => Class::ClosedBeforeAuth,
            },
            ConnError::Authenticating(Error::Auth(_)) | ConnError::Serving(Error::Auth(_)) => Class::Auth,
            ConnError::Authenticating(Error::Protocol(_)) | ConnError::Serving(Error::Protocol(_)) => Class::Protocol,
            ConnError::Refused(_) => Class::Refused,
            _ => Class::Io,
        }
    }

    fn before_auth(&self) -> bool {
        matches!(self, ConnError::Authenticating(_))
    }
}

/// An authenticated connection, counted (for `status` and the idle release) while it lasts.
struct Open<'a>(&'a Shared);

impl<'a> Open<'a> {
    /// `pass` authenticated: served, or refused by the gate at `--connections-max`.
    fn new(shared: &'a Shared, pass: &mut Pass) -> Result<Open<'a>, ConnError> {
        pass.authenticated().map_err(ConnError::Refused)?;
        shared.connection_opened();
        Ok(Open(shared))
    }
}

impl Drop for Open<'_> {
    fn drop(&mut self) {
        self.0.connection_closed();
    }
}

fn serve_shm_connection(shared: &Shared, mut s: UnixStream, pass: &mut Pass) -> Result<(), ConnError> {
    s.set_read_timeout(Some(UNAUTHENTICATED_DEADLINE)).map_err(Error::io(transport::Operation::ConfigureSocket))?;
    s.set_write_timeout(Some(limits::IO_TIMEOUT)).map_err(Error::io(transport::Operation::ConfigureSocket))?;
    let kind = auth::server_any(&mut s, &shared.tokens()).map_err(ConnError::Authenticating)?;
    let _open = Open::new(shared, pass)?;
    match kind {
        Kind::Data => {
            s.set_read_timeout(Some(DATA_IDLE_MAX)).map_err(Error::io(transport::Operation::ConfigureSocket))?;
            Ok(serve_data(shared, s)?)
        }
        Kind::Control | Kind::Status => Err(Error::Protocol("control and status connections go over TCP, not the shm socket".into()).into()),
    }
}

fn serve_connection(shared: &Shared, s: TcpStream, pass: &mut Pass) -> Result<(), ConnError> {
    // Per read; the reaper bounds the whole handshake (UNAUTHENTICATED_DEADLINE from the accept).
    s.set_read_timeout(Some(UNAUTHENTICATED_DEADLINE)).map_err(Error::io(transport::Operation::ConfigureSocket))?;
    s.set_write_timeout(Some(limits::IO_TIMEOUT)).map_err(Error::io(transport::Operation::ConfigureSocket))?;
    s.set_nodelay(true).map_err(Error::io(transport::Operation::ConfigureSocket))?;
    let raw = s.try_clone().map_err(Error::io(transport::Operation::CloneSocket))?;
    match &shared.config.agents_tls {
        None => serve_authenticated(shared, s, raw, pass),
        // The handshake is bounded by the gate's deadline, like the authentication after it.
        Some(cfg) => {
            let tls = transport::tls::accept(cfg, s).map_err(|e| ConnError::Authenticating(Error::Io { op: transport::Operation::TlsHandshakeWithAgent, source: e }))?;
            serve_authenticated(shared, tls, raw, pass)
        }
    }
}

/// Authenticate, then serve the connection's kind. `raw` is the TCP socket under `s` (timeouts,
/// addresses, and noticing a control connection's agent leave).
fn serve_authenticated<S: DataStream>(shared: &Shared, mut s: S, raw: TcpStream, pass: &mut Pass) -> Result<(), ConnError> {
    let kind = auth::server_any(&mut s, &shared.tokens()).map_err(ConnError::Authenticating)?;
    let _open = Open::new(shared, pass)?;
    Ok(match kind {
        Kind::Control => serve_control(shared, s, &raw),
        Kind::Status => {
            let local = raw.local_addr().map_err(Error::io(transport::Operation::LocalAddress))?;
            let status = crate::status::status(shared, local);
            wire::send_control(&mut s, &Control::Status(Box::new(status)))
        }
        Kind::Data => {
            raw.set_read_timeout(Some(DATA_IDLE_MAX)).map_err(Error::io(transport::Operation::ConfigureSocket))?;
            serve_data(shared, s)
        }
    }?)
}

/// Has the agent of a control connection left? It sends nothing on it, so bytes waiting or EOF mean
/// it is gone (over TLS the bytes are its close_notify). Peeks without blocking or consuming.
fn agent_left(raw: &TcpStream) -> Result<bool, Error> {
    let mut b = [0u8; 1];
    match rustix::net::recv(raw, &mut b, rustix::net::RecvFlags::PEEK | rustix::net::RecvFlags::DONTWAIT) {
        Ok((0, _)) => Ok(true),
        Ok(_) => Ok(true),
        Err(rustix::io::Errno::AGAIN) => Ok(false),
        Err(rustix::io::Errno::INTR) => Ok(false),
        Err(e) => Err(Error::Io { op: transport::Operation::WatchControlConnection, source: e.into() }),
    }
}

fn serve_control<S: std::io::Write>(shared: &Shared, mut s: S, raw: &TcpStream) -> Result<(), Error> {
    wire::send_control(
        &mut s,
        &Control::Hello {
            master: shared.master(),
            transports: shared.offered(),
            relay_version: env!("CARGO_PKG_VERSION").into(),
            shm_socket: shared.shm_socket.clone(),
            ucx_transports: shared.ucx_transports(),
        },
    )?;
    // Wait for a usable generation, heartbeating so the agent knows we are alive.
    let deadline = Instant::now() + GENERATION_WAIT;
    let ticket = shared.ticket();
    let gen: Arc<Generation> = loop {
        match shared.generation_for_agent(ticket, HEARTBEAT) {
            Ok(g) => break g,
            // A capture tried for this agent failed: say why now rather than after GENERATION_WAIT (a
            // master that is down, a snapshot over --snapshot-max-bytes). The agent decides to retry.
            Err(Answer::CaptureFailed(f)) => {
                tracing::warn!(error = %f.why, kind = %f.kind, "no snapshot for a waiting agent: the capture failed");
                wire::send_control(&mut s, &Control::CaptureFailed { kind: f.kind, message: f.why })?;
                return Ok(());
            }
            Err(_) => {}
        }
        if Instant::now() >= deadline || shared.stopping() {
            wire::send_control(&mut s, &Control::Error("no snapshot available from the master (see the relay's log)".into()))?;
            return Ok(());
        }
        wire::send_control(&mut s, &Control::Heartbeat)?;
    };
    tracing::info!(generation = gen.id(), "agent attached");
    let _attached = Attached::new(&shared.stats);
    let mut sent_entries = 0;
    let mut sent_version = u64::MAX;
    // A table longer than one message goes out in parts, one right after the other.
    let mut more = false;
    loop {
        let (d, version) = gen.descriptor_part(sent_entries, limits::DESCRIPTOR_ENTRIES_MAX);
        if version != sent_version || more {
            // A full part may have been the last one: then the next is empty, which an agent takes.
            more = d.table.len() == limits::DESCRIPTOR_ENTRIES_MAX;
            sent_entries += d.table.len();
            sent_version = version;
            wire::send_control(&mut s, &Control::Descriptor(d.into()))?;
        } else {
            wire::send_control(&mut s, &Control::Heartbeat)?;
        }
        if agent_left(raw)? {
            return Ok(());
        }
        if shared.stopping() {
            return Ok(());
        }
        if more {
            continue;
        }
        // Coalesce bursts of changes (a block every few ms) into one push.
        gen.wait_change(version, HEARTBEAT);
        std::thread::sleep(DESCRIPTOR_PUSH_GAP); // Rate limit for pushes, not synchronization.
    }
}

/// An agent attached to a generation (its control connection), counted while it lasts.
struct Attached<'a>(&'a Stats);

impl<'a> Attached<'a> {
    fn new(stats: &'a Stats) -> Attached<'a> {
        Stats::add(&stats.agents_attached, 1);
        Stats::add(&stats.agents_attached_total, 1);
        Attached(stats)
    }
}

impl Drop for Attached<'_> {
    fn drop(&mut self) {
        self.0.agents_attached.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A data connection's membership of a generation's swarm: it leaves when the connection ends, however
/// it ends (the agent finished, failed, or was killed).
struct Membership<'a> {
    shared: &'a Shared,
    generation: u64,
    id: u32,
}

impl Drop for Membership<'_> {
    fn drop(&mut self) {
        self.shared.swarms.leave(self.generation, self.id);
    }
}

fn serve_data<S: DataStream>(shared: &Shared, mut s: S) -> Result<(), Error> {
    let mut cached: Option<Arc<Generation>> = None;
    let mut member: Option<Membership<'_>> = None;
    loop {
        let Some(req) = wire::read_request(&mut s)? else { return Ok(()) };
        // Requests with a body: read it whole (bounded by the decode) before anything else.
        let mut body = vec![0u8; req.body_len() as usize];
        s.read_exact(&mut body).map_err(Error::io(transport::Operation::ReadRequestBody))?;
        let id = req.generation();
        // Counted whatever the relay holds now: the join may have outlived its generation.
        if let Request::Ended { outcome, .. } = req {
            shared.stats.join_ended(outcome);
            tracing::info!(generation = id, %outcome, "an agent's join ended");
            reply::send_bytes(&mut s, &[])?;
            continue;
        }
        if cached.as_ref().map(|g| g.id()) != Some(id) {
            cached = shared.find(id);
        }
        let Some(gen) = cached.as_ref() else {
            reply::send_error(&mut s, &format!("generation {id} is not held by this relay"))?;
            continue;
        };
        match req {
            // `--transport shm|ucx` means what it says: block reads over TCP are refused. (Log reads and
            // ucx attaches still use the TCP data connection.)
            Request::Range { .. } if S::IS_TCP && !shared.config.offer.tcp => reply::send_error(&mut s, "this relay does not offer tcp block reads (see its --transport)")?,
            Request::Range { offset, len, .. } => match gen.check_readable(offset, u64::from(len)).and_then(|()| gen.check_stored(offset, u64::from(len))) {
                Err(e @ snapshot::Error::Store(_)) => {
                    shared.store_failed(id, e.to_string());
                    reply::send_error(&mut s, &e.to_string())?
                }
                Ok(()) => {
                    s.send_range(gen.region().file(), offset, len)?;
                    if S::IS_TCP {
                        shared.stats.served(TransportKind::Tcp, u64::from(len));
                    }
                }
                Err(e) => reply::send_error(&mut s, &e.to_string())?,
            },
            // At most one chunk per answer, whatever was asked (an answer may be shorter than asked):
            // what a connection holds stays within the relay's memory bound.
            Request::Log { from, max, .. } => match gen.read_log(from, (max as usize).min(limits::LOG_CHUNK_BYTES as usize)) {
                Err(e @ snapshot::Error::Store(_)) => {
                    shared.store_failed(id, e.to_string());
                    reply::send_error(&mut s, &e.to_string())?
                }
                Ok(bytes) => {
                    reply::send_bytes(&mut s, &bytes)?;
                    Stats::add(&shared.stats.log_bytes_served, bytes.len() as u64);
                }
                Err(e) => reply::send_error(&mut s, &e.to_string())?,
            },
            Request::Attach { transport: wire::AttachKind::Shm, .. } => {
                s.attach_shm(gen)?;
                shared.stats.attached(TransportKind::Shm);
            }
            Request::Attach { arg: segment, .. } => match shared.ucx_key(gen, segment) {
                Ok(bytes) => {
                    reply::send_bytes(&mut s, &bytes)?;
                    shared.stats.attached(TransportKind::Ucx);
                }
                Err(e) => reply::send_error(&mut s, &e.to_string())?,
            },
            Request::Register { port, serves, local, .. } => answer_swarm(shared, &mut s, gen, Swarm::Register { port, serves, local }, &body, &mut member)?,
            Request::Locate { .. } => answer_swarm(shared, &mut s, gen, Swarm::Locate, &body, &mut member)?,
            Request::Have { block, .. } => answer_swarm(shared, &mut s, gen, Swarm::Have { block }, &body, &mut member)?,
            Request::Arriving { block, .. } => answer_swarm(shared, &mut s, gen, Swarm::Arriving { block }, &body, &mut member)?,
            Request::NotAt { block, peer, .. } => answer_swarm(shared, &mut s, gen, Swarm::NotAt { block, peer }, &body, &mut member)?,
            Request::Needed { .. } => answer_swarm(shared, &mut s, gen, Swarm::Needed, &body, &mut member)?,
            Request::Load { uploads, arrived, .. } => answer_swarm(shared, &mut s, gen, Swarm::Load { uploads, arrived }, &body, &mut member)?,
            // Answered before the generation was looked up (the loop went on from there).
            Request::Ended { .. } => {}
            Request::Renew { min_offset, .. } => {
                let renewal = shared.renew(gen, min_offset);
                tracing::info!(generation = gen.id(), offset = gen.offset(), min_offset, ?renewal, "an agent asked for a snapshot at or after an offset");
                reply::send_bytes(&mut s, &[renewal.byte()])?
            }
        }
    }
}

/// Answer a swarm request: its bytes, or the refusal.
fn answer_swarm<'a, S: DataStream>(shared: &'a Shared, s: &mut S, gen: &Generation, req: Swarm, body: &[u8], member: &mut Option<Membership<'a>>) -> Result<(), Error> {
    match swarm_request(shared, s, gen, req, body, member)? {
        Ok(bytes) => reply::send_bytes(s, &bytes),
        Err(message) => reply::send_error(s, &message),
    }
}

/// The requests of a generation's swarm (see [`tracker`]), told apart from reads by `serve_data`'s
/// one match, with what each carries besides its generation.
#[derive(Debug, Clone, Copy)]
enum Swarm {
    Register { port: u16, serves: bool, local: bool },
    Locate,
    Have { block: u64 },
    Arriving { block: u64 },
    NotAt { block: u64, peer: u32 },
    Needed,
    Load { uploads: u32, arrived: u32 },
}

/// What a swarm request is answered: the bytes of a success, or a refusal. A connection registers once; the
/// other swarm requests need a registration for the same generation.
fn swarm_request<'a, S: DataStream>(shared: &'a Shared, s: &S, gen: &Generation, req: Swarm, body: &[u8], member: &mut Option<Membership<'a>>) -> Result<Result<Vec<u8>, String>, Error> {
    let (published, total) = gen.blocks();
    let me = member.as_ref().filter(|m| m.generation == gen.id()).map(|m| m.id);
    Ok(match (req, me) {
        (Swarm::Register { .. }, _) if member.is_some() => Err("this connection is already registered".to_string()),
        (Swarm::Register { port, serves, local }, _) => {
            let advertise = if body.is_empty() { None } else { Some(transport::wire::swarm::check_addr(body)?) };
            let Some(seen_at) = s.peer_ip() else {
                return Ok(Err("swarm registration goes over TCP".into()));
            };
            if serves && port == 0 && advertise.is_none() {
                return Ok(Err("a serving agent must give its port".into()));
            }
            let id = shared.swarms.register(gen.id(), seen_at, tracker::Member { port, serves, local, advertise }, published);
            tracing::info!(generation = gen.id(), agent = id, serves, local, "agent joined the swarm");
            *member = Some(Membership { shared, generation: gen.id(), id });
            Ok(id.to_be_bytes().to_vec())
        }
        (_, None) => Err("register with this generation's swarm first".to_string()),
        (Swarm::Locate, Some(id)) => {
            let ask = transport::wire::swarm::Locate::decode(body)?;
            let answers = shared.swarms.locate(gen.id(), id, &ask, published, total, Instant::now());
            Ok(transport::wire::swarm::encode_located(&answers))
        }
        (Swarm::Have { block }, Some(id)) if block < published => {
            shared.swarms.have(gen.id(), id, block);
            Ok(Vec::new())
        }
        (Swarm::Have { block }, Some(_)) => Err(format!("block {block} is not published")),
        (Swarm::Arriving { block }, Some(id)) if block < published => {
            shared.swarms.arriving(gen.id(), id, block);
            Ok(Vec::new())
        }
        (Swarm::Arriving { block }, Some(_)) => Err(format!("block {block} is not published")),
        (Swarm::NotAt { block, peer }, Some(id)) => {
            shared.swarms.not_at(gen.id(), id, peer, block);
            Ok(Vec::new())
        }
        (Swarm::Needed, Some(id)) => Ok((shared.swarms.needing(gen.id(), id, total) as u32).to_be_bytes().to_vec()),
        (Swarm::Load { uploads, arrived }, Some(id)) => {
            shared.swarms.load(gen.id(), id, uploads, arrived);
            Ok(Vec::new())
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_unix_peer_is_told_by_its_user() {
        let (a, _b) = UnixStream::pair().unwrap();
        // SAFETY: getuid has no preconditions and cannot fail.
        let me = unsafe { libc::getuid() };
        assert_eq!(local_user(&a), Source::LocalUser(me));
    }

    fn io() -> Error {
        Error::Io { op: transport::Operation::ReadDataRequest, source: std::io::ErrorKind::UnexpectedEof.into() }
    }

    #[test]
    fn a_socket_error_is_a_probe_only_before_authentication() {
        assert_eq!(ConnError::Authenticating(io()).class(), Class::ClosedBeforeAuth);
        assert_eq!(ConnError::Serving(io()).class(), Class::Io);
        assert_eq!(ConnError::Authenticating(Error::Auth("wrong token".into())).class(), Class::Auth);
        assert_eq!(ConnError::Authenticating(Error::Protocol("bad magic".into())).class(), Class::Protocol);
        assert_eq!(ConnError::Serving(Error::Protocol("bad request".into())).class(), Class::Protocol);
        // Bytes that are not TLS on a TLS relay are not our protocol, not a probe; the gate's refusals
        // are counted there, not again.
        let not_tls = Error::Io { op: transport::Operation::TlsHandshakeWithAgent, source: std::io::ErrorKind::InvalidData.into() };
        assert_eq!(ConnError::Authenticating(not_tls).class(), Class::Protocol);
        assert_eq!(ConnError::Refused(Refusal::Full).class(), Class::Refused);
        // A read timing out before authentication is the deadline, not a probe that closed.
        for kind in [std::io::ErrorKind::WouldBlock, std::io::ErrorKind::TimedOut] {
            let late = Error::Io { op: transport::Operation::ReadAgentAuthentication, source: kind.into() };
            assert_eq!(ConnError::Authenticating(late).class(), Class::LateBeforeAuth);
        }
        assert!(ConnError::Authenticating(io()).before_auth() && !ConnError::Serving(io()).before_auth());
    }
}
