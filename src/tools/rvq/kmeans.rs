//! Residual k-means: the training and the greedy encoding of `memdial pack --rvq`
//! (docs/lossless.md, "Lossy: RVQ experts").
//!
//! Vectors are groups of [`RVQ_GROUP`] f32. Everything here is sequential in a fixed
//! order (no FMA, f64 centroid sums in vector order), so the same inputs give the
//! same codebooks and codes on every machine and thread count.

use crate::format::config::rvq::{RVQ_CODEBOOK, RVQ_GROUP};
use crate::tools::fixture::rng::Stream;

const G: usize = RVQ_GROUP;
const K: usize = RVQ_CODEBOOK;

/// One stage's codebook `[256, 8]` prepared for nearest-codeword search: the
/// transpose `[8, 256]` and the squared norms.
pub struct Search {
    t: Vec<f32>,
    norm: Vec<f32>,
}

impl Search {
    /// Prepares `cb` (`256 · 8` f32, codeword-major).
    pub fn new(cb: &[f32]) -> Search {
        let mut t = vec![0f32; G * K];
        let mut norm = vec![0f32; K];
        for k in 0..K {
            let mut n = 0f32;
            for i in 0..G {
                let c = cb[k * G + i];
                t[i * K + k] = c;
                n += c * c;
            }
            norm[k] = n;
        }
        Search { t, norm }
    }

    /// The code of the codeword nearest to `x` (8 f32) in squared distance, as
    /// `argmin_k ‖c_k‖² − 2·x·c_k` (f32, the dot in element order; ties: lowest `k`).
    #[inline]
    pub fn nearest(&self, x: &[f32]) -> u8 {
        let mut dot = [0f32; K];
        for (i, &xi) in x.iter().enumerate().take(G) {
            let row = &self.t[i * K..(i + 1) * K];
            for (d, &c) in dot.iter_mut().zip(row) {
                *d += xi * c;
            }
        }
        let mut best = 0usize;
        let mut best_d = f32::INFINITY;
        for (k, (&n, &dk)) in self.norm.iter().zip(&dot).enumerate() {
            let d = n - 2.0 * dk;
            if d < best_d {
                best_d = d;
                best = k;
            }
        }
        best as u8
    }
}

/// Trains `stages` codebooks on the vectors `train` (`n · 8` f32, `n ≥ 1`): stage `s`
/// runs Lloyd's k-means with 256 centroids for `iterations` rounds on the residuals
/// left by stages `0..s`, then subtracts each vector's nearest centroid.
///
/// Initial centroid `k` of stage `s` is training vector `bits(k) mod n` of the
/// counter-based stream `Stream::new(seed, "{label}.stage{s}")` (duplicates allowed).
/// A round assigns every vector to its [`Search::nearest`] centroid, then sets each
/// centroid with members to their mean (f64 sums in vector order, rounded to f32);
/// a centroid without members keeps its value. Returns `[stages, 256, 8]` f32.
pub fn train(train: &[f32], stages: usize, iterations: usize, seed: u64, label: &str) -> Vec<f32> {
    let n = train.len() / G;
    assert!(
        n >= 1 && train.len() == n * G,
        "train: {} floats",
        train.len()
    );
    let mut resid = train.to_vec();
    let mut books = Vec::with_capacity(stages * K * G);
    let mut assign = vec![0u8; n];
    for s in 0..stages {
        let rng = Stream::new(seed, &format!("{label}.stage{s}"));
        let mut cb = vec![0f32; K * G];
        for k in 0..K {
            let j = (rng.bits(k as u64) % n as u64) as usize;
            cb[k * G..(k + 1) * G].copy_from_slice(&resid[j * G..(j + 1) * G]);
        }
        for _ in 0..iterations {
            let search = Search::new(&cb);
            for (a, v) in assign.iter_mut().zip(resid.chunks_exact(G)) {
                *a = search.nearest(v);
            }
            let mut sum = vec![0f64; K * G];
            let mut count = vec![0u64; K];
            for (&a, v) in assign.iter().zip(resid.chunks_exact(G)) {
                let k = a as usize;
                count[k] += 1;
                for i in 0..G {
                    sum[k * G + i] += v[i] as f64;
                }
            }
            for k in 0..K {
                if count[k] > 0 {
                    for i in 0..G {
                        cb[k * G + i] = (sum[k * G + i] / count[k] as f64) as f32;
                    }
                }
            }
        }
        let search = Search::new(&cb);
        for v in resid.chunks_exact_mut(G) {
            let k = search.nearest(v) as usize;
            for i in 0..G {
                v[i] -= cb[k * G + i];
            }
        }
        books.extend_from_slice(&cb);
    }
    books
}

/// Greedy residual encoding of `w` (`rows · cols` f32, `cols` a multiple of 8) against
/// `searches` (one per stage, of the codebooks `books` `[stages, 256, 8]`): for each
/// group, stage `s` codes the residual left by stages `0..s` with its nearest
/// codeword and subtracts it. Returns codes `[rows, cols/8, stages]`.
pub fn encode(w: &[f32], books: &[f32], searches: &[Search]) -> Vec<u8> {
    let stages = searches.len();
    let mut codes = vec![0u8; w.len() / G * stages];
    for (v, ks) in w.chunks_exact(G).zip(codes.chunks_exact_mut(stages)) {
        let mut r = [0f32; G];
        r.copy_from_slice(v);
        for (s, (search, k)) in searches.iter().zip(ks.iter_mut()).enumerate() {
            *k = search.nearest(&r);
            let c = &books[(s * K + *k as usize) * G..][..G];
            for i in 0..G {
                r[i] -= c[i];
            }
        }
    }
    codes
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The chosen codeword is as near as the best of a brute-force f64 search.
    #[test]
    fn nearest_is_the_brute_force_argmin() {
        let cb: Vec<f32> = (0..K * G)
            .map(|i| ((i * 7919) % 1000) as f32 / 500.0 - 1.0)
            .collect();
        let s = Search::new(&cb);
        for t in 0..200 {
            let x: Vec<f32> = (0..G)
                .map(|i| (((t * 31 + i * 17) % 200) as f32) / 100.0 - 1.0)
                .collect();
            let k = s.nearest(&x) as usize;
            let d = |k: usize| -> f64 {
                (0..G)
                    .map(|i| (x[i] as f64 - cb[k * G + i] as f64).powi(2))
                    .sum()
            };
            let best = (0..K).map(d).fold(f64::INFINITY, f64::min);
            assert!(
                d(k) <= best + 1e-5,
                "vector {t}: code {k} at {} vs {best}",
                d(k)
            );
        }
    }

    /// Training is deterministic, and on unit-variance data each stage lowers the
    /// mean squared error of `C0[k0] + … + Cs[ks]` below the previous one's.
    #[test]
    fn training_reduces_the_error_and_is_deterministic() {
        let n = 4096;
        let data: Vec<f32> = (0..n * G)
            .map(|i| Stream::new(3, "t").normal(i as u64))
            .collect();
        let a = train(&data, 2, 4, 1, "x");
        assert_eq!(a, train(&data, 2, 4, 1, "x"));
        let searches: Vec<Search> = (0..2)
            .map(|s| Search::new(&a[s * K * G..][..K * G]))
            .collect();
        let codes = encode(&data, &a, &searches);
        let err = |stages: usize| -> f64 {
            let mut e = 0f64;
            for (v, ks) in data.chunks_exact(G).zip(codes.chunks_exact(2)) {
                for i in 0..G {
                    let mut w = 0f32;
                    for (s, &k) in ks.iter().enumerate().take(stages) {
                        w += a[(s * K + k as usize) * G + i];
                    }
                    e += (v[i] as f64 - w as f64).powi(2);
                }
            }
            e / (n * G) as f64
        };
        // Unit-variance data: 256 centroids in 8 dimensions remove a part of the
        // variance per stage; each stage must lower the error.
        let (e0, e1, e2) = (err(0), err(1), err(2));
        assert!((e0 - 1.0).abs() < 0.05, "{e0}");
        assert!(e1 < e0 && e2 < e1, "{e0} {e1} {e2}");
    }
}
