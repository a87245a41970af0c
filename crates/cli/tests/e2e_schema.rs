//! The `--json` schema as documented: real `join --json` (success and failure) and `status --json`
//! output has exactly the top-level fields docs/operations.md's "Machine-readable output" tables
//! list, with `schema_version` 1 and `ok`. The tables are read from the doc, so the doc is the list.

mod common;
use common::*;
use std::collections::BTreeSet;

/// The fields of the table between `<!-- schema:NAME -->` and `<!-- /schema -->` in the doc.
fn documented(name: &str) -> BTreeSet<String> {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/operations.md")).expect("read docs/operations.md");
    let start = format!("<!-- schema:{name} -->");
    let from = doc.find(&start).unwrap_or_else(|| panic!("docs/operations.md has no {start}")) + start.len();
    let table = &doc[from..from + doc[from..].find("<!-- /schema -->").expect("the table's end marker")];
    let fields: BTreeSet<String> = table.lines().filter_map(|l| l.strip_prefix("| `")).filter_map(|l| l.split('`').next()).map(String::from).collect();
    assert!(fields.len() > 3, "the {name} table lists almost nothing: {fields:?}");
    fields
}

fn fields(v: &serde_json::Value) -> BTreeSet<String> {
    v.as_object().unwrap_or_else(|| panic!("not an object: {v}")).keys().cloned().collect()
}

#[test]
fn join_and_status_json_have_exactly_the_documented_fields() {
    let master = Server::start(Flavor::Redis70, &[]);
    data::fill_small_mixed(&mut master.client(), 200);
    let target = Server::start(Flavor::Redis70, &[]);
    let good = relay(&master.addr(), &[], &[]);
    let j = join(&good.addr, &target.addr(), &[], &[]);
    assert_partial(&j);
    assert_eq!(fields(&j.report), documented("join-ok"), "{}", j.report);
    assert_eq!((j.report["schema_version"].as_u64(), j.report["ok"].as_bool()), (Some(1), Some(true)));

    let st = status_json(&good.addr);
    // `last_capture_error` is there only after a failed capture; this relay had none.
    let mut want = documented("status");
    want.remove("last_capture_error");
    assert_eq!(fields(&st), want, "{st}");
    assert_eq!((st["schema_version"].as_u64(), st["ok"].as_bool()), (Some(1), Some(true)));
    assert_eq!(st["attaches_total"].as_object().map(|m| m.len()), Some(2), "{st}");

    // A failure: a relay whose source is another history refuses to capture, the join gives up.
    let stranger = Server::start(Flavor::Redis70, &[]);
    let other = Server::start(Flavor::Redis70, &[]);
    let bad = relay(&master.addr(), &["--source", &stranger.addr()], &[]);
    let f = join(&bad.addr, &other.addr(), &["--retries", "0"], &[]);
    assert_ne!(f.code, Some(0), "{}", f.output);
    assert_eq!(fields(&f.report), documented("join-failed"), "{}", f.output);
    assert_eq!((f.report["schema_version"].as_u64(), f.report["ok"].as_bool()), (Some(1), Some(false)));

    // Under --log-format json the join's last word is a JSON log line too, its kind as in --json.
    let g = join(&bad.addr, &other.addr(), &["--retries", "0", "--log-format", "json"], &[]);
    let last = g
        .output
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|l| l["message"] == "fastrepl join failed")
        .unwrap_or_else(|| panic!("no JSON 'fastrepl join failed' line:\n{}", g.output));
    assert_eq!(last["error_kind"], f.report["error_kind"], "{last}");
    assert!(!g.output.lines().any(|l| l.starts_with("fastrepl join failed")), "a plain-text line under JSON logs:\n{}", g.output);
}
