//! `memdial run`: load a checkpoint, prefill a prompt, decode, print ids / text / JSON.

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use memdial::engine::generate::{generate, GenerateParams};
use memdial::engine::loader::{Opened, StoreOptions};
use memdial::engine::sampler::SamplerConfig;
use memdial::format::config::{load_config, ModelConfig};
use memdial::format::tokenizer::Tokenizer;
use memdial::model::Model;
use memdial::store::plan::Prefetch;
use memdial::store::streaming::StreamOptions;
use memdial::util::error::UsageError;
use memdial::util::sysmem::PeakTracker;

use crate::args::usage;
use crate::sweep::start::StartMode;

mod args;
mod metrics;
pub use args::{OutputFormat, RunArgs};
use metrics::{write_metrics_json, Generated, RunFacts, Warm};

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
    let depth = memdial::engine::depth::context_ids(a.depth, cfg.vocab_size);
    let max_context = context_for(a, &cfg, prompt.len())?;
    // The arena fits the longest forward: a chunk of the depth context or of the prompt.
    let chunks = prefill_chunks(a, prompt.len().max(depth.len()), max_context);
    // The state and arena are allocated at once for max_context positions: refuse what
    // this machine cannot hold before loading (an allocation failure aborts).
    memdial::engine::loader::check_run_memory(
        &cfg,
        chunks.1,
        a.threads,
        max_context,
        a.speculate.k(),
        memdial::util::sysmem::mem_available(),
    )
    .map_err(|e| usage(format!("--max-context {max_context}: {e}")))?;
    let a = &with_budget(a, max_context)?;
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
        // The trace's prefill forwards are the depth context's, then the prompt's.
        s.note_run(depth.len() + prompt.len(), chunk, warm.is_some());
    }
    mem.sample();
    let input = Input {
        depth: &depth,
        prompt: &prompt,
    };
    let mut g = generate_ids(a, &cfg, &opened, input, max_context, chunks, &mut mem)?;
    g.warm = warm;
    write_outputs(a, &cfg, &opened, &prompt, max_context, load_s, &g, &mem)
}

/// `a` with `--budget` resolved to bytes: `25%` of the model, `floor` or `2x floor` of
/// the plan this run's store makes (its IO mode, prefetch, threads, `max_context`
/// positions and speculation), a size as written.
fn with_budget(a: &RunArgs, max_context: usize) -> Result<RunArgs> {
    let mut r = a.clone();
    r.budget = match a.store.budget {
        None => None,
        Some(e) => Some(crate::args::resolve_budget(
            e,
            &a.model,
            a.store.io(),
            a.store.prefetch(),
            |cfg| {
                let seqs = memdial::store::plan::Sequences {
                    max_context,
                    max_batch: 1,
                };
                memdial::engine::loader::streaming_activations(
                    cfg,
                    seqs,
                    a.threads,
                    a.speculate.k(),
                )
            },
        )?),
    };
    Ok(r)
}

/// The usage errors clap cannot see (ranges, combinations).
fn check_args(a: &RunArgs) -> Result<()> {
    if a.max_tokens == 0 {
        return Err(usage("--max-tokens must be ≥ 1"));
    }
    if !(a.top_p > 0.0 && a.top_p <= 1.0) {
        return Err(usage("--top-p must be in (0, 1]"));
    }
    if a.store.budget.is_none() && (a.record_trace.is_some() || a.trace.is_some() || a.verify_reads)
    {
        // (--io, --prefetch and --cache given without --budget are refused by clap.)
        return Err(usage(
            "--io, --prefetch, --cache, --trace, --record-trace and --verify-reads need --budget (the streaming store)",
        ));
    }
    if a.threads == 0 {
        return Err(usage("--threads must be ≥ 1"));
    }
    if a.start == StartMode::Warm && a.store.budget.is_none() {
        return Err(usage(
            "--start warm needs --budget (without it every weight is resident from the start)",
        ));
    }
    if a.store.prefetch() == Prefetch::Oracle && a.trace.is_none() {
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

/// Positions the MLA cache is sized for: `--max-context`, at least depth + prompt +
/// max-tokens. Errors: the count overflows, its cache is not a byte count, or
/// `--depth` with a `--max-context` that cannot hold depth + prompt + max-tokens.
fn context_for(a: &RunArgs, cfg: &ModelConfig, prompt_len: usize) -> Result<usize> {
    let needed = prompt_len.checked_add(a.max_tokens).ok_or_else(|| {
        usage(format!(
            "--max-tokens {} plus the prompt's {prompt_len} tokens overflows the position counter",
            a.max_tokens
        ))
    })?;
    let limit = crate::sweep::spec::MAX_CONTEXT;
    let needed = match needed.checked_add(a.depth) {
        Some(n) if a.depth == 0 || n <= limit => n,
        _ => {
            return Err(usage(format!(
                "--depth {} plus the prompt's {prompt_len} tokens plus --max-tokens {} is more than {limit} positions",
                a.depth, a.max_tokens
            )))
        }
    };
    if let Some(m) = a.max_context.filter(|&m| a.depth > 0 && m < needed) {
        return Err(usage(format!(
            "--depth {}: the depth context, the prompt's {prompt_len} tokens and --max-tokens {} \
             need {needed} positions, beyond --max-context {m} (raise --max-context or lower --depth)",
            a.depth, a.max_tokens
        )));
    }
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
            io: a.store.io(),
            prefetch: a.store.prefetch(),
            cache: a.store.cache(),
            max_context,
            io_threads: a.store.io_threads.max(1),
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
    match a.store.budget {
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

/// What a run feeds the model: the depth context (`--depth`), then the prompt.
#[derive(Clone, Copy)]
struct Input<'a> {
    depth: &'a [u32],
    prompt: &'a [u32],
}

/// Prefills the depth context (timed apart), then the prompt, and decodes, sampling
/// memory at every token. `chunks`: (prefill chunk, arena chunk) of [`prefill_chunks`].
fn generate_ids(
    a: &RunArgs,
    cfg: &ModelConfig,
    opened: &Opened,
    Input { depth, prompt }: Input,
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
    let depth_prefill_s = (!depth.is_empty())
        .then(|| memdial::engine::depth::prefill_context(model, &mut state, depth, prefill_chunk))
        .transpose()?;
    mem.sample();
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
        depth_prefill_s,
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
    print_output(a, g, text.as_deref(), load_s)?;
    logits?;
    metrics?;
    Ok(ExitCode::SUCCESS)
}

/// Prints the output: text, ids, or the JSON object of `--output json`.
fn print_output(a: &RunArgs, g: &Generated, text: Option<&str>, load_s: f64) -> Result<()> {
    let out = &g.out;
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
                "depth_tokens": a.depth,
                "timings": {
                    "load_s": load_s,
                    "depth_prefill_s": g.depth_prefill_s,
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
