//! What the relay has told us about our generation, kept current by a control-connection thread.

use endpoint::Endpoint;
use snapshot::{Descriptor, Entry, Table};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};
use transport::auth::Kind;
use transport::wire::{self, Control};
use transport::Credentials;

/// Longest silence on the control connection before the relay is declared gone (it heartbeats every
/// second).
pub const RELAY_SILENCE_MAX: Duration = limits::RELAY_SILENCE_MAX;

/// The generation as last described, with its whole block table so far.
#[derive(Debug, Clone)]
pub struct View {
    /// Latest descriptor (its `table` is empty: the entries are in `table`).
    pub desc: Descriptor,
    /// Every published block's entry, placed.
    pub table: Table,
    /// The control link failed (relay gone, or it reported an error).
    pub lost: Option<String>,
}

impl View {
    /// Fail if the relay's control link is lost or its snapshot failed.
    pub fn check(&self) -> Result<(), crate::error::Error> {
        if let Some(l) = &self.lost {
            return Err(crate::error::Error::unavailable(crate::error::Party::Relay, l.clone()));
        }
        if self.desc.state == snapshot::State::Failed {
            return Err(crate::error::Error::unavailable(crate::error::Party::Relay, format!("its snapshot failed: {}", self.desc.error.clone().unwrap_or_default())));
        }
        Ok(())
    }
    /// Blocks that can be read now.
    pub fn blocks_readable(&self) -> u64 {
        self.table.len()
    }
    /// Total blocks, once the length is known.
    pub fn blocks_total(&self) -> Option<u64> {
        self.desc.length.map(|l| l.div_ceil(self.desc.block_size))
    }
    /// Published block `i`: where it is kept, how, and its length in the RDB.
    pub fn block(&self, i: u64) -> Option<Block> {
        let (entry, start) = self.table.get(i)?;
        // Published blocks are whole but the last, which ends at the published bytes.
        let raw_len = self.desc.block_size.min(self.desc.published.checked_sub(i * self.desc.block_size)?);
        Some(Block { start, entry, raw_len })
    }

    /// Take in a validated descriptor that follows this view's: its entries join the table.
    fn extend(&mut self, mut d: Descriptor) {
        for e in std::mem::take(&mut d.table) {
            self.table.push(e);
        }
        self.desc = d;
    }

    /// What the table holds already, for validating the next descriptor.
    fn before(&self) -> wire::Before {
        wire::Before { entries: self.table.len(), stored: self.table.stored_end(), published: self.desc.published, length: self.desc.length }
    }
}

/// A published block as a reader needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Block {
    /// Where its stored bytes start in the relay's region.
    pub start: u64,
    /// Its entry: stored length, codec, checksum of the stored bytes.
    pub entry: Entry,
    /// Its length in the RDB (what it decompresses to).
    pub raw_len: u64,
}

/// Shared view plus a condition variable that fires on every change.
pub struct Progress {
    view: Mutex<View>,
    changed: Condvar,
}

impl Progress {
    /// Current view.
    pub fn get(&self) -> View {
        self.view.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Look at the current view without copying it (it holds every block's entry: copying it per
    /// block would make a pull quadratic in the number of blocks).
    pub fn with<T>(&self, f: impl FnOnce(&View) -> T) -> T {
        f(&self.view.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// Wait until `pred` holds for the view, the link is lost, or `timeout` passes; then apply `f`.
    pub fn wait_with<T>(&self, timeout: Duration, pred: impl Fn(&View) -> bool, f: impl FnOnce(&View) -> T) -> T {
        let g = self.view.lock().unwrap_or_else(|p| p.into_inner());
        let (g, _) = self.changed.wait_timeout_while(g, timeout, |v| !pred(v) && v.lost.is_none()).unwrap_or_else(|p| p.into_inner());
        f(&g)
    }

    /// Wait until `pred` holds for the view or `timeout` passes; returns the view then.
    pub fn wait_until(&self, timeout: Duration, pred: impl Fn(&View) -> bool) -> View {
        let g = self.view.lock().unwrap_or_else(|p| p.into_inner());
        let (g, _) = self.changed.wait_timeout_while(g, timeout, |v| !pred(v) && v.lost.is_none()).unwrap_or_else(|p| p.into_inner());
        g.clone()
    }

    /// The RDB length, once known (cheap: no clone of the table).
    pub fn get_length(&self) -> Option<u64> {
        self.view.lock().unwrap_or_else(|p| p.into_inner()).desc.length
    }

    /// Wake waiters (used when something else, e.g. a reader, changed state they watch).
    pub fn notify(&self) {
        self.changed.notify_all();
    }
}

/// The transports a relay offers, from its hello.
#[derive(Debug, Clone, Default)]
pub struct Offered {
    /// The transports.
    pub transports: Vec<transport::TransportKind>,
    /// The shm transport's abstract socket.
    pub shm_socket: Option<String>,
    /// The UCX transports the relay's context has.
    pub ucx_transports: Vec<String>,
}

/// What the relay said when we connected.
pub struct Attached {
    /// The master as the relay reaches it.
    pub master: String,
    /// What the relay offers.
    pub offered: Offered,
    /// Live progress of our generation.
    pub progress: Arc<Progress>,
    /// When the first descriptor arrived.
    pub at: Instant,
}

/// Connect the control link, wait for the first descriptor, and keep the view current in a thread.
pub fn attach(relay: &Endpoint, token: &Credentials, wait_max: Duration) -> Result<Attached, crate::error::Error> {
    attach_with(relay, token, wait_max, || {})
}

/// [`attach`], calling `hello` once the relay said hello (it authenticated us and serves agents):
/// a failure from there on is one the relay saw (a capture refused, no snapshot in time).
pub fn attach_with(relay: &Endpoint, token: &Credentials, wait_max: Duration, hello: impl FnOnce()) -> Result<Attached, crate::error::Error> {
    let mut s = transport::tcp::connect(relay, token, Kind::Control, RELAY_SILENCE_MAX).map_err(crate::error::Error::relay)?;
    let (master, offered) = match wire::recv_control(&mut s).map_err(crate::error::Error::relay)? {
        Control::Hello { master, transports, shm_socket, ucx_transports, .. } => (master, Offered { transports, shm_socket, ucx_transports }),
        other => return Err(crate::error::Error::protocol(crate::error::Party::Relay, format!("expected hello, got {other:?}"))),
    };
    hello();
    let deadline = Instant::now() + wait_max;
    let desc = loop {
        match wire::recv_control(&mut s).map_err(crate::error::Error::relay)? {
            Control::Descriptor(d) => break d.validate(wire::Before::default()).map_err(crate::error::Error::relay)?,
            Control::Heartbeat if Instant::now() < deadline => continue,
            Control::Heartbeat => return Err(crate::error::Error::unavailable(crate::error::Party::Relay, "it has no snapshot yet (timed out waiting)")),
            Control::CaptureFailed { kind, message } => return Err(crate::error::Error::Capture { kind, message }),
            Control::Error(e) => return Err(crate::error::Error::unavailable(crate::error::Party::Relay, e)),
            Control::Hello { .. } => return Err(crate::error::Error::protocol(crate::error::Party::Relay, "unexpected second hello")),
            Control::Status(_) => return Err(crate::error::Error::protocol(crate::error::Party::Relay, "unexpected status on a control connection")),
        }
    };
    let mut view = View { desc: Descriptor { table: Vec::new(), ..desc.clone() }, table: Table::new(), lost: None };
    view.extend(desc);
    let progress = Arc::new(Progress { view: Mutex::new(view), changed: Condvar::new() });
    let p = progress.clone();
    std::thread::Builder::new().name("control".into()).spawn(move || follow(s, p)).map_err(|e| crate::error::Error::Internal(format!("spawn control thread: {e}")))?;
    Ok(Attached { master, offered, progress, at: Instant::now() })
}

fn follow(mut s: transport::tls::Conn, p: Arc<Progress>) {
    loop {
        let msg = wire::recv_control(&mut s);
        let mut v = p.view.lock().unwrap_or_else(|e| e.into_inner());
        match msg {
            Ok(Control::Descriptor(d)) => {
                if d.generation != v.desc.generation {
                    v.lost = Some(format!("relay switched generation {} → {}", v.desc.generation, d.generation));
                } else if d.block_size != v.desc.block_size {
                    // Block numbers already fetched would mean other bytes.
                    v.lost = Some(format!("relay protocol error: block size changed {} → {}", v.desc.block_size, d.block_size));
                } else {
                    match d.validate(v.before()) {
                        Ok(d) => v.extend(d),
                        Err(e) => v.lost = Some(format!("relay {e}")),
                    }
                }
            }
            Ok(Control::Heartbeat) => continue,
            Ok(Control::Error(e) | Control::CaptureFailed { message: e, .. }) => v.lost = Some(e),
            Ok(Control::Hello { .. } | Control::Status(_)) => v.lost = Some("protocol error: unexpected hello or status".into()),
            Err(e) => v.lost = Some(format!("lost its control connection: {e}")),
        }
        let stop = v.lost.is_some();
        drop(v);
        p.changed.notify_all();
        if stop {
            return;
        }
    }
}
