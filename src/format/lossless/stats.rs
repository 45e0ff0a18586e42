//! Byte-plane statistics of tensor data: what a lossless layout can save, measured
//! before choosing a codec (`memdial pack --lossless --stats`).

use serde::Serialize;

/// Byte histograms of one or more BF16 tensors (or of raw bytes, for other dtypes).
#[derive(Debug, Clone)]
pub struct PlaneHist {
    /// Counts of the high byte (sign + exponent bits 7..1) of each BF16 value.
    pub high: [u64; 256],
    /// Counts of the 8-bit exponent of each BF16 value.
    pub exponent: [u64; 256],
    /// Counts of every byte (any dtype: the order-0 entropy of the raw bytes).
    pub bytes: [u64; 256],
    /// Values (BF16) or bytes counted.
    pub values: u64,
}

impl Default for PlaneHist {
    fn default() -> Self {
        PlaneHist {
            high: [0; 256],
            exponent: [0; 256],
            bytes: [0; 256],
            values: 0,
        }
    }
}

impl PlaneHist {
    /// Adds BF16 little-endian bytes `data` (even length; a trailing odd byte is ignored).
    pub fn add_bf16(&mut self, data: &[u8]) {
        for p in data.chunks_exact(2) {
            self.high[p[1] as usize] += 1;
            let e = ((p[1] as usize) << 1 | (p[0] as usize) >> 7) & 0xFF;
            self.exponent[e] += 1;
            self.bytes[p[0] as usize] += 1;
            self.bytes[p[1] as usize] += 1;
            self.values += 1;
        }
    }

    /// Adds raw bytes (only the byte histogram).
    pub fn add_bytes(&mut self, data: &[u8]) {
        for &b in data {
            self.bytes[b as usize] += 1;
        }
        self.values += data.len() as u64;
    }

    /// Adds another histogram's counts.
    pub fn merge(&mut self, o: &PlaneHist) {
        let add =
            |a: &mut [u64; 256], b: &[u64; 256]| a.iter_mut().zip(b).for_each(|(x, y)| *x += y);
        add(&mut self.high, &o.high);
        add(&mut self.exponent, &o.exponent);
        add(&mut self.bytes, &o.bytes);
        self.values += o.values;
    }

    /// The summary of these counts.
    pub fn summary(&self) -> PlaneStats {
        PlaneStats {
            values: self.values,
            exponent_entropy_bits: entropy(&self.exponent),
            exponent_distinct: distinct(&self.exponent),
            high_byte_entropy_bits: entropy(&self.high),
            high_byte_top15_coverage: top15(&self.high),
            byte_entropy_bits: entropy(&self.bytes),
        }
    }
}

/// Order-0 statistics of a set of tensors.
#[derive(Debug, Clone, Serialize)]
pub struct PlaneStats {
    pub values: u64,
    /// Shannon entropy of the BF16 exponent, bits per value (published LLMs: ≈ 2.6).
    pub exponent_entropy_bits: f64,
    /// Exponent values that occur.
    pub exponent_distinct: usize,
    /// Entropy of the high byte (sign + exponent bits 7..1), bits per value.
    pub high_byte_entropy_bits: f64,
    /// Fraction of values whose high byte is one of the 15 most frequent.
    pub high_byte_top15_coverage: f64,
    /// Entropy of the raw bytes, bits per byte (8 = incompressible by an order-0 coder).
    pub byte_entropy_bits: f64,
}

impl PlaneStats {
    /// The size ratio an ideal order-0 coder of the high byte reaches with the low byte
    /// verbatim: (8 + H(high)) / 16.
    pub fn ideal_plane_ratio(&self) -> f64 {
        (8.0 + self.high_byte_entropy_bits) / 16.0
    }
}

/// Shannon entropy of a histogram, bits per item (0 for an empty one).
pub fn entropy(h: &[u64; 256]) -> f64 {
    let n: u64 = h.iter().sum();
    if n == 0 {
        return 0.0;
    }
    h.iter()
        .filter(|&&c| c > 0)
        .map(|&c| {
            let p = c as f64 / n as f64;
            -p * p.log2()
        })
        .sum()
}

fn distinct(h: &[u64; 256]) -> usize {
    h.iter().filter(|&&c| c > 0).count()
}

fn top15(h: &[u64; 256]) -> f64 {
    let n: u64 = h.iter().sum();
    let mut v = h.to_vec();
    v.sort_unstable_by(|a, b| b.cmp(a));
    if n == 0 {
        1.0
    } else {
        v[..15].iter().sum::<u64>() as f64 / n as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entropy_of_hand_built_planes() {
        // 1.0, -1.0, 2.0, 0.5 in BF16: exponents 127, 127, 128, 126 → H = 1.5 bits;
        // high bytes 3F, BF, 40, 3F → H = 1.5 bits.
        let mut h = PlaneHist::default();
        for v in [0x3F80u16, 0xBF80, 0x4000, 0x3F00] {
            h.add_bf16(&v.to_le_bytes());
        }
        let s = h.summary();
        assert!((s.exponent_entropy_bits - 1.5).abs() < 1e-12);
        assert!((s.high_byte_entropy_bits - 1.5).abs() < 1e-12);
        assert_eq!(s.exponent_distinct, 3);
        assert_eq!(s.high_byte_top15_coverage, 1.0);
        let mut u = PlaneHist::default();
        u.add_bytes(&(0..=255u8).collect::<Vec<_>>());
        assert!((u.summary().byte_entropy_bits - 8.0).abs() < 1e-12);
    }
}
