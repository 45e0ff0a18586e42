//! `--io direct` on tmpfs (which has no O_DIRECT) is refused: by the streaming store
//! with a typed usage error that names buffered IO, and by `memdial run` (exit
//! nonzero) with the hint `--io buffered`.
//!
//! Needs a tmpfs at `/dev/shm`. Without one the tests are reported as
//! `ignored, REASON` (libtest-mimic, `harness = false`), and fail under CI (`CI` set).

use std::path::Path;
use std::process::{Command, ExitCode};

use memdial::format::checkpoint::Checkpoint;
use memdial::format::config::load_config;
use memdial::io::IoMode;
use memdial::store::eviction::CachePolicy;
use memdial::store::plan::Prefetch;
use memdial::store::streaming::{StreamOptions, StreamingStore};
use memdial_testkit as testkit;
use memdial_testkit::memdial_bin;

/// A scratch directory unique to the caller on the tmpfs `/dev/shm`, or why there is none.
fn shm_scratch(tag: &str) -> Result<testkit::Scratch, String> {
    let shm = Path::new("/dev/shm");
    if !shm.is_dir() {
        return Err("no tmpfs at /dev/shm: the O_DIRECT refusal is not checked".into());
    }
    testkit::try_scratch_in(shm, tag).map_err(|e| {
        format!("cannot create a directory in /dev/shm ({e}): the O_DIRECT refusal is not checked")
    })
}

fn direct_io_on_tmpfs_is_refused_with_a_hint() -> testkit::Outcome {
    let s = match shm_scratch("memdial-dio") {
        Ok(s) => s,
        Err(why) => return testkit::skip(why),
    };
    let d = s.join("tiny-k3");
    memdial::tools::fixture::generate("tiny-k3", 0, &d, false, None, &mut |_, _| {}).unwrap();
    let cfg = load_config(&d).unwrap();
    let ck = Checkpoint::open(&d).unwrap();
    let res = StreamingStore::open(
        &cfg,
        &ck,
        StreamOptions {
            budget: 1 << 30,
            io: IoMode::Direct,
            prefetch: Prefetch::None,
            cache: CachePolicy::Lru,
            max_context: 256,
            io_threads: 2,
            record_trace: None,
            trace: None,
            verify_reads: true,
        },
        memdial::engine::arena::Scratch::activations(
            &cfg,
            memdial::store::plan::Sequences::single(256),
            1,
        ),
    );
    let err = res.expect_err("tmpfs must not pass for direct IO");
    let msg = format!("{err:#}");
    // The library names the alternative in its own words (the CLI adds `--io buffered`,
    // checked below).
    assert!(
        matches!(
            memdial::util::error::usage_error(&err),
            Some(memdial::util::error::UsageError::DirectIoRefused { .. })
        ),
        "{msg}"
    );
    assert!(msg.contains("use buffered"), "{msg}");
    Ok(testkit::Completion::Completed)
}

fn direct_io_on_tmpfs_exits_nonzero_with_hint() -> testkit::Outcome {
    let s = match shm_scratch("memdial-run-dio") {
        Ok(s) => s,
        Err(why) => return testkit::skip(why),
    };
    let d = s.join("tiny-k3");
    let st = Command::new(memdial_bin!())
        .args(["fixture", "--preset", "tiny-k3", "--out"])
        .arg(&d)
        .status()
        .unwrap();
    assert!(st.success());
    let out = Command::new(memdial_bin!())
        .args([
            "run",
            "--prompt-ids",
            "1,2",
            "--max-tokens",
            "2",
            "--budget",
            "1GiB",
            "--io",
            "direct",
            "--model",
        ])
        .arg(&d)
        .output()
        .unwrap();
    assert_ne!(out.status.code(), Some(0));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--io buffered"), "{err}");
    Ok(testkit::Completion::Completed)
}

fn main() -> ExitCode {
    testkit::main(
        include_str!("tmpfs_direct_io.rs"),
        vec![
            testkit::ignorable(
                "direct_io_on_tmpfs_is_refused_with_a_hint",
                direct_io_on_tmpfs_is_refused_with_a_hint,
            ),
            testkit::ignorable(
                "direct_io_on_tmpfs_exits_nonzero_with_hint",
                direct_io_on_tmpfs_exits_nonzero_with_hint,
            ),
        ],
    )
}
