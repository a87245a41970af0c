//! The relay's shared secret: what an agent and a relay prove to each other they know (the
//! challenge-response of `transport::auth`), kept here with the other secrets so that reading one
//! needs nothing of the transport (this crate stands below it).

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The shared secret. Loaded from a file or the environment; never printed.
#[derive(Clone)]
pub struct Token(Vec<u8>);

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(<redacted>)")
    }
}

/// Shortest token accepted (the reason: [`limits::TOKEN_BYTES_MIN`]).
pub const TOKEN_LEN_MIN: usize = limits::TOKEN_BYTES_MIN;

/// A token shorter than [`TOKEN_LEN_MIN`].
#[derive(Debug, thiserror::Error)]
#[error("the token must be at least {TOKEN_LEN_MIN} bytes long")]
pub struct TokenTooShort;

impl Token {
    /// A token from bytes; surrounding whitespace (a file's trailing newline) is trimmed.
    pub fn new(bytes: &[u8]) -> Result<Token, TokenTooShort> {
        let t = bytes.trim_ascii();
        if t.len() < TOKEN_LEN_MIN {
            return Err(TokenTooShort);
        }
        Ok(Token(t.to_vec()))
    }

    /// The empty token: authentication still runs, with an empty key (loopback-only relays).
    pub fn empty() -> Token {
        Token(Vec::new())
    }

    /// True for [`Token::empty`].
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// HMAC-SHA256 keyed by the token over `label`, `a`, `b` and `kind`: a proof of knowing it that
    /// does not reveal it (the token's bytes never leave this type).
    pub fn mac(&self, label: &[u8], a: &[u8], b: &[u8], kind: u8) -> [u8; 32] {
        let mut m = <Hmac<Sha256> as Mac>::new_from_slice(&self.0).expect("HMAC takes any key length");
        m.update(label);
        m.update(a);
        m.update(b);
        m.update(&[kind]);
        m.finalize().into_bytes().into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_is_trimmed_bounded_and_never_printed() {
        assert!(Token::new(b"short").is_err());
        let t = Token::new(b"  0123456789abcdef\n").unwrap();
        assert_eq!(format!("{t:?}"), "Token(<redacted>)");
        assert_eq!(t.mac(b"l", b"a", b"b", 1), Token::new(b"0123456789abcdef").unwrap().mac(b"l", b"a", b"b", 1), "trimmed");
        assert_ne!(t.mac(b"l", b"a", b"b", 1), t.mac(b"l", b"a", b"b", 2));
        assert!(Token::empty().is_empty() && !t.is_empty());
    }
}
