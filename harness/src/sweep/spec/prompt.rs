//! A spec's prompts: literal text, a file holding the text, or token ids, and the
//! check that a prompt file is a regular file a sweep can read more than once.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Result};
use serde::{Deserialize, Serialize};

/// A prompt: literal text, a file holding the text, or token ids.
///
/// Read errors (usage): a table with both `ids` and `file`, with neither, or with
/// another key.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged, try_from = "RawPrompt")]
pub enum PromptSpec {
    /// Literal prompt text (`"Hello"`).
    Text(String),
    /// Prompt text read from a file (`{ file = "prompts/a.txt" }`), relative to the spec file.
    File {
        /// Path of the prompt file.
        file: PathBuf,
    },
    /// Prompt as token ids (`{ ids = [1, 2, 3] }`).
    Ids {
        /// Token ids.
        ids: Vec<u32>,
    },
}

/// A prompt as written: a string or a table, checked by `TryFrom` so an error names
/// the keys (serde's untagged enums would say only "did not match any variant").
#[derive(Deserialize)]
#[serde(untagged)]
enum RawPrompt {
    Text(String),
    Table(BTreeMap<String, serde_json::Value>),
}

impl TryFrom<RawPrompt> for PromptSpec {
    type Error = String;
    fn try_from(r: RawPrompt) -> std::result::Result<Self, String> {
        const FORMS: &str =
            "a prompt is \"text\", { file = \"prompt.txt\" } or { ids = [1, 2, 3] }";
        let mut t = match r {
            RawPrompt::Text(s) => return Ok(PromptSpec::Text(s)),
            RawPrompt::Table(t) => t,
        };
        if let Some(k) = t.keys().find(|k| *k != "ids" && *k != "file") {
            return Err(format!("prompt: unknown key `{k}` ({FORMS})"));
        }
        match (t.remove("ids"), t.remove("file")) {
            (Some(_), Some(_)) => Err(format!(
                "prompt: both `ids` and `file` are given; give one of them ({FORMS})"
            )),
            (Some(ids), None) => serde_json::from_value(ids)
                .map(|ids| PromptSpec::Ids { ids })
                .map_err(|e| format!("prompt ids: {e} (token ids are integers in 0..=4294967295)")),
            (None, Some(f)) => match f {
                serde_json::Value::String(f) => Ok(PromptSpec::File { file: f.into() }),
                other => Err(format!("prompt file: {other} is not a path string")),
            },
            (None, None) => Err(format!("prompt: an empty table ({FORMS})")),
        }
    }
}

/// Why `file` cannot be a sweep's prompt file (`None`: it can). A sweep reads it
/// several times (its identity, the engines' tokens, every run), so it must be a
/// regular file: a FIFO would block or give each reader different text.
fn prompt_file_problem(file: &Path) -> Option<String> {
    use std::os::unix::fs::FileTypeExt;
    let shown = file.display();
    let t = match std::fs::metadata(file) {
        Ok(m) => m.file_type(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Some(format!("prompt file {shown} does not exist"))
        }
        Err(e) => return Some(format!("prompt file {shown}: {e}")),
    };
    let kind = if t.is_file() {
        return None;
    } else if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO (named pipe)"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_char_device() || t.is_block_device() {
        "a device"
    } else {
        "not a regular file"
    };
    Some(format!(
        "prompt file {shown} is {kind}, not a text file (a sweep reads its prompt files more than once, so they must be regular files)"
    ))
}

/// Refuses a prompt file that is not a regular file and a text prompt holding a NUL
/// (a command-line argument cannot carry it).
///
/// Errors: the first such prompt, by index and why.
pub(super) fn check_prompts(prompts: &[PromptSpec]) -> Result<()> {
    for (i, p) in prompts.iter().enumerate() {
        match p {
            PromptSpec::File { file } => {
                if let Some(why) = prompt_file_problem(file) {
                    bail!("{why}");
                }
            }
            PromptSpec::Text(t) => {
                if let Some(at) = t.find('\0') {
                    bail!(
                        "prompt {i} holds a NUL character (at byte {at}), which a command-line argument cannot hold: \
                         remove it, or give the prompt as {{ file = \"…\" }} or {{ ids = [...] }}"
                    );
                }
            }
            PromptSpec::Ids { .. } => {}
        }
    }
    Ok(())
}
