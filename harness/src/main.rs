#![recursion_limit = "256"]
//! `memdial`: the single user-facing binary.
//!
//! Exit codes: 0 success, 1 failure (invalid checkpoint, mismatch, IO error),
//! 2 usage error: clap's own, or a [`UsageError`] anywhere in a command's error
//! chain (mapped in [`exit_code`], the one place exit codes of errors are chosen).

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use memdial::util::error::{usage_error, UsageError};

mod args;
mod cmd_checksum;
mod cmd_compare;
mod cmd_fixture;
mod cmd_inspect;
mod cmd_iobench;
mod cmd_pack;
mod cmd_plan;
mod cmd_report;
mod cmd_run;
mod cmd_simulate;
mod cmd_sweep;
mod cmd_tokenize;
mod convert;
#[cfg(test)]
mod docs_schema;
mod export;
mod fixture_progress;
mod hf_tokenizer;
mod iobench;
mod planning;
mod serve;
mod store_flags;
mod sweep;

/// Run giant MoE models in a memory budget, and measure the trade.
#[derive(Parser)]
#[command(name = "memdial", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Write a deterministic fixture checkpoint in the published Kimi layout.
    Fixture(cmd_fixture::FixtureArgs),
    /// Summarise a checkpoint's architecture and validate its tensors against config.json.
    Inspect(cmd_inspect::InspectArgs),
    /// Print how a memory budget is allocated (pinned set, slots, expert cache, floor).
    Plan(cmd_plan::PlanArgs),
    /// Write the per-tensor SHA-256 manifest (tensors.sha256) used by --verify-reads.
    Checksum(cmd_checksum::ChecksumArgs),
    /// Write a packed layout: lossless (fewer bytes per token, same bits), its raw control, or lossy RVQ experts (`--rvq BITS`).
    Pack(cmd_pack::PackArgs),
    /// Direct vs buffered vs mmap on the model's own reads, cold and warm, fio beside.
    Iobench(cmd_iobench::Args),
    /// Encode text to token ids (or decode ids) with a model directory's tokenizer.
    Tokenize(cmd_tokenize::TokenizeArgs),
    /// Generate tokens from a prompt (prefill, then decode).
    Run(Box<cmd_run::RunArgs>),
    /// Serve the model over HTTP (OpenAI-compatible), decoding requests in one batch.
    Serve(Box<serve::ServeArgs>),
    /// Sweep budget × IO × prefetch from a cold cache; verdict, reports and charts.
    Sweep(cmd_sweep::SweepArgs),
    /// Replay a routing trace against any budget and cache policy (bytes, hit rates, s/token).
    Simulate(cmd_simulate::SimulateArgs),
    /// Work with sweep run directories (merge shards).
    Report(cmd_report::ReportArgs),
    /// Compare two sweeps point by point: B/A with intervals and a significance test.
    Compare(cmd_compare::CompareArgs),
    /// Other engines a sweep can run (`engines check`: find binaries, say what is missing).
    Engines(sweep::engines::check::EnginesArgs),
    /// Convert a checkpoint to another engine's format (`--to gguf` for llama.cpp).
    Convert(convert::ConvertArgs),
}

fn main() -> ExitCode {
    restore_sigpipe();
    if let Some(a) = sweep::run::child::shim_args() {
        sweep::run::child_shim::main(&a);
    }
    let cli = Cli::parse();
    let res = match &cli.command {
        Command::Fixture(a) => cmd_fixture::run(a),
        Command::Inspect(a) => cmd_inspect::run(a),
        Command::Plan(a) => cmd_plan::run(a),
        Command::Checksum(a) => cmd_checksum::run(a),
        Command::Pack(a) => cmd_pack::run(a),
        Command::Iobench(a) => cmd_iobench::run(a),
        Command::Tokenize(a) => cmd_tokenize::run(a).map(|_| ExitCode::SUCCESS),
        Command::Run(a) => cmd_run::run(a),
        Command::Serve(a) => serve::run(a),
        Command::Sweep(a) => cmd_sweep::run(a),
        Command::Simulate(a) => cmd_simulate::run(a),
        Command::Report(a) => cmd_report::run(a),
        Command::Compare(a) => cmd_compare::run(a),
        Command::Engines(a) => sweep::engines::check::run(a),
        Command::Convert(a) => convert::run(a),
    };
    match res {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            if let Some(h) = usage_error(&e).and_then(hint) {
                eprintln!("hint: {h}");
            }
            ExitCode::from(exit_code(&e))
        }
    }
}

/// Restores SIGPIPE's default action, which Rust's runtime sets to "ignore": a write
/// to a closed pipe (`memdial plan | head`, `memdial tokenize | true`) then ends the
/// process quietly, terminated by SIGPIPE as coreutils are, instead of a panic in
/// `println!` (exit 101). The binary writes to no pipe of its own (children get a
/// null stdin), so only a closed stdout or stderr raises it; `run` and `sweep` print
/// after their files are written, `iobench` saves each row before the next.
fn restore_sigpipe() {
    // SAFETY: called first in main, before any thread exists; SIG_DFL is a valid action.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

/// The exit code of a failed command: 2 for a [`UsageError`] in the chain, else 1.
/// New error classes with their own code (e.g. integrity failures) are added here.
fn exit_code(e: &anyhow::Error) -> u8 {
    match usage_error(e) {
        Some(_) => 2,
        None => 1,
    }
}

/// The flag to change for a usage error the library reports in its own words.
fn hint(u: &UsageError) -> Option<&'static str> {
    match u {
        UsageError::DirectIoRefused { .. } => Some("use --io buffered (or --io mmap)"),
        UsageError::OracleNeedsTrace => {
            Some("pass --trace FILE, recorded by an earlier run with --record-trace FILE")
        }
        _ => None,
    }
}
