//! CuPy arrays, read through their attributes instead of building a CAI dict: the same
//! facts CuPy's `__cuda_array_interface__` would hold, with CuPy's current stream.

use cai_runtime::cai::{ArrayView, StreamRef};
use pyo3::intern;
use pyo3::prelude::*;
use smallvec::smallvec;

use super::{ints, numpy_dtype_of, object_device, ArgContext, PyArg};
use crate::errors::PyCaiResult;

/// Whether a type (from its MRO) is CuPy's ndarray: `cupy.ndarray` or its Cython base,
/// under whichever `cupy.*` module a CuPy version defines it (`cupy._core.core` up to
/// 14.x). A CuPy array that missed this rule would take the generic path, which builds
/// and parses a CAI dict per array (several times the cost of these reads).
pub fn is_type(qualified_name: &str) -> bool {
    let Some((module, name)) = qualified_name.rsplit_once('.') else { return false };
    (module == "cupy" || module.starts_with("cupy.")) && matches!(name, "ndarray" | "_ndarray_base")
}

pub fn view(obj: &Bound<'_, PyAny>, ctx: &mut ArgContext) -> PyCaiResult<Option<PyArg>> {
    let py = obj.py();
    let Some(dtype) = numpy_dtype_of(obj)? else { return Ok(None) };
    let data = obj.getattr(intern!(py, "data"))?;
    let ptr: u64 = data.getattr(intern!(py, "ptr"))?.extract()?;
    // A 1-D array's shape is its size: two C fields, where `shape` builds a tuple.
    let shape = match obj.getattr(intern!(py, "ndim"))?.extract::<usize>()? {
        1 => smallvec![obj.getattr(intern!(py, "size"))?.extract::<usize>()?],
        _ => ints::<usize>(&obj.getattr(intern!(py, "shape"))?)?,
    };
    // A C-contiguous array's strides follow from its shape (CuPy's own CAI exports
    // `strides: None` then); its flag is a C field, cheaper than the strides tuple.
    // A CuPy without the (private) flag gives its strides.
    let c_contiguous = obj.getattr(intern!(py, "_c_contiguous")).and_then(|f| f.extract::<bool>()).unwrap_or(false);
    let strides = if c_contiguous { None } else { Some(ints::<i64>(&obj.getattr(intern!(py, "strides"))?)?) };
    let stream = ctx.cupy_stream(py)?.map(StreamRef::from_cai).transpose()?;
    // The memory's device, from its pointer object (`a.device` would build a Device).
    let device = object_device(|| match data.getattr(intern!(py, "device_id")) {
        Ok(id) => Ok(id.extract()?),
        Err(_) => Ok(obj.getattr(intern!(py, "device"))?.getattr(intern!(py, "id"))?.extract()?),
    })?;
    Ok(Some(PyArg::ArrayOn(ArrayView::new(ptr, &shape, strides.as_deref(), dtype, false, stream)?, device)))
}
