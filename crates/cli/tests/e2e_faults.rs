//! Bad input and faults: each gets a clear error, closes only the peer at fault, and never leaves a
//! replica looking synced when it is not. A repeated join after a failure succeeds.

mod common;
use common::*;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Duration;

/// A hostile master: answers the replica handshake, then sends `after_psync` and closes. Serves
/// every connection the relay makes (it retries).
fn fake_master(after_psync: Vec<u8>) -> (String, std::thread::JoinHandle<()>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap().to_string();
    l.set_nonblocking(true).unwrap();
    let h = std::thread::spawn(move || {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while std::time::Instant::now() < deadline {
            let Ok((mut s, _)) = l.accept() else {
                std::thread::sleep(Duration::from_millis(20)); // Polling a non-blocking accept; bounded.
                continue;
            };
            s.set_nonblocking(false).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let mut buf = Vec::new();
            let mut chunk = [0u8; 1024];
            'conn: while let Ok(n) = s.read(&mut chunk) {
                if n == 0 {
                    break;
                }
                buf.extend_from_slice(&chunk[..n]);
                while let Ok((args, used)) = resp::parse_command(&buf, &resp::Limits::default()) {
                    buf.drain(..used);
                    let name = String::from_utf8_lossy(&args[0]).to_uppercase();
                    let reply: &[u8] = match name.as_str() {
                        "PING" => b"+PONG\r\n",
                        "PSYNC" => {
                            let _ = s.write_all(&after_psync);
                            break 'conn;
                        }
                        _ => b"+OK\r\n",
                    };
                    if s.write_all(reply).is_err() {
                        break 'conn;
                    }
                }
            }
        }
    });
    (addr, h)
}

fn fullresync() -> Vec<u8> {
    format!("+FULLRESYNC {} 0\r\n", "a".repeat(40)).into_bytes()
}

fn relay_reports(relay: &Relay, what: &str) {
    wait_until(&format!("the relay to report {what:?}"), Duration::from_secs(20), || relay.proc.output().contains(what).then_some(()));
}

#[test]
fn malformed_resp_from_the_master() {
    let (m, _h) = fake_master(b"?this is not RESP\r\n".to_vec());
    let relay = relay(&m, &[], &[]);
    relay_reports(&relay, "PSYNC reply: malformed reply: malformed RESP");
}

#[test]
fn oversized_rdb_length_from_the_master() {
    let mut bytes = fullresync();
    bytes.extend_from_slice(b"$99999999999\r\n");
    let (m, _h) = fake_master(bytes);
    let relay = relay(&m, &["--snapshot-max-bytes", "1048576"], &[]);
    relay_reports(&relay, "exceeds the limit of 1048576 bytes");
}

#[test]
fn rdb_cut_off_mid_stream_fails_the_join_cleanly() {
    let mut bytes = fullresync();
    bytes.extend_from_slice(format!("$EOF:{}\r\n", "m".repeat(40)).as_bytes());
    bytes.extend_from_slice(b"REDIS0010");
    bytes.extend(data::bytes(7, 200_000));
    let (m, _h) = fake_master(bytes);
    let relay = relay(&m, &["--block-size", "65536"], &[]);
    relay_reports(&relay, "cut off mid-stream");
    let replica = Server::start(Flavor::Redis70, &[]);
    let j = join(&relay.addr, &replica.addr(), &["--retries", "0"], &[]);
    assert_ne!(j.code, Some(0), "{}", j.output);
    assert!(j.output.contains("run the same `fastrepl join` again"), "{}", j.output);
    assert_untouched(&replica);
}

#[test]
fn garbage_on_the_relay_port_closes_only_that_peer() {
    let master = Server::start(Flavor::Redis70, &[]);
    data::fill_every_type(&mut master.client(), 1, true);
    let relay = relay(&master.addr(), &[], &[]);
    // Not our protocol at all.
    let mut s = TcpStream::connect(&relay.addr).unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    s.write_all(&data::bytes(3, 4096)).unwrap();
    // Authenticated, then a read far beyond the bound.
    let token = transport::Credentials::from(transport::Token::new(TOKEN.as_bytes()).unwrap());
    let mut d = transport::tcp::connect(&relay.addr.parse().unwrap(), &token, transport::auth::Kind::Data, Duration::from_secs(5)).unwrap();
    let mut req = transport::wire::Request::Range { generation: 1, offset: 0, len: 1 }.encode();
    req[17..21].copy_from_slice(&u32::MAX.to_be_bytes());
    d.write_all(&req).unwrap();
    let mut b = [0u8; 16];
    assert_eq!(d.read(&mut b).unwrap_or(0), 0, "the relay should close a connection that asks for an unbounded read");
    relay_reports(&relay, "exceeds");
    // The relay still serves.
    let replica = Server::start(Flavor::Redis70, &[]);
    assert_partial(&join(&relay.addr, &replica.addr(), &[], &[]));
    assert_identical(&master, &replica);
}

/// A master whose RDB takes a few seconds to produce, so a join can be interrupted mid-sync.
fn slow_master() -> Server {
    let master = Server::start(Flavor::Redis70, &["--rdb-key-save-delay", "3000"]);
    data::fill_big_values(&mut master.client(), 1500, 8 << 10);
    master
}

fn wait_replica_syncing(replica: &Server) {
    wait_until("the replica to be loading from the agent", Duration::from_secs(30), || {
        let r = replica.client().info("replication").ok()?;
        (r.get("master_sync_in_progress") == Some("1") || r.get("role") == Some("slave")).then_some(())
    });
}

/// The relay is killed while the replica loads from it and comes back on the same address: the join
/// resets the replica, waits, and succeeds on its own on the new relay's snapshot (`--retries`).
#[test]
fn relay_killed_mid_sync_join_retries_on_the_restarted_relay() {
    let master = slow_master();
    let replica = Server::start(Flavor::Redis70, &[]);
    let mut relay1 = relay(&master.addr(), &["--block-size", "65536"], &[]);
    let j = start_join(&relay1.addr, &replica.addr(), &["--retries", "8", "--retry-max-secs", "2"], &[]);
    wait_replica_syncing(&replica);
    relay1.proc.kill();
    // Until the new relay listens, every attempt fails at connect; the join keeps waiting.
    wait_until("the join to report a failed attempt", Duration::from_secs(30), || j.output().contains("join attempt failed").then_some(()));
    let relay2 = spawn_relay_at(&relay1.addr, &master.addr(), |cmd| {
        Transport::from_env().apply(cmd);
        cmd.args(["--block-size", "65536"]);
    });
    let j = finish_join(j);
    assert_partial(&j);
    assert_identical(&master, &replica);
    let attempts = j.report["attempts"].as_array().expect("attempts in the report");
    assert!(!attempts.is_empty(), "{}", j.output);
    assert!(attempts[0]["error"].as_str().unwrap().contains("relay"), "the first attempt's error names the relay: {}", j.output);
    assert!(relay2.proc.output().contains("relay started"));
}

/// Without retries the same fault is a clean failure: exit 1, the relay named, the replica reset.
#[test]
fn relay_killed_mid_sync_without_retries_resets_the_replica() {
    let master = slow_master();
    let replica = Server::start(Flavor::Redis70, &[]);
    let mut relay1 = relay(&master.addr(), &["--block-size", "65536"], &[]);
    let j = start_join(&relay1.addr, &replica.addr(), &["--retries", "0"], &[]);
    wait_replica_syncing(&replica);
    relay1.proc.kill();
    let j = finish_join(j);
    assert_eq!(j.code, Some(1), "{}", j.output);
    assert!(j.output.contains("relay"), "the error should name the relay:\n{}", j.output);
    assert_eq!(j.report["attempts"].as_array().map(Vec::len), Some(1), "{}", j.output);
    assert_untouched(&replica);
}

#[test]
fn local_server_killed_mid_sync() {
    let master = slow_master();
    let mut replica = Server::start(Flavor::Redis70, &[]);
    let relay = relay(&master.addr(), &["--block-size", "65536"], &[]);
    let j = start_join(&relay.addr, &replica.addr(), &["--retries", "1", "--retry-max-secs", "1"], &[]);
    wait_replica_syncing(&replica);
    replica.kill();
    let j = finish_join(j);
    assert_eq!(j.code, Some(1), "{}", j.output);
    assert!(j.output.contains("local server"), "{}", j.output);
    // The dead server is retried once (it may be restarted by its supervisor), then given up.
    assert_eq!(j.report["attempts"].as_array().map(Vec::len), Some(2), "{}", j.output);
    assert!(j.output.contains("after 2 attempts"), "{}", j.output);
    // The relay keeps serving: a new replica joins.
    let replica2 = Server::start(Flavor::Redis70, &[]);
    assert_partial(&join(&relay.addr, &replica2.addr(), &[], &[]));
    assert_identical(&master, &replica2);
}

#[test]
fn interrupted_join_resets_the_replica() {
    let master = slow_master();
    let replica = Server::start(Flavor::Redis70, &[]);
    let relay = relay(&master.addr(), &["--block-size", "65536"], &[]);
    let j = start_join(&relay.addr, &replica.addr(), &[], &[]);
    wait_replica_syncing(&replica);
    // SAFETY: sending SIGTERM to our own child process, whose pid is valid while `j` lives.
    assert_eq!(unsafe { libc::kill(j.pid() as i32, libc::SIGTERM) }, 0);
    let j = finish_join(j);
    assert_eq!(j.code, Some(130), "{}", j.output);
    assert!(j.output.contains("interrupted"), "{}", j.output);
    assert_untouched(&replica);
}

/// The join's process is SIGKILLed mid-sync (it can reset nothing): its guard resets the replica,
/// which must not keep following the dead agent's address, and says so in the join's log format
/// (JSON here: a plain-text line among JSON ones is dropped by a log collector).
#[test]
fn killed_join_its_guard_resets_the_replica() {
    let master = slow_master();
    let replica = Server::start(Flavor::Redis70, &[]);
    let relay = relay(&master.addr(), &["--block-size", "65536"], &[]);
    let mut j = start_join(&relay.addr, &replica.addr(), &["--log-format", "json"], &[]);
    wait_replica_syncing(&replica);
    j.kill();
    wait_until("the guard to reset the replica", Duration::from_secs(30), || {
        let r = replica.client().info("replication").ok()?;
        (r.get("role") == Some("master")).then_some(())
    });
    assert_untouched(&replica);
    // The guard shares the join's stderr: its word lands in the join's output.
    // Whole lines only: the output file is read while the guard may still be writing to it.
    let said = wait_until("the guard to say it reset the replica", Duration::from_secs(10), || {
        j.output().split_inclusive('\n').find(|l| l.ends_with('\n') && l.contains("agent died")).map(|l| l.trim_end().to_owned())
    });
    let line: serde_json::Value = serde_json::from_str(&said).unwrap_or_else(|e| panic!("the guard's line is not JSON ({e}): {said}"));
    assert_eq!(line["level"], "WARN", "{said}");
    assert_eq!(line["replica"], replica.addr(), "{said}");
    assert!(line["message"].as_str().is_some_and(|m| m.contains("was reset")), "{said}");
    // And the same join runs again to success.
    assert_partial(&join(&relay.addr, &replica.addr(), &[], &[]));
    assert_identical(&master, &replica);
}
