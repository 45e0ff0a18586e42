//! Kernel benchmarks: `cargo bench --bench kernels`.
//!
//! Throughput is weight bytes consumed per second (criterion
//! `Throughput::Bytes`). "cold" benches rotate through copies of the matrix
//! totalling >= 1 GiB (more than the last-level cache), so every call streams
//! its weights from RAM, as decode does; "hot" benches reuse one matrix.
//! Set `MEMDIAL_BENCH_QUICK=1` for a shorter run.

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use memdial::kernels::{
    matmul_bf16, matmul_mxfp4, matvec_bf16, matvec_mxfp4, ram_read_bandwidth, Isa, Par,
};

const GIB: usize = 1 << 30;

struct Rng(u64);
impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn f32(&mut self) -> f32 {
        ((self.next_u64() >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
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

/// Copies of `one` totalling at least `total` bytes (at least 1 copy).
fn copies(one: &[u8], total: usize) -> Vec<Vec<u8>> {
    let k = total.div_ceil(one.len()).max(1);
    (0..k).map(|_| one.to_vec()).collect()
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

fn thread_counts() -> Vec<usize> {
    vec![1, 2]
}

fn ram(c: &mut Criterion) {
    for t in thread_counts() {
        let par = Par::new(t);
        let bw = ram_read_bandwidth(&par, GIB, 5);
        eprintln!("ram_read_bandwidth threads={t}: {:.2} GB/s", bw / 1e9);
    }
    let mut g = c.benchmark_group("ram_read");
    g.throughput(Throughput::Bytes(GIB as u64));
    for t in thread_counts() {
        let par = Par::new(t);
        g.bench_function(BenchmarkId::new("1GiB", format!("t{t}")), |b| {
            b.iter(|| ram_read_bandwidth(&par, GIB, 1))
        });
    }
    g.finish();
}

fn overhead(c: &mut Criterion) {
    let mut g = c.benchmark_group("par_overhead");
    for t in thread_counts() {
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
    // Small matvecs around the single-thread cut-off.
    let mut rng = Rng(7);
    for &(rows, cols) in &[(64usize, 256usize), (256, 256), (1024, 256), (2048, 2048)] {
        let w = bf16_matrix(&mut rng, rows * cols);
        let x: Vec<f32> = (0..cols).map(|_| rng.f32()).collect();
        let mut y = vec![0f32; rows];
        g.throughput(Throughput::Bytes(w.len() as u64));
        for t in thread_counts() {
            let par = Par::new(t);
            g.bench_function(
                BenchmarkId::new(format!("bf16_{rows}x{cols}"), format!("t{t}")),
                |b| b.iter(|| matvec_bf16(&par, &w, rows, cols, &x, &mut y)),
            );
        }
    }
    g.finish();
}

fn bf16(c: &mut Criterion) {
    let mut rng = Rng(1);
    let mut g = c.benchmark_group("matvec_bf16_cold");
    for &(rows, cols) in &[(12288usize, 7168usize), (3584, 7168)] {
        let one = bf16_matrix(&mut rng, rows * cols);
        let mats = copies(&one, GIB);
        drop(one);
        let x: Vec<f32> = (0..cols).map(|_| rng.f32()).collect();
        let mut y = vec![0f32; rows];
        g.throughput(Throughput::Bytes((rows * cols * 2) as u64));
        for isa in isas() {
            for t in thread_counts() {
                let par = Par::with_isa(t, isa);
                let mut k = 0;
                g.bench_function(
                    BenchmarkId::new(format!("{rows}x{cols}/{}", isa_name(isa)), format!("t{t}")),
                    |b| {
                        b.iter(|| {
                            k = (k + 1) % mats.len();
                            matvec_bf16(&par, &mats[k], rows, cols, &x, &mut y)
                        })
                    },
                );
            }
        }
    }
    g.finish();

    // Prefill: 16 vectors through a [3584, 7168] matrix (hot).
    let mut g = c.benchmark_group("matmul_bf16_n16");
    let (rows, cols, n) = (3584usize, 7168usize, 16usize);
    let w = bf16_matrix(&mut rng, rows * cols);
    let xs: Vec<f32> = (0..n * cols).map(|_| rng.f32()).collect();
    let mut ys = vec![0f32; n * rows];
    g.throughput(Throughput::Bytes((rows * cols * 2) as u64));
    for t in thread_counts() {
        let par = Par::new(t);
        g.bench_function(
            BenchmarkId::new(format!("{rows}x{cols}"), format!("t{t}")),
            |b| b.iter(|| matmul_bf16(&par, &w, rows, cols, &xs, n, &mut ys)),
        );
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

fn mxfp4(c: &mut Criterion) {
    let mut rng = Rng(2);
    // K3 routed expert shapes: w1/w3 [3072 out, 3584 in], w2 [3584 out, 3072 in].
    for &(rows, cols) in &[(3072usize, 3584usize), (3584, 3072)] {
        let (p, s) = mxfp4_data(&mut rng, rows, cols);
        let bytes = p.len() + s.len();
        let x: Vec<f32> = (0..cols).map(|_| rng.f32()).collect();
        let mut y = vec![0f32; rows];
        for cold in [false, true] {
            let name = if cold {
                "matvec_mxfp4_cold"
            } else {
                "matvec_mxfp4_hot"
            };
            let mut g = c.benchmark_group(name);
            g.throughput(Throughput::Bytes(bytes as u64));
            let (ps, ss) = if cold {
                let k = GIB.div_ceil(bytes);
                (vec![p.clone(); k], vec![s.clone(); k])
            } else {
                (vec![p.clone()], vec![s.clone()])
            };
            for isa in isas() {
                for t in thread_counts() {
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
                                matvec_mxfp4(&par, &ps[k], &ss[k], rows, cols, &x, &mut y)
                            })
                        },
                    );
                }
            }
            g.finish();
        }
        // Prefill: 16 vectors (hot).
        let n = 16;
        let xs: Vec<f32> = (0..n * cols).map(|_| rng.f32()).collect();
        let mut ys = vec![0f32; n * rows];
        let mut g = c.benchmark_group("matmul_mxfp4_n16");
        g.throughput(Throughput::Bytes(bytes as u64));
        for t in thread_counts() {
            let par = Par::new(t);
            g.bench_function(
                BenchmarkId::new(format!("{rows}x{cols}"), format!("t{t}")),
                |b| b.iter(|| matmul_mxfp4(&par, &p, &s, rows, cols, &xs, n, &mut ys)),
            );
        }
        g.finish();
    }
}

fn config() -> Criterion {
    let quick = std::env::var_os("MEMDIAL_BENCH_QUICK").is_some();
    Criterion::default()
        .without_plots()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(if quick { 300 } else { 1000 }))
        .measurement_time(Duration::from_millis(if quick { 700 } else { 2000 }))
}

criterion_group! {
    name = benches;
    config = config();
    targets = ram, overhead, bf16, mxfp4
}
criterion_main!(benches);
