//! `fastrepl verify` on what today's servers store, against real servers: zset scores compared as the
//! doubles they are (Redis 7.0 and Valkey print the same double differently), hash fields with their own
//! TTLs and vector sets on Redis 8.2, field TTLs on Valkey 9.1 (identical copies are identical; every
//! kind of difference is found), a type it does not know reported as such (exit 2), never as identical, a key a server
//! refuses to read (a cluster node not serving its slot) reported as not read (exit 2), never as a
//! difference, and values compared by their logical form where a server refuses `DUMP`.

mod common;
use common::*;

/// `fastrepl verify a b`: exit code and output.
fn run_verify(a: &str, b: &str) -> (Option<i32>, String) {
    let out = fastrepl().args(["verify", a, b]).output().expect("run verify");
    (out.status.code(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

/// Make `replica` a native replica of `master` and wait until it holds everything.
fn replicate(master: &Server, replica: &Server) {
    let (h, p) = master.addr().rsplit_once(':').map(|(h, p)| (h.to_string(), p.to_string())).unwrap();
    replica.client().cmd(&["REPLICAOF", &h, &p]).unwrap();
    wait_caught_up(master, replica);
}

/// Cut `replica` loose so it can be changed.
fn detach(replica: &Server) {
    replica.client().cmd(&["REPLICAOF", "NO", "ONE"]).unwrap();
}

#[test]
fn scores_printed_differently_are_the_same_doubles() {
    require_server(Flavor::Valkey81);
    // Redis 7.0 prints scores with 17 significant digits, Valkey with the shortest round-trip form.
    let master = Server::start(Flavor::Redis70, &[]);
    let mut c = master.client();
    for i in 0..500 {
        let score = (i as f64 + 1.0) * std::f64::consts::PI / 7.3;
        c.cmd(&["ZADD", "z", &format!("{score:.17}"), &format!("m{i}")]).unwrap();
    }
    c.cmd(&["ZADD", "z", "inf", "top", "-inf", "bottom"]).unwrap();
    let replica = Server::start(Flavor::Valkey81, &[]);
    replicate(&master, &replica);
    let (code, out) = run_verify(&master.addr(), &replica.addr());
    assert_eq!(code, Some(0), "{out}");
    // One ulp apart is a difference.
    detach(&replica);
    let one = "1.5707963267948966"; // π/2
    let next = "1.5707963267948968";
    master.client().cmd(&["ZADD", "z2", one, "x"]).unwrap();
    replica.client().cmd(&["ZADD", "z2", next, "x"]).unwrap();
    let (code, out) = run_verify(&master.addr(), &replica.addr());
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("'z2' (zset)"), "{out}");
}

#[test]
fn field_ttls_and_vector_sets_on_redis_82() {
    require_server(Flavor::Redis82);
    let master = Server::start(Flavor::Redis82, &[]);
    fixtures::data::fill_newer_types(&mut master.client());
    let replica = Server::start(Flavor::Redis82, &[]);
    replicate(&master, &replica);
    let (code, out) = run_verify(&master.addr(), &replica.addr());
    assert_eq!(code, Some(0), "identical copies with vector sets and field TTLs:\n{out}");
    detach(&replica);
    let mut r = replica.client();
    // Each change alone is found (restored after each).
    let cases: [(&[&str], &[&str], &str); 4] = [
        (&["HPEXPIRE", "hash:field-ttl", "7200000", "FIELDS", "1", "short"], &["HPEXPIRE", "hash:field-ttl", "3600000", "FIELDS", "1", "short"], "field-ttl short"),
        (&["HPERSIST", "hash:field-ttl", "FIELDS", "1", "long"], &["HPEXPIRE", "hash:field-ttl", "86400000", "FIELDS", "1", "long"], "field-ttl long"),
        (&["VSETATTR", "vset:q8", "item-0", "{\"year\":1,\"tag\":\"x\"}"], &["VSETATTR", "vset:q8", "item-0", "{\"year\":1990,\"tag\":\"t0\"}"], "item-0 attributes"),
        (&["VADD", "vset:noquant", "VALUES", "3", "0.5", "-0.25", "0.75", "only", "NOQUANT"], &["VADD", "vset:noquant", "VALUES", "3", "0.5", "-0.25", "1", "only", "NOQUANT"], "only vector"),
    ];
    for (change, undo, what) in cases {
        r.cmd(change).unwrap_or_else(|e| panic!("{change:?}: {e}"));
        let (code, out) = run_verify(&master.addr(), &replica.addr());
        assert_eq!(code, Some(1), "{change:?} not found:\n{out}");
        assert!(out.contains(what), "{change:?}: expected {what:?} in:\n{out}");
        r.cmd(undo).unwrap();
        // Restored (a restored TTL is relative to now, not to the master's: within verify's
        // tolerance), so that the next case is found alone.
        let (code, out) = run_verify(&master.addr(), &replica.addr());
        assert_eq!(code, Some(0), "after undoing {change:?}:\n{out}");
    }
    r.cmd(&["VREM", "vset:q8", "item-7"]).unwrap();
    let (code, out) = run_verify(&master.addr(), &replica.addr());
    assert_eq!(code, Some(1), "a missing element:\n{out}");
    assert!(out.contains("vset:q8"), "{out}");
}

#[test]
fn field_ttls_on_valkey_91() {
    // Valkey 9's own hash-field TTLs (its RDB 80 type, its `DUMP` payload): copies that match are
    // identical, a field's TTL changed or dropped is found.
    require_server(Flavor::Valkey91);
    let master = Server::start(Flavor::Valkey91, &[]);
    fixtures::data::fill_newer_types(&mut master.client());
    let replica = Server::start(Flavor::Valkey91, &[]);
    replicate(&master, &replica);
    let (code, out) = run_verify(&master.addr(), &replica.addr());
    assert_eq!(code, Some(0), "identical copies with field TTLs:\n{out}");
    detach(&replica);
    let mut r = replica.client();
    r.cmd(&["HPEXPIRE", "hash:field-ttl", "7200000", "FIELDS", "1", "short"]).unwrap();
    let (code, out) = run_verify(&master.addr(), &replica.addr());
    assert_eq!(code, Some(1), "a field's TTL changed:\n{out}");
    assert!(out.contains("field-ttl short"), "{out}");
    r.cmd(&["HPEXPIRE", "hash:field-ttl", "3600000", "FIELDS", "1", "short"]).unwrap();
    r.cmd(&["HPERSIST", "hash:field-ttl", "FIELDS", "1", "long"]).unwrap();
    let (code, out) = run_verify(&master.addr(), &replica.addr());
    assert_eq!(code, Some(1), "a field's TTL dropped:\n{out}");
    assert!(out.contains("field-ttl long") && !out.contains("field-ttl short"), "{out}");
}

#[test]
fn a_type_verify_does_not_know_is_not_called_identical() {
    let module = fixtures::root().join(".cache/servers/redis-8.2/falkordb.so");
    require_server(Flavor::Redis82);
    if !module.exists() {
        fixtures::skip("no Redis 8.2 with the falkordb module (scripts/setup.sh installs both)");
        return;
    }
    let m = module.to_string_lossy().to_string();
    let Ok(a) = Server::try_start(Flavor::Redis82, &["--loadmodule", &m]) else {
        fixtures::skip("the falkordb module does not load here");
        return;
    };
    let b = Server::start(Flavor::Redis82, &["--loadmodule", &m]);
    for s in [&a, &b] {
        s.client().cmd(&["GRAPH.QUERY", "g", "CREATE (:Person {name:'ada'})"]).unwrap();
        s.client().cmd(&["SET", "plain", "1"]).unwrap();
    }
    let (code, out) = run_verify(&a.addr(), &b.addr());
    assert_eq!(code, Some(2), "{out}");
    assert!(out.contains("cannot compare type graphdata"), "{out}");
    assert!(!out.contains("identical"), "{out}");
}

#[test]
fn a_key_a_server_refuses_to_read_is_not_compared_and_not_a_difference() {
    // A cluster node that serves no slot answers every key with CLUSTERDOWN (a restarted node does so
    // until it learns its cluster's state): those keys cannot be compared, which is neither identical
    // nor different. Counted as differences, a staged node still settling looked diverged.
    let a = Server::start(Flavor::Redis70, &[]);
    let b = Server::start(Flavor::Redis70, &["--cluster-enabled", "yes"]);
    a.client().cmd(&["SET", "k", "1"]).unwrap();
    let (code, out) = run_verify(&a.addr(), &b.addr());
    assert_eq!(code, Some(2), "{out}");
    assert!(out.contains("cannot read 1 keys") && out.contains("db0 key 'k': the second server answered TYPE with CLUSTERDOWN"), "{out}");
    assert!(!out.contains("DIFFERENT") && !out.contains("identical"), "{out}");
    // A key refused does not hide a key that differs.
    // A node that serves every slot but `k`'s (without full coverage required, it serves the others).
    let c = Server::start(Flavor::Redis70, &["--cluster-enabled", "yes", "--cluster-require-full-coverage", "no"]);
    let slot = |k: &str| c.client().cmd(&["CLUSTER", "KEYSLOT", k]).unwrap().as_int().unwrap();
    let sk = slot("k");
    for (from, to) in [(0, sk - 1), (sk + 1, 16383)].into_iter().filter(|(f, t)| f <= t) {
        c.client().cmd(&["CLUSTER", "ADDSLOTSRANGE", &from.to_string(), &to.to_string()]).unwrap();
    }
    let kd = (0..).map(|i| format!("other{i}")).find(|x| slot(x) != sk).unwrap();
    fixtures::wait_until("the node to serve its slots", std::time::Duration::from_secs(30), || c.client().cmd(&["SET", &kd, "2"]).ok());
    let d = Server::start(Flavor::Redis70, &[]);
    d.client().cmd(&["SET", "k", "1"]).unwrap();
    d.client().cmd(&["SET", &kd, "1"]).unwrap();
    let (code, out) = run_verify(&d.addr(), &c.addr());
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("DIFFERENT: 1 differences") && out.contains(&format!("'{kd}'")) && out.contains("cannot read 1 keys"), "{out}");
}

#[test]
fn values_are_compared_by_their_logical_form_where_dump_is_refused() {
    // DUMP renamed away on both sides (an operator's hardening): values are compared as the servers
    // mean them, never called equal because both refused alike (the refusals read the same).
    let a = Server::start(Flavor::Redis70, &["--rename-command", "DUMP", ""]);
    let b = Server::start(Flavor::Redis70, &["--rename-command", "DUMP", ""]);
    for s in [&a, &b] {
        s.client().cmd(&["HSET", "h", "f", "1", "g", "2"]).unwrap();
        s.client().cmd(&["SET", "s", "x"]).unwrap();
    }
    let (code, out) = run_verify(&a.addr(), &b.addr());
    assert_eq!(code, Some(0), "{out}");
    b.client().cmd(&["HSET", "h", "g", "3"]).unwrap();
    let (code, out) = run_verify(&a.addr(), &b.addr());
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("'h' (hash)"), "{out}");
}
