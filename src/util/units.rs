//! Sizes in bytes printed: `1.50 GiB` (parsing `512MiB` is [`crate::util::budget::parse_size`]).

/// Formats bytes with a binary unit, e.g. `1.50 GiB` (two decimals; plain `N B`
/// below 1 KiB).
pub fn fmt_bytes(b: u64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u < units.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{b} B")
    } else {
        format!("{v:.2} {}", units[u])
    }
}
