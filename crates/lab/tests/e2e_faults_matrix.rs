//! The fault matrix's short version (`fastrepl-lab faults --quick`) and a short soak, as the suite
//! runs them: every cell on namespace hosts with a writer, judged by the invariant (success only with
//! identical data, failure only with a message and the replica reset, the bystander agent unaffected
//! where the fault was not its, nothing leaked); every soak join verified and the relay flat. The
//! full matrix and the 200-join soak are lab commands (docs/results/faults, docs/results/soak).

mod common;
use common::*;

#[test]
fn staged_join_cells_keep_the_invariant() {
    // The staged join of a cluster node under its faults: the agent killed while pulling, recording
    // and restarting; the node killed while loading; a failover while it loads; the backlog overrun
    // while it is down. On loopback clusters (no namespaces needed).
    let dir = tempfile::tempdir().unwrap();
    let o = lab().args(["faults", "--staged", "--out"]).arg(dir.path()).output().expect("run the staged cells");
    let text = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert!(o.status.success(), "a staged cell broke the invariant:\n{text}");
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.path().join("staged.json")).unwrap()).unwrap();
    let cells = doc["cells"].as_array().unwrap();
    assert_eq!(cells.len(), 6, "{text}");
    let by_name = |n: &str| cells.iter().find(|c| c["cell"] == n).unwrap_or_else(|| panic!("no cell {n}"));
    for c in cells {
        assert_ne!(c["verdict"]["verdict"], "violation", "{}: {}", c["cell"], c["verdict"]);
        assert_ne!(c["struck_in"].as_str().unwrap_or_default().get(..5), Some("never"), "{}: the fault never struck", c["cell"]);
    }
    // An overrun backlog is a full sync, reported as one (exit 3), never as partial.
    let overrun = by_name("staged:backlog-overrun@restarting");
    assert_eq!(overrun["observed"]["exit"], 3, "{overrun}");
    assert_eq!(overrun["verdict"]["verdict"], "native", "{overrun}");
    // A failover while the node loads: the join reports what it saw — the failover, when it was
    // done before the node linked (it may complete after the join ended: then the node follows the
    // new master on its own, as any replica does, and the report did not claim it).
    let failover = by_name("staged:failover@loading");
    assert!(failover["told"].as_str().unwrap_or_default().starts_with("handoff"), "{failover}");
}

#[test]
fn quick_fault_matrix_keeps_the_invariant() {
    let dir = tempfile::tempdir().unwrap();
    let o = lab().args(["faults", "--quick", "--out"]).arg(dir.path()).output().expect("run the fault matrix");
    let text = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert!(o.status.success(), "a cell broke the invariant:\n{text}");
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.path().join("results.json")).unwrap()).unwrap();
    let cells = doc["cells"].as_array().unwrap();
    assert_eq!(cells.len(), 6, "{text}");
    for c in cells {
        for agent in ["a_verdict", "b_verdict"] {
            assert_ne!(c[agent]["verdict"], "violation", "{}: {}", c["cell"], c[agent]);
        }
        assert_eq!(c["keys_lost"], 0, "{}", c["cell"]);
        assert!(c["leaks"].as_array().unwrap().is_empty(), "{}: {}", c["cell"], c["leaks"]);
    }
    let by_name = |n: &str| cells.iter().find(|c| c["cell"] == n).unwrap_or_else(|| panic!("no cell {n}"));
    // A relay killed mid-pull and restarted: the join retried by itself and synced.
    let k = by_name("kill-relay@pull");
    assert_eq!(k["a"]["exit"], 0, "{k}");
    assert!(k["attempts"].as_u64().unwrap() >= 2, "{k}");
    // The strike waited on the typed event streams (`--events`): A was pulling, the relay published.
    assert_eq!(k["struck_in"], "pulling", "{k}");
    // A snapshot over the relay's bound: a clean failure that says so, on both agents.
    let big = by_name("snapshot-too-big@capture");
    assert_eq!(big["a_verdict"]["verdict"], "failed-clean", "{big}");
    assert!(big["a"]["message"].as_str().unwrap().contains("snapshot-max-bytes"), "{big}");
    // The relay's store file truncated under it mid-pull: the generation failed, the agents told,
    // and their retry synced from a fresh capture (never from the truncated file).
    let store = by_name("store-truncate@pull");
    assert_eq!(store["a"]["exit"], 0, "{store}");
    assert!(store["attempts"].as_u64().unwrap() >= 2, "{store}");
    let md = std::fs::read_to_string(dir.path().join("results.md")).unwrap();
    assert!(md.contains("0 keys lost, 0 false successes"), "{md}");
}

#[test]
fn short_soak_is_verified_and_flat() {
    let dir = tempfile::tempdir().unwrap();
    let o = lab().args(["soak", "--joins", "24", "--concurrency", "3", "--writes", "--out"]).arg(dir.path()).output().expect("run the soak");
    let text = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert!(o.status.success(), "{text}");
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.path().join("results.json")).unwrap()).unwrap();
    let joins = doc["joins"].as_array().unwrap();
    assert_eq!(joins.len(), 24);
    assert!(joins.iter().all(|j| j["exit"] == 0 && j["differences"] == 0), "{text}");
    assert!(doc["writes"].as_u64().unwrap() > 0, "the writer ran");
    let [before, after] = [&doc["relay_idle"][0], &doc["relay_idle"][1]];
    assert!(after[2].as_u64() <= before[2].as_u64().map(|m| m.max(1)), "memfds {before} → {after}");
    assert!(after[1].as_u64().unwrap() <= before[1].as_u64().unwrap() + 4, "fds {before} → {after}");
}
