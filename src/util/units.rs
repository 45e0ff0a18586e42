//! Sizes in bytes: parsing `512MiB` / `8GB` and printing `1.50 GiB`.

use crate::util::error::UsageError;

/// Parses a size: `512MiB`, `2GiB`, `8GB`, `1.5G`, `1000000` (bytes).
/// Decimal units (kB, MB, GB, TB) are powers of 1000; binary ones (KiB, MiB, GiB,
/// TiB) and bare K/M/G/T are powers of 1024 (IEC 80000-13 names; the bare letters
/// follow `dd`/`numfmt`). The result is rounded to whole bytes.
///
/// Errors: [`UsageError::BadSize`] for a missing or malformed number, an unknown
/// unit, or a size of 2^64 bytes or more (never saturated or wrapped).
pub fn parse_size(s: &str) -> Result<u64, UsageError> {
    let bad = |reason: &str| UsageError::BadSize {
        text: s.to_string(),
        reason: reason.to_string(),
    };
    let t = s.trim();
    let idx = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(idx);
    let v: f64 = num
        .parse()
        .map_err(|_| bad("not a number (examples: 512MiB, 2GiB, 8GB)"))?;
    let mult: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "kb" => 1e3,
        "mb" => 1e6,
        "gb" => 1e9,
        "tb" => 1e12,
        "k" | "kib" => 1024.0,
        "m" | "mib" => 1024.0 * 1024.0,
        "g" | "gib" => 1024.0 * 1024.0 * 1024.0,
        "t" | "tib" => 1024f64.powi(4),
        _ => return Err(bad("unknown unit (B, kB, MB, GB, TB, KiB, MiB, GiB, TiB)")),
    };
    if mult == 1.0 {
        if let Ok(b) = num.parse::<u64>() {
            return Ok(b); // exact, also above 2^53
        }
    }
    let bytes = (v * mult).round();
    // `u64::MAX as f64` is 2^64: anything at or above it does not fit.
    if !bytes.is_finite() || bytes >= u64::MAX as f64 {
        return Err(bad("too large: sizes must be below 16 EiB (2^64 bytes)"));
    }
    Ok(bytes as u64)
}

/// Formats bytes with a binary unit, e.g. `1.50 GiB` (two decimals; plain `N B`
/// below 1 KiB).
pub fn fmt_bytes(b: u64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u < units.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{b} B")
    } else {
        format!("{v:.2} {}", units[u])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("512MiB").unwrap(), 512 << 20);
        assert_eq!(parse_size("2GiB").unwrap(), 2 << 30);
        assert_eq!(parse_size("8GB").unwrap(), 8_000_000_000);
        assert_eq!(parse_size("1.5G").unwrap(), 3 << 29);
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert!(parse_size("12 parsecs").is_err());
        assert!(parse_size("").is_err());
        // 99999999999 TB = 9.9999999999e22 bytes > 2^64 - 1 = 18446744073709551615.
        assert!(parse_size("99999999999TB").is_err());
        assert_eq!(parse_size("18446744073709551615").unwrap(), u64::MAX);
        assert!(parse_size("18446744073709551616").is_err());
    }
}
