//! Real-checkpoint conformance: variants of the published layouts that other
//! tools write, each built from a tiny fixture edited by the test itself.
//!
//! Oracles: hand derivation (routing, layout arithmetic), the unedited checkpoint
//! (MTP layers must not change the ids), and the tokenizer's own decode of the
//! non-padding ids (padded vocabularies).

mod fixture_edit;

use std::path::Path;
use std::process::{Command, Output};
use std::sync::{Arc, Mutex};

use anyhow::Result;
use fixture_edit::*;
use memdial::engine::arena::Scratch;
use memdial::engine::generate::{generate as gen_ids, GenerateParams};
use memdial::engine::sampler::SamplerConfig;
use memdial::format::checkpoint::Checkpoint;
use memdial::format::config::{load_config, MoeConfig};
use memdial::format::tokenizer::Tokenizer;
use memdial::io::IoMode;
use memdial::model::moe::route;
use memdial::model::Model;
use memdial::store::plan::{plan_unchecked, Prefetch, Sequences};
use memdial::store::resident::ResidentStore;
use memdial::store::{Bytes, ExpertWeights, WeightStore};
use memdial_testkit::memdial_bin;

const PROMPT: [u32; 8] = [5, 17, 300, 2047, 9, 1200, 64, 3];

fn memdial(args: &[&str]) -> Output {
    Command::new(memdial_bin!()).args(args).output().unwrap()
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// `memdial inspect` on `dir`; its output is printed (visible with `--nocapture`) so a
/// run of this file shows what inspect says about each variant.
fn inspect(dir: &Path) -> Output {
    let o = memdial(&["inspect", "--model", dir.to_str().unwrap()]);
    println!(
        "--- memdial inspect {} (exit {:?})\n{}",
        dir.file_name().unwrap().to_string_lossy(),
        o.status.code(),
        text(&o)
    );
    o
}

/// A resident store that records every `experts_selected` call.
struct Selections {
    inner: ResidentStore,
    picks: Mutex<Vec<(usize, Vec<usize>)>>,
}

impl WeightStore for Selections {
    fn tensor(&self, layer: Option<usize>, name: &str) -> Result<Bytes> {
        self.inner.tensor(layer, name)
    }
    fn expert(&self, layer: usize, e: usize) -> Result<ExpertWeights> {
        self.inner.expert(layer, e)
    }
    fn experts_selected(&self, layer: usize, e: &[usize]) {
        self.picks.lock().unwrap().push((layer, e.to_vec()));
    }
}

/// Greedy ids (`n` tokens, EOS ignored) and every routing decision of `dir`.
fn greedy_with_picks(dir: &Path, n: usize) -> (Vec<u32>, Vec<(usize, Vec<usize>)>) {
    let cfg = load_config(dir).unwrap();
    let ck = Checkpoint::open(dir).unwrap();
    assert!(memdial::format::inspect::validate(&cfg, &ck).is_empty());
    let store = Arc::new(Selections {
        inner: ResidentStore::open(&cfg, &ck).unwrap(),
        picks: Mutex::new(vec![]),
    });
    let hints = Model::dtype_hints(&cfg, &ck);
    let model = Model::new(cfg, store.clone(), memdial::kernels::Par::new(2))
        .unwrap()
        .with_dtype_hints(hints);
    let ids = greedy(&model, n);
    let picks = store.picks.lock().unwrap().clone();
    (ids, picks)
}

fn greedy(model: &Model, n: usize) -> Vec<u32> {
    let mut st = model.new_state(PROMPT.len() + n);
    let p = GenerateParams {
        max_tokens: n,
        sampler: SamplerConfig {
            temperature: 0.0,
            top_p: 1.0,
            seed: 0,
        },
        stop_ids: vec![],
        keep_logits: false,
        prefill_chunk: 0,
        perturb_logit: None,
    };
    gen_ids(model, &mut st, &PROMPT, &p, &mut |_| {})
        .unwrap()
        .output_ids
}

fn logit(p: f32) -> f32 {
    (p / (1.0 - p)).ln()
}

fn grouped(k: usize, ng: usize, tg: usize) -> MoeConfig {
    MoeConfig {
        num_experts: 16,
        num_experts_per_token: k,
        num_shared_experts: 0,
        moe_intermediate_size: 8,
        renormalize: true,
        routed_scaling_factor: 1.0,
        num_expert_group: ng,
        topk_group: tg,
        routed_expert_hidden_size: None,
        latent_moe_use_norm: false,
        expert_format: memdial::format::config::ExpertFormat::Bf16,
    }
}

/// Hand-derived grouped routing: 16 experts in 4 groups of 4, keep 2 groups, top-4.
/// σ-scores per group: g0 [.9 .1 .1 .1] (top-2 sum 1.0), g1 [.6 .6 .2 .2] (1.2),
/// g2 [.3 .3 .3 .3] (0.6), g3 [.85 .05 .05 .05] (0.9) → kept g1, g0; top-4 of their
/// experts: e0 (.9), e4 (.6), e5 (.6), e6 (.2; ties with e7 → lower id). Expert 12 (.85)
/// would win an ungrouped top-4 but its group is dropped. Weights: s_i / 2.3.
/// A uniform bias c shifts every biased score by c: the picks must not change, for
/// c = 0, −2 (all kept scores negative: a 0.0 mask would pick dropped experts), +3.
#[test]
fn grouped_routing_excludes_dropped_groups_under_any_uniform_bias() {
    let p = [
        0.9, 0.1, 0.1, 0.1, 0.6, 0.6, 0.2, 0.2, 0.3, 0.3, 0.3, 0.3, 0.85, 0.05, 0.05, 0.05,
    ];
    let logits: Vec<f32> = p.iter().map(|&x| logit(x)).collect();
    let moe = grouped(4, 4, 2);
    for c in [0.0f32, -2.0, -0.5, 3.0] {
        let r = route(&logits, &[c; 16], &moe);
        let ids: Vec<usize> = r.iter().map(|x| x.0).collect();
        assert_eq!(ids, [0, 4, 5, 6], "bias shift {c}");
        for ((_, w), want) in r.iter().zip([0.9, 0.6, 0.6, 0.2]) {
            assert!((w - want / 2.3).abs() < 1e-5, "bias {c}: weight {w}");
        }
    }
    // Ungrouped, the same scores pick expert 12 (hand derivation: .9 .85 .6 .6).
    let r = route(&logits, &[0.0; 16], &grouped(4, 1, 1));
    assert_eq!(r.iter().map(|x| x.0).collect::<Vec<_>>(), [0, 12, 4, 5]);
}

/// The same on a whole model: tiny-linear edited to `num_expert_group: 4, topk_group: 2`
/// with every `e_score_correction_bias` set to 0 and to −2: same routing, same ids.
#[test]
fn grouped_fixture_uniform_bias_shift_keeps_routing_and_ids() {
    let d = scratch("route");
    let base = d.join("base");
    generate("tiny-linear", &base);
    edit_text_config(&base, |t| {
        t.insert("num_expert_group".into(), 4.into());
        t.insert("topk_group".into(), 2.into());
    });
    let mut runs = vec![];
    for (tag, c) in [("zero", 0.0f32), ("neg", -2.0)] {
        let dir = d.join(tag);
        copy_dir(&base, &dir);
        edit_tensors(&dir, |ts| {
            for t in ts.iter_mut() {
                if t.name.ends_with("e_score_correction_bias") {
                    t.data = f32_fill(t.shape[0], c);
                }
            }
        });
        let o = inspect(&dir);
        assert!(o.status.success(), "{}", text(&o));
        runs.push(greedy_with_picks(&dir, 6));
    }
    assert!(!runs[0].1.is_empty());
    assert_eq!(
        runs[0].1, runs[1].1,
        "a uniform bias shift changed the experts"
    );
    assert_eq!(runs[0].0, runs[1].0);
    std::fs::remove_dir_all(&d).unwrap();
}

/// Impossible group layouts are refused at load and by `inspect`, naming the keys.
#[test]
fn impossible_group_layouts_are_refused_naming_the_keys() {
    let d = scratch("layout");
    let base = d.join("base");
    generate("tiny-linear", &base);
    // (num_expert_group, topk_group, keys the refusal must name) for 16 experts, top-4.
    let cases: [(u64, u64, &[&str]); 4] = [
        // 8 groups of 2, keep 1: at most 2 experts reachable < 4.
        (8, 1, &["num_experts_per_token 4", "topk_group 1"]),
        (3, 1, &["num_experts", "num_expert_group"]),
        // 16 groups of 1: a group score sums the top 2.
        (
            16,
            4,
            &["num_expert_group 16", "at least 2 experts per group"],
        ),
        (4, 5, &["topk_group 5", "num_expert_group"]),
    ];
    for (i, (ng, tg, keys)) in cases.iter().enumerate() {
        let dir = d.join(format!("c{i}"));
        copy_dir(&base, &dir);
        edit_text_config(&dir, |t| {
            t.insert("num_expert_group".into(), (*ng).into());
            t.insert("topk_group".into(), (*tg).into());
        });
        let err = format!("{:#}", Model::load(&dir, 1).err().expect("refused"));
        let o = inspect(&dir);
        assert_eq!(o.status.code(), Some(1), "{}", text(&o));
        for k in *keys {
            assert!(err.contains(k), "case {i}: {err:?} lacks {k:?}");
            assert!(text(&o).contains(k), "case {i}: inspect: {}", text(&o));
        }
    }
    std::fs::remove_dir_all(&d).unwrap();
}

/// A multi-token-prediction layer (index = num_hidden_layers, DeepSeek-V3 names) is
/// recognised from `num_nextn_predict_layers`, not loaded, listed by inspect and not
/// counted in the model size; the ids equal those of the checkpoint without it.
#[test]
fn mtp_layers_are_present_and_unused() {
    let d = scratch("mtp");
    let base = d.join("base");
    generate("tiny-k3", &base);
    let mtp = d.join("mtp");
    copy_dir(&base, &mtp);
    let cfg = load_config(&base).unwrap();
    let n = cfg.num_hidden_layers;
    let pre = cfg.weight_prefix.clone();
    let dim = cfg.hidden_size;
    let bf16 = |name: &str, shape: Vec<usize>| Tensor {
        name: format!("{pre}model.layers.{n}.{name}"),
        dtype: "BF16".into(),
        data: vec![0x3f; shape.iter().product::<usize>() * 2],
        shape,
    };
    let mut added = 0u64;
    edit_tensors(&mtp, |ts| {
        // The decoder part of the MTP layer: a copy of the last layer's tensors.
        let last = format!("{pre}model.layers.{}.", n - 1);
        let copies: Vec<Tensor> = ts
            .iter()
            .filter(|t| t.name.starts_with(&last))
            .map(|t| Tensor {
                name: t
                    .name
                    .replacen(&last, &format!("{pre}model.layers.{n}."), 1),
                ..t.clone()
            })
            .collect();
        ts.extend(copies);
        ts.push(bf16("enorm.weight", vec![dim]));
        ts.push(bf16("hnorm.weight", vec![dim]));
        ts.push(bf16("eh_proj.weight", vec![dim, 2 * dim]));
        ts.push(bf16("shared_head.norm.weight", vec![dim]));
        added = ts
            .iter()
            .filter(|t| t.name.contains(&format!("layers.{n}.")))
            .map(|t| t.data.len() as u64)
            .sum();
    });
    // Without the key, the layer is not implied by config.json: refused, with a hint.
    let e = format!("{:#}", Model::load(&mtp, 1).err().expect("refused"));
    assert!(e.contains("unexpected tensor"), "{e}");
    let o = inspect(&mtp);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        text(&o).contains("declare num_nextn_predict_layers"),
        "{}",
        text(&o)
    );
    edit_text_config(&mtp, |t| {
        t.insert("num_nextn_predict_layers".into(), 1.into());
    });
    let cfg_m = load_config(&mtp).unwrap();
    let ck_m = Checkpoint::open(&mtp).unwrap();
    let ck_b = Checkpoint::open(&base).unwrap();
    assert!(memdial::format::inspect::validate(&cfg_m, &ck_m).is_empty());
    assert_eq!(ck_m.total_bytes(), ck_b.total_bytes() + added);
    let f = memdial::format::inspect::findings(&mtp, &cfg_m, &ck_m);
    assert_eq!(f.mtp_layers, [n]);
    assert_eq!(f.unused_bytes, added);
    assert_eq!(
        memdial::format::inspect::model_bytes(&cfg_m, &ck_m),
        ck_b.total_bytes()
    );
    let plan = |cfg, ck| {
        let act = Scratch::activations(cfg, Sequences::single(64), 1);
        plan_unchecked(cfg, ck, u64::MAX / 4, IoMode::Direct, Prefetch::None, act).unwrap()
    };
    let (pm, pb) = (plan(&cfg_m, &ck_m), plan(&cfg, &ck_b));
    assert_eq!(pm.model_bytes, pb.model_bytes);
    let o = inspect(&mtp);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("present and unused"), "{}", text(&o));
    // Same ids (resident), and same ids streaming at the floor.
    let ids_b = greedy_with_picks(&base, 8).0;
    assert_eq!(greedy_with_picks(&mtp, 8).0, ids_b);
    let csv = |dir: &Path| {
        let o = memdial(&[
            "run",
            "--model",
            dir.to_str().unwrap(),
            "--prompt-ids",
            "5,17,300,2047,9,1200,64,3",
            "--max-tokens",
            "8",
            "--ignore-eos",
            "--output",
            "ids",
            "--budget",
            "64MiB",
            "--io",
            "buffered",
        ]);
        assert!(o.status.success(), "{}", text(&o));
        String::from_utf8(o.stdout).unwrap()
    };
    let want: Vec<String> = ids_b.iter().map(|x| x.to_string()).collect();
    assert_eq!(csv(&mtp).trim(), want.join(","));
    std::fs::remove_dir_all(&d).unwrap();
}

/// `vocab_size` padded past the tokenizer's ids (2304 → 2368): the model may emit a gap
/// id; it decodes to "" and every other id keeps its text (oracle: the tokenizer's own
/// decode of the non-gap ids); `--output json` text is never null; `tokenize --decode`
/// accepts gap ids and still refuses ids ≥ vocab_size; inspect notes the padding.
#[test]
fn padded_vocabulary_keeps_the_text() {
    let d = scratch("pad");
    let dir = d.join("m");
    generate("tiny-linear", &dir);
    let tok = Tokenizer::from_dir(&dir).unwrap();
    let n_ids = tok.n_vocab() as usize;
    let cfg = load_config(&dir).unwrap();
    assert_eq!(cfg.vocab_size, n_ids);
    let first = greedy_with_picks(&dir, 1).0[0] as usize;
    let (pad, gap) = (64usize, n_ids + 36);
    let dim = cfg.hidden_size;
    edit_tensors(&dir, |ts| {
        for t in ts.iter_mut() {
            if t.name == "model.embed_tokens.weight" || t.name == "lm_head.weight" {
                assert_eq!(t.shape, [n_ids, dim]);
                let row = |i: usize| t.data[i * dim * 2..(i + 1) * dim * 2].to_vec();
                let mut extra = vec![0u8; pad * dim * 2];
                if t.name == "lm_head.weight" {
                    // Gap row = 2 × the row of the unedited model's first greedy token
                    // (exact in BF16: exponent + 1), so the gap id wins step 1.
                    let r = row(first);
                    let doubled: Vec<u8> = r
                        .chunks(2)
                        .flat_map(|b| {
                            let v = half::bf16::from_le_bytes([b[0], b[1]]).to_f32() * 2.0;
                            half::bf16::from_f32(v).to_le_bytes()
                        })
                        .collect();
                    let o = (gap - n_ids) * dim * 2;
                    extra[o..o + dim * 2].copy_from_slice(&doubled);
                }
                t.data.extend(extra);
                t.shape = vec![n_ids + pad, dim];
            }
        }
    });
    edit_text_config(&dir, |t| {
        t.insert("vocab_size".into(), (n_ids + pad).into());
    });
    let m = dir.to_str().unwrap();
    let o = inspect(&dir);
    assert!(o.status.success(), "{}", text(&o));
    let note = format!("vocab_size {} > {n_ids} tokenizer ids", n_ids + pad);
    assert!(text(&o).contains(&note), "{}", text(&o));

    let metrics = d.join("metrics.json");
    let o = memdial(&[
        "run",
        "--model",
        m,
        "--prompt-ids",
        "5,17,300,2047,9,1200,64,3",
        "--max-tokens",
        "4",
        "--ignore-eos",
        "--output",
        "json",
        "--metrics-json",
        metrics.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let ids: Vec<u32> = serde_json::from_value(v["output_ids"].clone()).unwrap();
    assert_eq!(
        ids[0] as usize, gap,
        "the edited lm_head row must win step 1"
    );
    let kept: Vec<u32> = ids
        .iter()
        .copied()
        .filter(|&i| (i as usize) < n_ids)
        .collect();
    let want = tok.decode(&kept).unwrap();
    assert_eq!(v["text"].as_str(), Some(want.as_str()));
    let mj: serde_json::Value = serde_json::from_slice(&std::fs::read(&metrics).unwrap()).unwrap();
    assert!(mj["output_text_sha256"].is_string());

    let o = memdial(&["tokenize", "--model", m, "--decode", &format!("5,{gap},17")]);
    assert!(o.status.success(), "{}", text(&o));
    let got: String = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(got, tok.decode(&[5, 17]).unwrap());
    assert!(!got.is_empty());
    let o = memdial(&[
        "tokenize",
        "--model",
        m,
        "--decode",
        &format!("{}", n_ids + pad),
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("unknown token id"), "{}", text(&o));
    std::fs::remove_dir_all(&d).unwrap();
}

/// Specials of a tokenizer_config.json by name, read from the file itself.
fn special_ids(dir: &Path) -> std::collections::HashMap<String, u32> {
    let v: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("tokenizer_config.json")).unwrap()).unwrap();
    v["added_tokens_decoder"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, t)| {
            (
                t["content"].as_str().unwrap().to_string(),
                k.parse().unwrap(),
            )
        })
        .collect()
}

/// A K2-style template (default system prompt when none is given, role markers, tools
/// block) as published for Kimi K2-Instruct in shape; token names as in K2.
const K2_TEMPLATE: &str = "{%- if tools -%}<|im_system|>tool_declare<|im_middle|>{{ tools | tojson }}<|im_end|>{%- endif -%}
{%- for message in messages -%}
{%- if loop.first and messages[0]['role'] != 'system' -%}
<|im_system|>system<|im_middle|>You are Kimi, an AI assistant created by Moonshot AI.<|im_end|>
{%- endif -%}
{%- if message['role'] == 'system' -%}<|im_system|>system<|im_middle|>
{%- elif message['role'] == 'user' -%}<|im_user|>user<|im_middle|>
{%- else -%}<|im_assistant|>assistant<|im_middle|>{%- endif -%}
{{- message.get('content') | trim -}}<|im_end|>
{%- endfor -%}
{%- if add_generation_prompt -%}<|im_assistant|>assistant<|im_middle|>{%- endif -%}";

/// A K3-style tokenizer_config: specials at offsets 2–5 renamed (`<|end_of_msg|>`,
/// `<|open|>`, `<|close|>`, `<|sep|>`, names from the developers' notes, UNVERIFIED against the
/// published file) and a template written with them, starting with `{{ bos_token }}`.
const K3_TEMPLATE: &str = "{{ bos_token }}
{%- for m in messages %}<|open|>{{ m.role }}<|sep|>{{ m.content }}<|end_of_msg|>{% endfor %}
{%- if add_generation_prompt %}<|open|>assistant<|sep|>{% endif %}";

/// `--chat` renders the checkpoint's own template with its own special tokens (K2 and
/// K3 layouts), and falls back to the built-in Kimi format without a template. Expected
/// ids are derived by hand from the template text: special markers → the ids the file
/// gives them, text between markers → plain encoding.
#[test]
fn chat_uses_the_checkpoints_template_and_specials() {
    let d = scratch("chat");
    let base = d.join("base");
    generate("tiny-k3", &base);
    let tok = Tokenizer::from_dir(&base).unwrap();
    let plain = |s: &str| tok.encode(s, false);
    let user = "Tell me about the french revolution.";
    let run_ids = |dir: &Path, extra: &[&str]| -> Vec<u32> {
        let mut args = vec![
            "run",
            "--model",
            dir.to_str().unwrap(),
            "--prompt",
            user,
            "--chat",
            "--max-tokens",
            "1",
            "--output",
            "json",
        ];
        args.extend_from_slice(extra);
        let o = memdial(&args);
        assert!(o.status.success(), "{}", text(&o));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        serde_json::from_value(v["prompt_ids"].clone()).unwrap()
    };

    // K2 style.
    let k2 = d.join("k2");
    copy_dir(&base, &k2);
    edit_json(&k2, "tokenizer_config.json", |v| {
        v["chat_template"] = K2_TEMPLATE.into();
    });
    let s = special_ids(&k2);
    let mut want = vec![s["<|im_system|>"]];
    want.extend(plain("system"));
    want.push(s["<|im_middle|>"]);
    want.extend(plain(
        "You are Kimi, an AI assistant created by Moonshot AI.",
    ));
    want.push(s["<|im_end|>"]);
    want.push(s["<|im_user|>"]);
    want.extend(plain("user"));
    want.push(s["<|im_middle|>"]);
    want.extend(plain(user));
    want.extend([s["<|im_end|>"], s["<|im_assistant|>"]]);
    want.extend(plain("assistant"));
    want.push(s["<|im_middle|>"]);
    assert_eq!(run_ids(&k2, &[]), want);

    // K3 style: renamed specials; the built-in format cannot work here.
    let k3 = d.join("k3");
    copy_dir(&base, &k3);
    edit_json(&k3, "tokenizer_config.json", |v| {
        let a = v["added_tokens_decoder"].as_object_mut().unwrap();
        let n_base = tok.n_base();
        for (off, name) in [
            (2, "<|end_of_msg|>"),
            (3, "<|open|>"),
            (4, "<|close|>"),
            (5, "<|sep|>"),
        ] {
            a.insert(
                (n_base + off).to_string(),
                serde_json::json!({"content": name, "lstrip": false, "normalized": false,
                    "rstrip": false, "single_word": false, "special": true}),
            );
        }
        v["eos_token"] = "<|end_of_msg|>".into();
        v["chat_template"] = K3_TEMPLATE.into();
    });
    let s = special_ids(&k3);
    assert!(!s.contains_key("<|im_user|>") && !s.contains_key("<|im_end|>"));
    let k3_tok = Tokenizer::from_dir(&k3).unwrap();
    assert!(k3_tok.try_chat_prompt(user, None).is_err());
    let turn = |role: &str, content: &str, out: &mut Vec<u32>| {
        out.push(s["<|open|>"]);
        out.extend(plain(role));
        out.push(s["<|sep|>"]);
        out.extend(plain(content));
        out.push(s["<|end_of_msg|>"]);
    };
    let mut want = vec![s["[BOS]"]];
    turn("system", "Be brief.", &mut want);
    turn("user", user, &mut want);
    want.push(s["<|open|>"]);
    want.extend(plain("assistant"));
    want.push(s["<|sep|>"]);
    assert_eq!(run_ids(&k3, &["--system", "Be brief."]), want);

    // No template: the built-in Kimi format (the same hand derivation as its unit test).
    let none = d.join("none");
    copy_dir(&base, &none);
    edit_json(&none, "tokenizer_config.json", |v| {
        v.as_object_mut().unwrap().remove("chat_template");
    });
    let s = special_ids(&none);
    let mut want = vec![s["<|im_user|>"]];
    want.extend(plain("user"));
    want.push(s["<|im_middle|>"]);
    want.extend(plain(user));
    want.extend([s["<|im_end|>"], s["<|im_assistant|>"]]);
    want.extend(plain("assistant"));
    want.push(s["<|im_middle|>"]);
    assert_eq!(run_ids(&none, &[]), want);

    // A template that raises is a clear error, exit 1.
    edit_json(&none, "tokenizer_config.json", |v| {
        v["chat_template"] = "{{ raise_exception('only user turns') }}".into();
    });
    let o = memdial(&[
        "run",
        "--model",
        none.to_str().unwrap(),
        "--prompt",
        "x",
        "--chat",
        "--max-tokens",
        "1",
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("only user turns"), "{}", text(&o));
    std::fs::remove_dir_all(&d).unwrap();
}
