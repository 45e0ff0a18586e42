//! gpt-oss's tokenizer (OpenAI `o200k_harmony`): read from a checkpoint's `tokenizer.json`
//! or from a tiktoken ranks file (`*.tiktoken`) with the harmony special tokens.
//!
//! # Conventions
//!
//! * Ranks file: the `base64(token_bytes) SP rank` lines Python `tiktoken.load.load_tiktoken_bpe`
//!   reads (the published one is `o200k_base.tiktoken`, 199 998 ranks). Text is split with
//!   [`O200K_PAT_STR`] and BPE-merged by rank, one call per text (no Kimi pre-split).
//! * Specials: `tokenizer_config.json` → `added_tokens_decoder` when present, else the table of
//!   `tiktoken_ext/openai_public.py` `o200k_harmony()` ([`harmony_specials`]): the
//!   [`HARMONY_NAMED_SPECIALS`] at their published ids, `<|reserved_{id}|>` for the rest of
//!   [`HARMONY_SPECIAL_IDS`], and o200k_base's own `<|endofprompt|>` = 200018 beside
//!   `<|reserved_200018|>` (two names for one id, as in tiktoken).
//! * `tokenizer.json`: the shape transformers' `TikTokenConverter` writes and the published
//!   gpt-oss file has: a byte-level `BPE` model (GPT-2 byte↔char table, [`byte_level_chars`]),
//!   no normalizer, `pre_tokenizer` = `Sequence[Split(Regex(pattern), "Isolated"),
//!   ByteLevel(use_regex = false)]`, the `added_tokens` as specials. It is read into ranks
//!   (rank = id) and checked to be a tiktoken vocabulary: every merge `l r` joins two tokens
//!   into a third, the merges are in rank order of what they produce, and every split of a
//!   token into two tokens is a merge, so Hugging Face's merge loop and tiktoken's agree.
//!   The added tokens must have the ids right after the vocabulary (the published file:
//!   199998..201088 after 199 998 ranks), since Hugging Face tokenizers numbers them so.

use std::path::PathBuf;

use super::*;

/// File name of the Hugging Face tokenizer inside a checkpoint directory.
pub const TOKENIZER_JSON_FILE: &str = "tokenizer.json";
/// File name [`write_harmony_tokenizer_files`](crate::tools::fixture::harmony_vocab::write_harmony_tokenizer_files)
/// gives the ranks file (the name OpenAI publishes the o200k ranks under); any one
/// `*.tiktoken` file in a directory is read.
pub const HARMONY_RANKS_FILE: &str = "o200k_base.tiktoken";
/// o200k_base's pre-tokenizer regex (tiktoken-rs `O200K_BASE_PAT_STR`, the same string as
/// `pat_str` in Python tiktoken's `openai_public.py`).
pub const O200K_PAT_STR: &str = tiktoken_rs::O200K_BASE_PAT_STR;
/// Ids of `o200k_harmony`'s special tokens: 199998..201088 (1090 ids, directly after the
/// 199 998 ranks; 201088 = gpt-oss `vocab_size`).
pub const HARMONY_SPECIAL_IDS: std::ops::Range<u32> = 199_998..201_088;
/// The named harmony special tokens at their published ids, from `o200k_harmony()` in
/// Python tiktoken's `tiktoken_ext/openai_public.py` (0.14.0); the other ids of
/// [`HARMONY_SPECIAL_IDS`] are `<|reserved_{id}|>`. 200018 is o200k_base's `<|endofprompt|>`.
pub const HARMONY_NAMED_SPECIALS: &[(u32, &str)] = &[
    (199_998, "<|startoftext|>"),
    (199_999, "<|endoftext|>"),
    (200_002, "<|return|>"),
    (200_003, "<|constrain|>"),
    (200_005, "<|channel|>"),
    (200_006, "<|start|>"),
    (200_007, "<|end|>"),
    (200_008, "<|message|>"),
    (200_012, "<|call|>"),
    (200_018, "<|endofprompt|>"),
];

/// Special tokens as `(content, id)` (a content may share its id with another) plus the one
/// name each id decodes to.
#[derive(Debug, Clone, Default)]
pub struct HarmonySpecials {
    /// Every content string a text may contain, with its id.
    pub by_name: BTreeMap<String, u32>,
    /// The content each id decodes to.
    pub by_id: BTreeMap<u32, String>,
}

/// The `o200k_harmony` special tokens, shifted by `offset` (`0` = the published ids
/// 199998..201088). The named ones decode to their names (200018 to `<|endofprompt|>`;
/// `<|reserved_200018|>` is accepted in text). Reserved names keep their published numbers
/// whatever the offset.
pub fn harmony_specials(offset: i64) -> HarmonySpecials {
    let mut sp = HarmonySpecials::default();
    let at = |id: u32| (id as i64 + offset) as u32;
    for id in HARMONY_SPECIAL_IDS {
        let name = format!("<|reserved_{id}|>");
        sp.by_name.insert(name.clone(), at(id));
        sp.by_id.insert(at(id), name);
    }
    for &(id, name) in HARMONY_NAMED_SPECIALS {
        if id != 200_018 {
            sp.by_name.remove(&format!("<|reserved_{id}|>"));
        }
        sp.by_name.insert(name.to_string(), at(id));
        sp.by_id.insert(at(id), name.to_string());
    }
    sp
}

/// The GPT-2 byte-level table (`bytes_to_unicode`): the char each byte is written as in a
/// byte-level `tokenizer.json` (printable Latin-1 as itself, the other 68 bytes as U+0100…).
pub fn byte_level_chars() -> [char; 256] {
    let mut table = ['\0'; 256];
    let mut next = 256u32;
    for b in 0..=255u8 {
        let printable = matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
        table[b as usize] = if printable {
            b as char
        } else {
            next += 1;
            char::from_u32(next - 1).expect("below U+0200")
        };
    }
    table
}

/// [`Tokenizer::from_dir`] for a directory without `tiktoken.model`.
pub(super) fn from_dir(dir: &Path) -> Result<Tokenizer> {
    let cfg_path = dir.join(TOKENIZER_CONFIG_FILE);
    let cfg = if cfg_path.exists() {
        let text = std::fs::read_to_string(&cfg_path)
            .with_context(|| format!("reading {}", cfg_path.display()))?;
        Some(
            serde_json::from_str::<Value>(&text)
                .with_context(|| format!("parsing {}", cfg_path.display()))?,
        )
    } else {
        None
    };
    let json = dir.join(TOKENIZER_JSON_FILE);
    if json.exists() {
        return Tokenizer::from_tokenizer_json(&json, cfg.as_ref());
    }
    let mut ranks: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("reading directory {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "tiktoken") && p.is_file())
        .collect();
    ranks.sort();
    match ranks.as_slice() {
        [one] => Tokenizer::from_ranks_file(one, cfg.as_ref()),
        [] => bail!(
            "{}: no tokenizer files (Kimi: {TIKTOKEN_FILE} + {TOKENIZER_CONFIG_FILE}; gpt-oss: \
             {TOKENIZER_JSON_FILE}, or a *.tiktoken ranks file such as {HARMONY_RANKS_FILE})",
            dir.display()
        ),
        many => bail!(
            "{}: {} *.tiktoken ranks files ({}); keep one",
            dir.display(),
            many.len(),
            many.iter()
                .map(|p| p.file_name().unwrap_or_default().to_string_lossy())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// Specials named in `tokenizer_config.json` → `added_tokens_decoder` (`None` when it has
/// none). Errors: not an object, an entry without content, an id that is not a number.
fn config_specials(cfg: Option<&Value>, cfg_name: &str) -> Result<Option<HarmonySpecials>> {
    let Some(added) = cfg.and_then(|c| c.get("added_tokens_decoder")) else {
        return Ok(None);
    };
    let added = added
        .as_object()
        .ok_or_else(|| anyhow!("{cfg_name}: added_tokens_decoder is not an object"))?;
    let mut sp = HarmonySpecials::default();
    for (k, v) in added {
        let id: u32 = k
            .parse()
            .with_context(|| format!("{cfg_name}: bad added token id {k:?}"))?;
        let content = v
            .get("content")
            .and_then(Value::as_str)
            .ok_or_else(|| anyhow!("{cfg_name}: added token {id} has no content"))?;
        add_special(&mut sp, content, id, cfg_name)?;
    }
    Ok(Some(sp))
}

fn add_special(sp: &mut HarmonySpecials, content: &str, id: u32, file: &str) -> Result<()> {
    if let Some(prev) = sp.by_name.insert(content.to_string(), id) {
        if prev != id {
            bail!("{file}: special token {content:?} has ids {prev} and {id}");
        }
    }
    if let Some(prev) = sp.by_id.insert(id, content.to_string()) {
        bail!("{file}: id {id} is both {prev:?} and {content:?}");
    }
    Ok(())
}

/// The tokenizer from `tokens` (index = rank) and `sp`, with bos / eos / pad / unk and the
/// chat template from `cfg` (defaults `<|startoftext|>` and `<|return|>`, as in the published
/// `tokenizer_config.json`).
fn build(
    tokens: Vec<Vec<u8>>,
    sp: HarmonySpecials,
    cfg: Option<&Value>,
    pat: &str,
    file: &str,
) -> Result<Tokenizer> {
    let n_base = tokens.len() as u32;
    if let Some((&id, name)) = sp.by_id.range(..n_base).next() {
        bail!("{file}: special token {name:?} has id {id}, inside the {n_base} BPE ranks");
    }
    if let Some((&id, name)) = sp.by_id.range(1 << 24..).next() {
        bail!("{file}: special token {name:?} has the implausible id {id}");
    }
    let null = Value::Null;
    let cfg = cfg.unwrap_or(&null);
    let lookup = |key: &str, default: Option<&str>| -> Result<Option<u32>> {
        match token_field(cfg, key).or_else(|| default.map(str::to_string)) {
            None => Ok(None),
            Some(n) => sp.by_name.get(&n).copied().map(Some).ok_or_else(|| {
                anyhow!("{file}: {key} {n:?} is not one of the tokenizer's special tokens")
            }),
        }
    };
    let specials = Specials {
        bos_id: lookup("bos_token", Some("<|startoftext|>"))?.expect("default"),
        eos_id: lookup("eos_token", Some("<|return|>"))?.expect("default"),
        pad_id: lookup("pad_token", None)?,
        unk_id: lookup("unk_token", None)?,
        by_name: sp.by_name,
        by_id: sp.by_id,
    };
    let chat_template = cfg
        .get("chat_template")
        .and_then(Value::as_str)
        .map(str::to_string);
    Tokenizer::assemble(tokens, specials, chat_template, pat, Flavor::Harmony)
        .with_context(|| format!("{file}: pattern {pat:?}"))
}

impl Tokenizer {
    /// Loads a tiktoken ranks file (e.g. `o200k_base.tiktoken`) as a gpt-oss tokenizer:
    /// [`O200K_PAT_STR`], specials from `cfg`'s `added_tokens_decoder` (a parsed
    /// `tokenizer_config.json`) or else [`harmony_specials`]`(0)`; bos / eos from `cfg`
    /// (defaults `<|startoftext|>` / `<|return|>`).
    ///
    /// Errors (file named): unreadable file, malformed line, bad base64, duplicate or missing
    /// rank, a missing single byte, a special id inside the ranks, bos / eos not special.
    pub fn from_ranks_file(path: &Path, cfg: Option<&Value>) -> Result<Self> {
        let name = path.display().to_string();
        let text = std::fs::read_to_string(path).with_context(|| format!("reading {name}"))?;
        let tokens = parse_tiktoken_model(&text, &name)?;
        check_single_bytes(&tokens, &name)?;
        let sp = match config_specials(cfg, TOKENIZER_CONFIG_FILE)? {
            Some(sp) => sp,
            None => harmony_specials(0),
        };
        build(tokens, sp, cfg, O200K_PAT_STR, &name)
    }

    /// Loads a byte-level BPE `tokenizer.json` of the shape described in the module docs
    /// (the published gpt-oss file, or one transformers' `TikTokenConverter` writes): ranks =
    /// the model's vocabulary ids, the `Split` regex as the pattern, `added_tokens` as the
    /// specials; bos / eos from `cfg` (a parsed `tokenizer_config.json`; defaults
    /// `<|startoftext|>` / `<|return|>`).
    ///
    /// Errors (file named): unreadable or malformed JSON; another model, normalizer,
    /// pre-tokenizer or post-processor; a vocabulary entry outside the byte-level alphabet,
    /// ids not dense from 0, a missing single byte; merges that are not tiktoken's (a merge
    /// whose parts or result are not tokens, out of rank order, or a missing split); added
    /// tokens whose ids do not follow the vocabulary without gaps (Hugging Face would
    /// renumber them).
    pub fn from_tokenizer_json(path: &Path, cfg: Option<&Value>) -> Result<Self> {
        let name = path.display().to_string();
        let text = std::fs::read_to_string(path).with_context(|| format!("reading {name}"))?;
        let doc: Value = serde_json::from_str(&text).with_context(|| format!("parsing {name}"))?;
        let pat = split_pattern(&doc).with_context(|| format!("{name}: pre_tokenizer"))?;
        check_shape(&doc).with_context(|| format!("{name}: not a tiktoken-style tokenizer"))?;
        let model = &doc["model"];
        let tokens = byte_level_vocab(model).with_context(|| format!("{name}: model.vocab"))?;
        check_single_bytes(&tokens, &name)?;
        check_merges(&tokens, model).with_context(|| format!("{name}: model.merges"))?;
        let mut sp = HarmonySpecials::default();
        for t in doc["added_tokens"].as_array().into_iter().flatten() {
            let id = t["id"].as_u64().and_then(|i| u32::try_from(i).ok());
            let (Some(id), Some(content)) = (id, t["content"].as_str()) else {
                bail!("{name}: an added_tokens entry lacks a u32 id or content: {t}");
            };
            add_special(&mut sp, content, id, &name)?;
        }
        // Hugging Face tokenizers gives added tokens the ids after the vocabulary in order,
        // whatever ids the file states: a file whose ids differ means other ids there.
        let n_base = tokens.len() as u32;
        for (k, (&id, content)) in sp.by_id.iter().enumerate() {
            let want = n_base + k as u32;
            if id != want {
                bail!(
                    "{name}: added token {content:?} has id {id}, but Hugging Face tokenizers \
                     numbers added tokens on from the vocabulary's end: it would be {want}"
                );
            }
        }
        build(tokens, sp, cfg, &pat, &name)
    }
}

fn check_single_bytes(tokens: &[Vec<u8>], file: &str) -> Result<()> {
    let mut have = [false; 256];
    for t in tokens.iter().filter(|t| t.len() == 1) {
        have[t[0] as usize] = true;
    }
    if let Some(b) = (0..256).find(|&b| !have[b]) {
        bail!("{file}: the vocabulary lacks the single byte 0x{b:02x}; it cannot encode arbitrary text");
    }
    Ok(())
}

/// The regex of `pre_tokenizer` = `Sequence[Split(Regex, Isolated), ByteLevel(use_regex =
/// false)]`.
fn split_pattern(doc: &Value) -> Result<String> {
    let pre = &doc["pre_tokenizer"];
    let parts = match pre["type"].as_str() {
        Some("Sequence") => pre["pretokenizers"].as_array().cloned().unwrap_or_default(),
        other => bail!("expected a Sequence of Split and ByteLevel, got {other:?}"),
    };
    let [split, byte_level] = parts.as_slice() else {
        bail!("expected Split then ByteLevel, got {} parts", parts.len());
    };
    if split["type"] != "Split" || split["behavior"] != "Isolated" || split["invert"] == true {
        bail!("expected Split(behavior = Isolated, invert = false), got {split}");
    }
    if byte_level["type"] != "ByteLevel" || byte_level["use_regex"] != false {
        bail!("expected ByteLevel(use_regex = false) after Split, got {byte_level}");
    }
    if byte_level["add_prefix_space"] == true {
        bail!("ByteLevel(add_prefix_space = true) is not supported");
    }
    split["pattern"]["Regex"]
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| anyhow!("Split has no Regex pattern: {split}"))
}

/// No normalizer, a BPE model without byte fallback, and a post-processor that adds no
/// tokens.
fn check_shape(doc: &Value) -> Result<()> {
    if !doc["normalizer"].is_null() {
        bail!("normalizer {} is not supported", doc["normalizer"]);
    }
    let model = &doc["model"];
    if model["type"] != "BPE" {
        bail!("model type {} (expected BPE)", model["type"]);
    }
    if model["byte_fallback"] == true || !model["dropout"].is_null() {
        bail!("BPE byte_fallback / dropout are not supported");
    }
    let post = &doc["post_processor"];
    if !(post.is_null() || post["type"] == "ByteLevel") {
        bail!(
            "post_processor {} is not supported (it may add tokens)",
            post["type"]
        );
    }
    Ok(())
}

/// The vocabulary as token bytes indexed by id (dense from 0).
fn byte_level_vocab(model: &Value) -> Result<Vec<Vec<u8>>> {
    let vocab = model["vocab"]
        .as_object()
        .ok_or_else(|| anyhow!("not an object"))?;
    let mut byte_of: HashMap<char, u8> = HashMap::new();
    for (b, c) in byte_level_chars().iter().enumerate() {
        byte_of.insert(*c, b as u8);
    }
    let mut by_id: Vec<Option<Vec<u8>>> = vec![None; vocab.len()];
    for (s, id) in vocab {
        let id = id
            .as_u64()
            .ok_or_else(|| anyhow!("{s:?} has id {id}, not a number"))? as usize;
        let bytes = s
            .chars()
            .map(|c| byte_of.get(&c).copied())
            .collect::<Option<Vec<u8>>>()
            .ok_or_else(|| anyhow!("{s:?} has a char outside the byte-level alphabet"))?;
        match by_id.get_mut(id) {
            Some(slot @ None) => *slot = Some(bytes),
            Some(Some(_)) => bail!("id {id} used twice"),
            None => bail!("id {id} of {s:?} is past the {} entries", vocab.len()),
        }
    }
    Ok(by_id.into_iter().map(|t| t.expect("dense")).collect())
}

/// Checks that BPE with these merges is tiktoken's merge-by-rank on the same ranks.
fn check_merges(tokens: &[Vec<u8>], model: &Value) -> Result<()> {
    let chars = byte_level_chars();
    let text_of = |b: &[u8]| -> String { b.iter().map(|&x| chars[x as usize]).collect() };
    let rank: HashMap<String, u32> = tokens
        .iter()
        .enumerate()
        .map(|(r, t)| (text_of(t), r as u32))
        .collect();
    let merges = model["merges"]
        .as_array()
        .ok_or_else(|| anyhow!("not a list"))?;
    let mut seen: std::collections::HashSet<(u32, u32)> = Default::default();
    let mut last = 0u32;
    for (i, m) in merges.iter().enumerate() {
        let (l, r) = match m {
            Value::String(s) => s.split_once(' ').unwrap_or((s, "")),
            Value::Array(a) if a.len() == 2 => {
                (a[0].as_str().unwrap_or(""), a[1].as_str().unwrap_or(""))
            }
            _ => bail!("merge {i} is {m}, not \"l r\" or [l, r]"),
        };
        let get = |s: &str| rank.get(s).copied();
        let (Some(rl), Some(rr), Some(rm)) = (get(l), get(r), get(&format!("{l}{r}"))) else {
            bail!("merge {i} ({l:?} {r:?}) does not join two tokens into a token");
        };
        if rm < last {
            bail!("merge {i} ({l:?} {r:?}) makes rank {rm} after rank {last}: not in rank order");
        }
        last = rm;
        seen.insert((rl, rr));
    }
    for (id, t) in tokens.iter().enumerate() {
        for cut in 1..t.len() {
            let (l, r) = (text_of(&t[..cut]), text_of(&t[cut..]));
            if let (Some(&rl), Some(&rr)) = (rank.get(&l), rank.get(&r)) {
                if !seen.contains(&(rl, rr)) {
                    bail!("token {id} splits into tokens {rl} + {rr} but that merge is missing");
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_level_table_is_gpt2s() {
        let t = byte_level_chars();
        // By hand from GPT-2's bytes_to_unicode: space is the 33rd non-printable byte (U+0120),
        // newline the 11th (U+010A), 0xAD the last (U+0143).
        assert_eq!(
            (t[b' ' as usize], t[b'\n' as usize]),
            ('\u{120}', '\u{10a}')
        );
        assert_eq!((t[0xAD], t[b'a' as usize], t[0xFF]), ('\u{143}', 'a', 'ÿ'));
    }

    #[test]
    fn published_specials() {
        let sp = harmony_specials(0);
        assert_eq!(sp.by_id.len(), 1090);
        assert_eq!(sp.by_name["<|start|>"], 200_006);
        assert_eq!(sp.by_name["<|endofprompt|>"], 200_018);
        assert_eq!(sp.by_name["<|reserved_200018|>"], 200_018);
        assert_eq!(sp.by_id[&200_018], "<|endofprompt|>");
        assert!(!sp.by_name.contains_key("<|reserved_200006|>"));
        assert_eq!(sp.by_id[&201_087], "<|reserved_201087|>");
        assert_eq!(harmony_specials(-199_000).by_name["<|call|>"], 1012);
    }
}
