//! `verify`: are two servers' datasets the same?
//!
//! Every database with keys on either side is scanned; for each key the type, the TTL (within a
//! tolerance, since the clocks run while we compare) and the value are compared. Values are first
//! compared by `DUMP` (equal dumps are equal values); when the dumps differ — as they legitimately do
//! between server versions that encode the same value differently, and always for vector sets, whose
//! graph is built at random — they are compared as the servers mean them: zset scores as doubles (not as
//! printed: Redis 7.0 prints 17 significant digits, Valkey the shortest), hash fields with their own
//! TTLs (Redis 7.4+, Valkey 9), vector sets by their elements, each element's vector as stored
//! (`VEMB … RAW`) and its attributes. A type not known here is never called equal: it is reported as
//! "cannot compare" (the command exits 2). Functions are compared by `FUNCTION LIST WITHCODE` where the
//! servers have them. Work is pipelined in batches.
#![deny(missing_docs)]

use client::{command, Client};
use resp::Frame;
use serde::Serialize;
use std::collections::BTreeSet;

/// Options.
#[derive(Debug, Clone)]
pub struct Options {
    /// Largest TTL difference accepted, in milliseconds.
    pub ttl_tolerance_ms: i64,
    /// Most differences described in the report.
    pub differences_max: usize,
    /// Keys per pipelined batch.
    pub batch: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options { ttl_tolerance_ms: 2000, differences_max: 20, batch: 500 }
    }
}

/// The outcome.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Outcome {
    /// Keys compared.
    pub keys: u64,
    /// Databases compared.
    pub databases: Vec<u32>,
    /// Functions libraries compared.
    pub function_libraries: usize,
    /// Number of differences found.
    pub difference_count: u64,
    /// The first few, described.
    pub differences: Vec<String>,
    /// Keys of types this comparison does not know, by type: neither equal nor different.
    pub uncomparable: std::collections::BTreeMap<String, u64>,
    /// Keys a server answered a read of with an error — a cluster node that does not serve the key's
    /// slot (yet: `CLUSTERDOWN`, `MOVED`), a user without the permission (`NOPERM`) —: neither equal
    /// nor different. (Counted as differences, a staged node still learning its cluster's state
    /// looked diverged in a fault-matrix run.)
    pub refused_count: u64,
    /// The first few, described.
    pub refused: Vec<String>,
}

impl Outcome {
    /// True when nothing differs and every key could be compared.
    pub fn identical(&self) -> bool {
        self.difference_count == 0 && self.uncomparable.is_empty() && self.refused_count == 0
    }
    fn differ(&mut self, max: usize, what: String) {
        self.difference_count += 1;
        if self.differences.len() < max {
            self.differences.push(what);
        }
    }
    fn refuse(&mut self, max: usize, db: u32, side: Side, op: &str, key: &[u8], reply: &[u8]) {
        self.refused_count += 1;
        if self.refused.len() < max {
            self.refused.push(format!("db{db} key '{}': the {} server answered {op} with {}", printable(key), side.name(), String::from_utf8_lossy(reply)));
        }
    }
}

/// Errors while comparing (not differences: those are in the [`Outcome`]).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A server failed.
    #[error(transparent)]
    Client(#[from] client::Error),
}

/// Which server of the comparison, for messages.
#[derive(Debug, Clone, Copy)]
enum Side {
    First,
    Second,
}

impl Side {
    fn name(self) -> &'static str {
        match self {
            Side::First => "first",
            Side::Second => "second",
        }
    }
}

/// The error reply among `replies` (each with the command that got it), if any.
fn refusal<'a>(replies: &[(&'a Frame, &'static str)]) -> Option<(&'static str, &'a [u8])> {
    replies.iter().find_map(|(f, op)| match f {
        Frame::Error(e) => Some((*op, e.as_slice())),
        _ => None,
    })
}

fn printable(k: &[u8]) -> String {
    let s: String = k.iter().take(80).flat_map(|c| std::ascii::escape_default(*c)).map(char::from).collect();
    if k.len() > 80 {
        format!("{s}…")
    } else {
        s
    }
}

fn dbs_with_keys(c: &mut Client) -> Result<BTreeSet<u32>, Error> {
    let ks = c.info("keyspace")?;
    Ok(ks.0.keys().filter_map(|k| k.strip_prefix("db")?.parse().ok()).collect())
}

/// What a server can be asked beyond the commands every supported server has.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Caps {
    /// Hash fields with their own TTLs (`HPEXPIRETIME`: Redis 7.4+, Valkey 9).
    field_ttl: bool,
}

fn caps(c: &mut Client) -> Result<Caps, Error> {
    // `COMMAND INFO name`: a nil entry for a command the server does not have.
    let r = c.raw(&["COMMAND", "INFO", "HPEXPIRETIME"])?;
    let known = |i: usize| r.as_array().and_then(|a| a.get(i)).is_some_and(|f| !matches!(f, Frame::Null | Frame::Error(_)));
    Ok(Caps { field_ttl: known(0) })
}

/// Compare `a` (the reference, normally the master) with `b`.
pub fn compare(a: &mut Client, b: &mut Client, opts: &Options) -> Result<Outcome, Error> {
    let mut out = Outcome::default();
    let caps = (caps(a)?, caps(b)?);
    let mut dbs = dbs_with_keys(a)?;
    dbs.extend(dbs_with_keys(b)?);
    for db in dbs {
        out.databases.push(db);
        let dbs = db.to_string();
        a.cmd(&["SELECT", &dbs])?;
        b.cmd(&["SELECT", &dbs])?;
        compare_db(a, b, db, caps, opts, &mut out)?;
    }
    compare_functions(a, b, opts, &mut out)?;
    Ok(out)
}

fn compare_db(a: &mut Client, b: &mut Client, db: u32, caps: (Caps, Caps), opts: &Options, out: &mut Outcome) -> Result<(), Error> {
    let max = opts.differences_max;
    // Every key of a, compared with b.
    let mut cursor = b"0".to_vec();
    loop {
        let r = a.cmd(&[b"SCAN".as_slice(), &cursor, b"COUNT", opts.batch.to_string().as_bytes()])?;
        let parts = r.as_array().unwrap_or(&[]);
        cursor = parts.first().and_then(Frame::as_bytes).unwrap_or(b"0").to_vec();
        let keys: Vec<Vec<u8>> = parts.get(1).and_then(Frame::as_array).unwrap_or(&[]).iter().filter_map(|f| f.as_bytes().map(<[u8]>::to_vec)).collect();
        compare_keys(a, b, db, &keys, caps, opts, out)?;
        if cursor == b"0" {
            break;
        }
    }
    // Keys only b has: sizes tell whether to look.
    let na = a.cmd(&["DBSIZE"])?.as_int().unwrap_or(0);
    let nb = b.cmd(&["DBSIZE"])?.as_int().unwrap_or(0);
    if nb > na || out.difference_count > 0 {
        let mut cursor = b"0".to_vec();
        loop {
            let r = b.cmd(&[b"SCAN".as_slice(), &cursor, b"COUNT", opts.batch.to_string().as_bytes()])?;
            let parts = r.as_array().unwrap_or(&[]);
            cursor = parts.first().and_then(Frame::as_bytes).unwrap_or(b"0").to_vec();
            let keys: Vec<Vec<u8>> = parts.get(1).and_then(Frame::as_array).unwrap_or(&[]).iter().filter_map(|f| f.as_bytes().map(<[u8]>::to_vec)).collect();
            let cmds: Vec<_> = keys.iter().map(|k| command(&[b"EXISTS".as_slice(), k])).collect();
            for (k, e) in keys.iter().zip(a.pipeline(&cmds)?) {
                if let Frame::Error(r) = &e {
                    out.refuse(max, db, Side::First, "EXISTS", k, r);
                } else if e.as_int() == Some(0) {
                    out.differ(max, format!("db{db} key '{}': only on the second server", printable(k)));
                }
            }
            if cursor == b"0" {
                break;
            }
        }
    }
    Ok(())
}

fn describe(keys: &[Vec<u8>], c: &mut Client) -> Result<Vec<(Frame, Frame, Frame)>, Error> {
    let mut cmds = Vec::with_capacity(keys.len() * 3);
    for k in keys {
        cmds.push(command(&[b"TYPE".as_slice(), k]));
        cmds.push(command(&[b"PTTL".as_slice(), k]));
        cmds.push(command(&[b"DUMP".as_slice(), k]));
    }
    let mut r = c.pipeline(&cmds)?.into_iter();
    let mut v = Vec::with_capacity(keys.len());
    while let (Some(t), Some(p), Some(d)) = (r.next(), r.next(), r.next()) {
        v.push((t, p, d));
    }
    Ok(v)
}

/// The types compared here; any other is reported as uncomparable.
const KNOWN_TYPES: [&str; 7] = ["string", "list", "hash", "set", "zset", "stream", "vectorset"];

fn compare_keys(a: &mut Client, b: &mut Client, db: u32, keys: &[Vec<u8>], caps: (Caps, Caps), opts: &Options, out: &mut Outcome) -> Result<(), Error> {
    let max = opts.differences_max;
    // The two sides' PTTLs are read one pipeline after the other: a TTL counts down in between, by
    // up to the time both reads took (a loaded host, a batch of large DUMPs). Widen the tolerance by
    // that, or a busy machine reports the same expiry as a difference.
    let started = std::time::Instant::now();
    let da = describe(keys, a)?;
    let db_ = describe(keys, b)?;
    let ttl_tolerance_ms = opts.ttl_tolerance_ms.saturating_add(i64::try_from(started.elapsed().as_millis()).unwrap_or(i64::MAX));
    for (k, ((ta, pa, va), (tb, pb, vb))) in keys.iter().zip(da.into_iter().zip(db_)) {
        let name = printable(k);
        // A refused TYPE or PTTL: the key cannot be compared. (A refused DUMP — renamed away, or not
        // allowed — leaves the values to be compared by their logical form, below.)
        if let Some((op, r)) = refusal(&[(&ta, "TYPE"), (&pa, "PTTL")]) {
            out.refuse(max, db, Side::First, op, k, r);
            continue;
        }
        if let Some((op, r)) = refusal(&[(&tb, "TYPE"), (&pb, "PTTL")]) {
            out.refuse(max, db, Side::Second, op, k, r);
            continue;
        }
        let ttl_a = pa.as_int().unwrap_or(-2);
        let ttl_b = pb.as_int().unwrap_or(-2);
        if ta.as_text().as_deref() == Some("none") {
            continue; // expired or deleted between SCAN and now
        }
        out.keys += 1;
        if tb.as_text().as_deref() == Some("none") {
            // A key about to expire may be gone on one side already.
            if !(0..=ttl_tolerance_ms).contains(&ttl_a) {
                out.differ(max, format!("db{db} key '{name}': missing on the second server"));
            }
            continue;
        }
        if ta != tb {
            out.differ(max, format!("db{db} key '{name}': type {:?} vs {:?}", ta.as_text().unwrap_or_default(), tb.as_text().unwrap_or_default()));
            continue;
        }
        let ttl_ok = match (ttl_a, ttl_b) {
            (-1, -1) => true,
            (x, y) if x >= 0 && y >= 0 => (x - y).abs() <= ttl_tolerance_ms,
            _ => false,
        };
        if !ttl_ok {
            out.differ(max, format!("db{db} key '{name}': TTL {ttl_a} ms vs {ttl_b} ms"));
        }
        let t = ta.as_text().unwrap_or_default();
        if !KNOWN_TYPES.contains(&t.as_str()) {
            // Never a byte comparison of DUMP payloads: they are not canonical.
            *out.uncomparable.entry(t).or_insert(0) += 1;
            continue;
        }
        // Equal dumps are equal values; two refusals are not.
        if va == vb && !matches!(va, Frame::Error(_)) {
            continue;
        }
        let (la, lb) = (logical(a, k, &t, caps.0)?, logical(b, k, &t, caps.1)?);
        let parts = |l: &[(String, Frame)]| -> Option<(String, Vec<u8>)> {
            l.iter().find_map(|(label, f)| match f {
                Frame::Error(e) => Some((label.clone(), e.clone())),
                _ => None,
            })
        };
        if let Some((label, r)) = parts(&la) {
            out.refuse(max, db, Side::First, &format!("the read of its {label}"), k, &r);
            continue;
        }
        if let Some((label, r)) = parts(&lb) {
            out.refuse(max, db, Side::Second, &format!("the read of its {label}"), k, &r);
            continue;
        }
        if let Some(what) = first_difference(&la, &lb, ttl_tolerance_ms) {
            out.differ(max, format!("db{db} key '{name}' ({t}): {what}"));
        }
    }
    Ok(())
}

/// A frame's full wire form: an exact, total order for sorting and comparing (Debug truncates).
fn wire(f: &Frame) -> Vec<u8> {
    let mut out = Vec::new();
    resp::encode(&mut out, f);
    out
}

/// Fields that newer servers report and older ones do not (Redis 7.0 added them to streams): compared
/// only when both servers report them.
const VERSION_DEPENDENT: [&str; 2] = ["max-deleted-entry-id", "entries-added"];

/// Labelled parts of a value; equal when every label both sides have matches and neither has a label
/// the other lacks, except the version-dependent ones.
#[cfg(test)]
fn same_logical(a: &[(String, Frame)], b: &[(String, Frame)]) -> bool {
    first_difference(a, b, 0).is_none()
}

/// The label prefix of a hash field's TTL part: compared within the TTL tolerance, not exactly.
const FIELD_TTL: &str = "field-ttl ";

/// The first labelled part that differs, described; `None` when the values are the same.
fn first_difference(a: &[(String, Frame)], b: &[(String, Frame)], ttl_tolerance_ms: i64) -> Option<String> {
    let find = |v: &[(String, Frame)], l: &str| v.iter().find(|(k, _)| k == l).map(|(_, f)| f.clone());
    let labels: BTreeSet<&String> = a.iter().chain(b).map(|(k, _)| k).collect();
    labels.into_iter().find_map(|l| {
        let differs = match (find(a, l), find(b, l)) {
            (Some(x), Some(y)) if l.starts_with(FIELD_TTL) => match (x.as_int(), y.as_int()) {
                (Some(x), Some(y)) if x >= 0 && y >= 0 => (x - y).abs() > ttl_tolerance_ms,
                (x, y) => x != y,
            },
            (Some(x), Some(y)) => x != y,
            // A field TTL reported by one side only: the other has none (-1) or cannot have one.
            (Some(x), None) | (None, Some(x)) if l.starts_with(FIELD_TTL) => x.as_int() != Some(-1),
            _ => !VERSION_DEPENDENT.contains(&l.as_str()),
        };
        differs.then(|| if l == "value" { "values differ".to_string() } else { format!("{l} differs") })
    })
}

/// A type's value in a form that does not depend on its encoding, as labelled parts.
fn logical(c: &mut Client, k: &[u8], t: &str, caps: Caps) -> Result<Vec<(String, Frame)>, Error> {
    let one = |c: &mut Client, args: &[&[u8]]| -> Result<Frame, Error> { Ok(c.raw(args)?) };
    let sorted = |f: Frame| -> Frame {
        match f {
            Frame::Array(mut v) => {
                v.sort_by_key(wire);
                Frame::Array(v)
            }
            f => f,
        }
    };
    let pairs_sorted = |f: Frame| -> Frame {
        match f {
            Frame::Array(v) => {
                let mut p: Vec<Frame> = v.chunks(2).map(|c| Frame::Array(c.to_vec())).collect();
                p.sort_by_key(wire);
                Frame::Array(p)
            }
            f => f,
        }
    };
    let v = match t {
        "string" => one(c, &[b"GET", k])?,
        "list" => one(c, &[b"LRANGE", k, b"0", b"-1"])?,
        "hash" => {
            let pairs = pairs_sorted(one(c, &[b"HGETALL", k])?);
            return hash_logical(c, k, caps, pairs);
        }
        "set" => sorted(one(c, &[b"SMEMBERS", k])?),
        "zset" => zset_scores(one(c, &[b"ZRANGE", k, b"0", b"-1", b"WITHSCORES"])?),
        "stream" => return stream_logical(c, k),
        "vectorset" => return vectorset_logical(c, k),
        other => unreachable_type(other),
    };
    Ok(vec![("value".into(), v)])
}

/// `logical` is called for [`KNOWN_TYPES`] only.
fn unreachable_type(t: &str) -> Frame {
    Frame::Error(format!("no logical form for type {t}").into_bytes())
}

/// Member/score pairs with each score as the double it denotes, written one canonical way (Rust's
/// shortest round-trip form): the same double prints differently on different servers.
fn zset_scores(f: Frame) -> Frame {
    match f {
        Frame::Array(v) => Frame::Array(
            v.chunks(2)
                .flat_map(|p| {
                    let score = p.get(1).and_then(Frame::as_text).and_then(|s| parse_score(&s));
                    let score = match score {
                        Some(d) => Frame::Bulk(format!("{d:?}").into_bytes()),
                        None => p.get(1).cloned().unwrap_or(Frame::Null),
                    };
                    [p[0].clone(), score]
                })
                .collect(),
        ),
        f => f,
    }
}

/// A score as a server prints it (`3.5`, `inf`, `-inf`, `1e+20`).
fn parse_score(s: &str) -> Option<f64> {
    match s {
        "inf" | "+inf" => Some(f64::INFINITY),
        "-inf" => Some(f64::NEG_INFINITY),
        s => s.parse().ok(),
    }
}

/// A hash: its fields and values, and, where the server has them, each field's own TTL (absolute,
/// `HPEXPIRETIME`: -1 none) labelled by field.
fn hash_logical(c: &mut Client, k: &[u8], caps: Caps, pairs: Frame) -> Result<Vec<(String, Frame)>, Error> {
    let fields: Vec<Vec<u8>> = pairs.as_array().unwrap_or(&[]).iter().filter_map(|p| p.as_array()?.first()?.as_bytes().map(<[u8]>::to_vec)).collect();
    let mut v = vec![("value".to_string(), pairs)];
    if caps.field_ttl && !fields.is_empty() {
        let n = fields.len().to_string();
        let mut args: Vec<&[u8]> = vec![b"HPEXPIRETIME", k, b"FIELDS", n.as_bytes()];
        args.extend(fields.iter().map(Vec::as_slice));
        let ttls = c.raw(&args)?;
        for (f, t) in fields.iter().zip(ttls.as_array().unwrap_or(&[])) {
            if t.as_int() != Some(-1) {
                v.push((format!("{FIELD_TTL}{}", printable(f)), t.clone()));
            }
        }
    }
    Ok(v)
}

/// A vector set: its dimension and quantization, its elements, and for each its vector as stored
/// (`VEMB … RAW`: quantization, bytes, norm, range) and attributes (`VGETATTR`). Not its graph: the
/// links are built at random and differ between identical sets.
fn vectorset_logical(c: &mut Client, k: &[u8]) -> Result<Vec<(String, Frame)>, Error> {
    let card = c.raw(&[b"VCARD".as_slice(), k])?.as_int().unwrap_or(0).max(0);
    let mut v = vec![("cardinality".to_string(), Frame::Integer(card)), ("dimension".to_string(), c.raw(&[b"VDIM".as_slice(), k])?)];
    let info = c.raw(&[b"VINFO".as_slice(), k])?;
    for pair in info.as_array().unwrap_or(&[]).chunks(2) {
        if let [name, val] = pair {
            if matches!(name.as_text().as_deref(), Some("quant-type" | "vector-dim" | "size" | "attributes-count")) {
                v.push((format!("info {}", name.as_text().unwrap_or_default()), val.clone()));
            }
        }
    }
    // Every element: VRANDMEMBER with a positive count of at least the cardinality returns each once.
    let members = c.raw(&[b"VRANDMEMBER".as_slice(), k, card.to_string().as_bytes()])?;
    let mut names: Vec<Vec<u8>> = members.as_array().unwrap_or(&[]).iter().filter_map(|m| m.as_bytes().map(<[u8]>::to_vec)).collect();
    names.sort();
    let cmds: Vec<Vec<Vec<u8>>> = names.iter().flat_map(|e| [command(&[b"VEMB".as_slice(), k, e, b"RAW"]), command(&[b"VGETATTR".as_slice(), k, e])]).collect();
    let replies = c.pipeline(&cmds)?;
    v.push(("elements".to_string(), Frame::Array(names.iter().map(|n| Frame::Bulk(n.clone())).collect())));
    for (e, r) in names.iter().zip(replies.chunks(2)) {
        v.push((format!("element {} vector", printable(e)), r[0].clone()));
        v.push((format!("element {} attributes", printable(e)), r[1].clone()));
    }
    Ok(v)
}

/// A stream: entries, the stream's ids, its groups with their pending entries and consumers. Idle
/// times and seen-times are left out: they move with the clock.
fn stream_logical(c: &mut Client, k: &[u8]) -> Result<Vec<(String, Frame)>, Error> {
    let mut v = vec![("entries".to_string(), c.raw(&[b"XRANGE".as_slice(), k, b"-", b"+"])?)];
    let info = c.raw(&[b"XINFO".as_slice(), b"STREAM", k])?;
    if let Some(items) = info.as_array() {
        for pair in items.chunks(2) {
            if let [name, val] = pair {
                let n = name.as_text().unwrap_or_default();
                if matches!(n.as_str(), "length" | "last-generated-id" | "max-deleted-entry-id" | "entries-added" | "groups") {
                    v.push((n, val.clone()));
                }
            }
        }
    }
    let groups = c.raw(&[b"XINFO".as_slice(), b"GROUPS", k])?;
    for g in groups.as_array().unwrap_or(&[]) {
        let fields = g.as_array().unwrap_or(&[]);
        let get = |key: &str| fields.chunks(2).find(|p| p[0].as_text().as_deref() == Some(key)).and_then(|p| p.get(1)).cloned();
        let Some(name) = get("name").and_then(|n| n.as_bytes().map(<[u8]>::to_vec)) else { continue };
        let label = |what: &str| format!("group {} {what}", String::from_utf8_lossy(&name));
        v.extend(get("last-delivered-id").map(|f| (label("last-delivered-id"), f)));
        v.extend(get("pending").map(|f| (label("pending"), f)));
        let pending = c.raw(&[b"XPENDING".as_slice(), k, &name, b"-", b"+", b"100000"])?;
        let mut pel = Vec::new();
        for p in pending.as_array().unwrap_or(&[]) {
            if let Some([id, consumer, _idle, count]) = p.as_array().and_then(|a| <&[Frame; 4]>::try_from(a).ok()) {
                pel.extend([id.clone(), consumer.clone(), count.clone()]);
            }
        }
        v.push((label("pel"), Frame::Array(pel)));
        let consumers = c.raw(&[b"XINFO".as_slice(), b"CONSUMERS", k, &name])?;
        let mut names: Vec<String> =
            consumers.as_array().unwrap_or(&[]).iter().filter_map(|c| c.as_array()?.chunks(2).find(|p| p[0].as_text().as_deref() == Some("name"))?.get(1)?.as_text()).collect();
        names.sort();
        v.push((label("consumers"), Frame::Array(names.into_iter().map(|n| Frame::Bulk(n.into_bytes())).collect())));
    }
    Ok(v)
}

fn compare_functions(a: &mut Client, b: &mut Client, opts: &Options, out: &mut Outcome) -> Result<(), Error> {
    let fa = a.raw(&["FUNCTION", "LIST", "WITHCODE"])?;
    let fb = b.raw(&["FUNCTION", "LIST", "WITHCODE"])?;
    match (&fa, &fb) {
        (Frame::Error(_), Frame::Error(_)) => Ok(()), // neither has functions (Redis < 7.0)
        (Frame::Array(x), Frame::Error(_)) if x.is_empty() => Ok(()),
        (Frame::Error(_), Frame::Array(y)) if y.is_empty() => Ok(()),
        (Frame::Array(x), Frame::Array(y)) => {
            let norm = |v: &[Frame]| {
                let mut libs: Vec<Vec<u8>> = v.iter().map(wire).collect();
                libs.sort();
                libs
            };
            out.function_libraries = x.len();
            if norm(x) != norm(y) {
                out.differ(opts.differences_max, format!("function libraries differ ({} vs {})", x.len(), y.len()));
            }
            Ok(())
        }
        _ => {
            out.differ(opts.differences_max, "only one server has functions".into());
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(v: &[(&str, &str)]) -> Vec<(String, Frame)> {
        v.iter().map(|(k, f)| (k.to_string(), Frame::Bulk(f.as_bytes().to_vec()))).collect()
    }

    #[test]
    fn logical_comparison_tolerates_only_version_dependent_fields() {
        let a = parts(&[("length", "3"), ("entries-added", "3")]);
        let b = parts(&[("length", "3")]);
        assert!(same_logical(&a, &b), "a field only newer servers report is left out");
        let c = parts(&[("length", "4")]);
        assert!(!same_logical(&b, &c));
        let d = parts(&[("length", "3"), ("last-id", "1-1")]);
        assert!(!same_logical(&b, &d), "any other missing field is a difference");
        let e = parts(&[("length", "3"), ("entries-added", "4")]);
        assert!(!same_logical(&a, &e), "reported by both: compared");
    }

    #[test]
    fn scores_are_compared_as_doubles() {
        let text = |v: &[&str]| Frame::Array(v.iter().map(|s| Frame::Bulk(s.as_bytes().to_vec())).collect());
        // Redis 7.0 prints 17 significant digits, Valkey the shortest form of the same double.
        assert_eq!(zset_scores(text(&["m", "36.348514736245122"])), zset_scores(text(&["m", "36.34851473624512"])));
        assert_ne!(zset_scores(text(&["m", "36.34851473624512"])), zset_scores(text(&["m", "36.348514736245126"])), "one ulp apart");
        assert_eq!(zset_scores(text(&["a", "inf", "b", "-inf"])), zset_scores(text(&["a", "+inf", "b", "-inf"])));
        assert_ne!(zset_scores(text(&["a", "1"])), zset_scores(text(&["b", "1"])));
    }

    #[test]
    fn field_ttls_are_compared_within_the_tolerance() {
        let ttl = |f: &str, t: i64| (format!("{FIELD_TTL}{f}"), Frame::Integer(t));
        let value = ("value".to_string(), Frame::Array(vec![]));
        let a = vec![value.clone(), ttl("f", 1_000_000)];
        assert_eq!(first_difference(&a, &[value.clone(), ttl("f", 1_000_500)], 2000), None);
        assert!(first_difference(&a, &[value.clone(), ttl("f", 1_005_000)], 2000).is_some_and(|d| d.contains("field-ttl f")));
        assert!(first_difference(&a, std::slice::from_ref(&value), 2000).is_some(), "a TTL on one side only");
        assert_eq!(first_difference(std::slice::from_ref(&value), std::slice::from_ref(&value), 2000), None);
    }

    #[test]
    fn differences_are_counted_all_but_listed_up_to_the_bound() {
        let mut o = Outcome::default();
        for i in 0..5 {
            o.differ(2, format!("d{i}"));
        }
        assert_eq!(o.difference_count, 5);
        assert_eq!(o.differences, vec!["d0", "d1"]);
        assert!(!o.identical());
        let mut u = Outcome::default();
        u.uncomparable.insert("graphdata".into(), 1);
        assert!(!u.identical(), "a key that could not be compared is not identical");
        assert_eq!(printable(b"a\x00b"), "a\\x00b");
        assert!(printable(&[b'x'; 100]).ends_with('…'));
    }
}
