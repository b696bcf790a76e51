//! DLPack's Python side: asking a producer for its device and capsule, and exporting
//! caijit arrays as capsules (`DeviceArray.__dlpack__`). The rules (devices, the view of a
//! tensor, the stream handshake both ways) are the runtime's (`cai_runtime::python::dlpack`).

use cai_runtime::array::DeviceArray as RtArray;
use cai_runtime::cai::{ArrayView, DType, TypestrOptions};
use cai_runtime::python::descriptor_from_object;
use cai_runtime::python::dlpack::{self as dl, ConsumerStream, DLDevice};
use cai_runtime::runtime::StreamOwner;
use pyo3::exceptions::PyTypeError;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::errors::{PyCaiError, PyCaiResult};
use crate::pyobj::type_name;

/// `obj.__dlpack_device__()` as `(type, id)`; `None` without one. What is not a pair of
/// ints is an [`PyCaiError::argument`] saying what it was (the producer's own exceptions
/// pass unchanged).
pub fn dlpack_device(obj: &Bound<'_, PyAny>) -> PyCaiResult<Option<(i32, i32)>> {
    let py = obj.py();
    if !obj.hasattr(intern!(py, "__dlpack__"))? || !obj.hasattr(intern!(py, "__dlpack_device__"))? {
        return Ok(None);
    }
    let dev = obj.call_method0(intern!(py, "__dlpack_device__"))?;
    let pair = || -> PyResult<(i32, i32)> {
        if dev.len()? != 2 {
            return Err(PyTypeError::new_err(""));
        }
        Ok((dev.get_item(0)?.extract()?, dev.get_item(1)?.extract()?))
    };
    match pair() {
        Ok(pair) => Ok(Some(pair)),
        Err(_) => {
            let got = dev.repr().map(|r| r.to_string()).unwrap_or_else(|_| format!("a {}", type_name(&dev)));
            Err(PyCaiError::argument(format!("its __dlpack_device__() returned {got}, not a (device type, device id) pair of ints")))
        }
    }
}

/// `obj.__dlpack__(stream=stream, max_version=(1, 3), copy=False)` (caijit works on the
/// producer's memory, never on a copy); a producer predating DLPack 1.0 (its `TypeError`
/// names `max_version` or `copy`) is asked again with the stream alone. Any other
/// exception, a `TypeError` of the producer's own included, passes unchanged after one call.
pub fn call_dlpack<'py>(obj: &Bound<'py, PyAny>, stream: i64) -> PyResult<Bound<'py, PyAny>> {
    let py = obj.py();
    let kwargs = PyDict::new(py);
    kwargs.set_item(intern!(py, "stream"), stream)?;
    kwargs.set_item(intern!(py, "max_version"), (dl::VERSION.major, dl::VERSION.minor))?;
    kwargs.set_item(intern!(py, "copy"), false)?;
    match obj.call_method(intern!(py, "__dlpack__"), (), Some(&kwargs)) {
        Ok(c) => Ok(c),
        Err(e)
            if e.is_instance_of::<PyTypeError>(py) && {
                let text = e.value(py).to_string();
                text.contains("max_version") || text.contains("copy")
            } =>
        {
            let kwargs = PyDict::new(py);
            kwargs.set_item(intern!(py, "stream"), stream)?;
            obj.call_method(intern!(py, "__dlpack__"), (), Some(&kwargs))
        }
        Err(e) => Err(e),
    }
}

/// `DeviceArray.__dlpack__`: a capsule of a caijit array (`array`, whose Python object
/// `holder` the capsule keeps alive; versioned when the consumer's `max_version` allows
/// 1.x), after making the consumer's stream wait for the array's pending work (`-1`: no
/// ordering; `None`: the legacy default stream). When the consumer releases the tensor,
/// the array's stream waits for the consumer's, so the array is not freed under the
/// consumer's last use of it (see [`ConsumerStream`] for how the consumer's stream is
/// still named then). The ordering uses the array's own stream: the export opt-outs change
/// what the CAI tells other libraries, never caijit's ordering.
pub fn export<'py>(
    py: Python<'py>,
    array: &RtArray,
    holder: Py<PyAny>,
    stream: Option<&Bound<'py, PyAny>>,
    versioned: bool,
) -> PyCaiResult<Bound<'py, PyAny>> {
    array.check_usable_here()?;
    let consumer = match stream {
        Some(s) if !s.is_none() => Some(s.extract().map_err(|_| PyCaiError::argument("__dlpack__(stream=...) must be an int or None"))?),
        _ => None,
    };
    let consumer = dl::consumer_stream_value(consumer)?;
    let ordered = dl::order_export(array.context(), array.stream(), consumer)?;
    let t = dl::tensor_of(array.as_view(), dl::cuda_device(array.context().ordinal()), false);
    let consumer = match consumer.filter(|_| ordered) {
        Some(handle) => {
            // (The default streams have no owner to keep.)
            let owner = if handle > 2 { consumer_stream_object(py, handle) } else { None };
            Some(ConsumerStream::of(handle, owner.map(|o| Box::new(o) as StreamOwner))?)
        }
        None => None,
    };
    let (ctx, own) = (array.context().clone(), array.stream().clone());
    let on_release = Box::new(move |used: bool| {
        if let Some(consumer) = consumer.filter(|_| used) {
            // A deleter cannot raise; a dead context orders nothing anyway.
            let _ = consumer.order_after(&ctx, &own);
        }
        drop(holder);
    });
    Ok(dl::export_capsule(py, t, versioned, on_release)?)
}

/// The stream object of a consumer library (CuPy's or PyTorch's current stream, the stream
/// their `from_dlpack` passes) whose handle is `handle`, when it owns the stream (not an
/// external stream wrapper); `None` otherwise. Libraries not yet imported, or PyTorch with
/// CUDA not initialised, are not asked.
fn consumer_stream_object(py: Python<'_>, handle: u64) -> Option<Py<PyAny>> {
    let modules = py.import("sys").ok()?.getattr("modules").ok()?;
    let owns = |s: &Bound<'_, PyAny>, attr: &str| -> bool {
        s.getattr(attr).and_then(|h| h.extract::<u64>()).ok() == Some(handle) && !type_name(s).contains("External")
    };
    if let Ok(cupy) = modules.get_item("cupy") {
        if let Ok(s) = cupy.getattr("cuda").and_then(|c| c.call_method0("get_current_stream")) {
            if owns(&s, "ptr") {
                return Some(s.unbind());
            }
        }
    }
    if let Ok(cuda) = modules.get_item("torch").and_then(|t| t.getattr("cuda")) {
        if cuda.call_method0("is_initialized").and_then(|b| b.is_truthy()).unwrap_or(false) {
            if let Ok(s) = cuda.call_method0("current_stream") {
                if owns(&s, "cuda_stream") {
                    return Some(s.unbind());
                }
            }
        }
    }
    None
}

/// Test support: the facts of an unconsumed DLPack capsule, as a dict (`data`, `device`,
/// `dtype` as `(code, bits, lanes)`, `shape`, `strides` in elements or `None`, `readonly`).
#[pyfunction]
pub fn _dlpack_read<'py>(capsule: &Bound<'py, PyAny>) -> PyCaiResult<Bound<'py, PyDict>> {
    let py = capsule.py();
    let t = dl::read_capsule(capsule).map_err(PyCaiError::argument)?;
    let d = PyDict::new(py);
    d.set_item("data", t.data)?;
    d.set_item("device", (t.device.device_type, t.device.device_id))?;
    d.set_item("dtype", (t.dtype.code, t.dtype.bits, t.dtype.lanes))?;
    d.set_item("shape", t.shape.to_vec())?;
    d.set_item("strides", t.strides.map(|s| s.to_vec()))?;
    d.set_item("readonly", t.readonly)?;
    d.set_item("caijit_dtype", DType::from_dlpack(t.dtype.code, t.dtype.bits, t.dtype.lanes).map(|d| d.typestr().to_string()))?;
    Ok(d)
}

/// Test support: consume a capsule as a DLPack consumer would (rename it, call its
/// deleter); returns whether it was an unconsumed DLPack capsule.
#[pyfunction]
pub fn _dlpack_consume(capsule: &Bound<'_, PyAny>) -> PyResult<bool> {
    dl::consume_capsule(capsule)
}

/// Test support: `[(struct, size, align, [offsets])]` of the DLPack structs as compiled.
#[pyfunction]
pub fn _dlpack_layouts() -> Vec<(&'static str, usize, usize, Vec<usize>)> {
    dl::layouts()
}

/// Test support: export host memory (a NumPy array's, kept alive by the capsule) as a
/// `kDLCPU` capsule through the same code as `DeviceArray.__dlpack__`, so that NumPy can
/// consume it on a machine without a GPU. `released` gets one `True` (a consumer took the
/// tensor and released it) or `False` (the capsule died unconsumed).
#[pyfunction]
pub fn _dlpack_export_host<'py>(
    array: &Bound<'py, PyAny>,
    versioned: bool,
    released: &Bound<'py, pyo3::types::PyList>,
) -> PyCaiResult<Bound<'py, PyAny>> {
    let py = array.py();
    // NumPy's __array_interface__ has the CAI's keys (and no stream).
    let desc = descriptor_from_object(&array.getattr("__array_interface__")?)?;
    let view = ArrayView::from_descriptor(&desc, TypestrOptions::default())?;
    let t = dl::tensor_of(&view, DLDevice { device_type: dl::KDL_CPU, device_id: 0 }, view.readonly());
    let (keep, log) = (array.clone().unbind(), released.clone().unbind());
    let on_release = Box::new(move |used: bool| {
        Python::attach(|py| {
            let _ = log.bind(py).append(used);
            drop(keep);
        })
    });
    Ok(dl::export_capsule(py, t, versioned, on_release)?)
}
