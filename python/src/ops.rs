//! `caijit._native` entry points of the kernel library: `cai_runtime::ops` over Python arrays.
//!
//! Arrays and streams are converted as a launch converts them (any CAI or DLPack object,
//! caijit's own arrays with their device known); checks, grids and launches are
//! `cai_runtime::ops`'. `caijit.ops` adds NumPy's conveniences: result allocation, dtype
//! promotion, copies of strided inputs.

use std::sync::Arc;

use cai_runtime::cai::ArrayView;
use cai_runtime::launch::{launch_stream, Num};
use cai_runtime::ops::{self, BinaryOp};
use cai_runtime::runtime::{Context, Stream as RtStream};
use pyo3::prelude::*;
use smallvec::SmallVec;

use crate::args::{arg_from_py, numpy_scalar, python_number, release_after, ArgContext, PyArg};
use crate::errors::{PyCaiError, PyCaiResult};
use crate::kernel::launch_device;
use crate::stream::stream_from_py;

/// What an op receives: its arrays' views, their device's context and the launch stream.
struct Call<'a, const N: usize> {
    ctx: &'a Arc<Context>,
    arrays: [&'a ArrayView; N],
    stream: Option<&'a RtStream>,
}

/// Convert `arrays` (named, in the op's order) and `stream`, then run `op` on the arrays'
/// device with the GIL released.
fn call<const N: usize>(
    py: Python<'_>,
    what: &str,
    arrays: [(&str, &Bound<'_, PyAny>); N],
    stream: Option<&Bound<'_, PyAny>>,
    op: impl for<'a> FnOnce(Call<'a, N>) -> cai_runtime::Result<()> + Send,
) -> PyCaiResult<()> {
    let stream = stream.map(stream_from_py).transpose()?.flatten();
    let mut cx = ArgContext::new(stream.as_deref().map(RtStream::handle));
    let mut converted: SmallVec<[PyArg; 4]> =
        arrays.iter().enumerate().map(|(i, (_, a))| arg_from_py(i, a, &mut cx)).collect::<Result<_, _>>()?;
    let device = launch_device(&mut converted, stream.as_deref())?;
    let mut views: SmallVec<[&ArrayView; 4]> = SmallVec::new();
    for ((name, obj), a) in arrays.iter().zip(&converted) {
        let not_array = || -> PyCaiError {
            let ty = obj.get_type().name().map(|n| n.to_string()).unwrap_or_default();
            PyCaiError::argument(format!("{what}: {name} must be a CUDA array, got {ty}"))
        };
        views.push(a.view().ok_or_else(not_array)?);
    }
    let arrays: [&ArrayView; N] = std::array::from_fn(|i| views[i]);
    let on = launch_stream(arrays, stream.as_deref());
    let ctx = py.detach(|| Context::new(device))?;
    let done = py.detach(|| op(Call { ctx: &ctx, arrays, stream: stream.as_deref() }));
    drop(views);
    // Also after a failure: an op of several kernels may have enqueued some of them.
    release_after(&ctx, on, converted)?;
    Ok(done?)
}

/// A Python or NumPy number as an op's scalar (converted to the arrays' dtype exactly, or
/// refused), read as a launch reads a scalar argument.
fn number(what: &str, obj: &Bound<'_, PyAny>) -> PyCaiResult<Num> {
    if let Some(n) = python_number(0, obj)? {
        return Ok(n);
    }
    match numpy_scalar(0, obj)? {
        Some((n, _)) => Ok(n),
        None => Err(PyCaiError::argument(format!("{what}: expected a number, got {}", obj.get_type().name()?))),
    }
}

/// `out = a * x + y`.
#[pyfunction]
#[pyo3(signature = (a, x, y, out, stream = None))]
pub fn axpy(
    py: Python<'_>,
    a: &Bound<'_, PyAny>,
    x: &Bound<'_, PyAny>,
    y: &Bound<'_, PyAny>,
    out: &Bound<'_, PyAny>,
    stream: Option<&Bound<'_, PyAny>>,
) -> PyCaiResult<()> {
    let a = number("axpy", a)?;
    call(py, "axpy", [("x", x), ("y", y), ("out", out)], stream, |c| ops::axpy(c.ctx, a, c.arrays[0], c.arrays[1], c.arrays[2], c.stream))
}

/// `out = a * x`.
#[pyfunction]
#[pyo3(signature = (x, a, out, stream = None))]
pub fn scale(
    py: Python<'_>,
    x: &Bound<'_, PyAny>,
    a: &Bound<'_, PyAny>,
    out: &Bound<'_, PyAny>,
    stream: Option<&Bound<'_, PyAny>>,
) -> PyCaiResult<()> {
    let a = number("scale", a)?;
    call(py, "scale", [("x", x), ("out", out)], stream, |c| ops::scale(c.ctx, c.arrays[0], a, c.arrays[1], c.stream))
}

/// Every element of `out` set to `value`.
#[pyfunction]
#[pyo3(signature = (out, value, stream = None))]
pub fn fill(py: Python<'_>, out: &Bound<'_, PyAny>, value: &Bound<'_, PyAny>, stream: Option<&Bound<'_, PyAny>>) -> PyCaiResult<()> {
    let value = number("fill", value)?;
    call(py, "fill", [("out", out)], stream, |c| ops::fill(c.ctx, c.arrays[0], value, c.stream))
}

/// `out = x` converted to `out`'s dtype.
#[pyfunction]
#[pyo3(signature = (x, out, stream = None))]
pub fn cast(py: Python<'_>, x: &Bound<'_, PyAny>, out: &Bound<'_, PyAny>, stream: Option<&Bound<'_, PyAny>>) -> PyCaiResult<()> {
    call(py, "cast", [("x", x), ("out", out)], stream, |c| ops::cast(c.ctx, c.arrays[0], c.arrays[1], c.stream))
}

/// `out = a (op) b` with NumPy broadcasting; `op` names a `BinaryOp` ("add", "maximum", ...).
#[pyfunction]
#[pyo3(signature = (op, a, b, out, stream = None))]
pub fn binary(
    py: Python<'_>,
    op: &str,
    a: &Bound<'_, PyAny>,
    b: &Bound<'_, PyAny>,
    out: &Bound<'_, PyAny>,
    stream: Option<&Bound<'_, PyAny>>,
) -> PyCaiResult<()> {
    let op = BinaryOp::from_name(op).ok_or_else(|| PyCaiError::argument(format!("no binary operation named {op:?}")))?;
    call(py, op.name(), [("a", a), ("b", b), ("out", out)], stream, |c| {
        ops::binary(c.ctx, op, c.arrays[0], c.arrays[1], c.arrays[2], c.stream)
    })
}

/// A C-contiguous copy of any strided view into `out` (the driver's copy when `x` is
/// C-contiguous).
#[pyfunction]
#[pyo3(signature = (x, out, stream = None))]
pub fn ascontiguous(py: Python<'_>, x: &Bound<'_, PyAny>, out: &Bound<'_, PyAny>, stream: Option<&Bound<'_, PyAny>>) -> PyCaiResult<()> {
    call(py, "ascontiguous", [("x", x), ("out", out)], stream, |c| ops::ascontiguous(c.ctx, c.arrays[0], c.arrays[1], c.stream))
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
    call(py, "copy_contiguous", [("src", src), ("dst", dst)], stream, |c| {
        copy_contiguous(c.ctx, &Arg::Array(c.arrays[0]), &Arg::Array(c.arrays[1]), c.stream, true).map(drop)
    })
}

/// The 2-D transpose of `x` into `out`.
#[pyfunction]
#[pyo3(signature = (x, out, stream = None))]
pub fn transpose(py: Python<'_>, x: &Bound<'_, PyAny>, out: &Bound<'_, PyAny>, stream: Option<&Bound<'_, PyAny>>) -> PyCaiResult<()> {
    call(py, "transpose", [("x", x), ("out", out)], stream, |c| ops::transpose(c.ctx, c.arrays[0], c.arrays[1], c.stream))
}

/// Sum (`op == "sum"`) or maximum (`"max"`) of `x`: over the whole array into the
/// one-element `out` (`axis` None), or over the last axis (`axis` -1).
#[pyfunction]
#[pyo3(signature = (op, x, out, axis = None, stream = None))]
pub fn reduce(
    py: Python<'_>,
    op: &str,
    x: &Bound<'_, PyAny>,
    out: &Bound<'_, PyAny>,
    axis: Option<i64>,
    stream: Option<&Bound<'_, PyAny>>,
) -> PyCaiResult<()> {
    let f = match (op, axis) {
        ("sum", None) => ops::sum,
        ("max", None) => ops::max,
        ("sum", Some(-1)) => ops::sum_last_axis,
        ("max", Some(-1)) => ops::max_last_axis,
        _ => return Err(PyCaiError::argument(format!("no reduction {op:?} over axis {axis:?} (sum or max; None or -1)"))),
    };
    call(py, op, [("x", x), ("out", out)], stream, |c| f(c.ctx, c.arrays[0], c.arrays[1], c.stream))
}

/// Softmax over the last axis of `x` into `out`.
#[pyfunction]
#[pyo3(signature = (x, out, stream = None))]
pub fn softmax(py: Python<'_>, x: &Bound<'_, PyAny>, out: &Bound<'_, PyAny>, stream: Option<&Bound<'_, PyAny>>) -> PyCaiResult<()> {
    call(py, "softmax", [("x", x), ("out", out)], stream, |c| ops::softmax(c.ctx, c.arrays[0], c.arrays[1], c.stream))
}

/// `out = op(x)` for an elementwise op of the library's registry (`cai_runtime::ops::UNARY_OPS`).
#[pyfunction]
#[pyo3(signature = (op, x, out, stream = None))]
pub fn unary(py: Python<'_>, op: &str, x: &Bound<'_, PyAny>, out: &Bound<'_, PyAny>, stream: Option<&Bound<'_, PyAny>>) -> PyCaiResult<()> {
    let op = ops::unary_op(op)?.name;
    call(py, op, [("x", x), ("out", out)], stream, |c| ops::unary(c.ctx, op, c.arrays[0], c.arrays[1], c.stream))
}

/// The registry of elementwise unary ops: `(name, doc, dtype names)` of each.
#[pyfunction]
pub fn unary_ops() -> Vec<(&'static str, &'static str, Vec<&'static str>)> {
    ops::UNARY_OPS.iter().map(|o| (o.name, o.doc, o.dtypes.iter().map(|d| d.name()).collect())).collect()
}
