//! A replicated release of the official Valkey chart (valkey-io/valkey-helm) with our values,
//! contrib/k8s/helm/valkey-io-valkey-values.yaml, lived through its pods' life in namespace pods
//! (crates/cli/tests/pods: each pod a network namespace with a directory per volume, the claims
//! directories that outlive the pods, the names in /etc/netns/NS/hosts).
//!
//! The chart is not here to render (no network to its repository, and its code is not ours to
//! commit), so the test renders what its templates make of these values, as read from chart 0.11.0
//! (commit dbcf6a6): the StatefulSet `valkey` (serviceName valkey-headless, claim valkey-data at
//! /data, pod and container security contexts, POD_INDEX from the pod-index label), its init
//! container running the init-scripts ConfigMap's init.sh, modelled in [`CHART_INIT`]: it writes
//! /data/conf/valkey.conf (port, dir /data, the ACL file from auth.aclUsers and the users Secret; on
//! pods other than 0 replicaof pod 0's stable name, replica-announce-ip, masterauth, masteruser)
//! and appends valkeyConfig; then the values' extraInitContainers; the server `valkey-server
//! /data/conf/valkey.conf` with the values' env, extraVolumeMounts and readinessProbe.customProbe.
//! What the values say is used as they say it: the stage step's own command, the probe's.
//!
//! The life (Valkey 9.1 plays the image's valkey-server): pod 0, the primary, whose stage step does
//! nothing with no relay running and leaves the chart's config as it was; the relay's pod
//! (relay.yaml, --master the chart's Service); pod 1 staged from a capture of pod 0 (the one fork),
//! one partial resync, no full sync; the relay's pod replaced and pod 2 staged from a capture of
//! pod 1 (no fork on pod 0); a rolling update (pods 2, 1, then 0, as the StatefulSet does it): each
//! replica keeps its RDB written at SIGTERM and pulls nothing, and the primary's stage step again
//! does nothing, its own RDB loaded, the replicas resyncing partially with it. Each replica Ready only when linked and loaded, the primary when loaded; the stage
//! step never changes the config the chart's init step wrote; the data identical (`fastrepl
//! verify`). Servers run as root, not uid 1000 (a container runtime's to enforce).

mod common;
mod pods;
use common::*;
use fixtures::netns::{self, Lab};
use pods::*;
use serde_json::{json, Value};

use std::path::{Path, PathBuf};
use std::time::Duration;

/// The release: name and namespace (the values' comments name these).
const RELEASE: &str = "valkey";
const NAMESPACE: &str = "redis";
/// The chart version whose templates the rendering below follows.
const CHART_VERSION: &str = "0.11.0";

const RELAY_HOST: usize = 0;
/// Pod N runs on host N + 1; a host of its own per pod.
const HOSTS: usize = 4;

/// The chart's init.sh as its template renders it for a release with auth and replicas on, in our
/// words: the server's config and its ACL file, written fresh at every start. `@ACL@` is replaced by
/// one line per auth.aclUsers entry, `@REPL_KEY@` by the replication user's password key, `@REPL_USER@`
/// by replica.replicationUser.
const CHART_INIT: &str = r#"#!/bin/sh
set -eu
conf=/data/conf/valkey.conf
mkdir -p /data/conf
rm -f "$conf"
{
  echo "port 6379"
  echo "protected-mode no"
  echo "bind * -::*"
  echo "dir /data"
  echo "aclfile /etc/valkey/users.acl"
} >> "$conf"
mkdir -p /etc/valkey
rm -f /etc/valkey/users.acl
umask 077
@ACL@
chmod 0400 /etc/valkey/users.acl
if [ "${POD_INDEX:-0}" != 0 ]; then
  {
    echo "replicaof @RELEASE@-0.@RELEASE@-headless.@NAMESPACE@.svc.cluster.local 6379"
    echo "replica-announce-ip @RELEASE@-$POD_INDEX.@RELEASE@-headless.@NAMESPACE@.svc.cluster.local"
    echo "masterauth $(cat /valkey-users-secret/@REPL_KEY@)"
    echo "masteruser @REPL_USER@"
  } >> "$conf"
fi
if [ -f /usr/local/etc/valkey/valkey.conf ]; then
  cat /usr/local/etc/valkey/valkey.conf >> "$conf"
fi
"#;

/// The chart's defaults (its values.yaml, 0.11.0) for what the values leave to it: the pod's and the
/// containers' security contexts.
fn chart_default(key: &str) -> Value {
    match key {
        "podSecurityContext" => json!({"fsGroup": 1000, "runAsUser": 1000, "runAsGroup": 1000, "seccompProfile": {"type": "RuntimeDefault"}}),
        "securityContext" => json!({"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}, "readOnlyRootFilesystem": true, "runAsNonRoot": true, "runAsUser": 1000}),
        _ => panic!("no default for {key}"),
    }
}

/// A top-level value, or the chart's default for it.
fn value_or_default(v: &Value, key: &str) -> Value {
    if v[key].is_null() {
        chart_default(key)
    } else {
        v[key].clone()
    }
}

/// The values file, parsed.
fn values(python: &Path) -> Value {
    let path = k8s_dir().join("helm/valkey-io-valkey-values.yaml");
    yaml_documents(python, &path).into_iter().next().expect("the values file is one document")
}

/// What the chart renders from `v` that a pod's life needs: the StatefulSet and its ConfigMaps.
fn render(v: &Value) -> (Value, Vec<Value>) {
    let tag = v["image"]["tag"].as_str().expect("the values pin image.tag");
    let image = format!("valkey/valkey:{tag}");
    assert_eq!(v["auth"]["enabled"], true, "the values turn auth on");
    assert_eq!(v["replica"]["enabled"], true, "the values make a replicated release");
    let secret = v["auth"]["usersExistingSecret"].as_str().expect("auth.usersExistingSecret");
    let users = v["auth"]["aclUsers"].as_object().expect("auth.aclUsers");
    assert!(users.contains_key("default"), "the chart requires the default user");
    let key_of = |u: &str| users[u]["passwordKey"].as_str().unwrap_or(u).to_string();
    let acl: Vec<String> = users
        .iter()
        .map(|(u, spec)| {
            format!(
                "printf 'user {u} on #%s {}\\n' \"$(printf %s \"$(cat /valkey-users-secret/{})\" | sha256sum | cut -d' ' -f1)\" >> /etc/valkey/users.acl",
                spec["permissions"].as_str().expect("permissions"),
                key_of(u)
            )
        })
        .collect();
    let repl_user = v["replica"]["replicationUser"].as_str().unwrap_or("default");
    let init = CHART_INIT.replace("@ACL@", &acl.join("\n")).replace("@REPL_KEY@", &key_of(repl_user)).replace("@REPL_USER@", repl_user).replace("@RELEASE@", RELEASE).replace("@NAMESPACE@", NAMESPACE);
    let pod_index = json!({"name": "POD_INDEX", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['apps.kubernetes.io/pod-index']"}}});
    let sc = value_or_default(v, "securityContext");
    let chart_init = json!({
        "name": format!("{RELEASE}-init"), "image": image, "securityContext": sc, "command": ["/scripts/init.sh"], "env": [pod_index],
        "volumeMounts": [
            {"name": "valkey-data", "mountPath": "/data"}, {"name": "scripts", "mountPath": "/scripts"},
            // The chart mounts valkey.conf with subPath; the directory holds that one file.
            {"name": "valkey-config", "mountPath": "/usr/local/etc/valkey"},
            {"name": "valkey-acl", "mountPath": "/etc/valkey"}, {"name": "valkey-users-secret", "mountPath": "/valkey-users-secret", "readOnly": true},
        ],
    });
    let mut inits = vec![chart_init];
    inits.extend(v["extraInitContainers"].as_array().cloned().unwrap_or_default());
    let mut env = vec![pod_index];
    for (k, val) in v["env"].as_object().into_iter().flatten() {
        env.push(json!({"name": k, "value": val.as_str().expect("env values are strings")}));
    }
    let mut mounts = vec![json!({"name": "valkey-data", "mountPath": "/data"}), json!({"name": "valkey-acl", "mountPath": "/etc/valkey"})];
    mounts.extend(v["extraVolumeMounts"].as_array().cloned().unwrap_or_default());
    let mut server = json!({"name": RELEASE, "image": image, "command": ["valkey-server"], "args": ["/data/conf/valkey.conf"], "securityContext": sc, "env": env, "volumeMounts": mounts});
    if v["readinessProbe"]["enabled"] == true {
        server["readinessProbe"] = v["readinessProbe"]["customProbe"].clone();
    }
    let mut volumes = vec![
        json!({"name": "scripts", "configMap": {"name": format!("{RELEASE}-init-scripts"), "defaultMode": 0o555}}),
        json!({"name": "valkey-acl", "emptyDir": {"medium": "Memory"}}),
        json!({"name": "valkey-config", "configMap": {"name": format!("{RELEASE}-config")}}),
        json!({"name": "valkey-users-secret", "secret": {"secretName": secret, "defaultMode": 0o400}}),
    ];
    volumes.extend(v["extraVolumes"].as_array().cloned().unwrap_or_default());
    let sts = json!({
        "kind": "StatefulSet", "metadata": {"name": RELEASE, "namespace": NAMESPACE},
        "spec": {
            "serviceName": format!("{RELEASE}-headless"), "replicas": v["replica"]["replicas"].as_u64().unwrap_or(2) + 1, "podManagementPolicy": "OrderedReady",
            "volumeClaimTemplates": [{"metadata": {"name": "valkey-data"}}],
            "template": {"spec": {"securityContext": value_or_default(v, "podSecurityContext"), "initContainers": inits, "containers": [server], "volumes": volumes}},
        },
    });
    let config_maps = vec![
        json!({"kind": "ConfigMap", "metadata": {"name": format!("{RELEASE}-init-scripts"), "namespace": NAMESPACE}, "data": {"init.sh": init}}),
        json!({"kind": "ConfigMap", "metadata": {"name": format!("{RELEASE}-config"), "namespace": NAMESPACE}, "data": {"valkey.conf": format!("{}\n", v["valkeyConfig"].as_str().unwrap_or(""))}}),
    ];
    (sts, config_maps)
}

/// The stage step's arguments: the relay by its Service's name, the master from the chart's config.
fn assert_stage_reads_the_charts_config(sts: &Value, relay: &str) {
    let inits = sts["spec"]["template"]["spec"]["initContainers"].as_array().unwrap();
    assert!(inits[0]["name"] == format!("{RELEASE}-init"), "the chart's init container runs first");
    let stage = inits.iter().find(|c| c["name"] == "stage").expect("a stage init container in extraInitContainers");
    let args = stage["args"].to_string();
    for want in [format!("\"--relay\",\"{relay}\""), "\"--server-config\",\"/data/conf/valkey.conf\"".into(), "\"--master-from-server-config\"".into(), "\"--dir\",\"/data\"".into()] {
        assert!(args.contains(&want), "the stage step's arguments lack {want}: {args}");
    }
    assert!(!args.contains("\"--master\""), "the master is the chart's to say: {args}");
    // Under the chart's security context: its uid, group and restrictions.
    let (mine, charts) = (&stage["securityContext"], &sts["spec"]["template"]["spec"]["initContainers"][0]["securityContext"]);
    for k in ["runAsUser", "runAsNonRoot", "allowPrivilegeEscalation", "readOnlyRootFilesystem"] {
        assert_eq!(mine[k], charts[k], "the stage step's securityContext.{k} is not the chart's");
    }
    assert_eq!(mine["runAsGroup"], sts["spec"]["template"]["spec"]["securityContext"]["runAsGroup"], "the stage step's group is not the pod's");
}

struct Release {
    relay: Option<Pod>,
    dns: Dns,
    lab: Lab,
    m: Manifests,
    relay_addr: String,
    /// relay.yaml's Deployment with --master the chart's Service.
    relay_deployment: Value,
    sts: Value,
    claims_root: tempfile::TempDir,
    /// Who plays `valkey-cli` in the probe (`CLI`).
    cli: PathBuf,
}

impl Release {
    fn host(pod: &str) -> usize {
        pod.rsplit('-').next().unwrap().parse::<usize>().unwrap() + 1
    }

    fn fqdn(&self, pod: &str) -> String {
        pod_fqdn(&self.sts, pod)
    }

    fn start_relay(&mut self) {
        if let Some(mut old) = self.relay.take() {
            old.terminate();
        }
        self.relay = Some(start_relay_pod(&self.m, &self.relay_deployment, &self.lab.hosts[RELAY_HOST], &self.lab.hosts[RELAY_HOST].ns, &self.relay_addr));
    }

    fn served(&self) -> u64 {
        relay_served(&self.lab.hosts[RELAY_HOST].ns, &self.relay_addr)
    }

    /// Pod `pod` created with its claim and its name published, its init containers run: the stage
    /// step must leave the config the chart's init step wrote byte for byte. The stage decision and
    /// that config.
    fn create(&mut self, pod: &str) -> (Pod, Start, String) {
        let h = self.lab.hosts[Self::host(pod)].clone();
        self.dns.set(&self.fqdn(pod), Some(&h.ip)); // publishNotReadyAddresses
        let claims = pod_claims(&self.sts, self.claims_root.path(), pod);
        let claim = claims["valkey-data"].clone();
        let mut p = Pod::create(&self.m, &self.sts, pod, &h, &claims);
        p.flavor = Flavor::Valkey91;
        let conf = claim.join("conf/valkey.conf");
        let mut written = None;
        let outs = p.init_with(|name| {
            let now = std::fs::read_to_string(&conf).unwrap_or_else(|e| panic!("{pod}: no config after init container {name}: {e}"));
            match &written {
                None => written = Some(now),
                Some(before) => assert_eq!(&now, before, "{pod}: init container {name} changed the chart's config"),
            }
        });
        (p, decision(&outs), written.expect("the chart's init step ran"))
    }

    /// The server started as the chart starts it, its link down first for a replica: not Ready while
    /// cut off; Ready once linked and loaded (the primary: once loaded), after one partial resync
    /// on the primary and no full sync.
    fn serve(&mut self, pod: &mut Pod, primary: Option<&Pod>) {
        let host = Self::host(&pod.name);
        let before = primary.map(|p| sync_counts(&mut p.client()));
        if primary.is_some() {
            self.lab.set_link(host, false).unwrap();
        }
        pod.run();
        wait_until("the server to answer in its pod", Duration::from_secs(15), || netns::within(&pod.ns, || std::net::TcpStream::connect("127.0.0.1:6379").is_ok()).ok()?.then_some(()));
        if primary.is_some() {
            let (ready, said) = self.ready(pod);
            assert!(!ready && said.contains("not linked"), "{}: ready while cut off from the primary: {said}", pod.name);
            self.lab.set_link(host, true).unwrap();
        }
        pod.wait_ready(Duration::from_secs(30), |p| self.ready(p));
        if primary.is_some() {
            assert_eq!(pod.client().info("replication").unwrap().get("master_link_status"), Some("up"), "{}: ready but not linked", pod.name);
        }
        if let (Some(p), Some(before)) = (primary, before) {
            let after = sync_counts(&mut p.client());
            assert_eq!((after.0, after.1), (before.0, before.1 + 1), "{}: the start was not one partial resync (sync_full, sync_partial_ok)", pod.name);
        }
    }

    /// The readiness probe, with `CLI` (the image's valkey-cli) played by [`Release::cli`].
    fn ready(&self, pod: &Pod) -> (bool, String) {
        let c = &pod.spec["containers"][0];
        let mut cmd = pod.command(c, Some(&c["readinessProbe"]["exec"]["command"]));
        cmd.env("CLI", &self.cli);
        let out = cmd.output().expect("run the readiness probe");
        (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
    }

    /// `fastrepl verify` between the primary and a replica pod, by their DNS names, once it caught up.
    fn assert_identical(&self, primary: &Pod, pod: &str) {
        wait_until(&format!("{pod} to catch up"), Duration::from_secs(30), || {
            let i = primary.client().info("replication").ok()?;
            let m = i.num("master_repl_offset")?;
            let line = i.0.into_iter().find(|(_, v)| v.contains(&self.fqdn(pod)))?.1;
            let off: i64 = line.split(',').find_map(|kv| kv.strip_prefix("offset="))?.parse().ok()?;
            (off >= m).then_some(())
        });
        let (a, b) = (format!("{}:6379", self.fqdn(&primary.name)), format!("{}:6379", self.fqdn(pod)));
        let (ok, out, err) = fastrepl_in(&primary.ns, &["verify", &a, &b], &[("FASTREPL_VERIFY_PASSWORD", PASSWORD)]);
        assert!(ok, "verify {a} {b}:\n{out}{err}");
    }

    /// A rolling update's restart of replica `pod`: SIGTERM (the RDB saved), the pod created again
    /// with its claim: the stage step keeps the RDB, the relay serves nothing, one partial resync.
    fn restart_replica(&mut self, mut pod: Pod, primary: &Pod) -> Pod {
        let name = pod.name.clone();
        self.assert_identical(primary, &name);
        let offset = pod.info_num("replication", "slave_repl_offset");
        pod.terminate();
        drop(pod);
        write_keys(&mut primary.client(), &format!("{name}-down"), "d", 300);
        let served = self.served();
        let (mut pod, d, conf) = self.create(&name);
        assert!(conf.contains("replicaof "), "{name}: the chart's config is a replica's");
        assert_eq!(d.what, ("keep".into(), "resumes_partially".into()), "{name}: a rolling restart did not keep its RDB");
        assert!(d.offset as i64 >= offset, "{name}: the kept RDB is older than its shutdown (offset {} < {offset})", d.offset);
        assert_eq!(self.served(), served, "{name}: the relay served bytes for a kept volume");
        self.serve(&mut pod, Some(primary));
        self.assert_identical(primary, &name);
        pod
    }
}

/// Who plays the image's valkey-cli: the one shipped beside the fixtures' Valkey 9.1, else
/// Debian's redis-cli (the probe's INFO fields are the same).
fn cli() -> Option<PathBuf> {
    let beside = Flavor::Valkey91.binary().with_file_name("valkey-cli");
    [beside, PathBuf::from("/usr/bin/redis-cli")].into_iter().find(|p| p.is_file())
}

#[test]
fn a_valkey_chart_release_lives_through_its_life() {
    let Some(m) = preconditions() else { return };
    require_server(Flavor::Valkey91);
    let Some(cli) = cli() else { return fixtures::skip("no valkey-cli or redis-cli to play the probe's CLI") };
    let python = python_with_yaml().expect("preconditions checked PyYAML");
    let v = values(&python);
    let (sts, config_maps) = render(&v);
    let mut m = m;
    m.docs.extend(config_maps);
    let relay_addr = format!("{}:7400", m.service_name("fastrepl-relay"));
    assert_stage_reads_the_charts_config(&sts, &relay_addr);
    // The stage step's --server names the image's version: one tag for both.
    let stage_args = sts["spec"]["template"]["spec"]["initContainers"][1]["args"].to_string();
    assert!(stage_args.contains(&format!("\"valkey-{}\"", v["image"]["tag"].as_str().unwrap())), "stage's --server is not the image's tag: {stage_args}");
    // The relay: relay.yaml with its --master the chart's Service (pod 0 alone with replicas on).
    let service = format!("{RELEASE}.{NAMESPACE}.{CLUSTER_DOMAIN}:6379");
    let mut relay_deployment = m.get("Deployment", "fastrepl-relay").clone();
    let args = relay_deployment["spec"]["template"]["spec"]["containers"][0]["args"].as_array_mut().expect("the relay's args");
    let i = args.iter().position(|a| a == "--master").expect("relay.yaml names --master");
    args[i + 1] = Value::from(service.clone());

    let lab = Lab::new(HOSTS, None).unwrap_or_else(|e| panic!("make the lab: {e}"));
    let mut dns = Dns::new(&lab);
    dns.set(&m.service_name("fastrepl-relay"), Some(&lab.hosts[RELAY_HOST].ip));
    dns.set(&format!("{RELEASE}.{NAMESPACE}.{CLUSTER_DOMAIN}"), Some(&lab.hosts[Release::host("valkey-0")].ip));
    let mut r = Release { relay: None, dns, lab, m, relay_addr, relay_deployment, sts, claims_root: tempfile::tempdir().unwrap(), cli };
    eprintln!("rendering valkey-io/valkey-helm {CHART_VERSION}'s templates for the values");

    // 1. Pod 0, the primary: its config names no master; stage does nothing (no relay runs yet) and
    //    leaves the config as the chart wrote it. Ready once loaded, as a master.
    let (mut pod0, d, conf) = r.create("valkey-0");
    assert!(!conf.contains("replicaof"), "pod 0's config is the primary's: {conf}");
    assert!(conf.contains("appendonly no") && conf.contains("shutdown-on-sigterm save"), "the values' valkeyConfig is in the config: {conf}");
    assert_eq!(d.what, ("keep".into(), "primary".into()), "stage on pod 0");
    assert_eq!(d.generation, None, "stage pulled on pod 0");
    r.serve(&mut pod0, None);
    assert_eq!(pod0.client().info("replication").unwrap().get("role"), Some("master"));
    fixtures::data::fill_small_mixed(&mut pod0.client(), 3000);

    // 2. The relay, then pod 1: staged from a capture of the primary (no replica yet: the one fork).
    r.start_relay();
    let forks = sync_counts(&mut pod0.client()).2;
    let (mut pod1, d, conf) = r.create("valkey-1");
    assert!(conf.contains(&format!("replicaof {} 6379", r.fqdn("valkey-0"))), "pod 1 follows pod 0's stable name: {conf}");
    assert_eq!(d.what, ("stage".into(), "empty".into()), "stage on a new replica");
    r.serve(&mut pod1, Some(&pod0));
    assert_eq!(sync_counts(&mut pod0.client()).2, forks + 1, "the first capture is the primary's one fork");
    r.assert_identical(&pod0, "valkey-1");

    // 3. The relay's pod replaced: its capture for pod 2 is from pod 1 (--source auto, by the name
    //    the chart's config announces); the primary does not fork.
    r.start_relay();
    write_keys(&mut pod0.client(), "a", "a", 2000);
    let (forks, forks1) = (sync_counts(&mut pod0.client()).2, pod1.info_num("stats", "total_forks"));
    let (mut pod2, d, _) = r.create("valkey-2");
    assert_eq!(d.what, ("stage".into(), "empty".into()));
    r.serve(&mut pod2, Some(&pod0));
    assert_eq!(sync_counts(&mut pod0.client()).2, forks, "the primary forked for the second replica");
    assert!(pod1.info_num("stats", "total_forks") > forks1, "the relay did not capture from valkey-1");
    r.assert_identical(&pod0, "valkey-2");

    // 4. A rolling update, highest ordinal first: the replicas keep their RDBs and pull nothing...
    let full = sync_counts(&mut pod0.client()).0;
    let pod2 = r.restart_replica(pod2, &pod0);
    let pod1 = r.restart_replica(pod1, &pod0);
    assert_eq!(sync_counts(&mut pod0.client()).0, full, "a replica's restart cost the primary a full sync");
    // ...and the primary's stage step does nothing again, its own RDB loaded.
    let keys = pod0.client().cmd(&["DBSIZE"]).unwrap().as_int();
    pod0.terminate();
    drop(pod0);
    let served = r.served();
    let (mut pod0, d, conf) = r.create("valkey-0");
    assert!(!conf.contains("replicaof"));
    assert_eq!(d.what, ("keep".into(), "primary".into()), "stage on the restarted primary");
    assert_eq!(r.served(), served, "the relay served bytes for the primary");
    r.serve(&mut pod0, None);
    assert_eq!(pod0.client().cmd(&["DBSIZE"]).unwrap().as_int(), keys, "the primary did not load its own RDB");
    // The replicas follow it again.
    write_keys(&mut pod0.client(), "b", "b", 500);
    for p in [&pod1, &pod2] {
        wait_until(&format!("{} to link to the restarted primary", p.name), Duration::from_secs(60), || r.ready(p).0.then_some(()));
        r.assert_identical(&pod0, &p.name);
    }
    // Valkey 9.1 restores the primary's replication ID and offset from the RDB it saved at SIGTERM:
    // both replicas resync partially (its counters restarted with it).
    let (full, partial, _) = sync_counts(&mut pod0.client());
    assert_eq!((full, partial), (0, 2), "the replicas' resyncs with the restarted primary (sync_full, sync_partial_ok)");
    drop((pod0, pod1, pod2));
}
