//! A kubelet, small, for the pod-life tests (e2e_podlife, e2e_podlife_cluster): contrib/k8s read with
//! PyYAML, a pod's init containers, server, probes and hooks run as a kubelet would run them, each pod a
//! network namespace (fixtures::netns) with a directory per volume, and the cluster's DNS names as
//! /etc/netns/NS/hosts files.
#![allow(dead_code)]

use crate::common::*;
use fixtures::netns;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// The password a real Secret `redis-auth` would hold (secrets.example.yaml's names).
pub const PASSWORD: &str = "podlife0123456789abcdef0123456789";

/// The cluster's DNS suffix the manifests use.
pub const CLUSTER_DOMAIN: &str = "svc.cluster.local";

// ---- The manifests, read by PyYAML (as e2e_contrib.rs reads them) ----

pub fn k8s_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../contrib/k8s")
}

/// Debian's python3 with PyYAML (scripts/setup.sh installs python3-yaml), or None.
pub fn python_with_yaml() -> Option<PathBuf> {
    if fixtures::skip::unavailable("python3") {
        return None;
    }
    let python = PathBuf::from("/usr/bin/python3");
    let ok = Command::new(&python).args(["-c", "import yaml"]).output().is_ok_and(|o| o.status.success());
    ok.then_some(python)
}

/// What a pod's life needs here, or None once it said what is missing (the test then counts as
/// skipped): namespaces, PyYAML to read the manifests, redis-cli for the probe scripts, Redis 7.0.
/// The manifests, read.
pub fn preconditions() -> Option<Manifests> {
    if !netns::available() {
        fixtures::skip("network namespaces unavailable (root and `ip` needed)");
        return None;
    }
    let Some(python) = python_with_yaml() else {
        fixtures::skip("no python3 with PyYAML to read the manifests (scripts/setup.sh installs python3-yaml)");
        return None;
    };
    if !Path::new("/usr/bin/redis-cli").is_file() {
        fixtures::skip("no redis-cli (Debian's redis-tools) for the probe scripts");
        return None;
    }
    require_server(Flavor::Redis70);
    Some(Manifests::load(&python))
}

/// A workload's `stage` init container's arguments name these `--relay` and `--master` addresses
/// (the names the test serves are the manifests' own).
pub fn assert_stage_names(workload: &Value, relay: &str, master: &str) {
    let inits = workload["spec"]["template"]["spec"]["initContainers"].as_array().expect("init containers");
    let args = inits.iter().find(|c| c["name"] == "stage").expect("a stage init container")["args"].to_string();
    assert!(args.contains(&format!("\"{relay}\"")) && args.contains(&format!("\"{master}\"")), "stage's --relay/--master are not {relay}/{master}: {args}");
}

/// The documents of a YAML file as JSON, parsed by PyYAML.
pub fn yaml_documents(python: &Path, path: &Path) -> Vec<Value> {
    let script = "import json,sys,yaml; print(json.dumps([d for d in yaml.safe_load_all(open(sys.argv[1])) if d is not None]))";
    let out = Command::new(python).args(["-c", script]).arg(path).output().expect("run python3");
    assert!(out.status.success(), "{} does not parse as YAML:\n{}", path.display(), String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice::<Value>(&out.stdout).expect("PyYAML's JSON").as_array().cloned().unwrap_or_default()
}

/// Every document of contrib/k8s/*.yaml.
pub struct Manifests {
    pub docs: Vec<Value>,
}

impl Manifests {
    pub fn load(python: &Path) -> Manifests {
        let mut docs = Vec::new();
        for f in ["replicas.yaml", "replicas-aof.yaml", "relay.yaml", "cluster-shard.yaml", "scripts.yaml", "namespace.yaml"] {
            docs.extend(yaml_documents(python, &k8s_dir().join(f)));
        }
        Manifests { docs }
    }

    pub fn get(&self, kind: &str, name: &str) -> &Value {
        self.docs.iter().find(|d| d["kind"] == kind && d["metadata"]["name"] == name).unwrap_or_else(|| panic!("no {kind} {name} in contrib/k8s"))
    }

    /// A Service's cluster DNS name.
    pub fn service_name(&self, name: &str) -> String {
        let svc = self.get("Service", name);
        format!("{}.{}.{CLUSTER_DOMAIN}", name, svc["metadata"]["namespace"].as_str().expect("namespace"))
    }
}

// ---- What the test changes in what the manifests say: all of it, in one place ----

/// A container's program: the images are not run (no container runtime here), their binaries are,
/// as root (the pods' runAsUser and read-only root are a container runtime's to enforce).
/// `redis:7.2.4` is played by the fixtures' Redis 7.0 (Debian's): same configuration, same probes;
/// `--server` (the image's version for `stage`) is changed to match it, below.
pub fn program(image: &str, word: &str) -> PathBuf {
    program_for(Flavor::Redis70, image, word)
}

/// [`program`] with the server played by `flavor` (e2e_podlife_aof runs the manifest's server
/// command with each flavour it tests).
pub fn program_for(flavor: Flavor, image: &str, word: &str) -> PathBuf {
    match word {
        "" if image.starts_with("fastrepl:") => PathBuf::from(env!("CARGO_BIN_EXE_fastrepl")),
        "redis-server" | "valkey-server" => flavor.binary(),
        "sh" => PathBuf::from("/bin/sh"),
        w => panic!("a container runs {w:?} from {image}: teach the test what that is"),
    }
}

/// The fixtures' Redis version as `stage --server` names it (redis-7.0.15).
pub fn server_version() -> String {
    server_version_of(Flavor::Redis70)
}

/// A flavour's version as `stage --server` names it (redis-7.0.15, valkey-9.1.2).
pub fn server_version_of(flavor: Flavor) -> String {
    let out = Command::new(flavor.binary()).arg("--version").output().expect("server --version");
    let text = String::from_utf8_lossy(&out.stdout);
    let v = text.split("v=").nth(1).and_then(|s| s.split_whitespace().next()).expect("a version in server --version");
    let name = if text.starts_with("Valkey") { "valkey" } else { "redis" };
    format!("{name}-{v}")
}

/// `stage --server redis-7.2.4` names the image's server; here the one that plays it.
pub fn substitute_server(words: &mut [String]) {
    substitute_server_of(Flavor::Redis70, words)
}

fn substitute_server_of(flavor: Flavor, words: &mut [String]) {
    if let Some(i) = words.iter().position(|w| w == "--server") {
        words[i + 1] = server_version_of(flavor);
    }
}

/// A path the manifests mount (`/data`, `/etc/redis`, ...) moved to the pod's directory for that
/// volume, in an argument, a script or a config file. Longest mount path first.
pub fn substitute(text: &str, mounts: &[(String, PathBuf)]) -> String {
    let mut s = text.to_string();
    for (from, to) in mounts {
        s = s.replace(from.as_str(), to.to_str().expect("a UTF-8 temp path"));
    }
    s
}

/// What the Secrets hold (secrets.example.yaml's names and keys).
pub fn secret(name: &str, key: &str) -> &'static str {
    SECRETS.iter().find(|(n, k, _)| (*n, *k) == (name, key)).map(|(_, _, v)| *v).unwrap_or_else(|| panic!("a pod mounts Secret {name}/{key}, which the test does not know"))
}

/// Every Secret the manifests name: (name, key, value), one key each.
const SECRETS: &[(&str, &str, &str)] = &[("fastrepl-relay-token", "token", TOKEN), ("redis-auth", "password", PASSWORD)];

/// The keys a Secret holds, for a volume that mounts it whole.
pub fn secret_keys(name: &str) -> Vec<&'static str> {
    let keys: Vec<&str> = SECRETS.iter().filter(|(n, _, _)| *n == name).map(|(_, k, _)| *k).collect();
    assert!(!keys.is_empty(), "a pod mounts Secret {name}, which the test does not know");
    keys
}

// ---- Names: one hosts file per namespace ----

/// The cluster's DNS, as /etc/netns/NS/hosts for every namespace of the lab; removed on drop.
pub struct Dns {
    namespaces: Vec<String>,
    names: BTreeMap<String, Vec<String>>,
}

impl Dns {
    pub fn new(lab: &netns::Lab) -> Dns {
        Dns { namespaces: lab.hosts.iter().map(|h| h.ns.clone()).collect(), names: BTreeMap::new() }
    }

    /// `name` resolves to `ip` (None: no longer) in every namespace, from now on.
    pub fn set(&mut self, name: &str, ip: Option<&str>) {
        self.set_all(name, ip.as_slice());
    }

    /// `name`'s first address: for connections made by the test process itself, which reads the
    /// host's /etc/hosts, not the namespaces' files (only `ip netns exec` bind-mounts those).
    pub fn lookup(&self, name: &str) -> Option<String> {
        self.names.get(name)?.first().cloned()
    }

    /// `name` resolves to every address of `ips` (a headless Service's one record per pod), from now on.
    pub fn set_all(&mut self, name: &str, ips: &[&str]) {
        match ips {
            [] => self.names.remove(name),
            _ => self.names.insert(name.to_string(), ips.iter().map(|s| s.to_string()).collect()),
        };
        let mut text = String::from("127.0.0.1 localhost\n");
        for (n, ips) in &self.names {
            for ip in ips {
                text.push_str(&format!("{ip} {n}\n"));
            }
        }
        for ns in &self.namespaces {
            let dir = Path::new("/etc/netns").join(ns);
            std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("create {}: {e}", dir.display()));
            // Written in place (same inode): `ip netns exec` bind-mounted this very file over
            // /etc/hosts for the processes already running, which then see the change.
            std::fs::write(dir.join("hosts"), &text).unwrap_or_else(|e| panic!("write {}/hosts: {e}", dir.display()));
        }
    }
}

impl Drop for Dns {
    fn drop(&mut self) {
        for ns in &self.namespaces {
            let _ = std::fs::remove_dir_all(Path::new("/etc/netns").join(ns));
        }
        // Only when empty: another run's or another tool's names stay.
        let _ = std::fs::remove_dir("/etc/netns");
    }
}

// ---- A kubelet, small: volumes, init containers, the server, probes, SIGTERM ----

/// A command in namespace `ns` with the environment the test's own `FASTREPL_*` variables removed.
pub fn in_ns(ns: &str, program: &Path, args: &[String], env: &[(String, String)]) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns]).arg(program).args(args);
    for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("FASTREPL_")) {
        c.env_remove(k);
    }
    c.envs(env.iter().map(|(k, v)| (k, v)));
    c
}

/// One pod of a workload: its namespace, its volumes, its main container's process.
pub struct Pod {
    pub name: String,
    /// The Kubernetes namespace of its workload (POD_NAMESPACE).
    pub namespace: String,
    /// Its network namespace and address.
    pub ns: String,
    pub ip: String,
    pub spec: Value,
    /// mountPath -> directory, longest first, for every container of the pod.
    pub mounts: Vec<(String, PathBuf)>,
    /// The pod's own volumes (config, scripts, emptyDir, Secrets): gone with the pod.
    pub _dir: tempfile::TempDir,
    pub main: Option<Proc>,
    /// Its native sidecars (init containers with restartPolicy Always), running beside `main`.
    pub sidecars: Vec<Proc>,
    /// Who plays the server image's `redis-server` (Redis 7.0 unless a test says otherwise).
    pub flavor: Flavor,
}

impl Pod {
    /// Create the pod `name` from a workload's template `spec` on `host`, its volume claims at
    /// `claims` (claim name -> a directory that outlives the pod).
    pub fn create(m: &Manifests, workload: &Value, name: &str, host: &netns::Host, claims: &BTreeMap<String, PathBuf>) -> Pod {
        let spec = &workload["spec"]["template"]["spec"];
        let dir = tempfile::Builder::new().prefix(&format!("pod-{name}-")).tempdir().unwrap();
        let volume_dir = |v: &str| claims.get(v).cloned().unwrap_or_else(|| dir.path().join(v));
        let mut mounts: Vec<(String, PathBuf)> = Vec::new();
        for c in containers(spec) {
            for vm in c["volumeMounts"].as_array().into_iter().flatten() {
                let (path, vol) = (vm["mountPath"].as_str().expect("mountPath"), vm["name"].as_str().expect("volume name"));
                match mounts.iter().find(|(p, _)| p == path) {
                    Some((_, d)) => assert_eq!(d, &volume_dir(vol), "{name}: {path} mounts two volumes"),
                    None => mounts.push((path.to_string(), volume_dir(vol))),
                }
            }
        }
        mounts.sort_by_key(|(p, _)| std::cmp::Reverse(p.len()));
        for v in spec["volumes"].as_array().into_iter().flatten() {
            let d = volume_dir(v["name"].as_str().expect("volume name"));
            std::fs::create_dir_all(&d).unwrap();
            if let Some(cm) = v["configMap"]["name"].as_str() {
                let data = m.get("ConfigMap", cm)["data"].as_object().unwrap_or_else(|| panic!("ConfigMap {cm} has no data"));
                for (file, text) in data {
                    std::fs::write(d.join(file), substitute(text.as_str().expect("ConfigMap text"), &mounts)).unwrap();
                    // defaultMode 0555 makes a script a program (the chart's `command: [/scripts/init.sh]`).
                    if let Some(mode) = v["configMap"]["defaultMode"].as_u64() {
                        std::fs::set_permissions(d.join(file), std::os::unix::fs::PermissionsExt::from_mode(mode as u32)).unwrap();
                    }
                }
            }
            // A whole Secret (no items): every key the test knows it holds, one file each.
            if let Some(name) = v["secret"]["secretName"].as_str() {
                for key in secret_keys(name) {
                    std::fs::write(d.join(key), secret(name, key)).unwrap();
                }
            }
            for src in v["projected"]["sources"].as_array().into_iter().flatten() {
                let s = &src["secret"];
                for item in s["items"].as_array().into_iter().flatten() {
                    let (key, path) = (item["key"].as_str().unwrap(), item["path"].as_str().unwrap());
                    std::fs::write(d.join(path), secret(s["name"].as_str().unwrap(), key)).unwrap();
                }
            }
        }
        for claim in claims.values() {
            std::fs::create_dir_all(claim).unwrap();
        }
        let namespace = workload["metadata"]["namespace"].as_str().expect("a namespace").to_string();
        Pod { name: name.to_string(), namespace, ns: host.ns.clone(), ip: host.ip.clone(), spec: spec.clone(), mounts, _dir: dir, main: None, sidecars: Vec::new(), flavor: Flavor::Redis70 }
    }

    /// A container's command line and environment, with the substitutions above.
    pub fn command(&self, c: &Value, exec: Option<&Value>) -> Command {
        let image = c["image"].as_str().expect("image");
        let strings = |v: &Value| v.as_array().into_iter().flatten().map(|w| w.as_str().expect("a string").to_string()).collect::<Vec<_>>();
        let mut words = match exec {
            Some(e) => strings(e),
            None => [strings(&c["command"]), strings(&c["args"])].concat(),
        };
        let program = match (c["command"].is_null() && exec.is_none(), words.first()) {
            (true, _) => program_for(self.flavor, image, ""),
            // A program on one of the pod's volumes (a ConfigMap's script): run from there.
            (false, Some(w)) if self.mounts.iter().any(|(m, _)| w.starts_with(&format!("{m}/"))) => PathBuf::from(substitute(&words.remove(0), &self.mounts)),
            (false, _) => program_for(self.flavor, image, &words.remove(0)),
        };
        substitute_server_of(self.flavor, &mut words);
        let words: Vec<String> = words.iter().map(|w| substitute(w, &self.mounts)).collect();
        let env: Vec<(String, String)> = c["env"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|e| {
                let value = match e["valueFrom"]["fieldRef"]["fieldPath"].as_str() {
                    Some("metadata.name") => self.name.clone(),
                    Some("metadata.namespace") => self.namespace.clone(),
                    Some("status.podIP") => self.ip.clone(),
                    // A StatefulSet's pod is named after its ordinal.
                    Some("metadata.labels['apps.kubernetes.io/pod-index']") => self.name.rsplit('-').next().expect("a pod name").to_string(),
                    Some(f) => panic!("a container reads field {f}, which the test does not provide"),
                    None => substitute(e["value"].as_str().expect("an env value"), &self.mounts),
                };
                (e["name"].as_str().expect("env name").to_string(), value)
            })
            .collect();
        in_ns(&self.ns, &program, &words, &env)
    }

    /// Run the init containers in order, each to success (a failure is Init:Error); their outputs by
    /// name. Native sidecars (restartPolicy Always) are not run here: [`Pod::start_sidecars`].
    pub fn init(&self) -> BTreeMap<String, String> {
        self.init_with(|_| ())
    }

    /// [`Pod::init`], calling `after` with each init container's name once it succeeded (to look at
    /// what it left before the next one runs).
    pub fn init_with(&self, mut after: impl FnMut(&str)) -> BTreeMap<String, String> {
        let mut outs = BTreeMap::new();
        for c in self.spec["initContainers"].as_array().into_iter().flatten().filter(|c| !is_sidecar(c)) {
            let name = c["name"].as_str().unwrap();
            let out = self.command(c, None).output().unwrap_or_else(|e| panic!("run {}/{name}: {e}", self.name));
            let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
            assert!(out.status.success(), "{}: init container {name} failed ({}):\n{text}", self.name, out.status);
            outs.insert(name.to_string(), String::from_utf8_lossy(&out.stdout).into_owned());
            after(name);
        }
        outs
    }

    /// Start the native sidecars, in order (the kubelet starts them after the init containers before
    /// them, before the main containers).
    pub fn start_sidecars(&mut self) {
        for c in self.spec["initContainers"].as_array().cloned().into_iter().flatten().filter(|c| is_sidecar(&c)) {
            let name = format!("{}/{}", self.name, c["name"].as_str().unwrap());
            self.sidecars.push(Proc::spawn(&name, self.command(&c, None)));
        }
    }

    /// What a sidecar said so far (its stdout and stderr), by container name.
    pub fn sidecar_output(&self, container: &str) -> String {
        let name = format!("{}/{container}", self.name);
        self.sidecars.iter().find(|p| p.name == name).map(|p| p.output()).unwrap_or_default()
    }

    /// Stop the sidecars as the kubelet does once the main containers have exited: SIGTERM, in
    /// reverse order, each to exit 0 within the grace period.
    pub fn terminate_sidecars(&mut self) {
        let grace = self.spec["terminationGracePeriodSeconds"].as_u64().unwrap_or(30);
        while let Some(mut p) = self.sidecars.pop() {
            let ok = Command::new("kill").args(["-TERM", &p.pid().to_string()]).status().is_ok_and(|s| s.success());
            assert!(ok, "SIGTERM to {}", p.name);
            let code = p.wait(Duration::from_secs(grace));
            assert_eq!(code, Some(0), "{} did not exit cleanly at SIGTERM:\n{}", p.name, p.output());
        }
    }

    /// Start the main container (the first of `containers`).
    pub fn run(&mut self) {
        let c = self.spec["containers"][0].clone();
        self.main = Some(Proc::spawn(&format!("{}/{}", self.name, c["name"].as_str().unwrap()), self.command(&c, None)));
    }

    /// The main container's postStart hook (an exec hook), to its end: (success, what it said).
    pub fn post_start(&self) -> (bool, String) {
        let c = &self.spec["containers"][0];
        let out = self.command(c, Some(&c["lifecycle"]["postStart"]["exec"]["command"])).output().expect("run the postStart hook");
        (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
    }

    /// The readiness probe's verdict (an exec probe of the main container): (ready, what it said).
    pub fn ready(&self) -> (bool, String) {
        let c = &self.spec["containers"][0];
        let out = self.command(c, Some(&c["readinessProbe"]["exec"]["command"])).output().expect("run the readiness probe");
        (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
    }

    /// Stop as Kubernetes does: SIGTERM to the main container, which must exit within the grace period.
    pub fn terminate(&mut self) {
        let Some(mut p) = self.main.take() else { return };
        let grace = self.spec["terminationGracePeriodSeconds"].as_u64().unwrap_or(30);
        let ok = Command::new("kill").args(["-TERM", &p.pid().to_string()]).status().is_ok_and(|s| s.success());
        assert!(ok, "SIGTERM to {}", p.name);
        let code = p.wait(Duration::from_secs(grace));
        assert_eq!(code, Some(0), "{} did not exit cleanly at SIGTERM:\n{}", p.name, p.output());
    }

    /// An authenticated client of the pod's server (port 6379 inside its namespace).
    pub fn client(&self) -> client::Client {
        connect(&self.ns, "127.0.0.1:6379")
    }

    pub fn info_num(&self, section: &str, k: &str) -> i64 {
        self.client().info(section).unwrap().num(k).unwrap_or_else(|| panic!("{}: INFO {section} has no {k}", self.name))
    }
}

// ---- What every pod-life suite does the same way ----

/// A StatefulSet pod's stable DNS name (its headless Service): `pod.service.namespace.svc...`.
pub fn pod_fqdn(sts: &Value, pod: &str) -> String {
    let (svc, ns) = (sts["spec"]["serviceName"].as_str().expect("serviceName"), sts["metadata"]["namespace"].as_str().expect("namespace"));
    format!("{pod}.{svc}.{ns}.{CLUSTER_DOMAIN}")
}

/// The volume claim of a StatefulSet's pod (its claim template's name -> a directory under `root`
/// that outlives the pod), as [`Pod::create`] takes it.
pub fn pod_claims(sts: &Value, root: &Path, pod: &str) -> BTreeMap<String, PathBuf> {
    let name = sts["spec"]["volumeClaimTemplates"][0]["metadata"]["name"].as_str().expect("a claim template").to_string();
    let dir = root.join(format!("{name}-{pod}"));
    BTreeMap::from([(name, dir)])
}

/// The relay's pod from its Deployment, started on `host`, once `fastrepl status` answers from
/// namespace `ask_from` by the relay's Service name `relay_addr`.
pub fn start_relay_pod(m: &Manifests, deployment: &Value, host: &netns::Host, ask_from: &str, relay_addr: &str) -> Pod {
    let name = format!("{}-pod", deployment["metadata"]["name"].as_str().expect("the Deployment's name"));
    let mut p = Pod::create(m, deployment, &name, host, &BTreeMap::new());
    p.run();
    wait_until("the relay's pod to answer status", Duration::from_secs(15), || fastrepl_in(ask_from, &["status", "--relay", relay_addr, "--json"], &[("FASTREPL_TOKEN", TOKEN)]).0.then_some(()));
    p
}

impl Pod {
    /// Probe readiness (`probe`: the pod's probe as the suite runs it) until it says Ready, within
    /// `within`; then the server must be loaded. What else Ready must mean is the caller's to check.
    pub fn wait_ready(&self, within: Duration, probe: impl Fn(&Pod) -> (bool, String)) {
        let deadline = std::time::Instant::now() + within;
        loop {
            let (ready, said) = probe(self);
            if ready {
                assert_eq!(self.info_num("persistence", "loading"), 0, "{}: ready while loading", self.name);
                return;
            }
            assert!(std::time::Instant::now() < deadline, "{}: never ready: {said}", self.name);
            std::thread::sleep(Duration::from_millis(100)); // Probing with a deadline.
        }
    }
}

/// A server the manifests expect to exist already (the master of a release, its standby, a node of a
/// cluster): Redis 7.0 on port 6379 of a namespace host, with the password, no persistence, an 8 MiB
/// backlog and the flags given; started once it answers an authenticated connection.
pub struct Prerequisite {
    pub name: String,
    pub ns: String,
    pub ip: String,
    _proc: Proc,
    _dir: tempfile::TempDir,
}

impl Prerequisite {
    pub fn start(host: &netns::Host, name: &str, extra: &[&str]) -> Prerequisite {
        Prerequisite::start_flavor(Flavor::Redis70, host, name, extra)
    }

    /// [`Prerequisite::start`] with `flavor`'s server.
    pub fn start_flavor(flavor: Flavor, host: &netns::Host, name: &str, extra: &[&str]) -> Prerequisite {
        let dir = tempfile::tempdir().unwrap();
        let args: Vec<String> = ["--port", "6379", "--requirepass", PASSWORD, "--save", "", "--appendonly", "no", "--repl-backlog-size", "8mb"]
            .iter()
            .chain(extra)
            .map(|s| s.to_string())
            .chain(["--dir".to_string(), dir.path().display().to_string()])
            .collect();
        let p = Proc::spawn(name, in_ns(&host.ns, &flavor.binary(), &args, &[]));
        wait_until(&format!("{name} to answer"), Duration::from_secs(15), || {
            netns::within(&host.ns, || client::Client::connect("127.0.0.1:6379", Some(&replication::replica::Auth { user: None, password: PASSWORD.into() }), Duration::from_secs(2)).is_ok())
                .ok()?
                .then_some(())
        });
        Prerequisite { name: name.to_string(), ns: host.ns.clone(), ip: host.ip.clone(), _proc: p, _dir: dir }
    }

    pub fn client(&self) -> client::Client {
        connect(&self.ns, "127.0.0.1:6379")
    }

    pub fn info_num(&self, section: &str, k: &str) -> i64 {
        self.client().info(section).unwrap().num(k).unwrap_or_else(|| panic!("{}: INFO {section} has no {k}", self.name))
    }

    /// (sync_full, sync_partial_ok, total_forks).
    pub fn counts(&self) -> (i64, i64, i64) {
        sync_counts(&mut self.client())
    }
}

/// `n` SETs of `{key_prefix}:{i}` to `{value_prefix}-value-{i}`, pipelined 500 at a time, none refused.
pub fn write_keys(c: &mut client::Client, key_prefix: &str, value_prefix: &str, n: usize) {
    let cmds: Vec<Vec<Vec<u8>>> = (0..n).map(|i| client::command(&["SET", &format!("{key_prefix}:{i}"), &format!("{value_prefix}-value-{i}")])).collect();
    for chunk in cmds.chunks(500) {
        for r in c.pipeline(chunk).expect("write pipeline") {
            assert!(!r.is_error(), "write failed: {r:?}");
        }
    }
}

/// A server's (sync_full, sync_partial_ok, total_forks).
pub fn sync_counts(c: &mut client::Client) -> (i64, i64, i64) {
    let i = c.info("stats").expect("INFO stats");
    let n = |k: &str| i.num(k).unwrap_or_else(|| panic!("INFO stats has no {k}"));
    (n("sync_full"), n("sync_partial_ok"), n("total_forks"))
}

/// A native sidecar: an init container with restartPolicy Always (Kubernetes >= 1.29).
pub fn is_sidecar(c: &&Value) -> bool {
    c["restartPolicy"] == "Always"
}

/// Every container of a pod template (init containers first).
pub fn containers(spec: &Value) -> Vec<&Value> {
    spec["initContainers"].as_array().into_iter().flatten().chain(spec["containers"].as_array().into_iter().flatten()).collect()
}

pub fn connect(ns: &str, addr: &str) -> client::Client {
    let addr = addr.to_string();
    let auth = replication::replica::Auth { user: None, password: PASSWORD.to_string() };
    netns::within(ns, move || client::Client::connect(&addr, Some(&auth), Duration::from_secs(10))).unwrap_or_else(|e| panic!("enter {ns}: {e}")).unwrap_or_else(|e| panic!("connect in {ns}: {e}"))
}

/// `fastrepl` run in namespace `ns` (status, verify), by the manifests' DNS names: (success, stdout, stderr).
pub fn fastrepl_in(ns: &str, args: &[&str], env: &[(&str, &str)]) -> (bool, String, String) {
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    let env: Vec<(String, String)> = env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    let out = in_ns(ns, Path::new(env!("CARGO_BIN_EXE_fastrepl")), &args, &env).output().expect("run fastrepl");
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// The relay's `status --json`, asked from namespace `ns`.
pub fn relay_status(ns: &str, relay: &str) -> Value {
    let (ok, out, err) = fastrepl_in(ns, &["status", "--relay", relay, "--json"], &[("FASTREPL_TOKEN", TOKEN)]);
    assert!(ok, "status: {out}{err}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("status --json: {e}: {out}"))
}

/// What the relay served so far (snapshot and log bytes), from `status --json` in the master's namespace.
pub fn relay_served(ns: &str, relay: &str) -> u64 {
    let st = relay_status(ns, relay);
    st["served_bytes_total"].as_object().map(|m| m.values().filter_map(|v| v.as_u64()).sum()).unwrap_or(0) + st["log_served_bytes_total"].as_u64().unwrap_or(0)
}

/// What the stage init container decided, from its `--json` report.
pub struct Start {
    /// ("stage" | "keep", reason).
    pub what: (String, String),
    /// The replication offset of the RDB on the volume it judged (0 when there was none).
    pub offset: u64,
    /// The relay's generation it staged (None when it kept).
    pub generation: Option<u64>,
}

pub fn decision(outs: &BTreeMap<String, String>) -> Start {
    let text = &outs["stage"];
    let report: Value = text.lines().rev().find_map(|l| serde_json::from_str(l).ok()).unwrap_or_else(|| panic!("no JSON report from stage:\n{text}"));
    let s = &report["start"];
    let what = (s["decision"].as_str().unwrap_or_default().to_string(), s["because"]["reason"].as_str().unwrap_or_default().to_string());
    Start { what, offset: s["because"]["offset"].as_u64().unwrap_or(0), generation: report["generation"].as_u64() }
}
