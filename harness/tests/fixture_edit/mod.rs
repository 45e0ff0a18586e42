//! Scripted edits of small fixture checkpoints (tiny-k3 / tiny-linear), for tests that
//! need a variant of the published layout: each test generates its fixture into its own
//! scratch directory and edits `config.json`, `tokenizer_config.json` or tensors in code
//! (no committed binaries).
#![allow(dead_code)]

use std::fs;
use std::path::Path;

use memdial::format::checkpoint::Checkpoint;
use safetensors::tensor::TensorView;
use safetensors::Dtype;
use serde_json::Value;

/// A fresh, empty scratch directory unique to the caller (removed when the guard drops).
pub fn scratch(tag: &str) -> memdial_testkit::Scratch {
    memdial_testkit::scratch!(&format!("conformance-{tag}"))
}

/// Generates fixture `preset` (seed 0, with tokenizer files) into `out` (must not exist).
pub fn generate(preset: &str, out: &Path) {
    memdial::tools::fixture::generate(
        preset,
        0,
        out,
        false,
        Some(memdial::tools::fixture::write_tokenizer),
        &mut |_, _| {},
    )
    .unwrap();
}

/// Copies every regular file of `src` into a new directory `dst`.
pub fn copy_dir(src: &Path, dst: &Path) {
    fs::create_dir_all(dst).unwrap();
    for e in fs::read_dir(src).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_file() {
            fs::copy(e.path(), dst.join(e.file_name())).unwrap();
        }
    }
}

/// Edits `dir/NAME` (a JSON file) in place.
pub fn edit_json(dir: &Path, name: &str, f: impl FnOnce(&mut Value)) {
    let p = dir.join(name);
    let mut v: Value = serde_json::from_slice(&fs::read(&p).unwrap()).unwrap();
    f(&mut v);
    fs::write(&p, serde_json::to_string_pretty(&v).unwrap()).unwrap();
}

/// Edits the text config of `dir/config.json` (its `text_config` if present, else the root).
pub fn edit_text_config(dir: &Path, f: impl FnOnce(&mut serde_json::Map<String, Value>)) {
    edit_json(dir, "config.json", |v| {
        let t = if v.get("text_config").is_some() {
            &mut v["text_config"]
        } else {
            v
        };
        f(t.as_object_mut().unwrap())
    });
}

/// One tensor held in memory.
#[derive(Clone)]
pub struct Tensor {
    pub name: String,
    /// safetensors dtype string (`BF16`, `F32`, `U8`).
    pub dtype: String,
    pub shape: Vec<usize>,
    pub data: Vec<u8>,
}

/// All tensors of a checkpoint directory, sorted by name.
pub fn read_tensors(dir: &Path) -> Vec<Tensor> {
    let ck = Checkpoint::open(dir).unwrap();
    let mut out: Vec<Tensor> = ck
        .tensors
        .iter()
        .map(|(name, t)| {
            let bytes = fs::read(&ck.shards[t.shard].path).unwrap();
            Tensor {
                name: name.clone(),
                dtype: t.dtype.clone(),
                shape: t.shape.clone(),
                data: bytes[t.offset as usize..(t.offset + t.len) as usize].to_vec(),
            }
        })
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

/// Replaces the checkpoint's shards (and index) by one `model.safetensors` holding `ts`.
pub fn write_tensors(dir: &Path, ts: &[Tensor]) {
    for e in fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        let n = p.file_name().unwrap().to_string_lossy().to_string();
        if n.ends_with(".safetensors") || n == "model.safetensors.index.json" {
            fs::remove_file(&p).unwrap();
        }
    }
    let views: Vec<(String, TensorView)> = ts
        .iter()
        .map(|t| {
            let d = match t.dtype.as_str() {
                "BF16" => Dtype::BF16,
                "F32" => Dtype::F32,
                "U8" => Dtype::U8,
                other => panic!("dtype {other}"),
            };
            (
                t.name.clone(),
                TensorView::new(d, t.shape.clone(), &t.data).unwrap(),
            )
        })
        .collect();
    safetensors::tensor::serialize_to_file(views, None, &dir.join("model.safetensors")).unwrap();
}

/// Rewrites the tensors of `dir` through `f` (which may edit, add or remove tensors).
pub fn edit_tensors(dir: &Path, f: impl FnOnce(&mut Vec<Tensor>)) {
    let mut ts = read_tensors(dir);
    f(&mut ts);
    write_tensors(dir, &ts);
}

/// Little-endian f32 bytes of `n` copies of `v`.
pub fn f32_fill(n: usize, v: f32) -> Vec<u8> {
    (0..n).flat_map(|_| v.to_le_bytes()).collect()
}
