//! One trial per kernel ISA (libtest-mimic, `harness = false`): `NAME::Scalar`,
//! `NAME::Avx2`, `NAME::Avx512`, an ISA this CPU lacks reported as `ignored, … (not on
//! this CPU)` rather than silently left out.
#![allow(dead_code)]

use memdial::kernels::Isa;
use memdial_testkit::{self as testkit, Completion, Trial};

/// Every ISA the kernels have, Scalar first.
pub const ISAS: [Isa; 3] = [Isa::Scalar, Isa::Avx2, Isa::Avx512];

/// The trials `name::ISA` running `f(isa)` (which checks `isa` against the scalar
/// path where it compares bits), one per entry of [`ISAS`].
pub fn per_isa(name: &str, f: fn(Isa)) -> Vec<Trial> {
    ISAS.into_iter()
        .map(|isa| {
            testkit::ignorable_with(format!("{name}::{isa:?}"), move || {
                if !isa.is_supported() {
                    return testkit::skip_hardware(format!("{isa:?} kernels not checked"));
                }
                f(isa);
                Ok(Completion::Completed)
            })
        })
        .collect()
}

/// `Scalar` then `isa` (once if `isa` is Scalar): the first result is the reference
/// the bit-identity checks compare `isa` against.
pub fn with_scalar(isa: Isa) -> Vec<Isa> {
    let mut v = vec![Isa::Scalar];
    if isa != Isa::Scalar {
        v.push(isa);
    }
    v
}

/// A check that `f` panics with a message containing `expected` (libtest-mimic has no
/// `#[should_panic]`).
pub fn panics_with(expected: &str, f: impl FnOnce() + std::panic::UnwindSafe) {
    let err = std::panic::catch_unwind(f).expect_err("expected a panic");
    let msg = err
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| err.downcast_ref::<&str>().copied())
        .unwrap_or("");
    assert!(
        msg.contains(expected),
        "panic message {msg:?} lacks {expected:?}"
    );
}
