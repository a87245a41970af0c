//! What the agent must know about an RDB payload before it touches a replica.

/// The RDB format version from the first 9 bytes (`REDIS0011`, or Valkey 9's `VALKEY080`).
pub fn version(header: &[u8]) -> Option<u32> {
    let digits = if let Some(d) = header.strip_prefix(b"REDIS") { d.get(..4)? } else { header.strip_prefix(b"VALKEY")?.get(..3)? };
    std::str::from_utf8(digits).ok()?.parse().ok()
}

/// A server's flavour and version, from `INFO server`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Server {
    /// `"redis"` or `"valkey"`.
    pub flavour: String,
    /// (major, minor, patch).
    pub version: (u32, u32, u32),
}

impl std::fmt::Display for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (a, b, c) = self.version;
        write!(f, "{} {a}.{b}.{c}", self.flavour)
    }
}

impl Server {
    /// From the text of `INFO server`. Valkey reports `valkey_version` (and a `redis_version` of
    /// 7.2.4 for compatibility), so that field wins.
    pub fn from_info(info: &str) -> Option<Server> {
        let field = |k: &str| info.lines().find_map(|l| l.strip_prefix(k).map(|v| v.trim().to_string()));
        let (flavour, v) = match field("valkey_version:") {
            Some(v) => ("valkey", v),
            None => ("redis", field("redis_version:")?),
        };
        let mut it = v.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
        Some(Server { flavour: flavour.into(), version: (it.next()?, it.next().unwrap_or(0), it.next().unwrap_or(0)) })
    }

    /// From what `redis-server --version` / `valkey-server --version` prints (`Redis server v=7.0.15
    /// sha=…`, `Valkey server v=8.1.8 …`): how `fastrepl stage` learns what the server in the pod
    /// loads when it is given the binary rather than a running server.
    pub fn from_version_output(text: &str) -> Option<Server> {
        let line = text.lines().next()?.trim();
        let (name, rest) = line.split_once(' ')?;
        let flavour = match name {
            n if n.eq_ignore_ascii_case("redis") => "redis",
            n if n.eq_ignore_ascii_case("valkey") => "valkey",
            _ => return None,
        };
        let v = rest.split_whitespace().find_map(|w| w.strip_prefix("v="))?;
        Server::parse_version(flavour, v)
    }

    /// From an operator's name for it: `redis-7.2`, `valkey-9.0.1` (a missing minor or patch is 0).
    pub fn from_spec(spec: &str) -> Option<Server> {
        let (name, v) = spec.trim().split_once('-')?;
        let flavour = match name.to_ascii_lowercase().as_str() {
            "redis" => "redis",
            "valkey" => "valkey",
            _ => return None,
        };
        Server::parse_version(flavour, v)
    }

    fn parse_version(flavour: &str, v: &str) -> Option<Server> {
        let mut parts = v.split('.');
        let mut next = |required: bool| match parts.next() {
            Some(p) => p.parse::<u32>().ok(),
            None if required => None,
            None => Some(0),
        };
        let version = (next(true)?, next(false)?, next(false)?);
        parts.next().is_none().then(|| Server { flavour: flavour.into(), version })
    }

    /// Can this server load an RDB of `version`? `rdb_version_check` is its `rdb-version-check`
    /// setting (Valkey 9+: `strict` by default refuses the "foreign" versions 12–79, which other
    /// servers write; `relaxed` tries them). `Err` says why not, in the operator's terms.
    pub fn loads(&self, version: u32, rdb_version_check: Option<&str>) -> Result<(), String> {
        let max = self.rdb_version_max();
        if self.flavour == "valkey" && self.version.0 >= 9 && (12..=79).contains(&version) {
            return match rdb_version_check {
                Some(c) if c.eq_ignore_ascii_case("relaxed") => Ok(()),
                c => Err(format!("{self} refuses RDB version {version}, a version written by another server (rdb-version-check {}; `relaxed` would try it)", c.unwrap_or("strict"))),
            };
        }
        if version > max {
            return Err(format!("{self} loads at most RDB version {max}, the snapshot is version {version}"));
        }
        Ok(())
    }

    /// Whether a Valkey 9 master would write an RDB this server loads if it were told this server's
    /// version: Valkey 9 writes its own format (80) for a replica that announces 9 or newer (as a
    /// relay announces its master's version), and RDB 11 for an older one. `version` is what the
    /// relay got.
    pub fn loads_what_valkey9_writes_for_older(&self, version: u32) -> bool {
        version == 80 && self.loads(80, None).is_err() && self.loads(11, None).is_ok()
    }

    /// The newest RDB version this server can load.
    pub fn rdb_version_max(&self) -> u32 {
        let (maj, min, _) = self.version;
        match self.flavour.as_str() {
            "valkey" if maj >= 9 => 80,
            "valkey" => 11,
            _ => match (maj, min) {
                (m, _) if m < 5 => 8,
                (5, _) | (6, _) => 9,
                (7, 0) => 10,
                (7, _) => 11,
                _ => 12,
            },
        }
    }
}

#[cfg(test)]
mod loads_tests {
    use super::*;

    fn server(flavour: &str, v: (u32, u32, u32)) -> Server {
        Server { flavour: flavour.into(), version: v }
    }

    #[test]
    fn an_older_replica_of_a_valkey9_master_is_told_it_needs_an_older_announcement() {
        // Valkey 8.1 and Redis 8.2 load RDB 11, what Valkey 9 writes for them natively.
        assert!(server("valkey", (8, 1, 8)).loads_what_valkey9_writes_for_older(80));
        assert!(server("redis", (8, 2, 3)).loads_what_valkey9_writes_for_older(80));
        // Redis 7.0 loads neither; Valkey 9.1 loads 80 itself; other versions are not Valkey 9's.
        assert!(!server("redis", (7, 0, 15)).loads_what_valkey9_writes_for_older(80));
        assert!(!server("valkey", (9, 1, 2)).loads_what_valkey9_writes_for_older(80));
        assert!(!server("redis", (7, 0, 15)).loads_what_valkey9_writes_for_older(12));
    }

    #[test]
    fn a_server_from_its_version_output_or_a_name() {
        assert_eq!(Server::from_version_output("Redis server v=7.0.15 sha=00000000:0 malloc=jemalloc-5.3.0 bits=64 build=ae4d7c971a948f0\n"), Some(server("redis", (7, 0, 15))));
        assert_eq!(Server::from_version_output("Valkey server v=8.1.8 sha=00000000:1 malloc=libc bits=64 build=7eb4ebc9d7e91f4e"), Some(server("valkey", (8, 1, 8))));
        assert_eq!(Server::from_version_output("KeyDB server v=6.3.4"), None);
        assert_eq!(Server::from_version_output("Redis server sha=0"), None);
        assert_eq!(Server::from_spec("redis-7.2"), Some(server("redis", (7, 2, 0))));
        assert_eq!(Server::from_spec("Valkey-9.0.1"), Some(server("valkey", (9, 0, 1))));
        for bad in ["redis", "redis-", "redis-7.x", "dragonfly-1.0", "redis-7.2.4.1"] {
            assert_eq!(Server::from_spec(bad), None, "{bad}");
        }
    }

    #[test]
    fn what_each_server_loads() {
        let redis70 = server("redis", (7, 0, 15));
        assert!(redis70.loads(10, None).is_ok() && redis70.loads(11, None).is_err());
        assert!(server("redis", (8, 2, 3)).loads(12, None).is_ok());
        let valkey81 = server("valkey", (8, 1, 8));
        assert!(valkey81.loads(11, None).is_ok() && valkey81.loads(12, None).is_err() && valkey81.loads(80, None).is_err());
        let valkey9 = server("valkey", (9, 0, 0));
        assert!(valkey9.loads(11, None).is_ok() && valkey9.loads(80, None).is_ok());
        let e = valkey9.loads(12, Some("strict")).unwrap_err();
        assert!(e.contains("rdb-version-check strict"), "{e}");
        assert!(valkey9.loads(12, None).is_err(), "strict is the default");
        assert!(valkey9.loads(12, Some("relaxed")).is_ok());
        assert!(valkey9.loads(81, Some("relaxed")).is_err(), "newer than it writes");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions() {
        assert_eq!(version(b"REDIS0011\xfa"), Some(11));
        assert_eq!(version(b"VALKEY080"), Some(80));
        assert_eq!(version(b"REDIS"), None);
        let v = Server::from_info("# Server\r\nredis_version:7.2.4\r\nvalkey_version:8.1.8\r\n").unwrap();
        assert_eq!(v, Server { flavour: "valkey".into(), version: (8, 1, 8) });
        assert_eq!(v.rdb_version_max(), 11);
        let r = Server::from_info("redis_version:6.2.14\r\n").unwrap();
        assert_eq!(r.rdb_version_max(), 9);
    }
}
