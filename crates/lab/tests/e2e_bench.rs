//! `fastrepl bench --quick`: every scenario at toy scale, on namespace hosts with shaped links, so the
//! benchmark cannot rot. Checks the outputs are complete and every run verified (timings are not
//! asserted: they belong to the benchmark, not the tests).

mod common;
use common::*;

fn run_bench(args: &[&str], dir: &std::path::Path) -> serde_json::Value {
    let o = lab().args(["bench", "--quick", "--out"]).arg(dir).args(args).output().expect("run bench");
    let text = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert!(o.status.success(), "bench failed:\n{text}");
    let md = std::fs::read_to_string(dir.join("results.md")).unwrap();
    assert!(md.contains("| link | N | mode | all in sync"), "results.md has the table");
    assert!(md.contains("| link | N | mode | master RDB (s) |"), "results.md has the phase table");
    serde_json::from_slice(&std::fs::read(dir.join("results.json")).unwrap()).unwrap()
}

/// Namespace hosts are here (root and iproute2); if not, the test says it is skipped.
fn namespace_hosts() -> bool {
    let here = fixtures::netns::available();
    if !here {
        fixtures::skip("bench on namespace hosts needs root and iproute2");
    }
    here
}

fn check_complete(doc: &serde_json::Value, scenarios: &[&str]) {
    assert!(doc["machine"]["cores"].as_u64().unwrap() > 0);
    assert!(doc["server"]["version"].as_str().unwrap().contains("v="), "{}", doc["server"]);
    assert!(doc["settings"]["repl-diskless-sync-delay"].is_number());
    // The master's fork child is sampled every 20 ms: a toy RDB may come and go between samples, but
    // not in every run of a whole bench.
    let spans = doc["scenarios"].as_array().unwrap().iter().flat_map(|s| s["runs"].as_array().unwrap()).filter(|r| !r["master_rdb"].as_array().unwrap().is_empty()).count();
    assert!(spans > 0, "no run saw the master's RDB child");
    let got: Vec<&str> = doc["scenarios"].as_array().unwrap().iter().map(|s| s["spec"]["name"].as_str().unwrap()).collect();
    assert_eq!(got, scenarios);
    for s in doc["scenarios"].as_array().unwrap() {
        let spec = &s["spec"];
        let repeat = doc["settings"]["repeat"].as_u64().unwrap() as usize;
        let expected = spec["links"].as_array().unwrap().len() * spec["replicas"].as_array().unwrap().len() * spec["modes"].as_array().unwrap().len() * repeat;
        let runs = s["runs"].as_array().unwrap();
        assert_eq!(runs.len(), expected, "{}: one run per link × N × mode × repeat", spec["name"]);
        for r in runs {
            assert!(r["error"].is_null(), "{}: {}", spec["name"], r["error"]);
            assert_eq!(r["verified"], true, "{r}");
            let n = r["replicas"].as_u64().unwrap() as usize;
            assert!(r["secs"].as_f64().unwrap() > 0.0, "{r}");
            // A killed replica is neither verified nor timed.
            let killed = usize::from(spec["kill_one"] == true);
            assert_eq!(r["killed"].is_null(), killed == 0, "{r}");
            assert_eq!(r["per_replica"].as_array().unwrap().len(), n - killed, "{r}");
            // On namespace hosts, what each replica host sent (with fastrepl: what its agent served).
            let hosts = if r["master_host_tx_bytes"].is_null() { 0 } else { n };
            assert_eq!(r["replica_hosts_tx_bytes"].as_array().unwrap().len(), hosts, "{r}");
            // Every run needs a snapshot: the master forks at least once in every mode, except when
            // the relay captures from a replica: then the master forks nothing, the replica once.
            if r["mode"].as_str().unwrap().contains("from-replica") {
                assert_eq!((r["forks"].as_i64(), r["source_forks"].as_i64()), (Some(0), Some(1)), "{r}");
                assert!(r["source_cpu_secs"].as_f64().is_some(), "{r}");
            } else {
                assert!(r["forks"].as_i64().unwrap() >= 1, "{r}");
            }
            assert!(r["peak_rss_kib"]["master"].as_u64().is_some(), "{r}");
            if r["mode"].as_str().unwrap().starts_with("fastrepl") {
                assert!(r["relay_cpu_secs"].as_f64().is_some() && r["agent_cpu_secs"].as_f64().is_some(), "{r}");
                assert!(r["handoffs"].as_array().unwrap().iter().all(|h| h == "partial"), "{r}");
                assert!(r["rdb_bytes"].as_u64().is_some_and(|b| b > 0) && r["bytes_from_peers"].is_u64(), "{r}");
                // Memory really used (PSS), sampled for the relay and reported by each agent.
                assert!(r["peak_rss_kib"]["relay_pss"].as_u64().is_some_and(|v| v > 0), "{r}");
                assert!(r["peak_rss_kib"]["agent_pss_max"].as_u64().is_some_and(|v| v > 0), "{r}");
            }
            if spec["latency_probe"] == true {
                assert!(r["latency_ms"]["count"].as_u64().unwrap() > 0, "{r}");
            }
        }
        for r in runs {
            for span in r["master_rdb"].as_array().unwrap() {
                let (a, b) = (span[0].as_f64().unwrap(), span[1].as_f64().unwrap());
                assert!(0.0 <= a && a <= b, "master RDB span {span} in {r}");
            }
        }
        if spec["arrival"] == "staggered" {
            // Natively, each late replica forces a new fork; through the relay, one fork serves all.
            for r in runs.iter().filter(|r| r["mode"].as_str().unwrap().starts_with("fastrepl")) {
                assert_eq!(r["forks"], 1, "{r}");
            }
        }
    }
}

#[test]
fn bench_quick_runs_every_scenario_on_namespace_hosts() {
    if !namespace_hosts() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let doc = run_bench(&["--scenario", "all"], dir.path());
    check_complete(&doc, &["original", "fanout", "staggered", "small-keys", "mixed", "under-load", "slow-host", "agent-killed", "late-joiner", "zero-fork"]);
    let slow = doc["scenarios"].as_array().unwrap().iter().find(|s| s["spec"]["name"] == "slow-host").unwrap();
    assert_eq!(slow["spec"]["slow_hosts"], 1, "{}", slow["spec"]);
    for png in ["original-1gbit.png", "original-unshaped.png", "fanout-1gbit.png", "staggered-unshaped.png"] {
        let b = std::fs::read(dir.path().join(png)).unwrap_or_else(|e| panic!("{png}: {e}"));
        assert!(b.starts_with(b"\x89PNG"), "{png}");
    }
    // Namespace hosts: bytes leaving the master's host are counted.
    let r = &doc["scenarios"][0]["runs"][0];
    assert!(r["master_host_tx_bytes"].as_u64().unwrap() > 1_000_000, "{r}");
}

#[test]
fn bench_quick_write_heavy_counts_the_masters_full_syncs_and_the_log_streamed() {
    if !namespace_hosts() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let doc = run_bench(&["--scenario", "write-heavy"], dir.path());
    // At toy scale (16 MiB, 2 MB/s of writes) native keeps up too: both modes in sync and verified.
    check_complete(&doc, &["write-heavy"]);
    let s = &doc["scenarios"][0];
    assert_eq!((s["spec"]["relay_store"].as_bool(), s["spec"]["master_backlog"].as_str()), (Some(true), Some("64mb")), "{}", s["spec"]);
    for r in s["runs"].as_array().unwrap() {
        assert!(r["gave_up_secs"].is_null(), "{r}");
        assert!(r["writes_mb_s"].as_f64().is_some_and(|w| w > 0.5), "the writer wrote through the run: {r}");
        assert!(r["output_buffer_disconnects"].is_u64(), "{r}");
        if r["mode"] == "fastrepl-tcp" {
            // The relay captures over its own host's loopback and the agent streams the log: the
            // master never closes a replica link for its output buffer.
            assert_eq!(r["output_buffer_disconnects"], 0, "{r}");
            // One full sync on the master, the relay's capture; the stream after it from the log.
            assert_eq!(r["full_syncs"], 1, "{r}");
            assert!(r["phases"][0]["log_bytes"].as_u64().is_some_and(|b| b > 0), "{r}");
        } else {
            assert!(r["full_syncs"].as_i64().is_some_and(|f| f >= 1), "{r}");
        }
    }
    let md = std::fs::read_to_string(dir.path().join("results.md")).unwrap();
    assert!(md.contains("| link | mode | runs in sync | median in sync (s) | master full syncs |"), "{md}");

    // A native sync given no time to finish is given up: reported with what the master did, neither
    // timed nor verified, and not a failure of the bench (exit 0).
    let dir = tempfile::tempdir().unwrap();
    let doc = run_bench(&["--scenario", "write-heavy", "--modes", "native-diskless", "--give-up-secs", "2"], dir.path());
    let r = &doc["scenarios"][0]["runs"][0];
    assert!(r["gave_up_secs"].as_f64().is_some_and(|g| g >= 2.0), "{r}");
    assert!(r["error"].is_null() && r["secs"].is_null() && r["verified"] == false, "{r}");
    assert!(r["full_syncs"].is_i64() && r["master_host_tx_bytes"].is_u64(), "{r}");
    let md = std::fs::read_to_string(dir.path().join("results.md")).unwrap();
    assert!(md.contains("| native-diskless | gave up at "), "{md}");
}

#[test]
fn bench_quick_compressible_runs_a_caches_data_from_master_and_replica() {
    let dir = tempfile::tempdir().unwrap();
    let doc = run_bench(&["--scenario", "compressible", "--no-netns"], dir.path());
    check_complete(&doc, &["compressible"]);
    let s = &doc["scenarios"][0];
    assert_eq!(s["spec"]["dataset"]["kind"], "realistic", "{}", s["spec"]);
    // A replica asked for an RDB without LZF sends more bytes of this data than one with it.
    let rdb = |mode: &str| s["runs"].as_array().unwrap().iter().find(|r| r["mode"] == mode).and_then(|r| r["rdb_bytes"].as_u64()).unwrap();
    assert!(rdb("fastrepl-tcp-from-replica-raw") > rdb("fastrepl-tcp-from-replica"), "{} vs {}", rdb("fastrepl-tcp-from-replica-raw"), rdb("fastrepl-tcp-from-replica"));
}

#[test]
fn bench_quick_on_loopback_includes_shm_and_repeats() {
    let dir = tempfile::tempdir().unwrap();
    let doc = run_bench(&["--scenario", "mixed", "--no-netns", "--repeat", "2"], dir.path());
    check_complete(&doc, &["mixed"]);
    let runs = doc["scenarios"][0]["runs"].as_array().unwrap();
    let modes: Vec<&str> = runs.iter().map(|r| r["mode"].as_str().unwrap()).collect();
    assert!(modes.contains(&"fastrepl-shm"), "{modes:?}");
    // Repeats are interleaved across modes: the first round of every mode, then the second.
    let rounds: Vec<u64> = runs.iter().map(|r| r["repeat"].as_u64().unwrap()).collect();
    let half = runs.len() / 2;
    assert!(rounds[..half].iter().all(|&k| k == 0) && rounds[half..].iter().all(|&k| k == 1), "{rounds:?}");
    let md = std::fs::read_to_string(dir.path().join("results.md")).unwrap();
    assert!(md.contains("| link | N | mode | runs verified | median all in sync (s) |"), "{md}");
    assert!(md.contains("| 2/2 |"), "{md}");
    // Every cell's median is also counted from the master's fork (recorded in every run).
    let medians: Vec<&str> = md.lines().skip_while(|l| !l.contains("| runs verified |")).skip(2).take_while(|l| l.starts_with('|')).collect();
    assert!(!medians.is_empty(), "{md}");
    for row in medians {
        let from_fork = row.split('|').nth(8).unwrap_or("").trim();
        assert!(from_fork.parse::<f64>().is_ok_and(|v| v > 0.0), "no time from the master's fork in {row:?}");
    }
}

#[test]
fn bench_refuses_shm_across_hosts_and_unknown_modes() {
    let dir = tempfile::tempdir().unwrap();
    for (args, msg) in [
        (vec!["--scenario", "mixed", "--modes", "fastrepl-shm"], "needs relay and replica on one host"),
        (vec!["--scenario", "mixed", "--no-netns", "--modes", "fastrepl-carrier-pigeon"], "unknown mode"),
        (vec!["--scenario", "nope", "--no-netns"], "unknown scenario"),
    ] {
        let o = lab().args(["bench", "--quick", "--out"]).arg(dir.path()).args(&args).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success() && err.contains(msg), "{args:?}: {err}");
    }
}
