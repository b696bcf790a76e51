//! `caijit._native` entry points of the kernel library: `cai_runtime::ops` over Python arrays.
//!
//! Each op is one native call that does what `caijit.ops` promises: each argument
//! converted once, as a launch converts it (any CAI or DLPack object, caijit's own arrays
//! with their device known), strided inputs of pointer kernels copied to C order, the
//! result allocated (a `caijit.DeviceArray` on the first input's device, on the given
//! stream or the legacy default stream) when no `out` is given, with NumPy's result dtype;
//! checks, grids and launches are `cai_runtime::ops`'. The GPU work of a call (copies,
//! allocation, the op) runs with the GIL released once. `caijit.ops`' functions only pass
//! their arguments on.

use std::sync::Arc;

use cai_runtime::array::DeviceArray as RtArray;
use cai_runtime::cai::{ArrayView, DType};
use cai_runtime::launch::{launch_stream, Num};
use cai_runtime::ops::{self, BinaryOp};
use cai_runtime::runtime::{Context, Stream as RtStream};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyString, PyTuple};
use smallvec::SmallVec;

use crate::args::{self, arg_from_py, launch_device, release_after, ArgContext, PyArg};
use crate::array::{dtype_from_py, DeviceArray};
use crate::errors::{PyCaiError, PyCaiResult};
use crate::stream::stream_from_py;

/// A Python or NumPy number as an op's scalar `name`, argument `index` of the `caijit.ops`
/// function (converted to the arrays' dtype exactly, or refused), read as a launch reads a
/// scalar argument.
fn number(what: &str, index: usize, name: &str, obj: &Bound<'_, PyAny>) -> PyCaiResult<Num> {
    let n = match args::number(index, obj) {
        Ok(Some((n, _))) => Ok(n),
        Ok(None) => Err(PyCaiError::argument(format!("{what}: {name} must be a number, got {}", crate::pyobj::type_name(obj)))),
        Err(e) => Err(e),
    };
    n.map_err(|e| e.at_argument(index, Some(name), None))
}

/// A shape on the stack (ranks up to 8 are the kernels' limit).
type Shape = SmallVec<[usize; 8]>;

/// One op call from Python: its stream, converted once, and its input arrays, each
/// converted once (their conversions keep DLPack capsules alive until the op's work is done).
struct OpCall<'py> {
    py: Python<'py>,
    what: &'static str,
    stream: Option<Arc<RtStream>>,
    cx: ArgContext,
    args: SmallVec<[PyArg; 4]>,
}

/// What the GPU part of a call leaves to be released or dropped once the GIL is held again.
#[derive(Default)]
struct Enqueued {
    /// Contiguous copies of strided inputs (freed, stream-ordered, once the op is enqueued).
    temps: SmallVec<[RtArray; 2]>,
    /// Conversions replaced by their copies, with the context and stream of the copy that read them.
    replaced: SmallVec<[(Arc<Context>, u64, PyArg); 2]>,
    /// The op's context and stream, once it was launched (also when it failed: an op of
    /// several kernels may have enqueued some of them).
    launched: Option<(Arc<Context>, u64)>,
    /// The result, when the call allocated it.
    result: Option<RtArray>,
}

impl<'py> OpCall<'py> {
    fn new(py: Python<'py>, what: &'static str, stream: Option<&Bound<'py, PyAny>>) -> PyCaiResult<Self> {
        let stream = stream.map(stream_from_py).transpose()?.flatten();
        let cx = ArgContext::new(stream.as_deref().map(RtStream::handle));
        Ok(OpCall { py, what, stream, cx, args: SmallVec::new() })
    }

    /// Convert input array `name`, argument `index` of the `caijit.ops` function (as a launch
    /// converts one).
    fn input(&mut self, index: usize, name: &str, obj: &Bound<'py, PyAny>) -> PyCaiResult<()> {
        let a = arg_from_py(index, obj, &mut self.cx).map_err(|e| e.at_argument(index, Some(name), None))?;
        if a.view().is_none() {
            return Err(not_an_array(self.what, name, obj).at_argument(index, Some(name), None));
        }
        self.args.push(a);
        Ok(())
    }

    /// Input `i`'s view.
    fn view(&self, i: usize) -> &ArrayView {
        self.args[i].view().expect("inputs are arrays")
    }

    /// Run `op` on the inputs (C-contiguous copies of the strided ones first, when
    /// `contiguous`) and `out`: the given array (argument `out_index` of the native call), or
    /// a new one of shape and dtype `new` (needed when `out` is None). Returns the result.
    fn run(
        self,
        out: Option<&Bound<'py, PyAny>>,
        out_index: usize,
        contiguous: bool,
        new: Option<(Shape, DType)>,
        op: impl for<'a> FnOnce(&Arc<Context>, &[&'a ArrayView], &'a ArrayView, Option<&RtStream>) -> cai_runtime::Result<()> + Send,
    ) -> PyCaiResult<Py<PyAny>> {
        let OpCall { py, what, stream, mut cx, mut args } = self;
        let n = args.len();
        if let Some(o) = out {
            let a = arg_from_py(out_index, o, &mut cx).map_err(|e| e.at_argument(out_index, Some("out"), None))?;
            if a.view().is_none() {
                return Err(not_an_array(what, "out", o).at_argument(out_index, Some("out"), None));
            }
            args.push(a);
        }
        let mut done = Enqueued::default();
        let result = py.detach(|| enqueue(&mut args, n, contiguous, new, stream.as_ref(), &mut done, op));
        // With the GIL: DLPack capsules are handed over to be released after the work that reads them.
        let mut released = Ok(());
        for (ctx, on, a) in done.replaced.drain(..) {
            released = released.and(release_after(&ctx, on, [a]));
        }
        match done.launched.take() {
            Some((ctx, on)) => released = released.and(release_after(&ctx, on, args)),
            None => drop(args),
        }
        drop(done.temps);
        result?;
        released?;
        match (done.result, out) {
            (Some(inner), _) => Ok(Py::new(py, DeviceArray { inner })?.into_any()),
            (None, Some(o)) => Ok(o.clone().unbind()),
            (None, None) => unreachable!("a result is allocated when no out is given"),
        }
    }
}

/// "`what`: `name` must be a CUDA array, got `type`".
fn not_an_array(what: &str, name: &str, obj: &Bound<'_, PyAny>) -> PyCaiError {
    PyCaiError::argument(format!("{what}: {name} must be a CUDA array, got {}", crate::pyobj::type_name(obj)))
}

/// The GPU part of an op call (the GIL released): copies of strided inputs, the result's
/// allocation, the op. `args` are the inputs (`n`), then `out` when it was given.
fn enqueue(
    args: &mut SmallVec<[PyArg; 4]>,
    n: usize,
    contiguous: bool,
    new: Option<(Shape, DType)>,
    stream: Option<&Arc<RtStream>>,
    done: &mut Enqueued,
    op: impl for<'a> FnOnce(&Arc<Context>, &[&'a ArrayView], &'a ArrayView, Option<&RtStream>) -> cai_runtime::Result<()>,
) -> PyCaiResult<()> {
    // Allocations are stream-ordered on the call's stream, else the legacy default stream.
    let alloc_stream = || stream.cloned().unwrap_or_else(|| Arc::new(RtStream::legacy()));
    let stream = stream.map(|s| &**s);
    for i in 0..n {
        if !contiguous || args[i].view().expect("inputs are arrays").is_c_contiguous() {
            continue;
        }
        let device = args[i].device()?.unwrap_or(0);
        let v = args[i].view().expect("inputs are arrays");
        let ctx = Context::new(device)?;
        let copy = RtArray::empty(&ctx, v.shape(), v.dtype(), &alloc_stream())?;
        let cv = copy.view();
        let on = launch_stream([v, &cv], stream);
        let copied = ops::ascontiguous(&ctx, v, &cv, stream);
        let original = std::mem::replace(&mut args[i], PyArg::ArrayOn(cv, device));
        done.replaced.push((ctx, on, original));
        done.temps.push(copy);
        copied?;
    }
    if args.len() == n {
        let (shape, dtype) = new.expect("the result's shape and dtype");
        let device = args.first_mut().map_or(Ok(None), PyArg::device)?.unwrap_or(0);
        let ctx = Context::new(device)?;
        let result = RtArray::empty(&ctx, &shape, dtype, &alloc_stream())?;
        args.push(PyArg::ArrayOn(result.view(), device));
        done.result = Some(result);
    }
    let device = launch_device(args, stream)?;
    let ctx = Context::new(device)?;
    let views: SmallVec<[&ArrayView; 4]> = args.iter().map(|a| a.view().expect("arrays")).collect();
    let on = launch_stream(views.iter().copied(), stream);
    done.launched = Some((ctx.clone(), on));
    Ok(op(&ctx, &views[..n], views[n], stream)?)
}

/// `new`'s shape and dtype: those of `like` (when `out` is None).
fn like(out: Option<&Bound<'_, PyAny>>, v: &ArrayView) -> Option<(Shape, DType)> {
    out.is_none().then(|| (v.shape().into(), v.dtype()))
}

/// `out = a * x + y` (`out` None: a new array); returns the result.
#[pyfunction]
#[pyo3(signature = (a, x, y, out = None, stream = None))]
pub fn axpy<'py>(
    py: Python<'py>,
    a: &Bound<'py, PyAny>,
    x: &Bound<'py, PyAny>,
    y: &Bound<'py, PyAny>,
    out: Option<&Bound<'py, PyAny>>,
    stream: Option<&Bound<'py, PyAny>>,
) -> PyCaiResult<Py<PyAny>> {
    let mut c = OpCall::new(py, "axpy", stream)?;
    c.input(1, "x", x)?;
    c.input(2, "y", y)?;
    let a = number("axpy", 0, "a", a)?;
    let new = like(out, c.view(0));
    c.run(out, 2, true, new, move |ctx, v, o, s| ops::axpy(ctx, a, v[0], v[1], o, s))
}

/// `out = a * x`; returns the result.
#[pyfunction]
#[pyo3(signature = (x, a, out = None, stream = None))]
pub fn scale<'py>(
    py: Python<'py>,
    x: &Bound<'py, PyAny>,
    a: &Bound<'py, PyAny>,
    out: Option<&Bound<'py, PyAny>>,
    stream: Option<&Bound<'py, PyAny>>,
) -> PyCaiResult<Py<PyAny>> {
    let mut c = OpCall::new(py, "scale", stream)?;
    c.input(0, "x", x)?;
    let a = number("scale", 1, "a", a)?;
    let new = like(out, c.view(0));
    c.run(out, 1, true, new, move |ctx, v, o, s| ops::scale(ctx, v[0], a, o, s))
}

/// Every element of `out` set to `value`.
#[pyfunction]
#[pyo3(signature = (out, value, stream = None))]
pub fn fill(py: Python<'_>, out: &Bound<'_, PyAny>, value: &Bound<'_, PyAny>, stream: Option<&Bound<'_, PyAny>>) -> PyCaiResult<()> {
    let value = number("fill", 1, "value", value)?;
    OpCall::new(py, "fill", stream)?.run(Some(out), 0, false, None, move |ctx, _, o, s| ops::fill(ctx, o, value, s))?;
    Ok(())
}

/// `cast`'s target dtype as `caijit.ops` reads it: a dtype's own name directly, anything
/// else through `caijit.ops._dtype_name` (NumPy's name, and NumPy's errors), made a caijit
/// dtype only when a result is allocated (`allocate`), as `caijit.empty(shape, name)` makes it.
fn cast_dtype(dtype: &Bound<'_, PyAny>, allocate: bool) -> PyCaiResult<Option<DType>> {
    if let Some(d) = dtype.cast::<PyString>().ok().and_then(|s| DType::from_name(&s.to_cow().ok()?)) {
        return Ok(Some(d));
    }
    static NAME: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    let py = dtype.py();
    let f = NAME.get_or_try_init(py, || -> PyResult<_> { Ok(py.import("caijit.ops")?.getattr("_dtype_name")?.unbind()) })?;
    let name = f.bind(py).call1((dtype,))?;
    Ok(if allocate { Some(dtype_from_py(&name)?) } else { None })
}

/// `out = x` converted to `dtype` (`out` None: a new array of `dtype`; else `out`'s dtype);
/// returns the result.
#[pyfunction]
#[pyo3(signature = (x, dtype, out = None, stream = None))]
pub fn cast<'py>(
    py: Python<'py>,
    x: &Bound<'py, PyAny>,
    dtype: &Bound<'py, PyAny>,
    out: Option<&Bound<'py, PyAny>>,
    stream: Option<&Bound<'py, PyAny>>,
) -> PyCaiResult<Py<PyAny>> {
    let mut c = OpCall::new(py, "cast", stream)?;
    c.input(0, "x", x)?;
    let to = cast_dtype(dtype, out.is_none()).map_err(|e| e.at_argument(1, Some("dtype"), None))?;
    let new = to.map(|d| (c.view(0).shape().into(), d));
    c.run(out, 1, true, new, |ctx, v, o, s| ops::cast(ctx, v[0], o, s))
}

/// `out = a (op) b` with NumPy broadcasting; `op` names a `BinaryOp` ("add", "maximum",
/// ...). `out` None: a new array of the broadcast shape and `a`'s dtype. Returns the result.
#[pyfunction]
#[pyo3(signature = (op, a, b, out = None, stream = None))]
pub fn binary<'py>(
    py: Python<'py>,
    op: &str,
    a: &Bound<'py, PyAny>,
    b: &Bound<'py, PyAny>,
    out: Option<&Bound<'py, PyAny>>,
    stream: Option<&Bound<'py, PyAny>>,
) -> PyCaiResult<Py<PyAny>> {
    let op = BinaryOp::from_name(op).ok_or_else(|| PyCaiError::argument(format!("no binary operation named {op:?}")))?;
    let mut c = OpCall::new(py, op.name(), stream)?;
    c.input(0, "a", a)?;
    c.input(1, "b", b)?;
    // (a given out is checked against the broadcast shape by the op)
    let new = match out {
        Some(_) => None,
        None => {
            let (av, bv) = (c.view(0), c.view(1));
            let shape = match ops::broadcast_shape(av.shape(), bv.shape()) {
                Some(shape) => shape,
                None => return Err(broadcast_error(py, op.name(), av.shape(), bv.shape())),
            };
            Some((shape.into(), av.dtype()))
        }
    };
    c.run(out, 2, false, new, move |ctx, v, o, s| ops::binary(ctx, op, v[0], v[1], o, s))
}

/// NumPy's message for shapes that do not broadcast (`numpy.broadcast_shapes`' own), after `what`.
fn broadcast_error(py: Python<'_>, what: &str, a: &[usize], b: &[usize]) -> PyCaiError {
    let numpy = || -> PyResult<Bound<'_, PyAny>> {
        py.import("numpy")?.getattr("broadcast_shapes")?.call1((PyTuple::new(py, a)?, PyTuple::new(py, b)?))
    };
    match numpy() {
        Err(e) if e.is_instance_of::<pyo3::exceptions::PyValueError>(py) => PyCaiError::argument(format!("{what}: {}", e.value(py))),
        Err(e) => PyCaiError::Py(e),
        Ok(_) => PyCaiError::argument(format!("{what}: shapes {a:?} and {b:?} do not broadcast")),
    }
}

/// A C-contiguous copy of any strided view into `out` (the driver's copy when `x` is
/// C-contiguous; `out` None: a new array); returns the result.
#[pyfunction]
#[pyo3(signature = (x, out = None, stream = None))]
pub fn ascontiguous<'py>(
    py: Python<'py>,
    x: &Bound<'py, PyAny>,
    out: Option<&Bound<'py, PyAny>>,
    stream: Option<&Bound<'py, PyAny>>,
) -> PyCaiResult<Py<PyAny>> {
    let mut c = OpCall::new(py, "ascontiguous", stream)?;
    c.input(0, "x", x)?;
    let new = like(out, c.view(0));
    c.run(out, 1, false, new, |ctx, v, o, s| ops::ascontiguous(ctx, v[0], o, s))
}

/// Copy the C-contiguous array `src` into the C-contiguous array `dst` (same dtype and
/// size, any shapes) with the driver's device-to-device copy, ordered by the stream
/// protocol as a launch is.
#[pyfunction]
#[pyo3(signature = (src, dst, stream = None))]
pub fn copy_contiguous(
    py: Python<'_>,
    src: &Bound<'_, PyAny>,
    dst: &Bound<'_, PyAny>,
    stream: Option<&Bound<'_, PyAny>>,
) -> PyCaiResult<()> {
    use cai_runtime::launch::{copy_contiguous, Arg};
    let mut c = OpCall::new(py, "copy_contiguous", stream)?;
    c.input(0, "src", src)?;
    c.run(Some(dst), 1, false, None, |ctx, v, o, s| copy_contiguous(ctx, &Arg::Array(v[0]), &Arg::Array(o), s, true).map(drop))?;
    Ok(())
}

/// The 2-D transpose of `x` into `out` (`out` None: a new array); returns the result.
#[pyfunction]
#[pyo3(signature = (x, out = None, stream = None))]
pub fn transpose<'py>(
    py: Python<'py>,
    x: &Bound<'py, PyAny>,
    out: Option<&Bound<'py, PyAny>>,
    stream: Option<&Bound<'py, PyAny>>,
) -> PyCaiResult<Py<PyAny>> {
    let mut c = OpCall::new(py, "transpose", stream)?;
    c.input(0, "x", x)?;
    let [rows, cols] = *c.view(0).shape() else {
        return Err(PyCaiError::argument(format!("transpose: expected a 2-D array, got {}-d", c.view(0).ndim())));
    };
    let new = out.is_none().then(|| (Shape::from_slice(&[cols, rows]), c.view(0).dtype()));
    c.run(out, 1, true, new, |ctx, v, o, s| ops::transpose(ctx, v[0], o, s))
}

/// Sum (`op == "sum"`) or maximum (`"max"`) of `x`: over the whole array into a one-element
/// `out` (`axis` None), or over the last axis (`axis` -1 or the last axis's index). `out`
/// None: a new array, NumPy's result dtype (integer sums in 64 bits). Returns the result.
#[pyfunction]
#[pyo3(signature = (op, x, out = None, axis = None, stream = None))]
pub fn reduce<'py>(
    py: Python<'py>,
    op: &str,
    x: &Bound<'py, PyAny>,
    out: Option<&Bound<'py, PyAny>>,
    axis: Option<&Bound<'py, PyAny>>,
    stream: Option<&Bound<'py, PyAny>>,
) -> PyCaiResult<Py<PyAny>> {
    let (what, sum): (&'static str, bool) = match op {
        "sum" => ("sum", true),
        "max" => ("max", false),
        _ => return Err(PyCaiError::argument(format!("no reduction {op:?} (sum or max)"))),
    };
    let mut c = OpCall::new(py, what, stream)?;
    c.input(0, "x", x)?;
    let v = c.view(0);
    // `axis in (-1, x.ndim - 1)`, as Python compares.
    let last = match axis {
        None => false,
        Some(a) if a.eq(-1)? || a.eq(v.ndim() as i64 - 1)? => true,
        Some(_) => return Err(PyCaiError::argument(format!("{what}: axis must be None or the last axis"))),
    };
    let new = out.is_none().then(|| {
        // NumPy's result dtypes: integer sums in 64 bits.
        let dtype = match v.dtype() {
            DType::I8 | DType::I16 | DType::I32 | DType::I64 if sum => DType::I64,
            DType::U8 | DType::U16 | DType::U32 | DType::U64 if sum => DType::U64,
            d => d,
        };
        let shape: Shape = if last { v.shape()[..v.ndim().saturating_sub(1)].into() } else { Shape::new() };
        (shape, dtype)
    });
    let f = match (sum, last) {
        (true, false) => ops::sum,
        (false, false) => ops::max,
        (true, true) => ops::sum_last_axis,
        (false, true) => ops::max_last_axis,
    };
    c.run(out, 1, true, new, move |ctx, v, o, s| f(ctx, v[0], o, s))
}

/// Softmax over the last axis of `x` into `out` (`out` None: a new array); returns the result.
#[pyfunction]
#[pyo3(signature = (x, out = None, stream = None))]
pub fn softmax<'py>(
    py: Python<'py>,
    x: &Bound<'py, PyAny>,
    out: Option<&Bound<'py, PyAny>>,
    stream: Option<&Bound<'py, PyAny>>,
) -> PyCaiResult<Py<PyAny>> {
    let mut c = OpCall::new(py, "softmax", stream)?;
    c.input(0, "x", x)?;
    let new = like(out, c.view(0));
    c.run(out, 1, true, new, |ctx, v, o, s| ops::softmax(ctx, v[0], o, s))
}

/// `out = op(x)` for an elementwise op of the library's registry
/// (`cai_runtime::ops::UNARY_OPS`; `out` None: a new array); returns the result.
#[pyfunction]
#[pyo3(signature = (op, x, out = None, stream = None))]
pub fn unary<'py>(
    py: Python<'py>,
    op: &str,
    x: &Bound<'py, PyAny>,
    out: Option<&Bound<'py, PyAny>>,
    stream: Option<&Bound<'py, PyAny>>,
) -> PyCaiResult<Py<PyAny>> {
    let op = ops::unary_op(op)?.name;
    let mut c = OpCall::new(py, op, stream)?;
    c.input(0, "x", x)?;
    let new = like(out, c.view(0));
    c.run(out, 1, true, new, move |ctx, v, o, s| ops::unary(ctx, op, v[0], o, s))
}

/// The registry of elementwise unary ops: `(name, doc, dtype names)` of each.
#[pyfunction]
pub fn unary_ops() -> Vec<(&'static str, &'static str, Vec<&'static str>)> {
    ops::UNARY_OPS.iter().map(|o| (o.name, o.doc, o.dtypes().map(|d| d.name()).collect())).collect()
}
