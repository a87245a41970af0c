//! Transport selection, the shm socket's authentication, `fetch` / `relay --file` over every transport,
//! and `probe`. (The core suites run over each transport via FASTREPL_TEST_TRANSPORT; these tests
//! are about choosing between them, so they set `--transport` themselves.)

mod common;
use common::*;
use std::time::Duration;

/// A relay offering `offer` (not the suite's transport).
fn relay_offering(master: &str, offer: &str) -> Relay {
    spawn_relay(master, |c| {
        c.args(["--transport", offer]);
    })
}

fn join_with(relay: &str, replica: &str, args: &[&str]) -> Joined {
    finish_join(spawn_join(relay, replica, |c| {
        c.args(args);
    }))
}

#[test]
fn auto_picks_shm_on_the_relays_host() {
    let master = Server::start(Flavor::Redis70, &[]);
    data::fill_small_mixed(&mut master.client(), 2000);
    let replica = Server::start(Flavor::Redis70, &[]);
    let relay = relay_offering(&master.addr(), "auto");
    let j = join_with(&relay.addr, &replica.addr(), &[]);
    assert_eq!(j.code, Some(0), "{}", j.output);
    assert_eq!(j.report["transport"], "shm", "{}", j.output);
    assert!(j.report["transport_detail"].as_str().unwrap().contains("auto"), "{}", j.output);
    assert_identical(&master, &replica);
}

#[test]
fn a_transport_the_relay_does_not_offer_is_refused_before_the_replica_is_touched() {
    let master = Server::start(Flavor::Redis70, &[]);
    let replica = Server::start(Flavor::Redis70, &[]);
    let relay = relay_offering(&master.addr(), "tcp");
    for t in ["shm", "ucx"] {
        let j = join_with(&relay.addr, &replica.addr(), &["--transport", t]);
        assert_ne!(j.code, Some(0), "{}", j.output);
        assert!(j.output.contains(&format!("does not offer {t}")), "{}", j.output);
        assert_untouched(&replica);
    }
}

#[test]
fn a_relay_not_offering_tcp_refuses_tcp_block_reads() {
    let master = Server::start(Flavor::Redis70, &[]);
    data::fill_small_mixed(&mut master.client(), 200);
    let relay = relay_offering(&master.addr(), "shm");
    let token = transport::Credentials::from(transport::Token::new(TOKEN.as_bytes()).unwrap());
    let addr: endpoint::Endpoint = relay.addr.parse().unwrap();
    let attached = agent::pull::progress::attach(&addr, &token, Duration::from_secs(30)).unwrap();
    let v = attached.progress.wait_until(Duration::from_secs(30), |v| v.desc.length.is_some());
    let mut reader = transport::Transport::open(&transport::tcp::TcpTransport::new(addr, token)).unwrap();
    let mut buf = vec![0u8; 16];
    match reader.read(v.desc.generation, 0, &mut buf) {
        Err(transport::Error::Refused { message, .. }) => assert!(message.contains("does not offer tcp"), "{message}"),
        other => panic!("a tcp block read from a shm-only relay must be refused, got {other:?}"),
    }
}

#[test]
fn the_shm_socket_demands_the_token_and_hands_out_nothing_without_it() {
    let master = Server::start(Flavor::Redis70, &[]);
    let mut relay = relay_offering(&master.addr(), "auto");
    let token = transport::Credentials::from(transport::Token::new(TOKEN.as_bytes()).unwrap());
    let attached = agent::pull::progress::attach(&relay.addr.parse().unwrap(), &token, Duration::from_secs(30)).unwrap();
    let name = attached.offered.shm_socket.clone().expect("the relay offers shm");
    let wrong = transport::Token::new(b"not-the-token-at-all-0000").unwrap();
    match transport::shm::connect(&name, &wrong, transport::auth::Kind::Data) {
        Err(transport::Error::Auth(_)) => {}
        Err(e) => panic!("expected an authentication failure, got {e}"),
        Ok(_) => panic!("a wrong token was accepted on the shm socket"),
    }
    // Control connections are TCP only: the relay closes one on the shm socket. (A timeout here would
    // mean the relay kept it open.)
    let mut s = transport::shm::connect(&name, token.token(), transport::auth::Kind::Control).expect("authenticates");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut b = [0u8; 1];
    match std::io::Read::read(&mut s, &mut b) {
        Ok(0) => {}
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
        other => panic!("a control connection on the shm socket must be closed by the relay, got {other:?}"),
    }
    assert!(relay.proc.running());
}

/// A file of pseudo-random bytes.
fn random_file(dir: &std::path::Path, len: usize) -> std::path::PathBuf {
    let mut x: u64 = 0x0123_4567_89AB_CDEF;
    let bytes: Vec<u8> = (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    let p = dir.join("snapshot.bin");
    std::fs::write(&p, bytes).unwrap();
    p
}

#[test]
fn fetch_pulls_a_served_file_byte_for_byte_over_every_transport() {
    let dir = tempfile::tempdir().unwrap();
    // Not a multiple of the block size, and larger than one UCX chunk.
    let file = random_file(dir.path(), 5 * 1024 * 1024 + 12345);
    let addr = format!("127.0.0.1:{}", fixtures::free_port());
    let mut cmd = fastrepl();
    cmd.args(["relay", "--file"]).arg(&file).args(["--listen", &addr, "--block-size", "262144"]);
    let mut relay = Proc::spawn("relay", cmd);
    wait_until("the file relay to listen", Duration::from_secs(20), || {
        assert!(relay.running(), "relay exited:\n{}", relay.output());
        std::net::TcpStream::connect(&addr).ok()
    });
    let want = std::fs::read(&file).unwrap();
    for (t, tls, expect) in [("tcp", None, "tcp"), ("shm", None, "shm"), ("ucx", Some("tcp"), "ucx"), ("ucx", Some("sm"), "ucx"), ("auto", None, "shm")] {
        let out = dir.path().join(format!("out-{t}-{}", tls.unwrap_or("")));
        let mut cmd = fastrepl();
        cmd.args(["fetch", "--relay", &addr, "--transport", t, "--json", "--out"]).arg(&out);
        if let Some(tls) = tls {
            cmd.env("UCX_TLS", tls);
        }
        let o = cmd.output().unwrap();
        let text = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
        assert!(o.status.success(), "fetch over {t} failed:\n{text}");
        let report: serde_json::Value = text.lines().rev().find_map(|l| serde_json::from_str(l).ok()).expect("a JSON report");
        assert_eq!(report["transport"], expect, "{text}");
        assert_eq!(report["bytes"], want.len() as u64, "{text}");
        assert!(std::fs::read(&out).unwrap() == want, "fetch over {t} ({tls:?}) wrote different bytes");
    }
    assert!(relay.running(), "the relay keeps serving");
}

#[test]
fn fetch_from_a_dead_relay_fails_and_leaves_no_file() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let port = fixtures::free_port();
    let o = fastrepl().args(["fetch", "--relay", &format!("127.0.0.1:{port}"), "--out"]).arg(&out).output().unwrap();
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("connect to relay"), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(!out.exists(), "a failed fetch must not leave a file that looks complete");
}

/// "connect to relay: Connection refused" says which relay: the join's failure names the address.
#[test]
fn a_join_to_a_dead_relay_names_it() {
    let replica = Server::start(Flavor::Redis70, &[]);
    let relay = format!("127.0.0.1:{}", fixtures::free_port());
    let j = join(&relay, &replica.addr(), &["--retries", "0"], &[]);
    assert_eq!(j.code, Some(1), "{}", j.output);
    assert!(j.output.contains(&format!("(relay {relay}, replica {})", replica.addr())) && j.output.contains("connect to relay"), "{}", j.output);
    assert_untouched(&replica);
}

/// The relay's UCX side process dies (as when UCX 1.13 aborts it on one of its assertions): the relay
/// lives on with its snapshot, says how the side ended, starts another, and joins over ucx go on.
#[test]
fn the_relays_ucx_side_dying_takes_only_itself() {
    let master = Server::start(Flavor::Redis70, &[]);
    data::fill_big_values(&mut master.client(), 8, 1 << 20);
    let mut relay = relay_offering(&master.addr(), "ucx");
    let ucx_join = |replica: &Server| {
        let j = join_with(&relay.addr, &replica.addr(), &["--transport", "ucx"]);
        assert_eq!((j.code, j.report["handoff"].as_str(), j.report["transport"].as_str()), (Some(0), Some("partial"), Some("ucx")), "{}", j.output);
        assert_identical(&master, replica);
        j
    };
    let first = ucx_join(&Server::start(Flavor::Redis70, &[]));
    assert_eq!(status_json(&relay.addr)["ucx_side_restarts_total"].as_u64(), Some(0));
    let sides = agent::procstat::children(relay.proc.pid());
    assert_eq!(sides.len(), 1, "the relay runs UCX in one process of its own: {sides:?}");
    // SAFETY: kill(2) on the pid of the relay's child, which is alive (listed just above).
    assert_eq!(unsafe { libc::kill(sides[0] as i32, libc::SIGKILL) }, 0);
    // At once: the next attach finds the side dead and starts another itself (from the thread
    // serving that agent's connection), or the relay's watcher has done it already.
    let second = ucx_join(&Server::start(Flavor::Redis70, &[]));
    assert!(
        relay.proc.running(),
        "the relay died with its UCX side:
{}",
        relay.proc.output()
    );
    let now = agent::procstat::children(relay.proc.pid());
    assert!(now.len() == 1 && now[0] != sides[0], "a new UCX side serves: {now:?} (was {sides:?})");
    // The new side outlives the connection that may have started it.
    let third = ucx_join(&Server::start(Flavor::Redis70, &[]));
    assert_eq!(agent::procstat::children(relay.proc.pid()), now, "the side that served the second join serves the third");
    for j in [&second, &third] {
        assert_eq!(first.report["generation"], j.report["generation"], "the relay kept its snapshot: no new capture");
    }
    wait_until("the relay to say how its UCX side ended", Duration::from_secs(20), || relay.proc.output().contains("UCX side process ended").then_some(()));
    assert!(relay.proc.output().contains("signal: 9"), "the relay says how its side ended:\n{}", relay.proc.output());
    assert_eq!(status_json(&relay.addr)["ucx_side_restarts_total"].as_u64(), Some(1), "status and metrics count the restart");
}

/// The relay's UCX side dies in the middle of a pull: the agent's next read fails, it attaches again
/// once, gets the new side's address and finishes the same attempt (`--retries 0`).
#[test]
fn a_pull_over_ucx_goes_on_when_the_relays_ucx_side_dies_under_it() {
    // A master slow to write its RDB: the pull reads blocks as they are published, for seconds.
    let master = Server::start(Flavor::Redis70, &["--rdb-key-save-delay", "2000"]);
    data::fill_big_values(&mut master.client(), 1500, 8 << 10);
    let replica = Server::start(Flavor::Redis70, &[]);
    let relay = spawn_relay(&master.addr(), |c| {
        c.args(["--transport", "ucx", "--block-size", "65536"]);
    });
    // UCX over tcp: a dead side fails reads at once (over shared memory only the GET's deadline
    // would tell).
    let join = spawn_join(&relay.addr, &replica.addr(), |c| {
        c.args(["--transport", "ucx", "--retries", "0"]).env("UCX_TLS", "tcp");
    });
    wait_until("the agent to attach over ucx", Duration::from_secs(30), || (status_json(&relay.addr)["attaches_total"]["ucx"].as_u64()? >= 1).then_some(()));
    let sides = agent::procstat::children(relay.proc.pid());
    assert_eq!(sides.len(), 1, "{sides:?}");
    // SAFETY: kill(2) on the pid of the relay's child, listed just above.
    assert_eq!(unsafe { libc::kill(sides[0] as i32, libc::SIGKILL) }, 0);
    let j = finish_join(join);
    assert_eq!((j.code, j.report["handoff"].as_str(), j.report["transport"].as_str()), (Some(0), Some("partial"), Some("ucx")), "{}", j.output);
    assert!(j.report["attempts"].as_array().is_none_or(|a| a.is_empty()), "one attempt: {}", j.output);
    assert!(j.output.contains("attaching to the relay's UCX side again"), "the agent attached again:\n{}", j.output);
    assert_identical(&master, &replica);
}
