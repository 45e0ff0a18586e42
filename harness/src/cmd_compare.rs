//! `memdial compare A B [--out DIR] [--check] [--max-regression 25%]`: two sweeps'
//! decode speed point by point, B against A, with intervals and a significance test
//! (the method: [`crate::sweep::analysis::versus`]).
//!
//! A and B are run directories (holding `results.csv`) or `results.csv` files of any
//! spec, schema or memdial version: points are matched on point key, budget bytes,
//! prompt tokens and max tokens, and the points only one side has are listed.
//!
//! Exit codes: 0 the table was printed (with `--check`: no point significantly slower by
//! more than the tolerance); 1 with `--check`, a regression, or no point could be judged;
//! 2 usage error (a path that is not a results file, a bad tolerance, an unwritable `--out`).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result};

use crate::args::{as_usage, usage};
use crate::export::{write_atomic, write_json, write_text};
use crate::sweep::analysis::versus::{versus, Side};
use crate::sweep::record::baseline::{parse_tolerance, read_csv_runs};
use crate::sweep::write::versus::{csv, markdown};

/// Arguments of `memdial compare`.
#[derive(clap::Args, Debug)]
pub struct CompareArgs {
    /// The reference sweep: a run directory or its results.csv.
    pub a: PathBuf,
    /// The sweep compared with it (ratios are B/A: above 1, B is slower).
    pub b: PathBuf,
    /// Also write compare.md, compare.csv and compare.json into DIR (created).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Print only the one-line verdict; exit 1 when a point of B is significantly
    /// slower than A's by more than --max-regression, or nothing could be judged.
    #[arg(long)]
    pub check: bool,
    /// Allowed slow-down of B against A (e.g. 25% or 0.25).
    #[arg(long, default_value = "25%")]
    pub max_regression: String,
}

/// The `results.csv` a path names: the file itself or `DIR/results.csv`.
fn results_csv(p: &Path) -> Result<PathBuf> {
    let f = if p.is_dir() {
        p.join("results.csv")
    } else {
        p.to_path_buf()
    };
    if !f.is_file() {
        return Err(usage(format!(
            "{}: no results.csv (give a run directory written by `memdial sweep` or its results.csv)",
            p.display()
        )));
    }
    Ok(f)
}

fn side(p: &Path) -> Result<Side> {
    let f = results_csv(p)?;
    let (runs, bad, noisy) = read_csv_runs(&f, true).map_err(as_usage)?;
    for u in &bad {
        eprintln!("note: {}: run {} left out: {}", f.display(), u.run, u.why);
    }
    Ok(Side { runs, noisy })
}

/// Runs `memdial compare`.
pub fn run(a: &CompareArgs) -> Result<ExitCode> {
    let tolerance = parse_tolerance(&a.max_regression)
        .map_err(|e| usage(format!("--max-regression: {e:#}")))?;
    if let Some(out) = &a.out {
        if out.exists() && !out.is_dir() {
            return Err(usage(format!("--out {} is not a directory", out.display())));
        }
    }
    let (sa, sb) = (side(&a.a)?, side(&a.b)?);
    let v = versus(&sa, &sb, tolerance);
    let md = markdown(&v, &a.a.display().to_string(), &a.b.display().to_string());
    if let Some(out) = &a.out {
        std::fs::create_dir_all(out)
            .with_context(|| format!("cannot create --out {}", out.display()))?;
        write_text(&out.join("compare.md"), &md)?;
        write_atomic(&out.join("compare.csv"), &csv(&v)?)?;
        write_json(&out.join("compare.json"), &v)?;
    }
    if a.check {
        println!("{}", v.line());
    } else {
        print!("{md}");
    }
    let judged = v.points.len() > v.undecided().len();
    Ok(if a.check && (!v.regressions().is_empty() || !judged) {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}
