//! Secrets come from files or the environment, never from the command line (argv is visible to
//! every user of the host) and never into logs.
#![deny(missing_docs)]

mod token;

use replication::replica::Auth;
use std::path::{Path, PathBuf};
pub use token::{Token, TokenTooShort, TOKEN_LEN_MIN};

/// Why a secret could not be read.
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    /// The file could not be read.
    #[error("read secret file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// The file holds nothing.
    #[error("secret file {0} is empty")]
    Empty(PathBuf),
    /// A user name without a password.
    #[error("a user was given but no password: use the password file option or ${0}")]
    UserWithoutPassword(&'static str),
    /// The relay token is unusable.
    // The reason is in the message, not also a `source`: printed as a chain it was said twice.
    #[error("relay token: {0}")]
    Token(TokenTooShort),
}

impl From<TokenTooShort> for SecretError {
    fn from(e: TokenTooShort) -> Self {
        SecretError::Token(e)
    }
}

/// Read a secret from `file` if given, else from the environment variable `env`.
pub fn read(file: Option<&Path>, env: &str) -> Result<Option<String>, SecretError> {
    if let Some(f) = file {
        let s = std::fs::read_to_string(f).map_err(|source| SecretError::Read { path: f.to_path_buf(), source })?;
        let s = s.trim_end_matches(['\r', '\n']).to_string();
        if s.is_empty() {
            return Err(SecretError::Empty(f.to_path_buf()));
        }
        return Ok(Some(s));
    }
    Ok(std::env::var(env).ok().filter(|s| !s.is_empty()))
}

/// Credentials for a server: a user (not secret) and a password from a file or the environment.
pub fn auth(user: Option<&str>, password_file: Option<&Path>, env: &'static str) -> Result<Option<Auth>, SecretError> {
    match read(password_file, env)? {
        Some(password) => Ok(Some(Auth { user: user.map(str::to_string), password })),
        None if user.is_some() => Err(SecretError::UserWithoutPassword(env)),
        None => Ok(None),
    }
}

/// The relay token, from `file` or `$FASTREPL_TOKEN`; empty when neither is set (loopback relays).
/// A file may hold several tokens, one per line (a rotation): this is the first, the one agents
/// present.
pub fn token(file: Option<&Path>) -> Result<Token, SecretError> {
    Ok(tokens(file)?.swap_remove(0))
}

/// Every token in `file` (one per line, blank lines ignored) or `$FASTREPL_TOKEN`: what a relay
/// accepts. Never empty: `[Token::empty()]` when neither is set.
pub fn tokens(file: Option<&Path>) -> Result<Vec<Token>, SecretError> {
    match read(file, "FASTREPL_TOKEN")? {
        Some(t) => {
            let v: Vec<Token> = t.lines().map(str::trim).filter(|l| !l.is_empty()).map(|l| Token::new(l.as_bytes())).collect::<Result<_, _>>()?;
            Ok(if v.is_empty() { vec![Token::empty()] } else { v })
        }
        None => Ok(vec![Token::empty()]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_wins_and_is_trimmed_empty_refused() {
        let dir = std::env::temp_dir().join(format!("fastrepl-secrets-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("pw");
        std::fs::write(&f, "s3cret\n").unwrap();
        assert_eq!(read(Some(&f), "FASTREPL_SECRETS_TEST_UNSET").unwrap().as_deref(), Some("s3cret"));
        std::fs::write(&f, "\n").unwrap();
        assert!(matches!(read(Some(&f), "X"), Err(SecretError::Empty(_))));
        assert!(matches!(auth(Some("u"), None, "FASTREPL_SECRETS_TEST_UNSET"), Err(SecretError::UserWithoutPassword(_))));
        std::fs::write(&f, "short").unwrap();
        assert!(matches!(token(Some(&f)), Err(SecretError::Token(_))));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
