//! One block of BF16 values, coded losslessly: byte planes with a small dictionary.
//!
//! A BF16 value is two little-endian bytes: the low byte (the exponent's lowest bit and
//! the 7 mantissa bits, ≈ 8 bits of entropy) and the high byte (sign and the exponent's
//! upper 7 bits, ≈ 2.6–2.8 bits on trained and fixture weights, `docs/lossless.md`).
//! Both coded kinds keep the low-byte plane verbatim and code the high-byte plane with a
//! per-block dictionary of its most frequent bytes; decoding is a 16-entry `pshufb`
//! lookup per value on AVX2 plus a patch per escape, interleaved with the low plane.
//!
//! * [`Kind::Bits3`]: 3-bit indices into the 7 most frequent high bytes (≈ 97 % of
//!   values on Gaussian-like weights), stored as three bit planes; index 7 escapes and
//!   the escaped bytes follow in value order. ≈ 11.2 bits per value.
//! * [`Kind::Dict`]: 4-bit indices into the 15 most frequent (≥ 99.9 %); index 15
//!   escapes to a list of (position, byte). ≈ 12 bits per value, twice as fast to decode.
//!
//! An order-0 entropy coder of the high byte would reach ≈ 10.7 bits per value but decode
//! several times slower (the rule in the docs: decode must stay ≥ 3× the disk's read
//! bandwidth).
//!
//! Coded layout of a `Dict` block of `n` values (`2n` decoded bytes), integers LE:
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
//! Coded layout of a `Bits3` block of `n` values:
//!
//! | bytes | field |
//! |---|---|
//! | 8 | dictionary: high bytes for indices 0..7 (entry 7 unused, 0) |
//! | 4 | `e`: number of escapes (u32) |
//! | n | low-byte plane |
//! | 3 × ⌈n/8⌉ | bit planes 0, 1, 2: bit `k` of value `i`'s index is bit `i % 8` of byte `i / 8` of plane `k` |
//! | e | the escaped high bytes, in value order |
//!
//! A [`Kind::Raw`] block is the decoded bytes verbatim (used when coding would not
//! shrink the block's on-disk size).

use std::fmt;

/// Bytes of the fixed part of a `Dict` block (dictionary + escape count).
const DICT_HEAD: usize = 20;
/// Bytes of the fixed part of a `Bits3` block (8-entry dictionary + escape count).
const BITS3_HEAD: usize = 12;
/// The `Bits3` escape index.
const ESC3: u8 = 7;
/// The escape index.
const ESC: u8 = 15;

/// How a block is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The decoded bytes verbatim.
    Raw = 0,
    /// Byte planes: low bytes verbatim, high bytes as dictionary nibbles + escapes.
    Dict = 1,
    /// Byte planes: low bytes verbatim, high bytes as 3-bit dictionary indices in
    /// three bit planes + escaped bytes in order.
    Bits3 = 2,
}

impl Kind {
    /// The kind stored as byte `b` in a block record.
    pub fn from_u8(b: u8) -> Option<Kind> {
        match b {
            0 => Some(Kind::Raw),
            1 => Some(Kind::Dict),
            2 => Some(Kind::Bits3),
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

/// High bytes of `data` (`2n` bytes, BF16 LE) by frequency, most frequent first (ties:
/// smaller byte first), with their counts.
fn by_frequency(data: &[u8]) -> ([u8; 256], [u64; 256]) {
    let mut hist = [0u64; 256];
    for p in data.chunks_exact(2) {
        hist[p[1] as usize] += 1;
    }
    let mut order = [0u8; 256];
    for (i, o) in order.iter_mut().enumerate() {
        *o = i as u8;
    }
    order.sort_by_key(|&b| (std::cmp::Reverse(hist[b as usize]), b));
    (order, hist)
}

/// The `k` (< 16) most frequent high bytes (rest of the 16 entries 0) and how many
/// values fall outside them.
fn top(order: &[u8; 256], hist: &[u64; 256], k: usize, n: usize) -> ([u8; 16], usize) {
    let mut dict = [0u8; 16];
    let mut covered = 0u64;
    for (i, &b) in order.iter().take(k).enumerate() {
        dict[i] = b;
        covered += hist[b as usize];
    }
    (dict, n - covered as usize)
}

#[cfg(test)]
fn dictionary(data: &[u8]) -> ([u8; 16], usize) {
    let (o, h) = by_frequency(data);
    top(&o, &h, 15, data.len() / 2)
}

/// Coded size in bytes of a `Bits3` block of `n` values with `e` escapes.
pub fn bits3_len(n: usize, e: usize) -> usize {
    BITS3_HEAD + n + 3 * n.div_ceil(8) + e
}

/// Codes one block of BF16 bytes `data` (even length) into `out` (cleared first) and
/// returns its kind: the smaller of [`Kind::Bits3`] and [`Kind::Dict`] when it, rounded
/// up to `page` bytes, is smaller than `data` rounded up the same way; else
/// [`Kind::Raw`] (`out` = `data`).
///
/// Panics if `data.len()` is odd (BF16 tensors have even byte lengths).
pub fn encode(data: &[u8], page: usize, out: &mut Vec<u8>) -> Kind {
    encode_as(Codec::Smallest, data, page, out)
}

/// Which coded kinds a pack may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Codec {
    /// Per block the smaller of [`Kind::Bits3`] and [`Kind::Dict`] (≈ 0.70 on BF16
    /// weights; decodes at about half the speed of `Dict15`).
    Smallest,
    /// [`Kind::Dict`] only (≈ 0.75; the fastest decode).
    Dict15,
    /// [`Kind::Raw`] only: every block stored as it is (ratio 1), the control that
    /// separates what the layout's grouping and placement buy from what coding buys.
    Raw,
}

impl Codec {
    /// Parses `smallest|dict15|raw`.
    pub fn parse(s: &str) -> Option<Codec> {
        match s {
            "smallest" => Some(Codec::Smallest),
            "dict15" => Some(Codec::Dict15),
            "raw" => Some(Codec::Raw),
            _ => None,
        }
    }
    /// Name as on the command line and in a pack's index.
    pub fn as_str(self) -> &'static str {
        match self {
            Codec::Smallest => "smallest",
            Codec::Dict15 => "dict15",
            Codec::Raw => "raw",
        }
    }
}

/// [`encode`] restricted to the kinds `codec` allows (raw always).
pub fn encode_as(codec: Codec, data: &[u8], page: usize, out: &mut Vec<u8>) -> Kind {
    assert!(data.len().is_multiple_of(2), "BF16 block of odd length");
    out.clear();
    if codec == Codec::Raw {
        out.extend_from_slice(data);
        return Kind::Raw;
    }
    let n = data.len() / 2;
    let (order, hist) = by_frequency(data);
    let (d15, e15) = top(&order, &hist, 15, n);
    let (d7, e7) = top(&order, &hist, 7, n);
    let round = |x: usize| x.div_ceil(page.max(1)) * page.max(1);
    let dict_len = dict_len(n, e15);
    let bits_len = match codec {
        Codec::Smallest => bits3_len(n, e7),
        Codec::Dict15 | Codec::Raw => usize::MAX,
    };
    if n == 0 || round(dict_len.min(bits_len)) >= round(data.len()) {
        out.extend_from_slice(data);
        return Kind::Raw;
    }
    if bits_len <= dict_len {
        encode_bits3(data, &d7, e7, out);
        Kind::Bits3
    } else {
        encode_dict(data, &d15, e15, out);
        Kind::Dict
    }
}

/// Writes the `Bits3` coding of `data` with dictionary `dict` (entries 0..7; `escapes`
/// values outside them).
fn encode_bits3(data: &[u8], dict: &[u8; 16], escapes: usize, out: &mut Vec<u8>) {
    out.clear();
    let n = data.len() / 2;
    let mut index = [ESC3; 256];
    for (i, &b) in dict.iter().take(7).enumerate() {
        index[b as usize] = i as u8;
    }
    out.reserve(bits3_len(n, escapes));
    out.extend_from_slice(&dict[..8]);
    out.extend_from_slice(&(escapes as u32).to_le_bytes());
    out.extend(data.chunks_exact(2).map(|p| p[0]));
    let pb = n.div_ceil(8);
    let base = out.len();
    out.resize(base + 3 * pb, 0);
    let mut esc = Vec::with_capacity(escapes);
    for (i, p) in data.chunks_exact(2).enumerate() {
        let x = index[p[1] as usize];
        if x == ESC3 {
            esc.push(p[1]);
        }
        for k in 0..3 {
            out[base + k * pb + i / 8] |= ((x >> k) & 1) << (i % 8);
        }
    }
    out.extend_from_slice(&esc);
    debug_assert_eq!(out.len(), bits3_len(n, escapes));
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
        Kind::Bits3 => decode_bits3(isa, coded, out),
    }
}

fn decode_bits3(isa: DecodeIsa, coded: &[u8], out: &mut [u8]) -> Result<(), BlockError> {
    if !out.len().is_multiple_of(2) || coded.len() < BITS3_HEAD {
        return Err(BlockError(format!(
            "3-bit block of {} bytes cannot decode to {} bytes",
            coded.len(),
            out.len()
        )));
    }
    let n = out.len() / 2;
    let mut dict = [0u8; 16];
    dict[..8].copy_from_slice(&coded[..8]);
    let e = u32::from_le_bytes(coded[8..12].try_into().expect("4 bytes")) as usize;
    if e > n || coded.len() != bits3_len(n, e) {
        return Err(BlockError(format!(
            "3-bit block of {} bytes with {e} escapes does not hold {n} values",
            coded.len()
        )));
    }
    let low = &coded[BITS3_HEAD..BITS3_HEAD + n];
    let pb = n.div_ceil(8);
    let planes = &coded[BITS3_HEAD + n..BITS3_HEAD + n + 3 * pb];
    let esc = &coded[BITS3_HEAD + n + 3 * pb..];
    let used = match isa {
        DecodeIsa::Scalar => bits3_scalar(&dict, low, planes, esc, out, 0),
        DecodeIsa::Avx2 => {
            #[cfg(target_arch = "x86_64")]
            {
                assert!(isa.is_supported(), "AVX2 decode on a CPU without AVX2");
                // SAFETY: AVX2 is available (checked above); `low` has n bytes, `planes`
                // 3·⌈n/8⌉, `out` 2n (as `bits3_avx2` requires).
                unsafe { bits3_avx2(&dict, low, planes, esc, out) }
            }
            #[cfg(not(target_arch = "x86_64"))]
            panic!("AVX2 decode on a non-x86 CPU");
        }
    };
    match used {
        Some(k) if k == e => Ok(()),
        _ => Err(BlockError(format!(
            "3-bit block: its indices do not use its {e} escapes"
        ))),
    }
}

/// Decodes values `from..n` of a `Bits3` block, taking escaped bytes from the start of
/// `esc` (the caller passes the escapes not used by values `0..from`); returns how many
/// it used (`None` if more are needed than there are).
fn bits3_scalar(
    dict: &[u8; 16],
    low: &[u8],
    planes: &[u8],
    esc: &[u8],
    out: &mut [u8],
    from: usize,
) -> Option<usize> {
    let n = low.len();
    let pb = n.div_ceil(8);
    let mut k = 0usize;
    for i in from..n {
        let bit = |p: usize| (planes[p * pb + i / 8] >> (i % 8)) & 1;
        let x = bit(0) | (bit(1) << 1) | (bit(2) << 2);
        out[2 * i] = low[i];
        out[2 * i + 1] = if x == ESC3 {
            let v = *esc.get(k)?;
            k += 1;
            v
        } else {
            dict[x as usize]
        };
    }
    Some(k)
}

/// [`bits3_scalar`] 32 values at a time: each plane's 32 bits are expanded to 32 bytes
/// (`pshufb` + bit test), combined to indices, looked up with `pshufb`, interleaved with
/// the low plane; escapes are patched in value order from the compare mask.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn bits3_avx2(
    dict: &[u8; 16],
    low: &[u8],
    planes: &[u8],
    esc: &[u8],
    out: &mut [u8],
) -> Option<usize> {
    use std::arch::x86_64::*;
    let n = low.len();
    let pb = n.div_ceil(8);
    let blocks = n / 32;
    let mut k = 0usize;
    // SAFETY (whole body): loads read `low[32b..32b+32]` and 4 bytes at `p·pb + 4b` of
    // each plane (4b + 4 ≤ ⌈n/8⌉ since 32b + 32 ≤ n); stores write `out[64b..64b+64]`.
    unsafe {
        let table = _mm256_broadcastsi128_si256(_mm_loadu_si128(dict.as_ptr() as *const __m128i));
        let spread = _mm256_setr_epi8(
            0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3,
            3, 3, 3,
        );
        let bits = _mm256_set1_epi64x(0x8040_2010_0804_0201u64 as i64);
        let seven = _mm256_set1_epi8(7);
        let lanes = _mm256_setr_epi8(
            0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23,
            24, 25, 26, 27, 28, 29, 30, 31,
        );
        // Plane `p`'s 32 bits for values 32b..32b+32, as bytes `w` (set) or 0.
        macro_rules! expand {
            ($p:expr, $b:expr, $w:expr) => {{
                let m =
                    std::ptr::read_unaligned(planes.as_ptr().add($p * pb + 4 * $b) as *const i32);
                let v = _mm256_shuffle_epi8(_mm256_set1_epi32(m), spread);
                let set = _mm256_cmpeq_epi8(_mm256_and_si256(v, bits), bits);
                _mm256_and_si256(set, _mm256_set1_epi8($w))
            }};
        }
        for b in 0..blocks {
            let idx = _mm256_or_si256(
                _mm256_or_si256(expand!(0, b, 1), expand!(1, b, 2)),
                expand!(2, b, 4),
            );
            let mut hi = _mm256_shuffle_epi8(table, idx);
            // Escapes of these 32 values, in order: the first two blended in without
            // branches (lane 32 = none; ≈ 1 per 32 values at 3 %), a loop for more.
            let mask = _mm256_movemask_epi8(_mm256_cmpeq_epi8(idx, seven)) as u32;
            let c = mask.count_ones() as usize;
            if k + c > esc.len() {
                return None;
            }
            let m1 = mask & mask.wrapping_sub(1);
            for (j, v) in [
                (mask.trailing_zeros(), esc.get(k)),
                (m1.trailing_zeros(), esc.get(k + 1)),
            ] {
                let v = _mm256_set1_epi8(v.copied().unwrap_or(0) as i8);
                let at = _mm256_cmpeq_epi8(lanes, _mm256_set1_epi8(j as i8));
                hi = _mm256_blendv_epi8(hi, v, at);
            }
            let lo = _mm256_loadu_si256(low.as_ptr().add(32 * b) as *const __m256i);
            let a = _mm256_unpacklo_epi8(lo, hi); // values 0..8 | 16..24
            let c2 = _mm256_unpackhi_epi8(lo, hi); // values 8..16 | 24..32
            let o = out.as_mut_ptr().add(64 * b);
            _mm256_storeu_si256(o as *mut __m256i, _mm256_permute2x128_si256(a, c2, 0x20));
            _mm256_storeu_si256(
                o.add(32) as *mut __m256i,
                _mm256_permute2x128_si256(a, c2, 0x31),
            );
            if c > 2 {
                let mut m = m1 & m1.wrapping_sub(1);
                let mut kk = k + 2;
                while m != 0 {
                    *o.add(2 * m.trailing_zeros() as usize + 1) = esc[kk];
                    kk += 1;
                    m &= m - 1;
                }
            }
            k += c;
        }
    }
    let tail = bits3_scalar(
        dict,
        low,
        planes,
        &esc[k.min(esc.len())..],
        out,
        32 * blocks,
    )?;
    Some(k + tail)
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
mod tests;
