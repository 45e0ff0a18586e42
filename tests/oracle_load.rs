//! The independent oracles strictly load our fixture checkpoints: mlx-lm
//! (`kimi_k3`, `kimi_linear`) and transformers (`KimiLinearForCausalLM`) report no
//! missing or unexpected keys (fixtures/oracle/load_check.py).
//!
//! Needs the oracle venv, created on first use by `testkit::oracle` (`bash
//! fixtures/oracle/setup.sh --torch` under a lock). If it cannot be created the tests are
//! reported as `ignored, REASON` (libtest-mimic, `harness = false`), and fail under CI
//! (`CI` set).

use std::path::{Path, PathBuf};
use std::process::Command;

use memdial_testkit as testkit;

fn venv_python() -> Result<PathBuf, String> {
    testkit::oracle::python(Path::new(env!("CARGO_MANIFEST_DIR")))
}

fn has_torch(py: &Path) -> bool {
    Command::new(py)
        .args(["-c", "import torch, transformers"])
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

fn load_check(py: &Path, preset: &str, transformers: bool) {
    let scratch = testkit::scratch!(&format!("oracle-load-{preset}"));
    let d = scratch.path().join(preset);
    memdial::tools::fixture::generate(
        preset,
        0,
        &d,
        false,
        Some(memdial::tools::fixture::write_tokenizer),
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
    drop(scratch);
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

fn mlx_lm_strictly_loads_tiny_k3() -> testkit::Outcome {
    match venv_python() {
        Ok(py) => load_check(&py, "tiny-k3", false),
        Err(why) => return testkit::skip(format!("mlx-lm load check not done: {why}")),
    }
    Ok(testkit::Completion::Completed)
}

fn mlx_lm_and_transformers_strictly_load_tiny_linear() -> testkit::Outcome {
    let py = match venv_python() {
        Ok(py) => py,
        Err(why) => {
            return testkit::skip(format!("mlx-lm/transformers load check not done: {why}"))
        }
    };
    let torch = has_torch(&py);
    load_check(&py, "tiny-linear", torch);
    if !torch {
        return testkit::skip(
            "torch missing from the oracle venv (run `bash fixtures/oracle/setup.sh --torch`): \
             mlx-lm checked, transformers load check not done",
        );
    }
    Ok(testkit::Completion::Completed)
}

fn main() -> std::process::ExitCode {
    testkit::main(
        include_str!("oracle_load.rs"),
        vec![
            testkit::ignorable(
                "mlx_lm_strictly_loads_tiny_k3",
                mlx_lm_strictly_loads_tiny_k3,
            ),
            testkit::ignorable(
                "mlx_lm_and_transformers_strictly_load_tiny_linear",
                mlx_lm_and_transformers_strictly_load_tiny_linear,
            ),
        ],
    )
}
