//! `memdial convert --to gguf`, checked by an independent reader.
//!
//! - `tiny_fixtures_read_back_by_the_gguf_package`: `tiny-k3` (MXFP4 experts) and
//!   `tiny-linear` (BF16 experts) converted at `--dtype native` and `--dtype f32`, then
//!   read by `fixtures/oracle/gguf_check.py` (the `gguf` Python package's GGUFReader and
//!   dequantizers): every tensor's name, ggml shape, type and values against the
//!   safetensors (read and transformed there with numpy), every metadata key and value
//!   (tokenizer from `tiktoken.model` by its own BPE). Needs the oracle venv: reported
//!   as `ignored, REASON` without it, a failure under `CI=true`.
//! - `bad_input_fails_cleanly_and_leaves_no_file`: not a checkpoint (exit 2), an
//!   unsupported `model_type` and a truncated shard (exit 1, no panic); no output or
//!   `.partial` file is left behind.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Output};

use memdial_testkit as testkit;
use memdial_testkit::memdial_bin;
use memdial_testkit::shared_scratch;
use testkit::output_text as text;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn model(preset: &str) -> PathBuf {
    testkit::fixture(memdial_bin!(), preset, &shared_scratch!().join(preset))
}

fn convert(model: &Path, dtype: &str, out: &Path) -> Output {
    Command::new(memdial_bin!())
        .args(["convert", "--to", "gguf", "--dtype", dtype, "--model"])
        .arg(model)
        .arg("--out")
        .arg(out)
        .output()
        .unwrap()
}

fn tiny_fixtures_read_back_by_the_gguf_package() -> testkit::Outcome {
    let python = match testkit::oracle::python(&repo_root()) {
        Ok(p) => p,
        Err(e) => return testkit::skip(format!("no oracle venv (gguf package): {e}")),
    };
    let check = repo_root().join("fixtures/oracle/gguf_check.py");
    for preset in ["tiny-k3", "tiny-linear"] {
        let m = model(preset);
        for dtype in ["native", "f32"] {
            let out = shared_scratch!().join(format!("{preset}-{dtype}.gguf"));
            let o = convert(&m, dtype, &out);
            assert_eq!(o.status.code(), Some(0), "{preset} {dtype}: {}", text(&o));
            let r = Command::new(&python)
                .arg(&check)
                .arg(&m)
                .arg(&out)
                .args(["--dtype", dtype])
                .output()
                .unwrap();
            assert!(
                r.status.success(),
                "{preset} {dtype}: the gguf package disagrees:\n{}",
                text(&r)
            );
            let line = String::from_utf8_lossy(&r.stdout);
            assert!(line.starts_with("ok "), "{line}");
            std::fs::remove_file(&out).unwrap();
        }
    }
    Ok(testkit::Completion::Completed)
}

fn no_files(out: &Path) {
    assert!(!out.exists(), "{} left behind", out.display());
    let mut part = out.as_os_str().to_owned();
    part.push(".partial");
    assert!(!Path::new(&part).exists(), "partial file left behind");
}

fn bad_input_fails_cleanly_and_leaves_no_file() {
    let out = shared_scratch!().join("bad.gguf");
    // not a checkpoint: usage error
    let empty = shared_scratch!().join("empty-dir");
    std::fs::create_dir_all(&empty).unwrap();
    let o = convert(&empty, "native", &out);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("no config.json"), "{}", text(&o));
    no_files(&out);
    // an unknown --dtype is clap's usage error
    let o = convert(&model("tiny-linear"), "q4", &out);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    no_files(&out);
    // a model type llama.cpp's kimi loaders do not read
    let src = model("tiny-linear");
    let other = shared_scratch!().join("other-type");
    std::fs::create_dir_all(&other).unwrap();
    for e in std::fs::read_dir(&src).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), other.join(e.file_name())).unwrap();
    }
    let cfg = std::fs::read_to_string(other.join("config.json")).unwrap();
    std::fs::write(
        other.join("config.json"),
        cfg.replace("\"kimi_linear\"", "\"llama\""),
    )
    .unwrap();
    let o = convert(&other, "native", &out);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("model_type \"llama\""), "{}", text(&o));
    assert!(!text(&o).contains("panicked"), "{}", text(&o));
    no_files(&out);
    // a truncated shard
    std::fs::write(other.join("config.json"), &cfg).unwrap();
    let shard = other.join("model-00002-of-00002.safetensors");
    let len = std::fs::metadata(&shard).unwrap().len();
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&shard)
        .unwrap();
    f.set_len(len / 2).unwrap();
    let o = convert(&other, "f32", &out);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(!text(&o).contains("panicked"), "{}", text(&o));
    no_files(&out);
}

fn main() -> ExitCode {
    testkit::main(
        include_str!("gguf_convert.rs"),
        vec![
            testkit::ignorable(
                "tiny_fixtures_read_back_by_the_gguf_package",
                tiny_fixtures_read_back_by_the_gguf_package,
            ),
            testkit::test(
                "bad_input_fails_cleanly_and_leaves_no_file",
                bad_input_fails_cleanly_and_leaves_no_file,
            ),
        ],
    )
}
