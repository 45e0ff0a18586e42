//! Fixture generator: determinism, pinned checksums, validation by `inspect`.

use std::fs;
use std::path::Path;

use memdial::format::checkpoint::Checkpoint;
use memdial::format::config::load_config;
use memdial::format::inspect::{inspect_dir, validate};
use memdial::tools::fixture;
use memdial::util::digest::hex;
use memdial_testkit as testkit;
use sha2::{Digest, Sha256};

/// An empty scratch directory unique to the caller, removed when the guard drops.
fn tmpdir(tag: &str) -> testkit::Scratch {
    testkit::scratch!(&format!("fixture-{tag}"))
}

fn gen(preset: &str, seed: u64, out: &Path) {
    fixture::generate(
        preset,
        seed,
        out,
        false,
        Some(fixture::write_tokenizer),
        &mut |_, _| {},
    )
    .unwrap();
}

fn sha_of_file(p: &Path) -> String {
    hex(&Sha256::digest(fs::read(p).unwrap()))
}

#[test]
fn same_preset_and_seed_give_identical_bytes() {
    let d = tmpdir("det");
    gen("tiny-k3", 0, &d.join("a"));
    gen("tiny-k3", 0, &d.join("b"));
    gen("tiny-k3", 1, &d.join("c"));
    let a = fs::read_to_string(d.join("a/checksums.sha256")).unwrap();
    let b = fs::read_to_string(d.join("b/checksums.sha256")).unwrap();
    let c = fs::read_to_string(d.join("c/checksums.sha256")).unwrap();
    assert_eq!(a, b);
    assert_ne!(a, c, "a different seed must give different weights");
    // checksums.sha256 is truthful (sha256sum format).
    for line in a.lines() {
        let (sum, name) = line.split_once("  ").unwrap();
        assert_eq!(sum, sha_of_file(&d.join("a").join(name)), "{name}");
    }
    fs::remove_dir_all(&d).unwrap();
}

/// Checksums of `checksums.sha256` itself for the tiny presets at seed 0. If the
/// generator changes on purpose, regenerate with
/// `cargo run --release -- fixture --preset P --out /tmp/P && sha256sum /tmp/P/checksums.sha256`
/// and update these (and say so in the commit message: fixture bytes changed).
const PINNED: [(&str, &str); 3] = [
    (
        "tiny-k3",
        "a664ac9828a275bae2fb31838525f34da3d7e3942a4c6ed1b3475803d1df7d0d",
    ),
    (
        "tiny-linear",
        "ebc94508730d7ad90ca1083708a209b1d932f7d6ab11e3d159832b50b441bca6",
    ),
    (
        "gpt-oss-tiny",
        "bdee95078c2855ae046f6546cc096da178f85c8ddec54b50281fb16ce4072cfa",
    ),
];

#[test]
fn tiny_preset_checksums_are_pinned() {
    let d = tmpdir("pin");
    for (preset, want) in PINNED {
        let out = d.join(preset);
        gen(preset, 0, &out);
        let got = sha_of_file(&out.join("checksums.sha256"));
        assert_eq!(
            got,
            want,
            "{preset}: fixture bytes changed; checksums.sha256 is\n{}",
            fs::read_to_string(out.join("checksums.sha256")).unwrap()
        );
    }
    fs::remove_dir_all(&d).unwrap();
}

#[test]
fn tiny_presets_are_valid_and_small() {
    let d = tmpdir("valid");
    for preset in ["tiny-k3", "tiny-linear"] {
        let out = d.join(preset);
        gen(preset, 0, &out);
        let (_, summary, problems) = inspect_dir(&out).unwrap();
        assert!(problems.is_empty(), "{preset}: {problems:?}");
        let total: u64 = fs::read_dir(&out)
            .unwrap()
            .map(|e| e.unwrap().metadata().unwrap().len())
            .sum();
        assert!(total < 20_000_000, "{preset} is {total} bytes");
        assert!(summary.layers >= 6);
    }
    fs::remove_dir_all(&d).unwrap();
}

#[test]
fn truncated_shard_is_reported_with_tensor_and_file() {
    let d = tmpdir("trunc");
    let out = d.join("tiny-k3");
    gen("tiny-k3", 0, &out);
    let shard = out.join("model-00002-of-00002.safetensors");
    let len = fs::metadata(&shard).unwrap().len();
    let f = fs::OpenOptions::new().write(true).open(&shard).unwrap();
    f.set_len(len - 1000).unwrap();
    let cfg = load_config(&out).unwrap();
    let ck = Checkpoint::open(&out).unwrap();
    let problems = validate(&cfg, &ck);
    assert!(!problems.is_empty());
    let p = problems
        .iter()
        .find(|p| p.contains("past the end"))
        .expect("a truncation problem");
    assert!(p.contains("model-00002-of-00002.safetensors"), "{p}");
    assert!(p.contains("language_model.lm_head.weight"), "{p}");
    fs::remove_dir_all(&d).unwrap();
}

#[test]
fn wrong_shape_and_missing_tensor_are_named() {
    let d = tmpdir("shape");
    let out = d.join("tiny-linear");
    gen("tiny-linear", 0, &out);
    // Edit config so two layers' expectations change: a wrong MLA head count changes shapes,
    // and a larger expert count makes experts 16.. missing.
    let mut cfg = load_config(&out).unwrap();
    cfg.moe.as_mut().unwrap().num_experts = 17;
    let ck = Checkpoint::open(&out).unwrap();
    let problems = validate(&cfg, &ck);
    assert!(problems.iter().any(|p| p.starts_with("model.layers.1.block_sparse_moe.experts.16.w1.weight: missing")), "{problems:?}");
    assert!(
        problems
            .iter()
            .any(|p| p.contains("block_sparse_moe.gate.weight")
                && p.contains("shape [16, 128] but expected [17, 128]")),
        "{problems:?}"
    );
    fs::remove_dir_all(&d).unwrap();
}

#[test]
fn out_dir_that_exists_is_refused_and_kept() {
    let d = tmpdir("exists");
    let out = d.join("x");
    fs::create_dir_all(&out).unwrap();
    fs::write(out.join("keep.txt"), "precious").unwrap();
    let err = fixture::generate("tiny-k3", 0, &out, false, None, &mut |_, _| {}).unwrap_err();
    assert!(format!("{err:#}").contains("already exists"));
    assert_eq!(
        fs::read_to_string(out.join("keep.txt")).unwrap(),
        "precious"
    );
    // no temporary directory left behind
    let leftovers: Vec<_> = fs::read_dir(&d)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(leftovers.len(), 1, "{leftovers:?}");
    fs::remove_dir_all(&d).unwrap();
}
