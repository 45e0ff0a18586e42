//! Shared by the oracle test binaries: the fixed ids of `fixtures/oracle/common.py`, the
//! oracle outputs (`PREFIX.json` + `PREFIX.logits.npy`), the checkpoint hashes the oracle
//! records, and the comparison of the engine with one oracle output (docs/oracles.md).
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::time::Instant;

use memdial::engine::generate::{generate, GenerateParams};
use memdial::engine::sampler::SamplerConfig;
use memdial::model::{LogitsMode, Model};
use serde_json::Value;
use sha2::{Digest, Sha256};

/// Teacher-forced positions.
pub const N_TEACHER: usize = 64;
/// Greedy continuation length.
pub const N_GREEDY: usize = 32;
/// Per-row tolerance relative to the oracle row's max |logit|.
pub const RTOL: f64 = 1e-3;

/// 32-bit LCG (Numerical Recipes constants): `x_0 = 0x4D454D44`,
/// `x ← (1664525·x + 1013904223) mod 2³²`, `id_n = (x_{n+1} >> 8) mod (vocab − 256)`.
pub fn fixed_ids(vocab: usize, n: usize) -> Vec<u32> {
    let n_base = (vocab - 256) as u32;
    let mut x: u32 = 0x4D45_4D44;
    (0..n)
        .map(|_| {
            x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            (x >> 8) % n_base
        })
        .collect()
}

/// The repository root.
pub fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Lower-case hex SHA-256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    memdial::util::digest::hex(&Sha256::digest(bytes))
}

/// `(sha256(config.json), sha256 over "name sha256(file)\n" of the sorted *.safetensors)`,
/// as `fixtures/oracle/common.py` (`load_config`, `weights_sha256`) computes them.
pub fn checkpoint_hashes(dir: &Path) -> (String, String) {
    let cfg = sha256_hex(&std::fs::read(dir.join("config.json")).unwrap());
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".safetensors"))
        .collect();
    names.sort();
    assert!(!names.is_empty(), "no safetensors in {}", dir.display());
    let mut lines = String::new();
    for n in &names {
        let h = sha256_hex(&std::fs::read(dir.join(n)).unwrap());
        lines.push_str(&format!("{n} {h}\n"));
    }
    (cfg, sha256_hex(lines.as_bytes()))
}

/// Minimal `.npy` reader: little-endian f32, C order, 2-D.
pub fn read_npy_f32_2d(path: &Path) -> (Vec<f32>, [usize; 2]) {
    let b = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(
        b.len() > 10 && &b[..6] == b"\x93NUMPY",
        "{}: not .npy",
        path.display()
    );
    let (hlen, hstart) = match b[6] {
        1 => (u16::from_le_bytes([b[8], b[9]]) as usize, 10),
        2 | 3 => (u32::from_le_bytes([b[8], b[9], b[10], b[11]]) as usize, 12),
        v => panic!("{}: npy version {v}", path.display()),
    };
    let header = std::str::from_utf8(&b[hstart..hstart + hlen]).unwrap();
    let compact: String = header.chars().filter(|c| !c.is_whitespace()).collect();
    assert!(
        compact.contains("'descr':'<f4'") && compact.contains("'fortran_order':False"),
        "{}: {header}",
        path.display()
    );
    let s = compact.split("'shape':(").nth(1).unwrap();
    let dims: Vec<usize> = s[..s.find(')').unwrap()]
        .split(',')
        .filter(|t| !t.is_empty())
        .map(|t| t.parse().unwrap())
        .collect();
    assert_eq!(dims.len(), 2, "{}: shape {dims:?}", path.display());
    let data = &b[hstart + hlen..];
    assert_eq!(data.len(), dims[0] * dims[1] * 4, "{}", path.display());
    let v = data
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    (v, [dims[0], dims[1]])
}

/// `PREFIX.json` and `PREFIX.logits.npy`.
pub fn load_oracle(prefix: &Path) -> (Value, (Vec<f32>, [usize; 2])) {
    let jp = PathBuf::from(format!("{}.json", prefix.display()));
    let text = std::fs::read_to_string(&jp).unwrap_or_else(|e| panic!("{}: {e}", jp.display()));
    let j: Value = serde_json::from_str(&text).unwrap();
    let npy = read_npy_f32_2d(Path::new(&format!("{}.logits.npy", prefix.display())));
    (j, npy)
}

/// The token ids listed under `key`.
pub fn json_ids(j: &Value, key: &str) -> Vec<u32> {
    j[key]
        .as_array()
        .unwrap_or_else(|| panic!("oracle JSON has no {key}"))
        .iter()
        .map(|v| v.as_u64().unwrap() as u32)
        .collect()
}

/// Asserts the oracle output `j` was computed on exactly the checkpoint in `dir`.
pub fn assert_oracle_saw(j: &Value, dir: &Path) {
    let (cfg_sha, w_sha) = checkpoint_hashes(dir);
    assert_eq!(
        j["model_dir_config_sha256"].as_str(),
        Some(cfg_sha.as_str())
    );
    assert_eq!(
        j["model_dir_safetensors_sha256"].as_str(),
        Some(w_sha.as_str())
    );
}

/// `(argmax, top-2 margin)` of a row.
pub fn argmax_margin(row: &[f32]) -> (usize, f64) {
    let (mut best, mut b1, mut b2) = (0usize, f64::NEG_INFINITY, f64::NEG_INFINITY);
    for (i, &v) in row.iter().enumerate() {
        let v = v as f64;
        if v > b1 {
            b2 = b1;
            b1 = v;
            best = i;
        } else if v > b2 {
            b2 = v;
        }
    }
    (best, b1 - b2)
}

/// Checks the engine on `dir` against one oracle output (`label` for messages): ids,
/// teacher-forced logits (`max|e−o| ≤ RTOL·max|o|` per row; argmax equal where the
/// oracle's top-2 margin exceeds that bound) and the greedy continuation (prefill of the
/// 64 ids, 32 decode steps, eos ignored). Returns the worst per-row `max|Δ| / max|o|`.
pub fn check_against_oracle(dir: &Path, prefix: &Path, label: &str) -> f64 {
    let t0 = Instant::now();
    let (j, (o, shape)) = load_oracle(prefix);
    let model = Model::load(dir, 2).unwrap_or_else(|e| panic!("{label}: load: {e:#}"));
    let v = model.config().vocab_size;
    let ids = fixed_ids(v, N_TEACHER);
    assert_eq!(
        json_ids(&j, "ids"),
        ids,
        "{label}: oracle ids differ from the Rust re-implementation of common.fixed_ids"
    );
    assert_eq!(shape, [N_TEACHER, v], "{label}: oracle logits shape");
    assert_eq!(
        j["logits_shape"],
        serde_json::json!([N_TEACHER, v]),
        "{label}"
    );
    let mut st = model.new_state(N_TEACHER);
    let e = model.forward(&mut st, &ids, LogitsMode::All).unwrap();
    assert_eq!(e.len(), N_TEACHER * v);
    let (mut worst_rel, mut worst_abs, mut argmax_checked) = (0f64, 0f64, 0);
    let mut failures = Vec::new();
    for t in 0..N_TEACHER {
        let (er, or) = (&e[t * v..(t + 1) * v], &o[t * v..(t + 1) * v]);
        assert!(
            er.iter().all(|x| x.is_finite()),
            "{label}: row {t} non-finite"
        );
        let omax = or.iter().fold(0f64, |m, &x| m.max((x as f64).abs()));
        let d = er
            .iter()
            .zip(or)
            .fold(0f64, |m, (&a, &b)| m.max((a as f64 - b as f64).abs()));
        let bound = RTOL * omax;
        worst_abs = worst_abs.max(d);
        worst_rel = worst_rel.max(d / omax);
        if d > bound {
            failures.push(format!(
                "pos {t}: max|Δ| {d:.3e} > {RTOL}·max|o| = {bound:.3e}"
            ));
        }
        let (oa, om) = argmax_margin(or);
        let (ea, _) = argmax_margin(er);
        if om > bound {
            argmax_checked += 1;
            if oa != ea {
                failures.push(format!(
                    "pos {t}: argmax engine {ea} vs oracle {oa} (oracle top-2 margin {om:.3e} > {bound:.3e})"
                ));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{label}: teacher-forced logits differ:\n{}",
        failures.join("\n")
    );
    let mut st = model.new_state(N_TEACHER + N_GREEDY);
    let p = GenerateParams {
        max_tokens: N_GREEDY,
        sampler: SamplerConfig {
            temperature: 0.0,
            ..Default::default()
        },
        stop_ids: vec![],
        keep_logits: false,
        prefill_chunk: 0,
        perturb_logit: None,
    };
    let g = generate(&model, &mut st, &ids, &p, &mut |_| {}).unwrap();
    let want = json_ids(&j, "greedy_ids");
    assert_eq!(want.len(), N_GREEDY, "{label}: oracle greedy_ids length");
    if g.output_ids != want {
        let step = g
            .output_ids
            .iter()
            .zip(&want)
            .position(|(a, b)| a != b)
            .unwrap_or(g.output_ids.len().min(want.len()));
        let margin = j["greedy_top2_margin"][step].as_f64();
        panic!(
            "{label}: greedy ids diverge at step {step} (oracle top-2 margin there {margin:?}, \
             teacher-forced max|Δ| {worst_abs:.3e})\nengine {:?}\noracle {want:?}",
            g.output_ids
        );
    }
    println!(
        "{label}: max rel deviation {worst_rel:.3e} (max|Δ| {worst_abs:.3e}), argmax checked at \
         {argmax_checked}/{N_TEACHER} positions, greedy {N_GREEDY}/{N_GREEDY} identical ({:.2} s)",
        t0.elapsed().as_secs_f64()
    );
    worst_rel
}
