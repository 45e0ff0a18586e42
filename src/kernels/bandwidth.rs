//! RAM read-bandwidth probe, the yardstick for kernel throughput.

use std::time::Instant;

use super::par::Par;

/// Measures sustained RAM read bandwidth in **bytes per second**: allocates
/// `bytes` (rounded down to 8; use ≥ 2× the last-level cache, e.g. 1 GiB),
/// touches it once, then sums it as `u64`s `passes` times with all threads
/// of `par` (each thread reads a contiguous slice) and returns the
/// **median** pass (comparable to criterion's medians; on a shared machine
/// the best pass overstates what a kernel sees). Allocation and first touch
/// are excluded from the timing.
///
/// # Panics
/// If `bytes < 8` or `passes == 0`, or if the allocation fails.
pub fn ram_read_bandwidth(par: &Par, bytes: usize, passes: usize) -> f64 {
    assert!(
        bytes >= 8 && passes > 0,
        "ram_read_bandwidth: bytes >= 8, passes > 0"
    );
    let n = bytes / 8;
    let mut buf = vec![0u64; n];
    // First touch in parallel so pages land near the threads that read them.
    {
        let out = SyncMut(buf.as_mut_ptr());
        par.for_ranges(n, 512, n, 0, &|r| {
            let o = &out;
            for i in r {
                // SAFETY: disjoint ranges.
                unsafe { *o.0.add(i) = i as u64 };
            }
        });
    }
    let mut times = Vec::with_capacity(passes);
    let total = std::sync::atomic::AtomicU64::new(0);
    for _ in 0..passes {
        let t0 = Instant::now();
        par.for_ranges(n, 512, n, 0, &|r| {
            let s = sum_u64(&buf[r]);
            total.fetch_add(s, std::sync::atomic::Ordering::Relaxed);
        });
        times.push(t0.elapsed().as_secs_f64());
    }
    times.sort_by(f64::total_cmp);
    std::hint::black_box(total.load(std::sync::atomic::Ordering::Relaxed));
    (n * 8) as f64 / times[passes / 2]
}

struct SyncMut(*mut u64);
// SAFETY: used for disjoint writes only.
unsafe impl Sync for SyncMut {}

/// Sum with 8 independent accumulators (vectorised by the compiler).
fn sum_u64(v: &[u64]) -> u64 {
    let mut a = [0u64; 8];
    let chunks = v.chunks_exact(8);
    let rem = chunks.remainder();
    for c in chunks {
        for l in 0..8 {
            a[l] = a[l].wrapping_add(c[l]);
        }
    }
    let mut s = a.iter().fold(0u64, |x, y| x.wrapping_add(*y));
    for &r in rem {
        s = s.wrapping_add(r);
    }
    s
}
