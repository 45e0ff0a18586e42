//! Placeholder expansion of engine command templates: `{name}` is replaced by its
//! value; an argument that is exactly `{io_args}` expands to zero or more arguments.

use std::collections::BTreeMap;

use anyhow::{bail, Result};

/// The placeholders every template may use, with their meaning (shown by
/// `memdial engines check` and the README).
pub const PLACEHOLDERS: &[(&str, &str)] = &[
    (
        "model",
        "model path given to the engine (the sweep's model directory, or the engine's `model`)",
    ),
    ("model_dir", "the sweep's model directory"),
    (
        "prompt_ids",
        "prompt token ids, comma-separated (text prompts are tokenized by memdial)",
    ),
    ("prompt_ids_space", "prompt token ids, space-separated"),
    ("prompt_tokens", "number of prompt ids"),
    ("max_tokens", "tokens to generate"),
    (
        "eos_ids",
        "the stop ids (generation_config.json's eos_token_id, else config.json's), comma-separated \
         (empty with --ignore-eos in extra_args)",
    ),
    ("eos_id", "the first eos id (-1 when none)"),
    ("threads", "compute threads of the point"),
    ("num_layers", "config.json's num_hidden_layers"),
    ("model_type", "config.json's model_type"),
    ("budget_bytes", "the point's budget, bytes"),
    ("budget_mib", "the budget in MiB (2 decimals)"),
    ("budget_gib", "the budget in GiB (3 decimals)"),
    ("budget_gb", "the budget in GB = 1e9 bytes (3 decimals)"),
    ("io", "the point's IO mode"),
    (
        "io_args",
        "the arguments of the point's IO mode (`io` table of the engine; a whole argument only)",
    ),
    ("prefetch", "the point's prefetch policy"),
    (
        "start",
        "the point's start, `cold` or `warm` (warm runs need `warm = true`)",
    ),
    (
        "run_dir",
        "this run's directory (stdout.txt, stderr.txt live there)",
    ),
    (
        "setup_dir",
        "the engine's cached setup directory for this model",
    ),
    ("bin", "the engine's binary"),
    (
        "memdial",
        "this memdial binary (setup steps such as `{memdial} convert --to gguf`)",
    ),
    ("bin_dir", "directory of the engine's binary"),
    (
        "python",
        "python of the oracle venv (or the engine's `python`, or $MEMDIAL_MLX_PYTHON)",
    ),
    (
        "scripts",
        "directory holding memdial's engine scripts (mlx_generate.py)",
    ),
    (
        "k3c_trunk_gb",
        "kimi-k3-in-c: trunk share of the budget (memdial's pinned + slot bytes), GB",
    ),
    (
        "k3c_cache_gb",
        "kimi-k3-in-c: expert cache = budget − 144 MB − trunk share, GB",
    ),
];

/// Values of the placeholders for one run.
#[derive(Debug, Clone, Default)]
pub struct Vars {
    /// Scalar placeholders.
    pub scalars: BTreeMap<String, String>,
    /// `{io_args}`.
    pub io_args: Vec<String>,
}

impl Vars {
    /// Sets `{k}` to `v`.
    pub fn set(&mut self, k: &str, v: impl ToString) -> &mut Self {
        self.scalars.insert(k.to_string(), v.to_string());
        self
    }

    /// `t` with every `{name}` replaced. Errors: an unknown or unset placeholder
    /// (named in the message), or `{io_args}` inside a longer argument.
    pub fn expand(&self, t: &str) -> Result<String> {
        let mut out = String::new();
        let mut rest = t;
        while let Some(i) = rest.find('{') {
            out.push_str(&rest[..i]);
            let after = &rest[i + 1..];
            let Some(j) = after.find('}') else {
                bail!("unclosed placeholder in {t:?}");
            };
            let name = &after[..j];
            if name == "io_args" {
                bail!("{{io_args}} must be a whole argument (in {t:?})");
            }
            match self.scalars.get(name) {
                Some(v) => out.push_str(v),
                None if PLACEHOLDERS.iter().any(|(p, _)| *p == name) => {
                    bail!("placeholder {{{name}}} has no value for this engine (in {t:?})")
                }
                None => bail!(
                    "unknown placeholder {{{name}}} in {t:?} (known: {})",
                    PLACEHOLDERS
                        .iter()
                        .map(|(p, _)| format!("{{{p}}}"))
                        .collect::<Vec<_>>()
                        .join(" ")
                ),
            }
            rest = &after[j + 1..];
        }
        out.push_str(rest);
        Ok(out)
    }

    /// A command template expanded into arguments (`{io_args}` spliced in).
    pub fn expand_args(&self, t: &[String]) -> Result<Vec<String>> {
        let mut v = vec![];
        for a in t {
            if a == "{io_args}" {
                v.extend(self.io_args.iter().cloned());
            } else {
                v.push(self.expand(a)?);
            }
        }
        Ok(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expands_scalars_and_io_args() {
        let mut v = Vars::default();
        v.set("model", "/m").set("max_tokens", 8);
        v.io_args = vec!["--no-mmap".into()];
        let t: Vec<String> = ["x", "{model}/a", "{io_args}", "-n{max_tokens}"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(
            v.expand_args(&t).unwrap(),
            vec!["x", "/m/a", "--no-mmap", "-n8"]
        );
        assert!(v
            .expand("{bogus}")
            .unwrap_err()
            .to_string()
            .contains("unknown"));
        assert!(v
            .expand("{threads}")
            .unwrap_err()
            .to_string()
            .contains("no value"));
        assert!(v.expand("a{io_args}").is_err());
        assert!(v.expand("{model").is_err());
    }
}
