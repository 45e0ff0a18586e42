//! The `slo` spec key against the spec hash (apart from `goodput`, which the spec uses).

use super::goodput::Slo;

/// `slo` absent is left out of the spec hash (the shipped specs' hashes stay);
/// present, it changes the hash, and a bad target is refused at parse time.
#[test]
fn the_spec_key_and_its_hash() {
    use crate::sweep::spec::Spec;
    let base = "budgets = [\"floor\"]\nmax_tokens = 4\n";
    let dir = std::path::Path::new(".");
    let plain = Spec::parse(base, dir).unwrap();
    let with = Spec::parse(
        &format!("{base}slo = {{ ttft_s = 2.0, tpot_s = 0.5 }}"),
        dir,
    );
    let with = with.unwrap();
    assert_eq!(
        with.slo,
        Some(Slo {
            ttft_s: 2.0,
            tpot_s: 0.5
        })
    );
    assert_ne!(with.hash(), plain.hash());
    let bad = Spec::parse(
        &format!("{base}slo = {{ ttft_s = -1.0, tpot_s = 0.5 }}"),
        dir,
    );
    assert!(format!("{:#}", bad.unwrap_err()).contains("slo.ttft_s"));
    let typo = Spec::parse(&format!("{base}slo = {{ ttft = 1.0, tpot_s = 0.5 }}"), dir);
    assert!(typo.is_err());
}
