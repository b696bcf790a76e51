//! The argument layer: Python objects → launch arguments.
//!
//! Each argument is dispatched by its exact type, looked up once per type and remembered
//! (one table lookup per argument after the first launch). The chain, first match wins:
//!
//! 1. `int`, `float` (exact types) and `caijit.DeviceArray` (its own view and device);
//! 2. the DLPack C exchange API, for types with `__dlpack_c_exchange_api__` ([`exchange`]);
//! 3. known types read through their attributes: CuPy ([`cupy`]), PyTorch ([`torch`]),
//!    Numba ([`numba`]);
//! 4. caijit's `Interface` views, with what they hold: the caijit array they view (whose
//!    rules they follow) or a DLPack import's capsule;
//! 5. Python numbers and `bytes` (struct parameters);
//! 6. any `__cuda_array_interface__` producer (the generic path);
//! 7. any `__dlpack__` producer on a CUDA device ([`dlpack`]);
//! 8. NumPy scalars; then the errors (host memory, or not an argument).
//!
//! A producer fast path is one module here (`view(obj, ctx) -> Option<(view, device)>`)
//! and one line in [`route_of`]; tests compare it with the generic path through
//! `launch_view(obj, path=...)`.

pub mod cupy;
pub mod dlpack;
pub mod exchange;
pub mod numba;
pub mod torch;

use std::cell::RefCell;

use cai_runtime::cai::{ArrayView, DType, TypestrOptions};
use cai_runtime::launch::{Arg, Num};
use cai_runtime::python::capi::IntptrFn;
use cai_runtime::python::dlpack::ExchangeApi;
use cai_runtime::python::FromPyError;
use cai_runtime::runtime::{Context, Stream as RtStream};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBool, PyBytes, PyComplex, PyDict, PyFloat, PyInt, PyTuple, PyType};
use smallvec::SmallVec;

use crate::array::DeviceArray;
use crate::errors::{PyCaiError, PyCaiResult};
use crate::interface::{interface_dict, view_from_dict, Interface, Owner};
use crate::stream::stream_from_py;
use crate::timing::{self, Phase};

/// A launch argument converted from Python, holding what must stay alive until the launch.
pub enum PyArg {
    Array(ArrayView),
    /// An array imported by DLPack, with its device when the capsule named one, and the
    /// capsule that keeps it alive (released by [`release_after`] once the work that reads
    /// it has finished).
    Dlpack {
        view: ArrayView,
        device: Option<usize>,
        holder: Py<PyAny>,
    },
    /// An array whose device is known without asking the driver.
    ArrayOn(ArrayView, usize),
    /// A caijit array: its view is borrowed for the launch (the reference keeps it alive),
    /// never copied.
    Own(Py<DeviceArray>),
    /// A view of a caijit array (an `Interface`), holding the array.
    OwnView(ArrayView, Py<DeviceArray>),
    Scalar(Num, Option<DType>),
    Bytes(Vec<u8>),
}

impl PyArg {
    /// The array's view; `None` for a scalar or struct bytes.
    pub fn view(&self) -> Option<&ArrayView> {
        match self {
            PyArg::Array(v) | PyArg::Dlpack { view: v, .. } | PyArg::ArrayOn(v, _) | PyArg::OwnView(v, _) => Some(v),
            PyArg::Own(a) => Some(a.get().inner.as_view()),
            PyArg::Scalar(..) | PyArg::Bytes(_) => None,
        }
    }

    /// The device of an array argument's memory: the one its conversion learnt, else the
    /// pointer's (asked of the driver only with several devices; the answer is kept, so a
    /// launch does not ask again); `None` for a scalar, struct bytes, or a pointer no device
    /// owns.
    pub fn device(&mut self) -> PyCaiResult<Option<usize>> {
        let asked = match self {
            PyArg::ArrayOn(_, d) | PyArg::Dlpack { device: Some(d), .. } => return Ok(Some(*d)),
            PyArg::Own(a) | PyArg::OwnView(_, a) => return Ok(Some(a.get().inner.context().ordinal())),
            PyArg::Scalar(..) | PyArg::Bytes(_) => return Ok(None),
            _ if cai_runtime::runtime::device_count()? <= 1 => return Ok(Some(0)),
            PyArg::Array(v) | PyArg::Dlpack { view: v, device: None, .. } => cai_runtime::runtime::pointer_device(v.ptr())?,
        };
        match (&mut *self, asked) {
            (PyArg::Array(v), Some(d)) => *self = PyArg::ArrayOn(v.clone(), d),
            (PyArg::Dlpack { device, .. }, Some(d)) => *device = Some(d),
            _ => {}
        }
        Ok(asked)
    }

    pub fn as_arg(&self) -> Arg<'_> {
        match self {
            PyArg::Array(v) | PyArg::Dlpack { view: v, device: None, .. } => Arg::Array(v),
            PyArg::ArrayOn(v, d) | PyArg::Dlpack { view: v, device: Some(d), .. } => Arg::ArrayOn(v, *d),
            PyArg::Own(a) => {
                let inner = &a.get().inner;
                Arg::ArrayOn(inner.as_view(), inner.context().ordinal())
            }
            PyArg::OwnView(v, a) => Arg::ArrayOn(v, a.get().inner.context().ordinal()),
            PyArg::Scalar(value, dtype) => Arg::Scalar { value: *value, dtype: *dtype },
            PyArg::Bytes(b) => Arg::Bytes(b),
        }
    }
}

/// Which device a launch runs on: the device of its first non-empty array, else the
/// stream's, else 0.
pub fn launch_device(args: &mut [PyArg], stream: Option<&RtStream>) -> PyCaiResult<usize> {
    if cai_runtime::runtime::device_count()? <= 1 {
        return Ok(0);
    }
    for a in args {
        if a.view().is_some_and(|v| !v.is_empty()) {
            if let Some(d) = a.device()? {
                return Ok(d);
            }
        }
    }
    match stream {
        Some(s) => Ok(s.device_from_driver()?.unwrap_or(0)),
        None => Ok(0),
    }
}

/// Hand the DLPack capsules among `args` to `ctx`, to be released once the work enqueued
/// so far on `stream` (a CAI value) has finished: a capsule's deleter gives the memory back
/// to its producer (PyTorch's caching allocator, say), which must not reuse it while the
/// kernel still reads it. Other arguments are dropped now.
pub fn release_after(ctx: &Context, stream: u64, args: impl IntoIterator<Item = PyArg>) -> PyCaiResult<()> {
    let mut result: cai_runtime::Result<()> = Ok(());
    for a in args {
        if let PyArg::Dlpack { holder, .. } = a {
            // (a failure waits for the stream before it drops the capsule: see release_after)
            result = result.and(ctx.release_after(stream, Box::new(holder)));
        }
    }
    Ok(result?)
}

pub fn type_name(obj: &Bound<'_, PyAny>) -> String {
    let t = obj.get_type();
    let module = t.module().map(|m| m.to_string()).unwrap_or_default();
    let name = t.name().map(|n| n.to_string()).unwrap_or_default();
    if module.is_empty() || module == "builtins" {
        name
    } else {
        format!("{module}.{name}")
    }
}

/// How arguments of one type are read, decided once per type.
#[derive(Clone, Copy, Debug)]
enum Route {
    /// Through the type's DLPack exchange API (`torch`: a PyTorch tensor type).
    Exchange {
        api: ExchangeApi,
        torch: bool,
    },
    /// CuPy's ndarray; `exact` when the type is CuPy's own (not a Python subclass, which
    /// may override the attributes CuPy's interface reads).
    Cupy {
        exact: bool,
    },
    Torch,
    Numba,
    Other,
}

/// Which paths a conversion may take: all (a launch), or one forced for tests that
/// compare a fast path with the generic one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Path {
    #[default]
    Auto,
    /// Only the exchange API (else the generic paths).
    Exchange,
    /// Only the attribute-reading fast path of a known type (else the generic paths).
    Known,
    /// Neither: `__cuda_array_interface__`, then `__dlpack__`.
    Generic,
    /// `__dlpack__` only.
    Dlpack,
}

impl Path {
    fn parse(s: Option<&str>) -> PyCaiResult<Path> {
        Ok(match s {
            None | Some("auto") => Path::Auto,
            Some("exchange") => Path::Exchange,
            Some("known") => Path::Known,
            Some("generic") | Some("cai") => Path::Generic,
            Some("dlpack") => Path::Dlpack,
            Some(other) => return Err(PyCaiError::argument(format!("no conversion path {other:?}"))),
        })
    }
}

/// Whether the exchange API is used (`CAIJIT_DLPACK_EXCHANGE=0` turns it off, read once).
fn exchange_enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("CAIJIT_DLPACK_EXCHANGE").map_or(true, |v| v != "0"))
}

/// The route of a type: its exchange API when it has a usable one, else a known type by
/// its MRO (subclasses included: a subclass's work is on its base's current stream).
fn route_of(ty: &Bound<'_, PyType>) -> Route {
    remember(&ROUTES, ty.as_any(), || {
        let mut torch_type = false;
        let mut known = Route::Other;
        for base in ty.mro().iter() {
            let name = qualified_name(&base)?;
            if cupy::is_type(&name) {
                known = Route::Cupy { exact: base.is(ty) };
                break;
            }
            if torch::is_type(&name) {
                torch_type = true;
                known = Route::Torch;
                break;
            }
            if numba::is_type(&name) {
                known = Route::Numba;
                break;
            }
        }
        if exchange_enabled() {
            if let Ok(Some(api)) = ExchangeApi::of_type(ty) {
                return Ok(Route::Exchange { api, torch: torch_type });
            }
        }
        Ok(known)
    })
    .unwrap_or(Route::Other)
}

fn qualified_name(ty: &Bound<'_, PyAny>) -> PyResult<String> {
    let module: String = ty.getattr(intern!(ty.py(), "__module__"))?.extract().unwrap_or_default();
    let name: String = ty.getattr(intern!(ty.py(), "__qualname__"))?.extract()?;
    Ok(format!("{module}.{name}"))
}

thread_local! {
    /// Routes of the types seen, and caijit dtypes of the dtype objects seen: per thread,
    /// so the launch path takes no lock.
    static ROUTES: RefCell<Vec<(usize, Route)>> = const { RefCell::new(Vec::new()) };
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

/// NumPy, CuPy and PyTorch dtype objects are singletons: their caijit dtype is looked up by
/// address after the first time (the table holds a reference, so addresses stay unique).
fn cached_dtype(dtype_obj: &Bound<'_, PyAny>, read: impl FnOnce() -> PyResult<Option<DType>>) -> PyResult<Option<DType>> {
    remember(&SEEN_DTYPES, dtype_obj, read)
}

/// The dtype of an array whose `dtype` is a NumPy dtype (CuPy's, Numba's), from its
/// typestr, read once per dtype object; `None` for a dtype caijit does not know.
fn numpy_dtype_of(obj: &Bound<'_, PyAny>) -> PyResult<Option<DType>> {
    let py = obj.py();
    let dtype_obj = obj.getattr(intern!(py, "dtype"))?;
    cached_dtype(&dtype_obj, || {
        let typestr: String = dtype_obj.getattr(intern!(py, "str"))?.extract()?;
        Ok(DType::from_typestr(&typestr).ok())
    })
}

/// A shape or strides tuple (torch.Size included) read item by item, into a buffer on the
/// stack; any other sequence through the generic conversion.
fn ints<T>(obj: &Bound<'_, PyAny>) -> PyResult<SmallVec<[T; 4]>>
where
    T: for<'a, 'py> FromPyObject<'a, 'py, Error = PyErr>,
{
    match obj.cast::<PyTuple>() {
        Ok(t) => {
            let mut out = SmallVec::new();
            for item in t.iter_borrowed() {
                out.push(item.extract::<T>()?);
            }
            Ok(out)
        }
        Err(_) => Ok(obj.extract::<Vec<T>>()?.into()),
    }
}

/// The device of a known type's array: 0 on a single-GPU machine (or one without a driver,
/// where a launch fails later with its own error), else asked of the object itself by `ask`
/// (still cheaper than the driver's pointer query).
fn object_device(ask: impl FnOnce() -> PyCaiResult<usize>) -> PyCaiResult<usize> {
    match cai_runtime::runtime::device_count() {
        Ok(n) if n > 1 => ask(),
        _ => Ok(0),
    }
}

/// Per-launch facts shared by all arguments (each read at most once per launch).
#[derive(Default)]
pub struct ArgContext {
    cupy_stream: Option<Option<u64>>,
    /// PyTorch's current stream on a device (CAI value).
    torch_stream: Option<(usize, u64)>,
    /// An exchange API producer's current work stream: (table, device type, device, CAI value).
    exchange_stream: Option<(usize, i32, usize, u64)>,
    /// The stream the launch will use when it was given (CAI value); DLPack producers are
    /// asked to order their work before it.
    explicit_stream: Option<u64>,
    /// Whether that stream is being captured into a CUDA graph (asked once per launch, at
    /// the first DLPack import).
    capturing: Option<bool>,
    path: Path,
}

/// A producer's raw current stream as a CAI value (its null default stream is the legacy
/// stream, 1).
fn cai_stream(raw: u64) -> u64 {
    if raw == 0 {
        1
    } else {
        raw
    }
}

impl ArgContext {
    pub fn new(explicit_stream: Option<u64>) -> Self {
        ArgContext { explicit_stream, ..Default::default() }
    }

    /// What DLPack producers are asked for (`__dlpack__(stream=...)`), and the producer
    /// stream the imported view carries.
    ///
    /// Normally the launch's explicit stream, else the legacy default stream: the producer
    /// orders its pending work before it, and the view carries it, so the stream protocol
    /// needs no special case for DLPack. But when the launch stream is being captured into
    /// a CUDA graph, the producer would make it wait on the producer's own stream, outside
    /// the capture (`cudaErrorStreamCaptureIsolation`: the capture is invalidated). Then
    /// the producer is asked for `-1` (no ordering) and the view carries no stream, as
    /// caijit leaves out its own edges to streams outside a capture: ordering a replay
    /// against other work is the capturer's business.
    pub fn dlpack_stream(&mut self) -> PyCaiResult<(i64, Option<u64>)> {
        let stream = self.explicit_stream.unwrap_or(1);
        // (The legacy default stream is never captured, and never asked: asking it while a
        // blocking stream captures is itself an illegal implicit synchronisation.)
        let capturing = match self.capturing {
            Some(c) => c,
            None if stream == 1 => false,
            None => {
                // A stream the driver cannot answer for (the per-thread default stream of a
                // thread without a current context) is no capture of caijit's to keep: the
                // producer is asked as before.
                let c = RtStream::borrowed(stream)?.is_capturing().unwrap_or(false);
                self.capturing = Some(c);
                c
            }
        };
        if capturing {
            return Ok((-1, None));
        }
        Ok((stream as i64, Some(stream)))
    }

    /// The stream CuPy's `__cuda_array_interface__` would export now: its current stream
    /// (the null stream exported as 1, the legacy default stream), from the C function
    /// CuPy's own export calls (`cupy_backends.cuda.stream.get_current_stream_ptr`, through
    /// Cython's C API) where this CuPy exports it, else `cupy.cuda.get_current_stream().ptr`.
    fn cupy_stream(&mut self, py: Python<'_>) -> PyResult<Option<u64>> {
        static C_FUNCTION: PyOnceLock<Option<IntptrFn>> = PyOnceLock::new();
        static CURRENT: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
        if let Some(s) = self.cupy_stream {
            return Ok(s);
        }
        let probe = timing::start();
        let c_function = C_FUNCTION.get_or_init(py, || {
            let module = py.import("cupy_backends.cuda.stream").ok()?;
            IntptrFn::from_pyx_capi(&module, "get_current_stream_ptr")
        });
        let ptr: u64 = match c_function {
            Some(f) => f.call(py)? as u64,
            None => {
                let f = CURRENT
                    .get_or_try_init(py, || -> PyResult<_> { Ok(py.import("cupy.cuda")?.getattr("get_current_stream")?.unbind()) })?;
                f.bind(py).call0()?.getattr(intern!(py, "ptr"))?.extract()?
            }
        };
        let s = Some(cai_stream(ptr));
        self.cupy_stream = Some(s);
        probe.stop(Phase::ProducerStream);
        Ok(s)
    }

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
        let probe = timing::start();
        let f = CURRENT.get_or_try_init(py, || -> PyResult<_> {
            Ok(py.import("torch")?.getattr("_C")?.getattr("_cuda_getCurrentRawStream")?.unbind())
        })?;
        let s = cai_stream(f.bind(py).call1((device,))?.extract()?);
        self.torch_stream = Some((device, s));
        probe.stop(Phase::ProducerStream);
        Ok(s)
    }

    /// An exchange API producer's current work stream on a device (as a CAI value), asked
    /// once per launch per (producer, device).
    fn exchange_stream(&mut self, py: Python<'_>, api: &ExchangeApi, device_type: i32, device: usize) -> PyResult<u64> {
        let id = api.id();
        if let Some((_, _, _, s)) = self.exchange_stream.filter(|&(a, t, d, _)| a == id && t == device_type && d == device) {
            return Ok(s);
        }
        let probe = timing::start();
        let s = cai_stream(api.current_work_stream(py, device_type, device as i32)?);
        self.exchange_stream = Some((id, device_type, device, s));
        probe.stop(Phase::ProducerStream);
        Ok(s)
    }
}

/// Convert argument `index` of a launch.
pub fn arg_from_py(index: usize, obj: &Bound<'_, PyAny>, ctx: &mut ArgContext) -> PyCaiResult<PyArg> {
    let probe = timing::start();
    // The commonest arguments are recognised by their exact type alone.
    if obj.is_exact_instance_of::<PyInt>() {
        let a = PyArg::Scalar(Num::Int(int_value(index, obj)?), None);
        probe.stop(Phase::ArgScalar);
        return Ok(a);
    }
    if obj.is_exact_instance_of::<PyFloat>() {
        let a = PyArg::Scalar(Num::Float(obj.extract()?), None);
        probe.stop(Phase::ArgScalar);
        return Ok(a);
    }
    let path = ctx.path;
    if let Some(a) = obj.cast_exact::<DeviceArray>().ok().filter(|_| matches!(path, Path::Auto | Path::Known)) {
        let a = caijit_arg(a.clone().unbind(), None)?;
        probe.stop(Phase::ArgCaijit);
        return Ok(a);
    }
    let route = route_of(&obj.get_type());
    let fast = match route {
        Route::Exchange { api, torch } if matches!(path, Path::Auto | Path::Exchange) => {
            exchange::view(index, obj, &api, torch, ctx)?.map(|v| (v, Phase::ArgExchange))
        }
        Route::Exchange { torch: true, .. } | Route::Torch if path == Path::Known => {
            torch::view(index, obj, ctx)?.map(|v| (v, Phase::ArgTorch))
        }
        Route::Torch if path == Path::Auto => torch::view(index, obj, ctx)?.map(|v| (v, Phase::ArgTorch)),
        Route::Cupy { exact } if matches!(path, Path::Auto | Path::Known) => cupy::view(obj, exact, ctx)?.map(|v| (v, Phase::ArgCupy)),
        _ => None,
    };
    if let Some((arg, phase)) = fast {
        probe.stop(phase);
        return Ok(arg);
    }
    if matches!(route, Route::Torch | Route::Exchange { torch: true, .. }) {
        // The generic paths read torch's own interfaces, which export lazy views as memory.
        torch::refuse_lazy_views(index, obj, None)?;
    }
    if matches!(route, Route::Numba) && matches!(path, Path::Auto | Path::Known) {
        if let Some(a) = numba::view(obj)? {
            probe.stop(Phase::ArgNumba);
            return Ok(a);
        }
    }
    if path != Path::Dlpack {
        if let Ok(i) = obj.cast::<Interface>() {
            let i = i.get();
            let a = match (&i.owner, i.device) {
                // A view of a caijit array follows the array's rules, and holds it.
                (Some(Owner::Array(array)), _) => caijit_arg(array.clone_ref(obj.py()), Some(i.view.clone()))?,
                // A view of a DLPack capsule: this launch holds the capsule too, until its
                // kernel is done.
                (Some(Owner::Capsule(c)), device) => PyArg::Dlpack { view: i.view.clone(), device, holder: c.clone_ref(obj.py()) },
                (None, Some(device)) => PyArg::ArrayOn(i.view.clone(), device),
                (None, None) => PyArg::Array(i.view.clone()),
            };
            probe.stop(Phase::ArgInterface);
            return Ok(a);
        }
        if let Some(n) = python_number(index, obj)? {
            probe.stop(Phase::ArgScalar);
            return Ok(PyArg::Scalar(n, None));
        }
        if let Ok(b) = obj.cast::<PyBytes>() {
            return Ok(PyArg::Bytes(b.as_bytes().to_vec()));
        }
        // Any CAI producer (a plain dict is not an array argument).
        if !obj.is_instance_of::<PyDict>() {
            match interface_dict(obj) {
                Ok(dict) => {
                    let a = PyArg::Array(view_from_dict(&dict, TypestrOptions::default())?);
                    probe.stop(Phase::ArgCai);
                    return Ok(a);
                }
                Err(FromPyError::NoInterface(_)) => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
    // DLPack-only producers (the handshake orders their work before the launch stream).
    if let Some(a) = dlpack::import(index, obj, ctx)? {
        probe.stop(Phase::ArgDlpack);
        return Ok(a);
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

/// A caijit array, or a view of one (`view`), as an argument: refused where the array may
/// not be used (another thread than the home thread of an array on the per-thread default
/// stream, whose stream cannot be named here), and holding the array. Every view of a
/// caijit array a launch, an op or `launch_view` takes comes from here or from
/// [`Interface::of_array`], which apply the same rule.
fn caijit_arg(array: Py<DeviceArray>, view: Option<ArrayView>) -> PyCaiResult<PyArg> {
    array.get().inner.check_usable_here()?;
    Ok(match view {
        None => PyArg::Own(array),
        Some(v) => PyArg::OwnView(v, array),
    })
}

/// A Python number (bool, int, float or complex, subclasses included) as a scalar's value;
/// `None` for anything else.
pub fn python_number(index: usize, obj: &Bound<'_, PyAny>) -> PyCaiResult<Option<Num>> {
    // NumPy's float64 and complex128 subclass float and complex: they are NumPy scalars,
    // whose dtype takes part in deduction (`numpy_scalar`). (Anything that is no number at
    // all, an array say, is told by its type alone, before that slower look.)
    let exact = obj.is_exact_instance_of::<PyInt>() || obj.is_exact_instance_of::<PyFloat>() || obj.is_exact_instance_of::<PyBool>();
    let number = exact || obj.is_instance_of::<PyInt>() || obj.is_instance_of::<PyFloat>() || obj.is_instance_of::<PyComplex>();
    if !number || (!exact && is_numpy_scalar(obj)?) {
        return Ok(None);
    }
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

/// A Python number, or a NumPy scalar with its dtype (which deduces templates); `None` for
/// anything else.
pub fn number(index: usize, obj: &Bound<'_, PyAny>) -> PyCaiResult<Option<(Num, Option<DType>)>> {
    if let Some(n) = python_number(index, obj)? {
        return Ok(Some((n, None)));
    }
    numpy_scalar(index, obj)
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
    Ok(
        matches!(dlpack::dlpack_device(obj)?, Some((kind, _)) if kind == cai_runtime::python::dlpack::KDL_CPU || kind == cai_runtime::python::dlpack::KDL_CUDA_HOST),
    )
}

/// The view a launch on `stream` takes of `obj` (fast paths included), with its device when
/// that was learnt, and the DLPack capsule it reads, which the view keeps alive (and hands
/// to the launches it is given to): `caijit.ops` converts each array once and launches with
/// the view. `path` forces one conversion path (tests: `"exchange"`, `"known"`,
/// `"generic"`, `"dlpack"`; default all, in order).
#[pyfunction]
#[pyo3(signature = (obj, stream = None, path = None))]
pub fn launch_view(obj: &Bound<'_, PyAny>, stream: Option<&Bound<'_, PyAny>>, path: Option<&str>) -> PyCaiResult<Interface> {
    let stream = stream.map(stream_from_py).transpose()?.flatten();
    let mut ctx = ArgContext::new(stream.as_deref().map(RtStream::handle));
    ctx.path = Path::parse(path)?;
    // A view holds what its argument held: the caijit array (a view of a view holds the
    // array too, at any depth) or the DLPack capsule.
    let plain = |view: ArrayView, device| {
        let typestr = view.dtype().typestr().to_string();
        Interface::from_view(view, typestr, device)
    };
    Ok(match arg_from_py(0, obj, &mut ctx)? {
        PyArg::Array(view) => plain(view, None),
        PyArg::ArrayOn(view, device) => plain(view, Some(device)),
        PyArg::Dlpack { view, device, holder } => Interface::of_capsule(view, device, holder),
        PyArg::Own(a) => Interface::of_array(a, None)?,
        PyArg::OwnView(view, a) => Interface::of_array(a, Some(view))?,
        _ => return Err(PyCaiError::argument("not an array")),
    })
}

/// The route a type's arguments take: `"exchange"` (with the table's version),
/// `"cupy"`, `"torch"`, `"numba"` or `"other"` (test and benchmark support).
#[pyfunction]
pub fn _route(obj: &Bound<'_, PyAny>) -> String {
    match route_of(&obj.get_type()) {
        Route::Exchange { api, .. } => {
            let v = api.version();
            format!("exchange {}.{}{}", v.major, v.minor, if api.borrows() { "" } else { " (owning)" })
        }
        Route::Cupy { .. } => "cupy".into(),
        Route::Torch => "torch".into(),
        Route::Numba => "numba".into(),
        Route::Other => "other".into(),
    }
}

/// Per-phase host time of launches (`CAIJIT_PHASE_TIMES=1`, or `enable=True`):
/// `{phase: (count, total_ns)}`; `reset` zeroes the totals after reading.
#[pyfunction]
#[pyo3(signature = (reset = false, enable = None))]
pub fn phase_times(py: Python<'_>, reset: bool, enable: Option<bool>) -> PyResult<Bound<'_, PyDict>> {
    if let Some(on) = enable {
        timing::set_enabled(on);
    }
    let d = PyDict::new(py);
    for (name, count, ns) in timing::totals(reset) {
        d.set_item(name, (count, ns))?;
    }
    Ok(d)
}
