//! Addresses as operators write them: a host name (`localhost`, a Kubernetes Service's DNS name) or an
//! IPv6 literal in brackets, wherever fastrepl takes an address — the relay's `--master`, `join`'s
//! `--relay`, `--replica` and `--master`, `status`, `verify` — and a clear refusal for what is not
//! `host:port`.

mod common;
use common::*;

/// `localhost:PORT` for a server.
fn by_name(s: &Server) -> String {
    format!("localhost:{}", s.port)
}

/// `[::1]:PORT` for a server.
fn by_ipv6(s: &Server) -> String {
    format!("[::1]:{}", s.port)
}

/// A server listening on both loopback addresses.
fn dual_stack_server() -> Server {
    Server::start(Flavor::Redis70, &["--bind", "127.0.0.1", "::1"])
}

#[test]
fn a_join_and_its_tools_take_host_names() {
    let master = dual_stack_server();
    data::fill_small_mixed(&mut master.client(), 500);
    let replica = dual_stack_server();
    let relay = relay(&by_name(&master), &[], &[]);
    let port = relay.addr.rsplit_once(':').unwrap().1;
    let relay_by_name = format!("localhost:{port}");
    let j = join(&relay_by_name, &by_name(&replica), &["--master", &by_name(&master)], &[]);
    assert_partial(&j);
    assert_eq!(j.report["master"], by_name(&master), "the master as given: {}", j.output);
    let st = status_json(&relay_by_name);
    assert!(st["generations"].as_array().is_some_and(|g| !g.is_empty()), "status through a host name: {st}");
    let out = fastrepl().args(["verify", &by_name(&master), &by_name(&replica)]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "verify through host names: {}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
}

#[test]
fn ipv6_literals_go_in_brackets() {
    let master = dual_stack_server();
    data::fill_small_mixed(&mut master.client(), 500);
    let replica = dual_stack_server();
    let relay = spawn_relay_at(&format!("[::1]:{}", fixtures::free_port()), &by_ipv6(&master), |cmd| {
        Transport::from_env().apply(cmd);
    });
    let j = join(&relay.addr, &by_ipv6(&replica), &["--master", &by_ipv6(&master)], &[]);
    assert_partial(&j);
    // The replica follows the master at its IPv6 address.
    let r = replica.client().info("replication").unwrap();
    assert_eq!((r.get("master_host"), r.get("master_link_status")), (Some("::1"), Some("up")), "{}", j.output);
    assert_identical(&master, &replica);
}

#[test]
fn what_is_not_host_port_is_refused_saying_why() {
    for (addr, why) in [("::1:7400", "brackets"), ("relay.example", "no :port"), ("bad_host!:7400", "label")] {
        let out = fastrepl().args(["status", "--relay", addr]).output().unwrap();
        let text = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "a usage error for {addr}: {text}");
        assert!(text.contains(why), "{addr}: {text}");
    }
    let master = dual_stack_server();
    let out = fastrepl().args(["verify", &format!("::1:{}", master.port), &by_name(&master)]).output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_ne!(out.status.code(), Some(0), "{text}");
    assert!(text.contains("brackets"), "{text}");
}

#[test]
fn a_name_that_resolves_to_nothing_is_a_clear_failure() {
    let out = fastrepl().args(["status", "--relay", "no-such-relay.invalid:7400"]).env("FASTREPL_TOKEN", "0123456789abcdef").output().unwrap();
    let text = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{text}");
    assert!(text.contains("no-such-relay.invalid:7400"), "the error names the address: {text}");
}
