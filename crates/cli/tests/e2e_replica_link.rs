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
                    std::thread::sleep(Duration::from_millis(1)); // Racing the replica to the port.
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

fn a_stranger_first_on_the_replica_port_does_not_take_the_join(flavor: Flavor) {
    require_server(flavor);
    let master = Server::start(flavor, &[]);
    data::fill_small_mixed(&mut master.client(), 500);
    let replica = Server::start(flavor, &[]);
    let relay = relay(&master.addr(), &[], &[]);
    let listen: SocketAddr = format!("127.0.0.1:{}", fixtures::free_port()).parse().unwrap();
    let stranger = stranger(listen);
    let j = join(&relay.addr, &replica.addr(), &["--replica-listen", &listen.to_string()], &[]);
    let (stranger_at, answered) = stranger.join().unwrap();
    assert_partial(&j);
    assert!(
        String::from_utf8_lossy(&answered).contains("+FULLRESYNC "),
        "{}: the stranger connected first, so it was answered before it was found out; it read {:?}\n{}",
        flavor.name(),
        String::from_utf8_lossy(&answered),
        j.output
    );
    let said = j.output.lines().find(|l| l.contains("not the replica")).unwrap_or_else(|| panic!("{}: no line about the stranger:\n{}", flavor.name(), j.output));
    assert!(said.contains(&stranger_at.to_string()), "{}: the line names the stranger's address {stranger_at}: {said}", flavor.name());
    let text = String::from_utf8_lossy(&answered);
    let after = text.split_once("+FULLRESYNC ").and_then(|(_, rest)| rest.split_once("\r\n")).map_or("", |(_, rest)| rest);
    assert!(after.is_empty(), "{}: the stranger got nothing after +FULLRESYNC (no RDB byte): {after:?}", flavor.name());
    wait_caught_up(&master, &replica);
    assert_identical(&master, &replica);
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
