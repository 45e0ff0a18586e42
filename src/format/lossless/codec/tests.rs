//! Unit tests of `codec`.

use super::*;

fn round_trip(data: &[u8]) -> Kind {
    let mut c = Vec::new();
    let k = encode(data, 1, &mut c);
    check(k, &c, data);
    // Both codings too, even where they do not pay.
    let (dict, e) = dictionary(data);
    encode_dict(data, &dict, e, &mut c);
    check(Kind::Dict, &c, data);
    let (o, h) = by_frequency(data);
    let (d7, e7) = top(&o, &h, 7, data.len() / 2);
    encode_bits3(data, &d7, e7, &mut c);
    check(Kind::Bits3, &c, data);
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
        // 12 + n + 3⌈n/8⌉ bytes < 2n from n = 21 on (and below the Dict size)
        let want = if n >= 21 { Kind::Bits3 } else { Kind::Raw };
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
    assert_eq!(round_trip(&v), Kind::Bits3);
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
fn hand_built_bits3_layout() {
    // High bytes 3F ×4, 40 ×2, BF, 01..07 once each (14 values): dictionary
    // [3F, 40, 01, 02, 03, 04, 05] (ties by byte), so BF, 06, 07 escape (index 7).
    let highs = [
        0x3F, 0x40, 0x3F, 0xBF, 0x3F, 0x40, 0x3F, 1, 2, 3, 4, 5, 6, 7,
    ];
    let data: Vec<u8> = highs
        .iter()
        .enumerate()
        .flat_map(|(i, &h)| [i as u8, h])
        .collect();
    let (o, h) = by_frequency(&data);
    let (d7, e7) = top(&o, &h, 7, 14);
    assert_eq!(&d7[..7], &[0x3F, 0x40, 1, 2, 3, 4, 5]);
    assert_eq!(e7, 3);
    let mut c = Vec::new();
    encode_bits3(&data, &d7, e7, &mut c);
    assert_eq!(&c[8..12], &[3, 0, 0, 0]);
    assert_eq!(&c[12..26], &(0..14u8).collect::<Vec<_>>()[..]); // low plane
                                                                // indices 0 1 0 7 0 1 0 2 | 3 4 5 6 7 7
                                                                //  bit 0: 0,1,0,1,0,1,0,0 → 0x2A; 1,0,1,0,1,1 → 0x35
                                                                //  bit 1: 0,0,0,1,0,0,0,1 → 0x88; 1,0,0,1,1,1 → 0x39
                                                                //  bit 2: 0,0,0,1,0,0,0,0 → 0x08; 0,1,1,1,1,1 → 0x3E
    assert_eq!(&c[26..32], &[0x2A, 0x35, 0x88, 0x39, 0x08, 0x3E]);
    assert_eq!(&c[32..], &[0xBF, 6, 7]);
    assert_eq!(c.len(), bits3_len(14, 3));
    check(Kind::Bits3, &c, &data);
}

#[test]
fn malformed_blocks_are_errors() {
    let data: Vec<u8> = (0..200u32)
        .flat_map(|i| [i as u8, 0x3C + (i % 3) as u8])
        .collect();
    let mut out = vec![0u8; data.len()];
    for kind in [Kind::Dict, Kind::Bits3] {
        let c = match kind {
            Kind::Dict => {
                let (d, e) = dictionary(&data);
                let mut c = Vec::new();
                encode_dict(&data, &d, e, &mut c);
                c
            }
            _ => {
                let mut c = Vec::new();
                assert_eq!(encode(&data, 1, &mut c), Kind::Bits3);
                c
            }
        };
        assert!(decode(kind, &c[..c.len() - 1], &mut out).is_err());
        assert!(decode(kind, &c, &mut out[..10]).is_err());
        assert!(decode(Kind::Raw, &c, &mut out).is_err());
        decode(kind, &c, &mut out).unwrap();
        assert!(out == data);
    }
    let mut c = Vec::new();
    encode_dict(&data, &dictionary(&data).0, 0, &mut c);
    c[16] = 3; // claims 3 escapes
    assert!(decode(Kind::Dict, &c, &mut out).is_err());
    // A Bits3 block whose indices escape more values than it lists, for both loops.
    let mut v = data.clone();
    for i in 0..8 {
        v[2 * (25 * i) + 1] = 0x80 + i as u8; // 8 rare high bytes
    }
    let (o, h) = by_frequency(&v);
    let (d7, e7) = top(&o, &h, 7, 200);
    encode_bits3(&v, &d7, e7, &mut c);
    assert!(e7 >= 1);
    let n = c.len();
    c.truncate(n - 1); // drop the last escape byte…
    c[8..12].copy_from_slice(&(e7 as u32 - 1).to_le_bytes()); // …and the count
    for isa in [DecodeIsa::Scalar, DecodeIsa::Avx2] {
        if isa.is_supported() {
            assert!(
                decode_with(isa, Kind::Bits3, &c, &mut out).is_err(),
                "{isa:?}"
            );
        }
    }
}
