//! The independent oracles strictly load our fixture checkpoints: mlx-lm
//! (`kimi_k3`, `kimi_linear`) and transformers (`KimiLinearForCausalLM`) report no
//! missing or unexpected keys (fixtures/oracle/load_check.py).
//!
//! Needs the oracle venv (`bash fixtures/oracle/setup.sh --torch`, done by `.ci/run`).
//! Without it the test fails under CI (`CI` set) and is skipped with a message otherwise.

use std::path::{Path, PathBuf};
use std::process::Command;

fn venv_python() -> Option<PathBuf> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/oracle/.venv/bin/python");
    if p.exists() {
        Some(p)
    } else if std::env::var_os("CI").is_some() {
        panic!(
            "oracle venv missing at {}: run `bash fixtures/oracle/setup.sh --torch`",
            p.display()
        );
    } else {
        eprintln!(
            "SKIPPED: oracle venv missing ({}); run `bash fixtures/oracle/setup.sh --torch`",
            p.display()
        );
        None
    }
}

fn has_torch(py: &Path) -> bool {
    Command::new(py)
        .args(["-c", "import torch, transformers"])
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

fn load_check(py: &Path, preset: &str, transformers: bool) {
    let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("oracle-load-{preset}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    memdial::fixture::generate(
        preset,
        0,
        &d,
        false,
        Some(memdial::fixture::write_tokenizer),
        &mut |_, _| {},
    )
    .unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/oracle/load_check.py");
    let mut cmd = Command::new(py);
    cmd.arg(&script).arg(&d);
    if transformers {
        cmd.arg("--transformers");
    }
    let out = cmd.output().expect("run load_check.py");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    std::fs::remove_dir_all(&d).unwrap();
    assert!(
        out.status.success(),
        "{preset}: load_check failed\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    assert!(
        stdout.contains("mlx-lm") && stdout.contains("strict load ok"),
        "{stdout}"
    );
    if transformers {
        assert!(
            stdout.contains("0 missing/unexpected/mismatched"),
            "{stdout}"
        );
    }
    println!("{preset}: {}", stdout.trim());
}

#[test]
fn mlx_lm_strictly_loads_tiny_k3() {
    if let Some(py) = venv_python() {
        load_check(&py, "tiny-k3", false);
    }
}

#[test]
fn mlx_lm_and_transformers_strictly_load_tiny_linear() {
    if let Some(py) = venv_python() {
        let torch = has_torch(&py);
        if !torch && std::env::var_os("CI").is_some() {
            panic!(
                "torch missing from the oracle venv: run `bash fixtures/oracle/setup.sh --torch`"
            );
        }
        load_check(&py, "tiny-linear", torch);
    }
}
