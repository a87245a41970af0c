//! Prometheus text exposition (format 0.0.4), the way the exporters operators already run speak it:
//! [`Exposition`] writes it (families grouped, `# HELP`/`# TYPE` once each, labels escaped),
//! [`serve`] answers `GET /metrics` on a small HTTP endpoint, and [`parse`] reads it back strictly
//! (what the tests scrape with). [`output`]: stdout and stderr written so that a failed write is
//! dropped and counted, never a panic.
#![deny(missing_docs)]

pub mod event_stream;
pub mod output;
pub use event_stream::EventStream;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::time::Duration;

/// Kind of a metric family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Goes up and down.
    Gauge,
    /// Only goes up (names end in `_total`).
    Counter,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Gauge => "gauge",
            Kind::Counter => "counter",
        }
    }
}

struct Family {
    name: String,
    help: String,
    kind: Kind,
    samples: Vec<String>,
}

/// Builds one exposition. Samples of a family may be added in any order; they are written together.
pub struct Exposition {
    prefix: String,
    families: Vec<Family>,
}

impl Exposition {
    /// Every metric is named `<prefix>_<name>`.
    pub fn new(prefix: &str) -> Exposition {
        Exposition { prefix: prefix.into(), families: Vec::new() }
    }

    /// A gauge sample. `help` is used the first time a name is seen.
    pub fn gauge(&mut self, name: &str, help: &str, labels: &[(&str, &str)], value: f64) {
        self.sample(name, help, Kind::Gauge, labels, value);
    }

    /// A counter sample.
    pub fn counter(&mut self, name: &str, help: &str, labels: &[(&str, &str)], value: f64) {
        self.sample(name, help, Kind::Counter, labels, value);
    }

    fn sample(&mut self, name: &str, help: &str, kind: Kind, labels: &[(&str, &str)], value: f64) {
        let full = format!("{}_{name}", self.prefix);
        debug_assert!(valid_name(&full), "metric name {full}");
        let mut line = full.clone();
        if !labels.is_empty() {
            let l: Vec<String> = labels.iter().map(|(k, v)| format!("{k}=\"{}\"", escape(v))).collect();
            line += &format!("{{{}}}", l.join(","));
        }
        line += &format!(" {}", number(value));
        match self.families.iter_mut().find(|f| f.name == full) {
            Some(f) => f.samples.push(line),
            None => self.families.push(Family { name: full, help: help.into(), kind, samples: vec![line] }),
        }
    }

    /// The text.
    pub fn finish(self) -> String {
        let mut out = String::new();
        for f in self.families {
            out += &format!("# HELP {} {}\n# TYPE {} {}\n", f.name, f.help.replace('\\', "\\\\").replace('\n', "\\n"), f.name, f.kind.name());
            for s in f.samples {
                out += &s;
                out.push('\n');
            }
        }
        out
    }
}

fn escape(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

fn number(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.into()
    } else if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        format!("{v}")
    }
}

fn valid_name(n: &str) -> bool {
    let mut c = n.chars();
    c.next().is_some_and(|f| f.is_ascii_alphabetic() || f == '_' || f == ':') && c.all(|ch| ch.is_ascii_alphanumeric() || ch == '_' || ch == ':')
}

/// Longest request head read.
const REQUEST_BYTES_MAX: usize = 8 << 10;

/// The endpoint's admission: a connection is a stranger until its request head has arrived, then
/// one of [`limits::METRICS_CONNECTIONS_MAX`] scrapes answered at once.
fn budget() -> admission::Budget {
    admission::Budget {
        unauthenticated_max: limits::METRICS_UNREAD_MAX,
        per_source_max: limits::METRICS_UNREAD_PER_SOURCE_MAX,
        authenticated_max: limits::METRICS_CONNECTIONS_MAX,
        deadline: limits::UNAUTHENTICATED_DEADLINE,
    }
}

/// Serve `GET /metrics` on `addr` from a thread, rendering `render()` per scrape. Returns the bound
/// address. Other paths get 404, other methods 405. A request must arrive whole within
/// [`limits::UNAUTHENTICATED_DEADLINE`] of the connection (however slowly it trickles); refusals are
/// logged at a bounded rate.
pub fn serve(addr: SocketAddr, render: Arc<dyn Fn() -> String + Send + Sync>) -> std::io::Result<SocketAddr> {
    let l = TcpListener::bind(addr)?;
    let local = l.local_addr()?;
    let gate = admission::Gate::start("metrics", budget())?;
    std::thread::Builder::new().name("metrics".into()).spawn(move || {
        for conn in l.incoming() {
            let Ok((s, handle)) = conn.and_then(|s| s.try_clone().map(|h| (s, h))) else {
                // Out of descriptors, most likely: a pause rather than a spin (not synchronization).
                std::thread::sleep(limits::ACCEPT_FAILURE_PAUSE);
                continue;
            };
            let mut pass = gate.arrive(Box::new(handle), admission::Source::of_tcp(&s));
            let render = render.clone();
            let spawned = std::thread::Builder::new().name("metrics-conn".into()).spawn(move || {
                if let Err(e) = answer(s, &*render, &mut pass) {
                    tracing::debug!(error = %e, "metrics request");
                }
            });
            if spawned.is_err() {
                tracing::debug!("spawn metrics connection thread failed");
            }
        }
    })?;
    Ok(local)
}

fn answer(mut s: TcpStream, render: &(dyn Fn() -> String + Send + Sync), pass: &mut admission::Pass) -> std::io::Result<()> {
    // Per read; the gate's reaper bounds the whole request.
    s.set_read_timeout(Some(limits::UNAUTHENTICATED_DEADLINE))?;
    s.set_write_timeout(Some(Duration::from_secs(5)))?;
    let mut head = Vec::new();
    let mut chunk = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && !head.windows(2).any(|w| w == b"\n\n") {
        let n = match s.read(&mut chunk) {
            Ok(n) => n,
            Err(e) => {
                // A read timing out is past the deadline (usually shut and counted by the reaper first).
                pass.failed(admission::Refusal::of_io(&e), &e);
                return Ok(());
            }
        };
        if n == 0 {
            if head.is_empty() {
                pass.failed(admission::Refusal::Closed, &"closed before a request");
                return Ok(());
            }
            break;
        }
        head.extend_from_slice(&chunk[..n]);
        if head.len() > REQUEST_BYTES_MAX {
            pass.failed(admission::Refusal::Protocol, &"request head too large");
            return reply(&mut s, "431 Request Header Fields Too Large", "text/plain", "request too large\n");
        }
    }
    if pass.authenticated().is_err() {
        return reply(&mut s, "503 Service Unavailable", "text/plain", "too many scrapes at once\n");
    }
    match route(&head) {
        Route::Metrics => reply(&mut s, "200 OK", "text/plain; version=0.0.4; charset=utf-8", &(render() + &refusals())),
        Route::Index => reply(&mut s, "200 OK", "text/html", "<html><body><a href=\"/metrics\">metrics</a></body></html>\n"),
        Route::NotFound => reply(&mut s, "404 Not Found", "text/plain", "not found: try /metrics\n"),
        Route::BadMethod => reply(&mut s, "405 Method Not Allowed", "text/plain", "GET /metrics\n"),
    }
}

/// Every listener's refusals in the process ([`admission::registry`]), on every scrape: an agent's
/// peer port and the metrics endpoints themselves are counted nowhere else.
pub fn refusals() -> String {
    let mut e = Exposition::new("fastrepl");
    for (listener, totals) in admission::registry::listeners() {
        for &kind in admission::Refusal::ALL {
            let help = "Connections a listener closed before they were served (before or at authentication), by listener and kind.";
            e.counter("admission_refused_total", help, &[("listener", listener), ("kind", kind.name())], totals.refused(kind) as f64);
        }
    }
    e.finish()
}

/// What a request asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// `GET /metrics`.
    Metrics,
    /// `GET /`.
    Index,
    /// `GET` of anything else.
    NotFound,
    /// Not `GET`/`HEAD`.
    BadMethod,
}

/// Route a request from its head (the bytes up to the blank line; only the request line counts).
///
/// Strict, as HTTP/1.1 asks: the request line starts with the method (no whitespace, Unicode or
/// ASCII, before it) and its parts are split on single spaces; only the line's end (`\r`) is cut.
pub fn route(head: &[u8]) -> Route {
    let line = head.split(|b| *b == b'\n').next().unwrap_or_default();
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let mut parts = line.split(|b| *b == b' ');
    let (method, target) = (parts.next().unwrap_or_default(), parts.next().unwrap_or_default());
    let path = target.split(|b| *b == b'?').next().unwrap_or_default();
    match (method, path) {
        (b"GET" | b"HEAD", b"/metrics") => Route::Metrics,
        (b"GET" | b"HEAD", b"/") => Route::Index,
        (b"GET" | b"HEAD", _) => Route::NotFound,
        _ => Route::BadMethod,
    }
}

/// Fuzz entry (`fuzz/fuzz_targets/metrics.rs`): any request head routes without panicking, and the
/// exposition parser survives any text.
#[cfg(any(test, fuzzing))]
pub fn fuzz_one(data: &[u8]) {
    let r = route(data);
    if r == Route::Metrics {
        assert!(data.starts_with(b"GET ") || data.starts_with(b"HEAD "), "a metrics route starts with its method");
    }
    let _ = parse(&String::from_utf8_lossy(data));
}

fn reply(s: &mut TcpStream, status: &str, ctype: &str, body: &str) -> std::io::Result<()> {
    let head = format!("HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n", body.len());
    s.write_all(head.as_bytes())?;
    s.write_all(body.as_bytes())
}

/// One sample read back.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// Metric name.
    pub name: String,
    /// Labels, in order.
    pub labels: Vec<(String, String)>,
    /// Value.
    pub value: f64,
    /// The family's `# TYPE`.
    pub kind: Kind,
}

/// Parse an exposition strictly: every sample's family declared by `# TYPE` before it, families
/// contiguous, names and labels well formed, values numbers. For tests and tools; not for hostile
/// input of unbounded size.
pub fn parse(text: &str) -> Result<Vec<Sample>, String> {
    let mut out = Vec::new();
    let mut types: Vec<(String, Kind)> = Vec::new();
    let mut current: Option<String> = None;
    for (n, line) in text.lines().enumerate() {
        let at = |m: String| format!("line {}: {m}: {line:?}", n + 1);
        if line.is_empty() {
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, t) = rest.split_once(' ').ok_or_else(|| at("TYPE without a type".into()))?;
            let kind = match t {
                "gauge" => Kind::Gauge,
                "counter" => Kind::Counter,
                t => return Err(at(format!("unsupported type {t}"))),
            };
            if types.iter().any(|(n, _)| n == name) {
                return Err(at(format!("family {name} declared twice (families must be contiguous)")));
            }
            types.push((name.into(), kind));
            current = Some(name.into());
            continue;
        }
        if line.starts_with('#') {
            continue;
        }
        let (series, value) = line.rsplit_once(' ').ok_or_else(|| at("no value".into()))?;
        let value: f64 = match value {
            "+Inf" => f64::INFINITY,
            "-Inf" => f64::NEG_INFINITY,
            v => v.parse().map_err(|_| at(format!("bad value {v}")))?,
        };
        let (name, labels) = match series.split_once('{') {
            None => (series, Vec::new()),
            Some((name, rest)) => (name, parse_labels(rest.strip_suffix('}').ok_or_else(|| at("unclosed labels".into()))?).map_err(at)?),
        };
        if !valid_name(name) {
            return Err(at(format!("bad metric name {name}")));
        }
        if current.as_deref() != Some(name) {
            return Err(at(format!("sample of {name} outside its family's block")));
        }
        let kind = types.iter().find(|(n, _)| n == name).map(|(_, k)| *k).ok_or_else(|| at("no TYPE".into()))?;
        out.push(Sample { name: name.into(), labels, value, kind });
    }
    Ok(out)
}

fn parse_labels(s: &str) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    let mut rest = s;
    while !rest.is_empty() {
        let (k, after) = rest.split_once("=\"").ok_or("label without =\"")?;
        if !valid_name(k) || k.contains(':') {
            return Err(format!("bad label name {k}"));
        }
        let mut v = String::new();
        let mut chars = after.char_indices();
        let end = loop {
            match chars.next() {
                None => return Err("unterminated label value".into()),
                Some((i, '"')) => break i,
                Some((_, '\\')) => match chars.next() {
                    Some((_, 'n')) => v.push('\n'),
                    Some((_, c @ ('\\' | '"'))) => v.push(c),
                    _ => return Err("bad escape in label value".into()),
                },
                Some((_, c)) => v.push(c),
            }
        };
        out.push((k.to_string(), v));
        rest = &after[end + 1..];
        rest = rest.strip_prefix(',').unwrap_or(rest);
    }
    Ok(out)
}

/// Fetch `http://addr/metrics` (tests, `fastrepl status --metrics`): the body of a 200.
pub fn scrape(addr: &str, timeout: Duration) -> Result<String, String> {
    let sa: SocketAddr = std::net::ToSocketAddrs::to_socket_addrs(addr).map_err(|e| format!("resolve {addr}: {e}"))?.next().ok_or(format!("resolve {addr}"))?;
    let mut s = TcpStream::connect_timeout(&sa, timeout).map_err(|e| format!("connect to {addr}: {e}"))?;
    s.set_read_timeout(Some(timeout)).map_err(|e| e.to_string())?;
    s.write_all(format!("GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").as_bytes()).map_err(|e| format!("send to {addr}: {e}"))?;
    let mut body = Vec::new();
    s.take(64 << 20).read_to_end(&mut body).map_err(|e| format!("read from {addr}: {e}"))?;
    let text = String::from_utf8(body).map_err(|_| format!("{addr}: not UTF-8"))?;
    let (head, body) = text.split_once("\r\n\r\n").ok_or(format!("{addr}: no HTTP header"))?;
    if !head.starts_with("HTTP/1.1 200") {
        return Err(format!("{addr}: {}", head.lines().next().unwrap_or("")));
    }
    Ok(body.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_are_grouped_and_read_back() {
        let mut e = Exposition::new("x");
        e.gauge("a", "A.", &[("g", "1")], 1.0);
        e.counter("b_total", "B.", &[], 7.0);
        e.gauge("a", "", &[("g", "2"), ("why", "q\"uo\\te\nnl")], 2.5);
        let text = e.finish();
        let s = parse(&text).unwrap();
        assert_eq!(s.len(), 3);
        assert_eq!((s[0].name.as_str(), s[1].name.as_str(), s[2].name.as_str()), ("x_a", "x_a", "x_b_total"), "{text}");
        assert_eq!(s[1].labels[1].1, "q\"uo\\te\nnl");
        assert_eq!(s[1].value, 2.5);
        assert_eq!(s[2].kind, Kind::Counter);
    }

    #[test]
    fn the_parser_is_strict() {
        assert!(parse("x 1\n").unwrap_err().contains("outside"));
        assert!(parse("# TYPE x gauge\nx{a=\"1} 1\n").is_err());
        assert!(parse("# TYPE x gauge\nx one\n").unwrap_err().contains("bad value"));
        assert!(parse("# TYPE x gauge\nx 1\n# TYPE y gauge\ny 1\nx 2\n").unwrap_err().contains("outside"));
        assert!(parse("# TYPE x gauge\nx 1\n# TYPE x gauge\n").unwrap_err().contains("twice"));
    }

    #[test]
    fn fuzz_smoke() {
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        let alphabet = b"# TYPE HELP gauge counter x_a{l=\"v\\\",} 1.5e3 +Inf NaN\nGET /metrics HTTP/1.1\r";
        for len in 0..3000usize {
            let d: Vec<u8> = (0..len % 200)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    alphabet[(x % alphabet.len() as u64) as usize]
                })
                .collect();
            fuzz_one(&d);
        }
        assert_eq!(route(b"GET /metrics?x=1 HTTP/1.1\r\n"), Route::Metrics);
        assert_eq!(route(b"POST /metrics HTTP/1.1\r\n"), Route::BadMethod);
    }

    #[test]
    fn whitespace_before_the_method_is_refused() {
        // The input the fuzzer found: EM QUAD (U+2001) before the request line. `str::trim` used to
        // strip it (Unicode whitespace) and route it to the metrics, while the target's invariant said
        // a metrics route starts with the method. HTTP/1.1 allows nothing before the method, so refuse.
        let crash = include_bytes!("../../../fuzz/corpus/metrics/regression-em-quad-before-get");
        fuzz_one(crash);
        assert_eq!(route(crash), Route::BadMethod);
        assert_eq!(route(b" GET /metrics HTTP/1.1\r\n"), Route::BadMethod);
        assert_eq!(route(b"\tGET /metrics HTTP/1.1\r\n"), Route::BadMethod);
        assert_eq!(route(b"GET /metrics HTTP/1.1\r\n"), Route::Metrics);
        assert_eq!(route(b"HEAD /metrics HTTP/1.1\r\n"), Route::Metrics);
        assert_eq!(route(b"GET /metrics\r\n"), Route::Metrics);
        assert_eq!(route(b"GET / HTTP/1.1\r\n"), Route::Index);
        assert_eq!(route(b"get /metrics HTTP/1.1\r\n"), Route::BadMethod);
    }

    #[test]
    fn serves_scrapes_and_refuses_other_paths() {
        let addr = serve("127.0.0.1:0".parse().unwrap(), Arc::new(|| "# TYPE t gauge\nt 1\n".to_string())).unwrap();
        let body = scrape(&addr.to_string(), Duration::from_secs(5)).unwrap();
        assert_eq!(parse(&body).unwrap()[0].value, 1.0);
        let mut s = TcpStream::connect(addr).unwrap();
        s.write_all(b"GET /nope HTTP/1.1\r\n\r\n").unwrap();
        let mut r = String::new();
        s.read_to_string(&mut r).unwrap();
        assert!(r.starts_with("HTTP/1.1 404"), "{r}");
    }
}
