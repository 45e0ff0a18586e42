//! Deterministic thread partition: [`Par`], a tiny persistent thread pool.
//!
//! Every kernel in [`crate::kernels`] splits its *output rows* into one
//! contiguous range per thread and computes each output element on exactly one
//! thread with a sequential, fixed-order reduction. Because the arithmetic for
//! a row never depends on which thread runs it or on where the range
//! boundaries fall, results are bit-identical for every thread count.
//!
//! Design (measured, see `benches/README.md`): `threads - 1` persistent worker
//! threads plus the calling thread. A call publishes a job pointer, bumps an
//! epoch counter and wakes the workers; workers spin briefly on the epoch
//! (so back-to-back matvecs in a forward pass do not pay a futex round trip)
//! and then block on a condvar. The caller runs part 0 itself and waits for a
//! completion counter. No allocation happens per call.

use std::cell::UnsafeCell;
use std::ops::Range;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, TryLockError};
use std::thread::JoinHandle;

use super::Isa;

/// Spin iterations (each one `spin_loop` hint) before a waiting thread blocks.
/// About 10–30 µs on current x86 cores: long enough to bridge the gap between
/// consecutive kernels of one forward pass, short enough not to burn a core
/// while the engine waits for IO.
const SPIN_ITERS: u32 = 1 << 14;

/// Erased pointer to the job closure of the current epoch.
type JobPtr = *const (dyn Fn(usize) + Sync);

struct Shared {
    /// Incremented (Release) once per parallel call after `job` is written.
    epoch: AtomicU64,
    /// Job of the current epoch. Written only by the caller holding
    /// `call_lock`, while no worker is running a job.
    job: UnsafeCell<Option<JobPtr>>,
    /// Workers that have not yet finished the current epoch.
    remaining: AtomicUsize,
    /// Set when a worker's job panicked; re-raised by the caller.
    panicked: AtomicBool,
    shutdown: AtomicBool,
    /// Guards the epoch transition for sleeping workers.
    start_lock: Mutex<()>,
    start_cv: Condvar,
    /// Guards the completion transition for a sleeping caller.
    done_lock: Mutex<()>,
    done_cv: Condvar,
}

// SAFETY: `job` is only written by the (single, `call_lock`-holding) caller
// while every worker is idle, and only read by workers after they observed
// the epoch bump with Acquire ordering; the closure itself is `Sync`.
unsafe impl Sync for Shared {}
unsafe impl Send for Shared {}

struct Pool {
    shared: Arc<Shared>,
    /// Serialises parallel calls; a nested or concurrent call that cannot take
    /// it runs all parts on the calling thread instead (same results).
    call_lock: Mutex<()>,
    handles: Vec<JoinHandle<()>>,
}

/// A fixed set of threads that kernels split their output rows over.
///
/// `Par::new(threads)` starts `threads - 1` worker threads (the caller is
/// thread 0). The thread count only changes speed, never results: every
/// kernel produces bit-identical output for any `threads >= 1`.
///
/// `Par` also carries the instruction-set choice ([`Isa`]) used by the
/// kernels, so a test can run the scalar and SIMD paths side by side.
///
/// Calls are serialised: if `run` is called while another call on the same
/// `Par` is in progress (from another thread, or nested inside a job), the
/// second call runs all of its parts sequentially on its own thread.
pub struct Par {
    threads: usize,
    isa: Isa,
    pool: Option<Pool>,
}

impl std::fmt::Debug for Par {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Par")
            .field("threads", &self.threads)
            .field("isa", &self.isa)
            .finish()
    }
}

impl Par {
    /// A pool of `threads` threads (clamped to at least 1) using the
    /// instruction set chosen by [`Isa::detect`] (which honours the
    /// `MEMDIAL_KERNELS=scalar` environment variable).
    pub fn new(threads: usize) -> Par {
        Par::with_isa(threads, Isa::detect())
    }

    /// Like [`Par::new`] but with an explicit instruction set. Asking for an
    /// ISA the CPU lacks falls back to [`Isa::Scalar`].
    pub fn with_isa(threads: usize, isa: Isa) -> Par {
        let threads = threads.max(1);
        let isa = if isa.is_supported() { isa } else { Isa::Scalar };
        let pool = if threads > 1 {
            Some(Pool::start(threads))
        } else {
            None
        };
        Par { threads, isa, pool }
    }

    /// Number of threads (including the caller).
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// Instruction set the kernels use with this `Par`.
    pub fn isa(&self) -> Isa {
        self.isa
    }

    /// Runs `f(t)` for every `t in 0..self.threads()`, each on a different
    /// thread (`t = 0` on the caller), and returns when all have finished.
    /// A panic in any part is re-raised here after all parts finished.
    pub fn run(&self, f: &(dyn Fn(usize) + Sync)) {
        match &self.pool {
            None => f(0),
            Some(pool) => pool.run(self.threads, f),
        }
    }

    /// Splits `0..n` into `self.threads()` contiguous ranges whose interior
    /// boundaries are multiples of `align` (use it to keep threads off each
    /// other's cache lines), and runs `f(range)` for each non-empty range in
    /// parallel. When `work < min_work` everything runs as a single range on
    /// the calling thread. Kernels guarantee results do not depend on the
    /// partition, so neither the cut-off nor the thread count changes output.
    pub fn for_ranges(
        &self,
        n: usize,
        align: usize,
        work: usize,
        min_work: usize,
        f: &(dyn Fn(Range<usize>) + Sync),
    ) {
        if n == 0 {
            return;
        }
        if self.threads == 1 || work < min_work || n <= align.max(1) {
            f(0..n);
            return;
        }
        let t = self.threads;
        self.run(&|i| {
            let r = partition(n, t, align, i);
            if !r.is_empty() {
                f(r);
            }
        });
    }
}

/// Range of part `i` when `0..n` is split into `parts` contiguous pieces
/// with interior boundaries rounded to multiples of `align`.
pub(crate) fn partition(n: usize, parts: usize, align: usize, i: usize) -> Range<usize> {
    let align = align.max(1);
    let bound = |k: usize| -> usize {
        if k >= parts {
            return n;
        }
        let b = (n as u128 * k as u128 / parts as u128) as usize;
        (b / align * align).min(n)
    };
    bound(i)..bound(i + 1)
}

impl Pool {
    fn start(threads: usize) -> Pool {
        let shared = Arc::new(Shared {
            epoch: AtomicU64::new(0),
            job: UnsafeCell::new(None),
            remaining: AtomicUsize::new(0),
            panicked: AtomicBool::new(false),
            shutdown: AtomicBool::new(false),
            start_lock: Mutex::new(()),
            start_cv: Condvar::new(),
            done_lock: Mutex::new(()),
            done_cv: Condvar::new(),
        });
        let handles = (1..threads)
            .map(|tid| {
                let s = Arc::clone(&shared);
                std::thread::Builder::new()
                    .name(format!("memdial-par-{tid}"))
                    .spawn(move || worker(s, tid))
                    .expect("failed to spawn kernel worker thread")
            })
            .collect();
        Pool {
            shared,
            call_lock: Mutex::new(()),
            handles,
        }
    }

    fn run(&self, threads: usize, f: &(dyn Fn(usize) + Sync)) {
        let _guard = match self.call_lock.try_lock() {
            Ok(g) => g,
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            Err(TryLockError::WouldBlock) => {
                // Busy (nested or concurrent call): same parts, one thread.
                for t in 0..threads {
                    f(t);
                }
                return;
            }
        };
        let s = &*self.shared;
        // SAFETY: erase the closure's lifetime. Workers only dereference the
        // pointer between the epoch bump below and their decrement of
        // `remaining`; we do not return (not even by unwinding, see below)
        // before `remaining` reaches 0, so the closure outlives every use.
        let ptr: JobPtr = unsafe { std::mem::transmute::<&(dyn Fn(usize) + Sync), JobPtr>(f) };
        unsafe { *s.job.get() = Some(ptr) };
        s.panicked.store(false, Ordering::Relaxed);
        s.remaining.store(threads - 1, Ordering::Relaxed);
        {
            let _l = s.start_lock.lock().unwrap_or_else(|p| p.into_inner());
            s.epoch.fetch_add(1, Ordering::Release);
        }
        s.start_cv.notify_all();

        let mine = catch_unwind(AssertUnwindSafe(|| f(0)));

        // Wait for the workers: spin, then block.
        let mut spins = 0u32;
        while s.remaining.load(Ordering::Acquire) != 0 {
            if spins < SPIN_ITERS {
                spins += 1;
                std::hint::spin_loop();
            } else {
                let mut l = s.done_lock.lock().unwrap_or_else(|p| p.into_inner());
                while s.remaining.load(Ordering::Acquire) != 0 {
                    l = s.done_cv.wait(l).unwrap_or_else(|p| p.into_inner());
                }
            }
        }
        unsafe { *s.job.get() = None };
        if let Err(e) = mine {
            std::panic::resume_unwind(e);
        }
        if s.panicked.load(Ordering::Acquire) {
            panic!("a memdial kernel worker thread panicked");
        }
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        {
            let _l = self
                .shared
                .start_lock
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            self.shared.shutdown.store(true, Ordering::Release);
        }
        self.shared.start_cv.notify_all();
        for h in self.handles.drain(..) {
            let _ = h.join();
        }
    }
}

fn worker(s: Arc<Shared>, tid: usize) {
    let mut seen = 0u64;
    loop {
        // Wait for a new epoch: spin, then block.
        let mut spins = 0u32;
        loop {
            if s.shutdown.load(Ordering::Acquire) {
                return;
            }
            if s.epoch.load(Ordering::Acquire) != seen {
                break;
            }
            if spins < SPIN_ITERS {
                spins += 1;
                std::hint::spin_loop();
            } else {
                let mut l = s.start_lock.lock().unwrap_or_else(|p| p.into_inner());
                while s.epoch.load(Ordering::Acquire) == seen && !s.shutdown.load(Ordering::Acquire)
                {
                    l = s.start_cv.wait(l).unwrap_or_else(|p| p.into_inner());
                }
            }
        }
        seen = s.epoch.load(Ordering::Acquire);
        // SAFETY: the caller wrote `job` before the Release epoch bump we
        // observed, and keeps the closure alive until `remaining` hits 0.
        let job = unsafe { (*s.job.get()).expect("epoch bumped without a job") };
        let r = catch_unwind(AssertUnwindSafe(|| unsafe { (*job)(tid) }));
        if r.is_err() {
            s.panicked.store(true, Ordering::Release);
        }
        if s.remaining.fetch_sub(1, Ordering::AcqRel) == 1 {
            let _l = s.done_lock.lock().unwrap_or_else(|p| p.into_inner());
            s.done_cv.notify_one();
        }
    }
}

/// Raw output pointer shared by the threads of one kernel call. Each thread
/// writes only the output rows of its own range, so writes never overlap.
#[derive(Clone, Copy)]
pub(crate) struct OutPtr(*mut f32, usize);

// SAFETY: used only for disjoint writes, see type docs.
unsafe impl Send for OutPtr {}
unsafe impl Sync for OutPtr {}

impl OutPtr {
    pub(crate) fn new(y: &mut [f32]) -> OutPtr {
        OutPtr(y.as_mut_ptr(), y.len())
    }

    /// Mutable view of `y[range]`.
    ///
    /// # Safety
    /// No two live views (on any thread) may overlap.
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn slice(&self, range: Range<usize>) -> &mut [f32] {
        assert!(range.start <= range.end && range.end <= self.1);
        std::slice::from_raw_parts_mut(self.0.add(range.start), range.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partition_covers_exactly() {
        for n in [0usize, 1, 5, 16, 17, 100, 12288] {
            for parts in 1..9 {
                for align in [1usize, 4, 16] {
                    let mut next = 0;
                    for i in 0..parts {
                        let r = partition(n, parts, align, i);
                        assert_eq!(r.start, next);
                        assert!(r.end >= r.start);
                        next = r.end;
                    }
                    assert_eq!(next, n);
                }
            }
        }
    }

    #[test]
    fn run_visits_every_part_once() {
        for t in 1..6 {
            let par = Par::new(t);
            for _ in 0..200 {
                let hits: Vec<AtomicUsize> = (0..t).map(|_| AtomicUsize::new(0)).collect();
                par.run(&|i| {
                    hits[i].fetch_add(1, Ordering::Relaxed);
                });
                assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1));
            }
        }
    }

    #[test]
    fn nested_run_falls_back_to_sequential() {
        let par = Par::new(3);
        let count = AtomicUsize::new(0);
        par.run(&|_| {
            par.run(&|_| {
                count.fetch_add(1, Ordering::Relaxed);
            });
        });
        assert_eq!(count.load(Ordering::Relaxed), 9);
    }

    #[test]
    fn worker_panic_is_reraised() {
        let par = Par::new(2);
        let r = catch_unwind(AssertUnwindSafe(|| {
            par.run(&|i| {
                if i == 1 {
                    panic!("boom");
                }
            })
        }));
        assert!(r.is_err());
        // Pool still usable afterwards.
        let count = AtomicUsize::new(0);
        par.run(&|_| {
            count.fetch_add(1, Ordering::Relaxed);
        });
        assert_eq!(count.load(Ordering::Relaxed), 2);
    }
}
