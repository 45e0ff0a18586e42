//! The few facts a sweep reads from a GGUF file's metadata (its header's key/value
//! section): `general.architecture` and `tokenizer.ggml.eos_token_id`. Tensors are not
//! read; the reads are a few KiB from the start of the file, dropped from the page
//! cache again so the file stays cold.

use std::io::{BufReader, Read};
use std::path::Path;

use anyhow::{bail, Context, Result};

/// What a sweep uses of a GGUF's metadata.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GgufMeta {
    /// GGUF version (2 or 3).
    pub version: u32,
    /// `general.architecture` (`llama`, `qwen3moe`, `kimi-k3`, …), empty when absent.
    pub architecture: String,
    /// `tokenizer.ggml.eos_token_id`, when present.
    pub eos_token_id: Option<u32>,
}

/// Whether `path` starts with the GGUF magic (`GGUF`).
pub fn is_gguf(path: &Path) -> bool {
    let mut m = [0u8; 4];
    std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut m))
        .is_ok()
        && &m == b"GGUF"
}

/// Reads the metadata of the GGUF file `path`.
///
/// Errors: not a GGUF (bad magic), an unsupported version, a truncated or malformed
/// key/value section (each naming the file).
pub fn read(path: &Path) -> Result<GgufMeta> {
    let f = std::fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let res = read_from(&mut BufReader::with_capacity(64 << 10, &f));
    // The header pages are dropped again: the sweep's runs start cold.
    let _ = rustix::fs::fadvise(&f, 0, None, rustix::fs::Advice::DontNeed);
    res.with_context(|| format!("{}: not a readable GGUF header", path.display()))
}

fn read_from(r: &mut impl Read) -> Result<GgufMeta> {
    let mut magic = [0u8; 4];
    r.read_exact(&mut magic)?;
    if &magic != b"GGUF" {
        bail!("no GGUF magic");
    }
    let version = u32_le(r)?;
    if !(2..=3).contains(&version) {
        bail!("GGUF version {version} (2 and 3 are read)");
    }
    let _n_tensors = u64_le(r)?;
    let n_kv = u64_le(r)?;
    let mut m = GgufMeta {
        version,
        ..Default::default()
    };
    for _ in 0..n_kv {
        let key = string(r)?;
        let ty = u32_le(r)?;
        match (key.as_str(), ty) {
            ("general.architecture", 8) => m.architecture = string(r)?,
            ("tokenizer.ggml.eos_token_id", 4 | 5) => m.eos_token_id = Some(u32_le(r)?),
            _ => skip_value(r, ty, 0)?,
        }
        if !m.architecture.is_empty() && m.eos_token_id.is_some() {
            break;
        }
    }
    Ok(m)
}

/// Bytes of a scalar of GGUF value type `ty` (`None`: string or array).
fn scalar_size(ty: u32) -> Result<Option<u64>> {
    Ok(match ty {
        0 | 1 | 7 => Some(1),
        2 | 3 => Some(2),
        4..=6 => Some(4),
        10..=12 => Some(8),
        8 | 9 => None,
        _ => bail!("unknown GGUF value type {ty}"),
    })
}

fn skip_value(r: &mut impl Read, ty: u32, depth: u32) -> Result<()> {
    if depth > 4 {
        bail!("GGUF arrays nested too deep");
    }
    match (ty, scalar_size(ty)?) {
        (_, Some(n)) => skip(r, n),
        (8, None) => {
            let n = u64_le(r)?;
            skip(r, n)
        }
        _ => {
            let ety = u32_le(r)?;
            let n = u64_le(r)?;
            match scalar_size(ety)? {
                Some(sz) => skip(r, n.checked_mul(sz).context("GGUF array length overflows")?),
                None => (0..n).try_for_each(|_| skip_value(r, ety, depth + 1)),
            }
        }
    }
}

fn skip(r: &mut impl Read, n: u64) -> Result<()> {
    let got = std::io::copy(&mut r.take(n), &mut std::io::sink())?;
    if got != n {
        bail!("truncated");
    }
    Ok(())
}

fn u32_le(r: &mut impl Read) -> Result<u32> {
    let mut b = [0u8; 4];
    r.read_exact(&mut b)?;
    Ok(u32::from_le_bytes(b))
}

fn u64_le(r: &mut impl Read) -> Result<u64> {
    let mut b = [0u8; 8];
    r.read_exact(&mut b)?;
    Ok(u64::from_le_bytes(b))
}

fn string(r: &mut impl Read) -> Result<String> {
    let n = u64_le(r)?;
    if n > 1 << 20 {
        bail!("a {n}-byte key or string");
    }
    let mut b = vec![0u8; n as usize];
    r.read_exact(&mut b)?;
    Ok(String::from_utf8_lossy(&b).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kv_str(out: &mut Vec<u8>, k: &str, v: &str) {
        out.extend((k.len() as u64).to_le_bytes());
        out.extend(k.as_bytes());
        out.extend(8u32.to_le_bytes());
        out.extend((v.len() as u64).to_le_bytes());
        out.extend(v.as_bytes());
    }

    /// A header written by hand after the GGUF spec (magic, version, counts, then
    /// key, type, value): an array of strings and a u32 before the keys wanted.
    #[test]
    fn reads_architecture_and_eos_after_other_keys() {
        let mut b = b"GGUF".to_vec();
        b.extend(3u32.to_le_bytes());
        b.extend(0u64.to_le_bytes());
        b.extend(4u64.to_le_bytes());
        // tokenizer.ggml.tokens: array (9) of strings (8), 2 items
        let k = "tokenizer.ggml.tokens";
        b.extend((k.len() as u64).to_le_bytes());
        b.extend(k.as_bytes());
        b.extend(9u32.to_le_bytes());
        b.extend(8u32.to_le_bytes());
        b.extend(2u64.to_le_bytes());
        for t in ["<s>", "ab"] {
            b.extend((t.len() as u64).to_le_bytes());
            b.extend(t.as_bytes());
        }
        let k = "llama.block_count";
        b.extend((k.len() as u64).to_le_bytes());
        b.extend(k.as_bytes());
        b.extend(4u32.to_le_bytes());
        b.extend(2u32.to_le_bytes());
        kv_str(&mut b, "general.architecture", "llama");
        let k = "tokenizer.ggml.eos_token_id";
        b.extend((k.len() as u64).to_le_bytes());
        b.extend(k.as_bytes());
        b.extend(4u32.to_le_bytes());
        b.extend(7u32.to_le_bytes());
        let m = read_from(&mut b.as_slice()).unwrap();
        assert_eq!(
            m,
            GgufMeta {
                version: 3,
                architecture: "llama".into(),
                eos_token_id: Some(7)
            }
        );
        assert!(read_from(&mut &b[..b.len() - 2]).is_err());
        assert!(read_from(&mut &b"GGML"[..]).is_err());
    }
}
