//! MXFP4 kernels: dequantization against an independent decoder, hand-derived
//! cases, accuracy against f64, and bit identity across threads / ISAs /
//! matvec vs matmul.

mod isa_util;

use isa_util::{panics_with, per_isa, with_scalar};
use memdial::kernels::{dequant_mxfp4, matmul_mxfp4, matvec_mxfp4, Isa, Mxfp4Mat, Par, Workspace};
use memdial_testkit as testkit;

/// Test data from the project's one deterministic generator.
struct Rng(memdial::util::rng::SplitMix64);
impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0.next_u64()
    }
    fn f32(&mut self) -> f32 {
        self.0.next_f32_signed()
    }
    fn byte(&mut self) -> u8 {
        (self.next_u64() >> 56) as u8
    }
}

/// Independent straightforward decoder (OCP MX v1.0 E2M1 table, low nibble =
/// even element, scale 2^(s-127)).
fn naive_dequant(packed: &[u8], scales: &[u8], rows: usize, cols: usize) -> Vec<f32> {
    const E2M1: [f32; 16] = [
        0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0,
    ];
    let mut out = vec![0f32; rows * cols];
    for r in 0..rows {
        for c in 0..cols {
            let byte = packed[r * cols / 2 + c / 2];
            let code = if c % 2 == 0 { byte & 0x0F } else { byte >> 4 };
            let s = scales[r * cols / 32 + c / 32] as i32;
            out[r * cols + c] = E2M1[code as usize] * 2f32.powi(s - 127);
        }
    }
    out
}

fn rand_mx(rng: &mut Rng, rows: usize, cols: usize, smin: u8, smax: u8) -> (Vec<u8>, Vec<u8>) {
    let packed = (0..rows * cols / 2).map(|_| rng.byte()).collect();
    let span = (smax - smin) as u64 + 1;
    let scales = (0..rows * cols / 32)
        .map(|_| smin + (rng.next_u64() % span) as u8)
        .collect();
    (packed, scales)
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|f| f.to_bits()).collect()
}

fn dequant_matches_independent_decoder_bitwise() {
    let mut rng = Rng(memdial::util::rng::SplitMix64::new(10));
    for &(rows, cols, smin, smax) in &[
        (7usize, 64usize, 120u8, 134u8),
        (33, 3584, 100, 150),
        (16, 96, 0, 254), // whole finite scale range incl. subnormal results
    ] {
        let (p, s) = rand_mx(&mut rng, rows, cols, smin, smax);
        assert_eq!(
            bits(&dequant_mxfp4(&p, &s, rows, cols)),
            bits(&naive_dequant(&p, &s, rows, cols)),
            "{rows}x{cols} scales {smin}..={smax}"
        );
    }
}

fn hand_derived_cases() {
    // One row of 32 elements: byte 0 = 0x21 (elem0 code 1 = 0.5, elem1 code 2 = 1.0).
    let mut packed = [0u8; 16];
    packed[0] = 0x21;
    packed[1] = 0xF7; // elem2 code 7 = 6, elem3 code 0xF = -6
    packed[2] = 0x80; // elem4 +0, elem5 code 8 = -0
    let d = dequant_mxfp4(&packed, &[127], 1, 32);
    assert_eq!(&d[..6], &[0.5, 1.0, 6.0, -6.0, 0.0, -0.0]);
    assert_eq!(d[5].to_bits(), (-0.0f32).to_bits());
    let d = dequant_mxfp4(&packed, &[128], 1, 32);
    assert_eq!(&d[..4], &[1.0, 2.0, 12.0, -12.0]);
    let d = dequant_mxfp4(&packed, &[125], 1, 32);
    assert_eq!(&d[..4], &[0.125, 0.25, 1.5, -1.5]);

    // Product: x = 1..=32, scales 127 and 128 on two rows.
    let x: Vec<f32> = (1..=32).map(|v| v as f32).collect();
    let par = Par::new(1);
    let mut y = [0f32; 2];
    let mut two = [0u8; 32];
    two[..16].copy_from_slice(&packed);
    two[16..].copy_from_slice(&packed);
    matvec_mxfp4(
        &par,
        &mut Workspace::default(),
        Mxfp4Mat::new(&two, &[127, 128], 2, 32),
        &x,
        &mut y,
    );
    let r0 = 0.5 * 1.0 + 1.0 * 2.0 + 6.0 * 3.0 - 6.0 * 4.0;
    assert_eq!(y, [r0, 2.0 * r0]);

    // All codes 2 (=1.0) with scale 126 (0.5): sum of 0.5*x over 64 columns.
    let x: Vec<f32> = (0..64).map(|v| v as f32).collect();
    matvec_mxfp4(
        &par,
        &mut Workspace::default(),
        Mxfp4Mat::new(&[0x22; 32], &[126, 126], 1, 64),
        &x,
        &mut y[..1],
    );
    assert_eq!(y[0], 0.5 * (63.0 * 64.0 / 2.0));
}

fn nan_scale_poisons_only_its_row(only: Isa) {
    let mut rng = Rng(memdial::util::rng::SplitMix64::new(11));
    let (p, mut s) = rand_mx(&mut rng, 4, 64, 120, 130);
    s[2 * 2 + 1] = 0xFF; // row 2, block 1
    let d = dequant_mxfp4(&p, &s, 4, 64);
    assert!(d[2 * 64 + 32..3 * 64].iter().all(|v| v.is_nan()));
    assert!(d[..2 * 64 + 32].iter().all(|v| !v.is_nan()));
    let x: Vec<f32> = (0..64).map(|_| rng.f32()).collect();
    for isa in with_scalar(only) {
        let par = Par::with_isa(1, isa);
        let mut y = [0f32; 4];
        matvec_mxfp4(
            &par,
            &mut Workspace::default(),
            Mxfp4Mat::new(&p, &s, 4, 64),
            &x,
            &mut y,
        );
        assert!(y[2].is_nan() && !y[0].is_nan() && !y[1].is_nan() && !y[3].is_nan());
    }
}

fn matvec_matches_f64_reference(only: Isa) {
    let mut rng = Rng(memdial::util::rng::SplitMix64::new(12));
    for &(rows, cols) in &[(5usize, 32usize), (64, 3584), (96, 3072), (300, 256)] {
        let (p, s) = rand_mx(&mut rng, rows, cols, 118, 136);
        let w = naive_dequant(&p, &s, rows, cols);
        let x: Vec<f32> = (0..cols).map(|_| rng.f32()).collect();
        for isa in with_scalar(only) {
            let par = Par::with_isa(2, isa);
            let mut y = vec![0f32; rows];
            matvec_mxfp4(
                &par,
                &mut Workspace::default(),
                Mxfp4Mat::new(&p, &s, rows, cols),
                &x,
                &mut y,
            );
            for r in 0..rows {
                let (mut sum, mut abs) = (0f64, 0f64);
                for c in 0..cols {
                    let pr = w[r * cols + c] as f64 * x[c] as f64;
                    sum += pr;
                    abs += pr.abs();
                }
                let tol = 2e-5 * abs + 1e-30;
                assert!(
                    (y[r] as f64 - sum).abs() <= tol,
                    "{isa:?} {rows}x{cols} row {r}: got {}, want {sum}",
                    y[r]
                );
            }
        }
    }
}

fn bit_identical_across_threads_isas_and_prefill(only: Isa) {
    let mut rng = Rng(memdial::util::rng::SplitMix64::new(13));
    // (rows, cols, tokens, scale byte range); the last covers the whole E8M0
    // range (subnormal and overflowing products, NaN excluded).
    for &(rows, cols, n, smin, smax) in &[
        (3072usize, 256usize, 3usize, 110u8, 140u8),
        (40, 3584, 3, 110, 140),
        (7, 64, 3, 110, 140),
        (37, 2080, 16, 110, 140),
        (19, 96, 17, 110, 140),
        (21, 64, 16, 0, 254),
        (13, 128, 5, 110, 140),
        (9, 64, 1, 110, 140),
    ] {
        let (p, s) = rand_mx(&mut rng, rows, cols, smin, smax);
        // Same bytes at odd addresses.
        let mut ps = vec![0u8; p.len() + 1];
        ps[1..].copy_from_slice(&p);
        let mut ss = vec![0u8; s.len() + 3];
        ss[3..].copy_from_slice(&s);
        let xs: Vec<f32> = (0..n * cols).map(|_| rng.f32()).collect();
        let mut want: Option<Vec<u32>> = None;
        for isa in with_scalar(only) {
            for t in [1usize, 2, 3, 4, 7] {
                let par = Par::with_isa(t, isa);
                let mut y = vec![0f32; rows];
                let mut all = Vec::new();
                for v in 0..n {
                    matvec_mxfp4(
                        &par,
                        &mut Workspace::default(),
                        Mxfp4Mat::new(&ps[1..], &ss[3..], rows, cols),
                        &xs[v * cols..][..cols],
                        &mut y,
                    );
                    all.extend(bits(&y));
                }
                match &want {
                    None => want = Some(all),
                    Some(w) => assert_eq!(&all, w, "{rows}x{cols} {isa:?} threads {t}"),
                }
                let mut ys = vec![0f32; n * rows];
                matmul_mxfp4(
                    &par,
                    &mut Workspace::default(),
                    Mxfp4Mat::new(&p, &s, rows, cols),
                    &xs,
                    n,
                    &mut ys,
                );
                assert_eq!(&bits(&ys), want.as_ref().unwrap(), "matmul {isa:?} t {t}");
            }
        }
    }
}

fn bad_cols_panics() {
    panics_with("not a multiple of the MXFP4 block size", || {
        let par = Par::new(1);
        let mut y = [0f32; 1];
        matvec_mxfp4(
            &par,
            &mut Workspace::default(),
            Mxfp4Mat::new(&[0u8; 8], &[127], 1, 16),
            &[0.0; 16],
            &mut y,
        );
    });
}

/// Inputs `±m·2^e` with `m` in [1, 2) and `e` uniform in `emin..emax`.
fn rand_pow_range(rng: &mut Rng, len: usize, emin: i32, emax: i32) -> Vec<f32> {
    (0..len)
        .map(|_| {
            let e = emin + (rng.next_u64() % (emax - emin) as u64) as i32;
            let m = 1.0 + rng.f32().abs();
            let v = (m as f64 * 2f64.powi(e)) as f32;
            if rng.next_u64() & 1 == 0 {
                v
            } else {
                -v
            }
        })
        .collect()
}

/// The AVX2 and AVX-512 prefills multiply the half scale into the weights (`(E·S)·x`
/// instead of `(E·x)·S`, one multiply fewer) only where that changes no bit:
/// every product and sum in the f32 normal range. Inputs at the edges of that
/// range, on both sides, must still give the matvec's bits exactly: at
/// `x_min·S_min = 2^-102` (folded), below it (not folded: products would be
/// subnormal), near the overflow bound, and with tiny and huge inputs mixed.
fn matmul_equals_matvec_at_the_edges_of_the_normal_range(only: Isa) {
    let mut rng = Rng(memdial::util::rng::SplitMix64::new(29));
    let (rows, cols, n) = (24usize, 256usize, 9usize);
    // (input exponent range, scale byte range): S = 2^(s - 128).
    for &(emin, emax, smin, smax) in &[
        (-101, -99, 127u8, 130u8), // x_min·S_min = 2^-102: folded
        (-110, -99, 127, 130),     // below: products subnormal, not folded
        (-140, -126, 120, 140),    // subnormal inputs
        (115, 119, 126, 130),      // 24·x_max·S_max just under 2^127: folded
        (119, 127, 126, 130),      // overflowing products, not folded
        (-30, 30, 100, 150),       // ordinary spread
        (-20, -10, 250, 254),      // huge scales: E·S would overflow, not folded
    ] {
        let (p, s) = rand_mx(&mut rng, rows, cols, smin, smax);
        let xs = rand_pow_range(&mut rng, n * cols, emin, emax);
        for isa in with_scalar(only) {
            let par = Par::with_isa(2, isa);
            let mut ys = vec![0f32; n * rows];
            matmul_mxfp4(
                &par,
                &mut Workspace::default(),
                Mxfp4Mat::new(&p, &s, rows, cols),
                &xs,
                n,
                &mut ys,
            );
            let mut y = vec![0f32; rows];
            for v in 0..n {
                matvec_mxfp4(
                    &par,
                    &mut Workspace::default(),
                    Mxfp4Mat::new(&p, &s, rows, cols),
                    &xs[v * cols..][..cols],
                    &mut y,
                );
                assert_eq!(
                    bits(&ys[v * rows..][..rows]),
                    bits(&y),
                    "x 2^{emin}..2^{emax}, scales {smin}..{smax}, {isa:?}, token {v}"
                );
            }
        }
    }
}

fn main() -> std::process::ExitCode {
    let mut trials = testkit::trials![
        dequant_matches_independent_decoder_bitwise,
        hand_derived_cases,
        bad_cols_panics
    ];
    trials.extend(per_isa(
        "nan_scale_poisons_only_its_row",
        nan_scale_poisons_only_its_row,
    ));
    trials.extend(per_isa(
        "matvec_matches_f64_reference",
        matvec_matches_f64_reference,
    ));
    trials.extend(per_isa(
        "bit_identical_across_threads_isas_and_prefill",
        bit_identical_across_threads_isas_and_prefill,
    ));
    trials.extend(per_isa(
        "matmul_equals_matvec_at_the_edges_of_the_normal_range",
        matmul_equals_matvec_at_the_edges_of_the_normal_range,
    ));
    testkit::main(include_str!("kernels_mxfp4.rs"), trials)
}
