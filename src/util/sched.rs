//! What the scheduler did to this process's threads: nanoseconds on a CPU and
//! nanoseconds runnable but waiting for one, per thread, from
//! `/proc/self/task/<tid>/schedstat` (which needs neither `CONFIG_SCHEDSTATS` nor
//! delay accounting), and the process's CPU time from `CLOCK_PROCESS_CPUTIME_ID`.
//!
//! A run reads these around each decode step: the time its compute threads spent
//! waiting on the run queue is time a neighbour (or one of its own threads) held the
//! core, which is what "noise" does to a measurement.

use std::fs::File;
use std::os::unix::fs::FileExt;

/// The kernel's id of the calling thread (`gettid(2)`).
pub fn gettid() -> i32 {
    // SAFETY: gettid has no preconditions and cannot fail.
    unsafe { libc::gettid() }
}

/// CPU seconds used so far by every thread of this process (user + system,
/// `CLOCK_PROCESS_CPUTIME_ID`, ns resolution); `None` if the clock is unavailable.
pub fn process_cpu_s() -> Option<f64> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid out-pointer for the duration of the call.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    (rc == 0).then_some(ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9)
}

/// One thread's cumulative scheduler figures, nanoseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ThreadTimes {
    /// Time spent on a CPU.
    pub on_cpu_ns: u64,
    /// Time spent runnable on a run queue, waiting for a CPU.
    pub run_queue_ns: u64,
}

/// Open `schedstat` files of a fixed set of this process's threads, read again and
/// again without reopening (one `pread` each).
#[derive(Debug)]
pub struct ThreadClocks {
    files: Vec<File>,
    buf: Vec<u8>,
}

impl ThreadClocks {
    /// Opens `/proc/self/task/<tid>/schedstat` for each of `tids`. `None` when any
    /// cannot be opened or read (a kernel without it, a thread that has exited): the
    /// figure is then unavailable, never guessed.
    pub fn open(tids: &[i32]) -> Option<ThreadClocks> {
        let files = tids
            .iter()
            .map(|t| File::open(format!("/proc/self/task/{t}/schedstat")).ok())
            .collect::<Option<Vec<_>>>()?;
        let mut c = ThreadClocks {
            files,
            buf: vec![0; 128],
        };
        let mut probe = Vec::new();
        c.read(&mut probe).then_some(c)
    }

    /// Number of threads read.
    pub fn len(&self) -> usize {
        self.files.len()
    }

    /// True when no thread is read.
    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }

    /// Reads every thread's figures into `out` (cleared first), in the order of the
    /// tids given to [`ThreadClocks::open`]. Returns false (and leaves `out` short)
    /// when a file cannot be read or parsed.
    pub fn read(&mut self, out: &mut Vec<ThreadTimes>) -> bool {
        out.clear();
        for f in &self.files {
            let Ok(n) = f.read_at(&mut self.buf, 0) else {
                return false;
            };
            match std::str::from_utf8(&self.buf[..n])
                .ok()
                .and_then(parse_schedstat)
            {
                Some(t) => out.push(t),
                None => return false,
            }
        }
        true
    }
}

/// `on_cpu_ns run_queue_ns timeslices` (the first line of a `schedstat` file).
pub fn parse_schedstat(s: &str) -> Option<ThreadTimes> {
    let mut it = s.split_whitespace();
    let on_cpu_ns = it.next()?.parse().ok()?;
    let run_queue_ns = it.next()?.parse().ok()?;
    Some(ThreadTimes {
        on_cpu_ns,
        run_queue_ns,
    })
}

/// The mean increase of the threads' run-queue waits from `before` to `after`
/// (index-aligned), nanoseconds: the wait's share of a pool's capacity. Not the sum
/// (two threads waiting at once cost the pool one thread's time per thread, not two)
/// and not the largest (a pool's parts are claimed dynamically, so one waiting
/// thread's work is taken over by the others: beside one busy core a 2-thread step
/// minus its largest wait came out 25–30 % below the quiet step, minus the mean
/// within its spread).
pub fn mean_wait_ns(before: &[ThreadTimes], after: &[ThreadTimes]) -> u64 {
    let n = before.len().min(after.len());
    if n == 0 {
        return 0;
    }
    let total: u64 = before
        .iter()
        .zip(after)
        .map(|(b, a)| a.run_queue_ns.saturating_sub(b.run_queue_ns))
        .sum();
    total / n as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_three_fields_and_refuses_garbage() {
        assert_eq!(
            parse_schedstat("2871153 40123 7\n"),
            Some(ThreadTimes {
                on_cpu_ns: 2_871_153,
                run_queue_ns: 40_123
            })
        );
        assert_eq!(parse_schedstat("12\n"), None);
        assert_eq!(parse_schedstat("a b c"), None);
    }

    #[test]
    fn the_wait_is_the_threads_mean_not_the_sum_or_the_largest() {
        let t = |w| ThreadTimes {
            on_cpu_ns: 0,
            run_queue_ns: w,
        };
        // Thread 0 waited 3 ms, thread 1 waited 5 ms: 4 ms of each thread's time.
        assert_eq!(
            mean_wait_ns(&[t(1_000_000), t(0)], &[t(4_000_000), t(5_000_000)]),
            4_000_000
        );
        assert_eq!(mean_wait_ns(&[], &[]), 0);
    }

    #[test]
    fn this_threads_clock_reads_and_advances() {
        let Some(mut c) = ThreadClocks::open(&[gettid()]) else {
            eprintln!("no /proc/self/task/<tid>/schedstat on this kernel: skipped");
            return;
        };
        let mut a = Vec::new();
        assert!(c.read(&mut a));
        let t0 = std::time::Instant::now();
        let mut x = 0u64;
        while t0.elapsed() < std::time::Duration::from_millis(20) {
            x = x.wrapping_add(1);
        }
        std::hint::black_box(x);
        let mut b = Vec::new();
        assert!(c.read(&mut b));
        assert_eq!(b.len(), 1);
        assert!(b[0].on_cpu_ns > a[0].on_cpu_ns, "{a:?} {b:?}");
        assert!(process_cpu_s().unwrap() > 0.0);
    }
}
