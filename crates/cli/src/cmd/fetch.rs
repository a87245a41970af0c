//! `fastrepl fetch`: its arguments, a relay's snapshot pulled into a file or stdout, and its report.

use super::args::{PullArgs, RelayTlsArgs};
use super::on_interrupt;
use anyhow::{Context, Result};
use std::path::PathBuf;
use std::process::ExitCode;

/// `fastrepl fetch`'s arguments.
#[derive(clap::Args)]
pub struct FetchArgs {
    #[command(flatten)]
    relay_tls: RelayTlsArgs,
    /// The relay, host:port.
    #[arg(long, env = "FASTREPL_RELAY")]
    relay: endpoint::Endpoint,
    /// Where to write the bytes; `-` for stdout.
    #[arg(long, env = "FASTREPL_OUT")]
    out: PathBuf,
    /// File holding the relay token (else $FASTREPL_TOKEN).
    #[arg(long, env = "FASTREPL_TOKEN_FILE")]
    token_file: Option<PathBuf>,
    #[command(flatten)]
    pull: PullArgs,
    /// Print the report as JSON (on stderr when the bytes go to stdout).
    #[arg(long, env = "FASTREPL_JSON")]
    json: bool,
}

/// `fastrepl fetch`: the snapshot into `--out`, then one line of report.
pub fn run(a: FetchArgs) -> Result<ExitCode> {
    use std::io::Write;
    let token = a.relay_tls.credentials(secrets::token(a.token_file.as_deref())?)?;
    let cancel = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    on_interrupt(cancel.clone())?;
    let to_stdout = a.out.as_os_str() == "-";
    let mut out: Box<dyn Write> = if to_stdout {
        Box::new(std::io::BufWriter::with_capacity(4 << 20, std::io::stdout().lock()))
    } else {
        Box::new(std::fs::File::create(&a.out).with_context(|| format!("create {}", a.out.display()))?)
    };
    let r = agent::pull::fetch::fetch(&a.relay, &token, &a.pull.config(), &cancel, &mut |b| out.write_all(b).map_err(|e| agent::Error::Resource(format!("write fetched bytes: {e}"))));
    let r = r.and_then(|r| out.flush().map(|_| r).map_err(|e| agent::Error::Resource(format!("flush output: {e}"))));
    let r = match r {
        Ok(r) => r,
        Err(e) => {
            if !to_stdout {
                let _ = std::fs::remove_file(&a.out); // never leave a partial copy looking whole
            }
            anyhow::bail!("fetch from {} failed: {e}", a.relay);
        }
    };
    let line = if a.json {
        serde_json::to_string(&r)?
    } else {
        format!("fetched {:.1} MiB in {:.2} s ({:.0} MiB/s) over {} ({}); CPU {:.2} s", r.bytes as f64 / (1 << 20) as f64, r.secs, r.mib_s, r.transport, r.transport_detail, r.cpu_secs)
    };
    if to_stdout {
        errln!("{line}");
    } else {
        outln!("{line}");
    }
    Ok(ExitCode::SUCCESS)
}
