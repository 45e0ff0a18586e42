//! Lossless-layout decoder benchmark: `cargo bench -p memdial --bench lossless`.
//!
//! Decodes 64 MiB of BF16 fixture-like weights (N(0, 1/1024) from the fixture's
//! generator) coded in 256 KiB blocks — more than the last-level cache, as the store's
//! reads are — in both block kinds (`bits3`, what `pack --codec smallest` writes, and
//! `dict15`), with the scalar and the AVX2 loop, with and without the per-block CRC-32
//! check the store always does. Throughput is **decoded** bytes per second (decimal
//! GB/s) of one core, measured in the calling thread's CPU time
//! (`CLOCK_THREAD_CPUTIME_ID`: immune to preemption on a shared machine). The rule in
//! `docs/lossless.md`: decode (with CRC) must stay ≥ 3× the disk's direct-read
//! bandwidth per core. `MEMDIAL_BENCH_QUICK=1` shortens the run.

use std::hint::black_box;
use std::time::Duration;

#[path = "common/thread_cpu.rs"]
mod thread_cpu;
use thread_cpu::ThreadCpu;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use memdial::format::lossless::codec::{decode_with, encode_as, Codec, DecodeIsa, Kind};

const TOTAL: usize = 64 << 20;
const BLOCK: usize = memdial::format::lossless::pack::BLOCK_BYTES;

fn blocks(codec: Codec) -> Vec<(Kind, Vec<u8>)> {
    let s = memdial::tools::fixture::rng::Stream::new(0, "bench.lossless");
    let sd = 1.0 / 1024f32.sqrt();
    let data: Vec<u8> = (0..TOTAL as u64 / 2)
        .flat_map(|i| {
            half::bf16::from_f32(s.normal(i) * sd)
                .to_bits()
                .to_le_bytes()
        })
        .collect();
    data.chunks(BLOCK)
        .map(|b| {
            let mut c = Vec::new();
            let k = encode_as(codec, b, 4096, &mut c);
            (k, c)
        })
        .collect()
}

fn decode_all(isa: DecodeIsa, crc: bool, bs: &[(Kind, Vec<u8>)], out: &mut [u8]) {
    for ((k, c), o) in bs.iter().zip(out.chunks_mut(BLOCK)) {
        if crc {
            black_box(crc32fast::hash(c));
        }
        decode_with(isa, *k, c, o).unwrap();
    }
}

fn bench(c: &mut Criterion<ThreadCpu>) {
    let mut out = vec![0u8; TOTAL];
    let mut g = c.benchmark_group("lossless_decode");
    g.throughput(Throughput::BytesDecimal(TOTAL as u64));
    // `smallest` codes these blocks as 3-bit planes; `dict15` as nibble dictionaries.
    for (name, codec) in [("bits3", Codec::Smallest), ("dict15", Codec::Dict15)] {
        let bs = blocks(codec);
        let coded: usize = bs.iter().map(|(_, c)| c.len()).sum();
        eprintln!(
            "lossless bench {name}: {} MiB in {} blocks, coded {:.4} of decoded",
            TOTAL >> 20,
            bs.len(),
            coded as f64 / TOTAL as f64
        );
        for isa in [DecodeIsa::Scalar, DecodeIsa::Avx2] {
            if !isa.is_supported() {
                eprintln!("lossless bench: {isa:?} not on this CPU, skipped");
                continue;
            }
            for crc in [false, true] {
                let id = BenchmarkId::new(
                    format!("{name}/{isa:?}"),
                    if crc { "crc" } else { "no-crc" },
                );
                g.bench_function(id, |b| b.iter(|| decode_all(isa, crc, &bs, &mut out)));
            }
        }
    }
    g.finish();
}

fn config() -> Criterion<ThreadCpu> {
    let quick = std::env::var_os("MEMDIAL_BENCH_QUICK").is_some();
    let (w, m) = if quick { (300, 700) } else { (700, 2000) };
    Criterion::default()
        .without_plots()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(w))
        .measurement_time(Duration::from_millis(m))
        .with_measurement(ThreadCpu)
}

criterion_group! {
    name = benches;
    config = config();
    targets = bench
}
criterion_main!(benches);
