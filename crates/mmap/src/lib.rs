//! How much of an anonymous memory mapping the kernel holds in memory right now.
//!
//! A storage server maps its log (the seglet pool, L§5.1) and its hash table
//! (R§4.1) once at start-up and lets the kernel fault pages in, zeroed, on first
//! touch; the resident split it reports (issue 17, docs/design-notes.md "Memory
//! outside the log") asks the kernel page by page which of those pages are in
//! memory. Both crates ask the same way, so the loop lives here once:
//! [`resident_bytes`].
//!
//! Invariants: the answer is at most the mapping's length, and counts whole pages
//! (a partly touched page is resident as a whole). It is `None`, never a guess,
//! where the kernel cannot be asked (not Linux) or refuses.
//!
//! Cost: one `mincore` system call per 16 MiB with 4 KiB pages (a 4 KiB status
//! buffer on the stack), no allocation, no lock.
//!
//! Thread-safety: a pure function of the address range; safe to call from any
//! thread while other threads write to the mapping (pages faulted in meanwhile may
//! or may not be counted).

/// Bytes of the `len`-byte mapping at `base` the kernel holds in memory right now
/// (`mincore`, one call per 16 MiB with 4 KiB pages, no allocation). `None` where
/// the kernel cannot be asked (`mincore` is used on Linux only) or refuses.
///
/// # Safety
/// `[base, base + len)` is one live mapping (or several adjacent ones) for the
/// whole call, and `base` is page-aligned.
pub unsafe fn resident_bytes(base: *const u8, len: usize) -> Option<usize> {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: sysconf has no preconditions.
        let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) })
            .ok()
            .filter(|&p| p > 0)?;
        // One status byte per page, a chunk of pages at a time.
        let mut status = [0u8; 4096];
        let mut resident_pages = 0usize;
        let mut offset = 0;
        while offset < len {
            let chunk = (len - offset).min(status.len() * page);
            // SAFETY: [offset, offset + chunk) lies inside the mapping (the
            // caller's promise), `offset` is a multiple of the page size, and
            // `status` has a byte for each of the ⌈chunk / page⌉ pages.
            let rc = unsafe {
                libc::mincore(
                    base.add(offset).cast_mut().cast(),
                    chunk,
                    status.as_mut_ptr(),
                )
            };
            if rc != 0 {
                return None;
            }
            resident_pages += status[..chunk.div_ceil(page)]
                .iter()
                .filter(|&&s| s & 1 != 0)
                .count();
            offset += chunk;
        }
        Some((resident_pages * page).min(len))
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (base, len);
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An anonymous private mapping of `len` bytes, unmapped on drop.
    struct Mapping {
        base: *mut u8,
        len: usize,
    }

    impl Mapping {
        fn new(len: usize) -> Mapping {
            // SAFETY: a fresh anonymous mapping; no existing memory is affected.
            let raw = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                )
            };
            assert_ne!(raw, libc::MAP_FAILED, "mmap");
            Mapping {
                base: raw.cast(),
                len,
            }
        }

        fn resident(&self) -> Option<usize> {
            // SAFETY: the mapping is live and page-aligned (mmap) for `self`'s life.
            unsafe { resident_bytes(self.base, self.len) }
        }
    }

    impl Drop for Mapping {
        fn drop(&mut self) {
            // SAFETY: exactly the mapping made in `new`, no longer used.
            unsafe {
                libc::munmap(self.base.cast(), self.len);
            }
        }
    }

    fn page() -> usize {
        // SAFETY: sysconf has no preconditions.
        unsafe { libc::sysconf(libc::_SC_PAGESIZE) as usize }
    }

    /// A fresh mapping holds nothing; a byte written makes its page resident, and
    /// only that page; the answer spans chunks of the status buffer (more than
    /// 4,096 pages).
    #[test]
    fn resident_bytes_counts_touched_pages_only() {
        let page = page();
        let m = Mapping::new(5000 * page);
        let fresh = m.resident();
        if !cfg!(target_os = "linux") {
            assert_eq!(fresh, None, "unknown where mincore cannot be asked");
            return;
        }
        let fresh = fresh.expect("mincore answers on Linux");
        assert_eq!(fresh, 0);
        // SAFETY: inside the mapping.
        unsafe {
            m.base.write(1);
            m.base.add(4500 * page + 7).write(1);
        }
        assert_eq!(m.resident(), Some(2 * page));
    }

    /// A length that is not a multiple of the page counts its last page, capped
    /// at the length; a zero length is zero.
    #[test]
    fn resident_bytes_caps_at_the_length() {
        let page = page();
        let m = Mapping::new(2 * page);
        // SAFETY: inside the mapping.
        unsafe {
            m.base.write(1);
            m.base.add(page).write(1);
        }
        // SAFETY: a prefix of the live mapping.
        let partial = unsafe { resident_bytes(m.base, page + 10) };
        if cfg!(target_os = "linux") {
            assert_eq!(partial, Some(page + 10));
            // SAFETY: as above.
            assert_eq!(unsafe { resident_bytes(m.base, 0) }, Some(0));
        } else {
            assert_eq!(partial, None);
        }
    }
}
