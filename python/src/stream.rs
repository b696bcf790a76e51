//! Streams from Python: `caijit.Stream`, and any stream-like object given to a launch.

use std::sync::Arc;

use cai_runtime::cai::StreamRef;
use cai_runtime::runtime::{Context, Stream as RtStream};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyInt, PyTuple};

use crate::errors::{PyCaiError, PyCaiResult};

/// A CUDA stream owned by caijit (non-blocking), usable wherever a stream is accepted.
#[pyclass(frozen, module = "caijit", name = "Stream")]
pub struct Stream {
    pub inner: Arc<RtStream>,
}

#[pymethods]
impl Stream {
    #[new]
    #[pyo3(signature = (device = 0))]
    fn new(py: Python<'_>, device: usize) -> PyCaiResult<Self> {
        let ctx = py.detach(|| Context::new(device))?;
        Ok(Stream { inner: Arc::new(RtStream::new(&ctx)?) })
    }
    /// The `CUstream` handle as an int.
    #[getter]
    fn handle(&self) -> u64 {
        self.inner.handle()
    }
    /// The cuda.core stream protocol: `(version, handle)`.
    fn __cuda_stream__(&self) -> (u32, u64) {
        (0, self.inner.handle())
    }
    /// Block until the stream's work is done.
    fn synchronize(&self, py: Python<'_>) -> PyCaiResult<()> {
        Ok(py.detach(|| self.inner.synchronize())?)
    }
    fn __repr__(&self) -> String {
        format!("caijit.Stream(handle={:#x})", self.inner.handle())
    }
}

/// Read a stream argument: `None`, an int (1 and 2 are the default streams), a
/// `caijit.Stream`, or any object with `__cuda_stream__`, `.ptr` (CuPy), `.cuda_stream`
/// (PyTorch) or `.handle` (Numba). A stream object is kept alive by the `Stream` made of
/// it: an array allocated on a CuPy stream never outlives that stream.
pub fn stream_from_py(obj: &Bound<'_, PyAny>) -> PyCaiResult<Option<Arc<RtStream>>> {
    if obj.is_none() {
        return Ok(None);
    }
    if let Ok(s) = obj.cast::<Stream>() {
        return Ok(Some(s.get().inner.clone()));
    }
    let (handle, bare) = match bare_int(obj) {
        Some(h) => (h, true),
        None => (object_stream_handle(obj)?, false),
    };
    if bare || handle == 1 || handle == 2 {
        // A bare handle: the caller promises it outlives its arrays (the default streams
        // always do).
        return Ok(Some(Arc::new(RtStream::borrowed(handle)?)));
    }
    // A stream object: kept alive as long as the arrays and launchers that use its handle.
    Ok(Some(Arc::new(RtStream::borrowed_from(handle, Box::new(obj.clone().unbind()))?)))
}

/// An integer handle: an int or a NumPy integer (anything with `__index__`), not a bool.
fn bare_int(v: &Bound<'_, PyAny>) -> Option<u64> {
    if v.is_instance_of::<PyBool>() || !(v.is_instance_of::<PyInt>() || v.hasattr("__index__").unwrap_or(false)) {
        return None;
    }
    v.extract::<u64>().ok()
}

/// A `ctypes.c_void_p` (Numba's `.handle`): its `.value`, None meaning 0.
fn void_p(v: &Bound<'_, PyAny>) -> Option<u64> {
    v.getattr("value").ok().and_then(|x| if x.is_none() { Some(0) } else { x.extract::<u64>().ok() })
}

fn as_handle(v: &Bound<'_, PyAny>) -> Option<u64> {
    bare_int(v).or_else(|| void_p(v))
}

/// The handle of a stream argument that is not a bare integer (a bare one is taken as
/// given, 0 refused as ambiguous, as CAI refuses it): a stream *object* (a
/// `ctypes.c_void_p` handle included) whose handle is 0 is its library's default stream
/// (CuPy's `Stream.null`, PyTorch's default stream, Numba's default stream), the legacy
/// default stream: `1`.
fn object_stream_handle(obj: &Bound<'_, PyAny>) -> PyCaiResult<u64> {
    let raw = match void_p(obj) {
        Some(h) => h,
        None => object_handle(obj)?,
    };
    Ok(StreamRef::from_raw(raw).to_cai())
}

fn object_handle(obj: &Bound<'_, PyAny>) -> PyCaiResult<u64> {
    if let Ok(f) = obj.getattr("__cuda_stream__") {
        let t = f.call0()?;
        let t = t.cast::<PyTuple>().map_err(|_| PyCaiError::argument("__cuda_stream__() must return (version, handle)"))?;
        if let Some(h) = t.get_item(1).ok().as_ref().and_then(as_handle) {
            return Ok(h);
        }
    }
    for attr in ["cuda_stream", "ptr", "handle"] {
        if let Some(h) = obj.getattr(attr).ok().as_ref().and_then(as_handle) {
            return Ok(h);
        }
    }
    let ty = obj.get_type().name().map(|n| n.to_string()).unwrap_or_default();
    Err(PyCaiError::argument(format!(
        "cannot use a {ty} as a stream: pass None, an int handle, or an object with __cuda_stream__, .ptr, .cuda_stream or .handle"
    )))
}
