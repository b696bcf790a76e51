//! The parameter buffer a launch hands `cuLaunchKernel`: the bytes of every parameter at
//! its compiled offset, and one pointer per parameter into them.

use std::ffi::c_void;

use smallvec::SmallVec;

use crate::signature::{ArrayLayout, ParamLayout};

/// A parameter buffer, 16-byte aligned and zeroed; on the stack for the usual sizes
/// (≤ 512 bytes), where only the words the kernel's parameters span are written (not the
/// whole inline capacity).
#[derive(PartialEq, Eq)]
pub(crate) struct ParamBuffer(SmallVec<[u128; 32]>);

impl Clone for ParamBuffer {
    fn clone(&self) -> Self {
        ParamBuffer(self.0.clone())
    }
    /// Copies only the words the parameters span (a graph's replay stages its launches'
    /// bytes into buffers it keeps).
    fn clone_from(&mut self, source: &Self) {
        self.0.clone_from(&source.0);
    }
}

impl ParamBuffer {
    #[inline]
    pub(crate) fn new(size: usize) -> Self {
        let mut words = SmallVec::new();
        words.resize(size.div_ceil(16).max(1), 0);
        ParamBuffer(words)
    }
    pub(crate) fn write(&mut self, offset: usize, data: &[u8]) {
        let bytes: &mut [u8] = bytemuck::cast_slice_mut(&mut self.0[..]);
        bytes[offset..offset + data.len()].copy_from_slice(data);
    }
    /// A `caijit::Array<T, N>` at `offset` ([`ArrayLayout`]): the data pointer, then each
    /// dimension's `(extent, byte stride)` of a rank-`rank` array.
    pub(crate) fn write_array(&mut self, offset: usize, ptr: u64, rank: usize, dims: impl Iterator<Item = (i64, i64)>) {
        self.write(offset + ArrayLayout::DATA, &ptr.to_le_bytes());
        for (d, (n, s)) in dims.enumerate() {
            self.write_dim(offset, rank, d, n, s);
        }
    }
    /// Dimension `d`'s extent and byte stride of the rank-`rank` `caijit::Array` at `offset`
    /// (its pointer written by [`ParamBuffer::write_array`], or apart).
    pub(crate) fn write_dim(&mut self, offset: usize, rank: usize, d: usize, extent: i64, stride: i64) {
        self.write(offset + ArrayLayout::extent(d), &extent.to_le_bytes());
        self.write(offset + ArrayLayout::stride(rank, d), &stride.to_le_bytes());
    }
    /// The buffer's bytes (for tests).
    #[cfg(test)]
    pub(crate) fn bytes(&self) -> &[u8] {
        bytemuck::cast_slice(&self.0[..])
    }
    /// Call `f` with one pointer per parameter into this buffer (on the stack for up to 32
    /// parameters). The driver's calls take them as `void**` but only read through them.
    pub(crate) fn with_pointers<R>(&self, params: &[ParamLayout], f: impl FnOnce(&mut [*mut c_void]) -> R) -> R {
        let start = self.0.as_ptr() as *mut u8;
        let mut pointers: SmallVec<[*mut c_void; 32]> = params.iter().map(|p| start.wrapping_add(p.offset) as *mut c_void).collect();
        f(&mut pointers)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameter_buffers_are_zeroed_aligned_and_sized_to_their_parameters() {
        let mut b = ParamBuffer::new(20);
        assert_eq!(b.0.len(), 2);
        assert!(!b.0.spilled());
        assert_eq!(b.0.as_ptr() as usize % 16, 0);
        assert!(b.0.iter().all(|&w| w == 0));
        b.write(16, &[1, 2, 3, 4]);
        let bytes: &[u8] = bytemuck::cast_slice(&b.0[..]);
        assert_eq!(&bytes[16..20], &[1, 2, 3, 4]);
        assert_eq!(ParamBuffer::new(0).0.len(), 1);
        assert!(ParamBuffer::new(513).0.spilled());
    }
}
