//! `memdial engines check`: lists the engines of a spec (or every built-in), finds
//! their binaries and pythons, and says what is missing and how to get it.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;

use super::def::BUILTINS;
use super::registry::Registry;
use crate::sweep::spec::Spec;

/// Arguments of `memdial engines`.
#[derive(clap::Args, Debug)]
pub struct EnginesArgs {
    #[command(subcommand)]
    /// What to do.
    pub command: EnginesCommand,
}

/// `memdial engines` subcommands.
#[derive(clap::Subcommand, Debug)]
pub enum EnginesCommand {
    /// List the engines (of --spec, else every built-in adapter), find their binaries,
    /// and say what is missing and how to build it. Exit 1 when one is missing.
    Check {
        /// Sweep spec whose `engines` to check [default: every built-in adapter].
        #[arg(long)]
        spec: Option<PathBuf>,
    },
    /// List the placeholders command templates may use.
    Placeholders,
}

/// Runs `memdial engines …`.
pub fn run(a: &EnginesArgs) -> Result<ExitCode> {
    match &a.command {
        EnginesCommand::Placeholders => {
            for (p, what) in super::template::PLACEHOLDERS {
                println!("{{{p}}}\t{what}");
            }
            Ok(ExitCode::SUCCESS)
        }
        EnginesCommand::Check { spec } => {
            let spec = match spec {
                Some(p) => Spec::load(p).map_err(crate::args::as_usage)?,
                None => {
                    let names: Vec<String> = BUILTINS
                        .iter()
                        .filter(|b| {
                            super::def::builtin(b).is_some_and(|d| {
                                d.command.is_some() || d.adapter.as_deref() == Some("memdial")
                            })
                        })
                        .map(|b| format!("{b:?}"))
                        .collect();
                    Spec::parse(
                        &format!("budgets = [\"floor\"]\nengines = [{}]\n", names.join(", ")),
                        std::path::Path::new("."),
                    )
                    .map_err(crate::args::as_usage)?
                }
            };
            let reg = Registry::from_spec(&spec)?;
            let mut all_ok = true;
            println!("| engine | adapter | binary | budget held by | must match | status |");
            println!("|---|---|---|---|---|---|");
            for e in &reg.engines {
                let missing = reg.missing(e);
                let what = if e.is_memdial() {
                    std::env::current_exe()
                        .map(|p| p.display().to_string())
                        .unwrap_or_default()
                } else {
                    e.bin
                        .as_ref()
                        .or(e.python.as_ref())
                        .map(|p| p.display().to_string())
                        .unwrap_or_else(|| "–".into())
                };
                let status = if missing.is_empty() {
                    "ok".to_string()
                } else {
                    all_ok = false;
                    "missing".to_string()
                };
                println!(
                    "| {}{} | {} | {} | {} | {} | {} |",
                    e.name,
                    if e.name == reg.reference {
                        " (reference)"
                    } else {
                        ""
                    },
                    e.adapter,
                    what,
                    e.budget.as_str(),
                    if e.must_match { "yes" } else { "no" },
                    status
                );
                for m in missing {
                    eprintln!("  {m}");
                }
            }
            Ok(if all_ok {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            })
        }
    }
}
