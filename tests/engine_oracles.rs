//! The engine against independent implementations (docs/oracles.md).
//!
//! What runs where:
//! - **Live (mlx-lm)**: `tiny_k3_matches_mlx_lm_live`, `tiny_linear_matches_mlx_lm_live` generate
//!   the fixture checkpoint (seed 0) into a scratch directory of their own under
//!   `CARGO_TARGET_TMPDIR`, run `fixtures/oracle/mlx_logits.py DIR --out PREFIX` with the oracle
//!   venv's python (`fixtures/oracle/.venv`, created on first use by `testkit::oracle` running
//!   `bash fixtures/oracle/setup.sh --torch`; ≈ 6 s per model) and compare the engine with its
//!   output. If the venv cannot be created they are reported as `ignored, REASON` (this binary
//!   runs on libtest-mimic, `harness = false`), and fail under CI (`CI` set).
//! - **Live (mlx-lm), shaped weights**: `mini_routed_matches_mlx_lm_live`, the same on
//!   `mini-routed` (≈ 113 MB; its routing is shaped, docs/simulate.md).
//! - **Live (transformers `generate`)**: `tiny_linear_stops_on_generation_config_eos_like_transformers_live`
//!   adds a `generation_config.json` with a list of stop ids and compares the engine's greedy output
//!   with `fixtures/oracle/hf_generate.py` (≈ 7 s).
//! - **Committed goldens** (no Python at test time): `tiny_linear_matches_transformers_golden`
//!   (transformers `KimiLinearForCausalLM`; torch is too heavy to run per test) and
//!   `tiny_k3_and_tiny_linear_match_mlx_goldens` compare against `fixtures/golden/*.{json,logits.npy}`,
//!   after checking that the freshly generated checkpoint's config and safetensors hashes equal the
//!   ones recorded in the golden JSON.
//! - **MXFP4**: `mxfp4_dequant_bit_identical_for_every_routed_expert` decodes every routed-expert
//!   matrix of `tiny-k3` independently and checks the engine's dequantization bit for bit, and its
//!   `matvec_mxfp4` against an f64 product.
//!
//! Acceptance rules (per teacher-forced position `t` of the 64 fixed ids, oracle row `o`,
//! engine row `e`): `max|e−o| ≤ 1e-3 · max|o|`; `argmax e = argmax o` wherever the oracle's
//! top-2 margin exceeds that bound; the engine's 32-token greedy continuation (eos ignored)
//! equals the oracle's `greedy_ids`.
//!
//! Regenerating the goldens (after a change of the fixture generator, presets, or the oracles):
//! ```text
//! memdial fixture --preset tiny-k3 --out fixtures/models/tiny-k3 --force
//! memdial fixture --preset tiny-linear --out fixtures/models/tiny-linear --force
//! bash fixtures/oracle/regen_goldens.sh   # setup.sh --torch, load checks, 3 oracle runs, compare
//! ```
//! (`fixtures/oracle/README.md` has the details.)

mod oracle_util;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use memdial::engine::generate::{generate, GenerateParams};
use memdial::engine::sampler::SamplerConfig;
use memdial::format::config::{load_config, MlpKind};
use memdial::model::Model;
use memdial_testkit as testkit;
use oracle_util::*;
use serde_json::Value;

// ---------------------------------------------------------------------------------------------
// Fixed ids (fixtures/oracle/common.py `fixed_ids`), re-implemented.

fn fixed_ids_match_common_py() {
    // First value by the rule in u64 arithmetic: x1 = (1664525·x0 + 1013904223) mod 2^32.
    let x1 = (1_664_525u64 * 0x4D45_4D44 + 1_013_904_223) % (1u64 << 32);
    assert_eq!(fixed_ids(2304, 1)[0] as u64, (x1 >> 8) % 2048);
    let ids = fixed_ids(2304, N_TEACHER);
    assert!(ids.iter().all(|&i| i < 2048));
    // The committed goldens were made with common.py; the ids are stored in them.
    for g in ["tiny-k3.mlx", "tiny-linear.mlx", "tiny-linear.hf"] {
        let (j, _) = load_oracle(&golden_dir().join(g));
        assert_eq!(
            json_ids(&j, "ids"),
            ids,
            "{g}: ids differ from the Rust LCG"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Fixture checkpoints, oracle venv, oracle outputs.

/// A fixture checkpoint in a scratch directory of its own under `CARGO_TARGET_TMPDIR`
/// (unique to the calling test), removed on drop.
struct TmpFixture {
    _scratch: testkit::Scratch,
    dir: PathBuf,
}

impl TmpFixture {
    fn new(preset: &str, tag: &str) -> TmpFixture {
        let scratch = testkit::scratch!(&format!("oracle-{tag}-{preset}"));
        let dir = scratch.path().join(preset);
        memdial::tools::fixture::generate(
            preset,
            0,
            &dir,
            false,
            Some(memdial::tools::fixture::write_tokenizer),
            &mut |_, _| {},
        )
        .unwrap_or_else(|e| panic!("generate {preset}: {e:#}"));
        TmpFixture {
            _scratch: scratch,
            dir,
        }
    }
}

fn golden_dir() -> PathBuf {
    root().join("fixtures/golden")
}

/// The oracle venv's python (created on first use, see `testkit::oracle`), or the
/// reason it cannot be had.
fn venv_python() -> Result<PathBuf, String> {
    testkit::oracle::python(root())
}

/// Runs `mlx_logits.py` on `dir`; returns the output prefix (`PARENT_OF_DIR/oracle-out-NAME`,
/// inside the caller's scratch directory).
fn run_mlx_oracle(py: &Path, dir: &Path, name: &str) -> PathBuf {
    let prefix = dir
        .parent()
        .expect("fixture dir has a parent")
        .join(format!("oracle-out-{name}"));
    let t = Instant::now();
    let out = Command::new(py)
        .arg(root().join("fixtures/oracle/mlx_logits.py"))
        .arg(dir)
        .arg("--out")
        .arg(&prefix)
        .output()
        .expect("run mlx_logits.py");
    assert!(
        out.status.success(),
        "mlx_logits.py {name} failed\nstdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    println!(
        "{name}: mlx_logits.py {:.1} s: {}",
        t.elapsed().as_secs_f64(),
        String::from_utf8_lossy(&out.stdout).trim()
    );
    prefix
}

/// Removes `PREFIX.json` / `PREFIX.logits.npy` on drop.
struct OracleOut(PathBuf);

impl Drop for OracleOut {
    fn drop(&mut self) {
        for ext in ["json", "logits.npy"] {
            let _ = std::fs::remove_file(format!("{}.{ext}", self.0.display()));
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The comparison.

fn live_mlx(preset: &str) -> testkit::Outcome {
    let py = match venv_python() {
        Ok(py) => py,
        Err(why) => return testkit::skip(format!("mlx-lm oracle not checked: {why}")),
    };
    let fx = TmpFixture::new(preset, "live");
    let out = OracleOut(run_mlx_oracle(&py, &fx.dir, preset));
    let prefix = &out.0;
    // The oracle saw exactly this checkpoint (and our hash agrees with common.py's).
    let (j, _) = load_oracle(prefix);
    let (cfg_sha, w_sha) = checkpoint_hashes(&fx.dir);
    assert_eq!(
        j["model_dir_config_sha256"].as_str(),
        Some(cfg_sha.as_str())
    );
    assert_eq!(
        j["model_dir_safetensors_sha256"].as_str(),
        Some(w_sha.as_str())
    );
    assert_eq!(j["oracle"].as_str(), Some("mlx-lm"));
    check_against_oracle(&fx.dir, prefix, &format!("{preset} vs mlx-lm (live)"));
    Ok(testkit::Completion::Completed)
}

fn tiny_k3_matches_mlx_lm_live() -> testkit::Outcome {
    live_mlx("tiny-k3")
}

/// `mini-routed` (weights shaped for realistic routing): the shaping must not move the
/// engine off the oracle (router near-ties: `fixtures/oracle/router_margins.py`).
fn mini_routed_matches_mlx_lm_live() -> testkit::Outcome {
    live_mlx("mini-routed")
}

fn tiny_linear_matches_mlx_lm_live() -> testkit::Outcome {
    live_mlx("tiny-linear")
}

/// Compares the engine on a fresh `preset` checkpoint with the committed golden `name`.
fn golden(preset: &str, name: &str) -> f64 {
    let fx = TmpFixture::new(preset, "golden");
    let prefix = golden_dir().join(name);
    let (j, _) = load_oracle(&prefix);
    let (cfg_sha, w_sha) = checkpoint_hashes(&fx.dir);
    let regen = format!(
        "the {preset} fixture checkpoint changed since fixtures/golden/{name}.* was made; \
         regenerate the goldens:\n  memdial fixture --preset {preset} --out fixtures/models/{preset} --force\n  \
         bash fixtures/oracle/regen_goldens.sh"
    );
    assert_eq!(
        j["model_dir_config_sha256"].as_str(),
        Some(cfg_sha.as_str()),
        "config.json hash: {regen}"
    );
    assert_eq!(
        j["model_dir_safetensors_sha256"].as_str(),
        Some(w_sha.as_str()),
        "safetensors hash: {regen}"
    );
    check_against_oracle(
        &fx.dir,
        &prefix,
        &format!(
            "{preset} vs golden {name} ({})",
            j["oracle_version"].as_str().unwrap_or("?")
        ),
    )
}

/// Stop ids from `generation_config.json` (a list, one of them not config.json's eos), against
/// transformers' own `generate` (greedy) run live on the same checkpoint.
///
/// The extra stop id is taken from the committed transformers golden's greedy continuation
/// (the first token at step ≥ 4 not seen before), so both engines should stop there early;
/// the live oracle run decides what the right output is.
fn tiny_linear_stops_on_generation_config_eos_like_transformers_live() -> testkit::Outcome {
    let py = match venv_python() {
        Ok(py) => py,
        Err(why) => return testkit::skip(format!("transformers oracle not checked: {why}")),
    };
    let fx = TmpFixture::new("tiny-linear", "gen-eos");
    let cfg_json: Value =
        serde_json::from_slice(&std::fs::read(fx.dir.join("config.json")).unwrap()).unwrap();
    let cfg_eos = cfg_json["eos_token_id"]
        .as_u64()
        .expect("config.json eos_token_id") as u32;
    let (golden, _) = load_oracle(&golden_dir().join("tiny-linear.hf"));
    let greedy = json_ids(&golden, "greedy_ids");
    let step = (4..greedy.len())
        .find(|&i| greedy[i] != cfg_eos && !greedy[..i].contains(&greedy[i]))
        .expect("a fresh token in the golden continuation");
    let stop = greedy[step];
    let eos_list = vec![cfg_eos, cfg_eos + 1, stop];
    std::fs::write(
        fx.dir.join("generation_config.json"),
        serde_json::json!({"bos_token_id": 1, "eos_token_id": eos_list, "do_sample": false})
            .to_string(),
    )
    .unwrap();

    let ids = fixed_ids(cfg_json["vocab_size"].as_u64().unwrap() as usize, N_TEACHER);
    let out_path = fx.dir.parent().unwrap().join("hf-generate.json");
    let t = Instant::now();
    let ids_arg: Vec<String> = ids.iter().map(u32::to_string).collect();
    let out = Command::new(&py)
        .arg(root().join("fixtures/oracle/hf_generate.py"))
        .arg(&fx.dir)
        .args(["--ids", &ids_arg.join(","), "--max-new-tokens"])
        .arg(N_GREEDY.to_string())
        .arg("--out")
        .arg(&out_path)
        .output()
        .expect("run hf_generate.py");
    assert!(
        out.status.success(),
        "hf_generate.py failed\nstdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    println!(
        "hf_generate.py {:.1} s: {}",
        t.elapsed().as_secs_f64(),
        String::from_utf8_lossy(&out.stdout).trim()
    );
    let j: Value = serde_json::from_slice(&std::fs::read(&out_path).unwrap()).unwrap();
    let (cfg_sha, w_sha) = checkpoint_hashes(&fx.dir);
    assert_eq!(
        j["model_dir_config_sha256"].as_str(),
        Some(cfg_sha.as_str())
    );
    assert_eq!(
        j["model_dir_safetensors_sha256"].as_str(),
        Some(w_sha.as_str())
    );
    assert_eq!(
        j["generation_config_sha256"].as_str(),
        Some(sha256_hex(&std::fs::read(fx.dir.join("generation_config.json")).unwrap()).as_str())
    );
    assert_eq!(
        j["generation_config_eos_token_id"],
        serde_json::json!(eos_list)
    );
    let want = json_ids(&j, "output_ids");
    // The oracle really stopped early, on the id config.json does not name.
    assert_eq!(want.len(), step + 1, "transformers output {want:?}");
    assert_eq!(want.last(), Some(&stop));

    let cfg = load_config(&fx.dir).unwrap();
    assert_eq!(cfg.eos_token_ids, eos_list);
    let model = Model::load(&fx.dir, 2).unwrap();
    let mut st = model.new_state(N_TEACHER + N_GREEDY);
    let p = GenerateParams {
        max_tokens: N_GREEDY,
        sampler: SamplerConfig {
            temperature: 0.0,
            ..Default::default()
        },
        stop_ids: cfg.eos_token_ids.clone(),
        keep_logits: false,
        prefill_chunk: 0,
        perturb_logit: None,
    };
    let g = generate(&model, &mut st, &ids, &p, &mut |_| {}).unwrap();
    assert_eq!(g.output_ids, want, "engine vs transformers generate");
    assert!(g.stopped);
    println!(
        "tiny-linear: stopped on generation_config.json eos {stop} after {} tokens, as transformers \
         ({})",
        want.len(),
        j["oracle_version"].as_str().unwrap_or("?")
    );
    Ok(testkit::Completion::Completed)
}

fn tiny_linear_matches_transformers_golden() {
    golden("tiny-linear", "tiny-linear.hf");
}

fn tiny_k3_and_tiny_linear_match_mlx_goldens() {
    golden("tiny-k3", "tiny-k3.mlx");
    golden("tiny-linear", "tiny-linear.mlx");
}

// ---------------------------------------------------------------------------------------------
// MXFP4.

/// OCP MX v1.0 FP4 E2M1 value of a 4-bit code: bit 3 sign, bits 2..1 exponent (bias 1),
/// bit 0 mantissa; exponent 0 is subnormal (0 or 0.5).
fn e2m1(code: u8) -> f32 {
    let sign = if code & 8 != 0 { -1.0f32 } else { 1.0 };
    let exp = ((code >> 1) & 3) as i32;
    let man = (code & 1) as f32;
    let mag = if exp == 0 {
        0.5 * man
    } else {
        (1.0 + 0.5 * man) * 2f32.powi(exp - 1)
    };
    sign * mag
}

/// E8M0 scale `2^(s−127)` built from its f32 bit pattern (s = 255 is NaN).
fn e8m0(s: u8) -> f32 {
    match s {
        0 => f32::from_bits(1 << 22), // 2^-127, subnormal
        255 => f32::NAN,
        _ => f32::from_bits((s as u32) << 23),
    }
}

/// Independent dequantization: `W[r,c] = E2M1(nibble) · 2^(scale[r, c/32] − 127)`, the low
/// nibble of byte `packed[r, c/2]` holding the even element `c`.
fn ref_dequant(packed: &[u8], scale: &[u8], rows: usize, cols: usize) -> Vec<f32> {
    let mut w = vec![0f32; rows * cols];
    for r in 0..rows {
        for c in 0..cols {
            let byte = packed[r * (cols / 2) + c / 2];
            let code = if c % 2 == 0 { byte & 0x0F } else { byte >> 4 };
            w[r * cols + c] = e2m1(code) * e8m0(scale[r * (cols / 32) + c / 32]);
        }
    }
    w
}

fn independent_mxfp4_decoder_is_the_spec() {
    let table = [
        0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0,
    ];
    for (c, &want) in table.iter().enumerate() {
        assert_eq!(e2m1(c as u8).to_bits(), f32::to_bits(want), "code {c}");
    }
    for s in 1..=254u8 {
        assert_eq!(e8m0(s), 2f32.powi(s as i32 - 127), "scale {s}");
    }
    assert_eq!(e8m0(0), 2f32.powi(-127));
    assert_eq!(e8m0(127), 1.0);
}

fn mxfp4_dequant_bit_identical_for_every_routed_expert() {
    use memdial::kernels::{dequant_mxfp4, matvec_mxfp4, Mxfp4Mat, Par, Workspace};
    use safetensors::SafeTensors;

    let fx = TmpFixture::new("tiny-k3", "mxfp4");
    let cfg = load_config(&fx.dir).unwrap();
    let moe = cfg.moe.as_ref().expect("tiny-k3 has MoE layers");
    let (ed, fi) = (moe.expert_dim(cfg.hidden_size), moe.moe_intermediate_size);
    let shards: Vec<Vec<u8>> = std::fs::read_dir(&fx.dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "safetensors"))
        .map(|p| std::fs::read(p).unwrap())
        .collect();
    let sts: Vec<SafeTensors> = shards
        .iter()
        .map(|b| SafeTensors::deserialize(b).unwrap())
        .collect();
    let get = |name: &str| {
        let t = sts
            .iter()
            .find_map(|s| s.tensor(name).ok())
            .unwrap_or_else(|| panic!("{name} missing"));
        assert_eq!(t.dtype(), safetensors::Dtype::U8, "{name}");
        (t.data().to_vec(), t.shape().to_vec())
    };
    let on_disk = sts
        .iter()
        .flat_map(|s| s.names())
        .filter(|n| n.contains(".experts.") && n.ends_with(".weight_packed"))
        .count();

    let pars = [Par::new(1), Par::new(2)];
    let mut rng = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        ((rng >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    };
    let (mut n_mats, mut n_elems, mut worst_mv) = (0usize, 0usize, 0f64);
    for (l, kind) in cfg.mlp_kinds.iter().enumerate() {
        if *kind != MlpKind::Moe {
            continue;
        }
        for e in 0..moe.num_experts {
            for (w, rows, cols) in [("w1", fi, ed), ("w2", ed, fi), ("w3", fi, ed)] {
                let base = format!(
                    "{}model.layers.{l}.block_sparse_moe.experts.{e}.{w}",
                    cfg.weight_prefix
                );
                let (packed, ps) = get(&format!("{base}.weight_packed"));
                let (scale, ss) = get(&format!("{base}.weight_scale"));
                assert_eq!(ps, [rows, cols / 2], "{base}.weight_packed shape");
                assert_eq!(ss, [rows, cols / 32], "{base}.weight_scale shape");
                assert!(!scale.contains(&255), "{base}: NaN scale in the fixture");

                let want = ref_dequant(&packed, &scale, rows, cols);
                let got = dequant_mxfp4(&packed, &scale, rows, cols);
                assert_eq!(got.len(), want.len(), "{base}");
                if let Some(i) = got
                    .iter()
                    .zip(&want)
                    .position(|(a, b)| a.to_bits() != b.to_bits())
                {
                    panic!(
                        "{base}: engine dequant differs at [{}, {}]: {:e} vs {:e}",
                        i / cols,
                        i % cols,
                        got[i],
                        want[i]
                    );
                }

                // matvec_mxfp4 against an f64 product of the dequantized matrix.
                let x: Vec<f32> = (0..cols).map(|_| next()).collect();
                // Error bound of an f32 sum: 16 lane chains of cols/16 steps, then a 4-level tree
                // (`memdial::kernels::mxfp4` docs), each step ≤ u = 2^-24 relative.
                let steps = (cols / 16 + 6) as f64;
                let u = (2f64).powi(-24);
                for par in &pars {
                    let mut y = vec![0f32; rows];
                    matvec_mxfp4(
                        par,
                        &mut Workspace::default(),
                        Mxfp4Mat::new(&packed, &scale, rows, cols),
                        &x,
                        &mut y,
                    );
                    for r in 0..rows {
                        let wr = &want[r * cols..(r + 1) * cols];
                        let exact: f64 =
                            wr.iter().zip(&x).map(|(&a, &b)| a as f64 * b as f64).sum();
                        let mag: f64 = wr
                            .iter()
                            .zip(&x)
                            .map(|(&a, &b)| (a as f64 * b as f64).abs())
                            .sum();
                        let err = (y[r] as f64 - exact).abs();
                        let bound = 2.0 * steps * u * mag + f32::MIN_POSITIVE as f64;
                        assert!(
                            err <= bound,
                            "{base}: matvec_mxfp4 row {r} ({} threads): {} vs f64 {exact} (err {err:e} > {bound:e})",
                            par.threads(),
                            y[r]
                        );
                        worst_mv = worst_mv.max(err / mag.max(f64::MIN_POSITIVE));
                    }
                }
                n_mats += 1;
                n_elems += rows * cols;
            }
        }
    }
    let n_moe = cfg.mlp_kinds.iter().filter(|k| **k == MlpKind::Moe).count();
    assert_eq!(n_mats, n_moe * moe.num_experts * 3);
    assert_eq!(on_disk, n_mats, "routed-expert matrices on disk vs checked");
    println!(
        "tiny-k3: {n_mats} routed-expert matrices ({n_moe} MoE layers × {} experts × w1/w2/w3, \
         {n_elems} weights) dequantized bit-identically; matvec_mxfp4 worst |err|/Σ|w·x| {worst_mv:.2e}",
        moe.num_experts
    );
}

fn main() -> std::process::ExitCode {
    let mut trials = testkit::trials![
        fixed_ids_match_common_py,
        tiny_linear_matches_transformers_golden,
        tiny_k3_and_tiny_linear_match_mlx_goldens,
        independent_mxfp4_decoder_is_the_spec,
        mxfp4_dequant_bit_identical_for_every_routed_expert,
    ];
    trials.push(testkit::ignorable(
        "tiny_k3_matches_mlx_lm_live",
        tiny_k3_matches_mlx_lm_live,
    ));
    trials.push(testkit::ignorable(
        "tiny_linear_matches_mlx_lm_live",
        tiny_linear_matches_mlx_lm_live,
    ));
    trials.push(testkit::ignorable(
        "mini_routed_matches_mlx_lm_live",
        mini_routed_matches_mlx_lm_live,
    ));
    trials.push(testkit::ignorable(
        "tiny_linear_stops_on_generation_config_eos_like_transformers_live",
        tiny_linear_stops_on_generation_config_eos_like_transformers_live,
    ));
    testkit::main(include_str!("engine_oracles.rs"), trials)
}
