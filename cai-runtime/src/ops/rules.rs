//! What an op call decides before any GPU work, each once per call: its operands' checks,
//! the result's shape and dtype (NumPy's), and what a given `out` must be. Pure functions of
//! the views: tested without a GPU.

use smallvec::SmallVec;

use super::registry::{Axis, BinaryOp, Reduction, Strided, UnaryOp};
use crate::cai::{ArrayView, DType};
use crate::error::{Error, Result};

/// A shape on the stack (ranks up to 8 are the kernels' limit).
pub(crate) type Shape = SmallVec<[usize; 8]>;

/// What a given `out` may be, beside the planned result.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fit {
    /// The result's shape and dtype exactly.
    Exact,
    /// The result's shape, any real dtype (the op converts into it).
    AnyReal,
    /// One element of any real dtype, any shape (a whole-array reduction).
    OneElement,
}

/// The result an op call makes: the shape and dtype of the array it allocates for
/// `Out::Alloc`, and what a given `out` must be.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Planned {
    pub shape: Shape,
    pub dtype: DType,
    pub fit: Fit,
}

impl Planned {
    fn exact(shape: &[usize], dtype: DType) -> Planned {
        Planned { shape: shape.into(), dtype, fit: Fit::Exact }
    }

    /// `x`'s shape and dtype.
    pub fn like(x: &ArrayView) -> Planned {
        Planned::exact(x.shape(), x.dtype())
    }

    /// `out`, an array the caller gave, fits the result: any strides (a strided `out` is
    /// written through a C-ordered temporary), but no element sharing another's memory.
    pub fn check_out(&self, what: &str, out: &ArrayView) -> Result<()> {
        let fits = match self.fit {
            Fit::Exact => out.shape() == self.shape.as_slice() && out.dtype() == self.dtype,
            Fit::AnyReal => out.shape() == self.shape.as_slice() && is_real(out.dtype()),
            Fit::OneElement => out.size() == 1 && is_real(out.dtype()),
        };
        if !fits {
            let want = match self.fit {
                Fit::Exact => format!("a {} array of shape {:?}", self.dtype, self.shape.as_slice()),
                Fit::AnyReal => format!("an array of a real dtype and shape {:?}", self.shape.as_slice()),
                Fit::OneElement => "one element of a real dtype".to_string(),
            };
            return Err(Error::argument(format!("{what}: out must be {want}, got {} {:?}", out.dtype(), out.shape())));
        }
        if !out.is_c_contiguous() && !distinct_elements(out) {
            return Err(Error::argument(format!(
                "{what}: out has elements that share memory (shape {:?}, byte strides {:?}): the result cannot be written into it",
                out.shape(),
                out.strides()
            )));
        }
        Ok(())
    }
}

/// Whether no two elements of `v` share memory (so that writing each writes one place):
/// ordered by stride, each axis steps past everything the smaller ones span. Broadcast
/// (zero-stride) and overlapping views are refused; a few exotic interleaved layouts that
/// do not overlap are refused too.
pub(crate) fn distinct_elements(v: &ArrayView) -> bool {
    let mut axes: SmallVec<[(u64, u64); 8]> =
        v.shape().iter().zip(v.strides()).filter(|(&n, _)| n > 1).map(|(&n, &s)| (s.unsigned_abs(), n as u64)).collect();
    axes.sort_unstable();
    let mut span = v.dtype().itemsize() as u64;
    axes.into_iter().all(|(stride, n)| {
        let steps_past = stride >= span;
        span = span.saturating_add(stride.saturating_mul(n - 1));
        steps_past
    })
}

/// Whether writing `out` may change what an op reads of `input` while it runs: their
/// memory overlaps, unless `out` is exactly `input` (same address, shape and strides) and
/// the op is elementwise (`in_place`).
pub(crate) fn clobbers(out: &ArrayView, input: &ArrayView, in_place: bool) -> bool {
    let (a, b) = (bytes_spanned(out), bytes_spanned(input));
    let overlap = a.0 < b.1 && b.0 < a.1;
    let same = out.ptr() == input.ptr()
        && out.shape() == input.shape()
        && out.strides() == input.strides()
        && out.dtype().itemsize() == input.dtype().itemsize();
    overlap && !(same && in_place)
}

/// `[first byte, past the last byte)` of the memory `v`'s elements lie in (empty for an
/// empty array).
fn bytes_spanned(v: &ArrayView) -> (u64, u64) {
    if v.is_empty() {
        return (0, 0);
    }
    let (mut lo, mut hi) = (v.ptr() as i128, v.ptr() as i128);
    for (&n, &s) in v.shape().iter().zip(v.strides()) {
        let reach = (n as i128 - 1) * s as i128;
        if reach < 0 {
            lo += reach;
        } else {
            hi += reach;
        }
    }
    (lo.max(0) as u64, (hi + v.dtype().itemsize() as i128).max(0) as u64)
}

fn is_real(d: DType) -> bool {
    !matches!(d, DType::C64 | DType::C128)
}

/// Refuses complex dtypes (the kernels named by `what` are written for real types).
pub(crate) fn real(what: &str, d: DType) -> Result<()> {
    if !is_real(d) {
        return Err(Error::argument(format!("{what}: {d} is not supported (real types only)")));
    }
    Ok(())
}

/// What an op whose registry entry says `policy` does with input `v`: reads it as it is
/// (`false`), reads a C-ordered copy (`true`), or refuses it.
pub(crate) fn copies(policy: Strided, what: &str, v: &ArrayView) -> Result<bool> {
    match (policy, v.is_c_contiguous()) {
        (_, true) | (Strided::Any, false) => Ok(false),
        (Strided::Copy, false) => Ok(true),
        (Strided::Refuse, false) => {
            Err(Error::argument(format!("{what}: needs C-contiguous arrays (make them so with ops::ascontiguous)")))
        }
    }
}

/// `axpy`: `x` and `y` of one shape and dtype; the result is like them.
pub(crate) fn axpy(x: &ArrayView, y: &ArrayView) -> Result<Planned> {
    if x.shape() != y.shape() || x.dtype() != y.dtype() {
        return Err(Error::argument(format!(
            "axpy: arrays must match, got {} {:?} and {} {:?}",
            x.dtype(),
            x.shape(),
            y.dtype(),
            y.shape()
        )));
    }
    Ok(Planned::like(x))
}

/// `cast`: real types both sides; the result has `x`'s shape and dtype `to`.
pub(crate) fn cast(x: &ArrayView, to: DType) -> Result<Planned> {
    real("cast", x.dtype())?;
    real("cast", to)?;
    Ok(Planned::exact(x.shape(), to))
}

/// A unary op of the registry: defined for `x`'s dtype; the result is like `x`.
pub(crate) fn unary(op: &UnaryOp, x: &ArrayView) -> Result<Planned> {
    if !(op.supports)(x.dtype()) {
        let names: Vec<&str> = op.dtypes().map(|d| d.name()).collect();
        return Err(Error::argument(format!("{}: {} is not supported (supported: {})", op.name, x.dtype(), names.join(", "))));
    }
    Ok(Planned::like(x))
}

/// NumPy's broadcast shape of `a` and `b`, or `None` when they do not broadcast.
pub fn broadcast_shape(a: &[usize], b: &[usize]) -> Option<Vec<usize>> {
    let rank = a.len().max(b.len());
    let dim = |s: &[usize], k: usize| if k < rank - s.len() { 1 } else { s[k - (rank - s.len())] };
    (0..rank)
        .map(|k| match (dim(a, k), dim(b, k)) {
            (1, n) | (n, 1) => Some(n),
            (m, n) if m == n => Some(m),
            _ => None,
        })
        .collect()
}

/// A binary operation: one real dtype (no promotion: mixed operands are refused, never
/// silently converted); the result has the broadcast shape (NumPy's rule).
pub(crate) fn binary(op: BinaryOp, a: &ArrayView, b: &ArrayView) -> Result<Planned> {
    let what = op.name();
    if a.dtype() != b.dtype() {
        return Err(Error::argument(format!("{what}: operands are {} and {}; cast one first", a.dtype(), b.dtype())));
    }
    real(what, a.dtype())?;
    let shape = broadcast_shape(a.shape(), b.shape())
        .ok_or_else(|| Error::argument(format!("{what}: shape mismatch: shapes {:?} and {:?} do not broadcast", a.shape(), b.shape())))?;
    Ok(Planned::exact(&shape, a.dtype()))
}

/// `transpose`: a 2-D `x`; the result is `x`'s transpose.
pub(crate) fn transpose(x: &ArrayView) -> Result<Planned> {
    let [rows, cols] = *x.shape() else {
        return Err(Error::argument(format!("transpose: expected a 2-D array, got {}-d", x.ndim())));
    };
    Ok(Planned::exact(&[cols, rows], x.dtype()))
}

/// `softmax`: a floating `x`; the result is like `x`.
pub(crate) fn softmax(x: &ArrayView) -> Result<Planned> {
    if !matches!(x.dtype(), DType::F16 | DType::BF16 | DType::F32 | DType::F64) {
        return Err(Error::argument(format!("softmax: {} is not a floating type", x.dtype())));
    }
    Ok(Planned::like(x))
}

/// NumPy's result dtype of a reduction over `d`: integer sums in 64 bits, of the operand's
/// signedness; everything else keeps its dtype.
pub fn reduction_dtype(r: Reduction, d: DType) -> DType {
    match d {
        DType::I8 | DType::I16 | DType::I32 | DType::I64 if r == Reduction::Sum => DType::I64,
        DType::U8 | DType::U16 | DType::U32 | DType::U64 if r == Reduction::Sum => DType::U64,
        other => other,
    }
}

/// The accumulator of a reduction over `d`: NumPy's result dtype, but float for 16-bit floats.
pub(crate) fn accumulator(r: Reduction, d: DType) -> DType {
    match d {
        DType::F16 | DType::BF16 => DType::F32,
        other => reduction_dtype(r, other),
    }
}

/// A reduction: a non-empty `x` of a real dtype other than bool; the result has NumPy's
/// dtype and `x`'s shape without the reduced axes, and a given `out` may be of any real
/// dtype (the reduction converts into it).
pub(crate) fn reduce(r: Reduction, x: &ArrayView, axis: Axis) -> Result<Planned> {
    let what = r.name();
    if matches!(x.dtype(), DType::Bool | DType::C64 | DType::C128) {
        return Err(Error::argument(format!("{what}: {} is not supported", x.dtype())));
    }
    if x.is_empty() {
        return Err(Error::argument(format!("{what}: the array is empty")));
    }
    let dtype = reduction_dtype(r, x.dtype());
    match axis {
        Axis::All => Ok(Planned { shape: Shape::new(), dtype, fit: Fit::OneElement }),
        Axis::Last => match x.shape().split_last() {
            Some((_, lead)) => Ok(Planned { shape: lead.into(), dtype, fit: Fit::AnyReal }),
            None => Err(Error::argument(format!("{what} over the last axis: x is 0-d"))),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(shape: &[usize], dtype: DType) -> ArrayView {
        ArrayView::contiguous(0x1000, shape, dtype, false).unwrap()
    }

    fn err(r: Result<Planned>) -> String {
        r.unwrap_err().to_string()
    }

    #[test]
    fn broadcast_shapes_follow_numpy() {
        assert_eq!(broadcast_shape(&[3, 1, 5], &[4, 1]), Some(vec![3, 4, 5]));
        assert_eq!(broadcast_shape(&[], &[2, 3]), Some(vec![2, 3]));
        assert_eq!(broadcast_shape(&[1], &[0]), Some(vec![0]));
        assert_eq!(broadcast_shape(&[2, 3], &[3, 2]), None);
        assert_eq!(broadcast_shape(&[], &[]), Some(vec![]));
    }

    #[test]
    fn binary_results_broadcast_and_never_promote() {
        let p = binary(BinaryOp::Add, &view(&[64, 1, 33], DType::F16), &view(&[5, 33], DType::F16)).unwrap();
        assert_eq!(p, Planned::exact(&[64, 5, 33], DType::F16));
        let e = err(binary(BinaryOp::Add, &view(&[3, 4], DType::F32), &view(&[4], DType::I32)));
        assert!(e.contains("add: operands are float32 and int32; cast one first"), "{e}");
        let e = err(binary(BinaryOp::Maximum, &view(&[3, 4], DType::F32), &view(&[3], DType::F32)));
        assert!(e.contains("maximum: shape mismatch: shapes [3, 4] and [3] do not broadcast"), "{e}");
        let e = err(binary(BinaryOp::Add, &view(&[2], DType::C64), &view(&[2], DType::C64)));
        assert!(e.contains("add: complex64 is not supported"), "{e}");
    }

    #[test]
    fn reductions_have_numpys_result_dtypes_and_shapes() {
        use Reduction::{Max, Sum};
        let cases = [
            (Sum, DType::I8, DType::I64),
            (Sum, DType::I32, DType::I64),
            (Sum, DType::U16, DType::U64),
            (Sum, DType::F16, DType::F16),
            (Sum, DType::BF16, DType::BF16),
            (Sum, DType::F32, DType::F32),
            (Max, DType::I32, DType::I32),
            (Max, DType::U8, DType::U8),
        ];
        for (r, d, want) in cases {
            let p = reduce(r, &view(&[3, 5], d), Axis::All).unwrap();
            assert_eq!((p.shape.as_slice(), p.dtype, p.fit), (&[][..], want, Fit::OneElement), "{r:?} {d}");
            let p = reduce(r, &view(&[3, 5], d), Axis::Last).unwrap();
            assert_eq!((p.shape.as_slice(), p.dtype, p.fit), (&[3][..], want, Fit::AnyReal), "{r:?} {d}");
        }
        assert_eq!(accumulator(Sum, DType::F16), DType::F32);
        assert_eq!(accumulator(Max, DType::BF16), DType::F32);
        assert_eq!(accumulator(Sum, DType::U8), DType::U64);
        assert!(err(reduce(Sum, &view(&[0], DType::F32), Axis::All)).contains("sum: the array is empty"));
        assert!(err(reduce(Max, &view(&[3], DType::Bool), Axis::All)).contains("max: bool is not supported"));
        assert!(err(reduce(Sum, &view(&[], DType::F32), Axis::Last)).contains("x is 0-d"));
    }

    #[test]
    fn other_ops_results() {
        assert_eq!(transpose(&view(&[3, 7], DType::I16)).unwrap(), Planned::exact(&[7, 3], DType::I16));
        assert!(err(transpose(&view(&[4], DType::I32))).contains("transpose: expected a 2-D array, got 1-d"));
        assert_eq!(cast(&view(&[2, 2], DType::F32), DType::BF16).unwrap(), Planned::exact(&[2, 2], DType::BF16));
        assert!(err(cast(&view(&[2], DType::F32), DType::C64)).contains("cast: complex64 is not supported (real types only)"));
        assert!(err(softmax(&view(&[2], DType::I32))).contains("softmax: int32 is not a floating type"));
        let e = err(axpy(&view(&[2, 3], DType::F32), &view(&[3, 2], DType::F32)));
        assert!(e.contains("axpy: arrays must match"), "{e}");
        let abs = &super::super::UNARY_OPS[0];
        assert!(err(unary(abs, &view(&[2], DType::Bool))).contains("abs: bool is not supported (supported: int8"));
        assert_eq!(unary(abs, &view(&[2], DType::F64)).unwrap(), Planned::exact(&[2], DType::F64));
    }

    #[test]
    fn strided_inputs_are_taken_as_the_policy_says() {
        let c = view(&[3, 4], DType::F32);
        let t = ArrayView::new(0x1000, &[4, 3], Some(&[4, 16]), DType::F32, false, None).unwrap();
        let zero = ArrayView::new(0x1000, &[3, 4], Some(&[0, 4]), DType::F32, true, None).unwrap();
        for policy in [Strided::Any, Strided::Copy, Strided::Refuse] {
            assert!(!copies(policy, "op", &c).unwrap(), "{policy:?}: C order is read as it is");
        }
        for v in [&t, &zero] {
            assert!(!copies(Strided::Any, "add", v).unwrap());
            assert!(copies(Strided::Copy, "abs", v).unwrap());
            let e = copies(Strided::Refuse, "fill", v).unwrap_err().to_string();
            assert!(e.contains("fill: needs C-contiguous arrays"), "{e}");
        }
    }

    #[test]
    fn an_out_clobbers_an_input_it_overlaps_unless_written_in_place_elementwise() {
        let v = |ptr: u64, shape: &[usize], strides: &[i64]| ArrayView::new(ptr, shape, Some(strides), DType::F32, false, None).unwrap();
        let a = v(0x10000, &[8], &[4]);
        assert!(!clobbers(&a, &a, true), "the same array, elementwise: in place");
        assert!(clobbers(&a, &a, false), "the same array, a transpose or reduction: through a temporary");
        assert!(clobbers(&v(0x10000, &[7], &[4]), &v(0x10004, &[7], &[4]), true), "shifted by one element");
        assert!(!clobbers(&v(0x10000, &[4], &[4]), &v(0x10010, &[4], &[4]), true), "adjacent, no overlap");
        assert!(clobbers(&v(0x10000, &[4, 4], &[16, 4]), &v(0x10000, &[4, 4], &[4, 16]), true), "its own transpose");
        assert!(clobbers(&v(0x1000c, &[4], &[-4]), &v(0x10000, &[1], &[4]), true), "a reversed view reaches back");
        assert!(!clobbers(&v(0x10000, &[0], &[4]), &a, false), "an empty out writes nothing");
    }

    #[test]
    fn distinct_elements_are_what_an_op_may_write() {
        let v = |shape: &[usize], strides: &[i64]| ArrayView::new(0x10000, shape, Some(strides), DType::F32, false, None).unwrap();
        assert!(distinct_elements(&view(&[3, 4], DType::F32)));
        assert!(distinct_elements(&v(&[4, 3], &[4, 16]))); // a transpose
        assert!(distinct_elements(&v(&[3, 2], &[-32, 8]))); // reversed rows, every other column
        assert!(distinct_elements(&v(&[1, 5], &[0, 4]))); // a zero stride on a unit axis
        assert!(!distinct_elements(&v(&[3, 4], &[0, 4]))); // broadcast
        assert!(!distinct_elements(&v(&[2, 3], &[4, 4]))); // overlapping rows
        assert!(!distinct_elements(&v(&[2], &[2]))); // 4-byte elements 2 bytes apart
        assert!(distinct_elements(&view(&[0, 3], DType::F32)));
    }

    #[test]
    fn a_given_out_must_fit_the_result() {
        let exact = Planned::exact(&[3, 4], DType::F32);
        exact.check_out("add", &view(&[3, 4], DType::F32)).unwrap();
        let e = exact.check_out("add", &view(&[4, 4], DType::F32)).unwrap_err().to_string();
        assert!(e.contains("add: out must be a float32 array of shape [3, 4], got float32 [4, 4]"), "{e}");
        // Strided outs are written (through a temporary), unless elements share memory.
        let t = ArrayView::new(0x1000, &[3, 4], Some(&[4, 12]), DType::F32, false, None).unwrap();
        exact.check_out("add", &t).unwrap();
        let b = ArrayView::new(0x1000, &[3, 4], Some(&[0, 4]), DType::F32, false, None).unwrap();
        let e = exact.check_out("add", &b).unwrap_err().to_string();
        assert!(e.contains("add: out has elements that share memory (shape [3, 4], byte strides [0, 4])"), "{e}");
        // Reductions convert into any real dtype; whole-array ones into any one element.
        let rows = reduce(Reduction::Sum, &view(&[3, 4], DType::I32), Axis::Last).unwrap();
        rows.check_out("sum", &view(&[3], DType::F16)).unwrap();
        assert!(rows.check_out("sum", &view(&[3], DType::C64)).is_err());
        assert!(rows.check_out("sum", &view(&[4], DType::I64)).is_err());
        let all = reduce(Reduction::Max, &view(&[3, 4], DType::F32), Axis::All).unwrap();
        all.check_out("max", &view(&[1, 1], DType::F64)).unwrap();
        let e = all.check_out("max", &view(&[2], DType::F32)).unwrap_err().to_string();
        assert!(e.contains("max: out must be one element of a real dtype, got float32 [2]"), "{e}");
    }
}
