//! Receive buffers for large response frames, kept and reused.
//!
//! Why (issue 20, session 34's profile of a migration target): every 1 MiB Pull
//! answer arrived in a buffer of its own, which the allocator maps fresh (the
//! servers fix glibc's mmap threshold at 128 KiB, `cli/src/allocator.rs`) and
//! the kernel faults in and zeroes page by page, then unmaps once the answer is
//! applied: about a sixth of the target's normal-priority CPU during a
//! migration went to those faults. A connection now reads each large frame
//! into a buffer taken from its pool; the frame is handed on as [`Bytes`] that
//! owns the buffer, and dropping the last handle puts the buffer back, still
//! mapped and faulted in, for the next frame (K§2.4: the target's per-byte
//! costs bound the pull rate).
//!
//! Memory: a pool keeps at most [`FramePool::max_buffers`] buffers of at most
//! [`FramePool::max_bytes`] each; a frame larger than that gets a buffer that
//! is freed with it, as before. Thread-safety: `Send + Sync`; buffers come back
//! from whatever thread drops the frame.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;

/// A pool of receive buffers for frames of one connection.
#[derive(Debug)]
pub struct FramePool {
    free: parking_lot::Mutex<Vec<Vec<u8>>>,
    max_buffers: usize,
    max_bytes: usize,
    /// Buffers allocated because none was free (or the frame was too large).
    allocated: AtomicU64,
}

impl FramePool {
    /// A pool that keeps up to `max_buffers` buffers of up to `max_bytes` each.
    pub fn new(max_buffers: usize, max_bytes: usize) -> Arc<Self> {
        Arc::new(Self {
            free: parking_lot::Mutex::new(Vec::with_capacity(max_buffers)),
            max_buffers,
            max_bytes,
            allocated: AtomicU64::new(0),
        })
    }

    /// The most buffers kept.
    pub fn max_buffers(&self) -> usize {
        self.max_buffers
    }

    /// The largest buffer kept, in bytes.
    pub fn max_bytes(&self) -> usize {
        self.max_bytes
    }

    /// An empty buffer with room for at least `len` bytes: a kept one if one is
    /// free and large enough, else a new one.
    pub fn take(self: &Arc<Self>, len: usize) -> FrameBuf {
        FrameBuf {
            vec: self.take_vec(len),
            pool: self.clone(),
        }
    }

    /// [`Self::take`] as a plain vector, for a reader that gives it back
    /// itself ([`Self::put`]) once the frame is served.
    pub fn take_vec(&self, len: usize) -> Vec<u8> {
        let kept = if len <= self.max_bytes {
            let mut free = self.free.lock();
            free.iter()
                .position(|b| b.capacity() >= len)
                .map(|i| free.swap_remove(i))
        } else {
            None
        };
        let vec = kept.unwrap_or_else(|| {
            self.allocated.fetch_add(1, Ordering::Relaxed);
            // A kept buffer is sized for the largest frame it may hold, so a
            // later, slightly larger frame of the same kind reuses it too.
            Vec::with_capacity(if len <= self.max_bytes {
                self.max_bytes
            } else {
                len
            })
        });
        debug_assert!(vec.is_empty() && vec.capacity() >= len);
        vec
    }

    /// Buffers allocated so far (none was free to reuse).
    pub fn allocated(&self) -> u64 {
        self.allocated.load(Ordering::Relaxed)
    }

    /// Buffers kept now, free for the next frame.
    pub fn kept(&self) -> usize {
        self.free.lock().len()
    }

    /// Keeps `vec` for a later frame, if the pool has room and it is not
    /// larger than [`Self::max_bytes`] (else it is freed).
    pub fn put(&self, mut vec: Vec<u8>) {
        if vec.capacity() > self.max_bytes {
            return;
        }
        let mut free = self.free.lock();
        if free.len() < self.max_buffers {
            vec.clear();
            free.push(vec);
        }
    }
}

/// A buffer of a [`FramePool`]: filled by the reader, then frozen into the
/// frame's [`Bytes`]; it goes back to its pool when the last handle drops.
#[derive(Debug)]
pub struct FrameBuf {
    vec: Vec<u8>,
    pool: Arc<FramePool>,
}

impl FrameBuf {
    /// The buffer being filled.
    pub fn vec_mut(&mut self) -> &mut Vec<u8> {
        &mut self.vec
    }

    /// Bytes filled so far.
    pub fn len(&self) -> usize {
        self.vec.len()
    }

    /// Whether nothing is filled yet.
    pub fn is_empty(&self) -> bool {
        self.vec.is_empty()
    }

    /// The filled bytes as a frame; the buffer goes back to the pool when the
    /// frame (and every clone or slice of it) is dropped.
    pub fn freeze(self) -> Bytes {
        Bytes::from_owner(self)
    }
}

impl AsRef<[u8]> for FrameBuf {
    fn as_ref(&self) -> &[u8] {
        &self.vec
    }
}

impl Drop for FrameBuf {
    fn drop(&mut self) {
        self.pool.put(std::mem::take(&mut self.vec));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn take_reuses_a_buffer_once_its_frame_is_dropped() {
        let pool = FramePool::new(2, 1 << 20);
        let mut buf = pool.take(100_000);
        buf.vec_mut().extend_from_slice(&[7u8; 100_000]);
        let frame = buf.freeze();
        assert_eq!(frame.len(), 100_000);
        assert_eq!(pool.kept(), 0, "the frame still holds its buffer");
        let slice = frame.slice(10..20);
        drop(frame);
        assert_eq!(pool.kept(), 0, "a slice of the frame still holds it");
        assert_eq!(&slice[..], &[7u8; 10]);
        drop(slice);
        assert_eq!(pool.kept(), 1);
        let again = pool.take(1 << 20);
        assert!(again.is_empty(), "a reused buffer starts empty");
        assert_eq!(
            pool.allocated(),
            1,
            "the second frame reused the first's buffer"
        );
    }

    #[test]
    fn take_allocates_while_every_buffer_is_in_use() {
        let pool = FramePool::new(2, 1 << 20);
        let frames: Vec<Bytes> = (0..3).map(|_| pool.take(1000).freeze()).collect();
        assert_eq!(pool.allocated(), 3);
        drop(frames);
        assert_eq!(pool.kept(), 2, "no more than max_buffers are kept");
    }

    #[test]
    fn take_of_a_frame_over_max_bytes_is_never_kept() {
        let pool = FramePool::new(2, 1 << 10);
        let big = pool.take(4 << 10);
        assert!(big.vec.capacity() >= 4 << 10);
        drop(big.freeze());
        assert_eq!(pool.kept(), 0);
        drop(pool.take(10).freeze());
        assert_eq!(pool.kept(), 1);
        assert_eq!(pool.allocated(), 2);
    }

    #[test]
    fn put_keeps_a_plain_vector_for_the_next_take() {
        let pool = FramePool::new(1, 1 << 20);
        let mut v = pool.take_vec(200_000);
        v.extend_from_slice(&[1u8; 200_000]);
        pool.put(v);
        assert_eq!(pool.kept(), 1);
        let again = pool.take_vec(300_000);
        assert!(again.is_empty());
        assert_eq!(pool.allocated(), 1);
        pool.put(Vec::with_capacity(2 << 20));
        pool.put(again);
        assert_eq!(pool.kept(), 1, "too large a vector is not kept");
    }
}
