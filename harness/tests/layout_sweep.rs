//! `memdial sweep` with `layout = ["safetensors", "lossless"]` against the real
//! `memdial run` on the `tiny-k3` fixture (generated into the target directory): the
//! model is packed once into the cache, both layouts run at equal budgets in direct
//! and buffered IO, the verdict passes on identical ids, and the report compares them;
//! with the `raw` control as a third layout, the same, and both ratios reported.

// One sweep at a time (`lock`): concurrent sweeps would evict each other's pages.
use memdial_testkit::fixtures::lock;
use memdial_testkit::memdial_bin;
use memdial_testkit::output_text as text;
use memdial_testkit::shared_fixture;
use memdial_testkit::shared_scratch;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// 2 budgets × 3 IO modes × 2 layouts (mmap × lossless n/a) × 2 repeats.
const SPEC: &str = r#"
name = "layouts"
budgets = ["floor", "2x floor"]
io = ["direct", "buffered", "mmap"]
prefetch = ["next-layer"]
prompts = ["The capital of France is"]
max_tokens = 4
repeats = 2
layout = ["safetensors", "lossless"]
# What the sweep writes is checked here, on whatever machine runs it: no run is noisy.
[noise]
other_cpu_cores = 1024.0
run_queue_wait_fraction = 1024.0
steal_cores = 1024.0
foreign_read_bytes = 1125899906842624
"#;

fn cache() -> PathBuf {
    shared_scratch!().join("cache")
}

fn sweep(model: &Path, spec: &str, out: &str, extra: &[&str]) -> (Output, PathBuf) {
    sweep_in(&cache(), model, spec, out, extra)
}

/// [`sweep`] with the packed layouts cached in `cache`.
fn sweep_in(
    cache: &Path,
    model: &Path,
    spec: &str,
    out: &str,
    extra: &[&str],
) -> (Output, PathBuf) {
    let spec_path = shared_scratch!().join(format!("{out}.toml"));
    std::fs::write(&spec_path, spec).unwrap();
    let out = shared_scratch!().join(out);
    let _ = std::fs::remove_dir_all(&out);
    let o = Command::new(memdial_bin!())
        .arg("sweep")
        .arg("--model")
        .arg(model)
        .arg("--spec")
        .arg(&spec_path)
        .arg("--out")
        .arg(&out)
        .args(["--bandwidth-probe", "4MiB"])
        .args(extra)
        .env("MEMDIAL_CACHE_DIR", cache)
        .output()
        .unwrap();
    (o, out)
}

fn rows(dir: &Path) -> Vec<serde_json::Value> {
    let t = std::fs::read_to_string(dir.join("results.json")).unwrap();
    serde_json::from_str(&t).unwrap()
}

#[test]
fn both_layouts_run_at_equal_budgets_with_identical_ids() {
    let _g = lock();
    let (o, out) = sweep(shared_fixture!("tiny-k3"), SPEC, "both", &["--check"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let line = String::from_utf8_lossy(&o.stdout).trim().to_string();
    assert!(line.starts_with("PASS: "), "{line}");
    assert!(line.contains("2 point(s) n/a"), "{line}");
    let js = rows(&out);
    let ok: Vec<&serde_json::Value> = js.iter().filter(|r| r["status"] == "ok").collect();
    // 2 budgets × (direct, buffered) × 2 layouts + 2 budgets × mmap safetensors, 2 repeats.
    assert_eq!(ok.len(), 20, "{js:?}");
    let hash = ok[0]["output_ids_sha256"].as_str().unwrap();
    assert!(ok.iter().all(|r| r["output_ids_sha256"] == hash));
    let packed_dir = std::fs::read_dir(cache().join("packed"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.is_dir())
        .expect("the packed layout is in the cache");
    assert!(packed_dir.join("lossless.pack").is_file());
    assert!(!shared_fixture!("tiny-k3").join("lossless.pack").exists());
    for r in &ok {
        let key = r["point_key"].as_str().unwrap();
        match r["layout"].as_str().unwrap() {
            "lossless" => {
                assert!(key.ends_with(";layout=lossless"), "{key}");
                assert_eq!(Path::new(r["model"].as_str().unwrap()), packed_dir);
                assert!(r["lossless_decoded_bytes_per_token"].as_f64().unwrap() > 0.0);
                assert!(r["lossless_decode_s_per_token"].as_f64().unwrap() >= 0.0);
                // Its safetensors twin ran at the same budget: the larger of the floors.
                let twin = key.replace(";layout=lossless", ";layout=safetensors");
                let t = ok.iter().find(|x| x["point_key"] == twin.as_str()).unwrap();
                assert_eq!(r["budget_bytes"], t["budget_bytes"]);
                let (fl, fs) = (
                    r["planned_floor_bytes"].as_u64().unwrap(),
                    t["planned_floor_bytes"].as_u64().unwrap(),
                );
                let mult = if r["budget_spec"] == "floor" { 1 } else { 2 };
                assert_eq!(
                    r["budget_bytes"].as_u64().unwrap(),
                    mult * fl.max(fs),
                    "{key}"
                );
            }
            "safetensors" => {
                assert!(key.ends_with(";layout=safetensors"), "{key}");
                assert!(r["lossless_decoded_bytes_per_token"].is_null());
                assert!(r["lossless_decode_s_per_token"].is_null());
            }
            l => panic!("layout {l:?}"),
        }
    }
    let na: Vec<&serde_json::Value> = js.iter().filter(|r| r["status"] == "n/a").collect();
    assert_eq!(na.len(), 2);
    assert!(na
        .iter()
        .all(|r| r["io"] == "mmap" && r["layout"] == "lossless"));
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("verdict.json")).unwrap()).unwrap();
    let layouts = v["layouts"].as_array().unwrap();
    assert_eq!(layouts.len(), 4, "{v}");
    for l in layouts {
        assert!(l["s_per_token_ratio"]["ratio"].as_f64().unwrap() > 0.0);
        assert!(
            l["bytes_read_per_token_ratio"]["lo"].as_f64().is_some(),
            "{l}"
        );
        assert!(l["decode_cpu_s_per_token"].as_f64().is_some(), "{l}");
    }
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(
        md.contains("## Layouts: lossless against safetensors"),
        "{md}"
    );
    let csv = std::fs::read_to_string(out.join("results.csv")).unwrap();
    let header = csv.lines().next().unwrap();
    assert!(
        header.ends_with(
            ",lossless_decoded_bytes_per_token,lossless_decode_s_per_token,n_prompt,n_gen,avg_ts,\
             stddev_ts,load_mode,planned_floor_for,output_kind,predicted_s_per_token,\
             predicted_bytes_read_per_token,prediction_error,aggregate_tokens_per_s,ttft_p50_s,\
             ttft_p90_s,itl_p50_s,itl_p90_s,requests_output_ids,requests_prompt_index,\
             decode_run_queue_wait_s,run_queue_wait_fraction,uncontended_s_per_token,\
             uncontended_s_per_token_median,cpu_s_per_token,forwards,drafted_tokens,\
             accepted_tokens,mean_accepted_length,bytes_read_per_forward,depth_tokens,\
             depth_prefill_s,n_depth,goodput_fraction,goodput_requests_per_s,\
             io_wait_s_per_token,io_wait_trunk_s_per_token,io_wait_trunk_prefetched_s_per_token,\
             io_wait_expert_s_per_token,io_wait_expert_prefetched_s_per_token,\
             expert_compute_s_per_token,start,layout,concurrency,speculate,depth"
        ),
        "{header}"
    );

    // A second sweep of the same model uses the cached pack.
    let one = SPEC
        .replace("[\"floor\", \"2x floor\"]", "[\"floor\"]")
        .replace(", \"mmap\"", "")
        .replace("repeats = 2", "repeats = 1");
    let (o, _) = sweep(shared_fixture!("tiny-k3"), &one, "again", &[]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("(cached; packed tensors at"),
        "{}",
        text(&o)
    );
}

#[test]
fn a_layout_sweep_refuses_what_it_cannot_pack_or_read() {
    let _g = lock();
    let one = SPEC.replace("[\"floor\", \"2x floor\"]", "[\"floor\"]");
    // --packed must be a packed layout of this model.
    let (o, _) = sweep(
        shared_fixture!("tiny-k3"),
        &one,
        "not-packed",
        &["--packed", shared_fixture!("tiny-k3").to_str().unwrap()],
    );
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("is not a packed layout"), "{}", text(&o));
    // --packed without a lossless layout in the spec.
    let plain = one.replace("layout = [\"safetensors\", \"lossless\"]", "");
    let (o, _) = sweep(
        shared_fixture!("tiny-k3"),
        &plain,
        "no-layout",
        &["--packed", "/nonexistent"],
    );
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("--packed is read by the spec's `lossless` layout"));
    // Packing verifies every tensor against tensors.sha256: a model without it is refused.
    let bare = shared_scratch!().join("tiny-k3-no-manifest");
    let _ = std::fs::remove_dir_all(&bare);
    std::fs::create_dir_all(&bare).unwrap();
    for e in std::fs::read_dir(shared_fixture!("tiny-k3")).unwrap() {
        let p = e.unwrap().path();
        if p.file_name().unwrap() != "tensors.sha256" {
            std::fs::copy(&p, bare.join(p.file_name().unwrap())).unwrap();
        }
    }
    let (o, _) = sweep(&bare, &one, "no-manifest", &[]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains("memdial checksum --model"),
        "{}",
        text(&o)
    );
    // A bad --out (a directory holding other files) is refused before the model is
    // packed: nothing lands in the cache.
    let foreign = shared_scratch!().join("foreign-out");
    std::fs::create_dir_all(&foreign).unwrap();
    std::fs::write(foreign.join("notes.txt"), "mine").unwrap();
    let spec_path = shared_scratch!().join("foreign-out.toml");
    std::fs::write(&spec_path, &one).unwrap();
    let fresh_cache = shared_scratch!().join("cache-untouched");
    let _ = std::fs::remove_dir_all(&fresh_cache);
    let o = Command::new(memdial_bin!())
        .args(["sweep", "--model"])
        .arg(shared_fixture!("tiny-k3"))
        .arg("--spec")
        .arg(&spec_path)
        .arg("--out")
        .arg(&foreign)
        .env("MEMDIAL_CACHE_DIR", &fresh_cache)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains("holds no sweep (notes.txt)"),
        "{}",
        text(&o)
    );
    assert!(
        !fresh_cache.join("packed").exists(),
        "packed before refusing --out"
    );
    assert_eq!(
        std::fs::read_dir(&foreign).unwrap().count(),
        1,
        "--out was written to"
    );
}

#[test]
fn the_raw_control_runs_beside_both_layouts_with_identical_ids() {
    let _g = lock();
    let cache = shared_scratch!().join("cache-raw");
    let spec = SPEC
        .replace("[\"floor\", \"2x floor\"]", "[\"floor\"]")
        .replace(
            "layout = [\"safetensors\", \"lossless\"]",
            "layout = [\"safetensors\", \"raw\", \"lossless\"]",
        );
    let (o, out) = sweep_in(
        &cache,
        shared_fixture!("tiny-k3"),
        &spec,
        "raw",
        &["--check"],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let line = String::from_utf8_lossy(&o.stdout).trim().to_string();
    assert!(line.starts_with("PASS: "), "{line}");
    // mmap on both packed layouts is n/a.
    assert!(line.contains("2 point(s) n/a"), "{line}");
    let js = rows(&out);
    let ok: Vec<&serde_json::Value> = js.iter().filter(|r| r["status"] == "ok").collect();
    // (direct, buffered) × 3 layouts + mmap × safetensors, 2 repeats.
    assert_eq!(ok.len(), 14, "{js:?}");
    let hash = ok[0]["output_ids_sha256"].as_str().unwrap();
    assert!(ok.iter().all(|r| r["output_ids_sha256"] == hash));
    // Two cache entries, each read by its own layout's points.
    let model_of = |layout: &str| -> Vec<String> {
        let mut m: Vec<String> = ok
            .iter()
            .filter(|r| r["layout"] == layout)
            .map(|r| r["model"].as_str().unwrap().to_string())
            .collect();
        m.dedup();
        m
    };
    let (raw, lossless) = (model_of("raw"), model_of("lossless"));
    assert_eq!((raw.len(), lossless.len()), (1, 1));
    assert_ne!(raw, lossless);
    assert!(raw[0].starts_with(cache.to_str().unwrap()), "{raw:?}");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("verdict.json")).unwrap()).unwrap();
    let pairs = v["layout_pairs"]
        .as_array()
        .expect("layout_pairs in verdict.json");
    for (layout, reference, buys) in [
        ("raw", "safetensors", "layout"),
        ("lossless", "raw", "compression"),
    ] {
        assert_eq!(
            pairs
                .iter()
                .filter(|p| p["layout"] == layout
                    && p["reference"] == reference
                    && p["buys"] == buys)
                .count(),
            2,
            "{pairs:?}"
        );
    }
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(md.contains("### The raw control: what the layout buys, what coding buys"));
    // A raw pack given as the lossless layout is refused, naming what it is.
    let (o, _) = sweep_in(
        &cache,
        shared_fixture!("tiny-k3"),
        &spec,
        "raw-as-lossless",
        &["--packed", &raw[0]],
    );
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains("`memdial pack --raw` output"),
        "{}",
        text(&o)
    );
    // An unknown layout is a usage error naming the allowed ones.
    let bad = spec.replace("\"raw\", \"lossless\"", "\"zip\"");
    let (o, _) = sweep_in(&cache, shared_fixture!("tiny-k3"), &bad, "zip", &[]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains("zip") && text(&o).contains("raw"),
        "{}",
        text(&o)
    );
}

#[test]
fn pack_takes_exactly_one_of_lossless_and_raw() {
    let model = shared_fixture!("tiny-k3");
    let dir = shared_scratch!().join("pack-cli");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let pack = |args: &[&str]| {
        Command::new(memdial_bin!())
            .arg("pack")
            .arg("--model")
            .arg(model)
            .args(args)
            .output()
            .unwrap()
    };
    let out = |n: &str| dir.join(n).to_str().unwrap().to_string();
    for (args, want) in [
        (vec!["--out", &out("none")], "--lossless"),
        (
            vec!["--lossless", "--raw", "--out", &out("both")],
            "cannot be used with",
        ),
        (
            vec!["--raw", "--codec", "dict15", "--out", &out("codec")],
            "--codec",
        ),
    ] {
        let o = pack(&args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", text(&o));
        assert!(text(&o).contains(want), "{args:?}: {}", text(&o));
    }
    let o = pack(&["--raw", "--out", &out("raw")]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(text(&o).contains("packed tensors") && text(&o).contains("codec raw, ratio 1."));
    assert!(dir.join("raw/lossless.pack").is_file());
}
