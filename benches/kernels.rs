//! Kernel benchmarks: `cargo bench -p memdial --bench kernels`.
//!
//! Matvec throughput is weight bytes consumed per second, in decimal GB/s
//! (criterion `Throughput::BytesDecimal`); prefill matmul throughput is
//! FLOPs (`Throughput::Elements`, 2·rows·cols·n), compared with the f32
//! mul+add peak (`f32_peak_flops`, printed first). "cold" benches rotate through
//! copies of the matrix totalling >= 1 GiB (more than the last-level cache),
//! so every call streams its weights from RAM, as decode does; "hot" benches
//! reuse one matrix (MXFP4 expert: 5.8 MB, cache-resident).
//!
//! Two measurements:
//! * `wall/...`: criterion's wall clock, threads 1 and 2.
//! * `cpu/...`: CPU time of the calling thread (`CLOCK_THREAD_CPUTIME_ID`),
//!   threads 1 only. It is immune to preemption by other processes, which
//!   dominates wall-clock numbers on a shared 2-core machine.
//!
//! The f32 peak probe and the RAM read-bandwidth probe (`ram_read_bandwidth`, median of 7 passes
//! over 1 GiB) is printed first. `MEMDIAL_BENCH_QUICK=1` shortens the run.

use std::hint::black_box;
use std::time::Duration;

#[path = "common/thread_cpu.rs"]
mod thread_cpu;
use thread_cpu::ThreadCpu;

use criterion::measurement::Measurement;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use memdial::kernels::{
    f32_peak_flops, matmul_bf16, matmul_mxfp4, matvec_bf16, matvec_mxfp4, ram_read_bandwidth,
    DenseMat, Isa, Mxfp4Mat, Par, Workspace,
};

const GIB: usize = 1 << 30;

/// Test data from the project's one deterministic generator.
struct Rng(memdial::util::rng::SplitMix64);
impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0.next_u64()
    }
    fn f32(&mut self) -> f32 {
        self.0.next_f32_signed()
    }
}

/// Normal-range BF16 values in [-1, 1) (no denormals, which would measure
/// microcode assists instead of the kernel).
fn bf16_matrix(rng: &mut Rng, n: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(2 * n);
    for _ in 0..n {
        let f = rng.f32();
        let f = if f.abs() < 1e-3 { 0.5 } else { f };
        v.extend_from_slice(&((f.to_bits() >> 16) as u16).to_le_bytes());
    }
    v
}

fn isas() -> Vec<Isa> {
    [Isa::Avx512, Isa::Avx2, Isa::Scalar]
        .into_iter()
        .filter(|i| i.is_supported())
        .collect()
}

fn isa_name(i: Isa) -> &'static str {
    match i {
        Isa::Scalar => "scalar",
        Isa::Avx2 => "avx2",
        Isa::Avx512 => "avx512",
    }
}

fn probes(_c: &mut Criterion) {
    for t in [1usize, 2] {
        let par = Par::new(t);
        let peak = f32_peak_flops(&par, 20_000_000, 5);
        eprintln!(
            "f32_peak_flops threads={t}: {:.1} GFLOP/s (mul+add, thread CPU time, median of 5)",
            peak / 1e9
        );
    }
    for t in [1usize, 2] {
        let par = Par::new(t);
        let bw = ram_read_bandwidth(&par, GIB, 7);
        eprintln!(
            "ram_read_bandwidth threads={t}: {:.2} GB/s (median of 7 passes over 1 GiB)",
            bw / 1e9
        );
    }
}

fn overhead(c: &mut Criterion) {
    let mut g = c.benchmark_group("wall/par_overhead");
    for t in [1usize, 2] {
        let par = Par::new(t);
        g.bench_function(BenchmarkId::new("pool_run_empty", format!("t{t}")), |b| {
            b.iter(|| {
                par.run(t, &|i| {
                    black_box(i);
                })
            })
        });
    }
    g.bench_function("thread_scope_spawn1_empty", |b| {
        b.iter(|| {
            std::thread::scope(|s| {
                s.spawn(|| black_box(1));
            })
        })
    });
    // Small matvecs around the single-thread cut-off (PAR_MIN_ELEMS = 65536).
    let mut rng = Rng(memdial::util::rng::SplitMix64::new(7));
    for &(rows, cols) in &[(128usize, 256usize), (256, 256), (1024, 256), (2048, 2048)] {
        let w = bf16_matrix(&mut rng, rows * cols);
        let x: Vec<f32> = (0..cols).map(|_| rng.f32()).collect();
        let mut y = vec![0f32; rows];
        g.throughput(Throughput::BytesDecimal(w.len() as u64));
        for t in [1usize, 2] {
            let par = Par::new(t);
            g.bench_function(
                BenchmarkId::new(format!("bf16_{rows}x{cols}"), format!("t{t}")),
                |b| b.iter(|| matvec_bf16(&par, DenseMat::new(&w, rows, cols), &x, &mut y)),
            );
        }
    }
    g.finish();
}

fn bf16_benches<M: Measurement>(c: &mut Criterion<M>, prefix: &str, threads: &[usize]) {
    let mut rng = Rng(memdial::util::rng::SplitMix64::new(1));
    let mut g = c.benchmark_group(format!("{prefix}/matvec_bf16_cold"));
    for &(rows, cols) in &[(12288usize, 7168usize), (3584, 7168)] {
        let one = bf16_matrix(&mut rng, rows * cols);
        let mats: Vec<Vec<u8>> = (0..GIB.div_ceil(one.len())).map(|_| one.clone()).collect();
        drop(one);
        let x: Vec<f32> = (0..cols).map(|_| rng.f32()).collect();
        let mut y = vec![0f32; rows];
        g.throughput(Throughput::BytesDecimal((rows * cols * 2) as u64));
        for isa in isas() {
            for &t in threads {
                let par = Par::with_isa(t, isa);
                let mut k = 0;
                g.bench_function(
                    BenchmarkId::new(format!("{rows}x{cols}/{}", isa_name(isa)), format!("t{t}")),
                    |b| {
                        b.iter(|| {
                            k = (k + 1) % mats.len();
                            matvec_bf16(&par, DenseMat::new(&mats[k], rows, cols), &x, &mut y)
                        })
                    },
                );
            }
        }
    }
    g.finish();
}

fn mxfp4_data(rng: &mut Rng, rows: usize, cols: usize) -> (Vec<u8>, Vec<u8>) {
    let packed = (0..rows * cols / 2)
        .map(|_| (rng.next_u64() >> 56) as u8)
        .collect();
    let scales = (0..rows * cols / 32)
        .map(|_| 118 + (rng.next_u64() % 10) as u8)
        .collect();
    (packed, scales)
}

fn mxfp4_benches<M: Measurement>(c: &mut Criterion<M>, prefix: &str, threads: &[usize]) {
    let mut rng = Rng(memdial::util::rng::SplitMix64::new(2));
    // K3 routed expert shapes: w1/w3 [3072 out, 3584 in], w2 [3584 out, 3072 in].
    for &(rows, cols) in &[(3072usize, 3584usize), (3584, 3072)] {
        let (p, s) = mxfp4_data(&mut rng, rows, cols);
        let bytes = p.len() + s.len();
        let x: Vec<f32> = (0..cols).map(|_| rng.f32()).collect();
        let mut y = vec![0f32; rows];
        for cold in [false, true] {
            let kind = if cold { "cold" } else { "hot" };
            let mut g = c.benchmark_group(format!("{prefix}/matvec_mxfp4_{kind}"));
            g.throughput(Throughput::BytesDecimal(bytes as u64));
            let k = if cold { GIB.div_ceil(bytes) } else { 1 };
            let (ps, ss) = (vec![p.clone(); k], vec![s.clone(); k]);
            for isa in isas() {
                for &t in threads {
                    let par = Par::with_isa(t, isa);
                    let mut k = 0;
                    g.bench_function(
                        BenchmarkId::new(
                            format!("{rows}x{cols}/{}", isa_name(isa)),
                            format!("t{t}"),
                        ),
                        |b| {
                            b.iter(|| {
                                k = (k + 1) % ps.len();
                                matvec_mxfp4(
                                    &par,
                                    &mut Workspace::default(),
                                    Mxfp4Mat::new(&ps[k], &ss[k], rows, cols),
                                    &x,
                                    &mut y,
                                )
                            })
                        },
                    );
                }
            }
            g.finish();
        }
    }
}

/// Prefill matmuls (hot: the same matrix every call), n = 16 and 64 tokens,
/// through the `_in` entry points with one workspace kept across calls, as the
/// engine calls them (its arena holds the workspace).
/// Throughput is in elements = FLOPs (2·rows·cols·n: one multiply and one
/// add per weight and token), so `Gelem/s` reads as GFLOP/s; compare with
/// the f32 peak printed by `probes`.
fn matmul_benches<M: Measurement>(c: &mut Criterion<M>, prefix: &str, threads: &[usize]) {
    let mut rng = Rng(memdial::util::rng::SplitMix64::new(3));
    let (rows, cols) = (3584usize, 7168usize);
    let w = bf16_matrix(&mut rng, rows * cols);
    // K3 routed expert w1/w3 shape.
    let (mr, mc) = (3072usize, 3584usize);
    let (p, s) = mxfp4_data(&mut rng, mr, mc);
    for n in [16usize, 64] {
        let xs: Vec<f32> = (0..n * cols).map(|_| rng.f32()).collect();
        let mut ys = vec![0f32; n * rows];
        let mut g = c.benchmark_group(format!("{prefix}/matmul_bf16_n{n}"));
        g.throughput(Throughput::Elements((2 * rows * cols * n) as u64));
        for &t in threads {
            let par = Par::new(t);
            g.bench_function(
                BenchmarkId::new(format!("{rows}x{cols}"), format!("t{t}")),
                |b| {
                    let mut ws = Workspace::default();
                    b.iter(|| {
                        matmul_bf16(
                            &par,
                            &mut ws,
                            DenseMat::new(&w, rows, cols),
                            &xs,
                            n,
                            &mut ys,
                        )
                    })
                },
            );
        }
        g.finish();
        let mut ys = vec![0f32; n * mr];
        let mut g = c.benchmark_group(format!("{prefix}/matmul_mxfp4_n{n}"));
        g.throughput(Throughput::Elements((2 * mr * mc * n) as u64));
        for &t in threads {
            let par = Par::new(t);
            g.bench_function(
                BenchmarkId::new(format!("{mr}x{mc}"), format!("t{t}")),
                |b| {
                    let mut ws = Workspace::default();
                    b.iter(|| {
                        let xs = &xs[..n * mc];
                        matmul_mxfp4(&par, &mut ws, Mxfp4Mat::new(&p, &s, mr, mc), xs, n, &mut ys)
                    })
                },
            );
        }
        g.finish();
    }
}

fn wall_kernels(c: &mut Criterion) {
    bf16_benches(c, "wall", &[1, 2]);
    mxfp4_benches(c, "wall", &[1, 2]);
    matmul_benches(c, "wall", &[1, 2]);
}

fn cpu_kernels(c: &mut Criterion<ThreadCpu>) {
    bf16_benches(c, "cpu", &[1]);
    mxfp4_benches(c, "cpu", &[1]);
    matmul_benches(c, "cpu", &[1]);
}

fn times() -> (Duration, Duration) {
    if std::env::var_os("MEMDIAL_BENCH_QUICK").is_some() {
        (Duration::from_millis(300), Duration::from_millis(700))
    } else {
        (Duration::from_millis(700), Duration::from_millis(1500))
    }
}

fn wall_config() -> Criterion {
    let (w, m) = times();
    Criterion::default()
        .without_plots()
        .sample_size(10)
        .warm_up_time(w)
        .measurement_time(m)
}

fn cpu_config() -> Criterion<ThreadCpu> {
    let (w, m) = times();
    Criterion::default()
        .without_plots()
        .sample_size(10)
        .warm_up_time(w)
        .measurement_time(m)
        .with_measurement(ThreadCpu)
}

criterion_group! {
    name = wall;
    config = wall_config();
    targets = probes, overhead, wall_kernels
}
criterion_group! {
    name = cpu;
    config = cpu_config();
    targets = cpu_kernels
}
criterion_main!(wall, cpu);
