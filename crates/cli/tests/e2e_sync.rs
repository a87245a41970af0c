//! Streaming, writes during the join, and one fork for many agents.

mod common;
use common::*;
use std::time::Duration;

#[test]
fn agents_pull_while_the_master_still_writes_the_rdb() {
    // rdb-key-save-delay slows the master's RDB production (µs per key), so the snapshot is still
    // arriving at the relay while the agent streams its first blocks to the replica.
    let master = Server::start(Flavor::Redis70, &["--rdb-key-save-delay", "2000"]);
    data::fill_big_values(&mut master.client(), 1500, 16 << 10);
    let replica = Server::start(Flavor::Redis70, &[]);
    let relay = relay(&master.addr(), &["--block-size", "65536"], &[]);
    let j = join(&relay.addr, &replica.addr(), &["--readers", "4"], &[]);
    assert_partial(&j);
    assert_eq!(j.report["streamed_while_capturing"], true, "{}", j.output);
    assert!(j.report["reads_in_flight_max"].as_u64().unwrap() >= 2, "{}", j.output);
    assert_identical(&master, &replica);
}

#[test]
fn no_loss_under_writes_and_partial_handoff() {
    let master = Server::start(Flavor::Redis70, &["--rdb-key-save-delay", "500"]);
    data::fill_every_type(&mut master.client(), 2, true);
    data::fill_small_mixed(&mut master.client(), 3000);
    let replica = Server::start(Flavor::Redis70, &[]);
    // The writer runs through capture, transfer, load and handoff.
    let writer = data::Writer::start(master.client(), 1_000_000, Duration::from_secs(120));
    wait_until("the writer to start", Duration::from_secs(10), || (writer.count() > 10).then_some(()));
    let relay = relay(&master.addr(), &["--block-size", "65536"], &[]);
    let full0 = info_num(&master, "stats", "sync_full");
    let partial0 = info_num(&master, "stats", "sync_partial_ok");
    let j = join(&relay.addr, &replica.addr(), &[], &[]);
    let during = writer.count();
    wait_until("more writes after the handoff", Duration::from_secs(10), || (writer.count() > during + 20).then_some(()));
    let written = writer.stop();
    assert_partial(&j);
    // The relay's own capture is the only full sync; the replica's handoff is partial.
    let full1 = info_num(&master, "stats", "sync_full");
    assert!(full1 - full0 <= 1, "sync_full rose by {}", full1 - full0);
    assert_eq!(info_num(&master, "stats", "sync_partial_ok"), partial0 + 1);
    wait_caught_up(&master, &replica);
    assert_identical(&master, &replica);
    // The writer alternates databases 0 and 1; its counter lives in both.
    let mut c = replica.client();
    let c0 = c.cmd(&["GET", "w:counter"]).unwrap().as_int().unwrap();
    c.cmd(&["SELECT", "1"]).unwrap();
    let c1 = c.cmd(&["GET", "w:counter"]).unwrap().as_int().unwrap();
    assert_eq!((c0 + c1) as u64, written, "every write arrived");
}

#[test]
fn one_fork_serves_concurrent_and_late_agents() {
    let master = Server::start(Flavor::Redis70, &[]);
    data::fill_every_type(&mut master.client(), 4, true);
    let forks0 = info_num(&master, "stats", "total_forks");
    let relay = relay(&master.addr(), &["--block-size", "262144"], &[]);
    let replicas: Vec<Server> = (0..3).map(|_| Server::start(Flavor::Redis70, &[])).collect();
    let joins: Vec<Proc> = replicas[..2].iter().map(|r| start_join(&relay.addr, &r.addr(), &[], &[])).collect();
    for j in joins {
        assert_partial(&finish_join(j));
    }
    // More writes, then a late agent: it gets the cached snapshot plus the log.
    data::fill_small_mixed(&mut master.client(), 2000);
    wait_relay_acked(&master);
    let late = join(&relay.addr, &replicas[2].addr(), &[], &[]);
    assert_partial(&late);
    assert!(late.report["log_bytes"].as_u64().unwrap() > 0);
    assert_eq!(info_num(&master, "stats", "total_forks") - forks0, 1, "the master forked more than once");
    for r in &replicas {
        wait_caught_up(&master, r);
        assert_identical(&master, r);
    }
}

#[test]
fn a_full_log_seals_the_generation_and_the_next_agent_gets_a_fresh_one() {
    let master = Server::start(Flavor::Redis70, &[]);
    data::fill_every_type(&mut master.client(), 1, true);
    let forks0 = info_num(&master, "stats", "total_forks");
    let relay = relay(&master.addr(), &["--block-size", "65536", "--log-max-bytes", "65536"], &[]);
    let replicas: Vec<Server> = (0..2).map(|_| Server::start(Flavor::Redis70, &[])).collect();
    assert_partial(&join(&relay.addr, &replicas[0].addr(), &[], &[]));
    // Write past the log bound: the relay seals generation 1 and lets go of the master link.
    data::fill_small_mixed(&mut master.client(), 5000);
    wait_until("the relay to seal its generation", Duration::from_secs(20), || relay.proc.output().contains("generation sealed").then_some(()));
    let j = join(&relay.addr, &replicas[1].addr(), &[], &[]);
    assert_partial(&j);
    assert_eq!(j.report["generation"], 2, "{}", j.output);
    assert_eq!(info_num(&master, "stats", "total_forks") - forks0, 2, "one fork per generation");
    for r in &replicas {
        wait_caught_up(&master, r);
        assert_identical(&master, r);
    }
}
