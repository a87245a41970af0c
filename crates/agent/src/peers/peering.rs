//! An agent as a member of its generation's swarm ([`Peering`]): its link to the relay's tracker, the
//! blocks it holds ([`Held`]) and the server that gives them to other agents ([`PeerServer`]).

use crate::config::PeerConfig;
use crate::error::Error;
use crate::peers::held::Held;
use crate::peers::peer_server::PeerServer;
use crate::peers::tracker_link;
use endpoint::Endpoint;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use transport::tracker::{Registration, TrackerLink};
use transport::Credentials;

/// An agent's membership of its generation's swarm: the tracker link, the held blocks, the server.
pub struct Peering {
    /// The tracker link: during a pull, the pipeline's tracker-link thread asks and tells on it, and
    /// after it the linger; the load reporter, for its reports. Each holds the lock to send or to read
    /// an answer that has begun to arrive, not for a round trip.
    pub(crate) tracker: Arc<Mutex<TrackerLink>>,
    /// Verified blocks.
    pub(crate) held: Arc<Held>,
    /// The relay's token, for peer connections.
    pub(crate) token: Credentials,
    server: Option<PeerServer>,
    /// The thread that reports this agent's upload load while it serves.
    reporter: Option<std::thread::JoinHandle<()>>,
    id: u32,
}

impl Drop for Peering {
    fn drop(&mut self) {
        // The server's stop wakes the reporter; then the link closes with the last of its users.
        drop(self.server.take());
        if let Some(r) = self.reporter.take() {
            let _ = r.join();
        }
    }
}

impl Peering {
    /// Join the swarm of `generation` at the relay `relay`. `local`: this agent reads the relay over
    /// shared memory.
    pub fn join(relay: &Endpoint, token: &Credentials, generation: u64, block_size: u64, local: bool, cfg: &PeerConfig) -> Result<Peering, Error> {
        let mut link = TrackerLink::connect(relay, token, limits::CONNECT_TIMEOUT).map_err(Error::relay)?;
        // Under a TLS relay the snapshot never travels in the clear: serve peers over TLS, or not at all.
        let serve = cfg.serve && token.relay_tls().is_none_or(|t| t.peer_server().is_some());
        let cache = if serve { cfg.cache_bytes } else { 0 };
        // A seed of this process's own, so that the agents of a fleet keep different old blocks.
        let keep = swarm::Keep::new(std::hash::BuildHasher::hash_one(&std::collections::hash_map::RandomState::new(), generation));
        let held = Arc::new(Held::new(generation, block_size, cache, keep));
        let server = if serve {
            let listen = match cfg.listen {
                Some(l) => l,
                None => SocketAddr::new(link.local_ip().map_err(Error::relay)?, 0),
            };
            Some(PeerServer::start(listen, token.clone(), held.clone(), swarm::UPLOADS_MAX)?)
        } else {
            None
        };
        let reg = Registration { port: server.as_ref().map_or(0, |s| s.local_addr().port()), serves: serve, local, advertise: cfg.advertise.clone() };
        let id = link.register(generation, &reg).map_err(Error::relay)?;
        if let Some(s) = &server {
            tracing::info!(agent = id, listen = %s.local_addr(), advertise = cfg.advertise.as_deref().unwrap_or(""), "joined the swarm; serving peers");
        }
        let tracker = Arc::new(Mutex::new(link));
        let reporter = match &server {
            Some(s) => Some(s.start_load_reporter(tracker.clone())?),
            None => None,
        };
        Ok(Peering { tracker, held, token: token.clone(), server, reporter, id })
    }

    /// Our number in the swarm.
    pub fn id(&self) -> u32 {
        self.id
    }

    /// Where this agent serves peers.
    pub fn listen_addr(&self) -> Option<SocketAddr> {
        self.server.as_ref().map(PeerServer::local_addr)
    }

    /// This agent serves what it holds.
    pub fn serves(&self) -> bool {
        self.server.is_some()
    }

    /// Uploads to peers in progress now (0 when not serving).
    pub fn uploads(&self) -> usize {
        self.server.as_ref().map_or(0, PeerServer::uploads)
    }

    /// Bytes served to peers so far.
    pub fn served_bytes(&self) -> u64 {
        self.server.as_ref().map_or(0, |s| s.served.load(Ordering::Relaxed))
    }

    pub(crate) fn tracker(&self) -> std::sync::MutexGuard<'_, TrackerLink> {
        tracker_link::lock(&self.tracker)
    }

    /// Other agents still missing blocks, asked of the tracker without holding the link for the round
    /// trip (the load reporter shares it): the thread waits on the link's socket meanwhile. A question
    /// that fails or goes unanswered closes the link ([`TrackerLink::close`]).
    fn needed(&self) -> Result<u32, transport::Error> {
        let got = self.ask_needed();
        if got.is_err() {
            // The linger ends here: closed, the link ends the membership at the relay now rather than
            // when the agent is done. (A refusal on this link is for good too: the relay refuses a
            // generation it no longer holds, or an agent not registered.)
            self.tracker().close();
        }
        got
    }

    /// [`Peering::needed`]'s question and its answer.
    fn ask_needed(&self) -> Result<u32, transport::Error> {
        let socket = {
            let mut link = self.tracker();
            // Its answer is the next wanted one only when no other question is out (the pull's, given
            // up when it ended): as `TrackerLink::needed` refuses.
            if link.questions_owed() > 0 {
                return Err(transport::Error::Protocol(format!("tracker link: needed asked while {} earlier questions are unanswered", link.questions_owed())));
            }
            let socket = link.socket()?;
            link.ask_needed()?;
            socket
        };
        loop {
            // Polled, then the lock let go before waiting (a guard in the `match` itself would live
            // through the wait below, and hold the load reporter back for the round trip).
            let polled = self.tracker().poll_answer();
            match polled {
                Ok(Some(transport::tracker::Answer::Needed(n))) => break Ok(n),
                Ok(Some(transport::tracker::Answer::Located(_))) => break Err(transport::Error::Protocol("tracker link: a locate answer where a needed's was due".into())),
                Ok(None) => {
                    if let Err(e) = tracker_link::wait(&[std::os::fd::AsFd::as_fd(&socket)], tracker_link::WAIT_SLICE) {
                        break Err(e);
                    }
                }
                Err(e) => break Err(e),
            }
        }
    }

    /// After our own handoff: keep serving while the tracker says other agents still miss blocks, for
    /// at most `max`, or until `cancel`. Returns how long it lingered.
    pub fn linger(&self, max: Duration, cancel: &AtomicBool) -> Duration {
        let t0 = Instant::now();
        if self.server.is_none() {
            return Duration::ZERO;
        }
        let mut said = false;
        loop {
            let needed = match self.needed() {
                Ok(n) => n,
                Err(e) => {
                    tracing::info!(error = %e, "tracker link lost; no longer serving peers");
                    break;
                }
            };
            if needed == 0 || t0.elapsed() >= max || cancel.load(Ordering::SeqCst) {
                break;
            }
            if !said {
                tracing::info!(agents = needed, linger_max_secs = max.as_secs(), "serving peers that still pull");
                said = true;
            }
            std::thread::sleep(limits::LINGER_POLL_EVERY); // Polling the tracker, bounded by `max`.
        }
        t0.elapsed()
    }
}
