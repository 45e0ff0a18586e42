//! Page-cache residency (mincore) and eviction (fadvise DONTNEED) of whole files.
//!
//! Residency: the file is mapped `PROT_READ` (mapping faults nothing in) and
//! `mincore` reports which pages are in the page cache. Eviction: fsync, then
//! `posix_fadvise(POSIX_FADV_DONTNEED)`; pages still mapped by a live mmap are not
//! dropped (docs/io.md §3), so callers unmap / `madvise(DONTNEED)` first.

use std::fs::File;
use std::path::Path;

use anyhow::{Context, Result};

/// System page size in bytes.
pub fn page_size() -> usize {
    rustix::param::page_size()
}

/// (resident pages, total pages) of `path` in the page cache.
pub fn residency(path: &Path) -> Result<(u64, u64)> {
    let f = File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let len = f.metadata()?.len();
    if len == 0 {
        return Ok((0, 0));
    }
    let ps = page_size() as u64;
    let pages = len.div_ceil(ps);
    // SAFETY: read-only shared mapping of a file we opened; we never read through it.
    let map =
        unsafe { memmap2::Mmap::map(&f) }.with_context(|| format!("mmap {}", path.display()))?;
    let mut vec = vec![0u8; pages as usize];
    // SAFETY: `vec` has one byte per page of the mapping.
    let rc = unsafe {
        libc::mincore(
            map.as_ptr() as *mut libc::c_void,
            len as usize,
            vec.as_mut_ptr(),
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error())
            .with_context(|| format!("mincore {}", path.display()));
    }
    let resident = vec.iter().filter(|b| *b & 1 != 0).count() as u64;
    Ok((resident, pages))
}

/// Bytes of `path` resident in the page cache.
pub fn resident_bytes(path: &Path) -> Result<u64> {
    let (r, _) = residency(path)?;
    Ok(r * page_size() as u64)
}

/// Drops `path` from the page cache (fsync first; no root needed).
pub fn evict(path: &Path) -> Result<()> {
    let f = File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let _ = f.sync_all();
    rustix::fs::fadvise(&f, 0, None, rustix::fs::Advice::DontNeed)
        .with_context(|| format!("posix_fadvise(DONTNEED) {}", path.display()))?;
    Ok(())
}

/// Drops the byte range `[offset, offset+len)` of an open file from the page cache.
pub fn evict_range(f: &File, offset: u64, len: u64) {
    let _ = rustix::fs::fadvise(
        f,
        offset,
        std::num::NonZeroU64::new(len),
        rustix::fs::Advice::DontNeed,
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    #[test]
    fn evict_then_read_changes_residency() {
        // /tmp may be tmpfs (where fadvise drops nothing); use the target dir, which is on disk.
        let dir = std::env::current_dir()
            .unwrap()
            .join("target")
            .join("pagecache-test");
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join(format!("f{}", std::process::id()));
        std::fs::write(&p, vec![7u8; 1 << 20]).unwrap();
        evict(&p).unwrap();
        let (r0, total) = residency(&p).unwrap();
        assert_eq!(total, (1u64 << 20).div_ceil(page_size() as u64));
        let mut buf = vec![0u8; 1 << 20];
        File::open(&p).unwrap().read_exact(&mut buf).unwrap();
        let (r1, _) = residency(&p).unwrap();
        std::fs::remove_file(&p).unwrap();
        if r0 == 0 {
            assert_eq!(
                r1, total,
                "a buffered read of the whole file makes it resident"
            );
        } else {
            eprintln!("filesystem keeps pages after DONTNEED (tmpfs?): residency {r0}/{total}");
        }
    }
}
