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

/// FLOPs of one [`probe_iter`] step on the AVX2 path: 6 multiply chains and
/// 6 add chains of 8 lanes.
const FLOPS_PER_STEP_SIMD: usize = 12 * 8;

/// The same with 16-lane (AVX-512) registers and 10 + 10 chains (32 registers:
/// enough to cover a 5-cycle latency at two operations per cycle).
const FLOPS_PER_STEP_ZMM: usize = 20 * 16;

/// Measures the sustained f32 multiply + add rate in **FLOP per second**
/// (a multiply and an add count one FLOP each) with every thread of `par`
/// running `steps` steps of independent `mul` and `add` chains, `passes`
/// times; returns the **median** pass. A pass's time is the largest
/// per-thread **CPU time** (`CLOCK_THREAD_CPUTIME_ID`) of its parts, so
/// preemption by other processes on a shared machine does not lower the
/// figure (it is what the cores can do, not what a contended run gets). Uses
/// the SIMD widths of `par.isa()`: AVX2, 8 lanes; AVX-512, the larger of the
/// 8-lane and the 16-lane rates (the prefill matmuls use 16 lanes there, the
/// other kernels 8; some cores run 16-lane code at twice the 8-lane rate,
/// others at the same or less, so the larger is the honest yardstick for
/// both); scalar: 1 lane, 12 chains.
///
/// # Panics
/// If `steps == 0` or `passes == 0`.
pub fn f32_peak_flops(par: &Par, steps: usize, passes: usize) -> f64 {
    let narrow = peak_at(par, false, steps, passes);
    if par.isa() == Isa::Avx512 {
        narrow.max(peak_at(par, true, steps, passes))
    } else {
        narrow
    }
}

/// [`f32_peak_flops`] at one width (`wide`: 16 lanes, AVX-512 only).
fn peak_at(par: &Par, wide: bool, steps: usize, passes: usize) -> f64 {
    assert!(
        steps > 0 && passes > 0,
        "f32_peak_flops: steps > 0, passes > 0"
    );
    let isa = par.isa();
    let per_step = match isa {
        Isa::Scalar => 12,
        _ if wide => FLOPS_PER_STEP_ZMM,
        _ => FLOPS_PER_STEP_SIMD,
    };
    let threads = par.threads();
    let mut times = Vec::with_capacity(passes);
    for _ in 0..passes {
        let worst = Mutex::new(0f64);
        par.run(threads, &|_| {
            let t0 = thread_cpu_seconds();
            std::hint::black_box(probe_iter(isa, wide, steps));
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
fn probe_iter(isa: Isa, wide: bool, steps: usize) -> f32 {
    // ×1 and +0 keep the chains finite and normal (no denormal slow path)
    // for any step count; through black_box the compiler cannot fold them.
    let m = std::hint::black_box(1.0f32);
    let a = std::hint::black_box(0.0f32);
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: Par only selects an ISA the CPU supports.
        Isa::Avx512 if wide => unsafe { avx2::probe_zmm(steps, m, a) },
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

    /// [`probe`] with 16-lane registers and 10 chains of each kind.
    ///
    /// # Safety
    /// AVX-512F required.
    #[target_feature(enable = "avx512f,avx2")]
    pub(super) unsafe fn probe_zmm(steps: usize, m: f32, a: f32) -> f32 {
        let mv = _mm512_set1_ps(m);
        let av = _mm512_set1_ps(a);
        let mut p = [_mm512_set1_ps(1.0); 10];
        let mut s = [_mm512_setzero_ps(); 10];
        for _ in 0..steps {
            for k in 0..10 {
                p[k] = _mm512_mul_ps(p[k], mv);
                s[k] = _mm512_add_ps(s[k], av);
            }
        }
        let mut t = _mm512_setzero_ps();
        for k in 0..10 {
            t = _mm512_add_ps(t, _mm512_add_ps(p[k], s[k]));
        }
        let mut out = [0f32; 16];
        _mm512_storeu_ps(out.as_mut_ptr(), t);
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Each chain multiplies 1 by 1 and adds 0 to 0, so a probe returns
    /// (product chains × 1 + sum chains × 0) per lane, summed over lanes:
    /// 6 (scalar), 6 × 8 = 48 (8 lanes), 10 × 16 = 160 (16 lanes), whatever the
    /// step count.
    #[test]
    fn probes_compute_what_they_claim() {
        assert_eq!(probe_iter(Isa::Scalar, false, 7), 6.0);
        if Isa::Avx2.is_supported() {
            assert_eq!(probe_iter(Isa::Avx2, false, 7), 48.0);
        }
        if Isa::Avx512.is_supported() {
            assert_eq!(probe_iter(Isa::Avx512, false, 7), 48.0);
            assert_eq!(probe_iter(Isa::Avx512, true, 7), 160.0);
        }
        let f = f32_peak_flops(&Par::new(1), 1000, 3);
        assert!(f.is_finite() && f > 0.0, "{f}");
    }
}
