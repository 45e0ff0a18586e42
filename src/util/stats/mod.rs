//! The statistics every command and tool reports with: median, minimum/maximum,
//! percentiles and the bootstrap ([`bootstrap`]), one definition each.
//!
//! **Percentile definition: linear interpolation between closest ranks** (Hyndman &
//! Fan 1996, definition 7; NumPy's and R's default): the `q`-quantile of `n` sorted
//! values sits at rank `h = q (n − 1)` and is `(1 − f) x[⌊h⌋] + f x[⌊h⌋+1]` with `f = h − ⌊h⌋`.
//! The median is the 0.5-quantile under it (the mean of the two middle values for
//! an even count). Used for `memdial run`'s `decode_s_per_token_p90`, the engine's
//! median decode time, iobench's medians and the bootstrap intervals of the sweep.
//! NaNs are ignored everywhere. Integer figures (byte sizes, counts) take
//! [`median_u64`]: the same median, rounded down to a whole number.

pub mod bootstrap;

/// The finite-or-infinite values of `v` (NaNs dropped), sorted ascending.
fn sorted(v: &[f64]) -> Vec<f64> {
    let mut s: Vec<f64> = v.iter().copied().filter(|x| !x.is_nan()).collect();
    s.sort_by(f64::total_cmp);
    s
}

/// The `q`-quantile (`q` in [0, 1]) of already sorted, NaN-free `s` by linear
/// interpolation (see the module docs); `None` when `s` is empty.
fn quantile_sorted(s: &[f64], q: f64) -> Option<f64> {
    let last = s.len().checked_sub(1)?;
    let h = q.clamp(0.0, 1.0) * last as f64;
    let (i, f) = (h.floor() as usize, h - h.floor());
    Some(if i < last {
        s[i] * (1.0 - f) + s[i + 1] * f
    } else {
        s[last]
    })
}

/// Percentile `q` in [0, 1] of `v` (linear interpolation between closest ranks);
/// `None` when `v` has no non-NaN value.
pub fn percentile(v: &[f64], q: f64) -> Option<f64> {
    quantile_sorted(&sorted(v), q)
}

/// Median of `v` (the mean of the two middle values for even lengths); `None` when
/// empty. NaNs are ignored.
pub fn median(v: &[f64]) -> Option<f64> {
    let s = sorted(v);
    let n = s.len();
    if n == 0 {
        return None;
    }
    // The 0.5-quantile, written out so the even case is the exact mean of the two
    // middle values (no interpolation rounding).
    Some(if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    })
}

/// [`median`] of integer values (byte sizes, counts), rounded down to a whole
/// number; 0 when empty. Exact for values below 2^53.
pub fn median_u64(v: &[u64]) -> u64 {
    let f: Vec<f64> = v.iter().map(|&x| x as f64).collect();
    median(&f).map_or(0, |m| m.floor() as u64)
}

/// Minimum and maximum of `v` ignoring NaNs; `None` when empty.
pub fn min_max(v: &[f64]) -> Option<(f64, f64)> {
    let mut it = v.iter().copied().filter(|x| !x.is_nan());
    let first = it.next()?;
    Some(it.fold((first, first), |(a, b), x| (a.min(x), b.max(x))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians() {
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(min_max(&[2.0, f64::NAN, -1.0]), Some((-1.0, 2.0)));
        // Mean of the two middle values, rounded down: (4096 + 8192) / 2.
        assert_eq!(median_u64(&[8192, 4096, 4096, 8192]), 6144);
        assert_eq!(median_u64(&[3, 1, 2]), 2);
        assert_eq!(median_u64(&[]), 0);
    }

    /// Values by hand, checked against NumPy's default (`numpy.percentile(x, 100 q)`,
    /// method "linear"): [1, 2, 3, 4, 5] at 0.25 → 2.0; [1, 2, 3, 4] at 0.5 → 2.5;
    /// 1..=8 at 0.9 → 7.3 (rank 6.3; nearest rank would give 7).
    #[test]
    fn percentiles_by_hand() {
        assert_eq!(percentile(&[5.0, 1.0, 4.0, 2.0, 3.0], 0.25), Some(2.0));
        assert_eq!(percentile(&[4.0, 3.0, 2.0, 1.0], 0.5), Some(2.5));
        let p90 = percentile(&[8.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0], 0.9).unwrap();
        assert!((p90 - 7.3).abs() < 1e-12, "{p90}");
        assert_eq!(percentile(&[2.0], 0.9), Some(2.0));
        assert_eq!(percentile(&[1.0, 2.0], 1.0), Some(2.0));
        assert_eq!(percentile(&[1.0, 2.0], 0.0), Some(1.0));
        assert_eq!(percentile(&[f64::NAN], 0.5), None);
        assert_eq!(percentile(&[], 0.5), None);
    }
}
