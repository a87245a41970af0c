//! ACL: the relay, the agent (a replica's join and a cluster node's staged join), `stage` and
//! `verify` work with users that have exactly the permissions docs/operations.md lists for each row
//! of its table ("ACL permissions"), and a missing one fails the join at once, as a permission error
//! that names the refused command (on a cluster node past its parking, with the node reset).
//!
//! The servers' default user stays open (the tests' own clients use it); the relay and the agent
//! authenticate as the restricted users below, whose commands are all the servers let them run.

mod common;
use common::*;
use fixtures::cluster::{self, Cluster, NodeOpts};
use std::time::Duration;

const RELAY_PW: &str = "relay-user-pw-3141";
const AGENT_PW: &str = "agent-user-pw-2718";
const LOCAL_PW: &str = "local-user-pw-1618";
const SENTINEL_PW: &str = "sentinel-user-pw-1414";
const STAGE_PW: &str = "stage-user-pw-1732";
const VERIFY_PW: &str = "verify-user-pw-2236";

/// The permissions of docs/operations.md, one line per role (kept identical to the table there).
const RELAY_SOURCE_MASTER: &[&str] = &["+psync", "+replconf", "+ping"];
const RELAY_SOURCE_REPLICA: &[&str] = &["+psync", "+replconf", "+ping", "+info"];
const RELAY_SOURCE_RDB_RAW: &[&str] = &["+config|get", "+config|set"];
const AGENT_ON_MASTER: &[&str] = &["+info", "+psync", "+replconf", "+ping"];
const AGENT_ON_LOCAL: &[&str] = &["+info", "+config|get", "+config|set", "+replicaof", "+flushall"];
const ON_SENTINEL: &[&str] = &["+sentinel|get-master-addr-by-name", "+subscribe", "&+switch-master"];
/// Added to the relay's user on a Valkey source (its version, for `REPLCONF version`).
const RELAY_ON_VALKEY: &[&str] = &["+info"];
/// The agent's local user on a cluster node (staged join).
const AGENT_ON_CLUSTER_NODE: &[&str] = &["+info", "+cluster|nodes", "+cluster|meet", "+cluster|replicate", "+cluster|reset", "+config|get", "+config|set", "+shutdown"];
/// Added to the agent's master user on the shard's master and replicas (staged join).
const AGENT_ON_SHARD: &[&str] = &["+cluster|nodes"];
/// `stage`'s user on the master; for a cluster node, on the node `--master` names and the shard's master.
const STAGE_ON_MASTER: &[&str] = &["+info"];
const STAGE_ON_CLUSTER: &[&str] = &["+info", "+cluster|nodes"];
/// `verify`'s user on both servers: read-only.
const VERIFY_ON_BOTH: &[&str] = &["~*", "+@read", "+info", "+select", "+command|info", "+function|list"];

/// `ACL SETUSER <user> reset on ><password> <rules…>` on `c` (a server or a sentinel).
fn set_user(c: &mut client::Client, user: &str, password: &str, rules: &[&str]) {
    let pw = format!(">{password}");
    let mut args = vec!["ACL", "SETUSER", user, "reset", "on", &pw];
    args.extend_from_slice(rules);
    c.cmd(&args).unwrap_or_else(|e| panic!("ACL SETUSER {user} {rules:?}: {e}"));
}

fn replica_of(master: &Server) -> Server {
    let r = Server::start(Flavor::Redis70, &["--replicaof", "127.0.0.1", &master.port.to_string()]);
    wait_until("the source replica to sync", Duration::from_secs(60), || {
        let i = r.client().info("replication").ok()?;
        (i.get("master_link_status") == Some("up") && i.num("master_sync_in_progress") == Some(0)).then_some(())
    });
    r
}

/// A local server with the agent's user on it.
fn local_server() -> Server {
    let s = Server::start(Flavor::Redis70, &[]);
    set_user(&mut s.client(), "fastrepl-local", LOCAL_PW, AGENT_ON_LOCAL);
    s
}

/// The join's arguments and environment as the agent's users.
const JOIN_ARGS: &[&str] = &["--master-user", "fastrepl-agent", "--replica-user", "fastrepl-local"];
const JOIN_ENV: &[(&str, &str)] = &[("FASTREPL_MASTER_PASSWORD", AGENT_PW), ("FASTREPL_REPLICA_PASSWORD", LOCAL_PW)];

#[test]
fn relay_and_join_need_only_the_documented_permissions() {
    let master = Server::start(Flavor::Redis70, &[]);
    data::fill_every_type(&mut master.client(), 1, true);
    let source = replica_of(&master);
    set_user(&mut master.client(), "fastrepl-agent", AGENT_PW, AGENT_ON_MASTER);

    // --source master: the relay only replicates.
    set_user(&mut master.client(), "fastrepl-relay", RELAY_PW, RELAY_SOURCE_MASTER);
    let relay1 = relay(&master.addr(), &["--master-user", "fastrepl-relay"], &[("FASTREPL_MASTER_PASSWORD", RELAY_PW)]);
    let target = local_server();
    let j = join(&relay1.addr, &target.addr(), JOIN_ARGS, JOIN_ENV);
    assert_partial(&j);
    wait_caught_up(&master, &target);
    assert_identical(&master, &target);
    // verify with its read-only user on both servers.
    for s in [&master, &target] {
        set_user(&mut s.client(), "fastrepl-verify", VERIFY_PW, VERIFY_ON_BOTH);
    }
    let v = fastrepl().args(["verify", "--user", "fastrepl-verify", &master.addr(), &target.addr()]).env("FASTREPL_VERIFY_PASSWORD", VERIFY_PW).output().unwrap();
    assert_eq!(v.status.code(), Some(0), "verify as fastrepl-verify: {}{}", String::from_utf8_lossy(&v.stdout), String::from_utf8_lossy(&v.stderr));
    // stage (a standalone server): the master's INFO replication, nothing more.
    set_user(&mut master.client(), "fastrepl-stage", STAGE_PW, STAGE_ON_MASTER);
    let dir = tempfile::tempdir().unwrap();
    assert_staged(stage(&relay1.addr, &master.addr(), dir.path(), &[]), "stage");
    drop(relay1);

    // --source REPLICA with --source-rdb-raw: INFO on both, CONFIG on the source.
    set_user(&mut master.client(), "fastrepl-relay", RELAY_PW, RELAY_SOURCE_REPLICA);
    let on_source: Vec<&str> = RELAY_SOURCE_REPLICA.iter().chain(RELAY_SOURCE_RDB_RAW).copied().collect();
    set_user(&mut source.client(), "fastrepl-relay", RELAY_PW, &on_source);
    let forks = info_num(&master, "stats", "total_forks");
    let relay2 = relay(&master.addr(), &["--master-user", "fastrepl-relay", "--source", &source.addr(), "--source-rdb-raw"], &[("FASTREPL_MASTER_PASSWORD", RELAY_PW)]);
    let target2 = local_server();
    let j = join(&relay2.addr, &target2.addr(), JOIN_ARGS, JOIN_ENV);
    assert_partial(&j);
    assert_eq!(info_num(&master, "stats", "total_forks"), forks, "the capture came from the source, not the master");
    assert!(relay2.proc.output().contains(&format!("source replica {} answered FULLRESYNC", source.addr())), "{}", relay2.proc.output());
    wait_caught_up(&master, &target2);
    assert_identical(&master, &target2);
    drop(relay2);

    // --source auto: the same user on the master and each of its replicas (the joined ones are
    // candidates too).
    for s in [&source, &target, &target2] {
        set_user(&mut s.client(), "fastrepl-relay", RELAY_PW, RELAY_SOURCE_REPLICA);
    }
    // Without CONFIG on the replicas: their RDB as configured (`--source-rdb auto` would ask them for
    // a raw one, which needs RELAY_SOURCE_RDB_RAW too, and warns without it).
    let relay3 = relay(&master.addr(), &["--master-user", "fastrepl-relay", "--source", "auto", "--source-rdb", "as-configured"], &[("FASTREPL_MASTER_PASSWORD", RELAY_PW)]);
    let target3 = local_server();
    assert_partial(&join(&relay3.addr, &target3.addr(), JOIN_ARGS, JOIN_ENV));
    assert_eq!(info_num(&master, "stats", "total_forks"), forks, "auto chose the master");
    assert!(!relay3.proc.output().contains("NOPERM"), "{}", relay3.proc.output());
}

/// `fastrepl stage --json` as `fastrepl-stage` into `dir`, with the master named; (exit code, report, output).
fn stage(relay: &str, master: &str, dir: &std::path::Path, extra: &[&str]) -> (Option<i32>, serde_json::Value, String) {
    let out = fastrepl()
        .args(["stage", "--relay", relay, "--master", master, "--master-user", "fastrepl-stage", "--json", "--dir"])
        .arg(dir)
        .arg("--server-binary")
        .arg(Flavor::Redis70.binary())
        .args(extra)
        .env("FASTREPL_MASTER_PASSWORD", STAGE_PW)
        .output()
        .unwrap();
    let report = serde_json::from_str(String::from_utf8_lossy(&out.stdout).lines().last().unwrap_or("{}")).unwrap_or_default();
    (out.status.code(), report, format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

/// The stage exited 0 having decided `decision`.
fn assert_staged((code, report, output): (Option<i32>, serde_json::Value, String), decision: &str) {
    assert_eq!(code, Some(0), "{output}");
    assert_eq!(report["start"]["decision"], decision, "{output}");
    assert!(!output.contains("NOPERM"), "{output}");
}

#[test]
fn a_valkey_source_is_asked_its_version_with_the_documented_user() {
    require_server(Flavor::Valkey81);
    let master = Server::start(Flavor::Valkey81, &[]);
    data::fill_small_mixed(&mut master.client(), 500);
    let rules: Vec<&str> = RELAY_SOURCE_MASTER.iter().chain(RELAY_ON_VALKEY).copied().collect();
    set_user(&mut master.client(), "fastrepl-relay", RELAY_PW, &rules);
    set_user(&mut master.client(), "fastrepl-agent", AGENT_PW, AGENT_ON_MASTER);
    let relay = relay(&master.addr(), &["--master-user", "fastrepl-relay"], &[("FASTREPL_MASTER_PASSWORD", RELAY_PW)]);
    let target = Server::start(Flavor::Valkey81, &[]);
    set_user(&mut target.client(), "fastrepl-local", LOCAL_PW, AGENT_ON_LOCAL);
    assert_partial(&join(&relay.addr, &target.addr(), JOIN_ARGS, JOIN_ENV));
    assert!(relay.proc.output().contains("announcing a replica version (REPLCONF version)"), "INFO server was refused:\n{}", relay.proc.output());
}

/// A cluster node's staged join (the node's user, and the agent's master user on the shard's master
/// and replica) and `stage` for a node not running yet (its user on the nodes it asks), each with
/// exactly its documented user; and a node user without `+shutdown`, refused at the staging's last
/// step, leaves a node the undo sees running — asked with INFO, which the user has, not PING, which
/// it has not — and resets (`unstaged`), not one taken for stopped.
#[test]
fn a_cluster_nodes_staged_join_and_stage_need_only_the_documented_permissions() {
    let c = Cluster::start(Flavor::Redis70, 1, 1, NodeOpts::default());
    cluster::fill_shard(&c, 0, 200);
    let agent_on_shard: Vec<&str> = AGENT_ON_MASTER.iter().chain(AGENT_ON_SHARD).copied().collect();
    for n in std::iter::once(c.master(0)).chain(c.replicas(0)) {
        set_user(&mut n.client(), "fastrepl-agent", AGENT_PW, &agent_on_shard);
        set_user(&mut n.client(), "fastrepl-stage", STAGE_PW, STAGE_ON_CLUSTER);
    }
    set_user(&mut c.master(0).client(), "fastrepl-relay", RELAY_PW, RELAY_SOURCE_MASTER);
    let r = relay(&c.master(0).addr(), &["--master-user", "fastrepl-relay"], &[("FASTREPL_MASTER_PASSWORD", RELAY_PW)]);
    // The node's config file holds the agent's user (the join restarts the node: the user must
    // outlive that) and its own link's credentials: a cluster replica authenticates to its master with
    // them, here as the agent's master user.
    let node_conf = |rules: &[&str]| vec![format!("user fastrepl-local on >{LOCAL_PW} {}", rules.join(" ")), "masteruser fastrepl-agent".into(), format!("masterauth {AGENT_PW}")];
    let master = c.master(0).addr();
    let node = c.add_empty_node(NodeOpts { supervised: true, extra: node_conf(AGENT_ON_CLUSTER_NODE), ..Default::default() });
    let j = join(&r.addr, &node.addr(), &[JOIN_ARGS, &["--master", master.as_str()]].concat(), JOIN_ENV);
    assert_partial(&j);
    assert_eq!(j.report["staged"]["restart"], "supervisor", "{}", j.output);
    cluster::wait_shard_caught_up(&c, 0, &node);

    let without: Vec<&str> = AGENT_ON_CLUSTER_NODE.iter().copied().filter(|r| *r != "+shutdown").collect();
    let parked = c.add_empty_node(NodeOpts { extra: node_conf(&without), ..Default::default() });
    let j = join(&r.addr, &parked.addr(), &[JOIN_ARGS, &["--master", master.as_str()]].concat(), JOIN_ENV);
    assert_eq!(j.code, Some(1), "{}", j.output);
    let error = j.report["error"].as_str().unwrap_or_default();
    assert!(error.contains("SHUTDOWN") && error.contains("NOPERM"), "{error}");
    assert_eq!(j.report["error_kind"], "permission", "{}", j.output);
    assert_eq!(j.report["replica"], "unstaged", "a running node taken for stopped:\n{}", j.output);
    let mut pc = parked.client();
    assert_eq!(pc.info("replication").unwrap().get("role"), Some("master"), "still parked as a replica");
    assert_eq!(agent::local::key_count(&mut pc).unwrap(), 0);
    assert_eq!(pc.config_get("masteruser").unwrap().as_deref(), Some("fastrepl-agent"), "its link left parked");
    assert_eq!(pc.config_get("masterauth").unwrap().as_deref(), Some(AGENT_PW), "its link left parked");
    assert!(!parked.dir().join("dump.rdb").exists(), "the staged RDB file was left");

    // stage: a new node's volume from the master given; then, its config a replica's, kept, with
    // the shard's master asked of another node of the cluster (the replica).
    let dir = tempfile::tempdir().unwrap();
    assert_staged(stage(&r.addr, &master, dir.path(), &["--cluster-config", "nodes.conf"]), "stage");
    assert_staged(stage(&r.addr, &c.replicas(0)[0].addr(), dir.path(), &["--cluster-config", "nodes.conf"]), "keep");
}

#[test]
fn sentinel_users_need_only_the_documented_permissions() {
    let master = Server::start(Flavor::Redis70, &[]);
    data::fill_every_type(&mut master.client(), 1, true);
    set_user(&mut master.client(), "fastrepl-agent", AGENT_PW, AGENT_ON_MASTER);
    set_user(&mut master.client(), "fastrepl-relay", RELAY_PW, RELAY_SOURCE_MASTER);
    let sentinel = fixtures::Sentinel::start("grp", &master).unwrap();
    set_user(&mut sentinel.client(), "fastrepl-sentinel", SENTINEL_PW, ON_SENTINEL);
    let auth = [("FASTREPL_MASTER_PASSWORD", RELAY_PW), ("FASTREPL_SENTINEL_PASSWORD", SENTINEL_PW)];
    let addr = format!("127.0.0.1:{}", fixtures::free_port());
    let mut cmd = fastrepl();
    cmd.args(["relay", "--listen", &addr, "--sentinel", &sentinel.addr(), "--master-name", "grp", "--sentinel-user", "fastrepl-sentinel", "--master-user", "fastrepl-relay"]).envs(auth);
    Transport::from_env().apply(&mut cmd);
    let mut proc = Proc::spawn("relay", cmd);
    wait_until("the relay to listen", Duration::from_secs(20), || {
        assert!(proc.running(), "relay exited:\n{}", proc.output());
        std::net::TcpStream::connect(&addr).ok()
    });
    let relay = Relay { proc, addr };
    let target = local_server();
    let sentinels = sentinel.addr();
    let args: Vec<&str> = JOIN_ARGS.iter().copied().chain(["--sentinel", &sentinels, "--master-name", "grp", "--sentinel-user", "fastrepl-sentinel"]).collect();
    let env: Vec<(&str, &str)> = JOIN_ENV.iter().copied().chain([("FASTREPL_SENTINEL_PASSWORD", SENTINEL_PW)]).collect();
    let j = join(&relay.addr, &target.addr(), &args, &env);
    assert_partial(&j);
    assert_eq!(j.report["master"], master.addr());
    // The relay's subscription to +switch-master was not refused either.
    assert!(!relay.proc.output().contains("NOPERM"), "{}", relay.proc.output());

    // Every sentinel refuses a wrong password: a permission error, not retried.
    let env: Vec<(&str, &str)> = JOIN_ENV.iter().copied().chain([("FASTREPL_SENTINEL_PASSWORD", "not-the-password")]).collect();
    let other = local_server();
    let j = join(&relay.addr, &other.addr(), &[&args[..], &["--retries", "5"]].concat(), &env);
    assert_eq!(j.code, Some(1), "{}", j.output);
    assert!(j.report["error"].as_str().unwrap_or_default().contains("WRONGPASS"), "{}", j.output);
    assert_eq!(j.report["error_kind"], "permission", "{}", j.output);
    assert_eq!(j.report["attempts"].as_array().map(Vec::len), Some(1), "{}", j.output);
    assert_untouched(&other);
}

#[test]
fn a_master_user_without_info_fails_the_join_at_once_naming_the_command() {
    let master = Server::start(Flavor::Redis70, &[]);
    data::fill_every_type(&mut master.client(), 1, true);
    set_user(&mut master.client(), "fastrepl-relay", RELAY_PW, RELAY_SOURCE_MASTER);
    // Enough for a replica, not for the agent's checks.
    set_user(&mut master.client(), "fastrepl-agent", AGENT_PW, &["+psync", "+replconf", "+ping"]);
    let relay = relay(&master.addr(), &["--master-user", "fastrepl-relay"], &[("FASTREPL_MASTER_PASSWORD", RELAY_PW)]);
    let target = local_server();
    let j = join(&relay.addr, &target.addr(), &[JOIN_ARGS, &["--retries", "5"]].concat(), JOIN_ENV);
    assert_eq!(j.code, Some(1), "{}", j.output);
    assert_eq!(j.report["attempts"].as_array().map(Vec::len), Some(1), "a refused permission is not retried:\n{}", j.output);
    assert_eq!(j.report["attempts"][0]["error_kind"], "permission", "{}", j.output);
    assert_eq!(j.report["error_kind"], "permission", "{}", j.output);
    assert_eq!(j.report["retryable"], false, "{}", j.output);
    let error = j.report["error"].as_str().unwrap_or_default();
    assert!(error.contains("answered INFO: NOPERM") && error.contains("'info'"), "the refused command is named: {error}");
    assert_eq!(j.report["replica"], "untouched", "{}", j.output);
    assert!(j.output.contains("The replica was not changed"), "{}", j.output);
    assert!(!j.output.contains("reset to an empty"), "{}", j.output);
    assert_untouched(&target);
}

// Failure messages, with the same users: each says what became of the replica (from what happened,
// never a fixed sentence), and `--json` carries it as `replica`.

#[test]
fn keys_without_force_leave_the_replica_untouched_and_say_so() {
    let master = Server::start(Flavor::Redis70, &[]);
    data::fill_every_type(&mut master.client(), 1, true);
    set_user(&mut master.client(), "fastrepl-agent", AGENT_PW, AGENT_ON_MASTER);
    let relay = relay(&master.addr(), &[], &[]);
    let target = local_server();
    target.client().cmd(&["SET", "mine", "1"]).unwrap();
    let j = join(&relay.addr, &target.addr(), JOIN_ARGS, JOIN_ENV);
    assert_eq!(j.code, Some(1), "{}", j.output);
    assert!(j.output.contains("holds 1 keys") && j.output.contains("Re-run with --force"), "{}", j.output);
    assert!(j.output.contains("The replica was not changed"), "{}", j.output);
    assert!(!j.output.contains("reset to an empty"), "it was not reset:\n{}", j.output);
    assert_eq!(j.report["replica"], "untouched");
    assert_eq!(j.report["handed_over"], false);
    assert_eq!(j.report["error_kind"], "precondition");
    assert_eq!(j.report["attempts"].as_array().map(Vec::len), Some(1), "an operator's precondition is not retried");
    assert_eq!(target.client().cmd(&["DBSIZE"]).unwrap().as_int(), Some(1));
    assert_eq!(target.client().info("replication").unwrap().role(), Ok(client::Role::Master));
}

#[test]
fn a_wrong_token_leaves_the_replica_untouched_and_is_not_retried() {
    let master = Server::start(Flavor::Redis70, &[]);
    data::fill_every_type(&mut master.client(), 1, true);
    let relay = relay(&master.addr(), &[], &[]);
    let target = local_server();
    let env: Vec<(&str, &str)> = JOIN_ENV.iter().copied().chain([("FASTREPL_TOKEN", "a-wrong-token-000000000")]).collect();
    let j = join(&relay.addr, &target.addr(), &[JOIN_ARGS, &["--retries", "5"]].concat(), &env);
    assert_eq!(j.code, Some(1), "{}", j.output);
    assert!(j.output.contains("refused our token") && j.output.contains("The replica was not changed"), "{}", j.output);
    assert_eq!(j.report["replica"], "untouched");
    assert_eq!(j.report["error_kind"], "permission");
    assert_eq!(j.report["attempts"].as_array().map(Vec::len), Some(1));
    assert_untouched(&target);
}

#[test]
fn a_failure_after_the_replica_followed_the_agent_resets_it_with_the_local_users_permissions() {
    // A master whose RDB takes seconds to produce: the relay is killed while the replica loads.
    let master = Server::start(Flavor::Redis70, &["--rdb-key-save-delay", "3000"]);
    data::fill_big_values(&mut master.client(), 1500, 8 << 10);
    set_user(&mut master.client(), "fastrepl-agent", AGENT_PW, AGENT_ON_MASTER);
    let mut relay = relay(&master.addr(), &["--block-size", "65536"], &[]);
    let target = local_server();
    let j = start_join(&relay.addr, &target.addr(), &[JOIN_ARGS, &["--retries", "0"]].concat(), JOIN_ENV);
    wait_until("the replica to follow the agent", Duration::from_secs(30), || (target.client().info("replication").ok()?.role() == Ok(client::Role::Replica)).then_some(()));
    relay.proc.kill();
    let j = finish_join(j);
    assert_eq!(j.code, Some(1), "{}", j.output);
    assert!(j.output.contains("it was reset to an empty standalone server"), "{}", j.output);
    assert_eq!(j.report["replica"], "reset", "{}", j.output);
    assert_eq!(j.report["handed_over"], false);
    assert_untouched(&target);
}

#[test]
fn a_relay_source_that_is_not_a_replica_is_reported_as_the_relays_configuration_and_not_retried() {
    let master = Server::start(Flavor::Redis70, &[]);
    data::fill_every_type(&mut master.client(), 1, true);
    let stranger = Server::start(Flavor::Redis70, &[]); // a master of its own
    let relay = relay(&master.addr(), &["--source", &stranger.addr()], &[]);
    let target = local_server();
    let j = join(&relay.addr, &target.addr(), &[JOIN_ARGS, &["--retries", "5"]].concat(), JOIN_ENV);
    assert_eq!(j.code, Some(1), "{}", j.output);
    let error = j.report["error"].as_str().unwrap_or_default();
    assert!(error.contains(&format!("the relay's snapshot source {} is not a replica of the master (role: master)", stranger.addr())), "{error}");
    assert!(!error.contains("from the master failed"), "the master is not to blame: {error}");
    assert_eq!(j.report["error_kind"], "capture");
    assert_eq!(j.report["attempts"].as_array().map(Vec::len), Some(1), "a configuration error is not retried:\n{}", j.output);
    assert_eq!(j.report["replica"], "untouched");
    assert_untouched(&target);
}

#[test]
fn a_local_user_without_replicaof_is_refused_before_the_replica_follows_anyone() {
    let master = Server::start(Flavor::Redis70, &[]);
    data::fill_every_type(&mut master.client(), 1, true);
    set_user(&mut master.client(), "fastrepl-agent", AGENT_PW, AGENT_ON_MASTER);
    let relay = relay(&master.addr(), &[], &[]);
    let target = Server::start(Flavor::Redis70, &[]);
    let without: Vec<&str> = AGENT_ON_LOCAL.iter().copied().filter(|r| *r != "+replicaof").collect();
    set_user(&mut target.client(), "fastrepl-local", LOCAL_PW, &without);
    let j = join(&relay.addr, &target.addr(), &[JOIN_ARGS, &["--retries", "5"]].concat(), JOIN_ENV);
    assert_eq!(j.code, Some(1), "{}", j.output);
    let error = j.report["error"].as_str().unwrap_or_default();
    assert!(error.contains("answered REPLICAOF: NOPERM"), "{error}");
    assert_eq!(j.report["error_kind"], "permission");
    assert_eq!(j.report["attempts"].as_array().map(Vec::len), Some(1));
    // The refused REPLICAOF never took effect: nothing to reset, and nothing said about a reset.
    assert_eq!(j.report["replica"], "untouched", "{}", j.output);
    assert!(j.output.contains("The replica was not changed"), "{}", j.output);
    assert_untouched(&target);
}
