//! cudarc slices as CAI arrays: pass a `CudaSlice<T>` (or a view of one) to a caijit
//! kernel, ordered against the slice's own stream like any other producer.
//!
//! # Examples
//! ```no_run
//! # fn f(k: &cai_runtime::kernel::Kernel, x: &cudarc::driver::CudaSlice<f32>) -> cai_runtime::Result<()> {
//! use cai_runtime::interop::cudarc_view;
//! use cai_runtime::launch::{Arg, LaunchConfig};
//! let v = cudarc_view(x, false);
//! k.launch(&LaunchConfig::for_elements(x.len(), 256), &[Arg::Array(&v)], None, true)?;
//! # Ok(()) }
//! ```
//!
//! # Limitations
//! The view borrows nothing: keep the slice alive (and do not free it) until the work
//! that uses the view is done, as the CUDA Array Interface requires of every producer.

use cudarc::driver::{CudaSlice, CudaStream, DevicePtr};

use crate::cai::{ArrayView, Element, StreamRef};

/// The CAI value of a cudarc stream (its null default stream is the legacy stream).
pub fn cudarc_stream(stream: &CudaStream) -> StreamRef {
    StreamRef::from_raw(stream.cu_stream() as usize as u64)
}

/// A 1-D view of a cudarc slice, carrying the slice's stream as its producer stream.
pub fn cudarc_view<T: Element>(slice: &CudaSlice<T>, readonly: bool) -> ArrayView {
    let stream = slice.stream();
    // cudarc orders its own stream after the slice's last write and records the read when
    // `_read` drops; caijit then orders the launch against that same stream.
    let (ptr, _read) = slice.device_ptr(stream);
    ArrayView::new(ptr, &[slice.len()], None, T::DTYPE, readonly, Some(cudarc_stream(stream)))
        .expect("a cudarc slice's extent fits the address space")
}
