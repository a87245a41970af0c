//! An AOF replica pod's life, lived by the manifest's own commands: contrib/k8s/replicas-aof.yaml's
//! StatefulSet (appendonly yes, no replicaof, the `join --watch` native sidecar) and relay.yaml's
//! Deployment, read with PyYAML and run as a kubelet would run them (crates/cli/tests/pods), each pod
//! a network namespace with a directory per volume, the claim a directory that outlives the pod, the
//! Services' DNS names in /etc/netns/NS/hosts (as e2e_podlife.rs).
//!
//! The life, for Redis 7.0 and for Valkey 9.1 (the manifest's `redis-server` played by each; the
//! master is the same flavour): the first start (an empty volume: the sidecar joins the server through
//! the relay, whose capture from the master is the fleet's one fork); a pod restart (server and
//! sidecar stopped, the volume kept: the server loads its AOF standalone, then the sidecar joins it);
//! the server container alone restarted while the sidecar runs (it comes back standalone with its AOF,
//! the same sidecar joins it again). At every start: readiness false while the server is standalone
//! (the pod's link is held down until the probe said so, and the dataset is the AOF's), true once
//! linked; then on the master no full sync and no fork (`sync_full`, `total_forks` unchanged), one
//! partial resync, the relay serving the snapshot, and the data identical (`fastrepl verify`); the
//! sidecar leaves the linked replica alone, and so does a sidecar restarted alone. Last, a join whose
//! local server is the master itself is refused, nothing changed. Servers run as root, not the pods' users.

mod common;
mod pods;
use common::*;
use fixtures::netns::{self, Lab};
use pods::*;
use serde_json::Value;

use std::time::{Duration, Instant};

const MASTER_SERVICE: &str = "redis-master";
const MASTER_HOST: usize = 0;
const RELAY_HOST: usize = 1;
const POD_HOST: usize = 2;
const HOSTS: usize = 3;
const POD: &str = "redis-replica-aof-0";

/// One flavour's life at a time: the machine's two cores are shared.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The join sidecar's `--relay` and `--master` are the names the test serves; `--replica` the pod's
/// own server.
fn assert_join_names(sts: &Value, relay: &str, master: &str) {
    let inits = sts["spec"]["template"]["spec"]["initContainers"].as_array().expect("init containers");
    let join = inits.iter().find(|c| c["args"][0] == "join").expect("a join sidecar");
    assert_eq!(join["restartPolicy"], "Always", "the join is a native sidecar");
    let args = join["args"].to_string();
    for (flag, value) in [("--relay", relay), ("--master", master), ("--replica", "127.0.0.1:6379")] {
        assert!(args.contains(&format!("\"{flag}\",\"{value}\"")), "the sidecar's {flag} is not {value}: {args}");
    }
    assert!(args.contains("\"--watch\"") && args.contains("\"--force\""), "the sidecar watches and replaces the AOF's data: {args}");
}

/// The sidecar's join reports so far (its `--json` lines), in order.
fn reports(pod: &Pod) -> Vec<Value> {
    pod.sidecar_output("join").lines().filter(|l| l.starts_with('{')).filter_map(|l| serde_json::from_str::<Value>(l).ok()).filter(|v| v.get("schema_version").is_some()).collect()
}

/// Lines the sidecar logged saying it leaves a linked replica alone.
fn said_linked(pod: &Pod) -> usize {
    pod.sidecar_output("join").matches("watching: the local server is a replica, linked: nothing to do").count()
}

/// Lines the sidecar logged saying it waits for its server.
fn said_waiting(pod: &Pod) -> usize {
    pod.sidecar_output("join").matches("watching: waiting for the local server to answer").count()
}

struct Life {
    relay: Option<Pod>,
    master: Prerequisite,
    dns: Dns,
    lab: Lab,
    m: Manifests,
    flavor: Flavor,
    master_addr: String,
    relay_addr: String,
    sts: Value,
    claims_root: tempfile::TempDir,
}

impl Life {
    fn start_relay(&mut self) {
        self.relay = Some(start_relay_pod(&self.m, self.m.get("Deployment", "fastrepl-relay"), &self.lab.hosts[RELAY_HOST], &self.master.ns, &self.relay_addr));
    }

    fn fqdn(&self) -> String {
        pod_fqdn(&self.sts, POD)
    }

    /// The pod created with its claim (kept across pods), its name published, its init container run.
    fn create_pod(&mut self) -> Pod {
        let h = self.lab.hosts[POD_HOST].clone();
        let fqdn = self.fqdn();
        self.dns.set(&fqdn, Some(&h.ip));
        let mut p = Pod::create(&self.m, &self.sts, POD, &h, &pod_claims(&self.sts, self.claims_root.path(), POD));
        p.flavor = self.flavor;
        let outs = p.init();
        assert!(outs.contains_key("local-conf") && !outs.contains_key("join"), "the init step ran, the sidecar is not an init step to completion: {outs:?}");
        p
    }

    /// The server container started (and, for a new pod, the sidecar before it) with the pod cut off
    /// from the relay and the master: the server comes up standalone with what its AOF holds
    /// (`keys_from_aof`), not ready; the link restored, the sidecar joins it: ready once linked and
    /// loaded, one partial resync on the master, no full sync, no fork, the relay served the snapshot.
    /// `captures`: the relay's captures from the master expected meanwhile (the fleet's first: one
    /// full sync and one fork; else none).
    fn start_and_join(&mut self, pod: &mut Pod, start_sidecar: bool, keys_from_aof: i64, captures: i64) {
        let (before, served, joins, linked) = (self.master.counts(), relay_served(&self.master.ns, &self.relay_addr), reports(pod).len(), said_linked(pod));
        self.lab.set_link(POD_HOST, false).unwrap();
        if start_sidecar {
            pod.start_sidecars();
        }
        pod.run();
        wait_until("the server to load its AOF, standalone", Duration::from_secs(30), || {
            let ok = netns::within(&pod.ns, || std::net::TcpStream::connect("127.0.0.1:6379").is_ok()).ok()?;
            let mut c = ok.then(|| pod.client())?;
            (c.info("persistence").ok()?.get("loading") == Some("0")).then_some(())
        });
        let i = pod.client().info("replication").unwrap();
        assert_eq!(i.get("role"), Some("master"), "{POD}: the server did not start standalone (no replicaof in its config): {:?}", i.0);
        let keys = pod.client().cmd(&["DBSIZE"]).unwrap().as_int();
        assert_eq!(keys, Some(keys_from_aof), "{POD}: the standalone server's dataset is not its AOF's");
        let (ready, said) = pod.ready();
        assert!(!ready && said.contains("not linked"), "{POD}: ready while standalone: {said}");
        self.lab.set_link(POD_HOST, true).unwrap();
        // The join ends (its report) once the master's counters said how the handoff went. Before
        // it, the replica may be Ready for a moment: loaded and linked to the sidecar's agent, whose
        // stream it applies (readiness reads master_link_status, whoever the master is).
        let deadline = Instant::now() + Duration::from_secs(120);
        while reports(pod).len() == joins {
            assert!(Instant::now() < deadline, "{POD}: never joined (ready: {:?})\nthe sidecar said:\n{}", pod.ready(), pod.sidecar_output("join"));
            std::thread::sleep(Duration::from_millis(100)); // Polling with a deadline.
        }
        wait_until("the joined replica to be ready", Duration::from_secs(30), || pod.ready().0.then_some(()));
        let i = pod.client().info("replication").unwrap();
        let master_host = self.master_addr.rsplit_once(':').unwrap().0;
        assert_eq!((i.get("master_host"), i.get("master_link_status")), (Some(master_host), Some("up")), "{POD}: ready but not linked to the master");
        assert_eq!(pod.info_num("persistence", "loading"), 0, "{POD}: ready while loading");
        let r = reports(pod);
        assert_eq!(r.len(), joins + 1, "{POD}: not one join report more:\n{}", pod.sidecar_output("join"));
        let last = r.last().unwrap();
        assert!(last["ok"] == true && last["handoff"] == "partial", "{POD}: the sidecar's join was not a partial handoff: {last}");
        let after = self.master.counts();
        assert_eq!(
            after,
            (before.0 + captures, before.1 + 1, before.2 + captures),
            "{POD}: the start was not one partial resync without a fork (sync_full, sync_partial_ok, total_forks; {captures} relay captures)"
        );
        assert!(relay_served(&self.master.ns, &self.relay_addr) > served, "{POD}: the relay served nothing for the join");
        // The server's AOF comes back on after the sync, by itself (its own rewrite: a fork of the
        // replica, not of the master).
        wait_until("the replica's AOF to be on again", Duration::from_secs(30), || (pod.client().info("persistence").ok()?.get("aof_enabled") == Some("1")).then_some(()));
        self.assert_identical(pod);
        // Linked, the sidecar leaves it alone: it says so, and joins nothing more.
        wait_until("the sidecar to see the replica linked", Duration::from_secs(10), || (said_linked(pod) > linked).then_some(()));
        write_keys(&mut self.master.client(), "linked", "linked", 100);
        self.assert_identical(pod);
        assert_eq!(reports(pod).len(), joins + 1, "{POD}: the sidecar joined a linked replica");
        assert_eq!(self.master.counts(), after, "{POD}: the master synced again while the replica was linked");
    }

    /// `fastrepl verify` between the master and the pod, by their DNS names, once it caught up.
    fn assert_identical(&self, pod: &Pod) {
        let want = self.master.info_num("replication", "master_repl_offset");
        wait_until(&format!("{POD} to catch up"), Duration::from_secs(30), || (pod.info_num("replication", "slave_repl_offset") >= want).then_some(()));
        let replica = format!("{}:6379", self.fqdn());
        let (ok, out, err) = fastrepl_in(&self.master.ns, &["verify", &self.master_addr, &replica], &[("FASTREPL_VERIFY_PASSWORD", PASSWORD)]);
        assert!(ok, "verify {} {replica}:\n{out}{err}", self.master_addr);
    }
}

fn life(flavor: Flavor) {
    let Some(m) = preconditions() else { return };
    require_server(flavor);
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let sts = m.get("StatefulSet", "redis-replica-aof").clone();
    let relay_addr = format!("{}:7400", m.service_name("fastrepl-relay"));
    let master_addr = format!("{MASTER_SERVICE}.redis.{CLUSTER_DOMAIN}:6379");
    assert_join_names(&sts, &relay_addr, &master_addr);
    let conf = m.get("ConfigMap", "redis-replica-aof")["data"]["redis.conf"].as_str().unwrap().to_string();
    assert!(conf.lines().any(|l| l.trim() == "appendonly yes") && !conf.lines().any(|l| l.trim_start().starts_with("replicaof")), "the manifest's server persists with AOF and starts standalone");

    let lab = Lab::new(HOSTS, None).unwrap_or_else(|e| panic!("make the lab: {e}"));
    let mut dns = Dns::new(&lab);
    dns.set(&format!("{MASTER_SERVICE}.redis.{CLUSTER_DOMAIN}"), Some(&lab.hosts[MASTER_HOST].ip));
    dns.set(&m.service_name("fastrepl-relay"), Some(&lab.hosts[RELAY_HOST].ip));
    let master = Prerequisite::start_flavor(flavor, &lab.hosts[MASTER_HOST], "master", &[]);
    data::fill_small_mixed(&mut master.client(), 3000);
    let mut f = Life { relay: None, master, dns, lab, m, flavor, master_addr, relay_addr, sts, claims_root: tempfile::tempdir().unwrap() };
    f.start_relay();

    // 1. First start, an empty volume: standalone and empty, then joined; the relay's capture from
    //    the master (no replica to capture from yet) is the fleet's one full sync and fork.
    let mut pod = f.create_pod();
    f.start_and_join(&mut pod, true, 0, 1);

    // 2. A pod restart: the server stopped (its AOF flushed), then the sidecar (the kubelet's order),
    //    writes on the master meanwhile; a new pod on the same volume: the server loads its AOF,
    //    standalone, and the new sidecar joins it.
    write_keys(&mut f.master.client(), "before-restart", "b", 1000);
    f.assert_identical(&pod);
    let keys = pod.client().cmd(&["DBSIZE"]).unwrap().as_int().unwrap();
    pod.terminate();
    pod.terminate_sidecars();
    drop(pod);
    write_keys(&mut f.master.client(), "down", "d", 500);
    let mut pod = f.create_pod();
    f.start_and_join(&mut pod, true, keys, 0);

    // 3. The server container alone restarted (a crash, a failed liveness probe), the sidecar running
    //    on: the server comes back standalone with its AOF, and the same sidecar joins it again.
    write_keys(&mut f.master.client(), "before-server-restart", "s", 1000);
    f.assert_identical(&pod);
    let keys = pod.client().cmd(&["DBSIZE"]).unwrap().as_int().unwrap();
    let (sidecar, waited) = (pod.sidecars[0].pid(), said_waiting(&pod));
    pod.terminate();
    write_keys(&mut f.master.client(), "server-down", "e", 500);
    wait_until("the sidecar to see its server gone", Duration::from_secs(10), || (said_waiting(&pod) > waited).then_some(()));
    assert!(pod.sidecars[0].running(), "the sidecar stopped with its server:\n{}", pod.sidecar_output("join"));
    f.start_and_join(&mut pod, false, keys, 0);
    assert!(pod.sidecars.len() == 1 && pod.sidecars[0].running() && pod.sidecars[0].pid() == sidecar, "the sidecar was restarted");
    assert_eq!(reports(&pod).len(), 2, "the one sidecar joined its server once per start of the server");

    // 4. The sidecar alone restarted (a crash, an update of its image) while the server is linked:
    //    the new one sees a linked replica and leaves it alone.
    let counts = f.master.counts();
    pod.terminate_sidecars();
    pod.start_sidecars();
    wait_until("the new sidecar to see the replica linked", Duration::from_secs(15), || (said_linked(&pod) == 1).then_some(()));
    write_keys(&mut f.master.client(), "sidecar-restarted", "c", 100);
    f.assert_identical(&pod);
    assert!(reports(&pod).is_empty() && f.master.counts() == counts, "a restarted sidecar joined a linked replica:\n{}", pod.sidecar_output("join"));
    assert!(pod.ready().0, "the replica is not ready after its sidecar restarted");

    // The master is never joined as a local server (the master's name moved to the server the
    // sidecar watches, as after a failover that promoted it): refused before anything changes.
    let (counts, keys) = (f.master.counts(), f.master.client().cmd(&["DBSIZE"]).unwrap().as_int());
    let args = ["join", "--relay", &f.relay_addr, "--replica", "127.0.0.1:6379", "--master", &f.master_addr, "--force", "--retries", "0"];
    let (ok, out, err) = fastrepl_in(&f.master.ns, &args, &[("FASTREPL_TOKEN", TOKEN), ("FASTREPL_MASTER_PASSWORD", PASSWORD), ("FASTREPL_REPLICA_PASSWORD", PASSWORD)]);
    assert!(!ok && err.contains("is the local server itself") && err.contains("not changed"), "a join of the master itself:\n{out}{err}");
    assert_eq!(
        (f.master.counts(), f.master.client().cmd(&["DBSIZE"]).unwrap().as_int(), f.master.client().info("replication").unwrap().get("role").map(str::to_string)),
        (counts, keys, Some("master".to_string())),
        "the master was touched"
    );
    pod.terminate();
    pod.terminate_sidecars();
}

#[test]
fn an_aof_replica_pod_lives_without_a_full_sync_redis_7_0() {
    life(Flavor::Redis70);
}

#[test]
fn an_aof_replica_pod_lives_without_a_full_sync_valkey_9_1() {
    life(Flavor::Valkey91);
}
