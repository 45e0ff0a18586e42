//! `memdial serve`: an OpenAI-compatible HTTP server over continuous batching.
//!
//! The model runs on its own thread ([`batcher::run`]) over one
//! [`memdial::engine::batch::Batch`]; the HTTP side (axum on a small tokio runtime)
//! parses and validates requests ([`wire`]), tokenizes them off the async workers,
//! queues them ([`batcher::Queue`]) and turns the tokens it gets back into
//! responses or server-sent events ([`routes`]). See docs/serve.md.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use memdial::engine::batch::Batch;
use memdial::engine::loader::StoreOptions;
use memdial::format::config::load_config;
use memdial::format::tokenizer::Tokenizer;
use memdial::model::Model;
use memdial::store::plan::Prefetch;
use memdial::store::streaming::StreamOptions;

use crate::args::usage;
use crate::store_flags::StoreFlags;
use crate::sweep::start::StartMode;

pub mod batcher;
pub mod errors;
pub mod listen;
pub mod metrics;
pub mod routes;
pub mod text;
pub mod wire;

/// Arguments of `memdial serve`.
#[derive(clap::Args, Debug)]
pub struct ServeArgs {
    /// Checkpoint directory (config.json + safetensors shards).
    #[arg(long)]
    pub model: PathBuf,
    /// The model id clients send in `model` (default: the directory's name).
    #[arg(long)]
    pub model_name: Option<String>,
    /// Address to listen on (loopback by default: nothing else can reach it).
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// Port to listen on (0: any free port; the one chosen is printed).
    #[arg(long, default_value_t = 8080)]
    pub port: u16,
    /// Require `Authorization: Bearer KEY` on every route but /health.
    #[arg(long)]
    pub api_key: Option<String>,
    /// Sequences decoded together at most (the batch); the plan holds a state for each.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u64).range(1..=256))]
    pub max_batch: u64,
    /// Requests waiting beyond a full batch at most; more get 429 with Retry-After.
    #[arg(long, default_value_t = 16)]
    pub queue: usize,
    /// Positions per sequence (prompt + completion); longer requests get 400.
    #[arg(long, default_value_t = 2048)]
    pub max_context: usize,
    /// Prompt tokens each prefilling sequence feeds per batch step: a new prompt is fed
    /// over several steps while the others keep decoding one token per step (larger:
    /// faster prefill, longer stalls for the others). Output is the same for any value.
    #[arg(long, default_value_t = 64)]
    pub prefill_chunk: usize,
    /// Kernel threads (1..=1024).
    #[arg(long, default_value_t = 1, value_parser = crate::args::thread_count)]
    pub threads: usize,
    /// The streaming store: `--budget` (`floor` / `2x floor` of the plan for --max-batch
    /// sequences of --max-context positions), `--io`, `--prefetch` (oracle is refused: a
    /// server has no trace), `--cache`, `--io-threads`.
    #[command(flatten)]
    pub store: StoreFlags,
    /// How the caches begin: cold, or warm (filled before the first request; needs --budget).
    #[arg(long, value_enum, default_value_t = StartMode::Cold)]
    pub start: StartMode,
    /// Largest request body in bytes; larger ones get 413.
    #[arg(long, default_value_t = 4 << 20)]
    pub max_body: usize,
    /// Seconds a request may take from arrival to its last token (body upload
    /// included); then 408 (body) or 504 / a final error event.
    #[arg(long, default_value_t = 600.0)]
    pub request_timeout: f64,
    /// Seconds a connection may take to send a complete request head (each one on a
    /// kept-alive connection); then it is closed.
    #[arg(long, default_value_t = 10.0)]
    pub header_timeout: f64,
    /// Seconds running requests may go on after SIGTERM / Ctrl-C before they are
    /// cancelled (with a final error event); waiting ones are cancelled at once.
    #[arg(long, default_value_t = 30.0)]
    pub shutdown_grace: f64,
}

fn seconds(flag: &str, v: f64) -> Result<Duration> {
    if !(v.is_finite() && v > 0.0 && v < 1e9) {
        return Err(usage(format!(
            "{flag} must be a positive number of seconds, got {v}"
        )));
    }
    Ok(Duration::from_secs_f64(v))
}

/// The flags' checks and the store they ask for: (request timeout, shutdown grace,
/// header timeout, store).
///
/// Errors: a usage error naming the flag.
fn checked_options(a: &ServeArgs) -> Result<(Duration, Duration, Duration, StoreOptions)> {
    let timeout = seconds("--request-timeout", a.request_timeout)?;
    let grace = seconds("--shutdown-grace", a.shutdown_grace)?;
    let head = seconds("--header-timeout", a.header_timeout)?;
    if a.max_context == 0 {
        return Err(usage("--max-context must be ≥ 1"));
    }
    if a.store.prefetch() == Prefetch::Oracle {
        return Err(usage(
            "--prefetch oracle replays one run's trace; a server has none",
        ));
    }
    if a.start == StartMode::Warm && a.store.budget.is_none() {
        return Err(usage("--start warm needs --budget"));
    }
    let budget = match a.store.budget {
        None => None,
        Some(e) => Some(crate::args::resolve_budget(
            e,
            &a.model,
            a.store.io(),
            a.store.prefetch(),
            |cfg| {
                let seqs = memdial::store::plan::Sequences {
                    max_context: a.max_context,
                    max_batch: a.max_batch as usize,
                };
                memdial::engine::loader::streaming_activations(cfg, seqs, a.threads, 0)
            },
        )?),
    };
    let store = match budget {
        Some(b) => StoreOptions::Streaming(StreamOptions {
            budget: b,
            io: a.store.io(),
            prefetch: a.store.prefetch(),
            cache: a.store.cache(),
            max_context: a.max_context,
            io_threads: a.store.io_threads,
            record_trace: None,
            trace: None,
            verify_reads: false,
        }),
        None => StoreOptions::Resident,
    };
    Ok((timeout, grace, head, store))
}

/// Runs `memdial serve` until SIGTERM / SIGINT, then drains.
pub fn run(a: &ServeArgs) -> Result<ExitCode> {
    let (timeout, grace, head, store) = checked_options(a)?;
    let max_batch = a.max_batch as usize;
    let cfg = load_config(&a.model)?;
    let opened = Model::open_batch(&a.model, store, a.threads, max_batch).map_err(|e| {
        // The floor grows with the sequences and positions a server holds: name the flags.
        match e.downcast_ref::<memdial::util::error::UsageError>() {
            Some(memdial::util::error::UsageError::BelowFloor { .. }) => e.context(format!(
                "the floor is for --max-batch {max_batch} sequences of --max-context {} positions \
                 on --threads {}: lower them, or raise --budget",
                a.max_context, a.threads
            )),
            _ => e,
        }
    })?;
    if let (StartMode::Warm, Some(s)) = (a.start, &opened.streaming) {
        let w = s.warm_fill()?;
        eprintln!("warm start: {} bytes in {:.2} s", w.bytes, w.seconds);
    }
    let batch = Batch::new(&opened.model, max_batch, a.max_context)?;
    let tok = match Tokenizer::from_dir(&a.model) {
        Ok(t) => Some(Arc::new(t)),
        Err(e) => {
            eprintln!("note: no tokenizer ({e:#}): prompts must be token ids and completions have no text");
            None
        }
    };
    let model_id = match &a.model_name {
        Some(n) => n.clone(),
        None => a
            .model
            .canonicalize()
            .ok()
            .and_then(|p| p.file_name().map(|f| f.to_string_lossy().into_owned()))
            .unwrap_or_else(|| a.model.display().to_string()),
    };
    let queue = Arc::new(batcher::Queue::new(max_batch, a.queue));
    let metrics = Arc::new(metrics::Metrics::default());
    let app = Arc::new(routes::App {
        queue: queue.clone(),
        metrics: metrics.clone(),
        tok,
        model_dir: a.model.clone(),
        model_id: model_id.clone(),
        vocab: cfg.vocab_size,
        max_context: a.max_context,
        eos: cfg.eos_token_ids.clone(),
        api_key: a.api_key.clone(),
        max_body: a.max_body,
        timeout,
        prefill_chunk: a.prefill_chunk,
        max_batch,
        queue_cap: a.queue,
        started: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        next_id: AtomicU64::new(0),
    });
    let engine = {
        let (queue, metrics) = (queue.clone(), metrics.clone());
        std::thread::Builder::new()
            .name("memdial-model".into())
            .spawn(move || {
                let model = opened.model;
                let store = opened.streaming;
                batcher::run(&model, batch, &queue, &metrics, store.as_ref(), grace);
            })
            .context("cannot start the model's thread")?
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        // Tokenizing runs in the blocking pool: a few threads, beside the model's.
        .max_blocking_threads(2)
        .thread_name("memdial-http")
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let res = rt.block_on(async {
        let listener = tokio::net::TcpListener::bind((a.host.as_str(), a.port))
            .await
            .with_context(|| format!("cannot listen on {}:{}", a.host, a.port))?;
        let addr: SocketAddr = listener.local_addr()?;
        eprintln!(
            "memdial serve: listening on http://{addr} (model {model_id:?}, max batch {max_batch}, \
             max context {}, queue {}, {})",
            a.max_context,
            a.queue,
            match a.store.budget {
                Some(b) => format!("budget {b} bytes, io {}, prefetch {}", a.store.io().as_str(), a.store.prefetch().as_str()),
                None => "resident".into(),
            }
        );
        let q = queue.clone();
        listen::serve(listener, routes::router(app), head, async move {
            shutdown_signal().await;
            eprintln!("memdial serve: shutting down (running requests get {grace:?} to finish)");
            q.drain();
        })
        .await
        .context("the HTTP server failed")
    });
    queue.drain();
    queue.close();
    if engine.join().is_err() {
        eprintln!("memdial serve: the model's thread panicked");
        return Ok(ExitCode::FAILURE);
    }
    res?;
    eprintln!("memdial serve: stopped");
    Ok(ExitCode::SUCCESS)
}

/// SIGTERM or SIGINT.
async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = match signal(SignalKind::terminate()) {
        Ok(s) => s,
        Err(_) => return std::future::pending().await,
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}
