//! The OpenAI wire format: request fields read from the JSON body (each bad value
//! refused with its field named) and the response objects written back.
//!
//! Field names follow the OpenAI API reference (`/v1/completions`,
//! `/v1/chat/completions`). Extensions, as vLLM names them: `ignore_eos` (do not
//! stop on the checkpoint's eos ids) and `return_token_ids` (each choice, and each
//! streamed chunk, carries its `token_ids`; the response its `prompt_token_ids`).

use serde_json::{json, Map, Value};

use super::errors::ApiError;

/// OpenAI's limit on `stop` strings.
pub const MAX_STOP: usize = 4;
/// `logprobs` of `/v1/completions` at most (OpenAI's limit).
pub const MAX_COMPLETION_LOGPROBS: u64 = 5;
/// `top_logprobs` of `/v1/chat/completions` at most (OpenAI's limit).
pub const MAX_TOP_LOGPROBS: u64 = 20;

/// Which endpoint a request came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    /// `POST /v1/completions`.
    Completions,
    /// `POST /v1/chat/completions`.
    Chat,
}

/// A completions prompt.
#[derive(Debug, Clone, PartialEq)]
pub enum Prompt {
    /// Text, encoded with the checkpoint's tokenizer (special-token strings as their ids).
    Text(String),
    /// Token ids as given.
    Ids(Vec<u32>),
    /// Chat messages (role, content), rendered with the checkpoint's chat template.
    Messages(Vec<(String, String)>),
}

/// One generation request, either endpoint, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct GenRequest {
    /// The endpoint.
    pub endpoint: Endpoint,
    /// `model`.
    pub model: String,
    /// `prompt` or `messages`.
    pub prompt: Prompt,
    /// `max_tokens` / `max_completion_tokens` (`None`: the endpoint's default).
    pub max_tokens: Option<usize>,
    /// `temperature` (0 = greedy).
    pub temperature: f32,
    /// `top_p`.
    pub top_p: f32,
    /// `seed` (its 64 bits; 0 when absent).
    pub seed: u64,
    /// `stop` strings.
    pub stop: Vec<String>,
    /// `stream`.
    pub stream: bool,
    /// `stream_options.include_usage`.
    pub include_usage: bool,
    /// Log-probabilities asked for: `Some(k)` = the chosen token's and the `k` most
    /// likely (`logprobs: k` of completions; `logprobs: true, top_logprobs: k` of chat).
    pub logprobs: Option<usize>,
    /// `ignore_eos` (extension).
    pub ignore_eos: bool,
    /// `return_token_ids` (extension).
    pub return_token_ids: bool,
}

fn field<'a>(o: &'a Map<String, Value>, k: &str) -> Option<&'a Value> {
    o.get(k).filter(|v| !v.is_null())
}

fn number(o: &Map<String, Value>, k: &str) -> Result<Option<f64>, ApiError> {
    match field(o, k) {
        None => Ok(None),
        Some(Value::Number(n)) => Ok(n.as_f64()),
        Some(v) => Err(ApiError::invalid(
            k,
            format!("`{k}` must be a number, got {}.", kind(v)),
        )),
    }
}

fn boolean(o: &Map<String, Value>, k: &str) -> Result<Option<bool>, ApiError> {
    match field(o, k) {
        None => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(v) => Err(ApiError::invalid(
            k,
            format!("`{k}` must be a boolean, got {}.", kind(v)),
        )),
    }
}

fn integer(o: &Map<String, Value>, k: &str) -> Result<Option<i64>, ApiError> {
    match field(o, k) {
        None => Ok(None),
        Some(Value::Number(n)) if n.is_i64() => Ok(n.as_i64()),
        Some(Value::Number(n)) if n.is_u64() => Ok(n.as_u64().map(|u| u as i64)),
        Some(v) => Err(ApiError::invalid(
            k,
            format!("`{k}` must be an integer, got {}.", kind(v)),
        )),
    }
}

fn kind(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(b) => format!("the boolean {b}"),
        Value::Number(n) => format!("the number {n}"),
        Value::String(s) if s.len() <= 40 => format!("the string {s:?}"),
        Value::String(_) => "a string".into(),
        Value::Array(_) => "an array".into(),
        Value::Object(_) => "an object".into(),
    }
}

/// Parses the body of a generation request for `endpoint`.
///
/// Errors (400, `param` set): not a JSON object, a missing `model` / `prompt` /
/// `messages`, a value of the wrong type or out of range (`temperature` in [0, 2],
/// `top_p` in (0, 1], `max_tokens` ≥ 1, `n` = 1, at most [`MAX_STOP`] non-empty
/// `stop` strings, `logprobs` limits), and options this server does not implement
/// (`echo`, `suffix`, `best_of` > 1, penalties ≠ 0, `logit_bias`, `tools`, a
/// non-text `response_format`).
pub fn parse(endpoint: Endpoint, body: &[u8]) -> Result<GenRequest, ApiError> {
    let v: Value = serde_json::from_slice(body).map_err(|e| {
        ApiError::bad_json(format!(
            "We could not parse the JSON body of your request: {e}."
        ))
    })?;
    let Value::Object(o) = v else {
        return Err(ApiError::bad_json(format!(
            "The request body must be a JSON object, got {}.",
            kind(&v)
        )));
    };
    let model = match field(&o, "model") {
        Some(Value::String(s)) => s.clone(),
        None => {
            return Err(ApiError::invalid(
                "model",
                "You must provide a model parameter.",
            ))
        }
        Some(v) => {
            return Err(ApiError::invalid(
                "model",
                format!("`model` must be a string, got {}.", kind(v)),
            ))
        }
    };
    let prompt = match endpoint {
        Endpoint::Completions => parse_prompt(&o)?,
        Endpoint::Chat => parse_messages(&o)?,
    };
    let n = integer(&o, "n")?.unwrap_or(1);
    if n != 1 {
        return Err(ApiError::invalid(
            "n",
            format!("`n` must be 1: this server returns one choice per request (got {n}); send {n} requests instead (each is decoded beside the others)."),
        ));
    }
    let max_tokens = match (
        integer(&o, "max_tokens")?,
        integer(&o, "max_completion_tokens")?,
    ) {
        (Some(t), _) => Some(("max_tokens", t)),
        (None, Some(t)) => Some(("max_completion_tokens", t)),
        (None, None) => None,
    };
    let max_tokens = match max_tokens {
        Some((k, t)) if t < 1 => {
            return Err(ApiError::invalid(
                k,
                format!("`{k}` must be at least 1, got {t}."),
            ))
        }
        Some((_, t)) => Some(usize::try_from(t).unwrap_or(usize::MAX)),
        None => None,
    };
    let temperature = number(&o, "temperature")?.unwrap_or(1.0);
    if !(0.0..=2.0).contains(&temperature) {
        return Err(ApiError::invalid(
            "temperature",
            format!("`temperature` must be in [0, 2], got {temperature}."),
        ));
    }
    let top_p = number(&o, "top_p")?.unwrap_or(1.0);
    if !(top_p > 0.0 && top_p <= 1.0) {
        return Err(ApiError::invalid(
            "top_p",
            format!("`top_p` must be in (0, 1], got {top_p}."),
        ));
    }
    let seed = integer(&o, "seed")?.unwrap_or(0) as u64;
    let stop = parse_stop(&o)?;
    let (stream, include_usage) = parse_stream(&o)?;
    let logprobs = parse_logprobs(endpoint, &o)?;
    refuse_unsupported(endpoint, &o)?;
    Ok(GenRequest {
        endpoint,
        model,
        prompt,
        max_tokens,
        temperature: temperature as f32,
        top_p: top_p as f32,
        seed,
        stop,
        stream,
        include_usage,
        logprobs,
        ignore_eos: boolean(&o, "ignore_eos")?.unwrap_or(false),
        return_token_ids: boolean(&o, "return_token_ids")?.unwrap_or(false),
    })
}

/// `stop`: a string or an array of at most [`MAX_STOP`] non-empty strings.
fn parse_stop(o: &Map<String, Value>) -> Result<Vec<String>, ApiError> {
    let stop = match field(o, "stop") {
        None => vec![],
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(a)) => a
            .iter()
            .map(|s| match s {
                Value::String(s) => Ok(s.clone()),
                v => Err(ApiError::invalid(
                    "stop",
                    format!(
                        "`stop` must be a string or an array of strings; an element is {}.",
                        kind(v)
                    ),
                )),
            })
            .collect::<Result<_, _>>()?,
        Some(v) => {
            return Err(ApiError::invalid(
                "stop",
                format!(
                    "`stop` must be a string or an array of strings, got {}.",
                    kind(v)
                ),
            ))
        }
    };
    if stop.len() > MAX_STOP {
        return Err(ApiError::invalid(
            "stop",
            format!(
                "`stop` takes at most {MAX_STOP} sequences, got {}.",
                stop.len()
            ),
        ));
    }
    if stop.iter().any(String::is_empty) {
        return Err(ApiError::invalid(
            "stop",
            "`stop` sequences must not be empty.",
        ));
    }
    Ok(stop)
}

/// `stream` and `stream_options.include_usage` (only allowed with `stream`).
fn parse_stream(o: &Map<String, Value>) -> Result<(bool, bool), ApiError> {
    let stream = boolean(o, "stream")?.unwrap_or(false);
    let include_usage = match field(o, "stream_options") {
        None => false,
        Some(_) if !stream => {
            return Err(ApiError::invalid(
                "stream_options",
                "`stream_options` is only allowed when `stream` is true.",
            ))
        }
        Some(Value::Object(so)) => boolean(so, "include_usage")
            .map_err(|e| ApiError {
                param: Some("stream_options.include_usage".into()),
                ..e
            })?
            .unwrap_or(false),
        Some(v) => {
            return Err(ApiError::invalid(
                "stream_options",
                format!("`stream_options` must be an object, got {}.", kind(v)),
            ))
        }
    };
    Ok((stream, include_usage))
}

fn parse_logprobs(endpoint: Endpoint, o: &Map<String, Value>) -> Result<Option<usize>, ApiError> {
    match endpoint {
        Endpoint::Completions => match integer(o, "logprobs")? {
            None => Ok(None),
            Some(k) if (0..=MAX_COMPLETION_LOGPROBS as i64).contains(&k) => Ok(Some(k as usize)),
            Some(k) => Err(ApiError::invalid(
                "logprobs",
                format!("`logprobs` must be in 0..={MAX_COMPLETION_LOGPROBS}, got {k}."),
            )),
        },
        Endpoint::Chat => {
            let on = boolean(o, "logprobs")?.unwrap_or(false);
            let top = integer(o, "top_logprobs")?;
            match (on, top) {
                (_, Some(k)) if !(0..=MAX_TOP_LOGPROBS as i64).contains(&k) => {
                    Err(ApiError::invalid(
                        "top_logprobs",
                        format!("`top_logprobs` must be in 0..={MAX_TOP_LOGPROBS}, got {k}."),
                    ))
                }
                (false, Some(_)) => Err(ApiError::invalid(
                    "top_logprobs",
                    "`top_logprobs` needs `logprobs` set to true.",
                )),
                (true, k) => Ok(Some(k.unwrap_or(0) as usize)),
                (false, None) => Ok(None),
            }
        }
    }
}

fn refuse_unsupported(endpoint: Endpoint, o: &Map<String, Value>) -> Result<(), ApiError> {
    let no = |k: &str, why: &str| {
        Err(ApiError::invalid(
            k,
            format!("`{k}` is not supported by this server: {why}."),
        ))
    };
    if endpoint == Endpoint::Completions {
        if boolean(o, "echo")?.unwrap_or(false) {
            return no("echo", "the prompt is not echoed");
        }
        if field(o, "suffix").is_some() {
            return no("suffix", "insertion is not implemented");
        }
        if integer(o, "best_of")?.unwrap_or(1) != 1 {
            return no(
                "best_of",
                "one candidate is decoded per request (best_of must be 1)",
            );
        }
    }
    for k in ["presence_penalty", "frequency_penalty"] {
        if number(o, k)?.unwrap_or(0.0) != 0.0 {
            return no(k, "penalties are not implemented (0 is accepted)");
        }
    }
    if let Some(b) = field(o, "logit_bias") {
        if !matches!(b, Value::Object(m) if m.is_empty()) {
            return no("logit_bias", "logit biases are not implemented");
        }
    }
    for k in ["tools", "functions"] {
        if let Some(t) = field(o, k) {
            if !matches!(t, Value::Array(a) if a.is_empty()) {
                return no(k, "tool calling is not implemented");
            }
        }
    }
    if let Some(rf) = field(o, "response_format") {
        if rf.get("type").and_then(Value::as_str) != Some("text") {
            return no("response_format", "only {\"type\": \"text\"} is");
        }
    }
    Ok(())
}

fn token_ids(a: &[Value]) -> Option<Vec<u32>> {
    a.iter()
        .map(|v| v.as_u64().and_then(|u| u32::try_from(u).ok()))
        .collect()
}

fn parse_prompt(o: &Map<String, Value>) -> Result<Prompt, ApiError> {
    let bad = |what: String| ApiError::invalid("prompt", what);
    let p = match field(o, "prompt") {
        None => return Err(bad("You must provide a prompt.".into())),
        Some(Value::String(s)) => Prompt::Text(s.clone()),
        Some(Value::Array(a)) if a.is_empty() => return Err(bad("`prompt` is empty.".into())),
        Some(Value::Array(a)) => match &a[0] {
            Value::Number(_) => Prompt::Ids(token_ids(a).ok_or_else(|| {
                bad("`prompt` token ids must be integers in 0..2^32.".into())
            })?),
            _ if a.len() > 1 => {
                return Err(bad(format!(
                    "`prompt` holds {} prompts; this server takes one per request (send them as separate requests).",
                    a.len()
                )))
            }
            Value::String(s) => Prompt::Text(s.clone()),
            Value::Array(ids) => Prompt::Ids(token_ids(ids).ok_or_else(|| {
                bad("`prompt` token ids must be integers in 0..2^32.".into())
            })?),
            v => return Err(bad(format!("`prompt` must be a string, an array of token ids, or one of those in an array; got an array holding {}.", kind(v)))),
        },
        Some(v) => {
            return Err(bad(format!(
                "`prompt` must be a string or an array of token ids, got {}.",
                kind(v)
            )))
        }
    };
    match &p {
        Prompt::Text(s) if s.is_empty() => Err(bad("`prompt` is empty.".into())),
        Prompt::Ids(ids) if ids.is_empty() => Err(bad("`prompt` is empty.".into())),
        _ => Ok(p),
    }
}

fn parse_messages(o: &Map<String, Value>) -> Result<Prompt, ApiError> {
    let bad = |what: String| ApiError::invalid("messages", what);
    let a = match field(o, "messages") {
        None => return Err(bad("You must provide messages.".into())),
        Some(Value::Array(a)) if a.is_empty() => return Err(bad("`messages` is empty.".into())),
        Some(Value::Array(a)) => a,
        Some(v) => {
            return Err(bad(format!(
                "`messages` must be an array, got {}.",
                kind(v)
            )))
        }
    };
    let mut out = Vec::with_capacity(a.len());
    for (i, m) in a.iter().enumerate() {
        let Value::Object(m) = m else {
            return Err(bad(format!(
                "messages[{i}] must be an object, got {}.",
                kind(m)
            )));
        };
        let role = match field(m, "role").and_then(Value::as_str) {
            Some(r @ ("system" | "user" | "assistant")) => r.to_string(),
            Some("developer") => "system".to_string(),
            Some(r) => {
                return Err(bad(format!(
                "messages[{i}].role {r:?} is not supported (system, developer, user, assistant)."
            )))
            }
            None => return Err(bad(format!("messages[{i}] needs a string `role`."))),
        };
        let content = match field(m, "content") {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Array(parts)) => {
                let mut text = String::new();
                for p in parts {
                    match (p.get("type").and_then(Value::as_str), p.get("text").and_then(Value::as_str)) {
                        (Some("text"), Some(t)) => text.push_str(t),
                        _ => return Err(bad(format!("messages[{i}].content: only text parts ({{\"type\": \"text\", \"text\": ...}}) are supported."))),
                    }
                }
                text
            }
            None => return Err(bad(format!("messages[{i}] needs a `content`."))),
            Some(v) => {
                return Err(bad(format!(
                    "messages[{i}].content must be a string or an array of text parts, got {}.",
                    kind(v)
                )))
            }
        };
        out.push((role, content));
    }
    Ok(Prompt::Messages(out))
}

/// One generated token's log-probabilities, as the responses carry them.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenLogprobs {
    /// The token's text (lossy UTF-8 of its bytes).
    pub text: String,
    /// The token's bytes.
    pub bytes: Vec<u8>,
    /// Its natural-log probability under the model (before temperature).
    pub logprob: f32,
    /// The most likely tokens: (text, bytes, logprob), most likely first.
    pub top: Vec<(String, Vec<u8>, f32)>,
}

/// `usage`.
pub fn usage(prompt: usize, completion: usize) -> Value {
    json!({
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    })
}

/// The `logprobs` object of a choice for `endpoint`, over `lps` (whose texts start at
/// `offset` characters into the completion text, for `text_offset`).
pub fn logprobs(endpoint: Endpoint, lps: &[TokenLogprobs], mut offset: usize) -> Value {
    match endpoint {
        Endpoint::Chat => {
            let content: Vec<Value> = lps
                .iter()
                .map(|t| {
                    json!({
                        "token": t.text,
                        "logprob": t.logprob,
                        "bytes": t.bytes,
                        "top_logprobs": t.top.iter().map(|(s, b, l)| json!({
                            "token": s, "logprob": l, "bytes": b,
                        })).collect::<Vec<_>>(),
                    })
                })
                .collect();
            json!({"content": content, "refusal": null})
        }
        Endpoint::Completions => {
            let mut text_offset = Vec::with_capacity(lps.len());
            for t in lps {
                text_offset.push(offset);
                offset += t.text.chars().count();
            }
            json!({
                "tokens": lps.iter().map(|t| &t.text).collect::<Vec<_>>(),
                "token_logprobs": lps.iter().map(|t| t.logprob).collect::<Vec<_>>(),
                "top_logprobs": lps.iter().map(|t| {
                    let mut m = Map::new();
                    for (s, _, l) in &t.top {
                        m.entry(s.clone()).or_insert(json!(l));
                    }
                    Value::Object(m)
                }).collect::<Vec<_>>(),
                "text_offset": text_offset,
            })
        }
    }
}

/// What identifies a response: `id`, `created`, `model`.
#[derive(Debug, Clone)]
pub struct Head {
    /// `cmpl-…` or `chatcmpl-…`.
    pub id: String,
    /// Unix seconds.
    pub created: u64,
    /// The served model's id.
    pub model: String,
    /// `system_fingerprint`.
    pub fingerprint: String,
}

/// A complete (non-streamed) response.
#[allow(clippy::too_many_arguments)]
pub fn response(
    endpoint: Endpoint,
    head: &Head,
    text: &str,
    finish: &str,
    lps: Option<&[TokenLogprobs]>,
    usage: Value,
    token_ids: Option<(&[u32], &[u32])>,
) -> Value {
    let lp = lps.map(|l| logprobs(endpoint, l, 0));
    let mut choice = match endpoint {
        Endpoint::Completions => json!({
            "index": 0, "text": text, "logprobs": lp, "finish_reason": finish,
        }),
        Endpoint::Chat => json!({
            "index": 0,
            "message": {"role": "assistant", "content": text, "refusal": null},
            "logprobs": lp,
            "finish_reason": finish,
        }),
    };
    let mut v = json!({
        "id": head.id,
        "object": match endpoint { Endpoint::Completions => "text_completion", Endpoint::Chat => "chat.completion" },
        "created": head.created,
        "model": head.model,
        "system_fingerprint": head.fingerprint,
        "choices": [],
        "usage": usage,
    });
    if let Some((prompt, out)) = token_ids {
        choice["token_ids"] = json!(out);
        v["prompt_token_ids"] = json!(prompt);
    }
    v["choices"] = json!([choice]);
    v
}

/// One streamed chunk: `text` (or the chat delta), with `finish` on the last one.
/// `first` adds the chat delta's `role`. `usage`: `Some(Value::Null)` when the
/// client asked for usage (every chunk then carries `"usage": null`).
#[allow(clippy::too_many_arguments)]
pub fn chunk(
    endpoint: Endpoint,
    head: &Head,
    text: Option<&str>,
    first: bool,
    finish: Option<&str>,
    lp: Option<Value>,
    token_ids: Option<&[u32]>,
    usage: Option<Value>,
) -> Value {
    let mut choice = match endpoint {
        Endpoint::Completions => json!({
            "index": 0, "text": text.unwrap_or(""), "logprobs": lp, "finish_reason": finish,
        }),
        Endpoint::Chat => {
            let mut delta = Map::new();
            if first {
                delta.insert("role".into(), json!("assistant"));
            }
            if let Some(t) = text {
                delta.insert("content".into(), json!(t));
            }
            json!({"index": 0, "delta": delta, "logprobs": lp, "finish_reason": finish})
        }
    };
    if let Some(ids) = token_ids {
        choice["token_ids"] = json!(ids);
    }
    let mut v = json!({
        "id": head.id,
        "object": match endpoint { Endpoint::Completions => "text_completion", Endpoint::Chat => "chat.completion.chunk" },
        "created": head.created,
        "model": head.model,
        "system_fingerprint": head.fingerprint,
        "choices": [choice],
    });
    if let Some(u) = usage {
        v["usage"] = u;
    }
    v
}

/// The usage-only chunk before `[DONE]` (`stream_options.include_usage`).
pub fn usage_chunk(endpoint: Endpoint, head: &Head, usage: Value) -> Value {
    json!({
        "id": head.id,
        "object": match endpoint { Endpoint::Completions => "text_completion", Endpoint::Chat => "chat.completion.chunk" },
        "created": head.created,
        "model": head.model,
        "system_fingerprint": head.fingerprint,
        "choices": [],
        "usage": usage,
    })
}

#[cfg(test)]
mod tests;
