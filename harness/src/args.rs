//! Command-line value types shared by the subcommands, the usage-error helper and the
//! reader of text files named on the command line.
//!
//! The library's name sets ([`IoMode`], [`Prefetch`], [`CachePolicy`]) stay free of
//! clap: each has `ALL` and `as_str`, and [`value_enum!`] wraps it here in a
//! [`clap::ValueEnum`] newtype, so clap lists the accepted values in `--help` and
//! refuses others with exit 2.

use memdial::io::IoMode;
use memdial::store::eviction::CachePolicy;
use memdial::store::plan::Prefetch;
use memdial::util::error::UsageError;

/// Declares `$wrap($lib)`: a [`clap::ValueEnum`] over `$lib::ALL`, named by `as_str`.
macro_rules! value_enum {
    ($(#[$m:meta])* $wrap:ident($lib:ty)) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub struct $wrap(pub $lib);

        impl clap::ValueEnum for $wrap {
            fn value_variants<'a>() -> &'a [Self] {
                static ALL: std::sync::LazyLock<Vec<$wrap>> =
                    std::sync::LazyLock::new(|| <$lib>::ALL.iter().map(|&v| $wrap(v)).collect());
                &ALL
            }
            fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
                Some(clap::builder::PossibleValue::new(self.0.as_str()))
            }
        }
    };
}

value_enum!(
    /// `--io`: how the streaming store reads weights.
    IoArg(IoMode)
);
value_enum!(
    /// `--prefetch`: what the streaming store reads ahead.
    PrefetchArg(Prefetch)
);
value_enum!(
    /// `--cache`: the expert cache's replacement policy.
    CacheArg(CachePolicy)
);

/// A usage error (exit 2) with `msg` as its text; for refusals the harness finds
/// itself (flag combinations, bad spec files, …).
pub fn usage(msg: impl std::fmt::Display) -> anyhow::Error {
    UsageError::Invalid(msg.to_string()).into()
}

/// Reads the text file `path` given to `flag` (`--prompt-file`, `--file`) whole.
/// A FIFO or `/dev/stdin` works (read to its end, as `cat` does: process
/// substitution `--prompt-file <(...)` is one).
///
/// Errors: usage errors (exit 2) naming the flag and the path when it does not exist,
/// is a directory, holds more than 256 MiB (`/dev/zero`), or is not UTF-8 (with the
/// offset of the first invalid byte); other
/// read errors (permissions, IO) as they are, with the path.
pub fn read_text_file(flag: &str, path: &std::path::Path) -> anyhow::Result<String> {
    use anyhow::Context;
    let shown = path.display();
    if path.is_dir() {
        return Err(usage(format!(
            "{flag} {shown}: is a directory, not a text file"
        )));
    }
    // Bounded: `/dev/zero` (or a FIFO that never ends) must not exhaust memory.
    const MAX_TEXT: u64 = 256 << 20;
    let read = std::fs::File::open(path).and_then(|f| {
        let mut b = Vec::new();
        std::io::Read::read_to_end(&mut std::io::Read::take(f, MAX_TEXT + 1), &mut b).map(|_| b)
    });
    let bytes = match read {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(usage(format!("{flag} {shown}: no such file")))
        }
        r => r.with_context(|| format!("{flag} {shown}: cannot read"))?,
    };
    if bytes.len() as u64 > MAX_TEXT {
        return Err(usage(format!(
            "{flag} {shown}: more than {MAX_TEXT} bytes (256 MiB), not a prompt"
        )));
    }
    String::from_utf8(bytes).map_err(|e| {
        usage(format!(
            "{flag} {shown}: not UTF-8 text (invalid byte at offset {})",
            e.utf8_error().valid_up_to()
        ))
    })
}

/// `e` (with its context chain flattened into one message) as a usage error.
pub fn as_usage(e: anyhow::Error) -> anyhow::Error {
    usage(format!("{e:#}"))
}

/// `--threads` / `--io-threads`: an integer in `1..=`[`memdial::format::limits::MAX_THREADS`]
/// (clap reports anything else as a usage error, exit 2).
pub fn thread_count(s: &str) -> Result<usize, String> {
    let max = memdial::format::limits::MAX_THREADS;
    match s.trim().parse::<usize>() {
        Ok(n) if (1..=max).contains(&n) => Ok(n),
        _ => Err(format!("must be an integer in 1..={max}")),
    }
}

/// `--speculate`: `off`, `ngram:K` or `replay:FILE:K` ([`memdial::engine::speculate::Speculate::parse`]).
pub fn speculate(s: &str) -> Result<memdial::engine::speculate::Speculate, String> {
    memdial::engine::speculate::Speculate::parse(s).map_err(|e| e.to_string())
}

/// A sampling parameter: a finite number ≥ 0 (NaN and ±inf are refused, exit 2).
pub fn finite_non_negative(s: &str) -> Result<f32, String> {
    match s.trim().parse::<f32>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
        Ok(v) => Err(format!("must be a finite number ≥ 0, got {v}")),
        Err(e) => Err(e.to_string()),
    }
}

/// `--budget` as `run` and `serve` take it, the forms a sweep spec accepts: a size
/// (`512MiB`), a fraction of the model (`25%`), `floor`, `2x floor`, `model`.
pub fn budget(s: &str) -> Result<memdial::util::budget::BudgetExpr, String> {
    memdial::util::budget::BudgetExpr::parse(s).map_err(|e| e.to_string())
}

/// Resolves a `--budget` expression to bytes for one process over the checkpoint in
/// `model`: a size as written; a fraction of the model's tensor bytes; a multiple of
/// the floor of the plan for `io`, `prefetch` and the activations `act` (what the
/// process will allocate), as `memdial plan` computes it. Only the relative forms
/// open the checkpoint.
///
/// Errors: the checkpoint or its config cannot be read or planned; the expression
/// resolves to 0 bytes or past 64 bits (usage errors).
pub fn resolve_budget(
    e: memdial::util::budget::BudgetExpr,
    model: &std::path::Path,
    io: IoMode,
    prefetch: Prefetch,
    act: impl FnOnce(&memdial::format::config::ModelConfig) -> memdial::store::plan::Activations,
) -> anyhow::Result<u64> {
    use memdial::util::budget::BudgetExpr;
    if let BudgetExpr::Bytes(b) = e {
        return Ok(b);
    }
    let cfg = memdial::format::config::load_config(model)?;
    let ck = memdial::format::checkpoint::Checkpoint::open(model).map_err(as_usage)?;
    let plan =
        memdial::store::plan::plan_unchecked(&cfg, &ck, u64::MAX / 4, io, prefetch, act(&cfg))?;
    e.resolve(plan.model_bytes, plan.floor_bytes)
        .map_err(|err| usage(format!("--budget {e}: {err}")))
}
