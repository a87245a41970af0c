//! Fidelity: every type and encoding, TTLs, databases, binary names, a 64 MiB value and functions
//! arrive intact, for each server build, in both RDB framings of the master.

mod common;
use common::*;

fn fidelity(flavor: Flavor, diskless_master: bool) {
    require_server(flavor);
    let master = Server::start(flavor, &["--repl-diskless-sync", if diskless_master { "yes" } else { "no" }]);
    data::fill_every_type(&mut master.client(), 64, flavor.has_functions());
    let replica = Server::start(flavor, &[]);
    let relay = relay(&master.addr(), &["--block-size", "1048576"], &[]);
    let j = join(&relay.addr, &replica.addr(), &[], &[]);
    assert_partial(&j);
    assert!(j.report["rdb_length_bytes"].as_u64().unwrap() > 64 << 20, "{}", j.output);
    assert!(j.report["blocks"].as_u64().unwrap() >= 64);
    assert_identical(&master, &replica);
    // The replica is a live replica: a write after the handoff arrives.
    master.client().cmd(&["SET", "after-handoff", "1"]).unwrap();
    wait_until("a write after the handoff to arrive", std::time::Duration::from_secs(10), || (replica.client().cmd(&["GET", "after-handoff"]).ok()?.as_text()? == "1").then_some(()));
    if flavor.has_functions() {
        let r = replica.client().cmd(&["FCALL_RO", "echo_first", "0", "hello"]).unwrap();
        assert_eq!(r.as_text().as_deref(), Some("hello"));
    }
}

#[test]
fn redis70_eof_framing() {
    fidelity(Flavor::Redis70, true);
}

#[test]
fn redis70_length_framing() {
    // repl-diskless-sync no: the master writes an RDB file and sends it with `$<len>`.
    fidelity(Flavor::Redis70, false);
}

#[test]
fn valkey81() {
    fidelity(Flavor::Valkey81, true);
}

#[test]
fn redis62() {
    fidelity(Flavor::Redis62, true);
}

#[test]
fn verify_detects_differences() {
    // verify must be able to fail: a value, a TTL and a missing key.
    let a = Server::start(Flavor::Redis70, &[]);
    let b = Server::start(Flavor::Redis70, &[]);
    for s in [&a, &b] {
        data::fill_every_type(&mut s.client(), 1, true);
    }
    assert_identical(&a, &b);
    b.client().cmd(&["HSET", "hash:big", "field7", "changed"]).unwrap();
    b.client().cmd(&["EXPIRE", "str:int", "100"]).unwrap();
    b.client().cmd(&["DEL", "set:int"]).unwrap();
    b.client().cmd(&["SELECT", "9"]).unwrap();
    let (code, out) = verify(&a, &b);
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("hash:big") && out.contains("str:int") && out.contains("set:int"), "{out}");
}
