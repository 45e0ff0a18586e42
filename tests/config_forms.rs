//! The forms a Kimi Linear checkpoint is found in load through the same code with
//! identical results: Moonshot's published form (our fixture) and the form
//! transformers' `save_pretrained` writes (`layer_types` / `mlp_layer_types`,
//! flattened `linear_*` keys, attribute-mapped names, dense layer 0 under
//! `block_sparse_moe.`), as seen in transformers 5.24 `configuration_kimi_linear.py`.

use std::fs;
use std::path::PathBuf;

use memdial::format::checkpoint::Checkpoint;
use memdial::model::{LogitsMode, Model};
use memdial_testkit as testkit;
use safetensors::tensor::TensorView;
use safetensors::Dtype;

/// `SCRATCH/model`, in a scratch directory unique to the caller (removed when the
/// returned guard drops).
fn tmp(tag: &str) -> (testkit::Scratch, PathBuf) {
    let s = testkit::scratch!(&format!("forms-{tag}"));
    let d = s.join("model");
    (s, d)
}

#[test]
fn transformers_saved_form_gives_identical_logits() {
    let (_src_scratch, src) = tmp("src");
    memdial::tools::fixture::generate("tiny-linear", 0, &src, false, None, &mut |_, _| {}).unwrap();
    let (_dst_scratch, dst) = tmp("hf");
    fs::create_dir_all(&dst).unwrap();

    // config.json as transformers writes it.
    let mut cfg: serde_json::Value =
        serde_json::from_slice(&fs::read(src.join("config.json")).unwrap()).unwrap();
    let o = cfg.as_object_mut().unwrap();
    let lac = o.remove("linear_attn_config").unwrap();
    let full: Vec<u64> = lac["full_attn_layers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect();
    let n = o["num_hidden_layers"].as_u64().unwrap();
    let layer_types: Vec<&str> = (1..=n)
        .map(|i| {
            if full.contains(&i) {
                "full_attention"
            } else {
                "linear_attention"
            }
        })
        .collect();
    let mlp_types: Vec<&str> = (0..n)
        .map(|i| if i < 1 { "dense" } else { "sparse" })
        .collect();
    o.insert("layer_types".into(), serde_json::json!(layer_types));
    o.insert("mlp_layer_types".into(), serde_json::json!(mlp_types));
    o.insert("linear_head_dim".into(), lac["head_dim"].clone());
    o.insert("linear_num_heads".into(), lac["num_heads"].clone());
    o.insert(
        "linear_conv_kernel_dim".into(),
        lac["short_conv_kernel_size"].clone(),
    );
    for (from, to) in [
        ("num_experts_per_token", "num_experts_per_tok"),
        ("num_shared_experts", "n_shared_experts"),
        ("moe_renormalize", "norm_topk_prob"),
    ] {
        let v = o.remove(from).unwrap();
        o.insert(to.into(), v);
    }
    o.remove("first_k_dense_replace");
    fs::write(
        dst.join("config.json"),
        serde_json::to_string_pretty(&cfg).unwrap(),
    )
    .unwrap();

    // One shard, dense layer 0 renamed mlp.* -> block_sparse_moe.*.
    let ck = Checkpoint::open(&src).unwrap();
    let mut blobs = Vec::new();
    for (name, t) in &ck.tensors {
        let bytes = fs::read(&ck.shards[t.shard].path).unwrap()
            [t.offset as usize..(t.offset + t.len) as usize]
            .to_vec();
        let new = name.replace("model.layers.0.mlp.", "model.layers.0.block_sparse_moe.");
        let dt = match t.dtype.as_str() {
            "BF16" => Dtype::BF16,
            "F32" => Dtype::F32,
            other => panic!("unexpected dtype {other}"),
        };
        blobs.push((new, dt, t.shape.clone(), bytes));
    }
    let views: Vec<(String, TensorView)> = blobs
        .iter()
        .map(|(n, d, s, b)| (n.clone(), TensorView::new(*d, s.clone(), b).unwrap()))
        .collect();
    safetensors::tensor::serialize_to_file(views, None, &dst.join("model.safetensors")).unwrap();
    assert!(Checkpoint::open(&dst)
        .unwrap()
        .get("model.layers.0.block_sparse_moe.gate_proj.weight")
        .is_some());

    let ids: Vec<u32> = vec![3, 1000, 77, 2047, 5, 9, 1500, 64, 300, 12];
    let run = |dir: &PathBuf| {
        let m = Model::load(dir, 2).unwrap();
        let mut st = m.new_state(32);
        m.forward(&mut st, &ids, LogitsMode::All).unwrap()
    };
    let a = run(&src);
    let b = run(&dst);
    assert_eq!(a.len(), b.len());
    assert!(
        a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()),
        "logits differ between forms"
    );
    fs::remove_dir_all(&src).unwrap();
    fs::remove_dir_all(&dst).unwrap();
}
