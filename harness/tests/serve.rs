//! `memdial serve` over loopback: bad requests → 4xx JSON errors (a table), each
//! request's ids identical to `memdial run` whatever else is in the batch, the
//! stream format, 429 beyond the queue, a disconnect freeing its sequence, the
//! request time limit, and a bounded load test (concurrent, slow and disconnecting
//! streaming clients, then SIGTERM with requests in flight).
//!
//! Every request goes to 127.0.0.1; every loop is bounded in count and time.

mod serve_util;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use memdial_testkit as testkit;
use serde_json::{json, Value};
use serve_util::{run_ids, stream_ids, Server, BIN};

fn tiny() -> &'static Path {
    static D: OnceLock<PathBuf> = OnceLock::new();
    D.get_or_init(|| {
        let d = testkit::until_exit(testkit::scratch!("serve-tiny")).join("tiny-k3");
        testkit::fixture(BIN, "tiny-k3", &d)
    })
}

fn metric(s: &Server, name: &str) -> f64 {
    let r = s.get("/metrics");
    assert_eq!(r.status, 200);
    let text = String::from_utf8(r.body).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(name).and_then(|v| v.strip_prefix(' ')))
        .unwrap_or_else(|| panic!("no {name} in /metrics"))
        .parse()
        .unwrap()
}

/// One row of the bad-request table: what is sent, and the error expected.
struct Bad {
    what: &'static str,
    method_path: (&'static str, &'static str),
    headers: &'static str,
    body: String,
    status: u16,
    kind: &'static str,
    code: Option<&'static str>,
    param: Option<&'static str>,
}

fn bad_requests_get_4xx_json_errors() {
    let s = Server::start(
        tiny(),
        &[
            "--api-key",
            "sk-test",
            "--max-body",
            "4096",
            "--max-context",
            "64",
        ],
    );
    let key = "Authorization: Bearer sk-test\r\n";
    let c = ("POST", "/v1/completions");
    let ch = ("POST", "/v1/chat/completions");
    let comp = |extra: &str| format!(r#"{{"model":"tiny-k3","prompt":[1,2,3]{extra}}}"#);
    let chat = |extra: &str| {
        format!(r#"{{"model":"tiny-k3","messages":[{{"role":"user","content":"hi"}}]{extra}}}"#)
    };
    let long: Vec<String> = (0..70).map(|i| (i % 100).to_string()).collect();
    let row = |what, method_path, headers, body: String, status, kind, code, param| Bad {
        what,
        method_path,
        headers,
        body,
        status,
        kind,
        code,
        param,
    };
    let ir = "invalid_request_error";
    let table = vec![
        row(
            "no API key",
            c,
            "",
            comp(""),
            401,
            "authentication_error",
            Some("invalid_api_key"),
            None,
        ),
        row(
            "wrong API key",
            c,
            "Authorization: Bearer nope\r\n",
            comp(""),
            401,
            "authentication_error",
            Some("invalid_api_key"),
            None,
        ),
        row(
            "malformed JSON",
            c,
            key,
            "{\"model\": ".into(),
            400,
            ir,
            None,
            None,
        ),
        row("not an object", c, key, "[1,2]".into(), 400, ir, None, None),
        row(
            "unknown model",
            c,
            key,
            r#"{"model":"gpt-9","prompt":"x"}"#.into(),
            404,
            ir,
            Some("model_not_found"),
            Some("model"),
        ),
        row(
            "no model",
            c,
            key,
            r#"{"prompt":"x"}"#.into(),
            400,
            ir,
            None,
            Some("model"),
        ),
        row(
            "no prompt",
            c,
            key,
            r#"{"model":"tiny-k3"}"#.into(),
            400,
            ir,
            None,
            Some("prompt"),
        ),
        row(
            "prompt longer than the context",
            c,
            key,
            format!(r#"{{"model":"tiny-k3","prompt":[{}]}}"#, long.join(",")),
            400,
            ir,
            Some("context_length_exceeded"),
            Some("prompt"),
        ),
        row(
            "prompt + max_tokens over the context",
            c,
            key,
            comp(r#","max_tokens":62"#),
            400,
            ir,
            Some("context_length_exceeded"),
            Some("prompt"),
        ),
        row(
            "max_tokens 0",
            c,
            key,
            comp(r#","max_tokens":0"#),
            400,
            ir,
            None,
            Some("max_tokens"),
        ),
        row(
            "max_tokens a string",
            c,
            key,
            comp(r#","max_tokens":"8""#),
            400,
            ir,
            None,
            Some("max_tokens"),
        ),
        row(
            "temperature out of range",
            c,
            key,
            comp(r#","temperature":2.5"#),
            400,
            ir,
            None,
            Some("temperature"),
        ),
        row(
            "top_p 0",
            c,
            key,
            comp(r#","top_p":0"#),
            400,
            ir,
            None,
            Some("top_p"),
        ),
        row("n 2", c, key, comp(r#","n":2"#), 400, ir, None, Some("n")),
        row(
            "five stop strings",
            c,
            key,
            comp(r#","stop":["a","b","c","d","e"]"#),
            400,
            ir,
            None,
            Some("stop"),
        ),
        row(
            "logprobs 6",
            c,
            key,
            comp(r#","logprobs":6"#),
            400,
            ir,
            None,
            Some("logprobs"),
        ),
        row(
            "a token id outside the vocabulary",
            c,
            key,
            r#"{"model":"tiny-k3","prompt":[1,99999999]}"#.into(),
            400,
            ir,
            None,
            Some("prompt"),
        ),
        row(
            "a negative token id",
            c,
            key,
            r#"{"model":"tiny-k3","prompt":[1,-2]}"#.into(),
            400,
            ir,
            None,
            Some("prompt"),
        ),
        row(
            "echo",
            c,
            key,
            comp(r#","echo":true"#),
            400,
            ir,
            None,
            Some("echo"),
        ),
        row(
            "stream_options without stream",
            c,
            key,
            comp(r#","stream_options":{"include_usage":true}"#),
            400,
            ir,
            None,
            Some("stream_options"),
        ),
        row(
            "no messages",
            ch,
            key,
            r#"{"model":"tiny-k3","messages":[]}"#.into(),
            400,
            ir,
            None,
            Some("messages"),
        ),
        row(
            "a tool message",
            ch,
            key,
            r#"{"model":"tiny-k3","messages":[{"role":"tool","content":"x"}]}"#.into(),
            400,
            ir,
            None,
            Some("messages"),
        ),
        row(
            "top_logprobs without logprobs",
            ch,
            key,
            chat(r#","top_logprobs":3"#),
            400,
            ir,
            None,
            Some("top_logprobs"),
        ),
        row(
            "top_logprobs 21",
            ch,
            key,
            chat(r#","logprobs":true,"top_logprobs":21"#),
            400,
            ir,
            None,
            Some("top_logprobs"),
        ),
        row(
            "a body over --max-body",
            c,
            key,
            comp(&format!(r#","user":"{}""#, "x".repeat(5000))),
            413,
            ir,
            Some("request_too_large"),
            None,
        ),
        row(
            "unknown route",
            ("GET", "/v1/nothing"),
            key,
            String::new(),
            404,
            ir,
            Some("unknown_url"),
            None,
        ),
        row(
            "wrong method",
            ("DELETE", "/v1/models"),
            key,
            String::new(),
            405,
            ir,
            Some("method_not_allowed"),
            None,
        ),
        row(
            "GET on a POST route",
            ("GET", "/v1/completions"),
            key,
            String::new(),
            405,
            ir,
            Some("method_not_allowed"),
            None,
        ),
    ];
    let mut failures = Vec::new();
    for b in &table {
        let head = format!(
            "{} {} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\n{}Content-Length: {}\r\n\r\n",
            b.method_path.0,
            b.method_path.1,
            b.headers,
            b.body.len()
        );
        let r = serve_util::request(s.port, &head, b.body.as_bytes());
        let v: Value = serde_json::from_slice(&r.body).unwrap_or(Value::Null);
        let e = &v["error"];
        let ok = r.status == b.status
            && r.header("content-type") == Some("application/json")
            && e["message"].as_str().is_some_and(|m| !m.is_empty())
            && e["type"] == b.kind
            && b.code.is_none_or(|c| e["code"] == c)
            && b.param.is_none_or(|p| e["param"] == p);
        if !ok {
            failures.push(format!(
                "{}: expected {} {} code {:?} param {:?}, got {} {}",
                b.what,
                b.status,
                b.kind,
                b.code,
                b.param,
                r.status,
                String::from_utf8_lossy(&r.body)
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // /health needs no key; the others do, and work with it.
    assert_eq!(s.get("/health").status, 200);
    assert_eq!(s.get("/v1/models").status, 401);
    let r = serve_util::request(
        s.port,
        &format!("GET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n{key}\r\n"),
        b"",
    );
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["data"][0]["id"], "tiny-k3");
}

/// The prompts and settings of the identity test: different lengths, greedy and
/// seeded sampling.
fn cases() -> Vec<(Vec<u32>, usize, f32, u64)> {
    (0..7u32)
        .map(|i| {
            let len = [1, 5, 17, 3, 29, 8, 2][i as usize];
            let prompt = (0..len).map(|j| (i * 131 + j * 17 + 5) % 2000).collect();
            let temperature = if i % 2 == 0 { 0.0 } else { 0.9 };
            (
                prompt,
                6 + (i as usize % 3) * 5,
                temperature,
                100 + i as u64,
            )
        })
        .collect()
}

fn ids_match_memdial_run_whatever_is_in_the_batch() {
    let want: Vec<Vec<u32>> = cases()
        .iter()
        .map(|(p, m, t, s)| run_ids(tiny(), p, *m, *t, *s))
        .collect();
    // Batch 3 and a prefill chunk of 4: the prompts join at different steps, the
    // long ones are fed over several, beside the others' decodes.
    let s = Arc::new(Server::start(
        tiny(),
        &[
            "--max-batch",
            "3",
            "--prefill-chunk",
            "4",
            "--max-context",
            "128",
        ],
    ));
    let got: Vec<Vec<u32>> = std::thread::scope(|sc| {
        let hs: Vec<_> = cases()
            .into_iter()
            .enumerate()
            .map(|(i, (p, m, t, seed))| {
                let s = s.clone();
                sc.spawn(move || {
                    let body = json!({"model": "tiny-k3", "prompt": p, "max_tokens": m,
                        "temperature": t, "seed": seed, "return_token_ids": true, "stream": i % 2 == 1});
                    if i % 2 == 1 {
                        let ev = s.stream("/v1/completions", &body).rest();
                        let (ids, finish, done) = stream_ids(&ev);
                        assert!(done && finish.is_some(), "{ev:?}");
                        ids
                    } else {
                        let r = s.post_json("/v1/completions", &body);
                        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
                        let v = r.json();
                        v["choices"][0]["token_ids"]
                            .as_array()
                            .unwrap()
                            .iter()
                            .map(|x| x.as_u64().unwrap() as u32)
                            .collect()
                    }
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(g, w, "request {i}: served ids differ from memdial run");
    }
}

fn stream_format_is_openai_chunks_ending_with_done() {
    let s = Server::start(tiny(), &[]);
    let body = json!({"model": "tiny-k3", "messages": [{"role": "user", "content": "Hello"}],
        "max_tokens": 9, "temperature": 0, "logprobs": true, "top_logprobs": 2});
    let whole = s.post_json("/v1/chat/completions", &body).json();
    let mut sb = body.clone();
    sb["stream"] = json!(true);
    sb["stream_options"] = json!({"include_usage": true});
    let mut st = s.stream("/v1/chat/completions", &sb);
    assert_eq!(st.status, 200);
    assert!(serve_util_header(&st.headers, "content-type").starts_with("text/event-stream"));
    let ev = st.rest();
    assert_eq!(ev.last().map(String::as_str), Some("[DONE]"));
    let chunks: Vec<Value> = ev[..ev.len() - 1]
        .iter()
        .map(|e| serde_json::from_str(e).unwrap())
        .collect();
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    let mut text = String::new();
    let mut lp = 0;
    for c in &chunks {
        assert_eq!(c["object"], "chat.completion.chunk");
        assert_eq!(c["id"], chunks[0]["id"]);
        if let Some(t) = c["choices"][0]["delta"]["content"].as_str() {
            text.push_str(t);
        }
        lp += c["choices"][0]["logprobs"]["content"]
            .as_array()
            .map_or(0, Vec::len);
    }
    let usage = chunks.last().unwrap();
    assert_eq!(usage["choices"], json!([]));
    assert_eq!(usage["usage"], whole["usage"]);
    let fin = &chunks[chunks.len() - 2];
    assert_eq!(
        fin["choices"][0]["finish_reason"],
        whole["choices"][0]["finish_reason"]
    );
    assert!(chunks[..chunks.len() - 1]
        .iter()
        .all(|c| c["usage"].is_null()));
    assert_eq!(
        text,
        whole["choices"][0]["message"]["content"].as_str().unwrap()
    );
    let wl = whole["choices"][0]["logprobs"]["content"]
        .as_array()
        .unwrap();
    assert_eq!(lp, wl.len());
    // Each logprob is ≤ 0 and the chosen token's is the top one under greedy decoding.
    for t in wl {
        let l = t["logprob"].as_f64().unwrap();
        assert!(l <= 0.0);
        assert_eq!(t["top_logprobs"].as_array().unwrap().len(), 2);
        assert_eq!(t["top_logprobs"][0]["logprob"].as_f64().unwrap(), l);
    }
}

fn serve_util_header<'a>(h: &'a [(String, String)], k: &str) -> &'a str {
    h.iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(k))
        .map_or("", |(_, v)| v)
}

/// A long streamed request that keeps its sequence busy (ignore_eos).
fn long_body(max_tokens: usize) -> Value {
    json!({"model": "tiny-k3", "prompt": [1, 2, 3], "max_tokens": max_tokens, "temperature": 0,
        "ignore_eos": true, "stream": true})
}

fn full_queue_gets_429_and_a_disconnect_frees_the_sequence() {
    let s = Server::start(
        tiny(),
        &["--max-batch", "1", "--queue", "0", "--max-context", "4100"],
    );
    let mut a = s.stream("/v1/completions", &long_body(4000));
    assert!(a.next_event().is_some());
    let r = s.post_json(
        "/v1/completions",
        &json!({"model": "tiny-k3", "prompt": [5], "max_tokens": 2}),
    );
    assert_eq!(r.status, 429, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.header("retry-after"), Some("1"));
    assert_eq!(r.json()["error"]["code"], "rate_limit_exceeded");
    drop(a);
    let t = Instant::now();
    while metric(&s, "memdial_requests_cancelled_total") < 1.0 {
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "the disconnected client's sequence was not freed"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let r = s.post_json(
        "/v1/completions",
        &json!({"model": "tiny-k3", "prompt": [5], "max_tokens": 2}),
    );
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert!(metric(&s, "memdial_requests_rejected_total") >= 1.0);
}

/// A client that closes its connection while its non-streamed request decodes frees
/// the sequence (hyper reads for end of file while the response is made and drops the
/// handler, which closes the sequence's events), `Connection: close` or not.
fn a_non_streamed_disconnect_frees_the_sequence() {
    use std::io::Write;
    let s = Server::start(
        tiny(),
        &["--max-batch", "1", "--queue", "0", "--max-context", "4100"],
    );
    let mut b = long_body(4000);
    b["stream"] = json!(false);
    let body = b.to_string();
    let mut c = std::net::TcpStream::connect(("127.0.0.1", s.port)).unwrap();
    write!(
        c,
        "POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let t = Instant::now();
    while metric(&s, "memdial_sequences_running") < 1.0 {
        assert!(t.elapsed() < Duration::from_secs(30), "never admitted");
        std::thread::sleep(Duration::from_millis(10));
    }
    drop(c);
    let t = Instant::now();
    while metric(&s, "memdial_requests_cancelled_total") < 1.0 {
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "the disconnected non-streamed request's sequence was not freed"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let r = s.post_json(
        "/v1/completions",
        &json!({"model": "tiny-k3", "prompt": [5], "max_tokens": 2}),
    );
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
}

/// A connection that sends part of a request head (or nothing) is closed after
/// `--header-timeout`; the server goes on serving others.
fn a_partial_request_head_is_closed_after_the_header_timeout() {
    use std::io::{Read, Write};
    let s = Server::start(tiny(), &["--header-timeout", "0.5"]);
    let mut idle = std::net::TcpStream::connect(("127.0.0.1", s.port)).unwrap();
    let mut part = std::net::TcpStream::connect(("127.0.0.1", s.port)).unwrap();
    part.write_all(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")
        .unwrap();
    for c in [&mut idle, &mut part] {
        c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let t = Instant::now();
        let mut buf = Vec::new();
        // Ends with EOF (or a reset) when the server closes it; a timeout is the bug.
        match c.read_to_end(&mut buf) {
            Ok(_) => {}
            Err(e) => assert!(
                e.kind() == std::io::ErrorKind::ConnectionReset,
                "the connection was not closed: {e} after {:?}",
                t.elapsed()
            ),
        }
        assert!(t.elapsed() < Duration::from_secs(20));
    }
    assert_eq!(s.get("/health").status, 200);
    assert!(
        s.log().is_empty() || !s.log().contains("panicked"),
        "{}",
        s.log()
    );
}

fn requests_past_the_time_limit_end_with_an_error() {
    let s = Server::start(
        tiny(),
        &["--request-timeout", "0.3", "--max-context", "4100"],
    );
    let ev = s.stream("/v1/completions", &long_body(4000)).rest();
    assert_eq!(ev.last().map(String::as_str), Some("[DONE]"), "{ev:?}");
    let err: Value = serde_json::from_str(&ev[ev.len() - 2]).unwrap();
    assert_eq!(err["error"]["code"], "timeout", "{err}");
    let mut b = long_body(4000);
    b["stream"] = json!(false);
    let r = s.post_json("/v1/completions", &b);
    assert_eq!(r.status, 504);
    assert_eq!(r.json()["error"]["type"], "timeout_error");
}

/// The bounded load test: `CLIENTS` streaming clients loop for `SECS` seconds (at
/// most `MAX_REQ` requests each) beside one slow reader and one client that
/// disconnects mid-stream; then SIGTERM with requests in flight.
fn load_test_loses_nothing_and_sigterm_ends_every_stream() {
    const CLIENTS: usize = 5;
    const SECS: u64 = 4;
    const MAX_REQ: usize = 200;
    const BUDGET: u64 = 16 << 20;
    const SLACK: u64 = 32 << 20;
    let prompts: Vec<Vec<u32>> = vec![vec![7], vec![11, 12, 13, 14, 15, 16], vec![21, 22, 23]];
    let want: Vec<Vec<u32>> = prompts
        .iter()
        .map(|p| run_ids(tiny(), p, 12, 0.0, 0))
        .collect();
    let s = Arc::new(Server::start(
        tiny(),
        &[
            "--max-batch",
            "4",
            "--queue",
            "32",
            "--max-context",
            "4100",
            "--budget",
            "16MiB",
            "--io",
            "buffered",
            "--shutdown-grace",
            "1",
        ],
    ));
    let stop = Arc::new(AtomicBool::new(false));
    let seen_ids = Arc::new(Mutex::new(std::collections::HashSet::new()));
    let done = Arc::new(AtomicUsize::new(0));
    let peak_anon = Arc::new(Mutex::new(0f64));
    let deadline = Instant::now() + Duration::from_secs(SECS);
    std::thread::scope(|sc| {
        for c in 0..CLIENTS {
            let (s, seen, done, want, prompts) = (
                s.clone(),
                seen_ids.clone(),
                done.clone(),
                want.clone(),
                prompts.clone(),
            );
            sc.spawn(move || {
                for k in 0..MAX_REQ {
                    if Instant::now() >= deadline {
                        break;
                    }
                    let i = (c + k) % prompts.len();
                    let body = json!({"model": "tiny-k3", "prompt": prompts[i], "max_tokens": 12,
                        "temperature": 0, "stream": true, "return_token_ids": true});
                    let ev = s.stream("/v1/completions", &body).rest();
                    let (ids, finish, end) = stream_ids(&ev);
                    assert!(end && finish.is_some(), "client {c} request {k}: {ev:?}");
                    assert_eq!(ids, want[i], "client {c} request {k}");
                    assert_eq!(ev.iter().filter(|e| *e == "[DONE]").count(), 1);
                    let id = serde_json::from_str::<Value>(&ev[0]).unwrap()["id"]
                        .as_str()
                        .unwrap()
                        .to_string();
                    assert!(
                        seen.lock().unwrap().insert(id),
                        "a response id was used twice"
                    );
                    done.fetch_add(1, Ordering::SeqCst);
                }
            });
        }
        // A slow reader: one long request read 1 event per 50 ms; the others go on.
        let (s2, done2) = (s.clone(), done.clone());
        sc.spawn(move || {
            let mut st = s2.stream("/v1/completions", &long_body(60));
            let before = done2.load(Ordering::SeqCst);
            let mut n = 0;
            while let Some(e) = st.next_event() {
                n += 1;
                if e == "[DONE]" {
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            assert!(n >= 60);
            assert!(
                done2.load(Ordering::SeqCst) > before,
                "the others finished nothing while one client read slowly"
            );
        });
        // A client that leaves mid-stream, repeatedly.
        let s3 = s.clone();
        sc.spawn(move || {
            for _ in 0..20 {
                if Instant::now() >= deadline {
                    break;
                }
                let mut st = s3.stream("/v1/completions", &long_body(3000));
                assert!(st.next_event().is_some());
                drop(st);
            }
        });
        let (s4, stop4, peak) = (s.clone(), stop.clone(), peak_anon.clone());
        sc.spawn(move || {
            while !stop4.load(Ordering::SeqCst)
                && Instant::now() < deadline + Duration::from_secs(60)
            {
                let v = metric(&s4, "memdial_rss_anon_bytes");
                let mut p = peak.lock().unwrap();
                *p = p.max(v);
                drop(p);
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        std::thread::sleep(Duration::from_secs(SECS));
        // Let the client loops end, then stop the sampler.
        while Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        std::thread::sleep(Duration::from_millis(200));
        stop.store(true, Ordering::SeqCst);
    });
    let n = done.load(Ordering::SeqCst);
    assert!(n >= CLIENTS, "only {n} requests completed");
    let peak = *peak_anon.lock().unwrap();
    assert!(
        peak > 0.0 && peak <= (BUDGET + SLACK) as f64,
        "RssAnon {peak} > budget {BUDGET} + {SLACK}"
    );
    assert!(metric(&s, "memdial_requests_cancelled_total") >= 1.0);
    // SIGTERM with 3 long streams in flight: each ends with a final event and [DONE].
    let mut streams: Vec<_> = (0..3)
        .map(|_| s.stream("/v1/completions", &long_body(4000)))
        .collect();
    for st in &mut streams {
        assert!(st.next_event().is_some());
    }
    let mut s = Arc::into_inner(s).expect("no other handle");
    let t = Instant::now();
    unsafe {
        libc::kill(s.child.id() as i32, libc::SIGTERM);
    }
    for st in &mut streams {
        let ev = st.rest();
        assert_eq!(ev.last().map(String::as_str), Some("[DONE]"), "{ev:?}");
        let last: Value = serde_json::from_str(&ev[ev.len() - 2]).unwrap();
        let finished = last["choices"][0]["finish_reason"].is_string();
        assert!(
            finished || last["error"]["code"] == "shutting_down",
            "{last}"
        );
    }
    let code = s.terminate(Duration::from_secs(20));
    assert_eq!(code, Some(0), "{}", s.log());
    assert!(t.elapsed() < Duration::from_secs(20));
}

fn main() -> ExitCode {
    testkit::main(
        include_str!("serve.rs"),
        testkit::trials![
            bad_requests_get_4xx_json_errors,
            ids_match_memdial_run_whatever_is_in_the_batch,
            stream_format_is_openai_chunks_ending_with_done,
            full_queue_gets_429_and_a_disconnect_frees_the_sequence,
            requests_past_the_time_limit_end_with_an_error,
            a_non_streamed_disconnect_frees_the_sequence,
            a_partial_request_head_is_closed_after_the_header_timeout,
            load_test_loses_nothing_and_sigterm_ends_every_stream,
        ],
    )
}
