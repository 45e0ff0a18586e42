//! Page-aligned heap buffers, as O_DIRECT requires (buffer address aligned to the
//! device's direct-IO memory alignment; 4096 covers 512e and 4Kn devices).
//!
//! Buffers of 1 MiB and more are anonymous mappings (memmap2) advised
//! `MADV_HUGEPAGE`: their pages are zero-filled lazily by the kernel on first
//! touch, in 2 MiB units where transparent huge pages allow, instead of being
//! written once by us and faulted 4 KiB at a time (on a 17 GB model that
//! difference was ~2.6 million page faults and ~13 s of system time at load).
//!
//! A transparent huge page backs only a 2 MiB-aligned range that lies wholly in one
//! mapping, so a buffer of its own mapping gets none below 2 MiB and loses its unaligned
//! head and tail above. That matters for direct IO: the kernel builds a read's bio from
//! the buffer's pages, and into 4 KiB pages a virtio disk cuts a 1 MiB record into
//! several device requests (measured on the dev VM: a 1020 KiB expert read took 1.65 ms
//! into a 4 KiB-page buffer and 0.35 ms into a 2 MiB page; `docs/io.md` §2).
//! [`AlignedBuf::carve`] therefore lays many same-sized buffers end to end in one
//! mapping that starts on a 2 MiB boundary, as the streaming store does for its expert
//! buffers and trunk slots.

/// Alignment of every [`AlignedBuf`] in bytes.
pub const ALIGN: usize = 4096;

/// Buffers at least this large are anonymous mappings.
const MAP_THRESHOLD: usize = 1 << 20;

#[derive(Clone, Copy)]
#[repr(C, align(4096))]
struct Page([u8; ALIGN]);

enum Storage {
    Pages(Vec<Page>),
    Map(memmap2::MmapMut),
    /// A part of a mapping shared with other buffers of [`AlignedBuf::carve`]: `ptr`
    /// points to this buffer's own `cap` bytes, which no other buffer covers.
    Carved {
        _map: std::sync::Arc<memmap2::MmapMut>,
        ptr: std::ptr::NonNull<u8>,
    },
}

// SAFETY: a carved buffer's `ptr` addresses bytes that belong to it alone (disjoint
// ranges of a mapping kept alive by the Arc); `&self` only reads them and `&mut self`
// is exclusive, exactly as for the other storages, which are Send + Sync.
unsafe impl Send for Storage {}
unsafe impl Sync for Storage {}

/// Transparent huge page size assumed for [`AlignedBuf::carve`]'s alignment, bytes
/// (x86-64 and most arm64 kernels).
pub const HUGE_PAGE: usize = 2 << 20;

/// A zero-initialised byte buffer whose start is 4096-aligned and whose capacity is
/// a multiple of 4096 bytes. `len` is the logical length (≤ capacity).
pub struct AlignedBuf {
    storage: Storage,
    cap: usize,
    len: usize,
}

impl AlignedBuf {
    /// A buffer of `len` bytes (capacity rounded up to whole pages).
    ///
    /// Panics if the system refuses an anonymous mapping (out of address space).
    pub fn new(len: usize) -> Self {
        let cap = len.div_ceil(ALIGN) * ALIGN;
        let storage = if cap >= MAP_THRESHOLD {
            let m = memmap2::MmapMut::map_anon(cap).expect("anonymous mapping for an IO buffer");
            #[cfg(target_os = "linux")]
            let _ = m.advise(memmap2::Advice::HugePage);
            Storage::Map(m)
        } else {
            Storage::Pages(vec![Page([0; ALIGN]); cap / ALIGN])
        };
        AlignedBuf { storage, cap, len }
    }
    /// `n` buffers of `len` bytes (each capacity rounded up to whole pages) laid end to
    /// end in one anonymous mapping whose first buffer starts on a [`HUGE_PAGE`]
    /// boundary, advised `MADV_HUGEPAGE` (see the module doc): a direct read into
    /// buffer `i` covers whole 2 MiB pages except where it meets its neighbours. The
    /// mapping reserves `n × capacity` rounded up to 2 MiB, plus 2 MiB, of address
    /// space; pages become
    /// resident when first touched, so the resident set exceeds the buffers touched by
    /// at most the huge page around the last one's end (< 2 MiB).
    ///
    /// Panics if the system refuses an anonymous mapping (out of address space).
    pub fn carve(n: usize, len: usize) -> Vec<Self> {
        let cap = len.div_ceil(ALIGN) * ALIGN;
        if n == 0 || cap == 0 {
            return (0..n).map(|_| AlignedBuf::new(len)).collect();
        }
        // A whole number of huge pages plus one for the alignment: the huge page around
        // the last buffer's end lies inside the mapping whatever the base address (and a
        // length that is a multiple of 2 MiB lets Linux ≥ 6.7 align the base itself).
        let m = memmap2::MmapMut::map_anon((n * cap).next_multiple_of(HUGE_PAGE) + HUGE_PAGE)
            .expect("anonymous mapping for IO buffers");
        #[cfg(target_os = "linux")]
        let _ = m.advise(memmap2::Advice::HugePage);
        let base = m.as_ptr() as usize;
        let head = base.next_multiple_of(HUGE_PAGE) - base;
        let mut m = std::sync::Arc::new(m);
        let start = std::sync::Arc::get_mut(&mut m)
            .expect("the mapping is not shared yet")
            .as_mut_ptr();
        (0..n)
            .map(|i| AlignedBuf {
                storage: Storage::Carved {
                    _map: m.clone(),
                    // SAFETY: head + (i + 1) × cap ≤ head + n × cap ≤ the mapping's length.
                    ptr: std::ptr::NonNull::new(unsafe { start.add(head + i * cap) })
                        .expect("a mapping is not at address 0"),
                },
                cap,
                len,
            })
            .collect()
    }
    /// Capacity in bytes (multiple of 4096).
    pub fn capacity(&self) -> usize {
        self.cap
    }
    /// Logical length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }
    /// True when the logical length is 0.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// Sets the logical length; panics if above capacity.
    pub fn set_len(&mut self, len: usize) {
        assert!(len <= self.capacity());
        self.len = len;
    }
    /// The whole capacity, mutable (for reads).
    pub fn full_mut(&mut self) -> &mut [u8] {
        match &mut self.storage {
            Storage::Map(m) => &mut m[..],
            // SAFETY: `ptr` addresses `cap` bytes of a live mapping owned by this buffer
            // alone (`carve`), and `&mut self` is exclusive.
            Storage::Carved { ptr, .. } => unsafe {
                std::slice::from_raw_parts_mut(ptr.as_ptr(), self.cap)
            },
            Storage::Pages(p) => {
                let cap = p.len() * ALIGN;
                // SAFETY: `p` is a contiguous Vec of `Page` (repr(C), size 4096, no padding),
                // so its storage is `cap` initialised bytes.
                unsafe { std::slice::from_raw_parts_mut(p.as_mut_ptr() as *mut u8, cap) }
            }
        }
    }
}

impl AsRef<[u8]> for AlignedBuf {
    fn as_ref(&self) -> &[u8] {
        match &self.storage {
            Storage::Map(m) => &m[..self.len],
            // SAFETY: as in `full_mut`, shared; `len <= cap`.
            Storage::Carved { ptr, .. } => unsafe {
                std::slice::from_raw_parts(ptr.as_ptr(), self.len)
            },
            Storage::Pages(p) => {
                // SAFETY: as in `full_mut`; `len <= capacity`.
                unsafe { std::slice::from_raw_parts(p.as_ptr() as *const u8, self.len) }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn aligned_and_sized() {
        let mut b = AlignedBuf::new(5000);
        assert_eq!(b.capacity(), 8192);
        assert_eq!(b.as_ref().len(), 5000);
        assert_eq!(b.full_mut().as_ptr() as usize % ALIGN, 0);
        let mut big = AlignedBuf::new(3 << 20);
        assert_eq!(big.full_mut().as_ptr() as usize % ALIGN, 0);
        assert!(big.as_ref().iter().all(|&x| x == 0));
    }

    #[test]
    fn carved_buffers_are_disjoint_and_start_on_a_huge_page() {
        let mut v = AlignedBuf::carve(3, 5000);
        assert_eq!(v.len(), 3);
        let p: Vec<usize> = v
            .iter_mut()
            .map(|b| b.full_mut().as_ptr() as usize)
            .collect();
        assert_eq!(p[0] % HUGE_PAGE, 0);
        assert_eq!((p[1] - p[0], p[2] - p[1]), (8192, 8192));
        for (i, b) in v.iter_mut().enumerate() {
            assert_eq!((b.capacity(), b.as_ref().len()), (8192, 5000));
            assert!(b.as_ref().iter().all(|&x| x == 0));
            b.full_mut().fill(i as u8 + 1);
        }
        // Writes to one buffer stay inside it; dropping one keeps the others valid.
        let last = v.pop().unwrap();
        drop(v.remove(0));
        assert!(v[0].as_ref().iter().all(|&x| x == 2));
        assert!(last.as_ref().iter().all(|&x| x == 3));
    }
}
