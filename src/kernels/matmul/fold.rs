//! Folding an MXFP4 block's half scale into its decoded weights: `(E·S)·x`
//! summed in place of `(E·x)·S`, one multiply fewer per pair of weights, used by
//! the prefill tiles ([`super::avx2`], [`super::avx512`]) only where it changes no
//! bit ([`fold_scales`]).

use super::super::mxfp4::HALF_SCALE;

/// The magnitude range of a call's inputs, for [`fold_scales`]: the smallest
/// nonzero and the largest `|x|`; `None` if any input is Inf or NaN.
pub(super) fn input_range(xs: &[f32]) -> Option<(f32, f32)> {
    let (mut lo, mut hi, mut bad) = (f32::INFINITY, 0f32, false);
    for &x in xs {
        let a = x.abs();
        bad |= !a.is_finite();
        hi = if a > hi { a } else { hi };
        lo = if a > 0.0 && a < lo { a } else { lo };
    }
    (!bad).then_some((lo, hi))
}

/// Whether a row block's half scales `S` may be folded into its weights
/// (`(E·S)·x` summed in place of `(E·x)·S`, one multiply fewer per pair of
/// weights) without changing a bit: with `S` a power of two, `round(a·S) =
/// round(a)·S` whenever both sides stay in the f32 normal range, so the folded
/// products and their pairwise sum equal the matvec's `q·S` exactly when every
/// nonzero product, sum and scaled sum lies in `[2^-126, 2^127)`. Sufficient:
/// `x_min ≥ 2^-102` and `x_min·S_min ≥ 2^-102` (a nonzero sum of two products is
/// at least 2^-24 of the smaller one), `24·max(1, x_max)·max(1, S_max) < 2^127`
/// (`|E| ≤ 12`: bounds `E·x`, `E·S`, `E·S·x` and their pairwise sums), and no
/// NaN scale (byte 0xFF). `x` = [`input_range`], `bytes` the row block's E8M0
/// scales.
pub(super) fn fold_scales(x: Option<(f32, f32)>, bytes: impl Iterator<Item = u8>) -> bool {
    let Some((xmin, xmax)) = x else { return false };
    let (mut lo, mut hi) = (u8::MAX, 0u8);
    for b in bytes {
        if b == 0xFF {
            return false;
        }
        (lo, hi) = (lo.min(b), hi.max(b));
    }
    let (smin, smax) = (
        HALF_SCALE[lo as usize] as f64,
        HALF_SCALE[hi as usize] as f64,
    );
    let (xmin, xmax) = (xmin as f64, xmax as f64);
    let small = 2f64.powi(-102);
    xmin >= small && xmin * smin >= small && 24.0 * xmax.max(1.0) * smax.max(1.0) < 2f64.powi(127)
}

#[cfg(test)]
mod tests {
    use super::{fold_scales, input_range};

    #[test]
    fn fold_scales_only_inside_the_normal_range() {
        let p = |k: i32| 2f32.powi(k);
        // Byte 128 is S = 2^0, byte 0 is S = 2^-128, 0xFF is NaN.
        assert!(fold_scales(Some((p(-102), 1.0)), [128u8].into_iter()));
        assert!(!fold_scales(Some((p(-103), 1.0)), [128u8].into_iter()));
        assert!(fold_scales(Some((1.0, 1.0)), [26u8, 128].into_iter())); // 1·2^-102
        assert!(!fold_scales(Some((1.0, 1.0)), [25u8, 128].into_iter())); // 2^-103
        assert!(fold_scales(Some((1.0, p(122))), [128u8].into_iter())); // 24·2^122 < 2^127
        assert!(!fold_scales(Some((1.0, p(123))), [128u8].into_iter())); // 24·2^123 ≥ 2^127
        assert!(!fold_scales(Some((1.0, p(120))), [131u8].into_iter())); // 24·2^120·2^3
        assert!(!fold_scales(Some((p(-10), p(-10))), [254u8].into_iter())); // E·S = 12·2^126
        assert!(!fold_scales(Some((1.0, 1.0)), [128u8, 0xFF].into_iter()));
        assert!(!fold_scales(None, [128u8].into_iter()));
    }

    #[test]
    fn input_range_is_smallest_nonzero_and_largest_magnitude() {
        assert_eq!(input_range(&[0.0, -3.0, 0.25, -0.0]), Some((0.25, 3.0)));
        assert_eq!(input_range(&[1.0, f32::NAN]), None);
        assert_eq!(input_range(&[f32::NEG_INFINITY]), None);
    }
}
