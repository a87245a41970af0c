//! The examples in contrib/ say what the binary does, and would pass a Kubernetes engineer's review.
//!
//! Checked offline by tools no one here wrote, each shown to reject a bad manifest: every manifest
//! against the Kubernetes API's schema in strict mode (kubernetes-validate: an unknown field fails),
//! every pod against the "restricted" Pod Security Standard (the evaluator of the API server's own
//! admission plugin, k8s.io/pod-security-admission, in contrib/k8s/check). Then what review asks
//! and no schema knows: every `fastrepl` subcommand, flag and `FASTREPL_*` variable exists in the
//! binary's `--help`; every object a pod names is defined or a README prerequisite; images pinned;
//! DNS names, never IPs; requests and memory limits; each Secret only where it is needed; AOF off but where the join sidecar runs beside the server;
//! and the probe scripts read a server as the manifests say (stubbed replies, then a real replica).
//! The manifests were not applied to a Kubernetes cluster here (contrib/k8s/README.md says so).

mod common;
use common::*;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

fn contrib() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../contrib")
}

/// The `*.yaml` files of a directory, sorted.
fn yaml_files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> =
        std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())).map(|e| e.unwrap().path()).filter(|p| p.extension().and_then(|e| e.to_str()) == Some("yaml")).collect();
    v.sort();
    v
}

/// contrib/k8s/*.yaml: the manifests, meant for `kubectl apply`.
fn manifests() -> Vec<PathBuf> {
    yaml_files(&contrib().join("k8s"))
}

/// contrib/k8s/helm/*.yaml: values for Bitnami's charts and the official Valkey chart (not manifests).
fn values_snippets() -> Vec<PathBuf> {
    yaml_files(&contrib().join("k8s/helm"))
}

/// Debian's python3 (scripts/setup.sh installs python3-yaml for it) before whatever else is on PATH.
fn python() -> Option<PathBuf> {
    if fixtures::skip::unavailable("python3") {
        return None;
    }
    which("python3")
}

fn which(name: &str) -> Option<PathBuf> {
    let debian = Path::new("/usr/bin").join(name);
    if debian.is_file() {
        return Some(debian);
    }
    std::env::var_os("PATH").and_then(|p| std::env::split_paths(&p).map(|d| d.join(name)).find(|f| f.is_file()))
}

/// The documents of a YAML file as JSON, parsed by PyYAML.
fn yaml_documents(path: &Path) -> Vec<Value> {
    let script = "import json,sys,yaml; print(json.dumps([d for d in yaml.safe_load_all(open(sys.argv[1])) if d is not None]))";
    let python = python().expect("python3 (scripts/setup.sh installs Debian's)");
    let out = Command::new(python).args(["-c", script]).arg(path).output().expect("run python3");
    assert!(out.status.success(), "{} does not parse as YAML:\n{}", path.display(), String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice::<Value>(&out.stdout).expect("PyYAML's JSON").as_array().cloned().unwrap_or_default()
}

/// Every manifest document, with the file it came from.
fn all_documents() -> Vec<(PathBuf, Value)> {
    manifests().into_iter().flat_map(|p| yaml_documents(&p).into_iter().map(move |d| (p.clone(), d))).collect()
}

/// Every container spec in a parsed document, wherever it sits (pods, templates, init containers).
fn containers(v: &Value, out: &mut Vec<Value>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                if (k == "containers" || k == "initContainers") && x.is_array() {
                    out.extend(x.as_array().into_iter().flatten().cloned());
                }
                containers(x, out);
            }
        }
        Value::Array(a) => a.iter().for_each(|x| containers(x, out)),
        _ => {}
    }
}

/// (subcommand, flags, env names) a fastrepl container uses.
fn usage(c: &Value) -> Option<(String, Vec<String>, Vec<String>)> {
    let strings = |k: &str| c[k].as_array().map(|a| a.iter().filter_map(|x| x.as_str().map(str::to_string)).collect::<Vec<_>>()).unwrap_or_default();
    let env: Vec<String> = c["env"].as_array().into_iter().flatten().filter_map(|e| e["name"].as_str().map(str::to_string)).filter(|n| n.starts_with("FASTREPL_")).collect();
    let image = c["image"].as_str().unwrap_or_default();
    let (cmd, args) = (strings("command"), strings("args"));
    // `sh -c "fastrepl join --json; …"`: the words after `fastrepl`, up to the shell's `;`.
    if let Some(line) = cmd.iter().chain(&args).find(|s| s.contains("fastrepl ")) {
        let words: Vec<String> = line.split("fastrepl ").nth(1)?.split(';').next()?.split_whitespace().map(str::to_string).collect();
        return Some((words[0].clone(), words[1..].iter().filter(|w| w.starts_with("--")).cloned().collect(), env));
    }
    if image.starts_with("fastrepl") {
        return Some((args.first()?.clone(), args.iter().filter(|w| w.starts_with("--")).cloned().collect(), env));
    }
    None
}

fn help(sub: &str) -> String {
    let out = fastrepl().args([sub, "--help"]).output().expect("run fastrepl --help");
    assert!(out.status.success(), "fastrepl {sub} --help failed: no such subcommand?\n{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn kubernetes_examples_parse_and_use_only_what_exists() {
    if python().is_none() {
        return fixtures::skip("no python3 to parse the manifests (scripts/setup.sh installs Debian's)");
    }
    let mut used = 0;
    let mut subs = BTreeSet::new();
    let manifests = manifests();
    for path in manifests.iter().chain(&values_snippets()) {
        let docs = yaml_documents(path);
        assert!(!docs.is_empty(), "{}: no documents", path.display());
        if manifests.contains(path) {
            for d in &docs {
                assert!(d["apiVersion"].is_string() && d["kind"].is_string(), "{}: a document without apiVersion/kind", path.display());
            }
        }
        let mut cs = Vec::new();
        docs.iter().for_each(|d| containers(d, &mut cs));
        for c in &cs {
            let Some((sub, flags, env)) = usage(c) else { continue };
            let h = help(&sub);
            for f in &flags {
                let name = f.split('=').next().unwrap_or(f);
                assert!(h.contains(&format!("{name} ")) || h.contains(&format!("{name}\n")) || h.contains(&format!("{name} <")), "{}: fastrepl {sub} has no flag {name}", path.display());
            }
            for e in &env {
                assert!(h.contains(&format!("[env: {e}=")), "{}: fastrepl {sub} reads no {e}", path.display());
            }
            used += 1;
            subs.insert(sub);
        }
    }
    assert!(used >= 6, "the examples run fastrepl in at least six containers ({used})");
    assert_eq!(subs.into_iter().collect::<Vec<_>>(), vec!["join".to_string(), "relay".to_string(), "stage".to_string()]);
}

/// A pod no reviewer would pass, with a field the API does not have: what both checkers must reject.
const BAD_POD: &str = "apiVersion: v1
kind: Pod
metadata: {name: bad, namespace: redis}
spec:
  containers:
    - name: redis
      image: redis:7.2.4
      bogusField: 1
      securityContext: {privileged: true}
";

#[test]
fn kubernetes_examples_pass_the_api_schema_strictly() {
    let Some(python) = python() else { return fixtures::skip("no python3 to run kubernetes-validate") };
    let kv = fixtures::root().join(".cache/k8s-validate");
    if !kv.join("kubernetes_validate").is_dir() || fixtures::skip::unavailable("kubernetes-validate") {
        return fixtures::skip("kubernetes-validate is not installed in .cache/k8s-validate: run scripts/setup.sh");
    }
    let validate = |files: &[PathBuf]| {
        let out = Command::new(&python).env("PYTHONPATH", &kv).args(["-m", "kubernetes_validate", "--strict", "--kubernetes-version", "1.37.0"]).args(files).output().expect("run kubernetes-validate");
        (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
    };
    let (ok, said) = validate(&manifests());
    assert!(ok, "kubernetes-validate --strict rejects the manifests:\n{said}");
    // Every document was checked against a schema (none skipped as an unknown kind).
    assert_eq!(said.matches(" passed for resource ").count(), all_documents().len(), "{said}");
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.yaml");
    std::fs::write(&bad, BAD_POD).unwrap();
    let (ok, said) = validate(&[bad]);
    assert!(!ok && said.contains("'bogusField' was unexpected"), "kubernetes-validate --strict accepts an unknown field:\n{said}");
}

/// contrib/k8s/check built (offline, modules from the cache scripts/setup.sh filled), or the one
/// setup.sh built where there is no Go; None (and the test skipped) where there is neither.
fn psa_check() -> Option<PathBuf> {
    let bin = fixtures::root().join(".cache/k8s-check/psa-check");
    let src = contrib().join("k8s/check");
    let go = which("go").or_else(|| Some(PathBuf::from("/usr/local/go/bin/go")).filter(|p| p.is_file())).filter(|_| !fixtures::skip::unavailable("go"));
    let Some(go) = go else {
        if bin.is_file() {
            return Some(bin);
        }
        fixtures::skip("no Go toolchain and no psa-check built by scripts/setup.sh");
        return None;
    };
    let go_cmd =
        |args: &[&str]| Command::new(&go).args(args).current_dir(&src).env("GOFLAGS", "-mod=readonly -buildvcs=false").env("GOPROXY", "off").env("GOTOOLCHAIN", "local").output().expect("run go");
    if !go_cmd(&["mod", "download"]).status.success() {
        fixtures::skip("psa-check's Go modules are not in the module cache: run scripts/setup.sh");
        return None;
    }
    let built = go_cmd(&["build", "-o", bin.to_str().unwrap(), "."]);
    assert!(built.status.success(), "build psa-check:\n{}", String::from_utf8_lossy(&built.stderr));
    Some(bin)
}

#[test]
fn kubernetes_examples_meet_the_restricted_pod_security_standard() {
    let Some(bin) = psa_check() else { return };
    let out = Command::new(&bin).args(manifests()).output().unwrap();
    let said = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "pods the restricted standard rejects:\n{said}");
    let evaluated: usize = said.split("evaluated ").nth(1).and_then(|r| r.split(' ').next()?.parse().ok()).unwrap_or(0);
    // Every pod template, as PyYAML counts them where it is here.
    let pods = python().map_or(evaluated, |_| all_documents().iter().filter(|(_, d)| pod_spec(d).is_some()).count());
    assert!(evaluated >= 4 && evaluated == pods, "every pod template evaluated ({pods}):\n{said}");
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.yaml");
    std::fs::write(&bad, BAD_POD).unwrap();
    let out = Command::new(&bin).arg(&bad).output().unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success() && said.contains("privileged") && said.contains("runAsNonRoot"), "psa-check admits a privileged root pod:\n{said}");
}

/// A document's pod spec: a Pod's own, or a workload's template's.
fn pod_spec(d: &Value) -> Option<&Value> {
    match d["kind"].as_str()? {
        "Pod" => Some(&d["spec"]),
        "Deployment" | "StatefulSet" | "DaemonSet" | "ReplicaSet" | "Job" => Some(&d["spec"]["template"]["spec"]),
        "CronJob" => Some(&d["spec"]["jobTemplate"]["spec"]["template"]["spec"]),
        _ => None,
    }
}

fn pod_containers(spec: &Value) -> impl Iterator<Item = (bool, &Value)> {
    let list = |k: &'static str, init: bool| spec[k].as_array().into_iter().flatten().map(move |c| (init, c));
    list("initContainers", true).chain(list("containers", false))
}

/// The Service a cluster DNS name names: `svc.ns.svc.cluster.local`, `pod.svc.ns.svc.cluster.local`.
fn service_of(host: &str) -> Option<String> {
    let labels: Vec<&str> = host.split('.').collect();
    let at = labels.iter().position(|l| *l == "svc")?;
    let label = |l: &str| !l.is_empty() && l.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    // A shell's `$POD_NAME.$SERVICE.$NAMESPACE.svc…` is a template, not a name.
    (at >= 2 && labels[at..] == ["svc", "cluster", "local"] && labels[..at].iter().all(|l| label(l))).then(|| labels[at - 2].to_string())
}

/// Every string in a value.
fn strings(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::String(s) => out.push(s.clone()),
        Value::Array(a) => a.iter().for_each(|x| strings(x, out)),
        Value::Object(m) => m.values().for_each(|x| strings(x, out)),
        _ => {}
    }
}

/// The (kind, name) objects a pod spec refers to.
fn references(spec: &Value, refs: &mut BTreeSet<(String, String)>) {
    let mut add = |kind: &str, name: &Value| {
        if let Some(n) = name.as_str() {
            refs.insert((kind.to_string(), n.to_string()));
        }
    };
    for v in spec["volumes"].as_array().into_iter().flatten() {
        add("Secret", &v["secret"]["secretName"]);
        add("ConfigMap", &v["configMap"]["name"]);
        add("PersistentVolumeClaim", &v["persistentVolumeClaim"]["claimName"]);
        for s in v["projected"]["sources"].as_array().into_iter().flatten() {
            add("Secret", &s["secret"]["name"]);
            add("ConfigMap", &s["configMap"]["name"]);
        }
    }
    for (_, c) in pod_containers(spec) {
        for e in c["env"].as_array().into_iter().flatten() {
            add("Secret", &e["valueFrom"]["secretKeyRef"]["name"]);
            add("ConfigMap", &e["valueFrom"]["configMapKeyRef"]["name"]);
        }
        for e in c["envFrom"].as_array().into_iter().flatten() {
            add("Secret", &e["secretRef"]["name"]);
            add("ConfigMap", &e["configMapRef"]["name"]);
        }
    }
    add("ServiceAccount", &spec["serviceAccountName"]);
    for s in spec["imagePullSecrets"].as_array().into_iter().flatten() {
        add("Secret", &s["name"]);
    }
}

/// README.md's "Prerequisites" section.
fn prerequisites() -> String {
    let readme = std::fs::read_to_string(contrib().join("k8s/README.md")).expect("contrib/k8s/README.md");
    let start = readme.find("\n## Prerequisites").expect("README.md has a Prerequisites section");
    let rest = &readme[start + 1..];
    rest[..rest[3..].find("\n## ").map_or(rest.len(), |e| e + 3)].to_string()
}

#[test]
fn every_object_a_pod_names_is_defined_or_a_prerequisite() {
    if python().is_none() {
        return fixtures::skip("no python3 to parse the manifests");
    }
    let docs = all_documents();
    let defined: BTreeSet<(String, String)> = docs.iter().map(|(_, d)| (d["kind"].as_str().unwrap().to_string(), d["metadata"]["name"].as_str().unwrap_or_default().to_string())).collect();
    let mut refs = BTreeSet::new();
    for (path, d) in &docs {
        let mut all = Vec::new();
        strings(d, &mut all);
        // Services named by DNS: in arguments, environment and config files alike.
        for s in &all {
            for word in s.split(|c: char| c.is_whitespace() || c == ':' || c == ',' || c == '"') {
                if let Some(svc) = service_of(word) {
                    refs.insert(("Service".to_string(), svc));
                }
            }
        }
        if let Some(name) = d["spec"]["serviceName"].as_str() {
            refs.insert(("Service".to_string(), name.to_string()));
        }
        let Some(spec) = pod_spec(d) else { continue };
        references(spec, &mut refs);
        // Every mount is a volume of the pod or a claim template (a typo the schema cannot see).
        let mut volumes: BTreeSet<&str> = spec["volumes"].as_array().into_iter().flatten().filter_map(|v| v["name"].as_str()).collect();
        volumes.extend(d["spec"]["volumeClaimTemplates"].as_array().into_iter().flatten().filter_map(|t| t["metadata"]["name"].as_str()));
        for (_, c) in pod_containers(spec) {
            for m in c["volumeMounts"].as_array().into_iter().flatten() {
                let name = m["name"].as_str().unwrap_or_default();
                assert!(volumes.contains(name), "{}: container {} mounts {name}, which the pod does not have", path.display(), c["name"]);
            }
        }
    }
    let prerequisites = prerequisites();
    let missing: Vec<String> = refs.iter().filter(|r| !defined.contains(r) && !prerequisites.contains(&format!("`{}`", r.1))).map(|(k, n)| format!("{k} {n}")).collect();
    assert!(missing.is_empty(), "named by a pod or a DNS name, neither defined in contrib/k8s nor a prerequisite in README.md: {missing:?}");
    let claims_default_class = docs.iter().flat_map(|(_, d)| d["spec"]["volumeClaimTemplates"].as_array().cloned().unwrap_or_default()).any(|t| t["spec"]["storageClassName"].is_null());
    assert!(!claims_default_class || prerequisites.contains("StorageClass"), "volume claims use the default StorageClass: README's prerequisites must say so");
    assert!(defined.contains(&("Namespace".to_string(), "redis".to_string())));
    for (path, d) in &docs {
        let kind = d["kind"].as_str().unwrap();
        assert!(kind == "Namespace" || d["metadata"]["namespace"] == "redis", "{}: {kind} outside the namespace the DNS names say", path.display());
    }
}

/// `redis:7.2.4` -> `redis-7.2.4`, `valkey/valkey:8.1.1` -> `valkey-8.1.1`: what `stage --server` says.
fn server_of_image(image: &str) -> Option<String> {
    let (repo, tag) = image.rsplit_once(':')?;
    let name = repo.rsplit('/').next()?;
    ["redis", "valkey"].contains(&name).then(|| format!("{name}-{tag}"))
}

fn arg_after<'a>(args: &'a [Value], flag: &str) -> Option<&'a str> {
    args.iter().position(|a| a == flag).and_then(|i| args.get(i + 1)).and_then(Value::as_str)
}

/// A Kubernetes quantity (`1Gi`, `512Mi`, `4294967296`) in bytes.
fn quantity_bytes(q: &str) -> u64 {
    let (n, unit) = q.find(|c: char| !c.is_ascii_digit()).map_or((q, ""), |i| q.split_at(i));
    let shift = match unit {
        "" => 0,
        "Ki" => 10,
        "Mi" => 20,
        "Gi" => 30,
        "Ti" => 40,
        other => panic!("quantity {q}: unit {other} not read here"),
    };
    n.parse::<u64>().unwrap_or_else(|e| panic!("quantity {q}: {e}")) << shift
}

/// A relay's pod is sized for what its own arguments say (contrib/k8s/README.md's arithmetic): with
/// `--store`, a memory limit above the relay's bound for `--connections-max` connections and a
/// store volume of 2 x (snapshot + log); without, a limit holding the snapshot and its log.
fn review_relay_sizing(at: &str, spec: &Value) {
    let c = &spec["containers"][0];
    let args = c["args"].as_array().unwrap_or_else(|| panic!("{at}: the relay has no args"));
    let number = |flag: &str| arg_after(args, flag).map(|v| v.parse::<u64>().unwrap_or_else(|e| panic!("{at}: {flag} {v}: {e}")));
    let memory = quantity_bytes(c["resources"]["limits"]["memory"].as_str().unwrap_or_else(|| panic!("{at}: no memory limit")));
    let snapshot = number("--snapshot-max-bytes").unwrap_or_else(|| panic!("{at}: a relay sized without --snapshot-max-bytes"));
    match arg_after(args, "--store") {
        Some(dir) => {
            let log = number("--log-max-bytes").unwrap_or(limits::LOG_BYTES_STORE_DEFAULT);
            let connections = number("--connections-max").unwrap_or(limits::CONNECTIONS_DEFAULT as u64);
            // Without --compression-threads, as many as a node may have cores for it.
            let pack = number("--compression-threads").unwrap_or(limits::PACK_THREADS_DEFAULT_MAX as u64);
            let bound = limits::relay_memory_bound(limits::BLOCK_BYTES_DEFAULT, pack, connections, snapshot.div_ceil(limits::BLOCK_BYTES_DEFAULT));
            assert!(memory >= bound, "{at}: memory limit {memory} below the store relay's bound {bound} for {connections} connections");
            let mount = c["volumeMounts"].as_array().into_iter().flatten().find(|m| m["mountPath"] == dir).unwrap_or_else(|| panic!("{at}: --store {dir} is on no volume"));
            let volume = spec["volumes"].as_array().into_iter().flatten().find(|v| v["name"] == mount["name"]).unwrap_or_else(|| panic!("{at}: volume {} undefined", mount["name"]));
            let storage =
                volume["ephemeral"]["volumeClaimTemplate"]["spec"]["resources"]["requests"]["storage"].as_str().unwrap_or_else(|| panic!("{at}: the store is no ephemeral claim with a size"));
            assert!(quantity_bytes(storage) >= 2 * (snapshot + log), "{at}: store volume {storage} below 2 x (snapshot {snapshot} + log {log}), two generations at a seal");
        }
        None => {
            let log = number("--log-max-bytes").unwrap_or(limits::LOG_BYTES_DEFAULT);
            assert!(memory >= snapshot + log, "{at}: memory limit {memory} cannot hold the snapshot {snapshot} and its log {log}");
        }
    }
}

/// What a reviewer checks in a container: pinned image, requests and a memory limit, a locked-down
/// securityContext (the pod-level rest is psa-check's).
fn review_container(at: &str, c: &Value) {
    let image = c["image"].as_str().unwrap_or_default();
    let (_, tag) = image.rsplit_once(':').unwrap_or_else(|| panic!("{at}: image {image} has no tag"));
    if image.starts_with("fastrepl") {
        assert_eq!(tag, env!("CARGO_PKG_VERSION"), "{at}: the fastrepl image is the workspace's version, built from contrib/container");
    } else {
        assert!(tag.split('.').count() == 3 && tag.split('.').all(|n| n.parse::<u32>().is_ok()), "{at}: {image} is not pinned to an exact version");
    }
    for r in ["cpu", "memory"] {
        assert!(c["resources"]["requests"][r].is_string(), "{at}: no {r} request");
    }
    assert!(c["resources"]["limits"]["memory"].is_string(), "{at}: no memory limit");
    let sc = &c["securityContext"];
    assert!(sc["allowPrivilegeEscalation"] == false && sc["readOnlyRootFilesystem"] == true && sc["capabilities"]["drop"] == serde_json::json!(["ALL"]), "{at}: securityContext {sc}");
}

/// The Secrets each volume of a pod carries.
fn secret_volumes(spec: &Value) -> BTreeMap<String, Vec<String>> {
    let mut out = BTreeMap::new();
    for v in spec["volumes"].as_array().into_iter().flatten() {
        let mut names: Vec<String> = v["secret"]["secretName"].as_str().map(str::to_string).into_iter().collect();
        names.extend(v["projected"]["sources"].as_array().into_iter().flatten().filter_map(|s| s["secret"]["name"].as_str().map(str::to_string)));
        out.insert(v["name"].as_str().unwrap_or_default().to_string(), names);
    }
    out
}

/// A pod as review reads it: the server container probed and Secret-free, the relay token only
/// where fastrepl runs, `stage --server` the server image's own version.
fn review_pod(at: &str, spec: &Value) {
    let secrets = secret_volumes(spec);
    let server = pod_containers(spec).find(|(init, c)| !init && server_of_image(c["image"].as_str().unwrap_or_default()).is_some()).map(|(_, c)| c);
    for (init, c) in pod_containers(spec) {
        let at = format!("{at}: container {}", c["name"]);
        review_container(&at, c);
        let image = c["image"].as_str().unwrap_or_default();
        let mounted: Vec<&String> = c["volumeMounts"].as_array().into_iter().flatten().filter_map(|m| secrets.get(m["name"].as_str()?)).flatten().collect();
        if mounted.iter().any(|s| s.as_str() == "fastrepl-relay-token") {
            assert!(image.starts_with("fastrepl"), "{at}: mounts the relay token but runs no fastrepl");
        }
        if !init && server_of_image(image).is_some() {
            assert!(mounted.is_empty(), "{at}: the server container mounts Secrets {mounted:?}");
            let probe = |k: &str| c[k]["exec"]["command"].to_string();
            assert!(probe("readinessProbe").contains("ready.sh") && probe("livenessProbe").contains("alive.sh"), "{at}: the server's probes are not the scripts of scripts.yaml");
        }
        let args = c["args"].as_array().cloned().unwrap_or_default();
        // A join runs beside its server for the pod's life, or it is a restart loop (README.md).
        if args.first().and_then(Value::as_str) == Some("join") {
            assert!(
                init && c["restartPolicy"] == "Always" && args.iter().any(|a| a == "--watch"),
                "{at}: a join container is a native sidecar (an init container with restartPolicy Always) running join --watch"
            );
            assert!(server.is_some(), "{at}: a join sidecar beside no server");
        }
        if args.first().and_then(Value::as_str) == Some("stage") {
            let image = server.expect("a pod that stages runs a server")["image"].as_str().unwrap();
            assert_eq!(arg_after(&args, "--server").map(str::to_string), server_of_image(image), "{at}: stage --server is not the server image's version");
        }
    }
}

/// A pod's join sidecar (`fastrepl join --watch` as an init container with restartPolicy Always).
fn join_sidecar(spec: &Value) -> Option<&Value> {
    let inits = spec["initContainers"].as_array()?;
    inits.iter().find(|c| c["restartPolicy"] == "Always" && c["args"][0] == "join" && c["args"].as_array().is_some_and(|a| a.iter().any(|w| w == "--watch")))
}

#[test]
fn kubernetes_examples_would_pass_review() {
    if python().is_none() {
        return fixtures::skip("no python3 to parse the manifests");
    }
    let docs = all_documents();
    let mut strings_all = Vec::new();
    for (path, d) in &docs {
        let kind = d["kind"].as_str().unwrap();
        let at = format!("{}: {kind}/{}", path.display(), d["metadata"]["name"].as_str().unwrap_or_default());
        assert!(["Namespace", "Secret", "ConfigMap", "Service", "Deployment", "StatefulSet", "PodDisruptionBudget"].contains(&kind), "{at}: every workload under a controller");
        strings(d, &mut strings_all);
        if let Some(spec) = pod_spec(d) {
            review_pod(&at, spec);
        }
        if kind == "Deployment" {
            assert!(d["spec"]["replicas"] == 1 && d["spec"]["strategy"]["type"] == "Recreate", "{at}: one relay, never two at once");
            review_relay_sizing(&at, &d["spec"]["template"]["spec"]);
        }
        if kind == "StatefulSet" {
            let labels = &d["spec"]["selector"]["matchLabels"];
            assert!(docs.iter().any(|(_, p)| p["kind"] == "PodDisruptionBudget" && &p["spec"]["selector"]["matchLabels"] == labels), "{at}: no PodDisruptionBudget");
        }
        if kind == "Service" && d["metadata"]["name"].as_str().unwrap().starts_with("fastrepl-relay") {
            let a = &d["metadata"]["annotations"];
            assert!(a["prometheus.io/scrape"] == "true" && a["prometheus.io/port"] == "9400", "{at}: metrics not scrapeable");
        }
        // AOF off, but for a config only pods with the join sidecar read (replicas-aof.yaml): their
        // server starts standalone, with no replicaof, and the sidecar joins it at every start.
        let aof_allowed = kind == "ConfigMap" && {
            let name = &d["metadata"]["name"];
            let readers: Vec<&Value> = docs.iter().filter_map(|(_, p)| pod_spec(p)).filter(|spec| spec["volumes"].as_array().into_iter().flatten().any(|v| &v["configMap"]["name"] == name)).collect();
            !readers.is_empty() && readers.iter().all(|spec| join_sidecar(spec).is_some())
        };
        for conf in d["data"].as_object().into_iter().flatten().filter(|(k, _)| k.ends_with(".conf")).filter_map(|(_, v)| v.as_str()) {
            let lines: Vec<&str> = conf.lines().map(str::trim).filter(|l| !l.starts_with('#')).collect();
            if aof_allowed {
                assert!(
                    lines.contains(&"appendonly yes") && !lines.iter().any(|l| l.starts_with("replicaof ") || l.starts_with("slaveof ")),
                    "{at}: a config read beside the join sidecar says appendonly yes and no replicaof (the sidecar makes the server a replica)"
                );
            } else {
                assert!(
                    lines.contains(&"appendonly no") && !lines.contains(&"appendonly yes"),
                    "{at}: the server's config must say appendonly no (AOF only where the join sidecar runs beside the server)"
                );
            }
        }
    }
    for path in values_snippets() {
        let values = &yaml_documents(&path)[0];
        // Bitnami's charts (replica.initContainers, commonConfiguration, customReadinessProbe) or the
        // official Valkey chart (extraInitContainers, valkeyConfig, readinessProbe.customProbe running
        // scripts.yaml's ready.sh).
        let official = !values["extraInitContainers"].is_null();
        let conf = values[if official { "valkeyConfig" } else { "commonConfiguration" }].as_str().unwrap_or_default();
        assert!(conf.lines().any(|l| l.trim() == "appendonly no"), "{}: the chart's config must say appendonly no", path.display());
        let stage = if official { &values["extraInitContainers"][0] } else { &values["replica"]["initContainers"][0] };
        assert!(stage["args"][0] == "stage", "{}: the first extra init container is not stage", path.display());
        review_container(&format!("{}: the stage init container", path.display()), stage);
        let server = format!("{}-{}", if path.to_string_lossy().contains("valkey") { "valkey" } else { "redis" }, values["image"]["tag"].as_str().unwrap_or_default());
        assert_eq!(arg_after(stage["args"].as_array().unwrap(), "--server"), Some(server.as_str()), "{}: stage --server is not the image's version", path.display());
        if official {
            assert_eq!(values["readinessProbe"]["enabled"], true, "{}: the chart leaves readiness off: turn it on", path.display());
            let ready = values["readinessProbe"]["customProbe"]["exec"]["command"].to_string();
            assert!(ready.contains("ready.sh"), "{}: readiness must be scripts.yaml's ready.sh: {ready}", path.display());
            assert_eq!(values["env"]["PRIMARY_POD_INDEX"], "0", "{}: ready.sh must know pod 0 is the primary", path.display());
        } else {
            let ready = values["replica"]["customReadinessProbe"].to_string();
            assert!(ready.contains("master_link_status:up") && ready.contains("loading:0"), "{}: readiness must be linked and loaded", path.display());
        }
    }
    // DNS names, never IPs (the wildcard listen address and loopback aside).
    for s in &strings_all {
        for word in s.split(|c: char| !(c.is_ascii_digit() || c == '.')) {
            let parts: Vec<&str> = word.split('.').collect();
            let ip = parts.len() == 4 && parts.iter().all(|p| p.parse::<u8>().is_ok());
            assert!(!ip || word == "0.0.0.0" || word.starts_with("127."), "an IP address in the manifests: {word} (in {s:?})");
        }
    }
}

/// The scripts of scripts.yaml, written out with their paths moved under `dir` and the server's
/// port set (the only changes), so that they run here as they would in the pod.
fn probe_scripts(dir: &Path, port: u16) -> PathBuf {
    let docs = yaml_documents(&contrib().join("k8s/scripts.yaml"));
    let scripts = dir.join(format!("scripts-{port}"));
    std::fs::create_dir_all(&scripts).unwrap();
    for (name, text) in docs[0]["data"].as_object().expect("scripts.yaml's data") {
        let text = text
            .as_str()
            .unwrap()
            .replace("/run/redis-local", &dir.join("local").to_string_lossy())
            .replace("/run/secrets/redis", &dir.join("secrets").to_string_lossy())
            .replace("-p 6379", &format!("-p {port}"));
        std::fs::write(scripts.join(name), text).unwrap();
    }
    scripts
}

fn run_script(script: &Path, env: &[(&str, &str)]) -> (bool, String) {
    let out = Command::new("sh").arg(script).envs(env.iter().copied()).output().expect("run sh");
    (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

#[test]
fn the_probe_scripts_read_a_server_as_the_manifests_say() {
    let Some(cli) = which("redis-cli") else { return fixtures::skip("no redis-cli (Debian's redis-tools) to run the probe scripts with") };
    if python().is_none() {
        return fixtures::skip("no python3 to parse scripts.yaml");
    }
    const PW: &str = "0123456789abcdef0123456789abcdef";
    let dir = tempfile::tempdir().unwrap();
    for d in ["local", "secrets"] {
        std::fs::create_dir(dir.path().join(d)).unwrap();
    }
    std::fs::write(dir.path().join("secrets/password"), PW).unwrap();
    // The init step writes the server's include file from the password file.
    let stubbed = probe_scripts(dir.path(), 6379);
    let env = [("POD_NAME", "redis-replica-0"), ("POD_NAMESPACE", "redis"), ("HEADLESS_SERVICE", "redis-replica-headless")];
    let (ok, said) = run_script(&stubbed.join("local-conf.sh"), &env);
    assert!(ok, "local-conf.sh: {said}");
    let local = dir.path().join("local/local.conf");
    let fqdn = "redis-replica-0.redis-replica-headless.redis.svc.cluster.local";
    assert_eq!(std::fs::read_to_string(&local).unwrap(), format!("masterauth {PW}\nrequirepass {PW}\nreplica-announce-ip {fqdn}\n"));
    // Replies as a server gives them (redis-cli prints an error reply's text), from a stub.
    let stub = dir.path().join("cli-stub");
    std::fs::write(&stub, "#!/bin/sh\nprintf '%s\\n' \"$STUB_REPLY\"\nexit \"${STUB_RC:-0}\"\n").unwrap();
    std::fs::set_permissions(&stub, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let stubbed_run = |script: &str, reply: &str, rc: &str| run_script(&stubbed.join(script), &[("CLI", stub.to_str().unwrap()), ("STUB_REPLY", reply), ("STUB_RC", rc)]).0;
    for (reply, rc, alive) in [
        ("PONG", "0", true),
        ("LOADING Redis is loading the dataset in memory", "0", true),
        ("BUSY Redis is busy running a script.", "0", true),
        ("MASTERDOWN Link with MASTER is down", "0", true),
        ("Could not connect to Redis at 127.0.0.1:6379: Connection refused", "1", false),
        ("NOAUTH Authentication required.", "0", false),
    ] {
        assert_eq!(stubbed_run("alive.sh", reply, rc), alive, "alive.sh on {reply:?}");
    }
    for (info, ready) in [
        ("loading:1\r\nasync_loading:0\r\nrole:slave\r\nmaster_link_status:up\r\ncluster_enabled:0", false),
        ("loading:0\r\nasync_loading:0\r\nrole:slave\r\nmaster_link_status:down\r\ncluster_enabled:0", false),
        ("loading:0\r\nasync_loading:0\r\nrole:slave\r\nmaster_link_status:up\r\ncluster_enabled:0", true),
        ("loading:0\r\nrole:master\r\ncluster_enabled:1", true),
        ("loading:0\r\nrole:master\r\ncluster_enabled:0", false),
    ] {
        assert_eq!(stubbed_run("ready.sh", info, "0"), ready, "ready.sh on {info:?}");
    }
    // The primary by design (the official Valkey chart's pod 0, values in helm/): ready as a master;
    // another pod of it that is a master is not. The password from PASSWORD_FILE, not local.conf.
    let echo_auth = dir.path().join("cli-auth-stub");
    std::fs::write(&echo_auth, "#!/bin/sh\n[ \"$REDISCLI_AUTH\" = \"$STUB_PW\" ] || { echo 'WRONGPASS'; exit 0; }\nprintf '%s\\n' \"$STUB_REPLY\"\n").unwrap();
    std::fs::set_permissions(&echo_auth, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    std::fs::write(dir.path().join("secrets/other"), "another-password").unwrap();
    let master_info = "loading:0\r\nrole:master\r\ncluster_enabled:0";
    let chart_pod = |index: &str, pw_file: &str, pw: &str| {
        let file = dir.path().join("secrets").join(pw_file);
        run_script(
            &stubbed.join("ready.sh"),
            &[("CLI", echo_auth.to_str().unwrap()), ("STUB_REPLY", master_info), ("STUB_PW", pw), ("PASSWORD_FILE", file.to_str().unwrap()), ("PRIMARY_POD_INDEX", "0"), ("POD_INDEX", index)],
        )
        .0
    };
    assert!(chart_pod("0", "other", "another-password"), "pod 0 of the chart is ready as its primary, with the password from PASSWORD_FILE");
    assert!(!chart_pod("1", "other", "another-password"), "pod 1 of the chart is a replica: not ready as a master");
    assert!(!chart_pod("0", "password", "another-password"), "the password is PASSWORD_FILE's");
    // A real replica: ready once linked, alive but not ready when its master goes away.
    let mut master = Server::start(Flavor::Redis70, &["--requirepass", PW]);
    let replica = Server::start(Flavor::Redis70, &["--include", local.to_str().unwrap(), "--requirepass", PW, "--replicaof", "127.0.0.1", &master.port.to_string()]);
    let scripts = probe_scripts(dir.path(), replica.port);
    let real = [("CLI", cli.to_str().unwrap())];
    wait_until("ready.sh to pass on a linked replica", Duration::from_secs(30), || run_script(&scripts.join("ready.sh"), &real).0.then_some(()));
    let listed = master.client().info("replication").unwrap();
    assert_eq!(listed.get("slave0").and_then(|s| s.split(',').next()), Some(format!("ip={fqdn}").as_str()), "the master lists the replica by its DNS name");
    master.kill();
    wait_until("ready.sh to fail once the master is gone", Duration::from_secs(30), || (!run_script(&scripts.join("ready.sh"), &real).0).then_some(()));
    let (alive, said) = run_script(&scripts.join("alive.sh"), &real);
    assert!(alive, "a replica whose master is away is alive: {said}");
}

#[test]
fn the_containerfile_builds_the_product_binary_without_secrets() {
    let text = std::fs::read_to_string(contrib().join("container/Containerfile")).expect("Containerfile");
    assert!(text.contains("-p cli --bin fastrepl"), "it builds the product binary");
    assert!(!text.contains("fastrepl-lab"), "no lab code in the image");
    assert!(text.lines().any(|l| l.starts_with("USER ") && !l.contains("root")), "a non-root user");
    for secret in ["FASTREPL_TOKEN=", "PASSWORD="] {
        assert!(!text.contains(secret), "no secret baked in ({secret})");
    }
    // The features it names exist: `--no-default-features` builds without UCX (scripts/product_check.sh).
    let manifest = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml")).unwrap();
    assert!(manifest.contains("ucx"), "the cli crate has the ucx feature the Containerfile switches");
    // The tag the manifests use is the one the README's build gives it: the workspace's version.
    let readme = std::fs::read_to_string(contrib().join("k8s/README.md")).unwrap();
    assert!(readme.contains(&format!("-t fastrepl:{}", env!("CARGO_PKG_VERSION"))), "README builds fastrepl:{}", env!("CARGO_PKG_VERSION"));
}
