//! `memdial report merge DIR… [--out DIR] [--check]`: merge shard run directories of
//! one sweep into one report with one verdict. `memdial report verify DIR
//! [--model PATH]`: re-check a finished run directory offline.
//!
//! Exit codes: merge as `memdial sweep` (0 PASS, 1 any other outcome, 2 usage or
//! refused input); verify 0 when the directory verifies and its verdict (recomputed
//! and recorded) is a pass, 1 when a problem was found or the verdict is not a
//! pass, 2 when DIR is not a run directory.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};

use crate::args::{as_usage, usage};
use crate::sweep::record::merge::{check_inputs, check_out, copy_runs, copy_spec, merge};
use crate::sweep::write::report::write_all;

/// Arguments of `memdial report`.
#[derive(clap::Args, Debug)]
pub struct ReportArgs {
    #[command(subcommand)]
    pub command: ReportCommand,
}

/// `memdial report` subcommands.
#[derive(clap::Subcommand, Debug)]
pub enum ReportCommand {
    /// Merge the run directories of `memdial sweep --shard i/n` into one report.
    Merge(MergeArgs),
    /// Re-check a finished run directory offline: rows against their runs'
    /// metrics.json, hashes against ids, results files against verdict.json's
    /// digests, the model's identity against sweep.json's.
    Verify(VerifyArgs),
}

/// Arguments of `memdial report verify`.
#[derive(clap::Args, Debug)]
pub struct VerifyArgs {
    /// The run directory.
    pub dir: PathBuf,
    /// The model [default: the directory recorded in sweep.json].
    #[arg(long)]
    pub model: Option<PathBuf>,
}

/// Arguments of `memdial report merge`.
#[derive(clap::Args, Debug)]
pub struct MergeArgs {
    /// Run directories (each holding sweep.json and results.json).
    #[arg(required = true)]
    pub dirs: Vec<PathBuf>,
    /// Output directory [default: reports/<UTC time>-merged].
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Also write a JUnit XML report to FILE (see `memdial sweep --junit`).
    #[arg(long, value_name = "FILE")]
    pub junit: Option<PathBuf>,
    /// Print only a one-line verdict on stdout.
    #[arg(long)]
    pub check: bool,
}

/// Runs `memdial report …`.
pub fn run(a: &ReportArgs) -> Result<ExitCode> {
    match &a.command {
        ReportCommand::Merge(m) => run_merge(m),
        ReportCommand::Verify(v) => run_verify(v),
    }
}

fn run_verify(a: &VerifyArgs) -> Result<ExitCode> {
    if !a.dir.join("sweep.json").exists() {
        return Err(usage(format!(
            "{} is not a sweep run directory (no sweep.json)",
            a.dir.display()
        )));
    }
    let r = crate::sweep::verify::verify(&a.dir, a.model.as_deref()).map_err(as_usage)?;
    if r.problems.is_empty() {
        println!(
            "verified: {} rows agree with their runs, the results files with verdict.json, the model with sweep.json; {}",
            r.rows, r.line
        );
        return Ok(if r.pass {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(1)
        });
    }
    println!(
        "FAIL: {} problem(s) in {}: {}",
        r.problems.len(),
        a.dir.display(),
        r.problems[0]
    );
    for p in &r.problems {
        eprintln!("- {p}");
    }
    Ok(ExitCode::from(1))
}

fn run_merge(a: &MergeArgs) -> Result<ExitCode> {
    crate::sweep::write::ci::check_junit_path(a.junit.as_deref())?;
    check_inputs(&a.dirs).map_err(as_usage)?;
    let (meta, rows, missing) = merge(&a.dirs).map_err(as_usage)?;
    let out = a.out.clone().unwrap_or_else(|| {
        PathBuf::from(crate::sweep::record::rundir::DEFAULT_REPORTS)
            .join(format!("{}-merged", crate::sweep::util::utc_now_dirname()))
    });
    check_out(&a.dirs, &out)?;
    std::fs::create_dir_all(&out).with_context(|| format!("cannot create {}", out.display()))?;
    copy_spec(&a.dirs[0], &out)?;
    copy_runs(&a.dirs, &out)?;
    meta.save(&out)?;
    let (v, _) = write_all(&out, &meta, &rows, None)?;
    debug_assert!(missing.is_empty() || !v.complete());
    println!("{}", v.line);
    crate::sweep::write::ci::outputs(
        a.junit.as_deref(),
        &crate::sweep::write::ci::Finished {
            meta: &meta,
            rows: &rows,
            v: &v,
            baseline: None,
            line: &v.line,
            pass: v.pass,
        },
    )?;
    if !a.check {
        println!("report: {}", out.join("report.md").display());
    }
    Ok(ExitCode::from(v.outcome.exit_code()))
}
