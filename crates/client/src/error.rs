//! The client's errors, and the code of a server's error reply as a type.

/// Errors of the client.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A socket operation failed.
    #[error("{op} {addr}: {source}")]
    Io {
        /// What we were doing.
        op: &'static str,
        /// The server.
        addr: String,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// The server sent bytes that are not RESP, or too large.
    #[error("bad reply from {addr}: {source}")]
    Resp {
        /// The server.
        addr: String,
        /// Cause.
        #[source]
        source: resp::Error,
    },
    /// The server's reply is valid RESP but not an answer the command can give (an unknown
    /// replication role, a missing field).
    #[error("{addr}: {what}")]
    Unexpected {
        /// The server.
        addr: String,
        /// What was wrong.
        what: String,
    },
    /// The server answered with an error.
    #[error("{addr} answered {command}: {message}")]
    Server {
        /// The server.
        addr: String,
        /// The command (name only: arguments may be secrets).
        command: String,
        /// The error's code (its first word), what callers decide on.
        code: ErrorCode,
        /// The error text.
        message: String,
    },
}

impl Error {
    /// The server's error code, when the server answered with an error.
    pub fn code(&self) -> Option<&ErrorCode> {
        match self {
            Error::Server { code, .. } => Some(code),
            _ => None,
        }
    }

    /// The server refused our credentials or the command for lack of permission (`NOPERM`,
    /// `WRONGPASS`, `NOAUTH`): the same request will be refused again until an operator acts.
    pub fn is_permission(&self) -> bool {
        self.code().is_some_and(ErrorCode::is_permission)
    }

    pub(crate) fn server(addr: &str, command: &[u8], message: &[u8]) -> Error {
        let message = String::from_utf8_lossy(message).into_owned();
        Error::Server { addr: addr.into(), command: String::from_utf8_lossy(command).into_owned(), code: ErrorCode::parse(&message), message }
    }
}

/// The first word of a server's error reply (`-NOPERM this user has no permissions …`): the kind of
/// refusal, parsed once here so that callers match on a type, never on the text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ErrorCode {
    /// `NOPERM`: the ACL user may not run this command (or touch this key or channel).
    NoPerm,
    /// `WRONGPASS`: the username or password is wrong.
    WrongPass,
    /// `NOAUTH`: the server requires authentication and we gave none.
    NoAuth,
    /// `LOADING`: the server is loading its dataset; it answers once done.
    Loading,
    /// `READONLY`: a write sent to a read-only replica.
    ReadOnly,
    /// `BUSY`: a script or function is running.
    Busy,
    /// `MASTERDOWN`: a replica whose link to its master is down refuses to serve.
    MasterDown,
    /// `ERR`: the generic error (an unknown command, a bad argument, …).
    Err,
    /// Any other code, as the server spelled it.
    Other(String),
}

impl ErrorCode {
    /// The code of an error reply's text: its first word, when that is all capitals.
    pub fn parse(message: &str) -> ErrorCode {
        let word = message.split(' ').next().unwrap_or("");
        match word {
            "NOPERM" => ErrorCode::NoPerm,
            "WRONGPASS" => ErrorCode::WrongPass,
            "NOAUTH" => ErrorCode::NoAuth,
            "LOADING" => ErrorCode::Loading,
            "READONLY" => ErrorCode::ReadOnly,
            "BUSY" => ErrorCode::Busy,
            "MASTERDOWN" => ErrorCode::MasterDown,
            "ERR" => ErrorCode::Err,
            w if !w.is_empty() && w.len() <= 32 && w.bytes().all(|b| b.is_ascii_uppercase() || b == b'_') => ErrorCode::Other(w.into()),
            _ => ErrorCode::Err,
        }
    }

    /// A refusal of our credentials or of the command: only an operator can change that.
    pub fn is_permission(&self) -> bool {
        matches!(self, ErrorCode::NoPerm | ErrorCode::WrongPass | ErrorCode::NoAuth)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_codes_are_the_first_word() {
        assert_eq!(ErrorCode::parse("NOPERM this user has no permissions to run the 'info' command"), ErrorCode::NoPerm);
        assert_eq!(ErrorCode::parse("WRONGPASS invalid username-password pair or user is disabled."), ErrorCode::WrongPass);
        assert_eq!(ErrorCode::parse("NOAUTH Authentication required."), ErrorCode::NoAuth);
        assert_eq!(ErrorCode::parse("LOADING Redis is loading the dataset in memory"), ErrorCode::Loading);
        assert_eq!(ErrorCode::parse("ERR unknown command 'FOO'"), ErrorCode::Err);
        assert_eq!(ErrorCode::parse("CROSSSLOT Keys in request don't hash to the same slot"), ErrorCode::Other("CROSSSLOT".into()));
        assert_eq!(ErrorCode::parse("no code here"), ErrorCode::Err, "an error without a code is the generic one");
        assert_eq!(ErrorCode::parse(""), ErrorCode::Err);
        assert!(ErrorCode::NoPerm.is_permission() && ErrorCode::WrongPass.is_permission() && ErrorCode::NoAuth.is_permission());
        assert!(!ErrorCode::Loading.is_permission() && !ErrorCode::Err.is_permission());
        let e = Error::server("h:1", b"INFO", b"NOPERM this user has no permissions to run the 'info' command");
        assert!(e.is_permission());
        assert!(e.to_string().contains("answered INFO: NOPERM"), "{e}");
    }
}
