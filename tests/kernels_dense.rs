//! BF16 / F32 dense kernels: accuracy against an f64 reference, and bit
//! identity across thread counts, ISAs, and matvec vs matmul.

mod isa_util;

use isa_util::{panics_with, per_isa, with_scalar};
use memdial::kernels::workspace::product_floats;
use memdial::kernels::{
    attend_latent_heads, attend_latent_ref, bf16_to_f32, matmul_bf16, matmul_f32, matmul_mxfp4,
    matvec_bf16, matvec_f32, matvec_mxfp4, DenseMat, HeadQueries, Isa, Latents, Mxfp4Mat, Par,
    Workspace,
};
use memdial_testkit as testkit;

/// Test data from the project's one deterministic generator.
struct Rng(memdial::util::rng::SplitMix64);
impl Rng {
    /// Uniform in [-1, 1).
    fn f32(&mut self) -> f32 {
        self.0.next_f32_signed()
    }
}

/// Random BF16 matrix: (bytes, exact f32 values).
fn rand_bf16(rng: &mut Rng, n: usize) -> (Vec<u8>, Vec<f32>) {
    let mut bytes = Vec::with_capacity(2 * n);
    let mut vals = Vec::with_capacity(n);
    for _ in 0..n {
        let h = (rng.f32().to_bits() >> 16) as u16;
        bytes.extend_from_slice(&h.to_le_bytes());
        vals.push(f32::from_bits((h as u32) << 16));
    }
    (bytes, vals)
}

fn rand_vec(rng: &mut Rng, n: usize) -> Vec<f32> {
    (0..n).map(|_| rng.f32()).collect()
}

/// f64 reference and Σ|w·x| per row.
fn reference(w: &[f32], rows: usize, cols: usize, x: &[f32]) -> Vec<(f64, f64)> {
    (0..rows)
        .map(|r| {
            let mut s = 0f64;
            let mut a = 0f64;
            for c in 0..cols {
                let p = w[r * cols + c] as f64 * x[c] as f64;
                s += p;
                a += p.abs();
            }
            (s, a)
        })
        .collect()
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|f| f.to_bits()).collect()
}

const SHAPES: &[(usize, usize)] = &[
    (1, 1),
    (3, 31),
    (5, 32),
    (7, 33),
    (17, 64),
    (33, 100),
    (300, 515),
    (129, 1024),
    (64, 7168),
];

fn bf16_known_values() {
    // 1.0 = 0x3F80, -2.0 = 0xC000, 0.5 = 0x3F00 (little-endian bytes).
    assert_eq!(
        bf16_to_f32(&[0x80, 0x3F, 0x00, 0xC0, 0x00, 0x3F]),
        vec![1.0, -2.0, 0.5]
    );
    let w = [0x80u8, 0x3F, 0x00, 0xC0, 0x00, 0x3F, 0x80, 0x3F];
    let par = Par::new(1);
    let mut y = [0f32; 2];
    matvec_bf16(&par, DenseMat::new(&w, 2, 2), &[3.0, 5.0], &mut y);
    assert_eq!(y, [3.0 - 10.0, 1.5 + 5.0]);
}

fn bf16_matvec_matches_f64_reference(only: Isa) {
    let mut rng = Rng(memdial::util::rng::SplitMix64::new(1));
    for &(rows, cols) in SHAPES {
        let (wb, wf) = rand_bf16(&mut rng, rows * cols);
        let x = rand_vec(&mut rng, cols);
        let refs = reference(&wf, rows, cols, &x);
        for isa in with_scalar(only) {
            let par = Par::with_isa(2, isa);
            let mut y = vec![0f32; rows];
            matvec_bf16(&par, DenseMat::new(&wb, rows, cols), &x, &mut y);
            for (r, (&yr, &(s, a))) in y.iter().zip(&refs).enumerate() {
                let tol = 1e-5 * a + 1e-30;
                assert!(
                    (yr as f64 - s).abs() <= tol,
                    "{isa:?} {rows}x{cols} row {r}: got {yr}, want {s} (tol {tol})"
                );
            }
        }
    }
}

fn f32_matvec_matches_f64_reference(only: Isa) {
    let mut rng = Rng(memdial::util::rng::SplitMix64::new(2));
    for &(rows, cols) in SHAPES {
        let wf = rand_vec(&mut rng, rows * cols);
        let wb: Vec<u8> = wf.iter().flat_map(|f| f.to_le_bytes()).collect();
        let x = rand_vec(&mut rng, cols);
        let refs = reference(&wf, rows, cols, &x);
        for isa in with_scalar(only) {
            let par = Par::with_isa(3, isa);
            let mut y = vec![0f32; rows];
            matvec_f32(&par, DenseMat::new(&wb, rows, cols), &x, &mut y);
            for (r, (&yr, &(s, a))) in y.iter().zip(&refs).enumerate() {
                let tol = 1e-5 * a + 1e-30;
                assert!(
                    (yr as f64 - s).abs() <= tol,
                    "{isa:?} {rows}x{cols} row {r}: got {yr}, want {s}"
                );
            }
        }
    }
}

fn bit_identical_across_threads_isas_and_alignment(only: Isa) {
    let mut rng = Rng(memdial::util::rng::SplitMix64::new(3));
    for &(rows, cols) in &[(300usize, 515usize), (1000, 96), (37, 7168), (2, 3)] {
        let (wb, _) = rand_bf16(&mut rng, rows * cols);
        let wf32: Vec<u8> = (0..rows * cols)
            .flat_map(|_| rng.f32().to_le_bytes())
            .collect();
        let x = rand_vec(&mut rng, cols);
        // Same bytes at an odd address.
        let mut shifted = vec![0u8; wb.len() + 1];
        shifted[1..].copy_from_slice(&wb);
        let mut shifted32 = vec![0u8; wf32.len() + 3];
        shifted32[3..].copy_from_slice(&wf32);

        let mut want_bf16: Option<Vec<u32>> = None;
        let mut want_f32: Option<Vec<u32>> = None;
        for isa in with_scalar(only) {
            for t in [1usize, 2, 3, 4, 7] {
                let par = Par::with_isa(t, isa);
                let mut y = vec![0f32; rows];
                for w in [&wb[..], &shifted[1..]] {
                    matvec_bf16(&par, DenseMat::new(w, rows, cols), &x, &mut y);
                    let b = bits(&y);
                    match &want_bf16 {
                        None => want_bf16 = Some(b),
                        Some(want) => {
                            assert_eq!(&b, want, "bf16 {rows}x{cols} {isa:?} threads {t}")
                        }
                    }
                }
                for w in [&wf32[..], &shifted32[3..]] {
                    matvec_f32(&par, DenseMat::new(w, rows, cols), &x, &mut y);
                    let b = bits(&y);
                    match &want_f32 {
                        None => want_f32 = Some(b),
                        Some(want) => {
                            assert_eq!(&b, want, "f32 {rows}x{cols} {isa:?} threads {t}")
                        }
                    }
                }
            }
        }
    }
}

fn matmul_equals_repeated_matvec_bitwise(only: Isa) {
    let mut rng = Rng(memdial::util::rng::SplitMix64::new(4));
    for &(rows, cols) in &[(300usize, 515usize), (64, 7168), (9, 40), (37, 96)] {
        let (wb, _) = rand_bf16(&mut rng, rows * cols);
        let wf32: Vec<u8> = (0..rows * cols)
            .flat_map(|_| rng.f32().to_le_bytes())
            .collect();
        for n in [1usize, 3, 5, 16, 17] {
            let xs = rand_vec(&mut rng, n * cols);
            for isa in with_scalar(only) {
                for t in [1usize, 2, 3] {
                    let par = Par::with_isa(t, isa);
                    let mut ys = vec![0f32; n * rows];
                    let mut y = vec![0f32; rows];
                    matmul_bf16(
                        &par,
                        &mut Workspace::default(),
                        DenseMat::new(&wb, rows, cols),
                        &xs,
                        n,
                        &mut ys,
                    );
                    for v in 0..n {
                        matvec_bf16(
                            &par,
                            DenseMat::new(&wb, rows, cols),
                            &xs[v * cols..][..cols],
                            &mut y,
                        );
                        assert_eq!(bits(&ys[v * rows..][..rows]), bits(&y), "bf16 n={n} v={v}");
                    }
                    matmul_f32(
                        &par,
                        &mut Workspace::default(),
                        DenseMat::new(&wf32, rows, cols),
                        &xs,
                        n,
                        &mut ys,
                    );
                    for v in 0..n {
                        matvec_f32(
                            &par,
                            DenseMat::new(&wf32, rows, cols),
                            &xs[v * cols..][..cols],
                            &mut y,
                        );
                        assert_eq!(bits(&ys[v * rows..][..rows]), bits(&y), "f32 n={n} v={v}");
                    }
                }
            }
        }
    }
}

fn shape_mismatch_panics() {
    panics_with("matvec_bf16: weight has", || {
        let par = Par::new(1);
        let mut y = [0f32; 2];
        matvec_bf16(&par, DenseMat::new(&[0u8; 6], 2, 2), &[0.0; 2], &mut y);
    });
}

/// MLA attention: the batched heads equal the per-head reference bit for bit, for
/// shapes with tails in every tile dimension, at 1 and 2 threads (`isa` against the
/// scalar batched path, which is checked against the reference).
fn mla_attend_batched_matches_reference_bitwise(isa: Isa) {
    let mut rng = Rng(memdial::util::rng::SplitMix64::new(7));
    let mut rand_vec =
        |n: usize, scale: f32| -> Vec<f32> { (0..n).map(|_| rng.f32() * scale).collect() };
    for &(len, r, dr, heads) in &[
        (1usize, 64usize, 16usize, 4usize),
        (5, 64, 16, 4),
        (37, 72, 8, 13),
        (130, 512, 64, 96),
        (9, 20, 4, 30),
    ] {
        let lat = rand_vec(len * (r + dr), 1.0);
        let qa = rand_vec(heads * r, 0.5);
        let qp = rand_vec(heads * dr, 0.5);
        let tau = 1.0 / ((r / 4 + dr) as f32).sqrt();
        let mut want = vec![0f32; heads * r];
        let scalar = Par::with_isa(1, Isa::Scalar);
        attend_latent_heads(
            &scalar,
            &mut Workspace::default(),
            Latents {
                data: &lat,
                len,
                r,
                dr,
            },
            HeadQueries {
                q_abs: &qa,
                q_pe: &qp,
                heads,
                tau,
            },
            &mut want,
        );
        for h in 0..heads {
            let (a, p) = (&qa[h * r..(h + 1) * r], &qp[h * dr..(h + 1) * dr]);
            let one = attend_latent_ref(
                Latents {
                    data: &lat,
                    len,
                    r,
                    dr,
                },
                a,
                p,
                tau,
            );
            assert_eq!(bits(&one), bits(&want[h * r..(h + 1) * r]), "head {h}");
        }
        for threads in [1, 2] {
            let mut got = vec![f32::NAN; heads * r];
            let par = Par::with_isa(threads, isa);
            attend_latent_heads(
                &par,
                &mut Workspace::default(),
                Latents {
                    data: &lat,
                    len,
                    r,
                    dr,
                },
                HeadQueries {
                    q_abs: &qa,
                    q_pe: &qp,
                    heads,
                    tau,
                },
                &mut got,
            );
            let at = format!("{isa:?} t{threads} len {len} r {r} dr {dr} heads {heads}");
            assert_eq!(bits(&got), bits(&want), "{at}");
        }
    }
}

/// A workspace sized by `product_floats` and dirty from an earlier use (a product of
/// NaN inputs) gives the same bits as a fresh per-call workspace, and does not grow.
fn reused_workspace_gives_identical_bits_and_stays_put(isa: Isa) {
    let mut rng = memdial::util::rng::SplitMix64::new(11);
    let (rows, cols, n) = (37usize, 96usize, 5usize);
    let w: Vec<u8> = (0..rows * cols * 2)
        .map(|_| rng.next_u64() as u8 & 0x3f)
        .collect();
    let packed: Vec<u8> = (0..rows * cols / 2).map(|_| rng.next_u64() as u8).collect();
    let scales: Vec<u8> = (0..rows * cols / 32)
        .map(|_| 120 + (rng.next_u64() % 10) as u8)
        .collect();
    let xs: Vec<f32> = (0..n * cols).map(|_| rng.next_f32_signed()).collect();
    for threads in [1, 2] {
        let par = Par::with_isa(threads, isa);
        let (sh, per) = product_floats(cols, n);
        let mut ws = Workspace::with_capacity(sh, per, threads);
        let nan = vec![f32::NAN; n * cols];
        let mut dirty = vec![0f32; n * rows];
        matmul_bf16(
            &par,
            &mut ws,
            DenseMat::new(&w, rows, cols),
            &nan,
            n,
            &mut dirty,
        );
        matmul_mxfp4(
            &par,
            &mut ws,
            Mxfp4Mat::new(&packed, &scales, rows, cols),
            &nan,
            n,
            &mut dirty,
        );
        let before = ws.bytes();
        let mut want = vec![0f32; n * rows];
        let mut got = vec![0f32; n * rows];
        matmul_bf16(
            &par,
            &mut Workspace::default(),
            DenseMat::new(&w, rows, cols),
            &xs,
            n,
            &mut want,
        );
        matmul_bf16(
            &par,
            &mut ws,
            DenseMat::new(&w, rows, cols),
            &xs,
            n,
            &mut got,
        );
        assert_eq!(bits(&got), bits(&want), "bf16 {isa:?} t{threads}");
        matmul_mxfp4(
            &par,
            &mut Workspace::default(),
            Mxfp4Mat::new(&packed, &scales, rows, cols),
            &xs,
            n,
            &mut want,
        );
        matmul_mxfp4(
            &par,
            &mut ws,
            Mxfp4Mat::new(&packed, &scales, rows, cols),
            &xs,
            n,
            &mut got,
        );
        assert_eq!(bits(&got), bits(&want), "mxfp4 {isa:?} t{threads}");
        let (x, y0) = (&xs[..cols], &mut want[..rows]);
        matvec_mxfp4(
            &par,
            &mut Workspace::default(),
            Mxfp4Mat::new(&packed, &scales, rows, cols),
            x,
            y0,
        );
        let y1 = &mut got[..rows];
        matvec_mxfp4(
            &par,
            &mut ws,
            Mxfp4Mat::new(&packed, &scales, rows, cols),
            x,
            y1,
        );
        assert_eq!(bits(y1), bits(y0), "mxfp4 matvec {isa:?} t{threads}");
        assert_eq!(ws.bytes(), before, "workspace grew");
    }
}

fn main() -> std::process::ExitCode {
    let mut trials = testkit::trials![bf16_known_values, shape_mismatch_panics];
    trials.extend(per_isa(
        "bf16_matvec_matches_f64_reference",
        bf16_matvec_matches_f64_reference,
    ));
    trials.extend(per_isa(
        "f32_matvec_matches_f64_reference",
        f32_matvec_matches_f64_reference,
    ));
    trials.extend(per_isa(
        "bit_identical_across_threads_isas_and_alignment",
        bit_identical_across_threads_isas_and_alignment,
    ));
    trials.extend(per_isa(
        "matmul_equals_repeated_matvec_bitwise",
        matmul_equals_repeated_matvec_bitwise,
    ));
    trials.extend(per_isa(
        "mla_attend_batched_matches_reference_bitwise",
        mla_attend_batched_matches_reference_bitwise,
    ));
    trials.extend(per_isa(
        "reused_workspace_gives_identical_bits_and_stays_put",
        reused_workspace_gives_identical_bits_and_stays_put,
    ));
    testkit::main(include_str!("kernels_dense.rs"), trials)
}
