//! Reading what another engine wrote: its output ids (a JSON file and key, or a
//! regex over stdout lines) and, when it reports them, its timings. The result is a
//! metrics object in the schema of `memdial run --metrics-json`
//! ([`memdial::engine::metrics::MetricsFile`]), with `metric_sources` saying which figures
//! are the engine's own and which the harness derived.

use std::path::Path;

use anyhow::{bail, Context, Result};
use serde_json::{json, Map, Value};

use super::registry::Engine;
use crate::sweep::spec::engines::template::Vars;
use crate::sweep::util::{read_output, MAX_OUTPUT_BYTES};

/// The value at dotted key `key` (`a.b.0`) of `v`.
pub fn get_path<'a>(v: &'a Value, key: &str) -> Option<&'a Value> {
    key.split('.').try_fold(v, |v, k| match v {
        Value::Object(m) => m.get(k),
        Value::Array(a) => k.parse::<usize>().ok().and_then(|i| a.get(i)),
        _ => None,
    })
}

fn ids_of(v: &Value, what: &str) -> Result<Vec<u32>> {
    let a = v
        .as_array()
        .with_context(|| format!("{what} is not an array of token ids"))?;
    a.iter()
        .map(|x| {
            x.as_u64()
                .filter(|x| *x <= u32::MAX as u64)
                .map(|x| x as u32)
                .with_context(|| format!("{what}: {x} is not a token id"))
        })
        .collect()
}

/// Ids in the first capture group of every stdout line matching `re`
/// (comma- or space-separated; empty captures are skipped).
pub fn ids_from_stdout(stdout: &str, re: &regex::Regex) -> Result<Vec<u32>> {
    let mut ids = vec![];
    for line in stdout.lines() {
        if let Some(c) = re.captures(line).and_then(|c| c.get(1)) {
            for t in c
                .as_str()
                .split(|ch: char| ch == ',' || ch.is_whitespace() || ch == '[' || ch == ']')
                .filter(|t| !t.is_empty())
            {
                ids.push(
                    t.parse::<u32>()
                        .with_context(|| format!("stdout: {t:?} is not a token id"))?,
                );
            }
        }
    }
    Ok(ids)
}

fn f64_at(doc: Option<&Value>, key: Option<&String>) -> Option<f64> {
    let v = get_path(doc?, key?)?;
    v.as_f64().filter(|x| x.is_finite())
}

/// The engine's stdout (`run_dir/stdout.txt`), at most [`MAX_OUTPUT_BYTES`].
fn stdout_of(e: &Engine, run_dir: &Path) -> Result<String> {
    read_output(&run_dir.join("stdout.txt"), MAX_OUTPUT_BYTES)
        .with_context(|| format!("{}: its stdout", e.name))
}

/// How much older than the attempt's start an output file may look: file times come
/// from the kernel's coarse clock, which lags the wall clock by up to a tick.
const CLOCK_SLACK: std::time::Duration = std::time::Duration::from_millis(50);

/// The metrics object of engine `e`'s finished run in `run_dir` (`stdout.txt` there),
/// for the attempt started at `started`.
///
/// Errors: the ids file is missing, unreadable or older than `started` (an earlier
/// attempt's), the key is absent or not ids, the regex matched nothing.
pub fn read_metrics(
    e: &Engine,
    vars: &Vars,
    run_dir: &Path,
    prompt_tokens: usize,
    started: std::time::SystemTime,
) -> Result<Value> {
    let d = &e.def;
    let mut sources = Map::new();
    let doc: Option<Value> = match &d.ids_json {
        Some(t) => {
            let p = vars.expand(t)?;
            let modified = std::fs::metadata(&p)
                .and_then(|m| m.modified())
                .with_context(|| format!("{} wrote no ids file {p}", e.name))?;
            if modified + CLOCK_SLACK < started {
                bail!(
                    "{}: ids file {p} is older than this run (written before it started): not this run's output",
                    e.name
                );
            }
            let text = read_output(Path::new(&p), MAX_OUTPUT_BYTES)
                .with_context(|| format!("{}: its ids file", e.name))?;
            Some(
                serde_json::from_str(&text)
                    .with_context(|| format!("{} ids file {p} is not JSON", e.name))?,
            )
        }
        None => None,
    };
    let text_only = d.output == Some(crate::sweep::spec::engines::def::OutputKind::Text);
    let ids = if text_only {
        vec![]
    } else {
        read_ids(e, doc.as_ref(), run_dir)?
    };
    let text_hash = if text_only {
        sources.insert("output_text_sha256".into(), json!("harness"));
        Some(crate::sweep::util::sha256_hex(&output_text(
            e, vars, run_dir, started,
        )?))
    } else {
        sources.insert("output_ids".into(), json!("engine"));
        None
    };
    let steps: Vec<f64> = match &d.steps_stdout_regex {
        Some(r) => {
            let re = regex::Regex::new(r)?;
            let out = stdout_of(e, run_dir)?;
            let steps: Vec<f64> = out
                .lines()
                .filter_map(|l| re.captures(l)?.get(1)?.as_str().parse::<f64>().ok())
                .collect();
            // Not dropped (that would shift TTFT and the decode steps): refused.
            if let Some((i, x)) = steps.iter().enumerate().find(|(_, x)| !x.is_finite()) {
                bail!(
                    "{}: step {i} of its stdout is {x} s, not a finite time",
                    e.name
                );
            }
            steps
        }
        None => vec![],
    };
    let mut decode: Vec<f64> = match (doc.as_ref(), d.decode_key.as_ref()) {
        (Some(doc), Some(k)) => get_path(doc, k)
            .and_then(|v| v.as_array())
            .map(|a| a.iter().filter_map(|x| x.as_f64()).collect())
            .unwrap_or_default(),
        _ => vec![],
    };
    let mut m = Map::new();
    let median = f64_at(doc.as_ref(), d.decode_median_key.as_ref());
    if median.is_some() {
        sources.insert("decode_s_per_token_median".into(), json!("engine"));
    }
    let mut ttft = f64_at(doc.as_ref(), d.ttft_key.as_ref());
    if let Some((first, rest)) = steps.split_first() {
        ttft = ttft.or(Some(*first));
        if decode.is_empty() {
            decode = rest.to_vec();
        }
    }
    if ttft.is_some() {
        sources.insert("ttft_s".into(), json!("engine"));
    }
    if !decode.is_empty() {
        sources.insert("decode_s_per_token".into(), json!("engine"));
    }
    let load = f64_at(doc.as_ref(), d.load_key.as_ref());
    if load.is_some() {
        sources.insert("load_s".into(), json!("engine"));
    }
    m.insert("model".into(), json!(vars.scalars.get("model")));
    m.insert("prompt_tokens".into(), json!(prompt_tokens));
    output_fields(&mut m, &mut sources, ids, text_hash);
    m.insert("decode_s_per_token".into(), json!(decode));
    m.insert("decode_s_per_token_median".into(), json!(median));
    m.insert("ttft_s".into(), json!(ttft));
    m.insert("load_s".into(), json!(load));
    m.insert("metric_sources".into(), Value::Object(sources));
    if let (Some(doc), Some(k)) = (doc.as_ref(), d.version_key.as_ref()) {
        if let Some(v) = get_path(doc, k).and_then(|v| v.as_str()) {
            m.insert("engine_version".into(), json!(v));
        }
    }
    Ok(Value::Object(m))
}

/// The output fields of a run's metrics object: a text-only engine's text hash (no
/// ids, no token count: its text is not tokenized), else the ids, their count and hash.
fn output_fields(
    m: &mut Map<String, Value>,
    sources: &mut Map<String, Value>,
    ids: Vec<u32>,
    text_hash: Option<String>,
) {
    if let Some(h) = text_hash {
        m.insert("output_text_sha256".into(), json!(h));
        return;
    }
    sources.insert("output_ids_sha256".into(), json!("harness"));
    m.insert("generated_tokens".into(), json!(ids.len()));
    m.insert(
        "output_ids_sha256".into(),
        json!(memdial::engine::generate::ids_sha256(&ids)),
    );
    m.insert("output_ids".into(), json!(ids));
}

/// The ids of engine `e`'s finished run: capture group 1 of its `ids_stdout_regex`
/// over its stdout, else its ids file `doc` at `ids_key` (default `output_ids`).
///
/// Errors: the regex matched nothing, the key is absent or not ids, no ids source.
fn read_ids(e: &Engine, doc: Option<&Value>, run_dir: &Path) -> Result<Vec<u32>> {
    let d = &e.def;
    Ok(match (&d.ids_stdout_regex, doc) {
        (Some(r), _) => {
            let re = regex::Regex::new(r)?;
            let out = stdout_of(e, run_dir)?;
            let ids = ids_from_stdout(&out, &re)?;
            if ids.is_empty() {
                bail!("{}: no stdout line matched {r:?}", e.name);
            }
            ids
        }
        (None, Some(doc)) => {
            let key = d.ids_key.as_deref().unwrap_or("output_ids");
            let v = get_path(doc, key)
                .with_context(|| format!("{}: key {key:?} is not in its output", e.name))?;
            ids_of(v, key)?
        }
        (None, None) => bail!("{}: no ids source", e.name),
    })
}

/// A text-only engine's output text, as bytes: its `text_file` (written during this
/// attempt), else its whole stdout. Hashed as it is (no UTF-8 decoding).
///
/// Errors: the file is missing, older than `started`, unreadable or too large.
fn output_text(
    e: &Engine,
    vars: &Vars,
    run_dir: &Path,
    started: std::time::SystemTime,
) -> Result<Vec<u8>> {
    let Some(t) = &e.def.text_file else {
        return crate::sweep::util::read_output_bytes(
            &run_dir.join("stdout.txt"),
            MAX_OUTPUT_BYTES,
        )
        .with_context(|| format!("{}: its stdout", e.name));
    };
    let p = vars.expand(t)?;
    let modified = std::fs::metadata(&p)
        .and_then(|m| m.modified())
        .with_context(|| format!("{} wrote no text file {p}", e.name))?;
    if modified + CLOCK_SLACK < started {
        bail!(
            "{}: text file {p} is older than this run (written before it started): not this run's output",
            e.name
        );
    }
    crate::sweep::util::read_output_bytes(Path::new(&p), MAX_OUTPUT_BYTES)
        .with_context(|| format!("{}: its text file", e.name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_from_json_paths_and_stdout() {
        let v = json!({"a": {"ids": [1, 2, 3]}, "t": [0.5]});
        assert_eq!(
            ids_of(get_path(&v, "a.ids").unwrap(), "a.ids").unwrap(),
            vec![1, 2, 3]
        );
        assert_eq!(get_path(&v, "t.0").unwrap().as_f64(), Some(0.5));
        assert!(ids_of(&json!([1, -2]), "x").is_err());
        let re = regex::Regex::new(r"^@K3TOKEN (\d+)$").unwrap();
        assert_eq!(
            ids_from_stdout("log\n@K3TOKEN 5\n@K3TOKEN 7\n", &re).unwrap(),
            vec![5, 7]
        );
        let k3c = crate::sweep::spec::engines::def::builtin("kimi-k3-in-c").unwrap();
        let re = regex::Regex::new(k3c.steps_stdout_regex.as_deref().unwrap()).unwrap();
        let table = "STEP   TOKEN      SECONDS      CACHE HIT  READ GB    TOK/S\n\
                     0      4470       15.13        100.0      0.34       0.066\n\
                     1      13134      4.92         100.0      0.08       0.203\n\
                     8 tokens in 48.5 s, 6.06 s/token average\n";
        let secs: Vec<&str> = table
            .lines()
            .filter_map(|l| re.captures(l).map(|c| c.get(1).unwrap().as_str()))
            .collect();
        assert_eq!(secs, vec!["15.13", "4.92"]);
        let re = regex::Regex::new(r"^ids: (.*)$").unwrap();
        assert_eq!(
            ids_from_stdout("ids: [4, 5,6]\n", &re).unwrap(),
            vec![4, 5, 6]
        );
    }
}
