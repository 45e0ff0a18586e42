//! The lossless streamed layout decodes to the same bits: output ids and every logit of
//! a packed checkpoint equal those of its safetensors source (resident store as the
//! reference) on `tiny-k3` and `tiny-linear`, at several budgets, direct and buffered IO,
//! every prefetch policy; a corrupt block, a stale pack and mmap are clear errors.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use memdial::engine::arena::Scratch;
use memdial::engine::generate::{generate, GenerateParams};
use memdial::engine::loader::StoreOptions;
use memdial::engine::sampler::SamplerConfig;
use memdial::format::checkpoint::Checkpoint;
use memdial::format::config::load_config;
use memdial::io::IoMode;
use memdial::model::Model;
use memdial::store::eviction::CachePolicy;
use memdial::store::plan::{plan_unchecked, Prefetch, Sequences};
use memdial::store::streaming::StreamOptions;
use memdial_testkit as testkit;

const MAX_CONTEXT: usize = 64;
const PROMPT: [u32; 10] = [5, 17, 300, 2047, 0, 9, 1200, 64, 3, 1999];

/// Fixture `preset` and its packed copy, generated once per test binary.
fn pair(preset: &'static str) -> (PathBuf, PathBuf) {
    static K3: OnceLock<(PathBuf, PathBuf)> = OnceLock::new();
    static LINEAR: OnceLock<(PathBuf, PathBuf)> = OnceLock::new();
    let cell = if preset == "tiny-k3" { &K3 } else { &LINEAR };
    cell.get_or_init(|| {
        let base = testkit::until_exit(testkit::scratch!("lossless"));
        let src = base.join(preset);
        memdial::tools::fixture::generate(preset, 0, &src, false, None, &mut |_, _| {}).unwrap();
        let out = base.join(format!("{preset}-lossless"));
        let r = memdial::tools::pack::pack_checkpoint(&src, Some(&out), &mut |_, _| {}).unwrap();
        assert!(r.packed_tensors > 0 && r.verified_tensors == r.packed_tensors);
        (src, out)
    })
    .clone()
}

struct Out {
    ids: Vec<u32>,
    logits: Vec<f32>,
}

fn params() -> GenerateParams {
    GenerateParams {
        max_tokens: 5,
        sampler: SamplerConfig {
            temperature: 0.0,
            top_p: 1.0,
            seed: 0,
        },
        stop_ids: vec![],
        keep_logits: true,
        prefill_chunk: 4,
        perturb_logit: None,
    }
}

fn run(dir: &Path, store: StoreOptions) -> Out {
    let opened = Model::open(dir, store, 1).unwrap();
    let mut st = opened.model.new_state(MAX_CONTEXT);
    let g = generate(&opened.model, &mut st, &PROMPT, &params(), &mut |_| {}).unwrap();
    if let Some(s) = &opened.streaming {
        s.finish().unwrap();
        let m = s.metrics();
        assert_eq!(m.budget_overflows, 0, "{}", dir.display());
        // A packed directory's trunk came through the decoder (at open or streamed).
        let packed = Checkpoint::open(dir).unwrap().lossless.is_some();
        assert_eq!(m.lossless_decoded_bytes > 0, packed, "{}", dir.display());
    }
    Out {
        ids: g.output_ids,
        logits: g.logits.unwrap(),
    }
}

fn opts(budget: u64, io: IoMode, prefetch: Prefetch, trace: Option<PathBuf>) -> StreamOptions {
    StreamOptions {
        budget,
        io,
        prefetch,
        cache: CachePolicy::Lru,
        max_context: MAX_CONTEXT,
        io_threads: 2,
        record_trace: None,
        trace,
        verify_reads: true,
    }
}

fn same(a: &Out, b: &Out) -> bool {
    a.ids == b.ids
        && a.logits.len() == b.logits.len()
        && a.logits
            .iter()
            .zip(&b.logits)
            .all(|(x, y)| x.to_bits() == y.to_bits())
}

/// The activation arena of one sequence of `MAX_CONTEXT` positions on one thread.
fn one(cfg: &memdial::format::config::ModelConfig) -> memdial::store::plan::Activations {
    Scratch::activations(cfg, Sequences::single(MAX_CONTEXT), 1)
}

fn floor(dir: &Path, io: IoMode, prefetch: Prefetch) -> u64 {
    let cfg = load_config(dir).unwrap();
    let ck = Checkpoint::open(dir).unwrap();
    plan_unchecked(&cfg, &ck, 0, io, prefetch, one(&cfg))
        .unwrap()
        .floor_bytes
}

fn layouts_agree(preset: &'static str) {
    let (src, packed) = pair(preset);
    let reference = run(&src, StoreOptions::Resident);
    assert!(reference.logits.iter().all(|x| x.is_finite()));
    // The resident store decodes a pack at open.
    assert!(
        same(&run(&packed, StoreOptions::Resident), &reference),
        "{preset} resident"
    );
    // A trace for the oracle policy, recorded on the source.
    let trace = src.parent().unwrap().join(format!("{preset}.trace.jsonl"));
    let mut rec = opts(u64::MAX / 4, IoMode::Buffered, Prefetch::NextLayer, None);
    rec.record_trace = Some(trace.clone());
    run(&src, StoreOptions::Streaming(rec));
    let model_bytes = Checkpoint::open(&src).unwrap().total_bytes();
    let mut cases = 0;
    for io in [IoMode::Direct, IoMode::Buffered] {
        for prefetch in Prefetch::ALL {
            // Equal budgets for both layouts: the larger floor, a quarter of the model
            // above it (part of the trunk pinned), and everything pinned.
            let f = floor(&src, io, prefetch).max(floor(&packed, io, prefetch));
            for budget in [f, f + model_bytes / 4, f + 2 * model_bytes] {
                let t = (prefetch == Prefetch::Oracle).then(|| trace.clone());
                for dir in [&src, &packed] {
                    let o = run(
                        dir,
                        StoreOptions::Streaming(opts(budget, io, prefetch, t.clone())),
                    );
                    assert!(
                        same(&o, &reference),
                        "{} differs: {io:?} {prefetch:?} budget {budget}",
                        dir.display()
                    );
                    cases += 1;
                }
            }
        }
    }
    assert_eq!(cases, 2 * 4 * 3 * 2);
}

#[test]
fn tiny_k3_layouts_are_bit_identical() {
    layouts_agree("tiny-k3");
}

#[test]
fn tiny_linear_layouts_are_bit_identical() {
    layouts_agree("tiny-linear");
}

#[test]
fn dict15_codec_is_bit_identical() {
    // The faster, larger kind only (the default packs mostly 3-bit planes).
    let (src, _) = pair("tiny-k3");
    let out = src.parent().unwrap().join("tiny-k3-dict15");
    memdial::tools::pack::pack_checkpoint_with(
        &src,
        Some(&out),
        memdial::format::lossless::codec::Codec::Dict15,
        &mut |_, _| {},
    )
    .unwrap();
    let reference = run(&src, StoreOptions::Resident);
    for io in [IoMode::Direct, IoMode::Buffered] {
        for prefetch in [Prefetch::None, Prefetch::NextLayer] {
            let f = floor(&src, io, prefetch).max(floor(&out, io, prefetch));
            let o = run(&out, StoreOptions::Streaming(opts(f, io, prefetch, None)));
            assert!(same(&o, &reference), "dict15 {io:?} {prefetch:?}");
        }
    }
}

#[test]
fn raw_control_is_bit_identical_and_stores_every_block_raw() {
    // `memdial pack --raw`: the lossless layout's blocks, every one stored as it is.
    let (src, _) = pair("tiny-k3");
    let out = src.parent().unwrap().join("tiny-k3-raw");
    let r = memdial::tools::pack::pack_checkpoint_with(
        &src,
        Some(&out),
        memdial::format::lossless::codec::Codec::Raw,
        &mut |_, _| {},
    )
    .unwrap();
    assert_eq!(r.codec, "raw");
    assert!(r.packed_tensors > 0 && r.verified_tensors == r.packed_tensors);
    for c in r.classes.iter().filter(|c| c.packed) {
        assert_eq!(
            c.raw_blocks, c.blocks,
            "{}: a coded block in the raw control",
            c.class
        );
        // Raw blocks hold the tensor bytes themselves: nothing saved (padding aside).
        assert!(c.stored_bytes >= c.bytes, "{}", c.class);
    }
    let reference = run(&src, StoreOptions::Resident);
    assert!(
        same(&run(&out, StoreOptions::Resident), &reference),
        "raw resident"
    );
    for io in [IoMode::Direct, IoMode::Buffered] {
        for prefetch in [Prefetch::None, Prefetch::NextLayer] {
            let f = floor(&src, io, prefetch).max(floor(&out, io, prefetch));
            let o = run(&out, StoreOptions::Streaming(opts(f, io, prefetch, None)));
            assert!(same(&o, &reference), "raw {io:?} {prefetch:?}");
        }
    }
}

#[test]
fn packed_floor_adds_exactly_the_staging_buffers() {
    let (src, packed) = pair("tiny-k3");
    let cfg = load_config(&src).unwrap();
    let ck = Checkpoint::open(&packed).unwrap();
    let p = plan_unchecked(
        &cfg,
        &ck,
        0,
        IoMode::Buffered,
        Prefetch::NextLayer,
        one(&cfg),
    )
    .unwrap();
    let pack = ck.lossless.as_ref().unwrap();
    assert_eq!(
        p.staging_bytes,
        3 * memdial::format::lossless::read::staging_buffer_bytes(&pack.index)
    );
    let s = plan_unchecked(
        &cfg,
        &Checkpoint::open(&src).unwrap(),
        0,
        IoMode::Buffered,
        Prefetch::NextLayer,
        one(&cfg),
    )
    .unwrap();
    assert_eq!(s.staging_bytes, 0);
    // Buffered IO has no alignment slack, and packed tensors keep their decoded sizes,
    // so apart from the staging buffers the floors differ only in what a slot holds
    // besides its tensors: logical 4096-byte padding (packed) or small tensors read
    // in coalesced gaps (safetensors), a few pages per slot.
    let rest = p.floor_bytes - p.staging_bytes;
    assert!(
        rest.abs_diff(s.floor_bytes) < 64 * 4096,
        "{rest} vs {}",
        s.floor_bytes
    );
}

#[test]
fn mmap_on_a_packed_layout_is_refused() {
    let (_, packed) = pair("tiny-k3");
    let e = Model::open(
        &packed,
        StoreOptions::Streaming(opts(u64::MAX / 4, IoMode::Mmap, Prefetch::None, None)),
        1,
    )
    .err()
    .unwrap();
    let msg = format!("{e:#}");
    assert!(msg.contains("mmap is n/a on a packed"), "{msg}");
    assert!(memdial::util::error::usage_error(&e).is_some());
}

/// A copy of the packed directory of tiny-k3 in a fresh scratch dir.
fn packed_copy(tag: &str) -> PathBuf {
    let (_, packed) = pair("tiny-k3");
    let d = testkit::until_exit(testkit::scratch!(tag)).join("p");
    std::fs::create_dir_all(&d).unwrap();
    for e in std::fs::read_dir(&packed).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), d.join(e.file_name())).unwrap();
    }
    d
}

#[test]
fn a_corrupt_block_is_detected() {
    let d = packed_copy("lossless-corrupt");
    let ck = Checkpoint::open(&d).unwrap();
    let pack = ck.lossless.as_ref().unwrap();
    // One byte of the first block of the first layer-0 attention tensor.
    let t = pack
        .index
        .header
        .tensors
        .iter()
        .find(|t| t.name.contains("layers.0.self_attn"))
        .unwrap();
    let b = pack.index.blocks[t.first_block];
    let path = d.join(memdial::format::lossless::PACK_FILE);
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[b.offset as usize + 40] ^= 0x10;
    std::fs::write(&path, bytes).unwrap();
    for io in [IoMode::Direct, IoMode::Buffered] {
        let r = Model::open(
            &d,
            StoreOptions::Streaming(opts(u64::MAX / 4, io, Prefetch::None, None)),
            1,
        )
        .and_then(|o| {
            let mut st = o.model.new_state(MAX_CONTEXT);
            generate(&o.model, &mut st, &PROMPT, &params(), &mut |_| {})
        });
        let Err(e) = r else {
            panic!("a corrupt block must fail")
        };
        let msg = format!("{e:#}");
        assert!(msg.contains("CRC-32") && msg.contains(&t.name), "{msg}");
    }
}

#[test]
fn a_stale_pack_is_refused_on_open() {
    let d = packed_copy("lossless-stale");
    let man = d.join("tensors.sha256");
    let mut text = std::fs::read_to_string(&man).unwrap();
    text = text.replacen('0', "1", 1);
    std::fs::write(&man, text).unwrap();
    let msg = format!("{:#}", Checkpoint::open(&d).err().unwrap());
    assert!(msg.contains("stale lossless pack"), "{msg}");
}
