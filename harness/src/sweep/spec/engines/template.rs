//! Placeholder expansion of engine command templates: `{name}` is replaced by its
//! value; an argument that is exactly `{io_args}` expands to zero or more arguments;
//! `{{` and `}}` are a literal `{` and `}` (as in Python's `str.format` and Rust's
//! `format!`). [`check`] validates a template before any run.

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
    (
        "prompt_text",
        "the prompt's text, for text-only engines (`output = \"text\"`; empty for an ids prompt)",
    ),
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

    /// `t` with every `{name}` replaced and `{{` / `}}` unescaped. Errors: a template
    /// [`parse`] refuses, an unknown or unset placeholder (named in the message), or
    /// `{io_args}` inside a longer argument.
    pub fn expand(&self, t: &str) -> Result<String> {
        let mut out = String::new();
        for piece in parse(t).map_err(|e| anyhow::anyhow!("{e} in {t:?}"))? {
            match piece {
                Piece::Lit(s) => out.push_str(s),
                Piece::Brace(c) => out.push(c),
                Piece::Ph("io_args") => bail!("{{io_args}} must be a whole argument (in {t:?})"),
                Piece::Ph(name) => match self.scalars.get(name) {
                    Some(v) => out.push_str(v),
                    None if is_known(name) => {
                        bail!("placeholder {{{name}}} has no value for this engine (in {t:?})")
                    }
                    None => bail!(
                        "unknown placeholder {{{name}}} in {t:?} (known: {})",
                        known()
                    ),
                },
            }
        }
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

/// Placeholders that have a value only in a run (not in a setup step or a version
/// command, which run once per model).
pub const RUN_ONLY: &[&str] = &[
    "prompt_ids",
    "prompt_ids_space",
    "prompt_text",
    "prompt_tokens",
    "max_tokens",
    "threads",
    "budget_bytes",
    "budget_mib",
    "budget_gib",
    "budget_gb",
    "io",
    "io_args",
    "prefetch",
    "start",
    "run_dir",
    "k3c_trunk_gb",
    "k3c_cache_gb",
];

/// One piece of a template.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Piece<'a> {
    /// Literal text.
    Lit(&'a str),
    /// A literal brace written `{{` or `}}`.
    Brace(char),
    /// A placeholder `{name}`.
    Ph(&'a str),
}

/// The pieces of template `t`. Errors (the byte offset named): a `{` without its
/// `}`, a `}` that closes nothing (write `}}` for a literal one), an empty `{}`, a
/// placeholder name holding a brace.
pub fn parse(t: &str) -> std::result::Result<Vec<Piece<'_>>, String> {
    let mut v = vec![];
    let mut lit = 0;
    let b = t.as_bytes();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            c @ (b'{' | b'}') if b.get(i + 1) == Some(&c) => {
                if lit < i {
                    v.push(Piece::Lit(&t[lit..i]));
                }
                v.push(Piece::Brace(c as char));
                i += 2;
                lit = i;
            }
            b'{' => {
                let Some(j) = t[i + 1..].find(['{', '}']).map(|j| i + 1 + j) else {
                    return Err(format!(
                        "unclosed placeholder at byte {i} (write {{{{ for a literal {{)"
                    ));
                };
                if b[j] == b'{' {
                    return Err(format!(
                        "unclosed placeholder at byte {i} (write {{{{ for a literal {{)"
                    ));
                }
                if j == i + 1 {
                    return Err(format!(
                        "empty placeholder {{}} at byte {i} (write {{{{}}}} for literal braces)"
                    ));
                }
                if lit < i {
                    v.push(Piece::Lit(&t[lit..i]));
                }
                v.push(Piece::Ph(&t[i + 1..j]));
                i = j + 1;
                lit = i;
            }
            b'}' => {
                return Err(format!(
                    "a }} at byte {i} closes no placeholder (write }}}} for a literal }})"
                ))
            }
            _ => i += 1,
        }
    }
    if lit < b.len() {
        v.push(Piece::Lit(&t[lit..]));
    }
    Ok(v)
}

fn is_known(name: &str) -> bool {
    PLACEHOLDERS.iter().any(|(p, _)| *p == name)
}

fn known() -> String {
    PLACEHOLDERS
        .iter()
        .map(|(p, _)| format!("{{{p}}}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Where a template is expanded: which placeholders have a value there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// A run's command, environment, `ids_json` or `model`: every placeholder.
    Run,
    /// A setup step or version command (once per model): no per-run placeholder.
    Model,
}

/// Checks template `t` (an argument when `whole_arg` is set, where `{io_args}` alone
/// is allowed) before any run. Errors name the placeholder: unknown, per-run in a
/// once-per-model template, `{io_args}` inside a longer text, or a syntax error of
/// [`parse`].
pub fn check(t: &str, scope: Scope, whole_arg: bool) -> std::result::Result<(), String> {
    if let Some(at) = t.find('\0') {
        return Err(format!(
            "holds a NUL character (at byte {at}), which no argument, path or environment value can hold"
        ));
    }
    for p in parse(t)? {
        let Piece::Ph(name) = p else { continue };
        if !is_known(name) {
            return Err(format!(
                "unknown placeholder {{{name}}} (known: {}; write {{{{ and }}}} for literal braces)",
                known()
            ));
        }
        if name == "io_args" && !(whole_arg && t == "{io_args}") {
            return Err("{io_args} must be a whole argument of the command".into());
        }
        if scope == Scope::Model && RUN_ONLY.contains(&name) {
            return Err(format!(
                "placeholder {{{name}}} has a value only in a run, not here (this runs once per model)"
            ));
        }
    }
    Ok(())
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

    #[test]
    fn braces_escape_and_bad_templates_are_named() {
        let mut v = Vars::default();
        v.set("run_dir", "/r");
        assert_eq!(
            v.expand(r#"printf '{{"ids": [1]}}' > {run_dir}/o.json"#)
                .unwrap(),
            r#"printf '{"ids": [1]}' > /r/o.json"#
        );
        assert_eq!(v.expand("{{run_dir}}").unwrap(), "{run_dir}");
        assert_eq!(v.expand("{{{run_dir}}}").unwrap(), "{/r}");
        for (t, want) in [
            ("{model", "unclosed placeholder at byte 0"),
            ("a{b{c}", "unclosed placeholder at byte 1"),
            ("x}", "a } at byte 1 closes no placeholder"),
            ("{}", "empty placeholder"),
            ("{bogus}", "unknown placeholder {bogus}"),
            ("a{io_args}", "{io_args} must be a whole argument"),
            ("a\0b", "holds a NUL character (at byte 1)"),
        ] {
            let e = check(t, Scope::Run, true).unwrap_err();
            assert!(e.contains(want), "{t}: {e}");
        }
        assert!(check("{io_args}", Scope::Run, true).is_ok());
        assert!(check("{io_args}", Scope::Run, false).is_err());
        assert!(check("{threads}", Scope::Model, true)
            .unwrap_err()
            .contains("{threads} has a value only in a run"));
        assert!(check("{{threads}} {model}", Scope::Model, true).is_ok());
    }
}
