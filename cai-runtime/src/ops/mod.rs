//! The kernel library (`kernels/ops/*.cu`) as Rust functions over CAI arrays: the same op
//! calls `caijit.ops` makes from Python. Each library kernel is a
//! [`Dispatcher`](crate::dispatch::Dispatcher), made on first use; an op asks it for the
//! instance its dtypes name ([`Dispatcher::instance`](crate::dispatch::Dispatcher::instance)),
//! compiled (or found in the library's bundle, [`library_programs`]) and loaded once per
//! device and template arguments, and cached there.
//!
//! An op call owns everything between its arguments and its launches: the checks, the
//! result's shape and NumPy's result dtype, `out` (given, of any strides, and checked; or
//! allocated), the launch stream, and strided inputs, by the op's entry in the
//! [registry](registry()): kernels over `caijit::Array` read any strides, pointer kernels
//! get C-ordered copies ([`Strided`]). Each is decided once per call.
//!
//! # Examples
//! ```no_run
//! # fn f(ctx: &std::sync::Arc<cai_runtime::runtime::Context>, x: &cai_runtime::array::DeviceArray,
//! #      y: &cai_runtime::array::DeviceArray, t: &cai_runtime::cai::ArrayView) -> cai_runtime::Result<()> {
//! use cai_runtime::ops::{self, Alloc, Axis, Out};
//! let z = ops::add(ctx, x, y, Alloc, None)?;           // a new array: x + y, NumPy broadcasting
//! ops::axpy(ctx, 2.0, x, y, &z, None)?;                 // into z: 2 x + y
//! let c = ops::ascontiguous(ctx, t, Alloc, None)?;      // any strided view → C order
//! let s = ops::sum(ctx, t, Axis::Last, Out::Alloc, None)?; // `Out` when decided at run time
//! # Ok(()) }
//! ```
//!
//! # Streams and memory
//! A call runs on the stream given, else on the stream the protocol picks from its arrays
//! ([`launch_stream`](crate::launch::launch_stream)), ordered against each array's producer.
//! New results and temporaries (copies of strided inputs, reduction scratch) are allocated
//! on the call's device, stream-ordered on that stream, from caijit's pool; temporaries are
//! freed on it before the call returns. (A result only lives on a stream caijit can keep:
//! see [`Out::Alloc`].)

mod call;
mod kernels;
mod library;
mod registry;
mod rules;

use std::sync::Arc;

pub use call::{Alloc, Call, Operand, Out, OutArg};
pub use kernels::library_programs;
pub use registry::{registry, unary_op, Axis, BinaryOp, OpSpec, Reduction, Strided, UnaryOp, UNARY_OPS};
pub use rules::{broadcast_shape, reduction_dtype};

use crate::cai::{ArrayView, DType};
use crate::error::Result;
use crate::launch::{Arg, Num};
use crate::runtime::{Context, Stream};
use registry::{ASCONTIGUOUS, AXPY, CAST, FILL, SCALE, SOFTMAX, TRANSPOSE};
use rules::Planned;

/// An op of the library with the parameters that decide its result (beside its arrays):
/// what [`result`] is asked about. An op call plans its result by the same function.
#[derive(Clone, Copy, Debug)]
pub enum Op<'o> {
    Axpy,
    Scale,
    Cast(DType),
    Binary(BinaryOp),
    Ascontiguous,
    Transpose,
    Reduce(Reduction, Axis),
    Softmax,
    Unary(&'o UnaryOp),
}

impl Op<'_> {
    /// The op's rule: its operands' checks, and the result it makes of `v`.
    fn plan(self, v: &[&ArrayView]) -> Result<Planned> {
        let arity = match self {
            Op::Axpy | Op::Binary(_) => 2,
            _ => 1,
        };
        if v.len() != arity {
            return Err(crate::error::Error::argument(format!("{}: takes {arity} arrays, got {}", self.name(), v.len())));
        }
        match self {
            Op::Axpy => rules::axpy(v[0], v[1]),
            Op::Scale | Op::Ascontiguous => Ok(Planned::like(v[0])),
            Op::Cast(to) => rules::cast(v[0], to),
            Op::Binary(op) => rules::binary(op, v[0], v[1]),
            Op::Transpose => rules::transpose(v[0]),
            Op::Reduce(r, axis) => rules::reduce(r, v[0], axis),
            Op::Softmax => rules::softmax(v[0]),
            Op::Unary(op) => rules::unary(op, v[0]),
        }
    }

    /// The op's name, as its errors and its Python function carry it.
    pub fn name(self) -> &'static str {
        match self {
            Op::Axpy => AXPY.name,
            Op::Scale => SCALE.name,
            Op::Cast(_) => CAST.name,
            Op::Binary(op) => op.name(),
            Op::Ascontiguous => ASCONTIGUOUS.name,
            Op::Transpose => TRANSPOSE.name,
            Op::Reduce(r, _) => r.name(),
            Op::Softmax => SOFTMAX.name,
            Op::Unary(op) => op.name,
        }
    }
}

/// The shape and dtype of the array `op` allocates for inputs `inputs` (only their shapes
/// and dtypes are read), or the error the call would raise for them: what a framework's
/// shape function (PyTorch's fake tensors, say) asks, with no GPU and by the op's own rule.
pub fn result(op: Op<'_>, inputs: &[&ArrayView]) -> Result<(Vec<usize>, DType)> {
    op.plan(inputs).map(|p| (p.shape.to_vec(), p.dtype))
}

/// Whether `out` may receive the result of `op` on `inputs` (its shape, dtype, and no
/// element sharing another's memory), as a call with `out` checks it: [`result`]'s
/// counterpart for an op's `out=` form.
pub fn check_out(op: Op<'_>, inputs: &[&ArrayView], out: &ArrayView) -> Result<()> {
    op.plan(inputs)?.check_out(op.name(), out)
}

impl Call<'_> {
    /// `out = a * x + y` (`out` may be `y`). `a` is converted to the arrays' dtype as a
    /// launch converts a scalar: exactly or with an error, never by truncation.
    pub fn axpy<'a, O: OutArg<'a>>(
        &self,
        a: impl Into<Num>,
        x: impl Into<Operand<'a>>,
        y: impl Into<Operand<'a>>,
        out: O,
    ) -> Result<O::Output> {
        let a = a.into();
        let inputs = [x.into(), y.into()];
        self.run(AXPY, &inputs, out.out(), |v| Op::Axpy.plan(v), |l, v, o| kernels::axpy(l, a, v[0], v[1], o)).map(O::finish)
    }

    /// `out = a * x`.
    pub fn scale<'a, O: OutArg<'a>>(&self, x: impl Into<Operand<'a>>, a: impl Into<Num>, out: O) -> Result<O::Output> {
        let a = a.into();
        self.run(SCALE, &[x.into()], out.out(), |v| Op::Scale.plan(v), |l, v, o| kernels::scale(l, v[0], a, o)).map(O::finish)
    }

    /// Every element of the C-contiguous `out` = `value` (converted exactly, or refused).
    pub fn fill(&self, out: &ArrayView, value: impl Into<Num>) -> Result<()> {
        let value = value.into();
        // `out` is also the op's operand, so that the policy refuses a strided one by name.
        self.run(FILL, &[out.into()], Out::Into(out), |v| Ok(Planned::like(v[0])), |l, _, o| kernels::fill(l, o, value)).map(drop)
    }

    /// `x` converted to `dtype`, elementwise as C++ converts (real types: bool, integers,
    /// float16, bfloat16, float32, float64).
    pub fn cast<'a, O: OutArg<'a>>(&self, x: impl Into<Operand<'a>>, dtype: DType, out: O) -> Result<O::Output> {
        self.run(CAST, &[x.into()], out.out(), |v| Op::Cast(dtype).plan(v), |l, v, o| kernels::cast(l, v[0], o)).map(O::finish)
    }

    /// `a (op) b` elementwise with NumPy broadcasting, one real dtype (mixed dtypes are
    /// refused); any strides.
    pub fn binary<'a, O: OutArg<'a>>(
        &self,
        op: BinaryOp,
        a: impl Into<Operand<'a>>,
        b: impl Into<Operand<'a>>,
        out: O,
    ) -> Result<O::Output> {
        let inputs = [a.into(), b.into()];
        self.run(op.spec(), &inputs, out.out(), |v| Op::Binary(op).plan(v), |l, v, o| kernels::binary(l, op, v[0], v[1], o)).map(O::finish)
    }

    /// A C-ordered copy of any strided view (rank ≤ 8 unless C-contiguous: then the
    /// driver's copy).
    pub fn ascontiguous<'a, O: OutArg<'a>>(&self, x: impl Into<Operand<'a>>, out: O) -> Result<O::Output> {
        self.run(ASCONTIGUOUS, &[x.into()], out.out(), |v| Op::Ascontiguous.plan(v), |l, v, o| kernels::ascontiguous(l, v[0], o))
            .map(O::finish)
    }

    /// The transpose of the 2-D `x`, C-ordered.
    pub fn transpose<'a, O: OutArg<'a>>(&self, x: impl Into<Operand<'a>>, out: O) -> Result<O::Output> {
        self.run(TRANSPOSE, &[x.into()], out.out(), |v| Op::Transpose.plan(v), |l, v, o| kernels::transpose(l, v[0], o)).map(O::finish)
    }

    /// The reduction `r` of `x` over `axis`: NumPy's result dtype ([`reduction_dtype`]) for
    /// a new array; a given `out` may have any real dtype (the result is converted into
    /// it), and one element of any shape for [`Axis::All`].
    pub fn reduce<'a, O: OutArg<'a>>(&self, r: Reduction, x: impl Into<Operand<'a>>, axis: Axis, out: O) -> Result<O::Output> {
        let launch = |l: &kernels::OpStream<'_>, v: &[&ArrayView], o: &ArrayView| match axis {
            Axis::All => kernels::reduce_all(l, r, v[0], o),
            Axis::Last => {
                let cols = v[0].shape().last().copied().unwrap_or(1);
                kernels::reduce_rows(l, r, v[0], o, v[0].size() / cols, cols)
            }
        };
        self.run(r.spec(), &[x.into()], out.out(), |v| Op::Reduce(r, axis).plan(v), launch).map(O::finish)
    }

    /// Softmax over the last axis (numerically stable) of the floating `x`.
    pub fn softmax<'a, O: OutArg<'a>>(&self, x: impl Into<Operand<'a>>, out: O) -> Result<O::Output> {
        self.run(SOFTMAX, &[x.into()], out.out(), |v| Op::Softmax.plan(v), |l, v, o| kernels::softmax(l, v[0], o)).map(O::finish)
    }

    /// `op(x)` for an op of [`UNARY_OPS`] (`out` may be `x`).
    pub fn unary<'a, O: OutArg<'a>>(&self, op: &UnaryOp, x: impl Into<Operand<'a>>, out: O) -> Result<O::Output> {
        self.run(op.spec(), &[x.into()], out.out(), |v| Op::Unary(op).plan(v), |l, v, o| kernels::unary(l, op, v[0], o)).map(O::finish)
    }

    /// Copy the C-contiguous `src` into the C-contiguous `dst` (same dtype and size, any
    /// shapes) with the driver's copy, ordered as a launch is
    /// ([`copy_contiguous`](crate::launch::copy_contiguous); no op of the registry, so no
    /// result or policy, but recorded in [`Call::stream`] as an op is).
    pub fn copy_contiguous(&self, src: &ArrayView, dst: &ArrayView) -> Result<()> {
        self.launched_on(None);
        let stream = self.requested.map(|s| &**s);
        let on = crate::launch::copy_contiguous(self.ctx, &Arg::Array(src), &Arg::Array(dst), stream, true)?;
        self.launched_on(Some(on));
        Ok(())
    }
}

/// The free functions: each makes a [`Call`] on `ctx` and `stream` and calls its method.
macro_rules! free_fns {
    ($($(#[$doc:meta])* fn $name:ident($($arg:ident: $ty:ty),*) => $method:ident($($pass:expr),*);)*) => {$(
        $(#[$doc])*
        pub fn $name<'a, O: OutArg<'a>>(ctx: &Arc<Context>, $($arg: $ty,)* out: O, stream: Option<&Arc<Stream>>) -> Result<O::Output> {
            Call::new(ctx, stream).$method($($pass,)* out)
        }
    )*};
}

free_fns! {
    /// `out = a * x + y` ([`Call::axpy`]).
    fn axpy(a: impl Into<Num>, x: impl Into<Operand<'a>>, y: impl Into<Operand<'a>>) => axpy(a, x, y);
    /// `out = a * x` ([`Call::scale`]).
    fn scale(x: impl Into<Operand<'a>>, a: impl Into<Num>) => scale(x, a);
    /// `x` converted to `dtype` ([`Call::cast`]).
    fn cast(x: impl Into<Operand<'a>>, dtype: DType) => cast(x, dtype);
    /// `a (op) b` with NumPy broadcasting ([`Call::binary`]).
    fn binary(op: BinaryOp, a: impl Into<Operand<'a>>, b: impl Into<Operand<'a>>) => binary(op, a, b);
    /// `a + b` with NumPy broadcasting ([`Call::binary`]).
    fn add(a: impl Into<Operand<'a>>, b: impl Into<Operand<'a>>) => binary(BinaryOp::Add, a, b);
    /// `a - b` with NumPy broadcasting ([`Call::binary`]).
    fn subtract(a: impl Into<Operand<'a>>, b: impl Into<Operand<'a>>) => binary(BinaryOp::Subtract, a, b);
    /// `a * b` with NumPy broadcasting ([`Call::binary`]).
    fn multiply(a: impl Into<Operand<'a>>, b: impl Into<Operand<'a>>) => binary(BinaryOp::Multiply, a, b);
    /// `a / b` with NumPy broadcasting (integer division truncates, as in C++).
    fn divide(a: impl Into<Operand<'a>>, b: impl Into<Operand<'a>>) => binary(BinaryOp::Divide, a, b);
    /// The elementwise maximum with NumPy broadcasting ([`Call::binary`]).
    fn maximum(a: impl Into<Operand<'a>>, b: impl Into<Operand<'a>>) => binary(BinaryOp::Maximum, a, b);
    /// The elementwise minimum with NumPy broadcasting ([`Call::binary`]).
    fn minimum(a: impl Into<Operand<'a>>, b: impl Into<Operand<'a>>) => binary(BinaryOp::Minimum, a, b);
    /// A C-ordered copy of any strided view ([`Call::ascontiguous`]).
    fn ascontiguous(x: impl Into<Operand<'a>>) => ascontiguous(x);
    /// The transpose of a 2-D array ([`Call::transpose`]).
    fn transpose(x: impl Into<Operand<'a>>) => transpose(x);
    /// The sum of `x` over `axis` (16-bit floats accumulate in float32, integers in 64
    /// bits; [`Call::reduce`]).
    fn sum(x: impl Into<Operand<'a>>, axis: Axis) => reduce(Reduction::Sum, x, axis);
    /// The maximum of `x` over `axis` ([`Call::reduce`]).
    fn max(x: impl Into<Operand<'a>>, axis: Axis) => reduce(Reduction::Max, x, axis);
    /// Softmax over the last axis ([`Call::softmax`]).
    fn softmax(x: impl Into<Operand<'a>>) => softmax(x);
}

/// Set every element of the C-contiguous `out` to `value` ([`Call::fill`]).
pub fn fill(ctx: &Arc<Context>, out: &ArrayView, value: impl Into<Num>, stream: Option<&Arc<Stream>>) -> Result<()> {
    Call::new(ctx, stream).fill(out, value)
}

/// `op(x)` for the op of [`UNARY_OPS`] named `op` ([`Call::unary`]).
pub fn unary<'a, O: OutArg<'a>>(
    ctx: &Arc<Context>,
    op: &str,
    x: impl Into<Operand<'a>>,
    out: O,
    stream: Option<&Arc<Stream>>,
) -> Result<O::Output> {
    Call::new(ctx, stream).unary(unary_op(op)?, x, out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(shape: &[usize], dtype: DType) -> ArrayView {
        ArrayView::contiguous(0x1000, shape, dtype, false).unwrap()
    }

    #[test]
    fn result_is_what_a_call_plans_without_a_gpu() {
        let (a, b) = (view(&[3, 1], DType::F32), view(&[4], DType::F32));
        assert_eq!(result(Op::Binary(BinaryOp::Add), &[&a, &b]).unwrap(), (vec![3, 4], DType::F32));
        let i8s = view(&[3, 5], DType::I8);
        assert_eq!(result(Op::Reduce(Reduction::Sum, Axis::Last), &[&i8s]).unwrap(), (vec![3], DType::I64));
        assert_eq!(result(Op::Cast(DType::BF16), &[&a]).unwrap(), (vec![3, 1], DType::BF16));
        assert_eq!(result(Op::Transpose, &[&i8s]).unwrap(), (vec![5, 3], DType::I8));
        assert_eq!(result(Op::Unary(unary_op("abs").unwrap()), &[&a]).unwrap(), (vec![3, 1], DType::F32));
        let e = result(Op::Binary(BinaryOp::Add), &[&a, &view(&[4], DType::F64)]).unwrap_err().to_string();
        assert!(e.contains("add: operands are float32 and float64"), "{e}");
        let e = result(Op::Axpy, &[&a]).unwrap_err().to_string();
        assert!(e.contains("axpy: takes 2 arrays, got 1"), "{e}");
        assert_eq!(Op::Reduce(Reduction::Max, Axis::All).name(), "max");
        check_out(Op::Binary(BinaryOp::Add), &[&a, &b], &view(&[3, 4], DType::F32)).unwrap();
        let e = check_out(Op::Binary(BinaryOp::Add), &[&a, &b], &view(&[3], DType::F32)).unwrap_err().to_string();
        assert!(e.contains("add: out must be a float32 array of shape [3, 4]"), "{e}");
        let broadcast = ArrayView::new(0x1000, &[3, 4], Some(&[0, 4]), DType::F32, false, None).unwrap();
        let e = check_out(Op::Binary(BinaryOp::Add), &[&a, &b], &broadcast).unwrap_err().to_string();
        assert!(e.contains("out has elements that share memory"), "{e}");
        check_out(Op::Reduce(Reduction::Sum, Axis::All), &[&i8s], &view(&[1, 1], DType::F32)).unwrap();
    }
}
