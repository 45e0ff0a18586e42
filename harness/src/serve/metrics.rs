//! The server's counters, served as Prometheus text at `GET /metrics`.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// Upper bounds (seconds) of the latency histograms' buckets.
const BUCKETS: [f64; 12] = [
    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

#[derive(Debug, Default, Clone)]
struct Histogram {
    counts: [u64; BUCKETS.len()],
    sum: f64,
    count: u64,
}

impl Histogram {
    fn observe(&mut self, v: f64) {
        for (c, b) in self.counts.iter_mut().zip(BUCKETS) {
            if v <= b {
                *c += 1;
            }
        }
        self.sum += v;
        self.count += 1;
    }

    fn render(&self, out: &mut String, name: &str, help: &str) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        for (c, b) in self.counts.iter().zip(BUCKETS) {
            let _ = writeln!(out, "{name}_bucket{{le=\"{b}\"}} {c}");
        }
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {}", self.count);
        let _ = writeln!(out, "{name}_sum {}\n{name}_count {}", self.sum, self.count);
    }
}

#[derive(Debug, Default)]
struct Hists {
    ttft: Histogram,
    step: Histogram,
    requests: std::collections::BTreeMap<(String, u16), u64>,
}

/// Counters shared by the HTTP side and the model's thread.
#[derive(Debug, Default)]
pub struct Metrics {
    prompt_tokens: AtomicU64,
    generated_tokens: AtomicU64,
    steps: AtomicU64,
    cancelled: AtomicU64,
    timeouts: AtomicU64,
    rejected: AtomicU64,
    engine_errors: AtomicU64,
    running: AtomicU64,
    waiting: AtomicU64,
    store_bytes_read: AtomicU64,
    decode_store_bytes_read: AtomicU64,
    decode_tokens: AtomicU64,
    hists: Mutex<Hists>,
}

impl Metrics {
    /// A finished HTTP exchange on `route` with `status`.
    pub fn count_request(&self, route: &str, status: u16) {
        let mut h = self.hists.lock().unwrap_or_else(|p| p.into_inner());
        *h.requests.entry((route.to_string(), status)).or_default() += 1;
    }
    /// A request refused with 429.
    pub fn count_rejected(&self) {
        self.rejected.fetch_add(1, Ordering::Relaxed);
    }
    /// A request's prompt tokens, when it is admitted.
    pub fn count_prompt(&self, n: usize) {
        self.prompt_tokens.fetch_add(n as u64, Ordering::Relaxed);
    }
    /// A request's time to first token.
    pub fn observe_ttft(&self, secs: f64) {
        self.hists
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .ttft
            .observe(secs);
    }
    /// A sequence dropped because its client left (or the server shut down).
    pub fn count_cancelled(&self) {
        self.cancelled.fetch_add(1, Ordering::Relaxed);
    }
    /// A sequence dropped at its deadline.
    pub fn count_timeout(&self) {
        self.timeouts.fetch_add(1, Ordering::Relaxed);
    }
    /// A failed batch step.
    pub fn count_engine_error(&self) {
        self.engine_errors.fetch_add(1, Ordering::Relaxed);
    }
    /// Sequences in the batch and requests waiting, now.
    pub fn set_running(&self, running: usize, waiting: usize) {
        self.running.store(running as u64, Ordering::Relaxed);
        self.waiting.store(waiting as u64, Ordering::Relaxed);
    }
    /// One batch step of `secs` that chose `tokens` ids; the store's bytes read so far.
    pub fn count_step(&self, secs: f64, tokens: usize, store_bytes: Option<u64>) {
        self.steps.fetch_add(1, Ordering::Relaxed);
        self.generated_tokens
            .fetch_add(tokens as u64, Ordering::Relaxed);
        if let Some(b) = store_bytes {
            self.store_bytes_read.store(b, Ordering::Relaxed);
        }
        self.hists
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .step
            .observe(secs);
    }

    /// A batch step that fed no prompt token (every sequence was decoding): the
    /// store's bytes read during it and the tokens it chose.
    pub fn count_decode_step(&self, store_bytes: u64, tokens: usize) {
        self.decode_store_bytes_read
            .fetch_add(store_bytes, Ordering::Relaxed);
        self.decode_tokens
            .fetch_add(tokens as u64, Ordering::Relaxed);
    }

    /// The Prometheus text exposition (format 0.0.4) of every counter, with the
    /// process's resident memory.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let c = |out: &mut String, name: &str, kind: &str, help: &str, v: u64| {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {v}"
            );
        };
        let counters: [(&str, &str, &str, &AtomicU64); 12] = [
            (
                "memdial_prompt_tokens_total",
                "counter",
                "Prompt tokens of admitted requests.",
                &self.prompt_tokens,
            ),
            (
                "memdial_generated_tokens_total",
                "counter",
                "Tokens generated, all requests.",
                &self.generated_tokens,
            ),
            (
                "memdial_batch_steps_total",
                "counter",
                "Batch forward steps.",
                &self.steps,
            ),
            (
                "memdial_requests_cancelled_total",
                "counter",
                "Sequences dropped because the client disconnected or the server shut down.",
                &self.cancelled,
            ),
            (
                "memdial_requests_timed_out_total",
                "counter",
                "Requests ended at the request time limit.",
                &self.timeouts,
            ),
            (
                "memdial_requests_rejected_total",
                "counter",
                "Requests refused with 429 (batch and queue full).",
                &self.rejected,
            ),
            (
                "memdial_engine_errors_total",
                "counter",
                "Failed batch steps.",
                &self.engine_errors,
            ),
            (
                "memdial_sequences_running",
                "gauge",
                "Sequences in the batch.",
                &self.running,
            ),
            (
                "memdial_requests_waiting",
                "gauge",
                "Requests waiting for a batch slot.",
                &self.waiting,
            ),
            (
                "memdial_store_bytes_read_total",
                "counter",
                "Bytes the streaming store read (0 when resident).",
                &self.store_bytes_read,
            ),
            (
                "memdial_decode_store_bytes_read_total",
                "counter",
                "Bytes the streaming store read in batch steps that fed no prompt token.",
                &self.decode_store_bytes_read,
            ),
            (
                "memdial_decode_tokens_total",
                "counter",
                "Tokens chosen by batch steps that fed no prompt token.",
                &self.decode_tokens,
            ),
        ];
        for (name, kind, help, v) in counters {
            c(&mut out, name, kind, help, v.load(Ordering::Relaxed));
        }
        let mem = memdial::util::sysmem::read();
        c(
            &mut out,
            "memdial_rss_anon_bytes",
            "gauge",
            "Anonymous resident memory of the process (RssAnon).",
            mem.rss_anon_bytes,
        );
        c(
            &mut out,
            "memdial_rss_file_bytes",
            "gauge",
            "File-backed resident memory of the process (RssFile).",
            mem.rss_file_bytes,
        );
        let h = self.hists.lock().unwrap_or_else(|p| p.into_inner());
        h.ttft.render(
            &mut out,
            "memdial_time_to_first_token_seconds",
            "From a request's arrival to its first token.",
        );
        h.step.render(
            &mut out,
            "memdial_batch_step_seconds",
            "Wall time of one batch step.",
        );
        let _ = writeln!(out, "# HELP memdial_http_requests_total HTTP exchanges by route and status.\n# TYPE memdial_http_requests_total counter");
        for ((route, status), n) in &h.requests {
            let _ = writeln!(
                out,
                "memdial_http_requests_total{{route=\"{route}\",status=\"{status}\"}} {n}"
            );
        }
        out
    }
}
