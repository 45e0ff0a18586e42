//! Unit tests of `spec`.

use std::path::Path;

use memdial::io::IoMode;

use super::repeats::DEFAULT_MAX_REPEATS;
use super::*;

#[test]
fn duplicate_axis_values_and_unbounded_limits_are_refused() {
    let base = Path::new(".");
    let refused = |text: &str, want: &str| {
        let e = format!("{:#}", Spec::parse(text, base).unwrap_err());
        assert!(e.contains(want), "{text}: {e}");
    };
    let one = "budgets = [\"floor\"]\n";
    refused(
        "budgets = [\"floor\", \"Floor \"]",
        "axis `budgets` lists \"floor\" more than once",
    );
    refused(
        &format!("{one}io = [\"direct\", \"direct\"]"),
        "axis `io` lists \"direct\" more than once",
    );
    refused(
        &format!("{one}threads = [2, 1, 2]"),
        "axis `threads` lists 2 more than once",
    );
    refused(
        &format!("{one}timeout_s = inf"),
        "timeout_s = inf is more than",
    );
    refused(&format!("{one}timeout_s = 1e300"), "is more than 604800 s");
    refused(
        &format!("{one}delay_s = -1"),
        "delay_s = -1 must be a number of seconds from 0 to 3600",
    );
    refused(&format!("{one}delay_s = nan"), "delay_s = NaN must be");
    refused(&format!("{one}delay_s = 7200"), "from 0 to 3600");
    refused(
        &format!("{one}repeats = 4000000000"),
        "must each be at most 10000",
    );
    refused(
        &format!("{one}warmup = 4294967295"),
        "must each be at most 10000",
    );
    refused(
        &format!("{one}start = [\"warm\", \"warm\"]"),
        "axis `start` lists \"warm\" more than once",
    );
    refused(
        &format!("{one}timeout_s = 1e-300"),
        "timeout_s = 1e-300 is less than 0.1 s",
    );
    refused(
        &format!("{one}max_tokens = 18446744073709551615"),
        "at most 16777216 positions",
    );
    refused(
        &format!("{one}max_context = 1000000000000"),
        "at most 16777216 positions",
    );
    refused("budgets = [\"1e20%\"]", "invalid budget \"1e20%\"");
    refused(
        &format!("{one}prompts = [{{ ids = [1], file = \"x.txt\" }}]"),
        "prompt: both `ids` and `file` are given",
    );
    refused(
        &format!("{one}prompts = [{{ idz = [1] }}]"),
        "prompt: unknown key `idz`",
    );
    refused(&format!("{one}prompts = [{{}}]"), "prompt: an empty table");
    refused(
        &format!("{one}prompts = [{{ ids = [-1] }}]"),
        "prompt ids: ",
    );
    refused(
        &format!("{one}prompts = [\"a\\u0000b\"]"),
        "prompt 0 holds a NUL character (at byte 1)",
    );
    refused(
        &format!("{one}extra_args = [\"a\\u0000\"]"),
        "extra_args: \"a\\0\" holds a NUL character",
    );
    refused(
        &format!("{one}prompts = [{{ file = \"/\" }}]"),
        "prompt file / is a directory, not a text file",
    );
    refused(
        &format!("{one}prompts = [{{ file = \"/dev/null\" }}]"),
        "prompt file /dev/null is a device, not a text file",
    );
    let fifo = std::env::temp_dir().join(format!("memdial-spec-fifo-{}", std::process::id()));
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: mkfifo reads the NUL-terminated path we own.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    refused(
        &format!(
            "{one}prompts = [{{ file = {:?} }}]",
            fifo.display().to_string()
        ),
        "is a FIFO (named pipe), not a text file",
    );
    std::fs::remove_file(&fifo).unwrap();
}

#[test]
fn product_order_and_shards() {
    let s = Spec::parse(
        r#"budgets = ["floor", "50%"]
io = ["direct", "mmap"]
prefetch = ["none"]
repeats = 2
warmup = 1
"#,
        Path::new("."),
    )
    .unwrap();
    let p = s.points();
    assert_eq!(p.len(), 4);
    assert_eq!(p[1].budget_spec, "floor");
    assert_eq!(p[1].io, IoMode::Mmap);
    assert_eq!(p[2].budget_spec, "50%");
    let runs = s.runs(&p);
    assert_eq!(runs.len(), 12);
    assert!(runs[..4].iter().all(|r| r.warmup));
    assert_eq!(runs[4].run_id(), format!("{}#r0", p[0].key()));
    let a = Shard::parse("1/3").unwrap();
    let b = Shard::parse("2/3").unwrap();
    let c = Shard::parse("3/3").unwrap();
    for i in 0..10 {
        assert_eq!(
            [a.contains(i), b.contains(i), c.contains(i)]
                .iter()
                .filter(|x| **x)
                .count(),
            1
        );
    }
    assert!(Shard::parse("0/2").is_err());
    assert!(Shard::parse("3/2").is_err());
}

#[test]
fn engines_axis_is_innermost_and_keyed_only_when_several() {
    let one = Spec::parse("budgets = [\"floor\"]", Path::new(".")).unwrap();
    let k = one.points()[0].key();
    assert!(!k.contains("engine"), "{k}");
    assert_eq!(
        one.hash(),
        Spec::parse(
            "budgets = [\"floor\"]\nengines = [\"memdial\"]",
            Path::new(".")
        )
        .unwrap()
        .hash()
    );
    let two = Spec::parse(
        "budgets = [\"floor\", \"2GiB\"]\nengines = [\"memdial\", \"mlx-lm\"]",
        Path::new("."),
    )
    .unwrap();
    let p = two.points();
    assert_eq!(p.len(), 4);
    assert_eq!(
        (p[1].budget_spec.as_str(), p[1].engine.as_str()),
        ("floor", "mlx-lm")
    );
    assert!(p[1].key().ends_with(";engine=mlx-lm"), "{}", p[1].key());
    assert!(Spec::parse("budgets = [\"1GiB\"]\nengines = [\"nope\"]", Path::new(".")).is_err());
    assert!(Spec::parse(
        "budgets = [\"1GiB\"]\nengines = [\"memdial\"]\nreference_engine = \"mlx-lm\"",
        Path::new(".")
    )
    .is_err());
}

/// The hash of every shipped spec, computed before the spec held typed values
/// and the hash form had a version: existing run directories, shards and
/// baselines must keep matching. (Prompt files are resolved against the
/// relative `sweeps/`, so the long-prompt hash is the one of a sweep started
/// from `harness/`.) The default's hash changed once, on purpose, when it gained
/// `start = ["warm", "cold"]` (its earlier run directories and baselines are of
/// another sweep).
#[test]
fn shipped_spec_hashes_are_unchanged() {
    for (name, hash) in [
        (
            "default",
            "6d036f72d908ffee1cc2306a7f58ad39ea96f76cbc7fede2bdc06970afc4ed1d",
        ),
        (
            "engines",
            "4be5d737b6e5901a403c6e4a33eded4dd2ff2b55f60c8946fd1eb74438a121db",
        ),
        (
            "floor-io",
            "68c677bf3e4af5b783ed3704b40bfd11e64ff432ed352672b16660c95dff155b",
        ),
        (
            "full-grid",
            "606cff1fbc84826335ae1e9e1630d65ee579812f3f6fd15c67ab670f72ed6d4c",
        ),
        (
            "long-prompt",
            "01df1ad390c1ecd0ac8cf6183fdf8de134dea26a1c4c5d76221c4bff8ab45ee5",
        ),
    ] {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("sweeps")
            .join(format!("{name}.toml"));
        let text = std::fs::read_to_string(path).unwrap();
        let s = Spec::parse(&text, Path::new("sweeps")).unwrap();
        assert_eq!(s.hash(), hash, "{name}.toml");
    }
    // Every shipped spec is pinned, here or in the list below (specs added later,
    // pinned from their first version; `lossless` and `serve` are the hashes their
    // sample reports under reports/ recorded).
    let later = [
        (
            "steady",
            "0824ebeb79946aa148d781dedc7b6aa346fbf7d783b951777459895681190a9a",
        ),
        (
            "lossless",
            "afed7472551b6292bf10e2e093bf6f15feee61359f10304d58d741b59602db9b",
        ),
        (
            "routed",
            "2ec996de9e812750f88ccb88e1174c72746909248464c6d3e96483718beb1437",
        ),
        (
            "serve",
            "ec0de713d7acc7a11386075174bbdc9cb45151d5b2bcd762da52ef7eea52e77a",
        ),
        (
            "ci-runner",
            "6453d48d4be0eae90d43e194867822560a6fe1468001b5b28b70ea81d39a0ea4",
        ),
        (
            "gpt-oss",
            "55737bdf0c2e02ca934f7a1f9b21abf703849d9cac7fa4972f7586adf738256a",
        ),
        (
            "gpt-oss-identity",
            "ebd5fd3d969b214dfb906f85041380181efac3d04dba494c9f24d14889229944",
        ),
        (
            "gpt-oss-120b",
            "8419fea60b14f0fcd521be1b7c984d1dc20da7c750323e1c2e456b61a3cfaa2c",
        ),
        (
            "engines-best",
            "acd29d81935fd5fe37e367eccb31511d6c6a80490894bc3e95446a6e73a29859",
        ),
    ];
    let mut unpinned = vec![];
    for e in std::fs::read_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("sweeps")).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_none_or(|x| x != "toml") {
            continue;
        }
        let name = p.file_stem().unwrap().to_string_lossy().into_owned();
        let s = Spec::parse(&std::fs::read_to_string(&p).unwrap(), Path::new("sweeps")).unwrap();
        let early = ["default", "engines", "floor-io", "full-grid", "long-prompt"];
        match later.iter().find(|(n, _)| *n == name) {
            Some((_, h)) => assert_eq!(s.hash(), *h, "{name}.toml"),
            None if early.contains(&name.as_str()) => {}
            None => unpinned.push(format!("(\"{name}\", \"{}\")", s.hash())),
        }
    }
    assert!(
        unpinned.is_empty(),
        "pin the shipped specs: {}",
        unpinned.join(", ")
    );
    // The embedded default and a minimal spec (every field at its default).
    let s = Spec::parse(DEFAULT_SPEC, Path::new(".")).unwrap();
    assert_eq!(
        s.hash(),
        "6d036f72d908ffee1cc2306a7f58ad39ea96f76cbc7fede2bdc06970afc4ed1d"
    );
    let s = Spec::parse("budgets = [\"floor\"]", Path::new(".")).unwrap();
    assert_eq!(
        s.hash(),
        "1a53ce6d5d10adcbc0c10dd70e59d1b7d3a3c2b08e8e66a4d294b5ca8fda9553"
    );
}

/// `delay_s`: 0 leaves the hash as without the key (the minimal spec's pinned hash
/// above); a cool-down is another sweep.
#[test]
fn delay_s_is_hashed_only_when_set() {
    let base = "budgets = [\"floor\"]";
    let at0 = Spec::parse(&format!("{base}\ndelay_s = 0"), Path::new(".")).unwrap();
    assert_eq!(
        at0.hash(),
        "1a53ce6d5d10adcbc0c10dd70e59d1b7d3a3c2b08e8e66a4d294b5ca8fda9553"
    );
    let at2 = Spec::parse(&format!("{base}\ndelay_s = 2.5"), Path::new(".")).unwrap();
    assert_eq!(at2.delay_s, 2.5);
    assert_ne!(at2.hash(), at0.hash());
}

/// `repeats = "auto"`: its settings, defaults and bounds, the planned rounds, and
/// the hash of a spec without it unchanged (the minimal spec's pinned hash above).
#[test]
fn auto_repeats_parse_plan_and_bound() {
    let base = Path::new(".");
    let one = "budgets = [\"floor\", \"2x floor\"]\n";
    let s = Spec::parse(
        &format!("{one}repeats = \"auto\"\nprecision = \"2.5%\"\nmax_repeats = 7"),
        base,
    )
    .unwrap();
    assert_eq!(
        s.auto_repeats(),
        Some(AutoRepeats {
            precision: 0.025,
            min_repeats: 3,
            max_repeats: 7
        })
    );
    // Seven measured rounds of both points are planned.
    assert_eq!(s.runs(&s.points()).len(), 14);
    let d = Spec::parse(&format!("{one}repeats = \"auto\""), base).unwrap();
    let a = d.auto_repeats().unwrap();
    assert_eq!((a.precision, a.max_repeats), (0.05, DEFAULT_MAX_REPEATS));
    let f = Spec::parse(&format!("{one}repeats = \"auto\"\nprecision = 0.1"), base).unwrap();
    assert_eq!(f.auto_repeats().unwrap().precision, 0.1);
    assert_ne!(s.hash(), d.hash());
    assert_eq!(Spec::parse(one, base).unwrap().auto_repeats(), None);
    assert_eq!(
        Spec::parse(one, base).unwrap().hash(),
        Spec::parse(&format!("{one}repeats = 3"), base)
            .unwrap()
            .hash()
    );
    let refused = |text: &str, want: &str| {
        let e = format!("{:#}", Spec::parse(text, base).unwrap_err());
        assert!(e.contains(want), "{text}: {e}");
    };
    refused(&format!("{one}repeats = \"many\""), "invalid sweep spec");
    refused(
        &format!("{one}repeats = 3\nprecision = \"5%\""),
        "apply to repeats = \"auto\" only",
    );
    refused(
        &format!("{one}repeats = 3\nmax_repeats = 9"),
        "apply to repeats = \"auto\" only",
    );
    refused(
        &format!("{one}repeats = \"auto\"\nmax_repeats = 2"),
        "measures at least 3 runs",
    );
    refused(
        &format!("{one}repeats = \"auto\"\nmax_repeats = 10001"),
        "must each be at most 10000",
    );
    for p in [
        "\"0%\"", "\"100%\"", "\"-5%\"", "\"fast\"", "1.5", "\"nan\"",
    ] {
        refused(
            &format!("{one}repeats = \"auto\"\nprecision = {p}"),
            "precision",
        );
    }
}

#[test]
fn default_spec_parses() {
    let s = Spec::parse(DEFAULT_SPEC, Path::new(".")).unwrap();
    assert!(!s.points().is_empty());
}

#[test]
fn unknown_keys_and_values_are_refused() {
    assert!(Spec::parse("budgets=[\"1GiB\"]\nbogus=1", Path::new(".")).is_err());
    assert!(Spec::parse("budgets=[\"1GiB\"]\nio=[\"fast\"]", Path::new(".")).is_err());
    assert!(Spec::parse("budgets=[]", Path::new(".")).is_err());
}

/// The typed spec holds the values written, parsed once: figures derived by hand.
#[test]
fn typed_spec_parses_budgets_slack_repetition_and_prediction_once() {
    let s = Spec::parse(
        "budgets = [\"2x floor\", \"25%\", \"1KiB\"]\ncgroup_slack = \"2MiB\"\n\
         repeats = \"auto\"\nprecision = \"10%\"\nmax_repeats = 7\nwarmup = 2",
        Path::new("."),
    )
    .unwrap();
    let exprs: Vec<BudgetExpr> = s.budgets.iter().map(|b| b.expr).collect();
    assert_eq!(
        exprs,
        [
            BudgetExpr::Floor(2.0),
            BudgetExpr::FractionOfModel(0.25),
            BudgetExpr::Bytes(1024)
        ]
    );
    assert_eq!(s.budgets[0].text, "2x floor");
    assert_eq!(s.cgroup_slack, 2 * 1024 * 1024);
    assert_eq!((s.repetition.warmup, s.repetition.measured), (2, 7));
    let auto = s.repetition.auto.unwrap();
    assert_eq!(
        (auto.precision, auto.min_repeats, auto.max_repeats),
        (0.1, 3, 7)
    );
    assert!(s.prediction.is_none());
    let p = s.points();
    assert_eq!(p[0].budget, BudgetExpr::Floor(2.0));
    assert_eq!(p[0].budget_spec, "2x floor");
    // The default slack: 32 MiB.
    let d = Spec::parse("budgets = [\"floor\"]", Path::new(".")).unwrap();
    assert_eq!(d.cgroup_slack, 32 << 20);
    assert_eq!((d.repetition.warmup, d.repetition.measured), (0, 3));
}

/// A point's typed later-axis values are its coordinates' text, in the product's
/// order (the first later axis outermost): the eight combinations written out.
#[test]
fn points_carry_typed_coordinates_in_key_order() {
    use crate::sweep::layout::LayoutKind;
    use crate::sweep::start::StartMode;
    let s = Spec::parse(
        "budgets = [\"floor\"]\nstart = [\"cold\", \"warm\"]\n\
         layout = [\"safetensors\", \"lossless\"]\ndepth = [0, 512]",
        Path::new("."),
    )
    .unwrap();
    let got: Vec<(StartMode, LayoutKind, u32, u32, Option<String>, String)> = s
        .points()
        .iter()
        .map(|p| {
            let text: Vec<String> = p
                .axes
                .iter()
                .filter(|c| c.in_key)
                .map(|c| c.value.clone())
                .collect();
            (
                p.start,
                p.layout,
                p.concurrency,
                p.depth,
                p.speculate.clone(),
                text.join(","),
            )
        })
        .collect();
    let (c, w, st, ll) = (
        StartMode::Cold,
        StartMode::Warm,
        LayoutKind::Safetensors,
        LayoutKind::Lossless,
    );
    let want = [
        (c, st, 0, "cold,safetensors,0"),
        (c, st, 512, "cold,safetensors,512"),
        (c, ll, 0, "cold,lossless,0"),
        (c, ll, 512, "cold,lossless,512"),
        (w, st, 0, "warm,safetensors,0"),
        (w, st, 512, "warm,safetensors,512"),
        (w, ll, 0, "warm,lossless,0"),
        (w, ll, 512, "warm,lossless,512"),
    ];
    let want: Vec<_> = want
        .iter()
        .map(|&(a, b, d, t)| (a, b, 1, d, None, t.to_string()))
        .collect();
    assert_eq!(got, want);
    let sp = Spec::parse(
        "budgets = [\"floor\"]\nspeculate = [\"off\", \"ngram:4\"]",
        Path::new("."),
    )
    .unwrap();
    let v: Vec<Option<String>> = sp.points().iter().map(|p| p.speculate.clone()).collect();
    assert_eq!(v, [None, Some("ngram:4".to_string())]);
}

/// Every axis refuses a value it does not know, naming the value and what it allows
/// (the TOML error quotes the axis's line), never falling back to a default.
#[test]
fn an_unknown_value_on_each_axis_is_refused_with_the_allowed_values() {
    let cases: [(&str, &[&str]); 9] = [
        ("io = [\"fast\"]", &["\"fast\"", "direct, buffered, mmap"]),
        (
            "prefetch = [\"psychic\"]",
            &["\"psychic\"", "none, next-layer, lookahead, oracle"],
        ),
        ("cache = [\"mru\"]", &["\"mru\"", "lru, lfru"]),
        (
            "start = [\"tepid\"]",
            &["start = [\"tepid\"]", "`cold` or `warm`"],
        ),
        (
            "layout = [\"zip\"]",
            &["unknown layout \"zip\"", "safetensors, lossless, raw, rvq1"],
        ),
        (
            "concurrency = [0]",
            &["concurrency 0", "1 (the ordinary run) to 256"],
        ),
        (
            "speculate = [\"foo\"]",
            &["\"foo\"", "off, ngram:K or replay:FILE:K"],
        ),
        ("depth = [-1]", &["depth = [-1]", "expected u32"]),
        ("engines = [\"gpt\"]", &["engine \"gpt\"", "[engine.gpt]"]),
    ];
    for (line, wants) in cases {
        let text = format!("budgets = [\"floor\"]\n{line}");
        let e = format!("{:#}", Spec::parse(&text, Path::new(".")).unwrap_err());
        for w in wants {
            assert!(e.contains(w), "{line}: {e}");
        }
    }
}
