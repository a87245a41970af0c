//! A replica pod's life, lived by the examples' own commands: contrib/k8s's StatefulSet (replicas.yaml)
//! and the relay's Deployment (relay.yaml) are read with PyYAML and their init containers, servers and
//! probes run as a kubelet would run them, each "pod" a network namespace of its own (fixtures::netns)
//! with a directory per volume, the volume claim a directory that outlives the pod. The manifests' DNS
//! names resolve as in a cluster: `ip netns exec` bind-mounts /etc/netns/NS/hosts over /etc/hosts,
//! and the test writes one per namespace mapping the Services and the pods' stable names to the
//! namespaces' addresses (rewritten in place when a pod moves: running processes see the change).
//!
//! The life: the fleet's first replica (the relay captures from the master, the one fork it takes);
//! the relay's pod replaced, then a second replica born from a capture of the first, by its DNS name
//! (no fork on the master); a rolling restart (SIGTERM saves, the next start keeps, nothing pulled); a
//! reschedule to a new address with the same volume; scale down (pod and claim deleted) and up (two new
//! pods at once, empty volumes, one snapshot). Each start: `stage`'s decision, one partial resync on the master, no
//! full sync, no fork on the master, the data identical (`fastrepl verify`), and the readiness probe
//! of scripts.yaml saying "not ready" while the server is up but cut off from the master, and ready
//! only when INFO says linked and not loading (the load itself is too short to catch here; e2e_contrib
//! stubs a loading server). Then the master's failover: its standby promoted and the Service's name
//! moved to it, the pods not Ready while cut off, following the name with partial resyncs, a restart
//! after it keeping its volume, a pod born after it staged with no fork on the new master. Servers
//! run as root, not the pods' users. Not lived here: the real Kubernetes (docs/design/known-gaps.md).

mod common;
mod pods;
use common::*;
use fixtures::netns::{self, Lab};
use pods::*;
use serde_json::Value;

use std::path::PathBuf;
use std::time::Duration;

/// The Service of the master: a prerequisite the manifests name (a Bitnami `redis` release "redis").
const MASTER_SERVICE: &str = "redis-master";

/// The lab's hosts: what runs where. A rescheduled pod and the scaled-up ones get fresh addresses.
const MASTER_HOST: usize = 0;
const RELAY_HOST: usize = 1;
/// The prerequisite release's standby, promoted in the failover.
const STANDBY_HOST: usize = 7;
const HOSTS: usize = 8;

/// The master and its standby: prerequisites, not in these manifests (`pods::Prerequisite`).
type Master = Prerequisite;

/// The prerequisite release's standby: a replica of the master behind the Service's name, promoted
/// when the master fails (what Sentinel or an operator does).
fn start_standby(host: &netns::Host) -> Master {
    let of = format!("{MASTER_SERVICE}.redis.{CLUSTER_DOMAIN}");
    Prerequisite::start(host, "standby", &["--replicaof", &of, "6379", "--masterauth", PASSWORD])
}

// ---- The life ----

/// The kept RDB is the one the server wrote at SIGTERM (at least its offset then), not an older file:
/// the manifest's config saves at SIGTERM.
fn assert_kept_own(d: &Start, offset_at_shutdown: i64) {
    assert_eq!(d.what, ("keep".into(), "resumes_partially".into()));
    assert!(d.offset as i64 >= offset_at_shutdown, "the kept RDB is older than the server's shutdown (offset {} < {offset_at_shutdown}): the config did not save at SIGTERM", d.offset);
}

fn write(master: &Master, prefix: &str, n: usize) {
    write_keys(&mut master.client(), prefix, prefix, n);
}

/// The fleet: the lab, the names, the master, the relay's pod, the replica pods and their claims.
/// Fields drop in this order: the processes before the names and the namespaces.
struct Fleet {
    relay: Option<Pod>,
    master: Master,
    dns: Dns,
    lab: Lab,
    m: Manifests,
    master_addr: String,
    relay_addr: String,
    /// The StatefulSet: its pod template, headless Service and claim template.
    sts: Value,
    claims_root: tempfile::TempDir,
}

impl Fleet {
    /// The relay's pod (re)created: a Deployment with strategy Recreate, the old one gone first.
    fn start_relay(&mut self) {
        if let Some(mut old) = self.relay.take() {
            old.terminate();
        }
        self.relay = Some(start_relay_pod(&self.m, self.m.get("Deployment", "fastrepl-relay"), &self.lab.hosts[RELAY_HOST], &self.master.ns, &self.relay_addr));
    }

    /// The pod's stable DNS name (the StatefulSet's headless Service).
    fn fqdn(&self, pod: &str) -> String {
        pod_fqdn(&self.sts, pod)
    }

    fn claim(&self, pod: &str) -> PathBuf {
        pod_claims(&self.sts, self.claims_root.path(), pod).into_values().next().expect("one claim")
    }

    /// Create replica pod `pod` on `host` (its name published there), run its init containers; the
    /// server is not started yet. Returns the pod and the stage decision.
    fn create_replica(&mut self, pod: &str, host: usize) -> (Pod, Start) {
        let p = self.place_replica(pod, host);
        let outs = p.init();
        (p, decision(&outs))
    }

    /// Replica pod `pod` created on `host` with its claim, its name published; nothing run yet.
    fn place_replica(&mut self, pod: &str, host: usize) -> Pod {
        let h = self.lab.hosts[host].clone();
        let fqdn = self.fqdn(pod);
        self.dns.set(&fqdn, Some(&h.ip)); // publishNotReadyAddresses: named before Ready
        Pod::create(&self.m, &self.sts, pod, &h, &pod_claims(&self.sts, self.claims_root.path(), pod))
    }

    /// Start the server of a pod whose init ran, with its link down first: the readiness probe says
    /// "not linked" while the server is up but cannot reach the master, then, the link up, ready only
    /// once the replica is linked and loaded. Returns once ready, after one partial resync on the master.
    fn serve(&mut self, pod: &mut Pod, host: usize) {
        let before = self.master.counts();
        self.lab.set_link(host, false).unwrap();
        pod.run();
        wait_until("the server to answer in its pod", Duration::from_secs(15), || netns::within(&pod.ns, || std::net::TcpStream::connect("127.0.0.1:6379").is_ok()).ok()?.then_some(()));
        let (ready, said) = pod.ready();
        assert!(!ready && said.contains("not ready"), "{}: ready while cut off from the master: {said}", pod.name);
        self.lab.set_link(host, true).unwrap();
        // Ready means linked and loaded, now.
        pod.wait_ready(Duration::from_secs(30), Pod::ready);
        assert_eq!(pod.client().info("replication").unwrap().get("master_link_status"), Some("up"), "{}: ready but not linked", pod.name);
        let after = self.master.counts();
        assert_eq!((after.0, after.1), (before.0, before.1 + 1), "{}: the start was not one partial resync (sync_full, sync_partial_ok)", pod.name);
    }

    /// Stop `pod` as Kubernetes does and create it again on `host` with its volume, `writes` keys
    /// written to the master while it is down: the next start keeps the server's own RDB, pulls
    /// nothing from the relay, resyncs partially, and the data is the master's.
    fn restart_keeping(&mut self, mut pod: Pod, host: usize, writes: usize) -> Pod {
        let name = pod.name.clone();
        self.assert_identical(&name);
        let offset = pod.info_num("replication", "slave_repl_offset");
        pod.terminate();
        drop(pod);
        write(&self.master, "down", writes);
        let served = relay_served(&self.master.ns, &self.relay_addr);
        let (mut pod, d) = self.create_replica(&name, host);
        assert_kept_own(&d, offset);
        assert_eq!(relay_served(&self.master.ns, &self.relay_addr), served, "{name}: the relay served bytes for a kept volume");
        self.serve(&mut pod, host);
        self.assert_identical(&name);
        pod
    }

    /// `fastrepl verify` between the master and a pod, by their DNS names, from the master's namespace.
    fn assert_identical(&self, pod: &str) {
        let replica = format!("{}:6379", self.fqdn(pod));
        wait_until(&format!("{pod} to catch up"), Duration::from_secs(30), || {
            let i = self.master.client().info("replication").ok()?;
            let m = i.num("master_repl_offset")?;
            let line = i.0.into_iter().find(|(_, v)| v.contains(&self.fqdn(pod)))?.1;
            let off: i64 = line.split(',').find_map(|kv| kv.strip_prefix("offset="))?.parse().ok()?;
            (off >= m).then_some(())
        });
        let (ok, out, err) = fastrepl_in(&self.master.ns, &["verify", &self.master_addr, &replica], &[("FASTREPL_VERIFY_PASSWORD", PASSWORD)]);
        assert!(ok, "verify {} {replica}:\n{out}{err}", self.master_addr);
    }
}

#[test]
fn a_replica_pod_lives_through_its_life() {
    let Some(m) = preconditions() else { return };
    let sts = m.get("StatefulSet", "redis-replica").clone();
    let relay_addr = format!("{}:7400", m.service_name("fastrepl-relay"));
    let master_addr = format!("{MASTER_SERVICE}.redis.{CLUSTER_DOMAIN}:6379");
    assert_stage_names(&sts, &relay_addr, &master_addr);

    let lab = Lab::new(HOSTS, None).unwrap_or_else(|e| panic!("make the lab: {e}"));
    let mut dns = Dns::new(&lab);
    dns.set(&format!("{MASTER_SERVICE}.redis.{CLUSTER_DOMAIN}"), Some(&lab.hosts[MASTER_HOST].ip));
    dns.set(&m.service_name("fastrepl-relay"), Some(&lab.hosts[RELAY_HOST].ip));
    let master = Prerequisite::start(&lab.hosts[MASTER_HOST], "master", &[]);
    data::fill_small_mixed(&mut master.client(), 3000);
    let mut f = Fleet { relay: None, master, dns, lab, m, master_addr, relay_addr, sts, claims_root: tempfile::tempdir().unwrap() };
    f.start_relay();

    // 1. The fleet's first replica: an empty volume staged; the relay captured from the master (no
    //    replica qualifies yet: the one fork the fleet costs it).
    let forks = f.master.counts().2;
    let (mut pod0, d) = f.create_replica("redis-replica-0", 2);
    assert_eq!(d.what, ("stage".into(), "empty".into()));
    f.serve(&mut pod0, 2);
    assert_eq!(f.master.counts().2, forks + 1, "the first capture is the master's one fork");
    f.assert_identical("redis-replica-0");
    // The manifest's relay keeps its generation on the store volume, not in memory.
    let st = relay_status(&f.master.ns, &f.relay_addr);
    let store = f.relay.as_ref().and_then(|p| p.mounts.iter().find(|(m, _)| m == "/var/lib/fastrepl")).map(|(_, d)| d.to_string_lossy().into_owned());
    assert!(store.is_some() && st["store"].as_str() == store.as_deref() && st["store_bytes"].as_u64() > Some(0), "the relay's generation is not on its store volume {store:?}: {st}");

    // The relay's pod replaced (Recreate): its next capture is from a replica, by the name it
    // announces (replica-announce-ip: the pod's DNS name). A second replica, born with no fork on the master.
    f.start_relay();
    write(&f.master, "a", 2000);
    let (forks, forks0) = (f.master.counts().2, pod0.info_num("stats", "total_forks"));
    let (mut pod1, d) = f.create_replica("redis-replica-1", 3);
    assert_eq!(d.what, ("stage".into(), "empty".into()));
    f.serve(&mut pod1, 3);
    assert_eq!(f.master.counts().2, forks, "the master forked for the second replica");
    assert!(pod0.info_num("stats", "total_forks") > forks0, "the relay did not capture from redis-replica-0");
    f.assert_identical("redis-replica-1");

    // 2. A rolling restart: SIGTERM (the config saves), the next start keeps the RDB, pulls nothing.
    write(&f.master, "b", 1000);
    let forks = f.master.counts().2;
    let pod1 = f.restart_keeping(pod1, 3, 0);
    // 3. Rescheduled to another node: a new address, the same volume (the name follows it), the
    //    master written to while it moves: still well inside its backlog.
    write(&f.master, "c", 1000);
    let mut pod1 = f.restart_keeping(pod1, 5, 500);
    assert_eq!(f.master.counts().2, forks);
    let slave = f.master.client().info("replication").unwrap().0.into_iter().find(|(_, v)| v.contains("redis-replica-1")).map(|(_, v)| v);
    assert!(slave.is_some(), "the master does not list redis-replica-1 by its name");
    f.assert_identical("redis-replica-1");

    // 4. Scale down to one (redis-replica-1 and its claim deleted: the StatefulSet's default keeps
    //    claims, an operator or persistentVolumeClaimRetentionPolicy deletes them), then up to three
    //    at once (podManagementPolicy Parallel): two new pods, empty volumes, new addresses, their
    //    init steps at the same time, one snapshot for both.
    pod1.terminate();
    drop(pod1);
    std::fs::remove_dir_all(f.claim("redis-replica-1")).unwrap();
    let gone = f.fqdn("redis-replica-1");
    f.dns.set(&gone, None);
    write(&f.master, "e", 2000);
    let (mut pod1, mut pod2) = (f.place_replica("redis-replica-1", 6), f.place_replica("redis-replica-2", 4));
    let (d1, d2) = std::thread::scope(|s| {
        let (a, b) = (s.spawn(|| decision(&pod1.init())), s.spawn(|| decision(&pod2.init())));
        (a.join().expect("redis-replica-1's init"), b.join().expect("redis-replica-2's init"))
    });
    assert_eq!((d1.what, d2.what), (("stage".into(), "empty".into()), ("stage".into(), "empty".into())));
    assert!(d1.generation.is_some() && d1.generation == d2.generation, "the two new pods did not stage one snapshot: {:?} {:?}", d1.generation, d2.generation);
    f.serve(&mut pod1, 6);
    f.serve(&mut pod2, 4);
    assert_eq!(f.master.counts().2, forks, "the master forked for a scale-up");
    for p in ["redis-replica-0", "redis-replica-1", "redis-replica-2"] {
        f.assert_identical(p);
    }
    // 5. The master fails over: the prerequisite release's standby (a replica of the master by the
    //    Service's name, started here: its own full sync is that release's business) is promoted and
    //    the Service's name moved to it, as Sentinel or an operator does. The pods, cut off, are not
    //    Ready; they follow the name by themselves and resync partially with the new master (its
    //    replid2 is the old history). A restart after the failover keeps its volume (the same rule);
    //    the relay follows the name too: a pod born after the failover is staged from a capture of
    //    a replica, the new master never forks.
    let standby = start_standby(&f.lab.hosts[STANDBY_HOST]);
    wait_until("the standby to link to the master", Duration::from_secs(30), || (standby.client().info("replication").ok()?.get("master_link_status") == Some("up")).then_some(()));
    write(&f.master, "f", 1000);
    let pods = [pod0, pod1, pod2];
    // No write is in flight at the failover: every replica has all the master wrote (nothing lost
    // to the failover itself: what an asynchronous failover can lose is not ours to test).
    let wanted = f.master.info_num("replication", "master_repl_offset");
    wait_until("every replica to have all the master wrote", Duration::from_secs(30), || {
        let at = |mut c: client::Client| c.info("replication").ok()?.num("slave_repl_offset");
        (pods.iter().all(|p| at(p.client()) == Some(wanted)) && at(standby.client()) == Some(wanted)).then_some(())
    });
    let old = std::mem::replace(&mut f.master, standby);
    drop(old); // Killed: the master's host is gone.
    for p in &pods {
        wait_until(&format!("{} to say it is not ready, cut off from its master", p.name), Duration::from_secs(30), || (!p.ready().0).then_some(()));
    }
    f.master.client().cmd(&["REPLICAOF", "NO", "ONE"]).expect("promote the standby");
    f.dns.set(&format!("{MASTER_SERVICE}.redis.{CLUSTER_DOMAIN}"), Some(&f.lab.hosts[STANDBY_HOST].ip));
    wait_until("the pods to follow the name to the new master, Ready again", Duration::from_secs(60), || {
        let linked = f.master.info_num("replication", "connected_slaves");
        (linked == 3 && pods.iter().all(|p| p.ready().0)).then_some(())
    });
    let (full, partial, forks) = f.master.counts();
    assert_eq!((full, partial), (0, 3), "the pods' resyncs with the new master (sync_full, sync_partial_ok)");
    write(&f.master, "g", 1000);
    for p in ["redis-replica-0", "redis-replica-1", "redis-replica-2"] {
        f.assert_identical(p);
    }
    let [pod0, pod1, pod2] = pods;
    let pod0 = f.restart_keeping(pod0, 2, 500);
    write(&f.master, "h", 1000);
    let (mut pod3, d) = f.create_replica("redis-replica-3", 3);
    assert_eq!(d.what, ("stage".into(), "empty".into()));
    f.serve(&mut pod3, 3);
    f.assert_identical("redis-replica-3");
    assert_eq!(f.master.counts().2, forks, "the new master forked");
    drop((pod0, pod1, pod2, pod3));
}
