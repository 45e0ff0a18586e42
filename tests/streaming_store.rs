//! The streaming store hands out exactly the bytes on disk, whatever the budget,
//! IO mode, prefetch policy or cache policy; it refuses budgets under the floor and
//! filesystems without O_DIRECT; faults name the file and offset.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use memdial::engine::arena::Scratch;
use memdial::format::checkpoint::Checkpoint;
use memdial::format::config::{load_config, MlpKind, ModelConfig};
use memdial::format::schema::{expected_tensors, Role};
use memdial::io::IoMode;
use memdial::store::eviction::CachePolicy;
use memdial::store::plan::{plan_unchecked, Activations, Prefetch, Sequences};
use memdial::store::resident::ResidentStore;
use memdial::store::streaming::{StreamOptions, StreamingStore};
use memdial::store::{ExpertMat, WeightStore};
use memdial_testkit as testkit;

/// tiny-k3 generated once per test binary (shared read-only by its tests, removed at
/// exit), on disk (not tmpfs: direct IO needs a real fs).
fn tiny() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let d = testkit::until_exit(testkit::scratch!("stream")).join("tiny-k3");
        memdial::tools::fixture::generate(
            "tiny-k3",
            0,
            &d,
            false,
            Some(memdial::tools::fixture::write_tokenizer),
            &mut |_, _| {},
        )
        .unwrap();
        d
    })
}

/// The activation arena of one sequence of `max_context` positions on `threads`
/// kernel threads (what the plan is given).
fn arena(cfg: &ModelConfig, max_context: usize, threads: usize) -> Activations {
    Scratch::activations(cfg, Sequences::single(max_context), threads)
}

fn opts(budget: u64, io: IoMode, prefetch: Prefetch, cache: CachePolicy) -> StreamOptions {
    StreamOptions {
        budget,
        io,
        prefetch,
        cache,
        max_context: 256,
        io_threads: 2,
        record_trace: None,
        trace: None,
        verify_reads: true,
    }
}

fn mat_bytes(m: &ExpertMat) -> Vec<u8> {
    match m {
        ExpertMat::Bf16(b) => b.to_vec(),
        ExpertMat::Mxfp4 { packed, scale } => [packed.to_vec(), scale.to_vec()].concat(),
        ExpertMat::Rvq {
            codes, codebooks, ..
        } => [codes.to_vec(), codebooks.to_vec()].concat(),
    }
}

/// Walks every layer's tensors and a rotating selection of experts, twice (two "tokens"),
/// through the store's hint protocol, comparing bytes with the resident store.
fn walk_and_compare(s: &StreamingStore, r: &ResidentStore, dir: &Path) {
    let cfg = load_config(dir).unwrap();
    let specs = expected_tensors(&cfg);
    for token in 0..2 {
        s.begin_token(token);
        for l in 0..cfg.num_hidden_layers {
            s.begin_layer(l);
            for spec in specs
                .iter()
                .filter(|t| t.layer == Some(l) && t.role == Role::Trunk)
            {
                let rest = spec.name.split_once(&format!("layers.{l}.")).unwrap().1;
                let a = s.tensor(Some(l), rest).unwrap();
                let b = r.tensor(Some(l), rest).unwrap();
                assert!(a[..] == b[..], "layer {l} {rest} differs");
            }
            if cfg.mlp_kinds[l] == MlpKind::Moe {
                let k = cfg.moe.as_ref().unwrap().num_experts_per_token;
                let sel: Vec<usize> = (0..k).map(|i| (l * 3 + i * 5 + token * 7) % 16).collect();
                s.experts_selected(l, &sel);
                for &e in &sel {
                    let a = s.expert(l, e).unwrap();
                    let b = r.expert(l, e).unwrap();
                    assert_eq!(
                        mat_bytes(&a.w1),
                        mat_bytes(&b.w1),
                        "layer {l} expert {e} w1"
                    );
                    assert_eq!(mat_bytes(&a.w2), mat_bytes(&b.w2));
                    assert_eq!(mat_bytes(&a.w3), mat_bytes(&b.w3));
                }
            }
            s.end_layer(l);
        }
    }
    for g in [
        "model.embed_tokens.weight",
        "model.norm.weight",
        "lm_head.weight",
    ] {
        assert!(s.tensor(None, g).unwrap()[..] == r.tensor(None, g).unwrap()[..]);
    }
}

/// The expert-grouped prefill protocol: each MoE layer reports a 3-token chunk's
/// routing once (`chunk_experts_selected`), then fetches each distinct expert once
/// in first-use order — where the store reads the next ones ahead under a prefetch
/// policy — comparing bytes with the resident store.
fn walk_chunk_and_compare(s: &StreamingStore, r: &ResidentStore, dir: &Path) {
    let cfg = load_config(dir).unwrap();
    s.begin_token(2);
    for l in 0..cfg.num_hidden_layers {
        s.begin_layer(l);
        if cfg.mlp_kinds[l] == MlpKind::Moe {
            let k = cfg.moe.as_ref().unwrap().num_experts_per_token;
            let per_token: Vec<usize> = (0..3 * k).map(|i| (l * 5 + i * 3) % 16).collect();
            let mut order: Vec<usize> = Vec::new();
            for &e in &per_token {
                if !order.contains(&e) {
                    order.push(e);
                }
            }
            s.chunk_experts_selected(l, &per_token, k, &order);
            for &e in &order {
                let a = s.expert(l, e).unwrap();
                let b = r.expert(l, e).unwrap();
                assert_eq!(
                    mat_bytes(&a.w1),
                    mat_bytes(&b.w1),
                    "chunk: layer {l} expert {e} w1"
                );
                assert_eq!(mat_bytes(&a.w2), mat_bytes(&b.w2));
                assert_eq!(mat_bytes(&a.w3), mat_bytes(&b.w3));
            }
        }
        s.end_layer(l);
    }
}

#[test]
fn bytes_equal_resident_store_at_every_setting() {
    let dir = tiny();
    let cfg = load_config(dir).unwrap();
    let ck = Checkpoint::open(dir).unwrap();
    let r = ResidentStore::open(&cfg, &ck).unwrap();
    let mut checked = 0;
    for io in [IoMode::Direct, IoMode::Buffered, IoMode::Mmap] {
        for prefetch in [Prefetch::None, Prefetch::NextLayer] {
            let floor = plan_unchecked(&cfg, &ck, 0, io, prefetch, arena(&cfg, 256, 1))
                .unwrap()
                .floor_bytes;
            let model = ck.total_bytes();
            for budget in [floor, 2 * floor, floor + model / 4, floor + model] {
                for cache in [CachePolicy::Lru, CachePolicy::Lfru] {
                    let s = StreamingStore::open(
                        &cfg,
                        &ck,
                        opts(budget, io, prefetch, cache),
                        arena(&cfg, 256, 1),
                    )
                    .unwrap();
                    walk_and_compare(&s, &r, dir);
                    walk_chunk_and_compare(&s, &r, dir);
                    let m = s.metrics();
                    assert_eq!(m.budget_overflows, 0, "{io:?} {prefetch:?} budget {budget}");
                    assert!(
                        m.peak_accounted_bytes <= budget,
                        "accounted {} > budget {budget}",
                        m.peak_accounted_bytes
                    );
                    assert!(
                        m.verified_tensors > 0 || s.plan().pinned_layers == cfg.num_hidden_layers
                    );
                    checked += 1;
                }
            }
        }
    }
    assert_eq!(checked, 48);
}

#[test]
fn floor_budget_streams_and_full_budget_does_not() {
    let dir = tiny();
    let cfg = load_config(dir).unwrap();
    let ck = Checkpoint::open(dir).unwrap();
    let r = ResidentStore::open(&cfg, &ck).unwrap();
    let floor = plan_unchecked(
        &cfg,
        &ck,
        0,
        IoMode::Buffered,
        Prefetch::None,
        arena(&cfg, 256, 1),
    )
    .unwrap()
    .floor_bytes;
    let s = StreamingStore::open(
        &cfg,
        &ck,
        opts(floor, IoMode::Buffered, Prefetch::None, CachePolicy::Lru),
        arena(&cfg, 256, 1),
    )
    .unwrap();
    walk_and_compare(&s, &r, dir);
    let m = s.metrics();
    assert!(m.trunk_bytes_read > 0);
    assert!(m.trunk_hit_rate() < 1.0);
    let s = StreamingStore::open(
        &cfg,
        &ck,
        opts(
            floor + 2 * ck.total_bytes(),
            IoMode::Buffered,
            Prefetch::None,
            CachePolicy::Lru,
        ),
        arena(&cfg, 256, 1),
    )
    .unwrap();
    walk_and_compare(&s, &r, dir);
    let m = s.metrics();
    assert_eq!(
        m.trunk_bytes_read, 0,
        "everything pinned: no trunk streaming"
    );
    assert_eq!(m.trunk_hit_rate(), 1.0);
}

#[test]
fn budget_under_floor_is_refused_with_the_floor() {
    let dir = tiny();
    let cfg = load_config(dir).unwrap();
    let ck = Checkpoint::open(dir).unwrap();
    let err = StreamingStore::open(
        &cfg,
        &ck,
        opts(1 << 20, IoMode::Direct, Prefetch::None, CachePolicy::Lru),
        arena(&cfg, 256, 1),
    )
    .err()
    .unwrap();
    let msg = format!("{err:#}");
    assert!(msg.contains("below the floor"), "{msg}");
    assert!(msg.contains("trunk slot"), "{msg}");
    assert!(
        matches!(
            memdial::util::error::usage_error(&err),
            Some(memdial::util::error::UsageError::BelowFloor { .. })
        ),
        "{msg}"
    );
}

#[test]
fn corrupted_bytes_are_caught_by_verify_reads_and_truncation_names_file_and_offset() {
    let src = tiny();
    let d = testkit::scratch!("stream-fault");
    for e in fs::read_dir(src).unwrap() {
        let e = e.unwrap();
        fs::copy(e.path(), d.join(e.file_name())).unwrap();
    }
    let cfg = load_config(&d).unwrap();
    let ck = Checkpoint::open(&d).unwrap();
    // Flip one byte inside expert 3 of layer 1.
    let name = "language_model.model.layers.1.block_sparse_moe.experts.3.w2.weight_packed";
    let loc = ck.get(name).unwrap().clone();
    let path = ck.shards[loc.shard].path.clone();
    let mut bytes = fs::read(&path).unwrap();
    bytes[loc.offset as usize + 5] ^= 0xFF;
    fs::write(&path, &bytes).unwrap();
    let ck = Checkpoint::open(&d).unwrap();
    let floor = plan_unchecked(
        &cfg,
        &ck,
        0,
        IoMode::Buffered,
        Prefetch::None,
        arena(&cfg, 256, 1),
    )
    .unwrap()
    .floor_bytes;
    let s = StreamingStore::open(
        &cfg,
        &ck,
        opts(floor, IoMode::Buffered, Prefetch::None, CachePolicy::Lru),
        arena(&cfg, 256, 1),
    )
    .unwrap();
    s.begin_token(0);
    s.begin_layer(1);
    s.experts_selected(1, &[3]);
    let msg = format!(
        "{:#}",
        s.expert(1, 3).expect_err("corruption must be detected")
    );
    assert!(
        msg.contains("experts.3.w2.weight_packed") && msg.contains("sha256"),
        "{msg}"
    );
    drop(s);
    // Truncate the shard holding the last layers: reading them names file and offset.
    let last = ck
        .get("language_model.model.layers.7.self_attn.o_proj.weight")
        .unwrap()
        .clone();
    let lpath = ck.shards[last.shard].path.clone();
    let s = StreamingStore::open(
        &cfg,
        &ck,
        opts(floor, IoMode::Buffered, Prefetch::None, CachePolicy::Lru),
        arena(&cfg, 256, 1),
    )
    .unwrap();
    fs::OpenOptions::new()
        .write(true)
        .open(&lpath)
        .unwrap()
        .set_len(last.offset)
        .unwrap();
    s.begin_token(0);
    let msg = format!(
        "{:#}",
        s.tensor(Some(7), "self_attn.o_proj.weight")
            .expect_err("truncation must be detected")
    );
    assert!(
        msg.contains(&lpath.file_name().unwrap().to_string_lossy().to_string()),
        "{msg}"
    );
    assert!(msg.contains("offset") || msg.contains("changed"), "{msg}");
    fs::remove_dir_all(&d).unwrap();
}

/// The plan's activation figure is what the model holds: a streaming run at a
/// budget ≥ the model size (floor + model bytes) prefills a prompt in planned
/// chunks and decodes, and the arena the forward used, the store's accounting of
/// it and the plan's `activation_bytes` are the same number, before and after.
#[test]
fn streaming_run_accounts_exactly_the_plans_activation_bytes() {
    use memdial::engine::generate::{generate, GenerateParams};
    use memdial::engine::loader::StoreOptions;
    use memdial::engine::sampler::SamplerConfig;
    use memdial::model::Model;
    let dir = tiny();
    let cfg = load_config(dir).unwrap();
    let ck = Checkpoint::open(dir).unwrap();
    let max_context = 64;
    for prefetch in [Prefetch::None, Prefetch::NextLayer] {
        let floor = plan_unchecked(
            &cfg,
            &ck,
            0,
            IoMode::Buffered,
            prefetch,
            arena(&cfg, max_context, 2),
        )
        .unwrap()
        .floor_bytes;
        let mut o = opts(
            floor + ck.total_bytes(),
            IoMode::Buffered,
            prefetch,
            CachePolicy::Lru,
        );
        o.max_context = max_context;
        let opened = Model::open(dir, StoreOptions::Streaming(o), 2).unwrap();
        let s = opened.streaming.unwrap();
        let planned = s.plan().activation_bytes;
        assert_eq!(
            planned,
            memdial::engine::arena::Scratch::planned_bytes(&cfg, 64, 2, max_context)
        );
        let mut st = opened.model.new_state(max_context);
        assert_eq!(st.scratch_bytes(), planned, "arena as allocated");
        let prompt: Vec<u32> = (0..40).map(|i| (i * 7 + 3) % 200).collect();
        let params = GenerateParams {
            max_tokens: 6,
            sampler: SamplerConfig {
                temperature: 0.0,
                top_p: 1.0,
                seed: 0,
            },
            stop_ids: vec![],
            keep_logits: false,
            prefill_chunk: 16,
            perturb_logit: None,
        };
        generate(&opened.model, &mut st, &prompt, &params, &mut |_| {}).unwrap();
        assert_eq!(st.scratch_bytes(), planned, "arena after prefill + decode");
        let m = s.metrics();
        assert_eq!(
            m.activation_bytes, planned,
            "{prefetch:?}: store accounting"
        );
        assert_eq!(m.budget_overflows, 0);
    }
}

#[test]
fn warm_start_fills_caches_within_budget_and_changes_no_byte() {
    let dir = tiny();
    let cfg = load_config(dir).unwrap();
    let ck = Checkpoint::open(dir).unwrap();
    let r = ResidentStore::open(&cfg, &ck).unwrap();
    let moe = cfg.moe.as_ref().unwrap();
    let moe_layers: Vec<usize> = (0..cfg.num_hidden_layers)
        .filter(|&l| cfg.mlp_kinds[l] == MlpKind::Moe)
        .collect();
    let all_experts = moe.num_experts * moe_layers.len();
    for io in [IoMode::Direct, IoMode::Buffered, IoMode::Mmap] {
        let floor = plan_unchecked(&cfg, &ck, 0, io, Prefetch::NextLayer, arena(&cfg, 256, 1))
            .unwrap()
            .floor_bytes;
        let model = ck.total_bytes();
        for budget in [floor, floor + model / 4, floor + 2 * model] {
            let s = StreamingStore::open(
                &cfg,
                &ck,
                opts(budget, io, Prefetch::NextLayer, CachePolicy::Lru),
                arena(&cfg, 256, 1),
            )
            .unwrap();
            let cap = s.plan().expert_cache_experts;
            let w = s.warm_fill().unwrap();
            assert_eq!(w.experts, cap.min(all_experts), "{io:?} {budget}");
            assert!(w.bytes > 0 || (cap == 0 && s.plan().trunk_slots == 0));
            // The fill is counted apart: the store's counters start from zero.
            let m = s.metrics();
            assert_eq!((m.bytes_read, m.reads), (0, 0), "{io:?} {budget}");
            assert!(m.peak_accounted_bytes <= budget);
            walk_and_compare(&s, &r, dir);
            let m = s.metrics();
            assert_eq!(m.budget_overflows, 0);
            assert!(m.peak_accounted_bytes <= budget);
            if cap >= all_experts {
                // Every expert cached: every request hits and no expert byte is read.
                assert_eq!(m.expert_hits, m.expert_requests, "{io:?} {budget}");
                assert_eq!(m.expert_bytes_read, 0, "{io:?} {budget}");
            }
        }
    }
}
