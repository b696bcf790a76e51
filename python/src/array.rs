//! `caijit.DeviceArray` and turning Python objects into launch arguments.

use std::cell::RefCell;
use std::sync::Arc;

use cai_runtime::array::DeviceArray as RtArray;
use cai_runtime::cai::{ArrayView, DType, StreamRef, TypestrOptions};
use cai_runtime::launch::{Arg, Num};
use cai_runtime::runtime::{Context, Stream as RtStream};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBool, PyBytes, PyComplex, PyDict, PyFloat, PyInt, PyString, PyTuple};
use smallvec::SmallVec;

use crate::errors::{PyCaiError, PyCaiResult};
use crate::interface::{descriptor_to_dict, interface_dict, numpy_dtype, view_from_dict, Interface};
use crate::stream::stream_from_py;
use cai_runtime::python::FromPyError;

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
        let repr = obj.repr().map(|r| r.to_string()).unwrap_or_else(|_| type_name(obj));
        let repr = match repr.char_indices().nth(80) {
            Some((end, _)) => format!("{}…", &repr[..end]),
            None => repr,
        };
        PyCaiError::argument(format!("shape must be an int or a tuple of non-negative ints, got {repr}"))
    };
    let extent = |item: &Bound<'_, PyAny>| -> PyCaiResult<usize> {
        if item.is_instance_of::<PyBool>() || item.is_instance_of::<PyFloat>() || !item.get_type().hasattr("__index__")? {
            return Err(bad());
        }
        let index = item.py().import("operator")?.getattr("index")?.call1((item,)).map_err(|_| bad())?;
        index.extract::<usize>().map_err(|_| bad())
    };
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
        let b = py.detach(|| self.inner.to_bytes())?;
        let np = py.import("numpy")?;
        let flat = np.getattr("frombuffer")?.call1((PyBytes::new(py, &b), numpy_dtype(py, self.inner.dtype())?))?;
        // frombuffer over bytes is readonly; hand out a writable array like CuPy's .get().
        let arr = flat.call_method1("reshape", (PyTuple::new(py, self.inner.shape())?,))?.call_method0("copy")?;
        Ok(arr)
    }

    #[getter]
    fn shape<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, self.inner.shape())
    }
    #[getter]
    fn strides<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, self.inner.view().strides())
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
    /// DLPack export: a `dltensor` capsule; the consumer's `stream` is made to wait for the
    /// array's pending work first (`-1`: no ordering; `None`: the legacy default stream).
    #[pyo3(signature = (*, stream = None, max_version = None, dl_device = None, copy = None))]
    fn __dlpack__<'py>(
        slf: &Bound<'py, Self>,
        stream: Option<&Bound<'py, PyAny>>,
        max_version: Option<&Bound<'py, PyAny>>,
        dl_device: Option<&Bound<'py, PyAny>>,
        copy: Option<bool>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let _ = (max_version, dl_device);
        if copy == Some(true) {
            return Err(pyo3::exceptions::PyBufferError::new_err("caijit arrays export without copying"));
        }
        let py = slf.py();
        slf.get().inner.check_usable_here().map_err(PyCaiError::from)?;
        let device = slf.get().inner.context().ordinal();
        py.import("caijit._dlpack")?.getattr("export")?.call1((slf, device, stream))
    }

    /// `(kDLCUDA, device ordinal)`.
    fn __dlpack_device__(&self) -> (i32, usize) {
        (2, self.inner.context().ordinal())
    }

    fn __len__(&self) -> PyResult<usize> {
        self.inner.shape().first().copied().ok_or_else(|| pyo3::exceptions::PyTypeError::new_err("len() of a 0-d array"))
    }
    fn __repr__(&self) -> String {
        format!("caijit.DeviceArray(shape={:?}, dtype={}, device={})", self.inner.shape(), self.inner.dtype(), self.device())
    }
}

/// A launch argument converted from Python, holding what must stay alive until the launch.
pub enum PyArg {
    Array(ArrayView),
    /// An array imported by DLPack, with the capsule holder that keeps it alive (released
    /// by [`release_after`] once the work that reads it has finished).
    Dlpack(ArrayView, Py<PyAny>),
    /// An array whose device is known without asking the driver.
    ArrayOn(ArrayView, usize),
    Scalar(Num, Option<DType>),
    Bytes(Vec<u8>),
}

impl PyArg {
    /// The array's view; `None` for a scalar or struct bytes.
    pub fn view(&self) -> Option<&ArrayView> {
        match self {
            PyArg::Array(v) | PyArg::Dlpack(v, _) | PyArg::ArrayOn(v, _) => Some(v),
            PyArg::Scalar(..) | PyArg::Bytes(_) => None,
        }
    }

    pub fn as_arg(&self) -> Arg<'_> {
        match self {
            PyArg::Array(v) | PyArg::Dlpack(v, _) => Arg::Array(v),
            PyArg::ArrayOn(v, d) => Arg::ArrayOn(v, *d),
            PyArg::Scalar(value, dtype) => Arg::Scalar { value: *value, dtype: *dtype },
            PyArg::Bytes(b) => Arg::Bytes(b),
        }
    }
}

/// Hand the DLPack capsules among `args` to `ctx`, to be released once the work enqueued
/// so far on `stream` (a CAI value) has finished: a capsule's deleter gives the memory back
/// to its producer (PyTorch's caching allocator, say), which must not reuse it while the
/// kernel still reads it. Other arguments are dropped now.
pub fn release_after(ctx: &Context, stream: u64, args: impl IntoIterator<Item = PyArg>) -> PyCaiResult<()> {
    let mut result: cai_runtime::Result<()> = Ok(());
    for a in args {
        if let PyArg::Dlpack(_, holder) = a {
            // (a failure waits for the stream before it drops the capsule: see release_after)
            result = result.and(ctx.release_after(stream, Box::new(holder)));
        }
    }
    Ok(result?)
}

fn type_name(obj: &Bound<'_, PyAny>) -> String {
    let t = obj.get_type();
    let module = t.module().map(|m| m.to_string()).unwrap_or_default();
    let name = t.name().map(|n| n.to_string()).unwrap_or_default();
    if module.is_empty() || module == "builtins" {
        name
    } else {
        format!("{module}.{name}")
    }
}

/// Array types read through their attributes instead of building a CAI dict: the same
/// facts the dict would hold, at a fraction of the cost (docs/benchmarks.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Known {
    CupyArray,
    TorchTensor,
    Other,
}

/// A CuPy array or a PyTorch tensor, subclasses included (a subclass's work is on the same
/// current stream as its base's), found once per type from the type's MRO.
fn classify(obj: &Bound<'_, PyAny>) -> Known {
    let ty = obj.get_type();
    remember(&SEEN_TYPES, ty.as_any(), || {
        for base in ty.mro().iter() {
            let known = match qualified_name(&base)?.as_str() {
                "cupy.ndarray" | "cupy._core.core.ndarray" => Known::CupyArray,
                "torch.Tensor" => Known::TorchTensor,
                _ => continue,
            };
            return Ok(known);
        }
        Ok(Known::Other)
    })
    .unwrap_or(Known::Other)
}

fn qualified_name(ty: &Bound<'_, PyAny>) -> PyResult<String> {
    let module: String = ty.getattr(intern!(ty.py(), "__module__"))?.extract().unwrap_or_default();
    let name: String = ty.getattr(intern!(ty.py(), "__qualname__"))?.extract()?;
    Ok(format!("{module}.{name}"))
}

thread_local! {
    /// Types seen by `classify`, and dtype objects seen by `cached_dtype`: per thread, so the
    /// launch path takes no lock.
    static SEEN_TYPES: RefCell<Vec<(usize, Known)>> = const { RefCell::new(Vec::new()) };
    static SEEN_DTYPES: RefCell<Vec<(usize, Option<DType>)>> = const { RefCell::new(Vec::new()) };
}

/// Look `key`'s address up in a per-thread table, computing and recording it the first
/// time. Every recorded object is kept alive for the process's life (a leaked strong
/// reference: types and dtype singletons, a handful per process), so no address in a table
/// can be reused by another object.
fn remember<V: Copy>(
    table: &'static std::thread::LocalKey<RefCell<Vec<(usize, V)>>>,
    key: &Bound<'_, PyAny>,
    compute: impl FnOnce() -> PyResult<V>,
) -> PyResult<V> {
    let addr = key.as_ptr() as usize;
    if let Some(v) = table.with_borrow(|t| t.iter().find(|(k, _)| *k == addr).map(|&(_, v)| v)) {
        return Ok(v);
    }
    let v = compute()?;
    std::mem::forget(key.clone().unbind());
    table.with_borrow_mut(|t| t.push((addr, v)));
    Ok(v)
}

/// Per-launch facts shared by all arguments (read at most once per launch).
#[derive(Default)]
pub struct ArgContext {
    cupy_stream: Option<Option<u64>>,
    /// PyTorch's current stream on a device (CAI value), read once per launch.
    torch_stream: Option<(usize, u64)>,
    /// The stream the launch will use when it was given (CAI value); DLPack producers are
    /// asked to order their work before it.
    explicit_stream: Option<u64>,
}

impl ArgContext {
    pub fn new(explicit_stream: Option<u64>) -> Self {
        ArgContext { explicit_stream, ..Default::default() }
    }

    /// The stream DLPack producers order their work before: the launch's explicit stream,
    /// else the legacy default stream. The imported view carries it as its producer stream,
    /// so the stream protocol needs no special case for DLPack.
    pub fn dlpack_stream(&self) -> u64 {
        self.explicit_stream.unwrap_or(1)
    }

    /// The stream CuPy's `__cuda_array_interface__` would export now: its current stream
    /// (the null stream exported as 1, the legacy default stream).
    fn cupy_stream(&mut self, py: Python<'_>) -> PyResult<Option<u64>> {
        static CURRENT: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
        if let Some(s) = self.cupy_stream {
            return Ok(s);
        }
        let f = CURRENT.get_or_try_init(py, || -> PyResult<_> { Ok(py.import("cupy.cuda")?.getattr("get_current_stream")?.unbind()) })?;
        let ptr: u64 = f.bind(py).call0()?.getattr(intern!(py, "ptr"))?.extract()?;
        let s = Some(if ptr == 0 { 1 } else { ptr });
        self.cupy_stream = Some(s);
        Ok(s)
    }
}

impl ArgContext {
    /// PyTorch's current stream on `device`, on which PyTorch enqueues a tensor's work and
    /// frees its memory for reuse (its default stream, handle 0, is the legacy stream: 1).
    /// A tensor carries it as its producer stream, so a launch on another stream gets both
    /// edges: the reverse edge keeps PyTorch's caching allocator from handing a temporary's
    /// memory to new work before the kernel has read it.
    fn torch_stream(&mut self, py: Python<'_>, device: usize) -> PyResult<u64> {
        static CURRENT: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
        if let Some((_, s)) = self.torch_stream.filter(|(d, _)| *d == device) {
            return Ok(s);
        }
        let f = CURRENT.get_or_try_init(py, || -> PyResult<_> {
            Ok(py.import("torch")?.getattr("_C")?.getattr("_cuda_getCurrentRawStream")?.unbind())
        })?;
        let raw: u64 = f.bind(py).call1((device,))?.extract()?;
        let s = if raw == 0 { 1 } else { raw };
        self.torch_stream = Some((device, s));
        Ok(s)
    }
}

/// NumPy and PyTorch dtype objects are singletons: their caijit dtype is looked up by
/// address after the first time (the table holds a reference, so addresses stay unique).
fn cached_dtype(dtype_obj: &Bound<'_, PyAny>, read: impl FnOnce() -> PyResult<Option<DType>>) -> PyResult<Option<DType>> {
    remember(&SEEN_DTYPES, dtype_obj, read)
}

/// A shape or strides tuple (torch.Size included) read item by item, into a buffer on the
/// stack; any other sequence through the generic conversion.
fn ints<T>(obj: &Bound<'_, PyAny>) -> PyResult<SmallVec<[T; 4]>>
where
    T: for<'a, 'py> FromPyObject<'a, 'py, Error = PyErr>,
{
    match obj.cast::<PyTuple>() {
        Ok(t) => t.iter_borrowed().map(|item| item.extract::<T>()).collect(),
        Err(_) => Ok(obj.extract::<Vec<T>>()?.into()),
    }
}

/// The device of a CuPy array or PyTorch tensor: 0 on a single-GPU machine, else asked of
/// the object itself (still cheaper than the driver's pointer query).
fn object_device(obj: &Bound<'_, PyAny>, known: Known) -> PyCaiResult<usize> {
    if cai_runtime::runtime::device_count()? <= 1 {
        return Ok(0);
    }
    Ok(match known {
        Known::CupyArray => obj.getattr(intern!(obj.py(), "device"))?.getattr(intern!(obj.py(), "id"))?.extract()?,
        _ => obj.call_method0(intern!(obj.py(), "get_device"))?.extract()?,
    })
}

fn fast_view(obj: &Bound<'_, PyAny>, ctx: &mut ArgContext) -> PyCaiResult<Option<(ArrayView, usize)>> {
    let py = obj.py();
    let known = classify(obj);
    let view = match known {
        Known::Other => return Ok(None),
        Known::CupyArray => {
            let dtype_obj = obj.getattr(intern!(py, "dtype"))?;
            let dtype = cached_dtype(&dtype_obj, || {
                let typestr: String = dtype_obj.getattr(intern!(py, "str"))?.extract()?;
                Ok(DType::from_typestr(&typestr).ok())
            })?;
            let Some(dtype) = dtype else { return Ok(None) };
            let ptr: u64 = obj.getattr(intern!(py, "data"))?.getattr(intern!(py, "ptr"))?.extract()?;
            let shape = ints::<usize>(&obj.getattr(intern!(py, "shape"))?)?;
            // A C-contiguous array's strides follow from its shape (CuPy's own CAI exports
            // `strides: None` then); its flag is a C field, cheaper than the strides tuple.
            // A CuPy without the (private) flag gives its strides.
            let c_contiguous = obj.getattr(intern!(py, "_c_contiguous")).and_then(|f| f.extract::<bool>()).unwrap_or(false);
            let strides = if c_contiguous { None } else { Some(ints::<i64>(&obj.getattr(intern!(py, "strides"))?)?) };
            let stream = ctx.cupy_stream(obj.py())?.map(StreamRef::from_cai).transpose()?;
            ArrayView::new(ptr, &shape, strides.as_deref(), dtype, false, stream)?
        }
        Known::TorchTensor => {
            // Exactly when torch's own __cuda_array_interface__ would refuse or differ, take
            // the generic path (it raises torch's own error).
            if !obj.getattr(intern!(py, "is_cuda"))?.extract::<bool>()? || obj.getattr(intern!(py, "requires_grad"))?.extract::<bool>()? {
                return Ok(None);
            }
            let dtype_obj = obj.getattr(intern!(py, "dtype"))?;
            let dtype = cached_dtype(&dtype_obj, || {
                let name = dtype_obj.str()?.to_string();
                Ok(DType::from_name(name.trim_start_matches("torch.")))
            })?;
            let Some(dtype) = dtype else { return Ok(None) };
            if matches!(dtype, DType::C64 | DType::C128) && obj.call_method0(intern!(py, "is_conj"))?.extract::<bool>()? {
                return Ok(None);
            }
            let ptr: u64 = obj.call_method0(intern!(py, "data_ptr"))?.extract()?;
            let shape = ints::<usize>(&obj.getattr(intern!(py, "shape"))?)?;
            let item = dtype.itemsize() as i64;
            let mut strides = ints::<i64>(&obj.call_method0(intern!(py, "stride"))?)?;
            for s in &mut strides {
                *s = s.checked_mul(item).ok_or_else(|| PyCaiError::argument(format!("stride {s} of a torch tensor overflows")))?;
            }
            let ptr = if shape.contains(&0) { 0 } else { ptr };
            let device = object_device(obj, known)?;
            let stream = StreamRef::from_cai(ctx.torch_stream(py, device)?)?;
            return Ok(Some((ArrayView::new(ptr, &shape, Some(&strides), dtype, false, Some(stream))?, device)));
        }
    };
    Ok(Some((view, object_device(obj, known)?)))
}

/// Convert argument `index` of a launch.
pub fn arg_from_py(index: usize, obj: &Bound<'_, PyAny>, ctx: &mut ArgContext) -> PyCaiResult<PyArg> {
    // The commonest arguments are recognised by their exact type alone.
    if obj.is_exact_instance_of::<PyInt>() {
        return Ok(PyArg::Scalar(Num::Int(int_value(index, obj)?), None));
    }
    if obj.is_exact_instance_of::<PyFloat>() {
        return Ok(PyArg::Scalar(Num::Float(obj.extract()?), None));
    }
    if let Ok(a) = obj.cast_exact::<DeviceArray>() {
        let inner = &a.get().inner;
        inner.check_usable_here()?;
        return Ok(PyArg::ArrayOn(inner.view(), inner.context().ordinal()));
    }
    if let Some((v, device)) = fast_view(obj, ctx)? {
        return Ok(PyArg::ArrayOn(v, device));
    }
    if let Ok(i) = obj.cast::<Interface>() {
        let i = i.get();
        return Ok(match (&i.dlpack, i.device) {
            // A view of a DLPack capsule: this launch holds the capsule too, until its kernel is done.
            (Some(capsule), _) => PyArg::Dlpack(i.view.clone(), capsule.clone_ref(obj.py())),
            (None, Some(device)) => PyArg::ArrayOn(i.view.clone(), device),
            (None, None) => PyArg::Array(i.view.clone()),
        });
    }
    if let Some(n) = python_number(index, obj)? {
        return Ok(PyArg::Scalar(n, None));
    }
    if let Ok(b) = obj.cast::<PyBytes>() {
        return Ok(PyArg::Bytes(b.as_bytes().to_vec()));
    }
    // Any CAI producer (a plain dict is not an array argument).
    if !obj.is_instance_of::<PyDict>() {
        match interface_dict(obj) {
            Ok(dict) => return Ok(PyArg::Array(view_from_dict(&dict, TypestrOptions::default())?)),
            Err(FromPyError::NoInterface(_)) => {}
            Err(e) => return Err(e.into()),
        }
    }
    // DLPack-only producers (the handshake orders their work before the launch stream).
    if obj.hasattr(intern!(obj.py(), "__dlpack__"))? {
        let dl = obj.py().import("caijit._dlpack")?;
        if dl.getattr("is_cuda_dlpack")?.call1((obj,))?.extract::<bool>()? {
            let holder = dl.getattr("view")?.call1((obj, ctx.dlpack_stream()))?;
            let bf16: bool = holder.getattr("bfloat16")?.extract()?;
            let options = if bf16 { TypestrOptions::BFLOAT16_V2 } else { TypestrOptions::default() };
            let view = view_from_dict(&interface_dict(&holder)?, options)?;
            return Ok(PyArg::Dlpack(view, holder.unbind()));
        }
    }
    if let Some((value, dtype)) = numpy_scalar(index, obj)? {
        return Ok(PyArg::Scalar(value, dtype));
    }
    if obj.hasattr("__array_interface__")? || obj.hasattr("__array__")? || is_cpu_dlpack(obj)? {
        return Err(PyCaiError::argument(format!(
            "argument {index}: a {} is host memory; caijit never copies implicitly (use caijit.to_device, or a GPU array)",
            type_name(obj)
        )));
    }
    Err(PyCaiError::argument(format!(
        "argument {index}: cannot pass a {} to a kernel (expected a CUDA array, a scalar, or bytes for a struct)",
        type_name(obj)
    )))
}

/// A Python number (bool, int, float or complex, subclasses included) as a scalar's value;
/// `None` for anything else.
pub fn python_number(index: usize, obj: &Bound<'_, PyAny>) -> PyCaiResult<Option<Num>> {
    Ok(Some(if obj.is_instance_of::<PyBool>() {
        Num::Bool(obj.extract()?)
    } else if obj.is_instance_of::<PyInt>() {
        Num::Int(int_value(index, obj)?)
    } else if obj.is_instance_of::<PyFloat>() {
        Num::Float(obj.extract()?)
    } else if let Ok(c) = obj.cast::<PyComplex>() {
        Num::Complex(c.real(), c.imag())
    } else {
        return Ok(None);
    }))
}

/// A NumPy scalar (`numpy.float32(1.5)`): its value, and its dtype, which also drives
/// template deduction; `None` for anything else.
pub fn numpy_scalar(index: usize, obj: &Bound<'_, PyAny>) -> PyCaiResult<Option<(Num, Option<DType>)>> {
    if !is_numpy_scalar(obj)? {
        return Ok(None);
    }
    let name: String = obj.getattr("dtype")?.getattr("name")?.extract()?;
    match python_number(index, &obj.call_method0("item")?)? {
        Some(value) => Ok(Some((value, DType::from_name(&name)))),
        None => Err(PyCaiError::argument(format!("argument {index}: unsupported NumPy scalar {name}"))),
    }
}

/// An int's value: through `i64` (one C call), and only beyond that through the limited
/// API's slower 128-bit path.
fn int_value(index: usize, obj: &Bound<'_, PyAny>) -> PyCaiResult<i128> {
    if let Ok(v) = obj.extract::<i64>() {
        return Ok(v.into());
    }
    obj.extract::<i128>().map_err(|_| PyCaiError::argument(format!("argument {index}: integer {obj} does not fit in 128 bits")))
}

/// `numpy.float32(1.5)` and friends (0-d, typed), but not `numpy.ndarray`.
fn is_numpy_scalar(obj: &Bound<'_, PyAny>) -> PyResult<bool> {
    if !type_name(obj).starts_with("numpy.") || obj.get_type().name().is_ok_and(|n| n == "ndarray") {
        return Ok(false);
    }
    Ok(obj.hasattr("dtype")? && obj.hasattr("item")?)
}

fn is_cpu_dlpack(obj: &Bound<'_, PyAny>) -> PyResult<bool> {
    if !obj.hasattr("__dlpack_device__")? {
        return Ok(false);
    }
    let dev = obj.call_method0("__dlpack_device__")?;
    let kind: i32 = dev.get_item(0)?.extract()?;
    Ok(kind == 1 || kind == 3) // kDLCPU, kDLCUDAHost
}

/// The view a launch on `stream` takes of `obj` (fast paths included), with its device when
/// that was learnt, and the DLPack capsule it reads, which the view keeps alive (and hands
/// to the launches it is given to): `caijit.ops` converts each array once and launches with
/// the view.
#[pyfunction]
#[pyo3(signature = (obj, stream = None))]
pub fn launch_view(obj: &Bound<'_, PyAny>, stream: Option<&Bound<'_, PyAny>>) -> PyCaiResult<Interface> {
    let stream = stream.map(stream_from_py).transpose()?.flatten();
    let mut ctx = ArgContext::new(stream.as_deref().map(RtStream::handle));
    let (view, device, dlpack) = match arg_from_py(0, obj, &mut ctx)? {
        PyArg::Array(view) => (view, None, None),
        PyArg::Dlpack(view, capsule) => (view, None, Some(capsule)),
        PyArg::ArrayOn(view, device) => (view, Some(device), None),
        _ => return Err(PyCaiError::argument("not an array")),
    };
    let typestr = view.dtype().typestr().to_string();
    Ok(Interface::from_view(view, typestr, device).holding(dlpack))
}
