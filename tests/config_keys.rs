//! One test per row of `docs/config-keys.md`: the table says what every config key means
//! when absent, null, wrong-typed or changed; this test reads the table and checks that
//! the loader does exactly that on the tiny fixtures' configs (`linear` = tiny-linear,
//! `k3` = tiny-k3's text_config, `hf` = tiny-linear in transformers' saved form).
//! The defaults in the table come from the reference sources it cites (line numbers).

use memdial::format::config::ModelConfig;
use serde_json::{json, Value};

#[derive(Debug)]
struct Row {
    key: String,
    aliases: Vec<String>,
    kind: String,
    null: String,
    default_linear: String,
    default_k3: String,
    forms: Vec<String>,
    change: String,
    effect: String,
}

fn rows() -> Vec<Row> {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/config-keys.md"))
        .unwrap();
    let mut out = vec![];
    for line in doc.lines().filter(|l| l.starts_with("| `")) {
        let cells: Vec<&str> = line.trim_matches('|').split(" | ").map(str::trim).collect();
        assert!(cells.len() >= 9, "malformed row {line}");
        let ticks = |s: &str| -> Vec<String> {
            s.split('`')
                .skip(1)
                .step_by(2)
                .map(str::to_string)
                .collect()
        };
        let names = ticks(cells[0]);
        let (change, effect) = cells[6].split_once(" → ").expect("change → effect");
        out.push(Row {
            key: names[0].clone(),
            aliases: names[1..].to_vec(),
            kind: cells[1].to_string(),
            null: cells[2].to_string(),
            default_linear: cells[3].to_string(),
            default_k3: cells[4].to_string(),
            forms: cells[5].split_whitespace().map(str::to_string).collect(),
            change: ticks(change)[0].clone(),
            effect: effect.to_string(),
        });
    }
    assert!(out.len() >= 45, "only {} rows parsed", out.len());
    out
}

fn base(form: &str) -> Value {
    let preset = |n| memdial::tools::fixture::preset(n).unwrap().config;
    match form {
        "linear" => preset("tiny-linear"),
        "k3" => preset("tiny-k3"),
        "hf" => {
            let mut v = preset("tiny-linear");
            let o = v.as_object_mut().unwrap();
            let lac = o.remove("linear_attn_config").unwrap();
            let n = o["num_hidden_layers"].as_u64().unwrap();
            let full: Vec<u64> = serde_json::from_value(lac["full_attn_layers"].clone()).unwrap();
            let lt: Vec<&str> = (1..=n)
                .map(|i| {
                    if full.contains(&i) {
                        "full_attention"
                    } else {
                        "linear_attention"
                    }
                })
                .collect();
            o.insert("layer_types".into(), json!(lt));
            o.insert("linear_head_dim".into(), lac["head_dim"].clone());
            o.insert("linear_num_heads".into(), lac["num_heads"].clone());
            o.insert(
                "linear_conv_kernel_dim".into(),
                lac["short_conv_kernel_size"].clone(),
            );
            v
        }
        other => panic!("form {other}"),
    }
}

/// `cfg` with text-config key `key` (dotted for `linear_attn_config.*`) set to `v`
/// (`None` removes it).
fn with(cfg: &Value, key: &str, v: Option<Value>) -> Value {
    let mut cfg = cfg.clone();
    let text = if cfg.get("text_config").is_some() {
        &mut cfg["text_config"]
    } else {
        &mut cfg
    };
    let (obj, leaf) = match key.split_once('.') {
        Some((parent, leaf)) => (text[parent].as_object_mut().unwrap(), leaf),
        None => (text.as_object_mut().unwrap(), key),
    };
    match v {
        Some(v) => {
            obj.insert(leaf.to_string(), v);
        }
        None => {
            obj.remove(leaf);
        }
    }
    cfg
}

/// Parse outcome: the config's Debug text, or the error chain.
fn parse(cfg: &Value) -> Result<String, String> {
    ModelConfig::from_json_str(&cfg.to_string())
        .map(|c| format!("{c:?}"))
        .map_err(|e| format!("{e:#}"))
}

fn names_key(r: &Result<String, String>, key: &str) -> bool {
    let leaf = key.rsplit('.').next().unwrap();
    matches!(r, Err(e) if e.contains(leaf))
}

fn wrong_typed(kind: &str) -> Value {
    match kind {
        "bool" => json!(1),
        "string" => json!(1),
        _ => json!("x"),
    }
}

#[test]
fn every_documented_key_behaves_as_the_table_says() {
    let mut checked = 0;
    for row in rows() {
        let key = row.key.as_str();
        for form in &row.forms {
            let b = base(form);
            let ctx = format!("{key} on {form}");
            let absent = parse(&with(&b, key, None));
            let default = if form == "k3" {
                &row.default_k3
            } else {
                &row.default_linear
            };
            match default.as_str() {
                "required" | "refused" => {
                    assert!(names_key(&absent, key), "{ctx}: absent gave {absent:?}")
                }
                "none" => assert!(
                    absent.is_ok() || names_key(&absent, key),
                    "{ctx}: absent gave {absent:?}"
                ),
                lit => {
                    let v: Value = serde_json::from_str(lit.trim_matches('`')).unwrap();
                    let explicit = parse(&with(&b, key, Some(v)));
                    assert_eq!(absent, explicit, "{ctx}: absent ≠ the documented default");
                }
            }
            let null = parse(&with(&b, key, Some(Value::Null)));
            let nullable = row.null == "yes"
                || (row.null == "k3" && form == "k3")
                || (row.null == "linear" && form != "k3");
            if nullable {
                assert_eq!(null, absent, "{ctx}: null must mean absent");
            } else {
                assert!(names_key(&null, key), "{ctx}: null gave {null:?}");
            }
            let bad = parse(&with(&b, key, Some(wrong_typed(&row.kind))));
            assert!(names_key(&bad, key), "{ctx}: wrong type gave {bad:?}");
            checked += 1;
        }
        // The documented change, on the first listed form.
        let b = base(&row.forms[0]);
        let v: Value = serde_json::from_str(&row.change).unwrap();
        let changed = parse(&with(&b, key, Some(v.clone())));
        match row.effect.as_str() {
            "changes" => {
                assert!(changed.is_ok(), "{key}: change refused: {changed:?}");
                assert_ne!(changed, parse(&b), "{key}: change had no effect");
            }
            "refused" => assert!(names_key(&changed, key), "{key}: {changed:?}"),
            other => panic!("{key}: unknown effect {other:?}"),
        }
        // Aliases mean the same; two spellings at once are refused.
        for alias in &row.aliases {
            let via_alias = parse(&with(&with(&b, key, None), alias, Some(v.clone())));
            assert_eq!(via_alias, changed, "{key}: alias {alias}");
            let both = parse(&with(&b, alias, Some(v.clone())));
            assert!(names_key(&both, key), "{key} + {alias}: {both:?}");
        }
    }
    assert!(checked >= 90, "{checked} (key, form) cases");
}

/// Every key the loader's table knows is documented, and vice versa.
#[test]
fn the_table_lists_every_key_read() {
    let doc: Vec<String> = rows().into_iter().map(|r| r.key).collect();
    let code: Vec<String> = memdial::format::config_keys::KEYS
        .iter()
        .map(|k| k.name.to_string())
        .collect();
    assert_eq!(doc, code);
}

/// Errors name the file as well as the key.
#[test]
fn refusals_name_key_and_file() {
    let d = memdial_testkit::scratch!("config-keys-refusals");
    let cfg = with(&base("linear"), "topk_group", Some(json!("2")));
    std::fs::write(d.join("config.json"), cfg.to_string()).unwrap();
    let e = format!(
        "{:#}",
        memdial::format::config::load_config(d.path()).unwrap_err()
    );
    assert!(e.contains("config.json") && e.contains("topk_group"), "{e}");
}

/// `generation_config.json`'s `eos_token_id` replaces `config.json`'s (transformers'
/// and mlx-lm's `generate`); a file that sets no ids leaves `config.json`'s; a bad
/// file is refused, naming it. Expected ids are the ones written in the files.
#[test]
fn generation_config_eos_ids_take_priority() {
    use memdial::format::config::{load_config, EosSource};
    let cfg = base("linear");
    let cfg_eos = cfg["eos_token_id"].as_u64().unwrap() as u32;
    let vocab = cfg["vocab_size"].as_u64().unwrap();
    let ok: Vec<(Option<&str>, Vec<u32>, EosSource)> = vec![
        (None, vec![cfg_eos], EosSource::ConfigJson),
        (
            Some(r#"{"eos_token_id": 5}"#),
            vec![5],
            EosSource::GenerationConfig,
        ),
        (
            Some(r#"{"eos_token_id": 0}"#),
            vec![0],
            EosSource::GenerationConfig,
        ),
        (
            Some(r#"{"bos_token_id": 1, "eos_token_id": [7, 3, 9], "do_sample": false}"#),
            vec![7, 3, 9],
            EosSource::GenerationConfig,
        ),
        (
            Some(r#"{"eos_token_id": null}"#),
            vec![cfg_eos],
            EosSource::ConfigJson,
        ),
        (
            Some(r#"{"eos_token_id": []}"#),
            vec![cfg_eos],
            EosSource::ConfigJson,
        ),
        (
            Some(r#"{"temperature": 0.6}"#),
            vec![cfg_eos],
            EosSource::ConfigJson,
        ),
    ];
    for (gen, want, src) in ok {
        let d = memdial_testkit::scratch!("gen-config-eos");
        std::fs::write(d.join("config.json"), cfg.to_string()).unwrap();
        if let Some(g) = gen {
            std::fs::write(d.join("generation_config.json"), g).unwrap();
        }
        let c = load_config(d.path()).unwrap_or_else(|e| panic!("{gen:?}: {e:#}"));
        assert_eq!(c.eos_token_ids, want, "{gen:?}");
        assert_eq!(c.eos_token_ids_source, src, "{gen:?}");
    }
    // config.json without eos_token_id (whose default, 163586, is beyond this vocab):
    // the generation config's ids alone decide.
    let d = memdial_testkit::scratch!("gen-config-eos-only");
    let no_eos = with(&cfg, "eos_token_id", None);
    assert!(ModelConfig::from_json_str(&no_eos.to_string()).is_err());
    std::fs::write(d.join("config.json"), no_eos.to_string()).unwrap();
    std::fs::write(
        d.join("generation_config.json"),
        r#"{"eos_token_id": [4, 6]}"#,
    )
    .unwrap();
    let c = load_config(d.path()).unwrap();
    assert_eq!(c.eos_token_ids, [4, 6]);
    assert_eq!(c.eos_token_ids_source, EosSource::GenerationConfig);
    let bad: Vec<(String, &str)> = vec![
        (
            format!(r#"{{"eos_token_id": [1, {vocab}]}}"#),
            "is out of range",
        ),
        (r#"{"eos_token_id": "2"}"#.into(), "unexpected value"),
        (r#"{"eos_token_id": [-1]}"#.into(), "non-negative integers"),
        (r#"{"eos_token_id": 4294967296}"#.into(), "below 2^32"),
        ("{not json".into(), "not valid JSON"),
        ("[1, 2]".into(), "not a JSON object"),
    ];
    for (gen, want) in bad {
        let d = memdial_testkit::scratch!("gen-config-eos-bad");
        std::fs::write(d.join("config.json"), cfg.to_string()).unwrap();
        std::fs::write(d.join("generation_config.json"), &gen).unwrap();
        let e = format!("{:#}", load_config(d.path()).unwrap_err());
        assert!(
            e.contains("generation_config.json") && e.contains(want),
            "{gen}: {e}"
        );
    }
    // A directory in its place cannot be read: said, not ignored.
    let d = memdial_testkit::scratch!("gen-config-eos-dir");
    std::fs::write(d.join("config.json"), cfg.to_string()).unwrap();
    std::fs::create_dir(d.join("generation_config.json")).unwrap();
    let e = format!("{:#}", load_config(d.path()).unwrap_err());
    assert!(
        e.contains("cannot read") && e.contains("generation_config.json"),
        "{e}"
    );
}
