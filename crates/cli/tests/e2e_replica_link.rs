//! The agent's port for its replica takes the replica, not whoever connects first (issue 47): a local
//! process that wins the race to the port and speaks a replica's whole handshake is answered
//! `+FULLRESYNC`, found not to be the replica (the local replica's sync did not start), closed and
//! named in the join's log; the join goes on with the real replica within the same wait, partial and
//! identical, on every server here (Redis 6.2, 7.0, 8.2, Valkey 8.1, 9.1).

mod common;
use common::*;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// A stranger at `at`: connects as soon as the agent listens there (before the replica is pointed
/// at it), speaks a replica's handshake up to `PSYNC`, then reads what it is answered until the agent
/// closes the connection. Returns its own address and what it read.
fn stranger(at: SocketAddr) -> std::thread::JoinHandle<(SocketAddr, Vec<u8>)> {
    std::thread::spawn(move || {
        let deadline = Instant::now() + Duration::from_secs(120);
        let mut s = loop {
            match TcpStream::connect(at) {
                Ok(s) => break s,
                Err(e) => {
                    assert!(Instant::now() < deadline, "the agent never listened on {at}: {e}");
                    std::thread::yield_now(); // Racing the replica to the port: no sleep.
                }
            }
        };
        let me = s.local_addr().unwrap();
        let mut wire = Vec::new();
        for c in [&["PING"][..], &["REPLCONF", "listening-port", "6999"], &["REPLCONF", "capa", "eof", "capa", "psync2"], &["PSYNC", "?", "-1"]] {
            resp::encode_command(&mut wire, c);
        }
        s.write_all(&wire).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
        let mut got = Vec::new();
        let _ = s.read_to_end(&mut got); // Until the agent closes it (or resets it).
        (me, got)
    })
}

/// One flavour at a time: the race to the port is the test's, and five joins at once on two cores
/// would lose it for the stranger.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Whether the stranger can win the race is the scheduler's say: a round it loses (the replica
/// connected first) must still give it nothing, and a few rounds are tried for one it wins.
const ROUNDS: usize = 5;

fn a_stranger_first_on_the_replica_port_does_not_take_the_join(flavor: Flavor) {
    let _one = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    require_server(flavor);
    let master = Server::start(flavor, &[]);
    data::fill_small_mixed(&mut master.client(), 500);
    let relay = relay(&master.addr(), &[], &[]);
    for round in 1..=ROUNDS {
        let replica = Server::start(flavor, &[]);
        let listen: SocketAddr = format!("127.0.0.1:{}", fixtures::free_port()).parse().unwrap();
        let stranger = stranger(listen);
        let j = join(&relay.addr, &replica.addr(), &["--replica-listen", &listen.to_string()], &[]);
        let (stranger_at, answered) = stranger.join().unwrap();
        assert_partial(&j);
        wait_caught_up(&master, &replica);
        assert_identical(&master, &replica);
        let text = String::from_utf8_lossy(&answered);
        if text.is_empty() {
            // The replica reached the port first: the stranger was never answered, and got nothing.
            eprintln!("{}: round {round}: the replica connected first", flavor.name());
            continue;
        }
        assert!(text.starts_with("+PONG") && text.contains("+FULLRESYNC "), "{}: the stranger, answered first, read {text:?}\n{}", flavor.name(), j.output);
        let said = j.output.lines().find(|l| l.contains("not the replica")).unwrap_or_else(|| panic!("{}: no line about the stranger:\n{}", flavor.name(), j.output));
        assert!(said.contains(&stranger_at.to_string()), "{}: the line names the stranger's address {stranger_at}: {said}", flavor.name());
        let after = text.split_once("+FULLRESYNC ").and_then(|(_, rest)| rest.split_once("\r\n")).map_or("", |(_, rest)| rest);
        assert!(after.is_empty(), "{}: the stranger got nothing after +FULLRESYNC (no RDB byte): {after:?}", flavor.name());
        return;
    }
    fixtures::skip(&format!("{}: the replica reached the agent's port before the stranger in all {ROUNDS} rounds (the unit tests of join::replica_link cover the stranger's path)", flavor.name()));
}

#[test]
fn redis_6_2() {
    a_stranger_first_on_the_replica_port_does_not_take_the_join(Flavor::Redis62);
}

#[test]
fn redis_7_0() {
    a_stranger_first_on_the_replica_port_does_not_take_the_join(Flavor::Redis70);
}

#[test]
fn redis_8_2() {
    a_stranger_first_on_the_replica_port_does_not_take_the_join(Flavor::Redis82);
}

#[test]
fn valkey_8_1() {
    a_stranger_first_on_the_replica_port_does_not_take_the_join(Flavor::Valkey81);
}

#[test]
fn valkey_9_1() {
    a_stranger_first_on_the_replica_port_does_not_take_the_join(Flavor::Valkey91);
}
