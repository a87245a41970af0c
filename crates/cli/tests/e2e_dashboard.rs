//! The Grafana dashboard of contrib/grafana: well-formed (unique panel ids, every panel on the grid
//! and on the data source variable, every variable a query uses defined), covering what an operator
//! looks at (generations and their memory and store, capture, agents by phase, bytes by transport
//! and from peers, copies from the master's host, refusals), and every query's metric and label
//! names (matchers, grouping, legends) exported by a real relay and a real join in one scrape, so
//! the dashboard cannot drift from the code. The chart's copy is e2e_chart's to compare.

mod common;
mod monitoring;
use monitoring::{contrib, promql_refs};
use serde_json::Value;
use std::collections::BTreeSet;

fn dashboard() -> Value {
    let path = contrib().join("grafana/fastrepl.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()))
}

/// Every panel, rows' nested panels included.
fn panels(d: &Value) -> Vec<&Value> {
    let mut out = Vec::new();
    for p in d["panels"].as_array().expect("panels") {
        out.push(p);
        out.extend(p["panels"].as_array().into_iter().flatten());
    }
    out
}

/// (panel title, expr, legendFormat) of every query, the variables' queries included.
fn queries(d: &Value) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    for p in panels(d) {
        for t in p["targets"].as_array().into_iter().flatten() {
            let expr = t["expr"].as_str().unwrap_or_else(|| panic!("panel {}: a target without expr", p["title"]));
            out.push((p["title"].as_str().unwrap_or("?").to_string(), expr.to_string(), t["legendFormat"].as_str().unwrap_or("").to_string()));
        }
    }
    for v in d["templating"]["list"].as_array().into_iter().flatten().filter(|v| v["type"] == "query") {
        let q = v["query"]["query"].as_str().or(v["query"].as_str()).expect("a variable's query");
        // label_values(metric{...}, label): the label must be the metric's.
        let inner = q.strip_prefix("label_values(").and_then(|s| s.strip_suffix(')')).unwrap_or(q);
        let (expr, label) = inner.rsplit_once(',').map(|(e, l)| (e.trim(), l.trim())).unwrap_or((inner, ""));
        out.push((format!("variable ${}", v["name"].as_str().unwrap()), format!("max by ({label}) ({expr})"), String::new()));
    }
    out
}

#[test]
fn the_dashboard_is_well_formed_and_covers_what_operators_look_at() {
    let d = dashboard();
    let all = panels(&d);
    let ids: Vec<u64> = all.iter().map(|p| p["id"].as_u64().expect("a panel id")).collect();
    assert_eq!(ids.iter().collect::<BTreeSet<_>>().len(), ids.len(), "panel ids repeat: {ids:?}");
    let vars: BTreeSet<String> = d["templating"]["list"].as_array().expect("variables").iter().map(|v| v["name"].as_str().unwrap().to_string()).collect();
    assert!(vars.contains("datasource"), "no data source variable: {vars:?}");
    for p in &all {
        let g = &p["gridPos"];
        assert!(g["w"].as_u64().is_some_and(|w| w >= 1) && g["x"].as_u64().unwrap_or(99) + g["w"].as_u64().unwrap_or(0) <= 24, "panel {} is off the grid: {g}", p["title"]);
        if p["type"] != "row" {
            assert_eq!(p["datasource"]["uid"], "${datasource}", "panel {} does not use the data source variable", p["title"]);
            assert!(p["description"].as_str().is_some_and(|s| !s.is_empty()), "panel {} says nothing of what it shows", p["title"]);
        }
    }
    let qs = queries(&d);
    for (title, expr, _) in &qs {
        let mut rest = expr.as_str();
        while let Some(at) = rest.find('$') {
            rest = &rest[at + 1..];
            let name: String = rest.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
            assert!(name.starts_with("__") || vars.contains(&name), "{title}: ${name} is no variable of the dashboard: {expr}");
        }
    }
    // What the issue asks it to show, by the metrics that show it.
    let named: BTreeSet<String> = qs.iter().flat_map(|(_, e, _)| promql_refs(e).metrics.into_keys()).collect();
    for (what, metric) in [
        ("generations", "fastrepl_relay_generations"),
        ("their memory", "fastrepl_relay_resident_memory_bytes"),
        ("their store", "fastrepl_relay_store_free_bytes"),
        ("capture progress", "fastrepl_relay_source_bytes_total"),
        ("agents by phase", "fastrepl_join_phase"),
        ("bytes by transport", "fastrepl_relay_served_bytes_total"),
        ("bytes from peers", "fastrepl_join_received_bytes_total"),
        ("copies from the master's host", "fastrepl_relay_generation_rdb_stored_bytes"),
        ("refusals", "fastrepl_admission_refused_total"),
        ("joins by outcome", "fastrepl_relay_joins_total"),
    ] {
        assert!(named.contains(metric), "the dashboard does not show {what} ({metric})");
    }
}

/// The labels an expression's result keeps when it is an aggregation at its outside (`sum by (a,
/// b) (...)`: a, b; `sum(...)`: none); `None` when it is not one.
fn outer_grouping(expr: &str) -> Option<Vec<String>> {
    let e = expr.trim_start();
    let op = ["sum", "max", "min", "avg", "count"].into_iter().find(|op| e.starts_with(op))?;
    let rest = e[op.len()..].trim_start();
    if rest.starts_with('(') {
        return Some(Vec::new());
    }
    let list = rest.strip_prefix("by")?.trim_start().strip_prefix('(')?;
    Some(list[..list.find(')')?].split(',').map(|l| l.trim().to_string()).filter(|l| !l.is_empty()).collect())
}

#[test]
fn an_outer_aggregation_keeps_only_its_by_labels() {
    assert_eq!(outer_grouping("sum by (phase, kind) (rate(x[1m]))"), Some(vec!["phase".to_string(), "kind".to_string()]));
    assert_eq!(outer_grouping("sum(fastrepl_relay_generations)"), Some(vec![]));
    assert_eq!(outer_grouping("rate(x[1m])"), None);
    assert_eq!(outer_grouping("fastrepl_relay_store_bytes"), None);
}

#[test]
fn every_name_the_dashboard_queries_is_what_a_real_relay_and_join_export() {
    let d = dashboard();
    let qs = queries(&d);
    assert!(qs.len() >= 20, "{} queries", qs.len());
    let (exported, text) = monitoring::exported();
    let mut grouped = BTreeSet::new();
    for (title, expr, legend) in &qs {
        let refs = promql_refs(expr);
        assert!(!refs.metrics.is_empty() || expr.contains("up{"), "{title}: a query of no fastrepl metric: {expr}");
        monitoring::assert_exported(&format!("panel {title:?}"), expr, &refs, &exported, &text);
        // A legend's {{label}} is one the result carries: an outer aggregation's `by` labels, else
        // its metrics' and the target's.
        let carried: BTreeSet<String> = match outer_grouping(expr) {
            Some(by) => by.into_iter().collect(),
            None => refs.metrics.keys().flat_map(|m| exported[m].iter().cloned()).chain(monitoring::TARGET_LABELS.map(String::from)).collect(),
        };
        let mut rest = legend.as_str();
        while let Some(at) = rest.find("{{") {
            let end = rest[at..].find("}}").expect("a closed legend label") + at;
            let label = rest[at + 2..end].trim();
            assert!(carried.contains(label), "panel {title:?}: its legend names {label}, which its metrics do not carry: {legend}");
            rest = &rest[end + 2..];
        }
        grouped.extend(refs.grouping);
    }
    // The check reads labels, not only names: these are grouped on.
    for l in ["phase", "transport", "source", "listener", "kind", "outcome", "reason"] {
        assert!(grouped.contains(l), "no panel groups by {l}: {grouped:?}");
    }
}
