//! The alerting rules of contrib/prometheus: valid (`promtool check rules`), each alert firing on a
//! series that should page and silent on one that should not (`promtool test rules` over
//! fastrepl-alerts.test.yaml), the chart's copy identical, and every fastrepl metric a rule names
//! exported by a real relay under that name (with the labels the rule uses), so the rules cannot
//! drift from the code. promtool is the one scripts/setup.sh builds, pinned by go.sum.

mod common;
use common::*;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

fn contrib() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../contrib")
}

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
    std::fs::write(tmp.path().join("fastrepl-alerts.yaml"), rules.replace("increase(fastrepl_relay_capture_failures_total[30m]) >= 3", "increase(fastrepl_relay_capture_failures_total[30m]) >= 300")).unwrap();
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

/// Metric names (fastrepl_*) in an expression, each with the label names matched or grouped on in
/// that expression (a coarse but sufficient reading: every label a rule names must be one of the
/// metric's, or a target label).
fn metrics_in(expr: &str) -> BTreeMap<String, BTreeSet<String>> {
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let bytes = expr.as_bytes();
    let mut i = 0;
    while let Some(at) = expr[i..].find("fastrepl_") {
        let start = i + at;
        let end = start + expr[start..].find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(expr.len() - start);
        let name = expr[start..end].to_string();
        let mut labels = BTreeSet::new();
        if bytes.get(end) == Some(&b'{') {
            let close = end + expr[end..].find('}').unwrap();
            for m in expr[end + 1..close].split(',') {
                let l = m.split(|c| c == '=' || c == '!' || c == '~').next().unwrap().trim();
                if !l.is_empty() {
                    labels.insert(l.to_string());
                }
            }
        }
        out.entry(name).or_default().extend(labels);
        i = end;
    }
    out
}

#[test]
fn every_metric_a_rule_names_is_what_a_real_relay_exports() {
    let rules = std::fs::read_to_string(contrib().join("prometheus/fastrepl-alerts.yaml")).unwrap();
    let mut wanted: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (name, labels) in metrics_in(&rules) {
        wanted.entry(name).or_default().extend(labels);
    }
    assert!(wanted.len() >= 10, "{wanted:?}");
    // A relay with a store (its disk's gauges) after one join (the outcomes) and one stranger (the
    // admission counters).
    let master = Server::start(Flavor::Redis70, &[]);
    data::fill_small_mixed(&mut master.client(), 500);
    let store = tempfile::tempdir().unwrap();
    let maddr = format!("127.0.0.1:{}", fixtures::free_port());
    let relay = relay(&master.addr(), &["--store", store.path().to_str().unwrap(), "--metrics", &maddr], &[]);
    let target = Server::start(Flavor::Redis70, &[]);
    let j = join(&relay.addr, &target.addr(), &[], &[]);
    assert_partial(&j);
    drop(std::net::TcpStream::connect(&relay.addr).unwrap());
    let text = metrics::scrape(&maddr, Duration::from_secs(10)).unwrap();
    let samples = metrics::parse(&text).unwrap();
    let mut exported: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for s in &samples {
        exported.entry(s.name.clone()).or_default().extend(s.labels.iter().map(|(k, _)| k.clone()));
    }
    for (name, labels) in &wanted {
        let have = exported.get(name).unwrap_or_else(|| panic!("a rule names {name}, which the relay does not export:\n{text}"));
        for l in labels {
            assert!(have.contains(l) || ["job", "instance"].contains(&l.as_str()), "a rule matches {name} on label {l}, which it does not carry ({have:?})");
        }
    }
    // `current` and `outcome` are among them: the check reads labels, not only names.
    assert!(wanted["fastrepl_relay_generation_log_bytes"].contains("current") && wanted["fastrepl_relay_joins_total"].contains("outcome"), "{wanted:?}");
}
