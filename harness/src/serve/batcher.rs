//! The model's thread: continuous batching over a [`Batch`].
//!
//! Requests wait in a bounded queue ([`Queue`]); before every step the thread
//! admits waiting requests into the free slots of the batch (so they join at a
//! token boundary), drops the sequences whose client has gone (its event
//! receiver closed) or whose time is up, then runs one [`Batch::step`]: one token
//! for every decoding sequence plus up to `prefill_chunk` prompt tokens of each
//! sequence still prefilling. A long prompt is thus fed over several steps while
//! the others keep decoding, and a finished sequence leaves the batch at once.
//!
//! Each sequence's ids are those of `memdial run` with the same prompt and
//! settings: [`Batch`] decodes every sequence exactly as a single-sequence
//! generation does, whatever else is in the batch.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use memdial::engine::batch::{Batch, Finish, SeqId};
use memdial::engine::generate::GenerateParams;
use memdial::model::Model;
use memdial::store::streaming::StreamingStore;
use tokio::sync::mpsc::UnboundedSender;

use super::metrics::Metrics;

/// A request for the model's thread.
pub struct Job {
    /// Prompt ids (validated: non-empty, in the vocabulary, fits the context).
    pub prompt: Vec<u32>,
    /// Sampling, stop ids, `max_tokens`, prefill chunk.
    pub params: GenerateParams,
    /// Log-probabilities of each chosen token and of the `k` most likely.
    pub logprobs: Option<usize>,
    /// When the request must have finished.
    pub deadline: Instant,
    /// Where its events go (closed by the client's side when it has gone).
    pub events: UnboundedSender<Event>,
}

/// The log-probabilities of one chosen token.
#[derive(Debug, Clone, PartialEq)]
pub struct Logprobs {
    /// ln p(chosen token).
    pub logprob: f32,
    /// The `k` most likely (id, ln p), most likely first (ties: lower id first).
    pub top: Vec<(u32, f32)>,
}

/// What happens to a request, in order: `Admitted`, `Token`s (the last with
/// `finish`), or `Failed` at any point (final).
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// It joined the batch (its prefill starts).
    Admitted,
    /// A token was chosen.
    Token {
        /// The id.
        id: u32,
        /// Its log-probabilities (when asked for).
        logprobs: Option<Logprobs>,
        /// Set on the last token.
        finish: Option<Finish>,
    },
    /// It ended without finishing.
    Failed(Failure),
}

/// Why a request ended early.
#[derive(Debug, Clone, PartialEq)]
pub enum Failure {
    /// Past its deadline.
    Timeout,
    /// The server is shutting down.
    Shutdown,
    /// The engine failed (the message says how).
    Engine(String),
}

/// Why [`Queue::submit`] refused a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// The batch and the queue are full.
    Busy,
    /// The server is shutting down.
    Closed,
}

struct Waiting {
    jobs: VecDeque<Job>,
    closed: bool,
}

/// The bounded queue between the HTTP side and the model's thread.
pub struct Queue {
    waiting: Mutex<Waiting>,
    ready: Condvar,
    /// Sequences in the batch now.
    running: AtomicUsize,
    max_batch: usize,
    capacity: usize,
    draining: AtomicBool,
}

impl Queue {
    /// A queue for a batch of `max_batch` holding up to `capacity` more requests.
    pub fn new(max_batch: usize, capacity: usize) -> Queue {
        Queue {
            waiting: Mutex::new(Waiting {
                jobs: VecDeque::new(),
                closed: false,
            }),
            ready: Condvar::new(),
            running: AtomicUsize::new(0),
            max_batch,
            capacity,
            draining: AtomicBool::new(false),
        }
    }

    /// Hands `job` to the model's thread, or refuses it when the free slots of the
    /// batch and the `capacity` of the queue are taken, or the server is draining.
    pub fn submit(&self, job: Job) -> Result<(), Refused> {
        let mut w = self.waiting.lock().unwrap_or_else(|p| p.into_inner());
        if w.closed || self.draining.load(Ordering::SeqCst) {
            return Err(Refused::Closed);
        }
        let free = self
            .max_batch
            .saturating_sub(self.running.load(Ordering::SeqCst));
        if w.jobs.len() >= self.capacity + free {
            return Err(Refused::Busy);
        }
        w.jobs.push_back(job);
        drop(w);
        self.ready.notify_one();
        Ok(())
    }

    /// Requests waiting.
    pub fn waiting(&self) -> usize {
        self.waiting
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .jobs
            .len()
    }

    /// Sequences in the batch.
    pub fn running(&self) -> usize {
        self.running.load(Ordering::SeqCst)
    }

    /// Starts the shutdown: new jobs are refused, waiting ones fail with
    /// [`Failure::Shutdown`], running ones get until `grace` to finish.
    pub fn drain(&self) {
        self.draining.store(true, Ordering::SeqCst);
        self.ready.notify_all();
    }

    /// Whether [`Queue::drain`] was called.
    pub fn draining(&self) -> bool {
        self.draining.load(Ordering::SeqCst)
    }

    /// Ends the model's thread once its batch is empty (no job is taken after).
    pub fn close(&self) {
        self.waiting
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .closed = true;
        self.ready.notify_all();
    }

    /// Takes out the waiting jobs whose client has gone or whose deadline has passed
    /// (the latter get [`Failure::Timeout`]), so a full batch does not hold them.
    fn prune(&self, now: Instant, metrics: &Metrics) {
        let mut w = self.waiting.lock().unwrap_or_else(|p| p.into_inner());
        w.jobs.retain(|j| {
            if j.events.is_closed() {
                metrics.count_cancelled();
                false
            } else if now >= j.deadline {
                let _ = j.events.send(Event::Failed(Failure::Timeout));
                metrics.count_timeout();
                false
            } else {
                true
            }
        });
    }

    /// The next job: waits up to `wait` when `block`; `Err(())` once closed and empty.
    fn next(&self, block: bool, wait: Duration) -> Result<Option<Job>, ()> {
        let mut w = self.waiting.lock().unwrap_or_else(|p| p.into_inner());
        if block && w.jobs.is_empty() && !w.closed && !self.draining() {
            w = self
                .ready
                .wait_timeout(w, wait)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        match w.jobs.pop_front() {
            Some(j) => Ok(Some(j)),
            None if w.closed => Err(()),
            None => Ok(None),
        }
    }
}

struct Running {
    seq: SeqId,
    job: Job,
}

/// Runs the batch until the queue is closed and the batch is empty: the body of
/// the model's thread. `grace`: how long running sequences may go on after
/// [`Queue::drain`] before they are cancelled with [`Failure::Shutdown`].
pub fn run(
    model: &Model,
    mut batch: Batch,
    queue: &Queue,
    metrics: &Metrics,
    store: Option<&Arc<StreamingStore>>,
    grace: Duration,
) {
    let mut running: Vec<Running> = Vec::new();
    let mut drain_until: Option<Instant> = None;
    loop {
        let draining = queue.draining();
        if draining && drain_until.is_none() {
            drain_until = Some(Instant::now() + grace);
        }
        // Admit (or, draining, refuse) the waiting jobs at this token boundary.
        let mut closed = false;
        while draining || running.len() < batch.max_batch() {
            let job = match queue.next(running.is_empty(), Duration::from_millis(100)) {
                Ok(Some(j)) => j,
                Ok(None) => break,
                Err(()) => {
                    closed = true;
                    break;
                }
            };
            if draining {
                let _ = job.events.send(Event::Failed(Failure::Shutdown));
                metrics.count_cancelled();
                continue;
            }
            if job.events.is_closed() {
                metrics.count_cancelled();
                continue;
            }
            if Instant::now() >= job.deadline {
                let _ = job.events.send(Event::Failed(Failure::Timeout));
                metrics.count_timeout();
                continue;
            }
            match batch.add(model, &job.prompt, &job.params) {
                Ok(seq) => {
                    let _ = job.events.send(Event::Admitted);
                    running.push(Running { seq, job });
                }
                Err(e) => {
                    let _ = job
                        .events
                        .send(Event::Failed(Failure::Engine(format!("{e:#}"))));
                }
            }
        }
        // Drop the sequences (and waiting jobs) whose client left or whose time is up.
        let now = Instant::now();
        queue.prune(now, metrics);
        let drain_over = drain_until.is_some_and(|t| now >= t);
        running.retain(|r| {
            let failure = if r.job.events.is_closed() {
                metrics.count_cancelled();
                None
            } else if drain_over {
                metrics.count_cancelled();
                Some(Failure::Shutdown)
            } else if now >= r.job.deadline {
                metrics.count_timeout();
                Some(Failure::Timeout)
            } else {
                return true;
            };
            if let Some(f) = failure {
                let _ = r.job.events.send(Event::Failed(f));
            }
            batch.remove(r.seq);
            false
        });
        queue.running.store(running.len(), Ordering::SeqCst);
        metrics.set_running(running.len(), queue.waiting());
        if running.is_empty() {
            if closed || draining {
                return;
            }
            continue;
        }
        step(model, &mut batch, &mut running, metrics, store);
        queue.running.store(running.len(), Ordering::SeqCst);
    }
}

/// One batch step; sends each chosen token to its request, removes the finished.
fn step(
    model: &Model,
    batch: &mut Batch,
    running: &mut Vec<Running>,
    metrics: &Metrics,
    store: Option<&Arc<StreamingStore>>,
) {
    let want: HashMap<SeqId, usize> = running
        .iter()
        .filter_map(|r| r.job.logprobs.map(|k| (r.seq, k)))
        .collect();
    let mut lps: HashMap<SeqId, Logprobs> = HashMap::new();
    // A step feeds no prompt token when every sequence already has an id.
    let decoding = running
        .iter()
        .all(|r| batch.output(r.seq).is_some_and(|o| !o.is_empty()));
    let bytes_before = store.map(|s| s.metrics().bytes_read);
    let t = Instant::now();
    let res = batch.step_with(model, &mut |seq, tok, logits| {
        if let Some(&k) = want.get(&seq) {
            lps.insert(seq, logprobs(logits, tok, k));
        }
    });
    let secs = t.elapsed().as_secs_f64();
    match res {
        Ok(tokens) => {
            let bytes_after = store.map(|s| s.metrics().bytes_read);
            metrics.count_step(secs, tokens.len(), bytes_after);
            if decoding {
                let read = bytes_after
                    .zip(bytes_before)
                    .map_or(0, |(a, b)| a.saturating_sub(b));
                metrics.count_decode_step(read, tokens.len());
            }
            for st in tokens {
                let Some(i) = running.iter().position(|r| r.seq == st.id) else {
                    continue;
                };
                let _ = running[i].job.events.send(Event::Token {
                    id: st.token,
                    logprobs: lps.remove(&st.id),
                    finish: st.finish,
                });
                if st.finish.is_some() {
                    batch.remove(st.id);
                    running.swap_remove(i);
                }
            }
        }
        Err(e) => {
            // The sequences of a failed step are unusable: fail them all.
            let msg = format!("{e:#}");
            eprintln!("memdial serve: a batch step failed: {msg}");
            metrics.count_engine_error();
            for r in running.drain(..) {
                let _ = r
                    .job
                    .events
                    .send(Event::Failed(Failure::Engine(msg.clone())));
                batch.remove(r.seq);
            }
        }
    }
}

/// ln softmax of `logits` at `tok`, and the `k` largest (ties: lower id first),
/// in f64 with a max shift.
pub fn logprobs(logits: &[f32], tok: u32, k: usize) -> Logprobs {
    let m = logits
        .iter()
        .filter(|v| !v.is_nan())
        .fold(f32::NEG_INFINITY, |a, &b| a.max(b)) as f64;
    let sum: f64 = logits
        .iter()
        .filter(|v| !v.is_nan())
        .map(|&l| (l as f64 - m).exp())
        .sum();
    let lse = m + sum.ln();
    let lp = |i: usize| (logits[i] as f64 - lse) as f32;
    let mut top: Vec<(u32, f32)> = Vec::with_capacity(k + 1);
    if k > 0 {
        for (i, &l) in logits.iter().enumerate() {
            if l.is_nan() {
                continue;
            }
            if top.len() == k && l <= logits[top[k - 1].0 as usize] {
                continue;
            }
            let at = top
                .iter()
                .position(|&(j, _)| l > logits[j as usize])
                .unwrap_or(top.len());
            top.insert(at, (i as u32, 0.0));
            top.truncate(k);
        }
        for t in &mut top {
            t.1 = lp(t.0 as usize);
        }
    }
    Logprobs {
        logprob: lp(tok as usize),
        top,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logprobs_by_hand() {
        // softmax([0, ln 3]) = [1/4, 3/4].
        let l = [0.0f32, 3f32.ln(), f32::NEG_INFINITY];
        let p = logprobs(&l, 0, 2);
        assert!((p.logprob - 0.25f32.ln()).abs() < 1e-6);
        assert_eq!(p.top.iter().map(|t| t.0).collect::<Vec<_>>(), vec![1, 0]);
        assert!((p.top[0].1 - 0.75f32.ln()).abs() < 1e-6);
        // Ties go to the lower id.
        let p = logprobs(&[1.0, 2.0, 2.0, 0.0], 3, 2);
        assert_eq!(p.top.iter().map(|t| t.0).collect::<Vec<_>>(), vec![1, 2]);
    }
}
