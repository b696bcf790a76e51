//! cudarc slices as CAI arrays: pass a `CudaSlice<T>` (or a `CudaView`/`CudaViewMut` of
//! one) to a caijit kernel, ordered against a cudarc stream like any other producer, and
//! with cudarc's own record of the access kept until the kernel is enqueued.
//!
//! # Examples
//! ```no_run
//! # fn f(k: &cai_runtime::kernel::Kernel, x: &cudarc::driver::CudaSlice<f32>, y: &mut cudarc::driver::CudaSlice<f32>) -> cai_runtime::Result<()> {
//! use cai_runtime::interop::{cudarc_view, cudarc_view_mut};
//! use cai_runtime::launch::{Arg, LaunchConfig};
//! let stream = y.stream().clone();
//! let n = x.len();
//! let (xv, yv) = (cudarc_view(x, &stream)?, cudarc_view_mut(y, &stream)?);
//! k.launch(&LaunchConfig::for_elements(n, 256), &[Arg::Array(&xv), Arg::Array(&yv)], None, true)?;
//! drop((xv, yv)); // now cudarc records the read of `x` and the write of `y` on `stream`
//! # Ok(()) }
//! ```
//!
//! A view keeps its slice borrowed, so the slice cannot be freed (or used mutably) while
//! a launch may still be given the view:
//!
//! ```compile_fail,E0505
//! # fn f(k: &cai_runtime::kernel::Kernel, mut y: cudarc::driver::CudaSlice<f32>) -> cai_runtime::Result<()> {
//! # use cai_runtime::launch::{Arg, LaunchConfig};
//! let stream = y.stream().clone();
//! let yv = cai_runtime::interop::cudarc_view_mut(&mut y, &stream)?;
//! drop(y); // error: `y` is borrowed by the view (and its access record)
//! k.launch(&LaunchConfig::for_elements(1, 1), &[Arg::Array(&yv)], None, true)?;
//! # Ok(()) }
//! ```
//!
//! # Rationale
//! cudarc orders work on its slices across streams with events: taking a slice's device
//! pointer makes the given stream wait for the slice's earlier writes (and, for a write, its
//! reads), and dropping the returned [`SyncOnDrop`] records the access on that stream, which
//! later cudarc work on other streams waits for. The record must come after the kernel is
//! enqueued, or later cudarc work would wait for a point before it: so the view holds the
//! guard, and the caller drops the view after the launch. A view the kernel may write takes
//! cudarc's *write* pointer (`device_ptr_mut`): a read record would let later readers on
//! other streams skip the kernel's writes.
//!
//! # Limitations
//! Drop the view only after every launch that uses it is enqueued; the memory itself stays
//! valid as long as the slice (which the view borrows).

use std::ops::Deref;

use crate::cai::{ArrayView, Element, StreamRef};
use crate::error::Result;
use crate::sys::cudarc_types::{CudaStream, DevicePtr, DevicePtrMut, SyncOnDrop};

/// The CAI value of a cudarc stream (its null default stream is the legacy stream).
pub fn cudarc_stream(stream: &CudaStream) -> StreamRef {
    StreamRef::from_raw(stream.cu_stream() as usize as u64)
}

/// A 1-D CAI view of cudarc memory with cudarc's record of the access: cudarc records the
/// read or write on the view's stream when the view drops (see the module's rationale).
/// Pass the [`ArrayView`] it dereferences to as [`crate::launch::Arg::Array`].
#[derive(Debug)]
pub struct CudarcView<'a> {
    view: ArrayView,
    /// cudarc's record of the access, made when the view drops.
    _access: SyncOnDrop<'a>,
}

impl Deref for CudarcView<'_> {
    type Target = ArrayView;
    fn deref(&self) -> &ArrayView {
        &self.view
    }
}

impl<'a> CudarcView<'a> {
    fn new<T: Element>(ptr: u64, len: usize, readonly: bool, stream: &CudaStream, access: SyncOnDrop<'a>) -> Result<Self> {
        let view = ArrayView::new(ptr, &[len], None, T::DTYPE, readonly, Some(cudarc_stream(stream)))?;
        Ok(CudarcView { view, _access: access })
    }
}

/// A readonly view of `slice` for kernels that read it (`const T*` parameters): `stream`
/// waits for the slice's earlier writes now, and is the view's producer stream (each launch
/// is ordered against it both ways); the read is recorded on it when the view drops.
pub fn cudarc_view<'a, T: Element, S: DevicePtr<T>>(slice: &'a S, stream: &'a CudaStream) -> Result<CudarcView<'a>> {
    let len = slice.len();
    let (ptr, read) = slice.device_ptr(stream);
    CudarcView::new::<T>(ptr, len, true, stream, read)
}

/// A writable view of `slice`: `stream` waits for the slice's earlier reads and writes now,
/// and is the view's producer stream; the write is recorded on it when the view drops.
pub fn cudarc_view_mut<'a, T: Element, S: DevicePtrMut<T>>(slice: &'a mut S, stream: &'a CudaStream) -> Result<CudarcView<'a>> {
    let len = slice.len();
    let (ptr, write) = slice.device_ptr_mut(stream);
    CudarcView::new::<T>(ptr, len, false, stream, write)
}
