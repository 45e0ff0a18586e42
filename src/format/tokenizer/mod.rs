//! tiktoken tokenizers on `tiktoken_rs::CoreBPE`: Kimi's (below) and gpt-oss's `o200k_harmony`
//! (`tokenizer.json` or a ranks file, see the `harmony` submodule and [`Tokenizer::from_dir`]),
//! the vocabulary parser and the BPE-prefix validity check.
//!
//! # Conventions (Moonshot `tokenization_kimi.py`, Kimi K2 / Kimi-Linear / K3)
//!
//! * `tiktoken.model`: one line per base token, `base64(token_bytes) SP rank\n`, ranks dense
//!   `0..n_base` (the format read by Python `tiktoken.load.load_tiktoken_bpe`). Byte-level BPE:
//!   the merge priority of a pair is the rank of the concatenated bytes.
//! * Special tokens occupy ids `n_base .. n_base + 256`. Names come from
//!   `tokenizer_config.json` → `added_tokens_decoder`; every unnamed slot `i` (absolute id) is
//!   `<|reserved_token_{i}|>`, exactly as `tokenization_kimi.py` builds its `special_tokens`.
//! * Pre-tokenizer regex: [`KIMI_PAT_STR`] (uses `&&` class intersection; `fancy-regex`, which
//!   both tiktoken-rs and Python tiktoken's Rust core use, implements it).
//! * Like Kimi's `TikTokenTokenizer.encode`, text is first cut into ≤ 400 000-char windows and
//!   runs of > 25 000 consecutive whitespace / non-whitespace chars are split (see
//!   [`kimi_pre_split`]); each chunk is then encoded by tiktoken independently.
//!
//! Synthetic vocabularies are the first `n_base` ranks of OpenAI's `o200k_base` (embedded in
//! `tiktoken-rs`); [`check_bpe_prefix`] proves such a prefix is a valid BPE vocabulary.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use anyhow::{anyhow, bail, Context, Result};
use base64::Engine as _;
use serde_json::Value;
use tiktoken_rs::CoreBPE;

mod harmony;
mod vocab;
pub use harmony::{
    byte_level_chars, harmony_specials, HarmonySpecials, HARMONY_NAMED_SPECIALS,
    HARMONY_RANKS_FILE, HARMONY_SPECIAL_IDS, O200K_PAT_STR, TOKENIZER_JSON_FILE,
};
pub use vocab::{
    check_bpe_prefix, check_bpe_vocab, o200k_token_bytes, parse_tiktoken_model,
    special_token_names, BpeDefect,
};

/// File name of the BPE ranks inside a checkpoint / tokenizer directory.
pub const TIKTOKEN_FILE: &str = "tiktoken.model";
/// File name of the HF-style tokenizer config inside a checkpoint / tokenizer directory.
pub const TOKENIZER_CONFIG_FILE: &str = "tokenizer_config.json";
/// Number of reserved special-token slots after the base vocabulary (`num_reserved_special_tokens`
/// in `tokenization_kimi.py`).
pub const NUM_SPECIAL_TOKENS: u32 = 256;
/// Number of ordinary (non-special) ranks in `o200k_base` as embedded in tiktoken-rs 0.12
/// (ranks `0..199998`; 199999 `<|endoftext|>` and 200018 `<|endofprompt|>` are specials).
pub const O200K_BASE_LEN: u32 = 199_998;
/// Real Kimi K2 / Kimi-Linear / K3 base vocabulary size (163 584 ranks).
pub const KIMI_N_BASE: u32 = 163_584;
/// Kimi's `TIKTOKEN_MAX_ENCODE_CHARS`: text is encoded in windows of at most this many chars.
pub const KIMI_MAX_ENCODE_CHARS: usize = 400_000;
/// Kimi's `MAX_NO_WHITESPACES_CHARS`: longest run of consecutive (non-)whitespace chars passed
/// to tiktoken in one call.
pub const KIMI_MAX_CONSECUTIVE_CHARS: usize = 25_000;

/// Kimi's pre-tokenizer regex (`TikTokenTokenizer.pat_str` in Moonshot's
/// `tokenization_kimi.py`), the eight alternatives joined by `|`. `&&` is character-class
/// intersection (`[\p{Lu}…&&[^\p{Han}]]` = upper-ish letters that are not Han).
pub const KIMI_PAT_STR: &str = concat!(
    r"[\p{Han}]+",
    "|",
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    "|",
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    "|",
    r"\p{N}{1,3}",
    "|",
    r" ?[^\s\p{L}\p{N}]+[\r\n]*",
    "|",
    r"\s*[\r\n]+",
    "|",
    r"\s+(?!\S)",
    "|",
    r"\s+",
);

/// Named Kimi special tokens as `(offset from n_base, content, HF "special" flag)`.
///
/// Offsets 0–17, 254, 255 are the 17 `added_tokens_decoder` entries of the published Kimi K2 /
/// Kimi-Linear `tokenizer_config.json` (cross-checked in several independent copies; the
/// tool-call markers are `"special": false` there). Offsets 18–21 (media markers) appear in
/// Kimi K2.5 / K3 configs (K3's `<|media_pad|>` = 163605 is the image placeholder); they are
/// not in the K2 / Kimi-Linear file. Note: the K3 release renames offsets 2–5
/// (`<|end_of_msg|>`, `<|open|>`, `<|close|>`, `<|sep|>`); a real K3 directory loads its own
/// names through [`Tokenizer::from_dir`].
pub const KIMI_NAMED_SPECIALS: &[(u32, &str, bool)] = &[
    (0, "[BOS]", true),
    (1, "[EOS]", true),
    (2, "<|im_end|>", true),
    (3, "<|im_user|>", true),
    (4, "<|im_assistant|>", true),
    (6, "<|start_header_id|>", true),
    (7, "<|end_header_id|>", true),
    (9, "[EOT]", true),
    (10, "<|im_system|>", true),
    (11, "<|tool_calls_section_begin|>", false),
    (12, "<|tool_calls_section_end|>", false),
    (13, "<|tool_call_begin|>", false),
    (14, "<|tool_call_argument_begin|>", false),
    (15, "<|tool_call_end|>", false),
    (17, "<|im_middle|>", true),
    (18, "<|media_begin|>", true),
    (19, "<|media_content|>", true),
    (20, "<|media_end|>", true),
    (21, "<|media_pad|>", true),
    (254, "[UNK]", true),
    (255, "[PAD]", true),
];

/// Kimi chat template (Jinja2) written into `tokenizer_config.json`.
///
/// Same turn structure as the Kimi K2 / Kimi-Linear template:
/// `<|im_system|>|<|im_user|>|<|im_assistant|>` + `name or role` + `<|im_middle|>` + content +
/// `<|im_end|>`, generation prompt `<|im_assistant|>assistant<|im_middle|>`. Simplified: no
/// tool declarations / tool-call rendering, string contents only, and no default system prompt
/// (K2-Instruct injects "You are Kimi, …" when the first message is not a system message;
/// Kimi-Linear's transformers test vector starts directly with `<|im_user|>`).
pub const KIMI_CHAT_TEMPLATE: &str = "{%- for message in messages -%}\
{%- if message['role'] == 'user' -%}<|im_user|>\
{%- elif message['role'] == 'assistant' -%}<|im_assistant|>\
{%- else -%}<|im_system|>{%- endif -%}\
{{- message.get('name') or message['role'] -}}<|im_middle|>{{- message['content'] -}}<|im_end|>\
{%- endfor -%}\
{%- if add_generation_prompt -%}<|im_assistant|>assistant<|im_middle|>{%- endif -%}";

/// `model_max_length` written into `tokenizer_config.json` (tokens; 1 Mi, the value we use for
/// the Kimi family — not used by the engine).
pub const KIMI_MODEL_MAX_LENGTH: u64 = 1_048_576;

// ---------------------------------------------------------------------------------------------
// Tokenizer
// ---------------------------------------------------------------------------------------------

/// Which tokenizer family a [`Tokenizer`] follows (pattern, pre-split, defaults).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavor {
    /// Kimi's `TikTokenTokenizer`: [`KIMI_PAT_STR`], the [`kimi_pre_split`] windows, specials
    /// in the 256 slots after the ranks.
    Kimi,
    /// gpt-oss / OpenAI `o200k_harmony`: the pattern the files give ([`O200K_PAT_STR`] for a
    /// ranks file), one tiktoken call per text, specials at the ids the files give.
    Harmony,
}

/// A BPE tokenizer loaded from a checkpoint directory, encoding with `tiktoken_rs::CoreBPE`:
/// Kimi's (`tiktoken.model` + `tokenizer_config.json`, [`KIMI_PAT_STR`]) or gpt-oss's
/// (`tokenizer.json`, or a `*.tiktoken` ranks file with the harmony specials; see
/// [`Tokenizer::from_dir`]).
///
/// Ids are `u32`: `0..n_base` ordinary BPE ranks, special tokens above (Kimi: `n_base..n_vocab`;
/// gpt-oss: where the files put them, e.g. 199998..201088, with unused ids between).
pub struct Tokenizer {
    bpe: CoreBPE,
    flavor: Flavor,
    n_base: u32,
    n_vocab: u32,
    special_by_name: BTreeMap<String, u32>,
    special_by_id: BTreeMap<u32, String>,
    bos_id: u32,
    eos_id: u32,
    pad_id: Option<u32>,
    unk_id: Option<u32>,
    chat_template: Option<String>,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("n_base", &self.n_base)
            .field("n_vocab", &self.n_vocab)
            .field("bos_id", &self.bos_id)
            .field("eos_id", &self.eos_id)
            .finish_non_exhaustive()
    }
}

/// `bos_token` etc. may be a plain string or an AddedToken dict `{"content": …}`.
fn token_field(cfg: &Value, key: &str) -> Option<String> {
    match cfg.get(key)? {
        Value::String(s) => Some(s.clone()),
        Value::Object(o) => o.get("content")?.as_str().map(str::to_string),
        _ => None,
    }
}

impl Tokenizer {
    /// Loads `dir/tiktoken.model` and `dir/tokenizer_config.json` (the files of a real Kimi
    /// checkpoint, or those written by [`write_tokenizer_files`](crate::tools::fixture::vocab::write_tokenizer_files)).
    ///
    /// `n_base` = number of lines (ranks must be dense). Specials: ids `n_base..n_base+256`
    /// named from `added_tokens_decoder`, else `<|reserved_token_{id}|>`; named ids beyond
    /// `n_base+255` extend the range. bos/eos come from `bos_token` / `eos_token` (defaults
    /// `[BOS]` / `[EOS]` as in `tokenization_kimi.py`).
    ///
    /// Errors (file named): missing/unreadable file, malformed line, bad base64, duplicate or
    /// missing rank, duplicate token bytes, missing single byte, special id below `n_base`,
    /// duplicate special content, bos/eos not a special token, regex compile failure.
    ///
    /// Without `tiktoken.model`, the directory is read as gpt-oss's: `tokenizer.json`
    /// ([`Tokenizer::from_tokenizer_json`]), else the one `*.tiktoken` ranks file
    /// ([`Tokenizer::from_ranks_file`]), each with `tokenizer_config.json` when present.
    /// Errors also when none of these files is there (the message lists them).
    pub fn from_dir(dir: &Path) -> Result<Self> {
        if !dir.join(TIKTOKEN_FILE).exists() {
            return harmony::from_dir(dir);
        }
        let model_path = dir.join(TIKTOKEN_FILE);
        let cfg_path = dir.join(TOKENIZER_CONFIG_FILE);
        let text = std::fs::read_to_string(&model_path)
            .with_context(|| format!("reading {}", model_path.display()))?;
        let tokens = parse_tiktoken_model(&text, &model_path.display().to_string())?;
        let cfg_text = std::fs::read_to_string(&cfg_path)
            .with_context(|| format!("reading {}", cfg_path.display()))?;
        let cfg: Value = serde_json::from_str(&cfg_text)
            .with_context(|| format!("parsing {}", cfg_path.display()))?;
        Self::from_parts(tokens, &cfg, &cfg_path.display().to_string())
    }

    /// Builds a tokenizer from token bytes (index = rank) and a parsed `tokenizer_config.json`
    /// value; `cfg_name` is used in error messages. See [`Tokenizer::from_dir`].
    pub fn from_parts(tokens: Vec<Vec<u8>>, cfg: &Value, cfg_name: &str) -> Result<Self> {
        let n_base = u32::try_from(tokens.len()).context("vocabulary too large")?;
        let mut have_byte = [false; 256];
        for t in &tokens {
            if t.len() == 1 {
                have_byte[t[0] as usize] = true;
            }
        }
        if let Some(b) = (0..256).find(|&b| !have_byte[b]) {
            bail!("vocabulary lacks the single byte 0x{b:02x}; it cannot encode arbitrary text");
        }

        let mut named: BTreeMap<u32, String> = BTreeMap::new();
        if let Some(added) = cfg.get("added_tokens_decoder") {
            let added = added
                .as_object()
                .ok_or_else(|| anyhow!("{cfg_name}: added_tokens_decoder is not an object"))?;
            for (k, v) in added {
                let id: u32 = k
                    .parse()
                    .with_context(|| format!("{cfg_name}: bad added token id {k:?}"))?;
                let content = v
                    .get("content")
                    .and_then(Value::as_str)
                    .ok_or_else(|| anyhow!("{cfg_name}: added token {id} has no content"))?;
                if id < n_base {
                    bail!("{cfg_name}: added token {id} ({content:?}) overlaps the {n_base} BPE ranks");
                }
                if id >= n_base + 65_536 {
                    bail!("{cfg_name}: added token id {id} is far beyond the vocabulary");
                }
                named.insert(id, content.to_string());
            }
        }
        let end = named
            .keys()
            .next_back()
            .map_or(n_base + NUM_SPECIAL_TOKENS, |&m| {
                (m + 1).max(n_base + NUM_SPECIAL_TOKENS)
            });
        let mut special_by_name = BTreeMap::new();
        let mut special_by_id = BTreeMap::new();
        for id in n_base..end {
            let name = named
                .get(&id)
                .cloned()
                .unwrap_or_else(|| format!("<|reserved_token_{id}|>"));
            if let Some(prev) = special_by_name.insert(name.clone(), id) {
                bail!("{cfg_name}: special token {name:?} used by ids {prev} and {id}");
            }
            special_by_id.insert(id, name);
        }

        let lookup = |key: &str, default: Option<&str>| -> Result<Option<u32>> {
            let name = token_field(cfg, key).or_else(|| default.map(str::to_string));
            match name {
                None => Ok(None),
                Some(n) => special_by_name
                    .get(&n)
                    .copied()
                    .map(Some)
                    .ok_or_else(|| anyhow!("{cfg_name}: {key} {n:?} is not a special token")),
            }
        };
        let bos_id = lookup("bos_token", Some("[BOS]"))?.expect("default");
        let eos_id = lookup("eos_token", Some("[EOS]"))?.expect("default");
        let pad_id = lookup("pad_token", None)?;
        let unk_id = lookup("unk_token", None)?;
        let chat_template = cfg
            .get("chat_template")
            .and_then(Value::as_str)
            .map(str::to_string);
        Self::assemble(
            tokens,
            Specials {
                by_name: special_by_name,
                by_id: special_by_id,
                bos_id,
                eos_id,
                pad_id,
                unk_id,
            },
            chat_template,
            KIMI_PAT_STR,
            Flavor::Kimi,
        )
    }

    /// The tokenizer of `tokens` (index = rank, checked unique) and `specials`, splitting
    /// text with `pat`. Errors: the pattern does not compile.
    fn assemble(
        tokens: Vec<Vec<u8>>,
        sp: Specials,
        chat_template: Option<String>,
        pat: &str,
        flavor: Flavor,
    ) -> Result<Self> {
        let n_base = tokens.len() as u32;
        let n_vocab = sp
            .by_id
            .keys()
            .next_back()
            .map_or(n_base, |&m| (m + 1).max(n_base));
        // Map types are inferred from CoreBPE::new (FxHashMap); ranks/bytes were checked unique,
        // so CoreBPE's equal-length assertion cannot fire.
        let encoder = tokens
            .into_iter()
            .enumerate()
            .map(|(r, t)| (t, r as u32))
            .collect();
        let specials = sp
            .by_name
            .iter()
            .map(|(name, &id)| (name.clone(), id))
            .collect();
        let bpe = CoreBPE::new(encoder, specials, pat).context("building tiktoken CoreBPE")?;
        Ok(Self {
            bpe,
            flavor,
            n_base,
            n_vocab,
            special_by_name: sp.by_name,
            special_by_id: sp.by_id,
            bos_id: sp.bos_id,
            eos_id: sp.eos_id,
            pad_id: sp.pad_id,
            unk_id: sp.unk_id,
            chat_template,
        })
    }

    /// Encodes `text` to token ids, following Kimi's `TikTokenTokenizer.encode`: the text is
    /// pre-split by [`kimi_pre_split`] and each chunk tiktoken-encoded. With
    /// `allow_special = true` special-token strings in the text become their ids (Python
    /// `allowed_special="all"`); with `false` they are encoded as ordinary text
    /// (`disallowed_special=()`).
    ///
    /// gpt-oss ([`Flavor::Harmony`]): the whole text in one call, as Python
    /// `tiktoken.Encoding.encode` does.
    pub fn encode(&self, text: &str, allow_special: bool) -> Vec<u32> {
        if self.flavor == Flavor::Harmony {
            return if allow_special {
                self.bpe.encode_with_special_tokens(text)
            } else {
                self.bpe.encode_ordinary(text)
            };
        }
        let mut out = Vec::with_capacity(text.len() / 3 + 1);
        for chunk in kimi_pre_split(text) {
            if allow_special {
                out.extend(self.bpe.encode_with_special_tokens(chunk));
            } else {
                out.extend(self.bpe.encode_ordinary(chunk));
            }
        }
        out
    }

    /// Concatenated bytes of `ids` (specials decode to their content string).
    /// Errors on an id that is neither a BPE rank nor a special token.
    ///
    /// A special id with two names (tiktoken's `o200k_harmony` gives 200018 both
    /// `<|endofprompt|>` and `<|reserved_200018|>`) decodes to [`Tokenizer::special_name`].
    pub fn decode_bytes(&self, ids: &[u32]) -> Result<Vec<u8>> {
        if let Some(&bad) = ids.iter().find(|&&id| !self.is_token(id)) {
            bail!(
                "unknown token id {bad} (vocabulary has {} ranks and {} special ids below {})",
                self.n_base,
                self.special_by_id.len(),
                self.n_vocab
            );
        }
        let mut out = Vec::with_capacity(ids.len() * 4);
        for run in ids.chunk_by(|a, b| (*a < self.n_base) == (*b < self.n_base)) {
            if run[0] < self.n_base {
                let bytes = self
                    .bpe
                    .decode_bytes(run)
                    .map_err(|e| anyhow!("unknown token id {}", e.token))?;
                out.extend_from_slice(&bytes);
            } else {
                for id in run {
                    out.extend_from_slice(self.special_by_id[id].as_bytes());
                }
            }
        }
        Ok(out)
    }

    /// Whether `id` is a BPE rank or a special token's id (gpt-oss files can leave ids
    /// between the ranks and the specials unused).
    pub fn is_token(&self, id: u32) -> bool {
        id < self.n_base || self.special_by_id.contains_key(&id)
    }

    /// Decodes `ids` to text. Invalid UTF-8 (e.g. a multi-byte char split across a cut-off
    /// sequence) is replaced by U+FFFD, like Python tiktoken's default `errors="replace"`;
    /// use [`Tokenizer::decode_bytes`] for the exact bytes. Errors on an unknown id.
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        let bytes = self.decode_bytes(ids)?;
        Ok(match String::from_utf8(bytes) {
            Ok(s) => s,
            Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
        })
    }

    /// Decodes ids of a model whose `vocab_size` may exceed the tokenizer's ids (a padded
    /// vocabulary, e.g. rounded up to a multiple of 64): ids in `n_vocab..vocab_size` are
    /// embedding rows without a token and decode to "" (they are skipped); every other id
    /// keeps its text, and so do unused ids between the ranks and the specials. Errors on an
    /// id ≥ `max(n_vocab, vocab_size)`.
    pub fn decode_padded(&self, ids: &[u32], vocab_size: usize) -> Result<String> {
        let limit = (self.n_vocab as u64).max(vocab_size as u64);
        if let Some(&bad) = ids.iter().find(|&&id| id as u64 >= limit) {
            bail!(
                "unknown token id {bad} (vocab_size {vocab_size}, tokenizer has {} ids)",
                self.n_vocab
            );
        }
        let kept: Vec<u32> = ids
            .iter()
            .copied()
            .filter(|&id| self.is_token(id))
            .collect();
        self.decode(&kept)
    }

    /// Token ids of a single-turn Kimi chat prompt ending in the generation prompt:
    /// `[<|im_system|>system<|im_middle|>{system}<|im_end|>]<|im_user|>user<|im_middle|>{user}<|im_end|><|im_assistant|>assistant<|im_middle|>`.
    ///
    /// Markers are emitted as special ids; role names and message contents are encoded as
    /// ordinary text, so special-token strings inside `user`/`system` are *not* interpreted
    /// (unlike rendering the Jinja template and encoding with `allowed_special="all"`, which
    /// gives the same ids whenever the contents contain no special-token strings).
    ///
    /// Panics only if the vocabulary lacks the `<|im_*|>` specials (they are present in every
    /// Kimi config and in [`write_tokenizer_files`](crate::tools::fixture::vocab::write_tokenizer_files) output); see [`Tokenizer::try_chat_prompt`].
    pub fn chat_prompt(&self, user: &str, system: Option<&str>) -> Vec<u32> {
        self.try_chat_prompt(user, system)
            .expect("Kimi chat special tokens present")
    }

    /// Fallible [`Tokenizer::chat_prompt`]: errors if a `<|im_*|>` special is missing.
    pub fn try_chat_prompt(&self, user: &str, system: Option<&str>) -> Result<Vec<u32>> {
        let id = |name: &str| {
            self.special_id(name)
                .ok_or_else(|| anyhow!("special token {name} missing from vocabulary"))
        };
        let (im_system, im_user, im_assistant) = (
            id("<|im_system|>")?,
            id("<|im_user|>")?,
            id("<|im_assistant|>")?,
        );
        let (im_middle, im_end) = (id("<|im_middle|>")?, id("<|im_end|>")?);
        let mut out = Vec::new();
        let turn = |marker: u32, role: &str, content: &str, out: &mut Vec<u32>| {
            out.push(marker);
            out.extend(self.encode(role, false));
            out.push(im_middle);
            out.extend(self.encode(content, false));
            out.push(im_end);
        };
        if let Some(s) = system {
            turn(im_system, "system", s, &mut out);
        }
        turn(im_user, "user", user, &mut out);
        out.push(im_assistant);
        out.extend(self.encode("assistant", false));
        out.push(im_middle);
        Ok(out)
    }

    /// Id of `[BOS]` (or the config's `bos_token`).
    pub fn bos_id(&self) -> u32 {
        self.bos_id
    }

    /// Id of the config's `eos_token` (`<|im_end|>` in files from [`write_tokenizer_files`](crate::tools::fixture::vocab::write_tokenizer_files);
    /// `[EOS]` in the published Kimi K2 `tokenizer_config.json`, whose `config.json`
    /// `eos_token_id` is nevertheless `<|im_end|>`). See [`Tokenizer::stop_ids`].
    pub fn eos_id(&self) -> u32 {
        self.eos_id
    }

    /// Ids that should end generation: eos plus `<|im_end|>` and `[EOS]` when present,
    /// sorted and deduplicated.
    ///
    /// gpt-oss: eos plus `<|return|>`, `<|call|>` and `<|endoftext|>` when present (the
    /// published `generation_config.json` stops on 200002, 199999 and 200012).
    pub fn stop_ids(&self) -> Vec<u32> {
        let mut v = vec![self.eos_id];
        let names: &[&str] = match self.flavor {
            Flavor::Kimi => &["<|im_end|>", "[EOS]"],
            Flavor::Harmony => &["<|return|>", "<|call|>", "<|endoftext|>"],
        };
        v.extend(names.iter().filter_map(|n| self.special_id(n)));
        v.sort_unstable();
        v.dedup();
        v
    }

    /// Id of the `pad_token`, if the config names one.
    pub fn pad_id(&self) -> Option<u32> {
        self.pad_id
    }

    /// Id of the `unk_token`, if the config names one.
    pub fn unk_id(&self) -> Option<u32> {
        self.unk_id
    }

    /// One past the largest id (Kimi: `n_base` + special slots, normally `n_base + 256`;
    /// gpt-oss: the last special + 1, 201088 for the published files): the embedding rows a
    /// model with this tokenizer needs at least.
    pub fn n_vocab(&self) -> u32 {
        self.n_vocab
    }

    /// Number of ordinary BPE ranks (= lines of `tiktoken.model`).
    pub fn n_base(&self) -> u32 {
        self.n_base
    }

    /// Id of a special token by content, e.g. `special_id("<|im_end|>")`.
    pub fn special_id(&self, name: &str) -> Option<u32> {
        self.special_by_name.get(name).copied()
    }

    /// Content of special token `id`, if `id` is a special id.
    pub fn special_name(&self, id: u32) -> Option<&str> {
        self.special_by_id.get(&id).map(String::as_str)
    }

    /// The config's `chat_template` (Jinja2 source), if any.
    pub fn chat_template(&self) -> Option<&str> {
        self.chat_template.as_deref()
    }

    /// The tokenizer family ([`Flavor::Kimi`] or [`Flavor::Harmony`]).
    pub fn flavor(&self) -> Flavor {
        self.flavor
    }
}

/// Special tokens of a tokenizer being built: both directions of the map, and the ids the
/// config names.
struct Specials {
    by_name: BTreeMap<String, u32>,
    by_id: BTreeMap<u32, String>,
    bos_id: u32,
    eos_id: u32,
    pad_id: Option<u32>,
    unk_id: Option<u32>,
}

/// Python `str.isspace()`: Unicode White_Space plus U+001C..U+001F (bidi class B/S).
fn py_isspace(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// Kimi's pre-split (`TikTokenTokenizer.encode`): windows of [`KIMI_MAX_ENCODE_CHARS`] chars,
/// each cut so that no chunk holds more than [`KIMI_MAX_CONSECUTIVE_CHARS`] consecutive
/// whitespace (Python `isspace`) or non-whitespace chars. Chunks concatenate to `text`; the
/// empty string yields one empty chunk. Counts are Unicode scalar values (Python `str` indices).
pub fn kimi_pre_split(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    // Window boundaries (byte offsets) every KIMI_MAX_ENCODE_CHARS chars.
    let mut windows = Vec::new();
    let mut start = 0;
    for (n, (i, _)) in text.char_indices().enumerate() {
        if n > 0 && n % KIMI_MAX_ENCODE_CHARS == 0 {
            windows.push(&text[start..i]);
            start = i;
        }
    }
    windows.push(&text[start..]);
    for w in windows {
        let mut run_len = 0usize;
        let mut run_space = w.chars().next().is_some_and(py_isspace);
        let mut slice_start = 0;
        for (i, c) in w.char_indices() {
            let sp = py_isspace(c);
            if run_space ^ sp {
                run_len = 1;
                run_space = sp;
            } else {
                run_len += 1;
                if run_len > KIMI_MAX_CONSECUTIVE_CHARS {
                    out.push(&w[slice_start..i]);
                    slice_start = i;
                    run_len = 1;
                }
            }
        }
        out.push(&w[slice_start..]);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokenizer_is_send_sync() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<Tokenizer>();
    }

    #[test]
    fn special_names_layout() {
        let n = special_token_names(2048);
        assert_eq!(n.len(), 256);
        assert_eq!(n[0], "[BOS]");
        assert_eq!(n[2], "<|im_end|>");
        assert_eq!(n[17], "<|im_middle|>");
        assert_eq!(n[5], "<|reserved_token_2053|>");
        assert_eq!(n[255], "[PAD]");
    }

    #[test]
    fn pre_split_runs() {
        assert_eq!(kimi_pre_split(""), vec![""]);
        assert_eq!(kimi_pre_split("ab cd"), vec!["ab cd"]);
        let s = "a".repeat(KIMI_MAX_CONSECUTIVE_CHARS + 3);
        let parts = kimi_pre_split(&s);
        assert_eq!(parts.len(), 2);
        assert_eq!(parts[0].len(), KIMI_MAX_CONSECUTIVE_CHARS);
        assert_eq!(parts.concat(), s);
    }

    #[test]
    fn parse_errors_name_file_and_line() {
        let e = parse_tiktoken_model("IQ== 0\n!!!! 1\n", "f.model").unwrap_err();
        assert!(format!("{e:#}").contains("f.model:2"), "{e:#}");
        let e = parse_tiktoken_model("IQ== 0\nIg== 0\n", "f").unwrap_err();
        assert!(format!("{e:#}").contains("duplicate rank 0"), "{e:#}");
        let e = parse_tiktoken_model("IQ== 0\nIQ== 1\n", "f").unwrap_err();
        assert!(format!("{e:#}").contains("repeats"), "{e:#}");
        let e = parse_tiktoken_model("IQ== 0\nIg== 2\n", "f").unwrap_err();
        assert!(format!("{e:#}").contains("rank 1 missing"), "{e:#}");
        let e = parse_tiktoken_model("IQ==\n", "f").unwrap_err();
        assert!(format!("{e:#}").contains("expected"), "{e:#}");
        let e = parse_tiktoken_model("IQ== x\n", "f").unwrap_err();
        assert!(format!("{e:#}").contains("bad rank"), "{e:#}");
    }

    #[test]
    fn check_detects_unreachable_and_missing() {
        let mut toks: Vec<Vec<u8>> = (0..=255u8).map(|b| vec![b]).collect();
        toks.push(b"abc".to_vec()); // 256: "ab" / "bc" not in vocab -> unreachable
        toks.push(b"ab".to_vec()); // 257
        let err = check_bpe_vocab(&toks).unwrap_err();
        assert_eq!(err, vec![BpeDefect::Unreachable(256)]);
        let err = check_bpe_vocab(&toks[1..]).unwrap_err();
        assert!(err.contains(&BpeDefect::MissingByte(0)));
    }
}
