//! Tests that need an RDMA device (InfiniBand or RoCE) visible to UCX. They are compiled in CI and
//! ignored there (no such hardware); on a machine that has one, run them with
//! `FASTREPL_TEST_RDMA=1 bash scripts/test.sh` (which adds `--ignored` for this file) or
//! `cargo test --release -p cli --test e2e_rdma -- --ignored`.
//!
//! They run the same join and probe as everywhere else, with UCX restricted to verbs, and assert that the GETs went over a verbs transport (rc/dc/ud): true RDMA READ, not an emulation.

mod common;
use common::*;

/// UCX transports for these tests: relay and agent share a host here, and UCX would prefer shared
/// memory between them, so restrict it to verbs (override with FASTREPL_TEST_RDMA_TLS).
fn tls() -> String {
    std::env::var("FASTREPL_TEST_RDMA_TLS").unwrap_or_else(|_| "rc,ud".into())
}

fn rdma_transports() -> Vec<String> {
    ucx::Context::local_transports().unwrap_or_default().into_iter().filter(|t| ucx::is_rdma_transport(t)).collect()
}

fn require_rdma() {
    let found = rdma_transports();
    assert!(!found.is_empty(), "no RDMA-capable UCX transport here (UCX sees: {:?})", ucx::Context::local_transports());
}

#[test]
#[ignore = "needs an RDMA device; FASTREPL_TEST_RDMA=1 bash scripts/test.sh"]
fn join_over_ucx_reads_with_rdma() {
    require_rdma();
    let master = Server::start(Flavor::Redis70, &[]);
    data::fill_every_type(&mut master.client(), 8, true);
    let replica = Server::start(Flavor::Redis70, &[]);
    let ucx = |c: &mut std::process::Command| {
        c.args(["--transport", "ucx"]).env("UCX_TLS", tls());
    };
    let relay = spawn_relay(&master.addr(), ucx);
    let j = finish_join(spawn_join(&relay.addr, &replica.addr(), ucx));
    assert_eq!(j.code, Some(0), "{}", j.output);
    let detail = j.report["transport_detail"].as_str().unwrap_or_default();
    assert!(ucx::is_rdma_transport(detail.split([' ', ';']).next().unwrap_or("")), "GETs did not use a verbs transport: {detail}");
    assert!(!detail.contains("emulated"), "{detail}");
    assert_identical(&master, &replica);
}
