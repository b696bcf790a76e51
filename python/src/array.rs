//! `caijit.DeviceArray`: caijit's own device memory from Python. (Turning Python objects
//! into launch arguments is the `args` layer; DLPack export is `dlpack`'s.)

use std::sync::Arc;

use cai_runtime::array::DeviceArray as RtArray;
use cai_runtime::cai::{shorten_plain, DType};
use cai_runtime::python::{descriptor_to_dict, index_integer};
use cai_runtime::runtime::{Context, Stream as RtStream};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyDict, PyString, PyTuple};

use crate::errors::{PyCaiError, PyCaiResult};
use crate::pyobj::{numpy_dtype, type_name};
use crate::stream::stream_from_py;

/// Device memory owned by caijit, exporting CAI v3 with its stream.
#[pyclass(frozen, module = "caijit", name = "DeviceArray")]
pub struct DeviceArray {
    pub inner: RtArray,
}

pub fn dtype_from_py(obj: &Bound<'_, PyAny>) -> PyCaiResult<DType> {
    // A dtype's name ("float32") directly; anything else numpy.dtype() accepts (np.float32,
    // np.dtype(...), "<f4") through NumPy.
    if let Some(d) = obj.cast::<PyString>().ok().and_then(|s| DType::from_name(&s.to_cow().ok()?)) {
        return Ok(d);
    }
    let np = obj.py().import("numpy")?;
    let d = np.getattr("dtype")?.call1((obj,)).map_err(|e| PyCaiError::argument(format!("not a dtype: {e}")))?;
    // The typestr keeps the byte order (">f4" is named float32 too); NumPy's `name` is a
    // slow Python property, read only for what the typestr does not say (ml_dtypes'
    // bfloat16 is "<V2").
    let typestr: String = d.getattr(intern!(obj.py(), "str"))?.extract()?;
    if let Ok(dtype) = DType::from_typestr(&typestr) {
        return Ok(dtype);
    }
    let name: String = d.getattr("name")?.extract()?;
    match name.as_str() {
        "bfloat16" => Ok(DType::BF16),
        _ if typestr.starts_with('>') => {
            Err(PyCaiError::argument(format!("dtype {typestr} is big-endian; caijit arrays are little-endian")))
        }
        _ => Err(PyCaiError::argument(format!("dtype {name} ({typestr}) is not supported by caijit"))),
    }
}

/// A shape: an int or a sequence of them, any integer with `__index__` (`numpy.int64`)
/// included, bools and floats not.
fn shape_from_py(obj: &Bound<'_, PyAny>) -> PyCaiResult<Vec<usize>> {
    let bad = || {
        let repr = shorten_plain(&obj.repr().map(|r| r.to_string()).unwrap_or_else(|_| type_name(obj)));
        PyCaiError::argument(format!("shape must be an int or a tuple of non-negative ints, got {repr}"))
    };
    let extent = |item: &Bound<'_, PyAny>| -> PyCaiResult<usize> { index_integer(item).ok_or_else(bad) };
    if obj.is_instance_of::<PyString>() || obj.is_instance_of::<PyBytes>() {
        return Err(bad());
    }
    if obj.get_type().hasattr("__index__")? {
        return Ok(vec![extent(obj)?]);
    }
    let items: Vec<Bound<'_, PyAny>> = obj.try_iter().map_err(|_| bad())?.collect::<PyResult<_>>().map_err(|_| bad())?;
    items.iter().map(extent).collect()
}

/// The stream an array is allocated on: the one given, else the legacy default stream
/// (which orders with every blocking stream, as CuPy's and PyTorch's defaults do).
fn array_stream(stream: Option<&Bound<'_, PyAny>>) -> PyCaiResult<Arc<RtStream>> {
    Ok(stream.map(stream_from_py).transpose()?.flatten().unwrap_or_else(|| Arc::new(RtStream::legacy())))
}

#[pymethods]
impl DeviceArray {
    /// Device memory, stream-ordered on `stream` (`caijit.empty`; `caijit.zeros` with
    /// `zeroed=True`).
    #[staticmethod]
    #[pyo3(signature = (shape, dtype, *, zeroed = false, stream = None, device = 0))]
    fn allocate(
        py: Python<'_>,
        shape: &Bound<'_, PyAny>,
        dtype: &Bound<'_, PyAny>,
        zeroed: bool,
        stream: Option<&Bound<'_, PyAny>>,
        device: usize,
    ) -> PyCaiResult<Self> {
        let (shape, dtype) = (shape_from_py(shape)?, dtype_from_py(dtype)?);
        let ctx = py.detach(|| Context::new(device))?;
        let s = array_stream(stream)?;
        let inner = if zeroed { RtArray::zeros(&ctx, &shape, dtype, &s)? } else { RtArray::empty(&ctx, &shape, dtype, &s)? };
        Ok(DeviceArray { inner })
    }

    /// Copy host bytes in C order (`caijit.to_device` passes a NumPy array's bytes here).
    #[staticmethod]
    #[pyo3(signature = (data, shape, dtype, *, stream = None, device = 0))]
    fn from_buffer(
        py: Python<'_>,
        data: &Bound<'_, PyBytes>,
        shape: &Bound<'_, PyAny>,
        dtype: &Bound<'_, PyAny>,
        stream: Option<&Bound<'_, PyAny>>,
        device: usize,
    ) -> PyCaiResult<Self> {
        let (shape, dtype) = (shape_from_py(shape)?, dtype_from_py(dtype)?);
        let bytes = data.as_bytes();
        let ctx = py.detach(|| Context::new(device))?;
        let s = array_stream(stream)?;
        Ok(DeviceArray { inner: py.detach(|| RtArray::from_bytes(&ctx, &shape, dtype, bytes, &s))? })
    }

    /// The array's bytes, after the work pending on its stream (a host synchronisation).
    fn to_bytes<'py>(&self, py: Python<'py>) -> PyCaiResult<Bound<'py, PyBytes>> {
        let b = py.detach(|| self.inner.to_bytes())?;
        Ok(PyBytes::new(py, &b))
    }

    /// A NumPy copy, after the work pending on the array's stream (a host synchronisation).
    fn copy_to_host<'py>(&self, py: Python<'py>) -> PyCaiResult<Bound<'py, PyAny>> {
        // Copied once, straight into the memory of the array handed out (a bytearray's, so
        // that the array is writable, like CuPy's .get()).
        let mut copied = Ok(());
        let host = PyByteArray::new_with(py, self.inner.nbytes(), |buf| {
            copied = py.detach(|| self.inner.copy_to_host(buf));
            Ok(())
        })?;
        copied?;
        let np = py.import("numpy")?;
        let flat = np.getattr("frombuffer")?.call1((host, numpy_dtype(py, self.inner.dtype())?))?;
        Ok(flat.call_method1("reshape", (PyTuple::new(py, self.inner.shape())?,))?)
    }

    #[getter]
    fn shape<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, self.inner.shape())
    }
    #[getter]
    fn strides<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, self.inner.as_view().strides())
    }
    #[getter]
    fn dtype<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        numpy_dtype(py, self.inner.dtype())
    }
    #[getter]
    fn size(&self) -> usize {
        self.inner.size()
    }
    #[getter]
    fn nbytes(&self) -> usize {
        self.inner.nbytes()
    }
    #[getter]
    fn ndim(&self) -> usize {
        self.inner.shape().len()
    }
    #[getter]
    fn ptr(&self) -> u64 {
        self.inner.ptr()
    }
    #[getter]
    fn device(&self) -> usize {
        self.inner.context().ordinal()
    }
    /// The stream the array lives on (its CAI `stream` value).
    #[getter]
    fn stream(&self) -> u64 {
        self.inner.stream().handle()
    }
    #[getter]
    fn __cuda_array_interface__<'py>(&self, py: Python<'py>) -> PyCaiResult<Bound<'py, PyDict>> {
        self.inner.check_usable_here()?;
        Ok(descriptor_to_dict(py, &self.inner.descriptor())?)
    }
    /// DLPack export: a capsule (`dltensor_versioned` when `max_version` allows 1.x, else
    /// `dltensor`); the consumer's `stream` is made to wait for the array's pending work
    /// first (`-1`: no ordering; `None`: the legacy default stream).
    #[pyo3(signature = (*, stream = None, max_version = None, dl_device = None, copy = None))]
    fn __dlpack__<'py>(
        slf: &Bound<'py, Self>,
        stream: Option<&Bound<'py, PyAny>>,
        max_version: Option<&Bound<'py, PyAny>>,
        dl_device: Option<&Bound<'py, PyAny>>,
        copy: Option<bool>,
    ) -> PyResult<Bound<'py, PyAny>> {
        if let Some(requested) = dl_device.filter(|d| !d.is_none()) {
            let here = (2, slf.get().inner.context().ordinal());
            if requested.extract::<(i32, usize)>().ok() != Some(here) {
                return Err(pyo3::exceptions::PyBufferError::new_err(format!(
                    "caijit arrays export on their own device {here:?} (kDLCUDA, ordinal) without copying; dl_device={requested} asks for another"
                )));
            }
        }
        if copy == Some(true) {
            return Err(pyo3::exceptions::PyBufferError::new_err("caijit arrays export without copying"));
        }
        // A consumer that names DLPack 1.x gets a versioned capsule; anything else (no
        // max_version, an older one, one that is not a pair of ints) the legacy capsule.
        let major = max_version.and_then(|v| v.get_item(0).ok()?.extract::<u32>().ok());
        let versioned = major.is_some_and(|m| m >= 1);
        Ok(crate::dlpack::export(slf.py(), &slf.get().inner, slf.clone().into_any().unbind(), stream, versioned)?)
    }

    /// `(kDLCUDA, device ordinal)`.
    fn __dlpack_device__(&self) -> (i32, i32) {
        let d = cai_runtime::python::dlpack::cuda_device(self.inner.context().ordinal());
        (d.device_type, d.device_id)
    }

    fn __len__(&self) -> PyResult<usize> {
        self.inner.shape().first().copied().ok_or_else(|| pyo3::exceptions::PyTypeError::new_err("len() of a 0-d array"))
    }
    fn __repr__(&self) -> String {
        format!("caijit.DeviceArray(shape={:?}, dtype={}, device={})", self.inner.shape(), self.inner.dtype(), self.device())
    }
}
