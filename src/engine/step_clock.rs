//! What the scheduler did to each decode step: the compute threads' mean run-queue
//! wait during the step, and the process's CPU time over the decode loop.
//!
//! Wall time minus that wait is the step's **uncontended time**: the time the step
//! would have taken had no other thread held a core its compute threads wanted. The
//! mean over the threads is taken ([`crate::util::sched::mean_wait_ns`] says why not
//! the sum or the largest). Threads exit before a parent process could read them, so
//! the run measures this itself.

use crate::kernels::Par;
use crate::util::sched::{gettid, mean_wait_ns, process_cpu_s, ThreadClocks, ThreadTimes};

/// Per-step scheduler figures of the decode loop (see the module docs).
#[derive(Debug)]
pub struct StepClock {
    clocks: Option<ThreadClocks>,
    at_start: Vec<ThreadTimes>,
    now: Vec<ThreadTimes>,
    cpu_start_s: Option<f64>,
    /// Mean compute-thread run-queue wait of each finished step, seconds
    /// (empty when the figures are unavailable).
    waits_s: Vec<f64>,
}

/// What a [`StepClock`] measured over the decode loop.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StepFigures {
    /// Mean compute-thread run-queue wait per decode step, seconds; `None` when
    /// `/proc/self/task/<tid>/schedstat` is unavailable.
    pub run_queue_wait_s: Option<Vec<f64>>,
    /// CPU seconds of the whole process (every thread, IO threads included) from
    /// the first decode step's start to the last one's end; `None` without the clock.
    pub cpu_s: Option<f64>,
}

impl StepClock {
    /// Watches the calling thread (which drives the forward) and `par`'s workers.
    pub fn new(par: &Par) -> StepClock {
        let mut tids = vec![gettid()];
        tids.extend(par.worker_tids());
        StepClock {
            clocks: ThreadClocks::open(&tids),
            at_start: Vec::with_capacity(tids.len()),
            now: Vec::with_capacity(tids.len()),
            cpu_start_s: None,
            waits_s: Vec::new(),
        }
    }

    /// Marks the start of a decode step.
    pub fn start(&mut self) {
        if self.cpu_start_s.is_none() {
            self.cpu_start_s = process_cpu_s();
        }
        if let Some(c) = self.clocks.as_mut() {
            if !c.read(&mut self.at_start) {
                self.clocks = None;
            }
        }
    }

    /// Marks the end of the step begun by the last [`StepClock::start`].
    pub fn stop(&mut self) {
        if let Some(c) = self.clocks.as_mut() {
            if c.read(&mut self.now) {
                let ns = mean_wait_ns(&self.at_start, &self.now);
                self.waits_s.push(ns as f64 * 1e-9);
            } else {
                self.clocks = None;
            }
        }
    }

    /// Like [`StepClock::stop`] for a forward that emitted `n` tokens: its wait is
    /// split evenly over them, as its time is (one entry per token).
    pub fn stop_split(&mut self, n: usize) {
        let before = self.waits_s.len();
        self.stop();
        if n > 1 && self.waits_s.len() > before {
            let w = self.waits_s.pop().unwrap_or(0.0) / n as f64;
            self.waits_s.extend(std::iter::repeat_n(w, n));
        }
    }

    /// The figures of every step between the first start and the last stop.
    pub fn finish(self) -> StepFigures {
        let cpu_s = self
            .cpu_start_s
            .zip(process_cpu_s())
            .map(|(a, b)| (b - a).max(0.0));
        StepFigures {
            run_queue_wait_s: self.clocks.is_some().then_some(self.waits_s),
            cpu_s,
        }
    }
}

/// Each step's uncontended time, seconds: `decode_s[i] − run_queue_wait_s[i]`, never
/// below zero. `None` when the lengths differ (figures of another loop).
pub fn uncontended_s(decode_s: &[f64], run_queue_wait_s: &[f64]) -> Option<Vec<f64>> {
    (decode_s.len() == run_queue_wait_s.len()).then(|| {
        decode_s
            .iter()
            .zip(run_queue_wait_s)
            .map(|(d, w)| (d - w).max(0.0))
            .collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uncontended_subtracts_each_steps_wait_and_never_goes_negative() {
        assert_eq!(
            uncontended_s(&[0.010, 0.020, 0.001], &[0.002, 0.0, 0.005]),
            Some(vec![0.008, 0.020, 0.0])
        );
        assert_eq!(uncontended_s(&[0.01], &[]), None);
    }

    /// Pins the calling thread to CPU `cpu`; false where affinity cannot be set.
    fn pin(cpu: usize) -> bool {
        // SAFETY: a zeroed cpu_set_t is the empty set; the calls only read it.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(cpu, &mut set);
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0
        }
    }

    /// A busy thread pinned to the same CPU as a 1-thread run: the two share the core,
    /// so the run's steps wait on the run queue for a large share of their time, and
    /// the clock sees it. The mechanism, not a speed: the share is bounded below only
    /// (a fair scheduler gives each about half; a loaded CI machine may give less).
    #[test]
    fn a_busy_thread_on_the_same_core_shows_as_run_queue_wait() {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let s2 = stop.clone();
        let pinned = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let p2 = pinned.clone();
        let busy = std::thread::spawn(move || {
            p2.store(pin(0), std::sync::atomic::Ordering::SeqCst);
            while !s2.load(std::sync::atomic::Ordering::Relaxed) {
                std::hint::spin_loop();
            }
        });
        std::thread::sleep(std::time::Duration::from_millis(20));
        let ok = pin(0) && pinned.load(std::sync::atomic::Ordering::SeqCst);
        let par = Par::new(1);
        let mut c = StepClock::new(&par);
        let mut wall = 0.0;
        for _ in 0..10 {
            c.start();
            let t = std::time::Instant::now();
            let t0 = std::time::Instant::now();
            while t0.elapsed() < std::time::Duration::from_millis(20) {
                std::hint::black_box(0u64);
            }
            wall += t.elapsed().as_secs_f64();
            c.stop();
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        busy.join().unwrap();
        let f = c.finish();
        let (true, Some(w)) = (ok, f.run_queue_wait_s) else {
            eprintln!("no CPU affinity or no schedstat here: skipped");
            return;
        };
        let share = w.iter().sum::<f64>() / wall;
        assert!(share > 0.2, "waited {share:.3} of {wall:.3} s");
    }

    #[test]
    fn a_step_clock_over_a_pool_measures_every_step() {
        let par = Par::new(2);
        let mut c = StepClock::new(&par);
        for _ in 0..3 {
            c.start();
            par.run(4, &|_| {
                std::hint::black_box((0..10_000u64).sum::<u64>());
            });
            c.stop();
        }
        let f = c.finish();
        if let Some(w) = f.run_queue_wait_s {
            assert_eq!(w.len(), 3);
            assert!(w.iter().all(|x| x.is_finite() && *x >= 0.0), "{w:?}");
        } else {
            eprintln!("no schedstat on this kernel: wait figures unavailable");
        }
        assert!(f.cpu_s.unwrap() >= 0.0);
    }
}
