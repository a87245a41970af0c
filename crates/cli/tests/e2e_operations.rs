//! Running fastrepl as operators do: snapshots from a replica (the master forks nothing), capture on
//! demand and idle release, `status` and Prometheus metrics, JSON logs, configuration from the
//! environment.

mod common;
use common::*;
use std::time::Duration;

/// A replica of `master`, caught up (link up, not syncing).
fn replica_of(master: &Server) -> Server {
    let r = Server::start(Flavor::Redis70, &["--replicaof", "127.0.0.1", &master.port.to_string()]);
    wait_until("the source replica to sync", Duration::from_secs(60), || {
        let i = r.client().info("replication").ok()?;
        (i.get("master_link_status") == Some("up") && i.num("master_sync_in_progress") == Some(0)).then_some(())
    });
    r
}

/// Scrape `addr` and index the samples by `name{labels}`.
fn scrape(addr: &str) -> std::collections::HashMap<String, f64> {
    let text = metrics::scrape(addr, Duration::from_secs(10)).unwrap();
    let samples = metrics::parse(&text).unwrap_or_else(|e| panic!("exposition does not parse: {e}\n{text}"));
    samples
        .into_iter()
        .map(|s| {
            let labels: Vec<String> = s.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
            (if labels.is_empty() { s.name } else { format!("{}{{{}}}", s.name, labels.join(",")) }, s.value)
        })
        .collect()
}

#[test]
fn snapshot_from_a_replica_forks_nothing_on_the_master() {
    let master = Server::start(Flavor::Redis70, &[]);
    data::fill_every_type(&mut master.client(), 2, true);
    let source = replica_of(&master);
    let target = Server::start(Flavor::Redis70, &[]);
    let writer = data::Writer::start(master.client(), 1_000_000, Duration::from_secs(120));
    wait_until("the writer to start", Duration::from_secs(10), || (writer.count() > 10).then_some(()));
    let forks = info_num(&master, "stats", "total_forks");
    let source_forks = info_num(&source, "stats", "total_forks");
    let relay = relay(&master.addr(), &["--source", &source.addr(), "--source-rdb-raw"], &[]);
    let j = join(&relay.addr, &target.addr(), &[], &[]);
    writer.stop();
    assert_partial(&j);
    assert_eq!(info_num(&master, "stats", "total_forks"), forks, "the master forked");
    assert_eq!(info_num(&source, "stats", "total_forks"), source_forks + 1, "the source replica forked once");
    wait_caught_up(&master, &target);
    assert_identical(&master, &target);
    // Compression was switched off for the capture and is back on once the RDB is complete.
    assert!(relay.proc.output().contains("switched_off=\"rdbcompression\""), "{}", relay.proc.output());
    wait_until("the source's rdbcompression to be restored", Duration::from_secs(10), || (source.client().config_get("rdbcompression").ok()?.as_deref() == Some("yes")).then_some(()));
}

#[test]
fn auto_source_prefers_a_replica_and_a_stranger_is_refused_clearly() {
    let master = Server::start(Flavor::Redis70, &[]);
    data::fill_small_mixed(&mut master.client(), 2000);
    let source = replica_of(&master);
    let stranger = Server::start(Flavor::Redis70, &[]); // a master of its own: another history
    let target = Server::start(Flavor::Redis70, &[]);

    // A source that does not share the master's replication ID: no capture, and the agent is told why.
    let bad = relay(&master.addr(), &["--source", &stranger.addr()], &[]);
    let j = join(&bad.addr, &target.addr(), &["--retries", "0"], &[]);
    assert_eq!(j.code, Some(1), "{}", j.output);
    assert!(j.output.contains("is not a replica") || j.output.contains("does not follow this master"), "{}", j.output);
    assert_untouched(&target);
    drop(bad);

    let forks = info_num(&master, "stats", "total_forks");
    let relay = relay(&master.addr(), &["--source", "auto"], &[]);
    let j = join(&relay.addr, &target.addr(), &[], &[]);
    assert_partial(&j);
    assert_eq!(info_num(&master, "stats", "total_forks"), forks, "auto chose the master over a healthy replica");
    assert_eq!(status_json(&relay.addr)["source"], source.addr());
    wait_caught_up(&master, &target);
    assert_identical(&master, &target);
}

#[test]
fn on_demand_capture_idle_release_and_metrics() {
    let master = Server::start(Flavor::Redis70, &[]);
    data::fill_small_mixed(&mut master.client(), 3000);
    let forks = info_num(&master, "stats", "total_forks");
    let maddr = format!("127.0.0.1:{}", fixtures::free_port());
    let relay = relay(&master.addr(), &["--capture", "on-demand", "--idle-release-secs", "1", "--metrics", &maddr], &[]);
    wait_until("the metrics endpoint", Duration::from_secs(10), || std::net::TcpStream::connect(&maddr).ok());
    let m = scrape(&maddr);
    assert_eq!(m["fastrepl_relay_captures_total"], 0.0, "on-demand captured before anyone asked");
    assert_eq!(m["fastrepl_relay_generations"], 0.0);
    assert_eq!(info_num(&master, "stats", "total_forks"), forks);

    let target = Server::start(Flavor::Redis70, &[]);
    let j = join(&relay.addr, &target.addr(), &[], &[]);
    assert_partial(&j);
    assert_eq!(info_num(&master, "stats", "total_forks"), forks + 1);
    // The wait for the capture this join brought is its own phase, before the checks end.
    let (wait, connect) = (j.report["phases"]["wait_capture"].as_f64().unwrap(), j.report["phases"]["connect"].as_f64().unwrap());
    assert!(wait > 0.0 && wait <= connect, "wait_capture {wait}, connect {connect}");
    // Once no agent is connected for a second, the generation is let go of.
    wait_until("the idle generation to be released", Duration::from_secs(30), || {
        let m = scrape(&maddr);
        (m["fastrepl_relay_generations_released_idle_total"] == 1.0 && m["fastrepl_relay_generations"] == 0.0).then_some(())
    });
    let m = scrape(&maddr);
    assert_eq!(m["fastrepl_relay_captures_total"], 1.0);
    assert_eq!(m["fastrepl_relay_agents_attached_total"], 1.0);
    assert_eq!(m["fastrepl_relay_agents_attached"], 0.0);
    assert!(m["fastrepl_relay_source_bytes_total"] > 0.0);
    assert!(m["fastrepl_relay_resident_memory_bytes"] > 0.0);
    match Transport::from_env() {
        Transport::Tcp => assert!(m["fastrepl_relay_served_bytes_total{transport=tcp}"] > 0.0, "{m:?}"),
        Transport::Shm => assert!(m["fastrepl_relay_attaches_total{transport=shm}"] >= 1.0, "{m:?}"),
        _ => assert!(m["fastrepl_relay_attaches_total{transport=ucx}"] >= 1.0, "{m:?}"),
    }
    // A bad token is counted as an auth error, and the status and the metrics agree.
    let bad = fastrepl().args(["status", "--relay", &relay.addr]).env("FASTREPL_TOKEN", "not-the-token-0000000").output().unwrap();
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("authenticate to the relay"), "{}", String::from_utf8_lossy(&bad.stderr));
    wait_until("the auth error to be counted", Duration::from_secs(10), || (scrape(&maddr)["fastrepl_relay_errors_total{kind=auth}"] == 1.0).then_some(()));
    let st = status_json(&relay.addr);
    assert_eq!(st["generations_released_idle_total"], 1);
    assert_eq!(st["errors_total"]["auth"], 1);
    assert_eq!(st["capture_policy"], "on-demand");

    // The next agent brings a new capture.
    let target2 = Server::start(Flavor::Redis70, &[]);
    assert_partial(&join(&relay.addr, &target2.addr(), &[], &[]));
    assert_eq!(scrape(&maddr)["fastrepl_relay_captures_total"], 2.0);
    assert_identical(&master, &target2);
}

#[test]
fn a_long_join_serves_its_phase_and_progress() {
    let master = Server::start(Flavor::Redis70, &[]);
    data::fill_small_mixed(&mut master.client(), 3000);
    // A replica that loads slowly (µs per key) keeps the join in "loading" long enough to scrape.
    let target = Server::start(Flavor::Redis70, &["--key-load-delay", "1000"]);
    let relay = relay(&master.addr(), &[], &[]);
    let (p, text) = join_scraped_while_loading(&relay.addr, &target);
    let m = metrics::parse(&text).unwrap();
    assert_eq!(m.iter().filter(|s| s.name == "fastrepl_join_phase" && s.value == 1.0).count(), 1, "one phase at a time");
    assert!(m.iter().any(|s| s.name == "fastrepl_join_phase" && s.labels[0].1 == "waiting for capture"), "no phase for the wait for a capture");
    let sent = m.iter().find(|s| s.name == "fastrepl_join_rdb_sent_bytes_total").unwrap().value;
    let len = m.iter().find(|s| s.name == "fastrepl_join_rdb_length_bytes").unwrap().value;
    assert!(sent > 0.0 && sent == len, "loading starts after the whole snapshot was sent: {sent} of {len}");
    assert_partial(&finish_join(p));
}

#[test]
fn json_logs_and_configuration_from_the_environment() {
    let master = Server::start(Flavor::Redis70, &[]);
    let addr = format!("127.0.0.1:{}", fixtures::free_port());
    // Every flag from FASTREPL_*: the relay gets no arguments but its subcommand.
    let mut cmd = fastrepl();
    cmd.arg("relay").envs([
        ("FASTREPL_MASTER", master.addr().as_str()),
        ("FASTREPL_LISTEN", addr.as_str()),
        ("FASTREPL_CAPTURE", "on-demand"),
        ("FASTREPL_LOG_FORMAT", "json"),
        ("FASTREPL_CONNECTIONS_MAX", "17"),
    ]);
    Transport::from_env().apply(&mut cmd);
    let mut proc = Proc::spawn("relay", cmd);
    wait_until("the relay to listen", Duration::from_secs(20), || {
        assert!(proc.running(), "relay exited:\n{}", proc.output());
        std::net::TcpStream::connect(&addr).ok()
    });
    let st = status_json(&addr);
    assert_eq!((st["capture_policy"].as_str(), st["connections_max"].as_u64(), st["master"].as_str()), (Some("on-demand"), Some(17), Some(master.addr().as_str())));
    let target = Server::start(Flavor::Redis70, &[]);
    assert_partial(&join(&addr, &target.addr(), &[], &[]));
    proc.kill();
    let out = proc.output();
    let lines: Vec<&str> = out.lines().filter(|l| !l.trim().is_empty()).collect();
    assert!(lines.len() >= 3, "{out}");
    for l in &lines {
        let v: serde_json::Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("not a JSON log line ({e}): {l}"));
        assert!(v["timestamp"].is_string() && v["level"].is_string() && v["message"].is_string(), "{l}");
    }
    assert!(lines.iter().any(|l| l.contains("\"message\":\"snapshot complete\"") && l.contains("\"generation\":1")), "{out}");
    // Lists are JSON lists, as in --json and status.
    let started: serde_json::Value =
        lines.iter().map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()).find(|v| v["message"] == "relay started").unwrap_or_else(|| panic!("no start line:\n{out}"));
    let transports = started["transports"].as_array().unwrap_or_else(|| panic!("transports is not a list: {started}"));
    assert!(transports.iter().any(|t| t == "tcp"), "{started}");
}

/// Wait until `sentinel` knows `replica` as a healthy replica of group `name` (it learns replicas
/// from the master's INFO): only then can it promote it.
fn sentinel_knows(sentinel: &fixtures::Sentinel, name: &str, replica: &Server) {
    wait_until("the sentinel to know the replica", Duration::from_secs(60), || {
        let f = sentinel.client().raw(&["SENTINEL", "replicas", name]).ok()?;
        let known = f.as_array()?.iter().any(|r| {
            let kv: Vec<String> = r.as_array().map(|a| a.iter().filter_map(|x| x.as_text()).collect()).unwrap_or_default();
            let get = |k: &str| kv.chunks(2).find(|c| c[0] == k).map(|c| c[1].clone());
            get("port") == Some(replica.port.to_string()) && get("flags").as_deref() == Some("slave") && get("master-link-status").as_deref() == Some("ok")
        });
        known.then_some(())
    });
}

#[test]
fn sentinel_failover_during_a_join() {
    let master = Server::start(Flavor::Redis70, &[]);
    data::fill_small_mixed(&mut master.client(), 3000);
    let standby = replica_of(&master);
    // Sentinels with a password of their own (FASTREPL_SENTINEL_PASSWORD below).
    let sentinel = fixtures::Sentinel::start_with("grp", &master, Some("sentinel-secret")).unwrap();
    sentinel_knows(&sentinel, "grp", &standby);
    // The first sentinel listed is down: resolution moves on to the next.
    let sentinels = format!("127.0.0.1:{},{}", fixtures::free_port(), sentinel.addr());
    let relay = spawn_relay_sentinel(&sentinels);
    assert_eq!(status_json(&relay.addr)["master"], master.addr());
    // Without the sentinels' password no sentinel answers, and the join says so before touching anything.
    let early = Server::start(Flavor::Redis70, &[]);
    let j = join(&relay.addr, &early.addr(), &["--sentinel", &sentinels, "--master-name", "grp", "--retries", "0"], &[]);
    assert_eq!(j.code, Some(1), "{}", j.output);
    assert!(j.output.contains("no sentinel named the master") && j.output.contains("AUTH"), "{}", j.output);
    assert_untouched(&early);

    // A replica that loads slowly: the failover strikes while it loads the snapshot.
    let target = Server::start(Flavor::Redis70, &["--key-load-delay", "1500"]);
    let mut p = start_join(&relay.addr, &target.addr(), &["--sentinel", &sentinels, "--master-name", "grp"], &[("FASTREPL_SENTINEL_PASSWORD", "sentinel-secret")]);
    wait_until("the join to load", Duration::from_secs(60), || {
        assert!(p.running(), "join exited early:\n{}", p.output());
        p.output().contains("phase: loading").then_some(())
    });
    sentinel.client().cmd(&["SENTINEL", "FAILOVER", "grp"]).unwrap();
    let j = finish_join(p);
    assert_partial(&j);
    assert!(j.output.contains("Sentinel names a new master"), "{}", j.output);
    assert_eq!(j.report["master"], standby.addr(), "handed to the master Sentinel named at handoff time");
    let r = target.client().info("replication").unwrap();
    assert_eq!(r.get("master_port"), Some(standby.port.to_string().as_str()));
    wait_caught_up(&standby, &target);
    assert_identical(&standby, &target);

    // The relay followed the switch: its generation of the old master sealed, the next join captures
    // from the new master.
    wait_until("the relay to follow the switch", Duration::from_secs(30), || (status_json(&relay.addr)["master"] == standby.addr()).then_some(()));
    let target2 = Server::start(Flavor::Redis70, &[]);
    let j2 = join(&relay.addr, &target2.addr(), &["--sentinel", &sentinels, "--master-name", "grp"], &[("FASTREPL_SENTINEL_PASSWORD", "sentinel-secret")]);
    assert_partial(&j2);
    let st = status_json(&relay.addr);
    assert_eq!(st["captures_total"], 2, "{st}");
    assert!(st["generations_sealed_total"].as_u64().unwrap() >= 1, "{st}");
    assert_eq!(j2.report["master"], standby.addr());
    assert_identical(&standby, &target2);
}

fn spawn_relay_sentinel(sentinels: &str) -> Relay {
    let addr = format!("127.0.0.1:{}", fixtures::free_port());
    let mut cmd = fastrepl();
    cmd.args(["relay", "--sentinel", sentinels, "--master-name", "grp", "--listen", &addr]).env("FASTREPL_SENTINEL_PASSWORD", "sentinel-secret");
    Transport::from_env().apply(&mut cmd);
    let mut proc = Proc::spawn("relay", cmd);
    wait_until("the relay to listen", Duration::from_secs(20), || {
        assert!(proc.running(), "relay exited:\n{}", proc.output());
        std::net::TcpStream::connect(&addr).ok()
    });
    Relay { proc, addr }
}

#[test]
fn tls_masters_and_a_replica_with_tls_replication() {
    let certs = Certs::generate();
    // The master speaks TLS only; the replica-to-be replicates over TLS (and keeps a plain port on
    // loopback for the agent's commands).
    let tls_port = fixtures::free_port().to_string();
    let mut margs: Vec<String> = certs.server_args();
    // Client certificates optional on the master, so that a join without one gets as far as the replica.
    margs.extend(["--tls-port".into(), tls_port.clone(), "--tls-replication".into(), "yes".into(), "--tls-auth-clients".into(), "optional".into()]);
    let master = Server::start(Flavor::Redis70, &margs.iter().map(String::as_str).collect::<Vec<_>>());
    data::fill_every_type(&mut master.client(), 1, true);
    let mut rargs = certs.server_args();
    let target_tls = fixtures::free_port().to_string();
    rargs.extend(["--tls-replication".into(), "yes".into(), "--tls-port".into(), target_tls.clone()]);
    let target = Server::start(Flavor::Redis70, &rargs.iter().map(String::as_str).collect::<Vec<_>>());
    let master_tls = format!("127.0.0.1:{tls_port}");
    let flags = certs.flags();
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();

    // Without --tls the relay cannot capture, and says why.
    let plain = relay(&master_tls, &[], &[]);
    let j = join(&plain.addr, &target.addr(), &["--retries", "0"], &[]);
    assert_eq!(j.code, Some(1), "{}", j.output);
    assert_untouched(&target);
    drop(plain);

    // Without certificates the join refuses a tls-replication replica before touching it.
    let relay = relay(&master_tls, &flags, &[]);
    let j = join(&relay.addr, &target.addr(), &["--retries", "0", "--tls", "--cacert", &certs.path("ca.crt")], &[]);
    assert_eq!(j.code, Some(1), "{}", j.output);
    assert!(j.output.contains("tls-replication yes"), "{}", j.output);
    assert_untouched(&target);

    let j = join(&relay.addr, &target.addr(), &flags, &[]);
    assert_partial(&j);
    let r = target.client().info("replication").unwrap();
    assert_eq!((r.get("master_port"), r.get("master_link_status")), (Some(tls_port.as_str()), Some("up")));
    // verify reaches both over TLS too.
    let target_tls = format!("127.0.0.1:{target_tls}");
    let out = fastrepl().args(["verify", &master_tls, &target_tls]).args(&flags).output().unwrap();
    assert!(out.status.success(), "{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    // A local server reached at its tls-port: the agent's own commands go over TLS too.
    let mut r2 = certs.server_args();
    let r2_tls = fixtures::free_port().to_string();
    r2.extend(["--tls-replication".into(), "yes".into(), "--tls-port".into(), r2_tls.clone()]);
    let target2 = Server::start(Flavor::Redis70, &r2.iter().map(String::as_str).collect::<Vec<_>>());
    let r2_tls = format!("127.0.0.1:{r2_tls}");
    let plain = join(&relay.addr, &r2_tls, &["--retries", "0"], &[]);
    assert_eq!(plain.code, Some(1), "a plain client cannot talk to a tls-port: {}", plain.output);
    let mut with = flags.clone();
    with.push("--replica-tls");
    assert_partial(&join(&relay.addr, &r2_tls, &with, &[]));
    assert_eq!(target2.client().info("replication").unwrap().get("master_link_status"), Some("up"));
    // A wrong CA is refused as a certificate problem.
    let other = Certs::generate();
    let out = fastrepl().args(["verify", &master_tls, &target_tls, "--tls", "--cacert", &other.path("ca.crt")]).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("TLS"), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn token_rotation_without_a_restart() {
    let master = Server::start(Flavor::Redis70, &[]);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("token");
    let (old, new) = ("old-token-0123456789abcdef", "new-token-0123456789abcdef");
    std::fs::write(&file, format!("{old}\n")).unwrap();
    let file_s = file.display().to_string();
    let relay = relay(&master.addr(), &["--token-file", &file_s], &[("FASTREPL_TOKEN", "")]);
    let status_with = |token: &str| fastrepl().args(["status", "--relay", &relay.addr]).env("FASTREPL_TOKEN", token).output().unwrap().status.success();
    let hup = || assert!(std::process::Command::new("kill").args(["-HUP", &relay.proc.pid().to_string()]).status().unwrap().success());
    assert!(status_with(old) && !status_with(new));
    // 1. The new token joins the old one: both are accepted.
    std::fs::write(&file, format!("{old}\n{new}\n")).unwrap();
    hup();
    wait_until("the relay to accept the new token", Duration::from_secs(10), || status_with(new).then_some(()));
    assert!(status_with(old), "the old token must stay valid while agents move over");
    // 2. Agents moved: the old one goes. A join with the new token works throughout.
    let target = Server::start(Flavor::Redis70, &[]);
    assert_partial(&join(&relay.addr, &target.addr(), &[], &[("FASTREPL_TOKEN", new)]));
    std::fs::write(&file, format!("{new}\n")).unwrap();
    hup();
    wait_until("the relay to refuse the old token", Duration::from_secs(10), || (!status_with(old)).then_some(()));
    assert!(status_with(new));
    // A bad file keeps the tokens in force.
    std::fs::write(&file, "short\n").unwrap();
    hup();
    wait_until("the relay to report the bad file", Duration::from_secs(10), || relay.proc.output().contains("tokens not reloaded").then_some(()));
    assert!(status_with(new));
    assert!(!relay.proc.output().contains(new) && !relay.proc.output().contains(old), "a token in the log");
}

/// Every file in contrib/systemd: `*.service` units, `*.service.d/*.conf` drop-ins (path relative to
/// contrib/systemd), and `<command>.env.example` environment files.
fn shipped_systemd_files() -> (std::path::PathBuf, Vec<String>) {
    let contrib = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../contrib/systemd");
    let mut files = Vec::new();
    for e in std::fs::read_dir(&contrib).unwrap() {
        let e = e.unwrap();
        let name = e.file_name().to_string_lossy().into_owned();
        if e.file_type().unwrap().is_dir() {
            assert!(name.ends_with(".service.d"), "contrib/systemd/{name}: not a drop-in directory");
            files.extend(std::fs::read_dir(e.path()).unwrap().map(|d| format!("{name}/{}", d.unwrap().file_name().to_string_lossy())));
        } else {
            files.push(name);
        }
    }
    files.sort();
    for f in &files {
        assert!(f.ends_with(".service") || f.ends_with(".env.example") || (f.contains(".service.d/") && f.ends_with(".conf")), "contrib/systemd/{f}: not a unit, drop-in or environment example");
    }
    (contrib, files)
}

/// The `key=value` settings of a unit file or drop-in, in order (comments and section headers left out).
fn unit_settings(text: &str) -> Vec<(String, String)> {
    text.lines().filter(|l| !l.starts_with('#') && !l.starts_with('[')).filter_map(|l| l.split_once('=')).map(|(k, v)| (k.trim().to_string(), v.trim().to_string())).collect()
}

fn unit_setting(text: &str, key: &str) -> Option<String> {
    unit_settings(text).into_iter().filter(|(k, _)| k == key).map(|(_, v)| v).next_back()
}

/// The settings an environment example sets (its uncommented `FASTREPL_` lines).
fn env_example(text: &str) -> Vec<(String, String)> {
    text.lines().filter(|l| l.starts_with("FASTREPL_")).filter_map(|l| l.split_once('=')).map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

fn help_of(cmd: &str) -> String {
    let out = fastrepl().args([cmd, "--help"]).output().unwrap();
    assert!(out.status.success(), "fastrepl {cmd} --help: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Debian's `redis-server@.service` (the unit the stage drop-in extends), when installed.
const DEBIAN_SERVER_UNIT: &str = "/lib/systemd/system/redis-server@.service";

/// The shipped units and drop-ins pass `systemd-analyze verify` (where systemd is installed); every
/// command line they run is a `fastrepl` subcommand with flags it has, reading the environment file
/// whose example is for that subcommand; every setting the examples name is a real flag of it; and a
/// file written as the join unit's user with its `UMask` is readable by the server's user, not others.
#[test]
fn service_units_and_their_environment_files() {
    let (contrib, files) = shipped_systemd_files();
    let read = |f: &str| std::fs::read_to_string(contrib.join(f)).unwrap();
    for example in files.iter().filter(|f| f.ends_with(".env.example")) {
        let cmd = example.trim_end_matches(".env.example");
        let help = help_of(cmd);
        let text = read(example);
        let names: Vec<&str> = text.lines().map(|l| l.trim_start_matches('#')).filter_map(|l| l.split_once('=')).map(|(k, _)| k).filter(|k| k.starts_with("FASTREPL_")).collect();
        assert!(names.len() >= 8, "{example}: {names:?}");
        for n in names {
            assert!(help.contains(&format!("[env: {n}=")), "{example} names {n}, which `fastrepl {cmd}` does not read");
        }
    }
    assert!(files.iter().any(|f| f == "stage.env.example"), "{files:?}");
    // The command lines: `fastrepl <sub> [--flag …]`, each flag one the subcommand has, and the
    // environment file the unit reads is the one its example is for.
    let units: Vec<&String> = files.iter().filter(|f| !f.ends_with(".env.example")).collect();
    let mut lines = 0;
    for unit in &units {
        let text = read(unit);
        let env_file = unit_setting(&text, "EnvironmentFile").unwrap_or_else(|| panic!("{unit}: no EnvironmentFile"));
        let example = std::path::Path::new(&env_file).file_name().unwrap().to_string_lossy().replace("-%i", "") + ".example";
        for (key, line) in unit_settings(&text).into_iter().filter(|(k, v)| k.starts_with("ExecStart") && v.contains("fastrepl")) {
            lines += 1;
            let words: Vec<&str> = line.split_whitespace().collect();
            assert_eq!(words[0], "/usr/local/bin/fastrepl", "{unit} {key}: {line}");
            let sub = words[1];
            assert_eq!(example, format!("{sub}.env.example"), "{unit} runs `fastrepl {sub}` with {env_file}");
            assert!(files.contains(&example), "{unit}: {example} is not shipped");
            let help = help_of(sub);
            for flag in words[2..].iter().filter(|w| w.starts_with("--")) {
                assert!(help.contains(&format!("{flag} ")), "{unit} {key} gives {flag}, which `fastrepl {sub}` does not have");
            }
        }
    }
    assert!(lines >= 3, "relay, join and stage lines: {lines}");
    // Both files sourced in one shell must not change each other's meaning: no setting that both
    // commands read means something else to each (the relay's listen address is not the join's).
    let (relay_help, join_help) = (help_of("relay"), help_of("join"));
    for n in ["FASTREPL_LISTEN", "FASTREPL_METRICS"] {
        assert!(relay_help.contains(&format!("[env: {n}=")) && !join_help.contains(&format!("[env: {n}=")), "{n} is read by both relay and join");
    }
    join_unit_files_are_readable_by_the_server(&read("fastrepl-join@.service"));
    let Ok(analyze) = which("systemd-analyze") else {
        // The halves above ran; the units' own check did not: counted as skipped.
        fixtures::skip("systemd-analyze not installed: units not verified here");
        return;
    };
    // Each unit under an instance name; each drop-in beside the unit it extends (Debian's
    // redis-server@.service when installed, else a stand-in with the same name).
    let dir = tempfile::tempdir().unwrap();
    let bin = env!("CARGO_BIN_EXE_fastrepl");
    let mut verify: Vec<String> = Vec::new();
    for unit in &units {
        let text = read(unit).replace("/usr/local/bin/fastrepl", bin);
        let (base, dropin) = match unit.split_once(".service.d/") {
            Some((base, conf)) => (format!("{base}.service"), Some(conf)),
            None => (unit.to_string(), None),
        };
        let instance = base.replace("@.service", "@6380.service");
        if let Some(conf) = dropin {
            std::fs::create_dir_all(dir.path().join(format!("{base}.d"))).unwrap();
            std::fs::write(dir.path().join(format!("{base}.d/{conf}")), text).unwrap();
            let server = std::fs::read_to_string(DEBIAN_SERVER_UNIT).unwrap_or_else(|_| {
                fixtures::skip(&format!("{DEBIAN_SERVER_UNIT} not installed: {unit} verified on a stand-in unit"));
                "[Service]\nExecStart=/bin/true\n".into()
            });
            if !dir.path().join(&instance).exists() {
                std::fs::write(dir.path().join(&instance), server).unwrap();
            }
        } else {
            std::fs::write(dir.path().join(&instance), text).unwrap();
        }
        if !verify.contains(&instance) {
            verify.push(instance);
        }
    }
    let out = std::process::Command::new(analyze).arg("verify").args(&verify).current_dir(dir.path()).output().unwrap();
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && said.trim().is_empty(), "systemd-analyze verify {verify:?}: {said}");
}

/// A user's uid and primary gid, when the user exists here.
fn user_ids(name: &str) -> Option<(u32, u32)> {
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    let f: Vec<&str> = passwd.lines().map(|l| l.split(':').collect::<Vec<_>>()).find(|f| f.first() == Some(&name))?;
    Some((f.get(2)?.parse().ok()?, f.get(3)?.parse().ok()?))
}

/// `argv` run as `user` (its uid and primary gid, no other groups) with `umask`, as systemd's
/// `User=`/`UMask=` would run it.
fn as_user(user: &str, umask: &str, argv: &[&str]) -> std::process::Command {
    let mut c = std::process::Command::new("setpriv");
    c.args(["--reuid", user, "--regid", user, "--clear-groups", "--", "sh", "-c", &format!("umask {umask} && exec \"$@\""), "sh"]).args(argv);
    c
}

/// The join unit's `User=` and `UMask=` write a file the server's user (Debian's unit: redis) reads,
/// into a data directory as the distribution makes it (0750, the server's), and others cannot read.
fn join_unit_files_are_readable_by_the_server(unit: &str) {
    let user = unit_setting(unit, "User").expect("User=");
    let umask = unit_setting(unit, "UMask").expect("UMask=");
    let server_user = std::fs::read_to_string(DEBIAN_SERVER_UNIT).ok().and_then(|u| unit_setting(&u, "User")).unwrap_or_else(|| "redis".into());
    let (Some((uid, gid)), Some(_), Ok(_)) = (user_ids(&server_user), user_ids(&user), which("setpriv")) else {
        fixtures::skip(&format!("no {server_user} or {user} user, or no setpriv: the join unit's UMask not tried"));
        return;
    };
    let top = tempfile::tempdir().unwrap();
    let data = top.path().join("data");
    std::fs::create_dir(&data).unwrap();
    std::os::unix::fs::chown(&data, Some(uid), Some(gid)).unwrap();
    std::fs::set_permissions(top.path(), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&data, std::os::unix::fs::PermissionsExt::from_mode(0o750)).unwrap();
    let file = data.join("dump.rdb");
    let f = file.to_str().unwrap();
    // The agent creates its file with mode 0644, the shell's redirection with 0666 (both then the
    // umask): the test's file is at least as open as the agent's.
    let made = as_user(&user, &umask, &["sh", "-c", &format!("echo REDIS0011 > {f}")]).output().unwrap();
    assert!(made.status.success(), "{user} with UMask={umask} cannot write into a 0750 {server_user} data directory: {}", String::from_utf8_lossy(&made.stderr));
    let read = as_user(&server_user, "0077", &["cat", f]).output().unwrap();
    assert!(read.status.success(), "{server_user} cannot read a file the join wrote with UMask={umask}: {}", String::from_utf8_lossy(&read.stderr));
    let mode = std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&file).unwrap().permissions());
    assert_eq!(mode & 0o007, 0, "others may read the server's data: mode {mode:o}");
}

/// The stage drop-in's own command line, with stage.env.example's settings (the relay, the master,
/// the directory and the server config pointed at this test's), run as the server's unit runs it
/// (Debian's redis-server@.service: its user and UMask; the token as a credential in `%d`) into a
/// data directory as the distribution makes it: then redis-server, as that user, loads the file and
/// resyncs partially. systemd's own sandboxing (ProtectSystem, PrivateUsers, SystemCallFilter) is
/// not exercised unless systemd runs here.
#[test]
fn the_stage_drop_in_prepares_the_server_as_its_unit_runs_it() {
    if std::fs::read_to_string("/proc/1/comm").map(|c| c.trim() != "systemd").unwrap_or(true) {
        fixtures::skip("systemd is not PID 1 here: the units are not run by systemd; the drop-in's command runs as its unit's user and UMask instead");
    }
    let Ok(server_unit) = std::fs::read_to_string(DEBIAN_SERVER_UNIT) else {
        fixtures::skip(&format!("{DEBIAN_SERVER_UNIT} not installed: the stage drop-in not run"));
        return;
    };
    let user = unit_setting(&server_unit, "User").expect("User=");
    let umask = unit_setting(&server_unit, "UMask").expect("UMask=");
    let (Some((uid, gid)), Ok(_)) = (user_ids(&user), which("setpriv")) else {
        fixtures::skip(&format!("no {user} user or no setpriv: the stage drop-in not run"));
        return;
    };
    let (contrib, _) = shipped_systemd_files();
    let dropin = std::fs::read_to_string(contrib.join("redis-server@.service.d/fastrepl-stage.conf")).unwrap();
    let line = unit_setting(&dropin, "ExecStartPre").expect("ExecStartPre=");

    let master = Server::start(Flavor::Redis70, &[]);
    data::fill_small_mixed(&mut master.client(), 2000);
    let relay = relay(&master.addr(), &[], &[]);
    // The unit's files: a credentials directory ($CREDENTIALS_DIRECTORY, `%d`) holding the token,
    // readable by the unit's user only; a data directory 0750 user:group; the server's config.
    let top = tempfile::tempdir().unwrap();
    std::fs::set_permissions(top.path(), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let (creds, data) = (top.path().join("credentials"), top.path().join("data"));
    for (d, mode) in [(&creds, 0o700), (&data, 0o750)] {
        std::fs::create_dir(d).unwrap();
        std::os::unix::fs::chown(d, Some(uid), Some(gid)).unwrap();
        std::fs::set_permissions(d, std::os::unix::fs::PermissionsExt::from_mode(mode)).unwrap();
    }
    std::fs::write(creds.join("fastrepl-token"), TOKEN).unwrap();
    std::os::unix::fs::chown(creds.join("fastrepl-token"), Some(uid), Some(gid)).unwrap();
    let port = fixtures::free_port();
    let example = env_example(&std::fs::read_to_string(contrib.join("stage.env.example")).unwrap());
    let dbfilename = example.iter().find(|(k, _)| k == "FASTREPL_DBFILENAME").map(|(_, v)| v.clone()).expect("FASTREPL_DBFILENAME");
    let conf = top.path().join("redis-6380.conf");
    let conf_text = format!(
        "port {port}\nbind 127.0.0.1\ndir {}\ndbfilename {dbfilename}\nreplicaof 127.0.0.1 {}\nsave \"\"\nappendonly no\nlogfile {}\n",
        data.display(),
        master.port,
        data.join("server.log").display()
    );
    std::fs::write(&conf, conf_text).unwrap();
    // Host names, as the example has them: `localhost` for this test's relay and master.
    let mut env: Vec<(String, String)> = Vec::new();
    for (k, v) in example {
        let v = match k.as_str() {
            "FASTREPL_RELAY" => format!("localhost:{}", relay.addr.rsplit_once(':').unwrap().1),
            "FASTREPL_MASTER" => format!("localhost:{}", master.port),
            "FASTREPL_DIR" => data.display().to_string(),
            "FASTREPL_SERVER_CONFIG" => conf.display().to_string(),
            "FASTREPL_SERVER_BINARY" => Flavor::Redis70.binary().display().to_string(),
            _ => v,
        };
        env.push((k, v));
    }
    // The binary where the unit's user can run it: the build's own path may sit under a directory
    // only its owner can enter (a clone in `mktemp -d`, mode 0700).
    let bin = top.path().join("fastrepl");
    std::fs::copy(env!("CARGO_BIN_EXE_fastrepl"), &bin).unwrap();
    std::fs::set_permissions(&bin, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let argv: Vec<String> = line
        .split_whitespace()
        .map(|w| w.replace("/usr/local/bin/fastrepl", bin.to_str().unwrap()).replace("%d", creds.to_str().unwrap()).replace("%i", "6380"))
        .chain(["--json".to_string()])
        .collect();
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    let mut cmd = as_user(&user, &umask, &argv);
    cmd.env_clear().env("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin").envs(env);
    let out = cmd.output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{argv:?}:\n{text}");
    let report: serde_json::Value = serde_json::from_str(String::from_utf8_lossy(&out.stdout).lines().last().unwrap_or("{}")).unwrap_or_default();
    assert_eq!(report["start"]["decision"], "stage", "{text}");
    let rdb = std::fs::metadata(data.join(&dbfilename)).unwrap();
    assert_eq!((std::os::unix::fs::MetadataExt::uid(&rdb), std::os::unix::fs::MetadataExt::gid(&rdb)), (uid, gid), "the staged file is not the server's own");
    // The server as its unit runs it: loads the staged file and continues the master's history.
    let (partial, full) = (info_num(&master, "stats", "sync_partial_ok"), info_num(&master, "stats", "sync_full"));
    let server_bin = Flavor::Redis70.binary();
    let mut server = Proc::spawn("redis-server", as_user(&user, &umask, &[server_bin.to_str().unwrap(), conf.to_str().unwrap()]));
    wait_until("the staged server's link to the master", Duration::from_secs(30), || {
        assert!(server.running(), "redis-server exited:\n{}", std::fs::read_to_string(data.join("server.log")).unwrap_or_default());
        let mut c = client::Client::connect(&format!("127.0.0.1:{port}"), None, Duration::from_secs(5)).ok()?;
        (c.info("replication").ok()?.get("master_link_status") == Some("up")).then_some(())
    });
    assert_eq!(info_num(&master, "stats", "sync_partial_ok"), partial + 1, "{}", std::fs::read_to_string(data.join("server.log")).unwrap_or_default());
    assert_eq!(info_num(&master, "stats", "sync_full"), full, "the staged server took a full sync");
    server.kill();
}

fn which(name: &str) -> Result<std::path::PathBuf, ()> {
    if fixtures::skip::unavailable(name) {
        return Err(());
    }
    std::env::var_os("PATH").and_then(|p| std::env::split_paths(&p).map(|d| d.join(name)).find(|f| f.is_file())).ok_or(())
}

#[test]
fn agents_reach_a_relay_over_tls() {
    let certs = Certs::generate();
    let master = Server::start(Flavor::Redis70, &[]);
    data::fill_every_type(&mut master.client(), 2, true);
    let relay = relay(&master.addr(), &["--agents-tls-cert", &certs.path("node.crt"), "--agents-tls-key", &certs.path("node.key")], &[]);
    let ca = certs.path("ca.crt");
    // Plain clients get nothing (the relay waits for a TLS handshake) and are told why.
    let plain = fastrepl().args(["status", "--relay", &relay.addr]).output().unwrap();
    assert!(!plain.status.success());
    assert!(String::from_utf8_lossy(&plain.stderr).contains("--relay-cacert"), "{}", String::from_utf8_lossy(&plain.stderr));
    // A relay certificate the agent's CA did not sign is refused.
    let other = Certs::generate();
    let wrong = fastrepl().args(["status", "--relay", &relay.addr, "--relay-cacert", &other.path("ca.crt")]).output().unwrap();
    assert!(!wrong.status.success());
    assert!(String::from_utf8_lossy(&wrong.stderr).contains("TLS"), "{}", String::from_utf8_lossy(&wrong.stderr));

    let st: serde_json::Value = {
        let out = fastrepl().args(["status", "--relay", &relay.addr, "--json", "--relay-cacert", &ca]).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&out.stdout).unwrap()
    };
    assert_eq!(st["attaches_total"]["ucx"], 0);
    // Over tcp: every block encrypted. The agent does not serve peers (they would get it in the clear).
    let target = Server::start(Flavor::Redis70, &[]);
    let j = finish_join(spawn_join(&relay.addr, &target.addr(), |cmd| {
        cmd.args(["--relay-cacert", &ca, "--transport", "tcp"]);
    }));
    assert_eq!(j.code, Some(0), "{}", j.output);
    assert_eq!(j.report["transport"], "tcp");
    assert!(j.report["swarm"].as_str().unwrap_or("").contains("not serving"), "{}", j.report["swarm"]);
    assert_identical(&master, &target);
    let out = fastrepl().args(["fetch", "--relay", &relay.addr, "--relay-cacert", &ca, "--transport", "tcp", "--out", "-"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(&out.stdout[..5], b"REDIS", "fetch over TLS yields the RDB");
}

/// Help lines true for their subcommand and named as redis-cli names them; a relay says why it
/// stops; `status | head` ends quietly.
#[test]
fn help_texts_stop_log_and_a_closed_pipe() {
    let help = |cmd: &str| String::from_utf8_lossy(&fastrepl().args([cmd, "--help"]).output().unwrap().stdout).into_owned();
    let verify = help("verify");
    assert!(verify.contains("--sni <") && !verify.contains("--tls-server-name <"), "{verify}");
    assert!(verify.contains("Speak TLS to both servers") && !verify.contains("sentinel") && !verify.contains("join"), "{verify}");
    let ok = fastrepl().args(["verify", "127.0.0.1:1", "127.0.0.1:2", "--tls", "--tls-server-name", "x"]).output().unwrap();
    assert!(!String::from_utf8_lossy(&ok.stderr).contains("unexpected argument"), "--tls-server-name is still accepted");
    let join = help("join");
    assert!(join.contains("--replica-listen") && join.contains("--join-metrics"), "{join}");
    let top = String::from_utf8_lossy(&fastrepl().arg("--help").output().unwrap().stdout).into_owned();
    assert!(top.contains("130"), "join's exit statuses without 130: {top}");
    let retries = join.find("--retries").unwrap();
    let retry_max = join.find("--retry-max-secs").unwrap();
    assert!(retry_max > retries && join[retries..retry_max].matches("\n      --").count() == 0, "--retry-max-secs is not beside --retries:\n{join}");

    let master = Server::start(Flavor::Redis70, &[]);
    let mut relay = relay(&master.addr(), &[], &[]);
    // `status | head -1`: a reader that closes after one line.
    let mut st = fastrepl().args(["status", "--relay", &relay.addr]).stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped()).spawn().unwrap();
    drop(st.stdout.take()); // the reader is gone before anything is written
    let out = st.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && !err.contains("panicked") && err.is_empty(), "status on a closed pipe: {:?} {err}", out.status);

    // SIGTERM: the relay says so and exits.
    // SAFETY: kill(2) on the pid of our own child, which is still running.
    assert_eq!(unsafe { libc::kill(relay.proc.pid() as i32, libc::SIGTERM) }, 0);
    assert_eq!(relay.proc.wait(Duration::from_secs(20)), Some(0));
    assert!(relay.proc.output().contains("relay stopping (SIGTERM)"), "{}", relay.proc.output());
}

/// A sample of a scrape, with the scrape in the message when it is missing.
fn sample(m: &std::collections::HashMap<String, f64>, name: &str) -> f64 {
    *m.get(name).unwrap_or_else(|| panic!("no {name} in the scrape: {m:?}"))
}

/// The joins' outcomes in a scrape: in_sync, full_sync, failed.
fn joins(m: &std::collections::HashMap<String, f64>) -> [f64; 3] {
    ["in_sync", "full_sync", "failed"].map(|o| sample(m, &format!("fastrepl_relay_joins_total{{outcome={o}}}")))
}

/// What alerts compare: the bounds (`log_max_bytes` beside `generation_log_bytes`), the store's
/// filesystem, and joins by how they ended, as their agents told the relay.
#[test]
fn joins_by_outcome_the_bounds_and_the_stores_disk_are_metrics() {
    use std::io::{Read, Write};
    let master = Server::start(Flavor::Redis70, &[]);
    data::fill_small_mixed(&mut master.client(), 3000);
    let store = tempfile::tempdir().unwrap();
    let maddr = format!("127.0.0.1:{}", fixtures::free_port());
    let args = ["--store", store.path().to_str().unwrap(), "--metrics", &maddr, "--log-max-bytes", "33554432", "--snapshot-max-bytes", "1073741824"];
    let stored = relay(&master.addr(), &args, &[]);
    wait_until("the metrics endpoint", Duration::from_secs(10), || std::net::TcpStream::connect(&maddr).ok());
    let m = scrape(&maddr);
    assert_eq!((sample(&m, "fastrepl_relay_log_max_bytes"), sample(&m, "fastrepl_relay_snapshot_max_bytes")), (33554432.0, 1073741824.0));
    let (size, free) = (sample(&m, "fastrepl_relay_store_size_bytes"), sample(&m, "fastrepl_relay_store_free_bytes"));
    assert!(size > 0.0 && free > 0.0 && free <= size, "store size {size}, free {free}");
    assert_eq!(joins(&m), [0.0; 3], "no join yet");

    let target = Server::start(Flavor::Redis70, &[]);
    let j = join(&stored.addr, &target.addr(), &[], &[]);
    assert_partial(&j);
    // The agent waits for the relay's answer before it exits: counted by now.
    assert_eq!(joins(&scrape(&maddr)), [1.0, 0.0, 0.0], "{}", j.output);
    let st = status_json(&stored.addr);
    assert_eq!(st["joins_total"], serde_json::json!({"in_sync": 1, "full_sync": 0, "failed": 0}), "{st}");
    assert_eq!((st["log_max_bytes"].as_u64(), st["snapshot_max_bytes"].as_u64()), (Some(33554432), Some(1073741824)));
    let (size, free) = (st["store_size_bytes"].as_u64().unwrap(), st["store_free_bytes"].as_u64().unwrap());
    assert!(size > 0 && free <= size, "store size {size}, free {free}");
    assert_identical(&master, &target);
    // The relay's capture was the master's one full sync, and it says so (FastreplMasterFullResync
    // subtracts it); a capture from a replica costs the master none, and counts none.
    assert_eq!((sample(&scrape(&maddr), "fastrepl_relay_master_full_syncs_total"), info_num(&master, "stats", "sync_full")), (1.0, 1));
    let raddr = format!("127.0.0.1:{}", fixtures::free_port());
    let from_replica = relay(&master.addr(), &["--source", &target.addr(), "--metrics", &raddr], &[]);
    wait_relay_generation(&from_replica.addr);
    assert_eq!((sample(&scrape(&raddr), "fastrepl_relay_master_full_syncs_total"), info_num(&master, "stats", "sync_full")), (0.0, 1));
    assert_eq!(status_json(&stored.addr)["master_full_syncs_total"], 1);
    drop(from_replica);

    // A join the relay refuses (the snapshot over --snapshot-max-bytes) is a failed one. Without a
    // store the store's gauges say -1, the status null.
    let maddr = format!("127.0.0.1:{}", fixtures::free_port());
    let small = relay(&master.addr(), &["--snapshot-max-bytes", "4096", "--metrics", &maddr], &[]);
    wait_until("the metrics endpoint", Duration::from_secs(10), || std::net::TcpStream::connect(&maddr).ok());
    let other = Server::start(Flavor::Redis70, &[]);
    let f = join(&small.addr, &other.addr(), &["--retries", "0"], &[]);
    assert_eq!(f.code, Some(1), "{}", f.output);
    assert_untouched(&other);
    let m = scrape(&maddr);
    assert_eq!(joins(&m), [0.0, 0.0, 1.0], "{}", f.output);
    assert_eq!((sample(&m, "fastrepl_relay_store_size_bytes"), sample(&m, "fastrepl_relay_store_free_bytes")), (-1.0, -1.0));
    assert_eq!(sample(&m, "fastrepl_relay_snapshot_max_bytes"), 4096.0);
    let st = status_json(&small.addr);
    assert!(st["store_size_bytes"].is_null() && st["store_free_bytes"].is_null(), "{st}");

    // An outcome byte no join has is a protocol error that closes that connection alone, unanswered.
    let token = transport::Credentials::from(transport::Token::new(TOKEN.as_bytes()).unwrap());
    let addr: endpoint::Endpoint = small.addr.parse().unwrap();
    let mut d = transport::tcp::connect(&addr, &token, transport::auth::Kind::Data, Duration::from_secs(5)).unwrap();
    let mut req = transport::wire::Request::Ended { generation: 0, outcome: transport::wire::JoinOutcome::Failed }.encode();
    req[20] = 9;
    d.write_all(&req).unwrap();
    let mut b = [0u8; 16];
    assert_eq!(d.read(&mut b).unwrap_or(0), 0, "the relay should close a connection that reports an unknown outcome");
    wait_until("the protocol error to be counted", Duration::from_secs(10), || (scrape(&maddr)["fastrepl_relay_errors_total{kind=protocol}"] == 1.0).then_some(()));
    // The relay serves on, and counts a well-formed report (the agent's short connection).
    transport::tracker::report_end(&addr, &token, 0, transport::wire::JoinOutcome::FullSync, Duration::from_secs(5)).unwrap();
    assert_eq!(joins(&scrape(&maddr)), [0.0, 1.0, 1.0]);
}
