//! `memdial run`: load a checkpoint, prefill a prompt, decode, print ids / text / JSON.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use memdial::engine::generate::{generate, GenerateParams};
use memdial::engine::loader::{Opened, StoreOptions};
use memdial::engine::metrics::{MetricsFile, RunMetrics, Source, SCHEMA_VERSION};
use memdial::engine::sampler::SamplerConfig;
use memdial::format::config::{load_config, ModelConfig};
use memdial::format::tokenizer::Tokenizer;
use memdial::io::IoMode;
use memdial::model::Model;
use memdial::store::eviction::CachePolicy;
use memdial::store::plan::Prefetch;
use memdial::store::streaming::StreamOptions;
use memdial::util::budget::parse_size;
use memdial::util::digest::hex;
use memdial::util::error::UsageError;
use memdial::util::sysmem::PeakTracker;
use sha2::{Digest, Sha256};

use crate::args::{usage, CacheArg, IoArg, PrefetchArg};
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
    /// Memory budget (e.g. 512MiB, 2GiB, 8GB): stream weights through the budgeted
    /// store. Without it every weight is read into RAM at load (full residency).
    #[arg(long, value_parser = parse_size)]
    pub budget: Option<u64>,
    /// IO mode of the streaming store: direct (O_DIRECT), buffered (pread), mmap
    /// (needs --budget: without it nothing streams).
    #[arg(long, value_enum, default_value_t = IoArg(IoMode::Direct), requires = "budget")]
    pub io: IoArg,
    /// Prefetch policy (oracle needs --trace; needs --budget).
    #[arg(long, value_enum, default_value_t = PrefetchArg(Prefetch::None), requires = "budget")]
    pub prefetch: PrefetchArg,
    /// Expert-cache replacement policy (needs --budget).
    #[arg(long, value_enum, default_value_t = CacheArg(CachePolicy::Lru), requires = "budget")]
    pub cache: CacheArg,
    /// Reads the streaming store keeps in flight (1..=1024): its IO threads, each doing
    /// one record read at a time (O_DIRECT, pread or an mmap fault-in; the kernel splits
    /// a record into `max_sectors_kb` requests). Default 4: the prefetch policies rarely
    /// queue more than the next trunk plus a layer's experts; `memdial iobench` shows
    /// the knee for a disk.
    #[arg(
        long,
        visible_alias = "io-depth",
        default_value_t = 4,
        value_parser = crate::args::thread_count
    )]
    pub io_threads: usize,
    /// How the caches begin: `cold` (empty expert cache and trunk slots) or `warm`
    /// (both filled to capacity from disk after load, before the first forward: the
    /// steady state a process at this budget lives in; needs --budget). The fill is
    /// timed and counted apart (`warm_fill_s`, `warm_fill_bytes` in --metrics-json),
    /// not in `load_s`, the bytes read or the device reads.
    #[arg(long, value_enum, default_value_t = StartMode::Cold)]
    pub start: StartMode,
    /// Positions the MLA latent cache is sized for (default: prompt + max-tokens).
    #[arg(long)]
    pub max_context: Option<usize>,
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

/// Text → ids with the model directory's tokenizer (chat template with `--chat`).
fn encode_prompt(dir: &Path, text: &str, chat: bool, system: Option<&str>) -> Result<Vec<u32>> {
    let tok = Tokenizer::from_dir(dir)
        .context("text prompts need the tokenizer (or pass --prompt-ids)")?;
    if chat {
        memdial::format::chat::chat_prompt_ids(dir, &tok, text, system)
    } else {
        Ok(tok.encode(text, true))
    }
}

/// Ids → text with the model directory's tokenizer; `None` when it has none. Ids of a
/// padded vocabulary (`vocab_size` > tokenizer ids) decode to "" (`decode_padded`).
fn decode_ids(dir: &Path, ids: &[u32], vocab_size: usize) -> Option<String> {
    let tok = Tokenizer::from_dir(dir).ok()?;
    tok.decode_padded(ids, vocab_size).ok()
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
    crate::export::write_atomic(path, &buf)
}

fn write_logits(path: &Path, data: &[f32], vocab: usize) -> Result<()> {
    let rows = data.len() / vocab;
    if path.extension().and_then(|e| e.to_str()) == Some("npy") {
        write_npy(path, data, rows, vocab)
    } else {
        let v: Vec<&[f32]> = data.chunks(vocab).collect();
        let text =
            serde_json::to_string(&serde_json::json!({"shape": [rows, vocab], "logits": v}))?;
        crate::export::write_atomic(path, text.as_bytes())
    }
}

/// Runs `memdial run`: checks the arguments, loads the model and the prompt,
/// generates, then writes the outputs (metrics, logits, stdout).
pub fn run(a: &RunArgs) -> Result<ExitCode> {
    let t_load = Instant::now();
    let mut mem = PeakTracker::default();
    check_args(a)?;
    let cfg = load_config(&a.model)?;
    let prompt = load_prompt(a, cfg.vocab_size)?;
    let max_context = context_for(a, &cfg, prompt.len())?;
    let chunks = prefill_chunks(a, prompt.len(), max_context);
    // The state and arena are allocated at once for max_context positions: refuse what
    // this machine cannot hold before loading (an allocation failure aborts).
    memdial::engine::loader::check_run_memory(
        &cfg,
        chunks.1,
        a.threads,
        max_context,
        memdial::util::sysmem::mem_available(),
    )
    .map_err(|e| usage(format!("--max-context {max_context}: {e}")))?;
    let opened = open_model(a, max_context)?;
    let load_s = t_load.elapsed().as_secs_f64();
    mem.sample();
    let warm = warm_start(a, &opened)?;
    if let Some(s) = &opened.streaming {
        let chunk = if chunks.0 == 0 {
            prompt.len()
        } else {
            chunks.0
        };
        s.note_run(prompt.len(), chunk, warm.is_some());
    }
    mem.sample();
    let mut g = generate_ids(a, &cfg, &opened, &prompt, max_context, chunks, &mut mem)?;
    g.warm = warm;
    write_outputs(a, &cfg, &opened, &prompt, max_context, load_s, &g, &mem)
}

/// The usage errors clap cannot see (ranges, combinations).
fn check_args(a: &RunArgs) -> Result<()> {
    if a.max_tokens == 0 {
        return Err(usage("--max-tokens must be ≥ 1"));
    }
    if !(a.top_p > 0.0 && a.top_p <= 1.0) {
        return Err(usage("--top-p must be in (0, 1]"));
    }
    if a.budget.is_none() && (a.record_trace.is_some() || a.trace.is_some() || a.verify_reads) {
        // (--io, --prefetch and --cache given without --budget are refused by clap.)
        return Err(usage(
            "--io, --prefetch, --cache, --trace, --record-trace and --verify-reads need --budget (the streaming store)",
        ));
    }
    if a.threads == 0 {
        return Err(usage("--threads must be ≥ 1"));
    }
    if a.start == StartMode::Warm && a.budget.is_none() {
        return Err(usage(
            "--start warm needs --budget (without it every weight is resident from the start)",
        ));
    }
    if a.prefetch.0 == Prefetch::Oracle && a.trace.is_none() {
        return Err(UsageError::OracleNeedsTrace.into());
    }
    // Output paths are checked before anything is loaded or generated.
    for (flag, p) in [
        ("--metrics-json", &a.metrics_json),
        ("--logits-out", &a.logits_out),
        ("--record-trace", &a.record_trace),
    ] {
        if let Some(p) = p {
            crate::export::check_output_path(flag, p)?;
        }
    }
    Ok(())
}

/// The prompt's ids: given as ids, or text (literal or from a file) encoded with the
/// model's tokenizer (in its chat template with `--chat`). Errors: empty, or an id
/// outside the vocabulary.
fn load_prompt(a: &RunArgs, vocab_size: usize) -> Result<Vec<u32>> {
    let prompt: Vec<u32> = if let Some(ids) = &a.prompt_ids {
        ids.clone()
    } else {
        let text = match (&a.prompt, &a.prompt_file) {
            (Some(t), _) => t.clone(),
            (None, Some(f)) => crate::args::read_text_file("--prompt-file", f)?,
            (None, None) => bail!("no prompt given"),
        };
        encode_prompt(&a.model, &text, a.chat, a.system.as_deref())?
    };
    if prompt.is_empty() {
        return Err(usage("the prompt is empty"));
    }
    if let Some(bad) = prompt.iter().find(|&&t| t as usize >= vocab_size) {
        return Err(usage(format!(
            "prompt token id {bad} is out of range (vocab_size {vocab_size})"
        )));
    }
    Ok(prompt)
}

/// Positions the MLA cache is sized for: `--max-context`, at least prompt +
/// max-tokens. Errors: the count overflows, or its cache is not a byte count.
fn context_for(a: &RunArgs, cfg: &ModelConfig, prompt_len: usize) -> Result<usize> {
    let needed = prompt_len.checked_add(a.max_tokens).ok_or_else(|| {
        usage(format!(
            "--max-tokens {} plus the prompt's {prompt_len} tokens overflows the position counter",
            a.max_tokens
        ))
    })?;
    let max_context = a.max_context.unwrap_or(needed).max(needed);
    // The MLA latent cache of every MLA layer for max_context positions must be a
    // representable byte count (the plan and the state size it).
    let (_, mla_layers) = cfg.layer_counts();
    (max_context as u128)
        .checked_mul((mla_layers * cfg.mla_cache_bytes_per_position()) as u128)
        .filter(|&b| b <= u64::MAX as u128)
        .ok_or_else(|| {
            usage(format!(
                "a context of {max_context} positions needs more than 2^64 bytes of MLA cache"
            ))
        })?;
    Ok(max_context)
}

/// Validates the checkpoint and opens its store: streaming under `--budget`, else
/// resident (`--check-hidden` set on the model).
fn open_model(a: &RunArgs, max_context: usize) -> Result<Opened> {
    let store = match a.budget {
        Some(b) => StoreOptions::Streaming(StreamOptions {
            budget: b,
            io: a.io.0,
            prefetch: a.prefetch.0,
            cache: a.cache.0,
            max_context,
            io_threads: a.io_threads.max(1),
            record_trace: a.record_trace.clone(),
            trace: a.trace.clone(),
            verify_reads: a.verify_reads,
        }),
        None => StoreOptions::Resident,
    };
    let o = Model::open_speculative(&a.model, store, a.threads, a.speculate.k())?;
    Ok(Opened {
        model: o.model.with_hidden_checks(a.check_hidden),
        ..o
    })
}

/// What the warm start read (`--start warm`).
#[derive(Debug, Clone, Copy, Default)]
struct Warm {
    /// The store's figures of the fill.
    fill: memdial::store::streaming::WarmFill,
    /// Device bytes the process read during the fill (when the OS reports them).
    device_bytes: Option<u64>,
}

/// `--start warm`: fills the streaming store's expert cache and trunk slots
/// ([`memdial::store::streaming::StreamingStore::warm_fill`]); `None` for a cold start.
fn warm_start(a: &RunArgs, opened: &Opened) -> Result<Option<Warm>> {
    let (StartMode::Warm, Some(s)) = (a.start, &opened.streaming) else {
        return Ok(None);
    };
    let before = memdial::io::accounting::device_read_bytes();
    let fill = s.warm_fill()?;
    let after = memdial::io::accounting::device_read_bytes();
    Ok(Some(Warm {
        fill,
        device_bytes: after.zip(before).map(|(a, b)| a.saturating_sub(b)),
    }))
}

/// What generation produced, with the counters taken when the first token was chosen.
struct Generated {
    out: memdial::engine::generate::GenerateOutput,
    /// Store counters when the first token was chosen (decode figures start there).
    at_first: Option<memdial::store::metrics::StoreMetrics>,
    /// Device read bytes at the first token (when the OS reports them).
    device_at_first: Option<u64>,
    /// Wall time of generation (prefill + decode), seconds.
    gen_wall: f64,
    /// The warm start's fill (`None`: cold start).
    warm: Option<Warm>,
    /// Speculation's counters (`None` with `--speculate off`).
    spec: Option<memdial::engine::speculate::SpecStats>,
}

/// Prefill chunk and arena chunk: under a budget the plan reserves activations for at
/// most this many prefill tokens per forward; larger chunks are cut to it (same
/// output, bounded memory), and the model's scratch arena is sized exactly as the
/// plan counts it.
fn prefill_chunks(a: &RunArgs, prompt_len: usize, max_context: usize) -> (usize, usize) {
    let want = if a.prefill_chunk == 0 {
        prompt_len
    } else {
        a.prefill_chunk
    };
    match a.budget {
        Some(_) => {
            let cap = memdial::engine::arena::planned_prefill_chunk(max_context);
            // Say so only when it changes how this prompt is cut.
            if want.min(prompt_len) > cap {
                eprintln!(
                    "note: --prefill-chunk {want} capped at {cap} (the plan's activation reserve)"
                );
            }
            (want.min(cap), cap)
        }
        None => (a.prefill_chunk, want.min(prompt_len).max(1)),
    }
}

/// Prefills the prompt and decodes, sampling memory at every token. `chunks`:
/// (prefill chunk, arena chunk) of [`prefill_chunks`].
fn generate_ids(
    a: &RunArgs,
    cfg: &ModelConfig,
    opened: &Opened,
    prompt: &[u32],
    max_context: usize,
    (prefill_chunk, arena_chunk): (usize, usize),
    mem: &mut PeakTracker,
) -> Result<Generated> {
    let streaming = &opened.streaming;
    let model = &opened.model;
    let mut state = match a.speculate.k() {
        0 => model.new_state_with_chunk(max_context, arena_chunk),
        k => model.new_state_for_speculation(max_context, arena_chunk, k),
    };
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
        prefill_chunk,
        perturb_logit: a.perturb_logit,
    };
    let mut at_first: Option<memdial::store::metrics::StoreMetrics> = None;
    let mut device_at_first: Option<u64> = None;
    let t_gen = Instant::now();
    memdial::util::profile::enable(a.profile_ops);
    let drafter = a.speculate.drafter(cfg.vocab_size)?;
    let mut on_token = |_| {
        mem.sample();
        if at_first.is_none() {
            at_first = Some(streaming.as_ref().map(|s| s.metrics()).unwrap_or_default());
            // Profile decode only: drop what prefill added.
            memdial::util::profile::reset();
            device_at_first = memdial::io::accounting::device_read_bytes();
        }
    };
    let (out, spec) = match &drafter {
        None => (
            generate(model, &mut state, prompt, &params, &mut on_token)?,
            None,
        ),
        Some(d) => {
            let (o, st) = memdial::engine::speculate::generate_speculative(
                model,
                &mut state,
                prompt,
                &params,
                d,
                &mut on_token,
            )?;
            (o, Some(st))
        }
    };
    if a.profile_ops {
        let steps = out.decode_s.len();
        eprintln!(
            "per-op profile of {steps} decode steps ({:.4} s/token measured by generate):\n{}",
            out.decode_median_s(),
            memdial::util::profile::report(steps, "token")
        );
    }
    let gen_wall = t_gen.elapsed().as_secs_f64();
    mem.sample();
    if let Some(s) = streaming {
        s.finish()?;
    }
    Ok(Generated {
        out,
        at_first,
        device_at_first,
        gen_wall,
        warm: None,
        spec,
    })
}

/// Writes the logits (`--logits-out`), the metrics (`--metrics-json`) and the
/// output in `--output`'s format.
#[allow(clippy::too_many_arguments)]
fn write_outputs(
    a: &RunArgs,
    cfg: &ModelConfig,
    opened: &Opened,
    prompt: &[u32],
    max_context: usize,
    load_s: f64,
    g: &Generated,
    mem: &PeakTracker,
) -> Result<ExitCode> {
    let out = &g.out;
    let text = decode_ids(&a.model, &out.output_ids, cfg.vocab_size);
    // The files first (a reader that closes stdout early must not cost them), but a
    // file that cannot be written is reported only after the generated output is
    // printed: the run then fails (exit 1) without losing what it generated.
    let logits = match (&a.logits_out, &out.logits) {
        (Some(path), Some(l)) => write_logits(path, l, cfg.vocab_size),
        _ => Ok(()),
    };
    let metrics = match &a.metrics_json {
        Some(path) => {
            let run = RunFacts {
                a,
                cfg,
                opened,
                prompt_len: prompt.len(),
                max_context,
                load_s,
                g,
                mem,
                text: text.as_deref(),
            };
            write_metrics_json(path, a, &run.metrics())
        }
        None => Ok(()),
    };
    print_output(a, out, text.as_deref(), load_s)?;
    logits?;
    metrics?;
    Ok(ExitCode::SUCCESS)
}

/// Everything a run's metrics are computed from.
struct RunFacts<'a> {
    a: &'a RunArgs,
    cfg: &'a ModelConfig,
    opened: &'a Opened,
    prompt_len: usize,
    max_context: usize,
    load_s: f64,
    g: &'a Generated,
    mem: &'a PeakTracker,
    text: Option<&'a str>,
}

impl RunFacts<'_> {
    /// The run's [`RunMetrics`] (every figure of `--metrics-json`), with each
    /// figure's source: the OS for memory and device reads, the engine otherwise.
    fn metrics(&self) -> RunMetrics {
        let (a, out, mem) = (self.a, &self.g.out, self.mem);
        let streaming = &self.opened.streaming;
        let ck = &self.opened.checkpoint.ck;
        let m = streaming.as_ref().map(|s| s.metrics()).unwrap_or_default();
        let decode_total: f64 = out.decode_s.iter().sum();
        let first_m = self.g.at_first.clone().unwrap_or_default();
        let decode_bytes = m.bytes_read.saturating_sub(first_m.bytes_read);
        let steps = out.decode_s.len();
        // The warm start's device reads are reported apart (`warm_fill_bytes`).
        let device_end = memdial::io::accounting::device_read_bytes()
            .map(|d| d.saturating_sub(self.g.warm.and_then(|w| w.device_bytes).unwrap_or(0)));
        let read_busy_decode = m.read_busy_s - first_m.read_busy_s;
        let model_bytes = memdial::format::inspect::model_bytes(self.cfg, ck);
        let page_cache = self.page_cache_bytes();
        let plan = streaming.as_ref().map(|s| s.plan().clone());
        let streamed = streaming.is_some();
        let gen_wall = self.g.gen_wall;
        let mut rm = RunMetrics {
            model: Some(a.model.display().to_string()),
            model_bytes: Some(model_bytes),
            floor_bytes: plan.as_ref().map(|p| p.floor_bytes),
            io_threads: Some(a.io_threads as u64),
            max_context: Some(self.max_context as u64),
            prompt_tokens: Some(self.prompt_len as u64),
            generated_tokens: Some(out.output_ids.len() as u64),
            load_s: Some(self.load_s),
            ttft_s: Some(out.ttft_s),
            decode_s_per_token: out.decode_s.clone(),
            decode_s_per_token_median: (steps > 0).then(|| out.decode_median_s()),
            decode_s_per_token_p90: memdial::util::stats::percentile(&out.decode_s, 0.9),
            tokens_per_s: (decode_total > 0.0).then(|| steps as f64 / decode_total),
            bytes_read_total: Some(if streamed {
                (m.bytes_read + m.load_bytes_read) as f64
            } else {
                model_bytes as f64
            }),
            bytes_read_per_token: (steps > 0 && streamed)
                .then(|| decode_bytes as f64 / steps as f64),
            read_throughput_decode_bytes_per_s: (decode_total > 0.0 && streamed)
                .then(|| decode_bytes as f64 / decode_total),
            io_wait_fraction: Some(if gen_wall > 0.0 {
                m.io_wait_s / gen_wall
            } else {
                0.0
            }),
            trunk_hit_rate: streamed.then(|| m.trunk_hit_rate()),
            expert_hit_rate: streamed.then(|| m.expert_hit_rate()),
            expert_hit_rate_per_layer: m
                .expert_layer
                .iter()
                .map(|(r, h)| (*r > 0).then(|| *h as f64 / *r as f64))
                .collect(),
            lookahead_precision: m.lookahead_precision(),
            lookahead_recall: m.lookahead_recall(),
            peak_rss_bytes: Some(mem.last.vm_hwm_bytes),
            peak_rss_anon_bytes: Some(mem.peak_rss_anon_bytes),
            rss_file_bytes: Some(mem.last.rss_file_bytes),
            peak_accounted_bytes: streamed.then_some(m.peak_accounted_bytes),
            budget_overflows: Some(m.budget_overflows),
            page_cache_resident_bytes_end: Some(page_cache),
            output_ids: out.output_ids.clone(),
            output_ids_sha256: Some(out.output_ids_sha256()),
            output_text_sha256: self.text.map(|t| hex(&Sha256::digest(t.as_bytes()))),
            pinned_layers: plan.as_ref().map(|p| p.pinned_layers as u64),
            expert_cache_experts: plan.as_ref().map(|p| p.expert_cache_experts as u64),
            prefill_s: Some(out.prefill_s),
            bytes_read_load: Some(if streamed {
                m.load_bytes_read as f64
            } else {
                model_bytes as f64
            }),
            io_wait_s: Some(m.io_wait_s),
            predicted_trunk_hit_rate: plan.as_ref().map(|p| p.predicted_trunk_hit_rate),
            expert_prefetch_hits: Some(m.expert_prefetch_hits),
            rss_anon_bytes: Some(mem.last.rss_anon_bytes),
            prefill_tokens_per_s: (out.prefill_s > 0.0)
                .then(|| self.prompt_len as f64 / out.prefill_s),
            prefill_bytes_read: streamed.then_some(first_m.bytes_read),
            prefill_expert_fetches: streamed.then_some(first_m.prefill_expert_fetches),
            device_read_bytes: device_end,
            device_read_bytes_per_token: device_end
                .zip(self.g.device_at_first)
                .filter(|_| steps > 0)
                .map(|(e, f)| e.saturating_sub(f) as f64 / steps as f64),
            read_busy_s_decode: streamed.then_some(read_busy_decode),
            read_throughput_busy_decode_bytes_per_s: (streamed && read_busy_decode > 0.0)
                .then(|| decode_bytes as f64 / read_busy_decode),
            lossless_decoded_bytes_per_token: (ck.lossless.is_some() && steps > 0).then(|| {
                m.lossless_decoded_bytes
                    .saturating_sub(first_m.lossless_decoded_bytes) as f64
                    / steps as f64
            }),
            lossless_decode_s_per_token: (ck.lossless.is_some() && steps > 0)
                .then(|| (m.lossless_decode_s - first_m.lossless_decode_s) / steps as f64),
            warm_fill_s: self.g.warm.map(|w| w.fill.seconds),
            warm_fill_bytes: self.g.warm.map(|w| w.fill.bytes),
            ..Default::default()
        };
        rm.set_sched(&out.decode_s, &out.sched);
        self.speculation_figures(&mut rm, decode_bytes);
        mark_os_sources(&mut rm);
        rm.fill_sources(Source::Engine);
        rm
    }
}

/// Marks the figures the kernel measured (memory, device reads, the scheduler's
/// figures where present) as `Source::Os`.
fn mark_os_sources(rm: &mut RunMetrics) {
    // The kernel's schedstat and CPU clock measured these, where present.
    let sched_keys = [
        "decode_run_queue_wait_s",
        "run_queue_wait_fraction",
        "uncontended_s_per_token",
        "uncontended_s_per_token_median",
    ];
    if !rm.decode_run_queue_wait_s.is_empty() {
        for k in sched_keys {
            rm.metric_sources.insert(k.into(), Source::Os);
        }
    }
    if rm.cpu_s_per_token.is_some() {
        rm.metric_sources
            .insert("cpu_s_per_token".into(), Source::Os);
    }
    for k in [
        "peak_rss_bytes",
        "peak_rss_anon_bytes",
        "rss_file_bytes",
        "rss_anon_bytes",
        "page_cache_resident_bytes_end",
        "device_read_bytes",
        "device_read_bytes_per_token",
    ] {
        rm.metric_sources.insert(k.into(), Source::Os);
    }
}

impl RunFacts<'_> {
    /// Model bytes in the page cache now: the streaming store's shards, or every shard.
    fn page_cache_bytes(&self) -> u64 {
        match &self.opened.streaming {
            Some(s) => s.page_cache_resident_bytes(),
            None => self
                .opened
                .checkpoint
                .ck
                .shards
                .iter()
                .map(|sh| memdial::io::pagecache::resident_bytes(&sh.path).unwrap_or(0))
                .sum(),
        }
    }

    /// The decode forwards and drafts into `rm` (`decode_bytes`: bytes read after the
    /// first token). Plain decoding: one forward per token after the first, no drafts.
    fn speculation_figures(&self, rm: &mut RunMetrics, decode_bytes: u64) {
        let steps = self.g.out.decode_s.len() as u64;
        let spec = self
            .g
            .spec
            .unwrap_or(memdial::engine::speculate::SpecStats {
                forwards: steps,
                ..Default::default()
            });
        let f = spec.forwards;
        rm.forwards = Some(f);
        rm.drafted_tokens = Some(spec.drafted_tokens);
        rm.accepted_tokens = Some(spec.accepted_tokens);
        rm.mean_accepted_length = spec.mean_accepted_length();
        rm.bytes_read_per_forward =
            (f > 0 && self.opened.streaming.is_some()).then(|| decode_bytes as f64 / f as f64);
    }
}

/// Writes `--metrics-json` (the [`MetricsFile`] with the run's settings) atomically.
fn write_metrics_json(path: &Path, a: &RunArgs, rm: &RunMetrics) -> Result<()> {
    let streamed = a.budget.is_some();
    let file = MetricsFile {
        schema_version: Some(SCHEMA_VERSION),
        budget_bytes: a.budget,
        io: streamed.then(|| a.io.0.as_str().to_string()),
        prefetch: Some(a.prefetch.0.as_str().to_string()),
        cache: Some(a.cache.0.as_str().to_string()),
        threads: Some(a.threads as u64),
        metrics: rm.clone(),
    };
    crate::export::write_atomic(
        path,
        (serde_json::to_string_pretty(&file)? + "\n").as_bytes(),
    )
}

/// Prints the output: text, ids, or the JSON object of `--output json`.
fn print_output(
    a: &RunArgs,
    out: &memdial::engine::generate::GenerateOutput,
    text: Option<&str>,
    load_s: f64,
) -> Result<()> {
    let ids_str = out
        .output_ids
        .iter()
        .map(|t| t.to_string())
        .collect::<Vec<_>>()
        .join(",");
    let mut so = std::io::stdout().lock();
    match a.output {
        OutputFormat::Ids => writeln!(so, "{ids_str}")?,
        OutputFormat::Text => match text {
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
    Ok(())
}
