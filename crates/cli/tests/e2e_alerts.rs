//! The alerting rules of contrib/prometheus: valid (`promtool check rules`), each alert firing on a
//! series that should page and silent on one that should not (`promtool test rules` over
//! fastrepl-alerts.test.yaml), the chart's copy identical, and every fastrepl metric a rule names
//! exported by a real relay under that name (with the labels the rule uses), so the rules cannot
//! drift from the code. promtool is the one scripts/setup.sh builds, pinned by go.sum.

mod common;
mod monitoring;
use monitoring::contrib;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

fn promtool() -> Option<PathBuf> {
    let bin = fixtures::root().join(".cache/tools/promtool");
    if !bin.is_file() || fixtures::skip::unavailable("promtool") {
        fixtures::skip("promtool is not built in .cache/tools: run scripts/setup.sh (needs Go)");
        return None;
    }
    Some(bin)
}

fn run(bin: &Path, args: &[&str], dir: &Path) -> (bool, String) {
    let out = Command::new(bin).args(args).current_dir(dir).output().expect("run promtool");
    (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

#[test]
fn the_rules_are_valid_and_each_alert_fires_only_where_it_should() {
    let Some(promtool) = promtool() else { return };
    let dir = contrib().join("prometheus");
    let (ok, said) = run(&promtool, &["check", "rules", "fastrepl-alerts.yaml"], &dir);
    assert!(ok && said.contains("SUCCESS"), "promtool check rules:\n{said}");
    let (ok, said) = run(&promtool, &["test", "rules", "fastrepl-alerts.test.yaml"], &dir);
    assert!(ok && said.contains("SUCCESS"), "promtool test rules:\n{said}");
    // Every alert the rules define is tested (a new alert without a case fails here).
    let rules = std::fs::read_to_string(dir.join("fastrepl-alerts.yaml")).unwrap();
    let tests = std::fs::read_to_string(dir.join("fastrepl-alerts.test.yaml")).unwrap();
    let alerts: BTreeSet<&str> = rules.lines().filter_map(|l| l.trim().strip_prefix("- alert: ")).collect();
    assert!(alerts.len() >= 10, "{alerts:?}");
    for a in &alerts {
        assert!(tests.contains(&format!("alertname: {a}\n")), "alert {a} has no case in fastrepl-alerts.test.yaml");
    }
    // The tests can fail: a rule that never fires is caught.
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("fastrepl-alerts.yaml"), rules.replace("increase(fastrepl_relay_capture_failures_total[30m]) >= 3", "increase(fastrepl_relay_capture_failures_total[30m]) >= 300"))
        .unwrap();
    std::fs::write(tmp.path().join("fastrepl-alerts.test.yaml"), &tests).unwrap();
    let (ok, said) = run(&promtool, &["test", "rules", "fastrepl-alerts.test.yaml"], tmp.path());
    assert!(!ok && said.contains("FastreplCaptureFailing"), "a rule that cannot fire passed its test:\n{said}");
}

#[test]
fn the_charts_rules_are_the_plain_files() {
    let plain = std::fs::read(contrib().join("prometheus/fastrepl-alerts.yaml")).unwrap();
    let chart = std::fs::read(contrib().join("helm/fastrepl/files/alerts.yaml")).unwrap();
    assert!(plain == chart, "contrib/helm/fastrepl/files/alerts.yaml differs from contrib/prometheus/fastrepl-alerts.yaml: copy it");
}

#[test]
fn every_metric_a_rule_names_is_what_a_real_relay_exports() {
    let rules: serde_json::Value = serde_yaml_rules();
    let mut exprs = Vec::new();
    for g in rules["groups"].as_array().expect("rule groups") {
        for r in g["rules"].as_array().expect("rules") {
            exprs.push((r["alert"].as_str().or(r["record"].as_str()).expect("a named rule").to_string(), r["expr"].as_str().expect("an expr").to_string()));
        }
    }
    assert!(exprs.len() >= 10, "{exprs:?}");
    let (exported, text) = monitoring::exported();
    let mut labels_seen = BTreeSet::new();
    for (name, expr) in &exprs {
        let refs = monitoring::promql_refs(expr);
        monitoring::assert_exported(&format!("alert {name}"), expr, &refs, &exported, &text);
        labels_seen.extend(refs.metrics.values().flatten().cloned());
        labels_seen.extend(refs.grouping);
    }
    // `current`, `outcome` and `master` are among them: the check reads labels, not only names.
    for l in ["current", "outcome", "master"] {
        assert!(labels_seen.contains(l), "no rule names label {l}: {labels_seen:?}");
    }
}

/// The rules file, as JSON (read by Debian's python3 with PyYAML, as the manifests are).
fn serde_yaml_rules() -> serde_json::Value {
    let path = contrib().join("prometheus/fastrepl-alerts.yaml");
    let script = "import json,sys,yaml; print(json.dumps(yaml.safe_load(open(sys.argv[1]))))";
    let out = Command::new("/usr/bin/python3").args(["-c", script]).arg(&path).output().expect("run python3");
    assert!(out.status.success(), "{} does not parse as YAML:\n{}", path.display(), String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("PyYAML's JSON")
}
