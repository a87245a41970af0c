//! What an agent presents to its relay and its peers: the shared [`Token`] and, when the relay
//! requires it, how to reach it over TLS. Kept apart from the token so that authentication
//! ([`crate::auth`]) knows nothing of TLS.

use crate::tls::RelayTls;
use crate::Token;

/// The agent's credentials towards the relay, used by every connection it opens there.
#[derive(Debug, Clone)]
pub struct Credentials {
    token: Token,
    tls: Option<RelayTls>,
}

impl From<Token> for Credentials {
    /// The token alone: connections in the clear.
    fn from(token: Token) -> Self {
        Credentials { token, tls: None }
    }
}

impl Credentials {
    /// Reach the relay over TLS.
    pub fn with_relay_tls(mut self, tls: RelayTls) -> Credentials {
        self.tls = Some(tls);
        self
    }
    /// The shared secret.
    pub fn token(&self) -> &Token {
        &self.token
    }
    /// How to reach the relay over TLS, if it requires it.
    pub fn relay_tls(&self) -> Option<&RelayTls> {
        self.tls.as_ref()
    }
    /// The credentials towards peer agents: the same secret, and TLS to them when the relay link is
    /// TLS (peers of a TLS relay serve TLS only).
    pub fn for_peers(&self) -> Credentials {
        Credentials { token: self.token.clone(), tls: self.tls.as_ref().and_then(|t| t.to_peers()) }
    }
}
