//! Faults in mapped shard ranges so that a file truncated during an `mmap` run ends
//! the run with an error naming the file, never a bare `SIGBUS`.
//!
//! Three layers, cheapest first:
//! 1. the caller checks the file's size and mtime before touching a range
//!    ([`super::ShardFile::check_unchanged`]);
//! 2. [`fault_in`] populates the range with `madvise(MADV_POPULATE_READ)`
//!    (Linux ≥ 5.14), which reports a page beyond the end of the file as `EFAULT`
//!    instead of raising `SIGBUS`: that becomes an error naming the file and range;
//! 3. pages touched later (views of pinned tensors, a truncation between the fault
//!    and the use) still raise `SIGBUS`: the handler [`register`] installs looks the
//!    faulting address up among the registered mappings, writes
//!    `error: <file>: …` to stderr and exits with status 1. A `SIGBUS` outside every
//!    registered mapping gets the default action (a real crash stays a crash).
//!
//! Test-only hook: with `MEMDIAL_TEST_MMAP_TRUNCATE=populate` (or `=touch`) in the
//! environment, the first [`fault_in`] truncates the file to the start of its range
//! just before faulting it (with `touch`, skipping layer 2), making the race
//! deterministic.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicUsize, Ordering};
use std::sync::Once;

use anyhow::{bail, Context, Result};

/// Environment variable of the test-only truncation hook (see the module docs).
pub const TEST_TRUNCATE_ENV: &str = "MEMDIAL_TEST_MMAP_TRUNCATE";

/// Registered mappings: `[start, start + len)` and the file's path (leaked bytes).
/// Fixed-size and lock-free so the signal handler can read it.
const SLOTS: usize = 1024;
struct Slot {
    start: AtomicUsize,
    len: AtomicUsize,
    path: AtomicPtr<u8>,
    path_len: AtomicUsize,
}
#[allow(clippy::declare_interior_mutable_const)]
const EMPTY: Slot = Slot {
    start: AtomicUsize::new(0),
    len: AtomicUsize::new(0),
    path: AtomicPtr::new(std::ptr::null_mut()),
    path_len: AtomicUsize::new(0),
};
static REGISTRY: [Slot; SLOTS] = [EMPTY; SLOTS];
static USED: AtomicUsize = AtomicUsize::new(0);
static OVERFLOW: AtomicBool = AtomicBool::new(false);
static INSTALL: Once = Once::new();

/// Registers the mapping `map` of `path` with the `SIGBUS` handler (installed on the
/// first call). Mappings live until the process exits in practice (one per shard);
/// a registration is never removed, so its path bytes are leaked on purpose.
pub fn register(map: &memmap2::Mmap, path: &Path) {
    INSTALL.call_once(install_handler);
    let i = USED.fetch_add(1, Ordering::SeqCst);
    if i >= SLOTS {
        OVERFLOW.store(true, Ordering::SeqCst);
        return;
    }
    let bytes: &'static mut [u8] =
        Box::leak(path.display().to_string().into_bytes().into_boxed_slice());
    let s = &REGISTRY[i];
    s.path_len.store(bytes.len(), Ordering::SeqCst);
    s.path.store(bytes.as_mut_ptr(), Ordering::SeqCst);
    s.len.store(map.len(), Ordering::SeqCst);
    s.start.store(map.as_ptr() as usize, Ordering::SeqCst);
}

fn install_handler() {
    // SAFETY: a plain sigaction with an `extern "C"` handler that only calls
    // async-signal-safe functions (write, _exit, sigaction) and reads atomics.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_sigbus as *const () as usize;
        sa.sa_flags = libc::SA_SIGINFO | libc::SA_NODEFER;
        libc::sigemptyset(&mut sa.sa_mask);
        libc::sigaction(libc::SIGBUS, &sa, std::ptr::null_mut());
    }
}

fn write_stderr(b: &[u8]) {
    // SAFETY: write(2) on fd 2 with a valid buffer; async-signal-safe.
    unsafe {
        libc::write(2, b.as_ptr().cast(), b.len());
    }
}

extern "C" fn on_sigbus(_sig: libc::c_int, info: *mut libc::siginfo_t, _ctx: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo for SA_SIGINFO handlers.
    let addr = unsafe { (*info).si_addr() } as usize;
    let n = USED.load(Ordering::SeqCst).min(SLOTS);
    for s in &REGISTRY[..n] {
        let start = s.start.load(Ordering::SeqCst);
        let len = s.len.load(Ordering::SeqCst);
        if start != 0 && addr >= start && addr < start + len {
            let p = s.path.load(Ordering::SeqCst);
            let pl = s.path_len.load(Ordering::SeqCst);
            write_stderr(b"error: ");
            // SAFETY: `p`/`pl` are a leaked, never-freed byte slice stored before `start`.
            write_stderr(unsafe { std::slice::from_raw_parts(p, pl) });
            write_stderr(
                b": bus error reading the memory-mapped file: it was truncated or changed during the run; results would not be trustworthy\n",
            );
            // SAFETY: _exit is async-signal-safe.
            unsafe { libc::_exit(1) };
        }
    }
    if OVERFLOW.load(Ordering::SeqCst) {
        write_stderr(b"error: bus error reading a memory-mapped model file: it was truncated or changed during the run\n");
        // SAFETY: as above.
        unsafe { libc::_exit(1) };
    }
    // Not ours: default action, and the faulting access repeats and kills us.
    // SAFETY: restoring SIG_DFL is async-signal-safe.
    unsafe {
        libc::signal(libc::SIGBUS, libc::SIG_DFL);
    }
}

/// Faults in bytes `[start, end)` of `map` (the mapping of `path`), so that later
/// accesses find them resident: `MADV_POPULATE_READ` where the kernel has it,
/// else a touch of every page (after `MADV_WILLNEED`).
///
/// Errors: the range lies (partly) beyond the end of the file — it was truncated
/// after it was mapped — naming the file and the range.
pub fn fault_in(map: &memmap2::Mmap, path: &Path, start: usize, end: usize) -> Result<()> {
    let ps = crate::io::pagecache::page_size();
    let aligned = start / ps * ps;
    let len = (end.min(map.len())).saturating_sub(aligned);
    let populate = !matches!(test_hook(path, start), Some(Hook::Touch));
    if populate && len > 0 {
        match map.advise_range(memmap2::Advice::PopulateRead, aligned, len) {
            Ok(()) => return Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::EFAULT) => bail!(
                "{}: bytes [{start}, {end}) of the memory-mapped file cannot be read (EFAULT): it was truncated or changed during the run; results would not be trustworthy",
                path.display()
            ),
            Err(_) => {} // EINVAL: kernel before 5.14; fall back to touching.
        }
    }
    let _ = map.advise_range(memmap2::Advice::WillNeed, aligned, len);
    let mut acc = 0u8;
    let mut p = start;
    while p < end {
        acc = acc.wrapping_add(map[p]);
        p = (p / ps + 1) * ps;
    }
    std::hint::black_box(acc);
    Ok(())
}

enum Hook {
    Populate,
    Touch,
}

/// The test-only truncation hook: fires once per process.
fn test_hook(path: &Path, start: usize) -> Option<Hook> {
    static FIRED: AtomicBool = AtomicBool::new(false);
    let v = std::env::var(TEST_TRUNCATE_ENV).ok()?;
    let hook = match v.as_str() {
        "populate" => Hook::Populate,
        "touch" => Hook::Touch,
        _ => return None,
    };
    if FIRED.swap(true, Ordering::SeqCst) {
        return None;
    }
    let r = std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .and_then(|f| f.set_len(start as u64))
        .with_context(|| format!("{TEST_TRUNCATE_ENV}: cannot truncate {}", path.display()));
    if let Err(e) = r {
        eprintln!("{e:#}");
    }
    Some(hook)
}
