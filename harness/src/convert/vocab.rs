//! The GGUF tokenizer keys of a Kimi checkpoint, built from its `tiktoken.model`
//! (no Python tokenizer file): a GPT-2 style byte-level BPE vocabulary.
//!
//! As llama.cpp's converter does for the `kimi-k2` pre-tokenizer
//! (`conversion/kimi_linear.py`, `set_vocab`, with `QwenModel.bpe` and
//! `token_bytes_to_string`):
//! - token `i < n_base` is rank `i`'s bytes, each byte mapped to a printable character
//!   by GPT-2's `bytes_to_unicode` table; type NORMAL (1);
//! - a special token (ids `n_base..`, names from `tokenizer_config.json`) is its
//!   content; type CONTROL (3);
//! - ids up to the model's `vocab_size` that the tokenizer lacks are `[PAD{i}]`, type
//!   UNUSED (5);
//! - merges: for each rank `r` whose bytes are longer than one, BPE of its bytes using
//!   only ranks below `r` (repeatedly merge the adjacent pair of lowest rank); when
//!   that ends in exactly two parts, the merge `"A B"` (both parts mapped as above).

use std::collections::HashMap;
use std::path::Path;

use anyhow::{Context, Result};
use memdial::format::tokenizer::Tokenizer;

use super::gguf::Value;

/// GPT-2's `bytes_to_unicode`: printable bytes map to themselves, the others to
/// U+0100 onwards in byte order.
pub fn byte_to_char() -> [char; 256] {
    let mut out = ['\0'; 256];
    let mut n = 0u32;
    for b in 0..256u32 {
        let printable =
            (33..=126).contains(&b) || (161..=172).contains(&b) || (174..=255).contains(&b);
        out[b as usize] = if printable {
            char::from_u32(b).unwrap()
        } else {
            n += 1;
            char::from_u32(255 + n).unwrap()
        };
    }
    out
}

fn to_str(map: &[char; 256], bytes: &[u8]) -> String {
    bytes.iter().map(|b| map[*b as usize]).collect()
}

/// BPE of `token` with ranks below `max_rank` (llama.cpp's `QwenModel.bpe`).
fn bpe(ranks: &HashMap<&[u8], usize>, token: &[u8], max_rank: usize) -> Vec<(usize, usize)> {
    // parts as [start, end) ranges of `token`
    let mut parts: Vec<(usize, usize)> = (0..token.len()).map(|i| (i, i + 1)).collect();
    loop {
        let mut best: Option<(usize, usize)> = None; // (index, rank)
        for i in 0..parts.len().saturating_sub(1) {
            if let Some(&r) = ranks.get(&token[parts[i].0..parts[i + 1].1]) {
                if best.is_none_or(|(_, br)| r < br) {
                    best = Some((i, r));
                }
            }
        }
        match best {
            Some((i, r)) if r < max_rank => {
                parts[i] = (parts[i].0, parts[i + 1].1);
                parts.remove(i + 1);
            }
            _ => return parts,
        }
    }
}

/// The `tokenizer.ggml.*` keys of `dir` for a model of `vocab_size` ids, with
/// `eos` as the eos id (the converter's choice differs by architecture).
/// Errors: unreadable or malformed `tiktoken.model` / `tokenizer_config.json`.
pub fn tokenizer_kvs(dir: &Path, vocab_size: usize, eos: u32) -> Result<Vec<(String, Value)>> {
    let tok = Tokenizer::from_dir(dir)?;
    let path = dir.join("tiktoken.model");
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let bytes =
        memdial::format::tokenizer::parse_tiktoken_model(&text, &path.display().to_string())?;
    let map = byte_to_char();
    let ranks: HashMap<&[u8], usize> = bytes
        .iter()
        .enumerate()
        .map(|(i, b)| (b.as_slice(), i))
        .collect();
    let mut tokens = Vec::with_capacity(vocab_size);
    let mut types = Vec::with_capacity(vocab_size);
    for i in 0..vocab_size {
        if let Some(b) = bytes.get(i) {
            tokens.push(to_str(&map, b));
            types.push(1);
        } else if let Some(name) = tok.special_name(i as u32) {
            tokens.push(name.to_string());
            types.push(3);
        } else {
            tokens.push(format!("[PAD{i}]"));
            types.push(5);
        }
    }
    let mut merges = vec![];
    for (r, b) in bytes.iter().enumerate() {
        if b.len() < 2 {
            continue;
        }
        let parts = bpe(&ranks, b, r);
        if parts.len() == 2 {
            merges.push(format!(
                "{} {}",
                to_str(&map, &b[parts[0].0..parts[0].1]),
                to_str(&map, &b[parts[1].0..parts[1].1])
            ));
        }
    }
    let mut kv = vec![
        (
            "tokenizer.ggml.model".to_string(),
            Value::Str("gpt2".into()),
        ),
        ("tokenizer.ggml.pre".into(), Value::Str("kimi-k2".into())),
        ("tokenizer.ggml.tokens".into(), Value::ArrStr(tokens)),
        ("tokenizer.ggml.token_type".into(), Value::ArrI32(types)),
        ("tokenizer.ggml.merges".into(), Value::ArrStr(merges)),
        (
            "tokenizer.ggml.bos_token_id".into(),
            Value::U32(tok.bos_id()),
        ),
        ("tokenizer.ggml.eos_token_id".into(), Value::U32(eos)),
    ];
    if let Some(p) = tok.pad_id() {
        kv.push(("tokenizer.ggml.padding_token_id".into(), Value::U32(p)));
    }
    Ok(kv)
}
