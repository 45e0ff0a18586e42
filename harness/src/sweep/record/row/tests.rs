//! Unit tests of `row`.

#[test]
fn formula_cells_are_neutralised_numbers_are_not() {
    assert_eq!(
        neutralise_formula("=HYPERLINK(\"x\")"),
        "'=HYPERLINK(\"x\")"
    );
    for t in ["+1", "-cmd", "@SUM(A1)", "\tx", "\rx"] {
        assert_eq!(neutralise_formula(t), format!("'{t}"));
    }
    assert_eq!(
        neutralise_formula("budget=floor;io=direct"),
        "budget=floor;io=direct"
    );
    assert_eq!(cell(&serde_json::json!(-5.0)), "-5.0");
    assert_eq!(cell(&serde_json::json!("=1+1")), "'=1+1");
}

use super::*;

#[test]
fn columns_match_the_struct() {
    let v = serde_json::to_value(Row::default()).unwrap();
    let keys: std::collections::BTreeSet<&str> =
        v.as_object().unwrap().keys().map(|k| k.as_str()).collect();
    let cols: std::collections::BTreeSet<&str> = COLUMNS.iter().copied().collect();
    assert_eq!(keys, cols);
    assert_eq!(COLUMNS.len(), cols.len(), "duplicate column");
}

/// Every field of the engine's metrics gets a non-empty `results.csv` cell under
/// its own name when the engine reports it.
#[test]
fn every_run_metric_reaches_results_csv() {
    // A metrics object with every key set to a value of its type.
    let empty = serde_json::to_value(RunMetrics::default()).unwrap();
    let mut m = serde_json::Map::new();
    for (k, v) in empty.as_object().unwrap() {
        let x = match (k.as_str(), v) {
            ("model" | "output_ids_sha256" | "output_text_sha256", _) => serde_json::json!("x"),
            ("expert_hit_rate_per_layer", _) => serde_json::json!([0.5]),
            ("metric_sources", _) => serde_json::json!({"load_s": "engine"}),
            (_, Value::Array(_)) => serde_json::json!([3]),
            _ => serde_json::json!(3),
        };
        m.insert(k.clone(), x);
    }
    let mut r = Row::default();
    r.fill_metrics(&Value::Object(m.clone())).unwrap();
    let csv = String::from_utf8(to_csv(&[r]).unwrap()).unwrap();
    let mut rd = csv::Reader::from_reader(csv.as_bytes());
    let h = rd.headers().unwrap().clone();
    let rec = rd.records().next().unwrap().unwrap();
    for k in m.keys() {
        let i = h.iter().position(|x| x == k);
        assert!(i.is_some(), "{k} is not a results.csv column");
        assert!(!rec[i.unwrap()].is_empty(), "{k} is empty in results.csv");
    }
}

#[test]
fn metrics_fill_and_csv() {
    let m = serde_json::json!({
        "schema_version": 1, "model_bytes": 1000.0, "decode_s_per_token": [0.5, 0.25, 0.75],
        "decode_s_per_token_median": null, "expert_hit_rate_per_layer": [null, 0.5],
        "output_ids": [1, 2, 3], "output_ids_sha256": "ab", "extra_key": 5
    });
    let mut r = Row {
        status: RunStatus::Ok,
        ..Default::default()
    };
    r.fill_metrics(&m).unwrap();
    assert_eq!(r.metrics.model_bytes, Some(1000));
    assert_eq!(r.metrics.decode_s_per_token_median, Some(0.5));
    assert_eq!(r.metrics.output_ids, vec![1, 2, 3]);
    let csv = String::from_utf8(to_csv(&[r]).unwrap()).unwrap();
    let mut rd = csv::Reader::from_reader(csv.as_bytes());
    let h = rd.headers().unwrap().clone();
    let rec = rd.records().next().unwrap().unwrap();
    let get = |k: &str| {
        rec.get(h.iter().position(|x| x == k).unwrap())
            .unwrap()
            .to_string()
    };
    assert_eq!(get("output_ids"), "1 2 3");
    assert_eq!(get("expert_hit_rate_per_layer"), "null 0.5");
    assert_eq!(get("ttft_s"), "");
    assert_eq!(get("warmup"), "false");
    assert!(Row::default()
        .fill_metrics(&serde_json::json!({"output_ids": [-1]}))
        .is_err());
}

/// `output_kind` is typed: a text-only run is written `text` (its CSV cell and JSON
/// value, as results files have always held it), an ids run leaves it empty, and a
/// results file naming any other kind is refused with the kinds that exist.
#[test]
fn output_kind_is_written_as_before_and_unknown_kinds_are_refused() {
    let mut r = Row {
        output_kind: Some(OutputKind::Text),
        ..Row::default()
    };
    let mut v = serde_json::to_value(&r).unwrap();
    assert_eq!(v["output_kind"], serde_json::json!("text"));
    assert_eq!(cell(&v["output_kind"]), "text");
    r.output_kind = None;
    assert_eq!(cell(&serde_json::to_value(&r).unwrap()["output_kind"]), "");
    v["output_kind"] = serde_json::json!("txt");
    let e = serde_json::from_value::<Row>(v).unwrap_err().to_string();
    assert!(
        e.contains("unknown variant `txt`, expected `ids` or `text`"),
        "{e}"
    );
}

/// A results file's later-axis cells hold only values their axes have: each unknown
/// value is refused, naming the axis and what it allows, never read as the default.
#[test]
fn unknown_axis_values_are_refused_naming_the_axis() {
    let with = |name: &str, v: serde_json::Value| {
        let mut r = Row::default();
        r.axes.insert(name.into(), v);
        r
    };
    let refused = [
        (
            "start",
            serde_json::json!("hot"),
            "axis `start` holds \"hot\": allowed values are cold, warm",
        ),
        (
            "layout",
            serde_json::json!("rvq9"),
            "axis `layout` holds \"rvq9\": allowed values are safetensors, lossless, raw, rvq1 … rvq8",
        ),
        (
            "concurrency",
            serde_json::json!("0"),
            "axis `concurrency` holds \"0\": allowed values are whole numbers 1 to 256",
        ),
        (
            "concurrency",
            serde_json::json!(257),
            "axis `concurrency` holds \"257\"",
        ),
        (
            "depth",
            serde_json::json!("-1"),
            "axis `depth` holds \"-1\": allowed values are whole numbers",
        ),
    ];
    for (name, v, want) in refused {
        let e = with(name, v).check_axes().unwrap_err().to_string();
        assert!(e.contains(want), "{e}");
    }
    for (name, v) in [
        ("start", serde_json::json!("warm")),
        ("start", serde_json::json!("")),
        ("layout", serde_json::json!("lossless")),
        ("concurrency", serde_json::json!(4)),
        ("depth", serde_json::json!("0")),
        ("speculate", serde_json::json!("ngram:4")),
    ] {
        with(name, v).check_axes().unwrap();
    }
    let dir = std::env::temp_dir().join(format!("memdial-axes-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut bad = with("layout", serde_json::json!("rvq0"));
    bad.run_id = "p0-r0".into();
    std::fs::write(
        dir.join("results.json"),
        serde_json::to_string(&[bad]).unwrap(),
    )
    .unwrap();
    let e = format!("{:#}", load(&dir).unwrap_err());
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(
        e.contains("row 1 (p0-r0)") && e.contains("axis `layout`"),
        "{e}"
    );
}
