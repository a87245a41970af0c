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
