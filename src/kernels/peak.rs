//! f32 compute-peak probe, the yardstick for compute-bound kernels (prefill
//! matmuls, MLA attention).
//!
//! The kernels multiply and add in separate, separately rounded instructions
//! (no FMA, for bit-identity across CPUs), so the relevant peak is that of
//! `mulps` + `addps`, not of FMA: on a core with two multiply and two add
//! pipes of 8 lanes (AVX2) it is 32 FLOP per cycle. The probe measures it
//! instead of deriving it from a clock: independent multiply chains and add
//! chains, interleaved, enough of them to cover the latency.

use std::sync::Mutex;

use super::{Isa, Par};

/// FLOPs of one [`probe_iter`] step on the SIMD path: 6 multiply chains and
/// 6 add chains of 8 lanes.
const FLOPS_PER_STEP_SIMD: usize = 12 * 8;

/// Measures the sustained f32 multiply + add rate in **FLOP per second**
/// (a multiply and an add count one FLOP each) with every thread of `par`
/// running `steps` steps of independent `mul` and `add` chains, `passes`
/// times; returns the **median** pass. A pass's time is the largest
/// per-thread **CPU time** (`CLOCK_THREAD_CPUTIME_ID`) of its parts, so
/// preemption by other processes on a shared machine does not lower the
/// figure (it is what the cores can do, not what a contended run gets). Uses
/// the SIMD width of `par.isa()` (AVX2 / AVX-512 hosts: 8-lane AVX2, the
/// width the kernels use; scalar: 1 lane, 12 chains).
///
/// # Panics
/// If `steps == 0` or `passes == 0`.
pub fn f32_peak_flops(par: &Par, steps: usize, passes: usize) -> f64 {
    assert!(
        steps > 0 && passes > 0,
        "f32_peak_flops: steps > 0, passes > 0"
    );
    let isa = par.isa();
    let per_step = match isa {
        Isa::Scalar => 12,
        _ => FLOPS_PER_STEP_SIMD,
    };
    let threads = par.threads();
    let mut times = Vec::with_capacity(passes);
    for _ in 0..passes {
        let worst = Mutex::new(0f64);
        par.run(threads, &|_| {
            let t0 = thread_cpu_seconds();
            std::hint::black_box(probe_iter(isa, steps));
            let dt = thread_cpu_seconds() - t0;
            let mut w = worst.lock().unwrap_or_else(|p| p.into_inner());
            *w = w.max(dt);
        });
        times.push(worst.into_inner().unwrap_or_else(|p| p.into_inner()));
    }
    times.sort_by(f64::total_cmp);
    (threads * steps * per_step) as f64 / times[passes / 2]
}

/// Runs `steps` steps; returns a value depending on all chains (so nothing
/// is optimised away).
fn probe_iter(isa: Isa, steps: usize) -> f32 {
    // ×1 and +0 keep the chains finite and normal (no denormal slow path)
    // for any step count; through black_box the compiler cannot fold them.
    let m = std::hint::black_box(1.0f32);
    let a = std::hint::black_box(0.0f32);
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: Par only selects an ISA the CPU supports.
        Isa::Avx2 | Isa::Avx512 => unsafe { avx2::probe(steps, m, a) },
        _ => {
            let mut p = [1f32; 6];
            let mut s = [0f32; 6];
            for _ in 0..steps {
                for k in 0..6 {
                    p[k] = std::hint::black_box(p[k] * m);
                    s[k] = std::hint::black_box(s[k] + a);
                }
            }
            p.iter().chain(&s).sum()
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    /// # Safety
    /// AVX2 required.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn probe(steps: usize, m: f32, a: f32) -> f32 {
        let mv = _mm256_set1_ps(m);
        let av = _mm256_set1_ps(a);
        let mut p = [_mm256_set1_ps(1.0); 6];
        let mut s = [_mm256_setzero_ps(); 6];
        for _ in 0..steps {
            for k in 0..6 {
                p[k] = _mm256_mul_ps(p[k], mv);
                s[k] = _mm256_add_ps(s[k], av);
            }
        }
        let mut t = _mm256_setzero_ps();
        for k in 0..6 {
            t = _mm256_add_ps(t, _mm256_add_ps(p[k], s[k]));
        }
        let mut out = [0f32; 8];
        _mm256_storeu_ps(out.as_mut_ptr(), t);
        out.iter().sum()
    }
}

/// CPU time of the calling thread in seconds (`CLOCK_THREAD_CPUTIME_ID`).
pub fn thread_cpu_seconds() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid out-pointer; the clock exists on every Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}
