//! Digests of a run directory's results files, recorded in `verdict.json` and
//! re-checked by `memdial report verify`.

use std::path::Path;

use serde::Serialize;

/// Digests of the results files.
#[derive(Debug, Clone, Default, Serialize, serde::Deserialize, PartialEq)]
pub struct ResultsDigests {
    /// SHA-256 of `results.json`.
    pub results_json: String,
    /// SHA-256 of `results.csv`.
    pub results_csv: String,
}

impl ResultsDigests {
    /// The digests of `dir`'s results files (empty strings for missing ones).
    pub fn of(dir: &Path) -> ResultsDigests {
        let h = |n: &str| {
            std::fs::read(dir.join(n))
                .map(|b| crate::sweep::util::sha256_hex(&b))
                .unwrap_or_default()
        };
        ResultsDigests {
            results_json: h("results.json"),
            results_csv: h("results.csv"),
        }
    }
}
