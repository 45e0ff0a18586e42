//! `memdial pack --rvq`: the products against the codebooks match a NumPy reference
//! bit for bit (fixtures/oracle/rvq_products.py decodes and sums in the documented
//! order on the same codes and codebooks), packing is deterministic, and bad
//! arguments are refused.
//!
//! The oracle needs the venv (`testkit::oracle`); without it that test is reported as
//! `ignored, REASON` (and fails under CI).

use std::path::{Path, PathBuf};
use std::process::Command;

use memdial::format::checkpoint::Checkpoint;
use memdial::format::shard::ShardFiles;
use memdial::kernels::{matvec_rvq, Isa, Par, RvqMat, Workspace};
use memdial_testkit as testkit;

/// tiny-k3 and its 3-bit RVQ pack, in `dir`.
fn packed(dir: &Path) -> PathBuf {
    let src = dir.join("tiny-k3");
    memdial::tools::fixture::generate("tiny-k3", 0, &src, false, None, &mut |_, _| {}).unwrap();
    let out = dir.join("tiny-k3-rvq3");
    memdial::tools::rvq::pack_rvq(&src, &out, 3, &mut |_, _| {}).unwrap();
    out
}

fn tensor(dir: &Path, name: &str) -> Vec<u8> {
    let ck = Checkpoint::open(dir).unwrap();
    let t = ck.get(name).unwrap_or_else(|| panic!("{name} missing"));
    let mut b = vec![0u8; t.len as usize];
    ShardFiles::open(&ck.shards)
        .unwrap()
        .read_at(name, t, 0, &mut b)
        .unwrap();
    b
}

const L: &str = "language_model.model.layers.3.block_sparse_moe";

fn products_match_numpy() -> testkit::Outcome {
    let py = match testkit::oracle::python(Path::new(env!("CARGO_MANIFEST_DIR"))) {
        Ok(py) => py,
        Err(why) => return testkit::skip(format!("RVQ NumPy oracle not run: {why}")),
    };
    let scratch = testkit::scratch!("rvq-oracle");
    let out = packed(scratch.path());
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/oracle/rvq_products.py");
    // K3 latent experts: w1 [64, 96] (three 32-lane rounds), w2 [96, 64].
    for (mat, rows, cols) in [("w1", 64usize, 96usize), ("w2", 96, 64)] {
        let codes_name = format!("{L}.experts.5.{mat}.rvq_codes");
        let books_name = format!("{L}.rvq_codebooks.{mat}");
        let x: Vec<f32> = (0..cols)
            .map(|c| ((c * 37 % 101) as f32) / 50.0 - 1.0)
            .collect();
        let xfile = scratch.path().join(format!("x-{mat}.bin"));
        std::fs::write(
            &xfile,
            x.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>(),
        )
        .unwrap();
        let o = Command::new(&py)
            .arg(&script)
            .args([
                out.as_os_str(),
                codes_name.as_ref(),
                books_name.as_ref(),
                xfile.as_os_str(),
            ])
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let want: Vec<u32> = v["y_bits"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b.as_u64().unwrap() as u32)
            .collect();
        let (codes, books) = (tensor(&out, &codes_name), tensor(&out, &books_name));
        let w = RvqMat {
            codes: &codes,
            codebooks: &books,
            rows,
            cols,
            stages: 3,
        };
        for (threads, isa) in [(1, Isa::Scalar), (2, Isa::detect())] {
            let mut y = vec![0f32; rows];
            matvec_rvq(
                &Par::with_isa(threads, isa),
                &mut Workspace::default(),
                w,
                &x,
                &mut y,
            );
            let got: Vec<u32> = y.iter().map(|v| v.to_bits()).collect();
            assert_eq!(got, want, "{mat} {isa:?}: products differ from NumPy");
        }
        assert!(
            want.iter().any(|&b| f32::from_bits(b) != 0.0),
            "{mat}: all-zero products compare nothing"
        );
    }
    Ok(testkit::Completion::Completed)
}

/// Two packs of the same model write the same tensors (`tensors.sha256` equal), the
/// routed experts are 3 bytes per 8 weights, and every non-expert tensor is copied.
fn packing_is_deterministic() {
    let scratch = testkit::scratch!("rvq-determinism");
    let a = packed(scratch.path());
    let b = scratch.path().join("again");
    memdial::tools::rvq::pack_rvq(&scratch.path().join("tiny-k3"), &b, 3, &mut |_, _| {}).unwrap();
    let sums = |d: &Path| std::fs::read_to_string(d.join("tensors.sha256")).unwrap();
    assert_eq!(sums(&a), sums(&b));
    // experts.0.w1 [64, 96] (latent 96): 64 · 96/8 · 3 = 2304 bytes.
    assert_eq!(
        tensor(&a, &format!("{L}.experts.0.w1.rvq_codes")).len(),
        2304
    );
    let src = scratch.path().join("tiny-k3");
    let name = format!("{L}.shared_experts.down_proj.weight");
    assert_eq!(tensor(&a, &name), tensor(&src, &name));
}

/// Bits outside 1..=8, an existing output and an already-RVQ source are refused.
fn bad_arguments_are_refused() {
    let scratch = testkit::scratch!("rvq-bad");
    let out = packed(scratch.path());
    let src = scratch.path().join("tiny-k3");
    for bits in [0, 9] {
        let e =
            memdial::tools::rvq::pack_rvq(&src, &scratch.path().join("x"), bits, &mut |_, _| {});
        assert!(format!("{:#}", e.unwrap_err()).contains("outside 1..=8"));
    }
    let e = memdial::tools::rvq::pack_rvq(&src, &out, 3, &mut |_, _| {}).unwrap_err();
    assert!(format!("{e:#}").contains("already exists"), "{e:#}");
    let e = memdial::tools::rvq::pack_rvq(&out, &scratch.path().join("y"), 3, &mut |_, _| {})
        .unwrap_err();
    assert!(format!("{e:#}").contains("already RVQ"), "{e:#}");
}

fn main() -> std::process::ExitCode {
    testkit::main(
        include_str!("rvq_oracle.rs"),
        vec![
            testkit::ignorable("products_match_numpy", products_match_numpy),
            testkit::test("packing_is_deterministic", packing_is_deterministic),
            testkit::test("bad_arguments_are_refused", bad_arguments_are_refused),
        ],
    )
}
