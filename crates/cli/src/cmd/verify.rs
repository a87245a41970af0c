//! `fastrepl verify`: its arguments, two servers' datasets compared, and the verdict as printed
//! (or its JSON) and as the exit status.

use super::args::TlsArgs;
use super::quiet_on_broken_pipe;
use anyhow::{Context, Result};
use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// `fastrepl verify`'s arguments.
#[derive(clap::Args)]
pub struct VerifyArgs {
    /// The reference server (normally the master), host:port.
    a: String,
    /// The server to check, host:port.
    b: String,
    /// ACL user for both.
    #[arg(long, env = "FASTREPL_USER")]
    user: Option<String>,
    /// File holding the password for both (else $FASTREPL_VERIFY_PASSWORD).
    #[arg(long, env = "FASTREPL_PASSWORD_FILE")]
    password_file: Option<PathBuf>,
    #[command(flatten)]
    tls: TlsArgs,
    /// Largest TTL difference accepted, in ms.
    #[arg(long, default_value_t = 2000, env = "FASTREPL_TTL_TOLERANCE_MS")]
    ttl_tolerance_ms: i64,
    /// Print the outcome as JSON.
    #[arg(long, env = "FASTREPL_JSON")]
    json: bool,
}

/// `fastrepl verify`: the comparison, printed, and its verdict as the exit status.
pub fn run(a: VerifyArgs) -> Result<ExitCode> {
    let auth = secrets::auth(a.user.as_deref(), a.password_file.as_deref(), "FASTREPL_VERIFY_PASSWORD")?;
    let t = Duration::from_secs(60);
    let tls = a.tls.load()?;
    // The client's error names the operation and the server (`connect to <addr>: ...`).
    let mut ca = client::Client::connect_tls(&a.a, auth.as_ref(), t, tls.as_ref())?;
    let mut cb = client::Client::connect_tls(&a.b, auth.as_ref(), t, tls.as_ref())?;
    // A cluster replica redirects reads to its master unless the connection is READONLY.
    for (c, addr) in [(&mut ca, &a.a), (&mut cb, &a.b)] {
        if c.info("cluster").with_context(|| format!("INFO cluster on {addr}"))?.get("cluster_enabled") == Some("1") {
            c.cmd(&["READONLY"]).with_context(|| format!("READONLY on cluster node {addr}"))?;
        }
    }
    let opts = verify::Options { ttl_tolerance_ms: a.ttl_tolerance_ms, ..Default::default() };
    let out = match verify::compare(&mut ca, &mut cb, &opts) {
        Ok(o) => o,
        Err(e) => {
            errln!("fastrepl verify: {e}");
            return Ok(ExitCode::from(2));
        }
    };
    let mut o = std::io::stdout().lock();
    let written = (|| -> std::io::Result<()> {
        if a.json {
            writeln!(o, "{}", serde_json::to_string(&out)?)?;
        } else if out.identical() {
            writeln!(o, "identical: {} keys in databases {:?}, {} function libraries", out.keys, out.databases, out.function_libraries)?;
        } else {
            if out.difference_count > 0 {
                writeln!(o, "DIFFERENT: {} differences among {} keys; first {}:", out.difference_count, out.keys, out.differences.len())?;
                for d in &out.differences {
                    writeln!(o, "  {d}")?;
                }
            }
            for (t, n) in &out.uncomparable {
                writeln!(o, "cannot compare type {t} ({n} keys): verify does not know how its values are meant")?;
            }
            if out.refused_count > 0 {
                writeln!(o, "cannot read {} keys (a server answered with an error); first {}:", out.refused_count, out.refused.len())?;
                for r in &out.refused {
                    writeln!(o, "  {r}")?;
                }
            }
        }
        o.flush()
    })();
    // A reader that went away (`| head`) saw what it wanted; the verdict is still the exit status.
    quiet_on_broken_pipe(written)?;
    // 1: something differs; 2: nothing found different, but not everything could be compared (a
    // type verify does not know, a key a server refused to read).
    Ok(if out.identical() {
        ExitCode::SUCCESS
    } else if out.difference_count > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::from(2)
    })
}
