//! Small helpers shared by the sweep modules: UTC timestamps, SHA-256 hex, and
//! bounded reads of what a child wrote.

use std::time::{SystemTime, UNIX_EPOCH};

/// Lower-case hex SHA-256 of `bytes`.
pub use memdial::util::digest::sha256_hex;

/// The engine's hash of output ids (defined beside the generate output).
#[cfg(test)]
pub use memdial::engine::generate::ids_sha256;

/// Most bytes of a child's output file (its stdout, an engine's ids file, a metrics
/// file) the harness reads: an engine that writes more is refused, not read into
/// memory whole.
pub const MAX_OUTPUT_BYTES: u64 = 64 << 20;

/// The text of `p`, a regular file a child wrote, at most `max` bytes (invalid UTF-8
/// replaced). Errors: it is not a regular file (a FIFO would block, a device never
/// end), cannot be read, or holds more than `max` bytes — each naming the path.
pub fn read_output(p: &std::path::Path, max: u64) -> anyhow::Result<String> {
    read_output_bytes(p, max).map(|b| String::from_utf8_lossy(&b).into_owned())
}

/// The bytes of output file `p`, as they are (what a text-only engine's output is
/// hashed over: no UTF-8 decoding, so outputs that differ in invalid bytes differ).
///
/// Errors: as [`read_output`].
pub fn read_output_bytes(p: &std::path::Path, max: u64) -> anyhow::Result<Vec<u8>> {
    use std::io::Read;
    let shown = p.display();
    let m = std::fs::metadata(p).map_err(|e| anyhow::anyhow!("{shown}: {e}"))?;
    if !m.is_file() {
        anyhow::bail!("{shown} is not a regular file (a directory, FIFO or device): not read");
    }
    if m.len() > max {
        anyhow::bail!(
            "{shown} holds {} bytes, more than the {max} the harness reads",
            m.len()
        );
    }
    let mut buf = Vec::new();
    std::fs::File::open(p)
        .and_then(|f| f.take(max + 1).read_to_end(&mut buf))
        .map_err(|e| anyhow::anyhow!("{shown}: {e}"))?;
    if buf.len() as u64 > max {
        anyhow::bail!("{shown} grew past the {max} bytes the harness reads");
    }
    Ok(buf)
}

/// Civil date (year, month, day) of a day count since 1970-01-01 (Howard Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// (Y, M, D, h, m, s) in UTC for the current time.
fn utc_parts() -> (i64, u32, u32, u64, u64, u64) {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let (y, mo, d) = civil_from_days((secs / 86_400) as i64);
    let s = secs % 86_400;
    (y, mo, d, s / 3600, (s / 60) % 60, s % 60)
}

/// Current UTC time as RFC 3339, e.g. `2026-05-01T12:34:56Z`.
pub fn utc_now_rfc3339() -> String {
    let (y, mo, d, h, mi, s) = utc_parts();
    format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}Z")
}

/// Current UTC time usable as a directory name, e.g. `20260501-123456`.
pub fn utc_now_dirname() -> String {
    let (y, mo, d, h, mi, s) = utc_parts();
    format!("{y:04}{mo:02}{d:02}-{h:02}{mi:02}{s:02}")
}

/// Reads a little-endian float32 C-order 2-D `.npy` (format 1.0 / 2.0) as
/// (rows, cols, data).
pub fn read_npy_f32(bytes: &[u8]) -> anyhow::Result<(usize, usize, Vec<f32>)> {
    use anyhow::{bail, Context};
    if bytes.len() < 10 || &bytes[..6] != b"\x93NUMPY" {
        bail!("not an .npy file");
    }
    let (hlen, start) = match bytes[6] {
        1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10),
        _ => (u32::from_le_bytes(bytes[8..12].try_into()?) as usize, 12),
    };
    let header = std::str::from_utf8(&bytes[start..start + hlen])?;
    if !header.contains("'<f4'") || header.contains("'fortran_order': True") {
        bail!("expected little-endian float32 in C order: {header}");
    }
    let shape = header
        .split("'shape':")
        .nth(1)
        .and_then(|s| s.split(')').next())
        .context("no shape")?;
    let dims: Vec<usize> = shape
        .trim()
        .trim_start_matches('(')
        .split(',')
        .filter(|t| !t.trim().is_empty())
        .map(|t| t.trim().parse::<usize>())
        .collect::<std::result::Result<_, _>>()?;
    if dims.len() != 2 {
        bail!("expected a 2-D array, shape {dims:?}");
    }
    let data: Vec<f32> = bytes[start + hlen..]
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    if data.len() != dims[0] * dims[1] {
        bail!("data holds {} values, shape says {dims:?}", data.len());
    }
    Ok((dims[0], dims[1], data))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(19_723), (2024, 1, 1));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
    }

    #[test]
    fn ids_hash_matches_manual_encoding() {
        // sha256 of the 8 bytes 01 00 00 00 02 00 00 00
        assert_eq!(ids_sha256(&[1, 2]), sha256_hex(&[1, 0, 0, 0, 2, 0, 0, 0]));
        assert_eq!(
            ids_sha256(&[]),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }
}
