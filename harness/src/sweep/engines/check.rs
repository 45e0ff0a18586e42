//! `memdial engines check`: lists the engines of a spec (or every built-in), finds
//! their binaries and pythons, runs each engine's check command (its `check`, else
//! its `version_command`: llama.cpp's driver initialises its backends, kimi-k3-in-c
//! prints its version, mlx-lm's python imports `mlx_lm`), and says what is missing or
//! broken and how to get it.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;

use super::registry::Registry;
use crate::sweep::spec::engines::def::BUILTINS;
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
    /// run each one's check command (it must exit 0 within 60 s), and say what is
    /// missing or broken and how to build it. Exit 1 when one is missing or broken.
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
            for (p, what) in crate::sweep::spec::engines::template::PLACEHOLDERS {
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
                            crate::sweep::spec::engines::def::builtin(b).is_some_and(|d| {
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
                let mut problems = missing.clone();
                let status = if !missing.is_empty() {
                    all_ok = false;
                    "missing".to_string()
                } else {
                    match runs(&reg, e) {
                        Ok(Some(line)) => format!("ok (runs: {})", line.replace('|', "/")),
                        Ok(None) if e.is_memdial() => "ok".to_string(),
                        Ok(None) => "found (not run: no `check` or `version_command`)".to_string(),
                        Err(why) => {
                            all_ok = false;
                            problems.push(format!(
                                "engine {:?} does not run: {why}; to build it: {}",
                                e.name,
                                crate::sweep::spec::engines::def::how_to_build(&e.adapter)
                            ));
                            "broken".to_string()
                        }
                    }
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
                for m in problems {
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

/// How long a check command may take.
const CHECK_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// Runs engine `e`'s check command (`check`, else `version_command`): `Ok(Some(first
/// output line))` when it exits 0 within [`CHECK_TIMEOUT`], `Ok(None)` when it has
/// none, else why not (exit code or signal, and its last stderr line).
pub fn runs(reg: &Registry, e: &super::registry::Engine) -> Result<Option<String>, String> {
    let Some(cmd) = e.def.check.as_ref().or(e.def.version_command.as_ref()) else {
        return Ok(None);
    };
    let args = reg
        .vars_for(e, std::path::Path::new("."))
        .expand_args(cmd)
        .map_err(|err| format!("{err:#}"))?;
    let Some((prog, rest)) = args.split_first() else {
        return Ok(None);
    };
    let dir = std::env::temp_dir().join(format!("memdial-check-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|err| err.to_string())?;
    let (out, err) = (dir.join("stdout"), dir.join("stderr"));
    let file = |p: &std::path::Path| std::fs::File::create(p).map_err(|e| e.to_string());
    let mut cmd = std::process::Command::new(prog);
    cmd.args(rest);
    // Under the child supervisor: a check that hangs ends with what it started.
    let w = crate::sweep::run::child::spawn(&cmd, file(&out)?.into(), file(&err)?.into())
        .map_err(|err| format!("{prog}: {err}"))?
        .wait_sampled(CHECK_TIMEOUT, &mut |_, _| {})
        .map_err(|err| err.to_string())?;
    if w.timed_out {
        let _ = std::fs::remove_dir_all(&dir);
        return Err(format!(
            "{} did not finish within {} s",
            args.join(" "),
            CHECK_TIMEOUT.as_secs()
        ));
    }
    let status = w.status;
    let read = |p: &std::path::Path| std::fs::read_to_string(p).unwrap_or_default();
    let (stdout, stderr) = (read(&out), read(&err));
    let _ = std::fs::remove_dir_all(&dir);
    let first = |t: &str| {
        t.lines()
            .map(str::trim)
            .find(|l| !l.is_empty())
            .map(|l| l.chars().take(100).collect::<String>())
    };
    if status.success() {
        return Ok(Some(
            first(&stdout)
                .or_else(|| first(&stderr))
                .unwrap_or_else(|| "exit 0".into()),
        ));
    }
    let said = if stderr.trim().is_empty() {
        &stdout
    } else {
        &stderr
    };
    Err(format!(
        "{} {}",
        args.join(" "),
        crate::sweep::run::child::failure(&status, said)
    ))
}
