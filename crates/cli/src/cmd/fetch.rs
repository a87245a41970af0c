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
    let mut sink = Sink::open(&a.out, to_stdout)?;
    let r = agent::pull::fetch::fetch(&a.relay, &token, &a.pull.config(), &cancel, &mut |b| sink.out.write_all(b).map_err(|e| agent::Error::Resource(format!("write fetched bytes: {e}"))));
    let r = r.and_then(|r| sink.out.flush().map(|_| r).map_err(|e| agent::Error::Resource(format!("flush output: {e}"))));
    let r = match r {
        Ok(r) => r,
        Err(e) => {
            sink.discard();
            anyhow::bail!("fetch from {} failed: {e}", a.relay);
        }
    };
    sink.place()?;
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

/// Where the fetched bytes go. A regular file is written beside itself and renamed into place only
/// once complete: a failure leaves `--out` as it was (never a partial copy looking whole), and never
/// removes what `--out` names. Anything else (stdout, a device such as /dev/null, a FIFO) is written
/// as it is.
struct Sink {
    out: Box<dyn std::io::Write>,
    /// (the partial file, `--out`) while the bytes go to a file beside it.
    staged: Option<(PathBuf, PathBuf)>,
}

impl Sink {
    fn open(out: &std::path::Path, to_stdout: bool) -> Result<Sink> {
        if to_stdout {
            return Ok(Sink { out: Box::new(std::io::BufWriter::with_capacity(4 << 20, std::io::stdout().lock())), staged: None });
        }
        if std::fs::metadata(out).is_ok_and(|m| !m.is_file()) {
            let f = std::fs::OpenOptions::new().write(true).open(out).with_context(|| format!("open {}", out.display()))?;
            return Ok(Sink { out: Box::new(std::io::BufWriter::with_capacity(4 << 20, f)), staged: None });
        }
        let name = out.file_name().with_context(|| format!("--out {}: not a file name", out.display()))?;
        let partial = out.with_file_name(format!(".{}.partial-{}", name.to_string_lossy(), std::process::id()));
        let f = std::fs::OpenOptions::new().write(true).create_new(true).open(&partial).with_context(|| format!("create {}", partial.display()))?;
        Ok(Sink { out: Box::new(std::io::BufWriter::with_capacity(4 << 20, f)), staged: Some((partial, out.to_path_buf())) })
    }

    /// The bytes are complete: the partial file becomes `--out`, in one rename.
    fn place(self) -> Result<()> {
        drop(self.out);
        if let Some((partial, out)) = self.staged {
            std::fs::rename(&partial, &out).with_context(|| format!("rename {} to {}", partial.display(), out.display()))?;
        }
        Ok(())
    }

    /// The fetch failed: the partial file goes; `--out` stays as it was.
    fn discard(self) {
        drop(self.out);
        if let Some((partial, _)) = self.staged {
            let _ = std::fs::remove_file(partial);
        }
    }
}
