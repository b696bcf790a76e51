//! The kernel library's functions (the `caijit.ops` module, made here): Python arguments
//! converted into a `cai_runtime::ops` call, and its result wrapped.
//!
//! Each op is one native call: each argument converted once, as a launch converts it (any
//! CAI or DLPack object, caijit's own arrays with their device and stream known), the
//! launch device picked as a launch picks it, then one `cai_runtime::ops::Call` with the
//! GIL released, which decides everything else (checks, result shape and dtype, `out`,
//! strided inputs, streams). DLPack capsules are released after the stream the call ran on.
//!
//! A result comes back in the library of the call's first array ([`Framework`]): `out` as
//! given; else a PyTorch call is made by PyTorch's operator (`torch.ops.caijit.<op>`,
//! `caijit/torch.py`, which allocates the tensor and calls back here with `out`); a CuPy
//! call's result is allocated by CuPy (its pool, on the call's device); any other call's
//! result is a new `caijit.DeviceArray`.

use std::sync::Arc;

use cai_runtime::array::DeviceArray as RtArray;
use cai_runtime::cai::{ArrayView, DType};
use cai_runtime::dispatch::launch_device;
use cai_runtime::launch::{Arg, Num};
use cai_runtime::ops::{self, Axis, BinaryOp, Call, Op, Operand, Out, Reduction};
use cai_runtime::runtime::{Context, Stream as RtStream};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyString, PyTuple};
use smallvec::SmallVec;

use crate::args::{self, framework_of, release_after, ArgContext, Framework, PyArg};
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

/// `e`, the error of a call that found no GPU, or the error the op's own rule raises for its
/// inputs (its checks need no GPU), which says what the caller must change first.
fn argument_error_without_a_gpu(planned: Option<Op<'_>>, inputs: &[PyArg], e: PyCaiError) -> PyCaiError {
    let (PyCaiError::Cai(cai_runtime::Error::CudaNotAvailable(_)), Some(op)) = (&e, planned) else { return e };
    let views: SmallVec<[&ArrayView; 2]> = inputs.iter().filter_map(PyArg::view).collect();
    match ops::result(op, &views) {
        Err(wrong) => wrong.into(),
        Ok(_) => e,
    }
}

/// A PyTorch tensor an op wrote (`out`, `fill`'s array) has its version bumped
/// (`caijit.torch._written`), as PyTorch's in-place operations do: autograd then refuses a
/// backward that would read a value it saved before the write. Other arrays: nothing.
fn written(obj: &Bound<'_, PyAny>) -> PyCaiResult<()> {
    if framework_of(obj) == Framework::Torch {
        static WRITTEN: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
        WRITTEN.import(obj.py(), "caijit.torch", "_written")?.call1((obj,))?;
    }
    Ok(())
}

/// The name of the dtype `caijit.ops.cast` reads `dtype` as (`caijit.torch` reads a cast's
/// dtype on tensors by it).
#[pyfunction]
pub fn cast_dtype_name(dtype: &Bound<'_, PyAny>) -> PyCaiResult<&'static str> {
    Ok(cast_dtype(dtype)?.name())
}

/// A call whose first array is a CUDA tensor of PyTorch and that allocates its result:
/// made by PyTorch's operator (`caijit.torch._eager`, which calls `torch.ops.caijit.<op>`),
/// so that the result is a tensor from PyTorch's allocator and autograd and PyTorch's
/// modes see the call. `None` (the call is made here, and refuses a tensor in host memory
/// as any launch does): any other call.
fn by_torch<'py>(
    first: &Bound<'py, PyAny>,
    out: Maybe<'_, 'py>,
    op: &str,
    args: impl FnOnce() -> PyResult<Bound<'py, PyTuple>>,
    params: Option<Bound<'py, PyDict>>,
    stream: Maybe<'_, 'py>,
) -> PyCaiResult<Option<Py<PyAny>>> {
    if out.is_some() || framework_of(first) != Framework::Torch {
        return Ok(None);
    }
    let py = first.py();
    if !first.getattr(pyo3::intern!(py, "is_cuda"))?.is_truthy()? {
        return Ok(None);
    }
    static EAGER: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    let eager = EAGER.import(py, "caijit.torch", "_eager")?;
    Ok(Some(eager.call1((op, args()?, params, stream))?.unbind()))
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

/// A DLPack-only input of an op call: its position among the inputs, its argument index
/// and name, and the object.
type Later<'py> = (usize, usize, &'static str, Bound<'py, PyAny>);

/// One op call from Python: its stream, converted once, and its arrays, each converted once
/// (their conversions keep DLPack capsules alive until the op's work is done).
struct OpCall<'py> {
    py: Python<'py>,
    what: &'static str,
    stream: Option<Arc<RtStream>>,
    cx: ArgContext,
    args: SmallVec<[PyArg; 4]>,
    /// DLPack-only inputs, converted once the stream the call will use is known
    /// ([`ArgContext::imply_stream`]).
    later: SmallVec<[Later<'py>; 1]>,
    /// The library of the first array: the one a new result belongs to.
    framework: Framework,
}

impl<'py> OpCall<'py> {
    fn new(py: Python<'py>, what: &'static str, stream: Option<&Bound<'py, PyAny>>) -> PyCaiResult<Self> {
        let stream = stream.map(stream_from_py).transpose()?.flatten();
        let cx = ArgContext::new(stream.as_deref().map(RtStream::handle));
        Ok(OpCall { py, what, stream, cx, args: SmallVec::new(), later: SmallVec::new(), framework: Framework::Other })
    }

    /// Convert array `name`, argument `index` of the `caijit.ops` function (as a launch
    /// converts one).
    fn input(&mut self, index: usize, name: &'static str, obj: &Bound<'py, PyAny>) -> PyCaiResult<()> {
        if self.args.is_empty() {
            self.framework = framework_of(obj);
        }
        self.cx.keep(obj);
        let a = match args::arg_before_dlpack(index, obj, &mut self.cx).map_err(|e| e.at_argument(index, Some(name), None))? {
            Some(a) => a,
            None => {
                // In its place until `settle` imports it (nothing reads it before).
                self.later.push((self.args.len(), index, name, obj.clone()));
                PyArg::Bytes(Vec::new())
            }
        };
        if a.view().is_none() && self.later.last().is_none_or(|l| l.0 != self.args.len()) {
            return Err(self.not_an_array(index, name, obj));
        }
        self.args.push(a);
        Ok(())
    }

    fn not_an_array(&self, index: usize, name: &str, obj: &Bound<'py, PyAny>) -> PyCaiError {
        let e = PyCaiError::argument(format!("{}: {name} must be a CUDA array, got {}", self.what, crate::pyobj::type_name(obj)));
        e.at_argument(index, Some(name), None)
    }

    /// Import the DLPack-only inputs, asking their producers for the stream the call will
    /// use (as a launch does: `args::args_from_py`).
    fn settle(&mut self) -> PyCaiResult<()> {
        if self.later.is_empty() {
            return Ok(());
        }
        let later = std::mem::take(&mut self.later);
        let pending = |i: usize| later.iter().any(|l| l.0 == i);
        self.cx.imply_stream(self.args.iter().enumerate().filter(|(i, _)| !pending(*i)).map(|(_, a)| a));
        for (at, index, name, obj) in &later {
            let a = args::arg_by_dlpack(*index, obj, &mut self.cx).map_err(|e| e.at_argument(*index, Some(name), None))?;
            if a.view().is_none() {
                return Err(self.not_an_array(*index, name, obj));
            }
            self.args[*at] = a;
        }
        Ok(())
    }

    /// A new CuPy array for the result of `planned` (from CuPy's pool, on the device the
    /// call runs on), or `None` where the call's checks fail (the call raises its own error) or
    /// CuPy has no such dtype (bfloat16: the result is a `caijit.DeviceArray`).
    fn cupy_result(&mut self, planned: Op<'static>) -> PyCaiResult<Option<Bound<'py, PyAny>>> {
        self.settle()?;
        let mut probe: SmallVec<[Arg<'_>; 4]> = self.args.iter().map(PyArg::as_arg).collect();
        // (Without a device the call raises its own error, arguments checked first.)
        let Ok(device) = launch_device(&mut probe, self.stream.as_deref()) else { return Ok(None) };
        let views: SmallVec<[&ArrayView; 2]> = self.args.iter().filter_map(PyArg::view).collect();
        let Ok((shape, dtype)) = ops::result(planned, &views) else { return Ok(None) };
        static EMPTY: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
        let empty = EMPTY.import(self.py, "caijit._frameworks", "cupy_empty")?;
        let made = empty.call1((shape, dtype.name(), device))?;
        Ok((!made.is_none()).then_some(made))
    }

    /// Input `i`'s view (every input converted).
    fn view(&mut self, i: usize) -> PyCaiResult<Option<&ArrayView>> {
        self.settle()?;
        Ok(self.args.get(i).and_then(PyArg::view))
    }

    /// Run `op`, the runtime's op call, on the inputs and `out` (argument `out_index` of the
    /// `caijit.ops` function; `None`: `Out::Alloc`) on the launch device, with the GIL
    /// released. Returns the result: the new array, else `out`, else None (`fill`).
    fn run(
        self,
        out: Option<&Bound<'py, PyAny>>,
        out_index: usize,
        op: impl for<'a> FnOnce(&Call<'_>, &[Operand<'a>], Out<'a>) -> cai_runtime::Result<Option<RtArray>> + Send,
    ) -> PyCaiResult<Py<PyAny>> {
        self.run_as(None, out, out_index, op)
    }

    /// [`run`](Self::run) for the op `planned` (its result allocated by CuPy for a CuPy call).
    fn run_as(
        mut self,
        planned: Option<Op<'static>>,
        out: Option<&Bound<'py, PyAny>>,
        out_index: usize,
        op: impl for<'a> FnOnce(&Call<'_>, &[Operand<'a>], Out<'a>) -> cai_runtime::Result<Option<RtArray>> + Send,
    ) -> PyCaiResult<Py<PyAny>> {
        let inputs = self.args.len();
        let allocated = match (out, planned, self.framework) {
            (None, Some(planned), Framework::Cupy) => self.cupy_result(planned)?,
            _ => None,
        };
        let out = out.or(allocated.as_ref());
        if let Some(o) = out {
            self.input(out_index, "out", o)?;
        }
        self.settle()?;
        let OpCall { py, stream, args, mut cx, .. } = self;
        let (result, launched) = py.detach(|| {
            let mut probe: SmallVec<[Arg<'_>; 4]> = args.iter().map(PyArg::as_arg).collect();
            let ctx = match launch_device(&mut probe, stream.as_deref()).and_then(Context::new) {
                Ok(ctx) => ctx,
                Err(e) => return (Err(argument_error_without_a_gpu(planned, &args[..inputs], e.into())), None),
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
            Some((ctx, on)) => release_after(&ctx, on, args, cx.take_kept()),
            None => Ok(()),
        };
        let result = result?;
        released?;
        match (result, out) {
            (Some(inner), _) => Ok(Py::new(py, DeviceArray { inner })?.into_any()),
            (None, Some(o)) => {
                written(o)?;
                Ok(o.clone().unbind())
            }
            (None, None) => Ok(py.None()),
        }
    }
}

/// ``out = a * x + y`` (``out=y`` updates ``y`` in place).
#[pyfunction]
#[pyo3(signature = (a, x, y, *, out = None, stream = None))]
fn axpy<'py>(
    py: Python<'py>,
    a: &Bound<'py, PyAny>,
    x: &Bound<'py, PyAny>,
    y: &Bound<'py, PyAny>,
    out: Option<&Bound<'py, PyAny>>,
    stream: Option<&Bound<'py, PyAny>>,
) -> PyCaiResult<Py<PyAny>> {
    if let Some(r) = by_torch(x, out, "axpy", || PyTuple::new(py, [a, x, y]), None, stream)? {
        return Ok(r);
    }
    let mut c = OpCall::new(py, "axpy", stream)?;
    c.input(1, "x", x)?;
    c.input(2, "y", y)?;
    let a = number("axpy", 0, "a", a)?;
    c.run_as(Some(Op::Axpy), out, 3, move |call, v, o| call.axpy(a, v[0], v[1], o))
}

/// ``out = a * x``.
#[pyfunction]
#[pyo3(signature = (x, a, *, out = None, stream = None))]
fn scale<'py>(
    py: Python<'py>,
    x: &Bound<'py, PyAny>,
    a: &Bound<'py, PyAny>,
    out: Option<&Bound<'py, PyAny>>,
    stream: Option<&Bound<'py, PyAny>>,
) -> PyCaiResult<Py<PyAny>> {
    if let Some(r) = by_torch(x, out, "scale", || PyTuple::new(py, [x, a]), None, stream)? {
        return Ok(r);
    }
    let mut c = OpCall::new(py, "scale", stream)?;
    c.input(0, "x", x)?;
    let a = number("scale", 1, "a", a)?;
    c.run_as(Some(Op::Scale), out, 2, move |call, v, o| call.scale(v[0], a, o))
}

/// Set every element of the C-contiguous ``out`` to ``value``; returns ``out``.
#[pyfunction]
#[pyo3(signature = (out, value, *, stream = None))]
fn fill<'py>(py: Python<'py>, out: &Bound<'py, PyAny>, value: &Bound<'py, PyAny>, stream: Maybe<'_, 'py>) -> PyCaiResult<Py<PyAny>> {
    let mut c = OpCall::new(py, "fill", stream)?;
    c.input(0, "out", out)?;
    let value = number("fill", 1, "value", value)?;
    c.run(None, 0, move |call, v, _| call.fill(v[0].view(), value).map(|()| None))?;
    written(out)?;
    Ok(out.clone().unbind())
}

/// `cast`'s target dtype: a dtype's own name directly, anything else by NumPy's name for
/// it (`numpy.dtype(dtype).name`, with NumPy's errors; `void16`, the name of a plain 2-byte
/// opaque type, is bfloat16, but not a structured or subarray dtype's), made a caijit dtype as
/// `caijit.empty(shape, name)` makes it. `None` (NumPy's float64) is refused.
fn cast_dtype(dtype: &Bound<'_, PyAny>) -> PyCaiResult<DType> {
    if let Some(d) = dtype.cast::<PyString>().ok().and_then(|s| DType::from_name(&s.to_cow().ok()?)) {
        return Ok(d);
    }
    if dtype.is_none() {
        return Err(PyCaiError::argument("cast: dtype must be a dtype, not None"));
    }
    let np = dtype.py().import("numpy")?.getattr("dtype")?.call1((dtype,))?;
    if !np.getattr("fields")?.is_none() || !np.getattr("subdtype")?.is_none() {
        return Err(PyCaiError::argument(format!("cast: {} is a structured dtype, which no op casts to", np.repr()?)));
    }
    let name = np.getattr("name")?;
    if name.extract::<&str>().is_ok_and(|n| n == "void16") {
        return Ok(DType::BF16);
    }
    dtype_from_py(&name)
}

/// ``x`` converted to ``dtype`` (real types: bool, integers, float16/32/64, bfloat16);
/// a given ``out`` must be of ``dtype``.
#[pyfunction]
#[pyo3(signature = (x, dtype, *, out = None, stream = None))]
fn cast<'py>(
    py: Python<'py>,
    x: &Bound<'py, PyAny>,
    dtype: &Bound<'py, PyAny>,
    out: Option<&Bound<'py, PyAny>>,
    stream: Option<&Bound<'py, PyAny>>,
) -> PyCaiResult<Py<PyAny>> {
    if let Some(r) = by_torch(x, out, "cast", || PyTuple::new(py, [x, dtype]), None, stream)? {
        return Ok(r);
    }
    let mut c = OpCall::new(py, "cast", stream)?;
    c.input(0, "x", x)?;
    let to = cast_dtype(dtype).map_err(|e| e.at_argument(1, Some("dtype"), None))?;
    c.run_as(Some(Op::Cast(to)), out, 2, move |call, v, o| call.cast(v[0], to, o))
}

/// `out = a (op) b` with NumPy broadcasting; `op` names a `BinaryOp` ("add", "maximum",
/// ...; each is a function of `caijit.ops`, made by `binary_ops!`). Returns the result.
fn binary<'py>(
    py: Python<'py>,
    op: &str,
    a: &Bound<'py, PyAny>,
    b: &Bound<'py, PyAny>,
    out: Option<&Bound<'py, PyAny>>,
    stream: Option<&Bound<'py, PyAny>>,
) -> PyCaiResult<Py<PyAny>> {
    let op = BinaryOp::from_name(op).ok_or_else(|| PyCaiError::argument(format!("no binary operation named {op:?}")))?;
    if let Some(r) = by_torch(a, out, op.name(), || PyTuple::new(py, [a, b]), None, stream)? {
        return Ok(r);
    }
    let mut c = OpCall::new(py, op.name(), stream)?;
    c.input(0, "a", a)?;
    c.input(1, "b", b)?;
    c.run_as(Some(Op::Binary(op)), out, 2, move |call, v, o| call.binary(op, v[0], v[1], o))
}

/// A C-contiguous copy of any strided view (rank ≤ 8; negative and zero strides too).
#[pyfunction]
#[pyo3(signature = (x, *, out = None, stream = None))]
fn ascontiguous<'py>(
    py: Python<'py>,
    x: &Bound<'py, PyAny>,
    out: Option<&Bound<'py, PyAny>>,
    stream: Option<&Bound<'py, PyAny>>,
) -> PyCaiResult<Py<PyAny>> {
    if let Some(r) = by_torch(x, out, "ascontiguous", || PyTuple::new(py, [x]), None, stream)? {
        return Ok(r);
    }
    let mut c = OpCall::new(py, "ascontiguous", stream)?;
    c.input(0, "x", x)?;
    c.run_as(Some(Op::Ascontiguous), out, 1, |call, v, o| call.ascontiguous(v[0], o))
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

/// The transpose of a 2-D array, as a C-contiguous array.
#[pyfunction]
#[pyo3(signature = (x, *, out = None, stream = None))]
fn transpose<'py>(
    py: Python<'py>,
    x: &Bound<'py, PyAny>,
    out: Option<&Bound<'py, PyAny>>,
    stream: Option<&Bound<'py, PyAny>>,
) -> PyCaiResult<Py<PyAny>> {
    if let Some(r) = by_torch(x, out, "transpose", || PyTuple::new(py, [x]), None, stream)? {
        return Ok(r);
    }
    let mut c = OpCall::new(py, "transpose", stream)?;
    c.input(0, "x", x)?;
    c.run_as(Some(Op::Transpose), out, 1, |call, v, o| call.transpose(v[0], o))
}

/// Sum (`op == "sum"`) or maximum (`"max"`) of `x`: over the whole array (`axis` None), or
/// over the last axis (`axis` -1 or the last axis's index); each is a function of
/// `caijit.ops`, made by `reductions!`. Returns the result.
fn reduce<'py>(
    py: Python<'py>,
    op: &str,
    x: &Bound<'py, PyAny>,
    out: Option<&Bound<'py, PyAny>>,
    axis: Option<&Bound<'py, PyAny>>,
    stream: Option<&Bound<'py, PyAny>>,
) -> PyCaiResult<Py<PyAny>> {
    let r = Reduction::from_name(op)?;
    let params = || -> PyResult<_> {
        let d = PyDict::new(py);
        d.set_item("axis", axis)?;
        Ok(d)
    };
    if let Some(res) = by_torch(x, out, r.name(), || PyTuple::new(py, [x]), Some(params()?), stream)? {
        return Ok(res);
    }
    let mut c = OpCall::new(py, r.name(), stream)?;
    c.input(0, "x", x)?;
    let index =
        match axis {
            None => None,
            Some(a) => Some(a.extract::<i64>().map_err(|_| {
                PyCaiError::argument(format!("{}: axis must be None or an int, got {}", r.name(), crate::pyobj::type_name(a)))
            })?),
        };
    let axis = Axis::from_index(r.name(), index, c.view(0)?.map_or(0, ArrayView::ndim))?;
    c.run_as(Some(Op::Reduce(r, axis)), out, 2, move |call, v, o| call.reduce(r, v[0], axis, o))
}

/// Softmax over the last axis (numerically stable; float16/bfloat16/float32/float64).
#[pyfunction]
#[pyo3(signature = (x, *, out = None, stream = None))]
fn softmax<'py>(
    py: Python<'py>,
    x: &Bound<'py, PyAny>,
    out: Option<&Bound<'py, PyAny>>,
    stream: Option<&Bound<'py, PyAny>>,
) -> PyCaiResult<Py<PyAny>> {
    if let Some(r) = by_torch(x, out, "softmax", || PyTuple::new(py, [x]), None, stream)? {
        return Ok(r);
    }
    let mut c = OpCall::new(py, "softmax", stream)?;
    c.input(0, "x", x)?;
    c.run_as(Some(Op::Softmax), out, 1, |call, v, o| call.softmax(v[0], o))
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
    if let Some(r) = by_torch(x, out, op.name, || PyTuple::new(py, [x]), None, stream)? {
        return Ok(r);
    }
    let mut c = OpCall::new(py, op.name, stream)?;
    c.input(0, "x", x)?;
    c.run_as(Some(Op::Unary(op)), out, 1, move |call, v, o| call.unary(op, v[0], o))
}

/// The op of the library named `name` (a `caijit.ops` function's name), with its
/// parameters: `dtype`, cast's target; `axis`, a reduction's, of an array of `ndim` axes.
fn op_named(name: &str, dtype: Option<&Bound<'_, PyAny>>, axis: Option<i64>, ndim: usize) -> PyCaiResult<Op<'static>> {
    let needs = |what: &str| PyCaiError::argument(format!("{name}: {what}"));
    Ok(match name {
        "axpy" => Op::Axpy,
        "scale" => Op::Scale,
        "cast" => Op::Cast(cast_dtype(dtype.ok_or_else(|| needs("needs a dtype"))?)?),
        "ascontiguous" => Op::Ascontiguous,
        "transpose" => Op::Transpose,
        "softmax" => Op::Softmax,
        _ => match (BinaryOp::from_name(name), Reduction::from_name(name)) {
            (Some(op), _) => Op::Binary(op),
            (None, Ok(r)) => Op::Reduce(r, Axis::from_index(r.name(), axis, ndim)?),
            (None, Err(_)) => Op::Unary(ops::unary_op(name)?),
        },
    })
}

/// The shape and dtype name of the array the op `name` makes of arrays of `shapes` and
/// `dtypes` (`dtype`: cast's target; `axis`: a reduction's), or the error the op raises
/// for them: the op's own rule, asked without a GPU (by the fake implementations of
/// caijit's PyTorch operators, `caijit/torch.py`).
///
/// `out`, `(shape, dtype, strides in elements)` of an array given as `out=`, is checked as the
/// op checks it.
#[pyfunction]
#[pyo3(signature = (name, shapes, dtypes, *, dtype = None, axis = None, out = None))]
pub fn op_result(
    name: &str,
    shapes: Vec<Vec<usize>>,
    dtypes: Vec<Bound<'_, PyAny>>,
    dtype: Option<&Bound<'_, PyAny>>,
    axis: Option<i64>,
    out: Option<(Vec<usize>, Bound<'_, PyAny>, Vec<i64>)>,
) -> PyCaiResult<(Vec<usize>, &'static str)> {
    if shapes.len() != dtypes.len() {
        return Err(PyCaiError::argument(format!("{name}: {} shapes but {} dtypes", shapes.len(), dtypes.len())));
    }
    let op = op_named(name, dtype, axis, shapes.first().map_or(0, Vec::len))?;
    // Views of no memory (any aligned address: only shapes and dtypes are read).
    let views = shapes
        .iter()
        .zip(&dtypes)
        .map(|(shape, d)| Ok(ArrayView::contiguous(1 << 20, shape, dtype_from_py(d)?, false)?))
        .collect::<PyCaiResult<SmallVec<[ArrayView; 2]>>>()?;
    let inputs: SmallVec<[&ArrayView; 2]> = views.iter().collect();
    if let Some((shape, d, strides)) = out {
        let d = dtype_from_py(&d)?;
        let item = d.itemsize() as i64;
        let bytes: SmallVec<[i64; 4]> = strides.iter().map(|s| s.saturating_mul(item)).collect();
        ops::check_out(op, &inputs, &ArrayView::new(1 << 20, &shape, Some(&bytes), d, false, None)?)?;
    }
    let (shape, dtype) = ops::result(op, &inputs)?;
    Ok((shape, dtype.name()))
}

/// The registry of elementwise unary ops: `(name, doc, dtype names)` of each.
#[pyfunction]
pub fn unary_ops() -> Vec<(&'static str, &'static str, Vec<&'static str>)> {
    ops::UNARY_OPS.iter().map(|o| (o.name, o.doc, o.dtypes().map(|d| d.name()).collect())).collect()
}

// ----- The `caijit.ops` module -----
//
// Made here, with `caijit._native`, so that `caijit.ops` costs nothing to import (a Python
// module of the same functions cost a few tenths of a ms in a process's first op call:
// `python/benchmarks/bench_first_call.py`). The entry
// points above with a Python signature (keyword-only `out` and `stream`) are its functions;
// the binary ops and the reductions share one entry point each, and a macro below makes each
// op's function. `python/caijit/ops.pyi` gives type checkers the same signatures.

const MODULE_DOC: &str = "Custom GPU ops built on caijit's kernel library (``kernels/ops/*.cu``).

Every op accepts any CUDA Array Interface array (CuPy, PyTorch, Numba, JAX, caijit) and
takes ``out=`` (any view whose elements are distinct memory, strided ones written through a
temporary) and ``stream=``. Without ``out=``, the result is of the first array's library: a
PyTorch tensor (the op is then the PyTorch operator ``torch.ops.caijit.<op>``), a CuPy
array, else a new :class:`caijit.DeviceArray`.
Launches follow caijit's stream protocol, so foreign producers are ordered correctly.

>>> import caijit.ops as ops                       # doctest: +SKIP
>>> y = ops.axpy(2.0, x, y0)                       # y = 2 x + y0
>>> z = ops.add(a, b[None, :])                     # NumPy broadcasting
>>> c = ops.ascontiguous(t.T)                      # any strided view -> C order
";

type Maybe<'a, 'py> = Option<&'a Bound<'py, PyAny>>;

/// The library's binary ops, each a function of `caijit.ops` named as its `BinaryOp`.
macro_rules! binary_ops {
    ($($f:ident = $name:literal: $doc:literal;)*) => {
        $(
            #[doc = $doc]
            #[pyfunction]
            #[pyo3(name = $name, signature = (a, b, *, out = None, stream = None))]
            fn $f<'py>(py: Python<'py>, a: &Bound<'py, PyAny>, b: &Bound<'py, PyAny>, out: Maybe<'_, 'py>, stream: Maybe<'_, 'py>) -> PyCaiResult<Py<PyAny>> {
                binary(py, $name, a, b, out, stream)
            }
        )*
        /// Every binary op's function.
        fn binary_functions<'py>(m: &Bound<'py, PyModule>) -> PyResult<Vec<Bound<'py, pyo3::types::PyCFunction>>> {
            Ok(vec![$(wrap_pyfunction!($f, m)?),*])
        }
    };
}

binary_ops! {
    op_add = "add": "``a + b`` with NumPy broadcasting.";
    op_subtract = "subtract": "``a - b`` with NumPy broadcasting.";
    op_multiply = "multiply": "``a * b`` with NumPy broadcasting.";
    op_divide = "divide": "``a / b`` with NumPy broadcasting (integer division truncates, as in C++).";
    op_maximum = "maximum": "Elementwise maximum with NumPy broadcasting.";
    op_minimum = "minimum": "Elementwise minimum with NumPy broadcasting.";
}

/// The library's reductions, each a function of `caijit.ops` named as its `Reduction`.
macro_rules! reductions {
    ($($f:ident = $name:literal: $doc:literal;)*) => {
        $(
            #[doc = $doc]
            #[pyfunction]
            #[pyo3(name = $name, signature = (x, axis = None, *, out = None, stream = None))]
            fn $f<'py>(
                py: Python<'py>,
                x: &Bound<'py, PyAny>,
                axis: Maybe<'_, 'py>,
                out: Maybe<'_, 'py>,
                stream: Maybe<'_, 'py>,
            ) -> PyCaiResult<Py<PyAny>> {
                reduce(py, $name, x, out, axis, stream)
            }
        )*
        /// Every reduction's function.
        fn reduction_functions<'py>(m: &Bound<'py, PyModule>) -> PyResult<Vec<Bound<'py, pyo3::types::PyCFunction>>> {
            Ok(vec![$(wrap_pyfunction!($f, m)?),*])
        }
    };
}

reductions! {
    op_sum = "sum": "Sum over the whole array (``axis=None``) or the last axis. 16-bit floats accumulate in\nfloat32; integers are summed in 64 bits, as NumPy does.";
    op_max = "max": "Maximum over the whole array (``axis=None``) or the last axis.";
}

/// The `caijit.ops` module: the library's functions, `CPP_TYPES` and `__all__`, and
/// `UNARY_OPS` empty: `caijit/__init__.py` makes a Python function for each op of the
/// registry ([`unary_ops`]) and adds it there, to `__all__` and to the module.
pub fn module(py: Python<'_>) -> PyResult<Bound<'_, PyModule>> {
    use pyo3::types::{PyDict, PyList};
    let m = PyModule::new(py, "caijit.ops")?;
    m.setattr("__doc__", MODULE_DOC)?;
    let mut functions =
        vec![wrap_pyfunction!(axpy, &m)?, wrap_pyfunction!(scale, &m)?, wrap_pyfunction!(fill, &m)?, wrap_pyfunction!(cast, &m)?];
    functions.extend(binary_functions(&m)?);
    functions.push(wrap_pyfunction!(ascontiguous, &m)?);
    functions.extend(reduction_functions(&m)?);
    functions.extend([wrap_pyfunction!(transpose, &m)?, wrap_pyfunction!(softmax, &m)?]);
    let all = PyList::empty(py);
    for f in &functions {
        m.add_function(f.clone())?;
        all.append(f.getattr("__name__")?)?;
    }
    all.append("CPP_TYPES")?;
    m.add("UNARY_OPS", PyDict::new(py))?;
    // The C++ element type of each dtype the library supports.
    let cpp = PyDict::new(py);
    for d in DType::ALL {
        cpp.set_item(d.name(), d.cpp_name())?;
    }
    m.add("CPP_TYPES", cpp)?;
    m.add("__all__", all)?;
    Ok(m)
}
