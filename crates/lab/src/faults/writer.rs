//! A client writing to the master for a whole cell, through its faults: on an error it reconnects
//! and goes on (a master restarted, paused or failed over is part of the experiment), and it can be
//! pointed at a new master after a failover.

use anyhow::Result;
use client::{command, Client};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Opens a client to the current master (inside its namespace).
pub type Connect = Box<dyn Fn() -> Result<Client> + Send + Sync>;

/// The writer thread and its counters.
pub struct Writer {
    stop: Arc<AtomicBool>,
    /// Batches the master acknowledged.
    pub acked: Arc<AtomicU64>,
    /// Errors met (each followed by a reconnect).
    pub errors: Arc<AtomicU64>,
    target: Arc<Mutex<Connect>>,
    /// Held by the writer for each batch: whoever holds it has the writes paused (the soak's
    /// verifier compares a still dataset).
    pub gate: Arc<Mutex<()>>,
    handle: Option<std::thread::JoinHandle<()>>,
}

/// Distinct keys written (per database and kind).
const KEYS: u64 = 1024;

/// Paced so two cores keep room for the servers, the relay and the agents.
const BATCH_EVERY: Duration = Duration::from_millis(5);

impl Writer {
    /// Start writing batches (SETs in two databases, an INCR, a list push and trim, a key with a TTL;
    /// values of `value_bytes`; keys reused after [`KEYS`] batches) through `connect`.
    pub fn start(connect: Connect, value_bytes: usize) -> Writer {
        let stop = Arc::new(AtomicBool::new(false));
        let acked = Arc::new(AtomicU64::new(0));
        let errors = Arc::new(AtomicU64::new(0));
        let target = Arc::new(Mutex::new(connect));
        let gate = Arc::new(Mutex::new(()));
        let (s, a, e, t, g) = (stop.clone(), acked.clone(), errors.clone(), target.clone(), gate.clone());
        let handle = std::thread::spawn(move || {
            let value = "v".repeat(value_bytes);
            let mut c: Option<Client> = None;
            let mut i: u64 = 0;
            while !s.load(Ordering::SeqCst) {
                if c.is_none() {
                    c = (t.lock().unwrap_or_else(|p| p.into_inner()))().ok();
                    if c.is_none() {
                        e.fetch_add(1, Ordering::Relaxed);
                        std::thread::sleep(Duration::from_millis(100)); // Backoff while the master is away.
                        continue;
                    }
                }
                let db = if i.is_multiple_of(2) { "0" } else { "1" };
                // Over a bounded key space: the dataset's key count stays put however long a cell
                // runs (the replicas' key-load-delay is per key).
                let k = i % KEYS;
                let cmds = vec![
                    command(&["SELECT", db]),
                    command(&["SET", &format!("w:{k}"), &value]),
                    command(&["INCR", "w:counter"]),
                    command(&["RPUSH", "w:list", &i.to_string()]),
                    command(&["LTRIM", "w:list", "-1000", "-1"]),
                    command(&["SET", &format!("w:ttl:{k}"), &i.to_string(), "EX", "3600"]),
                ];
                let paused = g.lock().unwrap_or_else(|p| p.into_inner());
                let ok = c.as_mut().map(|c| c.pipeline(&cmds)).is_some_and(|r| r.is_ok_and(|rs| rs.iter().all(|r| !r.is_error())));
                drop(paused);
                if ok {
                    a.fetch_add(1, Ordering::Relaxed);
                } else {
                    e.fetch_add(1, Ordering::Relaxed);
                    c = None;
                }
                i += 1;
                std::thread::sleep(BATCH_EVERY); // Pacing the load, not synchronization.
            }
        });
        Writer { stop, acked, errors, target, gate, handle: Some(handle) }
    }

    /// Write to another master from the next batch on (after a failover).
    pub fn retarget(&self, connect: Connect) {
        *self.target.lock().unwrap_or_else(|p| p.into_inner()) = connect;
    }

    /// Stop; returns the batches acknowledged.
    pub fn stop(mut self) -> u64 {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
        self.acked.load(Ordering::Relaxed)
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}
