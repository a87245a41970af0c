//! Secrets come from files or the environment, never from the command line (argv is visible to
//! every user of the host) and never into logs.

use anyhow::{bail, Context, Result};
use replication::replica::Auth;
use std::path::Path;

/// Read a secret from `file` if given, else from the environment variable `env`.
pub fn read(file: Option<&Path>, env: &str) -> Result<Option<String>> {
    if let Some(f) = file {
        let s = std::fs::read_to_string(f).with_context(|| format!("read secret file {}", f.display()))?;
        let s = s.trim_end_matches(['\r', '\n']).to_string();
        if s.is_empty() {
            bail!("secret file {} is empty", f.display());
        }
        return Ok(Some(s));
    }
    Ok(std::env::var(env).ok().filter(|s| !s.is_empty()))
}

/// Credentials for a server: a user (not secret) and a password from a file or the environment.
pub fn auth(user: Option<&str>, password_file: Option<&Path>, env: &str) -> Result<Option<Auth>> {
    match read(password_file, env)? {
        Some(password) => Ok(Some(Auth { user: user.map(str::to_string), password })),
        None if user.is_some() => bail!("a user was given but no password: use the password file option or ${env}"),
        None => Ok(None),
    }
}

/// The relay token.
pub fn token(file: Option<&Path>) -> Result<transport::Token> {
    match read(file, "FASTREPL_TOKEN")? {
        Some(t) => transport::Token::new(t.as_bytes()).map_err(|e| anyhow::anyhow!("relay token: {e}")),
        None => Ok(transport::Token::empty()),
    }
}
