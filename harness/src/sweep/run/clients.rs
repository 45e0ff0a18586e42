//! One run of a point at a concurrency above 1 (the `concurrency` axis,
//! [`crate::sweep::concurrency`]): `memdial serve` in the point's memory cgroup, that
//! many concurrent streaming clients on loopback, then SIGTERM.
//!
//! Each client sends its prompt as token ids to `/v1/completions` (greedy,
//! `max_tokens` of the spec, `stream: true`, `return_token_ids: true`) over its own
//! connection (hyper's HTTP/1 client) and times what it receives: TTFT from the
//! request sent to the first streamed token, inter-token latency between streamed
//! chunks that carry tokens.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use serde::Serialize;
use serde_json::{json, Value};

use super::cgroup::RunCgroup;
use super::child::{self, Child, Event};
use super::memwatch::interval_at;
use super::runner::{stderr_head, stderr_summary, RunOutcome};
use crate::store_flags::StoreFlags;
use crate::sweep::record::memory::MemSamples;
use crate::sweep::spec::Point;

/// The model id the served runs use.
const MODEL_ID: &str = "sweep";
/// Seconds running requests get after SIGTERM (they have all finished by then).
const SHUTDOWN_GRACE_S: f64 = 5.0;

/// Everything one served run needs.
pub struct ServeRequest<'a> {
    /// The `memdial` binary.
    pub bin: &'a Path,
    /// Model directory.
    pub model: &'a Path,
    /// The point (its IO mode, prefetch, cache, threads, start).
    pub point: &'a Point,
    /// Resolved budget, bytes.
    pub budget_bytes: u64,
    /// `--max-context`: positions per sequence.
    pub context: usize,
    /// Each client's prompt: (its index in the spec, its ids); client 0's is the point's.
    pub prompts: Vec<(usize, &'a [u32])>,
    /// `max_tokens` of each request.
    pub max_tokens: usize,
    /// The run's directory (server stdout/stderr, `requests.json`).
    pub run_dir: &'a Path,
    /// The whole run (load, requests, shutdown) is stopped after this long.
    pub timeout: Duration,
    /// Memory cgroup the server starts in.
    pub cgroup: Option<&'a RunCgroup>,
    /// Files whose page-cache residency is sampled.
    pub watch_files: &'a [PathBuf],
}

/// One request as its client saw it.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Request {
    /// Generated ids.
    pub ids: Vec<u32>,
    /// Request sent to first streamed token, seconds.
    pub ttft_s: Option<f64>,
    /// Gaps between streamed chunks carrying tokens, seconds.
    pub itl_s: Vec<f64>,
    /// The clients' start to this request's end, seconds.
    pub done_s: f64,
    /// Request sent to its stream's end, seconds (vLLM's request latency).
    pub e2e_s: Option<f64>,
    /// `finish_reason`.
    pub finish_reason: Option<String>,
    /// Why it failed.
    pub error: Option<String>,
}

/// A served run: the server's outcome (with the metrics of request 0 when every
/// request finished) and each request.
pub struct Served {
    /// As a child run's outcome, for the row's status and memory columns.
    pub outcome: RunOutcome,
    /// Every request, in client order (empty when the server never listened).
    pub requests: Vec<Request>,
    /// First request sent to last finished, seconds.
    pub clients_wall_s: Option<f64>,
    /// Each request's prompt (its index in the spec).
    pub prompt_index: Vec<usize>,
}

/// The server's store counters (`GET /metrics`) once every request finished.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct StoreBytes {
    /// `memdial_store_bytes_read_total`: every byte the store read (load included).
    pub total: u64,
    /// `memdial_decode_store_bytes_read_total`: bytes read by the steps that fed no
    /// prompt token.
    pub decode: u64,
    /// `memdial_decode_tokens_total`: the tokens those steps chose.
    pub decode_tokens: u64,
}

impl StoreBytes {
    /// The counters in a Prometheus text exposition; `None` when one is missing.
    pub fn parse(text: &str) -> Option<StoreBytes> {
        let get = |name: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
        };
        Some(StoreBytes {
            total: get("memdial_store_bytes_read_total")?,
            decode: get("memdial_decode_store_bytes_read_total")?,
            decode_tokens: get("memdial_decode_tokens_total")?,
        })
    }
}

impl ServeRequest<'_> {
    /// The `memdial serve` arguments.
    pub fn args(&self) -> Vec<String> {
        let p = self.point;
        let mut a: Vec<String> = [
            "serve",
            "--model",
            &self.model.display().to_string(),
            "--model-name",
            MODEL_ID,
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "--threads",
            &p.threads.to_string(),
            "--max-batch",
            &self.prompts.len().to_string(),
            "--queue",
            &self.prompts.len().to_string(),
            "--max-context",
            &self.context.to_string(),
            "--request-timeout",
            &format!("{}", self.timeout.as_secs_f64().max(1.0)),
            "--shutdown-grace",
            &format!("{SHUTDOWN_GRACE_S}"),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        a.extend(StoreFlags::budgeted(self.budget_bytes, p.io, p.prefetch, p.cache).to_args());
        if let Some(c) = p.axes.iter().find(|c| c.name == "start" && c.in_key) {
            a.extend(["--start".into(), c.value.clone()]);
        }
        a
    }

    /// Starts the server, drives the clients, stops the server.
    ///
    /// Errors: the run directory cannot be made or the server cannot be started
    /// (a server that fails is an outcome, not an error).
    pub fn execute(&self) -> Result<Served> {
        std::fs::create_dir_all(self.run_dir)
            .with_context(|| format!("cannot create {}", self.run_dir.display()))?;
        let _ = std::fs::remove_file(self.run_dir.join("metrics.json"));
        let err_path = self.run_dir.join("stderr.txt");
        let (cmd, out, err) = self.command(&err_path)?;
        let started = std::time::SystemTime::now();
        let sentinel = memdial::tools::noise::Sentinel::new(Some(self.model));
        let t0 = Instant::now();
        let before = sentinel.snapshot(None, 0.0);
        let mut child = child::spawn(&cmd, out.into(), err.into())
            .with_context(|| format!("cannot start {}", self.bin.display()))?;
        super::interrupt::set_child_supervisor(child.supervisor_pid() as i32);
        let mut mem = MemSamples::default();
        let mut next_sample = Instant::now();
        let mut after = None;
        let mut on_poll = |c: &Child, ev: Event| match ev {
            Event::Running if Instant::now() >= next_sample => {
                mem.sample(Some(c.pid()), self.watch_files, self.cgroup);
                next_sample = Instant::now() + interval_at(t0.elapsed());
            }
            Event::Running => {}
            Event::Exited => {
                after =
                    Some(sentinel.snapshot(Some(c.supervisor_pid()), t0.elapsed().as_secs_f64()))
            }
        };
        // Until it listens (or exits, or the run times out).
        let mut addr = None;
        let mut early: Option<ExitStatus> = None;
        while addr.is_none() && early.is_none() && t0.elapsed() < self.timeout {
            on_poll(&child, Event::Running);
            addr = listening_addr(&err_path);
            if addr.is_none() {
                early = child.try_wait()?;
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        let mut requests = vec![];
        let mut clients_wall_s = None;
        let mut store = None;
        if let Some(a) = addr {
            let left = self.timeout.saturating_sub(t0.elapsed());
            let bodies = self.bodies();
            let driver = std::thread::spawn(move || drive(a, bodies, left));
            while !driver.is_finished() {
                on_poll(&child, Event::Running);
                std::thread::sleep(Duration::from_millis(10));
            }
            let (rs, wall, st) = driver
                .join()
                .map_err(|_| anyhow::anyhow!("the sweep's client thread panicked"))??;
            requests = rs;
            clients_wall_s = wall;
            store = st;
        }
        let timed_out = early.is_none() && t0.elapsed() >= self.timeout;
        // SIGTERM, then at most the grace and 10 s more.
        let status = match early {
            Some(s) => s,
            None => child.stop(
                Duration::from_secs_f64(SHUTDOWN_GRACE_S + 10.0),
                &mut on_poll,
            )?,
        };
        super::interrupt::set_child_supervisor(0);
        let wall_s = t0.elapsed().as_secs_f64();
        let after = after.unwrap_or_else(|| sentinel.snapshot(None, wall_s));
        let noise = memdial::tools::noise::Noise::between(&before, &after, sentinel.ticks_per_s());
        mem.sample(None, self.watch_files, None);
        let exit_code = status.code();
        let (metrics, metrics_error, stderr_tail) = self.record(
            &requests,
            (addr.is_some(), store),
            timed_out,
            exit_code,
            &err_path,
        )?;
        use std::os::unix::process::ExitStatusExt;
        let by_harness = exit_code == Some(0) && metrics_error.is_some() && addr.is_some();
        Ok(Served {
            outcome: RunOutcome {
                // A request that failed fails the run even when the server stopped cleanly.
                exit_code: if by_harness { Some(1) } else { exit_code },
                exit_by_harness: by_harness,
                signal: status.signal(),
                timed_out,
                wall_s,
                metrics,
                metrics_error,
                stderr_tail,
                mem,
                started,
                noise,
            },
            requests,
            clients_wall_s,
            prompt_index: self.prompts.iter().map(|(i, _)| *i).collect(),
        })
    }

    /// The command of the server, and its stdout and stderr (`err_path`) in the run
    /// directory.
    fn command(&self, err_path: &Path) -> Result<(Command, std::fs::File, std::fs::File)> {
        let args = self.args();
        let cmd = match self.cgroup {
            Some(cg) => cg.command(self.bin, &args),
            None => {
                let mut c = Command::new(self.bin);
                c.args(&args);
                c
            }
        };
        let out = std::fs::File::create(self.run_dir.join("stdout.txt"))?;
        Ok((cmd, out, std::fs::File::create(err_path)?))
    }

    /// Each client's request body.
    fn bodies(&self) -> Vec<String> {
        self.prompts
            .iter()
            .map(|(_, ids)| {
                json!({
                    "model": MODEL_ID, "prompt": ids, "max_tokens": self.max_tokens,
                    "temperature": 0, "stream": true, "return_token_ids": true,
                })
                .to_string()
            })
            .collect()
    }

    /// Writes the run's record (`sweep::record::proof`): every request in
    /// `requests.json`, and request 0's figures as `metrics.json` once every request
    /// finished, with the store's bytes read during decode ÷ the tokens those steps
    /// chose when `store` has them. Returns (those metrics, why there are none, the
    /// line the row quotes).
    fn record(
        &self,
        requests: &[Request],
        (listened, store): (bool, Option<StoreBytes>),
        timed_out: bool,
        exit_code: Option<i32>,
        err_path: &Path,
    ) -> Result<(Option<Value>, Option<String>, String)> {
        crate::export::write_json(&self.run_dir.join("requests.json"), requests)?;
        let mut stderr_tail = stderr_summary(&stderr_head(err_path));
        let (mut metrics, mut metrics_error) = (None, None);
        if !listened {
            if !timed_out && stderr_tail.is_empty() {
                stderr_tail = "memdial serve exited before it listened".into();
            }
        } else if let Some((i, why)) = first_failure(requests, self.prompts.len()) {
            metrics_error = Some(format!("request {i} of {}: {why}", self.prompts.len()));
            // The failure, not the server's last line, is what the row says.
            stderr_tail = metrics_error.clone().unwrap_or_default();
        } else {
            let ids = &requests[0].ids;
            metrics = Some(json!({
                "schema_version": memdial::engine::metrics::SCHEMA_VERSION,
                "budget_bytes": self.budget_bytes,
                "io": self.point.io.as_str(),
                "prefetch": self.point.prefetch.as_str(),
                "cache": self.point.cache.as_str(),
                "threads": self.point.threads,
                "max_context": self.context,
                "prompt_tokens": self.prompts[0].1.len(),
                "generated_tokens": ids.len(),
                "output_ids": ids,
                "output_ids_sha256": memdial::engine::generate::ids_sha256(ids),
                "bytes_read_total": store.map(|b| b.total as f64),
                "bytes_read_per_token": store
                    .filter(|b| b.decode_tokens > 0)
                    .map(|b| b.decode as f64 / b.decode_tokens as f64),
            }));
        }
        if let Some(m) = &metrics {
            crate::export::write_json(&self.run_dir.join("metrics.json"), m)?;
        }
        if exit_code == Some(0) && metrics.is_none() && metrics_error.is_none() {
            metrics_error = Some(stderr_tail.clone());
        }
        Ok((metrics, metrics_error, stderr_tail))
    }
}

/// The address in the server's `listening on http://ADDR` line, once printed.
fn listening_addr(stderr: &Path) -> Option<SocketAddr> {
    let text = std::fs::read_to_string(stderr).ok()?;
    let rest = text.split("listening on http://").nth(1)?;
    rest.split_whitespace().next()?.parse().ok()
}

/// The first request that did not finish with as many ids as it says, with why.
fn first_failure(requests: &[Request], clients: usize) -> Option<(usize, String)> {
    if requests.len() != clients {
        return Some((
            requests.len(),
            format!("{} of {clients} requests answered", requests.len()),
        ));
    }
    requests.iter().enumerate().find_map(|(i, r)| {
        if let Some(e) = &r.error {
            Some((i, e.clone()))
        } else if r.finish_reason.is_none() {
            Some((i, "the stream ended without a finish_reason".into()))
        } else if r.ids.is_empty() {
            Some((i, "no token ids streamed".into()))
        } else {
            None
        }
    })
}

/// Runs one concurrent client per body against `addr` on a current-thread runtime,
/// at most `within`: each request, the time from the first sent to the last
/// finished, and the server's store counters then.
fn drive(
    addr: SocketAddr,
    bodies: Vec<String>,
    within: Duration,
) -> Result<(Vec<Request>, Option<f64>, Option<StoreBytes>)> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the clients' runtime")?;
    rt.block_on(async move {
        let t0 = Instant::now();
        let tasks = bodies.into_iter().map(|body| {
            let body = Bytes::from(body);
            async move {
                let mut r = Request::default();
                if let Err(e) = stream_one(addr, body, &mut r).await {
                    r.error = Some(format!("{e:#}"));
                }
                r.done_s = t0.elapsed().as_secs_f64();
                r
            }
        });
        match tokio::time::timeout(within, futures_util::future::join_all(tasks)).await {
            Ok(rs) => {
                let wall = rs.iter().map(|r| r.done_s).fold(0.0, f64::max);
                let scrape = tokio::time::timeout(Duration::from_secs(10), scrape(addr));
                let store = match scrape.await {
                    Ok(Ok(text)) => StoreBytes::parse(&text),
                    _ => None,
                };
                Ok((rs, Some(wall), store))
            }
            Err(_) => Ok((vec![], None, None)),
        }
    })
}

/// The server's `GET /metrics` text.
async fn scrape(addr: SocketAddr) -> Result<String> {
    let tcp = tokio::net::TcpStream::connect(addr).await?;
    let (mut tx, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tcp)).await?;
    tokio::spawn(conn);
    let req = hyper::Request::get("/metrics")
        .header(hyper::header::HOST, addr.to_string())
        .body(Full::new(Bytes::new()))?;
    let res = tx.send_request(req).await?;
    if res.status() != hyper::StatusCode::OK {
        bail!("GET /metrics: HTTP {}", res.status());
    }
    let b = res.into_body().collect().await?.to_bytes();
    Ok(String::from_utf8_lossy(&b).into_owned())
}

/// One streamed completion into `r`.
async fn stream_one(addr: SocketAddr, body: Bytes, r: &mut Request) -> Result<()> {
    let sent = Instant::now();
    let tcp = tokio::net::TcpStream::connect(addr)
        .await
        .with_context(|| format!("cannot connect to {addr}"))?;
    let (mut tx, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tcp)).await?;
    tokio::spawn(conn);
    let req = hyper::Request::post("/v1/completions")
        .header(hyper::header::HOST, addr.to_string())
        .header(hyper::header::CONTENT_TYPE, "application/json")
        .body(Full::new(body))?;
    let mut res = tx.send_request(req).await?;
    let status = res.status();
    if status != hyper::StatusCode::OK {
        let b = res.into_body().collect().await?.to_bytes();
        bail!(
            "HTTP {status}: {}",
            String::from_utf8_lossy(&b)
                .chars()
                .take(300)
                .collect::<String>()
        );
    }
    let mut buf: Vec<u8> = vec![];
    let mut last: Option<Instant> = None;
    let mut done = false;
    while let Some(frame) = res.body_mut().frame().await {
        let frame = frame?;
        let Some(data) = frame.data_ref() else {
            continue;
        };
        buf.extend_from_slice(data);
        while let Some(end) = buf.windows(2).position(|w| w == b"\n\n") {
            let event: Vec<u8> = buf.drain(..end + 2).collect();
            for line in String::from_utf8_lossy(&event).lines() {
                let Some(d) = line.strip_prefix("data:").map(str::trim) else {
                    continue;
                };
                if d == "[DONE]" {
                    done = true;
                    continue;
                }
                let v: Value = serde_json::from_str(d).context("a streamed event is not JSON")?;
                if let Some(e) = v.get("error") {
                    bail!("error event: {e}");
                }
                let c = &v["choices"][0];
                let ids: Vec<u32> = c["token_ids"]
                    .as_array()
                    .map(|a| {
                        a.iter()
                            .filter_map(|x| x.as_u64())
                            .map(|x| x as u32)
                            .collect()
                    })
                    .unwrap_or_default();
                if !ids.is_empty() {
                    let now = Instant::now();
                    match last {
                        None => r.ttft_s = Some((now - sent).as_secs_f64()),
                        Some(l) => r.itl_s.push((now - l).as_secs_f64()),
                    }
                    last = Some(now);
                    r.ids.extend(ids);
                }
                if let Some(f) = c["finish_reason"].as_str() {
                    r.finish_reason = Some(f.to_string());
                }
            }
        }
    }
    if !done {
        bail!("the stream ended without `data: [DONE]`");
    }
    r.e2e_s = Some(sent.elapsed().as_secs_f64());
    Ok(())
}

/// Fills the row's concurrency columns (and goodput under `slo`) from a served run's
/// requests.
pub fn fill_row(
    row: &mut crate::sweep::record::row::Row,
    s: &Served,
    slo: Option<&crate::sweep::goodput::Slo>,
) {
    if s.outcome.metrics.is_none() {
        return;
    }
    let total: usize = s.requests.iter().map(|r| r.ids.len()).sum();
    row.aggregate_tokens_per_s = s
        .clients_wall_s
        .filter(|w| *w > 0.0)
        .map(|w| total as f64 / w);
    let ttft: Vec<f64> = s.requests.iter().filter_map(|r| r.ttft_s).collect();
    let itl: Vec<f64> = s.requests.iter().flat_map(|r| r.itl_s.clone()).collect();
    row.ttft_p50_s = memdial::util::stats::percentile(&ttft, 0.5);
    row.ttft_p90_s = memdial::util::stats::percentile(&ttft, 0.9);
    row.itl_p50_s = memdial::util::stats::percentile(&itl, 0.5);
    row.itl_p90_s = memdial::util::stats::percentile(&itl, 0.9);
    row.requests_output_ids = s.requests.iter().map(|r| r.ids.clone()).collect();
    row.requests_prompt_index = s.prompt_index.clone();
    if let (Some(slo), Some(wall)) = (slo, s.clients_wall_s) {
        // Every request finished (the metrics say so), so each has its timings.
        let timings: Vec<_> = s.requests.iter().filter_map(timing).collect();
        (row.goodput_fraction, row.goodput_requests_per_s) =
            crate::sweep::goodput::goodput(slo, &timings, wall);
    }
}

/// A finished request's timings for goodput.
fn timing(r: &Request) -> Option<crate::sweep::goodput::Timing> {
    Some(crate::sweep::goodput::Timing {
        ttft_s: r.ttft_s?,
        e2e_s: r.e2e_s?,
        output_tokens: r.ids.len(),
    })
}

#[cfg(test)]
mod tests {
    use super::StoreBytes;

    /// The three counters out of a `/metrics` text (names as `serve::metrics` writes
    /// them, HELP/TYPE lines around); a text without one of them gives `None`.
    #[test]
    fn store_bytes_from_the_metrics_text() {
        let text = "# HELP memdial_store_bytes_read_total Bytes.\n\
                    # TYPE memdial_store_bytes_read_total counter\n\
                    memdial_store_bytes_read_total 9000\n\
                    memdial_decode_store_bytes_read_total 600\n\
                    memdial_decode_tokens_total 12\n";
        assert_eq!(
            StoreBytes::parse(text),
            Some(StoreBytes {
                total: 9000,
                decode: 600,
                decode_tokens: 12
            })
        );
        assert_eq!(
            StoreBytes::parse("memdial_store_bytes_read_total 1\n"),
            None
        );
    }
}
