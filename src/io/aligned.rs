//! Page-aligned heap buffers, as O_DIRECT requires (buffer address aligned to the
//! device's direct-IO memory alignment; 4096 covers 512e and 4Kn devices).

/// Alignment of every [`AlignedBuf`] in bytes.
pub const ALIGN: usize = 4096;

#[derive(Clone, Copy)]
#[repr(C, align(4096))]
struct Page([u8; ALIGN]);

/// A zero-initialised byte buffer whose start is 4096-aligned and whose capacity is
/// a multiple of 4096 bytes. `len` is the logical length (≤ capacity).
pub struct AlignedBuf {
    pages: Vec<Page>,
    len: usize,
}

impl AlignedBuf {
    /// A buffer of `len` bytes (capacity rounded up to whole pages).
    pub fn new(len: usize) -> Self {
        let n = len.div_ceil(ALIGN);
        AlignedBuf {
            pages: vec![Page([0; ALIGN]); n],
            len,
        }
    }
    /// Capacity in bytes (multiple of 4096).
    pub fn capacity(&self) -> usize {
        self.pages.len() * ALIGN
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
        let cap = self.capacity();
        // SAFETY: `pages` is a contiguous Vec of `Page` (repr(C), size 4096, no padding),
        // so its storage is `cap` initialised bytes.
        unsafe { std::slice::from_raw_parts_mut(self.pages.as_mut_ptr() as *mut u8, cap) }
    }
}

impl AsRef<[u8]> for AlignedBuf {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: as in `full_mut`; `len <= capacity`.
        unsafe { std::slice::from_raw_parts(self.pages.as_ptr() as *const u8, self.len) }
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
    }
}
