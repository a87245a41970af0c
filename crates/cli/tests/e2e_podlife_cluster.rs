//! A cluster shard's pods live their life by the example's own commands: contrib/k8s's
//! cluster-shard.yaml (the shard's relay Deployment and the StatefulSet of shard 0's extra nodes)
//! run by the small kubelet of tests/pods, each pod a network namespace with a volume directory, the
//! names served as in a cluster. The prerequisite, a three-master Redis Cluster on port 6379 behind
//! the headless Service `redis-cluster-headless` (as a Bitnami `redis-cluster` release would be), is
//! started here with the same password and announced DNS names.
//!
//! The life: scale up from none to two (both init steps at once, one snapshot, the one fork on the
//! shard's master: it had no replica to capture from); each start's postStart hook (meet.sh)
//! introducing the node by the headless Service's addresses; a rolling restart (kept, nothing
//! pulled); a reschedule to a new address with the same volume (kept, the cluster learns the new
//! address from the node's MEET); a failover (CLUSTER FAILOVER to one pod) after which the promoted
//! pod's next start keeps everything (a master serving slots) and the other pod's next start follows
//! the shard's current master, asked of the cluster, not the address the manifest names. Each start:
//! `stage`'s decision, one partial resync on the shard's master, readiness only when linked and
//! loaded (or a master serving slots), and the data identical (`fastrepl verify`).

mod common;
mod pods;
use common::*;
use fixtures::netns::{self, Lab};
use pods::*;

use std::time::{Duration, Instant};

/// What INFO replication says of a server: (role, master_host, master_link_status).
type Seen = (Option<String>, Option<String>, Option<String>);

/// The prerequisite cluster's headless Service and its pods' names (`redis-cluster-0`...).
const CLUSTER_SERVICE: &str = "redis-cluster-headless";
const CLUSTER_NODES: usize = 3;
/// The lab's hosts: the cluster's nodes on 0..3, the shard's relay, then the shard's pods.
const RELAY_HOST: usize = 3;
const HOSTS: usize = 7;

/// A node of the prerequisite cluster (port 6379, bus 16379), its DNS name announced.
fn start_node(host: &netns::Host, name: &str) -> Prerequisite {
    let fqdn = node_fqdn(name);
    let cluster = ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "15000", "--masterauth", PASSWORD, "--cluster-announce-hostname", &fqdn];
    Prerequisite::start(host, name, &cluster)
}

/// The DNS name of the prerequisite cluster's node `name`.
fn node_fqdn(name: &str) -> String {
    format!("{name}.{CLUSTER_SERVICE}.redis.{CLUSTER_DOMAIN}")
}

fn text(f: resp::Frame) -> String {
    match f {
        resp::Frame::Bulk(b) => String::from_utf8_lossy(&b).into_owned(),
        other => panic!("not a bulk reply: {other:?}"),
    }
}

fn my_id(c: &mut client::Client) -> String {
    text(c.cmd(&["CLUSTER", "MYID"]).expect("CLUSTER MYID"))
}

/// Node `id`'s line in `c`'s CLUSTER NODES.
fn line_of(c: &mut client::Client, id: &str) -> Option<String> {
    text(c.cmd(&["CLUSTER", "NODES"]).ok()?).lines().find(|l| l.starts_with(id)).map(str::to_string)
}

/// The shard's pods and what they live in.
struct Shard {
    _relay: Pod,
    nodes: Vec<Prerequisite>,
    dns: Dns,
    lab: Lab,
    m: Manifests,
    relay_addr: String,
    sts: serde_json::Value,
    claims_root: tempfile::TempDir,
}

impl Shard {
    fn fqdn(&self, pod: &str) -> String {
        pod_fqdn(&self.sts, pod)
    }

    fn place(&mut self, pod: &str, host: usize) -> Pod {
        let h = self.lab.hosts[host].clone();
        let fqdn = self.fqdn(pod);
        self.dns.set(&fqdn, Some(&h.ip));
        Pod::create(&self.m, &self.sts, pod, &h, &pod_claims(&self.sts, self.claims_root.path(), pod))
    }

    fn served(&self) -> u64 {
        relay_served(&self.nodes[0].ns, &self.relay_addr)
    }

    /// Start the pod's server, run its postStart hook (meet.sh) as the kubelet does, and wait until
    /// the readiness probe says Ready; then Ready must mean what ready.sh promises.
    fn serve(&self, pod: &mut Pod) {
        pod.run();
        let (ok, said) = pod.post_start();
        assert!(ok, "{}: the postStart hook (meet.sh) failed:\n{said}", pod.name);
        pod.wait_ready(Duration::from_secs(60), Pod::ready);
        let i = pod.client().info("replication").unwrap();
        let serves = i.get("role") == Some("master") && text(pod.client().cmd(&["CLUSTER", "INFO"]).unwrap()).contains("cluster_slots_assigned:16384");
        assert!(serves || i.get("master_link_status") == Some("up"), "{}: ready but neither linked nor a master", pod.name);
    }

    /// `fastrepl verify` between two nodes by their DNS names, once both see the cluster up and the
    /// replica has what its master wrote.
    fn assert_identical(&self, master: &str, replica: &str) {
        let c = |name: &str| {
            let addr = format!("{}:6379", self.dns.lookup(name)?);
            netns::within(&self.nodes[0].ns, move || client::Client::connect(&addr, Some(&replication::replica::Auth { user: None, password: PASSWORD.into() }), Duration::from_secs(5))).ok()?.ok()
        };
        for n in [master, replica] {
            wait_until(&format!("{n} to see the cluster up"), Duration::from_secs(60), || text(c(n)?.cmd(&["CLUSTER", "INFO"]).ok()?).contains("cluster_state:ok").then_some(()));
        }
        wait_until(&format!("{replica} to catch up with {master}"), Duration::from_secs(30), || {
            let m = c(master)?.info("replication").ok()?.num("master_repl_offset")?;
            (c(replica)?.info("replication").ok()?.num("slave_repl_offset")? >= m).then_some(())
        });
        let (ok, out, err) = fastrepl_in(&self.nodes[0].ns, &["verify", &format!("{master}:6379"), &format!("{replica}:6379")], &[("FASTREPL_VERIFY_PASSWORD", PASSWORD)]);
        assert!(ok, "verify {master} {replica}:\n{out}{err}");
    }

    /// Stop `pod` as Kubernetes does and create it again on `host` with its volume; returns the
    /// new pod (init run, not started) and its decision. Nothing may be pulled for it.
    fn restart(&mut self, mut pod: Pod, host: usize) -> (Pod, Start) {
        let name = pod.name.clone();
        pod.terminate();
        drop(pod);
        let served = self.served();
        let p = self.place(&name, host);
        let d = decision(&p.init());
        assert_eq!(self.served(), served, "{name}: the relay served bytes for a kept volume");
        (p, d)
    }
}

/// Write `n` keys of the hash tag `tag` (in shard 0's slots) through `c`.
fn write(c: &mut client::Client, tag: &str, prefix: &str, n: usize) {
    write_keys(c, &format!("{{{tag}}}:{prefix}"), prefix, n);
}

#[test]
fn a_cluster_shard_pod_lives_through_its_life() {
    let Some(m) = preconditions() else { return };
    let sts = m.get("StatefulSet", "redis-cluster-shard0").clone();
    let relay_addr = format!("{}:7400", m.service_name("fastrepl-relay-shard0"));
    let headless = format!("{CLUSTER_SERVICE}.redis.{CLUSTER_DOMAIN}");
    assert_stage_names(&sts, &relay_addr, &format!("{headless}:6379"));

    let lab = Lab::new(HOSTS, None).unwrap_or_else(|e| panic!("make the lab: {e}"));
    let mut dns = Dns::new(&lab);
    let nodes: Vec<Prerequisite> = (0..CLUSTER_NODES).map(|i| start_node(&lab.hosts[i], &format!("redis-cluster-{i}"))).collect();
    for n in &nodes {
        dns.set(&node_fqdn(&n.name), Some(&n.ip));
    }
    dns.set_all(&headless, &nodes.iter().map(|n| n.ip.as_str()).collect::<Vec<_>>());
    // The prerequisite cluster: the slots split three ways, the nodes introduced.
    for (i, n) in nodes.iter().enumerate() {
        let (first, last) = (i * 16_384 / CLUSTER_NODES, (i + 1) * 16_384 / CLUSTER_NODES - 1);
        n.client().cmd(&["CLUSTER", "ADDSLOTSRANGE", &first.to_string(), &last.to_string()]).expect("CLUSTER ADDSLOTSRANGE");
        if i > 0 {
            n.client().cmd(&["CLUSTER", "MEET", &nodes[0].ip, "6379"]).expect("CLUSTER MEET");
        }
    }
    wait_until("the cluster to be up", Duration::from_secs(60), || nodes.iter().all(|n| text(n.client().cmd(&["CLUSTER", "INFO"]).unwrap()).contains("cluster_state:ok")).then_some(()));
    let last0 = 16_384 / CLUSTER_NODES - 1;
    let tag = (0..100_000)
        .map(|i| format!("t{i}"))
        .find(|t| matches!(nodes[0].client().cmd(&["CLUSTER", "KEYSLOT", t]), Ok(resp::Frame::Integer(s)) if (s as usize) <= last0))
        .expect("a hash tag in shard 0's slots");
    write(&mut nodes[0].client(), &tag, "a", 3000);
    let node0 = node_fqdn(&nodes[0].name);
    let node0_id = my_id(&mut nodes[0].client());

    let relay_host = lab.hosts[RELAY_HOST].clone();
    dns.set(&m.service_name("fastrepl-relay-shard0"), Some(&relay_host.ip));
    let relay = start_relay_pod(&m, m.get("Deployment", "fastrepl-relay-shard0"), &relay_host, &nodes[0].ns, &relay_addr);
    let mut s = Shard { _relay: relay, nodes, dns, lab, m, relay_addr, sts, claims_root: tempfile::tempdir().unwrap() };

    // 1. Scale up from none to two, at once: both staged from one snapshot, each its shard master's
    //    replica in the nodes.conf staged with it; the one fork on the shard's master (it had no
    //    replica to capture from); each a partial resync.
    let before = s.nodes[0].counts();
    let (mut pod0, mut pod1) = (s.place("redis-cluster-shard0-0", 4), s.place("redis-cluster-shard0-1", 5));
    let (d0, d1) = std::thread::scope(|sc| {
        let (a, b) = (sc.spawn(|| decision(&pod0.init())), sc.spawn(|| decision(&pod1.init())));
        (a.join().expect("shard0-0's init"), b.join().expect("shard0-1's init"))
    });
    assert_eq!((d0.what, d1.what), (("stage".into(), "empty".into()), ("stage".into(), "empty".into())));
    assert!(d0.generation.is_some() && d0.generation == d1.generation, "the two new pods did not stage one snapshot: {:?} {:?}", d0.generation, d1.generation);
    s.serve(&mut pod0);
    s.serve(&mut pod1);
    let after = s.nodes[0].counts();
    // The relay's capture is the one full sync (and fork); the pods' are partial.
    assert_eq!(after, (before.0 + 1, before.1 + 2, before.2 + 1), "the scale-up on shard 0's master (sync_full, sync_partial_ok, total_forks)");
    let ids = [my_id(&mut pod0.client()), my_id(&mut pod1.client())];
    for id in &ids {
        let line =
            wait_until("the cluster to list the pod as shard 0's replica", Duration::from_secs(30), || line_of(&mut s.nodes[1].client(), id).filter(|l| l.contains(&format!("slave {node0_id}"))));
        assert!(line.contains(".redis-cluster-shard0-headless.redis.svc.cluster.local"), "the pod does not announce its DNS name: {line}");
    }
    let (fq0, fq1) = (s.fqdn("redis-cluster-shard0-0"), s.fqdn("redis-cluster-shard0-1"));
    s.assert_identical(&node0, &fq0);
    s.assert_identical(&node0, &fq1);

    // 2. A rolling restart: the server's own RDB kept, nothing pulled, one partial resync.
    write(&mut s.nodes[0].client(), &tag, "b", 1000);
    let before = s.nodes[0].counts();
    let (mut pod1, d) = s.restart(pod1, 5);
    assert_eq!(d.what, ("keep".into(), "resumes_partially".into()));
    s.serve(&mut pod1);
    assert_eq!(s.nodes[0].counts(), (before.0, before.1 + 1, before.2), "the restart on shard 0's master");
    s.assert_identical(&node0, &fq1);

    // 3. Rescheduled: a new address, the same volume; kept; the cluster learns the address from the
    //    postStart MEET (its name follows it).
    let before = s.nodes[0].counts();
    let (mut pod0, d) = s.restart(pod0, 6);
    assert_eq!(d.what, ("keep".into(), "resumes_partially".into()));
    s.serve(&mut pod0);
    assert_eq!(s.nodes[0].counts(), (before.0, before.1 + 1, before.2), "the reschedule on shard 0's master");
    let new_ip = s.lab.hosts[6].ip.clone();
    for n in &s.nodes {
        // The new address, and the bus link to it up (a master's vote for this pod travels on it).
        wait_until("the cluster to learn the rescheduled pod's address", Duration::from_secs(30), || {
            line_of(&mut n.client(), &ids[0]).filter(|l| l.contains(&format!(" {new_ip}:6379@")) && l.split_whitespace().nth(7) == Some("connected"))
        });
    }
    s.assert_identical(&node0, &fq0);

    // 4. Failover to shard0-0 (CLUSTER FAILOVER, as an operator or a failing master would cause):
    //    redis-cluster-0 and shard0-1 follow it. Its next start keeps everything (a master serving
    //    slots); shard0-1's next start follows the shard's current master, asked of the cluster
    //    (the manifest names only the headless Service), and keeps its RDB.
    write(&mut s.nodes[0].client(), &tag, "c", 1000);
    // A manual failover needs the replica's bus link to its master up: just rescheduled, it may
    // still be connecting ("Master is down or failed").
    wait_until("shard0-0 to see its master on the bus", Duration::from_secs(30), || line_of(&mut pod0.client(), &node0_id).filter(|l| l.contains(" connected") && !l.contains("fail")).map(|_| ()));
    pod0.client().cmd(&["CLUSTER", "FAILOVER"]).expect("CLUSTER FAILOVER");
    let new_master = |h: &str| h == fq0 || h == new_ip;
    let deadline = Instant::now() + Duration::from_secs(60);
    // A manual failover the server gave up on (its votes lost on a bus link still reconnecting:
    // "Manual failover timed out" after 5 s) is asked again, as an operator would.
    let mut asked = Instant::now();
    loop {
        if asked.elapsed() > Duration::from_secs(8) && pod0.client().info("replication").is_ok_and(|i| i.get("role") == Some("slave")) {
            pod0.client().cmd(&["CLUSTER", "FAILOVER"]).expect("CLUSTER FAILOVER, again");
            asked = Instant::now();
        }
        let role = |c: &mut client::Client| -> Result<Seen, client::Error> {
            c.info("replication").map(|i| (i.get("role").map(str::to_string), i.get("master_host").map(str::to_string), i.get("master_link_status").map(str::to_string)))
        };
        let (p0, n0, p1) = (role(&mut pod0.client()), role(&mut s.nodes[0].client()), role(&mut pod1.client()));
        let follows = |r: &Result<Seen, client::Error>| matches!(r, Ok((_, Some(h), Some(l))) if new_master(h) && l == "up");
        if matches!(&p0, Ok((Some(r), _, _)) if r == "master") && follows(&n0) && follows(&p1) {
            break;
        }
        assert!(Instant::now() < deadline, "the failover to shard0-0 did not complete: shard0-0 {p0:?}, redis-cluster-0 {n0:?}, shard0-1 {p1:?}");
        std::thread::sleep(Duration::from_millis(100)); // Polling with a deadline.
    }
    write(&mut pod0.client(), &tag, "d", 1000);
    let (mut pod0, d) = s.restart(pod0, 6);
    assert_eq!(d.what, ("keep".into(), "serves_slots".into()));
    s.serve(&mut pod0);
    assert_eq!(pod0.client().info("replication").unwrap().get("role"), Some("master"), "the promoted pod came back as a replica");
    // Its replicas (redis-cluster-0 and shard0-1) come back to it with partial resyncs: the
    // server restored its history from the RDB it wrote at SIGTERM.
    wait_until("the promoted pod's replicas to come back", Duration::from_secs(30), || (pod0.info_num("replication", "connected_slaves") == 2).then_some(()));
    let before = sync_counts(&mut pod0.client());
    assert_eq!((before.0, before.1), (0, 2), "the promoted pod's replicas after its restart (sync_full, sync_partial_ok)");
    let (mut pod1, d) = s.restart(pod1, 5);
    assert_eq!(d.what, ("keep".into(), "resumes_partially".into()));
    s.serve(&mut pod1);
    let after = sync_counts(&mut pod0.client());
    assert_eq!(after, (before.0, before.1 + 1, before.2), "shard0-1's restart after the failover, on its new master (sync_full, sync_partial_ok, total_forks)");
    assert!(pod1.client().info("replication").unwrap().get("master_host").is_some_and(|h| h == fq0 || h == new_ip), "shard0-1 does not follow the promoted pod");
    s.assert_identical(&fq0, &fq1);
    s.assert_identical(&fq0, &node0);
    drop((pod0, pod1));
}
