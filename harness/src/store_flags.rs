//! The streaming store's command-line flags, declared once and flattened into each
//! command: [`IoFlags`] (`--io`, `--prefetch`) for every command that plans, replays or
//! opens a store (`plan`, `simulate`, `run`, `serve`), and [`StoreFlags`] (those plus
//! `--budget`, `--cache`, `--io-threads`) for the commands that open one (`run`, `serve`).
//! [`StoreFlags::to_args`] writes them back as the argv of a child `memdial run` /
//! `memdial serve`, so the harness never spells a store flag by hand.
//!
//! Each command keeps its own defaults for what is not a store flag (`--threads`,
//! `--max-context`, simulate's cache list).

use memdial::io::IoMode;
use memdial::store::eviction::CachePolicy;
use memdial::store::plan::Prefetch;
use memdial::util::budget::BudgetExpr;

use crate::args::{CacheArg, IoArg, PrefetchArg};

/// `--io-threads` when not given: the prefetch policies rarely queue more than the
/// next trunk plus a layer's experts.
pub const DEFAULT_IO_THREADS: usize = 4;

/// `--io` and `--prefetch`: how a store reads and what it reads ahead.
#[derive(clap::Args, Debug, Clone, Copy, PartialEq, Eq)]
pub struct IoFlags {
    /// IO mode of the streaming store: direct (O_DIRECT), buffered (pread), mmap.
    #[arg(long, value_enum, default_value_t = IoArg(IoMode::Direct))]
    pub io: IoArg,
    /// Prefetch policy: none, next-layer, lookahead (the router of the next layer on
    /// this layer's input), oracle (replays a recorded --trace).
    #[arg(long, value_enum, default_value_t = PrefetchArg(Prefetch::None))]
    pub prefetch: PrefetchArg,
}

impl IoFlags {
    /// The flags for `io` and `prefetch`.
    pub fn new(io: IoMode, prefetch: Prefetch) -> Self {
        IoFlags {
            io: IoArg(io),
            prefetch: PrefetchArg(prefetch),
        }
    }
}

/// The flags of a budgeted store (`run`, `serve`): without `--budget` every weight is
/// resident and the other flags, which need it, are refused by clap (exit 2).
#[derive(clap::Args, Debug, Clone, PartialEq)]
#[command(
    mut_arg("io", |a| a.requires("budget")),
    mut_arg("prefetch", |a| a.requires("budget"))
)]
pub struct StoreFlags {
    /// Memory budget: a size (512MiB, 2GiB, 8GB), a fraction of the model (25%), or
    /// `floor` / `2x floor` (of the plan for this command's settings, as `memdial plan`
    /// prints it with the same flags): stream weights through the budgeted store.
    /// Without it every weight is read into RAM at load (full residency).
    #[arg(long, value_parser = crate::args::budget)]
    pub budget: Option<BudgetExpr>,
    /// The IO mode and prefetch policy (both need --budget).
    #[command(flatten)]
    pub policy: IoFlags,
    /// Expert-cache replacement policy (needs --budget).
    #[arg(long, value_enum, default_value_t = CacheArg(CachePolicy::Lru), requires = "budget")]
    pub cache: CacheArg,
    /// Reads the streaming store keeps in flight (1..=1024): its IO threads, each doing
    /// one record read at a time (O_DIRECT, pread or an mmap fault-in; the kernel splits
    /// a record into `max_sectors_kb` requests). Default 4: the prefetch policies rarely
    /// queue more than the next trunk plus a layer's experts; `memdial iobench` shows
    /// the knee for a disk.
    #[arg(
        long,
        visible_alias = "io-depth",
        default_value_t = DEFAULT_IO_THREADS,
        value_parser = crate::args::thread_count
    )]
    pub io_threads: usize,
}

impl StoreFlags {
    /// The flags of a store of `budget` bytes with these policies and the default
    /// `--io-threads` (what a sweep point runs).
    pub fn budgeted(budget: u64, io: IoMode, prefetch: Prefetch, cache: CachePolicy) -> Self {
        StoreFlags {
            budget: Some(BudgetExpr::Bytes(budget)),
            policy: IoFlags::new(io, prefetch),
            cache: CacheArg(cache),
            io_threads: DEFAULT_IO_THREADS,
        }
    }

    /// The IO mode.
    pub fn io(&self) -> IoMode {
        self.policy.io.0
    }

    /// The prefetch policy.
    pub fn prefetch(&self) -> Prefetch {
        self.policy.prefetch.0
    }

    /// The expert-cache policy.
    pub fn cache(&self) -> CachePolicy {
        self.cache.0
    }

    /// The flags as argv that parse back to `self`: nothing without a budget (a
    /// resident process takes none), else `--budget`, `--io`, `--prefetch`, `--cache`,
    /// and `--io-threads` only when not the default (so a sweep's child command reads as
    /// a user would type it).
    pub fn to_args(&self) -> Vec<String> {
        let Some(b) = &self.budget else {
            return Vec::new();
        };
        let budget = match b {
            BudgetExpr::Bytes(n) => n.to_string(),
            BudgetExpr::FractionOfModel(x) => format!("{x}x model"),
            BudgetExpr::Floor(m) => format!("{m}x floor"),
        };
        let mut a = vec![
            "--budget".to_string(),
            budget,
            "--io".into(),
            self.io().as_str().into(),
            "--prefetch".into(),
            self.prefetch().as_str().into(),
            "--cache".into(),
            self.cache().as_str().into(),
        ];
        if self.io_threads != DEFAULT_IO_THREADS {
            a.extend(["--io-threads".into(), self.io_threads.to_string()]);
        }
        a
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser, Debug)]
    struct Cmd {
        #[command(flatten)]
        store: StoreFlags,
    }

    fn parse(args: &[&str]) -> Result<StoreFlags, clap::Error> {
        Cmd::try_parse_from(std::iter::once("memdial").chain(args.iter().copied())).map(|c| c.store)
    }

    #[test]
    fn to_args_parses_back_to_the_same_flags() {
        for flags in [
            StoreFlags::budgeted(
                123_456_789,
                IoMode::Buffered,
                Prefetch::NextLayer,
                CachePolicy::Lfru,
            ),
            StoreFlags {
                budget: Some(BudgetExpr::Floor(2.0)),
                io_threads: 16,
                ..StoreFlags::budgeted(1, IoMode::Mmap, Prefetch::Lookahead, CachePolicy::Lru)
            },
            StoreFlags {
                budget: Some(BudgetExpr::FractionOfModel(0.25)),
                ..StoreFlags::budgeted(1, IoMode::Direct, Prefetch::None, CachePolicy::Lru)
            },
        ] {
            let argv = flags.to_args();
            let refs: Vec<&str> = argv.iter().map(String::as_str).collect();
            assert_eq!(parse(&refs).unwrap(), flags, "{argv:?}");
        }
        let argv =
            StoreFlags::budgeted(42, IoMode::Direct, Prefetch::None, CachePolicy::Lru).to_args();
        assert_eq!(
            argv,
            [
                "--budget",
                "42",
                "--io",
                "direct",
                "--prefetch",
                "none",
                "--cache",
                "lru"
            ]
        );
    }

    #[test]
    fn store_flags_need_a_budget_and_io_depth_is_an_alias() {
        for args in [
            ["--io", "mmap"],
            ["--prefetch", "next-layer"],
            ["--cache", "lfru"],
        ] {
            let e = parse(&args).unwrap_err();
            assert_eq!(
                e.kind(),
                clap::error::ErrorKind::MissingRequiredArgument,
                "{args:?}"
            );
            assert!(e.to_string().contains("--budget"), "{e}");
        }
        let f = parse(&["--budget", "1GiB", "--io-depth", "8"]).unwrap();
        assert_eq!(
            (f.io_threads, f.io(), f.prefetch()),
            (8, IoMode::Direct, Prefetch::None)
        );
        assert_eq!(parse(&[]).unwrap().to_args(), Vec::<String>::new());
    }
}
