//! Strangers cannot keep agents out (issue 32): hundreds of connections that never authenticate,
//! each replaced as soon as it is dropped — silent, three bytes then a stall, a byte at a time,
//! garbage, oversized — on the relay's agent port, on the agents' peer ports and on the metrics
//! endpoint, while agents join and serve each other. Every join ends partial, the relay's memory and
//! log stay bounded, a scrape is answered, and every refusal is counted by kind.

mod common;
use common::*;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How a stranger behaves once connected.
#[derive(Debug, Clone, Copy)]
enum Manner {
    /// Says nothing.
    Silent,
    /// Three bytes of a greeting, then nothing.
    Stall,
    /// A byte every 300 ms: a handshake that never ends unless its whole is bounded.
    Trickle,
    /// Bytes that are not our protocol.
    Garbage,
    /// A megabyte (for the metrics endpoint: a request head without its end).
    Oversized,
}

const MANNERS: [Manner; 5] = [Manner::Silent, Manner::Stall, Manner::Trickle, Manner::Garbage, Manner::Oversized];

/// Strangers, each on its own thread, reconnecting until dropped.
struct Crowd {
    stop: Arc<AtomicBool>,
    connects: Arc<AtomicU64>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Crowd {
    /// `n` strangers at `target`, from the loopback addresses `sources` (in turn).
    fn start(&mut self, target: SocketAddr, n: usize, http: bool, sources: &[Ipv4Addr]) {
        for i in 0..n {
            let (stop, connects) = (self.stop.clone(), self.connects.clone());
            let (source, manner) = (sources[i % sources.len()], MANNERS[i % MANNERS.len()]);
            self.threads.push(std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    match connect_from(source, target) {
                        Ok(s) => {
                            connects.fetch_add(1, Ordering::Relaxed);
                            behave(s, manner, http, &stop);
                        }
                        // Not listening (a peer port before its agent starts or after it ends).
                        Err(_) => std::thread::sleep(Duration::from_millis(20)), // A pause between attempts, not synchronization.
                    }
                }
            }));
        }
    }

    fn new() -> Crowd {
        Crowd { stop: Arc::new(AtomicBool::new(false)), connects: Arc::new(AtomicU64::new(0)), threads: Vec::new() }
    }
}

impl Drop for Crowd {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// A TCP connection to `target` from `source` (any loopback address is this host's).
fn connect_from(source: Ipv4Addr, target: SocketAddr) -> std::io::Result<TcpStream> {
    use rustix::net::{bind, connect, socket, sockopt, AddressFamily, SocketType};
    let fd = socket(AddressFamily::INET, SocketType::STREAM, None)?;
    // A connect into a full backlog waits for SYN retries; this bounds it (and every later write).
    sockopt::set_socket_timeout(&fd, sockopt::Timeout::Send, Some(Duration::from_secs(1)))?;
    bind(&fd, &SocketAddrV4::new(source, 0))?;
    connect(&fd, &target)?;
    Ok(TcpStream::from(fd))
}

/// Do as `manner` says, then wait for the far end to close (checking `stop` every second).
fn behave(mut s: TcpStream, manner: Manner, http: bool, stop: &AtomicBool) {
    let _ = s.set_read_timeout(Some(Duration::from_secs(1)));
    let greeting: &[u8] = if http { b"GET /metrics HTTP/1.1\r\n" } else { b"FASTREPL" };
    let sent = match manner {
        Manner::Silent => Ok(()),
        Manner::Stall => s.write_all(&greeting[..3]),
        Manner::Trickle => {
            let _ = s.set_read_timeout(Some(Duration::from_millis(300)));
            Ok(())
        }
        Manner::Garbage => s.write_all(&fixtures::data::bytes(7, 200)),
        Manner::Oversized => s.write_all(&vec![b'x'; if http { 16 << 10 } else { 1 << 20 }]),
    };
    if sent.is_err() {
        return;
    }
    let mut buf = [0u8; 4096];
    let mut at = 0;
    while !stop.load(Ordering::Relaxed) {
        match s.read(&mut buf) {
            Ok(0) => return,
            Ok(_) => {}
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                if let Manner::Trickle = manner {
                    if s.write_all(&[greeting[at % greeting.len()]]).is_err() {
                        return;
                    }
                    at += 1;
                }
            }
            Err(_) => return,
        }
    }
}

/// A process's peak resident memory so far (`VmHWM`), bytes: no peak between samples missed.
fn peak_rss_bytes(pid: u32) -> u64 {
    agent::procstat::peak_rss_kib(pid).expect("the relay's VmHWM in /proc") * 1024
}

#[test]
fn strangers_on_every_port_keep_no_agent_out_and_cost_bounded_memory_and_log() {
    let master = Server::start(Flavor::Redis70, &[]);
    data::fill_big_values(&mut master.client(), 16, 1 << 20);
    let metrics_addr = format!("127.0.0.1:{}", fixtures::free_port());
    let relay = relay(&master.addr(), &["--block-size", "1048576", "--metrics", &metrics_addr], &[]);
    wait_relay_acked(&master);
    let relay_addr: SocketAddr = relay.addr.parse().unwrap();
    let replicas: Vec<Server> = (0..4).map(|_| Server::start(Flavor::Redis70, &[])).collect();
    let peer_ports: Vec<String> = (0..replicas.len()).map(|_| format!("127.0.0.1:{}", fixtures::free_port())).collect();
    // The baseline is what the relay holds now (VmRSS), not its peak so far: that includes the
    // capture's buffers, come and gone, and would hide as much growth under the strangers.
    let rss_before = agent::procstat::rss_kib(relay.proc.pid()).expect("the relay's VmRSS in /proc") * 1024;
    let lines_before = relay.proc.output().lines().count();

    // Eight stranger addresses, none the agents' (127.0.0.1): together more than the relay's budget
    // of strangers, each within its share.
    let sources: Vec<Ipv4Addr> = (2..10).map(|n| Ipv4Addr::new(127, 0, 0, n)).collect();
    let started = Instant::now();
    let mut crowd = Crowd::new();
    crowd.start(relay_addr, 240, false, &sources);
    crowd.start(metrics_addr.parse().unwrap(), 40, true, &sources);
    for p in &peer_ports {
        crowd.start(p.parse().unwrap(), 20, false, &sources);
    }
    wait_until("the strangers to be at the relay in hundreds", Duration::from_secs(30), || (crowd.connects.load(Ordering::Relaxed) > 2000).then_some(()));

    // Three agents at once (serving each other on their peer ports, under attack too), then one more.
    let args = |i: usize| vec!["--peer-listen".to_string(), peer_ports[i].clone(), "--serve-linger-secs".into(), "5".into()];
    let joins: Vec<Proc> = (0..3).map(|i| start_join(&relay.addr, &replicas[i].addr(), &args(i).iter().map(String::as_str).collect::<Vec<_>>(), &[])).collect();
    let mut from_peers = 0;
    let mut peer_refusal_lines = 0;
    for j in joins {
        let j = finish_join(j);
        assert_partial(&j);
        from_peers += j.report["received_bytes_total"]["peers"].as_u64().unwrap_or(0);
        peer_refusal_lines = peer_refusal_lines.max(j.output.lines().filter(|l| l.contains("listener=\"peers\"")).count());
    }
    // The attack goes on over two summary periods: the log says so in a line each, not per stranger.
    let summaries = || relay.proc.output().lines().filter(|l| l.contains("connections refused in the last") && l.contains("listener=\"agents\"")).count();
    wait_until("two refusal summaries of the agents' port in the relay's log", Duration::from_secs(60), || (summaries() >= 2).then_some(()));
    // A scrape is answered while strangers crowd the endpoint.
    let scraped = wait_until("a scrape under attack", Duration::from_secs(20), || metrics::scrape(&metrics_addr, Duration::from_secs(5)).ok());
    // Every listener's refusals on every scrape: the metrics endpoint's own are counted nowhere else.
    for listener in ["agents", "metrics"] {
        let refused: f64 =
            scraped.lines().filter(|l| l.starts_with(&format!("fastrepl_admission_refused_total{{listener=\"{listener}\","))).filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok()).sum();
        assert!(refused > 0.0, "no refusal of the {listener} listener in the scrape:\n{scraped}");
    }
    let last = join(&relay.addr, &replicas[3].addr(), &args(3).iter().map(String::as_str).collect::<Vec<_>>(), &[]);
    assert_partial(&last);
    let st = status_json(&relay.addr);
    let most = peak_rss_bytes(relay.proc.pid());
    let secs = started.elapsed().as_secs();
    let connects = crowd.connects.load(Ordering::Relaxed);
    drop(crowd);

    for r in &replicas {
        assert_identical(&master, r);
    }
    // Every refusal counted by kind: the budget full, a source over its share, the deadline, bytes
    // that are not our protocol.
    let refused = &st["connections_refused_by_kind_total"];
    for kind in ["displaced", "protocol"] {
        assert!(refused[kind].as_u64().unwrap_or(0) > 0, "no {kind} refusal counted: {refused}");
    }
    assert_eq!(st["connections_refused_total"], 0, "no agent was refused at --connections-max: {st}");
    // Memory: strangers hold threads and sockets, bounded by their budget, not by how many knock.
    assert!(most < rss_before + (64 << 20), "the relay's memory grew from {rss_before} to {most} bytes under {connects} stranger connections");
    // The log: a refusal line per listener per summary period and the agents' own lines, not a line
    // per stranger.
    let out = relay.proc.output();
    let lines: Vec<&str> = out.lines().skip(lines_before).collect();
    let refusal_lines = lines.iter().filter(|l| l.contains("listener=")).count() as u64;
    let periods = secs / limits::REFUSAL_SUMMARY_EVERY.as_secs() + 2;
    assert!(refusal_lines <= 2 * periods, "{refusal_lines} refusal lines in {secs} s:\n{out}");
    assert!(lines.len() < 80, "{} relay log lines under {connects} stranger connections:\n{out}", lines.len());
    assert!(peer_refusal_lines as u64 <= 2 * periods, "an agent logged {peer_refusal_lines} lines about strangers on its peer port");

    // Strangers within the budget are closed at the deadline, a trickling one too (the deadline is
    // on the whole handshake, not on each read). The crowd's own are gone first, so that what is
    // counted from here is these two.
    wait_until("the crowd's strangers gone from the relay", Duration::from_secs(30), || (status_json(&relay.addr)["connections_unauthenticated"] == 0).then_some(()));
    let late_before = status_json(&relay.addr)["connections_refused_by_kind_total"]["deadline"].as_u64().unwrap_or(0);
    let silent = connect_from(Ipv4Addr::new(127, 0, 0, 2), relay_addr).unwrap();
    let mut trickle = connect_from(Ipv4Addr::new(127, 0, 0, 3), relay_addr).unwrap();
    trickle.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
    let mut buf = [0u8; 64];
    let mut trickled = 0;
    wait_until("the relay to close a trickling stranger", Duration::from_secs(60), || {
        if trickle.write_all(b"F").is_ok() {
            trickled += 1;
        }
        match trickle.read(&mut buf) {
            Ok(0) => Some(()),
            Err(e) if !matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => Some(()),
            _ => None,
        }
    });
    // Closed before it could have sent a whole authentication (which the relay would then refuse for
    // its bytes, deadline or not): a byte every 200 ms, and each read's own timeout never reached.
    let auth_len = transport::auth::MAGIC.len() + 2 + 1 + 2 * transport::auth::NONCE_LEN;
    assert!(trickled < auth_len, "the trickling stranger sent {trickled} bytes before it was closed (an authentication is {auth_len})");
    silent.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let end = (&silent).read_to_end(&mut Vec::new());
    assert!(!matches!(&end, Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut)), "the silent stranger is still open: {end:?}");
    let late = status_json(&relay.addr)["connections_refused_by_kind_total"]["deadline"].as_u64().unwrap_or(0) - late_before;
    assert_eq!(late, 2, "the two late strangers were not both counted at their deadline");

    eprintln!("{connects} stranger connections in {secs} s; relay RSS {rss_before} -> at most {most} bytes; {} relay log lines ({refusal_lines} about refusals); refused {refused}; agents got {from_peers} bytes from each other", lines.len());
}

/// On a TLS relay, rustls refuses a stranger's bad handshake and logs a warning of its own for each
/// ("Received a … message while expecting …"): those stay out of the log too; the gate counts the
/// refusals and sums them up.
#[test]
fn bad_tls_handshakes_cost_no_log_line_each() {
    let certs = Certs::generate();
    let master = Server::start(Flavor::Redis70, &[]);
    let relay = relay(&master.addr(), &["--agents-tls-cert", &certs.path("node.crt"), "--agents-tls-key", &certs.path("node.key")], &[]);
    let relay_addr: SocketAddr = relay.addr.parse().unwrap();
    const STRANGERS: usize = 100;
    for i in 0..STRANGERS {
        // A TLS record, but application data where a ClientHello must come: refused at once.
        let mut s = connect_from(Ipv4Addr::new(127, 0, 0, 2 + (i % 8) as u8), relay_addr).unwrap();
        s.write_all(&[0x17, 3, 3, 0, 1, 0]).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let end = s.read_to_end(&mut Vec::new());
        assert!(!matches!(&end, Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut)), "stranger {i} still open: {end:?}");
    }
    // The first refusal in full, the other 99 in the summary after it.
    let summary = wait_until("the relay's summary of the refused handshakes", Duration::from_secs(30), || {
        relay.proc.output().lines().find(|l| l.contains("connections refused in the last") && l.contains("listener=\"agents\"")).map(str::to_string)
    });
    assert!(summary.contains(&format!("protocol {}", STRANGERS - 1)), "{summary}");
    let out = relay.proc.output();
    assert!(!out.contains("while expecting"), "a log line per bad handshake:\n{out}");
    let about_strangers = out.lines().filter(|l| l.contains("listener=\"agents\"")).count();
    assert!(about_strangers <= 3, "{about_strangers} lines about {STRANGERS} strangers:\n{out}");
}
