//! Hosts for tests: network namespaces joined by a veth pair, made and removed by the test itself.
//! Only the test's own namespace addresses are used.

use std::process::Command;

fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip").args(args).output().map_err(|e| format!("run ip {}: {e}", args.join(" ")))?;
    if !out.status.success() {
        return Err(format!("ip {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim()));
    }
    Ok(())
}

/// Whether this process may create namespaces (root with `ip` present).
pub fn available() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    root && Command::new("ip").arg("-V").output().is_ok()
}

/// Two hosts, `a` and `b`, each a namespace with loopback up, joined by a veth pair.
pub struct Pair {
    /// Namespace names.
    pub a: String,
    /// Namespace names.
    pub b: String,
    /// Address of `a` on the link.
    pub a_ip: String,
    /// Address of `b` on the link.
    pub b_ip: String,
}

impl Pair {
    /// Make the two hosts; names carry this process's id so concurrent runs do not collide.
    pub fn new(tag: &str) -> Result<Pair, String> {
        let id = std::process::id();
        let p = Pair {
            a: format!("fr{tag}a{id}"),
            b: format!("fr{tag}b{id}"),
            a_ip: "10.199.0.1".into(),
            b_ip: "10.199.0.2".into(),
        };
        let (va, vb) = (format!("v{tag}a{id}"), format!("v{tag}b{id}"));
        let (va, vb) = (&va[..va.len().min(15)], &vb[..vb.len().min(15)]);
        for ns in [&p.a, &p.b] {
            let _ = ip(&["netns", "del", ns]);
            ip(&["netns", "add", ns])?;
            ip(&["-n", ns, "link", "set", "lo", "up"])?;
        }
        ip(&["link", "add", va, "type", "veth", "peer", "name", vb])?;
        ip(&["link", "set", va, "netns", &p.a])?;
        ip(&["link", "set", vb, "netns", &p.b])?;
        ip(&["-n", &p.a, "addr", "add", &format!("{}/24", p.a_ip), "dev", va])?;
        ip(&["-n", &p.b, "addr", "add", &format!("{}/24", p.b_ip), "dev", vb])?;
        ip(&["-n", &p.a, "link", "set", va, "up"])?;
        ip(&["-n", &p.b, "link", "set", vb, "up"])?;
        Ok(p)
    }
}

impl Drop for Pair {
    fn drop(&mut self) {
        // Deleting a namespace removes its end of the veth pair, and with it the peer.
        for ns in [&self.a, &self.b] {
            let _ = ip(&["netns", "del", ns]);
        }
    }
}

/// Run `f` on a thread that has entered namespace `ns`; sockets it creates stay in that namespace.
pub fn within<T: Send + 'static>(ns: &str, f: impl FnOnce() -> T + Send + 'static) -> Result<T, String> {
    let path = format!("/var/run/netns/{ns}");
    std::thread::spawn(move || {
        let file = std::fs::File::open(&path).map_err(|e| format!("open {path}: {e}"))?;
        use std::os::fd::AsRawFd;
        // SAFETY: `file` is an open namespace descriptor for the duration of the call; setns changes
        // only this (fresh, short-lived) thread's network namespace.
        if unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
            return Err(format!("setns {path}: {}", std::io::Error::last_os_error()));
        }
        Ok(f())
    })
    .join()
    .map_err(|_| "namespace thread panicked".to_string())?
}

/// Namespaces of every live [`Lab`] in this process, so a signal handler can remove them
/// ([`remove_all_labs`]) when the process is told to stop and destructors will not run.
static LIVE: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

fn track(ns: &str, live: bool) {
    let mut v = LIVE.lock().unwrap_or_else(|p| p.into_inner());
    if live {
        v.push(ns.to_string());
    } else {
        v.retain(|n| n != ns);
    }
}

/// Remove every live lab's namespaces (for a SIGINT/SIGTERM handler that then exits).
pub fn remove_all_labs() {
    let names = std::mem::take(&mut *LIVE.lock().unwrap_or_else(|p| p.into_inner()));
    for ns in names {
        let _ = ip(&["netns", "del", &ns]);
    }
}

/// A small network of hosts: one namespace per host, each joined by a veth pair to a bridge in a
/// switch namespace, every host's egress shaped alike (`tc tbf`), as ../shared/tools/netlab.sh does.
/// Host 0 is the master's host. Everything is removed on drop, also when the run failed.
pub struct Lab {
    /// The switch namespace (holds the bridge).
    pub switch: String,
    /// The hosts, in order.
    pub hosts: Vec<Host>,
    /// The egress rate of every host, as given to tc (`100mbit`), or None for unshaped.
    pub rate: Option<String>,
}

/// One host of a [`Lab`].
#[derive(Debug, Clone)]
pub struct Host {
    /// Its namespace.
    pub ns: String,
    /// Its address.
    pub ip: String,
    /// Its network device (inside `ns`).
    pub dev: String,
}

fn tc_burst(rate: &str) -> Result<String, String> {
    // tbf needs a bucket of at least rate/HZ bytes; 1 % of a second of traffic, at least 512 KiB.
    let r = rate.to_ascii_lowercase();
    let (num, unit) = r.split_at(r.find(|c: char| !c.is_ascii_digit()).unwrap_or(r.len()));
    let n: u64 = num.parse().map_err(|_| format!("bad rate {rate:?}"))?;
    let bits = match unit {
        "kbit" => n * 1_000,
        "mbit" => n * 1_000_000,
        "gbit" => n * 1_000_000_000,
        "bit" | "" => n,
        _ => return Err(format!("bad rate unit in {rate:?} (kbit, mbit, gbit)")),
    };
    Ok(format!("{}", (bits / 8 / 100).max(512 * 1024)))
}

impl Lab {
    /// Make `n` hosts (addresses 10.77.0.1 ..), egress shaped to `rate` when given.
    pub fn new(n: usize, rate: Option<&str>) -> Result<Lab, String> {
        use std::sync::atomic::{AtomicU32, Ordering};
        static COUNT: AtomicU32 = AtomicU32::new(0);
        assert!((1..=60).contains(&n), "1..60 hosts");
        let c = COUNT.fetch_add(1, Ordering::SeqCst) % 100;
        let id = std::process::id();
        let mut lab = Lab { switch: format!("frl{id}x{c}s"), hosts: Vec::new(), rate: rate.map(str::to_string) };
        let sw = lab.switch.clone();
        let _ = ip(&["netns", "del", &sw]);
        ip(&["netns", "add", &sw])?;
        track(&sw, true);
        ip(&["-n", &sw, "link", "add", "br0", "type", "bridge"])?;
        ip(&["-n", &sw, "link", "set", "br0", "up"])?;
        for i in 0..n {
            let ns = format!("frl{id}x{c}h{i}");
            let (dev, peer) = (format!("h{i}x{c}e{id}"), format!("h{i}x{c}p{id}"));
            let (dev, peer) = (dev[..dev.len().min(15)].to_string(), peer[..peer.len().min(15)].to_string());
            let host = Host { ns: ns.clone(), ip: format!("10.77.0.{}", i + 1), dev: dev.clone() };
            let _ = ip(&["netns", "del", &ns]);
            ip(&["netns", "add", &ns])?;
            track(&ns, true);
            lab.hosts.push(host.clone()); // from here on, drop removes it
            ip(&["-n", &ns, "link", "set", "lo", "up"])?;
            ip(&["link", "add", &dev, "type", "veth", "peer", "name", &peer])?;
            ip(&["link", "set", &dev, "netns", &ns])?;
            ip(&["link", "set", &peer, "netns", &sw])?;
            ip(&["-n", &sw, "link", "set", &peer, "master", "br0"])?;
            ip(&["-n", &sw, "link", "set", &peer, "up"])?;
            ip(&["-n", &ns, "addr", "add", &format!("{}/24", host.ip), "dev", &dev])?;
            ip(&["-n", &ns, "link", "set", &dev, "up"])?;
            if let Some(rate) = rate {
                let burst = tc_burst(rate)?;
                let out = Command::new("ip")
                    .args(["netns", "exec", &ns, "tc", "qdisc", "add", "dev", &dev, "root", "tbf", "rate", rate, "burst", &burst, "latency", "100ms"])
                    .output()
                    .map_err(|e| format!("run tc: {e}"))?;
                if !out.status.success() {
                    return Err(format!("tc tbf on {ns}: {}", String::from_utf8_lossy(&out.stderr).trim()));
                }
            }
        }
        Ok(lab)
    }

    /// Bytes a host's device has sent so far.
    pub fn tx_bytes(&self, host: usize) -> Result<u64, String> {
        let h = &self.hosts[host];
        let out = Command::new("ip").args(["-n", &h.ns, "-j", "-s", "link", "show", "dev", &h.dev]).output().map_err(|e| format!("run ip: {e}"))?;
        let text = String::from_utf8_lossy(&out.stdout);
        // `"tx":{"bytes":N,` — read it without a JSON dependency in this crate.
        let after = text.split("\"tx\":{").nth(1).ok_or_else(|| format!("no tx stats for {}: {text}", h.dev))?;
        let n = after.split("\"bytes\":").nth(1).and_then(|s| s.split([',', '}']).next()).ok_or_else(|| format!("no tx bytes for {}", h.dev))?;
        n.trim().parse().map_err(|e| format!("tx bytes {n:?}: {e}"))
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        for h in &self.hosts {
            let _ = ip(&["netns", "del", &h.ns]);
            track(&h.ns, false);
        }
        let _ = ip(&["netns", "del", &self.switch]);
        track(&self.switch, false);
    }
}
