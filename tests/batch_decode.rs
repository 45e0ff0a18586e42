//! Batched decoding is invisible in the output: each sequence of a `Batch` gets
//! exactly the ids of the single-sequence `generate` (the path `memdial run`
//! takes) with the same prompt and settings, for 1, 2, 4 and 8 sequences with
//! prompts of different lengths, sequences joining and leaving mid-run, in every
//! IO mode at a streamed budget; and a step of B sequences reads the streamed
//! trunk once (the same bytes as one single-sequence decode step) and each
//! routed expert at most once.
//!
//! The oracle is the single-sequence path itself (its own correctness is checked
//! against mlx-lm and transformers in `engine_oracles`); what is tested here is
//! that batching changes no bit.

use std::path::{Path, PathBuf};

use memdial::engine::arena::Scratch;
use memdial::engine::batch::{Batch, Finish};
use memdial::engine::generate::{generate, GenerateParams};
use memdial::engine::loader::{Opened, StoreOptions};
use memdial::engine::sampler::SamplerConfig;
use memdial::format::checkpoint::Checkpoint;
use memdial::format::config::{load_config, MlpKind};
use memdial::io::IoMode;
use memdial::model::Model;
use memdial::store::eviction::CachePolicy;
use memdial::store::plan::{plan, plan_unchecked, Prefetch, Sequences};
use memdial::store::streaming::StreamOptions;
use memdial_testkit as testkit;

const MAX_CONTEXT: usize = 96;
const MAX_BATCH: usize = 8;

/// Fixture `name` generated once per test binary, on disk (direct IO needs a real fs).
fn fixture(name: &'static str) -> PathBuf {
    testkit::fixtures::shared(name, || {
        let d = testkit::until_exit(testkit::scratch!("batch")).join(name);
        memdial::tools::fixture::generate(name, 0, &d, false, None, &mut |_, _| {}).unwrap();
        d
    })
}

/// Eight requests: prompt lengths 1 … 41, greedy and seeded sampling, several
/// `max_tokens` and prefill chunks (0 = whole prompt).
fn requests(vocab: usize) -> Vec<(Vec<u32>, GenerateParams)> {
    let lens = [5, 1, 12, 41, 3, 27, 8, 19];
    lens.iter()
        .enumerate()
        .map(|(i, &len)| {
            let prompt = (0..len)
                .map(|j| ((i * 131 + j * 37 + 11) % vocab) as u32)
                .collect();
            let params = GenerateParams {
                max_tokens: 6 + (i * 5) % 9,
                sampler: SamplerConfig {
                    temperature: if i % 2 == 0 { 0.0 } else { 0.8 },
                    top_p: if i % 4 == 1 { 0.9 } else { 1.0 },
                    seed: 1000 + i as u64,
                },
                stop_ids: vec![],
                keep_logits: false,
                prefill_chunk: [0, 4, 16, 7][i % 4],
                perturb_logit: None,
            };
            (prompt, params)
        })
        .collect()
}

/// The single-sequence ids (`generate` on a fresh state, as `memdial run`).
fn single(model: &Model, prompt: &[u32], params: &GenerateParams) -> Vec<u32> {
    let mut st = model.new_state(MAX_CONTEXT);
    generate(model, &mut st, prompt, params, &mut |_| {})
        .unwrap()
        .output_ids
}

/// Runs `reqs` through a batch of `b` slots: the first `b` join at once; whenever
/// one finishes it is removed and the next request joins (so later ones prefill
/// beside decoding ones). Returns each request's ids.
fn batched(model: &Model, reqs: &[(Vec<u32>, GenerateParams)], b: usize) -> Vec<Vec<u32>> {
    let mut batch = Batch::new(model, b, MAX_CONTEXT).unwrap();
    let mut ids = vec![None; reqs.len()];
    let mut out = vec![Vec::new(); reqs.len()];
    let mut next = 0;
    let mut steps = 0;
    while next < reqs.len() || !batch.is_empty() {
        while next < reqs.len() && batch.len() < b {
            ids[next] = Some(batch.add(model, &reqs[next].0, &reqs[next].1).unwrap());
            next += 1;
        }
        for t in batch.step(model).unwrap() {
            if t.finish.is_some() {
                let r = ids.iter().position(|x| *x == Some(t.id)).unwrap();
                let o = batch.remove(t.id).unwrap();
                assert_eq!(o.finish, Some(Finish::Length), "request {r}");
                out[r] = o.output_ids;
            }
        }
        steps += 1;
        assert!(steps < 10_000, "the batch does not finish");
    }
    out
}

fn streamed(dir: &Path, io: IoMode, prefetch: Prefetch) -> Opened {
    let cfg = load_config(dir).unwrap();
    let ck = Checkpoint::open(dir).unwrap();
    let seqs = Sequences {
        max_context: MAX_CONTEXT,
        max_batch: MAX_BATCH,
    };
    let floor = plan_unchecked(
        &cfg,
        &ck,
        0,
        io,
        prefetch,
        Scratch::activations(&cfg, seqs, 2),
    )
    .unwrap()
    .floor_bytes;
    let opts = StreamOptions {
        budget: floor,
        io,
        prefetch,
        cache: CachePolicy::Lru,
        max_context: MAX_CONTEXT,
        io_threads: 2,
        record_trace: None,
        trace: None,
        verify_reads: false,
    };
    Model::open_batch(dir, StoreOptions::Streaming(opts), 2, MAX_BATCH).unwrap()
}

#[test]
fn batched_ids_equal_single_sequence_ids_in_every_io_mode() {
    for name in ["tiny-k3", "tiny-linear"] {
        let dir = fixture(name);
        let resident = Model::load(&dir, 2).unwrap();
        let reqs = requests(resident.config().vocab_size);
        let want: Vec<Vec<u32>> = reqs.iter().map(|(p, q)| single(&resident, p, q)).collect();
        for (i, w) in want.iter().enumerate() {
            assert_eq!(w.len(), reqs[i].1.max_tokens, "{name} request {i}");
        }
        for (io, prefetch) in [
            (IoMode::Direct, Prefetch::NextLayer),
            (IoMode::Buffered, Prefetch::None),
            (IoMode::Mmap, Prefetch::NextLayer),
        ] {
            let opened = streamed(&dir, io, prefetch);
            let model = &opened.model;
            let s = opened.streaming.as_ref().unwrap();
            assert!(
                s.plan().pinned_groups < s.plan().groups.len(),
                "{name}: the floor streams the trunk"
            );
            // The single-sequence path on the streamed store gives the resident ids.
            assert_eq!(
                single(model, &reqs[3].0, &reqs[3].1),
                want[3],
                "{name} {io:?}"
            );
            for b in [1, 2, 4, 8] {
                let got = batched(model, &reqs, b);
                for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                    assert_eq!(g, w, "{name} {io:?} B={b}: request {i} differs");
                }
            }
            assert_eq!(s.metrics().budget_overflows, 0, "{name} {io:?}");
        }
    }
}

/// The batch's state is the resident store's too (a store that does not group
/// experts: the per-token protocol inside a batch forward), and a stop id and a
/// full context end a sequence as `generate` does.
#[test]
fn batch_stops_on_stop_ids_and_context_end() {
    let dir = fixture("tiny-k3");
    let model = Model::load(&dir, 1).unwrap();
    let mut reqs = requests(model.config().vocab_size);
    // Request 2 stops at its own 4th id; request 5 runs into the end of its context.
    let free = single(&model, &reqs[2].0, &reqs[2].1);
    reqs[2].1.stop_ids = vec![free[3]];
    let stop_at = free.iter().position(|t| *t == free[3]).unwrap() + 1;
    reqs[5].0 = (0..MAX_CONTEXT as u32 - 3)
        .map(|j| (j * 13 + 5) % 2000)
        .collect();
    reqs[5].1.max_tokens = 50;
    let mut batch = Batch::new(&model, MAX_BATCH, MAX_CONTEXT).unwrap();
    let ids: Vec<_> = reqs
        .iter()
        .map(|(p, q)| batch.add(&model, p, q).unwrap())
        .collect();
    assert!(batch.add(&model, &reqs[0].0, &reqs[0].1).is_err(), "full");
    while batch.active() > 0 {
        batch.step(&model).unwrap();
    }
    let stopped = batch.remove(ids[2]).unwrap();
    assert_eq!(stopped.finish, Some(Finish::Stop));
    assert_eq!(stopped.output_ids, free[..stop_at]);
    assert_eq!(stopped.output_ids, single(&model, &reqs[2].0, &reqs[2].1));
    let ctx = batch.remove(ids[5]).unwrap();
    assert_eq!(ctx.finish, Some(Finish::Context));
    // 93 prompt positions + 3 fed ids fill 96; the 4th id is sampled from the last.
    assert_eq!(ctx.output_ids.len(), 4);
    let mut p = reqs[5].1.clone();
    p.max_tokens = 4;
    assert_eq!(ctx.output_ids, single(&model, &reqs[5].0, &p));
    p.max_tokens = 5;
    let mut st = model.new_state(MAX_CONTEXT);
    let e = generate(&model, &mut st, &reqs[5].0, &p, &mut |_| {}).unwrap_err();
    assert!(format!("{e:#}").contains("context overflow"), "{e:#}");
    for (i, id) in ids.iter().enumerate() {
        if i != 2 && i != 5 {
            let o = batch.remove(*id).unwrap();
            assert_eq!(o.output_ids, single(&model, &reqs[i].0, &reqs[i].1), "{i}");
        }
    }
    assert!(batch.is_empty());
}

/// One decode step of 8 sequences reads the streamed trunk once: the same trunk
/// bytes as one decode step of a single sequence, which are the plan's streamed
/// groups (each read once per forward); and each distinct routed expert of the
/// step once (fewer fetches than 8 sequences × top-k per MoE layer).
#[test]
fn a_batch_step_reads_the_trunk_once() {
    for io in [IoMode::Direct, IoMode::Buffered, IoMode::Mmap] {
        let dir = fixture("tiny-k3");
        // No prefetch: every read completes before the forward goes on, so the
        // counters between two tokens are exactly that forward's reads.
        let opened = streamed(&dir, io, Prefetch::None);
        let (model, s) = (&opened.model, opened.streaming.as_ref().unwrap());
        let cfg = model.config();
        let mut reqs = requests(cfg.vocab_size);
        for (_, q) in &mut reqs {
            q.prefill_chunk = 0;
            q.max_tokens = 12;
        }
        let p = s.plan();
        let streamed_trunk: u64 = p.groups[p.pinned_groups..]
            .iter()
            .map(|g| g.read.buffer_bytes)
            .sum();
        assert!(streamed_trunk > 0);
        // A single sequence: the trunk bytes between two consecutive decode tokens.
        let mut marks = Vec::new();
        let mut st = model.new_state(MAX_CONTEXT);
        generate(model, &mut st, &reqs[0].0, &reqs[0].1, &mut |_| {
            marks.push(s.metrics().trunk_bytes_read)
        })
        .unwrap();
        let single_step = marks[3] - marks[2];
        if io != IoMode::Mmap {
            assert_eq!(single_step, streamed_trunk, "{io:?}: one decode step");
        }
        // Eight sequences, all decoding.
        let mut batch = Batch::new(model, MAX_BATCH, MAX_CONTEXT).unwrap();
        for (q, params) in &reqs {
            batch.add(model, q, params).unwrap();
        }
        // The prompts (116 tokens) take two steps of 96; then all 8 decode.
        for _ in 0..2 {
            batch.step(model).unwrap();
        }
        let before = s.metrics();
        let toks = batch.step(model).unwrap();
        let after = s.metrics();
        assert_eq!(toks.len(), MAX_BATCH, "every sequence decoded a token");
        assert_eq!(
            after.activation_bytes, p.activation_bytes,
            "{io:?}: the store accounts the batch's arena as planned"
        );
        assert_eq!(
            after.trunk_bytes_read - before.trunk_bytes_read,
            single_step,
            "{io:?}: 8 sequences read the trunk once"
        );
        let moe = cfg.moe.as_ref().unwrap();
        let moe_layers = cfg.mlp_kinds.iter().filter(|k| **k == MlpKind::Moe).count() as u64;
        let fetches = after.prefill_expert_fetches - before.prefill_expert_fetches;
        let bound = moe.num_experts.min(MAX_BATCH * moe.num_experts_per_token) as u64;
        assert!(fetches >= moe.num_experts_per_token as u64 * moe_layers);
        assert!(
            fetches <= bound * moe_layers,
            "{io:?}: {fetches} expert fetches for {moe_layers} MoE layers"
        );
        assert_eq!(
            after.expert_requests - before.expert_requests,
            (MAX_BATCH * moe.num_experts_per_token) as u64 * moe_layers
        );
    }
}

/// The plan holds every sequence's state and the shared arena, and refuses a
/// budget that cannot, naming the bytes.
#[test]
fn plan_accounts_for_the_batch() {
    let dir = fixture("tiny-k3");
    let cfg = load_config(&dir).unwrap();
    let ck = Checkpoint::open(&dir).unwrap();
    let one = Sequences::single(MAX_CONTEXT);
    let eight = Sequences {
        max_context: MAX_CONTEXT,
        max_batch: 8,
    };
    let (io, pf) = (IoMode::Buffered, Prefetch::None);
    let (one, eight) = (
        Scratch::activations(&cfg, one, 2),
        Scratch::activations(&cfg, eight, 2),
    );
    let p1 = plan_unchecked(&cfg, &ck, 0, io, pf, one).unwrap();
    let p8 = plan_unchecked(&cfg, &ck, 0, io, pf, eight).unwrap();
    // tiny-k3 per sequence: 5 KDA layers × (conv 3·4·32·3 + state 4·32·32) f32 and
    // 3 MLA layers × 96 positions × (64 + 16) f32.
    let (kda, mla) = cfg.layer_counts();
    let each = kda as u64 * (3 * 128 * 3 + 4 * 32 * 32) * 4 + mla as u64 * 96 * 80 * 4;
    assert_eq!(p1.state_bytes, each);
    assert_eq!(p8.state_bytes, 8 * each);
    assert_eq!(p8.state_bytes_per_sequence, each);
    let model = Model::load(&dir, 2).unwrap();
    let batch = Batch::new(&model, 8, MAX_CONTEXT).unwrap();
    assert_eq!(
        batch.scratch_bytes(),
        p8.activation_bytes,
        "arena as planned"
    );
    assert_eq!(
        p8.floor_bytes - p1.floor_bytes,
        7 * each
            + (p8.activation_bytes - p1.activation_bytes)
            + (p8.embedding_rows_bytes - p1.embedding_rows_bytes)
    );
    let e = plan(&cfg, &ck, p8.floor_bytes - 1, io, pf, eight).unwrap_err();
    let msg = format!("{e:#}");
    assert!(msg.contains("below the floor"), "{msg}");
    assert!(msg.contains("max batch 8"), "{msg}");
    assert!(
        msg.contains(&format!(
            "8 sequences × {}",
            memdial::util::units::fmt_bytes(each)
        )),
        "{msg}"
    );
    assert!(plan(&cfg, &ck, p8.floor_bytes, io, pf, eight).is_ok());
}
