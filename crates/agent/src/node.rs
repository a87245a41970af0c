//! The local server as every step of a join reaches it: its address, credentials and TLS, and the
//! join's cancel flag. Made once from the configuration (`Config::node`) and handed
//! down, so that each step opens its connections the same way (and a step that must reconnect, a
//! node restarting or too busy to answer, needs nothing else).

use crate::error::Error;
use client::Client;
use replication::replica::Auth;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

/// The local server, and the join's cancel flag.
#[derive(Debug, Clone)]
pub struct Node {
    /// `host:port`.
    pub addr: String,
    /// Its credentials.
    pub auth: Option<Auth>,
    /// TLS to it (`--replica-tls`), when it speaks only TLS.
    pub tls: Option<client::tls::Tls>,
    /// Set from outside (a signal) to abandon the join.
    pub cancel: Arc<AtomicBool>,
}

impl Node {
    /// A connection with the command timeout ([`limits::COMMAND_TIMEOUT`]); a failure is the local
    /// server's.
    pub fn connect(&self) -> Result<Client, Error> {
        self.connect_within(limits::COMMAND_TIMEOUT).map_err(Error::replica)
    }

    /// A connection whose commands time out after `timeout`, the client's error as it is (a caller
    /// that polls a node going down tells an I/O error from a refusal).
    pub fn connect_within(&self, timeout: Duration) -> Result<Client, client::Error> {
        Client::connect_tls(&self.addr, self.auth.as_ref(), timeout, self.tls.as_ref())
    }

    /// [`Error::Interrupted`] once the join was cancelled.
    pub fn check_cancel(&self) -> Result<(), Error> {
        crate::error::check_cancel(&self.cancel)
    }
}
