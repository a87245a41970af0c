//! Master × replica pairs among Redis 6.2, 7.0, 8.2 and Valkey 8.1 (the dataset holds hash fields with
//! their own TTLs and vector sets where the master has them). A pair the servers can replicate
//! syncs and verifies; a pair they cannot (the replica cannot load the master's RDB version) is
//! refused before the replica is touched.

mod common;
use common::*;

fn pair(m: Flavor, r: Flavor) {
    available(m);
    available(r);
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
}
