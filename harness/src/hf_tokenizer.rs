//! Hugging Face `tokenizer.json` tokenizers (the `tokenizers` crate, pure Rust: its
//! fancy-regex backend), for models memdial's own tokenizer does not read.

use std::path::{Path, PathBuf};

use anyhow::{anyhow, Result};

/// The file name Hugging Face checkpoints keep their tokenizer in.
pub const FILE: &str = "tokenizer.json";

/// `path` itself when it is a file, else `path/tokenizer.json` when that exists.
pub fn find(path: &Path) -> Option<PathBuf> {
    if path.is_file() {
        return Some(path.to_path_buf());
    }
    let p = path.join(FILE);
    p.is_file().then_some(p)
}

/// A loaded `tokenizer.json`.
pub struct HfTokenizer {
    inner: tokenizers::Tokenizer,
    /// The file it was read from.
    pub path: PathBuf,
}

impl HfTokenizer {
    /// Reads `path`: a `tokenizer.json` file, or a directory holding one.
    ///
    /// Errors: no such file, or a file the `tokenizers` crate cannot read (the message
    /// names the file).
    pub fn open(path: &Path) -> Result<Self> {
        let file = find(path).ok_or_else(|| {
            anyhow!(
                "{}: not a tokenizer.json file nor a directory holding one",
                path.display()
            )
        })?;
        let inner = tokenizers::Tokenizer::from_file(&file)
            .map_err(|e| anyhow!("{}: not a tokenizer.json: {e}", file.display()))?;
        Ok(HfTokenizer { inner, path: file })
    }

    /// The ids of `text`, as Hugging Face's `tokenizer(text)` gives them: with
    /// `add_special`, the post-processor's tokens (a BOS, say) are added; added
    /// special tokens written in the text (`<|im_end|>`) are always their ids.
    ///
    /// Errors: the tokenizer fails on the text (the message names the file).
    pub fn encode(&self, text: &str, add_special: bool) -> Result<Vec<u32>> {
        let enc = self
            .inner
            .encode(text, add_special)
            .map_err(|e| anyhow!("{}: cannot encode: {e}", self.path.display()))?;
        Ok(enc.get_ids().to_vec())
    }

    /// The text of `ids`; with `skip_special`, special tokens are left out.
    ///
    /// Errors: the tokenizer fails on the ids (the message names the file).
    pub fn decode(&self, ids: &[u32], skip_special: bool) -> Result<String> {
        self.inner
            .decode(ids, skip_special)
            .map_err(|e| anyhow!("{}: cannot decode: {e}", self.path.display()))
    }
}
