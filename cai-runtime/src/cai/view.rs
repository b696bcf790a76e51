//! A validated array: what caijit knows for certain about a producer's array.

use std::num::NonZeroU64;

use smallvec::SmallVec;

use super::{DType, Data, Descriptor, InterfaceError, TypestrOptions};

/// The largest rank caijit accepts (NumPy's `NPY_MAXDIMS`).
pub const MAX_RANK: usize = 64;

/// The stream on which a producer enqueued the array's pending work.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StreamRef {
    /// The legacy default stream (CAI value `1`).
    Legacy,
    /// The per-thread default stream (CAI value `2`).
    PerThread,
    /// Any other stream, by its `CUstream` handle.
    Handle(NonZeroU64),
}

impl StreamRef {
    /// Read a CAI `stream` value: `1`, `2` or a handle; `0` is forbidden by the spec.
    pub fn from_cai(value: u64) -> Result<StreamRef, InterfaceError> {
        match value {
            0 => Err(InterfaceError::StreamZero),
            1 => Ok(StreamRef::Legacy),
            2 => Ok(StreamRef::PerThread),
            h => Ok(StreamRef::Handle(NonZeroU64::new(h).expect("0 handled above"))),
        }
    }

    /// A raw `CUstream` handle, as a library names its current stream: the null stream
    /// (`0`, which CAI forbids as ambiguous) is the legacy default stream, as CUDA itself
    /// reads a null handle; `1` and `2` are CUDA's own legacy and per-thread handles.
    /// Every reading of a producer's raw stream goes through here.
    pub fn from_raw(handle: u64) -> StreamRef {
        match NonZeroU64::new(handle) {
            None => StreamRef::Legacy,
            Some(h) if h.get() == 1 => StreamRef::Legacy,
            Some(h) if h.get() == 2 => StreamRef::PerThread,
            Some(h) => StreamRef::Handle(h),
        }
    }

    /// The CAI `stream` value: `1`, `2` or the handle, never `0`.
    pub fn to_cai(self) -> u64 {
        match self {
            StreamRef::Legacy => 1,
            StreamRef::PerThread => 2,
            StreamRef::Handle(h) => h.get(),
        }
    }
}

/// A validated CUDA array: pointer, shape, byte strides (always explicit), dtype.
///
/// Every extent, size and offset was computed with checked arithmetic when it was built,
/// so the derived facts below cannot overflow.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArrayView {
    ptr: u64,
    // Inline up to rank 4: building and cloning a view allocates nothing on the launch path.
    shape: SmallVec<[usize; 4]>,
    strides: SmallVec<[i64; 4]>,
    dtype: DType,
    readonly: bool,
    stream: Option<StreamRef>,
    version: u8,
    size: usize,
    /// Byte offsets relative to `ptr`: `[lo, hi)` is every byte an element occupies.
    extent: (i128, i128),
    /// caijit's own memory (see [`ArrayView::owned_by_caijit`]).
    own: bool,
}

impl Descriptor {
    /// Apply the CAI v3 consumer rules with default typestr options.
    pub fn validate(&self) -> Result<ArrayView, InterfaceError> {
        ArrayView::from_descriptor(self, Default::default())
    }
}

impl ArrayView {
    /// Validate a producer's descriptor (the CAI v3 consumer rules, as caijit applies them).
    pub fn from_descriptor(d: &Descriptor, options: TypestrOptions) -> Result<ArrayView, InterfaceError> {
        if !(0..=3).contains(&d.version) {
            return Err(InterfaceError::UnsupportedVersion { version: d.version });
        }
        if d.mask {
            return Err(InterfaceError::MaskUnsupported);
        }
        let stream = d.stream.map(StreamRef::from_cai).transpose()?;
        let dtype = DType::from_typestr_with(&d.typestr, options)?;
        let mut view = Self::build(d.data, &d.shape, d.strides.as_deref(), dtype, stream)?;
        view.version = d.version as u8;
        Ok(view)
    }

    /// A C-contiguous array. Fails only if the shape overflows or the pointer is null
    /// for a non-empty array.
    pub fn contiguous(ptr: u64, shape: &[usize], dtype: DType, readonly: bool) -> Result<ArrayView, InterfaceError> {
        Self::new(ptr, shape, None, dtype, readonly, None)
    }

    /// An array with explicit byte strides (`None`: C-contiguous).
    pub fn new(
        ptr: u64,
        shape: &[usize],
        strides: Option<&[i64]>,
        dtype: DType,
        readonly: bool,
        stream: Option<StreamRef>,
    ) -> Result<ArrayView, InterfaceError> {
        check_rank(shape.len())?;
        if shape.iter().any(|&n| i64::try_from(n).is_err()) {
            return Err(InterfaceError::ShapeOverflow { shape: vec![i64::MAX] });
        }
        Self::from_extents(Data { ptr, readonly }, SmallVec::from_slice(shape), strides, dtype, stream)
    }

    fn build(
        data: Data,
        shape: &[i64],
        strides: Option<&[i64]>,
        dtype: DType,
        stream: Option<StreamRef>,
    ) -> Result<ArrayView, InterfaceError> {
        check_rank(shape.len())?;
        let mut extents = SmallVec::<[usize; 4]>::with_capacity(shape.len());
        for (axis, &n) in shape.iter().enumerate() {
            let n = usize::try_from(n).map_err(|_| InterfaceError::NegativeExtent { axis, value: n })?;
            extents.push(n);
        }
        Self::from_extents(data, extents, strides, dtype, stream)
    }

    /// The checks of every view, on at most [`MAX_RANK`] extents that each fit an `i64`.
    fn from_extents(
        data: Data,
        extents: SmallVec<[usize; 4]>,
        strides: Option<&[i64]>,
        dtype: DType,
        stream: Option<StreamRef>,
    ) -> Result<ArrayView, InterfaceError> {
        let shape = || extents.iter().map(|&n| n as i64).collect::<Vec<_>>();
        let overflow = || InterfaceError::ShapeOverflow { shape: shape() };
        let size = extents.iter().try_fold(1usize, |acc, &n| acc.checked_mul(n)).ok_or_else(overflow)?;
        // nbytes must fit an i64 so that byte strides of contiguous layouts do too.
        let nbytes = size.checked_mul(dtype.itemsize()).filter(|&b| i64::try_from(b).is_ok());
        if nbytes.is_none() && size > 0 {
            return Err(InterfaceError::ByteSizeOverflow { shape: shape(), itemsize: dtype.itemsize() });
        }
        let strides = match strides {
            None => c_strides_in(&extents, dtype.itemsize()).ok_or_else(overflow)?,
            Some(s) if s.len() != extents.len() => {
                return Err(InterfaceError::StridesRank { shape: extents.len(), strides: s.len() });
            }
            Some(s) => SmallVec::from_slice(s),
        };
        let extent = if size == 0 {
            (0, 0)
        } else {
            byte_extent(&extents, &strides, dtype.itemsize())
                .ok_or_else(|| InterfaceError::ExtentOverflow { shape: extents.to_vec(), strides: strides.to_vec() })?
        };
        if size > 0 {
            if data.ptr == 0 {
                return Err(InterfaceError::NullPointer { size });
            }
            let lo = i128::from(data.ptr) + extent.0;
            let hi = i128::from(data.ptr) + extent.1;
            if lo < 0 || hi > i128::from(u64::MAX) + 1 {
                return Err(InterfaceError::AddressOverflow { ptr: data.ptr, strides: strides.to_vec() });
            }
        }
        Ok(ArrayView {
            ptr: data.ptr,
            shape: extents,
            strides,
            dtype,
            readonly: data.readonly,
            stream,
            version: 3,
            size,
            extent,
            own: false,
        })
    }

    /// The device pointer of element `(0, …, 0)`; may be 0 only when the array is empty.
    pub fn ptr(&self) -> u64 {
        self.ptr
    }
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }
    /// Byte strides, one per dimension, always explicit (possibly negative or zero).
    pub fn strides(&self) -> &[i64] {
        &self.strides
    }
    pub fn dtype(&self) -> DType {
        self.dtype
    }
    pub fn readonly(&self) -> bool {
        self.readonly
    }
    /// The producer's stream, `None` when no ordering is needed.
    pub fn stream(&self) -> Option<StreamRef> {
        self.stream
    }
    /// The CAI version the producer declared (3 for views built in Rust).
    pub fn version(&self) -> u8 {
        self.version
    }
    pub fn ndim(&self) -> usize {
        self.shape.len()
    }
    /// Number of elements.
    pub fn size(&self) -> usize {
        self.size
    }
    /// `size * itemsize`: the bytes of the elements, not of the span they cover.
    pub fn nbytes(&self) -> usize {
        self.size * self.dtype.itemsize()
    }
    pub fn is_empty(&self) -> bool {
        self.size == 0
    }

    /// Replace the producer stream (used by producers exporting their own arrays).
    pub fn with_stream(mut self, stream: Option<StreamRef>) -> Self {
        self.stream = stream;
        self
    }

    /// Mark the view as caijit's own memory (a `DeviceArray`, or a view of one).
    pub fn owned_by_caijit(mut self, own: bool) -> Self {
        self.own = own;
        self
    }

    /// Whether the memory is caijit's own. The stream protocol always orders such a view
    /// (both edges), whatever the opt-outs for other libraries' arrays say: caijit frees and
    /// reuses that memory itself, so skipping an edge would let it be recycled under a
    /// kernel still reading it.
    pub fn is_owned_by_caijit(&self) -> bool {
        self.own
    }

    /// C-contiguous as NumPy defines it: dimensions of extent 1 are ignored, and every
    /// empty array is contiguous.
    pub fn is_c_contiguous(&self) -> bool {
        self.is_contiguous_in(self.shape.iter().zip(&self.strides).rev())
    }

    /// Fortran-contiguous, with the same conventions as [`ArrayView::is_c_contiguous`].
    pub fn is_f_contiguous(&self) -> bool {
        self.is_contiguous_in(self.shape.iter().zip(&self.strides))
    }

    fn is_contiguous_in<'a>(&self, dims_fastest_first: impl Iterator<Item = (&'a usize, &'a i64)>) -> bool {
        if self.size == 0 {
            return true;
        }
        let mut expected = self.dtype.itemsize() as i128;
        for (&n, &stride) in dims_fastest_first {
            if n == 1 {
                continue;
            }
            if i128::from(stride) != expected {
                return false;
            }
            expected *= n as i128;
        }
        true
    }

    /// The bytes actually addressed, relative to [`ArrayView::ptr`]: `[lo, hi)`, with
    /// `lo <= 0` when strides are negative. `(0, 0)` for an empty array.
    pub fn byte_extent(&self) -> (i128, i128) {
        self.extent
    }

    /// The addressed device range `[start, end)` as absolute addresses; empty for an empty array.
    pub fn address_range(&self) -> std::ops::Range<u128> {
        let base = i128::from(self.ptr);
        ((base + self.extent.0) as u128)..((base + self.extent.1) as u128)
    }

    /// Whether the pointer and every stride of a dimension longer than 1 are multiples
    /// of the itemsize, so the array can be indexed as `T*`.
    pub fn is_itemsize_aligned(&self) -> bool {
        let item = self.dtype.itemsize() as u64;
        if self.size == 0 {
            return true;
        }
        is_multiple_of(self.ptr.into(), item)
            && self.shape.iter().zip(&self.strides).all(|(&n, &s)| n <= 1 || is_multiple_of(s.into(), item))
    }

    /// Export as a version-3 descriptor by the CAI v3 producer rules: `strides: None`
    /// when C-contiguous, `data: (0, readonly)` when empty, stream `1`/`2`/handle.
    pub fn to_descriptor(&self) -> Descriptor {
        let ptr = exported_ptr(self.ptr, &self.shape);
        let mut d = Descriptor::new(self.shape.iter().map(|&n| n as i64).collect(), self.dtype.typestr(), ptr, self.readonly);
        d.strides = (!self.is_c_contiguous()).then(|| self.strides.to_vec());
        d.stream = self.stream.map(StreamRef::to_cai);
        d
    }
}

/// The pointer an array of `shape` at `ptr` is exported and imported with: `0` when it
/// has no elements (the CAI v3 producer rule: a view of no elements may point anywhere, and
/// CuPy, PyTorch and DLPack producers hand out such pointers), else `ptr`. Every export
/// and every fast-path import of an array's pointer goes through here.
pub fn exported_ptr(ptr: u64, shape: &[usize]) -> u64 {
    if shape.contains(&0) {
        0
    } else {
        ptr
    }
}

/// C-order byte strides for `shape`, or `None` if any would not fit an `i64`.
pub fn c_strides(shape: &[usize], itemsize: usize) -> Option<Vec<i64>> {
    c_strides_in(shape, itemsize).map(|s| s.to_vec())
}

fn c_strides_in(shape: &[usize], itemsize: usize) -> Option<SmallVec<[i64; 4]>> {
    let mut strides: SmallVec<[i64; 4]> = smallvec::smallvec![0i64; shape.len()];
    let mut acc = i64::try_from(itemsize).ok()?;
    let empty = shape.contains(&0);
    for (stride, &n) in strides.iter_mut().zip(shape).rev() {
        *stride = acc;
        if !empty {
            acc = acc.checked_mul(i64::try_from(n.max(1)).ok()?)?;
        }
    }
    Some(strides)
}

/// `[lo, hi)` relative to the first element for a non-empty array, checked.
fn byte_extent(shape: &[usize], strides: &[i64], itemsize: usize) -> Option<(i128, i128)> {
    let (mut lo, mut hi) = (0i128, 0i128);
    for (&n, &s) in shape.iter().zip(strides) {
        let span = (n as i128 - 1).checked_mul(i128::from(s))?;
        if span < 0 {
            lo = lo.checked_add(span)?;
        } else {
            hi = hi.checked_add(span)?;
        }
    }
    Some((lo, hi.checked_add(itemsize as i128)?))
}

/// `x` (a pointer or a byte stride) is a multiple of `align`: a mask for the power-of-two
/// sizes and alignments of CUDA types, which the launch path checks per array; a division
/// for any other (never for `align` 0).
#[inline]
pub fn is_multiple_of(x: i128, align: u64) -> bool {
    if align.is_power_of_two() {
        (x as u64) & (align - 1) == 0 // the low bits, in two's complement for a negative stride
    } else {
        align != 0 && x.rem_euclid(i128::from(align)) == 0
    }
}

fn check_rank(rank: usize) -> Result<(), InterfaceError> {
    match rank > MAX_RANK {
        true => Err(InterfaceError::RankTooLarge { rank, max: MAX_RANK }),
        false => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn multiples_by_mask_agree_with_division() {
        for align in [1u64, 2, 3, 4, 8, 12, 16, u64::MAX] {
            for x in [-48i128, -17, -16, -8, -1, 0, 1, 4, 8, 12, 16, 24, 0x7f00_0000_0010, (1 << 63) + 1, 1 << 63, u64::MAX.into()] {
                assert_eq!(is_multiple_of(x, align), x % i128::from(align) == 0, "{x} by {align}");
            }
        }
        assert!(!is_multiple_of(4, 0));
    }

    #[test]
    fn negative_strides_are_aligned_by_their_magnitude() {
        let v = ArrayView::new(0x1000, &[4, 3], Some(&[-12, 4]), DType::F32, false, None).unwrap();
        assert!(v.is_itemsize_aligned());
        let odd = ArrayView::new(0x1000, &[4, 3], Some(&[-6, 4]), DType::F32, false, None).unwrap();
        assert!(!odd.is_itemsize_aligned());
    }

    #[test]
    fn a_null_raw_stream_is_the_legacy_stream() {
        assert_eq!(StreamRef::from_raw(0), StreamRef::Legacy);
        assert_eq!(StreamRef::from_raw(1), StreamRef::Legacy);
        assert_eq!(StreamRef::from_raw(2), StreamRef::PerThread);
        assert_eq!(StreamRef::from_raw(0x7f00), StreamRef::from_cai(0x7f00).unwrap());
        assert_eq!(StreamRef::from_raw(0).to_cai(), 1);
    }

    #[test]
    fn an_empty_array_exports_pointer_0() {
        assert_eq!(exported_ptr(0x1000, &[3, 0, 2]), 0);
        assert_eq!(exported_ptr(0x1000, &[3, 2]), 0x1000);
        assert_eq!(exported_ptr(0x1000, &[]), 0x1000, "a 0-d array has one element");
        let empty = ArrayView::new(0x1000, &[0], None, DType::F32, false, None).unwrap();
        assert_eq!(empty.to_descriptor().data.ptr, 0);
    }
}
