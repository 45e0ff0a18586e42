//! One resident `memdial run --logits-out`: the logits of every position of a prompt
//! and its generated tokens, for the steps after the runs that compare them (the
//! engines' margins, the lossy layouts' agreement).

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use anyhow::{bail, Context, Result};

use crate::sweep::util::read_npy_f32;

/// How long one logits run may take (it bounds a run that hangs).
const LOGITS_RUN_TIMEOUT: Duration = Duration::from_secs(3600);

/// Runs `bin run --model model --prompt-ids ids --max-tokens n --output ids
/// --logits-out f` (with `--ignore-eos` when `ignore_eos`) and returns the logits as
/// (rows, vocab, values): row i predicts token i + 1. The file `f` is removed after
/// reading. Errors: the run fails or times out, or its file is not a 2-D f32 `.npy`.
pub fn logits_run(
    bin: &Path,
    model: &Path,
    ids: &[u32],
    max_tokens: usize,
    ignore_eos: bool,
    f: &Path,
) -> Result<(usize, usize, Vec<f32>)> {
    let ids = ids.iter().map(|i| i.to_string()).collect::<Vec<_>>();
    let mut cmd = Command::new(bin);
    cmd.arg("run")
        .arg("--model")
        .arg(model)
        .args(["--prompt-ids", &ids.join(",")])
        .args(["--max-tokens", &max_tokens.to_string(), "--output", "ids"])
        .arg("--logits-out")
        .arg(f);
    if ignore_eos {
        cmd.arg("--ignore-eos");
    }
    let o =
        super::child::run_captured(&cmd, LOGITS_RUN_TIMEOUT).context("memdial run --logits-out")?;
    if o.timed_out {
        bail!(
            "memdial run --logits-out did not finish within {} s: killed",
            LOGITS_RUN_TIMEOUT.as_secs()
        );
    }
    if !o.status.success() {
        bail!(
            "memdial run --logits-out ({}) failed: {}",
            model.display(),
            super::child::failure(&o.status, &String::from_utf8_lossy(&o.stderr))
        );
    }
    let bytes = std::fs::read(f).with_context(|| format!("cannot read {}", f.display()))?;
    let _ = std::fs::remove_file(f);
    read_npy_f32(&bytes)
}
