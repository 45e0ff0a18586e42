//! Recurrent-core benches at Kimi K3 head counts (docs/model.md §9):
//! - `kda_step`: one token through the gated delta rule of all 96 KDA heads
//!   (K = V = 128): decay, delta read, rank-1 update, output; the f32 state is
//!   96·128·128·4 = 6 MiB, read and written once per token.
//! - `mla_step`: one decode token's absorbed attention over the latent cache for all
//!   96 MLA heads (kv_lora 512 + rope 64 = 576-wide latents, f32) at several context
//!   lengths: `k3_96_heads` is the reference (one head at a time, each head reads the
//!   whole cache), `batched_t{1,2}` is `kernels::attend_latent_heads` (each latent read
//!   once for all heads, bit-identical) at 1 and 2 threads. Throughput is in elements =
//!   FLOPs (`2·H·len·(r+dr+r)` multiplies and adds), so criterion's `elem/s` is FLOP/s.
//!
//! The f32 mul+add peak ([`memdial::kernels::f32_peak_flops`]) is printed first,
//! the yardstick for the FLOP/s figures.
//!
//! `kda_step` throughput is bytes of state touched per second.
//! Run: `cargo bench -p memdial --bench model_steps`.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use memdial::kernels::{attend_latent_heads, f32_peak_flops, HeadQueries, Latents, Par, Workspace};
use memdial::model::kda::{decay, delta_rule_step};
use memdial::model::mla::attend_latent;
use memdial::model::MlaCache;
use std::hint::black_box;

const H: usize = 96;
const K: usize = 128;

fn pseudo(i: usize) -> f32 {
    // Deterministic values in (-1, 1) without an RNG dependency.
    let x = (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40;
    (x as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
}

fn kda_step(c: &mut Criterion) {
    let mut state = vec![0f32; H * K * K];
    let q: Vec<f32> = (0..H * K).map(|i| pseudo(i) * 0.088).collect();
    let k: Vec<f32> = (0..H * K).map(|i| pseudo(i + 7) * 0.088).collect();
    let v: Vec<f32> = (0..H * K).map(|i| pseudo(i + 13)).collect();
    let a: Vec<f32> = (0..H * K).map(|i| pseudo(i + 17)).collect();
    let dt: Vec<f32> = (0..H * K).map(|i| pseudo(i + 23) - 4.0).collect();
    let mut y = vec![0f32; H * K];
    let mut g = c.benchmark_group("kda_step");
    g.throughput(Throughput::Bytes((H * K * K * 4) as u64));
    g.bench_function("k3_96x128x128", |b| {
        b.iter(|| {
            for h in 0..H {
                let r = h * K..(h + 1) * K;
                let alpha = decay(&a[r.clone()], &dt[r.clone()], 1.0, Some(-5.0));
                delta_rule_step(
                    &mut state[h * K * K..(h + 1) * K * K],
                    &q[r.clone()],
                    &k[r.clone()],
                    &v[r.clone()],
                    &alpha,
                    0.5,
                    &mut y[r],
                );
            }
            black_box(&y);
        })
    });
    g.finish();
}

fn mla_step(c: &mut Criterion) {
    for threads in [1usize, 2] {
        let peak = f32_peak_flops(&Par::new(threads), 20_000_000, 5);
        println!(
            "f32 mul+add peak (thread CPU time, median of 5): {:.1} GFLOP/s at {threads} thread(s)",
            peak / 1e9
        );
    }
    let (r, dr) = (512usize, 64usize);
    let tau = 1.0 / ((128 + 64) as f32).sqrt();
    let mut g = c.benchmark_group("mla_step");
    for ctx in [256usize, 1024, 4096] {
        let cache = MlaCache {
            latents: (0..ctx * (r + dr)).map(pseudo).collect(),
            len: ctx,
        };
        let qh: Vec<f32> = (0..H * r).map(|i| pseudo(i + 3)).collect();
        let qpe: Vec<f32> = (0..H * dr).map(|i| pseudo(i + 5)).collect();
        g.throughput(Throughput::Elements((2 * H * ctx * (2 * r + dr)) as u64));
        g.bench_with_input(BenchmarkId::new("k3_96_heads", ctx), &ctx, |b, _| {
            b.iter(|| {
                for h in 0..H {
                    black_box(attend_latent(
                        &cache,
                        r,
                        dr,
                        &qh[h * r..(h + 1) * r],
                        &qpe[h * dr..(h + 1) * dr],
                        tau,
                    ));
                }
            })
        });
        for threads in [1usize, 2] {
            let par = Par::new(threads);
            let mut out = vec![0f32; H * r];
            g.bench_with_input(
                BenchmarkId::new(format!("batched_t{threads}"), ctx),
                &ctx,
                |b, _| {
                    b.iter(|| {
                        attend_latent_heads(
                            &par,
                            &mut Workspace::default(),
                            Latents {
                                data: &cache.latents,
                                len: ctx,
                                r,
                                dr,
                            },
                            HeadQueries {
                                q_abs: &qh,
                                q_pe: &qpe,
                                heads: H,
                                tau,
                            },
                            &mut out,
                        );
                        black_box(&out);
                    })
                },
            );
        }
    }
    g.finish();
}

fn config() -> Criterion {
    let quick = std::env::var_os("MEMDIAL_BENCH_QUICK").is_some();
    let c = Criterion::default().without_plots().sample_size(10);
    if quick {
        c.measurement_time(std::time::Duration::from_secs(2))
            .warm_up_time(std::time::Duration::from_millis(300))
    } else {
        c
    }
}

criterion_group! { name = steps; config = config(); targets = kda_step, mla_step }
criterion_main!(steps);
