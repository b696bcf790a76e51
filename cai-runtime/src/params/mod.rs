//! Parameter marshalling: launch arguments ([`Arg`], [`Num`]) checked against a kernel's
//! compiled parameter list and written into its parameter buffer, and the encodings that
//! share those rules ([`encode_scalar`], [`ParamBytes`]).
//!
//! Every check that names a parameter lives here, so that a launch on CAI arrays
//! ([`crate::kernel::Kernel::launch`]) and a JAX launch prepared over XLA buffers
//! ([`crate::xla::prepare`]) refuse the same arguments with the same words.

use crate::cai::{ArrayView, DType};
use crate::error::{Error, Result};
use crate::signature::{array_param_size, ArgType, ArrayLayout, ParamKind, ParamLayout, SignatureError};

pub(crate) use buffer::ParamBuffer;
pub use bytes::{KernelStruct, ParamBytes};
pub use scalar::{encode_scalar, Num, ScalarBytes};

mod buffer;
mod bytes;
mod scalar;

/// The Rust mirror of `caijit::Array<T, N>` (`kernels/include/caijit/array.cuh`):
/// a data pointer, `N` extents and `N` byte strides, all 64-bit.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArrayParam<const N: usize> {
    pub data: u64,
    pub shape: [i64; N],
    pub strides: [i64; N],
}

const _: () = {
    use std::mem::{align_of, offset_of, size_of};
    assert!(size_of::<ArrayParam<0>>() == array_param_size(0));
    assert!(size_of::<ArrayParam<1>>() == array_param_size(1));
    assert!(size_of::<ArrayParam<3>>() == array_param_size(3));
    assert!(size_of::<ArrayParam<8>>() == array_param_size(8));
    assert!(align_of::<ArrayParam<2>>() == ArrayLayout::ALIGN);
    assert!(offset_of!(ArrayParam<3>, data) == ArrayLayout::DATA);
    assert!(offset_of!(ArrayParam<3>, shape) == ArrayLayout::extent(0));
    assert!(offset_of!(ArrayParam<3>, strides) == ArrayLayout::stride(3, 0));
};

/// A launch argument.
#[derive(Clone, Copy, Debug)]
pub enum Arg<'a> {
    /// A CAI array (any producer); its device is read from its pointer at launch.
    Array(&'a ArrayView),
    /// A CAI array whose device the caller already knows (caijit's own arrays, or a
    /// producer's array object that says so): no pointer query at launch.
    ArrayOn(&'a ArrayView, usize),
    /// A scalar; `dtype` is its own type when it has one (NumPy scalars), for deduction.
    Scalar { value: Num, dtype: Option<DType> },
    /// The bytes of a struct parameter.
    Bytes(&'a [u8]),
    /// A raw device pointer (only for pointer parameters).
    Pointer(u64),
    /// A scalar named as an input of a graph being captured ([`crate::graph`]): rebound by
    /// its name at each replay. Anywhere else, the scalar it holds. (By reference: a launch's
    /// arguments stay as small as a scalar's.)
    ScalarInput(&'a NamedScalar),
}

/// A scalar named as an input of the graph captured with id `capture`
/// ([`crate::graph::Capture::scalar`]); pass [`NamedScalar::arg`] where the scalar goes.
#[derive(Clone, Debug, PartialEq)]
pub struct NamedScalar {
    pub name: String,
    pub capture: u64,
    pub value: Num,
    pub dtype: Option<DType>,
}

impl NamedScalar {
    /// The launch argument.
    pub fn arg(&self) -> Arg<'_> {
        Arg::ScalarInput(self)
    }
}

impl Arg<'_> {
    /// A typed scalar: its Rust type is its C++ type for deduction and overloads
    /// (`Arg::scalar(2.0f32)` deduces `float`), and it is converted exactly to the
    /// parameter's type (out of range is an error), as a NumPy scalar is.
    pub fn scalar<T: crate::cai::Element + Into<Num>>(value: T) -> Self {
        Arg::Scalar { value: value.into(), dtype: Some(T::DTYPE) }
    }

    /// An untyped scalar, as a Python `int`, `float` or `bool` is: converted exactly to
    /// the parameter's type (out of range is an error), it deduces nothing.
    pub fn untyped(value: impl Into<Num>) -> Self {
        Arg::Scalar { value: value.into(), dtype: None }
    }

    /// What template deduction sees of this argument.
    pub fn arg_type(&self) -> ArgType {
        match self.unnamed() {
            Arg::Array(v) | Arg::ArrayOn(v, _) => ArgType::Array { dtype: v.dtype(), rank: v.ndim() },
            Arg::Scalar { dtype: Some(d), .. } => ArgType::TypedScalar(d),
            Arg::Scalar { dtype: None, .. } => ArgType::UntypedScalar,
            Arg::Bytes(_) | Arg::Pointer(_) | Arg::ScalarInput(_) => ArgType::Opaque,
        }
    }

    /// The argument as a launch sees it: a named graph input's scalar, an array of known
    /// device as the array (its device is the dispatcher's business, not a parameter's).
    #[inline]
    pub(crate) fn unnamed(&self) -> Arg<'_> {
        match *self {
            Arg::ArrayOn(v, _) => Arg::Array(v),
            Arg::ScalarInput(s) => Arg::Scalar { value: s.value, dtype: s.dtype },
            other => other,
        }
    }
}

/// An error about parameter `p`, carrying its index, name and C++ type.
pub(crate) fn param_error(p: &ParamLayout, what: impl std::fmt::Display) -> Error {
    Error::argument_at(p.index, p.name.as_deref(), &p.cpp_type, what)
}

/// The kernel named `kernel()` (asked only for the error) takes exactly `params` arguments;
/// `got` were given.
#[inline]
pub(crate) fn check_count<'k>(kernel: impl FnOnce() -> &'k str, params: usize, got: usize) -> Result<()> {
    if params == got {
        return Ok(());
    }
    Err(SignatureError::ArgumentCount { kernel: kernel().into(), expected: params, got }.into())
}

/// An argument that cannot fill parameter `p` at all (`got` says what it is).
pub(crate) fn mismatch(p: &ParamLayout, got: impl std::fmt::Display) -> Error {
    param_error(p, format!("expected {}, got {got}", p.kind.describe()))
}

/// An array as the parameter checks see it: a CAI view at a launch, an XLA buffer when a
/// JAX launch is prepared.
pub(crate) struct ArrayArg<'a> {
    /// What errors call it: `"array"`, `"buffer"`.
    pub noun: &'static str,
    pub dtype: DType,
    pub shape: &'a [usize],
    /// Why it must not be written, when it must not (the whole error's text): then a
    /// non-const parameter is refused.
    pub immutable: Option<&'a str>,
}

/// Check array `a` against pointer or `caijit::Array` parameter `p`: the parameter's element
/// type (when it has one), that an immutable array meets only const parameters, and a
/// `caijit::Array<T, N>`'s rank. Any other parameter kind is a [`mismatch`].
#[inline]
pub(crate) fn check_array(p: &ParamLayout, a: &ArrayArg<'_>) -> Result<()> {
    let (dtype, is_const, rank) = match p.kind {
        ParamKind::Pointer { dtype, is_const } => (dtype, is_const, None),
        ParamKind::Array { dtype, is_const, rank } => (dtype, is_const, Some(rank)),
        ParamKind::Scalar(_) | ParamKind::Struct { .. } => {
            return Err(mismatch(p, format_args!("a {}-d {} of {}", a.shape.len(), a.noun, a.dtype)))
        }
    };
    if let Some(d) = dtype.filter(|&d| d != a.dtype) {
        let an = if a.noun.starts_with(['a', 'e', 'i', 'o', 'u']) { "an" } else { "a" };
        return Err(param_error(p, format!("expected {an} {} of {} ({}), got {}", a.noun, d.name(), d.cpp_name(), a.dtype.name())));
    }
    if let Some(why) = a.immutable.filter(|_| !is_const) {
        return Err(param_error(p, why));
    }
    match rank {
        Some(rank) if rank != a.shape.len() => {
            Err(param_error(p, format!("expected a {rank}-d {}, got {}-d (shape {:?})", a.noun, a.shape.len(), a.shape)))
        }
        _ => Ok(()),
    }
}

/// Elements must sit at multiples of their size: a misaligned access faults the kernel,
/// and a fault kills the context for every library in the process. A pointer to a CUDA
/// vector type (`float4*`, say) needs that type's alignment too.
/// `vector` is the alignment `p`'s pointee needs (`pointee_alignment`, computed once at the
/// kernel's load: [`crate::kernel::Kernel`] keeps it).
#[inline]
fn check_aligned(p: &ParamLayout, v: &ArrayView, vector: usize) -> Result<()> {
    if v.is_itemsize_aligned() && crate::cai::is_multiple_of(v.ptr().into(), vector as u64) {
        return Ok(());
    }
    misaligned(p, v, vector)
}

/// The error of a misaligned array (the rare path, kept out of the launch's code).
#[cold]
fn misaligned(p: &ParamLayout, v: &ArrayView, vector: usize) -> Result<()> {
    if vector > 1 {
        return Err(param_error(
            p,
            format!("the pointer {:#x} is not aligned to the {vector} bytes of the parameter's vector type", v.ptr()),
        ));
    }
    Err(param_error(
        p,
        format!(
            "the array is not aligned to its {}-byte elements (pointer {:#x}, byte strides {:?})",
            v.dtype().itemsize(),
            v.ptr(),
            v.strides()
        ),
    ))
}

/// What a readonly CAI array meets at a non-const parameter.
const READONLY: &str = "the array is readonly but the parameter is not const; declare it `const T*` / `caijit::Array<const T, N>`";

/// `value` converted exactly to scalar parameter `p` of type `d`, written at its offset.
#[inline]
fn write_scalar(p: &ParamLayout, d: DType, value: Num, buf: &mut ParamBuffer) -> Result<()> {
    let bytes = encode_scalar(value, d).map_err(|e| param_error(p, e))?;
    buf.write(p.offset, &bytes);
    Ok(())
}

/// Lay out `args` for `params` (as many of each: [`check_count`] first): every check that
/// names a parameter happens here. `vector[i]` is the alignment `params[i]`'s pointee needs
/// (`pointee_alignment`, kept by [`crate::kernel::Kernel`]).
pub(crate) fn marshal(params: &[ParamLayout], vector: &[usize], args: &[Arg<'_>], buf: &mut ParamBuffer) -> Result<()> {
    for ((p, a), &vector) in params.iter().zip(args).zip(vector) {
        marshal_one(p, vector, a, buf)?;
    }
    Ok(())
}

/// Check `a` against parameter `p` (whose pointee needs `vector`-byte alignment) and write
/// it at `p`'s offset: one argument of [`marshal`], also what a graph's rebinding writes.
#[inline(always)]
pub(crate) fn marshal_one(p: &ParamLayout, vector: usize, a: &Arg<'_>, buf: &mut ParamBuffer) -> Result<()> {
    match (&p.kind, a) {
        (ParamKind::Pointer { .. } | ParamKind::Array { .. }, Arg::Array(v) | Arg::ArrayOn(v, _)) => {
            let immutable = v.readonly().then_some(READONLY);
            check_array(p, &ArrayArg { noun: "array", dtype: v.dtype(), shape: v.shape(), immutable })?;
            if matches!(p.kind, ParamKind::Pointer { .. }) && !v.is_c_contiguous() {
                return Err(param_error(p, format!(
                    "a pointer parameter needs a C-contiguous array; this one has shape {:?} and byte strides {:?} (declare the parameter caijit::Array<T, {}> to accept strided views)",
                    v.shape(), v.strides(), v.ndim()
                )));
            }
            check_aligned(p, v, vector)?;
            match p.kind.rank() {
                Some(rank) => buf.write_array(p.offset, v.ptr(), rank, v.shape().iter().zip(v.strides()).map(|(&n, &s)| (n as i64, s))),
                None => buf.write(p.offset, &v.ptr().to_le_bytes()),
            }
        }
        (ParamKind::Pointer { .. }, Arg::Pointer(ptr)) => buf.write(p.offset, &ptr.to_le_bytes()),
        // A plain integer for a pointer parameter is a raw device address.
        (ParamKind::Pointer { .. }, Arg::Scalar { value: Num::Int(i), dtype: None }) => {
            let ptr = u64::try_from(*i).map_err(|_| param_error(p, format!("{i} is not a device address")))?;
            buf.write(p.offset, &ptr.to_le_bytes());
        }
        (ParamKind::Scalar(d), Arg::Scalar { value, .. }) => write_scalar(p, *d, *value, buf)?,
        (ParamKind::Scalar(d), Arg::ScalarInput(s)) => write_scalar(p, *d, s.value, buf)?,
        (ParamKind::Struct { .. }, Arg::Bytes(b)) => {
            if b.len() != p.size {
                return Err(param_error(p, format!("expected {} bytes for the struct, got {}", p.size, b.len())));
            }
            buf.write(p.offset, b);
        }
        // Every other pairing is a mismatch (each kind named: a new one is placed here too).
        (ParamKind::Pointer { .. } | ParamKind::Array { .. } | ParamKind::Scalar(_) | ParamKind::Struct { .. }, other) => {
            let got = match other {
                Arg::Array(v) | Arg::ArrayOn(v, _) => format!("a {}-d array of {}", v.ndim(), v.dtype()),
                Arg::Scalar { .. } | Arg::ScalarInput(_) => "a scalar".into(),
                Arg::Bytes(b) => format!("{} bytes", b.len()),
                Arg::Pointer(_) => "a raw pointer (int)".into(),
            };
            return Err(mismatch(p, got));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn param(index: usize, cpp_type: &str, kind: ParamKind, size: usize, offset: usize) -> ParamLayout {
        ParamLayout { index, name: Some(format!("p{index}")), cpp_type: cpp_type.into(), kind, size, align: size.min(8), offset }
    }

    /// `(const float* x, caijit::Array<float, 2> a, int n)`, laid out as NVRTC would.
    fn params() -> Vec<ParamLayout> {
        vec![
            param(0, "const float*", ParamKind::Pointer { dtype: Some(DType::F32), is_const: true }, 8, 0),
            param(1, "caijit::Array<float, 2>", ParamKind::Array { dtype: Some(DType::F32), is_const: false, rank: 2 }, 40, 8),
            param(2, "int", ParamKind::Scalar(DType::I32), 4, 48),
        ]
    }

    fn marshalled(args: &[Arg<'_>]) -> Result<Vec<u8>> {
        let params = params();
        let mut buf = ParamBuffer::new(52);
        marshal(&params, &[1, 1, 1], args, &mut buf)?;
        Ok(buf.bytes()[..52].to_vec())
    }

    #[test]
    fn arguments_are_written_at_their_parameters_offsets() {
        let x = ArrayView::contiguous(0x1000, &[4], DType::F32, true).unwrap();
        let a = ArrayView::contiguous(0x2000, &[2, 3], DType::F32, false).unwrap();
        let bytes = marshalled(&[Arg::Array(&x), Arg::ArrayOn(&a, 0), Arg::untyped(-7)]).unwrap();
        let word = |at: usize| i64::from_le_bytes(bytes[at..at + 8].try_into().unwrap());
        assert_eq!(word(0), 0x1000);
        // caijit::Array<float, 2>: pointer, extents, byte strides.
        assert_eq!([word(8), word(16), word(24), word(32), word(40)], [0x2000, 2, 3, 12, 4]);
        assert_eq!(bytes[48..52], (-7i32).to_le_bytes());
    }

    #[test]
    fn each_refusal_names_the_parameter_and_what_was_wrong() {
        let x = ArrayView::contiguous(0x1000, &[4], DType::F32, false).unwrap();
        let a = ArrayView::contiguous(0x2000, &[2, 3], DType::F32, false).unwrap();
        let readonly = ArrayView::contiguous(0x2000, &[2, 3], DType::F32, true).unwrap();
        let ints = ArrayView::contiguous(0x1000, &[4], DType::I32, false).unwrap();
        let flat = ArrayView::contiguous(0x2000, &[6], DType::F32, false).unwrap();
        let refused = |args: &[Arg<'_>]| match marshalled(args).unwrap_err() {
            Error::Argument(e) => (e.index, e.message),
            e => panic!("{e}"),
        };
        let n = Arg::untyped(3);
        assert_eq!(
            refused(&[Arg::Array(&ints), Arg::Array(&a), n]),
            (Some(0), "argument 0 `p0` (`const float*`): expected an array of float32 (float), got int32".into())
        );
        let (i, m) = refused(&[Arg::Array(&x), Arg::Array(&readonly), n]);
        assert_eq!((i, m.ends_with(READONLY)), (Some(1), true), "{m}");
        let (i, m) = refused(&[Arg::Array(&x), Arg::Array(&flat), n]);
        assert_eq!((i, m.ends_with("expected a 2-d array, got 1-d (shape [6])")), (Some(1), true), "{m}");
        let (i, m) = refused(&[Arg::Array(&x), Arg::Array(&a), Arg::untyped(1i64 << 40)]);
        assert_eq!((i, m.contains("out of range for int")), (Some(2), true), "{m}");
        let (i, m) = refused(&[Arg::Array(&x), Arg::Array(&a), Arg::Array(&x)]);
        assert_eq!((i, m.ends_with("expected a scalar converted to int (int32), got a 1-d array of float32")), (Some(2), true), "{m}");
        let misaligned = ArrayView::contiguous(0x1002, &[4], DType::F32, false).unwrap();
        let (i, m) = refused(&[Arg::Array(&misaligned), Arg::Array(&a), n]);
        assert_eq!((i, m.contains("not aligned to its 4-byte elements")), (Some(0), true), "{m}");
    }

    #[test]
    fn a_buffer_meets_the_checks_an_array_meets() {
        let p = &params()[1];
        let buffer = |dtype, shape: &'static [usize], immutable| check_array(p, &ArrayArg { noun: "buffer", dtype, shape, immutable });
        assert!(buffer(DType::F32, &[2, 3], None).is_ok());
        let e = buffer(DType::F64, &[2, 3], None).unwrap_err().to_string();
        assert!(e.ends_with("expected a buffer of float32 (float), got float64"), "{e}");
        let e = buffer(DType::F32, &[6], None).unwrap_err().to_string();
        assert!(e.ends_with("expected a 2-d buffer, got 1-d (shape [6])"), "{e}");
        let e = buffer(DType::F32, &[2, 3], Some("input 0 is immutable")).unwrap_err().to_string();
        assert!(e.ends_with("input 0 is immutable"), "{e}");
        // A const parameter takes an immutable buffer; a scalar parameter takes none.
        assert!(check_array(&params()[0], &ArrayArg { noun: "buffer", dtype: DType::F32, shape: &[4], immutable: Some("no") }).is_ok());
        let e = check_array(&params()[2], &ArrayArg { noun: "buffer", dtype: DType::F32, shape: &[4], immutable: None }).unwrap_err();
        assert!(e.to_string().ends_with("expected a scalar converted to int (int32), got a 1-d buffer of float32"), "{e}");
    }

    #[test]
    fn the_argument_count_is_checked_first_by_every_launch() {
        assert!(check_count(|| "k", 3, 3).is_ok());
        assert_eq!(check_count(|| "k", 3, 2).unwrap_err().to_string(), "kernel `k` takes 3 arguments, got 2");
    }
}
