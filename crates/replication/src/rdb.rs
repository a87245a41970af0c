//! What the agent must know about an RDB payload before it touches a replica.

/// The RDB format version from the first 9 bytes (`REDIS0011`, or Valkey 9's `VALKEY080`).
pub fn version(header: &[u8]) -> Option<u32> {
    let digits = if let Some(d) = header.strip_prefix(b"REDIS") {
        d.get(..4)?
    } else {
        header.strip_prefix(b"VALKEY")?.get(..3)?
    };
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
