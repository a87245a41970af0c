//! `fastrepl-lab report DIR...`: re-render what `bench` wrote from its raw `results.json` — each
//! directory's `results.md` and charts — and, with `--summary FILE`, the tables of
//! docs/benchmarks.md: per scenario, the medians side by side with the fastrepl ÷ native ratio, where
//! the time went, and every run. One renderer and one median for everything the project shows.

use crate::bench::report::{phase_table, render, summary_table, table, ScenarioResult};
use anyhow::{Context, Result};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// `fastrepl-lab report` arguments.
#[derive(clap::Args, Debug)]
pub struct ReportArgs {
    /// Directories that hold a bench `results.json`.
    #[arg(required = true)]
    pub dirs: Vec<PathBuf>,
    /// Also write the summary tables of all the directories into this Markdown file.
    #[arg(long)]
    pub summary: Option<PathBuf>,
}

/// A results directory, read back.
struct Loaded {
    dir: PathBuf,
    doc: serde_json::Value,
    scenarios: Vec<ScenarioResult>,
}

fn load(dir: &Path) -> Result<Loaded> {
    let path = dir.join("results.json");
    let bytes = std::fs::read(&path).with_context(|| format!("read {}", path.display()))?;
    let doc: serde_json::Value = serde_json::from_slice(&bytes).with_context(|| format!("parse {}", path.display()))?;
    let scenarios: Vec<ScenarioResult> = serde_json::from_value(doc["scenarios"].clone()).with_context(|| format!("read the scenarios of {}", path.display()))?;
    Ok(Loaded { dir: dir.to_path_buf(), doc, scenarios })
}

/// Re-render every directory, then the summary.
pub fn run(a: ReportArgs) -> Result<()> {
    let loaded: Vec<Loaded> = a.dirs.iter().map(|d| load(d)).collect::<Result<_>>()?;
    for l in &loaded {
        render(&l.dir, &l.doc, &l.scenarios)?;
        println!("re-rendered {}", l.dir.join("results.md").display());
    }
    if let Some(path) = &a.summary {
        std::fs::write(path, summary(&loaded)).with_context(|| format!("write {}", path.display()))?;
        println!("wrote {}", path.display());
    }
    Ok(())
}

fn summary(loaded: &[Loaded]) -> String {
    let mut md = String::new();
    for l in loaded {
        let server = l.doc["server"]["version"].as_str().unwrap_or("?");
        let delay = &l.doc["settings"]["repl-diskless-sync-delay"];
        for s in &l.scenarios {
            let _ = writeln!(md, "### {} — `{}`\n", s.spec.name, l.dir.display());
            let _ = writeln!(md, "{}; server `{server}`, `repl-diskless-sync-delay {delay}`. Command: `{}`\n", s.spec.describe(), l.doc["command"].as_str().unwrap_or(""));
            let _ = writeln!(md, "Time to all replicas in sync (s):\n");
            md.push_str(&summary_table(s));
            if s.spec.arrival != crate::bench::scenario::Arrival::Staggered {
                let _ = writeln!(md, "\nWhere the time goes (s from the run's start):\n");
                md.push_str(&phase_table(s));
            }
            let _ = writeln!(md, "\nEvery run:\n");
            md.push_str(&table(s));
            md.push('\n');
        }
    }
    md
}
