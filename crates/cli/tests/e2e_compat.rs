//! Master × replica pairs among Redis 6.2, 7.0, 8.2 and Valkey 8.1, 9.1 (the dataset holds hash fields with
//! their own TTLs and vector sets where the master has them). A pair the servers can replicate
//! syncs and verifies; a pair they cannot (the replica cannot load the master's RDB version) is
//! refused before the replica is touched. Redis 8.2 → Valkey 9.1 with `rdb-version-check relaxed`: the
//! types they share sync; a type Valkey does not have is refused by the replica while it loads, which
//! the join tells from a lost link (the replica's own log) and does not retry.

mod common;
use common::*;

fn pair(m: Flavor, r: Flavor) {
    require_server(m);
    require_server(r);
    let master = Server::start(m, &[]);
    data::fill_every_type(&mut master.client(), 1, m.has_functions());
    let replica = Server::start(r, &[]);
    let relay = relay(&master.addr(), &["--block-size", "65536"], &[]);
    let j = join(&relay.addr, &replica.addr(), &[], &[]);
    if r.loads_rdb_of(m) {
        assert_partial(&j);
        assert_identical(&master, &replica);
    } else {
        assert_eq!(j.code, Some(1), "{}", j.output);
        assert!(j.output.contains("incompatible") && j.output.contains("RDB version"), "{}", j.output);
        assert_untouched(&replica);
        assert_eq!(replica.client().config_get("repl-diskless-load").unwrap().as_deref(), Some("disabled"), "config was changed");
    }
}

/// A replica that offers a newer replication mode (`extra` its setting) is fed over one channel: the
/// agent declines the offer, as a master that does not choose that mode does, and says so.
fn newer_mode(f: Flavor, extra: &[&str], offer: &str) {
    require_server(f);
    let master = Server::start(f, &[]);
    data::fill_every_type(&mut master.client(), 1, f.has_functions());
    let replica = Server::start(f, extra);
    let relay = relay(&master.addr(), &[], &[]);
    let j = join(&relay.addr, &replica.addr(), &[], &[]);
    assert_partial(&j);
    assert_identical(&master, &replica);
    let said = j.output.lines().find(|l| l.contains("the replica's handshake")).unwrap_or_else(|| panic!("the handshake is not logged:\n{}", j.output));
    assert!(said.contains(&format!("declined={offer}")), "{said}");
}

#[test]
fn a_redis82_replica_with_an_rdb_channel_is_fed_over_one() {
    newer_mode(Flavor::Redis82, &["--repl-rdb-channel", "yes"], "rdb-channel-repl");
}

#[test]
fn a_valkey81_replica_with_dual_channel_replication_is_fed_over_one() {
    newer_mode(Flavor::Valkey81, &["--dual-channel-replication-enabled", "yes"], "dual-channel");
}

#[test]
fn a_valkey_source_is_told_the_replica_version_and_a_redis_source_is_not() {
    // Valkey picks the RDB version it writes from `REPLCONF version` (Valkey 9 writes RDB 11, without
    // hash-field TTLs, to a replica that says nothing); Redis refuses the option.
    require_server(Flavor::Valkey81);
    let valkey = Server::start(Flavor::Valkey81, &[]);
    data::fill_small_mixed(&mut valkey.client(), 100);
    for (extra, said) in [(&[][..], "announced=8.1."), (&["--announce-version", "8.0.0"][..], "announced=8.0.0")] {
        let r = relay(&valkey.addr(), extra, &[]);
        let replica = Server::start(Flavor::Valkey81, &[]);
        assert_partial(&join(&r.addr, &replica.addr(), &[], &[]));
        let log = r.proc.output();
        assert!(log.lines().any(|l| l.contains("REPLCONF version") && l.contains(said)), "{said}:\n{log}");
    }
    let redis = Server::start(Flavor::Redis82, &[]);
    data::fill_small_mixed(&mut redis.client(), 100);
    let r = relay(&redis.addr(), &["--announce-version", "8.0.0"], &[]);
    let replica = Server::start(Flavor::Redis82, &[]);
    assert_partial(&join(&r.addr, &replica.addr(), &[], &[]));
    let log = r.proc.output();
    assert!(log.contains("--announce-version is for Valkey sources"), "{log}");
}

/// Valkey 9.1 → 8.1, as a rolling upgrade meets it after a failover: the relay announces its master's
/// version and gets Valkey's own format, which 8.1 cannot load. The join says how to pair them, and a
/// relay announcing 8.1 gets RDB 11, which it loads.
#[test]
fn an_older_valkey_replica_of_a_valkey91_master_is_told_to_use_an_older_announcement_and_it_works() {
    require_server(Flavor::Valkey91);
    require_server(Flavor::Valkey81);
    let master = Server::start(Flavor::Valkey91, &[]);
    // Types both have (no hash-field TTLs: Valkey 9 leaves them out of the RDB 11 it writes).
    data::fill_small_mixed(&mut master.client(), 200);
    let replica = Server::start(Flavor::Valkey81, &[]);
    let relay91 = relay(&master.addr(), &["--block-size", "65536"], &[]);
    let j = join(&relay91.addr, &replica.addr(), &[], &[]);
    assert_eq!(j.code, Some(1), "{}", j.output);
    assert!(j.output.contains("--announce-version 8.1."), "the refusal says how: {}", j.output);
    assert_untouched(&replica);
    let relay81 = relay(&master.addr(), &["--block-size", "65536", "--announce-version", "8.1.0"], &[]);
    assert_partial(&join(&relay81.addr, &replica.addr(), &[], &[]));
    assert_identical(&master, &replica);
}

macro_rules! pairs {
    ($($name:ident: $m:ident -> $r:ident,)*) => {$(
        #[test]
        fn $name() {
            pair(Flavor::$m, Flavor::$r);
        }
    )*};
}

pairs! {
    redis70_to_redis70: Redis70 -> Redis70,
    redis70_to_valkey81: Redis70 -> Valkey81,
    redis70_to_redis62_refused: Redis70 -> Redis62,
    valkey81_to_valkey81: Valkey81 -> Valkey81,
    valkey81_to_redis70_refused: Valkey81 -> Redis70,
    valkey81_to_redis62_refused: Valkey81 -> Redis62,
    redis62_to_redis62: Redis62 -> Redis62,
    redis62_to_redis70: Redis62 -> Redis70,
    redis62_to_valkey81: Redis62 -> Valkey81,
    redis82_to_redis82: Redis82 -> Redis82,
    redis70_to_redis82: Redis70 -> Redis82,
    redis62_to_redis82: Redis62 -> Redis82,
    valkey81_to_redis82: Valkey81 -> Redis82,
    redis82_to_redis70_refused: Redis82 -> Redis70,
    redis82_to_redis62_refused: Redis82 -> Redis62,
    redis82_to_valkey81_refused: Redis82 -> Valkey81,
    valkey91_to_valkey91: Valkey91 -> Valkey91,
    redis70_to_valkey91: Redis70 -> Valkey91,
    redis62_to_valkey91: Redis62 -> Valkey91,
    valkey81_to_valkey91: Valkey81 -> Valkey91,
    redis82_to_valkey91_refused: Redis82 -> Valkey91,
    valkey91_to_valkey81_refused: Valkey91 -> Valkey81,
    valkey91_to_redis82_refused: Valkey91 -> Redis82,
    valkey91_to_redis70_refused: Valkey91 -> Redis70,
}

/// Redis 8.2 → Valkey 9.1 with `rdb-version-check relaxed`: the replica takes the RDB 12 header and
/// loads until it meets a type it has no equivalent of, then drops the link (or exits). Another
/// attempt would meet the same type: the join says what the replica refused, does not retry, and
/// leaves the replica reset (empty, standalone).
fn refused_while_loading(fill: fn(&mut client::Client), said: &str, replica_exits: bool) {
    require_server(Flavor::Redis82);
    require_server(Flavor::Valkey91);
    let master = Server::start(Flavor::Redis82, &[]);
    let mut c = master.client();
    data::fill_small_mixed(&mut c, 200);
    fill(&mut c);
    let mut replica = Server::start(Flavor::Valkey91, &["--rdb-version-check", "relaxed"]);
    let relay = relay(&master.addr(), &[], &[]);
    let j = join(&relay.addr, &replica.addr(), &[], &[]);
    assert_eq!(j.code, Some(1), "{}", j.output);
    assert_eq!(j.report["attempts"].as_array().map(Vec::len), Some(1), "a refused load was retried:\n{}", j.output);
    assert_eq!(j.report["error_kind"], "incompatible", "{}", j.output);
    let error = j.report["error"].as_str().unwrap_or_default();
    for part in ["the replica (valkey 9.1.", "refused the snapshot while loading it", said, "docs/operations.md#redis-to-valkey"] {
        assert!(error.contains(part), "{part:?} not in the error: {error}\n{}", j.output);
    }
    // The replica tried the load once (its own log), and nothing of the master's data is left on it.
    assert_eq!(replica.log().matches("Loading RDB produced by Redis version 8.2").count(), 1, "{}", replica.log());
    if replica_exits {
        assert_eq!(j.report["replica"], "unreachable", "{}", j.output);
        replica.restart().unwrap_or_else(|e| panic!("start the replica again: {e}"));
    } else {
        assert_eq!(j.report["replica"], "reset", "{}", j.output);
    }
    assert_untouched(&replica);
}

#[test]
fn a_valkey91_replica_refusing_redis82_hash_field_ttls_is_not_retried() {
    fn fill(c: &mut client::Client) {
        c.cmd(&["HSET", "hash:field-ttl", "short", "1", "long", "2"]).unwrap();
        c.cmd(&["HPEXPIRE", "hash:field-ttl", "3600000", "FIELDS", "1", "short"]).unwrap();
    }
    // Valkey stores field TTLs as its own type (22); Redis 8.2's (24, 25) are foreign to it.
    refused_while_loading(fill, "Can't handle foreign type or opcode 25", false);
}

/// `join --watch` beside such a replica (the AOF sidecar's way): after the refusal the watch says it
/// waits for the server's restart, not for its 30 s (`watch::decide` keeps that process unjoined:
/// its unit test); once the server restarted (another run_id, perhaps another version), it is
/// joined once more.
#[test]
fn a_watched_valkey91_replica_refusing_redis82_waits_for_its_restart() {
    require_server(Flavor::Redis82);
    require_server(Flavor::Valkey91);
    let master = Server::start(Flavor::Redis82, &[]);
    let mut c = master.client();
    c.cmd(&["HSET", "hash:field-ttl", "short", "1", "long", "2"]).unwrap();
    c.cmd(&["HPEXPIRE", "hash:field-ttl", "3600000", "FIELDS", "1", "short"]).unwrap();
    let mut replica = Server::start(Flavor::Valkey91, &["--rdb-version-check", "relaxed"]);
    let relay = relay(&master.addr(), &[], &[]);
    let mut p = start_join(&relay.addr, &replica.addr(), &["--watch", "--no-serve"], &[]);
    let refusals = |p: &Proc| p.output().lines().filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok()).filter(|r| r["error_kind"] == "incompatible").count();
    let waiting = |p: &Proc| p.output().matches("waiting for the server to restart").count();
    wait_until("the watch to wait for the refused server's restart", std::time::Duration::from_secs(60), || {
        assert!(p.running(), "the watch exited:\n{}", p.output());
        (waiting(&p) == 1).then_some(())
    });
    assert_eq!(refusals(&p), 1, "{}", p.output());
    replica.restart().unwrap_or_else(|e| panic!("restart the replica: {e}"));
    wait_until("the watch to join the restarted server, refused again", std::time::Duration::from_secs(60), || (waiting(&p) == 2).then_some(()));
    assert_eq!(refusals(&p), 2, "the restarted server was joined once: {}", p.output());
    let ok = std::process::Command::new("kill").args(["-TERM", &p.pid().to_string()]).status().is_ok_and(|s| s.success());
    assert!(ok);
    assert_eq!(p.wait(std::time::Duration::from_secs(30)), Some(0), "the watch did not end cleanly at SIGTERM:\n{}", p.output());
    assert_untouched(&replica);
}

#[test]
fn a_valkey91_replica_refusing_redis82_vector_sets_is_not_retried() {
    fn fill(c: &mut client::Client) {
        c.cmd(&["VADD", "vset", "VALUES", "3", "0.5", "-0.25", "1", "only"]).unwrap();
    }
    // A vector set is a module type in the RDB; Valkey has no `vectorset` module, and a diskless
    // load that meets unknown module data ends the server.
    refused_while_loading(fill, "no matching module type 'vectorset'", true);
}

/// The other side of the same pair: a Redis 8.2 master whose data has only the types Redis and Valkey
/// share (strings, lists, sets, sorted sets, hashes, streams with groups, expiries, functions) joins a
/// Valkey 9.1 replica that takes RDB 12 (`rdb-version-check relaxed`), partially, identical.
#[test]
fn redis82_to_valkey91_relaxed_with_the_types_they_share() {
    require_server(Flavor::Redis82);
    require_server(Flavor::Valkey91);
    let master = Server::start(Flavor::Redis82, &[]);
    data::fill_shared_types(&mut master.client(), 1, true);
    let replica = Server::start(Flavor::Valkey91, &["--rdb-version-check", "relaxed"]);
    let relay = relay(&master.addr(), &["--block-size", "65536"], &[]);
    let j = join(&relay.addr, &replica.addr(), &[], &[]);
    assert_partial(&j);
    assert!(replica.log().contains("Loading RDB produced by Redis version 8.2"), "{}", replica.log());
    assert_identical(&master, &replica);
}
