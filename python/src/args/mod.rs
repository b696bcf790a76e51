//! The argument layer: Python objects → launch arguments.
//!
//! Each argument is dispatched by its exact type, looked up once per type and remembered
//! (one table lookup per argument after the first launch). The chain, first match wins:
//!
//! 1. `int`, `float` (exact types) and `caijit.DeviceArray` (its own view and device);
//! 2. the DLPack C exchange API, for types with `__dlpack_c_exchange_api__` ([`exchange`]);
//! 3. known types read through their attributes, one row each of [`PRODUCERS`]:
//!    CuPy ([`cupy`]), PyTorch ([`torch`]), Numba ([`numba`]);
//! 4. caijit's `Interface` views, with what they hold: the caijit array they view (whose
//!    rules they follow) or a DLPack import's capsule;
//! 5. scalars named for a graph (`caijit.GraphScalar`), Python numbers and `bytes` (struct
//!    parameters);
//! 6. any `__cuda_array_interface__` producer (the generic path);
//! 7. any `__dlpack__` producer on a CUDA device ([`dlpack`]);
//! 8. NumPy scalars; then the errors (host memory, or not an argument).
//!
//! A producer fast path is one module here (`is_type`, and `view` giving the argument as the
//! producer's own interface would) and its row in [`PRODUCERS`] (with its timing
//! phase and result library); tests compare it with the generic path through
//! `launch_view(obj, path=...)`.

mod arg;
mod context;
mod cupy;
mod dlpack;
mod exchange;
mod numba;
mod producer;
mod read;
mod scalar;
mod torch;

pub use arg::{release_after, PyArg};
pub use context::ArgContext;
pub use producer::Framework;
pub use scalar::{number, GraphScalar};

use cai_runtime::cai::{ArrayView, TypestrOptions};
use cai_runtime::launch::Num;
use cai_runtime::python::dlpack::ExchangeApi;
use cai_runtime::python::FromPyError;
use cai_runtime::runtime::Stream as RtStream;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyFloat, PyInt, PyType};
use smallvec::SmallVec;

use crate::array::DeviceArray;
use crate::errors::{PyCaiError, PyCaiResult};
use crate::interface::{interface_dict, view_from_dict, Interface, Owner};
use crate::pyobj::type_name;
use crate::stream::stream_from_py;
use crate::timing::{self, Phase};
use context::Path;
use producer::{Known, Producer};
use read::{remembered_route, Route};
use scalar::{int_value, numpy_scalar, python_number};

/// Whether the exchange API is used (`CAIJIT_DLPACK_EXCHANGE=0` turns it off, read once).
fn exchange_enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("CAIJIT_DLPACK_EXCHANGE").map_or(true, |v| v != "0"))
}

/// Every producer with a fast path (its row: [`Producer`]), in the order a type's MRO is
/// matched against them.
static PRODUCERS: [&Producer; 3] = [&cupy::PRODUCER, &torch::PRODUCER, &numba::PRODUCER];

/// The producer of the first class of `mro` (qualified names) that is a producer's type.
fn producer_of<'a>(mro: impl IntoIterator<Item = (&'a str, bool)>) -> Option<Known> {
    mro.into_iter().find_map(|(name, exact)| PRODUCERS.iter().find(|p| (p.is_type)(name)).map(|&producer| Known { producer, exact }))
}

/// The route of a type: its exchange API when it has a usable one, else a producer's by
/// its MRO (subclasses included: a subclass's work is on its base's current stream).
fn route_of(ty: &Bound<'_, PyType>) -> Route {
    remembered_route(ty.as_any(), || {
        let mro = ty.mro().iter().map(|base| Ok((qualified_name(&base)?, base.is(ty)))).collect::<PyResult<Vec<_>>>()?;
        let known = producer_of(mro.iter().map(|(name, exact)| (name.as_str(), *exact)));
        if exchange_enabled() {
            if let Ok(Some(api)) = ExchangeApi::of_type(ty) {
                return Ok(Route::Exchange { api, known });
            }
        }
        Ok(known.map_or(Route::Other, Route::Known))
    })
    .unwrap_or(Route::Other)
}

/// The library of `obj`'s type, by its route (remembered per type: one table lookup).
pub fn framework_of(obj: &Bound<'_, PyAny>) -> Framework {
    route_of(&obj.get_type()).producer().map_or(Framework::Other, |p| p.framework)
}

fn qualified_name(ty: &Bound<'_, PyAny>) -> PyResult<String> {
    let module: String = ty.getattr(intern!(ty.py(), "__module__"))?.extract().unwrap_or_default();
    let name: String = ty.getattr(intern!(ty.py(), "__qualname__"))?.extract()?;
    Ok(format!("{module}.{name}"))
}

/// Convert argument `index` of a launch.
pub fn arg_from_py(index: usize, obj: &Bound<'_, PyAny>, ctx: &mut ArgContext) -> PyCaiResult<PyArg> {
    match arg_before_dlpack(index, obj, ctx)? {
        Some(a) => Ok(a),
        None => arg_by_dlpack(index, obj, ctx),
    }
}

/// Convert the arguments `objs` of one launch (`(index, object)`) into `converted`:
/// DLPack-only producers last, once the stream the launch will use is known
/// ([`ArgContext::imply_stream`]). Filled in place: a launch moves each argument once,
/// never the whole (large) vector.
pub fn args_from_py<'py>(
    objs: impl Iterator<Item = (usize, Bound<'py, PyAny>)>,
    ctx: &mut ArgContext,
    named: impl Fn(usize, PyCaiError) -> PyCaiError,
    converted: &mut SmallVec<[PyArg; 8]>,
) -> PyCaiResult<()> {
    let mut later: SmallVec<[(usize, Bound<'py, PyAny>); 2]> = SmallVec::new();
    for (i, obj) in objs {
        // (While a caijit graph captures, a launch from any thread may be captured into it.)
        ctx.keep(&obj);
        match arg_before_dlpack(i, &obj, ctx).map_err(|e| named(i, e))? {
            Some(a) => converted.push(a),
            None => {
                // In its place until it is imported below (nothing reads it before).
                converted.push(PyArg::Bytes(Vec::new()));
                later.push((converted.len() - 1, obj));
            }
        }
    }
    if !later.is_empty() {
        ctx.imply_stream(converted.iter().enumerate().filter(|(i, _)| !later.iter().any(|(l, _)| l == i)).map(|(_, a)| a));
        for (at, obj) in later {
            converted[at] = arg_by_dlpack(at, &obj, ctx).map_err(|e| named(at, e))?;
        }
    }
    Ok(())
}

/// Argument `index` by DLPack (a producer that spoke no other interface caijit reads),
/// else the error saying why it cannot be passed.
pub fn arg_by_dlpack(index: usize, obj: &Bound<'_, PyAny>, ctx: &mut ArgContext) -> PyCaiResult<PyArg> {
    let probe = timing::start();
    // DLPack-only producers (the handshake orders their work before the launch stream).
    if let Some(a) = dlpack::import(index, obj, ctx)? {
        probe.stop(Phase::ArgDlpack);
        return Ok(a);
    }
    if obj.hasattr("__array_interface__")? || obj.hasattr("__array__")? || dlpack::is_host(obj)? {
        return Err(host_memory(index, &type_name(obj)));
    }
    Err(PyCaiError::argument(format!(
        "argument {index}: cannot pass a {} to a kernel (expected a CUDA array, a scalar, or bytes for a struct)",
        type_name(obj)
    )))
}

/// The error for argument `index`, an array of type `what` in host memory.
pub fn host_memory(index: usize, what: &str) -> PyCaiError {
    PyCaiError::argument(format!(
        "argument {index}: a {what} is host memory; caijit never copies implicitly (use caijit.to_device, or a GPU array)"
    ))
}

/// Argument `index` by every path but DLPack; `None`: what is left is DLPack and errors
/// ([`arg_by_dlpack`]).
pub fn arg_before_dlpack(index: usize, obj: &Bound<'_, PyAny>, ctx: &mut ArgContext) -> PyCaiResult<Option<PyArg>> {
    let probe = timing::start();
    // The commonest arguments are recognised by their exact type alone.
    if obj.is_exact_instance_of::<PyInt>() {
        let a = PyArg::Scalar(Num::Int(int_value(index, obj)?), None);
        probe.stop(Phase::ArgScalar);
        return Ok(Some(a));
    }
    if obj.is_exact_instance_of::<PyFloat>() {
        let a = PyArg::Scalar(Num::Float(obj.extract()?), None);
        probe.stop(Phase::ArgScalar);
        return Ok(Some(a));
    }
    let path = ctx.path;
    if let Some(a) = obj.cast_exact::<DeviceArray>().ok().filter(|_| matches!(path, Path::Auto | Path::Known)) {
        let a = caijit_arg(a.clone().unbind(), None)?;
        probe.stop(Phase::ArgCaijit);
        return Ok(Some(a));
    }
    let route = route_of(&obj.get_type());
    // A type with an exchange API is read through it (its producer's own path only when
    // tests force that path).
    let fast = match (route, path) {
        (Route::Exchange { api, known }, Path::Auto | Path::Exchange) => {
            exchange::view(index, obj, &api, known.map(|k| k.producer), ctx)?.map(|v| (v, Phase::ArgExchange))
        }
        (Route::Known(k), Path::Auto | Path::Known) | (Route::Exchange { known: Some(k), .. }, Path::Known) => {
            (k.producer.view)(index, obj, k.exact, ctx)?.map(|v| (v, k.producer.phase))
        }
        _ => None,
    };
    if let Some((arg, phase)) = fast {
        probe.stop(phase);
        return Ok(Some(arg));
    }
    if let Some(refuse) = route.producer().and_then(|p| p.refuse) {
        // The generic paths read the producer's own interfaces (torch's export lazy views
        // as memory).
        refuse(index, obj, None)?;
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
            return Ok(Some(a));
        }
        // A scalar named for a graph (its type looked up only here, past the arrays).
        if let Ok(g) = obj.cast_exact::<GraphScalar>() {
            return Ok(Some(PyArg::ScalarInput(g.get().scalar.clone())));
        }
        if let Some(n) = python_number(index, obj)? {
            probe.stop(Phase::ArgScalar);
            return Ok(Some(PyArg::Scalar(n, None)));
        }
        if let Ok(b) = obj.cast::<PyBytes>() {
            return Ok(Some(PyArg::Bytes(b.as_bytes().to_vec())));
        }
        // Any CAI producer (a plain dict is not an array argument).
        if !obj.is_instance_of::<PyDict>() {
            match interface_dict(obj) {
                Ok(dict) => {
                    let a = PyArg::Array(view_from_dict(&dict, TypestrOptions::default())?);
                    probe.stop(Phase::ArgCai);
                    return Ok(Some(a));
                }
                Err(FromPyError::NoInterface(_)) => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
    Ok(numpy_scalar(index, obj)?.map(|(value, dtype)| PyArg::Scalar(value, dtype)))
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

/// The route a type's arguments take: `"exchange"` (with the table's version), a
/// producer's name (`"cupy"`, `"torch"`, `"numba"`) or `"other"` (test and benchmark
/// support).
#[pyfunction]
pub fn _route(obj: &Bound<'_, PyAny>) -> String {
    match route_of(&obj.get_type()) {
        Route::Exchange { api, .. } => {
            let v = api.version();
            format!("exchange {}.{}{}", v.major, v.minor, if api.borrows() { "" } else { " (owning)" })
        }
        Route::Known(k) => k.producer.name.into(),
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
