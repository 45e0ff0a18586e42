//! gpt-oss checkpoints through the loader and the stores: `inspect`'s key-by-key
//! validation of the published layout, clear refusals of bad configs, and the same
//! logits from the resident store and the streaming store at its floor.

use std::path::PathBuf;

use memdial::engine::arena::Scratch;
use memdial::engine::loader::StoreOptions;
use memdial::format::checkpoint::Checkpoint;
use memdial::format::config::{load_config, ModelConfig};
use memdial::format::inspect::validate;
use memdial::io::IoMode;
use memdial::model::{LogitsMode, Model};
use memdial::store::eviction::CachePolicy;
use memdial::store::plan::{plan_unchecked, Prefetch, Sequences};
use memdial::store::streaming::StreamOptions;
use memdial_testkit as testkit;

fn tiny(scratch: &testkit::Scratch) -> PathBuf {
    let dir = scratch.path().join("gpt-oss-tiny");
    memdial::tools::fixture::generate("gpt-oss-tiny", 0, &dir, false, None, &mut |_, _| {})
        .unwrap();
    dir
}

fn gpt_oss_tiny_is_valid_and_problems_are_named_key_by_key() {
    let s = testkit::scratch!("gpt-oss-validate");
    let dir = tiny(&s);
    let ck = Checkpoint::open(&dir).unwrap();
    let cfg = load_config(&dir).unwrap();
    assert_eq!(validate(&cfg, &ck), Vec::<String>::new());
    // 9 experts: every stacked expert tensor of every layer has the wrong shape.
    let mut nine = cfg.clone();
    nine.gpt_oss.as_mut().unwrap().num_local_experts = 9;
    let p = validate(&nine, &ck);
    assert!(
        p.iter().any(
            |p| p.contains("model.layers.3.mlp.experts.gate_up_proj_blocks")
                && p.contains("shape [8, 192, 2, 16] but expected [9, 192, 2, 16]")
        ),
        "{p:?}"
    );
    assert!(
        p.iter()
            .any(|p| p.contains("model.layers.0.mlp.router.weight")),
        "{p:?}"
    );
    // Without attention biases the checkpoint's biases are extra tensors.
    let mut nobias = cfg.clone();
    nobias.gpt_oss.as_mut().unwrap().attention_bias = false;
    let p = validate(&nobias, &ck);
    assert!(
        p.iter()
            .any(|p| p.contains("model.layers.0.self_attn.q_proj.bias")),
        "{p:?}"
    );
    // The BF16 layout read against MXFP4 files: the dense expert tensors are missing.
    let mut dense = cfg;
    dense.gpt_oss.as_mut().unwrap().experts = memdial::format::config::GptOssExperts::Dense;
    let p = validate(&dense, &ck);
    assert!(
        p.iter()
            .any(|p| p.starts_with("model.layers.0.mlp.experts.gate_up_proj: missing")),
        "{p:?}"
    );
}

fn bad_gpt_oss_configs_are_refused_with_the_key() {
    let base = serde_json::json!({
        "model_type": "gpt_oss", "vocab_size": 300, "hidden_size": 64,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "head_dim": 16, "num_local_experts": 4, "num_experts_per_tok": 2,
        "intermediate_size": 32
    });
    let err = |edit: &dyn Fn(&mut serde_json::Value)| {
        let mut j = base.clone();
        edit(&mut j);
        let r = ModelConfig::from_json_str(&j.to_string()).and_then(|mut c| {
            c.apply_quantization(&j)?;
            Ok(c)
        });
        format!("{:#}", r.unwrap_err())
    };
    assert!(err(&|j| j["num_key_value_heads"] = 3.into()).contains("num_key_value_heads 3"));
    assert!(err(&|j| j["num_experts_per_tok"] = 5.into()).contains("num_experts_per_tok 5"));
    assert!(err(&|j| j["head_dim"] = 15.into()).contains("head_dim 15"));
    assert!(
        err(&|j| j["layer_types"] = serde_json::json!(["full_attention"]))
            .contains("layer_types has 1 entries")
    );
    assert!(
        err(&|j| j["rope_scaling"] = serde_json::json!({"rope_type": "llama3", "factor": 8.0}))
            .contains("llama3")
    );
    assert!(err(&|j| {
        j["intermediate_size"] = 40.into();
        j["quantization_config"] = serde_json::json!({"quant_method": "mxfp4"});
    })
    .contains("intermediate_size 40 is not a multiple of 32"));
    assert!(
        err(&|j| j["quantization_config"] = serde_json::json!({"quant_method": "fp8"}))
            .contains("\"fp8\"")
    );
    assert!(err(&|j| j["eos_token_id"] = 300.into()).contains("eos_token_id 300"));
}

fn streaming_at_the_floor_gives_the_resident_logits() {
    let s = testkit::scratch!("gpt-oss-stream");
    let dir = tiny(&s);
    // A context past the sliding window (8).
    let ctx = 40;
    let resident = Model::load(&dir, 2).unwrap();
    let ids = (0..ctx as u32)
        .map(|i| (i * 37 + 11) % 768)
        .collect::<Vec<_>>();
    let mut st = resident.new_state(ctx);
    let want = resident.forward(&mut st, &ids, LogitsMode::All).unwrap();
    let cfg = load_config(&dir).unwrap();
    let ck = Checkpoint::open(&dir).unwrap();
    let seqs = Sequences {
        max_context: ctx,
        max_batch: 1,
    };
    for io in [IoMode::Buffered, IoMode::Mmap] {
        let act = Scratch::activations(&cfg, seqs, 2);
        let floor = plan_unchecked(&cfg, &ck, 0, io, Prefetch::None, act)
            .unwrap()
            .floor_bytes;
        let opts = StreamOptions {
            budget: floor,
            io,
            prefetch: Prefetch::None,
            cache: CachePolicy::Lru,
            max_context: ctx,
            io_threads: 2,
            record_trace: None,
            trace: None,
            verify_reads: true,
        };
        let o = Model::open(&dir, StoreOptions::Streaming(opts), 2).unwrap();
        let mut st = o.model.new_state(ctx);
        let mut got = Vec::new();
        for c in ids.chunks(7) {
            got.extend(o.model.forward(&mut st, c, LogitsMode::All).unwrap());
        }
        let bits = |a: &[f32]| a.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(
            bits(&got),
            bits(&want),
            "{io:?} at the floor ({floor} bytes)"
        );
    }
}

/// A batch forward of three sequences (different lengths and positions, past the
/// sliding window) gives each the logits it gets alone, bit for bit.
fn batched_sequences_get_their_own_logits() {
    use memdial::model::{SeqTokens, State};
    let s = testkit::scratch!("gpt-oss-batch");
    let dir = tiny(&s);
    let model = Model::load(&dir, 2).unwrap();
    let cfg = model.config().clone();
    let ctx = 32;
    let prompts: Vec<Vec<u32>> = (0..3u32)
        .map(|j| {
            (0..10 + 5 * j)
                .map(|i| (i * 31 + 7 * j + 3) % 768)
                .collect()
        })
        .collect();
    // Alone: prefill, then two decode steps feeding fixed ids.
    let steps = [[5u32, 9, 13], [700, 1, 42]];
    let mut alone = Vec::new();
    for (j, p) in prompts.iter().enumerate() {
        let mut st = model.new_state(ctx);
        let mut rows = vec![model.forward(&mut st, p, LogitsMode::Last).unwrap()];
        for step in &steps {
            rows.push(
                model
                    .forward(&mut st, &[step[j]], LogitsMode::Last)
                    .unwrap(),
            );
        }
        alone.push(rows);
    }
    let mut sc = Scratch::for_batch(&cfg, 3, 2, ctx);
    let mut states: Vec<State> = (0..3).map(|_| State::without_arena(&cfg, ctx)).collect();
    let v = cfg.vocab_size;
    let bits = |a: &[f32]| a.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    let by_call: Vec<Vec<&Vec<f32>>> = (0..=steps.len())
        .map(|c| alone.iter().map(|rows| &rows[c]).collect())
        .collect();
    for (call, want) in by_call.iter().enumerate() {
        let toks: Vec<Vec<u32>> = (0..3)
            .map(|j| match call {
                0 => prompts[j].clone(),
                c => vec![steps[c - 1][j]],
            })
            .collect();
        let mut seqs: Vec<SeqTokens<'_>> = states
            .iter_mut()
            .zip(&toks)
            .map(|(state, tokens)| SeqTokens {
                state,
                tokens,
                logits: true,
            })
            .collect();
        let out = model.forward_batch(&mut sc, &mut seqs).unwrap();
        for j in 0..3 {
            assert_eq!(
                bits(&out[j * v..(j + 1) * v]),
                bits(want[j]),
                "sequence {j}, call {call}"
            );
        }
    }
}

/// A prefill and decode steps stay within the arena the plan counts (the gpt-oss
/// buffers are arena buffers): its bytes after the calls equal the planned figure.
fn the_forward_stays_in_the_planned_arena() {
    let s = testkit::scratch!("gpt-oss-arena");
    let dir = tiny(&s);
    let model = Model::load(&dir, 2).unwrap();
    let cfg = model.config().clone();
    let ctx = 48;
    let mut st = model.new_state(ctx);
    let planned = Scratch::planned_bytes(
        &cfg,
        memdial::engine::arena::planned_prefill_chunk(ctx),
        2,
        ctx,
    );
    assert_eq!(st.scratch_bytes(), planned);
    let ids: Vec<u32> = (0..40).map(|i| (i * 13 + 5) % 768).collect();
    model.forward(&mut st, &ids, LogitsMode::Last).unwrap();
    for t in [1u32, 2, 3] {
        model.forward(&mut st, &[t], LogitsMode::Last).unwrap();
    }
    assert_eq!(st.scratch_bytes(), planned, "the forward grew the arena");
    assert!(
        Scratch::planned_buffers(&cfg, 1, 2, ctx)
            .iter()
            .any(|(n, b)| n == "gqa.q" && *b > 0),
        "the plan lists the gpt-oss buffers"
    );
}

fn main() -> std::process::ExitCode {
    let trials = testkit::trials![
        the_forward_stays_in_the_planned_arena,
        batched_sequences_get_their_own_logits,
        gpt_oss_tiny_is_valid_and_problems_are_named_key_by_key,
        bad_gpt_oss_configs_are_refused_with_the_key,
        streaming_at_the_floor_gives_the_resident_logits,
    ];
    testkit::main(include_str!("gpt_oss_checkpoint.rs"), trials)
}
