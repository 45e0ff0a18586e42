//! Whole-model checks on fixture checkpoints: determinism across thread counts,
//! prefill ≡ token-by-token decode, store call protocol, long decodes stay finite,
//! bad input gives errors.

mod engine_util;
mod isa_util;

use std::sync::{Arc, Mutex};

use engine_util::*;
use memdial::format::config::load_config;
use memdial::kernels::Isa;
use memdial::kernels::Par;
use memdial::model::{LogitsMode, Model};
use memdial_testkit as testkit;

const PROMPT: [u32; 12] = [5, 17, 300, 2047, 0, 9, 9, 1200, 64, 3, 1999, 42];

fn logits_all(model: &Model, tokens: &[u32]) -> Vec<f32> {
    let mut st = model.new_state(256);
    model.forward(&mut st, tokens, LogitsMode::All).unwrap()
}

fn threads_1_and_2_are_bit_identical() {
    for name in ["tiny-k3", "tiny-linear"] {
        let dir = fixture(name);
        let a = logits_all(&Model::load(&dir, 1).unwrap(), &PROMPT);
        let b = logits_all(&Model::load(&dir, 2).unwrap(), &PROMPT);
        assert!(bits_eq(&a, &b), "{name}: threads 1 vs 2 differ");
    }
}

/// The scalar kernels (MLA attention one head at a time: the pre-batching
/// reference) and the kernels of ISA `only` on 1 and 2 threads (heads batched per
/// position) give bit-identical logits over a 12-token prefill and 4 decode steps.
fn scalar_and_simd_kernels_are_bit_identical(only: Isa) {
    use memdial::format::checkpoint::Checkpoint;
    use memdial::store::resident::ResidentStore;
    for name in ["tiny-k3", "tiny-linear"] {
        let dir = fixture(name);
        let run = |isa: Isa, threads: usize| {
            let cfg = load_config(&dir).unwrap();
            let ck = Checkpoint::open(&dir).unwrap();
            let store = ResidentStore::open(&cfg, &ck).unwrap();
            let model = Model::new(cfg, Arc::new(store), Par::with_isa(threads, isa)).unwrap();
            let mut st = model.new_state(64);
            let mut out = model.forward(&mut st, &PROMPT, LogitsMode::All).unwrap();
            for t in [7u32, 1500, 33, 2] {
                out.extend(model.forward(&mut st, &[t], LogitsMode::All).unwrap());
            }
            out
        };
        let want = run(Isa::Scalar, 1);
        for threads in [1, 2] {
            let got = run(only, threads);
            assert!(
                bits_eq(&want, &got),
                "{name}: scalar vs {only:?} t{threads} differ"
            );
        }
    }
}

fn prefill_then_decode_equals_one_by_one() {
    for name in ["tiny-k3", "tiny-linear"] {
        let model = Model::load(&fixture(name), 1).unwrap();
        let v = model.config().vocab_size;
        // Batched prefill of the whole prompt.
        let batched = logits_all(&model, &PROMPT);
        // One token at a time.
        let mut st = model.new_state(64);
        let mut single = Vec::new();
        for &t in &PROMPT {
            single.extend(model.forward(&mut st, &[t], LogitsMode::Last).unwrap());
        }
        assert!(bits_eq(&batched, &single), "{name}: prefill vs one-by-one");
        // Prefill in two chunks, then decode greedily; compare with one-by-one continuation.
        let mut st2 = model.new_state(64);
        model
            .forward(&mut st2, &PROMPT[..5], LogitsMode::None)
            .unwrap();
        let last = model
            .forward(&mut st2, &PROMPT[5..], LogitsMode::Last)
            .unwrap();
        assert!(
            bits_eq(&last, &single[(PROMPT.len() - 1) * v..]),
            "{name}: chunked prefill"
        );
        let mut tok = memdial::engine::sampler::argmax(&last);
        for _ in 0..6 {
            let a = model.forward(&mut st, &[tok], LogitsMode::Last).unwrap();
            let b = model.forward(&mut st2, &[tok], LogitsMode::Last).unwrap();
            assert!(bits_eq(&a, &b), "{name}: decode after chunked prefill");
            tok = memdial::engine::sampler::argmax(&a);
        }
        assert_eq!(st.pos, PROMPT.len() + 6);
    }
}

fn store_protocol_begin_select_expert_end() {
    let dir = fixture("tiny-k3");
    let cfg = load_config(&dir).unwrap();
    let rec = Arc::new(Recording {
        inner: MemStore::new(&cfg, 1),
        calls: Mutex::new(Vec::new()),
    });
    let model = Model::new(cfg.clone(), rec.clone(), Par::new(1)).unwrap();
    let mut st = model.new_state(8);
    model.forward(&mut st, &[1, 2], LogitsMode::Last).unwrap();
    let calls = rec.calls.lock().unwrap().clone();
    let k = cfg.moe.as_ref().unwrap().num_experts_per_token;
    let mut open: Option<usize> = None;
    let mut selected: Vec<usize> = Vec::new();
    let mut next_layer = 0;
    for c in &calls {
        match c {
            Call::Begin(l) => {
                assert_eq!(open, None);
                assert_eq!(*l, next_layer);
                open = Some(*l);
            }
            Call::Selected(l, ids) => {
                assert_eq!(open, Some(*l));
                assert_eq!(ids.len(), k);
                assert!(selected.is_empty(), "previous selection not consumed");
                selected = ids.clone();
            }
            Call::Expert(l, e) => {
                assert_eq!(open, Some(*l));
                // Experts are fetched in router-rank order after the selection was reported.
                assert_eq!(selected.first(), Some(e));
                selected.remove(0);
            }
            Call::End(l) => {
                assert_eq!(open, Some(*l));
                assert!(selected.is_empty());
                open = None;
                next_layer += 1;
            }
        }
    }
    assert_eq!(next_layer, cfg.num_hidden_layers);
}

fn decode_stays_finite(model: &Model, steps: usize) {
    let v = model.config().vocab_size;
    let mut st = model.new_state(steps + 8);
    let mut l = model
        .forward(&mut st, &[1, 2, 3], LogitsMode::Last)
        .unwrap();
    for i in 0..steps {
        assert!(
            l.iter().all(|x| x.is_finite()),
            "non-finite logits at step {i}"
        );
        let tok = memdial::engine::sampler::argmax(&l) % v as u32;
        l = model.forward(&mut st, &[tok], LogitsMode::Last).unwrap();
    }
    assert!(l.iter().all(|x| x.is_finite()));
}

fn long_decode_is_finite_tiny_k3() {
    decode_stays_finite(&Model::load(&fixture("tiny-k3"), 1).unwrap(), 300);
}

fn long_decode_is_finite_mini_like() {
    let cfg = mini_like_config();
    let store = MemStore::new(&cfg, 7);
    let model = Model::new(cfg, arc(store), Par::new(1)).unwrap();
    decode_stays_finite(&model, 96);
}

fn bad_inputs_are_errors() {
    let model = Model::load(&fixture("tiny-linear"), 1).unwrap();
    let v = model.config().vocab_size as u32;
    let mut st = model.new_state(4);
    let e = model
        .forward(&mut st, &[1, v], LogitsMode::Last)
        .unwrap_err();
    assert!(format!("{e:#}").contains("out of range"), "{e:#}");
    assert!(model.forward(&mut st, &[], LogitsMode::Last).is_err());
    let e = model
        .forward(&mut st, &[1, 2, 3, 4, 5], LogitsMode::Last)
        .unwrap_err();
    assert!(format!("{e:#}").contains("context overflow"), "{e:#}");

    // A store missing a tensor: the error names it.
    let cfg = load_config(&fixture("tiny-linear")).unwrap();
    let mut store = MemStore::new(&cfg, 3);
    store
        .tensors
        .remove("model.layers.1.self_attn.b_proj.weight");
    let model = Model::new(cfg.clone(), arc(store), Par::new(1)).unwrap();
    let e = model
        .forward(&mut model.new_state(4), &[1], LogitsMode::Last)
        .unwrap_err();
    assert!(
        format!("{e:#}").contains("model.layers.1.self_attn.b_proj.weight"),
        "{e:#}"
    );

    // A misshapen tensor: the error names it and the sizes.
    let mut store = MemStore::new(&cfg, 3);
    let b = store.tensors["model.layers.0.self_attn.q_proj.weight"].clone();
    store.tensors.insert(
        "model.layers.0.self_attn.q_proj.weight".into(),
        b.slice(0, b.len() - 2),
    );
    let model = Model::new(cfg, arc(store), Par::new(1)).unwrap();
    let e = model
        .forward(&mut model.new_state(4), &[1], LogitsMode::Last)
        .unwrap_err();
    assert!(
        format!("{e:#}").contains("model.layers.0.self_attn.q_proj.weight"),
        "{e:#}"
    );

    // Model::load refuses an invalid checkpoint directory.
    let e = Model::load(std::path::Path::new("/nonexistent/memdial"), 1)
        .err()
        .unwrap();
    assert!(format!("{e:#}").contains("/nonexistent/memdial"), "{e:#}");
}

fn generate_is_chunking_invariant_and_stops_on_eos() {
    use memdial::engine::generate::{generate, GenerateParams};
    let model = Model::load(&fixture("tiny-k3"), 1).unwrap();
    let run = |chunk: usize, stop: Vec<u32>| {
        let mut st = model.new_state(64);
        let p = GenerateParams {
            max_tokens: 8,
            sampler: Default::default(),
            stop_ids: stop,
            keep_logits: true,
            prefill_chunk: chunk,
            perturb_logit: None,
        };
        generate(&model, &mut st, &PROMPT, &p, &mut |_| {}).unwrap()
    };
    let a = run(0, vec![]);
    let b = run(5, vec![]);
    assert_eq!(a.output_ids, b.output_ids);
    assert!(bits_eq(
        a.logits.as_ref().unwrap(),
        b.logits.as_ref().unwrap()
    ));
    let v = model.config().vocab_size;
    assert_eq!(a.logits.as_ref().unwrap().len(), (PROMPT.len() + 8 - 1) * v);
    // Row prompt_len−1+j of the logits produced output_ids[j] (greedy).
    let l = a.logits.as_ref().unwrap();
    for (j, &t) in a.output_ids.iter().enumerate() {
        let r = PROMPT.len() - 1 + j;
        assert_eq!(memdial::engine::sampler::argmax(&l[r * v..(r + 1) * v]), t);
    }
    // Stopping on the third generated token.
    let c = run(0, vec![a.output_ids[2]]);
    assert_eq!(c.output_ids, a.output_ids[..3].to_vec());
    assert!(c.stopped);
}

/// A store that accepts expert-grouped chunks and records the chunk hints and fetches.
/// One chunk hint as recorded: (layer, experts per token, the chunk's fetch order).
type ChunkHint = (usize, Vec<Vec<usize>>, Vec<usize>);

struct Grouping {
    inner: MemStore,
    hints: Mutex<Vec<ChunkHint>>,
    fetches: Mutex<Vec<(usize, usize)>>,
}

impl memdial::store::WeightStore for Grouping {
    fn tensor(&self, layer: Option<usize>, name: &str) -> anyhow::Result<memdial::store::Bytes> {
        self.inner.tensor(layer, name)
    }
    fn expert(&self, layer: usize, e: usize) -> anyhow::Result<memdial::store::ExpertWeights> {
        self.fetches.lock().unwrap().push((layer, e));
        self.inner.expert(layer, e)
    }
    fn groups_chunk_experts(&self) -> bool {
        true
    }
    fn chunk_experts_selected(&self, layer: usize, per_token: &[usize], k: usize, order: &[usize]) {
        let per_token: Vec<Vec<usize>> = per_token.chunks(k).map(|t| t.to_vec()).collect();
        self.hints
            .lock()
            .unwrap()
            .push((layer, per_token, order.to_vec()));
    }
}

/// Expert-grouped prefill on the mini-like config (MXFP4 latent experts): per MoE
/// layer one chunk hint listing each token's k experts, then each distinct expert
/// fetched exactly once in first-use order; logits bit-identical to the
/// token-by-token protocol (a store without grouping) and to one token per forward.
fn grouped_prefill_fetches_each_expert_once_and_is_bit_identical() {
    let cfg = mini_like_config();
    let k = cfg.moe.as_ref().unwrap().num_experts_per_token;
    let prompt: Vec<u32> = (0..9u32).map(|i| (i * 37 + 5) % 512).collect();
    let grouped = Arc::new(Grouping {
        inner: MemStore::new(&cfg, 3),
        hints: Mutex::new(Vec::new()),
        fetches: Mutex::new(Vec::new()),
    });
    let model = Model::new(cfg.clone(), grouped.clone(), Par::new(2)).unwrap();
    let mut st = model.new_state(32);
    let got = model.forward(&mut st, &prompt, LogitsMode::All).unwrap();

    let plain = Model::new(cfg.clone(), Arc::new(MemStore::new(&cfg, 3)), Par::new(1)).unwrap();
    let mut st2 = plain.new_state(32);
    let chunked = plain.forward(&mut st2, &prompt, LogitsMode::All).unwrap();
    assert!(
        bits_eq(&got, &chunked),
        "grouped vs token-by-token protocol"
    );
    let mut st3 = plain.new_state(32);
    let mut one: Vec<f32> = Vec::new();
    for &t in &prompt {
        one.extend(plain.forward(&mut st3, &[t], LogitsMode::All).unwrap());
    }
    assert!(
        bits_eq(&got, &one),
        "grouped chunk vs one token per forward"
    );

    let hints = grouped.hints.lock().unwrap().clone();
    let fetches = grouped.fetches.lock().unwrap().clone();
    let moe_layers: Vec<usize> = (0..cfg.num_hidden_layers)
        .filter(|&l| cfg.mlp_kinds[l] == memdial::format::config::MlpKind::Moe)
        .collect();
    assert_eq!(
        hints.iter().map(|h| h.0).collect::<Vec<_>>(),
        moe_layers,
        "one hint per MoE layer"
    );
    let mut expected_fetches = Vec::new();
    for (layer, per_token, order) in &hints {
        assert_eq!(per_token.len(), prompt.len());
        assert!(per_token.iter().all(|ids| ids.len() == k));
        // order = distinct experts in first-use order (token order, then rank).
        let mut want: Vec<usize> = Vec::new();
        for ids in per_token {
            for &e in ids {
                if !want.contains(&e) {
                    want.push(e);
                }
            }
        }
        assert_eq!(order, &want, "layer {layer}");
        expected_fetches.extend(want.iter().map(|&e| (*layer, e)));
    }
    assert_eq!(
        fetches, expected_fetches,
        "each distinct expert fetched once, in order"
    );
}

fn main() -> std::process::ExitCode {
    let mut trials = testkit::trials![
        threads_1_and_2_are_bit_identical,
        prefill_then_decode_equals_one_by_one,
        store_protocol_begin_select_expert_end,
        long_decode_is_finite_tiny_k3,
        long_decode_is_finite_mini_like,
        bad_inputs_are_errors,
        generate_is_chunking_invariant_and_stops_on_eos,
        grouped_prefill_fetches_each_expert_once_and_is_bit_identical
    ];
    trials.extend(isa_util::per_isa(
        "scalar_and_simd_kernels_are_bit_identical",
        scalar_and_simd_kernels_are_bit_identical,
    ));
    testkit::main(include_str!("engine_model.rs"), trials)
}
