//! The arguments of `memdial run`.

use std::path::PathBuf;

use crate::store_flags::StoreFlags;
use crate::sweep::start::StartMode;

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
#[derive(clap::Args, Debug, Clone)]
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
    /// Wrap the text prompt in the checkpoint's own chat_template (tokenizer_config.json or
    /// chat_template.jinja, rendered as transformers does), or the built-in Kimi format when
    /// it has none: user turn + generation prompt.
    #[arg(long)]
    pub chat: bool,
    /// System message for --chat.
    #[arg(long)]
    pub system: Option<String>,
    /// Maximum number of generated tokens.
    #[arg(long, default_value_t = 32)]
    pub max_tokens: usize,
    /// Kernel threads (1..=1024).
    #[arg(long, default_value_t = 1, value_parser = crate::args::thread_count)]
    pub threads: usize,
    /// Time each operation of the forward pass (summed per layer kind) over the
    /// decode steps and print the table to stderr. Off by default; the output is
    /// the same with it on.
    #[arg(long)]
    pub profile_ops: bool,
    /// Sampling temperature; 0 = greedy (finite, ≥ 0).
    #[arg(long, default_value_t = 0.0, value_parser = crate::args::finite_non_negative)]
    pub temperature: f32,
    /// Nucleus (top-p) mass for sampling, in (0, 1].
    #[arg(long, default_value_t = 1.0, value_parser = crate::args::finite_non_negative)]
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
    /// Prompt tokens per prefill forward call (0 = whole prompt at once). Each MoE
    /// layer fetches every routed expert the chunk needs once per chunk, so larger
    /// chunks read fewer bytes; the model's scratch arena grows with the chunk
    /// (`memdial plan` prints its size). Under
    /// `--budget` the plan reserves min(max-context, 256) tokens and larger chunks
    /// are capped there.
    #[arg(long, default_value_t = 256)]
    pub prefill_chunk: usize,
    /// Do not stop on the config's eos token ids.
    #[arg(long)]
    pub ignore_eos: bool,
    /// The streaming store: `--budget`, `--io`, `--prefetch`, `--cache`, `--io-threads`.
    #[command(flatten)]
    pub store: StoreFlags,
    /// `--budget` in bytes, resolved by `memdial run` before the model is opened.
    #[arg(skip)]
    pub budget: Option<u64>,
    /// How the caches begin: `cold` (empty expert cache and trunk slots) or `warm`
    /// (both filled to capacity from disk after load, before the first forward: the
    /// steady state a process at this budget lives in; needs --budget). The fill is
    /// timed and counted apart (`warm_fill_s`, `warm_fill_bytes` in --metrics-json),
    /// not in `load_s`, the bytes read or the device reads.
    #[arg(long, value_enum, default_value_t = StartMode::Cold)]
    pub start: StartMode,
    /// Positions the MLA latent cache is sized for (default: depth + prompt +
    /// max-tokens; with `--depth`, a smaller value is refused).
    #[arg(long)]
    pub max_context: Option<usize>,
    /// Decode at depth N (llama-bench's `-d`): N deterministic context ids (a fixed
    /// SplitMix64 stream modulo the vocabulary, `memdial::engine::depth`) are
    /// prefilled before the prompt, timed apart (`depth_prefill_s`); the prompt's
    /// prefill, `ttft_s` and the decode figures are those after them. The ids
    /// generated are those of `--prompt-ids` of the N ids followed by the prompt.
    #[arg(long, default_value_t = 0)]
    pub depth: usize,
    /// Write run metrics (timings, bytes read, hit rates, RSS, output hashes) as JSON.
    #[arg(long)]
    pub metrics_json: Option<PathBuf>,
    /// Record the run's routing as a trace (JSON lines, format 2 of docs/simulate.md:
    /// a header, one line per forward, the experts chosen per token and MoE layer, and
    /// look-ahead guesses); `memdial simulate` replays it.
    #[arg(long)]
    pub record_trace: Option<PathBuf>,
    /// Expert trace of an earlier run (--record-trace) for --prefetch oracle.
    #[arg(long)]
    pub trace: Option<PathBuf>,
    /// Check every streamed read against tensors.sha256 (see `memdial checksum`).
    #[arg(long)]
    pub verify_reads: bool,
    /// Debug: check the hidden state for NaN/Inf after every layer and name the first
    /// layer that produced one (the logits are always checked).
    #[arg(long)]
    pub check_hidden: bool,
    /// Speculative decoding, exact: `off`, `ngram:K` (prompt lookup over prompt +
    /// generated ids) or `replay:FILE:K` (the ids of an earlier run as `--output ids`
    /// prints them). Up to K drafted ids are verified in one forward; the output ids
    /// are those of `off` (docs/speculation.md).
    #[arg(long, default_value = "off", value_parser = crate::args::speculate)]
    pub speculate: memdial::engine::speculate::Speculate,
    /// Test-only: add +1000 to this token's logit at every step (forces a different output).
    #[arg(long, hide = true)]
    pub perturb_logit: Option<u32>,
}
