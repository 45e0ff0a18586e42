//! `memdial run`: load a checkpoint, prefill a prompt, decode, print ids / text / JSON.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use memdial::generate::{generate, GenerateParams};
use memdial::model::Model;
use memdial::sampler::SamplerConfig;

/// Output format of `memdial run`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum OutputFormat {
    /// Generated text (falls back to ids when no tokenizer is available).
    Text,
    /// Generated token ids, comma-separated.
    Ids,
    /// Prompt ids, output ids, text and timings as one JSON object.
    Json,
}

/// Arguments of `memdial run`.
#[derive(clap::Args, Debug)]
#[command(group(clap::ArgGroup::new("input").required(true).args(["prompt", "prompt_file", "prompt_ids"])))]
pub struct RunArgs {
    /// Checkpoint directory (config.json + safetensors shards).
    #[arg(long)]
    pub model: PathBuf,
    /// Prompt text (needs the tokenizer).
    #[arg(long)]
    pub prompt: Option<String>,
    /// File holding the prompt text (needs the tokenizer).
    #[arg(long)]
    pub prompt_file: Option<PathBuf>,
    /// Prompt as token ids, comma-separated (e.g. 1,2,3).
    #[arg(long, value_delimiter = ',')]
    pub prompt_ids: Option<Vec<u32>>,
    /// Wrap the text prompt in the chat template (user turn + assistant header).
    #[arg(long)]
    pub chat: bool,
    /// System message for --chat.
    #[arg(long)]
    pub system: Option<String>,
    /// Maximum number of generated tokens.
    #[arg(long, default_value_t = 32)]
    pub max_tokens: usize,
    /// Kernel threads.
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// Sampling temperature; 0 = greedy.
    #[arg(long, default_value_t = 0.0)]
    pub temperature: f32,
    /// Nucleus (top-p) mass for sampling.
    #[arg(long, default_value_t = 1.0)]
    pub top_p: f32,
    /// RNG seed for sampling.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Output format.
    #[arg(long, value_enum, default_value_t = OutputFormat::Text)]
    pub output: OutputFormat,
    /// Write the logits of every position (prompt, then generated; row i predicts
    /// token i+1) as float32 [positions, vocab]: `.npy`, or JSON for any other extension.
    #[arg(long)]
    pub logits_out: Option<PathBuf>,
    /// Prompt tokens per prefill forward call (0 = whole prompt at once).
    #[arg(long, default_value_t = 256)]
    pub prefill_chunk: usize,
    /// Do not stop on the config's eos token ids.
    #[arg(long)]
    pub ignore_eos: bool,
}

/// Tokenizer hook: text → ids. Swap for `memdial::tokenizer::Tokenizer` when it lands:
/// `let tok = Tokenizer::from_dir(dir)?; if chat { tok.chat_prompt(text, system) } else { tok.encode(text, true) }`.
fn encode_prompt(_dir: &Path, _text: &str, _chat: bool, _system: Option<&str>) -> Result<Vec<u32>> {
    bail!("tokenizer not available in this build: pass the prompt as --prompt-ids")
}

/// Tokenizer hook: ids → text (`Tokenizer::from_dir(dir)?.decode(ids)`); `None` when unavailable.
fn decode_ids(_dir: &Path, _ids: &[u32]) -> Option<String> {
    None
}

/// Writes `data` `[rows, cols]` as a little-endian float32 `.npy` (format 1.0).
pub fn write_npy(path: &Path, data: &[f32], rows: usize, cols: usize) -> Result<()> {
    let mut header =
        format!("{{'descr': '<f4', 'fortran_order': False, 'shape': ({rows}, {cols}), }}");
    let unpadded = 10 + header.len() + 1;
    header.push_str(&" ".repeat((64 - unpadded % 64) % 64));
    header.push('\n');
    let mut buf = Vec::with_capacity(10 + header.len() + data.len() * 4);
    buf.extend_from_slice(b"\x93NUMPY\x01\x00");
    buf.extend_from_slice(&(header.len() as u16).to_le_bytes());
    buf.extend_from_slice(header.as_bytes());
    for v in data {
        buf.extend_from_slice(&v.to_le_bytes());
    }
    std::fs::write(path, buf).with_context(|| format!("cannot write {}", path.display()))
}

fn write_logits(path: &Path, data: &[f32], vocab: usize) -> Result<()> {
    let rows = data.len() / vocab;
    if path.extension().and_then(|e| e.to_str()) == Some("npy") {
        write_npy(path, data, rows, vocab)
    } else {
        let v: Vec<&[f32]> = data.chunks(vocab).collect();
        let text =
            serde_json::to_string(&serde_json::json!({"shape": [rows, vocab], "logits": v}))?;
        std::fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))
    }
}

/// Runs `memdial run`.
pub fn run(a: &RunArgs) -> Result<ExitCode> {
    let t_load = Instant::now();
    let model = Model::load(&a.model, a.threads)?;
    let load_s = t_load.elapsed().as_secs_f64();
    let cfg = model.config();

    let prompt: Vec<u32> = if let Some(ids) = &a.prompt_ids {
        ids.clone()
    } else {
        let text = match (&a.prompt, &a.prompt_file) {
            (Some(t), _) => t.clone(),
            (None, Some(f)) => std::fs::read_to_string(f)
                .with_context(|| format!("cannot read prompt file {}", f.display()))?,
            (None, None) => bail!("no prompt given"),
        };
        encode_prompt(&a.model, &text, a.chat, a.system.as_deref())?
    };
    if prompt.is_empty() {
        bail!("the prompt is empty");
    }
    if let Some(bad) = prompt.iter().find(|&&t| t as usize >= cfg.vocab_size) {
        bail!(
            "prompt token id {bad} is out of range (vocab_size {})",
            cfg.vocab_size
        );
    }
    if a.max_tokens == 0 {
        bail!("--max-tokens must be ≥ 1");
    }
    if !(a.top_p > 0.0 && a.top_p <= 1.0) {
        bail!("--top-p must be in (0, 1]");
    }
    let mut state = model.new_state(prompt.len() + a.max_tokens);
    let params = GenerateParams {
        max_tokens: a.max_tokens,
        sampler: SamplerConfig {
            temperature: a.temperature,
            top_p: a.top_p,
            seed: a.seed,
        },
        stop_ids: if a.ignore_eos {
            vec![]
        } else {
            cfg.eos_token_ids.clone()
        },
        keep_logits: a.logits_out.is_some(),
        prefill_chunk: a.prefill_chunk,
    };
    let out = generate(&model, &mut state, &prompt, &params, &mut |_| {})?;
    if let (Some(path), Some(l)) = (&a.logits_out, &out.logits) {
        write_logits(path, l, cfg.vocab_size)?;
    }
    let text = decode_ids(&a.model, &out.output_ids);
    let ids_str = out
        .output_ids
        .iter()
        .map(|t| t.to_string())
        .collect::<Vec<_>>()
        .join(",");
    let mut so = std::io::stdout().lock();
    match a.output {
        OutputFormat::Ids => writeln!(so, "{ids_str}")?,
        OutputFormat::Text => match &text {
            Some(t) => writeln!(so, "{t}")?,
            None => {
                eprintln!("note: tokenizer not available, printing token ids");
                writeln!(so, "{ids_str}")?
            }
        },
        OutputFormat::Json => {
            let v = serde_json::json!({
                "prompt_ids": out.prompt_ids,
                "output_ids": out.output_ids,
                "text": text,
                "stopped_on_eos": out.stopped,
                "timings": {
                    "load_s": load_s,
                    "prefill_s": out.prefill_s,
                    "ttft_s": out.ttft_s,
                    "decode_s_per_token_median": out.decode_median_s(),
                    "decode_steps": out.decode_s.len(),
                    "threads": a.threads,
                },
            });
            writeln!(so, "{}", serde_json::to_string_pretty(&v)?)?
        }
    }
    Ok(ExitCode::SUCCESS)
}
