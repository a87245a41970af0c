//! contrib/helm/fastrepl, the relay's Helm chart: `helm lint --strict`, then `helm template` with the
//! defaults and with every option on; each render passes the checks the plain manifests pass
//! (e2e_contrib.rs: the Kubernetes API schema in strict mode, the restricted Pod Security Standard),
//! runs only flags `fastrepl relay` has, and carries the alerts and the dashboard of contrib/
//! unchanged. helm is the one scripts/setup.sh builds (pinned by go.sum). Not installed on a real
//! cluster here.

mod common;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

fn contrib() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../contrib")
}

fn helm() -> Option<PathBuf> {
    let bin = fixtures::root().join(".cache/tools/helm");
    if !bin.is_file() || fixtures::skip::unavailable("helm") {
        fixtures::skip("helm is not built in .cache/tools: run scripts/setup.sh (needs Go)");
        return None;
    }
    Some(bin)
}

fn python() -> Option<PathBuf> {
    let p = PathBuf::from("/usr/bin/python3");
    (p.is_file() && !fixtures::skip::unavailable("python3")).then_some(p)
}

/// `helm template` of the chart with `--set` pairs: (succeeded, stdout, stderr).
fn render(helm: &Path, set: &[&str]) -> (bool, String, String) {
    let mut c = Command::new(helm);
    // No repositories, no cache outside the test's reach.
    let home = tempfile::tempdir().unwrap();
    c.env("HELM_CACHE_HOME", home.path()).env("HELM_CONFIG_HOME", home.path()).env("HELM_DATA_HOME", home.path());
    c.args(["template", "fastrepl", contrib().join("helm/fastrepl").to_str().unwrap(), "--namespace", "redis"]);
    for s in set {
        c.args(["--set", s]);
    }
    let out = c.output().expect("run helm template");
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// The rendered documents as JSON (PyYAML).
fn documents(python: &Path, yaml: &str) -> Vec<Value> {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("r.yaml");
    std::fs::write(&f, yaml).unwrap();
    let script = "import json,sys,yaml; print(json.dumps([d for d in yaml.safe_load_all(open(sys.argv[1])) if d is not None]))";
    let out = Command::new(python).args(["-c", script]).arg(&f).output().unwrap();
    assert!(out.status.success(), "the render does not parse:\n{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice::<Value>(&out.stdout).unwrap().as_array().cloned().unwrap()
}

const ALL_ON: &[&str] =
    &["serviceMonitor.enabled=true", "prometheusRule.enabled=true", "dashboard.enabled=true", "token.create=true", "token.value=0123456789abcdef0123", "masterAuth.masterUser=fastrepl-relay"];

#[test]
fn the_chart_lints() {
    let Some(helm) = helm() else { return };
    let out = Command::new(&helm).args(["lint", "--strict"]).arg(contrib().join("helm/fastrepl")).output().unwrap();
    let said = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && said.contains("0 chart(s) failed"), "helm lint --strict:\n{said}");
}

#[test]
fn what_the_chart_renders_passes_the_schema_and_the_restricted_standard() {
    let Some(helm) = helm() else { return };
    let Some(python) = python() else { return fixtures::skip("no python3 to parse the render") };
    let kv = fixtures::root().join(".cache/k8s-validate");
    let psa = fixtures::root().join(".cache/k8s-check/psa-check");
    if !kv.join("kubernetes_validate").is_dir() || !psa.is_file() {
        return fixtures::skip("kubernetes-validate or psa-check not installed in .cache: run scripts/setup.sh");
    }
    let relay_help = String::from_utf8(common::fastrepl().args(["relay", "--help"]).output().unwrap().stdout).unwrap();
    for set in [&[][..], ALL_ON, &["store.enabled=false", "masterAuth.existingSecret="]] {
        let (ok, yaml, err) = render(&helm, set);
        assert!(ok, "helm template {set:?}:\n{err}");
        let docs = documents(&python, &yaml);
        let dir = tempfile::tempdir().unwrap();
        // The API's own kinds against its schema; the Prometheus Operator's CRDs are not in it.
        let core: Vec<&Value> = docs.iter().filter(|d| !d["apiVersion"].as_str().unwrap_or("").starts_with("monitoring.coreos.com/")).collect();
        let core_file = dir.path().join("core.yaml");
        std::fs::write(&core_file, core.iter().map(|d| serde_json::to_string(d).unwrap()).collect::<Vec<_>>().join("\n---\n")).unwrap();
        let out = Command::new(&python).env("PYTHONPATH", &kv).args(["-m", "kubernetes_validate", "--strict", "--kubernetes-version", "1.37.0"]).arg(&core_file).output().unwrap();
        let said = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success() && said.matches(" passed for resource ").count() == core.len(), "kubernetes-validate --strict on the render {set:?}:\n{said}\n{yaml}");
        let out = Command::new(&psa).arg(&core_file).output().unwrap();
        let said = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success() && said.contains("evaluated 1 "), "psa-check on the render {set:?}:\n{said}");
        // The relay runs only flags it has, with a token always, a store when asked.
        let deploy = docs.iter().find(|d| d["kind"] == "Deployment").expect("a Deployment");
        let args: Vec<&str> = deploy["spec"]["template"]["spec"]["containers"][0]["args"].as_array().unwrap().iter().map(|a| a.as_str().unwrap()).collect();
        assert_eq!(args[0], "relay");
        for f in args.iter().filter(|a| a.starts_with("--")) {
            assert!(relay_help.contains(&format!("{f} ")), "the chart passes {f}, which fastrepl relay does not have");
        }
        assert!(args.contains(&"--token-file"), "{args:?}");
        assert_eq!(args.contains(&"--store"), !set.contains(&"store.enabled=false"), "{args:?}");
        assert_eq!(args.contains(&"--master-password-file"), !set.contains(&"masterAuth.existingSecret="), "{args:?}");
        if set == ALL_ON {
            let kinds: Vec<&str> = docs.iter().filter_map(|d| d["kind"].as_str()).collect();
            for k in ["Secret", "ServiceMonitor", "PrometheusRule", "ConfigMap", "Service", "Deployment"] {
                assert!(kinds.contains(&k), "all options on renders no {k}: {kinds:?}");
            }
            // The PrometheusRule holds the plain file's rules, the ConfigMap the dashboard, unchanged.
            let rule = docs.iter().find(|d| d["kind"] == "PrometheusRule").unwrap();
            let plain = documents(&python, &std::fs::read_to_string(contrib().join("prometheus/fastrepl-alerts.yaml")).unwrap());
            assert_eq!(rule["spec"]["groups"], plain[0]["groups"], "the PrometheusRule's groups are not contrib/prometheus's");
            let cm = docs.iter().find(|d| d["kind"] == "ConfigMap").unwrap();
            let dashboard = std::fs::read_to_string(contrib().join("grafana/fastrepl.json")).expect("read contrib/grafana/fastrepl.json");
            assert_eq!(cm["data"]["fastrepl.json"].as_str(), Some(dashboard.as_str()), "the dashboard ConfigMap is not contrib/grafana/fastrepl.json");
            let monitor = docs.iter().find(|d| d["kind"] == "ServiceMonitor").unwrap();
            let service = docs.iter().find(|d| d["kind"] == "Service").unwrap();
            let job_label = monitor["spec"]["jobLabel"].as_str().unwrap();
            assert_eq!(service["metadata"]["labels"][job_label], "fastrepl-relay", "the alerts name job fastrepl-relay");
        }
    }
}

#[test]
fn the_chart_refuses_what_would_run_unsafe() {
    let Some(helm) = helm() else { return };
    let (ok, _, err) = render(&helm, &["token.existingSecret="]);
    assert!(!ok && err.contains("token.existingSecret"), "a relay without a token rendered:\n{err}");
    let (ok, _, err) = render(&helm, &["token.create=true", "token.value=short"]);
    assert!(!ok && err.contains("at least 16 bytes"), "a short token rendered:\n{err}");
    let (ok, _, err) = render(&helm, &["master="]);
    assert!(!ok && err.contains("master"), "a relay without a master rendered:\n{err}");
}
