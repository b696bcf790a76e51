//! CuPy arrays, read through their attributes instead of building a CAI dict: the same
//! facts CuPy's `__cuda_array_interface__` would hold, with CuPy's current stream.

use cai_runtime::cai::{exported_ptr, ArrayView};
use pyo3::intern;
use pyo3::prelude::*;
use smallvec::{smallvec, SmallVec};

use super::arg::PyArg;
use super::context::ArgContext;
use super::producer::{Framework, Producer};
use super::read::{ints, numpy_dtype_of, object_device};
use crate::errors::PyCaiResult;
use crate::timing::Phase;

pub static PRODUCER: Producer =
    Producer { name: "cupy", is_type, view, phase: Phase::ArgCupy, framework: Framework::Cupy, refuse: None, declines: None };

/// Whether a type (from its MRO) is CuPy's ndarray: `cupy.ndarray` or its Cython base,
/// under whichever `cupy.*` module a CuPy version defines it (`cupy._core.core` up to
/// 14.x). A CuPy array that missed this rule would take the generic path, which builds
/// and parses a CAI dict per array (several times the cost of these reads).
fn is_type(qualified_name: &str) -> bool {
    let Some((module, name)) = qualified_name.rsplit_once('.') else { return false };
    (module == "cupy" || module.starts_with("cupy.")) && matches!(name, "ndarray" | "_ndarray_base")
}

/// `exact`: `obj`'s type is CuPy's own, whose `ndim`, `size` and `shape` are its C fields
/// (a Python subclass may override them, so its shape is read as CuPy's interface reads it).
fn view(_index: usize, obj: &Bound<'_, PyAny>, exact: bool, ctx: &mut ArgContext) -> PyCaiResult<Option<PyArg>> {
    let py = obj.py();
    let Some(dtype) = numpy_dtype_of(obj)? else { return Ok(None) };
    // Attributes that cannot be read as CuPy's own are left to the generic path, which reads
    // the object's interface and reports what is wrong with it.
    let Ok((ptr, shape, strides, data)) = read(obj, exact) else { return Ok(None) };
    let stream = Some(ctx.cupy_stream(py)?);
    // The memory's device, from its pointer object (`a.device` would build a Device).
    let device = object_device(|| match data.getattr(intern!(py, "device_id")) {
        Ok(id) => Ok(id.extract()?),
        Err(_) => Ok(obj.getattr(intern!(py, "device"))?.getattr(intern!(py, "id"))?.extract()?),
    })?;
    Ok(Some(PyArg::ArrayOn(ArrayView::new(ptr, &shape, strides.as_deref(), dtype, false, stream)?, device)))
}

type Layout<'py> = (u64, SmallVec<[usize; 4]>, Option<SmallVec<[i64; 4]>>, Bound<'py, PyAny>);

/// Pointer, shape, strides (`None`: C-contiguous) and the memory pointer object, as CuPy's
/// interface gives them.
fn read<'py>(obj: &Bound<'py, PyAny>, exact: bool) -> PyResult<Layout<'py>> {
    let py = obj.py();
    let data = obj.getattr(intern!(py, "data"))?;
    let ptr: u64 = data.getattr(intern!(py, "ptr"))?.extract()?;
    // A 1-D array's shape is its size: two C fields, where `shape` builds a tuple.
    let one_d = exact && obj.getattr(intern!(py, "ndim"))?.extract::<usize>()? == 1;
    let shape = match one_d {
        true => smallvec![obj.getattr(intern!(py, "size"))?.extract::<usize>()?],
        false => ints::<usize>(&obj.getattr(intern!(py, "shape"))?)?,
    };
    // CuPy exports an empty array's pointer as 0 (a view of no elements may point anywhere).
    let ptr = exported_ptr(ptr, &shape);
    // A C-contiguous array's strides follow from its shape (CuPy's own CAI exports
    // `strides: None` then); its flag is a C field, cheaper than the strides tuple.
    // A CuPy without the (private) flag gives its strides.
    let c_contiguous = obj.getattr(intern!(py, "_c_contiguous")).and_then(|f| f.extract::<bool>()).unwrap_or(false);
    let strides = if c_contiguous { None } else { Some(ints::<i64>(&obj.getattr(intern!(py, "strides"))?)?) };
    Ok((ptr, shape, strides, data))
}
