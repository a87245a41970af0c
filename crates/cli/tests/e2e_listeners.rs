//! Every listening socket of a relay and of a join is where the operator asked: read from the
//! kernel (/proc/PID/net/tcp{,6} against the process's socket inodes), not from our own logs. And a
//! stranger on the relay's UCX port gets nothing back, while the relay keeps serving.

mod common;
use common::*;
use std::collections::HashSet;
use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::{Duration, Instant};

/// The TCP sockets in LISTEN state that process `pid` holds.
fn listening(pid: u32) -> Vec<SocketAddr> {
    let mut inodes = HashSet::new();
    for e in std::fs::read_dir(format!("/proc/{pid}/fd")).into_iter().flatten().flatten() {
        if let Ok(t) = std::fs::read_link(e.path()) {
            if let Some(n) = t.to_string_lossy().strip_prefix("socket:[").and_then(|s| s.strip_suffix(']')) {
                inodes.insert(n.to_string());
            }
        }
    }
    let mut out = Vec::new();
    for (file, v6) in [("tcp", false), ("tcp6", true)] {
        let text = std::fs::read_to_string(format!("/proc/{pid}/net/{file}")).unwrap_or_default();
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            // st 0A = LISTEN; field 9 the inode.
            if f.len() < 10 || f[3] != "0A" || !inodes.contains(f[9]) {
                continue;
            }
            let (ip, port) = f[1].split_once(':').unwrap();
            let port = u16::from_str_radix(port, 16).unwrap();
            // Each 32-bit word is printed in host byte order.
            let words: Vec<[u8; 4]> = (0..ip.len() / 8).map(|w| u32::from_str_radix(&ip[w * 8..w * 8 + 8], 16).unwrap().to_ne_bytes()).collect();
            let ip = if v6 {
                let b: Vec<u8> = words.concat();
                IpAddr::V6(Ipv6Addr::from(<[u8; 16]>::try_from(b).unwrap()))
            } else {
                IpAddr::V4(Ipv4Addr::from(words[0]))
            };
            out.push(SocketAddr::new(ip, port));
        }
    }
    out
}

/// As [`listening`], for `pid` and every process it started, and theirs (the relay's UCX side).
fn listening_tree(pid: u32) -> Vec<SocketAddr> {
    let mut out = listening(pid);
    for child in agent::procstat::children(pid) {
        out.extend(listening_tree(child));
    }
    out
}

/// Relay with the default transports (auto: shm, ucx, tcp) on loopback; a join over ucx. Every
/// listener of either process is on 127.0.0.1; the relay's UCX listeners are the ones its log and
/// status name; a stranger's garbage on the UCX port gets no byte back and the join still works.
#[test]
fn every_listener_is_where_it_was_asked_for() {
    let master = Server::start(Flavor::Redis70, &[]);
    data::fill_big_values(&mut master.client(), 48, 1 << 20);
    let replica = Server::start(Flavor::Redis70, &[]);
    let metrics = format!("127.0.0.1:{}", fixtures::free_port());
    let relay = spawn_relay(&master.addr(), |cmd| {
        cmd.args(["--metrics", &metrics]);
    });
    let loopback = IpAddr::V4(Ipv4Addr::LOCALHOST);

    let st = status_json(&relay.addr);
    let ucx: Vec<SocketAddr> = st["ucx_listeners"].as_array().unwrap().iter().map(|a| a.as_str().unwrap().parse().unwrap()).collect();
    assert!(!ucx.is_empty(), "the relay offers ucx here but names no UCX listener: {st}");
    let mut asked: Vec<SocketAddr> = vec![relay.addr.parse().unwrap(), metrics.parse().unwrap()];
    asked.extend(&ucx);
    // UCX runs in a process the relay started (its UCX side): its listeners are the relay's too.
    let mut found = listening_tree(relay.proc.pid());
    found.sort();
    asked.sort();
    assert_eq!(found, asked, "the relay (with its UCX side) listens beyond what was asked (--listen, --metrics) and the UCX listeners it names");
    assert!(!listening(relay.proc.pid()).iter().any(|a| ucx.contains(a)), "UCX listens in the relay's own process, not in its side");
    assert!(ucx.iter().all(|a| a.ip() == loopback), "UCX listens off the --listen device: {ucx:?}");
    assert!(relay.proc.output().contains(&format!("ucx_listeners=[\"{}", ucx[0])), "start-up log does not name the UCX listener:\n{}", relay.proc.output());

    // A stranger on the UCX port: garbage in, nothing out; the relay is not disturbed.
    let mut s = std::net::TcpStream::connect(ucx[0]).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    let garbage = data::bytes(7, 64 << 10);
    let _ = s.write_all(&garbage); // UCX may reset the connection before all of it is taken.
    let mut got = Vec::new();
    let _ = s.read_to_end(&mut got); // Ends at UCX's close/reset, or the read timeout.
    assert!(got.is_empty(), "a stranger on the UCX port got {} bytes back", got.len());
    drop(s);

    // A join over ucx: its replica listener and peer listener on loopback (where the relay is
    // reached), UCX's own listeners on the device that reaches the relay. Sampled while it runs.
    let mut join = spawn_join(&relay.addr, &replica.addr(), |cmd| {
        cmd.args(["--transport", "ucx"]);
    });
    let mut seen: HashSet<SocketAddr> = HashSet::new();
    let deadline = Instant::now() + Duration::from_secs(300);
    while join.running() {
        assert!(Instant::now() < deadline, "join still running:\n{}", join.output());
        seen.extend(listening(join.pid()));
    }
    let j = finish_join(join);
    assert_eq!(j.code, Some(0), "join failed:\n{}", j.output);
    assert_eq!((j.report["handoff"].as_str(), j.report["transport"].as_str()), (Some("partial"), Some("ucx")), "{}", j.output);
    assert!(!seen.is_empty(), "the join was never seen listening (it must listen for its replica)");
    // The peer listener the join logged (--peer-listen's default: where it reaches the relay from)
    // was among those seen: the sampling saw the join's listeners, not nothing.
    let peer: SocketAddr = j
        .output
        .lines()
        .find(|l| l.contains("serving peers"))
        .and_then(|l| l.split("listen=").nth(1))
        .and_then(|r| r.split_whitespace().next())
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("no peer listener logged:\n{}", j.output));
    assert!(seen.contains(&peer), "peer listener {peer} not seen among {seen:?}");
    let off: Vec<&SocketAddr> = seen.iter().filter(|a| a.ip() != loopback).collect();
    assert!(off.is_empty(), "the join listened off loopback: {off:?} (all seen: {seen:?})");
    assert_identical(&master, &replica);

    // The relay after all of it: still only what was asked.
    let mut after = listening_tree(relay.proc.pid());
    after.sort();
    assert_eq!(after, asked);
}
