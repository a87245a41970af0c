//! Shared helpers for the end-to-end tests: real servers (fixtures), the real `fastrepl` binary as
//! relay and agent processes, over real sockets.
#![allow(dead_code)]

use std::process::Command;
use std::time::Duration;
// Not every test file uses every re-export.
#[allow(unused_imports)]
pub use fixtures::{data, wait_until, Flavor, Proc, Server};

pub const TOKEN: &str = "test-token-0123456789abcdef";

pub fn fastrepl() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_fastrepl"));
    c.env("FASTREPL_TOKEN", TOKEN).env_remove("FASTREPL_MASTER_PASSWORD").env_remove("FASTREPL_REPLICA_PASSWORD");
    c
}

/// The transport the suite runs over, from `FASTREPL_TEST_TRANSPORT`: `tcp` (default), `shm`,
/// `ucx-tcp` (UCX over its TCP transport) or `ucx-sm` (UCX over its shared-memory transports).
/// `scripts/test.sh` runs the end-to-end suites once per transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    Tcp,
    Shm,
    UcxTcp,
    UcxSm,
}

impl Transport {
    pub fn from_env() -> Transport {
        match std::env::var("FASTREPL_TEST_TRANSPORT").as_deref() {
            Ok("shm") => Transport::Shm,
            Ok("ucx-tcp") => Transport::UcxTcp,
            Ok("ucx-sm") => Transport::UcxSm,
            Ok("tcp") | Err(_) => Transport::Tcp,
            Ok(other) => panic!("FASTREPL_TEST_TRANSPORT={other}: expected tcp, shm, ucx-tcp or ucx-sm"),
        }
    }
    /// The `--transport` argument for relay and join.
    pub fn arg(self) -> &'static str {
        match self {
            Transport::Tcp => "tcp",
            Transport::Shm => "shm",
            Transport::UcxTcp | Transport::UcxSm => "ucx",
        }
    }
    /// UCX's own transport selection, for both processes.
    pub fn ucx_tls(self) -> Option<&'static str> {
        match self {
            Transport::UcxTcp => Some("tcp"),
            Transport::UcxSm => Some("sm"),
            _ => None,
        }
    }
    /// Add the transport's arguments and environment to a relay or join command.
    pub fn apply(self, cmd: &mut Command) {
        cmd.args(["--transport", self.arg()]);
        if let Some(tls) = self.ucx_tls() {
            cmd.env("UCX_TLS", tls);
        }
    }
    /// Check a join's report used this transport (and, for ucx, the UCX transport we asked for).
    pub fn check_report(self, report: &serde_json::Value, output: &str) {
        assert_eq!(report["transport"], self.arg(), "join used another transport:\n{output}");
        let detail = report["transport_detail"].as_str().unwrap_or_default();
        match self {
            Transport::UcxTcp => assert!(detail.starts_with("tcp/"), "UCX did not read over tcp: {detail}"),
            Transport::UcxSm => assert!(["posix/", "sysv/", "cma/", "xpmem/", "knem/"].iter().any(|p| detail.contains(p)), "UCX did not read over shared memory: {detail}"),
            _ => {}
        }
    }
}

/// A relay process and the address agents reach it at.
pub struct Relay {
    pub proc: Proc,
    pub addr: String,
}

/// A relay process for `master`, listening on a free loopback port, over the suite's transport.
pub fn relay(master: &str, extra: &[&str], env: &[(&str, &str)]) -> Relay {
    spawn_relay(master, |cmd| {
        Transport::from_env().apply(cmd);
        cmd.args(extra).envs(env.iter().copied());
    })
}

/// A relay process for `master` on a free loopback port; `configure` adds its arguments and
/// environment (for tests that choose the transport themselves). A free port can be taken by another
/// test between its choice and the relay's bind: then another port is tried.
pub fn spawn_relay(master: &str, configure: impl Fn(&mut Command)) -> Relay {
    let mut taken = Vec::new();
    for _ in 0..5 {
        match try_spawn_relay_at(&format!("127.0.0.1:{}", fixtures::free_port()), master, &configure) {
            Ok(r) => return r,
            Err(addr) => taken.push(addr),
        }
    }
    panic!("no free port for the relay: taken before it could bind {taken:?}");
}

/// Like [`spawn_relay`], on a given address (a relay restarted where agents expect it).
pub fn spawn_relay_at(addr: &str, master: &str, configure: impl FnOnce(&mut Command)) -> Relay {
    try_spawn_relay_at(addr, master, configure).unwrap_or_else(|addr| panic!("{addr} is taken: the relay cannot listen there"))
}

/// Start a relay on `addr` and wait until *it* listens there (its log says so: a port taken by
/// another process would also accept a connection). `Err(addr)`: the address was in use.
fn try_spawn_relay_at(addr: &str, master: &str, configure: impl FnOnce(&mut Command)) -> Result<Relay, String> {
    let addr = addr.to_string();
    let mut cmd = fastrepl();
    cmd.args(["relay", "--master", master, "--listen", &addr]);
    configure(&mut cmd);
    let mut proc = Proc::spawn("relay", cmd);
    let listening = format!("relay listening on {addr}");
    let bound = wait_until("the relay to listen", Duration::from_secs(20), || {
        let out = proc.output();
        if out.contains(&listening) {
            return Some(true);
        }
        if !proc.running() {
            assert!(out.contains("Address already in use"), "relay exited:\n{out}");
            return Some(false);
        }
        None
    });
    if bound {
        Ok(Relay { proc, addr })
    } else {
        Err(addr)
    }
}

/// The outcome of a `fastrepl join --json`.
pub struct Joined {
    pub code: Option<i32>,
    pub output: String,
    pub report: serde_json::Value,
}

pub fn start_join(relay: &str, replica: &str, extra: &[&str], env: &[(&str, &str)]) -> Proc {
    spawn_join(relay, replica, |cmd| {
        Transport::from_env().apply(cmd);
        cmd.args(extra).envs(env.iter().copied());
    })
}

/// `fastrepl join --json` of `replica` through `relay`; `configure` adds arguments and environment.
pub fn spawn_join(relay: &str, replica: &str, configure: impl FnOnce(&mut Command)) -> Proc {
    let mut cmd = fastrepl();
    cmd.args(["join", "--relay", relay, "--replica", replica, "--json"]);
    configure(&mut cmd);
    Proc::spawn(&format!("join {replica}"), cmd)
}

pub fn finish_join(mut p: Proc) -> Joined {
    let code = p.wait(Duration::from_secs(300));
    let output = p.output();
    let report = output.lines().rev().find_map(|l| serde_json::from_str(l).ok()).unwrap_or(serde_json::Value::Null);
    Joined { code, output, report }
}

pub fn join(relay: &str, replica: &str, extra: &[&str], env: &[(&str, &str)]) -> Joined {
    finish_join(start_join(relay, replica, extra, env))
}

/// Assert a join handed off by partial resync, with a useful message otherwise.
pub fn assert_partial(j: &Joined) {
    assert_eq!(j.code, Some(0), "join failed:\n{}", j.output);
    assert_eq!(j.report["handoff"], "partial", "{}", j.output);
    Transport::from_env().check_report(&j.report, &j.output);
}

/// `verify` as a user runs it; returns (exit code, output).
pub fn verify(a: &Server, b: &Server) -> (Option<i32>, String) {
    let mut cmd = fastrepl();
    cmd.args(["verify", &a.addr(), &b.addr()]);
    if let Some(p) = &a.password {
        cmd.env("FASTREPL_VERIFY_PASSWORD", p);
    }
    let out = cmd.output().expect("run verify");
    (out.status.code(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

pub fn assert_identical(a: &Server, b: &Server) {
    let (code, out) = verify(a, b);
    assert_eq!(code, Some(0), "verify found differences:\n{out}");
}

pub fn info_num(s: &Server, section: &str, k: &str) -> i64 {
    s.client().info(section).unwrap().num(k).unwrap_or_else(|| panic!("INFO {section} has no {k}"))
}

/// Wait until `replica` is a connected replica at the master's offset (after the writer stopped).
pub fn wait_caught_up(master: &Server, replica: &Server) {
    wait_until("the replica to catch up with the master", Duration::from_secs(60), || {
        let m = master.client().info("replication").ok()?.num("master_repl_offset")?;
        let r = replica.client().info("replication").ok()?;
        (r.get("master_link_status") == Some("up") && r.num("slave_repl_offset") == Some(m)).then_some(())
    });
}

/// The replica is untouched: a master with no keys.
pub fn assert_untouched(replica: &Server) {
    let r = replica.client().info("replication").unwrap();
    assert_eq!(r.get("role"), Some("master"), "the replica was left replicating: {:?}", r.0);
    assert_eq!(replica.client().cmd(&["DBSIZE"]).unwrap().as_int(), Some(0));
}

pub fn require_server(f: Flavor) {
    // Server binaries are installed by scripts/setup.sh; a missing one is a set-up error, not a skip.
    assert!(f.available(), "{} missing at {}: run scripts/setup.sh", f.name(), f.binary().display());
}

/// Wait until the relay (the master's only replica in these tests) has acknowledged everything the
/// master wrote: then the relay's log holds it.
pub fn wait_relay_acked(master: &Server) {
    wait_until("the relay to acknowledge the master's offset", Duration::from_secs(30), || {
        let i = master.client().info("replication").ok()?;
        let end = i.num("master_repl_offset")?;
        let acked: i64 = i.get("slave0")?.split(',').find_map(|kv| kv.strip_prefix("offset="))?.parse().ok()?;
        (acked >= end).then_some(())
    });
}

/// A CA and one certificate it signs (for 127.0.0.1 and localhost), made with the openssl CLI.
pub struct Certs {
    dir: tempfile::TempDir,
}

impl Certs {
    pub fn generate() -> Certs {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let run = |args: &[&str]| {
            let out = std::process::Command::new("openssl").args(args).current_dir(d).output().expect("openssl (scripts/setup.sh installs it)");
            assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        };
        run(&["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt", "-days", "2", "-subj", "/CN=fastrepl test CA"]);
        run(&["req", "-newkey", "rsa:2048", "-nodes", "-keyout", "node.key", "-out", "node.csr", "-subj", "/CN=localhost"]);
        std::fs::write(d.join("ext.cnf"), "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n").unwrap();
        run(&["x509", "-req", "-in", "node.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial", "-out", "node.crt", "-days", "2", "-extfile", "ext.cnf"]);
        Certs { dir }
    }

    pub fn path(&self, f: &str) -> String {
        self.dir.path().join(f).display().to_string()
    }

    /// Server arguments: TLS configured, tls-auth-clients on (the default).
    pub fn server_args(&self) -> Vec<String> {
        ["--tls-cert-file", &self.path("node.crt"), "--tls-key-file", &self.path("node.key"), "--tls-ca-cert-file", &self.path("ca.crt")].iter().map(|s| s.to_string()).collect()
    }

    /// Our flags.
    pub fn flags(&self) -> Vec<String> {
        ["--tls", "--cacert", &self.path("ca.crt"), "--cert", &self.path("node.crt"), "--key", &self.path("node.key")].iter().map(|s| s.to_string()).collect()
    }
}

/// `fastrepl status --relay RELAY --json`, parsed; panics with the command's stderr when it fails.
pub fn status_json(relay: &str) -> serde_json::Value {
    let out = fastrepl().args(["status", "--relay", relay, "--json"]).output().unwrap();
    assert!(out.status.success(), "status failed: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Wait (30 s at most) until the relay at `relay` holds a complete generation.
pub fn wait_relay_generation(relay: &str) {
    fixtures::wait_until("the relay's first generation", std::time::Duration::from_secs(30), || {
        let st = status_json(relay);
        st["generations"].as_array()?.iter().any(|g| g["state"] == "complete").then_some(())
    });
}

/// A join of a replica that loads slowly (µs per key, so the join stays in `loading` long enough
/// to scrape) through `relay`, its `--join-metrics` scraped while it loads: the running join and
/// the scrape's text. Finish it with [`finish_join`].
pub fn join_scraped_while_loading(relay: &str, replica: &Server) -> (Proc, String) {
    let maddr = format!("127.0.0.1:{}", fixtures::free_port());
    let mut p = start_join(relay, &replica.addr(), &["--join-metrics", &maddr], &[]);
    let text = wait_until("the join to report loading", Duration::from_secs(60), || {
        assert!(p.running(), "join exited early:\n{}", p.output());
        let text = metrics::scrape(&maddr, Duration::from_secs(5)).ok()?;
        let s = metrics::parse(&text).unwrap();
        s.iter().any(|s| s.name == "fastrepl_join_phase" && s.labels[0].1 == "loading" && s.value == 1.0).then_some(text)
    });
    (p, text)
}
