//! Cluster nodes joined through fastrepl: a staged join per shard of a 3-shard cluster with writes
//! running (supervisors restart two nodes, `--restart-command` the third; a one-shard Valkey 9.1
//! cluster too), identical data per shard,
//! the masters' own counters showing partial resyncs and no fork where the snapshot came from a
//! replica, and `redis-cli --cluster check` (a checker no one here wrote) clean; `fastrepl stage` for
//! a node not running yet, with a generation too old for the backlog renewed; each refusal (keys,
//! slots, AOF) leaving the node as it was; a restart that fails leaving the node restored.

mod common;
use common::*;
use fixtures::cluster::{self, Cluster, Node, NodeOpts};

fn flavors() -> Vec<Flavor> {
    let all = [Flavor::Redis70, Flavor::Valkey81];
    all.iter().for_each(|f| require_server(*f));
    all.to_vec()
}

/// `fastrepl verify` between two nodes of one shard.
fn assert_same(a: &Node, b: &Node) {
    let out = fastrepl().args(["verify", &a.addr(), &b.addr()]).output().expect("run verify");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "verify {} {}:\n{text}", a.addr(), b.addr());
}

fn staged(j: &Joined) -> &serde_json::Value {
    let s = &j.report["staged"];
    assert!(s.is_object(), "no staged report:\n{}", j.output);
    s
}

/// The node is an empty master serving no slots, as it was before a refused or undone join.
fn assert_empty_master(n: &Node) {
    let mut c = n.client();
    assert_eq!(c.info("replication").unwrap().get("role"), Some("master"), "{}", n.addr());
    assert_eq!(agent::local::key_count(&mut c).unwrap(), 0);
}

#[test]
fn a_new_node_per_shard_joins_by_staging_with_writes_running() {
    for flavor in flavors() {
        let c = Cluster::start(flavor, 3, 1, NodeOpts::default());
        for s in 0..3 {
            cluster::fill_shard(&c, s, 300);
        }
        // Shard 0 from its master; shards 1 and 2 from their replicas: no fork on those masters.
        let relays: Vec<Relay> = (0..3)
            .map(|s| match s {
                0 => relay(&c.master(s).addr(), &[], &[]),
                _ => relay(&c.master(s).addr(), &["--source", &c.replicas(s)[0].addr()], &[]),
            })
            .collect();
        let writers: Vec<_> = (0..3).map(|s| cluster::Writer::start(&c, s)).collect();
        let before: Vec<(i64, i64)> = (0..3).map(|s| (c.master(s).info_num("stats", "total_forks"), c.master(s).info_num("stats", "sync_full"))).collect();
        // Two supervised nodes (the join shuts them down, their supervisor starts them), one started
        // again by --restart-command; the second not yet introduced to the cluster.
        let nodes = [
            c.add_empty_node(NodeOpts { supervised: true, meet: true, ..Default::default() }),
            c.add_empty_node(NodeOpts { supervised: true, meet: false, ..Default::default() }),
            c.add_empty_node(NodeOpts { supervised: false, meet: true, ..Default::default() }),
        ];
        let joins: Vec<_> = (0..3)
            .map(|s| {
                let mut extra = vec!["--master".to_string(), c.master(s).addr(), "--restart-timeout-secs".into(), "60".into()];
                if !nodes[s].supervised() {
                    extra.extend(["--restart-command".to_string(), nodes[s].restart_command()]);
                }
                let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
                start_join(&relays[s].addr, &nodes[s].addr(), &extra, &[])
            })
            .collect();
        let results: Vec<Joined> = joins.into_iter().map(finish_join).collect();
        for w in writers {
            assert!(w.stop() > 0, "the writers wrote");
        }
        for (s, j) in results.iter().enumerate() {
            assert_partial(j);
            let st = staged(j);
            assert_eq!(st["master_id"].as_str(), Some(c.master_id(s).as_str()), "{}", j.output);
            assert_eq!(st["node_id"].as_str(), Some(nodes[s].node_id().as_str()), "{}", j.output);
            assert_eq!(st["restart"], if nodes[s].supervised() { "supervisor" } else { "command" }, "{}", j.output);
            assert_eq!(st["met"], s == 1, "only the node not introduced needed the join's CLUSTER MEET: {}", j.output);
            assert!(st["backlog_headroom_bytes"].as_u64().unwrap_or(0) > 0, "{}", j.output);
            if nodes[s].supervised() {
                assert_eq!(nodes[s].restarts(), 1, "the supervisor started it once");
            }
            // The master's own counters: no full sync for the new node (shard 0's one is the relay's
            // capture), and no fork at all where the relay took its snapshot from the replica.
            let m = c.master(s);
            let (forks, fulls) = before[s];
            assert_eq!(m.info_num("stats", "sync_full"), fulls, "shard {s}: a full sync after the relay's capture");
            if s > 0 {
                assert_eq!(m.info_num("stats", "total_forks"), forks, "shard {s}: the master forked although the snapshot came from its replica");
            }
            cluster::wait_shard_caught_up(&c, s, &nodes[s]);
            assert_same(m, &nodes[s]);
        }
        let check = cluster::redis_cli_cluster_check(&c.master(0).addr()).unwrap_or_else(|e| panic!("{}: redis-cli --cluster check:\n{e}", flavor.name()));
        assert!(check.contains("[OK] All 16384 slots covered"), "{check}");
    }
}

/// A Valkey 9.1 cluster (its own RDB 80, its own `CLUSTER` answers): a new node staged into its one
/// shard, with hash-field TTLs (Valkey 9's type 22) among the data, resyncs partially and holds what
/// its master holds. One shard, no writers: the three-shard run above covers those for the others.
#[test]
fn a_new_node_joins_a_valkey91_cluster_by_staging() {
    let flavor = Flavor::Valkey91;
    require_server(flavor);
    let c = Cluster::start(flavor, 1, 0, NodeOpts::default());
    cluster::fill_shard(&c, 0, 300);
    let key = format!("{{{}}}:field-ttl", cluster::shard_tag(&c, 0));
    let mut m = c.master(0).client();
    m.cmd(&["HSET", &key, "short", "1", "long", "2"]).unwrap();
    m.cmd(&["HPEXPIRE", &key, "3600000", "FIELDS", "1", "short"]).unwrap();
    let r = relay(&c.master(0).addr(), &[], &[]);
    wait_relay_generation(&r.addr);
    let st = status_json(&r.addr);
    assert!(st["generations"].as_array().unwrap().iter().any(|g| g["rdb_version"] == 80), "Valkey 9.1 writes RDB 80 for a relay that announces 9.1: {st}");
    let fulls = c.master(0).info_num("stats", "sync_full");
    let node = c.add_empty_node(NodeOpts { supervised: true, meet: true, ..Default::default() });
    let j = join(&r.addr, &node.addr(), &["--master", &c.master(0).addr(), "--restart-timeout-secs", "60"], &[]);
    assert_partial(&j);
    let st = staged(&j);
    assert_eq!(st["master_id"].as_str(), Some(c.master_id(0).as_str()), "{}", j.output);
    assert_eq!(st["node_id"].as_str(), Some(node.node_id().as_str()), "{}", j.output);
    assert_eq!(node.restarts(), 1, "the supervisor started it once");
    assert_eq!(c.master(0).info_num("stats", "sync_full"), fulls, "a full sync for the staged node");
    cluster::wait_shard_caught_up(&c, 0, &node);
    let mut nc = node.client();
    nc.cmd(&["READONLY"]).unwrap(); // a replica answers its master's slots only when asked READONLY
    let ttl = nc.cmd(&["HPEXPIRETIME", &key, "FIELDS", "2", "short", "long"]).unwrap();
    let ttls: Vec<i64> = ttl.as_array().unwrap().iter().filter_map(|f| f.as_int()).collect();
    assert!(ttls.len() == 2 && ttls[0] > 0 && ttls[1] == -1, "the field TTLs on the staged node: {ttl:?}");
    assert_same(c.master(0), &node);
    let check = cluster::redis_cli_cluster_check(&c.master(0).addr()).unwrap_or_else(|e| panic!("redis-cli --cluster check:\n{e}"));
    assert!(check.contains("[OK] All 16384 slots covered"), "{check}");
}

#[test]
fn refusals_leave_the_node_as_it_was() {
    let flavor = Flavor::Redis70;
    let c = Cluster::start(flavor, 1, 0, NodeOpts::default());
    cluster::fill_shard(&c, 0, 50);
    let r = relay(&c.master(0).addr(), &[], &[]);
    let refused = |n: &Node, what: &str| {
        let id = n.node_id();
        let j = join(&r.addr, &n.addr(), &["--master", &c.master(0).addr()], &[]);
        assert_eq!(j.code, Some(1), "{}", j.output);
        assert_eq!(j.report["error_kind"], "precondition", "{}", j.output);
        assert_eq!(j.report["replica"], "untouched", "{}", j.output);
        assert!(j.report["error"].as_str().unwrap_or_default().contains(what), "{what}:\n{}", j.output);
        assert_eq!(n.node_id(), id);
        assert!(!n.dir().join("dump.rdb").exists(), "a file was staged");
        assert!(std::fs::read_dir(n.dir()).unwrap().all(|e| !e.unwrap().file_name().to_string_lossy().starts_with(".fastrepl")), "a temporary file was left");
    };
    let keys = c.add_empty_node(NodeOpts::default());
    keys.client().cmd(&["DEBUG", "POPULATE", "3"]).unwrap();
    refused(&keys, "keys");
    let slots = c.add_empty_node(NodeOpts::default());
    // The slot's owner gives it up first; the new node then drops the owner's claim from its own view
    // and takes the slot. A gossip message the owner sent before its DELSLOTS can still put the claim
    // back ("Slot 16383 is already busy"): the new node tries again until the slot is its.
    c.master(0).client().cmd(&["CLUSTER", "DELSLOTS", "16383"]).unwrap();
    fixtures::wait_until("the new node to take slot 16383", std::time::Duration::from_secs(30), || {
        slots.client().cmd(&["CLUSTER", "DELSLOTS", "16383"]).ok();
        slots.client().cmd(&["CLUSTER", "ADDSLOTS", "16383"]).ok()
    });
    refused(&slots, "serves 1 slot");
    let aof = c.add_empty_node(NodeOpts { extra: vec!["appendonly yes".into()], ..Default::default() });
    refused(&aof, "appendonly yes");
    assert_eq!(aof.client().info("persistence").unwrap().get("aof_enabled"), Some("1"));
}

#[test]
fn a_failed_restart_leaves_the_node_restored() {
    let c = Cluster::start(Flavor::Redis70, 1, 0, NodeOpts::default());
    cluster::fill_shard(&c, 0, 50);
    let r = relay(&c.master(0).addr(), &[], &[]);
    let n = c.add_empty_node(NodeOpts::default());
    let conf_before = std::fs::read_to_string(n.dir().join("nodes.conf")).unwrap();
    let j = join(&r.addr, &n.addr(), &["--master", &c.master(0).addr(), "--restart-command", "exit 7"], &[]);
    assert_eq!(j.code, Some(1), "{}", j.output);
    assert_eq!(j.report["replica"], "down", "{}", j.output);
    assert_eq!(j.report["attempts"].as_array().map(Vec::len), Some(1), "not retried: {}", j.output);
    assert!(j.output.contains("exit status: 7"), "{}", j.output);
    assert!(!n.dir().join("dump.rdb").exists(), "the staged RDB file was left");
    let conf = cluster_config::myself_line(&std::fs::read_to_string(n.dir().join("nodes.conf")).unwrap());
    assert!(conf.contains("myself,master -"), "the config says it is a master again: {conf}\n(before: {conf_before})");
    // Started again by hand, it is the empty master it was, known to the cluster.
    std::process::Command::new("sh").arg("-c").arg(n.restart_command()).status().unwrap();
    fixtures::wait_until("the node to answer", std::time::Duration::from_secs(15), || n.try_client().ok());
    assert_empty_master(&n);
}

#[test]
fn a_staged_start_renews_a_generation_too_old_for_the_backlog() {
    // A master whose backlog (1 MiB) is overrun after the relay's first capture: a node staged from
    // that generation could not resync partially, so `stage` has the relay take a newer one.
    let c = Cluster::start(Flavor::Valkey81, 1, 0, NodeOpts { backlog: "1mb".into(), ..Default::default() });
    cluster::fill_shard(&c, 0, 100);
    let r = relay(&c.master(0).addr(), &[], &[]);
    wait_relay_generation(&r.addr);
    let tag = cluster::shard_tag(&c, 0);
    let mut m = c.master(0).client();
    for i in 0..40 {
        m.cmd(&["SET", &format!("{{{tag}}}:big{i}"), &"b".repeat(64 * 1024)]).unwrap();
    }
    let dir = tempfile::tempdir().unwrap();
    let out = fastrepl()
        .args(["stage", "--relay", &r.addr, "--master", &c.master(0).addr(), "--dir"])
        .arg(dir.path())
        .args(["--cluster-config", "nodes.conf", "--json", "--server-binary"])
        .arg(Flavor::Valkey81.binary())
        .output()
        .unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{text}");
    let report: serde_json::Value = serde_json::from_str(String::from_utf8_lossy(&out.stdout).lines().last().unwrap_or("{}")).unwrap();
    assert!(report["renewals"].as_u64().unwrap_or(0) >= 1, "the old generation was used:\n{text}");
    assert!(report["generation"].as_u64().unwrap_or(0) >= 2, "{text}");
    let st = status_json(&r.addr);
    assert_eq!(st["generations_sealed_by_reason_total"]["stale"], 1, "{st}");
    // A node started there resyncs partially, without being introduced first.
    let partial_before = c.master(0).info_num("stats", "sync_partial_ok");
    let node = Node::start_in(Flavor::Valkey81, dir.path(), &NodeOpts::default());
    fixtures::wait_until("the staged node's link", std::time::Duration::from_secs(30), || (node.client().info("replication").ok()?.get("master_link_status") == Some("up")).then_some(()));
    assert_eq!(c.master(0).info_num("stats", "sync_partial_ok"), partial_before + 1, "{}", node.log());
    cluster::wait_shard_caught_up(&c, 0, &node);
    assert_same(c.master(0), &node);
}

mod cluster_config {
    /// The `myself` line of a cluster config file.
    pub fn myself_line(text: &str) -> String {
        text.lines().find(|l| l.contains("myself")).unwrap_or_default().to_string()
    }
}
