//! `fastrepl status`: its arguments, a running relay's status asked for, and that status as
//! printed (or its JSON).

use super::args::RelayTlsArgs;
use super::quiet_on_broken_pipe;
use anyhow::{Context, Result};
use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

/// `fastrepl status`'s arguments.
#[derive(clap::Args)]
pub struct StatusArgs {
    #[command(flatten)]
    relay_tls: RelayTlsArgs,
    /// The relay, host:port (its agents' port).
    #[arg(long, env = "FASTREPL_RELAY")]
    relay: endpoint::Endpoint,
    /// File holding the relay token (else $FASTREPL_TOKEN).
    #[arg(long, env = "FASTREPL_TOKEN_FILE")]
    token_file: Option<PathBuf>,
    /// Print the status as JSON.
    #[arg(long, env = "FASTREPL_JSON")]
    json: bool,
}

/// `fastrepl status`: the relay's status, printed.
pub fn run(a: StatusArgs) -> Result<ExitCode> {
    let token = a.relay_tls.credentials(secrets::token(a.token_file.as_deref())?)?;
    let mut s = transport::tcp::connect(&a.relay, &token, transport::auth::Kind::Status, limits::CONNECT_TIMEOUT).context("authenticate to the relay")?; // The transport's error names the relay's address.
    let st: relay::stats::Status = match transport::wire::recv_control(&mut s).with_context(|| format!("read status from {}", a.relay))? {
        transport::wire::Control::Status(st) => *st,
        transport::wire::Control::Error(e) => anyhow::bail!("relay {} refused: {e}", a.relay),
        other => anyhow::bail!("relay {} answered {other:?} instead of its status (an older relay?)", a.relay),
    };
    let mut o = std::io::stdout().lock();
    let written = if a.json { writeln!(o, "{}", serde_json::to_string_pretty(&st)?) } else { print_status(&mut o, &st) };
    quiet_on_broken_pipe(written.and_then(|()| o.flush()))
}

fn print_status(o: &mut impl std::io::Write, st: &relay::stats::Status) -> std::io::Result<()> {
    let mib = |b: u64| b as f64 / 1048576.0;
    let at = |m: &std::collections::BTreeMap<String, u64>, k: &str| m.get(k).copied().unwrap_or(0);
    writeln!(o, "relay {} (fastrepl {}), up {:.0} s", st.listen, st.version, st.uptime_seconds)?;
    if !st.ucx_listeners.is_empty() {
        writeln!(o, "ucx listens on {}", st.ucx_listeners.join(", "))?;
    }
    writeln!(o, "master {}; source {} (--source {}); capture {}", st.master, if st.source.is_empty() { "-" } else { &st.source }, st.source_policy, st.capture_policy)?;
    let silent = st.source_last_io_seconds.map(|s| format!("{s:.1} s ago")).unwrap_or_else(|| "never".into());
    writeln!(
        o,
        "captures {} ({} failed), sealed {}, released idle {}; source last sent {silent}, {:.1} MiB received",
        st.captures_total,
        st.capture_failures_total,
        st.generations_sealed_total,
        st.generations_released_idle_total,
        mib(st.source_bytes_total)
    )?;
    if let Some(e) = &st.last_capture_error {
        writeln!(o, "last capture failure: {e}")?;
    }
    writeln!(o, "generations held: {} ({:.1} MiB)", st.generations.len(), mib(st.held_bytes))?;
    for g in &st.generations {
        let total = g.blocks_total.map(|t| t.to_string()).unwrap_or_else(|| "?".into());
        writeln!(
            o,
            "  #{} {:8} {:9} {:.1} MiB{}, {}/{} blocks, log {}, age {:.0} s, {} agents{}",
            g.id,
            if g.current { "current" } else { "" },
            g.state,
            mib(g.rdb_bytes),
            g.rdb_version.map(|v| format!(" (RDB {v})")).unwrap_or_default(),
            g.blocks,
            total,
            bytes_text(g.log_bytes),
            g.age_seconds,
            g.agents,
            g.error.as_deref().map(|e| format!(" — {e}")).unwrap_or_default()
        )?;
    }
    writeln!(
        o,
        "agents attached {} ({} since start); connections {}/{} ({} refused at the limit), {} not authenticated yet",
        st.agents_attached, st.agents_attached_total, st.connections, st.connections_max, st.connections_refused_total, st.connections_unauthenticated
    )?;
    let refused: Vec<String> = st.connections_refused_by_kind_total.iter().filter(|(_, n)| **n > 0).map(|(k, n)| format!("{k} {n}")).collect();
    if !refused.is_empty() {
        writeln!(o, "closed before they were served: {}", refused.join(", "))?;
    }
    use transport::TransportKind::{Shm, Tcp, Ucx};
    writeln!(
        o,
        "served: {:.1} MiB of blocks over {Tcp}, {} of log; one-sided attaches (not agents: one agent may attach more than once): {Shm} {}, {Ucx} {}{}",
        mib(relay::stats::served_bytes(st, Tcp)),
        bytes_text(st.log_served_bytes_total),
        relay::stats::attaches(st, Shm),
        relay::stats::attaches(st, Ucx),
        if st.ucx_side_restarts_total > 0 { format!(" (UCX side process started again {} times)", st.ucx_side_restarts_total) } else { String::new() }
    )?;
    writeln!(o, "joins ended (as their agents said): {} in sync, {} full sync, {} failed", at(&st.joins_total, "in_sync"), at(&st.joins_total, "full_sync"), at(&st.joins_total, "failed"))?;
    let store = match (&st.store, st.store_size_bytes, st.store_free_bytes) {
        (Some(dir), Some(size), Some(free)) => format!("; store {dir}: {:.1} GiB free of {:.1} GiB", free as f64 / GIB, size as f64 / GIB),
        (Some(dir), _, _) => format!("; store {dir}: its filesystem could not be read"),
        _ => String::new(),
    };
    writeln!(o, "bounds: log {} per generation, snapshot {}{store}", bytes_text(st.log_max_bytes), bytes_text(st.snapshot_max_bytes))?;
    writeln!(
        o,
        "errors: auth {}, protocol {}, io {}, capture {}; memory: RSS {:.1} MiB",
        at(&st.errors_total, "auth"),
        at(&st.errors_total, "protocol"),
        at(&st.errors_total, "io"),
        at(&st.errors_total, "capture"),
        mib(st.resident_memory_bytes)
    )?;
    Ok(())
}

/// Bytes in a GiB, for a filesystem's size.
const GIB: f64 = (1u64 << 30) as f64;

/// A byte count in the unit that fits it: "512 B", "21.5 KiB", "3.0 MiB" (a small log is not "0.0 MiB").
fn bytes_text(b: u64) -> String {
    match b {
        0..1024 => format!("{b} B"),
        1024..1048576 => format!("{:.1} KiB", b as f64 / 1024.0),
        _ => format!("{:.1} MiB", b as f64 / 1048576.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_byte_count_is_shown_in_the_unit_that_fits_it() {
        assert_eq!(bytes_text(512), "512 B");
        assert_eq!(bytes_text(22 * 1024), "22.0 KiB");
        assert_eq!(bytes_text(3 << 20), "3.0 MiB");
    }

    /// The status's per-transport lines read the counters by `TransportKind` and print their names.
    #[test]
    fn the_status_names_each_transports_counters() {
        let zero = |keys: &[&str]| serde_json::Value::Object(keys.iter().map(|k| (k.to_string(), 0.into())).collect());
        let mut st: relay::stats::Status = serde_json::from_value(serde_json::json!({
            "version": "0", "listen": "l", "master": "m", "source_policy": "master", "source": "", "capture_policy": "on-start",
            "uptime_seconds": 1.0, "captures_total": 0, "capture_failures_total": 0, "generations_sealed_total": 0,
            "generations_sealed_by_reason_total": {}, "generations_released_idle_total": 0, "source_bytes_total": 0,
            "generations": [], "held_bytes": 0, "connections": 0, "connections_max": 1, "connections_refused_total": 0,
            "agents_attached": 0, "agents_attached_total": 0, "served_bytes_total": zero(&["tcp"]), "log_served_bytes_total": 0,
            "attaches_total": zero(&["shm", "ucx"]), "ucx_side_restarts_total": 0, "errors_total": zero(&["auth"]), "resident_memory_bytes": 0,
        }))
        .unwrap();
        st.served_bytes_total.insert("tcp".into(), 3 << 20);
        st.attaches_total.insert("shm".into(), 4);
        st.attaches_total.insert("ucx".into(), 5);
        st.connections_refused_by_kind_total = [("displaced".to_string(), 7), ("auth".to_string(), 1), ("full".to_string(), 0)].into();
        let mut out = Vec::new();
        print_status(&mut out, &st).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("closed before they were served: auth 1, displaced 7\n"), "{text}");
        assert!(text.contains("served: 3.0 MiB of blocks over tcp, 0 B of log; one-sided attaches (not agents: one agent may attach more than once): shm 4, ucx 5\n"), "{text}");
    }
}
