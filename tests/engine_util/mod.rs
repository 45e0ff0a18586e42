//! Shared helpers of the engine tests: fixture checkpoints in a temp dir, an
//! in-memory weight store for arbitrary configs, and a store wrapper that records
//! the call protocol.
#![allow(dead_code)]

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use anyhow::{Context, Result};
use memdial::format::config::{ExpertFormat, ModelConfig};
use memdial::format::schema::{expected_tensors, layer_name, Dtype};
use memdial::store::{Bytes, ExpertWeights, WeightStore};
use memdial::tools::fixture::rng::Stream;

/// Generates fixture preset `name` once per test process (shared read-only by the tests of
/// the binary; removed at exit); returns its directory.
pub fn fixture(name: &'static str) -> PathBuf {
    memdial_testkit::fixtures::shared(name, || {
        let dir = memdial_testkit::until_exit(memdial_testkit::scratch!("engine-test")).join(name);
        memdial::tools::fixture::generate(name, 0, &dir, true, None, &mut |_, _| {})
            .expect("fixture");
        dir
    })
}

/// Every tensor of a config, generated in memory with the fixture's init scheme.
pub struct MemStore {
    pub tensors: HashMap<String, Bytes>,
    pub fmt: Option<ExpertFormat>,
}

impl MemStore {
    /// Builds all tensors of `cfg` (names without the weight prefix), seed `seed`.
    pub fn new(cfg: &ModelConfig, seed: u64) -> MemStore {
        let mut tensors = HashMap::new();
        let specs = expected_tensors(cfg);
        let mut i = 0;
        while i < specs.len() {
            let s = &specs[i];
            let key = s
                .name
                .strip_prefix(&cfg.weight_prefix)
                .unwrap_or(&s.name)
                .to_string();
            if s.dtype == Dtype::U8 {
                // MXFP4 pair: packed then scale.
                let base = key.strip_suffix(".weight_packed").unwrap().to_string();
                let (rows, cols) = (s.shape[0], s.shape[1] * 2);
                let st = Stream::new(seed, &base);
                let sd = 1.0 / (cols as f32).sqrt();
                let (packed, scale) =
                    memdial::tools::fixture::mxfp4::quantize_matrix(rows, cols, |j| {
                        st.normal(j) * sd
                    });
                tensors.insert(format!("{base}.weight_packed"), Bytes::from_vec(packed));
                tensors.insert(format!("{base}.weight_scale"), Bytes::from_vec(scale));
                i += 2;
                continue;
            }
            let st = Stream::new(seed, &key);
            let n = s.numel() as u64;
            let mut b = Vec::with_capacity(s.nbytes());
            let init = memdial::tools::fixture::init_for(s, cfg.hidden_size);
            for j in 0..n {
                let v = memdial::tools::fixture::value(init, &st, j);
                match s.dtype {
                    Dtype::F32 => b.extend_from_slice(&v.to_le_bytes()),
                    _ => b.extend_from_slice(&half::bf16::from_f32(v).to_bits().to_le_bytes()),
                }
            }
            tensors.insert(key, Bytes::from_vec(b));
            i += 1;
        }
        MemStore {
            tensors,
            fmt: cfg.moe.as_ref().map(|m| m.expert_format),
        }
    }
}

impl WeightStore for MemStore {
    fn tensor(&self, layer: Option<usize>, name: &str) -> Result<Bytes> {
        let key = match layer {
            Some(l) => layer_name(l, name),
            None => name.to_string(),
        };
        self.tensors
            .get(&key)
            .cloned()
            .with_context(|| format!("tensor {key} is not in the store"))
    }
    fn expert(&self, layer: usize, e: usize) -> Result<ExpertWeights> {
        let fmt = self.fmt.context("no experts")?;
        let mut get = |name: &str| self.tensor(None, name);
        Ok(ExpertWeights {
            w1: memdial::store::expert_mat(fmt, layer, e, "w1", &mut get)?,
            w2: memdial::store::expert_mat(fmt, layer, e, "w2", &mut get)?,
            w3: memdial::store::expert_mat(fmt, layer, e, "w3", &mut get)?,
        })
    }
}

/// One recorded store call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Call {
    Begin(usize),
    Selected(usize, Vec<usize>),
    Expert(usize, usize),
    End(usize),
}

/// Wraps a store and records `begin_layer` / `experts_selected` / `expert` / `end_layer`.
pub struct Recording<S: WeightStore> {
    pub inner: S,
    pub calls: Mutex<Vec<Call>>,
}

impl<S: WeightStore> WeightStore for Recording<S> {
    fn tensor(&self, layer: Option<usize>, name: &str) -> Result<Bytes> {
        self.inner.tensor(layer, name)
    }
    fn expert(&self, layer: usize, e: usize) -> Result<ExpertWeights> {
        self.calls.lock().unwrap().push(Call::Expert(layer, e));
        self.inner.expert(layer, e)
    }
    fn begin_layer(&self, l: usize) {
        self.calls.lock().unwrap().push(Call::Begin(l));
    }
    fn experts_selected(&self, l: usize, e: &[usize]) {
        self.calls
            .lock()
            .unwrap()
            .push(Call::Selected(l, e.to_vec()));
    }
    fn end_layer(&self, l: usize) {
        self.calls.lock().unwrap().push(Call::End(l));
    }
}

/// A config with mini-like per-layer sizes (KDA 8×128, MLA kv_lora 256, hidden 1024,
/// MXFP4 latent experts) but 4 layers, 8 experts and a small vocab.
pub fn mini_like_config() -> ModelConfig {
    let json = serde_json::json!({
        "model_type": "kimi_k3",
        "text_config": {
            "model_type": "kimi_linear", "vocab_size": 512, "hidden_size": 1024,
            "num_hidden_layers": 4, "num_attention_heads": 8, "intermediate_size": 512,
            "rms_norm_eps": 1e-5,
            "linear_attn_config": {"kda_layers": [1, 2, 3], "full_attn_layers": [4], "head_dim": 128,
                "num_heads": 8, "short_conv_kernel_size": 4, "gate_lower_bound": -5.0,
                "use_full_rank_gate": true},
            "hidden_act": "situ", "activation_situ_beta": 4.0, "activation_situ_linear_beta": 25.0,
            "attn_res_block_size": 2, "q_lora_rank": 384, "kv_lora_rank": 256,
            "qk_nope_head_dim": 64, "qk_rope_head_dim": 32, "v_head_dim": 64,
            "mla_use_nope": true, "mla_use_output_gate": true,
            "num_experts": 8, "num_experts_per_token": 2, "num_shared_experts": 1,
            "moe_intermediate_size": 256, "routed_expert_hidden_size": 512,
            "latent_moe_use_norm": true, "first_k_dense_replace": 1, "eos_token_id": 2
        },
        "quantization_config": {"quant_method": "compressed-tensors", "format": "mxfp4-pack-quantized"}
    });
    let mut cfg = ModelConfig::from_json_str(&json.to_string()).unwrap();
    cfg.apply_quantization(&json).unwrap();
    cfg
}

/// Bitwise equality of two f32 slices.
pub fn bits_eq(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}

/// Shared handle to a store.
pub fn arc<S: WeightStore + 'static>(s: S) -> Arc<dyn WeightStore> {
    Arc::new(s)
}
