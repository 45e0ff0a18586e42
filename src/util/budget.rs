//! Sizes and budget expressions as the user writes them: [`parse_size`] (`512MiB`,
//! `8GB`), and budgets (`512MiB`, `25%`, `floor`, `2x floor`, `model`, `1.5x model`)
//! parsed with sane bounds and resolved to bytes with checked arithmetic, and the
//! memory-cgroup limit `budget + slack` without wrapping.
//!
//! A relative budget is bounded by [`MAX_BUDGET_MULTIPLE`]: `inf%`, `1e20%`,
//! `1e300x floor` or `infx model` are refused instead of resolving to 2^64 − 1 bytes
//! (an "unlimited" budget that later overflows when the slack is added).

use crate::util::error::UsageError;

/// Parses a size: `512MiB`, `2GiB`, `8GB`, `1.5G`, `1000000` (bytes).
/// Decimal units (kB, MB, GB, TB) are powers of 1000; binary ones (KiB, MiB, GiB,
/// TiB) and bare K/M/G/T are powers of 1024 (IEC 80000-13 names; the bare letters
/// follow `dd`/`numfmt`). The result is rounded to whole bytes.
///
/// Errors: [`UsageError::BadSize`] for a missing or malformed number, an unknown
/// unit, or a size of 2^64 bytes or more (never saturated or wrapped).
pub fn parse_size(s: &str) -> Result<u64, UsageError> {
    let bad = |reason: &str| UsageError::BadSize {
        text: s.to_string(),
        reason: reason.to_string(),
    };
    let t = s.trim();
    let idx = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(idx);
    let v: f64 = num
        .parse()
        .map_err(|_| bad("not a number (examples: 512MiB, 2GiB, 8GB)"))?;
    let mult: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "kb" => 1e3,
        "mb" => 1e6,
        "gb" => 1e9,
        "tb" => 1e12,
        "k" | "kib" => 1024.0,
        "m" | "mib" => 1024.0 * 1024.0,
        "g" | "gib" => 1024.0 * 1024.0 * 1024.0,
        "t" | "tib" => 1024f64.powi(4),
        _ => return Err(bad("unknown unit (B, kB, MB, GB, TB, KiB, MiB, GiB, TiB)")),
    };
    if mult == 1.0 {
        if let Ok(b) = num.parse::<u64>() {
            return Ok(b); // exact, also above 2^53
        }
    }
    let bytes = (v * mult).round();
    // `u64::MAX as f64` is 2^64: anything at or above it does not fit.
    if !bytes.is_finite() || bytes >= u64::MAX as f64 {
        return Err(bad("too large: sizes must be below 16 EiB (2^64 bytes)"));
    }
    Ok(bytes as u64)
}

/// Largest multiple of the floor or of the model a budget may name: `1000x floor`,
/// `1000x model`, `100000%`. Far above any useful budget (the model itself is
/// `1x model`; a budget above it only adds unused headroom), small enough that every
/// resolved budget of a model below 16 PiB fits in 64 bits. Write a size for more.
pub const MAX_BUDGET_MULTIPLE: f64 = 1000.0;

/// A budget as written: absolute, relative to the model's tensor bytes, or relative
/// to the plan's floor.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum BudgetExpr {
    /// An absolute size in bytes (> 0).
    Bytes(u64),
    /// A fraction of the model's tensor bytes (`0.25` for `"25%"`, `1.5` for
    /// `"1.5x model"`), in `(0, MAX_BUDGET_MULTIPLE]`.
    FractionOfModel(f64),
    /// A multiple of the point's floor (`1.0` for `"floor"`), in `(0, MAX_BUDGET_MULTIPLE]`.
    Floor(f64),
}

impl BudgetExpr {
    /// Parses `"512MiB"`, `"25%"`, `"floor"`, `"2x floor"` (also `2*floor`, `2×floor`),
    /// `"model"`, `"1.5x model"` (case-insensitive, spaces optional).
    ///
    /// Errors ([`UsageError::Invalid`], naming the text): not a number; zero or
    /// negative; NaN or infinite; a multiple above [`MAX_BUDGET_MULTIPLE`] (a
    /// percentage above 100 000 %); a size [`parse_size`] refuses.
    pub fn parse(s: &str) -> Result<Self, UsageError> {
        let t = s.trim().to_ascii_lowercase();
        let bad = |why: String| UsageError::Invalid(format!("invalid budget {s:?}: {why}"));
        let multiple = |num: &str, what: &str, scale: f64| -> Result<f64, UsageError> {
            let v: f64 = num
                .parse()
                .map_err(|_| bad(format!("{num:?} is not a number (e.g. \"{what}\")")))?;
            if !v.is_finite() {
                return Err(bad("must be a finite number".into()));
            }
            if v <= 0.0 {
                return Err(bad("must be positive".into()));
            }
            let m = v / scale;
            if m > MAX_BUDGET_MULTIPLE {
                return Err(bad(format!(
                    "at most {}{} (write a size like 64GiB for an absolute budget)",
                    MAX_BUDGET_MULTIPLE * scale,
                    if scale == 100.0 { "%" } else { "x" }
                )));
            }
            Ok(m)
        };
        if let Some(p) = t.strip_suffix('%') {
            return Ok(BudgetExpr::FractionOfModel(multiple(
                p.trim(),
                "25%",
                100.0,
            )?));
        }
        for (word, model) in [("floor", false), ("model", true)] {
            if let Some(head) = t.strip_suffix(word) {
                let head = head.trim().trim_end_matches(['x', '*', '×']).trim();
                let m = if head.is_empty() {
                    1.0
                } else {
                    multiple(head, &format!("2x {word}"), 1.0)?
                };
                return Ok(if model {
                    BudgetExpr::FractionOfModel(m)
                } else {
                    BudgetExpr::Floor(m)
                });
            }
        }
        let b = parse_size(&t).map_err(|e| {
            bad(format!(
                "{e} (a size like 512MiB, a fraction like 25%, floor, 2x floor, model)"
            ))
        })?;
        if b == 0 {
            return Err(bad("must be positive".into()));
        }
        Ok(BudgetExpr::Bytes(b))
    }

    /// Bytes for a model of `model_bytes` whose floor at this point is `floor_bytes`:
    /// `round(model_bytes · f)` or `ceil(floor_bytes · m)`.
    ///
    /// Errors ([`UsageError::Invalid`]): the result is 0 bytes (a tiny fraction of a
    /// tiny model) or does not fit in 64 bits.
    pub fn resolve(self, model_bytes: u64, floor_bytes: u64) -> Result<u64, UsageError> {
        let (v, base) = match self {
            BudgetExpr::Bytes(b) => return Ok(b),
            BudgetExpr::FractionOfModel(f) => ((model_bytes as f64 * f).round(), "model"),
            BudgetExpr::Floor(m) => ((floor_bytes as f64 * m).ceil(), "floor"),
        };
        // `u64::MAX as f64` is 2^64: anything at or above it does not fit.
        if v.is_nan() || v >= u64::MAX as f64 {
            return Err(UsageError::Invalid(format!(
                "budget {self} of a {base} of {} bytes is 2^64 bytes or more",
                if base == "model" {
                    model_bytes
                } else {
                    floor_bytes
                }
            )));
        }
        if v < 1.0 {
            return Err(UsageError::Invalid(format!(
                "budget {self} of a {base} of {} bytes resolves to 0 bytes",
                if base == "model" {
                    model_bytes
                } else {
                    floor_bytes
                }
            )));
        }
        Ok(v as u64)
    }
}

impl std::fmt::Display for BudgetExpr {
    /// `N bytes`, `Fx model`, `Mx floor`.
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        match self {
            BudgetExpr::Bytes(b) => write!(f, "{b} bytes"),
            BudgetExpr::FractionOfModel(x) => write!(f, "{x}x model"),
            BudgetExpr::Floor(m) => write!(f, "{m}x floor"),
        }
    }
}

/// The memory-cgroup limit for a run: `budget + slack` bytes.
///
/// Errors ([`UsageError::Invalid`]): the sum does not fit in 64 bits (never wrapped
/// or saturated: a wrapped sum would be a tiny limit, a saturated one no limit).
pub fn cgroup_limit(budget: u64, slack: u64) -> Result<u64, UsageError> {
    budget.checked_add(slack).ok_or_else(|| {
        UsageError::Invalid(format!(
            "budget {budget} bytes + cgroup_slack {slack} bytes does not fit in 64 bits"
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("512MiB").unwrap(), 512 << 20);
        assert_eq!(parse_size("2GiB").unwrap(), 2 << 30);
        assert_eq!(parse_size("8GB").unwrap(), 8_000_000_000);
        assert_eq!(parse_size("1.5G").unwrap(), 3 << 29);
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert!(parse_size("12 parsecs").is_err());
        assert!(parse_size("").is_err());
        // 99999999999 TB = 9.9999999999e22 bytes > 2^64 - 1 = 18446744073709551615.
        assert!(parse_size("99999999999TB").is_err());
        assert_eq!(parse_size("18446744073709551615").unwrap(), u64::MAX);
        assert!(parse_size("18446744073709551616").is_err());
    }

    fn err(s: &str) -> String {
        BudgetExpr::parse(s).unwrap_err().to_string()
    }

    #[test]
    fn accepted_forms() {
        assert_eq!(
            BudgetExpr::parse("512MiB").unwrap(),
            BudgetExpr::Bytes(512 << 20)
        );
        assert_eq!(
            BudgetExpr::parse("25%").unwrap(),
            BudgetExpr::FractionOfModel(0.25)
        );
        assert_eq!(BudgetExpr::parse("floor").unwrap(), BudgetExpr::Floor(1.0));
        assert_eq!(
            BudgetExpr::parse("2x floor").unwrap(),
            BudgetExpr::Floor(2.0)
        );
        assert_eq!(
            BudgetExpr::parse("1.5×FLOOR").unwrap(),
            BudgetExpr::Floor(1.5)
        );
        assert_eq!(
            BudgetExpr::parse("model").unwrap(),
            BudgetExpr::FractionOfModel(1.0)
        );
        assert_eq!(
            BudgetExpr::parse(" 1.5 * model ").unwrap(),
            BudgetExpr::FractionOfModel(1.5)
        );
        // The bounds themselves are accepted.
        assert_eq!(
            BudgetExpr::parse("100000%").unwrap(),
            BudgetExpr::FractionOfModel(1000.0)
        );
        assert_eq!(
            BudgetExpr::parse("1000x floor").unwrap(),
            BudgetExpr::Floor(1000.0)
        );
    }

    #[test]
    fn absurd_budgets_are_refused() {
        for s in [
            "inf%",
            "infinity%",
            "nan%",
            "infx model",
            "infx floor",
            "NaNx floor",
        ] {
            let e = err(s);
            assert!(e.contains(s) && e.contains("finite"), "{s}: {e}");
        }
        for s in [
            "1e20%",
            "100001%",
            "1e300x floor",
            "1000.5x floor",
            "1001x model",
        ] {
            let e = err(s);
            assert!(e.contains(s) && e.contains("at most"), "{s}: {e}");
        }
        assert!(err("1e20%").contains("at most 100000%"));
        assert!(err("1e300x floor").contains("at most 1000x"));
        for s in ["0%", "-5%", "0x floor", "-1x floor", "0", "0B"] {
            assert!(err(s).contains("must be positive"), "{s}: {}", err(s));
        }
        for s in ["abc%", "twox floor", "12 parsecs", "", "99999999999TB"] {
            assert!(BudgetExpr::parse(s).is_err(), "{s}");
        }
    }

    #[test]
    fn resolve_is_exact_or_refused() {
        // Hand-derived: 25% of 1000 = 250; 1.5x of a 1001-byte floor = 1501.5 → 1502.
        assert_eq!(
            BudgetExpr::parse("25%").unwrap().resolve(1000, 7).unwrap(),
            250
        );
        assert_eq!(
            BudgetExpr::parse("1.5x floor")
                .unwrap()
                .resolve(7, 1001)
                .unwrap(),
            1502
        );
        assert_eq!(
            BudgetExpr::parse("1000x model")
                .unwrap()
                .resolve(1 << 40, 0)
                .unwrap(),
            1000 << 40
        );
        // 1000 × 2^60 > 2^64.
        let e = BudgetExpr::Floor(1000.0)
            .resolve(0, 1 << 60)
            .unwrap_err()
            .to_string();
        assert!(e.contains("2^64"), "{e}");
        // 0.001% of 100 bytes = 0.001 bytes → 0.
        let e = BudgetExpr::parse("0.001%")
            .unwrap()
            .resolve(100, 1)
            .unwrap_err()
            .to_string();
        assert!(e.contains("0 bytes"), "{e}");
    }

    #[test]
    fn cgroup_limit_is_checked() {
        assert_eq!(
            cgroup_limit(1 << 30, 8 << 20).unwrap(),
            (1 << 30) + (8 << 20)
        );
        assert_eq!(cgroup_limit(u64::MAX - 5, 5).unwrap(), u64::MAX);
        let e = cgroup_limit(u64::MAX, 8 << 20).unwrap_err().to_string();
        assert!(e.contains("does not fit"), "{e}");
    }
}
