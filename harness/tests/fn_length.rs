//! No function in `src/` or `harness/src/` is longer than [`MAX_LINES`] lines (from
//! its `fn` line to its closing brace), so each does one job; data tables and the
//! functions another change rewrites are named in [`TABLES`] with why they are long.
//! No source file there is longer than [`MAX_FILE_LINES`] lines, so a reader can hold
//! it.

use std::path::{Path, PathBuf};

use memdial_testkit::source;

/// The longest a function may be, in lines.
const MAX_LINES: usize = 120;

/// The longest a source file may be, in lines (unit tests included).
const MAX_FILE_LINES: usize = 700;

/// Functions allowed to be longer: (file under the workspace root, function, why).
const TABLES: &[(&str, &str, &str)] = &[
    (
        "harness/src/convert/meta.rs",
        "model_kvs",
        "the GGUF metadata key table: one push per llama.cpp key, in the loader's order",
    ),
    (
        "src/format/schema.rs",
        "expected_tensors",
        "the tensor-name table of each layer kind, in the published checkpoints' order",
    ),
    (
        "src/tools/fixture/presets.rs",
        "preset",
        "the fixture presets' table: one config per preset name",
    ),
    (
        "src/format/config/parse.rs",
        "from_raw",
        "the config keys one by one, each with its reference's default; typed once by the harness-layers change",
    ),
    (
        "src/model/mod.rs",
        "layer",
        "the decoder layer, split into named sublayers by the call-surface change",
    ),
    (
        "src/store/plan.rs",
        "plan_unchecked",
        "the budget plan's steps; rewritten by the time-model change",
    ),
    (
        "src/store/streaming/open.rs",
        "open",
        "the streaming store's set-up; rewritten by the time-model change",
    ),
    (
        "src/tools/pack.rs",
        "pack_checkpoint_with",
        "the packer; rewritten by the raw-control change",
    ),
];

/// The workspace root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// Every `.rs` file of the two crates' sources, relative to the root, sorted.
fn sources() -> Vec<(String, String)> {
    let root = root();
    let mut files = vec![];
    rs_files(&root.join("src"), &mut files);
    rs_files(&root.join("harness/src"), &mut files);
    files.sort();
    assert!(files.len() > 100, "found only {} files", files.len());
    files
        .iter()
        .map(|f| {
            let rel = f
                .strip_prefix(&root)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            (rel, std::fs::read_to_string(f).unwrap())
        })
        .collect()
}

fn rs_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rs_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

/// (name, first line, lines) of every function with a body in `text`.
fn functions(text: &str) -> Vec<(String, usize, usize)> {
    let code: Vec<char> = source::strip(text).chars().collect();
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    let line_of = |i: usize| 1 + code[..i].iter().filter(|&&c| c == '\n').count();
    let mut out = vec![];
    let mut i = 0;
    while i + 3 < code.len() {
        let at_word = (i == 0 || !ident(code[i - 1])) && code[i..].starts_with(&['f', 'n', ' ']);
        if !at_word {
            i += 1;
            continue;
        }
        let name: String = code[i + 3..].iter().take_while(|c| ident(**c)).collect();
        // The body: the first `{` at bracket depth 0 before a `;` (a declaration
        // without a body, e.g. in a trait, ends at `;`).
        let mut j = i + 3;
        let mut depth = 0i32;
        let mut open = None;
        while j < code.len() {
            match code[j] {
                '(' | '[' | '<' => depth += 1,
                ')' | ']' | '>' => depth -= 1,
                '{' if depth <= 0 => {
                    open = Some(j);
                    break;
                }
                ';' if depth <= 0 => break,
                _ => {}
            }
            j += 1;
        }
        let Some(open) = open else {
            i = j;
            continue;
        };
        let mut d = 0;
        let mut k = open;
        while k < code.len() {
            match code[k] {
                '{' => d += 1,
                '}' => {
                    d -= 1;
                    if d == 0 {
                        break;
                    }
                }
                _ => {}
            }
            k += 1;
        }
        let (a, b) = (line_of(i), line_of(k.min(code.len() - 1)));
        out.push((name, a, b - a + 1));
        i += 3;
    }
    out
}

#[test]
fn no_function_is_over_the_limit() {
    let mut long = vec![];
    for (rel, text) in sources() {
        for (name, line, n) in functions(&text) {
            let allowed = TABLES.iter().any(|(p, fnm, _)| *p == rel && *fnm == name);
            if n > MAX_LINES && !allowed {
                long.push(format!("{rel}:{line} fn {name}: {n} lines"));
            }
        }
    }
    assert!(
        long.is_empty(),
        "functions over {MAX_LINES} lines:\n{}",
        long.join("\n")
    );
}

#[test]
fn no_source_file_is_over_the_limit() {
    let long: Vec<String> = sources()
        .into_iter()
        .filter_map(|(rel, text)| {
            let n = text.lines().count();
            (n > MAX_FILE_LINES).then(|| format!("{rel}: {n} lines"))
        })
        .collect();
    assert!(
        long.is_empty(),
        "source files over {MAX_FILE_LINES} lines (move a long test module to NAME/tests.rs):\n{}",
        long.join("\n")
    );
}

/// The reader measures what it is meant to (a known text, counted by hand).
#[test]
fn reader_counts_body_lines() {
    let t = "fn a() {\n    let s = \"}\";\n}\n\ntrait T { fn b(&self); }\nfn c<T: Fn() -> u8>(x: T) -> Vec<u8> {\n    vec![x()]\n\n}\n";
    let f = functions(t);
    assert_eq!(
        f,
        [("a".to_string(), 1, 3), ("c".to_string(), 6, 4)],
        "{f:?}"
    );
}
