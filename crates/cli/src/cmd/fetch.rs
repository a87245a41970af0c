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
            anyhow::bail!("fetch failed: {e}"); // The cause names the relay, once.
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

/// Where the fetched bytes go. A regular file (or one to be made) is written beside itself and
/// renamed into place only once complete: a failure leaves `--out` as it was (never a partial copy
/// looking whole) and never removes what `--out` names. A symlink is followed (the file it names is
/// replaced, the link stays), an existing file's permissions are kept, and where the rename cannot
/// replace it (a bind-mounted file: EBUSY, EXDEV) the complete bytes are copied into it. Anything
/// else (stdout, a device such as /dev/null, a FIFO) is written as it is.
struct Sink {
    out: Box<dyn std::io::Write>,
    /// (the partial file, the file it becomes) while the bytes go to a file beside it.
    staged: Option<(PathBuf, PathBuf)>,
}

impl Sink {
    fn open(out: &std::path::Path, to_stdout: bool) -> Result<Sink> {
        let buffered = |f: std::fs::File| Box::new(std::io::BufWriter::with_capacity(4 << 20, f));
        if to_stdout {
            return Ok(Sink { out: Box::new(std::io::BufWriter::with_capacity(4 << 20, std::io::stdout().lock())), staged: None });
        }
        let existing = std::fs::metadata(out).ok();
        if existing.as_ref().is_some_and(|m| !m.is_file()) {
            let f = std::fs::OpenOptions::new().write(true).open(out).with_context(|| format!("open --out {}", out.display()))?;
            return Ok(Sink { out: buffered(f), staged: None });
        }
        // The file a symlink names is the one replaced (the link stays a link).
        let target = if existing.is_some() { std::fs::canonicalize(out).with_context(|| format!("resolve --out {}", out.display()))? } else { out.to_path_buf() };
        let name = target.file_name().with_context(|| format!("--out {}: not a file name", out.display()))?;
        let partial = target.with_file_name(format!(".{}.partial-{}", name.to_string_lossy(), std::process::id()));
        let f = std::fs::OpenOptions::new().write(true).create_new(true).open(&partial).with_context(|| format!("create a file beside --out {}", out.display()))?;
        if let Some(m) = &existing {
            f.set_permissions(m.permissions()).with_context(|| format!("give {} the permissions of --out", partial.display()))?;
        }
        Ok(Sink { out: buffered(f), staged: Some((partial, target)) })
    }

    /// The bytes are complete: the partial file becomes the file, in one rename (or, where a rename
    /// cannot replace it, copied into it).
    fn place(mut self) -> Result<()> {
        self.out.flush().context("flush the fetched bytes")?;
        drop(std::mem::replace(&mut self.out, Box::new(std::io::sink())));
        let Some((partial, target)) = self.staged.take() else { return Ok(()) };
        let placed = std::fs::rename(&partial, &target).or_else(|e| match e.raw_os_error() {
            Some(libc::EBUSY) | Some(libc::EXDEV) => std::fs::copy(&partial, &target).map(|_| ()),
            _ => Err(e),
        });
        let _ = std::fs::remove_file(&partial);
        placed.with_context(|| format!("put the fetched bytes in place at {}", target.display()))
    }

    /// The fetch failed: the partial file goes; the file stays as it was.
    fn discard(mut self) {
        drop(std::mem::replace(&mut self.out, Box::new(std::io::sink())));
        if let Some((partial, _)) = self.staged.take() {
            let _ = std::fs::remove_file(partial);
        }
    }
}
