//! Mutual challenge–response over a shared secret: each side proves it knows the token by an
//! HMAC-SHA256 over both sides' fresh nonces, so the token never crosses the wire and a recorded
//! exchange cannot be replayed. Nothing about the relay (addresses, keys, data) is said before the
//! agent has proved itself.

use crate::{Error, Operation};
use std::io::{Read, Write};

/// Protocol magic at the start of every connection.
pub const MAGIC: &[u8; 8] = b"FASTREPL";
/// Wire protocol version. 2: agents report their upload load, and say which peers they read from
/// when they ask where blocks are. 3: agents serve blocks while they arrive (`Arriving`; a read cut
/// off part-way is not a failed peer). 5: an agent's `Locate` says where its own window ends (the
/// blocks after it, asked on its serve cache's room, are answered last); not 4, which a layout tried
/// and reverted in issue 33 used (a build of it must be refused by name, not misread). 6: blocks are
/// kept compressed and packed, each placed by its table entry in the descriptor (an agent of 5 would
/// read a packed region as raw blocks). 7: an agent tells the relay how its join ended (`Ended`, counted
/// as `joins_total{outcome}`; a relay of 6 would close the link on the unknown op). A relay and its
/// agents must be of one version.
pub const VERSION: u16 = 7;
/// Nonce length.
pub const NONCE_LEN: usize = 32;

// The shared secret lives with the other secrets (crate `secrets`, below this one); its HMAC is the
// proof both sides give here.
pub use secrets::{Token, TokenTooShort, TOKEN_LEN_MIN};

/// Which kind of connection the agent opens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    /// Descriptor and progress pushes.
    Control = 1,
    /// Range reads.
    Data = 2,
    /// One status report (`fastrepl status`), then the relay closes.
    Status = 3,
}

fn nonce() -> Result<[u8; NONCE_LEN], Error> {
    let mut n = [0u8; NONCE_LEN];
    getrandom::getrandom(&mut n).map_err(|e| Error::Auth(format!("no randomness: {e}")))?;
    Ok(n)
}

fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Agent side: prove ourselves, check the relay's proof.
pub fn client<S: Read + Write>(s: &mut S, token: &Token, kind: Kind) -> Result<(), Error> {
    let mut hello = [0u8; 8 + 2 + NONCE_LEN];
    s.read_exact(&mut hello).map_err(|e| match e.kind() {
        // A relay at its --connections-max (or a peer agent at its limit) closes before greeting; a
        // relay that requires TLS closes a plain client after its authentication timeout.
        std::io::ErrorKind::UnexpectedEof | std::io::ErrorKind::ConnectionReset => Error::Io { op: Operation::ReadRelayGreetingClosed, source: e },
        // A relay that requires TLS waits for our handshake and says nothing to a plain client.
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => Error::Io { op: Operation::ReadRelayGreetingSilent, source: e },
        _ => Error::Io { op: Operation::ReadRelayGreeting, source: e },
    })?;
    if &hello[..8] != MAGIC {
        return Err(Error::Protocol("the peer is not a fastrepl relay (bad greeting)".into()));
    }
    let version = u16::from_be_bytes([hello[8], hello[9]]);
    if version != VERSION {
        return Err(Error::Protocol(format!("relay speaks protocol version {version}, this agent {VERSION}")));
    }
    let server_nonce = &hello[10..];
    let client_nonce = nonce()?;
    let mut msg = Vec::with_capacity(8 + 2 + 1 + NONCE_LEN + 32);
    msg.extend_from_slice(MAGIC);
    msg.extend_from_slice(&VERSION.to_be_bytes());
    msg.push(kind as u8);
    msg.extend_from_slice(&client_nonce);
    msg.extend_from_slice(&token.mac(b"agent", server_nonce, &client_nonce, kind as u8));
    s.write_all(&msg).map_err(Error::io(Operation::SendAuthentication))?;
    let mut status = [0u8; 1];
    s.read_exact(&mut status).map_err(Error::io(Operation::ReadAuthenticationResult))?;
    if status[0] != 0 {
        let them = if kind == Kind::Status { "the relay" } else { "the relay (or peer agent)" };
        return Err(Error::Auth(if token.is_empty() {
            format!("{them} requires a token and we sent none (set FASTREPL_TOKEN or --token-file)")
        } else {
            format!("{them} refused our token: it holds a different one, or none (check FASTREPL_TOKEN / --token-file on both sides)")
        }));
    }
    let mut proof = [0u8; 32];
    s.read_exact(&mut proof).map_err(Error::io(Operation::ReadRelayProof))?;
    if !ct_eq(&proof, &token.mac(b"relay", &client_nonce, server_nonce, kind as u8)) {
        return Err(Error::Auth("the relay (or peer agent) could not prove it knows the token".into()));
    }
    Ok(())
}

/// Relay side: challenge the agent; on success answer with our own proof and return the kind.
pub fn server<S: Read + Write>(s: &mut S, token: &Token) -> Result<Kind, Error> {
    server_any(s, std::slice::from_ref(token))
}

/// Like [`server`], accepting any of `tokens` (a rotation: the old and the new token for a while).
/// The proof we send back is made with the token the agent used.
pub fn server_any<S: Read + Write>(s: &mut S, tokens: &[Token]) -> Result<Kind, Error> {
    let server_nonce = nonce()?;
    let mut hello = Vec::with_capacity(8 + 2 + NONCE_LEN);
    hello.extend_from_slice(MAGIC);
    hello.extend_from_slice(&VERSION.to_be_bytes());
    hello.extend_from_slice(&server_nonce);
    s.write_all(&hello).map_err(Error::io(Operation::SendGreeting))?;
    let mut msg = [0u8; 8 + 2 + 1 + NONCE_LEN + 32];
    s.read_exact(&mut msg).map_err(Error::io(Operation::ReadAgentAuthentication))?;
    if &msg[..8] != MAGIC {
        return Err(Error::Protocol("the peer is not a fastrepl agent (bad magic)".into()));
    }
    let kind = match msg[10] {
        1 => Kind::Control,
        2 => Kind::Data,
        3 => Kind::Status,
        k => return Err(Error::Protocol(format!("unknown connection kind {k}"))),
    };
    let client_nonce = &msg[11..11 + NONCE_LEN];
    let mac = &msg[11 + NONCE_LEN..];
    let Some(token) = tokens.iter().find(|t| ct_eq(mac, &t.mac(b"agent", &server_nonce, client_nonce, kind as u8))) else {
        let _ = s.write_all(&[1]);
        let who = if kind == Kind::Status { "a status client" } else { "an agent" };
        let what = if tokens.iter().all(Token::is_empty) {
            "presented a token, and we have none (started without FASTREPL_TOKEN / --token-file)"
        } else if ct_eq(mac, &Token::empty().mac(b"agent", &server_nonce, client_nonce, kind as u8)) {
            "sent no token, and we require one"
        } else {
            "presented a wrong token"
        };
        return Err(Error::Auth(format!("{who} {what}")));
    };
    let mut ok = vec![0u8];
    ok.extend_from_slice(&token.mac(b"relay", client_nonce, &server_nonce, kind as u8));
    s.write_all(&ok).map_err(Error::io(Operation::SendAuthenticationResult))?;
    Ok(kind)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixStream;

    #[test]
    fn during_a_rotation_either_token_is_accepted() {
        let (old, new, other) = (Token::new(b"old-token-0123456789").unwrap(), Token::new(b"new-token-0123456789").unwrap(), Token::new(b"neither-0123456789").unwrap());
        for (agent, ok) in [(old.clone(), true), (new.clone(), true), (other, false)] {
            let (mut a, mut r) = UnixStream::pair().unwrap();
            let accepted = [old.clone(), new.clone()];
            let relay = std::thread::spawn(move || server_any(&mut r, &accepted));
            let c = client(&mut a, &agent, Kind::Data);
            assert_eq!(c.is_ok(), ok, "{c:?}");
            assert_eq!(relay.join().unwrap().is_ok(), ok);
        }
    }

    fn pair(agent_token: Token, relay_token: Token) -> (Result<(), Error>, Result<Kind, Error>) {
        let (mut a, mut b) = UnixStream::pair().unwrap();
        let t = std::thread::spawn(move || server(&mut b, &relay_token));
        let r = client(&mut a, &agent_token, Kind::Data);
        drop(a);
        (r, t.join().unwrap())
    }

    #[test]
    fn right_token_passes_wrong_token_fails() {
        let t = Token::new(b"0123456789abcdef\n").unwrap();
        let (c, s) = pair(t.clone(), t.clone());
        assert!(c.is_ok());
        assert_eq!(s.unwrap(), Kind::Data);
        let (c, s) = pair(Token::new(b"fedcba9876543210").unwrap(), t);
        assert!(matches!(c, Err(Error::Auth(_))));
        assert!(matches!(s, Err(Error::Auth(_))));
        assert!(Token::new(b"short").is_err());
        assert!(!format!("{:?}", Token::new(b"0123456789abcdef").unwrap()).contains("0123"));
    }
}
