//! Reading byte ranges of a shard file in one of three IO modes.
//!
//! - `direct`: `O_DIRECT`. Offsets, lengths and the buffer address must be aligned
//!   to the file's direct-IO alignment, taken from `statx(STATX_DIOALIGN)` and never
//!   below 4096 (docs/io.md §2: `st_blksize` is not the DIO rule). A tensor range is
//!   over-read to aligned bounds and sliced. If the filesystem does not support
//!   direct IO we fail with [`UsageError::DirectIoRefused`] (buffered IO works): never a silent
//!   fallback, since reports must say what was measured.
//! - `buffered`: `pread` through the page cache with the default `POSIX_FADV_NORMAL`
//!   read-ahead. (`POSIX_FADV_RANDOM` would stop read-ahead past whole-record reads; an
//!   A/B on `mini` at the floor was inconclusive on the shared machine, so the default
//!   stays. The page cache fills outside the budget: see docs/plan.md.)
//! - `mmap`: a shared read-only mapping per shard; records are faulted in with
//!   `MADV_WILLNEED` plus one touch per page (`MADV_RANDOM` was measured 10x slower:
//!   it disables the read-ahead WILLNEED relies on); views borrow the mapping.
//!
//! Short reads are looped; a read that ends before the requested range does
//! (truncated file, EIO) is an error naming the file and offset. The file's size and
//! mtime are checked on every read so a file changed during a run is detected.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{bail, Context, Result};

use super::aligned::{AlignedBuf, ALIGN};
use crate::util::error::UsageError;

/// How weights are read from disk.
#[derive(
    Default, Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum IoMode {
    /// O_DIRECT reads into aligned buffers (bypasses the page cache).
    #[default]
    Direct,
    /// pread through the page cache.
    Buffered,
    /// Memory-mapped shards.
    Mmap,
}

impl IoMode {
    /// Every mode, in the order of the command line's help.
    pub const ALL: [IoMode; 3] = [IoMode::Direct, IoMode::Buffered, IoMode::Mmap];
    /// Parses `direct|buffered|mmap`.
    ///
    /// Errors: [`UsageError::UnknownName`] for any other text.
    pub fn parse(s: &str) -> Result<Self, UsageError> {
        Self::ALL
            .into_iter()
            .find(|v| v.as_str() == s)
            .ok_or_else(|| UsageError::unknown("IO mode", s, &Self::ALL.map(Self::as_str)))
    }
    /// Lower-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            IoMode::Direct => "direct",
            IoMode::Buffered => "buffered",
            IoMode::Mmap => "mmap",
        }
    }
}

/// One open shard file.
pub struct ShardFile {
    pub path: PathBuf,
    pub size: u64,
    mtime: (i64, i64),
    mode: IoMode,
    /// Handle used for reads (O_DIRECT in direct mode).
    file: File,
    /// Direct-IO alignment in bytes (≥ 4096), direct mode only.
    pub dio_align: u64,
    map: Option<Arc<memmap2::Mmap>>,
}

/// Direct-IO offset alignment reported by statx, or None when the filesystem does
/// not report direct-IO support for this file.
pub fn statx_dio_align(f: &File) -> Option<u64> {
    let st = rustix::fs::statx(
        f,
        "",
        rustix::fs::AtFlags::EMPTY_PATH,
        rustix::fs::StatxFlags::DIOALIGN,
    )
    .ok()?;
    if st.stx_mask & rustix::fs::StatxFlags::DIOALIGN.bits() == 0 {
        return None;
    }
    let off = st.stx_dio_offset_align.max(st.stx_dio_read_offset_align) as u64;
    if off == 0 || st.stx_dio_mem_align == 0 {
        return None;
    }
    Some(off.max(st.stx_dio_mem_align as u64))
}

impl ShardFile {
    /// Opens `path` for reading in `mode`.
    ///
    /// Errors: the file cannot be opened; in direct mode,
    /// [`UsageError::DirectIoRefused`] when the filesystem refuses O_DIRECT or does
    /// not report direct-IO alignment.
    pub fn open(path: &Path, mode: IoMode) -> Result<Self> {
        let meta =
            std::fs::metadata(path).with_context(|| format!("cannot stat {}", path.display()))?;
        let (file, dio_align) = match mode {
            IoMode::Direct => {
                let f = OpenOptions::new()
                    .read(true)
                    .custom_flags(libc::O_DIRECT)
                    .open(path)
                    .map_err(|e| UsageError::DirectIoRefused {
                        path: path.to_path_buf(),
                        reason: format!("the filesystem refused O_DIRECT ({e})"),
                    })?;
                let align = statx_dio_align(&f).ok_or_else(|| UsageError::DirectIoRefused {
                    path: path.to_path_buf(),
                    reason: "statx reports no direct-IO alignment (tmpfs?)".into(),
                })?;
                (f, align.max(ALIGN as u64))
            }
            _ => (
                File::open(path).with_context(|| format!("cannot open {}", path.display()))?,
                1,
            ),
        };
        let map = if mode == IoMode::Mmap {
            // SAFETY: read-only shared mapping; the file changing underneath is detected by
            // the size/mtime check on every access and reported as an error.
            let m = unsafe { memmap2::Mmap::map(&file) }
                .with_context(|| format!("mmap {}", path.display()))?;
            // A truncation after this point faults as SIGBUS: name the file, exit 1.
            super::mmap_guard::register(&m, path);
            Some(Arc::new(m))
        } else {
            None
        };
        Ok(ShardFile {
            path: path.to_path_buf(),
            size: meta.len(),
            mtime: (meta.mtime(), meta.mtime_nsec()),
            mode,
            file,
            dio_align,
            map,
        })
    }

    /// The IO mode this file was opened in.
    pub fn mode(&self) -> IoMode {
        self.mode
    }

    /// The underlying file handle.
    pub fn file(&self) -> &File {
        &self.file
    }

    /// The mapping (mmap mode only).
    pub fn map(&self) -> Option<&Arc<memmap2::Mmap>> {
        self.map.as_ref()
    }

    /// Errors if the file's size or mtime changed since it was opened.
    pub fn check_unchanged(&self) -> Result<()> {
        let m = self
            .file
            .metadata()
            .with_context(|| format!("cannot stat {}", self.path.display()))?;
        if m.len() != self.size || (m.mtime(), m.mtime_nsec()) != self.mtime {
            bail!(
                "{} changed during the run (size {} → {}, mtime changed: {}); results would not be trustworthy",
                self.path.display(),
                self.size,
                m.len(),
                (m.mtime(), m.mtime_nsec()) != self.mtime
            );
        }
        Ok(())
    }

    /// The aligned span `[start, end)` that a direct read of `[offset, offset+len)` covers.
    pub fn aligned_span(&self, offset: u64, len: u64) -> (u64, u64) {
        let a = self.dio_align;
        (offset / a * a, (offset + len).div_ceil(a) * a)
    }

    /// Bytes of buffer capacity needed to read `[offset, offset+len)` in this mode.
    pub fn buffer_len_for(&self, offset: u64, len: u64) -> usize {
        match self.mode {
            IoMode::Direct => {
                let (s, e) = self.aligned_span(offset, len);
                (e - s) as usize
            }
            _ => len as usize,
        }
    }

    /// Reads `[offset, offset+len)` into `buf` (direct and buffered modes).
    /// Returns the position of `offset` inside `buf` (non-zero in direct mode when
    /// `offset` is unaligned); `buf`'s logical length is set to cover the data.
    ///
    /// Errors: the range extends past the end of the file, an IO error (EIO …), or a
    /// short read before the range ends — each naming file and offset.
    pub fn read_into(&self, offset: u64, len: u64, buf: &mut AlignedBuf) -> Result<usize> {
        let want = self.buffer_len_for(offset, len);
        if buf.capacity() < want {
            bail!(
                "internal: IO buffer of {} bytes too small for {want}",
                buf.capacity()
            );
        }
        let d = read_range(self, offset, len, &mut buf.full_mut()[..want])?;
        buf.set_len(want);
        Ok(d)
    }
}

/// Reads `[offset, offset+len)` of `f` into `dst`, which must be exactly
/// `f.buffer_len_for(offset, len)` bytes and (direct mode) start at an aligned
/// address. Returns the position of `offset` inside `dst`.
///
/// Errors as [`ShardFile::read_into`].
pub fn read_range(f: &ShardFile, offset: u64, len: u64, dst: &mut [u8]) -> Result<usize> {
    if offset + len > f.size {
        bail!(
            "{}: range [{offset}, {}) is past the end of the file ({} bytes)",
            f.path.display(),
            offset + len,
            f.size
        );
    }
    f.check_unchanged()?;
    let (start, end, delta) = match f.mode {
        IoMode::Direct => {
            let (s, e) = f.aligned_span(offset, len);
            (s, e, (offset - s) as usize)
        }
        IoMode::Buffered => (offset, offset + len, 0),
        IoMode::Mmap => bail!("internal: read_range called in mmap mode"),
    };
    let want = (end - start) as usize;
    if dst.len() != want {
        bail!("internal: read window of {} bytes, need {want}", dst.len());
    }
    debug_assert!(
        f.mode != IoMode::Direct || (dst.as_ptr() as usize).is_multiple_of(4096),
        "unaligned O_DIRECT buffer"
    );
    let mut done = 0usize;
    // Data needed: up to offset+len; in direct mode the aligned tail may cross EOF.
    let needed = (offset + len - start) as usize;
    while done < want {
        let chunk = (want - done).min(1 << 30);
        let n = match f
            .file
            .read_at(&mut dst[done..done + chunk], start + done as u64)
        {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                return Err(e).with_context(|| {
                    format!(
                        "{}: read of {chunk} bytes at offset {} failed",
                        f.path.display(),
                        start + done as u64
                    )
                })
            }
        };
        if n == 0 {
            break;
        }
        done += n;
    }
    if done < needed {
        bail!(
            "{}: short read at offset {}: got {} of {} bytes (file truncated or changed?)",
            f.path.display(),
            start + done as u64,
            done,
            needed
        );
    }
    dst[done..].fill(0);
    Ok(delta)
}
