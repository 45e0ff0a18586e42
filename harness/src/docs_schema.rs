//! The results schema documented in `docs/results.md` is the one the code writes: the
//! column names of its schema table, in table order, must equal the CSV header.

/// The code's column list. Its one reference here: if the list moves, change this line.
use crate::sweep::record::row::COLUMNS;

/// The documentation page, read at compile time (a change to it rebuilds this test).
const RESULTS_MD: &str = include_str!("../../docs/results.md");

/// The heading of the schema section in `docs/results.md`.
const SCHEMA_HEADING: &str = "## `results.csv` / `results.json` schema";

/// Column names of the first table under `heading` in `markdown`, in order: every
/// backticked name in each row's first cell (a row may document several columns, e.g.
/// `` `io`, `prefetch` ``). Errors name what is missing.
fn table_columns(markdown: &str, heading: &str) -> Result<Vec<String>, String> {
    let mut lines = markdown
        .lines()
        .skip_while(|l| l.trim_end() != heading)
        .skip(1)
        .skip_while(|l| !l.starts_with('|'));
    let header = lines.next().ok_or(format!("no table under {heading:?}"))?;
    if !header.starts_with("| Column") {
        return Err(format!(
            "the table under {heading:?} does not start with a Column header: {header:?}"
        ));
    }
    let mut names = Vec::new();
    // The separator row (`|---|---|`) holds no backticks, so it adds nothing.
    for row in lines.take_while(|l| l.starts_with('|')) {
        let first_cell = row.trim_start_matches('|').split('|').next().unwrap_or("");
        names.extend(first_cell.split('`').skip(1).step_by(2).map(str::to_string));
    }
    Ok(names)
}

#[test]
fn results_table_lists_the_columns_in_csv_order() {
    let documented = table_columns(RESULTS_MD, SCHEMA_HEADING).unwrap();
    let code: Vec<String> = COLUMNS.iter().map(|c| c.to_string()).collect();
    let first_difference = documented
        .iter()
        .zip(&code)
        .position(|(d, c)| d != c)
        .map(|i| {
            format!(
                "at index {i}: documented `{}`, code `{}`",
                documented[i], code[i]
            )
        });
    assert_eq!(
        documented,
        code,
        "docs/results.md's schema table differs from COLUMNS ({}; {} documented, {} in the code)",
        first_difference
            .as_deref()
            .unwrap_or("one list is a prefix of the other"),
        documented.len(),
        code.len()
    );
}

#[test]
fn table_columns_reads_grouped_rows_in_order() {
    // Hand-written page: two rows, the second documenting two columns.
    let md = "# t\n\n## S\n\ntext\n\n| Column | Meaning |\n|---|---|\n| `a` | one `x` |\n\
              | `b`, `c` | two |\n\nafter | `d` |\n";
    assert_eq!(table_columns(md, "## S").unwrap(), ["a", "b", "c"]);
    assert!(table_columns(md, "## missing").is_err());
}
