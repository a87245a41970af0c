//! `fastrepl-lab codecs`: what compressing a snapshot's blocks once, at the relay, would gain and
//! cost. A dataset's RDB as the server writes it with LZF (what a master sends) and without
//! (`--source-rdb-raw`: what a replica source can be asked for, and what undoing LZF in the relay
//! would give), cut into blocks as the relay cuts it, each block compressed by each candidate codec
//! and kept raw where that does not pay (`codec::Compressor`, the product's rule): stored bytes, the
//! ratio, blocks kept raw, and one core's compression and decompression rate — from which the cores a
//! relay needs to keep up with a capture at 10 Gbit/s.
//!
//! CPU-bound: run it alone, pinned to a core of its own (`taskset -c 1`), and say so.

use anyhow::{anyhow, bail, Context, Result};
use codec::{Codec, Compressor};
use serde::Serialize;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// The data an RDB is made of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Profile {
    /// What caches hold: JSON profiles, sessions, text, counters, lists of ids (`fixtures::cache_data`).
    Realistic,
    /// The bench's big random values (no codec shrinks them).
    Random,
}

/// `fastrepl-lab codecs` arguments.
#[derive(clap::Args, Debug)]
pub struct CodecsArgs {
    /// The data to make the RDBs of.
    #[arg(long, value_enum, default_value = "realistic")]
    profile: Profile,
    /// Keys of the realistic profile (~375 bytes each in an RDB without LZF).
    #[arg(long, default_value_t = 300_000)]
    keys: u64,
    /// MiB of random values (4 MiB each) for the random profile.
    #[arg(long, default_value_t = 256)]
    random_mib: u64,
    /// Measure these RDB files instead of making them (each as it is: say how it was written).
    #[arg(long)]
    rdb: Vec<PathBuf>,
    /// Server build that writes the RDBs: redis-7.0, valkey-8.1, redis-6.2.
    #[arg(long, default_value = "redis-7.0")]
    server: String,
    /// Block size, as the relay's `--block-size`.
    #[arg(long, default_value_t = limits::BLOCK_BYTES_DEFAULT)]
    block_size: u64,
    /// Times each (RDB, codec) is measured; rates are the medians.
    #[arg(long, default_value_t = 3)]
    repeat: usize,
    /// Directory for results.json and results.md.
    #[arg(long, default_value = "codecs-results")]
    out: PathBuf,
}

/// A candidate: a codec at a level.
#[derive(Debug, Clone, Copy, Serialize)]
struct Candidate {
    #[serde(serialize_with = "codec_name")]
    codec: Codec,
    level: i32,
}

fn codec_name<S: serde::Serializer>(c: &Codec, s: S) -> std::result::Result<S::Ok, S::Error> {
    s.serialize_str(c.name())
}

impl Candidate {
    fn label(&self) -> String {
        match self.codec {
            Codec::Zstd => format!("zstd -{}", self.level),
            // lz4_flex's block compressor is LZ4's default (acceleration 1): the `lz4 -1` of the
            // command line, what Valkey 9.2's `repl-compression` uses.
            Codec::Lz4 => "lz4 -1".into(),
            Codec::Raw => "raw".into(),
        }
    }
}

const CANDIDATES: [Candidate; 4] =
    [Candidate { codec: Codec::Lz4, level: 0 }, Candidate { codec: Codec::Zstd, level: 1 }, Candidate { codec: Codec::Zstd, level: 3 }, Candidate { codec: Codec::Zstd, level: 6 }];

/// One (RDB, codec) measurement.
#[derive(Debug, Serialize)]
struct Row {
    rdb: String,
    rdb_bytes: u64,
    candidate: Candidate,
    label: String,
    blocks: usize,
    blocks_kept_raw: usize,
    stored_bytes: u64,
    ratio: f64,
    /// Raw bytes compressed per second on one core, MB/s (median over the repeats).
    compress_mb_s: f64,
    /// Raw bytes produced per second on one core when decompressing, MB/s (median).
    decompress_mb_s: f64,
    /// One core's CPU seconds per GB of raw bytes.
    compress_cpu_secs_per_gb: f64,
    decompress_cpu_secs_per_gb: f64,
    /// Cores that keep up with a capture arriving at 10 Gbit/s (1.25 GB/s of raw bytes).
    cores_for_10gbit: f64,
}

/// Run it: make (or take) the RDBs, measure, write results.json and results.md, print the table.
pub fn run(a: CodecsArgs) -> Result<()> {
    if a.block_size < limits::BLOCK_BYTES_MIN || a.block_size > limits::GENERATION_BLOCK_BYTES_MAX {
        bail!("--block-size must be {}..={} bytes", limits::BLOCK_BYTES_MIN, limits::GENERATION_BLOCK_BYTES_MAX);
    }
    std::fs::create_dir_all(&a.out).with_context(|| format!("create {}", a.out.display()))?;
    let work = tempfile::Builder::new().prefix("fastrepl-codecs").tempdir().context("make a work directory")?;
    let rdbs: Vec<(String, PathBuf)> = if a.rdb.is_empty() { make_rdbs(&a, work.path())? } else { a.rdb.iter().map(|p| (p.display().to_string(), p.clone())).collect() };
    let mut rows = Vec::new();
    for (name, path) in &rdbs {
        let bytes = std::fs::read(path).with_context(|| format!("read the RDB {}", path.display()))?;
        println!("-- {name}: {} bytes, {} blocks of {} bytes", bytes.len(), bytes.len().div_ceil(a.block_size as usize), a.block_size);
        for c in CANDIDATES {
            let row = measure(name, &bytes, a.block_size as usize, c, a.repeat.max(1))?;
            println!(
                "   {:<8} ratio {:.2}  stored {:>6.1} MB  kept raw {}/{}  compress {:.0} MB/s  decompress {:.0} MB/s",
                row.label,
                row.ratio,
                row.stored_bytes as f64 / 1e6,
                row.blocks_kept_raw,
                row.blocks,
                row.compress_mb_s,
                row.decompress_mb_s
            );
            rows.push(row);
        }
    }
    let made = a.rdb.is_empty();
    let doc = serde_json::json!({
        "command": std::env::args().collect::<Vec<_>>().join(" "),
        "machine": crate::bench::report::machine(),
        "cpu_affinity": affinity(),
        // What made the RDBs, when this run made them (given files are described by their names).
        "server": made.then_some(&a.server),
        "profile": made.then_some(a.profile),
        "keys": (made && a.profile == Profile::Realistic).then_some(a.keys),
        "block_size": a.block_size,
        "pays_eighths": limits::BLOCK_COMPRESSED_PAYS_EIGHTHS,
        "rows": rows,
    });
    std::fs::write(a.out.join("results.json"), serde_json::to_vec_pretty(&doc)?).context("write results.json")?;
    let md = render(&doc, &rows);
    std::fs::write(a.out.join("results.md"), &md).context("write results.md")?;
    println!("\n{md}");
    Ok(())
}

/// The cores this process may run on, as `sched_getaffinity` says (the figures are one core's).
fn affinity() -> String {
    std::fs::read_to_string("/proc/self/status").unwrap_or_default().lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:")).map(|v| v.trim().to_string()).unwrap_or_default()
}

/// A server with the profile's data, saved twice: with LZF (`rdbcompression yes`, the default: what a
/// master sends) and without (what `--source-rdb-raw` asks a source for).
fn make_rdbs(a: &CodecsArgs, dir: &Path) -> Result<Vec<(String, PathBuf)>> {
    let flavor = fixtures::Flavor::parse(&a.server).with_context(|| format!("unknown server {:?}", a.server))?;
    let server = fixtures::Server::try_start(flavor, &[]).map_err(|e| anyhow!("start {}: {e}", a.server))?;
    let mut c = server.try_client()?;
    let t = Instant::now();
    match a.profile {
        Profile::Realistic => fixtures::cache_data::fill(&mut c, a.keys, 44).map_err(|e| anyhow!(e))?,
        Profile::Random => fixtures::data::fill_big_values(&mut c, a.random_mib.div_ceil(4) as usize, 4 << 20),
    }
    println!("-- {} filled in {:.1} s", a.server, t.elapsed().as_secs_f64());
    let server_dir = c.config_get("dir")?.ok_or_else(|| anyhow!("CONFIG GET dir said nothing"))?;
    let file = c.config_get("dbfilename")?.unwrap_or_else(|| "dump.rdb".into());
    let mut out = Vec::new();
    for (lzf, name) in [(true, "lzf"), (false, "no-lzf")] {
        c.config_set("rdbcompression", if lzf { "yes" } else { "no" })?;
        c.cmd(&["SAVE"]).context("SAVE")?;
        let to = dir.join(format!("{name}.rdb"));
        std::fs::rename(Path::new(&server_dir).join(&file), &to).with_context(|| format!("move the {name} RDB"))?;
        out.push((format!("{:?} {name}", a.profile).to_lowercase(), to));
    }
    Ok(out)
}

fn measure(name: &str, rdb: &[u8], block: usize, c: Candidate, repeat: usize) -> Result<Row> {
    let mut comp = Compressor::new(c.codec, c.level).context("make a compressor")?;
    let mut decomp = codec::Decompressor::new();
    let blocks: Vec<&[u8]> = rdb.chunks(block).collect();
    // Once untimed, to keep what each block becomes and check it comes back whole; then timed
    // rounds that reuse one output buffer, as a relay's compressor thread and an agent's feeder do.
    let mut stored: Vec<(Codec, Vec<u8>)> = Vec::with_capacity(blocks.len());
    let mut raw = Vec::with_capacity(block);
    for b in &blocks {
        let mut out = Vec::new();
        let codec = comp.compress(b, &mut out);
        if codec != Codec::Raw {
            decomp.decompress(codec, &out, b.len(), &mut raw).map_err(|e| anyhow!("{}: {e}", c.label()))?;
            if raw.as_slice() != *b {
                bail!("{}: a block came back different", c.label());
            }
        }
        stored.push((codec, out));
    }
    let (mut ctimes, mut dtimes) = (Vec::new(), Vec::new());
    let mut out = Vec::with_capacity(block);
    for _ in 0..repeat {
        let t = Instant::now();
        for b in &blocks {
            comp.compress(b, &mut out);
        }
        ctimes.push(t.elapsed().as_secs_f64());
        let t = Instant::now();
        for (b, (codec, s)) in blocks.iter().zip(&stored) {
            if *codec != Codec::Raw {
                // Kept raw: nothing to undo, fed as it is.
                decomp.decompress(*codec, s, b.len(), &mut raw).map_err(|e| anyhow!("{}: {e}", c.label()))?;
            }
        }
        dtimes.push(t.elapsed().as_secs_f64());
    }
    let stored_bytes: u64 = blocks.iter().zip(&stored).map(|(b, (codec, s))| if *codec == Codec::Raw { b.len() } else { s.len() } as u64).sum();
    let compressed_raw: u64 = blocks.iter().zip(&stored).filter(|(_, (codec, _))| *codec != Codec::Raw).map(|(b, _)| b.len() as u64).sum();
    let mb = rdb.len() as f64 / 1e6;
    let cs = crate::stats::median(&ctimes).unwrap_or(f64::NAN);
    let ds = crate::stats::median(&dtimes).unwrap_or(f64::NAN);
    let compress_mb_s = mb / cs;
    // Decompression runs over the compressed blocks only; its rate is of the raw bytes they make.
    let decompress_mb_s = if compressed_raw == 0 { f64::NAN } else { compressed_raw as f64 / 1e6 / ds };
    Ok(Row {
        rdb: name.to_string(),
        rdb_bytes: rdb.len() as u64,
        candidate: c,
        label: c.label(),
        blocks: blocks.len(),
        blocks_kept_raw: stored.iter().filter(|(codec, _)| *codec == Codec::Raw).count(),
        stored_bytes,
        ratio: rdb.len() as f64 / stored_bytes as f64,
        compress_mb_s,
        decompress_mb_s,
        compress_cpu_secs_per_gb: 1e3 / compress_mb_s,
        decompress_cpu_secs_per_gb: 1e3 / decompress_mb_s,
        cores_for_10gbit: 1250.0 / compress_mb_s,
    })
}

fn render(doc: &serde_json::Value, rows: &[Row]) -> String {
    let mut md = format!(
        "# Block codecs on a snapshot\n\n`{}`\n\nMachine: {}; this process on CPUs {}. Blocks of {} bytes, each kept compressed only at ≤ {}/8 of its size.\n\n",
        doc["command"].as_str().unwrap_or(""),
        doc["machine"],
        doc["cpu_affinity"].as_str().unwrap_or("?"),
        doc["block_size"],
        limits::BLOCK_COMPRESSED_PAYS_EIGHTHS
    );
    md.push_str("| RDB | RDB MB | codec | stored MB | ratio | blocks kept raw | compress MB/s (1 core) | decompress MB/s (1 core) | compress CPU s/GB | decompress CPU s/GB | cores for 10 Gbit/s |\n");
    md.push_str("|---|---|---|---|---|---|---|---|---|---|---|\n");
    // A rate of nothing (every block kept raw: nothing decompressed) is no figure.
    let fig = |v: f64, digits: usize| if v.is_finite() { format!("{v:.digits$}") } else { "–".into() };
    for r in rows {
        let _ = writeln!(
            md,
            "| {} | {:.1} | {} | {:.1} | {:.2} | {}/{} | {:.0} | {} | {:.2} | {} | {:.1} |",
            r.rdb,
            r.rdb_bytes as f64 / 1e6,
            r.label,
            r.stored_bytes as f64 / 1e6,
            r.ratio,
            r.blocks_kept_raw,
            r.blocks,
            r.compress_mb_s,
            fig(r.decompress_mb_s, 0),
            r.compress_cpu_secs_per_gb,
            fig(r.decompress_cpu_secs_per_gb, 2),
            r.cores_for_10gbit
        );
    }
    md
}
