//! Two hosts made of network namespaces: the master and the relay on one, the agent and its replica
//! on the other. The relay binds a non-loopback address (so it needs its token), and the agent reaches
//! the master by the address the relay gives it.

mod common;
use common::*;
use fixtures::netns;
use std::process::Command;
use std::time::Duration;

fn in_ns(ns: &str) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns, env!("CARGO_BIN_EXE_fastrepl")]);
    c.env("FASTREPL_TOKEN", TOKEN);
    c
}

#[test]
fn join_across_hosts() {
    if !netns::available() {
        // Namespaces need root (CI runs as root); counted as skipped, not passed.
        fixtures::skip("creating network namespaces needs root and iproute2");
        return;
    }
    let lab = netns::Pair::new("j").expect("make two hosts");
    let master = Server::try_start_in(Flavor::Redis70, Some(&lab.a), &lab.a_ip, &[]).unwrap();
    data::fill_every_type(&mut master.client(), 2, true);
    data::fill_small_mixed(&mut master.client(), 2000);
    let replica = Server::try_start_in(Flavor::Redis70, Some(&lab.b), "127.0.0.1", &[]).unwrap();

    let relay_addr = format!("{}:7400", lab.a_ip);
    let mut relay_cmd = in_ns(&lab.a);
    relay_cmd.args(["relay", "--master", &master.addr(), "--listen", &relay_addr]);
    let relay = Proc::spawn("relay", relay_cmd);
    let a = lab.a.clone();
    let ra = relay_addr.clone();
    wait_until("the relay to listen on its host address", Duration::from_secs(20), || {
        let ra = ra.clone();
        netns::within(&a, move || std::net::TcpStream::connect(&ra).ok()).ok().flatten()
    });
    let mut join_cmd = in_ns(&lab.b);
    join_cmd.args(["join", "--relay", &relay_addr, "--replica", &replica.addr(), "--json"]);
    let j = finish_join(Proc::spawn("join", join_cmd));
    assert_partial(&j);
    // `auto` across hosts: the relay's shm socket lives in its own network namespace, out of reach.
    assert_eq!(j.report["transport"], "tcp", "{}", j.output);
    assert!(j.report["transport_detail"].as_str().unwrap_or("").contains("auto"), "{}", j.output);
    assert_eq!(j.report["master"], master.addr(), "the agent reached the master by the relay's address");
    let out = verify::compare(&mut master.client(), &mut replica.client(), &verify::Options::default()).unwrap();
    assert!(out.identical(), "{:?}", out.differences);
    drop(relay);
}
