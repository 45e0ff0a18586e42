//! The README is a front door: short, and every reference page in `docs/` is reachable
//! from it.

use std::path::Path;

/// Longest README, in lines.
const README_MAX_LINES: usize = 250;

fn readme() -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md"))
        .expect("README.md is readable")
}

#[test]
fn readme_is_short() {
    let n = readme().lines().count();
    assert!(
        n <= README_MAX_LINES,
        "README.md has {n} lines; keep it at most {README_MAX_LINES} (move reference to docs/)"
    );
}

#[test]
fn readme_links_every_docs_page() {
    let text = readme();
    let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs");
    let mut missing = Vec::new();
    for e in std::fs::read_dir(&docs).expect("docs/ is readable") {
        let name = e.expect("a docs/ entry").file_name();
        let name = name.to_string_lossy();
        if name.ends_with(".md") && !text.contains(&format!("(docs/{name})")) {
            missing.push(name.into_owned());
        }
    }
    missing.sort();
    assert!(
        missing.is_empty(),
        "docs pages the README does not link: {missing:?}"
    );
}

#[test]
fn readme_links_resolve() {
    let text = readme();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut broken = Vec::new();
    for (i, _) in text.match_indices("](") {
        let rest = &text[i + 2..];
        let Some(end) = rest.find(')') else { continue };
        let target = rest[..end].split('#').next().unwrap_or("");
        if target.is_empty() || target.contains("://") {
            continue;
        }
        if !root.join(target).exists() {
            broken.push(target.to_string());
        }
    }
    assert!(
        broken.is_empty(),
        "README links to missing files: {broken:?}"
    );
}
