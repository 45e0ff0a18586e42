//! `memdial checksum --model DIR`: write the per-tensor SHA-256 manifest used by `--verify-reads`.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;

/// Arguments of `memdial checksum`.
#[derive(clap::Args)]
pub struct ChecksumArgs {
    /// Checkpoint directory; `tensors.sha256` is written into it.
    #[arg(long)]
    pub model: PathBuf,
}

pub fn run(a: &ChecksumArgs) -> Result<ExitCode> {
    let n = memdial::format::manifest::write_checksum_manifest(&a.model)?;
    println!(
        "wrote {} ({n} tensors)",
        a.model.join("tensors.sha256").display()
    );
    Ok(ExitCode::SUCCESS)
}
