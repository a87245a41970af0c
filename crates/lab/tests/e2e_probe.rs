//! `fastrepl-lab probe`: the transport microbenchmark runs end to end (a relay of its own serving a
//! synthetic file, every transport, baselines, JSON and charts). Figures are not asserted: they belong
//! to the benchmark, not the tests.

mod common;
use common::*;

#[test]
fn probe_self_quick_writes_a_complete_table_json_and_charts() {
    let dir = tempfile::tempdir().unwrap();
    let o = lab().args(["probe", "--self", "--quick", "--secs", "0.05", "--out"]).arg(dir.path()).output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert!(o.status.success(), "{text}");
    let j: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.path().join("probe.json")).unwrap()).unwrap();
    let points = j["points"].as_array().unwrap();
    for t in ["tcp", "shm", "ucx-tcp", "ucx-sm"] {
        let n = points.iter().filter(|p| p["transport"] == t).count();
        assert_eq!(n, 4, "{t}: expected 4 sizes in --quick:\n{text}");
    }
    for p in points {
        assert!(p["mib_s"].as_f64().unwrap() > 0.0, "{p}");
        assert!(p["p99_us"].as_f64().unwrap() >= p["p50_us"].as_f64().unwrap(), "{p}");
        assert!(p["ratio_to_baseline"].as_f64().is_some(), "{p}");
        assert!(p["relay_cpu_us_per_read"].as_f64().is_some(), "relay CPU is measured with --self: {p}");
    }
    assert_eq!(j["baselines"].as_array().unwrap().len(), 8, "memcpy and tcp-stream at 4 sizes");
    for png in ["throughput.png", "latency.png", "cpu.png"] {
        let b = std::fs::read(dir.path().join(png)).unwrap();
        assert!(b.len() > 1000 && b.starts_with(b"\x89PNG"), "{png} is not a PNG");
    }
}

#[cfg(feature = "ucx")]
#[test]
#[ignore = "needs an RDMA device; FASTREPL_TEST_RDMA=1 bash scripts/test.sh"]
fn probe_over_rdma_reports_a_verbs_lane() {
    if std::env::var_os("FASTREPL_TEST_RDMA").is_none() {
        panic!("set FASTREPL_TEST_RDMA=1 on a host with an RDMA device");
    }
    let dir = tempfile::tempdir().unwrap();
    let o = lab()
        .env("UCX_TLS", std::env::var("FASTREPL_TEST_RDMA_TLS").unwrap_or_else(|_| "rc,ud".into()))
        .args(["probe", "--self", "--quick", "--transports", "ucx", "--out"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let j: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.path().join("probe.json")).unwrap()).unwrap();
    for p in j["points"].as_array().unwrap() {
        let d = p["detail"].as_str().unwrap_or_default();
        assert!(ucx::is_rdma_transport(d), "not RDMA: {d}");
    }
}
