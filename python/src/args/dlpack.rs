//! DLPack producers: importing any object's `__dlpack__` capsule for a launch (the stream
//! handshake orders the producer's work before the launch stream), exporting caijit arrays
//! as capsules, and the dtype and view rules shared with the exchange API path.

use cai_runtime::cai::{ArrayView, DType, StreamRef};
use cai_runtime::python::dlpack::{self as dl, DLDataType, DLDevice, ExportTensor, TensorInfo};
use cai_runtime::runtime::Stream as RtStream;
use pyo3::exceptions::PyTypeError;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use super::{type_name, ArgContext, PyArg};
use crate::array::DeviceArray;
use crate::errors::{PyCaiError, PyCaiResult};

/// The caijit dtype of a DLPack dtype (one lane; bfloat16 included); `None` otherwise.
pub fn dtype_of(t: DLDataType) -> Option<DType> {
    if t.lanes != 1 {
        return None;
    }
    Some(match (t.code, t.bits) {
        (0, 8) => DType::I8,
        (0, 16) => DType::I16,
        (0, 32) => DType::I32,
        (0, 64) => DType::I64,
        (1, 8) => DType::U8,
        (1, 16) => DType::U16,
        (1, 32) => DType::U32,
        (1, 64) => DType::U64,
        (2, 16) => DType::F16,
        (2, 32) => DType::F32,
        (2, 64) => DType::F64,
        (4, 16) => DType::BF16,
        (5, 64) => DType::C64,
        (5, 128) => DType::C128,
        (6, 8) => DType::Bool,
        _ => return None,
    })
}

/// The DLPack dtype of a caijit dtype.
pub fn dldtype(d: DType) -> DLDataType {
    let code = match d {
        DType::I8 | DType::I16 | DType::I32 | DType::I64 => 0,
        DType::U8 | DType::U16 | DType::U32 | DType::U64 => 1,
        DType::BF16 => 4,
        DType::C64 | DType::C128 => 5,
        DType::Bool => 6,
        _ => 2,
    };
    DLDataType { code, bits: (d.itemsize() * 8) as u8, lanes: 1 }
}

/// Whether a DLPack device is CUDA device memory caijit can launch on (managed included).
pub fn is_cuda(d: DLDevice) -> bool {
    matches!(d.device_type, dl::KDL_CUDA | dl::KDL_CUDA_MANAGED)
}

/// The view of a DLPack tensor (strides in elements become bytes; an empty tensor's
/// pointer is 0, as CAI writes it), with its producer stream. `Err` says why not.
pub fn view_of(t: &TensorInfo, stream: Option<StreamRef>) -> Result<ArrayView, String> {
    let dtype = dtype_of(t.dtype).ok_or_else(|| {
        format!("DLPack dtype code {} with {} bits and {} lanes is not supported", t.dtype.code, t.dtype.bits, t.dtype.lanes)
    })?;
    // (plain loops: this runs per tensor per launch on the exchange API path)
    let mut shape = smallvec::SmallVec::<[usize; 4]>::new();
    for &n in &t.shape {
        shape.push(usize::try_from(n).map_err(|_| format!("DLPack shape {:?} has a negative extent", t.shape))?);
    }
    let item = dtype.itemsize() as i64;
    let strides = match &t.strides {
        None => None,
        Some(s) => {
            let mut bytes = smallvec::SmallVec::<[i64; 4]>::new();
            for &x in s {
                bytes.push(x.checked_mul(item).ok_or_else(|| format!("DLPack stride {x} overflows in bytes"))?);
            }
            Some(bytes)
        }
    };
    let ptr = if shape.contains(&0) { 0 } else { t.data };
    ArrayView::new(ptr, &shape, strides.as_deref(), dtype, t.readonly, stream).map_err(|e| e.to_string())
}

/// `obj.__dlpack_device__()` as `(type, id)`; `None` without one.
pub fn dlpack_device(obj: &Bound<'_, PyAny>) -> PyResult<Option<(i32, i32)>> {
    let py = obj.py();
    if !obj.hasattr(intern!(py, "__dlpack__"))? || !obj.hasattr(intern!(py, "__dlpack_device__"))? {
        return Ok(None);
    }
    let dev = obj.call_method0(intern!(py, "__dlpack_device__"))?;
    Ok(Some((dev.get_item(0)?.extract()?, dev.get_item(1)?.extract()?)))
}

/// `obj.__dlpack__(stream=stream, max_version=(1, 3), copy=False)` (caijit works on the
/// producer's memory, never on a copy); a producer predating DLPack 1.0 (its `TypeError`
/// names `max_version` or `copy`) is asked again with the stream alone. Any other
/// exception, a `TypeError` of the producer's own included, passes unchanged after one call.
fn call_dlpack<'py>(obj: &Bound<'py, PyAny>, stream: i64) -> PyResult<Bound<'py, PyAny>> {
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

/// Argument `index` by DLPack, when `obj` is a DLPack producer on a CUDA device (`None`
/// otherwise). The producer orders its pending work before the launch's stream, which the
/// view then carries as its producer stream (in a graph capture: neither, see
/// [`ArgContext::dlpack_stream`]); the capsule, left unconsumed, keeps the memory alive
/// until the launch's work is done. The capsule's own device must be the CUDA device
/// `__dlpack_device__` named.
pub fn import(index: usize, obj: &Bound<'_, PyAny>, ctx: &mut ArgContext) -> PyCaiResult<Option<PyArg>> {
    let Some((dev_type, dev_id)) = dlpack_device(obj)? else { return Ok(None) };
    if !is_cuda(DLDevice { device_type: dev_type, device_id: dev_id }) {
        return Ok(None);
    }
    let (ask, carried) = ctx.dlpack_stream()?;
    let capsule = call_dlpack(obj, ask)?;
    let bad = |why: String| PyCaiError::argument(format!("argument {index}: a {} by DLPack: {why}", type_name(obj)));
    let info = dl::read_capsule(&capsule).map_err(bad)?;
    if info.device != (DLDevice { device_type: dev_type, device_id: dev_id }) {
        let host = matches!(info.device.device_type, dl::KDL_CPU | dl::KDL_CUDA_HOST);
        return Err(bad(format!(
            "__dlpack_device__() says ({dev_type}, {dev_id}) but its capsule's tensor is on ({}, {}){}",
            info.device.device_type,
            info.device.device_id,
            if host { ", host memory (caijit never copies implicitly)" } else { "" }
        )));
    }
    let view = view_of(&info, carried.map(StreamRef::from_cai).transpose()?).map_err(bad)?;
    let device = (dev_type == dl::KDL_CUDA).then_some(dev_id as usize);
    Ok(Some(PyArg::Dlpack { view, device, holder: capsule.unbind() }))
}

/// `DeviceArray.__dlpack__`: a capsule of a caijit array (versioned when the consumer's
/// `max_version` allows 1.x), after making the consumer's stream wait for the array's
/// pending work (`-1`: no ordering; `None`: the legacy default stream). When the consumer
/// releases the tensor, the array's stream waits for the consumer's, so the array is not
/// freed under the consumer's last use of it (see [`ConsumerStream`] for how the consumer's
/// stream is still named then). The ordering uses the array's own stream: the export
/// opt-outs change what the CAI tells other libraries, never caijit's ordering.
pub fn export<'py>(slf: &Bound<'py, DeviceArray>, stream: Option<&Bound<'py, PyAny>>, versioned: bool) -> PyCaiResult<Bound<'py, PyAny>> {
    let py = slf.py();
    let inner = &slf.get().inner;
    inner.check_usable_here()?;
    let consumer: i64 = match stream {
        None => 1,
        Some(s) if s.is_none() => 1,
        Some(s) => s.extract().map_err(|_| PyCaiError::argument("__dlpack__(stream=...) must be an int or None"))?,
    };
    if consumer == 0 {
        return Err(PyCaiError::argument("__dlpack__(stream=0) is ambiguous; pass 1 (legacy) or 2 (per-thread)"));
    }
    if consumer < -1 {
        return Err(PyCaiError::argument(format!(
            "__dlpack__(stream={consumer}): a CUDA stream is a handle, 1 (legacy), 2 (per-thread) or -1 (no ordering)"
        )));
    }
    let own = inner.stream().handle();
    let ordered = consumer != -1 && consumer as u64 != own;
    if ordered {
        let waiter = RtStream::borrowed(consumer as u64)?;
        inner.context().order_streams(&waiter, inner.stream())?;
    }
    let view = inner.as_view();
    let item = view.dtype().itemsize() as i64;
    let t = ExportTensor {
        data: view.ptr(),
        device: DLDevice { device_type: dl::KDL_CUDA, device_id: inner.context().ordinal() as i32 },
        dtype: dldtype(view.dtype()),
        shape: view.shape().iter().map(|&n| n as i64).collect(),
        strides: view.strides().iter().map(|&s| s / item).collect(),
        readonly: false,
    };
    let array: Py<DeviceArray> = slf.clone().unbind();
    let consumer = if ordered { Some(ConsumerStream::of(py, consumer as u64)?) } else { None };
    let on_release = Box::new(move |used: bool| {
        if let Some(consumer) = consumer.filter(|_| used) {
            // A deleter cannot raise; a dead context orders nothing anyway.
            let _ = consumer.order_after(&array.get().inner);
        }
        drop(array);
    });
    Ok(dl::export_capsule(py, t, versioned, on_release)?)
}

/// The consumer's stream of a DLPack export, as the release of the tensor names it: the
/// release may come much later, on any thread, after the consumer let go of its stream.
enum ConsumerStream {
    /// The legacy default stream, or a handle with the consumer library's stream object
    /// that owns it (CuPy's or PyTorch's current stream, which a consumer passes): held
    /// from the export to the release, so the handle cannot be destroyed in between.
    Named(RtStream),
    /// The per-thread default stream of the exporting thread: on another thread "2" names
    /// another stream, so a release there waits for the device instead (a counted host
    /// synchronisation, as the free of a per-thread array on another thread does).
    PerThread(std::thread::ThreadId),
}

impl ConsumerStream {
    fn of(py: Python<'_>, handle: u64) -> PyCaiResult<ConsumerStream> {
        Ok(match handle {
            2 => ConsumerStream::PerThread(std::thread::current().id()),
            1 => ConsumerStream::Named(RtStream::legacy()),
            h => match consumer_stream_object(py, h) {
                Some(owner) => ConsumerStream::Named(RtStream::borrowed_from(h, Box::new(owner))?),
                // A handle caijit cannot tie to its owner: the consumer's promise that it
                // outlives the tensor (CuPy's ExternalStream rule).
                None => ConsumerStream::Named(RtStream::borrowed(h)?),
            },
        })
    }

    /// Make the array's stream wait for the work enqueued so far on the consumer's.
    fn order_after(self, array: &cai_runtime::array::DeviceArray) -> cai_runtime::Result<()> {
        match self {
            ConsumerStream::Named(s) => array.context().order_streams(array.stream(), &s),
            ConsumerStream::PerThread(t) if t == std::thread::current().id() => {
                array.context().order_streams(array.stream(), &RtStream::per_thread())
            }
            ConsumerStream::PerThread(_) => array.context().synchronize(),
        }
    }
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
    d.set_item("caijit_dtype", dtype_of(t.dtype).map(|d| d.typestr().to_string()))?;
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
    let view = crate::interface::parse_interface(&array.getattr("__array_interface__")?, false)?.view;
    let item = view.dtype().itemsize() as i64;
    let t = ExportTensor {
        data: view.ptr(),
        device: DLDevice { device_type: dl::KDL_CPU, device_id: 0 },
        dtype: dldtype(view.dtype()),
        shape: view.shape().iter().map(|&n| n as i64).collect(),
        strides: view.strides().iter().map(|&s| s / item).collect(),
        readonly: view.readonly(),
    };
    let (keep, log) = (array.clone().unbind(), released.clone().unbind());
    let on_release = Box::new(move |used: bool| {
        Python::attach(|py| {
            let _ = log.bind(py).append(used);
            drop(keep);
        })
    });
    Ok(dl::export_capsule(py, t, versioned, on_release)?)
}
