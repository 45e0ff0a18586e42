//! Aggregate decode throughput of a [`memdial::engine::batch::Batch`] on a streamed
//! budget: N sequences decoded together, each weight read once per step.
//!
//! ```text
//! cargo run --release --example batch_decode -- --model fixtures/models/mini \
//!     --sequences 4 --max-batch 4 [--budget SIZE] [--io direct] [--prefetch next-layer] \
//!     [--threads 2] [--max-tokens 16] [--prompt-len 8] [--max-context 256] [--check]
//! ```
//!
//! The budget defaults to the floor of the plan for `--max-batch` sequences. All
//! sequences' prompts are prefilled first; then the decode steps are timed. Prints
//! one JSON line: aggregate decode tokens/s (decode tokens of all sequences over
//! the decode wall time), bytes read per decode token (the store's counters over
//! the same steps), and the ids' SHA-256 per sequence. `--check` also runs each
//! sequence alone (`generate`, as `memdial run`) and fails if any id differs.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use memdial::engine::arena::Scratch;
use memdial::engine::batch::Batch;
use memdial::engine::generate::{generate, ids_sha256, GenerateParams};
use memdial::engine::loader::{Checkpointed, StoreOptions};
use memdial::engine::sampler::SamplerConfig;
use memdial::io::IoMode;
use memdial::model::Model;
use memdial::store::eviction::CachePolicy;
use memdial::store::plan::{plan_unchecked, Prefetch, Sequences};
use memdial::store::streaming::StreamOptions;
use memdial::util::budget::parse_size;

struct Args {
    model: PathBuf,
    sequences: usize,
    max_batch: usize,
    budget: Option<u64>,
    io: IoMode,
    prefetch: Prefetch,
    threads: usize,
    max_tokens: usize,
    prompt_len: usize,
    max_context: usize,
    check: bool,
}

fn args() -> Result<Args> {
    let mut a = Args {
        model: PathBuf::from("fixtures/models/mini"),
        sequences: 1,
        max_batch: 4,
        budget: None,
        io: IoMode::Direct,
        prefetch: Prefetch::NextLayer,
        threads: 2,
        max_tokens: 16,
        prompt_len: 8,
        max_context: 256,
        check: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        if k == "--check" {
            a.check = true;
            continue;
        }
        let v = it.next().with_context(|| format!("{k} needs a value"))?;
        let num = |v: &str| -> Result<usize> {
            v.parse()
                .with_context(|| format!("{k}: {v:?} is not a number"))
        };
        match k.as_str() {
            "--model" => a.model = v.into(),
            "--sequences" => a.sequences = num(&v)?,
            "--max-batch" => a.max_batch = num(&v)?,
            "--budget" => a.budget = Some(parse_size(&v)?),
            "--io" => a.io = IoMode::parse(&v)?,
            "--prefetch" => a.prefetch = Prefetch::parse(&v)?,
            "--threads" => a.threads = num(&v)?,
            "--max-tokens" => a.max_tokens = num(&v)?,
            "--prompt-len" => a.prompt_len = num(&v)?,
            "--max-context" => a.max_context = num(&v)?,
            _ => bail!("unknown option {k}"),
        }
    }
    if a.sequences == 0 || a.sequences > a.max_batch {
        bail!("--sequences must be 1..=--max-batch ({})", a.max_batch);
    }
    if a.max_tokens < 2 || a.prompt_len == 0 {
        bail!("--max-tokens must be ≥ 2 and --prompt-len ≥ 1");
    }
    Ok(a)
}

fn run() -> Result<()> {
    let a = args()?;
    let c = Checkpointed::read(&a.model)?;
    let seqs = Sequences {
        max_context: a.max_context,
        max_batch: a.max_batch,
    };
    let act = Scratch::activations(&c.cfg, seqs, a.threads);
    let floor = plan_unchecked(&c.cfg, &c.ck, 0, a.io, a.prefetch, act)?.floor_bytes;
    let budget = a.budget.unwrap_or(floor);
    let opts = StreamOptions {
        budget,
        io: a.io,
        prefetch: a.prefetch,
        cache: CachePolicy::Lru,
        max_context: a.max_context,
        io_threads: 2,
        record_trace: None,
        trace: None,
        verify_reads: false,
    };
    let opened = Model::open_batch(
        &a.model,
        StoreOptions::Streaming(opts),
        a.threads,
        a.max_batch,
    )?;
    let (model, store) = (&opened.model, opened.streaming.as_ref().expect("streaming"));
    let vocab = model.config().vocab_size;
    let params = GenerateParams {
        max_tokens: a.max_tokens,
        sampler: SamplerConfig {
            temperature: 0.0,
            top_p: 1.0,
            seed: 0,
        },
        stop_ids: vec![],
        keep_logits: false,
        prefill_chunk: 0,
        perturb_logit: None,
    };
    let prompts: Vec<Vec<u32>> = (0..a.sequences)
        .map(|i| {
            (0..a.prompt_len)
                .map(|j| ((i * 7919 + j * 104_729 + 17) % vocab) as u32)
                .collect()
        })
        .collect();
    let mut batch = Batch::new(model, a.max_batch, a.max_context)?;
    let ids: Vec<_> = prompts
        .iter()
        .map(|p| batch.add(model, p, &params))
        .collect::<Result<_>>()?;
    // Prefill (every sequence's first id).
    let t0 = Instant::now();
    let mut first = 0;
    while first < a.sequences {
        first += batch.step(model)?.len();
    }
    let prefill_s = t0.elapsed().as_secs_f64();
    let m0 = store.metrics();
    let t1 = Instant::now();
    let mut decoded = 0usize;
    let mut steps = 0usize;
    while batch.active() > 0 {
        decoded += batch.step(model)?.len();
        steps += 1;
    }
    let decode_s = t1.elapsed().as_secs_f64();
    let m1 = store.metrics();
    let outs: Vec<Vec<u32>> = ids
        .iter()
        .map(|id| batch.remove(*id).expect("in the batch").output_ids)
        .collect();
    let mut identical = None;
    if a.check {
        let mut ok = true;
        for (p, o) in prompts.iter().zip(&outs) {
            let mut st = model.new_state(a.max_context);
            let alone = generate(model, &mut st, p, &params, &mut |_| {})?;
            ok &= alone.output_ids == *o;
        }
        identical = Some(ok);
    }
    let bytes = m1.bytes_read - m0.bytes_read;
    let line = serde_json::json!({
        "model": a.model,
        "io": a.io.as_str(),
        "prefetch": a.prefetch.as_str(),
        "threads": a.threads,
        "max_batch": a.max_batch,
        "sequences": a.sequences,
        "budget_bytes": budget,
        "floor_bytes": floor,
        "prompt_len": a.prompt_len,
        "max_tokens": a.max_tokens,
        "prefill_s": prefill_s,
        "decode_steps": steps,
        "decode_tokens": decoded,
        "decode_s": decode_s,
        "decode_tokens_per_s": decoded as f64 / decode_s,
        "bytes_read_per_decode_token": bytes as f64 / decoded as f64,
        "trunk_bytes_read_per_step": (m1.trunk_bytes_read - m0.trunk_bytes_read) as f64 / steps as f64,
        "expert_bytes_read_per_step": (m1.expert_bytes_read - m0.expert_bytes_read) as f64 / steps as f64,
        "io_wait_s": m1.io_wait_s - m0.io_wait_s,
        "peak_accounted_bytes": m1.peak_accounted_bytes,
        "budget_overflows": m1.budget_overflows,
        "output_ids_sha256": outs.iter().map(|o| ids_sha256(o)).collect::<Vec<_>>(),
        "identical_to_single_runs": identical,
    });
    println!("{line}");
    if identical == Some(false) {
        bail!("a sequence's ids differ from its single run");
    }
    Ok(())
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
