//! Memory for repacked weights: one zeroed region per model, cut into buffers, and backed by
//! 2 MiB pages where Linux allows it (transparent huge pages in `madvise` mode, see the kernel's
//! `Documentation/admin-guide/mm/transhuge.rst`).
//!
//! Decode streams every weight once per token. Over 4 KiB pages that stream pays a TLB miss
//! every 4 KiB and loses the hardware prefetchers at each page end; llama.cpp reads its weights
//! from the page cache's large folios instead. One region for all matrices gives every matrix,
//! however small, the same 2 MiB pages, and sizing it exactly (its tail 2 MiB range is never
//! fully inside it, so the kernel backs that part with 4 KiB pages) costs no resident memory.

use std::marker::PhantomData;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

const HUGE: usize = 2 << 20;
/// Buffers start on cache-line boundaries.
const ALIGN: usize = 64;

/// A zeroed, page-aligned block of memory, returned to the OS on drop.
struct Region {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: a region is plain memory; `PackBuf` hands out disjoint parts of it.
unsafe impl Send for Region {}
unsafe impl Sync for Region {}

impl Region {
    /// `len` zero bytes; from `len >= 2 MiB` on, 2 MiB aligned and hinted for huge pages.
    fn new(len: usize) -> Self {
        if len == 0 {
            return Self {
                ptr: std::ptr::NonNull::<u64>::dangling().as_ptr().cast(),
                len: 0,
            };
        }
        Self {
            ptr: Self::map(len),
            len,
        }
    }

    #[cfg(target_os = "linux")]
    fn map(len: usize) -> *mut u8 {
        let len = len.div_ceil(4096) * 4096;
        let pad = if len >= HUGE { HUGE } else { 0 };
        // SAFETY: an anonymous private mapping has no preconditions; the parts outside the
        // aligned [start, start + len) are unmapped again at once and never used.
        unsafe {
            let p = libc::mmap(
                std::ptr::null_mut(),
                len + pad,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            if p == libc::MAP_FAILED {
                std::alloc::handle_alloc_error(Self::layout(len));
            }
            let base = p as usize;
            if pad == 0 {
                return p.cast();
            }
            let start = base.div_ceil(HUGE) * HUGE;
            if start > base {
                libc::munmap(p, start - base);
            }
            let tail = base + len + pad - (start + len);
            if tail > 0 {
                libc::munmap((start + len) as *mut libc::c_void, tail);
            }
            // a hint: where it is refused the region simply keeps 4 KiB pages
            libc::madvise(start as *mut libc::c_void, len, libc::MADV_HUGEPAGE);
            start as *mut u8
        }
    }

    #[cfg(not(target_os = "linux"))]
    fn map(len: usize) -> *mut u8 {
        // SAFETY: the layout has a non-zero size.
        let p = unsafe { std::alloc::alloc_zeroed(Self::layout(len)) };
        if p.is_null() {
            std::alloc::handle_alloc_error(Self::layout(len));
        }
        p
    }

    fn layout(len: usize) -> std::alloc::Layout {
        std::alloc::Layout::from_size_align(len, 4096).expect("region size fits a layout")
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        if self.len == 0 {
            return;
        }
        // SAFETY: `ptr` came from `map(len)` and nothing borrows it any more (every `PackBuf`
        // holds the region alive).
        #[cfg(target_os = "linux")]
        unsafe {
            libc::munmap(self.ptr.cast(), self.len.div_ceil(4096) * 4096);
        }
        #[cfg(not(target_os = "linux"))]
        unsafe {
            std::alloc::dealloc(self.ptr, Self::layout(self.len));
        }
    }
}

/// Where a model's repacked matrices go: a region of a known size, handed out front to back.
/// A buffer that no longer fits gets a region of its own.
pub struct PackArena {
    region: Arc<Region>,
    next: AtomicUsize,
}

impl PackArena {
    /// An arena of `bytes` (what `Packed::bytes_for` says the model's matrices need in all, each
    /// rounded up to 64 bytes).
    pub fn new(bytes: usize) -> Self {
        Self {
            region: Arc::new(Region::new(bytes)),
            next: AtomicUsize::new(0),
        }
    }

    /// Bytes the arena was made with.
    pub fn capacity(&self) -> usize {
        self.region.len
    }

    /// Bytes handed out so far.
    pub fn used(&self) -> usize {
        self.next.load(Ordering::Relaxed).min(self.region.len)
    }

    /// The start of `bytes` more, if they fit.
    fn take(&self, bytes: usize) -> Option<usize> {
        let size = padded(bytes);
        let mut at = self.next.load(Ordering::Relaxed);
        loop {
            if at + size > self.region.len {
                return None;
            }
            match self
                .next
                .compare_exchange(at, at + size, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return Some(at),
                Err(now) => at = now,
            }
        }
    }
}

/// `bytes` rounded up to the arena's buffer alignment.
pub fn padded(bytes: usize) -> usize {
    bytes.div_ceil(ALIGN) * ALIGN
}

/// Element types a `PackBuf` may hold: plain integers, for which zero bytes are a value.
pub trait Plain: Copy + 'static {}
impl Plain for u8 {}
impl Plain for u16 {}

/// A zero-initialised buffer of `T` inside a region (an arena's or its own).
pub struct PackBuf<T: Plain> {
    region: Arc<Region>,
    off: usize,
    len: usize,
    _t: PhantomData<T>,
}

impl<T: Plain> PackBuf<T> {
    /// `len` zeros, in `arena` when it has room.
    pub fn zeroed(len: usize, arena: Option<&PackArena>) -> Self {
        let bytes = len * std::mem::size_of::<T>();
        let (region, off) = match arena.and_then(|a| a.take(bytes).map(|off| (a, off))) {
            Some((a, off)) => (a.region.clone(), off),
            None => (Arc::new(Region::new(bytes)), 0),
        };
        Self {
            region,
            off,
            len,
            _t: PhantomData,
        }
    }

    pub fn as_slice(&self) -> &[T] {
        // SAFETY: [off, off + len * size_of T) lies inside the region, is aligned for T (64-byte
        // offsets into a page-aligned region), was zeroed (a valid T) and belongs to this buffer
        // alone; the region lives as long as `self`.
        unsafe { std::slice::from_raw_parts(self.region.ptr.add(self.off).cast(), self.len) }
    }

    pub fn as_mut_slice(&mut self) -> &mut [T] {
        // SAFETY: as in `as_slice`; `&mut self` makes this the only borrow of these bytes.
        unsafe { std::slice::from_raw_parts_mut(self.region.ptr.add(self.off).cast(), self.len) }
    }
}

impl<T: Plain> std::fmt::Debug for PackBuf<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PackBuf({} x {})", self.len, std::any::type_name::<T>())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_zeroed_aligned_disjoint_and_outlive_their_arena() {
        let arena = PackArena::new(padded(100) + padded(2 * 3000) + (3 << 20));
        let mut a = PackBuf::<u8>::zeroed(100, Some(&arena));
        let mut b = PackBuf::<u16>::zeroed(3000, Some(&arena));
        let mut c = PackBuf::<u8>::zeroed(3 << 20, Some(&arena));
        assert_eq!(arena.used(), padded(100) + padded(6000) + (3 << 20));
        for (i, buf) in [a.as_slice(), c.as_slice()].into_iter().enumerate() {
            assert!(buf.iter().all(|v| *v == 0), "buffer {i} starts zeroed");
            assert_eq!(buf.as_ptr() as usize % ALIGN, 0);
        }
        assert!(b.as_slice().iter().all(|v| *v == 0));
        drop(arena);
        a.as_mut_slice().fill(1);
        b.as_mut_slice().fill(0xBEEF);
        c.as_mut_slice().fill(3);
        assert!(a.as_slice().iter().all(|v| *v == 1));
        assert!(b.as_slice().iter().all(|v| *v == 0xBEEF));
        assert!(c.as_slice().iter().all(|v| *v == 3));
    }

    #[test]
    fn a_buffer_that_does_not_fit_gets_its_own_region() {
        let arena = PackArena::new(128);
        let a = PackBuf::<u8>::zeroed(100, Some(&arena));
        let mut b = PackBuf::<u16>::zeroed(5 << 20, Some(&arena));
        assert_eq!(
            arena.used(),
            128,
            "only the first buffer came from the arena"
        );
        assert_eq!(a.as_slice().len(), 100);
        b.as_mut_slice()[(5 << 20) - 1] = 7;
        assert_eq!(b.as_slice()[(5 << 20) - 1], 7);
        assert!(b.as_slice()[..(5 << 20) - 1].iter().all(|v| *v == 0));
        let empty = PackBuf::<u16>::zeroed(0, None);
        assert!(empty.as_slice().is_empty());
    }
}
