//! One block of BF16 values, coded losslessly: the byte-plane dictionary codec.
//!
//! A BF16 value is two little-endian bytes: the low byte (the exponent's lowest bit and
//! the 7 mantissa bits, ≈ 8 bits of entropy) and the high byte (sign and the exponent's
//! upper 7 bits, ≈ 2.6–2.8 bits on trained and fixture weights, `docs/lossless.md`).
//! A [`Kind::Dict`] block keeps the low-byte plane verbatim and codes the high-byte plane
//! as 4-bit indices into the block's 15 most frequent high bytes; index 15 is an escape
//! whose byte is listed separately. Decoding is a table lookup per value (16-entry
//! `pshufb` on AVX2) plus a patch per escape, so it runs at memory speed; a table-driven
//! Huffman coder would save ≈ 1.2 more bits per value but decode several times slower
//! (measured rule in the docs: decode must stay ≥ 3× the disk's read bandwidth).
//!
//! Coded layout of a `Dict` block of `n` values (`2n` decoded bytes), all integers LE:
//!
//! | bytes | field |
//! |---|---|
//! | 16 | dictionary: high bytes for indices 0..15 (entry 15 unused, 0) |
//! | 4 | `e`: number of escapes (u32) |
//! | n | low-byte plane |
//! | ⌈n/2⌉ | index plane: value `i` is nibble `i % 2` (low nibble first) of byte `i / 2` |
//! | 4e | escape positions (u32 value indices, strictly increasing) |
//! | e | escape high bytes |
//!
//! A [`Kind::Raw`] block is the decoded bytes verbatim (used when coding would not
//! shrink the block's on-disk size).

use std::fmt;

/// Bytes of the fixed part of a `Dict` block (dictionary + escape count).
const DICT_HEAD: usize = 20;
/// The escape index.
const ESC: u8 = 15;

/// How a block is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The decoded bytes verbatim.
    Raw = 0,
    /// Byte planes: low bytes verbatim, high bytes as dictionary nibbles + escapes.
    Dict = 1,
}

impl Kind {
    /// The kind stored as byte `b` in a block record.
    pub fn from_u8(b: u8) -> Option<Kind> {
        match b {
            0 => Some(Kind::Raw),
            1 => Some(Kind::Dict),
            _ => None,
        }
    }
}

/// A block that cannot be decoded (corrupt or not of the expected size).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockError(pub String);

impl fmt::Display for BlockError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BlockError {}

/// Coded size in bytes of a `Dict` block of `n` values with `e` escapes.
pub fn dict_len(n: usize, e: usize) -> usize {
    DICT_HEAD + n + n.div_ceil(2) + 5 * e
}

/// The 15 most frequent high bytes of `data` (`2n` bytes, BF16 LE), most frequent
/// first (ties: smaller byte first), and how many values fall outside them.
fn dictionary(data: &[u8]) -> ([u8; 16], usize) {
    let mut hist = [0u64; 256];
    for p in data.chunks_exact(2) {
        hist[p[1] as usize] += 1;
    }
    let mut order: Vec<u8> = (0..=255u8).collect();
    order.sort_by_key(|&b| (std::cmp::Reverse(hist[b as usize]), b));
    let mut dict = [0u8; 16];
    let mut covered = 0u64;
    for (i, &b) in order.iter().take(15).enumerate() {
        dict[i] = b;
        covered += hist[b as usize];
    }
    (dict, (data.len() / 2) - covered as usize)
}

/// Codes one block of BF16 bytes `data` (even length) into `out` (cleared first) and
/// returns its kind: [`Kind::Dict`] when the coded block, rounded up to `page` bytes,
/// is smaller than `data` rounded up the same way; else [`Kind::Raw`] (`out` = `data`).
///
/// Panics if `data.len()` is odd (BF16 tensors have even byte lengths).
pub fn encode(data: &[u8], page: usize, out: &mut Vec<u8>) -> Kind {
    assert!(data.len().is_multiple_of(2), "BF16 block of odd length");
    out.clear();
    let n = data.len() / 2;
    let (dict, escapes) = dictionary(data);
    let coded = dict_len(n, escapes);
    let round = |x: usize| x.div_ceil(page.max(1)) * page.max(1);
    if n == 0 || round(coded) >= round(data.len()) {
        out.extend_from_slice(data);
        return Kind::Raw;
    }
    encode_dict(data, &dict, escapes, out);
    Kind::Dict
}

/// Writes the `Dict` coding of `data` with dictionary `dict` (`escapes` values outside it).
fn encode_dict(data: &[u8], dict: &[u8; 16], escapes: usize, out: &mut Vec<u8>) {
    out.clear();
    let n = data.len() / 2;
    let coded = dict_len(n, escapes);
    let mut index = [ESC; 256];
    for (i, &b) in dict.iter().take(15).enumerate() {
        index[b as usize] = i as u8;
    }
    out.reserve(coded);
    out.extend_from_slice(dict);
    out.extend_from_slice(&(escapes as u32).to_le_bytes());
    out.extend(data.chunks_exact(2).map(|p| p[0]));
    let mut pos = Vec::with_capacity(escapes);
    let mut val = Vec::with_capacity(escapes);
    let mut nib = 0u8;
    for (i, p) in data.chunks_exact(2).enumerate() {
        let x = index[p[1] as usize];
        if x == ESC {
            pos.push(i as u32);
            val.push(p[1]);
        }
        if i % 2 == 0 {
            nib = x;
        } else {
            out.push(nib | (x << 4));
        }
    }
    if n % 2 == 1 {
        out.push(nib);
    }
    for p in pos {
        out.extend_from_slice(&p.to_le_bytes());
    }
    out.extend_from_slice(&val);
    debug_assert_eq!(out.len(), coded);
}

/// Which decode loop runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecodeIsa {
    /// Portable Rust.
    Scalar,
    /// x86-64 AVX2 (the 16-entry lookup is `pshufb`).
    Avx2,
}

impl DecodeIsa {
    /// The fastest loop this CPU runs.
    pub fn best() -> DecodeIsa {
        #[cfg(target_arch = "x86_64")]
        if is_x86_feature_detected!("avx2") {
            return DecodeIsa::Avx2;
        }
        DecodeIsa::Scalar
    }
    /// Whether this CPU runs it.
    pub fn is_supported(self) -> bool {
        match self {
            DecodeIsa::Scalar => true,
            DecodeIsa::Avx2 => DecodeIsa::best() == DecodeIsa::Avx2,
        }
    }
}

/// Decodes block `coded` of kind `kind` into `out`, whose length is the block's decoded
/// length, with the fastest loop of this CPU.
///
/// Errors: a coded length that does not match `out.len()` (and, for `Dict`, its escape
/// count), an escape position out of order or range.
pub fn decode(kind: Kind, coded: &[u8], out: &mut [u8]) -> Result<(), BlockError> {
    decode_with(DecodeIsa::best(), kind, coded, out)
}

/// [`decode`] with a chosen loop (benchmarks and tests). Panics if `isa` is not
/// supported by this CPU.
pub fn decode_with(
    isa: DecodeIsa,
    kind: Kind,
    coded: &[u8],
    out: &mut [u8],
) -> Result<(), BlockError> {
    match kind {
        Kind::Raw => {
            if coded.len() != out.len() {
                return Err(BlockError(format!(
                    "raw block of {} bytes, expected {}",
                    coded.len(),
                    out.len()
                )));
            }
            out.copy_from_slice(coded);
            Ok(())
        }
        Kind::Dict => decode_dict(isa, coded, out),
    }
}

fn decode_dict(isa: DecodeIsa, coded: &[u8], out: &mut [u8]) -> Result<(), BlockError> {
    if !out.len().is_multiple_of(2) || coded.len() < DICT_HEAD {
        return Err(BlockError(format!(
            "dictionary block of {} bytes cannot decode to {} bytes",
            coded.len(),
            out.len()
        )));
    }
    let n = out.len() / 2;
    let mut dict = [0u8; 16];
    dict.copy_from_slice(&coded[..16]);
    let e = u32::from_le_bytes(coded[16..20].try_into().expect("4 bytes")) as usize;
    if e > n || coded.len() != dict_len(n, e) {
        return Err(BlockError(format!(
            "dictionary block of {} bytes with {e} escapes does not hold {n} values",
            coded.len()
        )));
    }
    let low = &coded[DICT_HEAD..DICT_HEAD + n];
    let nib = &coded[DICT_HEAD + n..DICT_HEAD + n + n.div_ceil(2)];
    let esc = &coded[DICT_HEAD + n + n.div_ceil(2)..];
    let (pos, val) = esc.split_at(4 * e);
    match isa {
        DecodeIsa::Scalar => planes_scalar(&dict, low, nib, out),
        DecodeIsa::Avx2 => {
            #[cfg(target_arch = "x86_64")]
            {
                assert!(isa.is_supported(), "AVX2 decode on a CPU without AVX2");
                // SAFETY: AVX2 is available (checked above); the slices' lengths are as
                // `planes_avx2` requires (n values, ⌈n/2⌉ index bytes, 2n output bytes).
                unsafe { planes_avx2(&dict, low, nib, out) }
            }
            #[cfg(not(target_arch = "x86_64"))]
            panic!("AVX2 decode on a non-x86 CPU");
        }
    }
    let mut last: Option<usize> = None;
    for (p, &v) in pos.chunks_exact(4).zip(val) {
        let i = u32::from_le_bytes(p.try_into().expect("4 bytes")) as usize;
        if i >= n || last.is_some_and(|l| i <= l) {
            return Err(BlockError(format!(
                "escape position {i} out of order or past {n} values"
            )));
        }
        out[2 * i + 1] = v;
        last = Some(i);
    }
    Ok(())
}

/// Interleaves the low plane with the dictionary-decoded high plane (escapes left 0).
fn planes_scalar(dict: &[u8; 16], low: &[u8], nib: &[u8], out: &mut [u8]) {
    let n = low.len();
    let pairs = n / 2;
    for (j, o) in out[..4 * pairs].chunks_exact_mut(4).enumerate() {
        let b = nib[j];
        o[0] = low[2 * j];
        o[1] = dict[(b & 15) as usize];
        o[2] = low[2 * j + 1];
        o[3] = dict[(b >> 4) as usize];
    }
    if n % 2 == 1 {
        out[2 * n - 2] = low[n - 1];
        out[2 * n - 1] = dict[(nib[pairs] & 15) as usize];
    }
}

/// [`planes_scalar`] 32 values at a time: 16 index bytes → two `pshufb` lookups →
/// interleaved with 32 low bytes into 64 output bytes.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn planes_avx2(dict: &[u8; 16], low: &[u8], nib: &[u8], out: &mut [u8]) {
    use std::arch::x86_64::*;
    let n = low.len();
    let blocks = n / 32;
    // SAFETY (whole body): loads and stores stay inside `low[..32·blocks]`,
    // `nib[..16·blocks]` and `out[..64·blocks]` (n ≥ 32·blocks, ⌈n/2⌉ ≥ 16·blocks).
    unsafe {
        let table = _mm_loadu_si128(dict.as_ptr() as *const __m128i);
        let mask = _mm_set1_epi8(15);
        for b in 0..blocks {
            let x = _mm_loadu_si128(nib.as_ptr().add(16 * b) as *const __m128i);
            let even = _mm_shuffle_epi8(table, _mm_and_si128(x, mask));
            let odd = _mm_shuffle_epi8(table, _mm_and_si128(_mm_srli_epi16(x, 4), mask));
            let h0 = _mm_unpacklo_epi8(even, odd); // high bytes of values 0..16
            let h1 = _mm_unpackhi_epi8(even, odd); // 16..32
            let hi = _mm256_set_m128i(h1, h0);
            let lo = _mm256_loadu_si256(low.as_ptr().add(32 * b) as *const __m256i);
            let a = _mm256_unpacklo_epi8(lo, hi); // values 0..8 | 16..24
            let c = _mm256_unpackhi_epi8(lo, hi); // values 8..16 | 24..32
            let o = out.as_mut_ptr().add(64 * b);
            _mm256_storeu_si256(o as *mut __m256i, _mm256_permute2x128_si256(a, c, 0x20));
            _mm256_storeu_si256(
                o.add(32) as *mut __m256i,
                _mm256_permute2x128_si256(a, c, 0x31),
            );
        }
    }
    let done = 32 * blocks;
    planes_scalar(dict, &low[done..], &nib[done / 2..], &mut out[2 * done..]);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(data: &[u8]) -> Kind {
        let mut c = Vec::new();
        let k = encode(data, 1, &mut c);
        check(k, &c, data);
        // The dictionary coding too, even where it does not pay.
        let (dict, e) = dictionary(data);
        encode_dict(data, &dict, e, &mut c);
        check(Kind::Dict, &c, data);
        k
    }

    fn check(k: Kind, c: &[u8], data: &[u8]) {
        for isa in [DecodeIsa::Scalar, DecodeIsa::Avx2] {
            if !isa.is_supported() {
                continue;
            }
            let mut out = vec![0xAAu8; data.len()];
            decode_with(isa, k, c, &mut out).unwrap();
            assert!(
                out == data,
                "{isa:?} {k:?} round trip of {} bytes",
                data.len()
            );
        }
    }

    fn dict_coded(data: &[u8]) -> Vec<u8> {
        let (dict, e) = dictionary(data);
        let mut c = Vec::new();
        encode_dict(data, &dict, e, &mut c);
        c
    }

    #[test]
    fn hand_built_block_layout() {
        // Values (LE bytes): 0x3F80 (1.0), 0xBF80 (-1.0), 0x3F80, 0x7FC0 (NaN).
        // High-byte counts: 3F ×2, BF ×1, 7F ×1 → dictionary [3F, 7F, BF, 00, 01, …]
        // (ties by byte value, then the unused bytes 00, 01, … in order).
        let data = [0x80, 0x3F, 0x80, 0xBF, 0x80, 0x3F, 0xC0, 0x7F];
        let c = dict_coded(&data);
        assert_eq!(&c[..3], &[0x3F, 0x7F, 0xBF]);
        assert_eq!(&c[16..20], &[0, 0, 0, 0]); // no escapes
        assert_eq!(&c[20..24], &[0x80, 0x80, 0x80, 0xC0]); // low plane
        assert_eq!(&c[24..26], &[0x20, 0x10]); // indices 0,2 | 0,1
        assert_eq!(c.len(), dict_len(4, 0));
        round_trip(&data);
    }

    #[test]
    fn escapes_are_listed_in_order() {
        // 17 distinct high bytes: the two least frequent (by tie order, the largest
        // bytes) escape.
        let mut data = Vec::new();
        for h in 0..17u8 {
            data.extend_from_slice(&[h, h]);
        }
        data.extend_from_slice(&[9, 0]); // a second 0x00: most frequent
        let c = dict_coded(&data);
        let n = 18;
        let e = u32::from_le_bytes(c[16..20].try_into().unwrap());
        assert_eq!(e, 2);
        let tail = &c[c.len() - 10..];
        assert_eq!(&tail[..8], &[15, 0, 0, 0, 16, 0, 0, 0]); // values 15 and 16
        assert_eq!(&tail[8..], &[15, 16]);
        assert_eq!(c.len(), dict_len(n, 2));
        round_trip(&data);
    }

    #[test]
    fn edge_cases_round_trip() {
        let mut rng = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        // all equal, every length around the SIMD width and odd value counts
        for n in [1usize, 2, 3, 31, 32, 33, 63, 64, 65, 1000, 4097] {
            // 20 + n + ⌈n/2⌉ bytes < 2n from n = 42 on
            let want = if n >= 42 { Kind::Dict } else { Kind::Raw };
            assert_eq!(round_trip(&vec![0x12; 2 * n]), want);
            let v: Vec<u8> = (0..2 * n).map(|_| next() as u8).collect();
            round_trip(&v);
        }
        // all 65536 bit patterns (every NaN, ±Inf, ±0, subnormal): all-distinct
        let all: Vec<u8> = (0..=u16::MAX).flat_map(|x| x.to_le_bytes()).collect();
        round_trip(&all);
        // NaN/Inf bursts in a normal-looking block
        let mut v: Vec<u8> = (0..8192)
            .flat_map(|i: u32| (0x3C00u16 + (i % 7) as u16 * 0x80).to_le_bytes())
            .collect();
        for (i, pat) in [0x7F80u16, 0xFF80, 0x7FC1, 0xFFFF, 0x0001, 0x8000]
            .iter()
            .enumerate()
        {
            v[2 * (i * 1000)..2 * (i * 1000) + 2].copy_from_slice(&pat.to_le_bytes());
        }
        assert_eq!(round_trip(&v), Kind::Dict);
        // empty
        assert_eq!(round_trip(&[]), Kind::Raw);
    }

    #[test]
    fn random_bytes_stay_raw() {
        // Uniform high bytes: 15 of 256 values cover ~6 %, so escapes cost more than raw.
        let v: Vec<u8> = (0..65536u32)
            .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
            .collect();
        let mut c = Vec::new();
        assert_eq!(encode(&v, 4096, &mut c), Kind::Raw);
        assert_eq!(c, v);
    }

    #[test]
    fn malformed_blocks_are_errors() {
        let data: Vec<u8> = (0..200u32)
            .flat_map(|i| [i as u8, 0x3C + (i % 3) as u8])
            .collect();
        let mut c = Vec::new();
        assert_eq!(encode(&data, 1, &mut c), Kind::Dict);
        let mut out = vec![0u8; data.len()];
        assert!(decode(Kind::Dict, &c[..c.len() - 1], &mut out).is_err());
        assert!(decode(Kind::Dict, &c, &mut out[..10]).is_err());
        assert!(decode(Kind::Raw, &c, &mut out).is_err());
        let mut bad = c.clone();
        bad[16] = 3; // claims 3 escapes
        assert!(decode(Kind::Dict, &bad, &mut out).is_err());
    }
}
