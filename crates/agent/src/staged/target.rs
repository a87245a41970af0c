//! The server that will load a staged file, known before it runs: what it is (a name and version the
//! operator gives, or read from its binary's `--version`), and what its config file says that decides
//! whether the staged RDB is what it loads (`appendonly`) and which RDB versions it accepts
//! (`rdb-version-check`). A snapshot the server cannot load must never be staged: it would fail at
//! every start of the pod.

use crate::error::Error;
use replication::rdb::Server;
use std::path::Path;

/// The server as the operator names it (`--server redis-7.2.4`), or from its binary (`--server-binary`).
pub fn server(spec: Option<&str>, binary: Option<&Path>) -> Result<Server, Error> {
    match (spec, binary) {
        (Some(s), _) => Server::from_spec(s).ok_or_else(|| Error::Precondition(format!("--server {s:?} is not a server and version such as redis-7.2.4 or valkey-8.1.1"))),
        (None, Some(b)) => from_binary(b),
        (None, None) => Err(Error::Precondition(
            "name the server that will load the staged file: --server redis-7.2.4 (flavour-version, as in its image) or --server-binary PATH; a snapshot it cannot load would be staged and fail at every start".into(),
        )),
    }
}

/// What the binary at `path` says it is (`redis-server --version`), within a few seconds.
fn from_binary(path: &Path) -> Result<Server, Error> {
    let mut child = std::process::Command::new(path)
        .arg("--version")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .map_err(|e| Error::Precondition(format!("run {} --version: {e}", path.display())))?;
    let deadline = std::time::Instant::now() + limits::SERVER_VERSION_WAIT_MAX;
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if std::time::Instant::now() < deadline => std::thread::sleep(limits::SERVER_VERSION_POLL_EVERY), // Polling a child's exit, bounded by the deadline.
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(Error::Precondition(format!("{} --version did not answer within {:?}", path.display(), limits::SERVER_VERSION_WAIT_MAX)));
            }
            Err(e) => return Err(Error::Precondition(format!("wait for {} --version: {e}", path.display()))),
        }
    }
    let mut out = String::new();
    if let Some(mut o) = child.stdout.take() {
        use std::io::Read;
        let _ = o.by_ref().take(4096).read_to_string(&mut out);
    }
    Server::from_version_output(&out).ok_or_else(|| Error::Precondition(format!("{} --version printed {:?}: not a Redis or Valkey server", path.display(), out.lines().next().unwrap_or(""))))
}

/// What the server's config file says that staging depends on. The last setting of a directive
/// counts, as in the servers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ServerConfig {
    /// `appendonly yes`: the server would load its AOF, not the staged RDB.
    pub appendonly: bool,
    /// `rdb-version-check` (Valkey 9+), as written.
    pub rdb_version_check: Option<String>,
    /// The master `replicaof` (or `slaveof`) names, as `host:port`; `None`: none, or `no one` (the
    /// server starts as a primary).
    pub replicaof: Option<String>,
}

impl ServerConfig {
    /// Read the config at `path` (`include` directives are not followed: name the file that sets
    /// them).
    pub fn read(path: &Path) -> Result<ServerConfig, Error> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::Precondition(format!("read the server's config {}: {e}", path.display())))?;
        Ok(ServerConfig::parse(&text))
    }

    /// From a config file's text.
    pub fn parse(text: &str) -> ServerConfig {
        let mut c = ServerConfig::default();
        for (k, v) in text.lines().map(str::trim).filter(|l| !l.starts_with('#')).filter_map(|l| l.split_once(char::is_whitespace)) {
            let v = v.trim().trim_matches('"');
            if k.eq_ignore_ascii_case("appendonly") {
                c.appendonly = v.eq_ignore_ascii_case("yes");
            } else if k.eq_ignore_ascii_case("rdb-version-check") {
                c.rdb_version_check = Some(v.to_string());
            } else if k.eq_ignore_ascii_case("replicaof") || k.eq_ignore_ascii_case("slaveof") {
                c.replicaof = match v.split_whitespace().collect::<Vec<_>>()[..] {
                    [no, one] if no.eq_ignore_ascii_case("no") && one.eq_ignore_ascii_case("one") => None,
                    [host, port] => Some(endpoint::host_port(host.trim_matches('"'), port.trim_matches('"'))),
                    // Malformed: the server refuses to start with it; the address check says why.
                    _ => Some(v.to_string()),
                };
            }
        }
        c
    }
}

/// What a server that persists with AOF does instead of being staged.
pub const AOF_WAYS: &str = "Either start it with appendonly no (CONFIG SET appendonly yes after its resync), or, to keep AOF, \
     do not stage it: start it without replicaof and run the join sidecar beside it (`fastrepl join --watch --force`), which \
     joins it through the relay at every start with a partial resync on the master (contrib/k8s/replicas-aof.yaml; \
     standalone servers only)";

/// A server that would load an AOF at start is refused: its config says `appendonly yes`, or (no
/// config given) an AOF lies in the directory.
pub fn refuse_aof(dir: &Path, config: Option<(&Path, &ServerConfig)>) -> Result<(), Error> {
    if let Some((p, c)) = config {
        if c.appendonly {
            return Err(Error::Precondition(format!(
                "{} sets appendonly yes: the server would load its AOF at start, not the staged snapshot (and an AOF holds no replication info to resync from). {AOF_WAYS}",
                p.display()
            )));
        }
        return Ok(());
    }
    for name in ["appendonlydir", "appendonly.aof"] {
        if dir.join(name).exists() {
            return Err(Error::Precondition(format!(
                "{} holds an AOF ({name}): a server with appendonly yes would load it, not the staged snapshot. Remove it, or give --server-config to show that appendonly is off. {AOF_WAYS}",
                dir.display()
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_aof_server_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let conf = d.path().join("redis.conf");
        let c = ServerConfig::parse("port 6379\n# appendonly yes\nappendonly \"yes\"\n");
        assert!(
            matches!(refuse_aof(d.path(), Some((&conf, &c))), Err(Error::Precondition(e)) if e.contains("appendonly yes") && e.contains("contrib/k8s/replicas-aof.yaml") && e.contains("join --watch"))
        );
        let c = ServerConfig::parse("appendonly yes\nappendonly no\n");
        assert!(refuse_aof(d.path(), Some((&conf, &c))).is_ok(), "the last setting counts");
        assert!(refuse_aof(d.path(), None).is_ok());
        std::fs::create_dir(d.path().join("appendonlydir")).unwrap();
        assert!(matches!(refuse_aof(d.path(), None), Err(Error::Precondition(e)) if e.contains("holds an AOF") && e.contains("contrib/k8s/replicas-aof.yaml") && e.contains("join --watch")));
    }

    #[test]
    fn the_version_check_setting_is_read() {
        assert_eq!(ServerConfig::parse("rdb-version-check relaxed\n").rdb_version_check.as_deref(), Some("relaxed"));
        assert_eq!(ServerConfig::parse("# rdb-version-check relaxed\n").rdb_version_check, None);
    }

    #[test]
    fn the_master_the_config_names_is_read() {
        assert_eq!(ServerConfig::parse("port 6379\n").replicaof, None);
        let c = ServerConfig::parse("replicaof valkey-0.valkey-headless.redis.svc.cluster.local 6379\n");
        assert_eq!(c.replicaof.as_deref(), Some("valkey-0.valkey-headless.redis.svc.cluster.local:6379"));
        assert_eq!(ServerConfig::parse("slaveof ::1 7000\n").replicaof.as_deref(), Some("[::1]:7000"));
        assert_eq!(ServerConfig::parse("replicaof a 1\nreplicaof no one\n").replicaof, None, "the last setting counts");
        assert_eq!(ServerConfig::parse("# replicaof a 1\n").replicaof, None);
    }

    #[test]
    fn the_server_is_named_or_read_from_its_binary_or_refused() {
        assert_eq!(server(Some("valkey-8.1.1"), None).unwrap().to_string(), "valkey 8.1.1");
        assert!(matches!(server(Some("keydb-6"), None), Err(Error::Precondition(e)) if e.contains("keydb-6")));
        assert!(matches!(server(None, None), Err(Error::Precondition(e)) if e.contains("--server")));
        let d = tempfile::tempdir().unwrap();
        let fake = d.path().join("redis-server");
        std::fs::write(&fake, "#!/bin/sh\necho 'Redis server v=7.0.15 sha=00000000:0 malloc=jemalloc-5.3.0 bits=64 build=1'\n").unwrap();
        std::fs::set_permissions(&fake, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        assert_eq!(server(None, Some(&fake)).unwrap().version, (7, 0, 15));
        std::fs::write(&fake, "#!/bin/sh\necho hello\n").unwrap();
        assert!(matches!(server(None, Some(&fake)), Err(Error::Precondition(e)) if e.contains("not a Redis or Valkey server")));
        assert!(matches!(server(None, Some(&d.path().join("missing"))), Err(Error::Precondition(e)) if e.contains("--version")));
    }
}
