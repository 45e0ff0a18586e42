//! The HTTP routes: `/v1/completions`, `/v1/chat/completions`, `/v1/models`,
//! `/health`, `/metrics`, and JSON errors for everything else.

use std::convert::Infallible;
use std::panic::AssertUnwindSafe;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::body::Body;
use axum::extract::{Path, Request, State};
use axum::http::{header, HeaderMap, Method, StatusCode, Uri};
use axum::middleware::{self, Next};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use futures_util::{FutureExt, StreamExt};
use memdial::engine::batch::Finish;
use memdial::engine::generate::GenerateParams;
use memdial::engine::sampler::SamplerConfig;
use memdial::format::tokenizer::Tokenizer;
use serde_json::{json, Value};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};

use super::batcher::{Event, Failure, Job, Queue, Refused};
use super::errors::ApiError;
use super::metrics::Metrics;
use super::text::TextStream;
use super::wire::{self, Endpoint, GenRequest, Head, Prompt, TokenLogprobs};

/// What every handler shares.
pub struct App {
    /// The model thread's queue.
    pub queue: Arc<Queue>,
    /// Counters.
    pub metrics: Arc<Metrics>,
    /// The checkpoint's tokenizer (`None`: token-id prompts only, no text out).
    pub tok: Option<Arc<Tokenizer>>,
    /// The checkpoint directory (its chat template).
    pub model_dir: PathBuf,
    /// The id clients name in `model`.
    pub model_id: String,
    /// `vocab_size`.
    pub vocab: usize,
    /// Positions per sequence (prompt + generated).
    pub max_context: usize,
    /// The config's eos ids (generation stops on them unless `ignore_eos`).
    pub eos: Vec<u32>,
    /// `--api-key`.
    pub api_key: Option<String>,
    /// `--max-body` bytes.
    pub max_body: usize,
    /// `--request-timeout`.
    pub timeout: Duration,
    /// Prompt tokens per sequence per batch step.
    pub prefill_chunk: usize,
    /// `--max-batch`.
    pub max_batch: usize,
    /// `--queue`.
    pub queue_cap: usize,
    /// Unix seconds the server started (`created` of the model, ids' prefix).
    pub started: u64,
    /// Next response number.
    pub next_id: AtomicU64,
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The router over `app`.
pub fn router(app: Arc<App>) -> Router {
    Router::new()
        .route("/v1/completions", post(completions))
        .route("/v1/chat/completions", post(chat))
        .route("/v1/models", get(models))
        .route("/v1/models/{id}", get(model))
        .route("/health", get(health))
        .route("/metrics", get(metrics))
        .fallback(no_route)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(middleware::from_fn_with_state(app.clone(), guard))
        .with_state(app)
}

/// Every exchange: a panic becomes a 500 JSON error (never a dropped connection),
/// and the status is counted per route.
async fn guard(State(app): State<Arc<App>>, req: Request, next: Next) -> Response {
    let route = match req.uri().path() {
        p
        @ ("/v1/completions" | "/v1/chat/completions" | "/v1/models" | "/health" | "/metrics") => p,
        p if p.starts_with("/v1/models/") => "/v1/models/{id}",
        _ => "other",
    }
    .to_string();
    let res = match AssertUnwindSafe(next.run(req)).catch_unwind().await {
        Ok(r) => r,
        Err(_) => ApiError::server(
            "internal error: the request handler panicked (a bug in memdial; please report it)",
        )
        .into_response(),
    };
    app.metrics.count_request(&route, res.status().as_u16());
    res
}

async fn no_route(method: Method, uri: Uri) -> ApiError {
    ApiError::no_route(method.as_str(), uri.path())
}

async fn method_not_allowed(method: Method, uri: Uri) -> ApiError {
    ApiError::method_not_allowed(method.as_str(), uri.path())
}

impl App {
    /// Checks `Authorization: Bearer KEY` when the server has a key.
    fn auth(&self, headers: &HeaderMap) -> Result<(), ApiError> {
        let Some(key) = &self.api_key else {
            return Ok(());
        };
        let given = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        match given {
            None => Err(ApiError::unauthorized(
                "You didn't provide an API key: send it as `Authorization: Bearer KEY`.",
            )),
            Some(g) if !same(g.trim().as_bytes(), key.as_bytes()) => {
                Err(ApiError::unauthorized("Incorrect API key provided."))
            }
            Some(_) => Ok(()),
        }
    }

    fn model_object(&self) -> Value {
        json!({
            "id": self.model_id,
            "object": "model",
            "created": self.started,
            "owned_by": "memdial",
            "max_model_len": self.max_context,
        })
    }
}

/// Constant-time comparison (the key's length aside).
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

async fn health(State(app): State<Arc<App>>) -> Response {
    if app.queue.draining() {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"status": "shutting down"})),
        )
            .into_response();
    }
    Json(json!({
        "status": "ok",
        "sequences_running": app.queue.running(),
        "requests_waiting": app.queue.waiting(),
    }))
    .into_response()
}

async fn metrics(State(app): State<Arc<App>>, headers: HeaderMap) -> Response {
    if let Err(e) = app.auth(&headers) {
        return e.into_response();
    }
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        app.metrics.render(),
    )
        .into_response()
}

async fn models(State(app): State<Arc<App>>, headers: HeaderMap) -> Result<Json<Value>, ApiError> {
    app.auth(&headers)?;
    Ok(Json(
        json!({"object": "list", "data": [app.model_object()]}),
    ))
}

async fn model(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    app.auth(&headers)?;
    if id != app.model_id {
        return Err(ApiError::model_not_found(&id, &app.model_id));
    }
    Ok(Json(app.model_object()))
}

async fn completions(State(app): State<Arc<App>>, headers: HeaderMap, body: Body) -> Response {
    generate(app, Endpoint::Completions, headers, body)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

async fn chat(State(app): State<Arc<App>>, headers: HeaderMap, body: Body) -> Response {
    generate(app, Endpoint::Chat, headers, body)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

/// Reads the body, at most `limit` bytes, within `timeout`.
async fn read_body(body: Body, limit: usize, timeout: Duration) -> Result<Vec<u8>, ApiError> {
    let read = async {
        let mut out = Vec::new();
        let mut s = body.into_data_stream();
        while let Some(chunk) = s.next().await {
            let chunk = chunk.map_err(|e| {
                ApiError::bad_json(format!("The request body could not be read: {e}."))
            })?;
            if out.len() + chunk.len() > limit {
                return Err(ApiError::too_large(limit));
            }
            out.extend_from_slice(&chunk);
        }
        Ok(out)
    };
    match tokio::time::timeout(timeout, read).await {
        Ok(r) => r,
        Err(_) => Err(ApiError::body_timeout(timeout.as_secs_f64())),
    }
}

/// The prompt's ids (text encoded, chat messages rendered with the checkpoint's
/// template exactly as `memdial run --chat` does for a system + user turn).
fn prompt_ids(app: &App, req: &GenRequest) -> Result<Vec<u32>, ApiError> {
    let tok = || {
        app.tok.as_deref().ok_or_else(|| {
            ApiError::invalid(
                if req.endpoint == Endpoint::Chat {
                    "messages"
                } else {
                    "prompt"
                },
                "This checkpoint has no tokenizer: send the prompt as token ids.",
            )
        })
    };
    let ids = match &req.prompt {
        Prompt::Ids(ids) => ids.clone(),
        Prompt::Text(t) => tok()?.encode(t, true),
        Prompt::Messages(m) => {
            let tok = tok()?;
            let bad = |e: anyhow::Error| ApiError::invalid("messages", format!("{e:#}"));
            let roles: Vec<&str> = m.iter().map(|(r, _)| r.as_str()).collect();
            match roles[..] {
                ["user"] => {
                    memdial::format::chat::chat_prompt_ids(&app.model_dir, tok, &m[0].1, None)
                        .map_err(bad)?
                }
                ["system", "user"] => memdial::format::chat::chat_prompt_ids(
                    &app.model_dir,
                    tok,
                    &m[1].1,
                    Some(&m[0].1),
                )
                .map_err(bad)?,
                _ => {
                    let Some((template, _)) =
                        memdial::format::chat::find_template(&app.model_dir).map_err(bad)?
                    else {
                        return Err(ApiError::invalid("messages", "This checkpoint has no chat_template: the built-in Kimi format takes one user message, after an optional system message."));
                    };
                    let msgs: Vec<memdial::format::chat::Message> = m
                        .iter()
                        .map(|(role, content)| memdial::format::chat::Message {
                            role: role.clone(),
                            content: content.clone(),
                        })
                        .collect();
                    let text =
                        memdial::format::chat::render(&template, &msgs, true, tok).map_err(bad)?;
                    tok.encode(&text, true)
                }
            }
        }
    };
    if ids.is_empty() {
        return Err(ApiError::invalid(
            "prompt",
            "The prompt encodes to no tokens.",
        ));
    }
    if let Some(bad) = ids.iter().find(|&&t| t as usize >= app.vocab) {
        return Err(ApiError::invalid(
            "prompt",
            format!("Token id {bad} is out of range (vocab_size {}).", app.vocab),
        ));
    }
    Ok(ids)
}

/// `max_tokens` for a prompt of `n` tokens; refuses what the context cannot hold.
fn max_tokens(app: &App, req: &GenRequest, n: usize) -> Result<usize, ApiError> {
    let ctx = app.max_context;
    let too_long = |asked: String| {
        ApiError::invalid(
            if req.endpoint == Endpoint::Chat { "messages" } else { "prompt" },
            format!("This model's maximum context length is {ctx} tokens (--max-context). However, you requested {asked}. Please reduce the length of the prompt or completion."),
        )
        .with_code("context_length_exceeded")
    };
    if n >= ctx {
        return Err(too_long(format!(
            "{n} tokens in the prompt, leaving no room for a completion"
        )));
    }
    let room = ctx - n;
    match req.max_tokens {
        Some(m) if m > room => Err(too_long(format!(
            "{} tokens ({n} in the prompt, {m} in the completion)",
            n.saturating_add(m)
        ))),
        Some(m) => Ok(m),
        None if req.endpoint == Endpoint::Completions => Ok(room.min(16)),
        None => Ok(room),
    }
}

async fn generate(
    app: Arc<App>,
    endpoint: Endpoint,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let arrival = Instant::now();
    app.auth(&headers)?;
    if app.queue.draining() {
        return Err(ApiError::shutting_down());
    }
    let body = read_body(body, app.max_body, app.timeout).await?;
    let req = wire::parse(endpoint, &body)?;
    if req.model != app.model_id {
        return Err(ApiError::model_not_found(&req.model, &app.model_id));
    }
    // Tokenizing and rendering are CPU work: off the async workers.
    let (app2, req2) = (app.clone(), req.clone());
    let prompt = tokio::task::spawn_blocking(move || prompt_ids(&app2, &req2))
        .await
        .map_err(|e| ApiError::server(format!("tokenizing the prompt failed: {e}")))??;
    let max_tokens = max_tokens(&app, &req, prompt.len())?;
    let (tx, rx) = unbounded_channel();
    let job = Job {
        prompt: prompt.clone(),
        params: GenerateParams {
            max_tokens,
            sampler: SamplerConfig {
                temperature: req.temperature,
                top_p: req.top_p,
                seed: req.seed,
            },
            stop_ids: if req.ignore_eos {
                vec![]
            } else {
                app.eos.clone()
            },
            keep_logits: false,
            prefill_chunk: app.prefill_chunk,
            perturb_logit: None,
        },
        logprobs: req.logprobs,
        deadline: arrival + app.timeout,
        events: tx,
    };
    match app.queue.submit(job) {
        Ok(()) => {}
        Err(Refused::Busy) => {
            app.metrics.count_rejected();
            return Err(ApiError::busy(app.max_batch, app.queue_cap));
        }
        Err(Refused::Closed) => return Err(ApiError::shutting_down()),
    }
    app.metrics.count_prompt(prompt.len());
    let n = app.next_id.fetch_add(1, Ordering::Relaxed);
    let head = Head {
        id: format!(
            "{}-{:x}{n:04}",
            match endpoint {
                Endpoint::Completions => "cmpl",
                Endpoint::Chat => "chatcmpl",
            },
            app.started
        ),
        created: unix_now(),
        model: app.model_id.clone(),
        fingerprint: format!("memdial-{}", env!("CARGO_PKG_VERSION")),
    };
    let g = Gen {
        text: TextStream::new(&req.stop),
        app,
        req,
        head,
        prompt,
        rx,
        ids: Vec::new(),
        lps: Vec::new(),
        arrival,
    };
    if g.req.stream {
        Ok(stream(g))
    } else {
        collect(g).await
    }
}

/// One request in flight on the HTTP side.
struct Gen {
    app: Arc<App>,
    req: GenRequest,
    head: Head,
    prompt: Vec<u32>,
    rx: UnboundedReceiver<Event>,
    text: TextStream,
    ids: Vec<u32>,
    lps: Vec<TokenLogprobs>,
    arrival: Instant,
}

/// What one engine event means to the client.
enum Out {
    Admitted,
    Token {
        text: String,
        lp: Option<TokenLogprobs>,
        /// Characters of the completion before this text (`text_offset`).
        offset: usize,
        id: u32,
        finish: Option<&'static str>,
    },
    Failed(ApiError),
}

impl Gen {
    fn bytes(&self, id: u32) -> Vec<u8> {
        match &self.app.tok {
            Some(t) if id < t.n_vocab() => t.decode_bytes(&[id]).unwrap_or_default(),
            _ => Vec::new(),
        }
    }

    async fn next(&mut self) -> Out {
        let ev = match self.rx.recv().await {
            Some(ev) => ev,
            None => {
                return Out::Failed(ApiError::server(
                    "the model's thread ended without finishing this request",
                ))
            }
        };
        let (id, logprobs, finish) = match ev {
            Event::Admitted => return Out::Admitted,
            Event::Failed(f) => {
                return Out::Failed(match f {
                    Failure::Timeout => ApiError::timed_out(self.app.timeout.as_secs_f64()),
                    Failure::Shutdown => ApiError::shutting_down(),
                    Failure::Engine(m) => ApiError::server(format!("generation failed: {m}")),
                })
            }
            Event::Token {
                id,
                logprobs,
                finish,
            } => (id, logprobs, finish),
        };
        if self.ids.is_empty() {
            self.app
                .metrics
                .observe_ttft(self.arrival.elapsed().as_secs_f64());
        }
        self.ids.push(id);
        // A final eos id is not part of the text (nor of the logprobs).
        let eos = finish == Some(Finish::Stop);
        let offset = self.text.chars();
        let bytes = if eos { Vec::new() } else { self.bytes(id) };
        let mut text = self.text.push(&bytes);
        let lp = logprobs.filter(|_| !eos).map(|l| {
            let name = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
            TokenLogprobs {
                text: name(&bytes),
                logprob: l.logprob,
                top: l
                    .top
                    .iter()
                    .map(|&(t, p)| {
                        let b = self.bytes(t);
                        (name(&b), b, p)
                    })
                    .collect(),
                bytes,
            }
        });
        if let Some(l) = &lp {
            self.lps.push(l.clone());
        }
        let finish = if self.text.stopped() {
            Some("stop")
        } else {
            finish.map(|f| match f {
                Finish::Stop => "stop",
                Finish::Length | Finish::Context => "length",
            })
        };
        if finish.is_some() {
            text.push_str(&self.text.finish());
        }
        Out::Token {
            text,
            lp,
            offset,
            id,
            finish,
        }
    }

    fn usage(&self) -> Value {
        wire::usage(self.prompt.len(), self.ids.len())
    }
}

/// A non-streamed response: waits for the last token.
async fn collect(mut g: Gen) -> Result<Response, ApiError> {
    let mut text = String::new();
    loop {
        match g.next().await {
            Out::Admitted => {}
            Out::Failed(e) => return Err(e),
            Out::Token {
                text: t, finish, ..
            } => {
                text.push_str(&t);
                if let Some(f) = finish {
                    let v = wire::response(
                        g.req.endpoint,
                        &g.head,
                        &text,
                        f,
                        g.req.logprobs.map(|_| &g.lps[..]),
                        g.usage(),
                        g.req
                            .return_token_ids
                            .then_some((&g.prompt[..], &g.ids[..])),
                    );
                    return Ok(Json(v).into_response());
                }
            }
        }
    }
}

/// Where a stream is.
enum Phase {
    Running { first: bool },
    Usage,
    Done,
    End,
}

/// A streamed response: server-sent events in OpenAI's chunk format, ending with
/// `data: [DONE]` (after a usage chunk with `stream_options.include_usage`); a
/// failure is a final `data: {"error": …}` event. The client leaving drops the
/// stream and so the receiver: the model's thread then frees the sequence.
fn stream(g: Gen) -> Response {
    let s = futures_util::stream::unfold(
        (g, Phase::Running { first: true }, Vec::<Value>::new()),
        |(mut g, mut phase, mut pending)| async move {
            loop {
                if let Some(v) = pending.pop() {
                    let ev = SseEvent::default().data(v.to_string());
                    return Some((Ok::<_, Infallible>(ev), (g, phase, pending)));
                }
                let usage = g.req.include_usage.then_some(Value::Null);
                let ep = g.req.endpoint;
                match phase {
                    Phase::End => return None,
                    Phase::Done => {
                        let ev = SseEvent::default().data("[DONE]");
                        return Some((Ok(ev), (g, Phase::End, pending)));
                    }
                    Phase::Usage => {
                        pending.push(wire::usage_chunk(ep, &g.head, g.usage()));
                        phase = Phase::Done;
                    }
                    Phase::Running { first } => match g.next().await {
                        Out::Admitted => {
                            if ep == Endpoint::Chat && first {
                                pending.push(wire::chunk(
                                    ep,
                                    &g.head,
                                    Some(""),
                                    true,
                                    None,
                                    None,
                                    None,
                                    usage,
                                ));
                                phase = Phase::Running { first: false };
                            }
                        }
                        Out::Failed(e) => {
                            pending.push(e.body());
                            phase = Phase::Done;
                        }
                        Out::Token {
                            text,
                            lp,
                            offset,
                            id,
                            finish,
                        } => {
                            let one = [id];
                            let ids = g.req.return_token_ids.then_some(&one[..]);
                            // Chunks are popped from the end: push the last one first.
                            if let Some(f) = finish {
                                pending.push(wire::chunk(
                                    ep,
                                    &g.head,
                                    None,
                                    false,
                                    Some(f),
                                    None,
                                    None,
                                    usage.clone(),
                                ));
                                phase = if g.req.include_usage {
                                    Phase::Usage
                                } else {
                                    Phase::Done
                                };
                                // The engine may still run (a stop string matched): let it go.
                                g.rx.close();
                            }
                            if !text.is_empty() || lp.is_some() || ids.is_some() {
                                let lpv = lp
                                    .map(|l| wire::logprobs(ep, std::slice::from_ref(&l), offset));
                                pending.push(wire::chunk(
                                    ep,
                                    &g.head,
                                    Some(&text),
                                    first && ep == Endpoint::Chat,
                                    None,
                                    lpv,
                                    ids,
                                    usage,
                                ));
                                if let Phase::Running { .. } = phase {
                                    phase = Phase::Running { first: false };
                                }
                            }
                        }
                    },
                }
            }
        },
    );
    Sse::new(s)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(5)))
        .into_response()
}
