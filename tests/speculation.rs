//! Exact speculation cannot change the answer: `generate_speculative` gives the
//! ids (and logits) of plain `generate` with the same prompt and settings, across
//! draft lengths K = 1, 2, 4, 8, both draft sources, greedy and seeded sampling,
//! the resident store and a streamed floor in every IO mode and prefetch policy;
//! a rejected draft at every position of the output is rolled back exactly (the
//! final KDA states and MLA latents are bit-identical to plain decoding's); stop
//! ids, `max_tokens` and the context end stop where plain decoding stops; the
//! recorded trace keeps the accepted positions only.
//!
//! The oracle is plain decoding itself (one forward per token; its own correctness
//! is checked against mlx-lm and transformers in `engine_oracles`): what is tested
//! here is that speculation changes no bit. The draft-source and parser cases are
//! derived by hand.

use std::path::{Path, PathBuf};

use memdial::engine::arena::Scratch;
use memdial::engine::generate::{generate, GenerateOutput, GenerateParams};
use memdial::engine::loader::{Opened, StoreOptions};
use memdial::engine::sampler::SamplerConfig;
use memdial::engine::speculate::{generate_speculative, ngram_lookup, Draft, SpecStats, Speculate};
use memdial::format::checkpoint::Checkpoint;
use memdial::format::config::load_config;
use memdial::io::IoMode;
use memdial::model::{LayerState, Model, State};
use memdial::store::eviction::CachePolicy;
use memdial::store::plan::{plan_unchecked, Prefetch, Sequences};
use memdial::store::streaming::StreamOptions;
use memdial_testkit as testkit;

const MAX_CONTEXT: usize = 80;
const KS: [usize; 4] = [1, 2, 4, 8];

/// Fixture `name` generated once per test binary, on disk (direct IO needs a real fs).
fn fixture(name: &'static str) -> PathBuf {
    testkit::fixtures::shared(name, || {
        let d = testkit::until_exit(testkit::scratch!("speculation")).join(name);
        memdial::tools::fixture::generate(name, 0, &d, false, None, &mut |_, _| {}).unwrap();
        d
    })
}

fn prompt(vocab: usize, len: usize) -> Vec<u32> {
    (0..len).map(|j| ((j * 37 + 11) % vocab) as u32).collect()
}

/// Greedy, and seeded temperature / top-p sampling.
fn settings() -> [SamplerConfig; 2] {
    [
        SamplerConfig::default(),
        SamplerConfig {
            temperature: 0.8,
            top_p: 0.9,
            seed: 1234,
        },
    ]
}

fn params(sampler: SamplerConfig, max_tokens: usize) -> GenerateParams {
    GenerateParams {
        max_tokens,
        sampler,
        stop_ids: vec![],
        keep_logits: false,
        prefill_chunk: 5,
        perturb_logit: None,
    }
}

/// Plain decoding: the ids and the final state.
fn plain(model: &Model, prompt: &[u32], p: &GenerateParams) -> (GenerateOutput, State) {
    let mut st = model.new_state(MAX_CONTEXT);
    let o = generate(model, &mut st, prompt, p, &mut |_| {}).unwrap();
    (o, st)
}

/// Speculative decoding with `draft` on a state sized for it.
fn spec(
    model: &Model,
    prompt: &[u32],
    p: &GenerateParams,
    draft: &Draft,
) -> (GenerateOutput, SpecStats, State) {
    let mut st = model.new_state_for_speculation(MAX_CONTEXT, 16, draft.k());
    let mut streamed = Vec::new();
    let (o, s) =
        generate_speculative(model, &mut st, prompt, p, draft, &mut |t| streamed.push(t)).unwrap();
    assert_eq!(
        streamed, o.output_ids,
        "on_token sees every id once, in order"
    );
    assert_eq!(
        o.decode_s.len(),
        o.output_ids.len() - 1,
        "one time per token"
    );
    (o, s, st)
}

/// The states hold the same bits: position, KDA conv + recurrent states, MLA latents.
fn assert_same_state(a: &State, b: &State, what: &str) {
    assert_eq!(a.pos, b.pos, "{what}: position");
    for (i, (x, y)) in a.layers.iter().zip(&b.layers).enumerate() {
        match (x, y) {
            (LayerState::Kda(x), LayerState::Kda(y)) => {
                let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
                assert!(
                    bits(&x.conv) == bits(&y.conv),
                    "{what}: layer {i} conv state"
                );
                assert!(
                    bits(&x.s) == bits(&y.s),
                    "{what}: layer {i} recurrent state"
                );
            }
            (LayerState::Mla(x), LayerState::Mla(y)) => {
                assert_eq!(x.len, y.len, "{what}: layer {i} cached positions");
                let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
                assert!(
                    bits(&x.latents) == bits(&y.latents),
                    "{what}: layer {i} latents"
                );
            }
            _ => panic!("{what}: layer {i} kinds differ"),
        }
    }
}

/// The store at the plan's floor for a speculative run with drafts of up to `k`.
fn streamed(
    dir: &Path,
    io: IoMode,
    prefetch: Prefetch,
    k: usize,
    trace: Option<(PathBuf, bool)>,
) -> Opened {
    let cfg = load_config(dir).unwrap();
    let ck = Checkpoint::open(dir).unwrap();
    let mut act = Scratch::activations(&cfg, Sequences::single(MAX_CONTEXT), 2);
    act.bytes +=
        memdial::engine::speculate::speculation_bytes(&cfg, act.step_tokens, 2, MAX_CONTEXT, k);
    let floor = plan_unchecked(&cfg, &ck, 0, io, prefetch, act)
        .unwrap()
        .floor_bytes;
    let (record_trace, trace) = match trace {
        Some((p, true)) => (Some(p), None),
        Some((p, false)) => (None, Some(p)),
        None => (None, None),
    };
    let opts = StreamOptions {
        budget: floor,
        io,
        prefetch,
        cache: CachePolicy::Lru,
        max_context: MAX_CONTEXT,
        io_threads: 2,
        record_trace,
        trace,
        verify_reads: false,
    };
    Model::open_speculative(dir, StoreOptions::Streaming(opts), 2, k).unwrap()
}

#[test]
fn speculation_gives_the_plain_ids_across_k_sources_and_sampling() {
    for name in ["tiny-k3", "tiny-linear"] {
        let dir = fixture(name);
        let model = Model::load(&dir, 2).unwrap();
        let vocab = model.config().vocab_size;
        for (len, sampler) in [9, 1].into_iter().zip(settings()) {
            let pr = prompt(vocab, len);
            let mut p = params(sampler, 30);
            p.keep_logits = true;
            let (want, want_state) = plain(&model, &pr, &p);
            for k in KS {
                for draft in [
                    Draft::Ngram { k },
                    Draft::Replay {
                        ids: want.output_ids.clone(),
                        k,
                    },
                ] {
                    let what = format!("{name} {sampler:?} {draft:?}");
                    let (got, stats, st) = spec(&model, &pr, &p, &draft);
                    assert_eq!(got.output_ids, want.output_ids, "{what}");
                    let (a, b) = (got.logits.unwrap(), want.logits.clone().unwrap());
                    assert!(
                        a.len() == b.len()
                            && a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()),
                        "{what}: logits"
                    );
                    assert_same_state(&st, &want_state, &what);
                    let emitted = got.output_ids.len() as u64 - 1;
                    assert_eq!(emitted, stats.forwards + stats.accepted_tokens, "{what}");
                    if let Draft::Replay { .. } = draft {
                        // The ceiling: every draft accepted, K + 1 ids per forward
                        // (the last forward cut to the ids left).
                        assert_eq!(stats.accepted_tokens, stats.drafted_tokens, "{what}");
                        assert_eq!(stats.forwards, emitted.div_ceil(k as u64 + 1), "{what}");
                    }
                }
            }
        }
    }
}

#[test]
fn a_rejected_draft_at_every_position_is_rolled_back_exactly() {
    for name in ["tiny-k3", "tiny-linear"] {
        let dir = fixture(name);
        let model = Model::load(&dir, 1).unwrap();
        let vocab = model.config().vocab_size;
        for sampler in settings() {
            let pr = prompt(vocab, 6);
            let p = params(sampler, 14);
            let (want, want_state) = plain(&model, &pr, &p);
            // A wrong id is drafted unless the pass before emitted that position as
            // its sampled (bonus) id; with K drafts per pass at least one position in K + 1 is drafted.
            let mut rejected = [0usize; KS.len()];
            for j in 0..want.output_ids.len() {
                let mut ids = want.output_ids.clone();
                ids[j] = (ids[j] + 1) % vocab as u32;
                for (ki, k) in KS.into_iter().enumerate() {
                    let what = format!("{name} {sampler:?} wrong id at {j}, K={k}");
                    let draft = Draft::Replay {
                        ids: ids.clone(),
                        k,
                    };
                    let (got, stats, st) = spec(&model, &pr, &p, &draft);
                    assert_eq!(got.output_ids, want.output_ids, "{what}");
                    assert_same_state(&st, &want_state, &what);
                    rejected[ki] += usize::from(stats.accepted_tokens < stats.drafted_tokens);
                }
            }
            for (ki, r) in rejected.iter().enumerate() {
                let least = (want.output_ids.len() - 1) / (KS[ki] + 1);
                assert!(*r >= least, "{name} K={}: {r} rejections", KS[ki]);
            }
        }
    }
}

#[test]
fn stop_ids_max_tokens_and_the_context_end_stop_where_plain_decoding_stops() {
    let dir = fixture("tiny-k3");
    let model = Model::load(&dir, 1).unwrap();
    let vocab = model.config().vocab_size;
    let pr = prompt(vocab, 7);
    for sampler in settings() {
        let (free, _) = plain(&model, &pr, &params(sampler, 24));
        // A stop id accepted as a draft, at every position.
        for j in 1..free.output_ids.len() {
            let mut p = params(sampler, 24);
            p.stop_ids = vec![free.output_ids[j]];
            let (want, want_state) = plain(&model, &pr, &p);
            assert!(want.stopped);
            for k in [2, 4, 8] {
                let draft = Draft::Replay {
                    ids: free.output_ids.clone(),
                    k,
                };
                let (got, _, st) = spec(&model, &pr, &p, &draft);
                assert_eq!(got.output_ids, want.output_ids, "stop at {j}, K={k}");
                assert!(got.stopped);
                assert_same_state(&st, &want_state, &format!("stop at {j}, K={k}"));
            }
        }
        // max_tokens reached inside a forward.
        for m in 1..=13 {
            let p = params(sampler, m);
            let (want, want_state) = plain(&model, &pr, &p);
            for k in [4, 8] {
                let draft = Draft::Replay {
                    ids: free.output_ids.clone(),
                    k,
                };
                let (got, stats, st) = spec(&model, &pr, &p, &draft);
                assert_eq!(got.output_ids, want.output_ids, "max_tokens {m}, K={k}");
                assert_eq!(
                    stats.accepted_tokens, stats.drafted_tokens,
                    "drafts cut to the ids left"
                );
                assert_same_state(&st, &want_state, &format!("max_tokens {m}"));
            }
        }
    }
    // The context end: drafts are cut to the room left, and a run that plain
    // decoding cannot finish fails the same way.
    let long = prompt(vocab, MAX_CONTEXT - 5);
    let p = params(SamplerConfig::default(), 6);
    let (want, _) = plain(&model, &long, &p);
    let draft = Draft::Replay {
        ids: want.output_ids.clone(),
        k: 8,
    };
    let (got, stats, _) = spec(&model, &long, &p, &draft);
    assert_eq!(got.output_ids, want.output_ids);
    assert_eq!(stats.accepted_tokens, stats.drafted_tokens);
    let p = params(SamplerConfig::default(), 7);
    let mut st = model.new_state(MAX_CONTEXT);
    let e = generate(&model, &mut st, &long, &p, &mut |_| {}).unwrap_err();
    let mut st = model.new_state_for_speculation(MAX_CONTEXT, 16, 8);
    let e2 = generate_speculative(&model, &mut st, &long, &p, &draft, &mut |_| {}).unwrap_err();
    assert!(format!("{e:#}").contains("context overflow"), "{e:#}");
    assert_eq!(format!("{e:#}"), format!("{e2:#}"));
}

#[test]
fn streamed_floor_in_every_io_mode_and_prefetch_policy_gives_the_plain_ids() {
    for name in ["tiny-k3", "tiny-linear"] {
        let dir = fixture(name);
        let resident = Model::load(&dir, 2).unwrap();
        let vocab = resident.config().vocab_size;
        let pr = prompt(vocab, 11);
        for sampler in settings() {
            let p = params(sampler, 20);
            let (want, want_state) = plain(&resident, &pr, &p);
            let mut bad = want.output_ids.clone();
            bad[7] = (bad[7] + 1) % vocab as u32;
            for (io, prefetch) in [
                (IoMode::Direct, Prefetch::NextLayer),
                (IoMode::Buffered, Prefetch::Lookahead),
                (IoMode::Mmap, Prefetch::None),
            ] {
                for k in [1, 4] {
                    let opened = streamed(&dir, io, prefetch, k, None);
                    let s = opened.streaming.as_ref().unwrap();
                    assert!(
                        s.plan().pinned_groups < s.plan().groups.len(),
                        "{name}: the floor streams"
                    );
                    for draft in [
                        Draft::Ngram { k },
                        Draft::Replay {
                            ids: bad.clone(),
                            k,
                        },
                    ] {
                        let what = format!("{name} {io:?} {prefetch:?} {draft:?}");
                        let (got, _, st) = spec(&opened.model, &pr, &p, &draft);
                        assert_eq!(got.output_ids, want.output_ids, "{what}");
                        assert_same_state(&st, &want_state, &what);
                    }
                    assert_eq!(s.metrics().budget_overflows, 0, "{name} {io:?} K={k}");
                }
            }
        }
    }
}

/// The routing rows of a trace (sorted: a verification pass writes layer by layer).
fn routing(path: &Path) -> Vec<(usize, usize, Vec<usize>)> {
    let t = memdial::store::trace::read_full(path).unwrap();
    let mut r: Vec<_> = t
        .records
        .iter()
        .map(|r| (r.token, r.layer, r.experts.clone()))
        .collect();
    r.sort();
    r
}

#[test]
fn the_trace_records_accepted_positions_only_and_oracle_prefetch_replays_it() {
    let dir = fixture("tiny-k3");
    let tmp = testkit::until_exit(testkit::scratch!("speculation-trace"));
    std::fs::create_dir_all(&tmp).unwrap();
    let vocab = load_config(&dir).unwrap().vocab_size;
    let pr = prompt(vocab, 8);
    let p = params(SamplerConfig::default(), 18);
    let plain_trace = tmp.join("plain.jsonl");
    let want = {
        let o = streamed(
            &dir,
            IoMode::Buffered,
            Prefetch::NextLayer,
            0,
            Some((plain_trace.clone(), true)),
        );
        let (w, _) = plain(&o.model, &pr, &p);
        o.streaming.as_ref().unwrap().finish().unwrap();
        w
    };
    let mut bad = want.output_ids.clone();
    bad[5] = (bad[5] + 1) % vocab as u32;
    bad[11] = (bad[11] + 1) % vocab as u32;
    let spec_trace = tmp.join("spec.jsonl");
    {
        let o = streamed(
            &dir,
            IoMode::Buffered,
            Prefetch::NextLayer,
            4,
            Some((spec_trace.clone(), true)),
        );
        let draft = Draft::Replay {
            ids: bad.clone(),
            k: 4,
        };
        let (got, stats, _) = spec(&o.model, &pr, &p, &draft);
        assert_eq!(got.output_ids, want.output_ids);
        assert!(stats.accepted_tokens < stats.drafted_tokens);
        o.streaming.as_ref().unwrap().finish().unwrap();
    }
    // The last id is sampled, never fed: positions 0 … prompt + 16.
    let r = routing(&spec_trace);
    assert_eq!(r, routing(&plain_trace));
    let last = r.iter().map(|x| x.0).max().unwrap();
    assert_eq!(last, pr.len() + want.output_ids.len() - 2);
    // Every forward line's ids are the tokens that stayed, at their positions.
    let t = memdial::store::trace::read_full(&spec_trace).unwrap();
    let mut fed: Vec<usize> = Vec::new();
    for f in &t.forwards {
        assert_eq!(f.forward, fed.len(), "forwards are contiguous");
        fed.extend(&f.ids);
    }
    let mut all: Vec<usize> = pr.iter().map(|&x| x as usize).collect();
    all.extend(
        want.output_ids[..want.output_ids.len() - 1]
            .iter()
            .map(|&x| x as usize),
    );
    assert_eq!(fed, all);
    // Oracle prefetch (hints for one-token forwards) replaying the plain trace.
    let o = streamed(
        &dir,
        IoMode::Buffered,
        Prefetch::Oracle,
        4,
        Some((plain_trace, false)),
    );
    let draft = Draft::Replay { ids: bad, k: 4 };
    let (got, _, _) = spec(&o.model, &pr, &p, &draft);
    assert_eq!(got.output_ids, want.output_ids);
}

/// Prompt lookup, by hand: the most recent earlier occurrence of the longest
/// matching suffix (3, then 2, then 1 ids) and the ids after it.
#[test]
fn ngram_lookup_proposes_what_followed_the_latest_match() {
    // Suffix [1, 2, 3] occurs at 0: propose what followed it, [9, 1, 2, 3] cut to K.
    assert_eq!(ngram_lookup(&[1, 2, 3, 9, 1, 2, 3], 4), vec![9, 1, 2, 3]);
    assert_eq!(ngram_lookup(&[1, 2, 3, 9, 1, 2, 3], 2), vec![9, 1]);
    // Two earlier [5, 6]: the later one (at 3) wins, followed by [8, 5, 6].
    assert_eq!(ngram_lookup(&[5, 6, 7, 5, 6, 8, 5, 6], 8), vec![8, 5, 6]);
    // No 3- or 2-gram match; the 1-gram [4] last occurs at 2, followed by [7, 4].
    assert_eq!(ngram_lookup(&[4, 1, 4, 7, 4], 3), vec![7, 4]);
    // Nothing matches, or too little history.
    assert!(ngram_lookup(&[1, 2, 3, 4], 4).is_empty());
    assert!(ngram_lookup(&[1], 4).is_empty());
    assert!(ngram_lookup(&[1, 1], 0).is_empty());
    // Replay proposes by output position.
    let r = Draft::Replay {
        ids: vec![10, 11, 12, 13],
        k: 2,
    };
    assert_eq!(r.propose(&[0, 10], 1, 8), vec![11, 12]);
    assert_eq!(r.propose(&[0, 10], 3, 8), vec![13]);
    assert_eq!(r.propose(&[0, 10], 1, 1), vec![11]);
}

#[test]
fn the_speculate_flag_parses_k_after_the_last_colon_and_names_bad_values() {
    assert_eq!(Speculate::parse("off").unwrap(), Speculate::Off);
    assert_eq!(
        Speculate::parse("ngram:4").unwrap(),
        Speculate::Ngram { k: 4 }
    );
    assert_eq!(
        Speculate::parse("replay:a:b/ids.txt:8").unwrap(),
        Speculate::Replay {
            path: "a:b/ids.txt".into(),
            k: 8
        }
    );
    for (bad, why) in [
        ("ngram", "no draft length"),
        ("ngram:0", "out of range"),
        ("ngram:65", "out of range"),
        ("ngram:x", "is not a number"),
        ("replay::4", "no ids file"),
        ("replay:4", "unknown draft source"),
        ("lookup:4", "unknown draft source"),
        ("", "no draft length"),
    ] {
        let e = Speculate::parse(bad).unwrap_err().to_string();
        assert!(
            e.contains(why) && e.contains(&format!("{bad:?}")),
            "{bad}: {e}"
        );
        assert!(memdial::util::error::usage_error(&Speculate::parse(bad).unwrap_err()).is_some());
    }
}

/// The memory a speculative run adds, by hand for `mini` (hidden 1024, vocab 33024;
/// 9 KDA layers of 8 heads × 128, conv width 4) at K = 4: per KDA layer the state copy
/// 3·3·1024 + 8·128² = 140,288 f32, the 5 rows' projections 5·(4·1024 + 8) = 20,520,
/// the conv weights, `dt_bias` and `A_log` 3·1024·4 + 1024 + 8 = 13,320: 174,128 f32 ×
/// 4 B × 9 layers = 6,268,608 B; the arena's 4 more logit rows 4·33024·4 = 528,384 B,
/// its `lm_head` row-block buffer 5·33024·4 = 660,480 B and 5 logit row ids (40 B).
#[test]
fn the_plan_counts_the_restore_point_and_the_logit_rows() {
    let j = memdial::tools::fixture::preset("mini").unwrap().config;
    let cfg = memdial::format::config::ModelConfig::from_json_str(&j.to_string()).unwrap();
    assert_eq!(
        memdial::model::rewind::Rewind::planned_bytes(&cfg, 5),
        6_268_608
    );
    let want = 6_268_608 + 528_384 + 660_480 + 40;
    assert_eq!(
        memdial::engine::speculate::speculation_bytes(&cfg, 64, 2, 64, 4),
        want
    );
    assert_eq!(
        memdial::engine::speculate::speculation_bytes(&cfg, 64, 2, 64, 0),
        0
    );
}
