//! Deterministic thread partition: [`Par`], a tiny persistent thread pool.
//!
//! Every kernel in [`crate::kernels`] splits its *output rows* into one
//! contiguous range per thread and computes each output element on exactly one
//! thread with a sequential, fixed-order reduction. Because the arithmetic for
//! a row never depends on which thread runs it or on where the range
//! boundaries fall, results are bit-identical for every thread count.
//!
//! Design (measured, see `benches/README.md`): `threads - 1` persistent
//! worker threads plus the calling thread. A call cuts the work into a fixed
//! list of parts (more parts than threads); the caller publishes the job,
//! opens it, and then *every* participant — caller included — claims parts
//! from an atomic counter until none are left. The caller then closes the
//! job and waits only for workers that are still inside a part. So a worker
//! that is slow to wake (descheduled on a busy machine) never delays a call:
//! the caller simply does its parts. Which thread computes a part changes
//! nothing in the result (kernels compute every output row independently of
//! the partition). Idle workers spin on an epoch counter for
//! [`SPIN_TIME`] (bridging the gaps between consecutive kernels of a forward
//! pass without a futex round trip), then block on a condvar. No allocation
//! happens per call.

use std::cell::UnsafeCell;
use std::ops::Range;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Condvar, Mutex, TryLockError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::Isa;

/// How long an idle thread spins before it blocks.
pub const SPIN_TIME: Duration = Duration::from_micros(50);

/// Parts per thread that [`Par::for_ranges`] cuts its range into (load
/// balancing when a thread is slow or descheduled).
pub const PARTS_PER_THREAD: usize = 4;

/// Erased pointer to the job closure of the current epoch: `f(part, participant)`.
type JobPtr = *const (dyn Fn(usize, usize) + Sync);

struct Shared {
    /// `(epoch << 1) | open`. Set open (after the job fields are written)
    /// and closed by the caller holding `call_lock`.
    state: AtomicU64,
    /// Job closure of the current epoch; valid while `state` is open or any
    /// worker that joined it is `active`.
    job: UnsafeCell<Option<JobPtr>>,
    nparts: AtomicUsize,
    /// Next unclaimed part.
    next: AtomicUsize,
    /// Workers between "joined" and "left" (see `worker`).
    active: AtomicUsize,
    panicked: AtomicBool,
    shutdown: AtomicBool,
    /// Workers blocked on `start_cv` (only notified when non-zero).
    sleepers: AtomicUsize,
    start_lock: Mutex<()>,
    start_cv: Condvar,
    /// The caller is blocked on `done_cv`.
    caller_sleeping: AtomicBool,
    done_lock: Mutex<()>,
    /// Kernel thread ids of the workers, each pushed by the worker as it starts.
    worker_tids: Mutex<Vec<i32>>,
    done_cv: Condvar,
}

// SAFETY: `job` is written only by the caller holding `call_lock` while the
// job is closed and no worker is active; workers read it only after
// registering as active and observing the open state (SeqCst), see `worker`.
unsafe impl Sync for Shared {}
unsafe impl Send for Shared {}

struct Pool {
    shared: Arc<Shared>,
    /// Serialises calls; a nested or concurrent call that cannot take it
    /// runs all its parts on its own thread instead (same results).
    call_lock: Mutex<()>,
    handles: Vec<JoinHandle<()>>,
}

/// A fixed set of threads that kernels split their output rows over.
///
/// `Par::new(threads)` starts `threads - 1` worker threads (the caller is
/// the remaining one). The thread count only changes speed, never results:
/// every kernel produces bit-identical output for any `threads >= 1`.
///
/// `Par` also carries the instruction-set choice ([`Isa`]) used by the
/// kernels, so a test can run the scalar and SIMD paths side by side.
///
/// Calls are serialised: if [`Par::run`] is called while another call on
/// the same `Par` is in progress (from another thread, or nested inside a
/// part), the second call runs all of its parts sequentially on its own
/// thread.
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
    ///
    /// Panics when a worker thread cannot be spawned; front ends use [`Par::try_new`].
    pub fn with_isa(threads: usize, isa: Isa) -> Par {
        Par::try_with_isa(threads, isa).expect("failed to spawn kernel worker threads")
    }

    /// Like [`Par::new`], but a worker thread the OS refuses to spawn (thread or
    /// memory limits) is an error naming the thread count, not a panic; the workers
    /// already started are stopped again.
    pub fn try_new(threads: usize) -> std::io::Result<Par> {
        Par::try_with_isa(threads, Isa::detect())
    }

    /// [`Par::try_new`] with an explicit instruction set (see [`Par::with_isa`]).
    pub fn try_with_isa(threads: usize, isa: Isa) -> std::io::Result<Par> {
        let threads = threads.max(1);
        let isa = if isa.is_supported() { isa } else { Isa::Scalar };
        let pool = if threads > 1 {
            Some(Pool::start(threads)?)
        } else {
            None
        };
        Ok(Par { threads, isa, pool })
    }

    /// Number of threads (including the caller).
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// Instruction set the kernels use with this `Par`.
    pub fn isa(&self) -> Isa {
        self.isa
    }

    /// Kernel thread ids (`gettid`) of the pool's workers that have started, in start
    /// order (`threads - 1` once the pool is up; the calling thread is not among them).
    /// Waits up to a second for workers still starting.
    pub fn worker_tids(&self) -> Vec<i32> {
        let Some(pool) = &self.pool else {
            return Vec::new();
        };
        let want = self.threads - 1;
        let t0 = Instant::now();
        loop {
            let v = pool
                .shared
                .worker_tids
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone();
            if v.len() >= want || t0.elapsed() > Duration::from_secs(1) {
                return v;
            }
            std::thread::yield_now();
        }
    }

    /// Runs `f(i)` exactly once for every part `i in 0..nparts`, spread over
    /// the pool's threads in no particular assignment, and returns when all
    /// parts have finished. `f` must not depend on which thread runs it.
    /// A panic in any part is re-raised here after all parts finished.
    pub fn run(&self, nparts: usize, f: &(dyn Fn(usize) + Sync)) {
        self.run_on(nparts, &|i, _| f(i))
    }

    /// [`Par::run`] that also tells each part which participant runs it:
    /// `f(part, participant)` with `participant < self.threads()` (0 is the calling
    /// thread). Parts run one after another on a participant, so two parts running
    /// at the same time never share a participant index: a kernel can give each
    /// participant its own slice of a workspace ([`crate::kernels::Workspace`]).
    pub fn run_on(&self, nparts: usize, f: &(dyn Fn(usize, usize) + Sync)) {
        match &self.pool {
            Some(pool) if nparts > 1 => pool.run(nparts, f),
            _ => (0..nparts).for_each(|i| f(i, 0)),
        }
    }

    /// Splits `0..n` into contiguous ranges whose interior boundaries are
    /// multiples of `align` (use it to keep threads off each other's cache
    /// lines) and runs `f(range)` on each non-empty one, in parallel. The
    /// split is a fixed function of `n`, `align` and the thread count
    /// ([`PARTS_PER_THREAD`] parts per thread). When `work < min_work` the
    /// whole of `0..n` runs as one range on the calling thread. Kernels
    /// compute each row independently of the split, so neither the cut-off
    /// nor the thread count changes their output.
    pub fn for_ranges(
        &self,
        n: usize,
        align: usize,
        work: usize,
        min_work: usize,
        f: &(dyn Fn(Range<usize>) + Sync),
    ) {
        self.for_ranges_on(n, align, work, min_work, &|_, r| f(r))
    }

    /// `a[i] = f(a[i], b[i])` for every `i`, the elements split across the pool
    /// by [`Par::for_ranges`] (on the calling thread below a few thousand
    /// elements). Each element's result is `f` of its own inputs only, so the
    /// output is the same bits whatever the split or the thread count. For
    /// elementwise activations (`tanh`, `exp`: tens of ns per element).
    ///
    /// # Panics
    /// If `a.len() != b.len()`.
    pub fn zip_map(&self, a: &mut [f32], b: &[f32], f: &(dyn Fn(f32, f32) -> f32 + Sync)) {
        assert_eq!(a.len(), b.len(), "zip_map: lengths differ");
        let n = a.len();
        let out = OutPtr::new(a);
        // Weight 64 per element against the kernels' per-weight cut-off: an
        // activation costs tens of multiply-adds.
        self.for_ranges(n, 16, n * 64, super::dense::PAR_MIN_ELEMS, &|r| {
            // SAFETY: for_ranges hands out disjoint ranges.
            let o = unsafe { out.slice(r.clone()) };
            for (x, &y) in o.iter_mut().zip(&b[r]) {
                *x = f(*x, y);
            }
        });
    }

    /// [`Par::for_ranges`] calling `f(participant, range)`, the participant index
    /// as in [`Par::run_on`] (`< self.threads()`; 0 when the call runs on the
    /// calling thread alone).
    pub fn for_ranges_on(
        &self,
        n: usize,
        align: usize,
        work: usize,
        min_work: usize,
        f: &(dyn Fn(usize, Range<usize>) + Sync),
    ) {
        if n == 0 {
            return;
        }
        let align = align.max(1);
        let parts = (self.threads * PARTS_PER_THREAD).min(n.div_ceil(align));
        if self.threads == 1 || work < min_work || parts <= 1 {
            f(0, 0..n);
            return;
        }
        self.run_on(parts, &|i, who| {
            let r = partition(n, parts, align, i);
            if !r.is_empty() {
                f(who, r);
            }
        });
    }
}

/// Range of part `i` when `0..n` is split into `parts` contiguous pieces
/// with interior boundaries rounded down to multiples of `align`.
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

/// Claims and runs parts until none are left (as participant `who`); records panics.
fn claim_loop(s: &Shared, f: &(dyn Fn(usize, usize) + Sync), nparts: usize, who: usize) {
    loop {
        let i = s.next.fetch_add(1, SeqCst);
        if i >= nparts {
            return;
        }
        if catch_unwind(AssertUnwindSafe(|| f(i, who))).is_err() {
            s.panicked.store(true, SeqCst);
        }
    }
}

impl Pool {
    /// Starts `threads - 1` workers. On a spawn failure the pool built so far is
    /// dropped (its workers are shut down and joined) and the error returned.
    fn start(threads: usize) -> std::io::Result<Pool> {
        let shared = Arc::new(Shared {
            state: AtomicU64::new(0),
            job: UnsafeCell::new(None),
            nparts: AtomicUsize::new(0),
            next: AtomicUsize::new(0),
            active: AtomicUsize::new(0),
            panicked: AtomicBool::new(false),
            shutdown: AtomicBool::new(false),
            sleepers: AtomicUsize::new(0),
            start_lock: Mutex::new(()),
            start_cv: Condvar::new(),
            caller_sleeping: AtomicBool::new(false),
            done_lock: Mutex::new(()),
            done_cv: Condvar::new(),
            worker_tids: Mutex::new(Vec::with_capacity(threads - 1)),
        });
        let mut pool = Pool {
            shared,
            call_lock: Mutex::new(()),
            handles: Vec::with_capacity(threads - 1),
        };
        for tid in 1..threads {
            let s = Arc::clone(&pool.shared);
            let h = spawn_thread(format!("memdial-par-{tid}"), tid, move || worker(s, tid))
                .map_err(|e| {
                    std::io::Error::new(
                        e.kind(),
                        format!("cannot start kernel thread {tid} of {threads}: {e}"),
                    )
                })?;
            pool.handles.push(h);
        }
        Ok(pool)
    }

    fn run(&self, nparts: usize, f: &(dyn Fn(usize, usize) + Sync)) {
        let _guard = match self.call_lock.try_lock() {
            Ok(g) => g,
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            Err(TryLockError::WouldBlock) => {
                (0..nparts).for_each(|i| f(i, 0));
                return;
            }
        };
        let s = &*self.shared;
        // SAFETY: erase the closure's lifetime. Workers dereference it only
        // while registered in `active`, and we return (or unwind) only after
        // closing the job and seeing `active == 0`.
        let ptr: JobPtr =
            unsafe { std::mem::transmute::<&(dyn Fn(usize, usize) + Sync), JobPtr>(f) };
        unsafe { *s.job.get() = Some(ptr) };
        s.nparts.store(nparts, SeqCst);
        s.next.store(0, SeqCst);
        s.panicked.store(false, SeqCst);
        let epoch = (s.state.load(SeqCst) >> 1) + 1;
        {
            let _l = s.start_lock.lock().unwrap_or_else(|p| p.into_inner());
            s.state.store((epoch << 1) | 1, SeqCst);
            if s.sleepers.load(SeqCst) > 0 {
                s.start_cv.notify_all();
            }
        }

        claim_loop(s, f, nparts, 0);

        // All parts are claimed; close the job and wait for the workers that
        // are still inside one.
        s.state.store(epoch << 1, SeqCst);
        let t0 = Instant::now();
        let mut k = 0u32;
        while s.active.load(SeqCst) != 0 {
            k = k.wrapping_add(1);
            if !k.is_multiple_of(64) || t0.elapsed() < SPIN_TIME {
                std::hint::spin_loop();
                continue;
            }
            let mut l = s.done_lock.lock().unwrap_or_else(|p| p.into_inner());
            s.caller_sleeping.store(true, SeqCst);
            while s.active.load(SeqCst) != 0 {
                l = s.done_cv.wait(l).unwrap_or_else(|p| p.into_inner());
            }
            s.caller_sleeping.store(false, SeqCst);
        }
        unsafe { *s.job.get() = None };
        if s.panicked.load(SeqCst) {
            panic!("a memdial kernel part panicked");
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
            self.shared.shutdown.store(true, SeqCst);
        }
        self.shared.start_cv.notify_all();
        for h in self.handles.drain(..) {
            let _ = h.join();
        }
    }
}

/// Worker `tid` (its participant index, 1..threads).
fn worker(s: Arc<Shared>, tid: usize) {
    s.worker_tids
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push(crate::util::sched::gettid());
    let mut seen = 0u64; // last epoch this worker looked at
    loop {
        // Wait for a new epoch: spin for SPIN_TIME, then block.
        let t0 = Instant::now();
        let mut k = 0u32;
        let st = loop {
            if s.shutdown.load(SeqCst) {
                return;
            }
            let st = s.state.load(SeqCst);
            if st >> 1 != seen {
                break st;
            }
            k = k.wrapping_add(1);
            if !k.is_multiple_of(64) || t0.elapsed() < SPIN_TIME {
                std::hint::spin_loop();
                continue;
            }
            let mut l = s.start_lock.lock().unwrap_or_else(|p| p.into_inner());
            s.sleepers.fetch_add(1, SeqCst);
            while s.state.load(SeqCst) >> 1 == seen && !s.shutdown.load(SeqCst) {
                l = s.start_cv.wait(l).unwrap_or_else(|p| p.into_inner());
            }
            s.sleepers.fetch_sub(1, SeqCst);
        };
        seen = st >> 1;
        if st & 1 == 0 {
            continue; // already closed: the caller did all the parts
        }
        // Join: register first, then re-check that the same epoch is still
        // open. If it is, the caller will wait for us before the closure dies.
        s.active.fetch_add(1, SeqCst);
        if s.state.load(SeqCst) == st {
            // SAFETY: see `Shared`; the job is open and we are active.
            let job = unsafe { (*s.job.get()).expect("open job without closure") };
            let nparts = s.nparts.load(SeqCst);
            claim_loop(&s, unsafe { &*job }, nparts, tid);
        }
        if s.active.fetch_sub(1, SeqCst) == 1 && s.caller_sleeping.load(SeqCst) {
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

    /// The raw base pointer and length, for kernels whose threads own
    /// interleaved (non-contiguous) elements; writes must stay disjoint.
    pub(crate) fn raw(&self) -> (*mut f32, usize) {
        (self.0, self.1)
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

/// Starts thread `name` (index `i` of its pool) with [`std::thread::Builder::spawn`];
/// the OS's refusal (EAGAIN, ENOMEM) is returned, never a panic.
///
/// Test-only hook: with `MEMDIAL_TEST_SPAWN_FAIL_AT=i` in the environment the spawn of
/// index `i` fails as if the OS refused it (EAGAIN), so callers' error paths can be
/// tested deterministically (an address-space limit fails at whichever allocation
/// comes first, which may be inside a thread already started).
pub fn spawn_thread<F>(name: String, i: usize, f: F) -> std::io::Result<std::thread::JoinHandle<()>>
where
    F: FnOnce() + Send + 'static,
{
    if std::env::var("MEMDIAL_TEST_SPAWN_FAIL_AT")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        == Some(i)
    {
        return Err(std::io::Error::from_raw_os_error(11));
    }
    std::thread::Builder::new().name(name).spawn(f)
}

#[cfg(test)]
mod tests {

    /// Elementwise work split across the pool gives the bits of a plain loop at
    /// every thread count, below and above the single-thread cut-off.
    #[test]
    fn zip_map_is_the_plain_loop_at_every_thread_count() {
        let f = |g: f32, u: f32| 3.0 * (g / 3.0).tanh() * u;
        for n in [5usize, 1000, 40_000] {
            let a: Vec<f32> = (0..n).map(|i| (i as f32 * 0.37).sin() * 4.0).collect();
            let b: Vec<f32> = (0..n).map(|i| (i as f32 * 0.11).cos()).collect();
            let want: Vec<u32> = a.iter().zip(&b).map(|(&x, &y)| f(x, y).to_bits()).collect();
            for t in [1usize, 2, 3, 5] {
                let mut got = a.clone();
                Par::new(t).zip_map(&mut got, &b, &f);
                let got: Vec<u32> = got.iter().map(|v| v.to_bits()).collect();
                assert_eq!(got, want, "n {n} threads {t}");
            }
        }
    }
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
                for nparts in [0usize, 1, 2, 7, 40] {
                    let hits: Vec<AtomicUsize> = (0..nparts).map(|_| AtomicUsize::new(0)).collect();
                    par.run(nparts, &|i| {
                        hits[i].fetch_add(1, SeqCst);
                    });
                    assert!(hits.iter().all(|h| h.load(SeqCst) == 1));
                }
            }
        }
    }

    #[test]
    fn nested_run_falls_back_to_sequential() {
        let par = Par::new(3);
        let count = AtomicUsize::new(0);
        par.run(3, &|_| {
            par.run(3, &|_| {
                count.fetch_add(1, SeqCst);
            });
        });
        assert_eq!(count.load(SeqCst), 9);
    }

    #[test]
    fn worker_panic_is_reraised() {
        let par = Par::new(2);
        let r = catch_unwind(AssertUnwindSafe(|| {
            par.run(4, &|i| {
                if i == 3 {
                    panic!("boom");
                }
            })
        }));
        assert!(r.is_err());
        // Pool still usable afterwards.
        let count = AtomicUsize::new(0);
        par.run(5, &|_| {
            count.fetch_add(1, SeqCst);
        });
        assert_eq!(count.load(SeqCst), 5);
    }
}
