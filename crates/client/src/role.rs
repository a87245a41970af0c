//! A server's replication role, as `INFO replication` says it.

/// A server's replication role (`INFO replication`'s `role:` field).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// `role:master`: it takes writes (a standalone server is a master without replicas).
    Master,
    /// `role:slave` (the word Redis and Valkey still print): it follows a master.
    Replica,
}

impl std::str::FromStr for Role {
    type Err = UnknownRole;
    fn from_str(s: &str) -> Result<Role, UnknownRole> {
        match s {
            "master" => Ok(Role::Master),
            "slave" | "replica" => Ok(Role::Replica),
            other => Err(UnknownRole(other.into())),
        }
    }
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Role::Master => "master",
            Role::Replica => "replica",
        })
    }
}

/// A `role:` value that is neither `master` nor `slave` (or no `role:` field at all: empty).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", if .0.is_empty() { "INFO replication has no role field".to_string() } else { format!("unknown replication role {:?}", .0) })]
pub struct UnknownRole(pub String);
