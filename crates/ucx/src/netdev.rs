//! Which network device carries an address, and which TCP sockets this process listens on.
//!
//! UCX's tcp transport opens a listening socket on every network device it uses, whatever the
//! application asked for; restricting `NET_DEVICES` to the device that carries the address the
//! operator named keeps that listener where it was told to be.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// The network device (interface name, e.g. `lo`, `eth0`) that holds `ip`; for a loopback address
/// not assigned exactly (127.0.0.2), the loopback device. `None` for an unspecified address
/// (0.0.0.0, ::: every device was asked for) or an address no device holds.
pub fn device_of(ip: IpAddr) -> Option<String> {
    if ip.is_unspecified() {
        return None;
    }
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: `head` is writable; on success the list is freed below exactly once.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return None;
    }
    let (mut exact, mut loopback) = (None, None);
    let mut cur = head;
    while !cur.is_null() {
        // SAFETY: `cur` is a node of the list getifaddrs returned, alive until freeifaddrs.
        let ifa = unsafe { &*cur };
        cur = ifa.ifa_next;
        if ifa.ifa_name.is_null() {
            continue;
        }
        // SAFETY: ifa_name is a NUL-terminated string owned by the list.
        let name = unsafe { std::ffi::CStr::from_ptr(ifa.ifa_name) }.to_string_lossy().into_owned();
        if ifa.ifa_flags & libc::IFF_LOOPBACK as u32 != 0 && loopback.is_none() {
            loopback = Some(name.clone());
        }
        // SAFETY: ifa_addr, when not null, points at a sockaddr of the family it names.
        if let Some(addr) = unsafe { sockaddr_ip(ifa.ifa_addr) } {
            if addr == ip && exact.is_none() {
                exact = Some(name);
            }
        }
    }
    // SAFETY: `head` came from a successful getifaddrs and is freed once.
    unsafe { libc::freeifaddrs(head) };
    exact.or(if ip.is_loopback() { loopback } else { None })
}

/// # Safety
/// `sa` is null or points at a valid sockaddr whose length matches its family.
unsafe fn sockaddr_ip(sa: *const libc::sockaddr) -> Option<IpAddr> {
    if sa.is_null() {
        return None;
    }
    // SAFETY: the caller vouches that `sa` is a valid sockaddr; its family says which one.
    unsafe {
        match (*sa).sa_family as i32 {
            libc::AF_INET => {
                let v4 = &*(sa as *const libc::sockaddr_in);
                Some(IpAddr::V4(Ipv4Addr::from(u32::from_be(v4.sin_addr.s_addr))))
            }
            libc::AF_INET6 => {
                let v6 = &*(sa as *const libc::sockaddr_in6);
                Some(IpAddr::V6(Ipv6Addr::from(v6.sin6_addr.s6_addr)))
            }
            _ => None,
        }
    }
}

/// The TCP sockets this process has in LISTEN state, from /proc/net/tcp{,6} matched against the
/// socket inodes of /proc/self/fd (empty where /proc is not readable).
pub fn listening() -> Vec<SocketAddr> {
    listening_of("self")
}

/// As [`listening`], for process `pid` (`"self"` or a number).
pub fn listening_of(pid: &str) -> Vec<SocketAddr> {
    let mut inodes = std::collections::HashSet::new();
    if let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fd")) {
        for e in dir.flatten() {
            if let Ok(t) = std::fs::read_link(e.path()) {
                let t = t.to_string_lossy().into_owned();
                if let Some(n) = t.strip_prefix("socket:[").and_then(|s| s.strip_suffix(']')) {
                    inodes.insert(n.to_string());
                }
            }
        }
    }
    let mut out = Vec::new();
    for (file, v6) in [("tcp", false), ("tcp6", true)] {
        let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/net/{file}")) else { continue };
        for line in text.lines().skip(1) {
            if let Some((addr, inode)) = parse_proc_net_tcp_listen(line, v6) {
                if inodes.contains(&inode) {
                    out.push(addr);
                }
            }
        }
    }
    out.sort();
    out
}

/// One line of /proc/net/tcp{,6}: the local address and inode of a socket in LISTEN state (0A).
fn parse_proc_net_tcp_listen(line: &str, v6: bool) -> Option<(SocketAddr, String)> {
    let f: Vec<&str> = line.split_whitespace().collect();
    if f.len() < 10 || f[3] != "0A" {
        return None;
    }
    let (ip, port) = f[1].split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    // The kernel prints each 32-bit word of the address in host byte order.
    let ip = if v6 {
        if ip.len() != 32 {
            return None;
        }
        let mut b = [0u8; 16];
        for w in 0..4 {
            let word = u32::from_str_radix(&ip[w * 8..w * 8 + 8], 16).ok()?;
            b[w * 4..w * 4 + 4].copy_from_slice(&word.to_ne_bytes());
        }
        IpAddr::V6(Ipv6Addr::from(b))
    } else {
        IpAddr::V4(Ipv4Addr::from(u32::from_str_radix(ip, 16).ok()?.to_ne_bytes()))
    };
    Some((SocketAddr::new(ip, port), f[9].to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_addresses_are_on_the_loopback_device() {
        let lo = device_of("127.0.0.1".parse().unwrap()).expect("a loopback device");
        assert_eq!(device_of("127.0.0.9".parse().unwrap()), Some(lo));
        assert_eq!(device_of("0.0.0.0".parse().unwrap()), None);
        assert_eq!(device_of("203.0.113.77".parse().unwrap()), None, "an address no device holds");
    }

    #[test]
    fn finds_our_own_listener_and_only_listeners() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let a = l.local_addr().unwrap();
        let _c = std::net::TcpStream::connect(a).unwrap();
        let found = listening();
        assert!(found.contains(&a), "{a} not in {found:?}");
        assert_eq!(found.iter().filter(|x| x.port() == a.port()).count(), 1, "connected sockets are not listeners: {found:?}");
    }

    #[test]
    fn parses_kernel_lines() {
        let v4 = "   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 12345 1 0000000000000000 100 0 0 10 0";
        assert_eq!(parse_proc_net_tcp_listen(v4, false), Some(("127.0.0.1:8080".parse().unwrap(), "12345".into())));
        let est = v4.replace(" 0A ", " 01 ");
        assert_eq!(parse_proc_net_tcp_listen(&est, false), None);
        let v6 = "   0: 00000000000000000000000001000000:1F90 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 777 1 0000000000000000 100 0 0 10 0";
        assert_eq!(parse_proc_net_tcp_listen(v6, true), Some(("[::1]:8080".parse().unwrap(), "777".into())));
    }
}
