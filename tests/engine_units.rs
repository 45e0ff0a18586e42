//! Hand-derived unit checks of the model math (SiTU, router, AttnRes, delta rule,
//! KDA gates/conv, MLA single position, MXFP4 ops, sampler).

use memdial::engine::sampler::{argmax, Sampler, SamplerConfig};
use memdial::format::config::{Activation, ExpertFormat, ModelConfig, MoeConfig};
use memdial::kernels::{dequant_mxfp4, matvec_mxfp4, Mxfp4Mat, Par, Workspace};
use memdial::model::attn_res::{mix, mix_weights, Blocks};
use memdial::model::kda::{decay, delta_rule_step, l2norm_scaled, short_conv_step};
use memdial::model::mla::{mla_forward, MlaWeights, QProj};
use memdial::model::mlp::{gated_act, situ};
use memdial::model::moe::route;
use memdial::model::norm::{sigmoid, silu, softplus};
use memdial::model::weights::{Elem, Mat};
use memdial::model::MlaCache;
use memdial::store::Bytes;

fn close(a: f32, b: f32, tol: f32) -> bool {
    (a - b).abs() <= tol * (1.0 + b.abs())
}

#[test]
fn situ_matches_hand_values() {
    // [4·tanh(1/4)·σ(1)]·[25·tanh(2/25)] = 1.4293511315552199 (g = gate = 1, u = up = 2).
    assert!(close(situ(1.0, 2.0, 4.0, Some(25.0)), 1.429_351_1, 1e-6));
    // g = −3, u = −0.5: [4·tanh(−3/4)·σ(−3)]·[25·tanh(−0.02)] = 0.06023695594960884.
    assert!(close(
        situ(-3.0, -0.5, 4.0, Some(25.0)),
        0.060_236_956,
        1e-6
    ));
    // No linear beta: the up value passes through unchanged.
    let a = 4.0 * (1f32 / 4.0).tanh() * sigmoid(1.0);
    assert!(close(situ(1.0, 2.0, 4.0, None), a * 2.0, 1e-7));
    // Gate and up are not interchangeable (SiTU is asymmetric).
    assert!(!close(
        situ(2.0, 1.0, 4.0, Some(25.0)),
        situ(1.0, 2.0, 4.0, Some(25.0)),
        1e-3
    ));
    // SiLU activation: silu(g)·u.
    let v = gated_act(Activation::Silu, &[1.0], &[3.0]);
    assert!(close(v[0], 3.0 * silu(1.0), 1e-7));
}

fn moe_cfg(e: usize, k: usize, groups: usize, topk_group: usize, scale: f32) -> MoeConfig {
    MoeConfig {
        num_experts: e,
        num_experts_per_token: k,
        num_shared_experts: 0,
        moe_intermediate_size: 4,
        renormalize: true,
        routed_scaling_factor: scale,
        num_expert_group: groups,
        topk_group,
        routed_expert_hidden_size: None,
        latent_moe_use_norm: false,
        expert_format: ExpertFormat::Bf16,
    }
}

#[test]
fn router_hand_example() {
    // σ(logits) = [0.5, 0.75, 0.25, 0.9]; bias [0.3, 0, 0, −0.5] → s' = [0.8, 0.75, 0.25, 0.4].
    // Top-2 by s' = experts 0, 1 (expert 3 would win without the bias);
    // weights use unbiased s = [0.5, 0.75] → /1.25 = [0.4, 0.6] → ×2 = [0.8, 1.2].
    let logits = [0.0, 3f32.ln(), -(3f32.ln()), 9f32.ln()];
    let bias = [0.3, 0.0, 0.0, -0.5];
    let r = route(&logits, &bias, &moe_cfg(4, 2, 1, 1, 2.0));
    assert_eq!(r.iter().map(|x| x.0).collect::<Vec<_>>(), vec![0, 1]);
    assert!(
        close(r[0].1, 0.8, 1e-6) && close(r[1].1, 1.2, 1e-6),
        "{r:?}"
    );
    // k = 1: no renormalisation, weight = σ × scale.
    let r = route(&logits, &bias, &moe_cfg(4, 1, 1, 1, 2.0));
    assert_eq!(r.len(), 1);
    assert!(close(r[0].1, 1.0, 1e-6));
}

#[test]
fn router_ties_go_to_lower_id_in_rank_order() {
    let r = route(&[1.0, 2.0, 2.0, 1.0], &[0.0; 4], &moe_cfg(4, 3, 1, 1, 1.0));
    assert_eq!(r.iter().map(|x| x.0).collect::<Vec<_>>(), vec![1, 2, 0]);
}

#[test]
fn router_group_limited_excludes_dropped_groups() {
    // Two groups of two. s' group 0 = [-0.1, -0.2] (sum −0.3), group 1 = [-0.5, -0.6] (−1.1):
    // group 1 is dropped. DeepSeek-V3 `Gate.forward` masks it with −∞, so the kept negative
    // scores still win: selection = [0, 1]. (mlx-lm masks with 0.0, which would select
    // [2, 3] here; fixtures/oracle/README.md.)
    let logits = [0.0f32; 4];
    let bias = [-0.6, -0.7, -1.0, -1.1];
    let r = route(&logits, &bias, &moe_cfg(4, 2, 2, 1, 1.0));
    assert_eq!(r.iter().map(|x| x.0).collect::<Vec<_>>(), vec![0, 1]);
    // With positive scores the kept group wins as well.
    let bias = [0.3, 0.25, -0.25, -0.1];
    let r = route(&logits, &bias, &moe_cfg(4, 2, 2, 1, 1.0));
    assert_eq!(r.iter().map(|x| x.0).collect::<Vec<_>>(), vec![0, 1]);
}

#[test]
fn attn_res_one_block() {
    // b = [1,1], p = [0,2], w_eff = [ln 3, 0], eps = 0:
    // logits = [(b·w)/rms(b), (p·w)/rms(p)] = [ln 3, 0] → softmax [3/4, 1/4];
    // out = 3/4·[1,1] + 1/4·[0,2] = [0.75, 1.25].
    let mut blocks = Blocks::default();
    blocks.append(vec![1.0, 1.0], 0.0);
    let w = [3f32.ln(), 0.0];
    let p = mix_weights(&blocks, &[0.0, 2.0], &w, 0.0);
    assert!(close(p[0], 0.75, 1e-6) && close(p[1], 0.25, 1e-6), "{p:?}");
    let out = mix(&blocks, &[0.0, 2.0], &w, 0.0);
    assert!(
        close(out[0], 0.75, 1e-6) && close(out[1], 1.25, 1e-6),
        "{out:?}"
    );
    // No completed block: the partial sum passes through.
    assert_eq!(
        mix(&Blocks::default(), &[0.5, -1.0], &w, 1e-5),
        vec![0.5, -1.0]
    );
}

#[test]
fn delta_rule_two_steps_by_hand() {
    // 1 head, K = V = 2, state [V, K] = 0.
    let mut s = vec![0f32; 4];
    let mut y = [0f32; 2];
    // Step 1: α = 1, β = 1, k = [1,0], v = [2,3], q = [1,0]:
    // e = v − S k = [2,3]; S = e kᵀ = [[2,0],[3,0]]; y = S q = [2,3].
    delta_rule_step(
        &mut s,
        &[1.0, 0.0],
        &[1.0, 0.0],
        &[2.0, 3.0],
        &[1.0, 1.0],
        1.0,
        &mut y,
    );
    assert_eq!(s, vec![2.0, 0.0, 3.0, 0.0]);
    assert_eq!(y, [2.0, 3.0]);
    // Step 2: α = [0.5, 1] → S = [[1,0],[1.5,0]]; k = [0,1] → S k = [0,0];
    // v = [1,1], β = 0.5 → e·β = [0.5, 0.5]; S = [[1,0.5],[1.5,0.5]]; q = [1,1] → y = [1.5, 2].
    delta_rule_step(
        &mut s,
        &[1.0, 1.0],
        &[0.0, 1.0],
        &[1.0, 1.0],
        &[0.5, 1.0],
        0.5,
        &mut y,
    );
    assert_eq!(s, vec![1.0, 0.5, 1.5, 0.5]);
    assert_eq!(y, [1.5, 2.0]);
}

#[test]
fn kda_gates_norm_and_conv() {
    // Lower-bound gate: exp(−5·σ(e^0·0)) = e^−2.5.
    let a = decay(&[0.0], &[0.0], 0.0, Some(-5.0));
    assert!(close(a[0], (-2.5f32).exp(), 1e-6));
    // Softplus gate: exp(−e^{ln 2}·softplus(0)) = exp(−2 ln 2) = 1/4.
    let a = decay(&[0.5], &[-0.5], 2f32.ln(), None);
    assert!(close(a[0], 0.25, 1e-6));
    assert!(close(softplus(0.0), 2f32.ln(), 1e-7));
    assert!(close(softplus(30.0), 30.0, 1e-7));
    // L2 norm with scale: [3,4] → [0.6, 0.8]·0.5 (eps negligible).
    let mut v = [3.0f32, 4.0];
    l2norm_scaled(&mut v, 1e-6, 0.5);
    assert!(close(v[0], 0.3, 1e-6) && close(v[1], 0.4, 1e-6));
    // Conv width 3, one channel, w = [1,2,3] (w[2] multiplies the current token):
    // inputs 1 then 2 → silu(3·1), silu(2·1 + 3·2) = silu(8); state keeps the last 2 inputs.
    let mut st = vec![0f32; 2];
    let w = [1.0, 2.0, 3.0];
    assert!(close(
        short_conv_step(&mut st, &w, &[1.0], 3)[0],
        silu(3.0),
        1e-7
    ));
    assert!(close(
        short_conv_step(&mut st, &w, &[2.0], 3)[0],
        silu(8.0),
        1e-7
    ));
    assert_eq!(st, vec![1.0, 2.0]);
    assert!(close(
        short_conv_step(&mut st, &w, &[0.0], 3)[0],
        silu(1.0 + 4.0),
        1e-7
    ));
}

fn f32_mat(rows: usize, cols: usize, v: &[f32]) -> Mat {
    assert_eq!(v.len(), rows * cols);
    let b: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    Mat::Dense {
        bytes: Bytes::from_vec(b),
        elem: Elem::F32,
        rows,
        cols,
    }
}

#[test]
fn mla_single_position_is_w_uv_c() {
    // H = 1, dn = 2, dr = 1, dv = 2, r = 2, D = 2, no gate, o_proj = I.
    let json = r#"{"model_type":"kimi_k3","text_config":{"vocab_size":8,"hidden_size":2,
        "num_hidden_layers":1,"num_attention_heads":1,"intermediate_size":4,"kv_lora_rank":2,
        "qk_nope_head_dim":2,"qk_rope_head_dim":1,"v_head_dim":2,
        "linear_attn_config":{"kda_layers":[],"full_attn_layers":[1],"head_dim":2,"num_heads":1}}}"#;
    let cfg = ModelConfig::from_json_str(json).unwrap();
    let kv_b = [0.3, -0.2, 0.1, 0.4, 1.0, 2.0, -1.0, 0.5];
    let w = MlaWeights {
        q: QProj::Full(f32_mat(3, 2, &[0.7, -1.1, 0.2, 0.9, -0.4, 0.6])),
        kv_a: f32_mat(3, 2, &[1.0, 0.5, -0.5, 2.0, 0.3, 0.3]),
        kv_norm: vec![1.0, 1.0],
        kv_b: f32_mat(4, 2, &kv_b),
        o: f32_mat(2, 2, &[1.0, 0.0, 0.0, 1.0]),
        g: None,
    };
    let x = [1.0f32, 2.0];
    let mut cache = MlaCache::default();
    let out = mla_forward(&Par::new(1), &cfg, &w, &x, 1, &mut cache);
    // c̃ = kv_a[:2] x = [2, 3.5]; c = c̃ / sqrt(mean(c̃²) + 1e-6); softmax over one position = 1,
    // so out = W_UV c with W_UV = kv_b rows 2..4 = [[1, 2], [−1, 0.5]].
    let ct = [2.0f32, 3.5];
    let r = 1.0 / ((ct[0] * ct[0] + ct[1] * ct[1]) / 2.0 + 1e-6f32).sqrt();
    let c = [ct[0] * r, ct[1] * r];
    let want = [c[0] + 2.0 * c[1], -c[0] + 0.5 * c[1]];
    assert!(
        close(out[0], want[0], 1e-6) && close(out[1], want[1], 1e-6),
        "{out:?} vs {want:?}"
    );
    assert_eq!(cache.len, 1);
    // Cached latent = [c | k_pe] with k_pe = kv_a[2] x = 0.9 (un-rotated).
    assert!(close(cache.latents[2], 0.9, 1e-6));
}

#[test]
fn mxfp4_decode_and_matvec() {
    // Row 0: byte 0x2F → element 0 = code 0xF = −6, element 1 = code 0x2 = 1.0; scale 128 → ×2.
    let rows = 2;
    let cols = 32;
    let mut packed = vec![0u8; rows * cols / 2];
    packed[0] = 0x2F;
    packed[16] = 0x71; // row 1: el0 = 0.5, el1 = 6
    let scales = [128u8, 126];
    let w = dequant_mxfp4(&packed, &scales, rows, cols);
    assert_eq!(&w[..2], &[-12.0, 2.0]);
    assert_eq!(&w[32..34], &[0.25, 3.0]); // scale 126 → ×0.5
    let x: Vec<f32> = (0..cols).map(|i| 1.0 + i as f32).collect();
    let mut y = [0f32; 2];
    matvec_mxfp4(
        &Par::new(1),
        &mut Workspace::default(),
        Mxfp4Mat::new(&packed, &scales, rows, cols),
        &x,
        &mut y,
    );
    assert_eq!(y, [-12.0 + 4.0, 0.25 + 6.0]);
}

#[test]
fn sampler_greedy_and_seeded() {
    assert_eq!(argmax(&[1.0, 3.0, 3.0, -1.0]), 1);
    let logits: Vec<f32> = (0..50).map(|i| ((i * 37) % 11) as f32 * 0.3).collect();
    let cfg = SamplerConfig {
        temperature: 0.8,
        top_p: 0.9,
        seed: 42,
    };
    let a: Vec<u32> = {
        let mut s = Sampler::new(cfg);
        (0..20).map(|_| s.sample(&logits)).collect()
    };
    let b: Vec<u32> = {
        let mut s = Sampler::new(cfg);
        (0..20).map(|_| s.sample(&logits)).collect()
    };
    assert_eq!(a, b);
    // A tiny nucleus keeps only the top token.
    let mut s = Sampler::new(SamplerConfig { top_p: 1e-6, ..cfg });
    assert_eq!(s.sample(&logits), argmax(&logits));
}
