//! What the monitoring of contrib/ (the alerting rules, the Grafana dashboard) may name, checked
//! against what the code exports: PromQL read for the fastrepl metrics and labels it names, and one
//! scrape of a real relay and a real join (e2e_alerts, e2e_dashboard).
#![allow(dead_code)]

use crate::common::*;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

pub fn contrib() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../contrib")
}

/// Labels every scraped series carries whatever it exports: the target's.
pub const TARGET_LABELS: [&str; 2] = ["job", "instance"];

/// What one PromQL expression names: each fastrepl_* metric with the label names its matchers use,
/// and the label names it groups or joins on (`by`, `without`, `on`, `ignoring`, `group_left`,
/// `group_right`), which must be some named metric's. A coarse reading, but sufficient: it does not
/// evaluate, it lists names.
#[derive(Debug, Default)]
pub struct Refs {
    pub metrics: BTreeMap<String, BTreeSet<String>>,
    pub grouping: BTreeSet<String>,
}

fn ident_end(s: &str, from: usize) -> usize {
    from + s[from..].find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(s.len() - from)
}

pub fn promql_refs(expr: &str) -> Refs {
    let mut r = Refs::default();
    let bytes = expr.as_bytes();
    let mut i = 0;
    while let Some(at) = expr[i..].find("fastrepl_") {
        let start = i + at;
        let end = ident_end(expr, start);
        let mut labels = BTreeSet::new();
        if bytes.get(end) == Some(&b'{') {
            let close = end + expr[end..].find('}').expect("a closed matcher");
            for m in expr[end + 1..close].split(',') {
                let l = m.split(['=', '!', '~']).next().unwrap().trim();
                if !l.is_empty() {
                    labels.insert(l.to_string());
                }
            }
        }
        r.metrics.entry(expr[start..end].to_string()).or_default().extend(labels);
        i = end;
    }
    for kw in ["by", "without", "on", "ignoring", "group_left", "group_right"] {
        let mut i = 0;
        while let Some(at) = expr[i..].find(kw) {
            let start = i + at;
            let end = start + kw.len();
            i = end;
            let before_ok = start == 0 || !(bytes[start - 1].is_ascii_alphanumeric() || bytes[start - 1] == b'_');
            let rest = expr[end..].trim_start();
            if !before_ok || !rest.starts_with('(') {
                continue;
            }
            let close = rest.find(')').expect("a closed label list");
            for l in rest[1..close].split(',').map(str::trim).filter(|l| !l.is_empty()) {
                r.grouping.insert(l.to_string());
            }
        }
    }
    r
}

/// Every fastrepl metric a real relay and a real join export, with the label names each carries:
/// a relay with a store (its disk's gauges), one finished join (the outcomes, bytes by transport),
/// one join scraped while its replica loads (its own metrics: phase, progress, bytes by source),
/// and a stranger's connection (the admission counters). The scrapes' text is returned too.
pub fn exported() -> (BTreeMap<String, BTreeSet<String>>, String) {
    let master = Server::start(Flavor::Redis70, &[]);
    data::fill_small_mixed(&mut master.client(), 3000);
    let store = tempfile::tempdir().unwrap();
    let maddr = format!("127.0.0.1:{}", fixtures::free_port());
    let relay = relay(&master.addr(), &["--store", store.path().to_str().unwrap(), "--metrics", &maddr], &[]);
    let target = Server::start(Flavor::Redis70, &[]);
    assert_partial(&join(&relay.addr, &target.addr(), &[], &[]));
    drop(std::net::TcpStream::connect(&relay.addr).unwrap());
    let slow = Server::start(Flavor::Redis70, &["--key-load-delay", "1000"]);
    let (p, join_text) = join_scraped_while_loading(&relay.addr, &slow);
    assert_partial(&finish_join(p));
    let relay_text = metrics::scrape(&maddr, Duration::from_secs(10)).unwrap();
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for text in [&relay_text, &join_text] {
        for s in metrics::parse(text).unwrap() {
            out.entry(s.name.clone()).or_default().extend(s.labels.iter().map(|(k, _)| k.clone()));
        }
    }
    (out, format!("{relay_text}\n{join_text}"))
}

/// Every name `refs` uses is exported with those labels (`at` says where the expression is).
pub fn assert_exported(at: &str, expr: &str, refs: &Refs, exported: &BTreeMap<String, BTreeSet<String>>, text: &str) {
    let mut carried: BTreeSet<&str> = TARGET_LABELS.into_iter().collect();
    for (name, labels) in &refs.metrics {
        let have = exported.get(name).unwrap_or_else(|| panic!("{at} names {name}, which neither a relay nor a join exports:\n{expr}\n{text}"));
        carried.extend(have.iter().map(String::as_str));
        for l in labels {
            assert!(have.contains(l) || TARGET_LABELS.contains(&l.as_str()), "{at} matches {name} on label {l}, which it does not carry ({have:?}):\n{expr}");
        }
    }
    for l in &refs.grouping {
        assert!(carried.contains(l.as_str()), "{at} groups on label {l}, which none of its metrics carries ({carried:?}):\n{expr}");
    }
}
