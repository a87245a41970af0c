//! `fastrepl probe`: the transport microbenchmark (after the throughput / latency / CPU figures of the
//! "End of Slow Networks" paper, Binnig et al., VLDB 2016), and whole-file pulls (the remote-read benchmark).
//!
//! For each transport and message size: throughput with several reads in flight, latency (p50, p99)
//! with one, and CPU time per read on the reader (this process) and on the relay (its /proc entry,
//! when the relay is ours or its pid is given) — next to raw baselines measured in the same run:
//! memcpy for the shared-memory paths, a plain TCP stream for tcp and ucx-over-tcp. Results: a table
//! on stdout, `probe.json`, and PNG charts with log axes in `--out`.

use crate::charts::{self, Series};
use crate::transport::LabTransport;
use anyhow::{bail, Context, Result};
use serde::Serialize;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use transport::{Credentials, RangeReader, Transport};

#[derive(clap::Args)]
/// `fastrepl-lab probe` arguments.
pub struct ProbeArgs {
    /// Probe this relay (its snapshot must be at least as large as the largest message).
    #[arg(long, required_unless_present = "self_")]
    relay: Option<SocketAddr>,
    /// Start a relay of our own, serving a synthetic file, and probe it.
    #[arg(long = "self")]
    self_: bool,
    /// The relay's pid, to measure its CPU time when it runs on this host (implied with --self).
    #[arg(long)]
    relay_pid: Option<u32>,
    /// File holding the relay token (else $FASTREPL_TOKEN; --self makes its own).
    #[arg(long)]
    token_file: Option<PathBuf>,
    /// Transports to probe: any of tcp, shm, ucx-tcp, ucx-sm, ucx (UCX's own choice).
    #[arg(long, value_delimiter = ',', default_value = "tcp,shm,ucx-tcp,ucx-sm")]
    transports: Vec<String>,
    /// Readers (each with its reads in flight) for the throughput runs and pulls; default 4 for the
    /// microbenchmark, the transport's own default for --fetch (4; ucx 2).
    #[arg(long)]
    in_flight: Option<usize>,
    /// Seconds per measurement point.
    #[arg(long, default_value_t = 0.3)]
    secs: f64,
    /// Fewer sizes and shorter points (a smoke run).
    #[arg(long)]
    quick: bool,
    /// Instead of message sizes: pull whole snapshots of these sizes (e.g. `50m,256m,1g,2g`; with
    /// --relay, the relay's snapshot, one size) with `fetch`'s pipeline, 1 and 4 concurrent pulls, per
    /// transport, next to memcpy and a raw TCP stream. One JSON file per size.
    #[arg(long, value_parser = parse_bytes, value_delimiter = ',')]
    fetch: Vec<u64>,
    /// With --fetch: measure every row this many times (interleaved) and report medians.
    #[arg(long, default_value_t = 3)]
    repeat: usize,
    /// Directory for probe.json and the charts.
    #[arg(long, default_value = "probe-results")]
    out: PathBuf,
    /// With --self: the relay requires TLS of its agents (a throwaway certificate made with
    /// openssl), so tcp reads are encrypted: run once with and once without to see what TLS costs.
    #[arg(long, requires = "self_")]
    relay_tls: bool,
}

fn parse_bytes(s: &str) -> Result<u64, String> {
    let s = s.trim().to_ascii_lowercase();
    let (num, mul) = match s.chars().last() {
        Some('k') => (&s[..s.len() - 1], 1u64 << 10),
        Some('m') => (&s[..s.len() - 1], 1 << 20),
        Some('g') => (&s[..s.len() - 1], 1 << 30),
        _ => (&s[..], 1),
    };
    num.parse::<u64>().map(|n| n * mul).map_err(|e| format!("{s:?}: {e}"))
}

/// Message sizes: 32 B to 32 MiB in steps of 4×.
fn sizes(quick: bool) -> Vec<usize> {
    let all: Vec<usize> = (0..11).map(|i| 32usize << (2 * i)).collect();
    if quick {
        all.into_iter().step_by(3).collect() // 32, 2K, 128K, 8M
    } else {
        all
    }
}

#[derive(Debug, Clone, Serialize)]
struct Point {
    transport: String,
    detail: String,
    size: usize,
    /// MiB/s with `in_flight` reads in flight.
    mib_s: f64,
    /// That throughput over its baseline's at the same size.
    ratio_to_baseline: Option<f64>,
    baseline: Option<String>,
    p50_us: f64,
    p99_us: f64,
    reader_cpu_us_per_read: f64,
    relay_cpu_us_per_read: Option<f64>,
}

/// A relay we started for `--self`, killed on drop.
struct OwnRelay {
    child: std::process::Child,
    addr: SocketAddr,
    file: PathBuf,
    /// The throwaway CA and certificate of a TLS relay (`--relay-tls`).
    certs: Option<tempfile::TempDir>,
}

impl Drop for OwnRelay {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.file);
    }
}

/// A CA and a certificate it signs for 127.0.0.1, made with the openssl CLI.
fn throwaway_certs() -> Result<tempfile::TempDir> {
    let dir = tempfile::tempdir()?;
    let run = |args: &[&str]| -> Result<()> {
        let out = std::process::Command::new("openssl").args(args).current_dir(dir.path()).output().context("run openssl")?;
        if !out.status.success() {
            bail!("openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        }
        Ok(())
    };
    run(&["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt", "-days", "1", "-subj", "/CN=probe CA"])?;
    run(&["req", "-newkey", "rsa:2048", "-nodes", "-keyout", "relay.key", "-out", "relay.csr", "-subj", "/CN=relay"])?;
    std::fs::write(dir.path().join("ext.cnf"), "subjectAltName=IP:127.0.0.1\n")?;
    run(&["x509", "-req", "-in", "relay.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial", "-out", "relay.crt", "-days", "1", "-extfile", "ext.cnf"])?;
    Ok(dir)
}

fn start_own_relay(bytes: u64, token: &str, tls: bool) -> Result<OwnRelay> {
    let file = std::env::temp_dir().join(format!("fastrepl-probe-{}.bin", std::process::id()));
    {
        let mut f = std::io::BufWriter::new(std::fs::File::create(&file).with_context(|| format!("create {}", file.display()))?);
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut chunk = vec![0u8; 1 << 20];
        let mut left = bytes;
        while left > 0 {
            for w in chunk.chunks_mut(8) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                w.copy_from_slice(&x.to_le_bytes()[..w.len()]);
            }
            let n = left.min(chunk.len() as u64) as usize;
            f.write_all(&chunk[..n])?;
            left -= n as u64;
        }
        f.flush()?;
    }
    let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse()?;
    let certs = if tls { Some(throwaway_certs()?) } else { None };
    let mut cmd = std::process::Command::new(crate::fastrepl_bin()?);
    if let Some(d) = &certs {
        cmd.arg("relay").arg("--agents-tls-cert").arg(d.path().join("relay.crt")).arg("--agents-tls-key").arg(d.path().join("relay.key"));
    } else {
        cmd.arg("relay");
    }
    let child = cmd
        .args(["--file"])
        .arg(&file)
        .args(["--listen", &addr.to_string(), "--snapshot-max-bytes", &(bytes + (1 << 20)).to_string()])
        .env("FASTREPL_TOKEN", token)
        .env("FASTREPL_LOG", "warn")
        .stdout(std::process::Stdio::null())
        .spawn()
        .context("start a relay for the probe")?;
    let mut r = OwnRelay { child, addr, file, certs };
    let deadline = Instant::now() + Duration::from_secs(120);
    while TcpStream::connect(addr).is_err() {
        if let Some(st) = r.child.try_wait()? {
            bail!("the probe's relay exited: {st}");
        }
        if Instant::now() > deadline {
            bail!("the probe's relay did not start listening");
        }
        std::thread::sleep(Duration::from_millis(20)); // Polling a port with a deadline.
    }
    Ok(r)
}

/// A transport to probe, by name.
fn open_transport(name: &str, relay: SocketAddr, token: &Credentials, offered: &agent::pull::progress::Offered) -> Result<Box<dyn Transport>> {
    let t = <LabTransport as clap::ValueEnum>::from_str(name, false).map_err(|e| anyhow::anyhow!("transport {name:?}: {e}"))?;
    Ok(match t {
        LabTransport::Tcp => Box::new(transport::tcp::TcpTransport::new(relay, token.clone())),
        LabTransport::Shm => {
            let sock = offered.shm_socket.clone().context("the relay does not offer shm")?;
            Box::new(transport::shm::ShmTransport::new(sock, token.token().clone()))
        }
        #[cfg(feature = "ucx")]
        LabTransport::Ucx | LabTransport::UcxTcp | LabTransport::UcxSm => Box::new(agent::pull::ucx_reader::UcxTransport::with_tls(relay.into(), token.clone(), t.ucx_tls())?),
        other => bail!("the probe cannot open {:?} here (tcp, shm, ucx, ucx-tcp, ucx-sm; ucx needs the ucx feature)", other.name()),
    })
}

/// Which baseline a transport is compared with.
fn baseline_of(t: &str) -> &'static str {
    <LabTransport as clap::ValueEnum>::from_str(t, false).map(LabTransport::baseline).unwrap_or("tcp-stream")
}

struct Measured {
    mib_s: f64,
    reads: u64,
    cpu_secs: f64,
    relay_cpu_secs: Option<f64>,
}

/// Run `readers` threads doing reads of `size` for `secs`; each thread gets its own reader.
fn throughput(t: &dyn Transport, generation: u64, region: u64, size: usize, readers: usize, secs: f64, relay_pid: Option<u32>) -> Result<Measured> {
    let stop = AtomicBool::new(false);
    let reads = AtomicU64::new(0);
    let mut rs: Vec<Box<dyn RangeReader>> = (0..readers).map(|_| t.open()).collect::<Result<_, _>>()?;
    // Warm up: set-up costs (attach, registration, connection) are not per-read costs.
    for r in rs.iter_mut() {
        let mut b = vec![0u8; size];
        r.read(generation, 0, &mut b)?;
    }
    let span = region.saturating_sub(size as u64).max(1);
    let cpu0 = agent::procstat::own_cpu_secs();
    let rcpu0 = relay_pid.and_then(agent::procstat::cpu_secs_with_children);
    let t0 = Instant::now();
    let errors: Vec<Option<transport::Error>> = std::thread::scope(|s| {
        let hs: Vec<_> = rs
            .iter_mut()
            .enumerate()
            .map(|(i, r)| {
                let (stop, reads) = (&stop, &reads);
                s.spawn(move || {
                    let mut b = vec![0u8; size];
                    let mut off = (i as u64 * span / readers as u64) / 4096 * 4096;
                    while !stop.load(Ordering::Relaxed) {
                        if let Err(e) = r.read(generation, off % span, &mut b) {
                            return Some(e);
                        }
                        off += size as u64;
                        reads.fetch_add(1, Ordering::Relaxed);
                    }
                    None
                })
            })
            .collect();
        std::thread::sleep(Duration::from_secs_f64(secs)); // The measurement interval itself.
        stop.store(true, Ordering::Relaxed);
        hs.into_iter().map(|h| h.join().unwrap_or(None)).collect()
    });
    let elapsed = t0.elapsed().as_secs_f64();
    if let Some(e) = errors.into_iter().flatten().next() {
        return Err(e.into());
    }
    let n = reads.load(Ordering::Relaxed);
    Ok(Measured {
        mib_s: (n * size as u64) as f64 / (1 << 20) as f64 / elapsed,
        reads: n,
        cpu_secs: agent::procstat::own_cpu_secs() - cpu0,
        relay_cpu_secs: rcpu0.and_then(|c0| relay_pid.and_then(agent::procstat::cpu_secs_with_children).map(|c1| c1 - c0)),
    })
}

/// One reader, one read at a time, for `secs`: per-read latencies in µs, sorted.
fn latency(t: &dyn Transport, generation: u64, region: u64, size: usize, secs: f64) -> Result<Vec<f64>> {
    let mut r = t.open()?;
    let mut b = vec![0u8; size];
    r.read(generation, 0, &mut b)?;
    let span = region.saturating_sub(size as u64).max(1);
    let mut lat = Vec::new();
    let t0 = Instant::now();
    let mut off = 0u64;
    while t0.elapsed().as_secs_f64() < secs || lat.len() < 5 {
        let t = Instant::now();
        r.read(generation, off % span, &mut b)?;
        lat.push(t.elapsed().as_secs_f64() * 1e6);
        off += size as u64;
    }
    lat.sort_by(|a, b| a.total_cmp(b));
    Ok(lat)
}

fn pct(sorted: &[f64], q: f64) -> f64 {
    crate::stats::quantile(sorted, q).unwrap_or(f64::NAN)
}

/// memcpy baseline: single-threaded copies of `size` bytes out of a `region`-sized buffer. Throughput
/// is timed over the whole loop (no clock reads per copy); latency separately, per copy.
fn memcpy_baseline(region: usize, size: usize, secs: f64) -> (f64, Vec<f64>, f64) {
    let src = vec![7u8; region.max(size)];
    let mut dst = vec![0u8; size];
    let span = (region.saturating_sub(size)).max(1);
    let (mut off, mut n) = (0usize, 0u64);
    let cpu0 = agent::procstat::own_cpu_secs();
    let t0 = Instant::now();
    while t0.elapsed().as_secs_f64() < secs / 2.0 {
        for _ in 0..64 {
            let o = off % span;
            dst.copy_from_slice(&src[o..o + size]);
            std::hint::black_box(&mut dst);
            off += size;
        }
        n += 64;
    }
    let el = t0.elapsed().as_secs_f64();
    let cpu = (agent::procstat::own_cpu_secs() - cpu0) / n as f64;
    let mut lat = Vec::new();
    let t1 = Instant::now();
    while t1.elapsed().as_secs_f64() < secs / 2.0 || lat.len() < 5 {
        let o = off % span;
        let t = Instant::now();
        dst.copy_from_slice(&src[o..o + size]);
        std::hint::black_box(&mut dst);
        lat.push(t.elapsed().as_secs_f64() * 1e6);
        off += size;
    }
    lat.sort_by(|a, b| a.total_cmp(b));
    ((n * size as u64) as f64 / (1 << 20) as f64 / el, lat, cpu)
}

/// Seconds to map a filled memfd of `bytes` read-only and copy it all out (single thread).
fn memcpy_from_fresh_mapping(bytes: usize) -> Result<f64> {
    use std::os::fd::{AsRawFd, FromRawFd};
    // SAFETY: constant NUL-terminated name; memfd_create has no other preconditions.
    let fd = unsafe { libc::memfd_create(c"probe-ref".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        bail!("memfd_create: {}", std::io::Error::last_os_error());
    }
    // SAFETY: fd was just created and is owned by nobody else.
    let mut f = unsafe { std::fs::File::from_raw_fd(fd) };
    let chunk = vec![9u8; 4 << 20];
    let mut left = bytes;
    while left > 0 {
        let n = left.min(chunk.len());
        f.write_all(&chunk[..n])?;
        left -= n;
    }
    let mut dst = vec![1u8; bytes]; // touched: we time the mapping and the copy, not our allocation
    let t = Instant::now();
    // SAFETY: a fresh read-only shared mapping of a memfd we own and do not resize; unmapped below.
    let p = unsafe { libc::mmap(std::ptr::null_mut(), bytes, libc::PROT_READ, libc::MAP_SHARED, f.as_raw_fd(), 0) };
    if p == libc::MAP_FAILED {
        bail!("mmap: {}", std::io::Error::last_os_error());
    }
    // SAFETY: `p` maps `bytes` readable bytes for the duration of the copy.
    dst.copy_from_slice(unsafe { std::slice::from_raw_parts(p as *const u8, bytes) });
    std::hint::black_box(&dst);
    let s = t.elapsed().as_secs_f64();
    // SAFETY: unmapping exactly what mmap returned; nothing borrows it any more.
    unsafe { libc::munmap(p, bytes) };
    Ok(s)
}

/// The raw TCP baselines' sender: `limit` bytes in 4 MiB writes, or until `stop` is set.
fn write_stream(s: &mut TcpStream, limit: u64, stop: Option<&AtomicBool>) -> std::io::Result<()> {
    let buf = vec![5u8; 4 << 20];
    let mut left = limit;
    while left > 0 && !stop.is_some_and(|x| x.load(Ordering::Relaxed)) {
        let n = left.min(buf.len() as u64) as usize;
        s.write_all(&buf[..n])?;
        left -= n as u64;
    }
    Ok(())
}

/// Raw TCP baseline over loopback: a stream read in `size` pieces (throughput), and request →
/// `size`-byte response round trips (latency).
fn tcp_baseline(size: usize, secs: f64) -> Result<(f64, Vec<f64>, f64)> {
    let l = TcpListener::bind("127.0.0.1:0")?;
    let addr = l.local_addr()?;
    let stop = Arc::new(AtomicBool::new(false));
    let st = stop.clone();
    let server = std::thread::spawn(move || -> std::io::Result<()> {
        // Connection 1: stream; connection 2: request/response.
        let (mut s, _) = l.accept()?;
        let _ = write_stream(&mut s, u64::MAX, Some(&st)); // ends when the reader hangs up
        drop(s);
        let (mut s, _) = l.accept()?;
        s.set_nodelay(true)?;
        let body = vec![6u8; size];
        let mut req = [0u8; 8];
        while s.read_exact(&mut req).is_ok() {
            s.write_all(&body)?;
        }
        Ok(())
    });
    let mut c = TcpStream::connect(addr)?;
    let mut b = vec![0u8; size];
    let (mut n, cpu0, t0) = (0u64, agent::procstat::own_cpu_secs(), Instant::now());
    while t0.elapsed().as_secs_f64() < secs || n < 5 {
        c.read_exact(&mut b)?;
        n += 1;
    }
    let el = t0.elapsed().as_secs_f64();
    let cpu = (agent::procstat::own_cpu_secs() - cpu0) / n as f64;
    stop.store(true, Ordering::Relaxed);
    drop(c);
    let mut c = TcpStream::connect(addr)?;
    c.set_nodelay(true)?;
    let mut lat = Vec::new();
    let t1 = Instant::now();
    while t1.elapsed().as_secs_f64() < secs || lat.len() < 5 {
        let t = Instant::now();
        c.write_all(&[1u8; 8])?;
        c.read_exact(&mut b)?;
        lat.push(t.elapsed().as_secs_f64() * 1e6);
    }
    drop(c);
    let _ = server.join();
    lat.sort_by(|a, b| a.total_cmp(b));
    Ok(((n * size as u64) as f64 / (1 << 20) as f64 / el, lat, cpu))
}

/// The relay to probe: ours (started for `bytes` of synthetic data) or the user's.
fn relay_for(a: &ProbeArgs, bytes: u64) -> Result<(Option<OwnRelay>, SocketAddr, Credentials, Option<u32>)> {
    if a.self_ {
        let mut raw = [0u8; 16];
        getrandom::getrandom(&mut raw).map_err(|e| anyhow::anyhow!("random token: {e}"))?;
        let tok: String = raw.iter().map(|b| format!("{b:02x}")).collect();
        let r = start_own_relay(bytes, &tok, a.relay_tls)?;
        let (addr, pid) = (r.addr, r.child.id());
        let mut token = Credentials::from(transport::Token::new(tok.as_bytes())?);
        if let Some(d) = &r.certs {
            token = token.with_relay_tls(transport::tls::RelayTls::load(&d.path().join("ca.crt"), None).map_err(anyhow::Error::msg)?);
        }
        Ok((Some(r), addr, token, Some(pid)))
    } else {
        Ok((None, a.relay.context("--relay or --self")?, secrets::token(a.token_file.as_deref())?.into(), a.relay_pid))
    }
}

/// Attach and wait for a complete snapshot; returns the attachment and (generation, length).
fn attach_complete(relay: SocketAddr, token: &Credentials) -> Result<(agent::pull::progress::Attached, u64, u64)> {
    let attached = agent::pull::progress::attach(&relay.into(), token, Duration::from_secs(120)).context("attach to the relay")?;
    let view = attached.progress.wait_until(Duration::from_secs(300), |v| v.desc.length.is_some());
    let region = view.desc.length.context("the relay's snapshot is not complete")?;
    Ok((attached, view.desc.generation, region))
}

/// Run the probe; writes probe.json and the charts into `--out`.
pub fn run(a: ProbeArgs) -> Result<std::process::ExitCode> {
    std::fs::create_dir_all(&a.out).with_context(|| format!("create {}", a.out.display()))?;
    if !a.fetch.is_empty() {
        if !a.self_ && a.fetch.len() > 1 {
            bail!("with --relay, --fetch takes one size: the relay's snapshot is what it is");
        }
        for &bytes in &a.fetch {
            let (own, relay, token, relay_pid) = relay_for(&a, bytes)?;
            let (attached, _, region) = attach_complete(relay, &token)?;
            let name = if a.fetch.len() == 1 { "fetch.json".to_string() } else { format!("fetch-{}.json", charts::human_bytes(bytes as f64)) };
            fetch_runs(&a, relay, &token, &attached.offered, region, relay_pid, &name)?;
            drop(own);
        }
        return Ok(std::process::ExitCode::SUCCESS);
    }
    let secs = if a.quick { a.secs.min(0.1) } else { a.secs };
    let sizes = sizes(a.quick);
    let largest = *sizes.last().expect("sizes") as u64;
    let (own, relay, token, relay_pid) = relay_for(&a, (largest * 4).max(128 << 20))?;
    let (attached, generation, region) = attach_complete(relay, &token)?;
    if region < largest {
        bail!("the relay's snapshot ({region} bytes) is smaller than the largest message ({largest})");
    }
    let machine = crate::bench::report::machine();

    // Baselines first, at every size.
    let mut baselines: Vec<serde_json::Value> = Vec::new();
    let mut base_tp: std::collections::HashMap<(&str, usize), f64> = Default::default();
    for &size in &sizes {
        let (m, lat, cpu) = memcpy_baseline(region as usize, size, secs);
        base_tp.insert(("memcpy", size), m);
        baselines.push(serde_json::json!({"baseline": "memcpy", "size": size, "mib_s": m, "p50_us": pct(&lat, 0.5), "p99_us": pct(&lat, 0.99), "cpu_us_per_read": cpu * 1e6}));
        let (m, lat, cpu) = tcp_baseline(size, secs)?;
        base_tp.insert(("tcp-stream", size), m);
        baselines.push(serde_json::json!({"baseline": "tcp-stream", "size": size, "mib_s": m, "p50_us": pct(&lat, 0.5), "p99_us": pct(&lat, 0.99), "cpu_us_per_read": cpu * 1e6}));
    }

    let mut points = Vec::new();
    let mut skipped = Vec::new();
    for name in &a.transports {
        let t = match open_transport(name, relay, &token, &attached.offered) {
            Ok(t) => t,
            Err(e) => {
                eprintln!("probe: skipping {name}: {e:#}");
                skipped.push(serde_json::json!({"transport": name, "reason": format!("{e:#}")}));
                continue;
            }
        };
        for &size in &sizes {
            let m = match throughput(t.as_ref(), generation, region, size, a.in_flight.unwrap_or(4).max(1), secs, relay_pid) {
                Ok(m) => m,
                Err(e) => {
                    eprintln!("probe: {name} at {size} bytes failed: {e:#}");
                    skipped.push(serde_json::json!({"transport": name, "size": size, "reason": format!("{e:#}")}));
                    break;
                }
            };
            let lat = latency(t.as_ref(), generation, region, size, secs)?;
            let base = baseline_of(name);
            let reads = m.reads.max(1) as f64;
            points.push(Point {
                transport: name.clone(),
                detail: t.detail().unwrap_or_else(|| t.kind().to_string()),
                size,
                mib_s: m.mib_s,
                ratio_to_baseline: base_tp.get(&(base, size)).map(|b| m.mib_s / b),
                baseline: Some(base.to_string()),
                p50_us: pct(&lat, 0.5),
                p99_us: pct(&lat, 0.99),
                reader_cpu_us_per_read: m.cpu_secs / reads * 1e6,
                relay_cpu_us_per_read: m.relay_cpu_secs.map(|c| c / reads * 1e6),
            });
        }
    }
    drop(own);

    // Table.
    println!("{:<8} {:>6} {:>10} {:>9} {:>10} {:>10} {:>10} {:>10}  detail", "transport", "size", "MiB/s", "×base", "p50 µs", "p99 µs", "cpu µs/rd", "relay µs");
    for p in &points {
        println!(
            "{:<8} {:>6} {:>10.1} {:>9} {:>10.1} {:>10.1} {:>10.2} {:>10}  {}",
            p.transport,
            charts::human_bytes(p.size as f64),
            p.mib_s,
            p.ratio_to_baseline.map(|r| format!("{r:.2} {}", if p.baseline.as_deref() == Some("memcpy") { "m" } else { "t" })).unwrap_or_default(),
            p.p50_us,
            p.p99_us,
            p.reader_cpu_us_per_read,
            p.relay_cpu_us_per_read.map(|c| format!("{c:.2}")).unwrap_or_else(|| "-".into()),
            p.detail
        );
    }
    println!("(×base: throughput over the same-size baseline; m = memcpy, t = raw TCP stream, both measured in this run)");
    for b in &baselines {
        println!(
            "{:<10} {:>6} {:>10.1} {:>10.1} {:>10.1}",
            b["baseline"].as_str().unwrap_or(""),
            charts::human_bytes(b["size"].as_f64().unwrap_or(0.0)),
            b["mib_s"].as_f64().unwrap_or(0.0),
            b["p50_us"].as_f64().unwrap_or(0.0),
            b["p99_us"].as_f64().unwrap_or(0.0)
        );
    }

    let json = serde_json::json!({
        "command": std::env::args().collect::<Vec<_>>().join(" "),
        "machine": machine,
        "in_flight": a.in_flight.unwrap_or(4),
        "secs_per_point": secs,
        "relay_cpu_measured": relay_pid.is_some(),
        "points": points,
        "baselines": baselines,
        "skipped": skipped,
    });
    let jpath = a.out.join("probe.json");
    std::fs::write(&jpath, serde_json::to_vec_pretty(&json)?).with_context(|| format!("write {}", jpath.display()))?;
    write_charts(&a.out, &points, &baselines)?;
    println!("raw results: {}; charts: throughput.png, latency.png, cpu.png in {}", jpath.display(), a.out.display());
    Ok(std::process::ExitCode::SUCCESS)
}

fn write_charts(dir: &std::path::Path, points: &[Point], baselines: &[serde_json::Value]) -> Result<()> {
    let mut names: Vec<String> = points.iter().map(|p| p.transport.clone()).collect();
    names.dedup();
    let series = |f: &dyn Fn(&Point) -> Option<f64>, bkey: Option<&str>| {
        let mut v: Vec<Series> =
            names.iter().map(|n| Series { name: n.clone(), points: points.iter().filter(|p| &p.transport == n).filter_map(|p| f(p).map(|y| (p.size as f64, y))).collect(), baseline: false }).collect();
        if let Some(k) = bkey {
            for b in ["memcpy", "tcp-stream"] {
                v.push(Series {
                    name: format!("{b} (baseline)"),
                    points: baselines.iter().filter(|x| x["baseline"] == b).filter_map(|x| Some((x["size"].as_f64()?, x[k].as_f64()?))).collect(),
                    baseline: true,
                });
            }
        }
        v
    };
    charts::log_log(&dir.join("throughput.png"), "Throughput, reads in flight", "message size (bytes)", "MiB/s", &series(&|p| Some(p.mib_s), Some("mib_s")))?;
    charts::log_log(&dir.join("latency.png"), "Latency p50 (one read in flight)", "message size (bytes)", "µs", &series(&|p| Some(p.p50_us), Some("p50_us")))?;
    let mut cpu = series(&|p| Some(p.reader_cpu_us_per_read), None);
    for s in cpu.iter_mut() {
        s.name = format!("{} reader", s.name);
    }
    let mut relay_cpu = series(&|p| p.relay_cpu_us_per_read, None);
    for s in relay_cpu.iter_mut() {
        s.name = format!("{} relay", s.name);
        s.baseline = true;
    }
    cpu.extend(relay_cpu.into_iter().filter(|s| !s.points.is_empty()));
    charts::log_log(&dir.join("cpu.png"), "CPU time per read", "message size (bytes)", "µs CPU per read", &cpu)?;
    Ok(())
}

/// Whole-snapshot pulls (`--fetch BYTES`): per transport, 1 and 4 concurrent pulls through the
/// agent's pipeline, with time, MiB/s, reader CPU and relay CPU; next to memcpy and a raw TCP stream
/// of the same size. Every row is measured `--repeat` times, interleaved (round-robin over the rows,
/// so a noisy minute on a shared machine hits all of them alike); the table shows medians and the JSON
/// keeps every run.
fn fetch_runs(a: &ProbeArgs, relay: SocketAddr, token: &Credentials, offered: &agent::pull::progress::Offered, bytes: u64, relay_pid: Option<u32>, file: &str) -> Result<()> {
    let mib = bytes as f64 / (1 << 20) as f64;
    let mut modes: Vec<(String, usize)> = vec![("memcpy (baseline)".into(), 1), ("memcpy from a fresh memfd mapping (reference)".into(), 1), ("tcp-stream (baseline)".into(), 1)];
    for t in &a.transports {
        modes.push((t.clone(), 1));
        modes.push((t.clone(), 4));
    }
    let mut runs: Vec<Vec<serde_json::Value>> = vec![Vec::new(); modes.len()];
    for round in 0..a.repeat.max(1) {
        for (i, (mode, conc)) in modes.iter().enumerate() {
            let r = match mode.as_str() {
                "memcpy (baseline)" => memcpy_hot(bytes as usize).map(|s| serde_json::json!({"secs": s})),
                "memcpy from a fresh memfd mapping (reference)" => memcpy_from_fresh_mapping(bytes as usize).map(|s| serde_json::json!({"secs": s})),
                "tcp-stream (baseline)" => tcp_stream_once(bytes).map(|s| serde_json::json!({"secs": s})),
                t => pull_round(a, t, *conc, relay, token, offered, bytes, relay_pid),
            };
            match r {
                Ok(v) => runs[i].push(v),
                Err(e) => {
                    eprintln!("probe: {mode} ×{conc} (round {round}) failed: {e:#}");
                    runs[i].push(serde_json::json!({"error": format!("{e:#}")}));
                }
            }
        }
    }
    let median = |v: &[f64]| -> Option<f64> { crate::stats::median(&v.iter().copied().filter(|x| x.is_finite()).collect::<Vec<_>>()) };
    let col = |i: usize, k: &str| -> Vec<f64> { runs[i].iter().filter_map(|r| r[k].as_f64()).collect() };
    let mut rows = Vec::new();
    for (i, (mode, conc)) in modes.iter().enumerate() {
        let secs = median(&col(i, "secs_per_pull")).or_else(|| median(&col(i, "secs")));
        rows.push(serde_json::json!({
            "mode": mode, "concurrent": conc,
            "detail": runs[i].iter().find_map(|r| r["detail"].as_str().map(str::to_string)),
            "median_secs_per_pull": secs,
            "mib_s": secs.map(|s| mib / s),
            "median_wall_secs": median(&col(i, "wall_secs")),
            "median_reader_cpu_secs_per_pull": median(&col(i, "reader_cpu_secs_per_pull")),
            "median_relay_cpu_fraction_of_wall": median(&col(i, "relay_cpu_fraction_of_wall")),
            "runs": runs[i],
        }));
    }
    let base = |m: &str| rows.iter().find(|r| r["mode"] == m).and_then(|r| r["mib_s"].as_f64());
    let (memcpy, tcp) = (base("memcpy (baseline)"), base("tcp-stream (baseline)"));
    println!("pull of {mib:.0} MiB, median of {} runs:", a.repeat.max(1));
    println!("{:<46} {:>4} {:>8} {:>9} {:>7} {:>10} {:>11}", "mode", "conc", "s/pull", "MiB/s", "×base", "cpu s/pull", "relay cpu %");
    for r in rows.iter_mut() {
        let m = r["mode"].as_str().unwrap_or("").to_string();
        let b = if m.contains('(') {
            None
        } else if baseline_of(&m) == "memcpy" {
            memcpy
        } else {
            tcp
        };
        let ratio = b.and_then(|b| r["mib_s"].as_f64().map(|x| x / b));
        if let Some(x) = ratio {
            r["ratio_to_baseline"] = serde_json::json!(x);
            r["baseline"] = serde_json::json!(baseline_of(&m));
        }
        let f = |k: &str, scale: f64, prec: usize| r[k].as_f64().map(|x| format!("{:.*}", prec, x * scale)).unwrap_or_default();
        println!(
            "{:<46} {:>4} {:>8} {:>9} {:>7} {:>10} {:>11}",
            m,
            r["concurrent"],
            f("median_secs_per_pull", 1.0, 2),
            f("mib_s", 1.0, 0),
            ratio.map(|x| format!("{x:.2}")).unwrap_or_default(),
            f("median_reader_cpu_secs_per_pull", 1.0, 2),
            f("median_relay_cpu_fraction_of_wall", 100.0, 1)
        );
    }
    println!("(×base: MiB/s over memcpy for shm and ucx-sm, over the raw TCP stream for tcp and ucx-tcp; relay CPU from /proc, 10 ms resolution)");
    let json = serde_json::json!({
        "command": std::env::args().collect::<Vec<_>>().join(" "),
        "machine": crate::bench::report::machine(),
        "bytes": bytes, "repeat": a.repeat.max(1), "relay_tls": a.relay_tls,
        "readers_per_pull": a.in_flight.map(|n| n.to_string()).unwrap_or_else(|| "transport default (4; ucx 2)".into()),
        "rows": rows,
    });
    let p = a.out.join(file);
    std::fs::write(&p, serde_json::to_vec_pretty(&json)?)?;
    println!("raw results: {}", p.display());
    Ok(())
}

/// Seconds for one single-threaded copy of `bytes` between two buffers already faulted in.
fn memcpy_hot(bytes: usize) -> Result<f64> {
    let src = vec![3u8; bytes];
    let mut dst = vec![0u8; bytes];
    dst.copy_from_slice(&src); // fault the pages in first: we time the copy, not the allocator
    let t = Instant::now();
    dst.copy_from_slice(&src);
    std::hint::black_box(&dst);
    Ok(t.elapsed().as_secs_f64())
}

/// Seconds to receive `bytes` over one loopback TCP connection from a thread writing 4 MiB chunks.
fn tcp_stream_once(bytes: u64) -> Result<f64> {
    let l = TcpListener::bind("127.0.0.1:0")?;
    let addr = l.local_addr()?;
    let server = std::thread::spawn(move || -> std::io::Result<()> { write_stream(&mut l.accept()?.0, bytes, None) });
    let t = Instant::now();
    let mut c = TcpStream::connect(addr)?;
    let mut b = vec![0u8; 4 << 20];
    let mut got = 0u64;
    while got < bytes {
        let n = c.read(&mut b)?;
        if n == 0 {
            bail!("raw TCP stream ended after {got} of {bytes} bytes");
        }
        got += n as u64;
    }
    let s = t.elapsed().as_secs_f64();
    let _ = server.join();
    Ok(s)
}

/// `conc` concurrent pulls of the relay's snapshot over transport `name`; one JSON run record.
#[allow(clippy::too_many_arguments)]
fn pull_round(
    a: &ProbeArgs,
    name: &str,
    conc: usize,
    relay: SocketAddr,
    token: &Credentials,
    offered: &agent::pull::progress::Offered,
    bytes: u64,
    relay_pid: Option<u32>,
) -> Result<serde_json::Value> {
    let cancel = AtomicBool::new(false);
    let rcpu0 = relay_pid.and_then(agent::procstat::cpu_secs_with_children);
    let cpu0 = agent::procstat::own_cpu_secs();
    let t0 = Instant::now();
    let results: Vec<Result<(f64, String)>> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..conc)
            .map(|_| {
                let cancel = &cancel;
                s.spawn(move || -> Result<(f64, String)> {
                    let t = open_transport(name, relay, token, offered)?;
                    let attached = agent::pull::progress::attach(&relay.into(), token, Duration::from_secs(60))?;
                    let t1 = Instant::now();
                    let mut n = 0u64;
                    let readers = agent::readers(a.in_flight.unwrap_or(0), t.as_ref());
                    let pull = agent::pull::pipeline::Pull {
                        transport: t.as_ref(),
                        progress: &attached.progress,
                        readers,
                        window: agent::pull::pipeline::window(None, agent::pull::pipeline::Membership::Alone),
                        cancel,
                        peering: None,
                        counters: None,
                    };
                    agent::pull::pipeline::pull(&pull, &mut |b| {
                        n += b.len() as u64;
                        Ok(())
                    })?;
                    if n != bytes {
                        bail!("pulled {n} bytes, expected {bytes}");
                    }
                    Ok((t1.elapsed().as_secs_f64(), t.detail().unwrap_or_default()))
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap_or_else(|_| Err(anyhow::anyhow!("pull thread panicked")))).collect()
    });
    let wall = t0.elapsed().as_secs_f64();
    let cpu = agent::procstat::own_cpu_secs() - cpu0;
    let rcpu = rcpu0.and_then(|c0| relay_pid.and_then(agent::procstat::cpu_secs_with_children).map(|c1| c1 - c0));
    let rs = results.into_iter().collect::<Result<Vec<_>>>()?;
    let per: Vec<f64> = rs.iter().map(|r| r.0).collect();
    Ok(serde_json::json!({
        "detail": rs[0].1, "wall_secs": wall, "secs_each": per,
        "secs_per_pull": per.iter().sum::<f64>() / per.len() as f64,
        "reader_cpu_secs_per_pull": cpu / conc as f64,
        "relay_cpu_secs": rcpu, "relay_cpu_fraction_of_wall": rcpu.map(|c| c / wall),
    }))
}
