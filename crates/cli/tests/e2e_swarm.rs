//! Flat fan-out: agents of one snapshot serve each other. On namespace hosts with shaped links, the
//! relay's host sends about one copy however many agents pull; an agent killed mid-pull costs the
//! others a re-route; a peer that sends corrupt blocks is dropped and nothing it sent is used.
//!
//! These tests choose their transport themselves (tcp between hosts), whatever the suite runs over.

mod common;
use common::*;
use fixtures::netns;
use std::process::Command;
use std::time::Duration;

/// `fastrepl` in namespace `ns`.
fn in_ns(ns: &str) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns, env!("CARGO_BIN_EXE_fastrepl")]);
    c.env("FASTREPL_TOKEN", TOKEN).env("FASTREPL_LOG", "info");
    c
}

/// A master on host 0 with `mib` MiB in 1 MiB values, a relay beside it (1 MiB blocks, so that the
/// snapshot has many), and a replica on each other host.
struct Fleet {
    lab: netns::Lab,
    master: Server,
    replicas: Vec<Server>,
    _relay: Proc,
    relay_addr: String,
    /// The host of each replica.
    on: Vec<usize>,
    /// Arguments every join gets to reach the relay.
    connect: Vec<String>,
}

fn fleet(hosts: usize, rate: &str, mib: usize) -> Option<Fleet> {
    fleet_on(hosts, rate, mib, &(1..hosts).collect::<Vec<_>>())
}

/// As [`fleet`], with replica `i` on host `on[i]` (several replicas may share a host).
fn fleet_on(hosts: usize, rate: &str, mib: usize, on: &[usize]) -> Option<Fleet> {
    fleet_with(hosts, rate, mib, on, &[], &[])
}

/// As [`fleet_on`], with more relay arguments, and `connect` to reach the relay (TLS).
fn fleet_with(hosts: usize, rate: &str, mib: usize, on: &[usize], relay_extra: &[&str], connect: &[&str]) -> Option<Fleet> {
    if !netns::available() {
        // Namespaces need root (CI runs as root); counted as skipped, not passed.
        fixtures::skip("creating network namespaces needs root and iproute2");
        return None;
    }
    let lab = netns::Lab::new(hosts, Some(rate)).expect("make hosts");
    let master = Server::try_start_in(Flavor::Redis70, Some(&lab.hosts[0].ns), &lab.hosts[0].ip, &[]).unwrap();
    data::fill_big_values(&mut master.client(), mib, 1 << 20);
    let replicas: Vec<Server> = on.iter().map(|&h| Server::try_start_in(Flavor::Redis70, Some(&lab.hosts[h].ns), "127.0.0.1", &[]).unwrap()).collect();
    let relay_addr = format!("{}:7400", lab.hosts[0].ip);
    let mut cmd = in_ns(&lab.hosts[0].ns);
    cmd.args(["relay", "--master", &master.addr(), "--listen", &relay_addr, "--block-size", "1048576", "--transport", "tcp"]).args(relay_extra);
    let relay = Proc::spawn("relay", cmd);
    let (ns, ra) = (lab.hosts[0].ns.clone(), relay_addr.clone());
    wait_until("the relay to listen", Duration::from_secs(20), || {
        let ra = ra.clone();
        netns::within(&ns, move || std::net::TcpStream::connect(&ra).ok()).ok().flatten()
    });
    // The snapshot is complete before anyone joins: what we count is the agents' traffic.
    wait_relay_acked(&master);
    Some(Fleet { lab, master, replicas, _relay: relay, relay_addr, on: on.to_vec(), connect: connect.iter().map(|s| s.to_string()).collect() })
}

impl Fleet {
    fn join(&self, i: usize, extra: &[&str]) -> Proc {
        let mut cmd = in_ns(&self.lab.hosts[self.on[i]].ns);
        cmd.args(["join", "--relay", &self.relay_addr, "--replica", &self.replicas[i].addr(), "--json", "--transport", "tcp"]);
        cmd.args(&self.connect).args(extra);
        Proc::spawn(&format!("join-{}", i + 1), cmd)
    }
}

/// Compare every key (the servers live in namespaces: the test's own clients reach them there).
fn assert_same(master: &Server, replica: &Server) {
    let out = verify::compare(&mut master.client(), &mut replica.client(), &verify::Options::default()).unwrap();
    assert!(out.identical(), "{:?}", out.differences);
}

fn rdb_bytes(j: &Joined) -> u64 {
    j.report["rdb_length_bytes"].as_u64().unwrap_or_else(|| panic!("no report:\n{}", j.output))
}

#[test]
fn four_agents_and_the_relay_host_sends_about_one_copy() {
    let Some(f) = fleet(5, "100mbit", 24) else { return };
    let tx0 = f.lab.tx_bytes(0).unwrap();
    let procs: Vec<Proc> = (0..4).map(|i| f.join(i, &[])).collect();
    let joined: Vec<Joined> = procs.into_iter().map(finish_join).collect();
    let relay_sent = f.lab.tx_bytes(0).unwrap() - tx0;
    let rdb = rdb_bytes(&joined[0]);
    let mut from_peers = 0;
    for (i, j) in joined.iter().enumerate() {
        assert_eq!(j.code, Some(0), "join {} failed:\n{}", i + 1, j.output);
        assert_eq!(j.report["handoff"], "partial", "{}", j.output);
        let sources: u64 = j.report["sources"].as_array().unwrap().iter().map(|s| s["bytes"].as_u64().unwrap()).sum();
        assert_eq!(sources, rdb, "every byte is accounted to a source: {}", j.output);
        assert_eq!(j.report["received_bytes_total"]["relay"].as_u64().unwrap() + j.report["received_bytes_total"]["peers"].as_u64().unwrap(), rdb);
        assert_eq!(j.report["peer_bad_blocks"], 0);
        from_peers += j.report["received_bytes_total"]["peers"].as_u64().unwrap();
        assert_same(&f.master, &f.replicas[i]);
    }
    let copies = relay_sent as f64 / rdb as f64;
    eprintln!("relay host sent {relay_sent} bytes = {copies:.2} copies of a {rdb}-byte snapshot; agents got {from_peers} bytes from peers");
    // Four copies without the swarm; the bound leaves room for headers, the stream and re-routes.
    assert!(copies < 1.6, "the relay's host sent {copies:.2} copies for 4 agents");
    assert!(from_peers as f64 >= 2.0 * rdb as f64, "agents got only {from_peers} bytes from each other");
}

#[test]
fn two_agents_on_one_host_and_one_across() {
    // Replicas 1 and 2 share host 1 (containers on one machine); replica 3 is on host 2.
    let Some(f) = fleet_on(3, "100mbit", 16, &[1, 1, 2]) else { return };
    let tx0 = f.lab.tx_bytes(0).unwrap();
    let joined: Vec<Joined> = (0..3).map(|i| f.join(i, &[])).collect::<Vec<_>>().into_iter().map(finish_join).collect();
    let rdb = rdb_bytes(&joined[0]);
    for (i, j) in joined.iter().enumerate() {
        assert_eq!(j.code, Some(0), "join {} failed:\n{}", i + 1, j.output);
        assert_eq!(j.report["handoff"], "partial", "{}", j.output);
        assert_same(&f.master, &f.replicas[i]);
    }
    // Each agent serves on its own port of the shared host's address.
    let at: Vec<String> = joined.iter().map(|j| j.report["swarm"].as_str().unwrap().rsplit(' ').next().unwrap().to_string()).collect();
    assert!(at[0].starts_with(&format!("{}:", f.lab.hosts[1].ip)) && at[1].starts_with(&format!("{}:", f.lab.hosts[1].ip)), "{at:?}");
    assert_ne!(at[0], at[1]);
    let copies = (f.lab.tx_bytes(0).unwrap() - tx0) as f64 / rdb as f64;
    assert!(copies < 1.6, "the relay's host sent {copies:.2} copies for 3 agents");
}

#[test]
fn an_agent_killed_mid_pull_costs_the_others_a_reroute() {
    let Some(f) = fleet(4, "100mbit", 32) else { return };
    let tx0 = f.lab.tx_bytes(0).unwrap();
    let mut victim = f.join(0, &[]);
    let survivors: Vec<Proc> = (1..3).map(|i| f.join(i, &[])).collect();
    // Kill it once the swarm is well under way (a third of a copy has left the relay's host), while
    // it serves the others.
    let snapshot = 32u64 << 20;
    wait_until("the pull to be under way", Duration::from_secs(60), || (f.lab.tx_bytes(0).ok()? - tx0 > snapshot / 3).then_some(()));
    assert!(victim.running(), "the victim finished too early to test anything:\n{}", victim.output());
    victim.kill();
    for (k, p) in survivors.into_iter().enumerate() {
        let j = finish_join(p);
        assert_eq!(j.code, Some(0), "join {} failed after a peer died:\n{}", k + 2, j.output);
        assert_eq!(j.report["handoff"], "partial", "no full resync, no new fork: {}", j.output);
        assert_same(&f.master, &f.replicas[k + 1]);
    }
    assert_eq!(info_num(&f.master, "stats", "sync_full"), 1, "the relay's capture is the master's only full sync");
}

/// How a fake peer answers block reads.
#[derive(Clone, Copy, PartialEq)]
enum Fake {
    /// Garbage of the right length.
    Corrupt,
    /// "block not held" (a holder the tracker still names after it dropped the block).
    NotHeld,
    /// Half the block, then an end of stream (as a holder whose own arrival of the block failed).
    CutOff,
    /// Always busy.
    Busy,
}

/// A fake agent that registers with the relay's swarm and claims to hold every block, answering as
/// `how` says; returns its tracker link (its membership) and how many blocks it was asked for.
fn fake_peer(relay: &str, token: &transport::Credentials, how: Fake) -> (transport::tracker::TrackerLink, std::sync::Arc<std::sync::atomic::AtomicU64>) {
    use std::io::{Read, Write};
    use std::sync::atomic::{AtomicU64, Ordering};
    let relay: endpoint::Endpoint = relay.parse().unwrap();
    let attached = agent::pull::progress::attach(&relay, token, Duration::from_secs(30)).unwrap();
    let v = attached.progress.wait_until(Duration::from_secs(30), |v| v.blocks_total().is_some_and(|t| v.blocks_readable() >= t));
    let (generation, total) = (v.desc.generation, v.blocks_total().expect("the snapshot is complete"));
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let asked = std::sync::Arc::new(AtomicU64::new(0));
    let (t, a) = (token.token().clone(), asked.clone());
    std::thread::spawn(move || {
        for s in listener.incoming() {
            let (t, a) = (t.clone(), a.clone());
            std::thread::spawn(move || -> Option<()> {
                let mut s = s.ok()?;
                transport::auth::server(&mut s, &t).ok()?;
                loop {
                    let mut req = [0u8; transport::wire::REQUEST_LEN];
                    s.read_exact(&mut req).ok()?;
                    let transport::wire::Request::Range { len, .. } = transport::wire::Request::decode(&req).ok()? else { return None };
                    a.fetch_add(1, Ordering::SeqCst);
                    match how {
                        Fake::Corrupt => {
                            s.write_all(&transport::wire::ResponseHeader::ok(len).encode()).ok()?;
                            s.write_all(&vec![0xAB; len as usize]).ok()?;
                        }
                        Fake::CutOff => {
                            s.write_all(&transport::wire::ResponseHeader::ok(len).encode()).ok()?;
                            s.write_all(&vec![0; len as usize / 2]).ok()?;
                            s.shutdown(std::net::Shutdown::Write).ok()?;
                            // Read what the asker still sends until it closes: closing with unread
                            // bytes would be a reset, not an end of stream.
                            while s.read(&mut [0u8; 4096]).ok()? > 0 {}
                            return None;
                        }
                        Fake::NotHeld => transport::serve::send_error(&mut s, "block not held").ok()?,
                        Fake::Busy => transport::serve::send_busy(&mut s).ok()?,
                    }
                }
            });
        }
    });
    let mut link = transport::tracker::TrackerLink::connect(&relay, token, Duration::from_secs(10)).unwrap();
    let reg = transport::tracker::Registration { port, serves: true, local: false, advertise: None };
    link.register(generation, &reg).unwrap();
    for b in 0..total {
        link.have(b).unwrap();
    }
    // `have` does not wait for its answer: settle, so that the relay has them all before the test goes on.
    link.settle().unwrap();
    (link, asked)
}

#[test]
fn tracker_requests_sent_without_waiting_are_answered_in_order_and_a_refusal_keeps_the_link() {
    // `have` and `not_at` go out without waiting (a round trip per block, behind a busy uplink, held
    // every fetch slot before); their answers are read before the next answer that matters. Against
    // the real relay: the holdings land, a refused one is counted, the link goes on.
    let master = Server::start(Flavor::Redis70, &[]);
    data::fill_big_values(&mut master.client(), 4, 1 << 20);
    let relay = spawn_relay(&master.addr(), |c| {
        c.args(["--transport", "tcp", "--block-size", "1048576"]);
    });
    wait_relay_acked(&master);
    let token = transport::Credentials::from(transport::Token::new(TOKEN.as_bytes()).unwrap());
    let (mut holder, _) = fake_peer(&relay.addr, &token, Fake::Busy);
    assert_eq!(holder.refused_later(), 0, "every have of a published block is accepted");
    holder.have(1 << 40).unwrap();
    holder.not_at(holder.id().unwrap(), 0).unwrap();
    assert_eq!(holder.needed().unwrap(), 0, "the link still answers after a refused have");
    assert_eq!(holder.refused_later(), 1, "the have of a block the relay never published was refused, and counted");
    let addr: endpoint::Endpoint = relay.addr.parse().unwrap();
    let generation = agent::pull::progress::attach(&addr, &token, Duration::from_secs(30)).unwrap().progress.with(|v| v.desc.generation);
    let mut asker = transport::tracker::TrackerLink::connect(&addr, &token, Duration::from_secs(10)).unwrap();
    asker.register(generation, &transport::tracker::Registration { port: 0, serves: false, local: false, advertise: None }).unwrap();
    let ask = |blocks: Vec<u64>| transport::wire::swarm::Locate { relay_slots: 0, peer_slots: 4, blocks, flows_free: 4, ..Default::default() };
    // Blocks to wait for are left out of an answer: block 0 (no holder after the not-at, no relay
    // slot asked) is not in it.
    let answer = asker.locate(&ask(vec![0, 1])).unwrap();
    let at_holder = |l: &transport::wire::swarm::Located| matches!(&l.at, transport::wire::swarm::Where::Peers(p) if p.iter().any(|p| Some(p.id) == holder.id()));
    assert_eq!(answer.iter().map(|l| (l.block, at_holder(l))).collect::<Vec<_>>(), vec![(1, true)], "{answer:?}");
}

#[test]
fn a_peer_that_sends_corrupt_blocks_is_dropped_and_nothing_it_sent_is_used() {
    let master = Server::start(Flavor::Redis70, &[]);
    data::fill_big_values(&mut master.client(), 8, 1 << 20);
    data::fill_every_type(&mut master.client(), 1, true);
    let relay = spawn_relay(&master.addr(), |c| {
        c.args(["--transport", "tcp", "--block-size", "1048576"]);
    });
    wait_relay_acked(&master);
    let token = transport::Credentials::from(transport::Token::new(TOKEN.as_bytes()).unwrap());
    let (_fake, asked) = fake_peer(&relay.addr, &token, Fake::Corrupt);
    let replica = Server::start(Flavor::Redis70, &[]);
    let j = finish_join(spawn_join(&relay.addr, &replica.addr(), |c| {
        c.args(["--transport", "tcp"]);
    }));
    assert_eq!(j.code, Some(0), "{}", j.output);
    assert_eq!(j.report["handoff"], "partial", "{}", j.output);
    assert!(asked.load(std::sync::atomic::Ordering::SeqCst) >= 1, "the fake peer was never asked: the test tests nothing");
    assert!(j.report["peer_bad_blocks"].as_u64().unwrap() >= 1, "{}", j.output);
    assert_eq!(j.report["received_bytes_total"]["peers"], 0, "nothing from the corrupt peer was used: {}", j.output);
    assert_eq!(j.report["received_bytes_total"]["relay"], j.report["rdb_stored_bytes"], "every block from the relay, as it keeps them: {}", j.output);
    assert!(j.output.contains("fails its checksum"), "the log names the bad peer: {}", j.output);
    assert_identical(&master, &replica);
}

/// A holder the tracker names that refuses every read, as "not held" or as "busy" for ever, or cuts
/// every block off: the agent must get those blocks elsewhere (here: the relay), not ask it for ever.
/// Returns the join and how many reads the holder was asked (`blocks` values of 1 MiB).
fn join_past_a_peer_that_never_serves(how: Fake, blocks: u32, counted_in: &str) -> (Joined, u64) {
    let master = Server::start(Flavor::Redis70, &[]);
    data::fill_big_values(&mut master.client(), blocks as usize, 1 << 20);
    let relay = spawn_relay(&master.addr(), |c| {
        c.args(["--transport", "tcp", "--block-size", "1048576"]);
    });
    wait_relay_acked(&master);
    let token = transport::Credentials::from(transport::Token::new(TOKEN.as_bytes()).unwrap());
    let (_fake, asked) = fake_peer(&relay.addr, &token, how);
    let replica = Server::start(Flavor::Redis70, &[]);
    let j = finish_join(spawn_join(&relay.addr, &replica.addr(), |c| {
        c.args(["--transport", "tcp"]);
    }));
    assert_eq!(j.code, Some(0), "{}", j.output);
    let asked = asked.load(std::sync::atomic::Ordering::SeqCst);
    assert!(asked >= 1, "the fake peer was never asked: the test tests nothing");
    assert!(j.report[counted_in].as_u64().unwrap() >= 1, "{}", j.output);
    assert_eq!(j.report["received_bytes_total"]["relay"], j.report["rdb_stored_bytes"], "{}", j.output);
    assert_identical(&master, &replica);
    (j, asked)
}

#[test]
fn a_holder_that_no_longer_holds_its_blocks_is_passed_over() {
    join_past_a_peer_that_never_serves(Fake::NotHeld, 6, "peer_failures");
}

#[test]
fn a_peer_that_keeps_cutting_blocks_off_is_given_up_on() {
    // A cut-off (an end of stream part-way through a block) is what an honest holder does when its
    // own arrival of the block failed: not a reason to avoid it. One that does it every time is.
    let (j, asked) = join_past_a_peer_that_never_serves(Fake::CutOff, 12, "peer_failures");
    assert!(asked >= 4, "the fake peer was asked {asked} times: the limit is not reached");
    assert!(asked <= 6, "asked for {asked} of its 12 blocks: a peer that cuts every block off is given up on after a few");
    assert!(j.output.contains("keeps cutting blocks off"), "{}", j.output);
}

#[test]
fn a_peer_that_is_always_busy_is_given_up_on() {
    join_past_a_peer_that_never_serves(Fake::Busy, 6, "peer_refusals");
}

#[test]
fn over_tls_agents_still_serve_each_other() {
    let certs = Certs::generate();
    let (crt, key, ca) = (certs.path("node.crt"), certs.path("node.key"), certs.path("ca.crt"));
    // The certificate names localhost, not the hosts' addresses: the relay is checked by that name,
    // peers by the CA alone.
    let Some(f) = fleet_with(4, "100mbit", 16, &[1, 2, 3], &["--agents-tls-cert", &crt, "--agents-tls-key", &key], &["--relay-cacert", &ca, "--relay-server-name", "localhost"]) else {
        return;
    };
    let tx0 = f.lab.tx_bytes(0).unwrap();
    // Two agents serve over TLS; the third has no certificate: it fetches from them (over TLS) but
    // serves nobody.
    let serving = ["--peer-tls-cert", crt.as_str(), "--peer-tls-key", key.as_str()];
    let procs = vec![f.join(0, &serving), f.join(1, &serving), f.join(2, &[])];
    let joined: Vec<Joined> = procs.into_iter().map(finish_join).collect();
    let relay_sent = f.lab.tx_bytes(0).unwrap() - tx0;
    let rdb = rdb_bytes(&joined[0]);
    let mut from_peers = 0;
    for (i, j) in joined.iter().enumerate() {
        assert_eq!(j.code, Some(0), "join {} failed:\n{}", i + 1, j.output);
        assert_eq!(j.report["handoff"], "partial", "{}", j.output);
        assert_eq!(j.report["peer_bad_blocks"], 0);
        from_peers += j.report["received_bytes_total"]["peers"].as_u64().unwrap();
        assert_same(&f.master, &f.replicas[i]);
    }
    assert!(joined[2].report["swarm"].as_str().unwrap_or("").contains("not serving"), "{}", joined[2].report["swarm"]);
    assert_eq!(joined[2].report["bytes_served_to_peers"], 0);
    let copies = relay_sent as f64 / rdb as f64;
    eprintln!("over TLS: relay host sent {copies:.2} copies for 3 agents; agents got {from_peers} bytes from each other");
    assert!(from_peers as f64 >= 0.5 * rdb as f64, "agents got only {from_peers} bytes from each other over TLS");
    assert!(copies < 2.5, "the relay's host sent {copies:.2} copies for 3 agents");
}
