//! The vocabulary: special-token names, `tiktoken.model` parsing, the `o200k_base`
//! prefix the fixtures use, and the check that a rank list is a valid byte-level
//! BPE vocabulary (every token reachable by merges of lower-ranked tokens).

use super::*;

/// The 256 special-token strings for a vocabulary with `n_base` ordinary ranks, indexed by
/// offset (`names[k]` is the content of id `n_base + k`): the [`KIMI_NAMED_SPECIALS`] names and
/// `<|reserved_token_{n_base + k}|>` for the rest (absolute id, as in `tokenization_kimi.py`,
/// so the names depend on `n_base`).
pub fn special_token_names(n_base: u32) -> Vec<String> {
    let mut names: Vec<String> = (0..NUM_SPECIAL_TOKENS)
        .map(|k| format!("<|reserved_token_{}|>", n_base + k))
        .collect();
    for &(off, content, _) in KIMI_NAMED_SPECIALS {
        names[off as usize] = content.to_string();
    }
    names
}

/// Token bytes of `o200k_base` ranks `0..n` (index = rank), read from the vocabulary that
/// tiktoken-rs embeds (via its decoder, so no private asset access is needed).
///
/// Errors if `n > O200K_BASE_LEN` or a rank is missing.
pub fn o200k_token_bytes(n: u32) -> Result<Vec<Vec<u8>>> {
    if n > O200K_BASE_LEN {
        bail!("o200k_base has only {O200K_BASE_LEN} ordinary ranks, asked for {n}");
    }
    let bpe = tiktoken_rs::o200k_base_singleton();
    (0..n)
        .map(|r| {
            bpe.decode_bytes(&[r])
                .map_err(|e| anyhow!("o200k_base rank {r} missing: {e:?}"))
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// BPE validity
// ---------------------------------------------------------------------------------------------

/// A reason why a rank table is not a valid byte-level BPE vocabulary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BpeDefect {
    /// Single byte with no rank: text containing it cannot be encoded (tiktoken would panic).
    MissingByte(u8),
    /// Token of this rank is not produced by BPE-encoding its own bytes with merges of rank
    /// `<= rank` (so it is unreachable in some or all prefixes).
    Unreachable(u32),
    /// Two ranks hold the same bytes (the later rank is reported).
    Duplicate(u32),
    /// Asked for more ranks than the source vocabulary has.
    OutOfRange { requested: u32, available: u32 },
}

/// Checks that `tokens` (index = rank, value = token bytes) is a valid byte-level BPE
/// vocabulary in the strong, prefix-closed sense:
///
/// * every single byte 0..=255 has a rank, no two ranks share bytes, and
/// * for every rank `r`, tiktoken's merge loop (repeatedly merge the adjacent pair whose
///   concatenation has the lowest rank) run on `tokens[r]`'s bytes, **using only merges of
///   rank `<= r`**, ends in the single token `r`.
///
/// The second condition implies that for every `M > r` the prefix `tokens[..M]` encodes
/// `tokens[r]` to `[r]` (ranks above `r` are never the minimum while a rank `<= r` pair
/// exists, so the runs stay in lockstep). Hence if `tokens[..N]` passes, **every prefix
/// `tokens[..M]`, `256 <= M <= N`, that contains all single bytes, is a valid BPE vocabulary**.
///
/// Returns all defects found (sorted by kind then rank). Cost: O(Σ len²), ≈ 1 s for 163 584
/// o200k tokens in release mode.
pub fn check_bpe_vocab(tokens: &[Vec<u8>]) -> std::result::Result<(), Vec<BpeDefect>> {
    let mut defects = Vec::new();
    let mut ranks: HashMap<&[u8], u32> = HashMap::with_capacity(tokens.len());
    for (r, t) in tokens.iter().enumerate() {
        if ranks.insert(t.as_slice(), r as u32).is_some() {
            defects.push(BpeDefect::Duplicate(r as u32));
        }
    }
    for b in 0..=255u8 {
        if !ranks.contains_key(&[b][..]) {
            defects.push(BpeDefect::MissingByte(b));
        }
    }
    let mut bounds: Vec<usize> = Vec::new();
    for (r, t) in tokens.iter().enumerate() {
        let r = r as u32;
        if t.len() <= 1 {
            if t.is_empty() {
                defects.push(BpeDefect::Unreachable(r));
            }
            continue;
        }
        // Part boundaries: parts are t[bounds[i]..bounds[i+1]].
        bounds.clear();
        bounds.extend(0..=t.len());
        loop {
            let mut best: Option<(u32, usize)> = None;
            for i in 0..bounds.len() - 2 {
                let pair = &t[bounds[i]..bounds[i + 2]];
                if let Some(&pr) = ranks.get(pair) {
                    if pr <= r && best.is_none_or(|(b, _)| pr < b) {
                        best = Some((pr, i));
                    }
                }
            }
            match best {
                Some((_, i)) => {
                    bounds.remove(i + 1);
                }
                None => break,
            }
        }
        if bounds.len() != 2 {
            defects.push(BpeDefect::Unreachable(r));
        }
    }
    if defects.is_empty() {
        Ok(())
    } else {
        Err(defects)
    }
}

/// [`check_bpe_vocab`] on the first `n` ranks of `o200k_base` (the synthetic presets'
/// vocabulary). `Err` lists every defect; `n > O200K_BASE_LEN` gives
/// [`BpeDefect::OutOfRange`].
pub fn check_bpe_prefix(n: u32) -> std::result::Result<(), Vec<BpeDefect>> {
    if n > O200K_BASE_LEN {
        return Err(vec![BpeDefect::OutOfRange {
            requested: n,
            available: O200K_BASE_LEN,
        }]);
    }
    let tokens = o200k_token_bytes(n).map_err(|_| {
        vec![BpeDefect::OutOfRange {
            requested: n,
            available: O200K_BASE_LEN,
        }]
    })?;
    check_bpe_vocab(&tokens)
}

/// Parses `tiktoken.model` text into token bytes indexed by rank (ranks must be dense
/// `0..n`, unique, bytes unique). `name` is used in error messages.
pub fn parse_tiktoken_model(text: &str, name: &str) -> Result<Vec<Vec<u8>>> {
    let b64 = base64::engine::general_purpose::STANDARD;
    let mut by_rank: Vec<Option<Vec<u8>>> = Vec::new();
    let mut seen: HashMap<Vec<u8>, u32> = HashMap::new();
    for (lineno, line) in text.lines().enumerate() {
        let lineno = lineno + 1;
        if line.trim().is_empty() {
            continue;
        }
        let mut parts = line.split_whitespace();
        let (Some(tok), Some(rank), None) = (parts.next(), parts.next(), parts.next()) else {
            bail!("{name}:{lineno}: expected `base64 rank`, got {line:?}");
        };
        let bytes = b64
            .decode(tok)
            .with_context(|| format!("{name}:{lineno}: bad base64 {tok:?}"))?;
        let rank: u32 = rank
            .parse()
            .with_context(|| format!("{name}:{lineno}: bad rank {rank:?}"))?;
        if rank as usize >= 16 * 1024 * 1024 {
            bail!("{name}:{lineno}: rank {rank} is implausibly large");
        }
        if by_rank.len() <= rank as usize {
            by_rank.resize(rank as usize + 1, None);
        }
        if by_rank[rank as usize].is_some() {
            bail!("{name}:{lineno}: duplicate rank {rank}");
        }
        if let Some(prev) = seen.insert(bytes.clone(), rank) {
            bail!("{name}:{lineno}: rank {rank} repeats the bytes of rank {prev}");
        }
        by_rank[rank as usize] = Some(bytes);
    }
    if by_rank.is_empty() {
        bail!("{name}: no tokens");
    }
    by_rank
        .into_iter()
        .enumerate()
        .map(|(r, t)| t.ok_or_else(|| anyhow!("{name}: ranks are not dense, rank {r} missing")))
        .collect()
}
