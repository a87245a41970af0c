//! `fastrepl`: fast full synchronization of Redis/Valkey replicas through a relay. The product only:
//! the demo, benchmarks and probes are in `fastrepl-lab` (crates/lab).
//!
//! This file: the top-level parser and the dispatch to the commands ([`cmd`], a file each), and the
//! process's set-up: UCX's environment, the panic rule ([`exits`]), the log (its filter, format and
//! writer; where its lines go: [`log_sink`]).

use clap::{Parser, Subcommand};
use cmd::args::LogFormat;
use std::process::ExitCode;

/// A line on stdout that the command's outcome does not depend on (its exit status says that): a
/// failed write (a closed pipe, a full disk) is dropped and counted, never a panic like `println!`'s.
macro_rules! outln {
    ($($arg:tt)*) => {{ ::metrics::output::stdout_line(&format!($($arg)*)); }};
}

/// [`outln`] on stderr, for what is said outside the log: through the log's queue, in order with
/// the log's lines, so a stalled reader blocks no thread ([`log_sink`]).
macro_rules! errln {
    ($($arg:tt)*) => {{ $crate::log_sink::send(format!("{}\n", format!($($arg)*)).into_bytes(), $crate::log_sink::write_line); }};
}

mod cmd;
mod compression_arg;
mod exits;
mod log_sink;
mod transport_arg;

#[derive(Parser)]
#[command(
    name = "fastrepl",
    version,
    about = "Fast, master-friendly full sync for Redis and Valkey replicas",
    after_help = "Every command: exit 70 when one of its threads died (a bug: the process ends rather than serve nothing), 124 when a SIGTERM/SIGINT did not end it within 85 s."
)]
struct Cli {
    /// Log lines as text for people, or as one JSON object per line for log collectors.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text, env = "FASTREPL_LOG_FORMAT")]
    log_format: LogFormat,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run a relay beside the master: one snapshot, served to any number of agents.
    Relay(cmd::relay::RelayArgs),
    /// Sync a local replica through a relay and hand it to its master (exit 0: partial handoff,
    /// 3: the master insisted on a full sync, 130: interrupted (SIGINT/SIGTERM), 1: failed).
    #[command(
        mut_arg("tls", |a| a.help("Speak TLS to the master, its replicas and the sentinels, and to a local replica with tls-replication yes")),
        mut_arg("cert", |a| a.help("Client certificate, PEM, for servers with tls-auth-clients; also served to a local replica with tls-replication yes"))
    )]
    Join(cmd::join::JoinArgs),
    /// Compare two servers' datasets (exit 0 identical, 1 different, 2 a type it cannot compare or an
    /// error).
    #[command(mut_arg("tls", |a| a.help("Speak TLS to both servers")))]
    Verify(cmd::verify::VerifyArgs),
    /// Pull a relay's snapshot into a file (or stdout) without a Redis replica.
    Fetch(cmd::fetch::FetchArgs),
    /// Prepare a server that is not running yet to start as a replica that resyncs partially: the
    /// snapshot as its RDB file (and, for a cluster node, its cluster config as the master's replica).
    /// For a container's init step or systemd's ExecStartPre.
    Stage(cmd::stage::StageArgs),
    /// What a running relay holds and serves: generations, capture, agents, bytes, errors.
    Status(cmd::status::StatusArgs),
    /// Started by `join`: resets the replica if the join's process dies before the handoff.
    #[command(name = agent::guard::SUBCOMMAND, hide = true)]
    Guard,
    /// Started by `relay`: holds UCX in a process of its own (see relay::ucx_side).
    #[cfg(feature = "ucx")]
    #[command(name = relay::ucx_side::SUBCOMMAND, hide = true)]
    RelayUcxSide,
}

/// The log filter: `FASTREPL_LOG` (`spec`) or `info`, with rustls's own lines at `error` unless the
/// spec names rustls. rustls logs a warning for each bad handshake it reads ("Received a … message
/// while expecting …", "TLS alert warning received"): a line per stranger on a TLS listener, past the
/// admission gate's bounded rate. The failure itself comes back to us as an error and is counted and
/// summed up there.
fn log_filter(spec: Option<&str>) -> tracing_subscriber::EnvFilter {
    let filter = spec.and_then(|s| tracing_subscriber::EnvFilter::try_new(s).ok()).unwrap_or_else(|| tracing_subscriber::EnvFilter::new("info"));
    if spec.is_some_and(|s| s.contains("rustls")) {
        return filter;
    }
    filter.add_directive("rustls=error".parse().expect("a valid directive"))
}

fn init_logging(format: LogFormat) {
    let filter = log_filter(std::env::var("FASTREPL_LOG").ok().as_deref());
    // Colours only for a person at a terminal: journald and log files get plain text.
    use std::io::IsTerminal;
    let ansi = std::io::stderr().is_terminal();
    let json = format == LogFormat::Json;
    let log = tracing_subscriber::fmt().with_env_filter(filter).with_writer(move || LogWriter { json }).with_target(false).with_ansi(ansi);
    // A failed write must not be reported by `eprintln!` (what the subscriber does by default): on a
    // closed stderr that panics the thread that logged. LogWriter drops and counts it instead.
    let log = log.log_internal_errors(false);
    log_sink::start(log_sink::write_line);
    match format {
        LogFormat::Text => log.init(),
        // One object per line, fields flattened, span fields kept: what Loki, Elastic and journald
        // pipelines parse without a grok pattern.
        LogFormat::Json => log.json().flatten_event(true).with_current_span(true).with_span_list(false).init(),
    }
}

fn main() -> ExitCode {
    // Before any thread exists: UCX reads these from the environment.
    #[cfg(feature = "ucx")]
    ucx::apply_tuned_env();
    let cli = Cli::parse();
    exits::exit_on_panic(cli.log_format == LogFormat::Json);
    // Also before any thread: UCX reads its device list from the environment, where an operator's
    // own UCX_NET_DEVICES is already; --ucx-devices is the same setting under our name.
    if let Cmd::Relay(cmd::relay::RelayArgs { ucx_devices: Some(d), .. }) = &cli.cmd {
        std::env::set_var("UCX_NET_DEVICES", d);
    }
    // Every process this one starts logs as it does: the relay's UCX side, a join's or a stage's
    // guard (whose lines share this one's stderr).
    std::env::set_var("FASTREPL_LOG_FORMAT", if cli.log_format == LogFormat::Json { "json" } else { "text" });
    init_logging(cli.log_format);
    let r = match cli.cmd {
        Cmd::Relay(a) => cmd::relay::run(a),
        Cmd::Join(a) => cmd::join::run(a, cli.log_format),
        Cmd::Verify(a) => cmd::verify::run(a),
        Cmd::Fetch(a) => cmd::fetch::run(a),
        Cmd::Stage(a) => cmd::stage::run(a),
        Cmd::Status(a) => cmd::status::run(a),
        Cmd::Guard => Ok(ExitCode::from(u8::try_from(agent::guard::run()).unwrap_or(1))),
        #[cfg(feature = "ucx")]
        Cmd::RelayUcxSide => Ok(ExitCode::from(u8::try_from(relay::ucx_side::run(|| log_sink::drain(limits::LAST_WORD_WAIT))).unwrap_or(1))),
    };
    let code = match r {
        Ok(code) => code,
        Err(e) => {
            // Room for the last word first: queued to a full queue it would be dropped (with a
            // reader that stalled, this and the drain below wait a second each).
            log_sink::drain(limits::LAST_WORD_WAIT);
            match cli.log_format {
                LogFormat::Text => errln!("fastrepl: {}", said_once(&e)),
                // A collector reading JSON lines would drop a plain-text last word.
                LogFormat::Json => tracing::error!(error = %said_once(&e), "fastrepl failed"),
            }
            ExitCode::from(1)
        }
    };
    // What the process said last reaches a reader that reads; one that stalled does not hold the end.
    log_sink::drain(limits::LAST_WORD_WAIT);
    code
}

/// Where log lines go: stderr, above the progress display when there is one ([`log_sink::write_line`]).
/// A line that cannot be written (a closed pipe, a full disk) is dropped and counted
/// ([`metrics::output`]): the thread that logged goes on with its work.
struct LogWriter {
    /// `--log-format json`: embed list fields as JSON lists (see [`json_lists`]).
    json: bool,
}

impl std::io::Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        // One formatted event per call (the fmt layer writes each line whole). Queued for the log
        // sink's thread: a reader that stalls blocks no thread that logs.
        let line = if self.json { json_lists(buf) } else { None };
        log_sink::send(line.unwrap_or_else(|| buf.to_vec()), log_sink::write_line);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        // Each line was flushed as it was written (or dropped).
        Ok(())
    }
}

/// A JSON log line with its list fields made real lists. tracing records a field as a string; list
/// fields are logged as JSON array text (`relay::json_list`), which this embeds as the array itself, at
/// the top level and in the span's fields. `None`: nothing to change (or not a JSON object).
fn json_lists(line: &[u8]) -> Option<Vec<u8>> {
    fn embed(map: &mut serde_json::Map<String, serde_json::Value>) -> bool {
        let mut changed = false;
        for v in map.values_mut() {
            match v {
                serde_json::Value::String(s) if s.starts_with('[') && s.ends_with(']') => {
                    if let Ok(list @ serde_json::Value::Array(_)) = serde_json::from_str(s) {
                        *v = list;
                        changed = true;
                    }
                }
                serde_json::Value::Object(inner) => changed |= embed(inner),
                _ => {}
            }
        }
        changed
    }
    let mut v: serde_json::Value = serde_json::from_slice(line).ok()?;
    if !embed(v.as_object_mut()?) {
        return None;
    }
    let mut out = serde_json::to_vec(&v).ok()?;
    out.push(b'\n');
    Some(out)
}

/// An error and its causes as one line, `context: cause: cause`, each said once: a cause that an
/// earlier part ends with, whole (a message that prints its source, and names it its source too),
/// is not said again, and a cause that begins with its context, whole, replaces it. Whole parts
/// only: a short cause inside another's words is still said.
fn said_once(e: &anyhow::Error) -> String {
    let mut parts: Vec<String> = Vec::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if parts.iter().any(|p| *p == text || p.ends_with(&format!(": {text}"))) {
            continue;
        }
        match parts.last_mut() {
            Some(last) if text.starts_with(&format!("{last}: ")) => *last = text,
            _ => parts.push(text),
        }
    }
    parts.join(": ")
}

#[cfg(test)]
mod tests {

    #[test]
    fn the_help_states_the_stop_bound_limits_holds() {
        use clap::CommandFactory;
        let help = super::Cli::command().render_long_help().to_string();
        assert!(help.contains(&format!("within {} s", limits::STOP_GRACE_MAX.as_secs())), "the help's stop bound is not limits::STOP_GRACE_MAX:\n{help}");
    }

    /// Lines captured by a test's subscriber.
    #[derive(Clone, Default)]
    struct Captured(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

    impl std::io::Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// What `spec`'s filter lets through of a rustls warning (as the log bridge names it), a rustls
    /// error and a warning of ours.
    fn logged_under(spec: Option<&str>) -> String {
        let out = Captured::default();
        let w = out.clone();
        let sub = tracing_subscriber::fmt().with_env_filter(super::log_filter(spec)).with_writer(move || w.clone()).with_ansi(false).finish();
        tracing::subscriber::with_default(sub, || {
            tracing::warn!(target: "rustls::check", "Received a ApplicationData message while expecting [Handshake]");
            tracing::error!(target: "rustls::common_state", "traffic keys exhausted");
            tracing::warn!(target: "relay::serve", "ours");
        });
        let text = out.0.lock().unwrap().clone();
        String::from_utf8(text).unwrap()
    }

    #[test]
    fn rustls_warnings_a_stranger_can_cause_are_not_logged_unless_asked_for() {
        for spec in [None, Some("info"), Some("debug"), Some("warn,relay=debug")] {
            let text = logged_under(spec);
            assert!(!text.contains("Received a") && text.contains("traffic keys exhausted") && text.contains("ours"), "{spec:?}: {text}");
        }
        assert!(logged_under(Some("info,rustls=warn")).contains("Received a"), "an operator who names rustls gets its lines");
    }

    #[test]
    fn json_log_lines_get_real_lists() {
        let line = br#"{"level":"INFO","transports":"[\"shm\",\"tcp\"]","note":"[not json","span":{"restored":"[\"a=1\"]"}}"#;
        let out: serde_json::Value = serde_json::from_slice(&super::json_lists(line).unwrap()).unwrap();
        assert_eq!(out["transports"], serde_json::json!(["shm", "tcp"]));
        assert_eq!(out["span"]["restored"], serde_json::json!(["a=1"]));
        assert_eq!(out["note"], "[not json", "a string that only looks like a list stays a string");
        assert!(super::json_lists(br#"{"level":"INFO","message":"no lists"}"#).is_none());
        assert!(super::json_lists(b"not json").is_none());
    }

    /// An error that prints its source in its message and names it its source too (as thiserror's
    /// `#[error("...: {source}")]` does).
    #[derive(Debug)]
    struct Listen(std::io::Error);

    impl std::fmt::Display for Listen {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "listen on 127.0.0.1:7400: {}", self.0)
        }
    }

    impl std::error::Error for Listen {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn a_cause_its_parent_printed_is_not_said_again() {
        let io = || std::io::Error::from(std::io::ErrorKind::AddrInUse);
        let e = anyhow::Error::new(Listen(io())).context("start relay");
        assert_eq!(super::said_once(&e), format!("start relay: listen on 127.0.0.1:7400: {}", io()));
        let e = anyhow::Error::new(io()).context("serve metrics on 127.0.0.1:9400");
        assert_eq!(super::said_once(&e), format!("serve metrics on 127.0.0.1:9400: {}", io()), "a cause the parent did not print is said");
        let e = anyhow::Error::new(Listen(io())).context("listen on 127.0.0.1:7400");
        assert_eq!(super::said_once(&e), format!("listen on 127.0.0.1:7400: {}", io()), "a context its cause repeats is said once");
        // Whole parts only: a cause that is a word of its context's is still said.
        let e = anyhow::Error::new(std::io::Error::other("join")).context("the joined servers");
        assert_eq!(super::said_once(&e), "the joined servers: join");
    }
}
