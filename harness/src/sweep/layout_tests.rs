//! The `layout` axis ([`super::layout`]): its spec hash rule, point keys, which
//! points are `n/a`, and the shipped `lossless.toml`.

use super::layout::{not_applicable, LayoutKind};
use super::spec::Spec;
use std::path::Path;

#[test]
fn absent_layout_keeps_hashes_and_keys_both_layouts_are_innermost() {
    let plain = Spec::parse("budgets = [\"floor\"]", Path::new(".")).unwrap();
    let same = Spec::parse(
        "budgets = [\"floor\"]\nlayout = [\"safetensors\"]",
        Path::new("."),
    )
    .unwrap();
    assert_eq!(same.hash(), plain.hash());
    assert_eq!(same.points()[0].key(), plain.points()[0].key());
    let both = Spec::parse(
        "budgets = [\"floor\"]\nio = [\"direct\", \"mmap\"]\nlayout = [\"safetensors\", \"lossless\"]",
        Path::new("."),
    )
    .unwrap();
    assert_ne!(both.hash(), plain.hash());
    let p = both.points();
    assert_eq!(p.len(), 4);
    assert!(
        p[0].key().ends_with(";layout=safetensors"),
        "{}",
        p[0].key()
    );
    assert!(p[1].key().ends_with(";layout=lossless"), "{}", p[1].key());
    assert_eq!(p[1].layout, LayoutKind::Lossless);
    assert_eq!(plain.points()[0].layout, LayoutKind::Safetensors);
    assert!(not_applicable(true, p[1].layout, p[1].io).is_none());
    assert!(not_applicable(true, p[3].layout, p[3].io).is_some());
    assert!(not_applicable(true, p[2].layout, p[2].io).is_none());
    assert!(not_applicable(false, p[1].layout, p[1].io).is_some());
    assert!(not_applicable(false, p[0].layout, p[0].io).is_none());
    assert!(Spec::parse("budgets = [\"floor\"]\nlayout = [\"gguf\"]", Path::new(".")).is_err());
    assert!(Spec::parse(
        "budgets = [\"floor\"]\nlayout = [\"lossless\", \"lossless\"]",
        Path::new(".")
    )
    .is_err());
}

#[test]
fn the_lossless_spec_runs_three_layouts_at_the_floor_and_resident() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("sweeps/lossless.toml");
    let s = Spec::load(&path).unwrap();
    let p = s.points();
    assert_eq!(p.len(), 6);
    assert_eq!(p[3].budget_spec, "1.5x model");
    assert_eq!(
        p[0].key(),
        "budget=floor;io=direct;prefetch=next-layer;cache=lru;threads=1;prompt=0;layout=safetensors"
    );
    assert_eq!(p[1].layout, LayoutKind::Raw);
    assert_eq!(p[2].layout, LayoutKind::Lossless);
    assert!(s.repetition.auto.is_none() && s.repetition.measured >= 3);
    // Interleaved: each round visits every point, the layouts side by side.
    let runs = s.runs(&p);
    let first: Vec<usize> = runs[..7].iter().map(|r| r.point.index).collect();
    assert_eq!(first, [0, 1, 2, 3, 4, 5, 0]);
}

#[test]
fn rvq_layouts_parse_by_stage_count_and_map() {
    assert_eq!(LayoutKind::parse("rvq3"), Some(LayoutKind::Rvq(3)));
    assert_eq!(LayoutKind::parse("rvq8"), Some(LayoutKind::Rvq(8)));
    for bad in ["rvq0", "rvq9", "rvq03", "rvq", "rvq-1", "RVQ3"] {
        assert_eq!(LayoutKind::parse(bad), None, "{bad}");
    }
    assert_eq!(LayoutKind::Rvq(3).as_str(), "rvq3");
    assert!(LayoutKind::Rvq(3).is_lossy() && LayoutKind::Rvq(3).is_packed());
    assert!(!LayoutKind::Lossless.is_lossy() && !LayoutKind::Raw.is_lossy());
    use memdial::io::IoMode;
    // A safetensors checkpoint: memdial maps it; other engines do not read it.
    assert_eq!(not_applicable(true, LayoutKind::Rvq(3), IoMode::Mmap), None);
    assert!(not_applicable(false, LayoutKind::Rvq(3), IoMode::Direct).is_some());
    assert!(not_applicable(true, LayoutKind::Raw, IoMode::Mmap).is_some());
}

#[test]
fn lossy_limits_are_checked_against_the_layout_axis() {
    let parse = |t: &str| Spec::parse(&format!("budgets = [\"floor\"]\n{t}"), Path::new("."));
    let ok = parse("layout = [\"safetensors\", \"rvq3\"]\n[lossy.rvq3]\nmin_top1 = 0.9").unwrap();
    assert_eq!(ok.lossy["rvq3"].min_top1, Some(0.9));
    let without = parse("layout = [\"safetensors\", \"rvq3\"]").unwrap();
    assert!(without.lossy.is_empty());
    assert_ne!(ok.hash(), without.hash(), "a limit changes what passes");
    for (t, want) in [
        (
            "layout = [\"safetensors\"]\n[lossy.rvq3]\nmin_top1 = 0.9",
            "has no rvq3",
        ),
        (
            "layout = [\"safetensors\", \"lossless\"]\n[lossy.lossless]\nmin_top1 = 0.9",
            "lossless is not one",
        ),
        (
            "layout = [\"safetensors\", \"rvq3\"]\n[lossy.rvq3]\nmin_top1 = 1.5",
            "a share from 0 to 1",
        ),
        (
            "layout = [\"safetensors\", \"rvq3\"]\n[lossy.rvq3]\nmax_top1 = 0.5",
            "unknown field",
        ),
        ("layout = [\"rvq3\"]", "the axis has none"),
    ] {
        let e = format!("{:#}", parse(t).unwrap_err());
        assert!(e.contains(want), "{t}: {e}");
    }
}
