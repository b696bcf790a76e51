//! Numba device arrays (numba-cuda's `DeviceNDArrayBase`), read through the attributes
//! their `__cuda_array_interface__` property reads, without building and parsing the dict
//! (Numba's property alone costs about 1 µs per array; `python/benchmarks/bench_launch.py`,
//! "caijit, Numba arrays", measures the launch): `device_ctypes_pointer`,
//! `shape`, `strides` (`None`, C order, where Numba's own `is_contiguous` says so, except
//! for broadcast axes, whose zero strides are kept),
//! `dtype`, and `stream` (`0`: none). Readonly never; the device from the pointer, as for
//! the generic path, except on a single-GPU machine.

use cai_runtime::cai::{ArrayView, StreamRef};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::PyInt;

use super::arg::PyArg;
use super::context::ArgContext;
use super::producer::{Framework, Producer};
use super::read::{ints, numpy_dtype_of};
use crate::errors::PyCaiResult;
use crate::timing::Phase;

pub static PRODUCER: Producer =
    Producer { name: "numba", is_type, view, phase: Phase::ArgNumba, framework: Framework::Other, refuse: None, declines: None };

/// Whether a type (from its MRO) is Numba's device array base, in numba-cuda's
/// `numba.cuda.cudadrv.devicearray` (or an older Numba's module of that name).
fn is_type(qualified_name: &str) -> bool {
    qualified_name
        .rsplit_once('.')
        .is_some_and(|(module, name)| name == "DeviceNDArrayBase" && module.starts_with("numba") && module.ends_with("cudadrv.devicearray"))
}

/// Numba's `is_contiguous`: C order, ignoring extents of 1 and zero strides.
fn numba_contiguous(shape: &[usize], strides: &[i64], itemsize: usize) -> bool {
    let mut size = itemsize as i64;
    for (&n, &s) in shape.iter().zip(strides).rev() {
        if n > 1 && s != 0 {
            if s != size {
                return false;
            }
            size = size.saturating_mul(n as i64);
        }
    }
    true
}

/// The array's device address, as Numba's own interface reads it: the `value` of its
/// `device_ctypes_pointer` (a ctypes pointer; `None` for null). `None` when that is not
/// how this object gives its pointer (or reading it raised): the generic path then reads
/// the object's interface, and reports what is wrong with it.
fn pointer_of(obj: &Bound<'_, PyAny>) -> Option<u64> {
    let py = obj.py();
    let value = obj.getattr(intern!(py, "device_ctypes_pointer")).ok()?.getattr(intern!(py, "value")).ok()?;
    Some(value.extract::<Option<u64>>().ok()?.unwrap_or(0))
}

fn view(_index: usize, obj: &Bound<'_, PyAny>, _exact: bool, _ctx: &mut ArgContext) -> PyCaiResult<Option<PyArg>> {
    let py = obj.py();
    let Some(dtype) = numpy_dtype_of(obj)? else { return Ok(None) };
    let Some(ptr) = pointer_of(obj) else { return Ok(None) };
    let shape = ints::<usize>(&obj.getattr(intern!(py, "shape"))?)?;
    let strides = ints::<i64>(&obj.getattr(intern!(py, "strides"))?)?;
    // A broadcast axis (stride 0, extent > 1) keeps its strides: Numba's own dict calls such
    // an array contiguous, which would make a kernel read past its memory.
    let broadcast = shape.iter().zip(&strides).any(|(&n, &s)| n > 1 && s == 0);
    let strides = if !broadcast && numba_contiguous(&shape, &strides, dtype.itemsize()) { None } else { Some(strides) };
    let stream = obj.getattr(intern!(py, "stream"))?;
    let stream = match stream.cast::<PyInt>() {
        Ok(i) if i.extract::<u64>().is_ok_and(|v| v == 0) => None,
        Ok(i) => Some(i.extract::<u64>()?),
        Err(_) => Some(stream.call_method0(intern!(py, "__int__"))?.extract::<u64>()?),
    };
    let stream = stream.map(StreamRef::from_cai).transpose()?;
    let view = ArrayView::new(ptr, &shape, strides.as_deref(), dtype, false, stream)?;
    Ok(Some(match cai_runtime::runtime::sole_device() {
        Some(d) => PyArg::ArrayOn(view, d),
        None => PyArg::Array(view),
    }))
}
