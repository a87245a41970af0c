//! `fastrepl stage` as the init step of every start of a server, on real servers and a real relay:
//! a standalone pod's life (first start staged, a rolling restart kept and resumed partially with
//! nothing pulled, a volume the backlog left behind staged again) for Redis 7.0, Redis 8.2, Valkey
//! 8.1 and Valkey 9.1 (its own RDB 80, with hash-field TTLs); a snapshot the server cannot load
//! refused before a byte is pulled; and in a cluster, a replica whose shard failed over while it was
//! down following the new master, and the promoted master kept whole at its next start without any
//! network.

mod common;
use common::*;
use fixtures::cluster::{self, Cluster, Node, NodeOpts};
use std::path::Path;
use std::time::Duration;

/// `fastrepl stage --json` for the server `binary` in `dir`; `args` adds --master, --cluster-config...
/// Returns (exit code, the JSON report, everything it printed).
fn stage(relay: &str, dir: &Path, binary: &Path, args: &[&str]) -> (Option<i32>, serde_json::Value, String) {
    let out = fastrepl().args(["stage", "--relay", relay, "--json", "--dir"]).arg(dir).arg("--server-binary").arg(binary).args(args).output().expect("run stage");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let text = format!("{stdout}{}", String::from_utf8_lossy(&out.stderr));
    let report = stdout.lines().rev().find_map(|l| serde_json::from_str(l).ok()).unwrap_or(serde_json::Value::Null);
    (out.status.code(), report, text)
}

/// A successful stage's decision: ("keep" | "stage", reason).
fn decision(report: &serde_json::Value, text: &str) -> (String, String) {
    let s = &report["start"];
    assert!(s.is_object(), "no start decision in the report:\n{text}");
    (s["decision"].as_str().unwrap_or_default().to_string(), s["because"]["reason"].as_str().unwrap_or_default().to_string())
}

/// What the relay has served and how often agents attached: a stage that pulled nothing leaves the
/// bytes as they were.
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
struct Served {
    bytes: u64,
    attached: u64,
}

fn served(relay: &str) -> Served {
    let st = status_json(relay);
    let bytes = st["served_bytes_total"].as_object().map(|m| m.values().filter_map(|v| v.as_u64()).sum()).unwrap_or(0) + st["log_served_bytes_total"].as_u64().unwrap_or(0);
    Served { bytes, attached: st["agents_attached_total"].as_u64().unwrap_or_else(|| panic!("no agents_attached_total in {st}")) }
}

/// (sync_full, sync_partial_ok) of a standalone server.
fn syncs(s: &Server) -> (i64, i64) {
    (info_num(s, "stats", "sync_full"), info_num(s, "stats", "sync_partial_ok"))
}

/// Write `n` values of `size` bytes under `prefix`, pipelined.
fn write(c: &mut client::Client, prefix: &str, n: usize, size: usize) {
    let v = "w".repeat(size);
    let cmds: Vec<Vec<Vec<u8>>> = (0..n).map(|i| vec![b"SET".to_vec(), format!("{prefix}:{i}").into_bytes(), v.clone().into_bytes()]).collect();
    for chunk in cmds.chunks(500) {
        for r in c.pipeline(chunk).expect("write pipeline") {
            assert!(!r.is_error(), "write failed: {r:?}");
        }
    }
}

fn dump(dir: &Path) -> Vec<u8> {
    std::fs::read(dir.join("dump.rdb")).unwrap_or_else(|e| panic!("read {}/dump.rdb: {e}", dir.display()))
}

/// A standalone replica's volume through a pod's starts: staged empty, kept across a rolling
/// restart, staged again once the master's backlog lost it; every start a partial resync.
fn pod_life(flavor: Flavor) {
    require_server(flavor);
    // A 1 MiB backlog: a few MiB of writes while the replica is down leave its RDB behind.
    let master = Server::start(flavor, &["--repl-backlog-size", "1mb"]);
    data::fill_small_mixed(&mut master.client(), 3000);
    if flavor == Flavor::Valkey91 {
        // Valkey 9's own type in its own format (hash-field TTLs: RDB 80's type 22) staged too.
        data::fill_newer_types(&mut master.client());
    }
    let r = relay(&master.addr(), &[], &[]);
    wait_relay_generation(&r.addr);
    let vol = tempfile::tempdir().unwrap();
    let dir = vol.path();
    let stage_here = || stage(&r.addr, dir, &flavor.binary(), &["--master", &master.addr()]);

    // First start: an empty volume is staged.
    let (code, rep, out) = stage_here();
    assert_eq!(code, Some(0), "{out}");
    assert_eq!(decision(&rep, &out), ("stage".into(), "empty".into()), "{out}");
    assert_eq!(rep["rdb_file"].as_str().map(Path::new), Some(dir.join("dump.rdb").as_path()), "{out}");
    assert_eq!(rep["master"].as_str(), Some(master.addr().as_str()), "{out}");
    let first_generation = rep["generation"].as_u64().unwrap_or_else(|| panic!("no generation: {out}"));
    let before = syncs(&master);
    let port = master.port.to_string();
    let mut replica = Server::start(flavor, &["--dir", dir.to_str().unwrap(), "--replicaof", "127.0.0.1", &port]);
    wait_caught_up(&master, &replica);
    assert_eq!(syncs(&master), (before.0, before.1 + 1), "{}: the first start was not one partial resync:\n{}", flavor.name(), replica.log());
    assert_identical(&master, &replica);

    // A rolling restart: the server writes its own RDB at shutdown, which the backlog continues.
    write(&mut master.client(), "more", 500, 100);
    wait_caught_up(&master, &replica);
    replica.shutdown_save();
    let own = dump(dir);
    let relay_before = served(&r.addr);
    let (code, rep, out) = stage_here();
    assert_eq!(code, Some(0), "{out}");
    assert_eq!(decision(&rep, &out), ("keep".into(), "resumes_partially".into()), "{out}");
    assert!(rep.get("rdb_file").is_none() && rep.get("generation").is_none(), "a keep reports nothing staged: {out}");
    assert!(rep["start"]["because"]["headroom_bytes"].as_u64().unwrap_or(0) > 0, "{out}");
    assert_eq!(served(&r.addr), relay_before, "the relay was attached or served bytes for a kept volume: {out}");
    assert!(dump(dir) == own, "the server's own RDB was changed");
    let before = syncs(&master);
    replica.restart().unwrap_or_else(|e| panic!("start the replica again: {e}"));
    wait_caught_up(&master, &replica);
    assert_eq!(syncs(&master), (before.0, before.1 + 1), "{}: the restart was not one partial resync:\n{}", flavor.name(), replica.log());
    assert_identical(&master, &replica);

    // Down while the master writes more than its backlog holds: its RDB is stale, staged again.
    replica.shutdown_save();
    let offset = rep["start"]["because"]["offset"].as_u64().unwrap_or(0);
    write(&mut master.client(), "big", 48, 64 * 1024);
    let (code, rep, out) = stage_here();
    assert_eq!(code, Some(0), "{out}");
    assert_eq!(decision(&rep, &out), ("stage".into(), "stale".into()), "{out}");
    assert!(rep["start"]["because"]["offset"].as_u64().unwrap_or(0) >= offset, "the stale RDB is the one the last shutdown wrote: {out}");
    // The relay's generation is as old: it took a newer one.
    assert!(rep["renewals"].as_u64().unwrap_or(0) >= 1 && rep["generation"].as_u64().unwrap_or(0) > first_generation, "{out}");
    assert!(dump(dir) != own, "the stale RDB was not replaced");
    let before = syncs(&master);
    replica.restart().unwrap_or_else(|e| panic!("start the replica again: {e}"));
    wait_caught_up(&master, &replica);
    assert_eq!(syncs(&master), (before.0, before.1 + 1), "{}: the start on the staged file was not one partial resync:\n{}", flavor.name(), replica.log());
    assert_identical(&master, &replica);
}

#[test]
fn a_standalone_pod_life_redis_70() {
    pod_life(Flavor::Redis70);
}

#[test]
fn a_standalone_pod_life_redis_82() {
    pod_life(Flavor::Redis82);
}

#[test]
fn a_standalone_pod_life_valkey_81() {
    pod_life(Flavor::Valkey81);
}

#[test]
fn a_standalone_pod_life_valkey_91() {
    pod_life(Flavor::Valkey91);
}

#[test]
fn a_snapshot_the_server_cannot_load_is_refused_before_any_byte_is_pulled() {
    require_server(Flavor::Redis82);
    require_server(Flavor::Redis62);
    let master = Server::start(Flavor::Redis82, &[]);
    data::fill_small_mixed(&mut master.client(), 1000);
    let r = relay(&master.addr(), &[], &[]);
    wait_relay_generation(&r.addr);
    let st = status_json(&r.addr);
    assert!(st["generations"].as_array().unwrap().iter().any(|g| g["rdb_version"] == 12), "Redis 8.2 writes RDB 12: {st}");
    let relay_before = served(&r.addr);
    let vol = tempfile::tempdir().unwrap();
    let (code, rep, out) = stage(&r.addr, vol.path(), &Flavor::Redis62.binary(), &["--master", &master.addr()]);
    assert_eq!(code, Some(1), "{out}");
    assert_eq!(rep["ok"], false, "{out}");
    assert_eq!(rep["error_kind"], "incompatible", "{out}");
    let msg = rep["error"].as_str().unwrap_or_default();
    assert!(msg.contains("RDB version 12") && msg.contains("6.2") && msg.contains("version 9"), "the message names the versions: {msg}");
    assert_eq!(std::fs::read_dir(vol.path()).unwrap().count(), 0, "something was written to the directory");
    assert_eq!(served(&r.addr).bytes, relay_before.bytes, "the relay served bytes before the refusal");
    // A server named by version (a pod's image) is refused the same way.
    let out = fastrepl().args(["stage", "--relay", &r.addr, "--json", "--master", &master.addr(), "--server", "redis-7.2.4", "--dir"]).arg(vol.path()).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("\"incompatible\"") && text.contains("at most RDB version 11"), "{text}");
    assert_eq!(std::fs::read_dir(vol.path()).unwrap().count(), 0, "something was written to the directory");
    assert_eq!(served(&r.addr).bytes, relay_before.bytes, "the relay served bytes before the refusal");
    // The counter is live: a server that loads RDB 12 gets the snapshot, and the relay counts it.
    let (code, rep, out) = stage(&r.addr, vol.path(), &Flavor::Redis82.binary(), &["--master", &master.addr()]);
    assert_eq!(code, Some(0), "{out}");
    assert_eq!(decision(&rep, &out), ("stage".into(), "empty".into()), "{out}");
    assert!(served(&r.addr).bytes >= rep["rdb_stored_bytes"].as_u64().unwrap_or(u64::MAX), "the relay's served bytes do not count a pull: {out}");
}

/// The server at `addr` says it is a master (`INFO replication`).
fn is_master(addr: &str) -> bool {
    client::Client::connect(addr, None, Duration::from_secs(5)).ok().and_then(|mut c| c.info("replication").ok()).is_some_and(|i| i.get("role") == Some("master"))
}

/// The server at `replica` follows the one at `master` (by its port) with its link up, at its offset.
fn follows_caught_up(replica: &str, master: &str) -> bool {
    let (Ok(mut r), Ok(mut m)) = (client::Client::connect(replica, None, Duration::from_secs(5)), client::Client::connect(master, None, Duration::from_secs(5))) else { return false };
    let (Ok(ri), Ok(mi)) = (r.info("replication"), m.info("replication")) else { return false };
    let port = master.rsplit_once(':').map(|(_, p)| p);
    ri.get("master_port") == port && ri.get("master_link_status") == Some("up") && ri.num("slave_repl_offset").is_some() && ri.num("slave_repl_offset") == mi.num("master_repl_offset")
}

/// `fastrepl verify` between two nodes, once both see the cluster up: a node started again answers
/// every key with CLUSTERDOWN until gossip tells it the cluster's state, however complete its data.
fn assert_same(a: &str, b: &str) {
    for n in [a, b] {
        wait_until(&format!("{n} to see the cluster up"), Duration::from_secs(60), || {
            let mut c = client::Client::connect(n, None, Duration::from_secs(5)).ok()?;
            matches!(c.cmd(&["CLUSTER", "INFO"]), Ok(resp::Frame::Bulk(b)) if String::from_utf8_lossy(&b).contains("cluster_state:ok")).then_some(())
        });
    }
    let out = fastrepl().args(["verify", a, b]).output().expect("run verify");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "verify {a} {b}:\n{text}");
}

/// A shard (master A, replicas B and C): C goes down, B takes over from A; C's next start is staged
/// against the shard's new master though it names the old one, and resyncs partially from B; then
/// B's own next start keeps it as the master it is, with no relay to ask.
fn failover_and_promotion(flavor: Flavor) {
    require_server(flavor);
    let c = Cluster::start(flavor, 1, 2, NodeOpts::default());
    cluster::fill_shard(&c, 0, 2000);
    let (a, b, cn) = (c.master(0), &c.replicas(0)[0], &c.replicas(0)[1]);
    let r = relay(&a.addr(), &[], &[]);
    wait_relay_generation(&r.addr);
    cluster::wait_shard_caught_up(&c, 0, cn);
    cn.shutdown_save();
    let c_dir = cn.dir().to_path_buf();

    // B takes over (a manual failover: A is alive and hands its clients over).
    b.client().cmd(&["CLUSTER", "FAILOVER"]).unwrap_or_else(|e| panic!("CLUSTER FAILOVER on {}: {e}", b.addr()));
    wait_until("B to be master and A its replica", Duration::from_secs(30), || (is_master(&b.addr()) && follows_caught_up(&a.addr(), &b.addr())).then_some(()));
    let tag = cluster::shard_tag(&c, 0);
    let mut bc = b.client();
    for i in 0..300 {
        bc.cmd(&["SET", &format!("{{{tag}}}:after{i}"), &i.to_string()]).expect("SET on the new master");
    }

    // C's next start names A, now a replica: stage asks the cluster and follows B. Whether it keeps
    // the volume is the cluster's to say: with the relay down, the same decision.
    let own = dump(&c_dir);
    let nowhere = format!("127.0.0.1:{}", fixtures::free_port());
    let (code, rep, out) = stage(&nowhere, &c_dir, &flavor.binary(), &["--master", &a.addr(), "--cluster-config", "nodes.conf"]);
    assert_eq!(code, Some(0), "{out}");
    assert_eq!(decision(&rep, &out), ("keep".into(), "resumes_partially".into()), "B's backlog continues C's RDB: {out}");
    assert_eq!(rep["master"].as_str(), Some(b.addr().as_str()), "C follows the shard's new master: {out}");
    let relay_before = served(&r.addr);
    let (code, rep, out) = stage(&r.addr, &c_dir, &flavor.binary(), &["--master", &a.addr(), "--cluster-config", "nodes.conf"]);
    assert_eq!(code, Some(0), "{out}");
    assert_eq!(rep["master"].as_str(), Some(b.addr().as_str()), "C follows the shard's new master: {out}");
    let (what, why) = decision(&rep, &out);
    eprintln!("{}: C's start after the failover: {what}/{why}", flavor.name());
    match what.as_str() {
        // B's previous history is A's, and its backlog (kept as A's replica) holds C's offset.
        "keep" => {
            assert_eq!(why, "resumes_partially", "{out}");
            assert!(dump(&c_dir) == own, "a kept RDB was changed");
            assert_eq!(served(&r.addr).bytes, relay_before.bytes, "bytes pulled for a kept volume: {out}");
        }
        _ => {
            assert_eq!(what, "stage", "{out}");
            assert_eq!(rep["cluster"]["master_id"].as_str(), Some(b.node_id().as_str()), "{out}");
            assert!(dump(&c_dir) != own, "the staged file is not in place");
        }
    }
    let (b_full, b_partial) = (b.info_num("stats", "sync_full"), b.info_num("stats", "sync_partial_ok"));
    let a_full = a.info_num("stats", "sync_full");
    let c2 = Node::start_in(flavor, &c_dir, &NodeOpts::default());
    wait_until("C to follow B, caught up", Duration::from_secs(60), || follows_caught_up(&c2.addr(), &b.addr()).then_some(()));
    assert_eq!(b.info_num("stats", "sync_full"), b_full, "{}: C's start was a full sync on B ({what}/{why}):\n{}", flavor.name(), c2.log());
    assert_eq!(a.info_num("stats", "sync_full"), a_full, "{}: C's start was a full sync on A ({what}/{why}):\n{}", flavor.name(), c2.log());
    assert!(b.info_num("stats", "sync_partial_ok") > b_partial, "{}: C did not resync partially from B ({what}/{why}):\n{}", flavor.name(), c2.log());
    assert_same(&b.addr(), &c2.addr());

    // B's next start: its config says it is a master serving slots; kept with no relay to ask.
    b.shutdown_save();
    let b_dir = b.dir().to_path_buf();
    let b_rdb = dump(&b_dir);
    let nowhere = format!("127.0.0.1:{}", fixtures::free_port());
    let (code, rep, out) = stage(&nowhere, &b_dir, &flavor.binary(), &["--cluster-config", "nodes.conf"]);
    assert_eq!(code, Some(0), "no network is needed to keep a master: {out}");
    assert_eq!(decision(&rep, &out), ("keep".into(), "serves_slots".into()), "{out}");
    assert_eq!(rep["start"]["because"]["slots"], 16384, "{out}");
    assert!(rep["master"].is_null() && rep.get("rdb_file").is_none(), "{out}");
    assert!(dump(&b_dir) == b_rdb, "the master's RDB was changed");
    // Started again (before the cluster's node timeout), it is the shard's master with its data.
    let b2 = Node::start_in(flavor, &b_dir, &NodeOpts::default());
    wait_until("B to be the master again, A and C following", Duration::from_secs(60), || {
        (is_master(&b2.addr()) && follows_caught_up(&a.addr(), &b2.addr()) && follows_caught_up(&c2.addr(), &b2.addr())).then_some(())
    });
    assert_same(&b2.addr(), &a.addr());
}

#[test]
fn a_cluster_replica_follows_a_failover_and_the_promoted_master_is_kept_valkey_81() {
    failover_and_promotion(Flavor::Valkey81);
}

#[test]
fn a_cluster_replica_follows_a_failover_and_the_promoted_master_is_kept_redis_70() {
    failover_and_promotion(Flavor::Redis70);
}

/// A cluster replica whose own RDB the shard's master continues, with `--master` naming a node of the
/// cluster: the decision is the cluster's, and the relay is not to be asked (a relay that is up but
/// silent costs the init step RELAY_SILENCE_MAX, one still without a generation up to
/// GENERATION_WAIT_MAX, before the given node is asked).
#[test]
fn a_kept_cluster_replica_with_master_given_does_not_attach_to_the_relay() {
    let flavor = Flavor::Valkey81;
    require_server(flavor);
    let c = Cluster::start(flavor, 1, 1, NodeOpts::default());
    cluster::fill_shard(&c, 0, 200);
    let r = relay(&c.master(0).addr(), &[], &[]);
    wait_relay_generation(&r.addr);
    let cn = &c.replicas(0)[0];
    cluster::wait_shard_caught_up(&c, 0, cn);
    cn.shutdown_save();
    let before = served(&r.addr);
    let (code, rep, out) = stage(&r.addr, cn.dir(), &flavor.binary(), &["--master", &c.master(0).addr(), "--cluster-config", "nodes.conf"]);
    assert_eq!(code, Some(0), "{out}");
    assert_eq!(decision(&rep, &out), ("keep".into(), "resumes_partially".into()), "{out}");
    assert_eq!(served(&r.addr), before, "the relay was attached for a volume kept on the cluster's word: {out}");
}
