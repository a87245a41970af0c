//! ACL: the relay and the agent work with users that have exactly the permissions
//! docs/operations.md lists for each role ("ACL permissions"), and a missing one fails the join at
//! once, as a permission error that names the refused command.
//!
//! The servers' default user stays open (the tests' own clients use it); the relay and the agent
//! authenticate as the restricted users below, whose commands are all the servers let them run.

mod common;
use common::*;
use std::time::Duration;

const RELAY_PW: &str = "relay-user-pw-3141";
const AGENT_PW: &str = "agent-user-pw-2718";
const LOCAL_PW: &str = "local-user-pw-1618";
const SENTINEL_PW: &str = "sentinel-user-pw-1414";

/// The permissions of docs/operations.md, one line per role (kept identical to the table there).
const RELAY_SOURCE_MASTER: &[&str] = &["+psync", "+replconf", "+ping"];
const RELAY_SOURCE_REPLICA: &[&str] = &["+psync", "+replconf", "+ping", "+info"];
const RELAY_SOURCE_RDB_RAW: &[&str] = &["+config|get", "+config|set"];
const AGENT_ON_MASTER: &[&str] = &["+info", "+psync", "+replconf", "+ping"];
const AGENT_ON_LOCAL: &[&str] = &["+info", "+config|get", "+config|set", "+replicaof", "+flushall"];
const ON_SENTINEL: &[&str] = &["+sentinel|get-master-addr-by-name", "+subscribe", "&+switch-master"];

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
    wait_until("the replica to follow the agent", Duration::from_secs(30), || {
        (target.client().info("replication").ok()?.role() == Ok(client::Role::Replica)).then_some(())
    });
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
