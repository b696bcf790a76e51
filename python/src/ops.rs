//! `caijit._native` entry points of the kernel library: Python arguments converted into a
//! `cai_runtime::ops` call, and its result wrapped.
//!
//! Each op is one native call: each argument converted once, as a launch converts it (any
//! CAI or DLPack object, caijit's own arrays with their device and stream known), the
//! launch device picked as a launch picks it, then one `cai_runtime::ops::Call` with the
//! GIL released, which decides everything else (checks, result shape and dtype, `out`,
//! strided inputs, streams). The result comes back as a `caijit.DeviceArray`, or as the
//! `out` object given; DLPack capsules are released after the stream the call ran on.
//! `caijit.ops`' functions only pass their arguments on.

use std::sync::Arc;

use cai_runtime::array::DeviceArray as RtArray;
use cai_runtime::cai::{ArrayView, DType};
use cai_runtime::launch::Num;
use cai_runtime::ops::{self, Axis, BinaryOp, Call, Operand, Out, Reduction};
use cai_runtime::runtime::{Context, Stream as RtStream};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyString;
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

/// An array argument as an op's operand: a caijit array, or a view of one, with the array
/// (whose stream a result may then live on), any other array as its view.
fn operand(a: &PyArg) -> Option<Operand<'_>> {
    match a {
        PyArg::Own(own) => Some(Operand::from(&own.get().inner)),
        PyArg::OwnView(v, own) => Some(Operand::of_array(v, &own.get().inner)),
        _ => a.view().map(Operand::from),
    }
}

/// One op call from Python: its stream, converted once, and its arrays, each converted once
/// (their conversions keep DLPack capsules alive until the op's work is done).
struct OpCall<'py> {
    py: Python<'py>,
    what: &'static str,
    stream: Option<Arc<RtStream>>,
    cx: ArgContext,
    args: SmallVec<[PyArg; 4]>,
}

impl<'py> OpCall<'py> {
    fn new(py: Python<'py>, what: &'static str, stream: Option<&Bound<'py, PyAny>>) -> PyCaiResult<Self> {
        let stream = stream.map(stream_from_py).transpose()?.flatten();
        let cx = ArgContext::new(stream.as_deref().map(RtStream::handle));
        Ok(OpCall { py, what, stream, cx, args: SmallVec::new() })
    }

    /// Convert array `name`, argument `index` of the `caijit.ops` function (as a launch
    /// converts one).
    fn input(&mut self, index: usize, name: &str, obj: &Bound<'py, PyAny>) -> PyCaiResult<()> {
        let a = arg_from_py(index, obj, &mut self.cx).map_err(|e| e.at_argument(index, Some(name), None))?;
        if a.view().is_none() {
            let e = PyCaiError::argument(format!("{}: {name} must be a CUDA array, got {}", self.what, crate::pyobj::type_name(obj)));
            return Err(e.at_argument(index, Some(name), None));
        }
        self.args.push(a);
        Ok(())
    }

    /// Input `i`'s view.
    fn view(&self, i: usize) -> Option<&ArrayView> {
        self.args.get(i).and_then(PyArg::view)
    }

    /// Run `op`, the runtime's op call, on the inputs and `out` (argument `out_index` of the
    /// `caijit.ops` function; `None`: `Out::Alloc`) on the launch device, with the GIL
    /// released. Returns the result: the new array, else `out`, else None (`fill`).
    fn run(
        mut self,
        out: Option<&Bound<'py, PyAny>>,
        out_index: usize,
        op: impl for<'a> FnOnce(&Call<'_>, &[Operand<'a>], Out<'a>) -> cai_runtime::Result<Option<RtArray>> + Send,
    ) -> PyCaiResult<Py<PyAny>> {
        let inputs = self.args.len();
        if let Some(o) = out {
            self.input(out_index, "out", o)?;
        }
        let OpCall { py, stream, mut args, .. } = self;
        let (result, launched) = py.detach(|| {
            let ctx = match launch_device(&mut args, stream.as_deref()).and_then(|d| Ok(Context::new(d)?)) {
                Ok(ctx) => ctx,
                Err(e) => return (Err(e), None),
            };
            let call = Call::new(&ctx, stream.as_ref());
            let operands: SmallVec<[Operand; 3]> = args[..inputs].iter().filter_map(operand).collect();
            let out = args.get(inputs).and_then(PyArg::view).map_or(Out::Alloc, Out::Into);
            let result = op(&call, &operands, out).map_err(PyCaiError::from);
            let launched = call.stream().map(|on| (ctx.clone(), on));
            (result, launched)
        });
        // With the GIL: DLPack capsules are handed over to be released after the work that reads them.
        let released = match launched {
            Some((ctx, on)) => release_after(&ctx, on, args),
            None => Ok(()),
        };
        let result = result?;
        released?;
        match (result, out) {
            (Some(inner), _) => Ok(Py::new(py, DeviceArray { inner })?.into_any()),
            (None, Some(o)) => Ok(o.clone().unbind()),
            (None, None) => Ok(py.None()),
        }
    }
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
    c.run(out, 3, move |call, v, o| call.axpy(a, v[0], v[1], o))
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
    c.run(out, 2, move |call, v, o| call.scale(v[0], a, o))
}

/// Every element of `out` set to `value`.
#[pyfunction]
#[pyo3(signature = (out, value, stream = None))]
pub fn fill(py: Python<'_>, out: &Bound<'_, PyAny>, value: &Bound<'_, PyAny>, stream: Option<&Bound<'_, PyAny>>) -> PyCaiResult<()> {
    let mut c = OpCall::new(py, "fill", stream)?;
    c.input(0, "out", out)?;
    let value = number("fill", 1, "value", value)?;
    c.run(None, 0, move |call, v, _| call.fill(v[0].view(), value).map(|()| None))?;
    Ok(())
}

/// `cast`'s target dtype as `caijit.ops` reads it: a dtype's own name directly, anything
/// else through `caijit.ops._dtype_name` (NumPy's name, and NumPy's errors), made a caijit
/// dtype as `caijit.empty(shape, name)` makes it.
fn cast_dtype(dtype: &Bound<'_, PyAny>) -> PyCaiResult<DType> {
    if let Some(d) = dtype.cast::<PyString>().ok().and_then(|s| DType::from_name(&s.to_cow().ok()?)) {
        return Ok(d);
    }
    static NAME: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    let py = dtype.py();
    let f = NAME.get_or_try_init(py, || -> PyResult<_> { Ok(py.import("caijit.ops")?.getattr("_dtype_name")?.unbind()) })?;
    dtype_from_py(&f.bind(py).call1((dtype,))?)
}

/// `out = x` converted to `dtype` (`out` None: a new array; else `out` must be of
/// `dtype`); returns the result.
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
    let to = cast_dtype(dtype).map_err(|e| e.at_argument(1, Some("dtype"), None))?;
    c.run(out, 2, move |call, v, o| call.cast(v[0], to, o))
}

/// `out = a (op) b` with NumPy broadcasting; `op` names a `BinaryOp` ("add", "maximum",
/// ...). Returns the result.
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
    c.run(out, 2, move |call, v, o| call.binary(op, v[0], v[1], o))
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
    c.run(out, 1, |call, v, o| call.ascontiguous(v[0], o))
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
    let mut c = OpCall::new(py, "copy_contiguous", stream)?;
    c.input(0, "src", src)?;
    c.input(1, "dst", dst)?;
    c.run(None, 0, |call, v, _| call.copy_contiguous(v[0].view(), v[1].view()).map(|()| None))?;
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
    c.run(out, 1, |call, v, o| call.transpose(v[0], o))
}

/// Sum (`op == "sum"`) or maximum (`"max"`) of `x`: over the whole array (`axis` None), or
/// over the last axis (`axis` -1 or the last axis's index). Returns the result.
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
    let r = Reduction::from_name(op)?;
    let mut c = OpCall::new(py, r.name(), stream)?;
    c.input(0, "x", x)?;
    let index =
        match axis {
            None => None,
            Some(a) => Some(a.extract::<i64>().map_err(|_| {
                PyCaiError::argument(format!("{}: axis must be None or an int, got {}", r.name(), crate::pyobj::type_name(a)))
            })?),
        };
    let axis = Axis::from_index(r.name(), index, c.view(0).map_or(0, ArrayView::ndim))?;
    c.run(out, 2, move |call, v, o| call.reduce(r, v[0], axis, o))
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
    c.run(out, 1, |call, v, o| call.softmax(v[0], o))
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
    let op = ops::unary_op(op)?;
    let mut c = OpCall::new(py, op.name, stream)?;
    c.input(0, "x", x)?;
    c.run(out, 1, move |call, v, o| call.unary(op, v[0], o))
}

/// The registry of elementwise unary ops: `(name, doc, dtype names)` of each.
#[pyfunction]
pub fn unary_ops() -> Vec<(&'static str, &'static str, Vec<&'static str>)> {
    ops::UNARY_OPS.iter().map(|o| (o.name, o.doc, o.dtypes().map(|d| d.name()).collect())).collect()
}
