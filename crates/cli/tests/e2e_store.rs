//! The relay's disk-backed store (`--store DIR`): joins over every transport from files, a killed
//! relay's leftovers removed, a released generation's files removed, and disk faults (a full disk, a
//! file truncated under the relay, a store that is missing or taken) as ordinary faults.

mod common;
use common::*;
use std::path::Path;
use std::time::Duration;

/// A relay keeping its generations under `store`; `extra` adds arguments.
fn stored_relay(master: &str, store: &Path, extra: &[&str]) -> Relay {
    spawn_relay(master, |c| {
        c.arg("--store").arg(store).args(extra);
    })
}

fn join_over(relay: &str, replica: &str, transport: &str, extra: &[&str]) -> Joined {
    finish_join(spawn_join(relay, replica, |c| {
        c.args(["--transport", transport]).args(extra);
        if transport == "ucx" {
            c.env("UCX_TLS", "tcp");
        }
    }))
}

fn generation_files(store: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(store).unwrap().filter_map(|e| e.ok()?.file_name().into_string().ok()).filter(|n| n.starts_with("gen-")).collect();
    v.sort();
    v
}

#[test]
fn joins_over_every_transport_are_served_from_the_store() {
    let master = Server::start(Flavor::Redis70, &[]);
    data::fill_every_type(&mut master.client(), 2, true);
    // 96 MiB: a snapshot larger than the relay's memory bound, so a relay holding it in memory fails
    // the bound's assertion below.
    data::fill_big_values(&mut master.client(), 96, 1 << 20);
    let store = tempfile::tempdir().unwrap();
    let relay = stored_relay(&master.addr(), store.path(), &["--block-size", "65536"]);
    wait_relay_generation(&relay.addr);
    assert_eq!(generation_files(store.path()), ["gen-1.log", "gen-1.rdb"]);
    let st = status_json(&relay.addr);
    assert_eq!(st["store"], store.path().display().to_string(), "{st}");
    assert!(st["store_bytes"].as_u64().unwrap() >= st["held_bytes"].as_u64().unwrap(), "{st}");
    let bound = st["memory_bound_bytes"].as_u64().expect("a bound with a store");
    let held = st["memory_unreclaimable_bytes"].as_u64().unwrap();
    let snapshot = st["held_bytes"].as_u64().unwrap();
    assert!(snapshot > bound, "the test's snapshot ({snapshot}) must outgrow the bound ({bound}) to tell memory from store");
    assert!(held > 0 && held < bound, "unreclaimable {held} under the bound {bound}: {st}");
    // Writes after the snapshot land in the store's log and reach every replica.
    for (i, t) in ["tcp", "shm", "ucx"].iter().enumerate() {
        let replica = Server::start(Flavor::Redis70, &[]);
        master.client().cmd(&["SET", &format!("after:{i}"), t]).unwrap();
        let j = join_over(&relay.addr, &replica.addr(), t, &[]);
        assert_eq!(j.code, Some(0), "join over {t} failed:\n{}", j.output);
        assert_eq!((j.report["handoff"].as_str(), j.report["transport"].as_str()), (Some("partial"), Some(*t)), "{}", j.output);
        assert_eq!(j.report["generation"], 1, "one capture for all: {}", j.output);
        wait_caught_up(&master, &replica);
        assert_identical(&master, &replica);
    }
    let st = status_json(&relay.addr);
    assert!(st["generations"][0]["log_bytes"].as_u64().unwrap() > 0, "the log grew in its file: {st}");
    assert_eq!(st["captures_total"], 1, "{st}");
}

#[test]
fn a_killed_relays_leftovers_are_removed_and_a_store_serves_one_relay() {
    let master = Server::start(Flavor::Redis70, &[]);
    data::fill_small_mixed(&mut master.client(), 500);
    let store = tempfile::tempdir().unwrap();
    let mut first = stored_relay(&master.addr(), store.path(), &[]);
    wait_relay_generation(&first.addr);
    // A second relay on the same store is refused by name while the first lives.
    let out = fastrepl().args(["relay", "--master", &master.addr(), "--listen", "127.0.0.1:0", "--store"]).arg(store.path()).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("another relay uses it"), "{err}");
    first.proc.kill();
    std::fs::write(store.path().join("notes.txt"), "the operator's").unwrap();
    assert_eq!(generation_files(store.path()), ["gen-1.log", "gen-1.rdb"], "a killed relay leaves its files");
    // The next relay removes them (and nothing else) before it captures its own.
    let second = stored_relay(&master.addr(), store.path(), &["--capture", "on-demand"]);
    assert!(second.proc.output().contains("removed the generation files a previous relay left"), "{}", second.proc.output());
    assert!(generation_files(store.path()).is_empty());
    assert!(store.path().join("notes.txt").exists(), "a file not the relay's is left alone");
}

#[test]
fn a_store_that_is_missing_or_not_a_directory_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a-file");
    std::fs::write(&file, "x").unwrap();
    for bad in [dir.path().join("missing"), file] {
        let out = fastrepl().args(["relay", "--master", "127.0.0.1:1", "--listen", "127.0.0.1:0", "--store"]).arg(&bad).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(err.contains(&format!("store directory {}", bad.display())), "{err}");
    }
}

#[test]
fn a_store_that_cannot_be_written_is_refused_at_start_by_name() {
    if fixtures::skip::unavailable("mount") {
        return fixtures::skip("FASTREPL_TEST_UNAVAILABLE names mount");
    }
    let Some(disk) = fixtures::disk::SmallDisk::mount_read_only("1m") else {
        return fixtures::skip("cannot mount a read-only tmpfs here (needs root and mount rights)");
    };
    let out = fastrepl().args(["relay", "--master", "127.0.0.1:1", "--listen", "127.0.0.1:0", "--store"]).arg(disk.path()).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "a relay must not start on a store it cannot write: {err}");
    assert!(err.contains(&disk.path().display().to_string()) && err.contains("Read-only file system"), "the directory and the cause are named: {err}");
}

#[test]
fn a_released_generation_takes_its_files_with_it() {
    let master = Server::start(Flavor::Redis70, &[]);
    data::fill_small_mixed(&mut master.client(), 500);
    let store = tempfile::tempdir().unwrap();
    let relay = stored_relay(&master.addr(), store.path(), &["--idle-release-secs", "1"]);
    wait_until("a generation in the store", Duration::from_secs(30), || (!generation_files(store.path()).is_empty()).then_some(()));
    // Watched on the disk alone: a status connection would keep the relay from being idle.
    wait_until("the idle generation released with its files", Duration::from_secs(30), || generation_files(store.path()).is_empty().then_some(()));
    assert_eq!(status_json(&relay.addr)["generations_released_idle_total"], 1);
    // The next agent gets a new capture, in new files.
    let replica = Server::start(Flavor::Redis70, &[]);
    let j = join_over(&relay.addr, &replica.addr(), "tcp", &[]);
    assert_eq!((j.code, j.report["handoff"].as_str()), (Some(0), Some("partial")), "{}", j.output);
    assert_identical(&master, &replica);
}

#[test]
fn a_file_truncated_under_the_relay_fails_its_generation_and_the_next_join_gets_a_fresh_one() {
    let master = Server::start(Flavor::Redis70, &[]);
    data::fill_big_values(&mut master.client(), 100, 16 << 10);
    let store = tempfile::tempdir().unwrap();
    let relay = stored_relay(&master.addr(), store.path(), &["--block-size", "65536"]);
    wait_relay_generation(&relay.addr);
    std::fs::OpenOptions::new().write(true).open(store.path().join("gen-1.rdb")).unwrap().set_len(0).unwrap();
    let replica = Server::start(Flavor::Redis70, &[]);
    let j = join_over(&relay.addr, &replica.addr(), "tcp", &["--retries", "0"]);
    assert_ne!(j.code, Some(0), "a join on a truncated snapshot must not succeed:\n{}", j.output);
    assert!(j.output.contains("gen-1.rdb"), "the agent is told which file: {}", j.output);
    assert_untouched(&replica);
    let st = status_json(&relay.addr);
    assert_eq!(st["store_faults_total"], 1, "{st}");
    assert!(st["generations"].as_array().unwrap().iter().all(|g| g["id"] != 1 || g["state"] == "failed"), "{st}");
    // The next join triggers a fresh capture and succeeds.
    let j = join_over(&relay.addr, &replica.addr(), "tcp", &[]);
    assert_eq!((j.code, j.report["handoff"].as_str()), (Some(0), Some("partial")), "{}", j.output);
    assert_eq!(j.report["generation"], 2, "{}", j.output);
    assert_identical(&master, &replica);
}

#[test]
fn a_block_rotted_in_the_store_is_caught_by_its_checksum_and_never_fed() {
    // A cache's data: its blocks are kept compressed, and the CRC32C taken as each was packed is
    // all that stands between bytes changed on disk and the replica.
    let master = Server::start(Flavor::Redis70, &[]);
    fixtures::cache_data::fill(&mut master.client(), 20_000, 7).unwrap();
    let store = tempfile::tempdir().unwrap();
    let relay = stored_relay(&master.addr(), store.path(), &["--block-size", "65536"]);
    wait_relay_generation(&relay.addr);
    let g = status_json(&relay.addr)["generations"][0].clone();
    let stored = g["rdb_stored_bytes"].as_u64().unwrap();
    assert!(stored < g["rdb_bytes"].as_u64().unwrap(), "compressed blocks: {g}");
    // 4 KiB flipped in the middle of the stored blocks, the file's length unchanged (bit rot).
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new().read(true).write(true).open(store.path().join("gen-1.rdb")).unwrap();
        let mut bytes = vec![0u8; 4096];
        f.read_exact_at(&mut bytes, stored / 2).unwrap();
        bytes.iter_mut().for_each(|b| *b = !*b);
        f.write_all_at(&bytes, stored / 2).unwrap();
    }
    let replica = Server::start(Flavor::Redis70, &[]);
    for t in ["tcp", "shm"] {
        let j = join_over(&relay.addr, &replica.addr(), t, &["--retries", "0"]);
        assert_ne!(j.code, Some(0), "a join over {t} on a rotted block must not succeed:\n{}", j.output);
        assert!(j.output.contains("failed its checksum twice"), "the agent says what it found ({t}): {}", j.output);
        assert_untouched(&replica);
    }
}

#[test]
fn a_file_removed_from_the_store_fails_its_generation_by_name() {
    let master = Server::start(Flavor::Redis70, &[]);
    data::fill_big_values(&mut master.client(), 100, 16 << 10);
    let store = tempfile::tempdir().unwrap();
    let relay = stored_relay(&master.addr(), store.path(), &["--block-size", "65536"]);
    wait_relay_generation(&relay.addr);
    std::fs::remove_file(store.path().join("gen-1.rdb")).unwrap();
    let replica = Server::start(Flavor::Redis70, &[]);
    let j = join_over(&relay.addr, &replica.addr(), "tcp", &["--retries", "0"]);
    assert_ne!(j.code, Some(0), "a join on a removed snapshot file must fail, not be served from a file the operator deleted:\n{}", j.output);
    assert!(j.output.contains("gen-1.rdb") && j.output.contains("removed"), "the agent is told which file and what: {}", j.output);
    assert_untouched(&replica);
    assert_eq!(status_json(&relay.addr)["store_faults_total"], 1);
}

#[test]
fn a_full_disk_mid_capture_fails_the_generation_and_the_agent_is_told() {
    if fixtures::skip::unavailable("mount") {
        return fixtures::skip("FASTREPL_TEST_UNAVAILABLE names mount");
    }
    let Some(disk) = fixtures::disk::SmallDisk::mount("1m") else {
        return fixtures::skip("cannot mount a small tmpfs here (needs root and mount rights)");
    };
    let master = Server::start(Flavor::Redis70, &[]);
    data::fill_big_values(&mut master.client(), 200, 16 << 10);
    let relay = stored_relay(&master.addr(), disk.path(), &["--block-size", "65536", "--capture", "on-demand"]);
    let replica = Server::start(Flavor::Redis70, &[]);
    let j = join_over(&relay.addr, &replica.addr(), "tcp", &["--retries", "0"]);
    assert_ne!(j.code, Some(0), "a join on a snapshot the disk could not hold must not succeed:\n{}", j.output);
    assert!(j.output.contains("No space left on device") && j.output.contains("gen-1.rdb"), "the agent is told why and which file: {}", j.output);
    assert_untouched(&replica);
    let st = status_json(&relay.addr);
    assert!(st["capture_failures_total"].as_u64().unwrap() >= 1, "{st}");
    assert!(st["last_capture_error"].as_str().unwrap_or_default().contains("No space left on device"), "{st}");
}

#[test]
fn a_log_that_outweighs_its_snapshot_seals_and_the_next_join_gets_a_fresh_capture() {
    // A 2 MiB snapshot, then 80 MiB of writes: past the 64 MiB floor and 100 % of the RDB, the
    // relay seals the generation for outweighing it, and the next join is served a new capture.
    let master = Server::start(Flavor::Redis70, &[]);
    data::fill_big_values(&mut master.client(), 32, 64 << 10);
    let store = tempfile::tempdir().unwrap();
    let relay = stored_relay(&master.addr(), store.path(), &["--log-max-percent", "100"]);
    wait_relay_generation(&relay.addr);
    data::fill_big_values(&mut master.client(), 80, 1 << 20);
    fixtures::wait_until("the generation sealed for its log", std::time::Duration::from_secs(60), || {
        (status_json(&relay.addr)["generations_sealed_by_reason_total"]["log_outweighs_snapshot"] == 1).then_some(())
    });
    let replica = Server::start(Flavor::Redis70, &[]);
    let j = join_over(&relay.addr, &replica.addr(), "tcp", &[]);
    assert_eq!((j.code, j.report["handoff"].as_str()), (Some(0), Some("partial")), "{}", j.output);
    assert_eq!(j.report["generation"], 2, "a fresh capture, not the sealed generation: {}", j.output);
    assert!(j.report["log_bytes"].as_u64().unwrap() < 64 << 20, "the fresh generation's log is short: {}", j.output);
    assert_identical(&master, &replica);
}
