//! `memdial convert --to gguf`: a checkpoint as a GGUF file llama.cpp loads
//! (architectures `kimi-k3` and `kimi-linear`), written by our own GGUF writer — no
//! torch, no Python tokenizer file.
//!
//! - [`gguf`]: the container (GGUF v3);
//! - [`kimi`]: tensor names, shapes, types and transforms;
//! - [`meta`]: the architecture keys; [`vocab`]: the tokenizer keys;
//! - [`reader`]: each tensor's bytes; [`mxfp4`]: MXFP4 experts repacked to ggml's
//!   block layout.
//!
//! The file is written to `OUT.partial` and renamed to `OUT` when complete, so a
//! failed conversion leaves no file behind.

pub mod gguf;
pub mod kimi;
pub mod meta;
pub mod mxfp4;
pub mod reader;
pub mod vocab;

use std::io::BufWriter;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};

use crate::args::usage;
pub use kimi::Dtype;

/// Container formats `memdial convert` writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// GGUF v3 for llama.cpp.
    Gguf,
}

/// Arguments of `memdial convert`.
#[derive(clap::Args, Debug, Clone)]
pub struct ConvertArgs {
    /// Output format.
    #[arg(long, value_enum)]
    pub to: Format,
    /// `native`: BF16 stays BF16, MXFP4 experts stay MXFP4 (ggml blocks); `f32`: every
    /// tensor F32 (exact arithmetic in llama.cpp; a BF16 tensor takes 2× its bytes, an
    /// MXFP4 expert 128 / 17 ≈ 7.5×: 32 weights are 16 nibble bytes + 1 scale byte).
    #[arg(long, value_enum, default_value = "native")]
    pub dtype: Dtype,
    /// Checkpoint directory (config.json, safetensors, tiktoken.model).
    #[arg(long)]
    pub model: PathBuf,
    /// Output file (e.g. `model.gguf`).
    #[arg(long)]
    pub out: PathBuf,
}

/// Runs `memdial convert`: prints one line with the tensor count and bytes written.
pub fn run(a: &ConvertArgs) -> Result<ExitCode> {
    if !a.model.join("config.json").is_file() {
        return Err(usage(format!(
            "{}: not a checkpoint directory (no config.json)",
            a.model.display()
        )));
    }
    if a.out.is_dir() {
        return Err(usage(format!("{}: is a directory", a.out.display())));
    }
    let n = write(a)?;
    let size = std::fs::metadata(&a.out)?.len();
    println!(
        "wrote {} ({} tensors, {} bytes, dtype {:?})",
        a.out.display(),
        n,
        size,
        a.dtype
    );
    Ok(ExitCode::SUCCESS)
}

/// Writes the GGUF of `a.model` to `a.out` (through `OUT.partial`, removed on
/// failure); returns the number of tensors.
pub fn write(a: &ConvertArgs) -> Result<usize> {
    let arch = kimi::arch_of(&a.model)?;
    let c = kimi::text_config(&a.model)?;
    let ck = memdial::format::checkpoint::Checkpoint::open(&a.model)?;
    let planned = kimi::plan(&ck, &c, arch, a.dtype)?;
    let has_mxfp4 = planned.iter().any(|p| p.info.ty == gguf::GgmlType::Mxfp4);
    let name = a
        .model
        .canonicalize()
        .ok()
        .and_then(|p| p.file_name().map(|s| s.to_string_lossy().into_owned()))
        .unwrap_or_else(|| "model".into());
    let mut kvs = meta::model_kvs(&c, arch, &name, a.dtype, has_mxfp4)?;
    let vocab_size = kimi::num(&c, "vocab_size")? as usize;
    let eos = if arch == "kimi-k3" {
        c.get("eos_token_id")
            .and_then(|v| v.as_u64())
            .map(|x| x as u32)
    } else {
        None
    };
    let eos = match eos {
        Some(e) => e,
        None => memdial::format::tokenizer::Tokenizer::from_dir(&a.model)?.eos_id(),
    };
    kvs.extend(vocab::tokenizer_kvs(&a.model, vocab_size, eos)?);
    let infos: Vec<gguf::TensorInfo> = planned.iter().map(|p| p.info.clone()).collect();
    let reader = reader::Reader::new(&ck)?;
    let mut part = a.out.clone().into_os_string();
    part.push(".partial");
    let part = PathBuf::from(part);
    let res = (|| -> Result<()> {
        let f = std::fs::File::create(&part)
            .with_context(|| format!("cannot create {}", part.display()))?;
        let mut w = BufWriter::with_capacity(8 << 20, f);
        gguf::write_gguf(&mut w, &kvs, &infos, |i| reader.produce(&planned[i]))?;
        let f = w.into_inner().map_err(|e| e.into_error())?;
        f.sync_all()?;
        std::fs::rename(&part, &a.out)
            .with_context(|| format!("cannot rename {} to {}", part.display(), a.out.display()))
    })();
    if let Err(e) = res {
        let _ = std::fs::remove_file(&part);
        return Err(e);
    }
    Ok(planned.len())
}
