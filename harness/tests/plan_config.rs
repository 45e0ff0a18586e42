//! `memdial plan` from a config alone (`--preset`, `--config`): the shipped published
//! shapes plan with hand-derived sizes, the K3 floor meets its goal, and configs that
//! cannot be planned are refused with exit 2.

use std::process::{Command, Output};

use memdial_testkit as testkit;
use memdial_testkit::memdial_bin;

fn plan(args: &[&str]) -> Output {
    Command::new(memdial_bin!())
        .arg("plan")
        .args(args)
        .output()
        .unwrap()
}

fn json(args: &[&str]) -> serde_json::Value {
    let o = plan(&[args, &["--json"]].concat());
    assert!(
        o.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).unwrap()
}

fn u(v: &serde_json::Value, k: &str) -> u64 {
    v[k].as_u64().unwrap_or_else(|| panic!("{k} missing"))
}

#[test]
fn k3_floor_from_the_published_config_is_under_2_5_gib() {
    let v = json(&[
        "--preset",
        "k3",
        "--prefetch",
        "none",
        "--max-context",
        "4096",
    ]);
    // 92 MoE layers × 896 experts (docs/model.md §9).
    assert_eq!(u(&v, "total_experts"), 92 * 896);
    // MXFP4 expert: w1, w3 [3072, 3584] and w2 [3584, 3072]: packed out·in/2 + scales out·in/32.
    let expert = 3 * (3072 * 3584 / 2 + 3072 * 3584 / 32);
    assert_eq!(expert, 17_547_264);
    let eb = u(&v, "expert_buffer_bytes");
    assert!(eb >= expert && eb <= expert + 8192, "{eb}");
    // State: 69 KDA layers × (96·128·128·4 state + 3·3·12288·4 conv) + 24 MLA layers ×
    // 4096 positions × (512 + 64)·4 (AttnRes block vectors are in the activation arena).
    let state = 69 * (96 * 128 * 128 * 4 + 3 * 3 * 12288 * 4) + 24 * 4096 * 576 * 4;
    assert_eq!(u(&v, "state_bytes"), state);
    // The largest group: a KDA layer's projections q, k, v, g [12288, 7168], o [7168, 12288],
    // f_a [128, 7168], f_b [12288, 128], b [96, 7168], BF16.
    let attn = 2 * (5 * 12288 * 7168 + 128 * 7168 + 12288 * 128 + 96 * 7168);
    assert_eq!(attn, 887_160_832);
    let slot = u(&v, "slot_bytes");
    assert!(slot >= attn && slot < attn + (1 << 20), "{slot}");
    // Nothing big is pinned at the floor: no embedding table, no lm_head, no routers.
    assert_eq!(v["embedding_pinned"], false);
    assert_eq!(u(&v, "pinned_groups"), 0);
    assert!(u(&v, "pinned_small_bytes") < 64 << 20);
    let floor = u(&v, "floor_bytes");
    assert!(floor <= 5 << 29, "K3 floor {floor} > 2.5 GiB");
    assert_eq!(v["paper"].as_str().map(|s| s.contains("k3")), Some(true));
}

#[test]
fn max_batch_plans_a_state_per_sequence_and_refuses_a_budget_without_room() {
    let base = ["--preset", "k3", "--max-context", "4096"];
    let one = json(&base);
    let four = json(&[&base[..], &["--max-batch", "4"]].concat());
    // The K3 state of one sequence as in the test above, held 4 times.
    let each = 69 * (96 * 128 * 128 * 4 + 3 * 3 * 12288 * 4) + 24 * 4096 * 576 * 4;
    assert_eq!(u(&one, "state_bytes"), each);
    assert_eq!(u(&four, "max_batch"), 4);
    assert_eq!(u(&four, "state_bytes_per_sequence"), each);
    assert_eq!(u(&four, "state_bytes"), 4 * each);
    // The arena (same 256-token forwards) gains 3 rows of logits, 4 rows of lm_head
    // block outputs (K3 vocab 163840, f32) and 4 row indices (usize).
    let arena = 7 * 163840 * 4 + 4 * 8;
    assert_eq!(
        u(&four, "activation_bytes") - u(&one, "activation_bytes"),
        arena
    );
    assert_eq!(
        u(&four, "floor_bytes") - u(&one, "floor_bytes"),
        3 * each + arena
    );
    let floor = u(&four, "floor_bytes").to_string();
    let below = (u(&four, "floor_bytes") - 1).to_string();
    assert!(
        plan(&[&base[..], &["--max-batch", "4", "--budget", &floor]].concat())
            .status
            .success()
    );
    let o = plan(&[&base[..], &["--max-batch", "4", "--budget", &below]].concat());
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("below the floor"), "{err}");
    assert!(err.contains("max batch 4"), "{err}");
    assert!(err.contains("(4 sequences × "), "{err}");
    assert_eq!(
        plan(&[&base[..], &["--max-batch", "0"]].concat())
            .status
            .code(),
        Some(2)
    );
}

#[test]
fn kimi_linear_plans_and_prints_the_io_bound_per_budget() {
    let v = json(&["--preset", "kimi-linear-48b"]);
    // 26 MoE layers × 256 BF16 experts of 3 × [1024, 2304].
    assert_eq!(u(&v, "total_experts"), 26 * 256);
    let eb = u(&v, "expert_buffer_bytes");
    assert!((3 * 1024 * 2304 * 2..=3 * 1024 * 2304 * 2 + 8192).contains(&eb));
    let o = plan(&["--preset", "kimi-linear-48b", "--device-gbps", "2.5"]);
    assert!(o.status.success());
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("config only, no weights read"), "{out}");
    assert!(out.contains("s/token"), "{out}");
    assert!(out.contains("what a pinned byte saves"), "{out}");
}

/// `--device-gbps` with `--compute-s-per-token` times every rung of the ladder: under
/// `none` prefetch nothing overlaps, so each rung is compute + bytes ÷ bandwidth
/// (0.5 s + B / 2e9 B/s), by hand from the rung's own bytes.
#[test]
fn the_ladder_is_timed_by_the_time_model() {
    let v = json(&[
        "--preset",
        "kimi-linear-48b",
        "--prefetch",
        "none",
        "--device-gbps",
        "2",
        "--compute-s-per-token",
        "0.5",
    ]);
    let ladder = v["ladder"].as_array().unwrap();
    assert!(ladder.len() >= 3);
    for r in ladder {
        let b = r["bytes_per_token"].as_f64().unwrap();
        let s = r["predicted_s_per_token"].as_f64().unwrap();
        assert!((s - (0.5 + b / 2e9)).abs() < 1e-9, "{r}");
    }
    let o = plan(&[
        "--preset",
        "kimi-linear-48b",
        "--compute-s-per-token",
        "-1",
        "--device-gbps",
        "2",
    ]);
    assert_eq!(o.status.code(), Some(2));
}

/// gpt-oss-120b's routed expert, MXFP4 (docs/model.md §10.2): `gate_up_proj_blocks[e]`
/// `[5760, 90, 16]` + `_scales[e]` `[5760, 90]`, `down_proj_blocks[e]` `[2880, 90, 16]` +
/// `_scales[e]` `[2880, 90]`, BF16 biases `[5760]` and `[2880]`.
const GPT_OSS_EXPERT: u64 =
    5760 * 90 * 16 + 5760 * 90 + 2880 * 90 * 16 + 2880 * 90 + 2 * (5760 + 2880);

#[test]
fn gpt_oss_120b_plans_per_expert_with_its_key_value_caches() {
    assert_eq!(GPT_OSS_EXPERT, 13_236_480);
    let v = json(&[
        "--preset",
        "gpt-oss-120b",
        "--io",
        "buffered",
        "--max-context",
        "4096",
        "--budget",
        "8G",
    ]);
    // 36 layers × 128 experts, each read as its slices of the stacked tensors (buffered
    // IO reads the six slices exactly).
    assert_eq!(u(&v, "total_experts"), 36 * 128);
    assert_eq!(u(&v, "expert_buffer_bytes"), GPT_OSS_EXPERT);
    // 18 full layers × 4096 positions + 18 sliding layers × 128 (the window), each
    // position 8 KV heads × 64 × (key + value) × 4 bytes = 4096 bytes.
    assert_eq!(u(&v, "state_bytes"), (18 * 4096 + 18 * 128) * 4096);
    // The model by hand: embedding and lm_head [201088, 2880] BF16; per layer q [4096, 2880]
    // + bias, k and v [512, 2880] + bias, o [2880, 4096] + bias [2880], sinks [64], two norms
    // [2880], router [128, 2880] + bias [128], 128 experts; the final norm.
    let vocab = 2 * 201_088 * 2880 * 2;
    let attn = 2 * (4096 * 2880 + 4096 + 2 * (512 * 2880 + 512) + 2880 * 4096 + 2880 + 64);
    let layer = attn + 2 * 2 * 2880 + 2 * (128 * 2880 + 128) + 128 * GPT_OSS_EXPERT;
    assert_eq!(u(&v, "model_bytes"), vocab + 36 * layer + 2 * 2880);
    // At 8 GiB every trunk byte (attention, routers, lm_head) is pinned and the rest
    // caches experts: trunk bytes save 1 byte per token, an expert byte k/E = 4/128.
    assert_eq!(u(&v, "pinned_layers"), 36);
    let cached = u(&v, "expert_cache_experts");
    assert!(cached > 300 && cached < 36 * 128, "{cached}");
    // 20b: 24 layers × 32 experts of the same shape.
    let w = json(&["--preset", "gpt-oss-20b", "--io", "buffered"]);
    assert_eq!(u(&w, "total_experts"), 24 * 32);
    assert_eq!(u(&w, "expert_buffer_bytes"), GPT_OSS_EXPERT);
}

#[test]
fn the_config_file_plans_like_the_preset() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../fixtures/configs/k3.json");
    let a = json(&["--config", path]);
    let b = json(&["--preset", "k3"]);
    assert_eq!(u(&a, "floor_bytes"), u(&b, "floor_bytes"));
}

#[test]
fn configs_that_cannot_be_planned_exit_2() {
    let dir = testkit::scratch!("plan-config");
    let text = include_str!("../../fixtures/configs/kimi-linear-48b.json");
    let huge = text.replace("\"hidden_size\": 2304", "\"hidden_size\": 23040000");
    assert_ne!(huge, text);
    let cases = [
        ("huge.json", huge),
        ("broken.json", "{ not json".to_string()),
        ("empty.json", "{}".to_string()),
    ];
    for (name, body) in cases {
        let p = dir.join(name);
        std::fs::write(&p, body).unwrap();
        let o = plan(&["--config", p.to_str().unwrap()]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{name}: {err}");
        assert!(!err.contains("panicked"), "{name}: {err}");
    }
    let o = plan(&["--config", dir.join("huge.json").to_str().unwrap()]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("sanity limit"));
    let o = plan(&["--config", "/nonexistent/config.json"]);
    assert_eq!(o.status.code(), Some(2));
    // A model directory that is not there is a usage error for plan and run alike
    // (as for sweep), not an IO failure.
    for args in [
        &["plan", "--model", "/nonexistent/model"][..],
        &["run", "--model", "/nonexistent/model", "--prompt-ids", "1"][..],
    ] {
        let o = Command::new(memdial_bin!()).args(args).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(
            err.contains("model directory /nonexistent/model does not exist"),
            "{args:?}: {err}"
        );
    }
    // The streaming store's settings without a budget would be silently ignored.
    let o = Command::new(memdial_bin!())
        .args(["run", "--model", "/nonexistent/model", "--prompt-ids", "1"])
        .args(["--io", "mmap"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("--budget"), "{err}");
    let o = plan(&["--preset", "k3", "--device-gbps", "0"]);
    assert_eq!(o.status.code(), Some(2));
}

/// One floor: `plan`, `run` and `sweep` give the same floor for the same settings (io,
/// prefetch, threads, positions), and `plan` and the sweep's `planned_floor_for`
/// column print the settings it is for in the same words; `plan` without
/// `--max-context` says its positions are its own default, not `run`'s.
#[test]
fn plan_and_run_give_the_same_floor_for_the_same_settings() {
    let dir = testkit::until_exit(testkit::scratch!("one-floor"));
    let model = testkit::fixture(memdial_bin!(), "tiny-k3", &dir.join("tiny-k3"));
    let m = model.to_str().unwrap();
    for (io, prefetch, threads) in [("direct", "none", "1"), ("buffered", "next-layer", "2")] {
        let settings = [
            "--io",
            io,
            "--prefetch",
            prefetch,
            "--threads",
            threads,
            "--max-context",
            "16",
        ];
        let planned = u(
            &json(&[&["--model", m], &settings[..]].concat()),
            "floor_bytes",
        );
        let metrics = dir.join(format!("{io}.json"));
        let o = Command::new(memdial_bin!())
            .args([
                "run",
                "--model",
                m,
                "--prompt-ids",
                "1,2,3",
                "--max-tokens",
                "3",
            ])
            .args(["--budget", "1GiB"])
            .args(settings)
            .arg("--metrics-json")
            .arg(&metrics)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", testkit::output_text(&o));
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&metrics).unwrap()).unwrap();
        assert_eq!(u(&v, "floor_bytes"), planned, "{io} / {prefetch}");
        let o = plan(&[&["--model", m], &settings[..]].concat());
        let text = String::from_utf8_lossy(&o.stdout);
        let for_ = format!("{io} / {prefetch}, {threads} kernel thread(s), 16 positions");
        let want = format!("({planned} bytes) for {for_}\n");
        assert!(text.contains(&want), "{want:?} in\n{text}");
        // The sweep of one point with the same settings (prompt 3 ids + 3 tokens,
        // max_context 16) records the same floor and the same words.
        let spec = dir.join(format!("{io}.toml"));
        std::fs::write(
            &spec,
            format!(
                "budgets = [\"1GiB\"]\nio = [\"{io}\"]\nprefetch = [\"{prefetch}\"]\n\
                 threads = [{threads}]\nprompts = [{{ ids = [1, 2, 3] }}]\nmax_tokens = 3\n\
                 max_context = 16\nrepeats = 1\n"
            ),
        )
        .unwrap();
        let out = dir.join(format!("sweep-{io}"));
        let o = Command::new(memdial_bin!())
            .args([
                "sweep",
                "--check",
                "--no-cgroup",
                "--bandwidth-probe",
                "4MiB",
            ])
            .args(["--model", m, "--spec"])
            .arg(&spec)
            .arg("--out")
            .arg(&out)
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(0), "{}", testkit::output_text(&o));
        let rows: Vec<serde_json::Value> =
            serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap())
                .unwrap();
        assert_eq!(u(&rows[0], "planned_floor_bytes"), planned);
        assert_eq!(rows[0]["planned_floor_for"], for_.as_str());
        let md = std::fs::read_to_string(out.join("report.md")).unwrap();
        assert!(md.contains(&format!(" for {for_}.")), "{md}");
    }
    // Without --max-context: plan's own default context, said on the floor line.
    let o = plan(&["--model", m]);
    let text = String::from_utf8_lossy(&o.stdout);
    let want = "for direct / none, 1 kernel thread(s), 4096 positions (plan's default context; \
                `memdial run` plans prompt + --max-tokens positions unless given --max-context";
    assert!(text.contains(want), "{want:?} in\n{text}");
    assert_eq!(json(&["--model", m])["max_context_default"], true);
    assert_eq!(
        json(&["--model", m, "--max-context", "16"])["max_context_default"],
        false
    );
}

/// `--speculate` adds the restore point and the logit rows of a verification pass,
/// by hand for `mini` at K = 4 (tests/speculation.rs derives the parts): per KDA layer
/// (3·3·1024 + 8·128² + 5·(4·1024 + 8) + 3·1024·4 + 1024 + 8) f32 × 4 B × 9 layers =
/// 6,268,608 B, plus 4·33024·4 + 5·33024·4 + 5·8 = 1,188,904 B of logit rows: 7,457,512 B.
#[test]
fn speculate_adds_the_restore_point_to_the_activations_and_the_floor() {
    let dir = testkit::until_exit(testkit::scratch!("plan-speculate"));
    std::fs::create_dir_all(&dir).unwrap();
    let cfg = dir.join("config.json");
    let j = memdial::tools::fixture::preset("mini").unwrap().config;
    std::fs::write(&cfg, j.to_string()).unwrap();
    let c = cfg.to_str().unwrap();
    let base = ["--config", c, "--max-context", "64", "--threads", "2"];
    let plain = json(&base);
    let spec = json(&[&base[..], &["--speculate", "replay:ids.txt:4"]].concat());
    let ngram = json(&[&base[..], &["--speculate", "ngram:4"]].concat());
    assert_eq!(spec, ngram, "only K matters");
    let d = |k: &str| u(&spec, k) - u(&plain, k);
    assert_eq!(d("activation_bytes"), 7_457_512);
    assert_eq!(d("floor_bytes"), 7_457_512);
    let o = plan(&[&base[..], &["--speculate", "ngram:4", "--max-batch", "2"]].concat());
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("single sequence"));
}

/// `--mean-accepted-length L` predicts passes of K + 1 rows emitting L + 1 tokens: for
/// `mini` (64 experts, top 8) a 5-row pass reads 64 · (1 − (7/8)^5) = 15961/512 distinct
/// experts per layer, the bytes per generated token are the pass's ÷ (L + 1), and the ratio
/// is against the plain plan at the same budget (`plan` without `--speculate`).
#[test]
fn an_acceptance_length_predicts_bytes_per_generated_token() {
    let dir = testkit::until_exit(testkit::scratch!("plan-accepted"));
    std::fs::create_dir_all(&dir).unwrap();
    let cfg = dir.join("config.json");
    let j = memdial::tools::fixture::preset("mini").unwrap().config;
    std::fs::write(&cfg, j.to_string()).unwrap();
    let c = cfg.to_str().unwrap();
    let base = ["--config", c, "--max-context", "64", "--budget", "83613832"];
    let plain = u(&json(&base), "predicted_bytes_per_token");
    for l in ["0", "2.5", "4"] {
        let v = json(
            &[
                &base[..],
                &["--speculate", "ngram:4", "--mean-accepted-length", l],
            ]
            .concat(),
        );
        let s = &v["speculation"];
        assert_eq!(s["draft_tokens"], 4);
        assert_eq!(s["experts_per_layer"].as_f64().unwrap(), 15961.0 / 512.0);
        let l: f64 = l.parse().unwrap();
        let fwd = s["bytes_per_forward"].as_u64().unwrap();
        let per = s["bytes_per_token"].as_u64().unwrap();
        assert_eq!(per, (fwd as f64 / (l + 1.0)).round() as u64, "L = {l}");
        let ratio = s["ratio_to_plain"].as_f64().unwrap();
        assert!((ratio - per as f64 / plain as f64).abs() < 1e-12, "{ratio}");
    }
    // Bad input: no --speculate, L above K, a negative L.
    for bad in [
        vec!["--mean-accepted-length", "2"],
        vec!["--speculate", "ngram:4", "--mean-accepted-length", "5"],
        vec!["--speculate", "ngram:4", "--mean-accepted-length", "-1"],
    ] {
        let o = plan(&[&base[..], &bad[..]].concat());
        assert_eq!(o.status.code(), Some(2), "{bad:?}");
    }
}

/// `run --budget` and `serve --budget` take the forms a spec does: `floor` and `2x floor`
/// resolve against the plan `memdial plan` prints for the same settings, `50%` against
/// the model bytes it prints (half of them, by hand); half the floor is refused (exit 2)
/// as a size below it would be.
#[test]
fn run_and_serve_take_relative_budgets() {
    let dir = testkit::until_exit(testkit::scratch!("relative-budget"));
    let model = testkit::fixture(memdial_bin!(), "tiny-k3", &dir.join("tiny-k3"));
    let m = model.to_str().unwrap();
    let settings = [
        "--io",
        "buffered",
        "--prefetch",
        "next-layer",
        "--threads",
        "2",
    ];
    // 3 prompt ids + 4 tokens: run plans 7 positions.
    let p = json(&[&["--model", m, "--max-context", "7"], &settings[..]].concat());
    let (floor, model_bytes) = (u(&p, "floor_bytes"), u(&p, "model_bytes"));
    let run = |budget: &str| {
        let metrics = dir.join("m.json");
        let _ = std::fs::remove_file(&metrics);
        let o = Command::new(memdial_bin!())
            .args([
                "run",
                "--model",
                m,
                "--prompt-ids",
                "1,2,3",
                "--max-tokens",
                "4",
            ])
            .args(["--budget", budget])
            .args(settings)
            .arg("--metrics-json")
            .arg(&metrics)
            .output()
            .unwrap();
        let v = std::fs::read_to_string(&metrics)
            .ok()
            .map(|t| serde_json::from_str::<serde_json::Value>(&t).unwrap());
        (o, v)
    };
    for (b, want) in [
        ("floor", floor),
        ("2x floor", 2 * floor),
        ("50%", model_bytes / 2 + model_bytes % 2),
    ] {
        let (o, v) = run(b);
        assert!(o.status.success(), "{b}: {}", testkit::output_text(&o));
        assert_eq!(u(&v.unwrap(), "budget_bytes"), want, "--budget {b}");
    }
    let (o, _) = run("0.5x floor");
    assert_eq!(o.status.code(), Some(2), "{}", testkit::output_text(&o));
    assert!(String::from_utf8_lossy(&o.stderr).contains("below the floor"));
    // serve: a relative budget parses and resolves; one below the floor names the
    // flags that set it.
    let o = Command::new(memdial_bin!())
        .args([
            "serve",
            "--model",
            m,
            "--port",
            "0",
            "--budget",
            "0.5x floor",
        ])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", testkit::output_text(&o));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        e.contains("--max-batch 4")
            && e.contains("--max-context 2048")
            && e.contains("below the floor"),
        "{e}"
    );
    let o = Command::new(memdial_bin!())
        .args(["serve", "--model", m, "--budget", "25 percent"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", testkit::output_text(&o));
    assert!(String::from_utf8_lossy(&o.stderr).contains("invalid budget"));
}
